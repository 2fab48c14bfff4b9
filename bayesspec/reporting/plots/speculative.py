"""Figures of the speculative decoding decisions: speedup against load for several draft
lengths with each crossover RPS* (docs/laws.md, eq. (2)), the zero-load and load cost
ratios of speculating (eq. (3)), and the map of the best draft length k* over
(alpha, RPS)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import patheffects
from matplotlib.collections import LineCollection, PatchCollection
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import MaxNLocator

from bayesspec.reporting.plots.common import (BAND_PROB, EXTRAPOLATED_DASHES, _fitted_line,
                                              _quantiles, k_colour)

# Speedup draws where only the dense baseline is saturated are infinite; they are capped
# at this value before quantiles (the plotted range is chosen from the medians anyway).
_SPEEDUP_PLOT_CAP = 1e3


def _speedup_curve(costs, alpha: float, k: int, grid: np.ndarray, prob: float) -> dict:
    """Quantiles of the speedup of one k, cut where SD saturates.

    ``end``: number of grid points before more than half the draws have SD saturated
    (speedup 0 in :meth:`speedup_draws`), so the median is never a saturation zero;
    ``band_end``: the same for the band's lower tail (its lower edge never drops to a
    saturation zero). The curve is not drawn past ``end``: the figure says "saturated".
    """
    draws = np.asarray(costs.speedup_draws(alpha, k, grid), dtype=float)
    saturated = (draws <= 0).mean(axis=0)
    lo, median, hi = _quantiles(np.minimum(draws, _SPEEDUP_PLOT_CAP), prob)
    end = int(np.argmax(saturated >= 0.5)) if np.any(saturated >= 0.5) else len(grid)
    tail = (1 - prob) / 2
    band_end = int(np.argmax(saturated > tail)) if np.any(saturated > tail) else len(grid)
    return {"lo": lo, "median": median, "hi": hi, "end": end, "band_end": min(band_end, end)}


def _answer_bounds(costs, alpha, k, fallback: float | None) -> tuple[float | None, bool]:
    """What the data measured for an answer about SD at (alpha, k) against the dense
    baseline (:meth:`bayesspec.prediction.Law.measured`, the rule the decision documents
    mark with): its highest fitted rate (``fallback`` where the law does not know it) and
    whether (alpha, k) itself lies outside the measured design."""
    measured = getattr(costs, "measured", None)
    if not callable(measured):
        return fallback, False
    answer = measured(alpha, k)
    top = answer["rps_fitted_max"]
    top = float(top) if top is not None and np.isfinite(top) else fallback
    return top, bool(answer["design_extrapolated"])


def speedup_bands_plot(costs, alpha: float, ks, *, rps_max: float | None = None,
                       prob: float = BAND_PROB, points: int = 160,
                       recommended_k: int | None = None,
                       rps_measured_max: float | None = None, metric: str = "mean"):
    """Speedup vs RPS for several k at one alpha: median, band, crossover RPS*.
    ``metric``: the latency summary the law describes (``"mean"``, ``"ttft_p99"``, ...),
    named on the axes.

    ``costs`` (a :class:`bayesspec.prediction.Law`) evaluates its own law: eq.
    (1) latencies, or eq. (4) for an MoE verifier; only ``speedup_draws``,
    ``crossover_draws``, ``c2_dense``, ``label`` and ``law_name`` are used.

    - ``recommended_k``: always drawn (added to ``ks`` if missing), thick and outlined,
      "(recommended)" in the legend; 0 means "do not speculate" (the dense line).
    - Each k's curve ends where SD saturates (more than half the draws have an infinite
      SD latency) with an X marker ("saturated"), never a flat zero or a spike; the band
      ends where more than its lower tail is saturated.
    - ``rps_measured_max``: the highest fitted rate to draw as a vertical dotted line
      (name kept from older versions; it is the rate the fit reached, not a set-aside
      point), the region beyond it shaded; by default the dense baseline's, where the
      law knows it. What is extrapolated follows the decision
      documents' rule per k (:meth:`~bayesspec.prediction.Law.extrapolated`): a k's curve
      is dashed beyond the highest fitted rate of that k and the dense baseline (all of it
      when (alpha, k) was not measured), and its RPS* drawn hollow ("extrapolated") where
      ``crossover`` marks it. A law that does not know its fitted rates takes
      ``rps_measured_max`` as that boundary for every k.
    - The lower strip holds each k's RPS* (median and ``prob`` interval) with its value.
    """
    ks = sorted({int(k) for k in ks} - {0})
    if recommended_k is not None and int(recommended_k) > 0:
        ks = sorted(set(ks) | {int(recommended_k)})
    recommended = None if recommended_k is None else int(recommended_k)
    dense_saturation = float(np.median(costs.dense.ceiling))
    top = min(rps_max * 1.05, dense_saturation) if rps_max else dense_saturation
    measured = (float(rps_measured_max) if rps_measured_max is not None
                and np.isfinite(rps_measured_max) else None)
    line_of = ""
    if measured is None and rps_measured_max is None:
        dense_top, _ = _answer_bounds(costs, None, 0, None)
        measured, line_of = dense_top, " of the dense baseline"
    if measured is not None:
        top = max(top, min(measured * 1.08, dense_saturation))
    grid = np.linspace(0.0, top * 0.995, points)
    right = float(grid[-1])

    rows = max(len(ks), 1)
    figure, (axis, strip) = plt.subplots(
        2, 1, sharex=True, figsize=(10.5, 4.6 + 0.3 * rows), layout="constrained",
        height_ratios=[4.2, 0.36 * rows + 0.3])
    if measured is not None and measured < right:
        for target in (axis, strip):
            target.axvspan(measured, right, color="0.92", lw=0, zorder=0,
                           label=("beyond the highest fitted rate (extrapolation)"
                                  if target is axis else None))
    # solid: dashes mean "extrapolated" in this figure
    dense_style = {"color": "0.25", "lw": 1, "zorder": 2}
    if recommended == 0:
        axis.axhline(1.0, color="black", lw=3, zorder=2,
                     label="k = 0: dense, do not speculate (recommended)")
    else:
        axis.axhline(1.0, **dense_style, label="speedup 1 (dense decoding)")

    curves = {}
    ended = False
    dashed_any = False
    y_medians, y_highs = [1.0], [1.0]
    sane = grid <= 0.9 * dense_saturation
    for k in ks:
        curve = _speedup_curve(costs, alpha, k, grid, prob)
        curves[k] = curve
        colour = k_colour(k)
        is_recommended = k == recommended
        end, band_end = curve["end"], curve["band_end"]
        if band_end > 1:
            axis.fill_between(grid[:band_end], curve["lo"][:band_end], curve["hi"][:band_end],
                              color=colour, alpha=0.3 if is_recommended else 0.16, lw=0,
                              zorder=1)
        boundary, unmeasured = _answer_bounds(costs, alpha, k, measured)
        curve["boundary"], curve["unmeasured"] = boundary, unmeasured
        if end > 0:
            # A k (or alpha) the data did not measure is the law's extrapolation: dashed;
            # so is a measured k's curve past its highest fitted rate (and the dense one's).
            label = (f"k = {k}" + (" (recommended)" if is_recommended else "")
                     + (": not measured (extrapolated)" if unmeasured else ""))
            style = ({"lw": 3.2, "zorder": 4, "path_effects": [
                patheffects.withStroke(linewidth=5, foreground="black")]}
                if is_recommended else {"lw": 1.7, "zorder": 3})
            solid = (0 if unmeasured else end if boundary is None
                     else min(end, int(np.searchsorted(grid, boundary, side="right"))))
            if solid > 0:
                axis.plot(grid[:solid], curve["median"][:solid], color=colour, label=label,
                          gid=f"k{k}", **style)
            if solid < end:
                dashed_style = {**style, "ls": EXTRAPOLATED_DASHES}
                start = max(solid - 1, 0)
                axis.plot(grid[start:end], curve["median"][start:end], color=colour,
                          label=label if solid == 0 else f"_k = {k} extrapolated",
                          gid=f"k{k}-extrapolated", **dashed_style)
                dashed_any = True
            # The y range follows the curves up to 90% of the dense saturation rate:
            # beyond, a speedup can grow without bound as the dense baseline saturates.
            y_medians.append(float(np.nanmax(curve["median"][:end][sane[:end]]))
                             if sane[:end].any() else 1.0)
            if band_end > 0 and sane[:band_end].any():
                y_highs.append(float(np.nanmax(curve["hi"][:band_end][sane[:band_end]])))
        if end < len(grid):
            ended = True
            last = max(end - 1, 0)
            axis.plot([grid[last]], [curve["median"][last] if end > 0 else 0.0], marker="X",
                      ms=9 if is_recommended else 7, color=colour, mec="black", mew=0.8,
                      ls="none", zorder=5)
    med_top = max(y_medians)
    y_top = max(1.2, min(max(y_highs), 1.35 * med_top), med_top) * 1.06
    axis.set_ylim(0.0, y_top)
    off_top = False
    for k, curve in curves.items():
        above = np.flatnonzero(curve["median"][:curve["end"]] > y_top)
        if len(above):
            off_top = True
            axis.plot([grid[above[0]]], [y_top], marker="^", ms=9, color=k_colour(k),
                      mec="black", mew=0.8, ls="none", clip_on=False, zorder=6)
    axis.set_xlim(0.0, right)

    # Crossover RPS* of each k, one row each.
    tail = (1 - prob) / 2
    row_texts = []
    extrapolated = False
    for row, k in enumerate(ks):
        colour = k_colour(k)
        star = np.asarray(costs.crossover_draws(alpha, k), dtype=float)
        has = np.isfinite(star)
        zero_load = curves[k]["median"][0]
        if has.mean() < 0.5:
            verdict = ("SD never faster" if zero_load < 1 else "SD faster up to saturation")
            row_texts.append(f"no crossover ({1 - has.mean():.0%} of draws): {verdict}")
            continue
        s_lo, s_med, s_hi = np.quantile(star[has], [tail, 0.5, 1 - tail])
        boundary, unmeasured = curves[k]["boundary"], curves[k]["unmeasured"]
        beyond_data = unmeasured or (boundary is not None and s_med > boundary)
        extrapolated |= beyond_data and s_med <= right
        text = f"RPS* {s_med:.3g} [{s_lo:.3g}, {s_hi:.3g}]"
        if has.mean() < 0.95:
            text += f", P = {has.mean():.2f}"
        if beyond_data:
            text += ": extrapolated"
        if s_med > right:
            text += " (beyond the plot)"
        row_texts.append(text)
        solid_end = (s_lo if unmeasured else min(s_hi, boundary) if boundary is not None
                     else s_hi)
        if s_lo < min(solid_end, right):
            strip.plot([s_lo, min(solid_end, right)], [row, row], color=colour, lw=5,
                       solid_capstyle="butt", zorder=3)
        if solid_end < s_hi and max(s_lo, solid_end) < right:
            strip.plot([max(s_lo, solid_end), min(s_hi, right)], [row, row], color=colour,
                       lw=2, ls=(0, (3, 1.5)), zorder=3)
        if s_med <= right:
            face = "white" if beyond_data else colour
            strip.plot([s_med], [row], marker="o", ms=8, mfc=face, mec="black", mew=1,
                       zorder=4, gid=f"rps-star-k{k}")
            axis.plot([s_med], [1.0], marker="o", ms=8, mfc=face, mec=colour, mew=2,
                      ls="none", zorder=6, gid=f"rps-star-k{k}")
        if s_hi > right:  # the interval runs past the plot: an arrow at its edge
            strip.annotate("", xy=(1.0, row), xycoords=("axes fraction", "data"),
                           xytext=(-14, 0), textcoords="offset points", zorder=5,
                           arrowprops={"arrowstyle": "-|>", "color": "black", "lw": 1.2})
    for target in (axis, strip):
        _fitted_line(target, measured, label=target is axis, of=line_of)
    strip.set_ylim(len(ks) - 0.5, -0.5)
    strip.set_yticks(range(len(ks)), [f"k = {k}" for k in ks], fontsize=8)
    for tick, k in zip(strip.get_yticklabels(), ks):
        tick.set_color(tuple(0.75 * np.array(k_colour(k)[:3])))
        if k == recommended:
            tick.set_fontweight("bold")
    side = strip.twinx()
    side.set_ylim(strip.get_ylim())
    side.set_yticks(range(len(ks)), row_texts, fontsize=7.5)
    side.tick_params(length=0)
    strip.grid(alpha=0.3, axis="x")
    strip.set_xlabel("RPS (requests/s)")
    strip.set_title(f"crossover RPS* (median, {prob:.0%} interval; above it SD is slower)",
                    fontsize=8, loc="left")

    handles, _ = axis.get_legend_handles_labels()
    if any(c["end"] < len(grid) for c in curves.values()) and ended:
        handles.append(Line2D([], [], marker="X", color="0.4", mec="black", ls="none", ms=7,
                              label="saturated: SD latency infinite in > half the draws "
                                    "(curve ends)"))
    if off_top:
        handles.append(Line2D([], [], marker="^", color="0.4", mec="black", ls="none", ms=7,
                              label="leaves the plot: the dense baseline is saturating\n"
                                    "(speedup grows without bound)"))
    handles.append(Line2D([], [], marker="o", color="0.4", mfc="0.4", mec="black", ls="none",
                          ms=7, label="crossover RPS* (median)"))
    if dashed_any:
        handles.append(Line2D([], [], color="0.4", lw=1.7, ls=EXTRAPOLATED_DASHES,
                              label="dashed: past the highest fitted rate of that k and\n"
                                    "the dense baseline, or not measured (extrapolated)"))
    if extrapolated:
        handles.append(Line2D([], [], marker="o", mfc="white", mec="0.4", mew=1.5,
                              ls="none", ms=7, label="RPS* beyond the data (extrapolated)"))
    axis.legend(handles=handles, fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                frameon=False)
    from bayesspec.data.schema import metric_description

    law = " (MoE law, eq. 4)" if costs.law_name == "eq. (4)" else ""
    quantity = "" if metric == "mean" else f" of {metric_description(metric)}"
    axis.set_ylabel(f"speedup{quantity} = dense / SD{law}" if quantity
                    else f"speedup = L_dense / L_SD{law}")
    axis.set_title(f"{costs.label}: speedup{quantity} at alpha = {alpha:g} (median, "
                   f"{prob:.0%} band)", fontsize=9)
    axis.grid(alpha=0.3)
    return figure


def cost_ratio_plot(costs, alphas, ks, *, prob: float = BAND_PROB):
    """C1R and C2R vs k for each alpha: the zero-load and the load cost of speculating;
    an (alpha, k) outside the measured design is a hollow marker (extrapolated)."""
    figure, axes = plt.subplots(1, 2, figsize=(10, 4), sharex=True)
    ks = np.asarray(list(ks))
    colours = plt.cm.plasma(np.linspace(0.05, 0.85, len(alphas)))
    for colour, alpha in zip(colours, alphas):
        c1_sd, c2_sd = costs.costs(alpha, ks)
        unmeasured = np.array([_answer_bounds(costs, alpha, int(k), None)[1] for k in ks])
        for axis, ratio in zip(axes, (c1_sd / costs.c1_dense[:, None],
                                      c2_sd / costs.c2_dense[:, None])):
            lo, median, hi = _quantiles(ratio, prob)
            axis.fill_between(ks, lo, hi, color=colour, alpha=0.25, lw=0)
            axis.plot(ks, median, color=colour, lw=1, label=f"alpha {alpha:g}")
            axis.plot(ks[~unmeasured], median[~unmeasured], color=colour, marker="o", ms=4,
                      ls="none")
            axis.plot(ks[unmeasured], median[unmeasured], marker="o", ms=4, ls="none",
                      mfc="white", mec=colour, gid="extrapolated")
    for axis, name in zip(axes, ("C1R = C1_SD / C1_dense (zero load)",
                                 "C2R = C2_SD / C2_dense (load)")):
        axis.axhline(1.0, color="black", lw=1, ls="--")
        axis.set_xlabel("draft length k")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_title(name, fontsize=9)
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    figure.suptitle(f"{costs.label}: the k that minimises C1R is not the one that minimises "
                    "C2R (hollow: a k or alpha not measured)", fontsize=9)
    figure.tight_layout()
    return figure


def _cell_edges(values) -> np.ndarray:
    values = np.asarray(values, dtype=float)
    if len(values) == 1:
        half = 0.05 * abs(values[0]) if values[0] else 0.5
        return np.array([values[0] - half, values[0] + half])
    middle = (values[1:] + values[:-1]) / 2
    return np.concatenate([[2 * values[0] - middle[0]], middle, [2 * values[-1] - middle[-1]]])


def _boundary_segments(best: np.ndarray, x_edges, y_edges) -> list:
    """Cell-edge segments between neighbouring cells with different k."""
    segments = []
    n_rows, n_columns = best.shape
    for i in range(n_rows):
        for j in range(n_columns - 1):
            if best[i, j] != best[i, j + 1]:
                segments.append([(x_edges[j + 1], y_edges[i]), (x_edges[j + 1], y_edges[i + 1])])
    for i in range(n_rows - 1):
        for j in range(n_columns):
            if best[i, j] != best[i + 1, j]:
                segments.append([(x_edges[j], y_edges[i + 1]), (x_edges[j + 1], y_edges[i + 1])])
    return segments


def _region_label_cells(best: np.ndarray, minimum: int = 3) -> list[tuple[int, int, int]]:
    """(k, i, j): one cell per connected region of equal k, the one deepest inside it."""
    from scipy import ndimage

    found = []
    for k in np.unique(best):
        labelled, count = ndimage.label(best == k)
        for region in range(1, count + 1):
            mask = labelled == region
            if mask.sum() < minimum:
                continue
            depth = ndimage.distance_transform_edt(np.pad(mask, 1))[1:-1, 1:-1]
            depth = np.where(mask, depth, -1)
            # Of the deepest cells, the one nearest the region's centre of mass.
            deepest = np.argwhere(depth == depth.max())
            centre = np.argwhere(mask).mean(axis=0)
            i, j = deepest[np.argmin(((deepest - centre) ** 2).sum(axis=1))]
            found.append((int(k), int(i), int(j)))
    return found


def kstar_map_plot(document: dict, *, uncertain_below: float = 0.5):
    """Best draft length k* over (alpha, RPS) from a ``kstar_table`` document.

    Top: one qualitative colour per k (legend; k = 0 is "do not speculate"), black cell
    edges where k* changes, hatched cells where the posterior probability that k* is the
    best is below ``uncertain_below``, and each region labelled with its k. A k* equal to
    the largest k searched (``document["ks"]``) reads ">= kmax": the optimum may lie
    beyond the search. Bottom: that probability itself, with the same boundaries.
    """
    table = document["table"]
    alphas = sorted({row["alpha"] for row in table})
    rates = sorted({row["rps"] for row in table})
    best = np.full((len(alphas), len(rates)), -1, dtype=int)
    confidence = np.full(best.shape, np.nan)
    a_index = {a: i for i, a in enumerate(alphas)}
    r_index = {r: j for j, r in enumerate(rates)}
    for row in table:
        best[a_index[row["alpha"]], r_index[row["rps"]]] = int(row["k"])
        confidence[a_index[row["alpha"]], r_index[row["rps"]]] = row["p_best"]
    searched = [int(k) for k in document.get("ks", [])] or sorted(set(best.ravel()))
    kmax = max(searched)
    present = sorted(set(int(v) for v in best.ravel() if v >= 0))

    def name(k: int) -> str:
        return f">= {k}" if k == kmax and kmax > 0 else str(k)

    figure, (axis, p_axis) = plt.subplots(
        2, 1, sharex=True, sharey=True, figsize=(9.5, 8.6), layout="constrained",
        height_ratios=[1.25, 1])
    x_edges, y_edges = _cell_edges(rates), _cell_edges(alphas)
    index = np.vectorize(lambda v: present.index(v) if v in present else 0)(best)
    cmap = ListedColormap([k_colour(k) for k in present])
    norm = BoundaryNorm(np.arange(len(present) + 1) - 0.5, len(present))
    axis.pcolormesh(x_edges, y_edges, index, cmap=cmap, norm=norm, shading="flat")
    unsure = np.argwhere(confidence < uncertain_below)
    if len(unsure):
        axis.add_collection(PatchCollection(
            [Rectangle((x_edges[j], y_edges[i]), x_edges[j + 1] - x_edges[j],
                       y_edges[i + 1] - y_edges[i]) for i, j in unsure],
            facecolor="none", edgecolor=(0, 0, 0, 0.45), hatch="///", lw=0))
    # Cells whose answer is the law's extrapolation (a k or alpha outside the measured
    # design, or a rate above the fitted ones): dotted, so they never read as measured.
    extrapolated = np.zeros(best.shape, bool)
    for row in table:
        extrapolated[a_index[row["alpha"]], r_index[row["rps"]]] = bool(
            row.get("extrapolated"))
    beyond = np.argwhere(extrapolated)
    if len(beyond):
        axis.add_collection(PatchCollection(
            [Rectangle((x_edges[j], y_edges[i]), x_edges[j + 1] - x_edges[j],
                       y_edges[i + 1] - y_edges[i]) for i, j in beyond],
            facecolor="none", edgecolor=(1, 1, 1, 0.7), hatch="..", lw=0))
    segments = _boundary_segments(best, x_edges, y_edges)
    for target in (axis, p_axis):
        target.add_collection(LineCollection(segments, colors="black", linewidths=1.3))
    for k, i, j in _region_label_cells(best, minimum=1 if best.size <= 160 else 3):
        axis.text(rates[j], alphas[i], name(k), ha="center", va="center", fontsize=7.5,
                  fontweight="bold", color="black",
                  bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none",
                        "alpha": 0.8})
    handles = [Patch(facecolor=k_colour(k), edgecolor="0.3",
                     label=("0: do not speculate" if k == 0 else
                            f"{name(k)}: top of the search,\nthe best k may be larger"
                            if k == kmax and kmax > 0 else f"{k}"))
               for k in present]
    handles.append(Patch(facecolor="white", edgecolor=(0, 0, 0, 0.6), hatch="///",
                         label=f"P(best) < {uncertain_below:g}"))
    if len(beyond):
        handles.append(Patch(facecolor="0.55", edgecolor=(1, 1, 1, 0.9), hatch="..",
                             label="extrapolated: k, alpha or rate\nbeyond the data"))
    axis.legend(handles=handles, title="k*", fontsize=8, title_fontsize=8,
                loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
                ncol=1 if len(handles) <= 14 else 2)
    axis.set_ylabel("acceptance alpha")
    title = (f"{document.get('setup', '')}: best draft length k* "
             f"({document.get('objective', 'mean')} objective, k searched "
             f"{min(searched)}..{kmax})")
    axis.set_title(title, fontsize=9)

    mesh = p_axis.pcolormesh(x_edges, y_edges, confidence, cmap="OrRd_r", vmin=0, vmax=1,
                             shading="flat")
    if best.size <= 160:
        for i, alpha in enumerate(alphas):
            for j, rate in enumerate(rates):
                if np.isfinite(confidence[i, j]):
                    p_axis.text(rate, alpha, f"{confidence[i, j]:.2f}", ha="center",
                                va="center", fontsize=6.5,
                                color="white" if confidence[i, j] < 0.35 else "black")
    figure.colorbar(mesh, ax=p_axis, label="P(k* is the best k); dark: uncertain", location="bottom",
                    aspect=45, shrink=0.8)
    p_axis.set_title("posterior probability that k* is the best k (lines: where k* changes)",
                     fontsize=9)
    p_axis.set_xlabel("RPS (requests/s)")
    p_axis.set_ylabel("acceptance alpha")
    if len(alphas) <= 12:
        axis.set_yticks(alphas, [f"{a:g}" for a in alphas])
    axis.set_xlim(x_edges[0], x_edges[-1])
    axis.set_ylim(y_edges[0], y_edges[-1])
    return figure
