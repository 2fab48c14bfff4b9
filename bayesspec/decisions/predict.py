"""Latency of one fitted group at new rates, with intervals (CONTRACT ``predict``)."""

from __future__ import annotations

import numpy as np

from bayesspec.uncertainty import DEFAULT_PROB, uncertain


def predict_group(fit, group: int, rps, *, prob: float = DEFAULT_PROB, seed: int = 0,
                  metric: str | None = None, n_requests: float | None = None,
                  whole_run: bool = False) -> dict:
    """The mean latency curve and a new measurement at each rate, for one group, by the
    fit's own law (eq. 1, its slot queue when the engine's cap is known, or eq. 4 for an
    MoE verifier); with ``metric`` (``p99``, ``ttft_p99``, ... of a tails fit) that
    summary's curve instead (the summary of every request at that rate), and a new load
    test's reported summary of ``n_requests`` requests per rate (None: the law's value
    with the fitted noise alone). With ``whole_run`` and ``n_requests``, the new
    measurement is a whole load test of that many requests from an idle server
    (:meth:`bayesspec.prediction.Curve.run_latency`: its fill and drain, and a finite
    queue past the ceiling), finite at every rate; the curve stays the steady law. Rates
    above the group's highest fitted rate (the highest that entered the fit; set-aside
    points do not count) are marked ``extrapolated``;
    ``p_saturated`` is the share of draws whose ceiling (1/C2, or the cap's throughput)
    lies at or below the rate."""
    rps = np.asarray(rps, dtype=float)
    run = n_requests if whole_run and n_requests is not None else None
    if metric is None or metric == "mean":
        metric, curve = "mean", fit.group_curve(group)
        observed = curve.predictive(rps, np.random.default_rng(seed), run_requests=run)
    else:
        curve = fit.model().metric_curve(fit, group, metric)
        observed = curve.predictive(rps, np.random.default_rng(seed), n_requests=n_requests,
                                    run_requests=run)
    mean = curve.latency(rps)
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
    top_or_none = top if np.isfinite(top) else None
    # rps_fitted_max: the highest rate the group's fit reached (the boundary of the
    # ``extrapolated`` marks); rps_measured_max: the same number under its older name
    document = {"group": fit.groups["label"].iloc[group], "metric": metric,
                "rps_fitted_max": top_or_none, "rps_measured_max": top_or_none,
                "ceiling_rps": uncertain(ceiling, prob),
                "ceiling_binding": curve.ceiling_binding, "points": points}
    if metric != "mean" or run is not None:
        document["n_requests"] = None if n_requests is None else float(n_requests)
    document["whole_run"] = run is not None
    return document
