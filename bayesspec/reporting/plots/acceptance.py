"""The figure of the acceptance process (docs/laws.md, "the acceptance process"): the
per-position acceptance rates and the acceptance length E(k) of each setup."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from bayesspec.reporting.plots.common import _wrap


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
                      edgecolors="#08306b", zorder=3, label="not measured (extrapolated)")
        right.set_xlabel("draft length k")
        right.set_ylabel("E(k): tokens committed per cycle", fontsize=8)
        right.set_xticks(k)
        right.legend(fontsize=7, loc="lower right")
        for axis in (left, right):
            axis.grid(alpha=0.3)
            axis.set_title(_wrap(f"{setup['setup']}: {setup['structure']}", 60), fontsize=8)
    figure.suptitle(f"acceptance as a token process ({report['convergence']})", fontsize=10)
    return figure
