"""Posterior summaries and predictions: numbers with their uncertainty.

Every function works on whole arrays of draws (no Python loop over draws) and returns
plain dicts in the JSON shapes of CONTRACT.md.
"""

from __future__ import annotations

import numpy as np

from .laws import latency, load_amplification_expr

DEFAULT_PROB = 0.9


def uncertain(draws, prob: float = DEFAULT_PROB) -> dict:
    """``{"mean", "median", "lo", "hi", "prob"}`` of draws (equal-tailed interval).

    Infinite draws (past saturation) are kept: the mean is then ``inf`` and the
    quantiles say how much of the posterior lies there.
    """
    values = np.asarray(draws, dtype=float).ravel()
    values = values[~np.isnan(values)]
    if values.size == 0:
        return {"mean": None, "median": None, "lo": None, "hi": None, "prob": prob}
    tail = (1.0 - prob) / 2.0
    with np.errstate(invalid="ignore"):  # quantiles between two infinities
        lo, median, hi = np.quantile(values, [tail, 0.5, 1.0 - tail])
    with np.errstate(invalid="ignore"):
        mean = float(np.mean(values))
    return {"mean": _number(mean), "median": _number(median), "lo": _number(lo),
            "hi": _number(hi), "prob": prob}


def _number(value: float):
    value = float(value)
    if np.isnan(value):
        return None
    if np.isinf(value):
        return value  # serialised as Infinity by json; the CLI maps it to null
    return value


def latency_draws(c1, c2, rps) -> np.ndarray:
    """Mean-latency draws, shape (samples, len(rps)); ``inf`` past saturation."""
    c1 = np.asarray(c1, dtype=float)[:, None]
    c2 = np.asarray(c2, dtype=float)[:, None]
    return latency(np.asarray(rps, dtype=float)[None, :], c1, c2)


def predictive_latency_draws(c1, c2, rps, noise_base, noise_load, rng) -> np.ndarray:
    """Draws of a new measured mean latency: the curve times the fitted log-noise."""
    curve = latency_draws(c1, c2, rps)
    rps = np.asarray(rps, dtype=float)[None, :]
    c2 = np.asarray(c2, dtype=float)[:, None]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        amplification = np.where(rps * c2 < 1, load_amplification_expr(rps, c2), np.inf)
        sigma = np.sqrt(np.asarray(noise_base)[:, None] ** 2
                        + (np.asarray(noise_load)[:, None] * amplification) ** 2)
        noise = rng.standard_normal(curve.shape) * sigma
        return np.where(np.isfinite(curve), curve * np.exp(noise), np.inf)


def predict_group(fit, group: int, rps, *, prob: float = DEFAULT_PROB, seed: int = 0) -> dict:
    """CONTRACT ``predict``: latency with intervals at each rate for one group."""
    c1 = fit.draws("C1", group)
    c2 = fit.draws("C2", group)
    curve = latency_draws(c1, c2, rps)
    rng = np.random.default_rng(seed)
    observed = predictive_latency_draws(c1, c2, rps, fit.draws("noise_base"),
                                        fit.draws("noise_load"), rng)
    points = []
    for j, rate in enumerate(np.asarray(rps, dtype=float)):
        points.append({
            "rps": float(rate),
            "latency_s": uncertain(curve[:, j], prob),
            "predictive_s": uncertain(observed[:, j], prob),
            "p_saturated": float(np.mean(rate * c2 >= 1.0)),
        })
    return {"group": fit.groups["label"].iloc[group], "points": points}
