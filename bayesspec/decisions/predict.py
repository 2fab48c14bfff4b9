"""Latency of one fitted group at new rates, with intervals (CONTRACT ``predict``)."""

from __future__ import annotations

import numpy as np

from ..uncertainty import DEFAULT_PROB, uncertain


def predict_group(fit, group: int, rps, *, prob: float = DEFAULT_PROB, seed: int = 0) -> dict:
    """The mean latency curve and a new measurement at each rate, for one group, by the
    fit's own law (eq. 1, or eq. 4 for an MoE verifier)."""
    curve = fit.group_curve(group)
    rps = np.asarray(rps, dtype=float)
    mean = curve.latency(rps)
    observed = curve.predictive(rps, np.random.default_rng(seed))
    saturation = curve.saturation_cost
    ceiling = fit.rps_measured_max(group)
    points = []
    for j, rate in enumerate(rps):
        points.append({
            "rps": float(rate),
            "latency_s": uncertain(mean[:, j], prob),
            "predictive_s": uncertain(observed[:, j], prob),
            "p_saturated": float(np.mean(rate * saturation >= 1.0)),
            "extrapolated": bool(rate > ceiling),
        })
    return {"group": fit.groups["label"].iloc[group], "rps_measured_max": ceiling,
            "points": points}
