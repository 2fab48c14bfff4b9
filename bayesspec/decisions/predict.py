"""Latency of one fitted group at new rates, with intervals (CONTRACT ``predict``)."""

from __future__ import annotations

import numpy as np

from ..uncertainty import DEFAULT_PROB, uncertain


def predict_group(fit, group: int, rps, *, prob: float = DEFAULT_PROB, seed: int = 0) -> dict:
    """The mean latency curve and a new measurement at each rate, for one group, by the
    fit's own law (eq. 1, its slot queue when the engine's cap is known, or eq. 4 for an
    MoE verifier). Rates above the group's highest fitted (unsaturated) rate are marked
    ``extrapolated``; ``p_saturated`` is the share of draws whose ceiling (1/C2, or the
    cap's throughput) lies at or below the rate."""
    curve = fit.group_curve(group)
    rps = np.asarray(rps, dtype=float)
    mean = curve.latency(rps)
    observed = curve.predictive(rps, np.random.default_rng(seed))
    ceiling = np.ravel(curve.ceiling)
    top = float(curve.rps_fitted_max)
    points = []
    for j, rate in enumerate(rps):
        points.append({
            "rps": float(rate),
            "latency_s": uncertain(mean[:, j], prob),
            "predictive_s": uncertain(observed[:, j], prob),
            "p_saturated": float(np.mean(rate >= ceiling)),
            "extrapolated": bool(np.isfinite(top) and rate > top),
        })
    return {"group": fit.groups["label"].iloc[group],
            "rps_measured_max": top if np.isfinite(top) else None,
            "ceiling_rps": uncertain(ceiling, prob), "ceiling_binding": curve.ceiling_binding,
            "points": points}
