"""The figure of an SLO decision: each target's latency summary against load, with every
configuration's fitted curve and the highest rate that meets the SLO."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from bayesspec.reporting.plots.common import (BAND_PROB, _fitted_line,
                                              _saturating_quantiles, k_colour)


def slo_plot(laws: dict, document: dict, *, fit=None, prob: float = BAND_PROB,
             points: int = 120):
    """Each SLO target's latency summary against load, one panel per target: every
    configuration's fitted curve (median and ``prob`` band) up to where it saturates, the
    fitted points (from ``fit``), the target (red), and each configuration's goodput at
    the document's SLO probability (a triangle on the rate axis; hollow where the
    document marks it ``extrapolated``, above that configuration's highest fitted rate).

    ``laws``: metric -> the setup's :class:`~bayesspec.prediction.Law` of that summary;
    ``document``: :func:`bayesspec.decisions.slo_decision`'s."""
    import pandas as pd

    from bayesspec.data.schema import METRIC_COLUMNS, metric_description

    metrics = list(document["slo"])
    fitted_top = document.get("rps_fitted_max", document.get("rps_measured_max"))
    data = fit.data if fit is not None else None
    if data is not None and "group" in data.columns and document.get("configurations"):
        # The line marks the end of the points drawn: the highest fitted rate of the
        # configurations shown (set-aside points, e.g. a throughput run, are not drawn).
        shown = {getattr(laws[metrics[0]].curve(entry["alpha"], entry["k"]), "group", "")
                 for entry in document["configurations"]}
        fitted = data.loc[data["group"].isin(shown) & ~data["excluded"].astype(bool), "rps"]
        if len(fitted):
            fitted_top = float(pd.to_numeric(fitted).max())
    rates = [row["rps"] for row in document["best_by_rps"]]
    top = max(rates + ([fitted_top] if fitted_top and np.isfinite(fitted_top) else [])) * 1.05
    grid = np.linspace(0.0, top, points)
    figure, axes = plt.subplots(1, len(metrics), figsize=(5.2 * len(metrics) + 0.6, 4.4),
                                layout="constrained", squeeze=False)
    for axis, metric in zip(axes[0], metrics):
        target = document["slo"][metric]
        highest = target
        for entry in document["configurations"]:
            k, alpha = entry["k"], entry["alpha"]
            curve = laws[metric].curve(alpha, k)
            colour = "black" if k == 0 else k_colour(k)
            lo, median, hi = _saturating_quantiles(curve.latency(grid), prob)
            axis.fill_between(grid, lo, np.minimum(hi, 1e6), color=colour, alpha=0.15, lw=0.6,
                              edgecolor=colour)
            axis.plot(grid, median, color=colour, lw=1.8, label=entry["configuration"])
            if data is not None and "group" in data.columns:
                column = METRIC_COLUMNS[metric]
                rows = data.loc[data["group"].eq(getattr(curve, "group", ""))
                                & ~data["excluded"].astype(bool)]
                values = (pd.to_numeric(rows[column], errors="coerce").to_numpy(float)
                          if column in rows.columns else np.array([]))
                if np.isfinite(values).any():
                    axis.scatter(pd.to_numeric(rows["rps"]), values, s=18, color=colour,
                                 edgecolor="white", lw=0.5, zorder=4)
                    highest = max(highest, float(np.nanmax(values)))
            beyond = bool(entry.get("extrapolated"))
            axis.plot([entry["rps_meeting_slo"]], [0], marker="^", ms=10, color=colour,
                      mfc="white" if beyond else colour, mew=1.6, clip_on=False, zorder=6,
                      transform=axis.get_xaxis_transform(),
                      gid="extrapolated" if beyond else "fitted")
        axis.axhline(target, color="tab:red", lw=1.6, ls="--", label=f"target {target:g} s")
        axis.set_ylim(0, max(1.6 * target, 1.1 * highest))
        axis.set_xlim(0, top)
        _fitted_line(axis, fitted_top)
        axis.set_xlabel("request rate (RPS)")
        axis.set_ylabel(f"{metric_description(metric)} (s)")
        axis.set_title(f"{metric_description(metric)} <= {target:g} s", fontsize=9)
    axes[0][0].legend(fontsize=8, loc="upper left")
    figure.suptitle(f"SLO: {document['setup']}", fontsize=11)
    figure.supxlabel(f"{prob:.0%} bands of the fitted curves; triangles on the rate axis: the "
                     f"highest rate meeting the SLO with P >= {document['slo_prob']:g} "
                     "(hollow: above that configuration's highest fitted rate, extrapolated)",
                     fontsize=8)
    return figure
