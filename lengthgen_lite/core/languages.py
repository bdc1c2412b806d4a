"""A formal-language suite whose next-token target is the set of legal continuations.
Chapter 7.

After a prefix ``w`` the ideal next-token distribution is uniform over the *legal next
symbols*: the symbols ``x`` such that ``w x`` is still a prefix of some word of the
language, plus ``EOS`` when ``w`` itself is a word. This is the character-prediction
set-up of Bhattamishra et al. (2020); the languages, the generators and the lengths are
the book's choice (the Post-Norm paper's suite is not published in what we have).

- :class:`Dyck1`: balanced brackets. ``(`` is always legal, ``)`` iff the depth is
  positive, ``EOS`` iff it is zero. The depth is a count over the whole prefix, which a
  causal attention average sees as ``depth / s``: the chapter-2 dispersion in a
  language.
- :class:`AnBn`: ``a^n b^n`` (n >= 1). ``{a, b}`` while reading a's; then ``b`` until
  the counts match, then ``EOS``. A counter again, with singleton targets in the second
  half.
- :class:`Unlock`: ``a* (b (a|c)*)?``, a regular language with one bit of memory: ``c``
  becomes legal once a ``b`` was read. Whether a single ``b`` is present is set
  complement's signal, and it disperses the same way.
- :class:`NoRepeat`: words over ``{a, b, c, d}`` with no symbol twice in a row (a
  strictly local regular language). The legal set depends on the last symbol only: no
  average over the prefix is needed, so dispersion has nothing to act on. The suite's
  control.

Every language has a *recogniser* (``accepts``, ``is_prefix``) written from the
definition, one string at a time, and a vectorised generator and target maker; the tests
check the second against the first. Tokens are the alphabet's indices, ``EOS`` is output
``len(alphabet)`` and ``PAD`` (after a word ended) is input ``len(alphabet)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from .tasks import DrawnBatch, NoiseSampler
from .validation import require_int


@dataclass(frozen=True)
class Language(NoiseSampler):
    """Shared plumbing: the Task protocol, token/string conversion and legal sets from a
    recogniser.

    Subclasses define ``alphabet``, ``accepts``, ``is_prefix``, ``_walk`` (random words
    from uniform noise) and ``_legal`` (the legal-next table of a batch of prefixes).
    """

    train_length: int = 16
    name: ClassVar[str] = "language"
    alphabet: ClassVar[str] = ""
    min_size: ClassVar[int] = 1  # the shortest input size the generator supports

    def __post_init__(self) -> None:
        require_int("train_length", self.train_length, self.min_size)

    @property
    def eos(self) -> int:
        return len(self.alphabet)

    @property
    def pad(self) -> int:
        return len(self.alphabet)

    @property
    def vocab_size(self) -> int:
        return len(self.alphabet) + 1  # symbols, then PAD

    @property
    def n_outputs(self) -> int:
        return len(self.alphabet) + 1  # symbols, then EOS

    def _check_size(self, size: int) -> None:
        # words cut (or padded) to ``size`` symbols; test sizes too
        require_int("size", size, self.min_size)

    def draw_noise(self, batch: int, size: int, generator: torch.Generator) -> Tensor:
        return torch.rand(batch, size, generator=generator)  # [batch, size]

    def drawn_batch(self, noise: Tensor, size: int) -> DrawnBatch:
        """Random words: noise per seed, the rules once for all seeds."""
        K, batch = noise.shape[:2]
        tokens, mask = self._walk(noise.reshape(-1, size))
        return DrawnBatch(tokens.view(K, batch, size), mask.view(K, batch, size))

    def batch_targets(self, drawn: DrawnBatch) -> Tensor:
        """Uniform over the legal next outputs at every prefix: [..., pos, n_outputs]
        (rows sum to 1).

        Masked positions get a one-hot ``EOS`` so that every row is a distribution.
        """
        mask = drawn.loss_mask
        legal = self._legal(drawn.inputs) & mask[..., None]
        legal[..., self.eos] |= ~mask
        legal = legal.float()
        return legal / legal.sum(-1, keepdim=True)

    def to_string(self, tokens: Sequence[int]) -> str:
        return "".join(self.alphabet[int(t)] for t in tokens)

    def legal_next(self, prefix: str) -> set[str]:
        """Legal continuations of ``prefix`` by the recogniser: symbols x with
        ``is_prefix(prefix + x)``, plus ``"EOS"`` when ``accepts(prefix)``. The
        brute-force reference for the vectorised targets."""
        if not self.is_prefix(prefix):
            raise ValueError(f"{prefix!r} is not a prefix of any word of {self.name}")
        legal = {x for x in self.alphabet if self.is_prefix(prefix + x)}
        return legal | {"EOS"} if self.accepts(prefix) else legal

    def accepts(self, word: str) -> bool:
        """Whether ``word`` is in the language; by default every legal prefix is a word
        (``EOS`` always legal)."""
        return self.is_prefix(word)

    def is_prefix(self, word: str) -> bool:
        raise NotImplementedError

    def _walk(self, noise: Tensor) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def _legal(self, tokens: Tensor) -> Tensor:
        raise NotImplementedError

    def _check_word(self, word: str) -> None:
        if not isinstance(word, str) or set(word) - set(self.alphabet):
            raise ValueError(
                f"word must be a str over the alphabet {self.alphabet!r}, got {word!r}"
            )


@dataclass(frozen=True)
class Dyck1(Language):
    """Balanced brackets; random words: ``(`` at depth 0, else ``(`` or ``)`` with equal
    chance."""

    name: ClassVar[str] = "Dyck-1"
    alphabet: ClassVar[str] = "()"

    def accepts(self, word: str) -> bool:
        return self.is_prefix(word) and word.count("(") == word.count(")")

    def is_prefix(self, word: str) -> bool:
        self._check_word(word)
        depth = 0
        for symbol in word:
            depth += 1 if symbol == "(" else -1
            if depth < 0:
                return False
        return True

    def _walk(self, noise: Tensor) -> tuple[Tensor, Tensor]:
        B, T = noise.shape
        tokens = torch.zeros(B, T, dtype=torch.long)
        depth = torch.zeros(B, dtype=torch.long)
        for t in range(T):
            close = (depth > 0) & (noise[:, t] < 0.5)
            tokens[:, t] = close.long()  # 0 = "(", 1 = ")"
            depth += 1 - 2 * close.long()
        return tokens, torch.ones(B, T, dtype=torch.bool)

    def _legal(self, tokens: Tensor) -> Tensor:
        depth = (1 - 2 * tokens).cumsum(-1)  # after each prefix
        legal = torch.zeros(*tokens.shape, self.n_outputs, dtype=torch.bool)
        legal[..., 0] = True
        legal[..., 1] = depth > 0
        legal[..., self.eos] = depth == 0
        return legal


@dataclass(frozen=True)
class AnBn(Language):
    """``a^n b^n``, n >= 1; random words: n uniform in ``1..size // 2``, padded to
    ``size``."""

    name: ClassVar[str] = "a^n b^n"
    alphabet: ClassVar[str] = "ab"
    min_size: ClassVar[int] = 2

    def accepts(self, word: str) -> bool:
        n = word.count("a")
        return self.is_prefix(word) and n >= 1 and word == "a" * n + "b" * n

    def is_prefix(self, word: str) -> bool:
        self._check_word(word)
        i = len(word) - len(word.lstrip("a"))  # leading a's
        rest = word[i:]
        return set(rest) <= {"b"} and len(rest) <= i

    def _walk(self, noise: Tensor) -> tuple[Tensor, Tensor]:
        B, T = noise.shape
        n = (noise[:, 0] * (T // 2)).long().clamp_max(T // 2 - 1) + 1  # [B] in 1..T//2
        pos = torch.arange(T)
        tokens = (pos[None] >= n[:, None]).long()  # a^n then b's
        mask = pos[None] < 2 * n[:, None]
        return torch.where(mask, tokens, self.pad), mask

    def _legal(self, tokens: Tensor) -> Tensor:
        real = tokens < self.pad
        a = ((tokens == 0) & real).long().cumsum(-1)
        b = ((tokens == 1) & real).long().cumsum(-1)
        legal = torch.zeros(*tokens.shape, self.n_outputs, dtype=torch.bool)
        legal[..., 0] = b == 0
        legal[..., 1] = (b == 0) | (b < a)
        legal[..., self.eos] = (b == a) & (b > 0)
        return legal


@dataclass(frozen=True)
class NoRepeat(Language):
    """Words over ``abcd`` with no symbol twice in a row; every prefix is a word, so
    ``EOS`` is always legal. Random words: a uniform first symbol, then a uniform choice
    among the three others."""

    name: ClassVar[str] = "no-repeat"
    alphabet: ClassVar[str] = "abcd"

    def is_prefix(self, word: str) -> bool:
        self._check_word(word)
        return all(x != y for x, y in zip(word, word[1:]))

    def _walk(self, noise: Tensor) -> tuple[Tensor, Tensor]:
        B, T = noise.shape
        m = len(self.alphabet)
        tokens = torch.zeros(B, T, dtype=torch.long)
        tokens[:, 0] = (noise[:, 0] * m).long().clamp_max(m - 1)
        for t in range(1, T):
            step = 1 + (noise[:, t] * (m - 1)).long().clamp_max(m - 2)
            tokens[:, t] = (tokens[:, t - 1] + step) % m
        return tokens, torch.ones(B, T, dtype=torch.bool)

    def _legal(self, tokens: Tensor) -> Tensor:
        legal = torch.ones(*tokens.shape, self.n_outputs, dtype=torch.bool)
        legal[..., : len(self.alphabet)] &= ~torch.nn.functional.one_hot(
            tokens.clamp_max(len(self.alphabet) - 1), len(self.alphabet)
        ).bool()
        return legal


@dataclass(frozen=True)
class Unlock(Language):
    """Words of ``a* (b (a|c)*)?``: ``c`` is legal only once a ``b`` has been read, and
    ``b`` at most once.

    One bit of memory (has a ``b`` been seen?), the same presence signal as set
    complement: a single ``b`` enters a causal attention average with weight about ``1 /
    s``. Every prefix is a word, so ``EOS`` is always legal. Random words: the ``b`` at
    a uniform position in ``0..size`` (``size``: no ``b``), ``a`` before it, a uniform
    choice of ``a`` or ``c`` after it.
    """

    name: ClassVar[str] = "unlock"
    alphabet: ClassVar[str] = "abc"

    def is_prefix(self, word: str) -> bool:
        self._check_word(word)
        head, _, tail = word.partition("b")
        return "c" not in head and "b" not in tail

    def _walk(self, noise: Tensor) -> tuple[Tensor, Tensor]:
        B, T = noise.shape
        # [B] position of the b (T: none)
        where = (noise[:, 0] * (T + 1)).long().clamp_max(T)
        pos = torch.arange(T)[None]
        # a or c, drawn from the remaining noise
        after = torch.where(noise[:, 1:] < 0.5, 0, 2)
        # T columns (last unused at pos 0)
        after = torch.cat([after, torch.zeros(B, 1, dtype=torch.long)], dim=1)
        # position t uses noise[:, t]; position 0 is never "after"
        after = after.roll(1, dims=1)
        tokens = torch.where(
            pos < where[:, None], 0, torch.where(pos == where[:, None], 1, after)
        )
        return tokens, torch.ones(B, T, dtype=torch.bool)

    def _legal(self, tokens: Tensor) -> Tensor:
        seen_b = (tokens == 1).long().cumsum(-1) > 0
        legal = torch.ones(*tokens.shape, self.n_outputs, dtype=torch.bool)
        legal[..., 1] = ~seen_b
        legal[..., 2] = seen_b
        return legal


LANGUAGES: dict[str, type[Language]] = {
    "dyck1": Dyck1,
    "anbn": AnBn,
    "unlock": Unlock,
    "norepeat": NoRepeat,
}


def make_language(name: str, train_length: int = 16) -> Language:
    """The language called ``name`` (one of ``LANGUAGES``), trained on words cut at
    ``train_length``."""
    if name not in LANGUAGES:
        raise ValueError(
            f"language name={name!r} is unknown; allowed: {tuple(LANGUAGES)}"
        )
    return LANGUAGES[name](train_length=train_length)
