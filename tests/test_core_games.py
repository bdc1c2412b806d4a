import itertools

import pytest
import torch

from lengthgen_lite.core.games import EMPTY, TicTacToe, winning_lines
from lengthgen_lite.core.seeding import make_generator


def brute_force_winner(board, n, k):
    """Scan every cell and direction by hand: the reference for the vectorised win
    check."""
    grid = [[int(board[r * n + c]) for c in range(n)] for r in range(n)]
    for r, c in itertools.product(range(n), repeat=2):
        for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
            cells = [(r + i * dr, c + i * dc) for i in range(k)]
            if all(0 <= rr < n and 0 <= cc < n for rr, cc in cells):
                owners = {grid[rr][cc] for rr, cc in cells}
                if len(owners) == 1 and EMPTY not in owners:
                    return owners.pop()
    return None


def brute_force_legal(moves, n, k):
    board = [EMPTY] * (n * n)
    for t, cell in enumerate(moves):
        board[cell] = t % 2
    if brute_force_winner(board, n, k) is not None or EMPTY not in board:
        return {n * n}
    return {i for i, b in enumerate(board) if b == EMPTY}


def test_winning_lines_count():
    assert winning_lines(3, 3).shape == (8, 9)  # 3 rows, 3 columns, 2 diagonals
    assert winning_lines(4, 4).shape == (10, 16)
    # 8 + 8 horizontal/vertical, 4 + 4 diagonal
    assert winning_lines(4, 3).shape == (24, 16)
    assert (winning_lines(4, 3).sum(-1) == 3).all()


# Hand-written positions on a 3 x 3 board (cells 0..8 row by row), first player moves on
# even turns.
HAND = [
    ([], set(range(9))),
    ([4], set(range(9)) - {4}),
    ([0, 3, 1, 4, 2], {9}),  # first player owns the top row
    ([0, 1, 3, 4, 8, 7], {9}),  # second player owns the middle column
    ([2, 0, 4, 1, 6], {9}),  # anti-diagonal
    ([0, 4, 8, 2, 6, 3, 5, 7, 1], {9}),  # full board, nobody won (draw)
    ([0, 4, 8, 2, 6, 3, 5], {1, 7}),  # still running
]


@pytest.mark.parametrize("moves, legal", HAND)
def test_legal_moves_on_hand_written_positions(moves, legal):
    game = TicTacToe(n=3, k=3, train_length=4)
    assert game.legal_moves(moves) == legal == brute_force_legal(moves, 3, 3)


@pytest.mark.parametrize("n, k", [(3, 3), (4, 3), (4, 4)])
def test_generated_targets_match_the_brute_force_rules(n, k):
    game = TicTacToe(n=n, k=k, train_length=2)
    batch = game.sample_train_batch(200, n * n, make_generator(0))
    assert batch.inputs.shape == (200, n * n) and batch.targets.shape == (
        200,
        n * n,
        n * n + 1,
    )
    torch.testing.assert_close(batch.targets.sum(-1), torch.ones(200, n * n))
    for moves, inputs, targets, mask in zip(
        game.moves_of(batch.inputs, batch.loss_mask),
        batch.inputs,
        batch.targets,
        batch.loss_mask,
    ):
        assert len(set(moves)) == len(moves)  # legal play: no cell twice
        assert (inputs[~mask] == game.pad).all() and mask[: len(moves)].all()
        for t in range(len(moves)):
            legal = {int(i) for i in torch.nonzero(targets[t]).flatten()}
            assert legal == brute_force_legal(moves[: t + 1], n, k)
            assert int(inputs[t]) // (n * n) == t % 2  # the token names the mover
        # a game ends exactly when the rules say so
        assert brute_force_legal(moves, n, k) == {n * n} or len(moves) == n * n


def test_batched_sampling_equals_one_generator_at_a_time():
    game = TicTacToe()
    both = game.sample_train_batches(8, 6, [make_generator(1), make_generator(2)])
    one = game.sample_train_batch(8, 6, make_generator(2))
    assert torch.equal(both.inputs[1], one.inputs) and torch.equal(
        both.targets[1], one.targets
    )


def test_first_moves_are_uniform_over_the_board():
    game = TicTacToe(n=3, k=3)
    first = game.sample_train_batch(9000, 1, make_generator(0)).inputs[:, 0]
    counts = torch.bincount(first, minlength=9).float()
    assert (counts - 1000).abs().max() < 150  # ~5 binomial standard deviations


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(n=1), "n must be an integer between 2 and 8"),
        (dict(n=3, k=4), "k must be an integer between 2 and 3"),
        (
            dict(n=3, k=3, train_length=10),
            "train_length must be an integer between 1 and 9",
        ),
        (dict(n=3.0), "n must be an integer"),
    ],
)
def test_bad_game_parameters_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TicTacToe(**kwargs)


def test_bad_sampling_and_positions_raise():
    game = TicTacToe(n=3, k=3)
    with pytest.raises(ValueError, match="size must be an integer between 1 and 9"):
        game.sample_train_batch(4, 10, make_generator(0))
    with pytest.raises(ValueError, match="batch must be an integer >= 1"):
        game.sample_train_batch(0, 3, make_generator(0))
    with pytest.raises(ValueError, match="generators must hold"):
        game.sample_train_batches(4, 3, [])
    with pytest.raises(ValueError, match="cell 0 is played twice"):
        game.legal_moves([0, 0])
    with pytest.raises(ValueError, match="continue a game that ended"):
        game.legal_moves([0, 3, 1, 4, 2, 5])
    with pytest.raises(ValueError, match="cell must be an integer between 0 and 8"):
        game.legal_moves([9])
    with pytest.raises(ValueError, match="noise must be"):
        game.play(torch.rand(2, 3, 4))
