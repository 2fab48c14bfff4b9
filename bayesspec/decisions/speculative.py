"""Speculative decoding decisions of one setup: speedup, crossover RPS*, best draft length.

Every function takes a :class:`bayesspec.prediction.Law` (``fit.law(selection)``) and
works on all posterior draws at once; its latencies follow the law the model fitted
(eq. 1, or eq. 4 for an MoE verifier). Rates above the highest rate the data reached
(``law.rps_measured_max``) are answered, and marked ``extrapolated``.
"""

from __future__ import annotations

import numpy as np

from ..errors import BadInput
from ..uncertainty import DEFAULT_PROB, uncertain

# A draw in which only the dense baseline is saturated has an infinite speedup; in
# expectations it counts as this large finite value so one such draw cannot swamp a mean.
SPEEDUP_CAP = 1e3


def _beyond(rate, law) -> bool:
    return bool(np.isfinite(law.rps_measured_max) and rate > law.rps_measured_max)


def speedup_curve(law, alpha: float, k: int, rps, *, prob: float = DEFAULT_PROB) -> dict:
    """CONTRACT ``speedup``: speedup vs RPS with intervals, p_slower, C1R and C2R."""
    rps = np.asarray(rps, dtype=float)
    draws = law.speedup_draws(alpha, k, rps)
    c1_sd, c2_sd = (np.ravel(v) for v in law.costs(alpha, k))
    points = [{"rps": float(r), "speedup": uncertain(draws[:, j], prob),
               "p_slower": float(np.mean(draws[:, j] < 1.0)),
               "p_sd_saturated": float(np.mean(r * c2_sd >= 1.0)),
               "extrapolated": _beyond(r, law)}
              for j, r in enumerate(rps)]
    return {"setup": law.label, "alpha": float(alpha), "k": int(k), "points": points,
            "C1R": uncertain(c1_sd / law.dense.zero_load, prob),
            "C2R": uncertain(c2_sd / law.dense.saturation_cost, prob),
            "rps_measured_max": law.rps_measured_max}


def crossover(law, alpha: float, k: int, *, prob: float = DEFAULT_PROB) -> dict:
    """CONTRACT ``crossover``: the RPS* distribution over the draws that have one.

    For an MoE verifier RPS* is the lowest rate where the two eq. (4) latencies meet
    below both saturation rates (found numerically, all draws at once)."""
    c1_sd, c2_sd = (np.ravel(v) for v in law.costs(alpha, k))
    star = law.crossover_draws(alpha, k)
    has = np.isfinite(star)
    # Which way it crosses: SD faster below RPS* (the common case) or only above it.
    faster_below = c1_sd < law.dense.zero_load
    summary = uncertain(star[has], prob) if has.any() else None
    ceiling = law.rps_measured_max
    return {
        "setup": law.label, "alpha": float(alpha), "k": int(k),
        "rps_star": summary,
        "p_crossover": float(has.mean()),
        "p_sd_faster_below": float(np.mean(faster_below[has])) if has.any() else None,
        "saturation_rps": uncertain(1.0 / c2_sd, prob),
        "dense_saturation_rps": uncertain(1.0 / law.dense.saturation_cost, prob),
        "C1R": uncertain(c1_sd / law.dense.zero_load, prob),
        "C2R": uncertain(c2_sd / law.dense.saturation_cost, prob),
        "rps_measured_max": ceiling,
        # The crossover is read off the fitted law beyond the measured rates.
        "extrapolated": bool(summary is not None and np.isfinite(ceiling)
                             and summary["median"] > ceiling),
        "p_beyond_measured": (float(np.mean(star[has] > ceiling)) if has.any()
                              and np.isfinite(ceiling) else None),
    }


def _lower_quantile(values: np.ndarray, q: float) -> np.ndarray:
    """Quantile along axis 0 by partial sort (several times faster than np.quantile)."""
    index = int(np.floor(q * (values.shape[0] - 1)))
    return np.partition(values, index, axis=0)[index]


def kstar_table(law, alphas, rps, *, ks=range(0, 11), objective: str = "mean",
                prob: float = DEFAULT_PROB) -> dict:
    """CONTRACT ``kstar``: the best k per (alpha, RPS), its probability of being best.

    Candidates include k = 0 (do not speculate; speedup 1 by definition). ``objective``
    ``mean`` maximises the posterior expected speedup, ``q10`` its 10% quantile (the
    risk-averse choice). ``loss_vs_batch1`` is the expected speedup given up (in speedup
    points, a difference of expected speedups) by running the k that is best at zero
    load instead. ``at_max_k``: the best k is the largest searched, so the optimum may
    lie beyond the range.
    """
    if objective not in {"mean", "q10"}:
        raise BadInput(f"objective must be mean or q10, got {objective!r}",
                       argument="objective")
    alphas = np.asarray(alphas, dtype=float)
    rps = np.asarray(rps, dtype=float)
    ks = np.asarray(list(ks), dtype=int)
    if not law.answers_any_configuration:
        raise BadInput("k* needs the speculative model (six cycle coefficients); "
                       "fit with --model speculative")
    sd_ks = ks[ks > 0]
    dense_zero_load = law.dense.zero_load
    table = []
    for alpha in alphas:
        draws = law.speedup_draws(alpha, sd_ks, rps)                   # (S, K, R)
        if (ks == 0).any():
            draws = np.concatenate([np.ones_like(draws[:, :1]), draws], axis=1)
        capped = np.minimum(draws, SPEEDUP_CAP)
        expected = capped.mean(axis=0)                                # (K, R)
        score = expected if objective == "mean" else _lower_quantile(capped, 0.10)
        best = np.argmax(score, axis=0)                               # (R,)
        per_draw_best = np.argmax(capped, axis=1)                     # (S, R)
        # Zero-load speedup is C1_dense/C1_sd: the k a batch-1 benchmark would pick.
        zero_load = dense_zero_load[:, None] / _c1_candidates(law, alpha, ks)
        batch1 = int(np.argmax(np.minimum(zero_load, SPEEDUP_CAP).mean(axis=0)))
        for j, rate in enumerate(rps):
            b = best[j]
            table.append({
                "alpha": float(alpha), "rps": float(rate), "k": int(ks[b]),
                "p_best": float(np.mean(per_draw_best[:, j] == b)),
                "speedup": uncertain(draws[:, b, j], prob),
                "k_batch1": int(ks[batch1]),
                "loss_vs_batch1": float(expected[b, j] - expected[batch1, j]),
                "at_max_k": bool(ks[b] == ks.max() and ks[b] > 0),
                "extrapolated": _beyond(rate, law),
            })
    return {"setup": law.label, "objective": objective, "ks": ks.tolist(), "table": table,
            "rps_measured_max": law.rps_measured_max}


def _c1_candidates(law, alpha: float, ks: np.ndarray) -> np.ndarray:
    """Zero-load latency of every candidate k (k = 0 is the dense baseline), (S, K)."""
    sd = ks[ks > 0]
    c1_sd, _ = law.costs(alpha, sd)
    columns = []
    j = 0
    for k in ks:
        if k == 0:
            columns.append(law.dense.zero_load)
        else:
            columns.append(c1_sd[:, j])
            j += 1
    return np.stack(columns, axis=1)
