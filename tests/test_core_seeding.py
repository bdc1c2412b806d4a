import pytest
import torch

from lengthgen_lite.core.seeding import make_generator, seed_everything


def test_seed_everything_repeats_and_pins_one_thread():
    seed_everything(3)
    first = torch.rand(4)
    seed_everything(3)
    assert torch.equal(first, torch.rand(4))
    assert torch.get_num_threads() == 1


def test_generators_are_independent_streams():
    a, b = make_generator(5), make_generator(5)
    assert torch.equal(torch.rand(3, generator=a), torch.rand(3, generator=b))
    assert not torch.equal(torch.rand(3, generator=make_generator(6)), torch.rand(3, generator=make_generator(5)))


@pytest.mark.parametrize("bad", [-1, 1.5, "0"])
def test_bad_seed(bad):
    with pytest.raises(ValueError, match="seed"):
        seed_everything(bad)
