"""The figure of a comparison of two fits: a forest of B/A ratios with the region of
practical equivalence."""

from __future__ import annotations

import re

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from bayesspec.reporting.plots.common import BAND_PROB, _wrap


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
