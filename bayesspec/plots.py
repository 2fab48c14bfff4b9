"""Figures. Each function takes a Fit, draws with matplotlib (Agg) and returns the Figure.

Plotting never happens inside the models; ``save_figure`` writes atomically.
"""

from __future__ import annotations

import math
import os
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .outputs import atomic_path  # noqa: E402
from .prediction import Curve, Noise  # noqa: E402

BAND_PROB = 0.9


def save_figure(figure, path: str | os.PathLike, *, dpi: int = 120) -> str:
    """Write a figure atomically (PNG, or the format the suffix names) and close it."""
    try:
        with atomic_path(path) as temporary:
            figure.savefig(temporary, dpi=dpi, bbox_inches="tight")
    finally:
        plt.close(figure)
    return str(path)


def _quantiles(draws, prob=BAND_PROB):
    tail = (1 - prob) / 2
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns past saturation
        return np.nanquantile(draws, [tail, 0.5, 1 - tail], axis=0)


def collapse_plot(fit, *, seed: int = 0, max_draws: int = 1000):
    """All groups normalised by their posterior medians onto y = 1/(1-x).

    x = RPS*C2, y = L/C1. The band is the fitted measurement noise around the law
    (posterior predictive of a normalised observation), so points outside it are
    surprising, not merely scattered.
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
    figure, axis = plt.subplots(figsize=(7, 5))
    verifiers = rows["verifier"].astype(str).to_numpy()
    for name in sorted(set(verifiers)):
        mask = verifiers == name
        axis.scatter(x[mask], y[mask], s=14, alpha=0.75, label=name)

    grid = np.linspace(0.0, min(0.985, max(0.9, float(np.nanmax(x)) + 0.02)), 200)
    rng = np.random.default_rng(seed)
    noise = curves[0].noise
    noise = Noise(noise.base[:max_draws], noise.load[:max_draws])
    ones = np.ones_like(noise.base)
    normalised = Curve(ones, ones, noise=noise).predictive(grid, rng)
    lo, _, hi = _quantiles(normalised)
    axis.fill_between(grid, lo, hi, color="0.6", alpha=0.35,
                      label=f"{BAND_PROB:.0%} predictive band")
    axis.plot(grid, 1 / (1 - grid), color="black", lw=1.5, label="y = 1/(1 - x)")
    axis.set_xlabel("x = RPS · C2 (posterior median)")
    axis.set_ylabel("y = L / C1 (posterior median)")
    axis.set_yscale("log")
    axis.set_title(f"Collapse onto the latency law ({len(groups)} groups)")
    axis.legend(fontsize=8, loc="upper left")
    axis.grid(alpha=0.3)
    return figure


def group_fit_plots(fit, *, per_figure: int = 16, prob: float = BAND_PROB, seed: int = 0,
                    max_draws: int = 1000):
    """One panel per group: data, posterior mean curve, bands, saturation rate."""
    data = fit.data
    groups = fit.groups
    figures = []
    rng = np.random.default_rng(seed)
    row_labels = data["group"].to_numpy()
    for start in range(0, len(groups), per_figure):
        chunk = range(start, min(start + per_figure, len(groups)))
        columns = min(4, len(chunk))
        rows_n = math.ceil(len(chunk) / columns)
        figure, axes = plt.subplots(rows_n, columns, figsize=(3.6 * columns, 2.9 * rows_n),
                                    squeeze=False)
        for panel, g in enumerate(chunk):
            axis = axes.flat[panel]
            label = groups["label"].iloc[g]
            law = fit.group_curve(g)
            points = data.loc[row_labels == label]
            saturation = 1.0 / law.saturation_cost
            top = max(float(points["rps"].max()) if len(points) else 0.0,
                      float(np.median(saturation)))
            grid = np.linspace(0.0, top * 1.02, 160)
            curve = law.latency(grid)[:max_draws]
            predictive = law.predictive(grid, rng)[:max_draws]
            lo, _, hi = _quantiles(np.where(np.isfinite(curve), curve, np.nan), prob)
            plo, _, phi = _quantiles(np.where(np.isfinite(predictive), predictive, np.nan), prob)
            with np.errstate(invalid="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(np.where(np.isfinite(curve), curve, np.nan), axis=0)
            axis.fill_between(grid, plo, phi, color="tab:blue", alpha=0.12, lw=0)
            axis.fill_between(grid, lo, hi, color="tab:blue", alpha=0.35, lw=0)
            axis.plot(grid, mean, color="tab:blue", lw=1.2)
            used = points.loc[~points["excluded"]]
            dropped = points.loc[points["excluded"]]
            axis.scatter(used["rps"], used["latency_mean_s"], s=12, color="black", zorder=3)
            finite = used["latency_mean_s"].to_numpy(float)
            ceiling = float(finite.max()) * 1.6 if len(finite) else None
            # Saturated points sit far above the curve; pin them to the top edge.
            shown = dropped["latency_mean_s"].to_numpy(float)
            if ceiling is not None:
                shown = np.minimum(shown, ceiling * 0.97)
            axis.scatter(dropped["rps"], shown, s=18, marker="x", color="tab:red", zorder=3)
            s_lo, s_med, s_hi = np.quantile(saturation, [(1 - prob) / 2, 0.5, (1 + prob) / 2])
            axis.axvspan(s_lo, s_hi, color="tab:red", alpha=0.12, lw=0)
            axis.axvline(s_med, color="tab:red", lw=1, ls="--")
            if ceiling is not None:
                axis.set_ylim(0, ceiling)
            axis.set_title(label, fontsize=8)
            axis.tick_params(labelsize=7)
            axis.grid(alpha=0.3)
        for panel in range(len(chunk), rows_n * columns):
            axes.flat[panel].set_visible(False)
        figure.supxlabel("RPS (requests/s)")
        figure.supylabel("mean latency (s)")
        figure.suptitle(f"Fit per group: mean, {prob:.0%} band of the curve (dark) and of "
                        f"a new measurement (light); red: saturation rate, x: excluded as saturated (pinned to the top)",
                        fontsize=9)
        figure.tight_layout()
        figures.append(figure)
    return figures


# --------------------------------------------------------------------------------------
# Speculative decoding
# --------------------------------------------------------------------------------------

def speedup_bands_plot(costs, alpha: float, ks, *, rps_max: float | None = None,
                       prob: float = BAND_PROB, points: int = 120):
    """Speedup vs RPS for several k at one alpha, with bands and the crossovers marked.

    ``costs`` (a :class:`bayesspec.prediction.Law`) evaluates its own law: eq.
    (1) latencies, or eq. (4) for an MoE verifier."""
    dense_saturation = float(np.median(1.0 / costs.c2_dense))
    top = min(rps_max * 1.05, dense_saturation) if rps_max else dense_saturation
    grid = np.linspace(0.0, top * 0.995, points)
    figure, axis = plt.subplots(figsize=(7.5, 4.8))
    colours = plt.cm.viridis(np.linspace(0.05, 0.9, len(ks)))
    for colour, k in zip(colours, ks):
        draws = costs.speedup_draws(alpha, k, grid)
        lo, median, hi = _quantiles(np.minimum(draws, 50.0), prob)
        axis.fill_between(grid, lo, hi, color=colour, alpha=0.25, lw=0)
        axis.plot(grid, median, color=colour, lw=1.6, label=f"k = {k}")
        star = costs.crossover_draws(alpha, k)
        if np.mean(np.isfinite(star)) >= 0.5:
            s_lo, s_med, s_hi = np.quantile(star[np.isfinite(star)],
                                            [(1 - prob) / 2, 0.5, (1 + prob) / 2])
            if s_med <= grid[-1]:
                axis.axvspan(s_lo, s_hi, color=colour, alpha=0.12, lw=0)
                axis.plot([s_med], [1.0], marker="o", color=colour, ms=6, zorder=4)
    axis.axhline(1.0, color="black", lw=1, ls="--")
    axis.set_xlabel("RPS (requests/s)")
    law = " (MoE law, eq. 4)" if costs.law_name == "eq. (4)" else ""
    axis.set_ylabel(f"speedup = L_dense / L_SD{law}")
    axis.set_title(f"{costs.label}: speedup at alpha = {alpha:g} "
                   f"(median, {prob:.0%} band; dots: crossover RPS*)", fontsize=9)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
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
        axis.set_title(name, fontsize=9)
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    figure.suptitle(f"{costs.label}: the k that minimises C1R is not the one that minimises "
                    "C2R", fontsize=9)
    figure.tight_layout()
    return figure


def kstar_map_plot(document: dict):
    """Best k over (alpha, RPS), colour = k, opacity = posterior probability it is best."""
    table = document["table"]
    alphas = sorted({row["alpha"] for row in table})
    rates = sorted({row["rps"] for row in table})
    best = np.zeros((len(alphas), len(rates)))
    confidence = np.zeros_like(best)
    a_index = {a: i for i, a in enumerate(alphas)}
    r_index = {r: j for j, r in enumerate(rates)}
    for row in table:
        best[a_index[row["alpha"]], r_index[row["rps"]]] = row["k"]
        confidence[a_index[row["alpha"]], r_index[row["rps"]]] = row["p_best"]
    kmax = max(document.get("ks", [int(best.max())]))
    colours = plt.cm.viridis(best / max(kmax, 1))
    colours[..., 3] = 0.25 + 0.75 * confidence
    figure, axis = plt.subplots(figsize=(8, 4.8))

    def edges(values):
        values = np.asarray(values, dtype=float)
        if len(values) == 1:
            return np.array([values[0] - 0.5, values[0] + 0.5])
        middle = (values[1:] + values[:-1]) / 2
        return np.concatenate([[2 * values[0] - middle[0]], middle, [2 * values[-1] - middle[-1]]])

    x_edges, y_edges = edges(rates), edges(alphas)
    axis.imshow(colours, origin="lower", aspect="auto", interpolation="nearest",
                extent=(x_edges[0], x_edges[-1], y_edges[0], y_edges[-1]))
    if len(rates) > 1 and len(alphas) > 1:
        axis.contour(rates, alphas, best, levels=np.arange(0.5, kmax + 1), colors="white",
                     linewidths=0.6)
    for i, alpha in enumerate(alphas):
        for j in range(0, len(rates), max(1, len(rates) // 10)):
            axis.text(rates[j], alpha, f"{int(best[i, j])}", ha="center", va="center",
                      fontsize=6, color="white" if best[i, j] < kmax * 0.6 else "black")
    mappable = plt.cm.ScalarMappable(cmap="viridis", norm=plt.Normalize(0, kmax))
    figure.colorbar(mappable, ax=axis, label="k* (0 = do not speculate)")
    axis.set_xlabel("RPS (requests/s)")
    axis.set_ylabel("acceptance alpha")
    axis.set_title(f"{document.get('setup', '')}: best k ({document.get('objective', 'mean')}"
                   " objective); faded = less sure it is best", fontsize=9)
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


def compare_forest_plot(document: dict, *, max_rows: int = 40):
    """Forest plot of B/A ratios with the region of practical equivalence shaded."""
    items = list(document["parameters"].items())[:max_rows]
    figure, axis = plt.subplots(figsize=(8, 0.28 * len(items) + 1.5))
    rope = document["rope"]
    axis.axvspan(1 - rope, 1 + rope, color="0.85", label=f"+-{rope:.0%} (equivalent)")
    axis.axvline(1.0, color="black", lw=0.8)
    for row, (name, entry) in enumerate(items):
        ratio = entry["ratio"]
        colour = ("tab:red" if entry["p_practically_higher"] >= 0.95 else
                  "tab:blue" if entry["p_practically_lower"] >= 0.95 else "0.3")
        axis.plot([ratio["lo"], ratio["hi"]], [row, row], color=colour, lw=2)
        axis.plot([ratio["median"]], [row], "o", color=colour, ms=4)
    axis.set_yticks(range(len(items)))
    axis.set_yticklabels([name for name, _ in items], fontsize=7)
    axis.invert_yaxis()
    axis.set_xlabel("ratio B / A (median and interval)")
    axis.set_title(document["verdict"], fontsize=8)
    axis.legend(fontsize=7, loc="lower right")
    figure.tight_layout()
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
    from .laws import expert_coverage

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

    ``result`` is a :class:`bayesspec.sbc.SBCResult`. The grey band is the simultaneous
    ``prob`` band of a uniform ECDF (the whole curve stays inside it with probability
    ``prob`` when the ranks are uniform); red panels hold coefficients rejected at the
    result's per-coefficient level. A curve above zero at the left means true values
    sit low in their posteriors everywhere (the posterior overestimates); above zero in
    the left half and below in the right means ranks pile at both ends (posteriors too
    narrow), the mirror image means posteriors too wide.
    """
    import textwrap

    from .ranks import ecdf_band

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
    where misses are visible)."""
    figure, (axis, ratio_axis) = plt.subplots(1, 2, figsize=(12.0, 5.4))
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
    for a in (axis, ratio_axis):
        a.set_xscale("log")
        a.set_xlabel("observed mean latency (s)")
        a.grid(alpha=0.3)
    axis.set_yscale("log")
    axis.set_ylabel("predicted mean latency (s), held out")
    axis.legend(loc="upper left", fontsize=8)
    ratio_axis.axhline(1.0, color="black", lw=0.8)
    ratio_axis.set_ylabel(f"observed / predicted (lines: {prob:.0%} predictive interval)")
    figure.suptitle(f"{title}: {inside.mean():.0%} of {len(points)} held-out points inside "
                    f"their {prob:.0%} predictive interval", fontsize=10)
    figure.tight_layout()
    return figure
