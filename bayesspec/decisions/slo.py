"""Decisions against a service-level objective (SLO) on latency summaries.

An SLO is a set of targets, e.g. {"ttft_p99": 0.5, "itl_p99": 0.05} seconds. For each
configuration of a setup (the dense baseline and SD at each fitted (alpha, k)) and each
posterior draw, the rate up to which every target is met (its *goodput*) is the smallest
of the rates each summary's law allows (:meth:`bayesspec.prediction.Curve.rate_meeting`).
Over the draws that gives:

- the goodput with a credible interval;
- the highest rate at which the SLO holds with probability at least ``slo_prob`` (the
  ``1 - slo_prob`` quantile of the goodput draws): what to provision against;
- which target binds (how often each is the smallest);
- per rate: the probability each configuration meets the SLO, and the best of those
  that meet it with probability >= ``slo_prob`` (lowest expected mean latency), with the
  probability that it is the best of them.

The laws are the fit's per-configuration laws: a summary's law for each target
(``fit.law(selection, metric=...)``) and the mean law to rank configurations.
"""

from __future__ import annotations

import numpy as np

from bayesspec.errors import BadInput
from bayesspec.uncertainty import DEFAULT_PROB, uncertain

#: Probability with which a configuration must meet the SLO (goodput's usual reading).
DEFAULT_SLO_PROB = 0.9


def _configurations(law) -> list[tuple[float | None, int]]:
    """(alpha, k) of every configuration a per-configuration law holds, dense first."""
    keys = sorted(getattr(law, "configurations", {}),
                  key=lambda key: (key[1], -1.0 if key[0] is None else key[0]))
    return ([(None, 0)] if law.has_dense else []) + list(keys)


def _name(alpha, k) -> str:
    if k == 0:
        return "dense (k = 0)"
    return f"k = {k}" if alpha is None else f"k = {k}, alpha {alpha:g}"


def slo_decision(laws: dict, mean_law, targets: dict[str, float], rps, *,
                 slo_prob: float = DEFAULT_SLO_PROB, prob: float = DEFAULT_PROB,
                 ranked_by: str = "mean") -> dict:
    """The SLO document of one setup.

    ``laws``: metric -> :class:`~bayesspec.prediction.Law` of that latency summary for
    the setup (one per target); ``mean_law``: the setup's mean-latency law (ranks the
    configurations that meet the SLO; for a fit without a mean, the law of the summary
    ``ranked_by`` names, e.g. ``p50``); ``rps``: the rates at which to choose.
    """
    if not targets:
        raise BadInput("give at least one SLO target (e.g. --ttft-p99 0.5)", argument="targets")
    for metric, target in targets.items():
        if not np.isfinite(target) or target <= 0:
            raise BadInput(f"SLO target for {metric} must be a positive number of seconds, "
                           f"got {target}", argument="targets")
    if not 0.5 <= slo_prob < 1:
        raise BadInput(f"the SLO probability must be within [0.5, 1), got {slo_prob}",
                       argument="slo_prob")
    rps = np.asarray(rps, dtype=float)
    configurations = _configurations(mean_law)
    if not configurations:
        raise BadInput(f"the fit has no configuration of '{mean_law.label}' to judge")
    metrics = list(targets)
    entries, goodputs, means, fitted_max = [], [], [], []
    for alpha, k in configurations:
        curves = [laws[m].curve(alpha, k) for m in metrics]
        allowed = np.stack([curve.rate_meeting(targets[m]) for curve, m in zip(curves, metrics)])
        fitted = min(curve.rps_fitted_max for curve in curves)
        goodput = allowed.min(axis=0)                                  # (S,)
        binding = np.bincount(allowed.argmin(axis=0), minlength=len(metrics)) / goodput.size
        provisioned = float(np.quantile(goodput, 1.0 - slo_prob))
        beyond = bool(np.isfinite(fitted) and provisioned > fitted)
        entries.append({
            "k": int(k), "alpha": None if alpha is None else float(alpha),
            "configuration": _name(alpha, k),
            "goodput_rps": uncertain(goodput, prob),
            "rps_meeting_slo": provisioned,
            "p_meets_at_zero_load": float(np.mean(goodput > 0)),
            "binding": {m: float(share) for m, share in zip(metrics, binding)},
            # Beyond the highest rate the configuration was fitted on (its own curves:
            # a goodput compares no other), the answer is the law's extrapolation: its
            # interval is too narrow there (docs/findings/tail-laws.md, "SLO goodput
            # against the simulator's truth", measured 2026-12-02).
            "extrapolated": beyond,
            "rps_fitted_max": None if np.isnan(fitted) else float(fitted),
            # the same mark under its older name
            "beyond_fitted": beyond,
        })
        goodputs.append(goodput)
        fitted_max.append(fitted)
        means.append(mean_law.curve(alpha, k).latency(rps))            # (S, R)
    goodputs = np.stack(goodputs)                                      # (C, S)
    means = np.stack(means)                                            # (C, S, R)
    by_rate = []
    for j, rate in enumerate(rps):
        meets = np.mean(goodputs >= rate, axis=1)                      # (C,)
        feasible = np.flatnonzero(meets >= slo_prob)
        # The answer is measured as far as the configuration chosen was fitted; "none
        # meets it" judges every configuration, so as far as the least fitted one was.
        chosen = None
        row = {"rps": float(rate), "extrapolated": False,
               "p_meets": {_name(*configurations[c]): float(meets[c])
                           for c in range(len(configurations))},
               "k": None, "alpha": None, "configuration": None, "p_best": None}
        if feasible.size:
            latency = means[feasible, :, j]                            # (F, S)
            with np.errstate(invalid="ignore"):
                expected = np.mean(np.minimum(latency, 1e12), axis=1)
            best = int(feasible[np.argmin(expected)])
            alpha, k = configurations[best]
            winner = np.argmin(np.where(np.isfinite(latency), latency, np.inf), axis=0)
            row.update(k=int(k), alpha=None if alpha is None else float(alpha),
                       configuration=_name(alpha, k),
                       p_best=float(np.mean(feasible[winner] == best)))
            chosen = best
        tops = np.asarray(fitted_max if chosen is None else [fitted_max[chosen]], float)
        tops = tops[np.isfinite(tops)]
        row["extrapolated"] = bool(tops.size and rate > tops.min())
        row["rps_fitted_max"] = float(tops.min()) if tops.size else None
        by_rate.append(row)
    baseline = fitted_max[0] if fitted_max else float("nan")
    baseline = float(baseline) if np.isfinite(baseline) else None
    # rps_fitted_max: the first configuration's (the dense baseline's) highest fitted
    # rate; rps_measured_max: the same number under its older name
    return {"setup": mean_law.label, "slo": {m: float(t) for m, t in targets.items()},
            "slo_prob": float(slo_prob), "configurations": entries, "best_by_rps": by_rate,
            "rps_fitted_max": baseline, "rps_measured_max": baseline,
            "ranked_by": ranked_by}
