"""A small board game whose next-token target is the set of legal moves. Chapter 7.

Tic-Tac-Toe on an ``n x n`` board, won by the first player to own ``k`` cells in a row
(a row, column or diagonal window of length ``k``). Games come from random legal play,
as the synthetic OthelloGPT data do (Li et al., 2023): every move is drawn uniformly
from the empty cells. After ``s`` moves the ideal next-token distribution is uniform
over the empty cells while nobody has won and the board is not full, and all on the
``END`` output once the game is over. Exact legal sets give exact soft targets, so TV
and invalid mass are computed as in chapter 1.

Tokens say who moved where, ``player * n^2 + cell`` (player 0 moves first), so that a
win is visible from the tokens without positions; ``PAD`` fills the slots after a game
ended (masked out of the loss). The outputs are the ``n^2`` cells and ``END``: a move
names a cell, and the player to move is implied. While nobody can have won yet, the
legal set is exactly chapter 1's set complement over the cells; the game adds the rule
that a finished game has no legal move.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .tasks import DrawnBatch, NoiseSampler
from .validation import require_int

EMPTY, FIRST, SECOND = -1, 0, 1  # board cell contents; FIRST and SECOND are the players


def winning_lines(n: int, k: int) -> Tensor:
    """Every window of ``k`` cells in a row, column or diagonal of an ``n x n`` board:
    [lines, n^2] bool."""
    require_int("n", n, 2)
    require_int("k", k, 2, n)
    lines = []
    for r, c in itertools.product(range(n), repeat=2):
        for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
            cells = [(r + i * dr, c + i * dc) for i in range(k)]
            if all(0 <= rr < n and 0 <= cc < n for rr, cc in cells):
                line = torch.zeros(n * n, dtype=torch.bool)
                line[[rr * n + cc for rr, cc in cells]] = True
                lines.append(line)
    return torch.stack(lines)


@dataclass(frozen=True)
class TicTacToe(NoiseSampler):
    """Tic-Tac-Toe on ``n x n`` won with ``k`` in a row; trained on games cut after
    ``train_length`` moves.

    The input size of a batch is the number of move slots; a game that ends earlier is
    padded.
    """

    n: int = 4
    k: int = 3
    train_length: int = 6

    def __post_init__(self) -> None:
        require_int("n", self.n, 2, 8)
        require_int("k", self.k, 2, self.n)
        require_int("train_length", self.train_length, 1, self.n * self.n)

    @property
    def cells(self) -> int:
        return self.n * self.n

    @property
    def end(self) -> int:
        """Output index of END (the game is over: no legal move)."""
        return self.cells

    @property
    def pad(self) -> int:
        """Input token after a game ended."""
        return 2 * self.cells

    @property
    def vocab_size(self) -> int:
        return 2 * self.cells + 1  # (player, cell) moves, then PAD

    @property
    def n_outputs(self) -> int:
        return self.cells + 1  # cells, then END

    @property
    def max_length(self) -> int:
        """The longest game: every cell filled."""
        return self.cells

    def _check_size(self, size: int) -> None:
        # games cut after ``size`` moves; test sizes too
        require_int("size", size, 1, self.cells)

    def draw_noise(self, batch: int, size: int, generator: torch.Generator) -> Tensor:
        # [batch, moves, n^2]
        return torch.rand(batch, size, self.cells, generator=generator)

    def drawn_batch(self, noise: Tensor, size: int) -> DrawnBatch:
        """Random games: the random draws per seed, the rules once for all seeds (the
        targets too: they come out of the play)."""
        K, batch = noise.shape[:2]
        inputs, targets, mask = self.play(noise.reshape(-1, size, self.cells))
        return DrawnBatch(
            inputs.view(K, batch, size),
            mask.view(K, batch, size),
            targets.view(K, batch, size, -1),
        )

    def play(self, noise: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Random legal games from uniform noise [batch, moves, n^2] (each move: the
        empty cell of largest noise).

        Returns inputs [batch, moves] long, soft targets [batch, moves, n^2 + 1] and the
        loss mask [batch, moves] (True while the game was still running when the move
        was made).
        """
        if noise.dim() != 3 or noise.shape[-1] != self.cells:
            raise ValueError(
                f"noise must be [batch, moves, n^2={self.cells}], got "
                f"{tuple(noise.shape)}"
            )
        B, T, _ = noise.shape
        lines = winning_lines(self.n, self.k).float()  # [lines, cells]
        board = torch.full((B, self.cells), EMPTY)
        over = torch.zeros(B, dtype=torch.bool)
        inputs = torch.full((B, T), self.pad)
        targets = torch.zeros(B, T, self.n_outputs)
        mask = torch.zeros(B, T, dtype=torch.bool)
        for t in range(T):
            player = t % 2
            cell = noise[:, t].masked_fill(board != EMPTY, -1.0).argmax(-1)  # [B]
            live = ~over
            mask[:, t] = live
            inputs[live, t] = player * self.cells + cell[live]
            board[live, cell[live]] = player
            # [B, lines]: the mover's cells in each line
            owned = (board == player).float() @ lines.T
            over = over | (
                live & ((owned >= self.k).any(-1) | (board != EMPTY).all(-1))
            )
            empty = (board == EMPTY).float()
            targets[:, t, : self.cells] = torch.where(
                over[:, None], 0.0, empty / empty.sum(-1, keepdim=True).clamp_min(1)
            )
            targets[over, t, self.end] = 1.0
        return inputs, targets, mask

    def board_of(self, moves: Sequence[int]) -> Tensor:
        """The board after ``moves`` (cells, players alternating from FIRST): [n^2] with
        EMPTY/FIRST/SECOND."""
        board = torch.full((self.cells,), EMPTY)
        for t, cell in enumerate(moves):
            require_int("cell", cell, 0, self.cells - 1)
            if board[cell] != EMPTY:
                raise ValueError(
                    f"cell {cell} is played twice in moves {list(moves)!r}"
                )
            board[cell] = t % 2
        return board

    def legal_moves(self, moves: Sequence[int]) -> set[int]:
        """The legal next outputs after ``moves``, by the plain rules (one position at a
        time).

        The empty cells while the game runs; ``{END}`` once a player has ``k`` in a row
        or the board is full. Raises ValueError if ``moves`` continues a game that was
        already over.
        """
        for t in range(len(moves)):
            if self.is_over(moves[:t]):
                raise ValueError(
                    f"moves {list(moves)!r} continue a game that ended after {t} moves"
                )
        if self.is_over(moves):
            return {self.end}
        board = self.board_of(moves)
        return {cell for cell in range(self.cells) if board[cell] == EMPTY}

    def is_over(self, moves: Sequence[int]) -> bool:
        """A player owns ``k`` cells in a row, or the board is full."""
        board = self.board_of(moves)
        lines = winning_lines(self.n, self.k)
        won = any(
            bool((board[line] == player).all())
            for line in lines
            for player in (FIRST, SECOND)
        )
        return won or bool((board != EMPTY).all())

    def moves_of(self, inputs: Tensor, mask: Tensor) -> list[list[int]]:
        """The cells played in each game of a batch (inputs [batch, moves], mask [batch,
        moves])."""
        return [
            [int(tok) % self.cells for tok, m in zip(row, mrow) if m]
            for row, mrow in zip(inputs, mask)
        ]
