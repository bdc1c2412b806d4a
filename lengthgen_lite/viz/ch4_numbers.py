"""Chapter 4's numbers for the prose: each function turns the chapter's results into
``{glue name: value}`` for the notebook's ``glue`` (rounded here where the prose
quotes a fixed number of digits)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..chapters.ch4_law import DIFFUSE, SHARP, UNIFORM, LawCheck
from ..chapters.ch4_llama import F, LayerSummary, SlopeBands
from ..chapters.ch4_vanishing_variance import AttentionCollapse, NearMisses, ShiftRatios


def fit_glue(
    final_loss: dict[tuple[str, str], np.ndarray],
    accuracy: Sequence[np.ndarray],
    at16: int,
) -> dict[str, float]:
    """The fit numbers the prose quotes: the largest final loss, the smallest accuracy
    at N = 16 (``accuracy``: every model's [K, len(N)])."""
    return {
        "loss_max": round(float(max(loss.max() for loss in final_loss.values())), 2),
        "acc16_min": round(float(min(acc[:, at16].min() for acc in accuracy)), 2),
    }


def law_glue(check: LawCheck, n_eff: dict[str, np.ndarray]) -> dict[str, float]:
    """The numbers the prose quotes about the law, unrounded, in the order the chapter
    glues them."""
    return {
        "slope_uniform": check.slopes[UNIFORM],
        "slope_diffuse": check.slopes[DIFFUSE],
        "slope_sharp": check.slopes[SHARP],
        "slope_all_min": check.all_slopes.min(),
        "slope_all_max": check.all_slopes.max(),
        "law_dev": check.law_dev,
        "tau_diffuse": check.tau[DIFFUSE],
        "tau_sharp": check.tau[SHARP],
        "neff_sharp_1024": n_eff[SHARP][-1],
        "share_diffuse": check.limit_share[DIFFUSE],
        "share_sharp": check.limit_share[SHARP],
    }


def gain_glue(
    accuracy: dict[str, dict[str, np.ndarray]],
    gain: dict[str, dict[str, np.ndarray]],
    long: np.ndarray,
    long_se: float,
) -> dict[str, float]:
    """The accuracy and gain numbers the prose quotes, rounded to 2 decimals (no
    "-0.0"), in order."""
    out: dict[str, float] = {}
    for t, key in (("dictionary lookup", "dict"), ("argmax retrieval", "argmax")):
        for v in ("baseline", "layernorm", "standardize"):
            out[f"acc_{key}_{v}_1024"] = round(float(accuracy[t][v][:, -1].mean()), 2)
        for v in ("layernorm", "standardize"):
            out[f"gain_{key}_{v}_1024"] = (
                round(float(gain[t][v][:, -1].mean()), 2) + 0.0
            )
            out[f"gain_{key}_{v}_long"] = round(float(gain[t][v][:, long].mean()), 2)
        out[f"gainmax_{key}"] = (
            round(float(max(gain[t][v].mean(0).max() for v in gain[t])), 2) + 0.0
        )
        out[f"gainmin_{key}"] = (
            round(float(min(gain[t][v].mean(0).min() for v in gain[t])), 2) + 0.0
        )
    d = "dictionary lookup"
    out["gain_dict_min_seed"] = round(
        float(min(gain[d][v][:, -1].min() for v in gain[d])), 2
    )
    out["gain_long_bound"] = round(float(2 * long_se), 2)
    return out


def shift_glue(shift: ShiftRatios) -> dict[str, float]:
    """The shift numbers the prose quotes, rounded to 2 decimals, in the order the
    chapter glues them."""
    tasks = list(shift.fixed)
    after, before = list(shift.after.values()), [shift.before[k] for k in shift.after]
    mean_after = {
        t: np.mean(
            [float(shift.after[t, v].mean()) for v in ("layernorm", "standardize")]
        )
        for t in tasks
    }
    change = [shift.pinned_change(t) for t in tasks]
    return {
        "shrink_argmax": round(
            float(shift.before["argmax retrieval", "baseline"].mean()), 2
        ),
        "shrink_dict": round(
            float(shift.before["dictionary lookup", "baseline"].mean()), 2
        ),
        "after_shrink_min": round(float(np.min(after)), 2),
        "after_shrink_max": round(float(np.max(after)), 2),
        "before_shrink_max": round(float(np.max(before)), 2),
        "mean_drift_max": round(float(np.max(list(shift.drift.values()))), 2),
        "ln_pinned_change": round(float(np.exp(np.max(change)) - 1), 2),
        "after_dict": round(float(mean_after["dictionary lookup"]), 2),
        "after_argmax": round(float(mean_after["argmax retrieval"]), 2),
    }


def collapse_glue(collapse: AttentionCollapse, largest: int) -> dict[str, float]:
    """The attention numbers the prose quotes, rounded, in the order the chapter glues
    them; ``largest`` is the largest N (N_eff is shown as a share of its N + 1 keys)."""
    a, d = "argmax retrieval", "dictionary lookup"
    out = {"neff_ratio_argmax": round(collapse.neff_ratio_argmax, 1)}
    for t, key in ((a, "argmax"), (d, "dict")):
        out[f"target_{key}_1024"] = round(collapse.target_at_largest[t], 2)
    for t, key in ((a, "argmax"), (d, "dict")):
        out[f"neff_{key}_share"] = round(
            collapse.neff_at_largest[t] / float(largest + 1), 2
        )
    gap = max(g.max() for g in collapse.normed_gap.values())
    return out | {"target_gap_max": round(float(gap), 2)}


def rescaling_glue(
    bolt_gain: dict[str, np.ndarray], long: np.ndarray, misses: Sequence[NearMisses]
) -> dict[str, float]:
    """The numbers of the two checks (a norm bolted on at test time, the argmax errors'
    anatomy) the prose quotes, rounded, in the order the chapter glues them."""
    d, a = bolt_gain["dictionary lookup"], bolt_gain["argmax retrieval"]
    near = np.array([m.near_miss for m in misses])
    return {
        "bolt_dict_long": round(float(d[:, long].mean(1).mean()), 2),
        "bolt_dict_1024": round(float(d[:, -1].mean()), 2),
        "bolt_argmax_max": round(float(np.abs(a.mean(0)).max()), 2),
        "near_min": round(float(near.min()), 2),
        "near_max": round(float(near.max()), 2),
        "near_chance": round(float(misses[0].chance), 3),
        "argmax_error_1024": round(float(np.mean([m.error_rate for m in misses])), 2),
    }


def layer_glue(
    summary: LayerSummary,
    bands: dict[tuple[str, str], SlopeBands],
    sinks: dict[str, np.ndarray],
) -> dict[str, float]:
    """The numbers the chapter's prose quotes (``llama_*``), unrounded, in the order it
    glues them."""
    rand, text = (
        bands[("random tokens", "after_o_proj")],
        bands[("natural text", "after_o_proj")],
    )
    s, l0 = summary, summary.l0
    return {
        "llama_l0_rand": l0["random tokens"],
        "llama_l0_rand_hi": rand.high[F][0],
        "llama_l0_rand_lo": rand.low[F][0],
        "llama_l0_o0": rand.point["feature o_0"][0],
        "llama_l0_text": l0["natural text"],
        "llama_l0_text_lo": text.low[F][0],
        "llama_l0_text_hi": text.high[F][0],
        "llama_l0_before": s.l0_before,
        "llama_l0_global": s.l0_global,
        "llama_l0_text_global": text.point["global"][0],
        "llama_gap_rand": s.sink_gap["random tokens"],
        "llama_gap_text": s.sink_gap["natural text"],
        "llama_rho_rand": s.rho["random tokens"],
        "llama_rho_text": s.rho["natural text"],
        "llama_q3_l0": s.quant_shift[0],
        "llama_q3_max": s.quant_shift.max(),
        "llama_rw_l0": s.random_w[0],
        "llama_rw_deep": np.median(s.random_w[1:]),
        "llama_sink_l0_512": sinks["random tokens"][0, -1],
        "llama_sink_max_8": sinks["random tokens"][:, 0].max(),
        "llama_sink_max_512": sinks["random tokens"][:, -1].max(),
    }


def layer_counts(
    summary: LayerSummary, bands: dict[tuple[str, str], SlopeBands]
) -> dict[str, int]:
    """The layer counts the prose quotes (``llama_n_*``), in the order it glues them."""
    text = bands[("natural text", "after_o_proj")]
    return {
        "llama_n_decay": len(summary.decays),
        "llama_n_rise": len(summary.rises),
        "llama_n_decay_text": int((text.high[F] < 0).sum()),
        "llama_n_rise_text": int((text.low[F] > 0).sum()),
        "llama_n_nosink": int(summary.no_sink["random tokens"].sum()),
    }
