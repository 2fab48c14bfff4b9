"""Figures. Each function takes a Fit, draws with matplotlib (Agg) and returns the Figure.

Plotting never happens inside the models; ``save_figure`` writes atomically.
"""

from __future__ import annotations

import math
import os
import warnings
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .decisions import latency_draws, predictive_latency_draws  # noqa: E402

BAND_PROB = 0.9


def save_figure(figure, path: str | os.PathLike, *, dpi: int = 120) -> str:
    path = Path(path)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix,
                                         dir=path.parent)
    os.close(handle)
    try:
        figure.savefig(temporary, dpi=dpi, bbox_inches="tight")
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
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
    c1_median = np.median(fit.draws("C1"), axis=0)
    c2_median = np.median(fit.draws("C2"), axis=0)
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
    noise_base = fit.draws("noise_base")[:max_draws]
    noise_load = fit.draws("noise_load")[:max_draws]
    ones = np.ones_like(noise_base)
    normalised = predictive_latency_draws(ones, ones, grid, noise_base, noise_load, rng)
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
            c1 = fit.draws("C1", g)[:max_draws]
            c2 = fit.draws("C2", g)[:max_draws]
            points = data.loc[row_labels == label]
            saturation = 1.0 / c2
            top = max(float(points["rps"].max()) if len(points) else 0.0,
                      float(np.median(saturation)))
            grid = np.linspace(0.0, top * 1.02, 160)
            curve = latency_draws(c1, c2, grid)
            predictive = predictive_latency_draws(c1, c2, grid,
                                                  fit.draws("noise_base")[:max_draws],
                                                  fit.draws("noise_load")[:max_draws], rng)
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
