"""The closed-loop figure: points at their concurrency, the law's band on that axis."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from bayesspec.errors import BadInput  # noqa: E402
from bayesspec.reporting.plots import closed_loop_groups, concurrency_plot  # noqa: E402
from tests.decisions.test_concurrency import closed_loop_fit  # noqa: E402


def test_points_sit_at_their_concurrency_on_the_laws_band():
    fit = closed_loop_fit(draws=200)
    assert closed_loop_groups(fit) == [0]
    figures = concurrency_plot(fit)
    latency_axis, rate_axis = figures[0].axes[:2]
    rows = fit.data
    for axis, column in ((latency_axis, "latency_mean_s"), (rate_axis, "rps")):
        points = np.concatenate([c.get_offsets() for c in axis.collections
                                 if len(c.get_offsets())
                                 and c.get_offsets().shape[0] == len(rows)])
        np.testing.assert_allclose(np.sort(points[:, 0]),
                                   np.sort(rows["max_concurrency"].astype(float)))
        np.testing.assert_allclose(np.sort(points[:, 1]), np.sort(rows[column]))
    # the median line is the law L = C1 + C2 N (its throughput N / L below) up to the top
    # fitted level; beyond it a limit the sweep did not reach may bind (never faster)
    line = latency_axis.lines[0]
    n, latency = line.get_xdata(), line.get_ydata()
    curve = fit.group_curve(0, admit_unmeasured=False)
    expected = np.median(np.ravel(curve.c1)[:, None] + np.ravel(curve.c2)[:, None] * n, axis=0)
    within = n <= 0.9 * rows["max_concurrency"].max()
    np.testing.assert_allclose(latency[within], expected[within], rtol=1e-9)
    assert np.all(latency[~within] >= expected[~within] * (1 - 1e-9))
    plt.close("all")


def test_an_open_loop_fit_has_no_concurrency_figure(dense_fit_factory):
    fit = dense_fit_factory(n_groups=1, draws=100)
    assert closed_loop_groups(fit) == []
    with pytest.raises(BadInput, match="closed loop"):
        concurrency_plot(fit)


def test_the_report_answers_closed_loop_groups_at_their_levels(dense_fit_factory):
    from bayesspec.reporting.pages import _closed_loop_table, _Section

    section = _Section()
    _closed_loop_table(section, closed_loop_fit(draws=200), "closed.nc", 0.9)
    (table,) = section.tables
    assert [row[1] for row in table["rows"]] == ["1", "2", "4", "8", "16", "32"]
    assert section.commands == ["bayesspec predict closed.nc --concurrency 1,2,4,8,16,32"]
    section = _Section()
    _closed_loop_table(section, dense_fit_factory(n_groups=1, draws=100), "open.nc", 0.9)
    assert section.tables == [] and section.commands == []
