"""Figures of the checks of a fit: simulation-based calibration (rank ECDFs), held-out
predictions against what was measured, and the posterior predictive check per group."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from bayesspec.reporting.plots.common import BAND_PROB, _plain_log_axis, _wrap


def sbc_ecdf_plot(result, *, prob: float = 0.99, columns: int = 4, seed: int = 0):
    """Simulation-based calibration: rank ECDF minus uniform, one panel per coefficient.

    ``result`` is a :class:`bayesspec.checks.sbc.SBCResult`. The grey band is the simultaneous
    ``prob`` band of a uniform ECDF (the whole curve stays inside it with probability
    ``prob`` when the ranks are uniform); red panels hold coefficients rejected at the
    result's per-coefficient level. A curve above zero at the left means true values
    sit low in their posteriors everywhere (the posterior overestimates); above zero in
    the left half and below in the right means ranks pile at both ends (posteriors too
    narrow), the mirror image means posteriors too wide.
    """
    import textwrap

    from bayesspec.checks.ranks import ecdf_band

    ranks = np.asarray(result.ranks)
    n, count = ranks.shape
    band = ecdf_band(n, result.max_rank, prob=prob, seed=seed)
    share = band.counts(ranks) / n
    rows = math.ceil(count / columns)
    figure, axes = plt.subplots(rows, min(columns, count), squeeze=False, sharex=True,
                                figsize=(3.4 * min(columns, count), 2.7 * rows))
    z = np.concatenate([[0.0], band.z, [1.0]])
    lower = np.concatenate([[0.0], band.lower - band.z, [0.0]])
    upper = np.concatenate([[0.0], band.upper - band.z, [0.0]])
    for j, axis in enumerate(axes.ravel()):
        if j >= count:
            axis.set_visible(False)
            continue
        rejected = bool(result.rejected[j])
        axis.fill_between(z, lower, upper, step="post", color="0.85", lw=0)
        axis.step(z, np.concatenate([[0.0], share[j] - band.z, [0.0]]), where="post",
                  color="tab:red" if rejected else "tab:blue", lw=1.2)
        axis.axhline(0.0, color="0.4", lw=0.6)
        axis.set_title(f"{textwrap.fill(result.names[j], 44)}\np = {result.p_values[j]:.3f}",
                       fontsize=6.5,
                       color="tab:red" if rejected else "black")
        axis.tick_params(labelsize=7)
    for axis in axes[-1]:
        axis.set_xlabel("fractional rank", fontsize=8)
    figure.suptitle(f"SBC of the {result.model} model: {n} simulations, ranks "
                    f"0..{result.max_rank}, {prob:.0%} simultaneous band", fontsize=10)
    # Keep about half an inch above the panels for the title, whatever the figure's height.
    figure.tight_layout(rect=(0, 0, 1, 1 - 0.45 / figure.get_figheight()))
    return figure


def holdout_plot(points, *, prob: float = BAND_PROB, title: str = "leave-n-out"):
    """Held-out mean latency: predicted (with its predictive interval) vs observed, and
    the same as ratios to the prediction (latencies span decades: the ratio panel is
    where misses are visible). Log axes carry plain-number labels that never collide."""
    figure, (axis, ratio_axis) = plt.subplots(1, 2, figsize=(12.0, 5.4), layout="constrained")
    observed = points["observed_s"].to_numpy(float)
    predicted = points["predicted_s"].to_numpy(float)
    lo, hi = points["lo"].to_numpy(float), points["hi"].to_numpy(float)
    inside = points["inside"].to_numpy(bool)
    for mask, colour, label in ((inside, "tab:blue", f"inside its {prob:.0%} interval"),
                                (~inside, "tab:red", "outside")):
        if not mask.any():
            continue
        axis.errorbar(observed[mask], predicted[mask],
                      yerr=[np.clip(predicted - lo, 0, None)[mask],
                            np.clip(hi - predicted, 0, None)[mask]],
                      fmt="o", ms=3, lw=0.8, color=colour, alpha=0.7,
                      label=f"{label} ({mask.sum()})")
        ratio_axis.vlines(observed[mask], (lo / predicted)[mask], (hi / predicted)[mask],
                          color=colour, lw=0.8, alpha=0.5)
        ratio_axis.scatter(observed[mask], (observed / predicted)[mask], s=9, color=colour,
                           alpha=0.8)
    finite = np.concatenate([observed, predicted[np.isfinite(predicted)]])
    span = [finite.min() * 0.8, finite.max() * 1.25]
    axis.plot(span, span, color="black", lw=0.8, label="predicted = observed")
    axis.set_xlim(span)
    axis.set_ylim(span)
    ratio_axis.set_xlim(observed.min() * 0.8, observed.max() * 1.25)
    for a in (axis, ratio_axis):
        _plain_log_axis(a, "x")
        a.set_xlabel("observed mean latency (s)")
        a.grid(alpha=0.3)
        a.grid(alpha=0.12, which="minor")
    _plain_log_axis(axis, "y")
    axis.set_ylabel("predicted mean latency (s), held out")
    axis.legend(loc="upper left", fontsize=8)
    ratio_axis.axhline(1.0, color="black", lw=0.8)
    ratio_axis.set_ylabel(f"observed / predicted (lines: {prob:.0%} predictive interval)")
    figure.suptitle(f"{title}: {inside.mean():.0%} of {len(points)} held-out points inside "
                    f"their {prob:.0%} predictive interval", fontsize=10)
    return figure


def predictive_check_plot(points, calibration, *, prob: float = BAND_PROB,
                          per_figure: int = 16, quantity: str = "mean latency"):
    """Posterior predictive check per group: observed / predicted median against
    utilisation, with the predictive interval of each point as a band; held-out points
    (fitted on lower rates only) hollow. A flagged group is titled in red with "MISFIT"
    and its first reason. ``quantity``: what the points measure (a latency summary's
    description for a ``tails`` fit's)."""
    flags = {entry["group"]: entry for entry in calibration}
    labels = list(dict.fromkeys(points["group"]))
    figures = []
    for start in range(0, len(labels), per_figure):
        chunk = labels[start:start + per_figure]
        columns = min(4, len(chunk))
        rows_n = math.ceil(len(chunk) / columns)
        figure, axes = plt.subplots(rows_n, columns, figsize=(3.6 * columns, 2.9 * rows_n + 0.8),
                                    squeeze=False, layout="constrained")
        for axis in axes.ravel()[len(chunk):]:
            axis.set_visible(False)
        for axis, label in zip(axes.ravel(), chunk):
            part = points.loc[points["group"] == label].sort_values("utilisation")
            x = part["utilisation"].to_numpy(float)
            predicted = part["predicted"].to_numpy(float)
            lo = part["lo"].to_numpy(float) / predicted
            hi = np.minimum(part["hi"].to_numpy(float) / predicted, 10.0)
            axis.fill_between(x, lo, hi, color="#9ecae1", alpha=0.6, lw=0, step="mid")
            axis.axhline(1.0, color="#08306b", lw=1.0)
            ratio = part["observed"].to_numpy(float) / predicted
            inside = part["inside"].to_numpy(bool)
            held_out = part["held_out"].to_numpy(bool)
            for mask, face in ((~held_out, None), (held_out, "none")):
                for good, colour in ((True, "black"), (False, "tab:red")):
                    chosen = mask & (inside == good)
                    if chosen.any():
                        axis.scatter(x[chosen], ratio[chosen], s=18, zorder=3,
                                     facecolors=face or colour, edgecolors=colour)
            entry = flags.get(label, {})
            title = _wrap(label, 44)
            if entry.get("flagged"):
                reasons = entry.get("misfit") or ["too many points outside"]
                title += "\n" + _wrap(f"MISFIT: {reasons[0]}", 44)
            axis.set_title(title, fontsize=8, color="tab:red" if entry.get("flagged") else "black")
            axis.set_xlim(0, max(1.0, float(x.max()) * 1.02) if len(x) else 1.0)
            axis.tick_params(labelsize=7)
            axis.grid(alpha=0.3)
        handles = [
            Patch(color="#9ecae1", alpha=0.6, label=f"{prob:.0%} predictive interval"),
            Line2D([], [], color="black", marker="o", ls="none", ms=4, label="fitted point"),
            Line2D([], [], color="black", marker="o", mfc="none", ls="none", ms=4,
                   label="held-out point (not fitted)"),
            Line2D([], [], color="tab:red", marker="o", ls="none", ms=4,
                   label="outside its interval"),
        ]
        figure.legend(handles=handles, loc="outside upper center", ncol=4, fontsize=8,
                      frameon=False)
        figure.supxlabel("utilisation x = RPS * C2 (posterior median)", fontsize=9)
        figure.supylabel(f"observed / predicted median, {quantity}", fontsize=9)
        figures.append(figure)
    return figures
