"""Does a fitted law describe its own data, and the rates it was not fitted on?

``predictive_points``: every point of a fit (and optionally held-out points) against its
group's posterior predictive distribution of a new measured mean latency: the interval,
whether the point is inside, its utilisation and its log residual.
``group_calibration``: per group, the share inside and a flag when more points fall
outside than the interval allows (a binomial tail at ``FLAG_LEVEL``), plus the residual
pattern along utilisation (the law's systematic misfit).
``loo_pit``: each fitted point's predictive PIT as if it had been left out (PSIS). The
in-sample share inside an interval asks a curve about points it has already followed: a
model with p effective parameters per n points covers about P(|Z| < z sqrt((1+h)/(1-h))),
h = p/n, even when it is exactly right (0.99 at h = 0.5 for a nominal 0.9), so it cannot
show a flexible model's calibration; the left-out share can.
``fold_check``: the exact version of that by refits: interleaved folds of every group's
rates, each refitted without its fold and asked about it.
``rate_holdout``: fit on each group's lower rates only and predict the higher ones, the
question a user extrapolating from a light load test asks.
``summary_points`` / ``summary_check``: the same for each latency summary a ``tails``
fit has a law of (each point a new report of its own request count).
``coverage_reference``: the held-out coverage a model exactly right would give on the
same points (its own joint predictive draw taken as the truth). The rates one curve is
extrapolated to share its error, so their misses come together: the pooled share
scatters more than a binomial says and a group's tail is the model's, not 0.1^k.

Pure consumers of the prediction contract (``Fit.group_curve``, the model's
``metric_curve``); no model names.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

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


def predictive_points(fit, extra: pd.DataFrame | None = None, *, prob: float = 0.9,
                      seed: int = 0, reference: bool = False):
    """One row per fitted point (``held_out`` False) and per row of ``extra`` whose group
    the fit has (``held_out`` True): group, rps, observed, predictive median and interval,
    ``inside``, ``utilisation`` (RPS x posterior median C2 the point feels), ``log_residual``
    (log observed - log predictive median) and ``pit`` (share of predictive draws below the
    observation: uniform when the model is calibrated).

    ``reference``: also return, per group with held-out rows, how many of them would
    fall inside their intervals if the truth were predictive draw s (shape (S,), the same
    posterior draw s for every group): the reference distribution of
    :func:`coverage_reference`. Returns (points, that dict) then."""
    from bayesspec.bayes.base import measurement_log_se, run_spread, whole_run_requests

    rng = np.random.default_rng(seed)
    rows = _check_rows(fit, extra)
    labels = fit.groups["label"].tolist()
    tail = (1.0 - prob) / 2.0
    out, inside_by_draw = [], {}
    for g, label in enumerate(labels):
        members = rows.loc[rows["group"] == label]
        if members.empty:
            continue
        curve = fit.group_curve(g)
        rps = members["rps"].to_numpy(float)
        observed = members["latency_mean_s"].to_numpy(float)
        # Every draw: the curve's parameters, its noise and these arrays must agree in
        # length (a cap at 4000 broke every fit of 4 chains x 2000 draws).
        # A held-out point is a new load test: where it is a whole run from an idle
        # server, predicted as one of its own request count (fill, drain, and a finite
        # queue near the ceiling); a fitted point as the likelihood has it, the steady law.
        held = members["held_out"].to_numpy(bool)
        requests = np.where(held, whole_run_requests(members), np.nan)
        # a fitted point's replicate is the fit's own likelihood of it (with the load
        # term bounded by its measurement where the fit's was: noise_load_at measured)
        draws = curve.predictive(rps, rng, measurement_log_se(members),
                                 run_requests=requests,
                                 measured=np.where(held, np.nan, observed),
                                 run_spread=run_spread(members))
        mean_curve = curve.latency(rps)
        # how far up its ceiling each point sits (RPS*C2 for eq. (1))
        utilisation = curve.utilisation(rps, mean_curve)
        lo, median, hi = draw_quantiles(draws, [tail, 0.5, 1.0 - tail])
        if reference and held.any():
            inside_by_draw[label] = inside_if_truth(draws[:, held], lo[held], hi[held])
        out.append(pd.DataFrame({
            "group": label, "rps": rps, "observed": observed, "predicted": median,
            "lo": lo, "hi": hi, "inside": (lo <= observed) & (observed <= hi),
            "held_out": members["held_out"].to_numpy(bool),
            "utilisation": utilisation,
            "log_residual": np.log(observed) - np.log(median),
            "pit": np.mean(draws < observed[None, :], axis=0),
            **_left_out_pit(curve, rps, observed, members, draws)}))
    points = pd.concat(out, ignore_index=True) if out else pd.DataFrame()
    return (points, inside_by_draw) if reference else points


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


def summary_points(fit, extra: pd.DataFrame | None = None, *, prob: float = 0.9,
                   seed: int = 0, whole_runs: bool = True) -> dict:
    """:func:`predictive_points` for each latency summary the fit has a law of (the
    ``tails`` model's p50, p99, TTFT and ITL percentiles): {metric: (points, the
    reference draws of :func:`coverage_reference`)}; {} for a fit of the mean alone.

    A point's replicate is a new report of its own ``n_requests`` requests (the
    summary's order-statistic bias and scatter, :class:`~bayesspec.prediction.MetricCurve`);
    a held-out point that is a whole run from an idle server is that finite run's, as
    for the mean (``whole_runs`` False: the steady law's, as a fitted point). Only
    measured, positive summaries are checked, in groups with at least two of them (the
    others have no law but the prior's)."""
    from bayesspec.bayes.base import whole_run_requests
    from bayesspec.data.schema import METRIC_COLUMNS

    model = fit.model()
    rng = np.random.default_rng(seed)
    rows = _check_rows(fit, extra)
    tail = (1.0 - prob) / 2.0
    result = {}
    for metric in model.metrics(fit):
        column = METRIC_COLUMNS[metric]
        if column not in rows:
            continue
        out, inside_by_draw = [], {}
        for g, label in enumerate(fit.groups["label"]):
            if int(fit.groups[f"observed_{metric}"].iloc[g]) < 2:
                continue
            members = rows.loc[rows["group"] == label]
            observed = pd.to_numeric(members[column], errors="coerce").to_numpy(float)
            keep = np.isfinite(observed) & (observed > 0)
            if not keep.any():
                continue
            members, observed = members.loc[keep], observed[keep]
            curve = model.metric_curve(fit, g, metric)
            rps = members["rps"].to_numpy(float)
            held = members["held_out"].to_numpy(bool)
            requests = (pd.to_numeric(members["n_requests"], errors="coerce").to_numpy(float)
                        if "n_requests" in members else np.full(len(members), np.nan))
            runs = np.where(held & whole_runs, whole_run_requests(members), np.nan)
            # one point at a time: each its own request count (all columns share the
            # posterior draw, so a group's points stay one curve's)
            draws = np.column_stack([
                curve.predictive(rps[i:i + 1], rng,
                                 n_requests=requests[i] if np.isfinite(requests[i]) else None,
                                 run_requests=runs[i:i + 1])[:, 0]
                for i in range(len(rps))])
            lo, median, hi = draw_quantiles(draws, [tail, 0.5, 1.0 - tail])
            if held.any():
                inside_by_draw[label] = inside_if_truth(draws[:, held], lo[held], hi[held])
            with np.errstate(invalid="ignore", divide="ignore"):
                law = curve.latency(rps)
                utilisation = curve.utilisation(rps, law)
            out.append(pd.DataFrame({
                "group": label, "rps": rps, "observed": observed, "predicted": median,
                "lo": lo, "hi": hi, "inside": (lo <= observed) & (observed <= hi),
                "held_out": held, "utilisation": utilisation,
                "log_residual": np.log(observed) - np.log(median),
                "pit": np.mean(draws < observed[None, :], axis=0)}))
        if out:
            result[metric] = (pd.concat(out, ignore_index=True), inside_by_draw)
    return result


def summary_check(fit, extra: pd.DataFrame | None = None, *, prob: float = 0.9,
                  seed: int = 0) -> dict:
    """Per latency summary of a ``tails`` fit: pooled coverage held in and held out (with
    the reference of a model exactly right and how many held-out intervals are open
    upwards, an answer past the law's pole) and per-group calibration, as
    :func:`predictive_check` gives them for the mean. {} for a fit of the mean alone."""
    document = {}
    for metric, (points, inside_by_draw) in summary_points(fit, extra, prob=prob,
                                                           seed=seed).items():
        reference = coverage_reference(points, inside_by_draw, prob=prob)
        pooled = pooled_coverage(points, prob)
        if "held_out" in pooled:
            held_out = points.loc[points["held_out"]]
            pooled["held_out"]["open_upwards"] = int(np.sum(~np.isfinite(held_out["hi"])))
            if reference:
                pooled["held_out"]["reference"] = reference
        document[metric] = {"pooled": pooled,
                            "groups": group_calibration(points, prob=prob,
                                                        reference=reference),
                            "_points": points}
    return document


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
    :func:`predictive_points` with ``reference=True``).

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


def _left_out_pit(curve, rps, observed, members, draws) -> dict:
    """``pit_loo`` and ``pareto_k`` of the fitted rows of one group (NaN on held-out rows,
    which the fit never saw: their plain ``pit`` is already out of sample)."""
    from bayesspec.bayes.base import measurement_log_se, run_spread

    fitted = ~members["held_out"].to_numpy(bool)
    pit = np.full(len(rps), np.nan)
    k = np.full(len(rps), np.nan)
    if fitted.any():
        # the fit's own likelihood of each point: the steady law, its bounded load term
        # and, where the fit has one, the sweep's run effect
        centre, sigma = curve.measurement(rps, measurement_log_se(members),
                                          measured=np.where(fitted, observed, np.nan),
                                          run_spread=run_spread(members))
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            log_likelihood = curve.noise.log_density(
                np.log(observed)[None, :] - np.log(centre), sigma)
        pit[fitted], k[fitted] = loo_pit(log_likelihood[:, fitted], draws[:, fitted],
                                         observed[fitted])
    return {"pit_loo": pit, "pareto_k": k}


def loo_pit(log_likelihood: np.ndarray, draws: np.ndarray, observed: np.ndarray):
    """Leave-one-out PIT of each observation by Pareto-smoothed importance sampling.

    ``log_likelihood`` (S, R): log density of observation r under posterior draw s;
    ``draws`` (S, R): a predictive draw of a new observation per posterior draw (saturated
    draws ``inf``); ``observed`` (R,). Weighting draw s by 1/p(y_r | s) turns the
    posterior into the posterior without y_r; the PIT is the weighted share of predictive
    draws below y_r. Returns (pit (R,), Pareto k (R,)); above k = 0.7 the weights are
    unreliable for that point (a refit, :func:`fold_check`, is then the honest check)."""
    from arviz_stats.base.array import array_stats

    # A draw past its ceiling at a point gives it zero likelihood: an infinite weight
    # without the point. A floor 20 below the point's least finite value keeps the
    # weights finite (1e10 made every other weight underflow to one value, and PSIS
    # fails on a tail of equal values); such a point's Pareto k then says it is unreliable.
    finite = np.isfinite(log_likelihood)
    least = np.min(np.where(finite, log_likelihood, np.inf), axis=0)
    floor = np.where(np.isfinite(least), least - 20.0, -1e3)
    log_likelihood = np.where(finite, log_likelihood, floor[None, :])
    # arviz_stats takes the log-likelihood and returns the log of weights 1/p(y_r | s).
    try:
        log_weights, k = array_stats.psislw(log_likelihood.T, axis=-1)      # (R, S)
    except ValueError:
        # PSIS refuses a tail of equal values (many draws at the floor). Point by point;
        # a point it cannot weight gets no left-out PIT and an infinite k (a refit,
        # fold_check, is the honest check there).
        log_weights = np.full(log_likelihood.T.shape, np.nan)
        k = np.full(log_likelihood.shape[1], np.inf)
        for r in range(log_likelihood.shape[1]):
            try:
                log_weights[r], k[r] = array_stats.psislw(log_likelihood[:, r], axis=-1)
            except ValueError:
                continue
    weights = np.exp(log_weights - log_weights.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    below = np.asarray(draws).T < np.asarray(observed, dtype=float)[:, None]
    return (weights * below).sum(axis=1), np.asarray(k, dtype=float)


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
    from bayesspec.checks import r_squared

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


def _left_out_coverage(subset: pd.DataFrame, prob: float) -> dict:
    """Share of points whose leave-one-out PIT lies in the central ``prob`` (each point's
    interval as if it had not been fitted) and how many have Pareto k > 0.7."""
    tail = (1.0 - prob) / 2.0
    pit = subset["pit_loo"].to_numpy(float)
    return {"coverage_loo": float(np.mean((tail <= pit) & (pit <= 1.0 - tail))),
            "pareto_k_high": int(np.sum(subset["pareto_k"].to_numpy(float) > 0.7))}


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


def split_by_rate(data: pd.DataFrame, fraction: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rows at or below ``fraction`` of their group's highest unsaturated rate, and the
    other unsaturated rows. Groups are the model's (``data.assign_groups`` on the included rows)."""
    from bayesspec.data import assign_groups, included
    from bayesspec.errors import BadInput

    if not 0.0 < fraction < 1.0:
        raise BadInput(f"the rate fraction must be in (0, 1), got {fraction}",
                       argument="fraction")
    rows = included(data)
    _, index = assign_groups(rows)
    top = pd.Series(rows["rps"].to_numpy(float)).groupby(index).transform("max").to_numpy()
    low = rows["rps"].to_numpy(float) <= fraction * top
    # Saturated rows go too: a user extrapolating from a light load test has none.
    return data.loc[rows.index[low]], data.loc[rows.index[~low]]


def predictive_check(fit, extra: pd.DataFrame | None = None, *, prob: float = 0.9,
                     seed: int = 0) -> dict:
    """The posterior predictive check of a fit (and of held-out rows ``extra``): pooled
    and per-group coverage, R^2, residual pattern, flagged groups, a verdict line, and the
    per-point table under ``_points`` (for the plot). A fit with latency summaries
    (``tails``) adds ``summaries`` (:func:`summary_check`) and their tables under
    ``_summary_points``; one of percentiles alone is checked on its summaries only, the
    first standing where the mean's check would."""
    summaries = summary_check(fit, extra, prob=prob, seed=seed)
    summary_table = {metric: entry.pop("_points") for metric, entry in summaries.items()}
    model = fit.model()
    if summaries and not model.has_mean(fit):
        # a file of percentiles alone: its summaries are all there is to check
        return _summaries_only_check(fit, summaries, prob, summary_table)
    points, inside_by_draw = predictive_points(fit, extra, prob=prob, seed=seed,
                                               reference=True)
    reference = coverage_reference(points, inside_by_draw, prob=prob)
    groups = group_calibration(points, prob=prob, reference=reference)
    pooled = pooled_coverage(points, prob)
    if reference:
        pooled["held_out"]["reference"] = reference
    flagged = [g["group"] for g in groups if g["flagged"]]
    verdict = check_verdict(groups, reference, prob)
    parts = [f"{name.replace('_', '-')} {v['coverage']:.0%} of {v['points']}"
             + (f" ({v['coverage_loo']:.0%} left out one at a time)" if "coverage_loo" in v
                else "")
             + (f" (a model exactly right: {v['reference']['coverage_mean']:.0%}, "
                f"{v['reference']['coverage_range'][0]:.0%}-"
                f"{v['reference']['coverage_range'][1]:.0%} in 90% of cases)"
                if "reference" in v else "")
             for name, v in pooled.items()]
    document = {"model": fit.model_name, "prob": prob, "pooled": pooled,
                "inside": ", ".join(parts), "groups": groups, "flagged": flagged,
                "verdict": verdict, "convergence": fit.diagnostics["status"],
                "_points": points}
    if summaries:
        document["summaries"] = summaries
        document["_summary_points"] = summary_table
        document["verdict"] = _with_summaries_verdict(verdict, summaries)
    return document


def _with_summaries_verdict(verdict: str, summaries: dict, skip: str | None = None) -> str:
    """``verdict`` followed by a sentence naming, per summary (but ``skip``), the groups
    it flags and a held-out coverage a right model would rarely give."""
    parts = []
    for metric, entry in summaries.items():
        if metric == skip:
            continue
        flagged = [f"{g['group']} ({', '.join(g['misfit'])})" for g in entry["groups"]
                   if g["flagged"]]
        words = []
        if flagged:
            words.append(f"misfit in {len(flagged)} of {len(entry['groups'])} groups: "
                         + "; ".join(flagged[:4]) + (" ..." if len(flagged) > 4 else ""))
        held_out = _reference_verdict(entry["pooled"].get("held_out", {}).get("reference")
                                      or {})
        if held_out:
            words.append(held_out.removeprefix("Held out: ").rstrip("."))
        if words:
            parts.append(f"{metric}: {'; '.join(words)}")
    if not parts:
        return verdict
    return f"{verdict.rstrip('.')}. Summaries: " + ". ".join(parts) + "."


def _summaries_only_check(fit, summaries: dict, prob: float, summary_table: dict) -> dict:
    """:func:`predictive_check`'s document for a fit with summary laws and no mean law:
    the first summary's pooled and per-group entries stand where the mean's would."""
    first = next(iter(summaries.values()))
    flagged = [g["group"] for g in first["groups"] if g["flagged"]]
    reference = first["pooled"].get("held_out", {}).get("reference")
    return {"model": fit.model_name, "prob": prob, "pooled": first["pooled"],
            "inside": summary_line(next(iter(summaries)), first["pooled"]),
            "groups": first["groups"], "flagged": flagged,
            "verdict": _with_summaries_verdict(
                f"{next(iter(summaries))}: {check_verdict(first['groups'], reference, prob)}",
                summaries, skip=next(iter(summaries))),
            "convergence": fit.diagnostics["status"], "summaries": summaries,
            "_points": next(iter(summary_table.values())),
            "_summary_points": summary_table}


def summary_line(metric: str, pooled: dict) -> str:
    """One line of a summary's pooled coverage, held in and held out (with a model exactly
    right's range and the intervals open upwards)."""
    parts = []
    for name, v in pooled.items():
        text = f"{name.replace('_', '-')} {v['coverage']:.0%} of {v['points']}"
        if "reference" in v:
            text += (f" (a model exactly right: {v['reference']['coverage_mean']:.0%}, "
                     f"{v['reference']['coverage_range'][0]:.0%}-"
                     f"{v['reference']['coverage_range'][1]:.0%} in 90% of cases)")
        if v.get("median_relative_width") is not None:
            text += f", median width {v['median_relative_width']:.2f} of the value"
        if v.get("open_upwards"):
            text += f", {v['open_upwards']} open upwards (past the law's pole)"
        parts.append(text)
    return f"{metric}: " + "; ".join(parts)


def check_verdict(groups: list[dict], reference: dict | None, prob: float) -> str:
    """One verdict from the groups' flags and the pooled held-out coverage, its parts
    never at odds: a group is named with its reasons, and the pooled sentence says
    whether it adds to them."""
    flagged = [g for g in groups if g["flagged"]]
    held_out = _reference_verdict(reference or {})
    if flagged:
        named = "; ".join(f"{g['group']} ({', '.join(g['misfit'])})" for g in flagged[:6])
        verdict = (f"MISFIT in {len(flagged)} of {len(groups)} groups: {named}"
                   + (" ..." if len(flagged) > 6 else "") + ". The law does not describe "
                   "these sweeps there (look for points past the ceiling that the data do "
                   "not mark: --max-rps sets them aside); for dense sweeps try a model "
                   "that admits misfit (--model dense-spline, whose intervals widen above "
                   "the measured rates, or dense-discrepancy, dense-roofline) and compare "
                   "by PSIS-LOO (compare-models).")
        return f"{verdict} {held_out}" if held_out else verdict
    if held_out:
        return f"No group misfits on its own points, but pooled: {held_out}"
    return (f"no group misfits: each group's points fall inside their {prob:.0%} "
            "intervals as often as the intervals allow, with R^2 >= 0 and a mean "
            f"residual within {HIGH_LOAD_RESIDUAL:.0%} at high load")


def _reference_verdict(reference: dict) -> str:
    """A sentence when the pooled held-out coverage is one a right model would rarely
    give (tail probability below ``FLAG_LEVEL``), either way."""
    if not reference:
        return ""
    where = (f"{reference['observed']:.0%} of the held-out points inside, where a model "
             f"exactly right gives {reference['coverage_mean']:.0%} "
             f"({reference['coverage_range'][0]:.0%}-{reference['coverage_range'][1]:.0%})")
    if reference["p_as_low"] < FLAG_LEVEL:
        return (f"Held out: {where}: the intervals are too narrow above the fitted "
                "rates (overconfident extrapolation).")
    if reference["p_as_high"] < FLAG_LEVEL:
        return (f"Held out: {where}: the intervals are wider than the data need "
                "(conservative extrapolation).")
    return ""


def rate_holdout_check(data: pd.DataFrame, *, model: str = "dense", fraction: float = 0.6,
                       prob: float = 0.9, settings=None, config: dict | None = None,
                       catalog=None, seed: int = 0):
    """Fit ``model`` on each group's rates up to ``fraction`` of its highest measured
    rate, check it on those points and predict the rest. Returns (fit, document)."""
    from bayesspec.bayes.workflow import fit as fit_model

    from bayesspec.data import EXTRA_GROUP_COLUMNS, GROUP_COLUMNS, group_label, row_group_labels

    low, high = split_by_rate(data, fraction)
    result = fit_model(low, model, settings=settings, config=config, catalog=catalog)
    document = predictive_check(result, high, prob=prob, seed=seed)
    document["fraction"] = fraction
    # A one-point sweep has nothing at or below a fraction of its top rate: it cannot be
    # fitted here, so it is named rather than silently left out.
    columns = [c for c in result.groups.columns if c in high.columns
               and c in set(GROUP_COLUMNS) | set(EXTRA_GROUP_COLUMNS)]
    unfitted = sorted({group_label(row, columns) for row, known in zip(
        high.to_dict("records"), row_group_labels(high, result.groups)) if not known})
    if unfitted:
        document["unfitted_groups"] = unfitted
        document["verdict"] = (f"{document['verdict'].rstrip('.')}. {len(unfitted)} "
                               f"group(s) had no rate at or below {fraction:g} of their "
                               "top rate and were not checked: " + ", ".join(unfitted[:6]))
    return result, document


def interleaved_folds(rps, group_index, folds: int) -> np.ndarray:
    """A fold number per point: each group's points in order of rate go to folds
    g, g+1, ... (mod ``folds``), so a fold takes every ``folds``-th rate of every group
    (never two neighbours, the top and bottom rates spread over folds)."""
    frame = pd.DataFrame({"rps": np.asarray(rps, dtype=float),
                          "group": np.asarray(group_index, dtype=int)})
    rank = frame.groupby("group")["rps"].rank(method="first").to_numpy(int) - 1
    return (rank + frame["group"].to_numpy(int)) % folds


def fold_check(data: pd.DataFrame, *, model: str = "dense", folds: int = 5,
               prob: float = 0.9, settings=None, config: dict | None = None, catalog=None,
               seed: int = 0, workers: int = 1, scheduler=None, progress: bool = False) -> dict:
    """Held-in coverage by refits: every group's rates dealt into ``folds`` interleaved
    folds (:func:`interleaved_folds`); the model, compiled once with a ``fit_mask``, is
    refitted without each fold and its 90% (``prob``) predictive intervals are asked about
    the left-out points. Unlike the in-sample share this does not reward a curve for
    following the points it was fitted to, and unlike PSIS it has no Pareto-k limit.
    Returns pooled and per-group coverage, each fold's convergence, and ``_points``."""
    import time
    import uuid
    from dataclasses import replace

    from bayesspec.bayes import get_model_class
    from bayesspec.checks import _holdout_model
    from bayesspec.errors import BadInput
    from bayesspec.inference.fitfile import Fit
    from bayesspec.inference import settings_for
    from bayesspec.outputs import log
    from bayesspec.inference.parallel import Recipe, sample_many

    if folds < 2:
        raise BadInput(f"needs at least 2 folds, got {folds}", argument="folds")
    config = {**(config or {}), "holdout_mask": True}
    latency_model = get_model_class(model)(config, catalog=catalog)
    if "holdout_mask" not in latency_model.default_config:
        raise BadInput(f"the {model} model cannot refit without some of its points "
                       "(no fit mask)", argument="model")
    latency_model.build(data)  # first: a build may choose the starts by the data
    settings = settings_for(latency_model, settings)
    inputs = latency_model.inputs
    fold_of_point = interleaved_folds(inputs.rows["rps"], inputs.group_index, folds)
    values = latency_model.data_values(data)
    recipe = Recipe(f"folds-{uuid.uuid4().hex}", _holdout_model, (model, config, data, catalog))
    started = time.perf_counter()
    log(f"{folds} refits, each without every {folds}th rate of every group...", progress)
    jobs = [({**values, "fit_mask": (fold_of_point != f).astype(float)},
             replace(settings, seed=(settings.seed or 0) + f, progress=False))
            for f in range(folds)]
    parts, per_fold = [], []
    for index, tree in sample_many(recipe, jobs, settings, workers=workers,
                                   scheduler=scheduler):
        if isinstance(tree, str):
            raise RuntimeError(f"sampling fold {index} failed: {tree}")
        fit = Fit.from_sampling(latency_model, data, tree)
        points = predictive_points(fit, prob=prob, seed=seed + index)
        points["fold"] = interleaved_folds(points["rps"], points["group"].map(
            {label: g for g, label in enumerate(fit.groups["label"])}), folds)
        left_out = points.loc[points["fold"] == index].drop(columns=["pit_loo", "pareto_k"])
        parts.append(left_out.assign(held_out=True))
        per_fold.append({"fold": index, "points": int(len(left_out)),
                         "coverage": float(left_out["inside"].mean()),
                         "convergence": fit.diagnostics["status"]})
        log(f"fold {len(per_fold)}/{folds}: {left_out['inside'].mean():.0%} of "
            f"{len(left_out)} inside, {time.perf_counter() - started:.0f} s", progress)
    points = pd.concat(parts, ignore_index=True)
    groups = [{"group": g["group"], **g["held_out"], "flagged": g["flagged"],
               "misfit": g["misfit"]}
              for g in group_calibration(points, prob=prob)]
    return {"model": model, "prob": prob, "folds": folds, "points": int(len(points)),
            "coverage": float(points["inside"].mean()),
            "groups": groups, "per_fold": sorted(per_fold, key=lambda f: f["fold"]),
            "seconds": round(time.perf_counter() - started, 1), "_points": points}
