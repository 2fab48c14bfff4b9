"""The posterior predictive check of each latency summary a ``tails`` fit has a law of
(p50, p99, TTFT and ITL percentiles): every point a new report of its own request count,
checked as the mean is (:mod:`bayesspec.checks.posterior_predictive`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayesspec.checks.calibration import (_check_rows, coverage_reference, draw_quantiles,
                                          group_calibration, inside_if_truth,
                                          pooled_coverage)


def summary_points(fit, extra: pd.DataFrame | None = None, *, prob: float = 0.9,
                   seed: int = 0, whole_runs: bool = True) -> dict:
    """:func:`~bayesspec.checks.posterior_predictive.predictive_points` for each latency
    summary the fit has a law of (the ``tails`` model's p50, p99, TTFT and ITL
    percentiles): {metric: (points, the reference draws of
    :func:`~bayesspec.checks.calibration.coverage_reference`)}; {} for a fit of the mean
    alone.

    A point's replicate is a new report of its own ``n_requests`` requests (the
    summary's order-statistic bias and scatter, :class:`~bayesspec.prediction.MetricCurve`);
    a held-out point that is a whole run from an idle server is that finite run's, as
    for the mean (``whole_runs`` False: the steady law's, as a fitted point). Only
    measured, positive summaries are checked, in groups with at least two of them (the
    others have no law but the prior's)."""
    from bayesspec.bayes.measurement import whole_run_requests
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
    :func:`~bayesspec.checks.posterior_predictive.predictive_check` gives them for the
    mean. {} for a fit of the mean alone."""
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
