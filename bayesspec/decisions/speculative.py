"""Speculative decoding decisions of one setup: speedup, crossover RPS*, best draft length.

Every function takes a :class:`bayesspec.prediction.Law` (``fit.law(selection)``) and
works on all posterior draws at once; its latencies follow the law the model fitted
(eq. 1, its slot queue when the engine's concurrency cap is known, or eq. 4 for an MoE
verifier). What was measured is per configuration (``law.measured(alpha, k)``): rates
above the highest fitted rate of the dense baseline and of the SD configuration
compared, and configurations outside the measured alphas and draft lengths, are
answered and marked ``extrapolated`` by :meth:`bayesspec.prediction.Law.extrapolated`, the
one rule every output (tables, JSON, figures, the report) marks with; the document says
why (``measured``). ``rps_fitted_max`` is that highest fitted rate; ``rps_measured_max``
holds the same number under its older name.
"""

from __future__ import annotations

import numpy as np

from bayesspec.errors import BadInput
from bayesspec.uncertainty import DEFAULT_PROB, uncertain

# A draw in which only the dense baseline is saturated has an infinite speedup; in
# expectations it counts as this large finite value so one such draw cannot swamp a mean.
SPEEDUP_CAP = 1e3


def measured_section(law, alpha, k) -> dict:
    """The ``measured`` entry of a document: what the data measured for (alpha, k)
    (:meth:`bayesspec.prediction.Law.measured`), JSON-ready."""
    measured = law.measured(alpha, k)
    return {key: (None if isinstance(value, float) and not np.isfinite(value) else value)
            for key, value in measured.items()}


def speedup_curve(law, alpha: float, k: int, rps, *, prob: float = DEFAULT_PROB) -> dict:
    """CONTRACT ``speedup``: speedup vs RPS with intervals, p_slower, C1R and C2R."""
    rps = np.asarray(rps, dtype=float)
    draws = law.speedup_draws(alpha, k, rps)
    sd = law.sd(alpha, k)
    c1_sd, c2_sd = np.ravel(sd.zero_load), np.ravel(sd.saturation_cost)
    ceiling = np.ravel(sd.ceiling)
    extrapolated = law.extrapolated(rps, alpha, k)
    points = [{"rps": float(r), "speedup": uncertain(draws[:, j], prob),
               "p_slower": float(np.mean(draws[:, j] < 1.0)),
               "p_sd_saturated": float(np.mean(r >= ceiling)),
               "extrapolated": bool(extrapolated[j])}
              for j, r in enumerate(rps)]
    measured = measured_section(law, alpha, k)
    return {"setup": law.label, "alpha": float(alpha), "k": int(k), "points": points,
            "C1R": uncertain(c1_sd / law.dense.zero_load, prob),
            "C2R": uncertain(c2_sd / law.dense.saturation_cost, prob),
            **_fitted_top(measured["rps_fitted_max"]), "measured": measured}


def _fitted_top(top) -> dict:
    """The highest fitted rate of an answer, under its name and its older one."""
    return {"rps_fitted_max": top, "rps_measured_max": top}


def crossover(law, alpha: float, k: int, *, prob: float = DEFAULT_PROB) -> dict:
    """CONTRACT ``crossover``: the RPS* distribution over the draws that have one.

    For an MoE verifier RPS* is the lowest rate where the two eq. (4) latencies meet
    below both saturation rates (found numerically, all draws at once)."""
    sd = law.sd(alpha, int(k))
    c1_sd, c2_sd = np.ravel(sd.zero_load), np.ravel(sd.saturation_cost)
    star = law.crossover_draws(alpha, k)
    has = np.isfinite(star)
    # Which way it crosses: SD faster below RPS* (the common case) or only above it.
    faster_below = c1_sd < law.dense.zero_load
    summary = uncertain(star[has], prob) if has.any() else None
    measured = measured_section(law, alpha, k)
    top = measured["rps_fitted_max"]
    top = float("nan") if top is None else top
    # The crossover is read off the fitted law beyond the fitted rates of the two
    # curves, or for a configuration the data did not measure: the rule of every output.
    extrapolated = bool(summary is not None
                        and law.extrapolated(summary["median"], alpha, k))
    return {
        "setup": law.label, "alpha": float(alpha), "k": int(k),
        "rps_star": summary,
        "p_crossover": float(has.mean()),
        "p_sd_faster_below": float(np.mean(faster_below[has])) if has.any() else None,
        # The ceilings: eq. (1)'s pole 1/C2, or the cap's throughput when the engine's
        # concurrency cap is known (it binds first).
        "saturation_rps": uncertain(np.ravel(sd.ceiling), prob),
        "dense_saturation_rps": uncertain(law.dense.ceiling, prob),
        "ceiling_binding": {"sd": sd.ceiling_binding, "dense": law.dense.ceiling_binding},
        "C1R": uncertain(c1_sd / law.dense.zero_load, prob),
        "C2R": uncertain(c2_sd / law.dense.saturation_cost, prob),
        **_fitted_top(measured["rps_fitted_max"]), "measured": measured,
        "extrapolated": extrapolated,
        "p_beyond_measured": (float(np.mean(star[has] > top)) if has.any()
                              and np.isfinite(top) else None),
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
    lie beyond the range. A fit of the configurations alone (no six coefficients)
    answers when every k searched is one of its fitted configurations.

    A row is ``extrapolated`` (:meth:`~bayesspec.prediction.Law.extrapolated` of the
    chosen k at that alpha): above the highest fitted rate of the chosen configuration and
    the dense baseline, or a k or alpha the data did not measure; k* = 0 at an alpha
    outside the measured ones too, since "do not speculate" there rests on SD's law at
    that alpha.
    """
    if objective not in {"mean", "q10"}:
        raise BadInput(f"objective must be mean or q10, got {objective!r}",
                       argument="objective")
    alphas = np.asarray(alphas, dtype=float)
    rps = np.asarray(rps, dtype=float)
    ks = np.asarray(list(ks), dtype=int)
    sd_ks = ks[ks > 0]
    if not law.answers_any_configuration and not _fitted_configurations(law, alphas, sd_ks):
        raise BadInput("k* needs the speculative model (six cycle coefficients); "
                       "fit with --model speculative")
    dense_zero_load = law.dense.zero_load
    table = []
    for alpha in alphas:
        draws = _speedup_candidates(law, alpha, sd_ks, rps)             # (S, K, R)
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
            chosen = int(ks[b])
            measured = law.measured(alpha, chosen)
            table.append({
                "alpha": float(alpha), "rps": float(rate), "k": chosen,
                "p_best": float(np.mean(per_draw_best[:, j] == b)),
                "speedup": uncertain(draws[:, b, j], prob),
                "k_batch1": int(ks[batch1]),
                "loss_vs_batch1": float(expected[b, j] - expected[batch1, j]),
                "at_max_k": bool(ks[b] == ks.max() and ks[b] > 0),
                "extrapolated": bool(law.extrapolated(rate, alpha, chosen)),
                "rps_fitted_max": (measured["rps_fitted_max"]
                                   if np.isfinite(measured["rps_fitted_max"]) else None),
                "design_notes": measured["design_notes"],
            })
    dense_top = law.measured(None, 0)["rps_fitted_max"]
    return {"setup": law.label, "objective": objective, "ks": ks.tolist(), "table": table,
            **_fitted_top(dense_top if np.isfinite(dense_top) else None),
            "measured": measured_section(law, alphas[0] if len(alphas) else None,
                                         int(sd_ks.max()) if len(sd_ks) else 0)}


def _fitted_configurations(law, alphas, sd_ks) -> bool:
    """Whether a law of fitted configurations has every (alpha, k) asked."""
    fitted = getattr(law, "configurations", {})
    return bool(fitted) and all(
        (None, int(k)) in fitted or (not np.isnan(a) and (round(float(a), 9), int(k)) in fitted)
        for a in alphas for k in sd_ks)


def _speedup_candidates(law, alpha: float, sd_ks: np.ndarray, rps: np.ndarray) -> np.ndarray:
    """Speedup draws of every SD candidate, (S, K, R): at once from six coefficients, one
    fitted configuration at a time otherwise."""
    if not len(sd_ks):
        return np.ones((len(law.dense.zero_load), 0, len(rps)))
    if law.answers_any_configuration:
        return law.speedup_draws(alpha, sd_ks, rps)
    return np.stack([law.speedup_draws(alpha, int(k), rps) for k in sd_ks], axis=1)


def _c1_candidates(law, alpha: float, ks: np.ndarray) -> np.ndarray:
    """Zero-load latency of every candidate k (k = 0 is the dense baseline), (S, K)."""
    sd = ks[ks > 0]
    if law.answers_any_configuration and len(sd):
        c1_sd, _ = law.costs(alpha, sd)
    else:
        c1_sd = np.stack([np.ravel(law.costs(alpha, int(k))[0]) for k in sd], axis=1) \
            if len(sd) else np.empty((len(law.dense.zero_load), 0))
    columns = []
    j = 0
    for k in ks:
        if k == 0:
            columns.append(law.dense.zero_load)
        else:
            columns.append(c1_sd[:, j])
            j += 1
    return np.stack(columns, axis=1)
