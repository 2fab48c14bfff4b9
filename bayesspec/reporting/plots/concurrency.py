"""A closed-loop sweep on the axis it was measured on: latency and throughput against the
number of requests the clients keep in flight (``vllm bench serve --max-concurrency N``,
GuideLLM's ``concurrent`` profile). The law is the same law read there,
L = C1 + C2 N (:meth:`bayesspec.prediction.Curve.latency_at_concurrency`)."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from bayesspec.data.saturation import closed_loop_rows
from bayesspec.errors import BadInput
from bayesspec.reporting.plots.common import BAND_PROB, FITTED_STYLE, _quantiles, _wrap

__all__ = ["closed_loop_groups", "concurrency_plot"]

FITTED_LEVEL_LABEL = "highest fitted concurrency"


def closed_loop_groups(fit) -> list[int]:
    """Indices of the fitted groups whose points were all measured in a closed loop."""
    data = fit.data
    closed = closed_loop_rows(data).to_numpy()
    labels = data["group"].to_numpy()
    return [g for g, label in enumerate(fit.groups["label"])
            if (labels == label).any() and closed[labels == label].all()]


def concurrency_plot(fit, *, groups=None, prob: float = BAND_PROB, max_draws: int = 1000,
                     per_figure: int = 8):
    """Per closed-loop group, the measured points at their concurrency (fitted: dots; set
    aside: crosses) with the law's band of the mean latency on that axis, and under it the
    throughput N / L they give; the highest fitted level (dotted; to its right the law is
    extrapolated) and the engine's cap where known (dashed). Returns a list of figures
    (``per_figure`` groups each)."""
    groups = closed_loop_groups(fit) if groups is None else list(groups)
    if not groups:
        raise BadInput("no fitted group was measured in a closed loop (column "
                       "max_concurrency): the concurrency axis has no points to show")
    data = fit.data
    labels = data["group"].to_numpy()
    figures = []
    for start in range(0, len(groups), per_figure):
        chunk = groups[start:start + per_figure]
        columns = min(4, len(chunk))
        rows_n = math.ceil(len(chunk) / columns)
        figure = plt.figure(figsize=(3.7 * columns, 4.4 * rows_n + 0.8), layout="constrained")
        grid_spec = figure.add_gridspec(2 * rows_n, columns, height_ratios=[3, 2] * rows_n)
        for panel, g in enumerate(chunk):
            r, c = divmod(panel, columns)
            axis = figure.add_subplot(grid_spec[2 * r, c])
            rate_axis = figure.add_subplot(grid_spec[2 * r + 1, c], sharex=axis)
            _panel(axis, rate_axis, fit, g, data.loc[labels == fit.groups["label"].iloc[g]],
                   prob=prob, max_draws=max_draws)
            if c == 0:
                axis.set_ylabel("mean latency (s)", fontsize=8)
                rate_axis.set_ylabel("throughput (RPS)", fontsize=8)
            rate_axis.set_xlabel("requests in flight N (client concurrency)", fontsize=8)
        figure.legend(handles=[
            Line2D([], [], color="black", marker="o", ls="none", ms=4, label="fitted point"),
            Line2D([], [], color="tab:red", marker="x", ls="none", ms=5,
                   label="set aside (`fit` lists why)"),
            Line2D([], [], color="#08306b", lw=1.2, label="posterior median, L = C1 + C2 N"),
            Patch(color="#2b7bba", alpha=0.5, label=f"{prob:.0%} band of the mean"),
            Line2D([], [], **FITTED_STYLE, label=f"{FITTED_LEVEL_LABEL} (to its right: "
                                                 "extrapolation)"),
            Line2D([], [], color="tab:red", ls="--", lw=1, label="the engine's cap"),
        ], loc="outside lower center", ncol=3, fontsize=7, frameon=False)
        figures.append(figure)
    return figures


def _panel(axis, rate_axis, fit, g: int, points, *, prob: float, max_draws: int) -> None:
    curve = fit.group_curve(g)
    levels = points["max_concurrency"].astype(float).to_numpy()
    used = ~points["excluded"].astype(bool).to_numpy()
    grid = np.unique(np.round(np.geomspace(1.0, max(float(levels.max()), 2.0) * 1.15, 80), 3))
    latency = np.asarray(curve.latency_at_concurrency(grid)).reshape(-1, grid.size)[:max_draws]
    throughput = grid / latency
    measured = points["latency_mean_s"].to_numpy(float)
    rps = points["rps"].to_numpy(float)
    for target, values, observed in ((axis, latency, measured), (rate_axis, throughput, rps)):
        lo, median, hi = _quantiles(values, prob)
        target.fill_between(grid, lo, hi, color="#2b7bba", alpha=0.5, lw=0, zorder=1)
        target.plot(grid, median, color="#08306b", lw=1.2, zorder=2)
        target.scatter(levels[used], observed[used], s=14, color="black", edgecolor="white",
                       linewidth=0.5, zorder=4)
        target.scatter(levels[~used], observed[~used], s=22, marker="x", color="tab:red",
                       zorder=4)
        if used.any():
            target.axvline(float(levels[used].max()), **FITTED_STYLE, zorder=3)
        cap = getattr(curve, "cap", None)
        if cap is not None and np.isfinite(np.ravel(cap)).any():
            target.axvline(float(np.median(np.ravel(cap))), color="tab:red", ls="--", lw=1,
                           zorder=3)
        target.set_xscale("log", base=2)
        target.grid(alpha=0.3, zorder=0)
        target.tick_params(labelsize=7)
    axis.tick_params(labelbottom=False)
    axis.set_title(_wrap(fit.groups["label"].iloc[g], 52), fontsize=8)
