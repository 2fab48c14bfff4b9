"""Figures: fast checks (no MCMC) on synthetic posterior draws.

Speculative figures get their draws from one helper (:func:`make_costs`), Fit-based
figures from a synthetic posterior wrapped by ``Fit.from_sampling``. The checks are on
what a reader relies on: the recommended k is drawn, curves end at saturation instead of
running on as zeros, the k* map's colours and labels, visible bands, no colliding tick
labels, and that a saved figure is a PNG.
"""

from __future__ import annotations

from itertools import combinations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PatchCollection, PolyCollection  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402

from bayesspec.reporting import plots  # noqa: E402
from bayesspec.decisions import kstar_table  # noqa: E402
from bayesspec.inference.fitfile import Fit  # noqa: E402
from bayesspec.prediction import COEFFICIENT_NAMES  # noqa: E402
from bayesspec.simulate.synthetic import DENSE_TRUTH_8B, SPECULATIVE_TRUTH_8B  # noqa: E402
from tests.conftest import synthetic_dense_fit  # noqa: E402

ALPHA = 0.7


# ---------------------------------------------------------------------------- helpers

def make_costs(draws: int = 400, seed: int = 0, spread: float = 0.05):
    """Posterior-like draws of one SD setup (Llama-3.1-8B + EAGLE-3, 512/512 tokens).

    The only place that constructs the costs object the speculative figures take (the
    figures use only its speedup_draws, crossover_draws, costs, c1_dense, c2_dense, label
    and law_name)."""
    from bayesspec.prediction import CoefficientLaw, Curve

    rng = np.random.default_rng(seed)
    coefficients = {name: SPECULATIVE_TRUTH_8B[name] * np.exp(rng.normal(0, spread, draws))
                    for name in COEFFICIENT_NAMES}
    dense = Curve(DENSE_TRUTH_8B["C1"] * np.exp(rng.normal(0, spread / 2, draws)),
                  DENSE_TRUTH_8B["C2"] * np.exp(rng.normal(0, spread / 2, draws)))
    return CoefficientLaw("Llama-3.1-8B + EAGLE3 512/512", dense, coefficients, 512.0)


def make_fit(n_groups: int = 4, draws: int = 100, seed: int = 0) -> Fit:
    """A dense-model Fit whose posterior is synthetic draws around the true C1, C2."""
    return synthetic_dense_fit(n_groups, draws, seed)


def legend_texts(axis) -> list[str]:
    legend = axis.get_legend()
    return [text.get_text() for text in legend.get_texts()] if legend else []


def visible_boxes(texts, renderer, *, view=None, axis_name="x"):
    """Window extents of drawn, non-empty texts (tick labels inside the view only)."""
    boxes = []
    for text in texts:
        if not text.get_visible() or not text.get_text().strip():
            continue
        if view is not None:
            position = text.get_position()[0 if axis_name == "x" else 1]
            if not min(view) <= position <= max(view):
                continue
        boxes.append(text.get_window_extent(renderer))
    return boxes


def overlapping(boxes) -> list:
    return [(a, b) for a, b in combinations(boxes, 2) if a.overlaps(b)]


@pytest.fixture(scope="module")
def costs():
    return make_costs()


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# ---------------------------------------------------------------------------- speedup

def _median_lines(figure):
    axis = figure.axes[0]
    return {line.get_label(): line for line in axis.get_lines()
            if line.get_label().startswith("k = ")}


def test_speedup_plot_always_draws_the_recommended_k(costs):
    figure = plots.speedup_bands_plot(costs, ALPHA, [1, 2, 8], recommended_k=3)
    texts = legend_texts(figure.axes[0])
    assert "k = 3 (recommended)" in texts
    assert sum("recommended" in t for t in texts) == 1
    lines = _median_lines(figure)
    assert lines["k = 3 (recommended)"].get_linewidth() > 1.5 * lines["k = 1"].get_linewidth()
    # The strip lists every k drawn, the recommended one included.
    assert [t.get_text() for t in figure.axes[1].get_yticklabels()] == [
        "k = 1", "k = 2", "k = 3", "k = 8"]


def test_speedup_plot_recommending_dense_draws_the_dense_line(costs):
    figure = plots.speedup_bands_plot(costs, 0.55, [1, 2], recommended_k=0)
    assert any(t.startswith("k = 0") and "recommended" in t
               for t in legend_texts(figure.axes[0]))


def test_speedup_curves_end_where_sd_saturates(costs):
    """No flat zero tail: each median line stops before half the draws are saturated."""
    ks = [1, 2, 4, 8]
    dense_saturation = float(np.median(1 / costs.c2_dense))
    figure = plots.speedup_bands_plot(costs, ALPHA, ks, rps_max=dense_saturation,
                                      recommended_k=2)
    lines = _median_lines(figure)
    ended = 0
    for k in ks:
        line = lines[f"k = {k}" + (" (recommended)" if k == 2 else "")]
        x, y = np.asarray(line.get_xdata()), np.asarray(line.get_ydata())
        _, c2_sd = costs.costs(ALPHA, k)
        sd_saturation = float(np.median(1 / np.ravel(c2_sd)))
        assert np.all(y > 0), f"k = {k} has a zero tail"
        assert x.max() <= sd_saturation
        if sd_saturation < dense_saturation * 0.99:  # the grid went past SD saturation
            ended += 1
            assert x.max() >= 0.95 * sd_saturation  # but the curve reaches it
    assert ended >= 3  # the case the test is about happens
    assert any("saturated" in t for t in legend_texts(figure.axes[0]))
    # No band polygon reaches down to zero either.
    for collection in figure.axes[0].collections:
        if isinstance(collection, PolyCollection) and collection.get_label() != \
                "beyond the highest fitted rate (extrapolation)":
            for path in collection.get_paths():
                assert path.vertices[:, 1].min() > 0


def test_speedup_y_range_ignores_the_dense_saturation_spike(costs):
    """At high alpha C2R < 1: the speedup grows without bound as the dense baseline
    saturates. The y range follows the curves up to 90% of the dense saturation rate;
    a curve leaving the top is marked, not allowed to squash everything else."""
    dense_saturation = float(np.median(1 / costs.c2_dense))
    figure = plots.speedup_bands_plot(costs, 0.99, [1, 10], recommended_k=10)
    axis = figure.axes[0]
    line = _median_lines(figure)["k = 10 (recommended)"]
    x, y = np.asarray(line.get_xdata()), np.asarray(line.get_ydata())
    assert y.max() > 5 * y[x <= 0.9 * dense_saturation].max()  # the spike is there
    top = axis.get_ylim()[1]
    assert top <= 1.5 * y[x <= 0.9 * dense_saturation].max()
    assert any(t.startswith("leaves the plot") for t in legend_texts(axis))
    plain = plots.speedup_bands_plot(costs, ALPHA, [1, 2])
    assert not any(t.startswith("leaves the plot") for t in legend_texts(plain.axes[0]))


def test_speedup_marks_the_highest_fitted_rate_and_extrapolated_rps_star(costs):
    """A law that does not know its fitted rates takes the line's rate as the boundary
    of every k (the figure calls it the highest fitted rate, as the tables do)."""
    measured = 11.0
    figure = plots.speedup_bands_plot(costs, ALPHA, [1, 2, 4], recommended_k=2,
                                      rps_measured_max=measured)
    assert any(t.startswith("highest fitted rate") for t in legend_texts(figure.axes[0]))
    assert not any("highest measured" in t for t in legend_texts(figure.axes[0]))
    verticals = [line for line in figure.axes[0].get_lines()
                 if np.allclose(line.get_xdata(), measured)]
    assert verticals
    side = figure.axes[2]  # the strip's right-hand labels
    labels = {k: t.get_text() for k, t in zip([1, 2, 4], side.get_yticklabels())}
    for k, text in labels.items():
        star = costs.crossover_draws(ALPHA, k)
        median = float(np.median(star[np.isfinite(star)]))
        assert text.startswith("RPS*")
        assert ("extrapolated" in text) == (median > measured), (k, text)
    assert any(not "extrapolated" in t for t in labels.values())
    assert any("extrapolated" in t for t in labels.values())


def fitted_costs(dense_top: float, sd_tops: dict[int, float], alpha: float = ALPHA):
    """:func:`make_costs` with the fitted rates a fit knows: the dense baseline fitted up
    to ``dense_top``, SD at ``alpha`` and each k up to ``sd_tops[k]``."""
    from bayesspec.prediction import CoefficientLaw, MeasuredConfiguration

    base = make_costs()
    dense = base.dense
    dense.rps_fitted_max = dense_top
    return CoefficientLaw(base.label, dense, base.coefficients, base.decode_tokens,
                          measured_configurations=[MeasuredConfiguration(alpha, k, top)
                                                   for k, top in sd_tops.items()])


def _marker_face(axis, gid: str):
    """The face colour of the markers drawn with ``gid`` (RGBA)."""
    lines = [line for line in axis.get_lines() if line.get_gid() == gid]
    assert lines, gid
    return to_rgba(lines[0].get_markerfacecolor())


def test_each_k_is_marked_by_its_own_highest_fitted_rate_as_crossover_marks_it():
    """k = 4's RPS* (about 17 RPS at alpha 0.7) lies above its own highest fitted rate
    (16) and below the dense baseline's (20): `crossover` calls it extrapolated, and so
    must the figure (hollow marker, "extrapolated", its curve dashed from 16), while k = 1
    and 2, whose RPS* lie inside their fitted rates, are drawn as measured. One dotted line
    for every k (the dense baseline's) would have drawn k = 4 as measured."""
    from bayesspec.decisions import crossover

    law = fitted_costs(20.0, {1: 9.0, 2: 14.0, 4: 16.0})
    ks = [1, 2, 4]
    marks = {k: crossover(law, ALPHA, k)["extrapolated"] for k in ks}
    assert marks == {1: False, 2: False, 4: True}      # the case the test is about
    figure = plots.speedup_bands_plot(law, ALPHA, ks, rps_max=20.0)
    axis, strip, side = figure.axes[:3]
    labels = dict(zip(ks, (t.get_text() for t in side.get_yticklabels())))
    for k in ks:
        assert ("extrapolated" in labels[k]) == marks[k], (k, labels[k])
        hollow = _marker_face(axis, f"rps-star-k{k}") == to_rgba("white")
        assert hollow == marks[k], k
        assert (_marker_face(strip, f"rps-star-k{k}") == to_rgba("white")) == marks[k]
    # each curve is solid up to its own boundary and dashed past it
    lines = {line.get_gid(): line for line in axis.get_lines() if line.get_gid()}
    for k, top in ((1, 9.0), (2, 14.0), (4, 16.0)):
        assert max(lines[f"k{k}"].get_xdata()) <= top
        dashed = lines.get(f"k{k}-extrapolated")
        assert dashed is not None and min(dashed.get_xdata()) <= top
        assert min(dashed.get_xdata()) >= top - 0.2 and dashed.get_linestyle() != "-"
    # the dotted line is the dense baseline's highest fitted rate, and says so
    assert any(t.startswith("highest fitted rate of the dense baseline (20 RPS")
               for t in legend_texts(axis))


def test_an_unmeasured_k_is_dashed_throughout_and_its_rps_star_hollow():
    law = fitted_costs(30.0, {2: 25.0, 4: 25.0})
    figure = plots.speedup_bands_plot(law, ALPHA, [1, 2], rps_max=20.0)
    axis = figure.axes[0]
    gids = {line.get_gid() for line in axis.get_lines()}
    assert "k1" not in gids and "k1-extrapolated" in gids and "k2" in gids
    assert any(t.startswith("k = 1: not measured") for t in legend_texts(axis))
    assert _marker_face(axis, "rps-star-k1") == to_rgba("white")


def test_cost_ratios_of_unmeasured_k_are_hollow():
    law = fitted_costs(20.0, {2: 15.0, 3: 15.0, 4: 15.0})
    figure = plots.cost_ratio_plot(law, [ALPHA], range(1, 7))
    for axis in figure.axes:
        hollow = [line for line in axis.get_lines() if line.get_gid() == "extrapolated"]
        assert len(hollow) == 1 and list(hollow[0].get_xdata()) == [1, 5, 6]
        assert to_rgba(hollow[0].get_markerfacecolor()) == to_rgba("white")


def test_speedup_without_measured_rate_has_no_marker(costs):
    figure = plots.speedup_bands_plot(costs, ALPHA, [1, 2])
    assert not any(t.startswith("highest fitted") for t in legend_texts(figure.axes[0]))


# ---------------------------------------------------------------------------- k* map

def _kstar_document(table_rows, ks):
    return {"setup": "test", "objective": "mean", "ks": list(ks), "table": table_rows}


def _row(alpha, rps, k, p_best):
    return {"alpha": alpha, "rps": rps, "k": k, "p_best": p_best,
            "speedup": {"median": 1.0, "lo": 1.0, "hi": 1.0}, "k_batch1": 1,
            "loss_vs_batch1": 0.0}


def test_kstar_map_colours_labels_boundaries_and_uncertainty():
    best = [[0, 0, 1, 1], [2, 2, 4, 4]]           # alpha rows; k = 4 is the top searched
    p_best = [[0.9, 0.4, 0.8, 0.3], [1.0, 0.9, 0.6, 0.95]]
    table = [_row(alpha, rps, best[i][j], p_best[i][j])
             for i, alpha in enumerate((0.6, 0.8)) for j, rps in enumerate((0, 5, 10, 15))]
    figure = plots.kstar_map_plot(_kstar_document(table, range(0, 5)))
    axis = figure.axes[0]
    handles = axis.get_legend().legend_handles
    texts = legend_texts(axis)
    assert texts[0].startswith("0: do not speculate")
    assert any(t.startswith(">= 4") for t in texts)
    assert not any(t.startswith("4") for t in texts)  # only as ">= 4"
    colours = [tuple(np.round(h.get_facecolor(), 3)) for h in handles[:-1]]
    assert len(set(colours)) == len(colours) == 4  # k = 0, 1, 2, 4: one colour each
    # Region labels in the map: ">= 4" for the top of the searched range.
    assert ">= 4" in [t.get_text() for t in axis.texts]
    # Hatched cells: exactly the two with p_best < 0.5.
    hatched = [c for c in axis.collections if isinstance(c, PatchCollection)]
    assert len(hatched) == 1 and len(hatched[0].get_paths()) == 2
    assert any("P(best) < 0.5" == t for t in texts)
    # Cell-edge boundaries: between every pair of neighbours with different k.
    boundaries = [c for c in axis.collections if type(c).__name__ == "LineCollection"]
    assert len(boundaries[0].get_segments()) == 2 + 4  # 2 inside rows, 4 between rows


def test_kstar_map_from_kstar_table_keeps_colours_consistent(costs):
    document = kstar_table(costs, [0.6, 0.8, 0.95], np.linspace(0, 20, 5), ks=range(0, 6))
    figure = plots.kstar_map_plot(document)
    present = sorted({row["k"] for row in document["table"]})
    handles = figure.axes[0].get_legend().legend_handles[:-1]
    assert len(handles) == len(present)
    for k, handle in zip(present, handles):
        assert np.allclose(handle.get_facecolor(), plots.k_colour(k))
    top = max(document["ks"])
    assert any(t.startswith(f">= {top}") for t in legend_texts(figure.axes[0])) == \
        (top in present)


def test_k_colours_are_distinct_for_small_k():
    colours = [tuple(np.round(plots.k_colour(k), 3)) for k in range(0, 21)]
    assert len(set(colours)) == len(colours)
    assert plots.k_colour(0) == to_rgba(plots.K_ZERO_COLOUR)


# ---------------------------------------------------------------------------- compare

def _compare_document(names, **extra):
    rng = np.random.default_rng(1)
    parameters = {}
    for name in names:
        ratio = {"median": 1 + rng.normal(0, 0.03)}
        ratio.update(lo=ratio["median"] - 0.04, hi=ratio["median"] + 0.04)
        parameters[name] = {"ratio": ratio, "p_practically_higher": 0.2,
                            "p_practically_lower": 0.97 if name.startswith("c2v") else 0.1}
    return {"parameters": parameters, "verdict": "C1 equivalent (within +-2%); C2 uncertain: "
            "collect more data (geometric mean over 12 shared groups)", "rope": 0.02,
            "prob": 0.9, **extra}


LONG_NAMES = ([f"{c}[Qwen3-14B/p{p}/d{d}/H100/vllm-0.13.0-very-long-engine-tag]"
               for p in (256, 512, 768) for d in (256, 512, 1024) for c in ("C1", "C2")]
              + ["C1", "C2"]
              + [f"{c}[Llama-3.1-8B+EAGLE3-LLaMA3.1-Instruct-8B/512/512/H100/vllm]"
                 for c in COEFFICIENT_NAMES])


def test_forest_plot_labels_do_not_collide():
    figure = plots.compare_forest_plot(_compare_document(LONG_NAMES), label_a="old.nc",
                                       label_b="new.nc")
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    axis = figure.axes[0]
    ticks = visible_boxes(axis.get_yticklabels(), renderer)
    headers = visible_boxes(axis.texts, renderer)
    assert len(ticks) == len(LONG_NAMES)
    assert headers  # the long group names went into header rows
    assert not overlapping(ticks + headers)
    # Headers stay inside the figure.
    width = figure.bbox.width
    assert all(box.x1 <= width and box.x0 >= 0 for box in headers)
    assert "A = old.nc" in axis.get_xlabel() and "B = new.nc" in axis.get_xlabel()
    assert "ratio B / A" in axis.get_xlabel()


def test_forest_plot_names_a_and_b_from_the_document():
    figure = plots.compare_forest_plot(_compare_document(["C1", "C2"], a="0.12.0",
                                                         b="0.13.0"))
    label = figure.axes[0].get_xlabel()
    assert "A = 0.12.0" in label and "B = 0.13.0" in label


def test_forest_plot_grows_with_rows():
    short = plots.compare_forest_plot(_compare_document(["C1", "C2"]))
    tall = plots.compare_forest_plot(_compare_document(LONG_NAMES))
    assert tall.get_figheight() > 3 * short.get_figheight()


# ---------------------------------------------------------------------------- holdout

@pytest.mark.parametrize("log_sd", [0.2, 0.6, 1.5])
def test_holdout_plot_tick_labels_do_not_collide(log_sd):
    rng = np.random.default_rng(3)
    observed = np.exp(rng.normal(2.0, log_sd, 60))
    predicted = observed * np.exp(rng.normal(0, 0.05, 60))
    points = pd.DataFrame({"observed_s": observed, "predicted_s": predicted,
                           "lo": predicted * 0.9, "hi": predicted * 1.1})
    points["inside"] = (points["observed_s"] >= points["lo"]) & \
        (points["observed_s"] <= points["hi"])
    figure = plots.holdout_plot(points, title="leave-2-out")
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    for axis in figure.axes:
        for name, ticks in (("x", axis.xaxis), ("y", axis.yaxis)):
            labels = ticks.get_ticklabels(which="both")
            view = axis.get_xlim() if name == "x" else axis.get_ylim()
            boxes = visible_boxes(labels, renderer, view=view, axis_name=name)
            assert len(boxes) >= 2, (name, log_sd)
            assert not overlapping(boxes), (name, log_sd, [t.get_text() for t in labels])


# ---------------------------------------------------------------------------- dense fits

@pytest.fixture(scope="module")
def fit():
    return make_fit()


def test_collapse_plot_band_is_visible_and_measured_rates_marked(fit):
    figure = plots.collapse_plot(fit)
    axis, ratio_axis = figure.axes[:2]
    for target in (axis, ratio_axis):
        bands = [c for c in target.collections if isinstance(c, PolyCollection)]
        assert bands and bands[0].get_alpha() >= 0.3
        assert bands[0].get_zorder() < max(c.get_zorder() for c in target.collections)
    # the triangles mark the rates the fit used: "highest fitted", as the tables say
    assert "highest fitted rate of a group" in legend_texts(axis)
    # The ratio panel is zoomed on the band: a few percent wide fills a visible share.
    low, high = ratio_axis.get_ylim()
    assert high / low < 3


def test_group_fit_plots_mark_highest_fitted_rate_and_end_bands(fit, tmp_path):
    figures = plots.group_fit_plots(fit)
    assert len(figures) == 1
    figure = figures[0]
    data = fit.data
    labels = list(fit.groups["label"])
    panels = [a for a in figure.axes if a.get_title() in labels]
    assert len(panels) == len(labels)
    for axis in panels:
        used = data.loc[(data["group"] == axis.get_title()) & ~data["excluded"]]
        measured = float(used["rps"].max())
        assert any(np.allclose(line.get_xdata(), measured) for line in axis.get_lines())
        # The lower edge of a new measurement's band never falls with load.
        edges = [line for line in axis.get_lines() if line.get_linestyle() == "--"
                 and line.get_color() != "tab:red" and len(line.get_xdata()) > 10]
        lower = np.asarray(edges[0].get_ydata(), dtype=float)
        lower = lower[np.isfinite(lower)]
        assert np.all(np.diff(lower) >= -0.05 * lower[:-1])
    assert any(t.get_text().startswith("highest fitted rate")
               for legend in figure.legends for t in legend.get_texts())
    assert not any("highest measured" in t.get_text()
                   for legend in figure.legends for t in legend.get_texts())
    path = plots.save_figure(figure, tmp_path / "groups.png")
    with open(path, "rb") as handle:
        assert handle.read(8) == b"\x89PNG\r\n\x1a\n"


def test_save_figure_writes_png_atomically(costs, tmp_path):
    target = tmp_path / "speedup.png"
    path = plots.save_figure(plots.speedup_bands_plot(costs, ALPHA, [1, 2], recommended_k=1),
                             target)
    assert path == str(target)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert target.stat().st_size > 10_000
    assert [p.name for p in tmp_path.iterdir()] == ["speedup.png"]  # no temporary left
