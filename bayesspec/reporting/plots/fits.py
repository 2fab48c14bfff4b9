"""Figures of a fitted latency law against its data: the collapse of every group onto
the law (docs/laws.md, eq. (1)), one panel per group, the MoE-aware law at low load and
its expert coverage (eq. (4)), and the joint six cycle coefficients against separate fits
of each configuration (eq. (3))."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from bayesspec.prediction import Curve, Noise
from bayesspec.reporting.plots.common import (BAND_PROB, FITTED_LABEL, FITTED_STYLE,
                                              _fitted_line, _monotone_band,
                                              _plain_log_axis, _quantiles, _replicates,
                                              _saturating_quantiles, _wrap)


def collapse_plot(fit, *, seed: int = 0, max_draws: int = 1000):
    """All groups normalised by their posterior medians onto y = 1/(1-x).

    x = RPS*C2, y = L/C1. The band is the fitted measurement noise around the law
    (posterior predictive of a normalised observation), so points outside it are
    surprising, not merely scattered. The lower panel divides by the law, so the band's
    width (a few percent, growing near saturation) is visible at every load; the
    triangles on top mark each group's highest fitted rate (x beyond them is the law
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
    # Each group's highest fitted rate, normalised: beyond it the law is extrapolated.
    highest = np.array([np.max(x[index == g]) for g in np.unique(index)])
    axis.scatter(highest, np.full(highest.shape, 0.985), marker="v", s=28, color="0.15",
                 transform=axis.get_xaxis_transform(), clip_on=False, zorder=4,
                 label=f"{FITTED_LABEL} of a group")
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
                    max_draws: int = 1000, pages: int | None = None):
    """One panel per group: data, posterior median curve, bands, saturation rate, the highest
    fitted rate (points set aside are drawn as crosses); under it the same divided by the
    posterior median curve, where the bands' widths (a few percent) are visible at every
    load. ``pages``: at most that many figures (the first groups), None: every group."""
    data = fit.data
    groups = fit.groups
    if pages is not None:
        groups = groups.iloc[: pages * per_figure]
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
            fitted = float(used["rps"].max()) if len(used) else None
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
                _fitted_line(target, fitted, label=False)
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
            near = grid <= (fitted if fitted else top) * 1.03
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
            Line2D([], [], color="black", marker="o", ls="none", ms=4, label="fitted point"),
            Line2D([], [], color="tab:red", marker="x", ls="none", ms=5,
                   label="set aside (`fit` lists why; pinned to the top edge when above)"),
            Line2D([], [], color=line_colour, lw=1.2, label="posterior median curve"),
            Patch(color=curve_colour, alpha=0.6, label=f"{prob:.0%} band of the curve"),
            Patch(facecolor=new_colour, alpha=0.55, edgecolor=curve_colour, ls="--",
                  label=f"{prob:.0%} band of a new measurement"),
            Line2D([], [], color="tab:red", ls="--", lw=1,
                   label=f"saturation rate 1/C2 (median, {prob:.0%} interval)"),
            Line2D([], [], **FITTED_STYLE,
                   label=f"{FITTED_LABEL} (to its right: extrapolation)"),
        ]
        figure.legend(handles=handles, loc="outside upper center", ncol=4, fontsize=8,
                      frameon=False)
        figure.supxlabel("RPS (requests/s)", fontsize=9)
        figures.append(figure)
    return figures


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
    axis.set_xlabel("RPS (log scale, up to 1.2 x the highest fitted rate)")
    axis.set_ylabel("expert coverage phi(T), T = RPS*L*tokens")
    axis.set_ylim(0, 1.02)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=6)
    axis.set_title("Few experts are touched at low load: why MoE beats the dense law there",
                   fontsize=9)
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
