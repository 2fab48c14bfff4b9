"""Figures. Each function takes a Fit (or a decision document), draws with matplotlib
(Agg) and returns the Figure.

Plotting never happens inside the models; ``save_figure`` writes atomically.

Conventions every figure follows (what a serving engineer reads off them):

- bands are drawn under the data and outlined, so a narrow band stays visible;
- a curve ends where the system it describes saturates (and says so) instead of
  running on as a flat zero or a spike;
- the highest rate measured in the data is a vertical dotted line: anything to its right
  (a saturation rate, a crossover RPS*) is an extrapolation of the law;
- one colour per draft length k, the same in every figure (:func:`k_colour`);
- tick labels are plain numbers and never collide.
"""

from __future__ import annotations

import math
import os
import re
import textwrap
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib import patheffects  # noqa: E402
from matplotlib.collections import LineCollection, PatchCollection  # noqa: E402
from matplotlib.colors import BoundaryNorm, ListedColormap, to_rgba  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullFormatter  # noqa: E402

from bayesspec.outputs import atomic_path  # noqa: E402
from bayesspec.prediction import Curve, Noise  # noqa: E402

BAND_PROB = 0.9
# Speedup draws where only the dense baseline is saturated are infinite; they are capped
# at this value before quantiles (the plotted range is chosen from the medians anyway).
_SPEEDUP_PLOT_CAP = 1e3
MEASURED_STYLE = {"color": "0.15", "ls": ":", "lw": 1.5}
MEASURED_LABEL = "highest measured rate"


def save_figure(figure, path: str | os.PathLike, *, dpi: int = 120) -> str:
    """Write a figure atomically (PNG, or the format the suffix names) and close it."""
    try:
        with atomic_path(path) as temporary:
            figure.savefig(temporary, dpi=dpi, bbox_inches="tight")
    finally:
        plt.close(figure)
    return str(path)


def figure_png(figure, *, dpi: int = 100) -> bytes:
    """A figure as PNG bytes (for pages that carry their figures inline), closed."""
    import io

    buffer = io.BytesIO()
    try:
        figure.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    finally:
        plt.close(figure)
    return buffer.getvalue()


def _quantiles(draws, prob=BAND_PROB):
    tail = (1 - prob) / 2
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns past saturation
        return np.nanquantile(draws, [tail, 0.5, 1 - tail], axis=0)


def _saturating_quantiles(draws, prob=BAND_PROB):
    """Quantiles over draws of a latency where saturated draws are +inf.

    Infinite draws stay in (as a huge value), so an upper quantile leaves the plot when
    more than its tail is saturated instead of bending back down to the unsaturated
    draws; columns where more than half the draws are saturated become NaN (the curve
    ends at the median saturation rate) and so does an upper edge that is off the chart.
    """
    draws = np.asarray(draws, dtype=float)
    huge = np.where(np.isfinite(draws), draws, 1e300)
    lo, median, hi = _quantiles(huge, prob)
    off = lambda values: np.where(values >= 1e299, np.nan, values)  # noqa: E731
    return off(lo), off(median), np.where(hi >= 1e299, 1e12, hi)


def _monotone_band(lo, hi, *, slack: float = 0.95):
    """NaN from where ``lo`` first drops below ``slack`` times its running maximum on:
    a latency band whose lower edge falls with load has left the noise model's range."""
    lo = np.asarray(lo, dtype=float)
    filled = np.where(np.isfinite(lo), lo, -np.inf)
    falling = filled < slack * np.maximum.accumulate(filled)
    if not falling.any():
        return lo, hi
    cut = int(np.argmax(falling))
    lo, hi = lo.copy(), np.asarray(hi, dtype=float).copy()
    lo[cut:] = np.nan
    hi[cut:] = np.nan
    return lo, hi


def _replicates(draws: int, target: int = 4000) -> int:
    """Noise replicates per posterior draw so that a predictive band has ~``target``
    samples (its edges are quantiles of random draws: fewer make them ragged)."""
    return max(1, min(20, math.ceil(target / max(draws, 1))))


# --------------------------------------------------------------------------------------
# Shared styling
# --------------------------------------------------------------------------------------

# Qualitative colours for draft lengths 1..10 (tab10 without its grey, plus a dark
# indigo); k = 0 (do not speculate) is a light grey; 11..20 are lighter versions.
_K_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
              "tab:pink", "tab:olive", "tab:cyan", "#393b79")
K_ZERO_COLOUR = "#d4d4d4"


def k_colour(k: int):
    """The colour of draft length ``k`` in every figure (RGBA)."""
    k = int(k)
    if k <= 0:
        return to_rgba(K_ZERO_COLOUR)
    if k <= len(_K_COLOURS):
        return to_rgba(_K_COLOURS[k - 1])
    if k <= 2 * len(_K_COLOURS):
        base = np.array(to_rgba(_K_COLOURS[k - 1 - len(_K_COLOURS)]))
        return tuple(0.45 * base[:3] + 0.55) + (1.0,)
    golden = (k * 0.618033988749895) % 1.0
    return tuple(plt.cm.hsv(golden)[:3]) + (1.0,)


def _plain_number(value, _position=None) -> str:
    """Tick text without scientific notation: 0.02, 0.5, 3, 40, 1e+04 only when huge."""
    if value == 0 or not np.isfinite(value):
        return "0" if value == 0 else ""
    if 1e-4 <= abs(value) < 1e5:
        return f"{value:.6g}"
    return f"{value:.0e}"


def _plain_log_axis(axis, which: str) -> None:
    """Log scale with plain-number labels; minor ticks labelled only where there is room.

    Call after the data are drawn (the labelled minor ticks depend on the span)."""
    getattr(axis, f"set_{which}scale")("log")
    low, high = getattr(axis, f"get_{which}lim")()
    decades = math.log10(high / low) if low > 0 and high > low else 3.0
    ticks = axis.xaxis if which == "x" else axis.yaxis
    ticks.set_major_formatter(FuncFormatter(_plain_number))
    if decades <= 0.8:
        labelled = (2, 3, 4, 5, 6, 7, 8)
    elif decades <= 1.6:
        labelled = (2, 5)
    elif decades <= 2.6:
        labelled = (3,)
    else:
        labelled = ()

    def minor(value, _position=None):
        if value <= 0:
            return ""
        mantissa = value / 10 ** math.floor(math.log10(value) + 1e-9)
        return _plain_number(value) if round(mantissa) in labelled and \
            abs(mantissa - round(mantissa)) < 1e-6 else ""

    ticks.set_minor_formatter(FuncFormatter(minor) if labelled else NullFormatter())


def _measured_line(axis, rate, *, label: bool = True):
    """The highest measured rate: a vertical dotted line (data end, extrapolation begins)."""
    if rate is None or not np.isfinite(rate):
        return None
    beyond = rate > axis.get_xlim()[1]
    return axis.axvline(rate, **MEASURED_STYLE, zorder=5,
                        label=(f"{MEASURED_LABEL} ({rate:.3g} RPS"
                               + (", right of the plot)" if beyond else ")")) if label else None)


def _wrap(text: str, width: int) -> str:
    """Wrap at spaces and, in long names, after '/', '+', ',' and '_'."""
    pieces = re.split(r"(?<=[ /+,_])", str(text))
    lines, line = [], ""
    for piece in pieces:
        if line and len(line) + len(piece.rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        while len(piece) > width:
            lines.append(piece[:width])
            piece = piece[width:]
        line += piece
    if line.strip():
        lines.append(line.rstrip())
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# Dense latency law
# --------------------------------------------------------------------------------------

def collapse_plot(fit, *, seed: int = 0, max_draws: int = 1000):
    """All groups normalised by their posterior medians onto y = 1/(1-x).

    x = RPS*C2, y = L/C1. The band is the fitted measurement noise around the law
    (posterior predictive of a normalised observation), so points outside it are
    surprising, not merely scattered. The lower panel divides by the law, so the band's
    width (a few percent, growing near saturation) is visible at every load; the
    triangles on top mark each group's highest measured rate (x beyond them is the law
    extrapolated).
    """
    data = fit.data
    rows = data.loc[~data["excluded"] & data["group"].ne("")]
    groups = fit.groups
    curves = [fit.group_curve(g) for g in range(len(groups))]
    c1_median = np.array([np.median(c.zero_load) for c in curves])
    c2_median = np.array([np.median(c.saturation_cost) for c in curves])
    label_to_index = {label: i for i, label in enumerate(groups["label"])}
    index = rows["group"].map(label_to_index).to_numpy(int)

    x = rows["rps"].to_numpy(float) * c2_median[index]
    y = rows["latency_mean_s"].to_numpy(float) / c1_median[index]
    law_at_points = 1 / (1 - np.minimum(x, 0.999))
    figure, (axis, ratio_axis) = plt.subplots(
        2, 1, sharex=True, figsize=(7.5, 6.6), height_ratios=[3, 1.4], layout="constrained")

    grid = np.linspace(0.0, min(0.985, max(0.9, float(np.nanmax(x)) + 0.02)), 200)
    rng = np.random.default_rng(seed)
    noise = curves[0].noise
    noise = Noise(noise.base[:max_draws], noise.load[:max_draws],
                  None if noise.nu is None else noise.nu[:max_draws],
                  bounded_in_fit=noise.bounded_in_fit)
    ones = np.ones_like(noise.base)
    normalised_law = Curve(ones, ones, noise=noise)
    # Several noise draws per posterior draw: smooth band edges with a few hundred draws.
    normalised = np.concatenate([normalised_law.predictive(grid, rng)
                                 for _ in range(_replicates(len(ones)))])
    lo, _, hi = _quantiles(normalised)
    law = 1 / (1 - grid)
    band_style = {"color": "tab:orange", "alpha": 0.35, "lw": 0, "zorder": 1}
    edge_style = {"color": "tab:orange", "lw": 0.9, "zorder": 2}
    for target, scale in ((axis, 1.0), (ratio_axis, 1 / law)):
        target.fill_between(grid, lo * scale, hi * scale, **band_style,
                            label=f"{BAND_PROB:.0%} band of a new measurement")
        target.plot(grid, lo * scale, **edge_style)
        target.plot(grid, hi * scale, **edge_style)
        target.plot(grid, law * scale, color="black", lw=1.3, zorder=2,
                    label="law y = 1/(1 - x)")
        target.grid(alpha=0.3, zorder=0)

    # The ratio panel is zoomed on the band where there are data and on most points; the
    # few points beyond (near-saturation outliers) are pinned to its edge as triangles.
    ratio = y / law_at_points
    near = grid <= float(np.nanmax(x)) + 0.01
    band_spread = float(np.max(np.abs(np.log(np.concatenate([(lo / law)[near],
                                                             (hi / law)[near]])))))
    finite_ratio = np.abs(np.log(ratio[np.isfinite(ratio) & (ratio > 0)]))
    point_spread = float(np.quantile(finite_ratio, 0.98)) if len(finite_ratio) else 0.0
    limit = 1.15 * max(band_spread, point_spread, 0.02)
    low, high = np.exp(-limit), np.exp(limit)
    pinned = (ratio > high) | (ratio < low)
    verifiers = rows["verifier"].astype(str).to_numpy()
    colours = {name: plt.cm.tab10(i % 10) for i, name in enumerate(sorted(set(verifiers)))}
    for name, colour in colours.items():
        mask = verifiers == name
        axis.scatter(x[mask], y[mask], s=16, color=colour, edgecolor="white", linewidth=0.4,
                     zorder=3, label=name)
        inside = mask & ~pinned
        ratio_axis.scatter(x[inside], ratio[inside], s=16, color=colour, edgecolor="white",
                           linewidth=0.4, zorder=3)
        for side, marker in ((ratio > high, "^"), (ratio < low, "v")):
            out = mask & side
            if out.any():  # on the panel's edge, in axes coordinates
                ratio_axis.scatter(x[out], np.full(out.sum(), 0.97 if marker == "^" else 0.03),
                                   marker=marker, s=28, color=colour, edgecolor="black",
                                   linewidth=0.5, zorder=4,
                                   transform=ratio_axis.get_xaxis_transform())
    if pinned.any():
        ratio_axis.text(0.01, 0.95, f"{pinned.sum()} point(s) beyond the panel: triangles "
                        "on its edge", transform=ratio_axis.transAxes, fontsize=7,
                        va="top")
    # Each group's highest measured rate, normalised: beyond it the law is extrapolated.
    highest = np.array([np.max(x[index == g]) for g in np.unique(index)])
    axis.scatter(highest, np.full(highest.shape, 0.985), marker="v", s=28, color="0.15",
                 transform=axis.get_xaxis_transform(), clip_on=False, zorder=4,
                 label="highest measured rate of a group")
    axis.set_xlim(0.0, grid[-1])
    _plain_log_axis(axis, "y")
    axis.set_ylabel("y = L / C1 (posterior median)")
    axis.set_title(f"Collapse onto the latency law ({len(groups)} groups)", fontsize=10)
    axis.legend(fontsize=8, loc="upper left")
    ratio_axis.set_xlabel("x = RPS · C2 (posterior median)")
    ratio_axis.set_ylabel("y / law")
    ratio_axis.set_ylim(low, high)
    axis.set_xlim(0.0, grid[-1])
    return figure


def group_fit_plots(fit, *, per_figure: int = 16, prob: float = BAND_PROB, seed: int = 0,
                    max_draws: int = 1000):
    """One panel per group: data, posterior median curve, bands, saturation rate, the highest
    measured rate; under it the same divided by the posterior median curve, where the
    bands' widths (a few percent) are visible at every load."""
    data = fit.data
    groups = fit.groups
    figures = []
    rng = np.random.default_rng(seed)
    row_labels = data["group"].to_numpy()
    curve_colour, new_colour, line_colour = "#2b7bba", "#9ecae1", "#08306b"
    for start in range(0, len(groups), per_figure):
        chunk = range(start, min(start + per_figure, len(groups)))
        columns = min(4, len(chunk))
        rows_n = math.ceil(len(chunk) / columns)
        figure = plt.figure(figsize=(3.7 * columns, 3.7 * rows_n + 0.9), layout="constrained")
        grid_spec = figure.add_gridspec(2 * rows_n, columns, height_ratios=[3, 1.25] * rows_n)
        for panel, g in enumerate(chunk):
            r, c = divmod(panel, columns)
            axis = figure.add_subplot(grid_spec[2 * r, c])
            ratio_axis = figure.add_subplot(grid_spec[2 * r + 1, c], sharex=axis)
            label = groups["label"].iloc[g]
            law = fit.group_curve(g)
            points = data.loc[row_labels == label]
            used = points.loc[~points["excluded"]]
            dropped = points.loc[points["excluded"]]
            saturation = np.ravel(law.ceiling)[:max_draws]
            top = max(float(points["rps"].max()) if len(points) else 0.0,
                      float(np.median(saturation)))
            grid = np.linspace(0.0, top * 1.02, 200)
            curve = law.latency(grid)[:max_draws]
            predictive = np.concatenate([law.predictive(grid, rng)[:max_draws]
                                         for _ in range(_replicates(len(curve)))])
            # Saturated draws count as "off the chart" (not dropped: dropping them bends
            # the band's upper edge back down near saturation); the curves stop where
            # more than half the draws are saturated.
            lo, median, hi = _saturating_quantiles(curve, prob)
            plo, _, phi = _saturating_quantiles(predictive, prob)
            # The load-amplified noise is a linearisation: where it makes the lower edge of
            # a new measurement fall with load (physically it cannot), the band stops.
            plo, phi = _monotone_band(plo, phi)
            measured = float(used["rps"].max()) if len(used) else None
            at_points = np.median(law.latency(used["rps"].to_numpy(float))[:max_draws], axis=0)
            for target, scale in ((axis, 1.0), (ratio_axis, 1.0 / median)):
                target.fill_between(grid, plo * scale, phi * scale, color=new_colour,
                                    alpha=0.55, lw=0, zorder=1)
                target.plot(grid, plo * scale, color=curve_colour, lw=0.6, ls="--", zorder=2)
                target.plot(grid, phi * scale, color=curve_colour, lw=0.6, ls="--", zorder=2)
                target.fill_between(grid, lo * scale, hi * scale, color=curve_colour,
                                    alpha=0.6, lw=0, zorder=2)
                target.plot(grid, median * scale, color=line_colour, lw=1.2, zorder=3)
                s_lo, s_med, s_hi = np.quantile(saturation,
                                                [(1 - prob) / 2, 0.5, (1 + prob) / 2])
                target.axvspan(s_lo, s_hi, color="tab:red", alpha=0.15, lw=0, zorder=0)
                target.axvline(s_med, color="tab:red", lw=1, ls="--", zorder=2)
                _measured_line(target, measured, label=False)
                target.grid(alpha=0.3, zorder=0)
                target.tick_params(labelsize=7)
            axis.scatter(used["rps"], used["latency_mean_s"], s=14, color="black",
                         edgecolor="white", linewidth=0.5, zorder=4)
            ratio_axis.scatter(used["rps"], used["latency_mean_s"].to_numpy(float) / at_points,
                               s=10, color="black", zorder=4)
            finite = used["latency_mean_s"].to_numpy(float)
            ceiling = float(finite.max()) * 1.6 if len(finite) else None
            # Saturated points sit far above the curve; pin them to the top edge.
            shown = dropped["latency_mean_s"].to_numpy(float)
            if ceiling is not None:
                shown = np.minimum(shown, ceiling * 0.97)
                axis.set_ylim(0, ceiling)
            axis.scatter(dropped["rps"], shown, s=22, marker="x", color="tab:red", zorder=4)
            # The ratio panel zooms on the bands where there are data.
            near = grid <= (measured if measured else top) * 1.03
            values = np.concatenate([(plo / median)[near], (phi / median)[near],
                                     finite / at_points])
            values = values[np.isfinite(values) & (values > 0) & (values < 1e6)]
            spread = max(float(np.max(np.abs(np.log(values)))) if len(values) else 0.1, 0.02)
            ratio_axis.set_ylim(np.exp(-1.2 * spread), np.exp(1.2 * spread))
            ratio_axis.set_xlim(0, grid[-1])
            axis.tick_params(labelbottom=False)
            axis.set_title(_wrap(label, 52), fontsize=8)
            if c == 0:
                axis.set_ylabel("mean latency (s)", fontsize=8)
                ratio_axis.set_ylabel("data / fit", fontsize=8)
        handles = [
            Line2D([], [], color="black", marker="o", ls="none", ms=4, label="measured"),
            Line2D([], [], color="tab:red", marker="x", ls="none", ms=5,
                   label="set aside (`fit` lists why; pinned to the top edge when above)"),
            Line2D([], [], color=line_colour, lw=1.2, label="posterior median curve"),
            Patch(color=curve_colour, alpha=0.6, label=f"{prob:.0%} band of the curve"),
            Patch(facecolor=new_colour, alpha=0.55, edgecolor=curve_colour, ls="--",
                  label=f"{prob:.0%} band of a new measurement"),
            Line2D([], [], color="tab:red", ls="--", lw=1,
                   label=f"saturation rate 1/C2 (median, {prob:.0%} interval)"),
            Line2D([], [], **MEASURED_STYLE,
                   label=f"{MEASURED_LABEL} (fitted points; to its right: extrapolation)"),
        ]
        figure.legend(handles=handles, loc="outside upper center", ncol=4, fontsize=8,
                      frameon=False)
        figure.supxlabel("RPS (requests/s)", fontsize=9)
        figures.append(figure)
    return figures


# --------------------------------------------------------------------------------------
# Speculative decoding
# --------------------------------------------------------------------------------------

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


def _design_extrapolated(costs, alpha, k) -> bool:
    """Whether (alpha, k) lies outside what the law's data measured (laws that do not
    say are taken as measured)."""
    measured = getattr(costs, "measured", None)
    return bool(measured(alpha, k)["design_extrapolated"]) if callable(measured) else False


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
    - ``rps_measured_max``: the highest rate measured in the data, a vertical dotted
      line; the region beyond it is shaded, and an RPS* beyond it is drawn hollow and
      dashed ("extrapolated").
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
                           label="beyond the data (extrapolation)" if target is axis else None)
    dense_style = {"color": "black", "lw": 1, "ls": "--", "zorder": 2}
    if recommended == 0:
        axis.axhline(1.0, color="black", lw=3, zorder=2,
                     label="k = 0: dense, do not speculate (recommended)")
    else:
        axis.axhline(1.0, **dense_style, label="speedup 1 (dense decoding)")

    curves = {}
    ended = False
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
        if end > 0:
            # A k (or alpha) the data did not measure is the law's extrapolation: dashed.
            unmeasured = _design_extrapolated(costs, alpha, k)
            label = (f"k = {k}" + (" (recommended)" if is_recommended else "")
                     + (": not measured (extrapolated)" if unmeasured else ""))
            style = ({"lw": 3.2, "zorder": 4, "path_effects": [
                patheffects.withStroke(linewidth=5, foreground="black")]}
                if is_recommended else {"lw": 1.7, "zorder": 3})
            if unmeasured:
                style["ls"] = (0, (4, 2))
            axis.plot(grid[:end], curve["median"][:end], color=colour, label=label, **style)
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
        beyond_data = measured is not None and s_med > measured
        extrapolated |= beyond_data and s_med <= right
        text = f"RPS* {s_med:.3g} [{s_lo:.3g}, {s_hi:.3g}]"
        if has.mean() < 0.95:
            text += f", P = {has.mean():.2f}"
        if beyond_data:
            text += ": extrapolated"
        if s_med > right:
            text += " (beyond the plot)"
        row_texts.append(text)
        solid_end = min(s_hi, measured) if measured is not None else s_hi
        if s_lo < min(solid_end, right):
            strip.plot([s_lo, min(solid_end, right)], [row, row], color=colour, lw=5,
                       solid_capstyle="butt", zorder=3)
        if measured is not None and s_hi > measured and max(s_lo, measured) < right:
            strip.plot([max(s_lo, measured), min(s_hi, right)], [row, row], color=colour,
                       lw=2, ls=(0, (3, 1.5)), zorder=3)
        if s_med <= right:
            face = "white" if beyond_data else colour
            strip.plot([s_med], [row], marker="o", ms=8, mfc=face, mec="black", mew=1,
                       zorder=4)
            axis.plot([s_med], [1.0], marker="o", ms=8, mfc=face, mec=colour, mew=2,
                      ls="none", zorder=6)
        if s_hi > right:  # the interval runs past the plot: an arrow at its edge
            strip.annotate("", xy=(1.0, row), xycoords=("axes fraction", "data"),
                           xytext=(-14, 0), textcoords="offset points", zorder=5,
                           arrowprops={"arrowstyle": "-|>", "color": "black", "lw": 1.2})
    for target in (axis, strip):
        _measured_line(target, measured, label=target is axis)
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
    """C1R and C2R vs k for each alpha: the zero-load and the load cost of speculating."""
    figure, axes = plt.subplots(1, 2, figsize=(10, 4), sharex=True)
    ks = np.asarray(list(ks))
    colours = plt.cm.plasma(np.linspace(0.05, 0.85, len(alphas)))
    for colour, alpha in zip(colours, alphas):
        c1_sd, c2_sd = costs.costs(alpha, ks)
        for axis, ratio in zip(axes, (c1_sd / costs.c1_dense[:, None],
                                      c2_sd / costs.c2_dense[:, None])):
            lo, median, hi = _quantiles(ratio, prob)
            axis.fill_between(ks, lo, hi, color=colour, alpha=0.25, lw=0)
            axis.plot(ks, median, color=colour, marker="o", ms=3, label=f"alpha {alpha:g}")
    for axis, name in zip(axes, ("C1R = C1_SD / C1_dense (zero load)",
                                 "C2R = C2_SD / C2_dense (load)")):
        axis.axhline(1.0, color="black", lw=1, ls="--")
        axis.set_xlabel("draft length k")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_title(name, fontsize=9)
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    figure.suptitle(f"{costs.label}: the k that minimises C1R is not the one that minimises "
                    "C2R", fontsize=9)
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


def joint_vs_per_config_plot(joint: dict, separate: dict):
    """C1 and C2 of each (alpha, k) from the joint six-coefficient fit vs separate fits.

    ``joint`` and ``separate`` map a group label to (C1 draws, C2 draws).
    """
    labels = [label for label in joint if label in separate]
    figure, axes = plt.subplots(1, 2, figsize=(10, 4.4))
    for axis, index, name in zip(axes, (0, 1), ("C1_eff (s)", "C2_eff (s/request)")):
        x = np.array([np.median(separate[label][index]) for label in labels])
        y = np.array([np.median(joint[label][index]) for label in labels])
        x_err = np.array([np.quantile(separate[label][index], [0.05, 0.95]) for label in labels])
        y_err = np.array([np.quantile(joint[label][index], [0.05, 0.95]) for label in labels])
        axis.errorbar(x, y, xerr=np.abs(x_err.T - x), yerr=np.abs(y_err.T - y), fmt="o", ms=3,
                      lw=0.8, alpha=0.8)
        low, high = min(x.min(), y.min()), max(x.max(), y.max())
        axis.plot([low, high], [low, high], color="black", lw=1, ls="--")
        r = np.corrcoef(x, y)[0, 1] if len(x) > 1 else float("nan")
        axis.set_title(f"{name}: correlation {r:.4f}", fontsize=9)
        axis.set_xlabel("separate fit per (alpha, k)")
        axis.set_ylabel("joint fit, eq. (3)")
        axis.grid(alpha=0.3)
    figure.suptitle("One set of six cycle coefficients reproduces every configuration's costs",
                    fontsize=9)
    figure.tight_layout()
    return figure


def _split_parameter(name: str) -> tuple[str, str | None]:
    """'c1p[setup]' -> ('c1p', 'setup'); 'C1' -> ('C1', None)."""
    match = re.fullmatch(r"([^\[\]]+)\[(.+)\]", name)
    return (match.group(1), match.group(2)) if match else (name, None)


def compare_forest_plot(document: dict, *, max_rows: int = 40, label_a: str | None = None,
                        label_b: str | None = None, wrap: int = 80):
    """Forest plot of B/A ratios with the region of practical equivalence shaded.

    Parameters named ``name[group]`` are listed under a header per group (wrapped at
    ``wrap`` characters), so long setup names never collide; the figure grows with the
    rows. A and B are named on the axis: ``label_a``/``label_b``, else the document's
    ``a``/``b`` (``compare --by``). Long names (e.g. file paths) are wrapped.
    """
    label_a = label_a if label_a is not None else document.get("a")
    label_b = label_b if label_b is not None else document.get("b")
    items = list(document["parameters"].items())[:max_rows]
    prob = document.get("prob", BAND_PROB)
    rope = document["rope"]
    # Rows top to bottom: ("header", text) or ("parameter", text, entry); heights in rows.
    rows, current = [], "<start>"
    for name, entry in items:
        base, group = _split_parameter(name)
        if group != current:
            if group is not None:
                rows.append(("header", _wrap(group, wrap)))
            elif current != "<start>":
                rows.append(("header", "pooled / population"))
            current = group
        rows.append(("parameter", base if group is not None else name, entry))
    positions, heights, y = [], [], 0.0
    for row in rows:
        lines = row[1].count("\n") + 1
        height = 0.6 * lines + 0.4 if row[0] == "header" else 1.0
        positions.append(y + height / 2)
        heights.append(height)
        y += height
    total = y
    verdict = _wrap(document["verdict"], 100)
    title_lines = verdict.count("\n") + 1
    figure, axis = plt.subplots(figsize=(8.5, 0.27 * total + 1.5 + 0.16 * title_lines),
                                layout="constrained")
    axis.axvspan(1 - rope, 1 + rope, color="0.87", lw=0, zorder=0)
    axis.axvline(1.0, color="black", lw=0.8, zorder=1)
    colours = {"higher": "tab:red", "lower": "tab:blue", "neither": "0.35"}
    for row, position in zip(rows, positions):
        if row[0] == "header":
            continue
        entry = row[2]
        ratio = entry["ratio"]
        kind = ("higher" if entry["p_practically_higher"] >= 0.95 else
                "lower" if entry["p_practically_lower"] >= 0.95 else "neither")
        axis.plot([ratio["lo"], ratio["hi"]], [position, position], color=colours[kind], lw=2,
                  zorder=2)
        axis.plot([ratio["median"]], [position], "o", color=colours[kind], ms=4.5, zorder=3)
    # Group headers are separator rows inside the plot (left-aligned, shaded), so the
    # tick labels stay short parameter names.
    for row, position, height in zip(rows, positions, heights):
        if row[0] != "header":
            continue
        axis.axhspan(position - height / 2, position + height / 2, color="0.95", lw=0,
                     zorder=0)
        axis.text(0.01, position, row[1], transform=axis.get_yaxis_transform(),
                  ha="left", va="center", fontsize=7.5, fontweight="bold", zorder=4,
                  linespacing=1.1)
    parameters = [(position, row[1]) for row, position in zip(rows, positions)
                  if row[0] == "parameter"]
    axis.set_yticks([p for p, _ in parameters], [name for _, name in parameters],
                    fontsize=8)
    axis.tick_params(axis="y", length=0)
    axis.set_ylim(total, 0)
    names = ""
    if label_a is not None or label_b is not None:
        names = "\n".join(_wrap(f"{side} = {label}", 90) for side, label in
                          (("A", label_a if label_a is not None else "first"),
                           ("B", label_b if label_b is not None else "second")))
    axis.set_xlabel(f"ratio B / A (median and {prob:.0%} interval)"
                    + (f"\n{names}" if names else ""))
    axis.set_title(verdict, fontsize=8)
    axis.grid(alpha=0.3, axis="x")
    handles = [Patch(color="0.87", label=f"±{rope:.0%}: practically equivalent"),
               Line2D([], [], color=colours["higher"], marker="o", ms=4,
                      label="B higher (P >= 0.95 beyond it)"),
               Line2D([], [], color=colours["lower"], marker="o", ms=4,
                      label="B lower (P >= 0.95 beyond it)"),
               Line2D([], [], color=colours["neither"], marker="o", ms=4, label="neither")]
    axis.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                frameon=False)
    return figure


def moe_low_load_plot(dense_fit, moe_fit, *, per_figure: int = 8, prob: float = BAND_PROB):
    """Low-load zoom: data vs the dense law and the MoE-aware law, one panel per sweep."""

    labels = [label for label in moe_fit.groups["label"] if label in set(dense_fit.groups["label"])]
    labels = labels[:per_figure]
    columns = min(4, len(labels))
    rows_n = math.ceil(len(labels) / columns)
    figure, axes = plt.subplots(rows_n, columns, figsize=(3.6 * columns, 2.9 * rows_n),
                                squeeze=False)
    data = moe_fit.data
    for panel, label in enumerate(labels):
        axis = axes.flat[panel]
        points = data.loc[(data["group"] == label) & ~data["excluded"]]
        top = float(points["rps"].median()) * 1.05
        grid = np.linspace(0.0, top, 80)
        for fit, colour, name in ((dense_fit, "tab:orange", "dense law"),
                                  (moe_fit, "tab:blue", "MoE-aware")):
            g = list(fit.groups["label"]).index(label)
            curve = fit.group_curve(g).latency(grid)
            lo, median, hi = _quantiles(curve, prob)
            axis.fill_between(grid, lo, hi, color=colour, alpha=0.25, lw=0)
            axis.plot(grid, median, color=colour, lw=1.3, label=name)
        low = points[points["rps"] <= top]
        axis.scatter(low["rps"], low["latency_mean_s"], s=14, color="black", zorder=3)
        axis.set_title(label, fontsize=7)
        axis.tick_params(labelsize=7)
        axis.grid(alpha=0.3)
    for panel in range(len(labels), rows_n * columns):
        axes.flat[panel].set_visible(False)
    axes.flat[0].legend(fontsize=7)
    figure.supxlabel("RPS (low-load half of each sweep)")
    figure.supylabel("mean latency (s)")
    figure.tight_layout()
    return figure


def expert_coverage_plot(moe_fit, *, rps_points: int = 80):
    """phi (share of experts touched) vs RPS for each MoE sweep, at posterior medians."""
    from bayesspec.laws import expert_coverage

    figure, axis = plt.subplots(figsize=(7, 4.2))
    groups = moe_fit.groups
    for g, row in groups.iterrows():
        saturation = float(np.median(1.0 / moe_fit.group_curve(g).saturation_cost))
        grid = np.geomspace(0.01, min(0.95 * saturation, 1.2 * float(row["rps_max"])),
                            rps_points)
        latency = np.median(moe_fit.group_curve(g).latency(grid), axis=0)
        tokens = grid * latency * float(row["tokens_per_request"])
        phi = expert_coverage(tokens, float(row["experts_active"]), float(row["experts_total"]))
        axis.plot(grid, phi, lw=1, label=row["label"] if g < 10 else None)
    axis.set_xscale("log")
    axis.set_xlabel("RPS (log scale, up to 1.2 x the highest measured rate)")
    axis.set_ylabel("expert coverage phi(T), T = RPS*L*tokens")
    axis.set_ylim(0, 1.02)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=6)
    axis.set_title("Few experts are touched at low load: why MoE beats the dense law there",
                   fontsize=9)
    return figure


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


def slo_plot(laws: dict, document: dict, *, fit=None, prob: float = BAND_PROB,
             points: int = 120):
    """Each SLO target's latency summary against load, one panel per target: every
    configuration's fitted curve (median and ``prob`` band) up to where it saturates, the
    measured points (from ``fit``), the target (red), and each configuration's goodput at
    the document's SLO probability (a triangle on the rate axis).

    ``laws``: metric -> the setup's :class:`~bayesspec.prediction.Law` of that summary;
    ``document``: :func:`bayesspec.decisions.slo_decision`'s."""
    import pandas as pd

    from bayesspec.data.schema import METRIC_COLUMNS, metric_description

    metrics = list(document["slo"])
    measured = document.get("rps_measured_max")
    data = fit.data if fit is not None else None
    if data is not None and "group" in data.columns and document.get("configurations"):
        # The line marks the end of the points drawn: the highest fitted rate of the
        # configurations shown (set-aside points, e.g. a throughput run, are not drawn).
        shown = {getattr(laws[metrics[0]].curve(entry["alpha"], entry["k"]), "group", "")
                 for entry in document["configurations"]}
        fitted = data.loc[data["group"].isin(shown) & ~data["excluded"].astype(bool), "rps"]
        if len(fitted):
            measured = float(pd.to_numeric(fitted).max())
    rates = [row["rps"] for row in document["best_by_rps"]]
    top = max(rates + ([measured] if measured and np.isfinite(measured) else [])) * 1.05
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
            axis.plot([entry["rps_meeting_slo"]], [0], marker="^", ms=10, color=colour,
                      clip_on=False, zorder=6, transform=axis.get_xaxis_transform())
        axis.axhline(target, color="tab:red", lw=1.6, ls="--", label=f"target {target:g} s")
        axis.set_ylim(0, max(1.6 * target, 1.1 * highest))
        axis.set_xlim(0, top)
        _measured_line(axis, measured)
        axis.set_xlabel("request rate (RPS)")
        axis.set_ylabel(f"{metric_description(metric)} (s)")
        axis.set_title(f"{metric_description(metric)} <= {target:g} s", fontsize=9)
    axes[0][0].legend(fontsize=8, loc="upper left")
    figure.suptitle(f"SLO: {document['setup']}", fontsize=11)
    figure.supxlabel(f"{prob:.0%} bands of the fitted curves; triangles on the rate axis: the "
                     f"highest rate meeting the SLO with P >= {document['slo_prob']:g}",
                     fontsize=8)
    return figure


def acceptance_plot(report: dict):
    """Per setup: the per-position rates P(A >= i) at the largest measured k (fitted
    intervals, measured rates as points) and the acceptance length E(k) with intervals;
    measured k filled, extrapolated ones hollow."""
    setups = report["setups"]
    figure, axes = plt.subplots(len(setups), 2, figsize=(10.5, 3.4 * len(setups) + 0.6),
                                squeeze=False, layout="constrained")
    for row, setup in enumerate(setups):
        left, right = axes[row, 0], axes[row, 1]
        at_k = setup["at_measured_k"][-1]
        x = np.array([e["position"] for e in at_k["rates"]], dtype=float)
        left.fill_between(x, [e["lo"] for e in at_k["rates"]],
                          [e["hi"] for e in at_k["rates"]], color="#9ecae1", alpha=0.6,
                          lw=0, label=f"fitted, {report['prob']:.0%} interval")
        left.plot(x, [e["median"] for e in at_k["rates"]], color="#08306b", lw=1.2)
        for check in setup["measured_check"]:
            if check["k"] == at_k["k"]:
                left.scatter(x, [p["measured"] for p in check["positions"]], color="#cb181d",
                             zorder=3, s=14, label="measured")
        left.set_xlabel(f"draft position i (k = {at_k['k']})")
        left.set_ylabel("P(A >= i): drafts accepting i", fontsize=8)
        left.set_xticks(x)
        handles, labels = left.get_legend_handles_labels()
        unique = dict(zip(labels, handles))
        left.legend(unique.values(), unique.keys(), fontsize=7, loc="upper right")
        entries = setup["acceptance_length"]
        k = np.array([e["k"] for e in entries], dtype=float)
        median = np.array([e["median"] for e in entries])
        measured = np.array([e["measured"] for e in entries])
        right.fill_between(k, [e["lo"] for e in entries], [e["hi"] for e in entries],
                           color="#9ecae1", alpha=0.6, lw=0)
        right.plot(k, median, color="#08306b", lw=1.2)
        right.scatter(k[measured], median[measured], color="#08306b", zorder=3,
                      label="measured k")
        right.scatter(k[~measured], median[~measured], facecolors="none",
                      edgecolors="#08306b", zorder=3, label="not measured")
        right.set_xlabel("draft length k")
        right.set_ylabel("E(k): tokens committed per cycle", fontsize=8)
        right.set_xticks(k)
        right.legend(fontsize=7, loc="lower right")
        for axis in (left, right):
            axis.grid(alpha=0.3)
            axis.set_title(_wrap(f"{setup['setup']}: {setup['structure']}", 60), fontsize=8)
    figure.suptitle(f"acceptance as a token process ({report['convergence']})", fontsize=10)
    return figure
