"""Does a fitted law describe its own data? The posterior predictive check of a fit.

``predictive_points``: every point of a fit (and optionally held-out points) against its
group's posterior predictive distribution of a new measured mean latency: the interval,
whether the point is inside, its utilisation, its log residual and its PIT, in sample and
left out (:func:`bayesspec.checks.loo.loo_pit`).
``predictive_check``: pooled and per-group coverage
(:func:`bayesspec.checks.calibration.group_calibration`), the reference of a model
exactly right, the flagged groups (with those whose acceptance counters say they pool
more than one configuration) and one verdict; a ``tails`` fit's summaries
(:mod:`bayesspec.checks.summaries`) join it.

Pure consumers of the prediction contract (``Fit.group_curve``, the model's
``metric_curve``); no model names.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayesspec.checks.calibration import (FLAG_LEVEL, HIGH_LOAD_RESIDUAL, _check_rows,
                                          coverage_reference, draw_quantiles,
                                          group_calibration, inside_if_truth,
                                          pooled_coverage)
from bayesspec.checks.loo import _left_out_pit
from bayesspec.checks.summaries import summary_check, summary_line


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
    :func:`~bayesspec.checks.calibration.coverage_reference`. Returns (points, that
    dict) then."""
    from bayesspec.bayes.measurement import measurement_log_se, run_spread, whole_run_requests

    rng = np.random.default_rng(seed)
    rows = _check_rows(fit, extra)
    labels = fit.groups["label"].tolist()
    tail = (1.0 - prob) / 2.0
    out, inside_by_draw = [], {}
    for g, label in enumerate(labels):
        members = rows.loc[rows["group"] == label]
        if members.empty:
            continue
        # the check judges the law the data fitted: the limit the answers admit above
        # the top fitted rate (docs/ceilings.md) is a prior the data never touched
        curve = fit.group_curve(g, admit_unmeasured=False)
        rps = members["rps"].to_numpy(float)
        observed = members["latency_mean_s"].to_numpy(float)
        # Every draw: the curve's parameters, its noise and these arrays must agree in
        # length (a cap on the draws, at 4000 say, would break a fit of 4 chains x 2000).
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


def predictive_check(fit, extra: pd.DataFrame | None = None, *, prob: float = 0.9,
                     seed: int = 0) -> dict:
    """The posterior predictive check of a fit (and of held-out rows ``extra``): pooled
    and per-group coverage, R^2, residual pattern, flagged groups, a verdict line, and the
    per-point table under ``_points`` (for the plot). A fit with latency summaries
    (``tails``) adds ``summaries`` (:func:`~bayesspec.checks.summaries.summary_check`)
    and their tables under ``_summary_points``; one of percentiles alone is checked on
    its summaries only, the first standing where the mean's check would."""
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
    pooled_windows = flag_pooled_acceptance(fit, groups)
    flagged = [g["group"] for g in groups if g["flagged"]]
    verdict = _with_acceptance_verdict(check_verdict(groups, reference, prob),
                                       pooled_windows)
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
    pooled_windows = flag_pooled_acceptance(fit, first["groups"])
    flagged = [g["group"] for g in first["groups"] if g["flagged"]]
    reference = first["pooled"].get("held_out", {}).get("reference")
    verdict = f"{next(iter(summaries))}: {check_verdict(first['groups'], reference, prob)}"
    return {"model": fit.model_name, "prob": prob, "pooled": first["pooled"],
            "inside": summary_line(next(iter(summaries)), first["pooled"]),
            "groups": first["groups"], "flagged": flagged,
            "verdict": _with_acceptance_verdict(_with_summaries_verdict(
                verdict, summaries, skip=next(iter(summaries))), pooled_windows),
            "convergence": fit.diagnostics["status"], "summaries": summaries,
            "_points": next(iter(summary_table.values())),
            "_summary_points": summary_table}


def flag_pooled_acceptance(fit, groups: list[dict]) -> list[str]:
    """Add to each group entry with two or more counted windows of acceptance counters
    how far they disagree (``acceptance_counters``:
    :class:`~bayesspec.data.counters.AcceptanceSpread`), and flag the groups whose
    windows cannot be one configuration (a fit made before the reader refused such
    files, or from a table that did not go through it). Returns the flagged labels."""
    from bayesspec.data import acceptance_spread, row_group_labels

    spreads = acceptance_spread(fit.data, row_group_labels(fit.data, fit.groups))
    pooled = []
    for entry in groups:
        spread = spreads.get(entry["group"])
        if spread is None:
            continue
        entry["acceptance_counters"] = spread.as_dict()
        if not spread.pooled_ok:
            entry["pooling"] = f"acceptance counters disagree: {spread.sentence()}"
            entry["misfit"].append(entry["pooling"])
            entry["flagged"] = True
            pooled.append(entry["group"])
    return pooled


def _law_reasons(entry: dict) -> list[str]:
    """A group's misfit reasons that are the law's (not its pooling of configurations)."""
    return [reason for reason in entry["misfit"] if reason != entry.get("pooling")]


def _with_acceptance_verdict(verdict: str, pooled: list[str]) -> str:
    """``verdict`` led by what to do where groups pool windows of different acceptance."""
    if not pooled:
        return verdict
    named = "; ".join(pooled[:4]) + (" ..." if len(pooled) > 4 else "")
    return (f"NOT ONE CONFIGURATION: {len(pooled)} group{'s' if len(pooled) > 1 else ''} "
            f"pool{'' if len(pooled) > 1 else 's'} sweeps whose acceptance counters "
            f"disagree ({named}): one alpha stands for configurations that accept "
            "differently; set `alpha` per sweep and fit again. Latency: " + verdict)


def check_verdict(groups: list[dict], reference: dict | None, prob: float) -> str:
    """One verdict from the groups' flags and the pooled held-out coverage, its parts
    never at odds: a group is named with its reasons, and the pooled sentence says
    whether it adds to them."""
    flagged = [g for g in groups if _law_reasons(g)]
    held_out = _reference_verdict(reference or {})
    if flagged:
        named = "; ".join(f"{g['group']} ({', '.join(_law_reasons(g))})" for g in flagged[:6])
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
