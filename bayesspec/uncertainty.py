"""Numbers with their uncertainty, as every document of bayesspec reports them.

A leaf module (numpy only): the CONTRACT ``U`` shape of one uncertain number, and the
ratio entries and verdicts of comparisons (two engine versions, two fits).
"""

from __future__ import annotations

import numpy as np

DEFAULT_PROB = 0.9

__all__ = ["DEFAULT_PROB", "uncertain", "identified", "ratio_entry", "ratio_verdict",
           "NOT_IDENTIFIED_WIDTH"]

#: An interval wider than this many times its median says the data do not pin the
#: number down: it is shown as "not identified", never as a number.
NOT_IDENTIFIED_WIDTH = 10.0


def identified(u: dict | None, width: float = NOT_IDENTIFIED_WIDTH) -> bool:
    """Whether an uncertain number is pinned down: a finite interval no wider than
    ``width`` times its median."""
    if not u or u.get("median") is None or u.get("lo") is None or u.get("hi") is None:
        return False
    median, lo, hi = (float(u[key]) for key in ("median", "lo", "hi"))
    if not (np.isfinite(lo) and np.isfinite(hi) and np.isfinite(median)):
        return False
    return hi - lo <= width * abs(median)


def uncertain(draws, prob: float = DEFAULT_PROB) -> dict:
    """``{"mean", "median", "lo", "hi", "prob"}`` of draws (equal-tailed interval).

    Infinite draws (past saturation) are kept: the mean is then ``inf`` and the
    quantiles say how much of the posterior lies there; NaN draws are dropped.
    """
    values = np.asarray(draws, dtype=float).ravel()
    values = values[~np.isnan(values)]
    if values.size == 0:
        return {"mean": None, "median": None, "lo": None, "hi": None, "prob": prob}
    tail = (1.0 - prob) / 2.0
    with np.errstate(invalid="ignore"):  # quantiles between two infinities
        lo, median, hi = np.quantile(values, [tail, 0.5, 1.0 - tail])
        mean = float(np.mean(values))
    summary = {"mean": _number(mean), "median": _number(median), "lo": _number(lo),
               "hi": _number(hi), "prob": prob}
    infinite = float(np.mean(np.isinf(values)))
    if infinite > 0:
        # Draws past a ceiling make the mean infinite (JSON null): say how many there are,
        # so a reader never takes the median for the whole story.
        summary["p_infinite"] = infinite
    return summary


def _number(value: float):
    value = float(value)
    if np.isnan(value):
        return None
    return value  # inf stays inf: JSON writers turn it into null


def ratio_verdict(ratio: np.ndarray, rope: float, level: float = 0.95) -> str:
    """What a ratio B/A says, with a region of practical equivalence of +-``rope``."""
    if np.mean(ratio > 1.0 + rope) >= level:
        return f"higher in B (by more than {rope:.0%})"
    if np.mean(ratio < 1.0 - rope) >= level:
        return f"lower in B (by more than {rope:.0%})"
    if np.mean(np.abs(ratio - 1.0) <= rope) >= level:
        return f"equivalent (within +-{rope:.0%})"
    return "uncertain: collect more data"


def ratio_entry(ratio: np.ndarray, rope: float, prob: float) -> dict:
    """CONTRACT ``compare`` entry of one parameter: the ratio B/A with probabilities."""
    return {"ratio": uncertain(ratio, prob),
            "p_increase": float(np.mean(ratio > 1.0)),
            "p_practically_higher": float(np.mean(ratio > 1.0 + rope)),
            "p_practically_lower": float(np.mean(ratio < 1.0 - rope)),
            "p_equivalent": float(np.mean(np.abs(ratio - 1.0) <= rope)),
            "verdict": ratio_verdict(ratio, rope)}
