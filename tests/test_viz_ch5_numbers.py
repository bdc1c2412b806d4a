import pytest

from lengthgen_lite.chapters import ch5_post_norm as ch5
from lengthgen_lite.core.model import PLACEMENTS
from lengthgen_lite.runs import run
from lengthgen_lite.runs.claims import TV_SESOI
from lengthgen_lite.viz import ch5_numbers


def _tiny(name):
    return ch5.SPECS[name].with_overrides(seeds=[0, 1], steps=20, n_test=200)


@pytest.fixture(scope="module")
def placements():
    return run(_tiny("ch5/placements"), progress=False)


def test_numbers_for_the_prose_are_rounded_and_named(placements):
    numbers = ch5_numbers.placement_numbers(placements)
    assert set(numbers) == {
        *(f"tv_beyond_{t}_{n}" for t in ch5.TARGETS for n in PLACEMENTS),
        "tv_longest_soft_attn_out",
        "tv_train_soft_max",
    }
    mean = ch5.per_seed(placements, "tv_beyond", "soft", "post").mean()
    assert numbers["tv_beyond_soft_post"] == round(float(mean), 3)
    profiles = ch5.profiles(placements, n_sequences=50)
    assert set(ch5_numbers.growth_numbers(profiles)) == {
        f"growth_{t}_{n}" for t in ch5.TARGETS for n in PLACEMENTS
    }
    mechanism = ch5_numbers.mechanism_numbers(profiles)
    assert mechanism["n_models"] == 20 and ch5.entropy_floor(profiles).shape == (10, 2)
    assert mechanism["entropy_min"] == round(
        float(ch5.entropy_floor(profiles).min()), 3
    )
    divisor = ch5_numbers.divisor_numbers(profiles)
    assert 1 <= divisor["gap_min_s"] <= 15 and "divisor_s15_attn_out" in divisor


def test_dropout_numbers(placements):
    dropout = run(_tiny("ch5/dropout"), progress=False)
    numbers = ch5_numbers.dropout_numbers(placements, dropout)
    assert "dropout_soft_attn_dropout_0.1" in numbers
    assert {"dropout_base_soft", "dropout_base_sampled"} <= set(numbers)


def test_deeper_numbers_are_the_paired_differences(placements):
    deeper = run(_tiny("ch5/deeper"), progress=False)
    one_layer, _ = ch5.post_and_pre_final(placements, deeper)
    numbers = ch5_numbers.deeper_numbers(placements, deeper)
    assert numbers["tv_sesoi"] == TV_SESOI == 0.01
    assert (
        numbers["mlp_difference_low"]
        <= numbers["mlp_difference_low90"]
        <= numbers["mlp_difference"]
        <= numbers["mlp_difference_high90"]
        <= numbers["mlp_difference_high"]
    )
    assert numbers["one_layer_difference"] == round(
        float((one_layer["post"] - one_layer["pre_final"]).mean()), 3
    )


def test_attn_out_lead_numbers_on_the_reference_sweep():
    from lengthgen_lite.chapters import reference

    numbers = ch5_numbers.attn_out_lead_numbers(reference.load("ch5/placements"))
    assert set(numbers) == {
        f"lead-{name}-{step}{end}"
        for step in (1000, 6000)
        for name, ends in (
            ("soft-min", [""]),
            ("soft-max", [""]),
            ("sampled-fast-book", ["", "-high"]),
            ("sampled-fast-torch", ["", "-high"]),
        )
        for end in ends
    }
    # soft targets: the lead closes with training, every cell
    assert 0 < numbers["lead-soft-min-6000"] <= numbers["lead-soft-max-6000"]
    assert numbers["lead-soft-max-6000"] < numbers["lead-soft-min-1000"]
    assert numbers["lead-sampled-fast-torch-6000-high"] < 0  # post-norm better there


def test_attn_out_lead_numbers_need_the_reference_grid(placements):
    with pytest.raises(ValueError, match="does not vary init and lr"):
        ch5_numbers.attn_out_lead_numbers(placements)
