"""Scoring predictive intervals against points, for every predictive check: the points a
check asks about, interval quantiles of draws that may saturate, per-group calibration
with its misfit flags, pooled coverage, and the coverage a model exactly right would give
on the same points.

``group_calibration``: per group, the share inside and a flag when more points fall
outside than the interval allows (a binomial tail at ``FLAG_LEVEL``), plus the residual
pattern along utilisation (the law's systematic misfit).
``coverage_reference``: the held-out coverage a model exactly right would give on the
same points (its own joint predictive draw taken as the truth). The rates one curve is
extrapolated to share its error, so their misses come together: the pooled share
scatters more than a binomial says and a group's tail is the model's, not 0.1^k.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayesspec.checks.loo import _left_out_coverage

#: A group is flagged when P(at least this many outside | the interval is right) is below.
FLAG_LEVEL = 0.01
#: ... or when its predictive median explains its points worse than their mean does
#: (R^2 < 0), or its mean log residual at high load is beyond this either way: a
#: systematic miss where the decisions are made, however wide the intervals.
HIGH_LOAD_RESIDUAL = 0.20
#: ... or, when the pooled held-out coverage is too low for the model (overconfident
#: extrapolation), when less than this share of its own held-out points is inside.
HELD_OUT_FLOOR = 0.5
#: Utilisation bands of the residual pattern.
PATTERN_BANDS = ((0.0, 0.33, "low"), (0.33, 0.67, "mid"), (0.67, 1.01, "high"))


def r_squared(observed: np.ndarray, predicted: np.ndarray) -> float:
    observed, predicted = np.asarray(observed, float), np.asarray(predicted, float)
    ok = np.isfinite(observed) & np.isfinite(predicted)
    if ok.sum() < 2:
        return float("nan")
    residual = np.sum((observed[ok] - predicted[ok]) ** 2)
    total = np.sum((observed[ok] - observed[ok].mean()) ** 2)
    return float(1.0 - residual / total) if total > 0 else float("nan")


def _check_rows(fit, extra: pd.DataFrame | None) -> pd.DataFrame:
    """The fit's own included rows (``held_out`` False) and the rows of ``extra`` whose
    group the fit has (``held_out`` True), each with its ``group`` label."""
    from bayesspec.data import included, row_group_labels

    fitted = included(fit.data).copy()
    fitted["held_out"] = False
    parts = [fitted]
    if extra is not None and len(extra):
        extra = included(extra).copy()
        extra["group"] = row_group_labels(extra, fit.groups)
        extra = extra.loc[extra["group"] != ""]
        extra["held_out"] = True
        parts.append(extra)
    return pd.concat(parts, ignore_index=True)


def inside_if_truth(draws: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For each predictive draw s (rows of ``draws``, shape (S, n)): how many of the n
    points would fall inside [lo, hi] if draw s were the truth (saturated or NaN draws
    count as inf, inside an interval open upwards)."""
    truth = np.where(np.isnan(draws), np.inf, draws)
    return ((lo <= truth) & (truth <= hi)).sum(axis=1)


def coverage_reference(points: pd.DataFrame, inside_by_draw: dict, *, prob: float = 0.9,
                       floor: float = 0.7, band: float = 0.05,
                       limits: tuple[float, float] | None = None) -> dict:
    """Where the held-out coverage of ``points`` would fall if the model were exactly
    right: the truth is one joint posterior predictive draw s (every group at once, so
    what the groups share stays shared), and each group's held-out points count as
    inside or not against their intervals (``inside_by_draw`` from
    :func:`~bayesspec.checks.posterior_predictive.predictive_points` with
    ``reference=True``).

    Why not a binomial: the points one curve is extrapolated to share that curve's
    error, so they fall outside together. On the Vidur hold-out fits (4 held-out rates
    per group) a right dense-spline model leaves 2 or more of a group's 4 points outside
    about 11% of the time, twice the binomial 5.2%, and its pooled coverage over 100
    points has sd 0.05, not the binomial 0.03.

    Returns the reference mean, sd and central 90% range of the pooled coverage, the
    mean number of groups below ``floor`` and the chance of none, the chance that the
    pooled coverage lands within ``band`` of ``prob`` (or within ``limits``, a band of
    its own such as 0.80-0.95), alone and with no group below ``floor`` (a target such
    as "85-95% pooled, no group below 70%"), the observed pooled coverage
    and its tail probabilities (``p_as_low``: P(reference <= observed), ``p_as_high``:
    P(reference >= observed)), and per group P(as many of its points outside or more)."""
    if not inside_by_draw:
        return {}
    labels = list(inside_by_draw)    # the groups with held-out points
    counts = points.loc[points["held_out"]].groupby("group")["inside"].agg(["sum", "size"])
    inside = np.stack([np.asarray(inside_by_draw[label]) for label in labels])   # (G, S)
    sizes = counts.loc[labels, "size"].to_numpy(float)
    observed_inside = counts.loc[labels, "sum"].to_numpy(float)
    pooled = inside.sum(axis=0) / sizes.sum()
    observed = float(observed_inside.sum() / sizes.sum())
    below = (inside / sizes[:, None] < floor).sum(axis=0)
    low, high = limits if limits is not None else (prob - band, prob + band)
    in_band = (pooled >= low - 1e-9) & (pooled <= high + 1e-9)
    return {"coverage_mean": float(pooled.mean()), "coverage_sd": float(pooled.std()),
            "coverage_range": [float(v) for v in np.quantile(pooled, [0.05, 0.95])],
            "groups_below_floor_mean": float(below.mean()), "floor": floor,
            "p_no_group_below_floor": float(np.mean(below == 0)),
            "p_in_band": float(np.mean(in_band)),
            "p_in_band_and_no_group_below_floor": float(np.mean(in_band & (below == 0))),
            "band": [low, high],
            "observed": observed,
            "p_as_low": float(np.mean(pooled <= observed + 1e-9)),
            "p_as_high": float(np.mean(pooled >= observed - 1e-9)),
            "p_too_many_outside": {
                label: float(np.mean(inside[i] <= observed_inside[i]))
                for i, label in enumerate(labels)}}


def draw_quantiles(draws: np.ndarray, probs) -> np.ndarray:
    """Quantiles over axis 0 of predictive draws in which saturated draws are ``inf``.

    Linear interpolation between two infinite draws (or inf times a zero weight) is NaN
    in numpy, so an interval whose upper end lies among saturated draws would read NaN
    and every point would count as outside it; there the quantile is the draw itself
    (an interval open upwards: ``hi = inf``, the point is inside)."""
    draws = np.where(np.isnan(draws), np.inf, draws)
    with np.errstate(invalid="ignore"):
        linear = np.quantile(draws, probs, axis=0)
    exact = np.quantile(draws, probs, axis=0, method="inverted_cdf")
    return np.where(np.isnan(linear), exact, linear)


def _binomial_tail(outside: int, n: int, p: float) -> float:
    """P(X >= outside) for X ~ Binomial(n, p)."""
    from scipy.stats import binom

    return float(binom.sf(outside - 1, n, p))


def group_calibration(points: pd.DataFrame, *, prob: float = 0.9,
                      reference: dict | None = None) -> list[dict]:
    """Per group: points and coverage (held in, held out), R^2 of the predictive median,
    the mean log residual per utilisation band, and ``flagged`` (a misfit) with its
    reasons in ``misfit``: the points outside the interval are too many for it (tail
    probability below ``FLAG_LEVEL``), R^2 < 0, a mean log residual at high load beyond
    ``HIGH_LOAD_RESIDUAL``, or (when ``reference`` says the pooled held-out coverage is
    too low for the model) under ``HELD_OUT_FLOOR`` of its held-out points inside. The
    tail is binomial, except for held-out points when ``reference``
    (:func:`coverage_reference`) gives the model's own, which keeps the points of one
    extrapolated curve together (``tail_from``: "binomial" or "model")."""
    tails = (reference or {}).get("p_too_many_outside", {})
    overconfident = (reference or {}).get("p_as_low", 1.0) < FLAG_LEVEL
    result = []
    for label, part in points.groupby("group", sort=False):
        entry = {"group": label}
        for name, subset in (("held_in", part.loc[~part["held_out"]]),
                             ("held_out", part.loc[part["held_out"]])):
            if subset.empty:
                continue
            n = len(subset)
            outside = int((~subset["inside"]).sum())
            own = name == "held_out" and label in tails
            entry[name] = {"points": n, "coverage": float(subset["inside"].mean()),
                           "median_relative_width": median_relative_width(subset),
                           "r2": r_squared(subset["observed"], subset["predicted"]),
                           "p_too_many_outside": (tails[label] if own else
                                                  _binomial_tail(outside, n, 1.0 - prob)),
                           "tail_from": "model" if own else "binomial"}
            if name == "held_in" and "pit_loo" in subset:
                entry[name].update(_left_out_coverage(subset, prob))
        pattern = {}
        for lo, hi, name in PATTERN_BANDS:
            band = part.loc[(part["utilisation"] >= lo) & (part["utilisation"] < hi)]
            if len(band):
                pattern[name] = float(band["log_residual"].mean())
        entry["residual_by_utilisation"] = pattern
        reasons = []
        for name in ("held_in", "held_out"):
            if name not in entry:
                continue
            part_entry, words = entry[name], name.replace("_", "-")
            outside = round(part_entry["points"] * (1.0 - part_entry["coverage"]))
            if part_entry["p_too_many_outside"] < FLAG_LEVEL:
                reasons.append(f"{outside} of {part_entry['points']} {words} points outside")
            elif (name == "held_out" and overconfident
                  and part_entry["coverage"] < HELD_OUT_FLOOR):
                reasons.append(f"{part_entry['coverage']:.0%} of {part_entry['points']} "
                               f"{words} points inside")
            if part_entry["r2"] < 0:
                reasons.append(f"{words} R^2 {part_entry['r2']:.2f}")
        high = pattern.get("high")
        if high is not None and abs(high) > HIGH_LOAD_RESIDUAL:
            reasons.append(f"high-load residual {high:+.0%}")
        entry["misfit"] = reasons
        entry["flagged"] = bool(reasons)
        result.append(entry)
    return result


def median_relative_width(points: pd.DataFrame) -> float | None:
    """Median over points of (hi - lo)/median of their predictive intervals: how wide the
    answers are, next to how often they cover (an interval open upwards counts as
    infinitely wide). None without points."""
    if points.empty:
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        width = ((points["hi"] - points["lo"]) / points["predicted"]).to_numpy(float)
    width = np.where(np.isnan(width), np.inf, width)
    return float(np.median(width))


def pooled_coverage(points: pd.DataFrame, prob: float = 0.9) -> dict:
    """Coverage of held-in and held-out points pooled over groups (held in: in sample
    and left out one at a time, ``coverage_loo``)."""
    out = {}
    for name, subset in (("held_in", points.loc[~points["held_out"]]),
                         ("held_out", points.loc[points["held_out"]])):
        if len(subset):
            out[name] = {"points": int(len(subset)), "coverage": float(subset["inside"].mean()),
                         "median_relative_width": median_relative_width(subset)}
            if name == "held_in" and "pit_loo" in subset:
                out[name].update(_left_out_coverage(subset, prob))
    return out
