import numpy as np
import pytest
import torch

from lengthgen_lite.core.seeding import (
    SEED_OFFSET_VARIABLE,
    make_generator,
    numpy_generator,
    seed_everything,
    seed_offset,
)


def test_seed_everything_repeats_and_pins_one_thread():
    seed_everything(3)
    first = torch.rand(4)
    seed_everything(3)
    assert torch.equal(first, torch.rand(4))
    assert torch.get_num_threads() == 1


def test_generators_are_independent_streams():
    a, b = make_generator(5), make_generator(5)
    assert torch.equal(torch.rand(3, generator=a), torch.rand(3, generator=b))
    assert not torch.equal(
        torch.rand(3, generator=make_generator(6)),
        torch.rand(3, generator=make_generator(5)),
    )


@pytest.mark.parametrize("bad", [-1, 1.5, "0"])
def test_bad_seed(bad):
    with pytest.raises(ValueError, match="seed"):
        seed_everything(bad)


def test_the_offset_moves_every_seed(monkeypatch):
    base = torch.rand(3, generator=make_generator(5))
    base_numpy = numpy_generator(5).random(3)
    monkeypatch.setenv(SEED_OFFSET_VARIABLE, "1000")
    assert seed_offset() == 1000
    moved = torch.rand(3, generator=make_generator(5))
    moved_numpy = numpy_generator(5).random(3)
    seed_everything(5)
    moved_global = torch.rand(3)
    assert not torch.equal(moved, base) and not np.array_equal(moved_numpy, base_numpy)
    monkeypatch.delenv(SEED_OFFSET_VARIABLE)
    # seed 5 became 1005
    assert torch.equal(moved, torch.rand(3, generator=make_generator(1005)))
    assert np.array_equal(moved_numpy, numpy_generator(1005).random(3))
    seed_everything(1005)
    assert torch.equal(moved_global, torch.rand(3))


@pytest.mark.parametrize("bad", ["-3", "x", "1.5"])
def test_bad_offset(monkeypatch, bad):
    monkeypatch.setenv(SEED_OFFSET_VARIABLE, bad)
    with pytest.raises(ValueError, match=SEED_OFFSET_VARIABLE):
        make_generator(0)
