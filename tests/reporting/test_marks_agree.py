"""One notion of "outside the data" in every output: on the README walkthrough's sweeps
(simulated as the walkthrough makes them, fitted by a small real fit), the command line's
JSON and the report's tables and figures carry the same extrapolation marks, the Python
API's figures too, and "highest fitted" / "highest measured" mean one thing each."""

from __future__ import annotations

import fcntl
import os

import json
import math
import shlex
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402

from bayesspec.cli import main  # noqa: E402
from bayesspec.data import read_tidy  # noqa: E402
from bayesspec.inference import SamplerSettings  # noqa: E402
from bayesspec.reporting.pages import interval, number, report_document  # noqa: E402

EXAMPLES = Path(__file__).parents[2] / "examples"
WHITE = to_rgba("white")


@pytest.fixture(scope="module")
def walkthrough(tmp_path_factory):
    """`bayesspec simulate --grid examples/walkthrough.toml` fitted by the speculative
    model (few draws: the marks, not the statistics, are under test)."""
    from bayesspec.bayes import load_fit
    from bayesspec.bayes.workflow import fit

    # built once per test run and shared by the xdist workers (their base folders share
    # this run's parent); the first worker to get the lock fits, the others read its file
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "walkthrough_marks"
    folder.mkdir(exist_ok=True)
    path = folder / "fit.nc"
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            sweeps = folder / "sweeps.csv"
            assert main(["simulate", "--grid", str(EXAMPLES / "walkthrough.toml"), "-o",
                         str(sweeps), "--quiet"]) == 0
            fit(read_tidy(sweeps), "speculative",
                settings=SamplerSettings(draws=200, tune=300, chains=2, seed=1,
                                         progress=False)).save(path)
    fitted = load_fit(path)
    document = report_document([fitted], [str(path)])
    return fitted, path, document


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def cli_json(capsys, *argv) -> dict:
    capsys.readouterr()
    assert main([*map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def table(section: dict, title_part: str) -> dict:
    found = [t for t in section["tables"] if title_part in t["title"]]
    assert len(found) == 1, [t["title"] for t in section["tables"]]
    return found[0]


def figure(section: dict, name: str):
    return next(f["figure"] for f in section["figures"] if f["name"] == name)


def rps_star_faces(axis) -> dict[int, bool]:
    """k -> whether that k's RPS* marker is hollow (drawn as extrapolated)."""
    return {int(line.get_gid().rsplit("k", 1)[1]): to_rgba(line.get_markerfacecolor()) == WHITE
            for line in axis.get_lines()
            if str(line.get_gid()).startswith("rps-star-k")}


def dashed_from(axis, k: int) -> float | None:
    """Where k's curve turns dashed (extrapolated), None when it never does."""
    for line in axis.get_lines():
        if line.get_gid() == f"k{k}-extrapolated":
            return float(min(line.get_xdata()))
    return None


def test_report_tables_carry_the_marks_of_the_json_answers(walkthrough, capsys):
    """The k* table and the crossover table of the page against `kstar --json` (the
    page's own reproduce command) and `crossover --json`, row by row."""
    _, path, document = walkthrough
    section = document["sections"][0]
    command = next(c for c in section["commands"] if c.startswith("bayesspec kstar"))
    kstar = cli_json(capsys, *shlex.split(command)[1:])
    by_row = {(f"{row['alpha']:g}", number(row["rps"])): row for row in kstar["table"]}
    rows = table(section, "best draft length k*")["rows"]
    assert rows
    for alpha, rate, k, p_best, speedup, _ in rows:
        row = by_row[(alpha, rate.rstrip("*"))]
        assert rate.endswith("*") == row["extrapolated"], (alpha, rate, row)
        assert k.endswith(str(row["k"])) and speedup == interval(row["speedup"])
    marked = 0
    below_dense = 0
    for alpha, k, star, _, extrapolated in table(section, "crossover RPS*")["rows"]:
        k = int(k.split()[0])
        answer = cli_json(capsys, "crossover", path, "--alpha", alpha, "--k", k)
        assert star == interval(answer["rps_star"])
        assert (extrapolated == "yes") == answer["extrapolated"], (alpha, k, answer)
        marked += answer["extrapolated"]
        # marked against its own highest fitted rate though below the dense baseline's
        median = answer["rps_star"]["median"]
        below_dense += (answer["extrapolated"]
                        and median < answer["measured"]["dense_rps_fitted_max"])
    assert marked and below_dense        # the cases the test is about happen here


def test_figures_and_the_python_api_mark_what_crossover_marks(walkthrough, capsys):
    """A k whose RPS* lies above its own highest fitted rate (k = 4 at alpha 0.8 on these
    sweeps) is hollow in the report's figure and in `fit.plot_speedup`, as `crossover`
    marks it; each curve turns dashed at the highest fitted rate `speedup` gives it."""
    fitted, path, document = walkthrough
    section = document["sections"][0]
    report_axis = figure(section, "speedup").axes[0]
    api_axis = fitted.plot_speedup(0.8, [2, 3, 4]).axes[0]
    for axis in (report_axis, api_axis):
        faces = rps_star_faces(axis)       # the RPS* drawn (inside the plotted rates)
        assert 4 in faces
        for k, hollow in faces.items():
            answer = cli_json(capsys, "crossover", path, "--alpha", 0.8, "--k", k)
            assert hollow == answer["extrapolated"], (k, answer["rps_star"])
        for k in (2, 3, 4):
            curve = cli_json(capsys, "speedup", path, "--alpha", 0.8, "--k", k, "--rps", 1)
            top = curve["rps_fitted_max"]
            start = dashed_from(axis, k)
            assert start is not None and abs(start - top) < 0.2, (k, start, top)
    assert rps_star_faces(report_axis)[4] and rps_star_faces(api_axis)[4]


def test_kstar_map_dots_the_cells_kstar_marks(walkthrough, capsys):
    fitted, path, document = walkthrough
    section = document["sections"][0]
    axis = figure(section, "kstar").axes[0]
    dotted = [c for c in axis.collections if getattr(c, "get_hatch", lambda: None)() == ".."]
    cells = len(dotted[0].get_paths()) if dotted else 0
    from bayesspec.reporting.pages import _rates

    top = _rates(fitted.law())[-1]
    grid_alphas = np.round(np.arange(0.5, 0.951, 0.05), 2)
    grid_rates = np.round(np.linspace(top / 24, top, 24), 4)
    answer = cli_json(capsys, "kstar", path, "--alpha", ",".join(f"{a:g}" for a in grid_alphas),
                      "--rps", ",".join(repr(float(r)) for r in grid_rates))
    expected = sum(row["extrapolated"] for row in answer["table"])
    assert 0 < expected < len(answer["table"]) and cells == expected


def test_kstar_outside_the_measured_alphas_is_marked_in_text_and_json(walkthrough, capsys):
    """Measured alphas 0.7-0.8; at alpha 0.3 the law says "do not speculate" with
    P(best) near 1, read off SD's law at an acceptance never measured."""
    _, path, _ = walkthrough
    answer = cli_json(capsys, "kstar", path, "--alpha", 0.3, "--rps", "2,8")
    for row in answer["table"]:
        assert row["k"] == 0 and row["p_best"] > 0.9        # the confident answer
        assert row["extrapolated"]
        assert any("alpha 0.3 is outside the measured acceptance (0.7-0.8)" in note
                   for note in row["design_notes"])
    capsys.readouterr()
    assert main(["kstar", str(path), "--alpha", "0.3", "--rps", "2,8"]) == 0
    text = capsys.readouterr().out
    lines = [line for line in text.splitlines() if line.strip().startswith("0.3")]
    assert len(lines) == 2 and all(line.split()[1].endswith("*") for line in lines)
    assert "alpha 0.3 is outside the measured acceptance (0.7-0.8)" in text
    inside = cli_json(capsys, "kstar", path, "--alpha", 0.8, "--rps", 2)["table"][0]
    assert not inside["extrapolated"]


def test_highest_fitted_and_highest_measured_mean_one_thing_each(walkthrough, capsys):
    """The dense baseline's sweep: fitted up to about 16.5 RPS, measured up to about 18.8
    (its throughput run, set aside). Tables, figures and the command line call the first
    "highest fitted" and the second "highest measured", never the other way round."""
    fitted, path, document = walkthrough
    section = document["sections"][0]
    data = fitted.data
    dense = data[data["k"] == 0]
    fitted_top = float(dense.loc[~dense["excluded"].astype(bool), "rps"].max())
    measured_top = float(dense["rps"].max())
    assert measured_top > fitted_top * 1.05           # a point was set aside above it
    groups = table(section, "Fitted costs per group")
    columns = groups["columns"]
    dense_row = next(r for r in groups["rows"] if "+" not in r[0])
    assert dense_row[columns.index("highest fitted RPS")] == number(fitted_top)
    assert dense_row[columns.index("highest measured RPS")] == number(measured_top)
    legend = [t.get_text() for t in figure(section, "speedup").axes[0].get_legend().get_texts()]
    assert any(t.startswith(f"highest fitted rate of the dense baseline ({fitted_top:.3g} RPS")
               for t in legend), legend
    assert not any("highest measured" in t for t in legend)
    capsys.readouterr()
    assert main(["predict", str(path), "--k", "0", "--rps", f"{fitted_top * 1.1:.3f}"]) == 0
    text = capsys.readouterr().out
    assert f"highest fitted rate: {fitted_top:.4g} RPS" in text
    assert "highest measured" not in text
    predicted = cli_json(capsys, "predict", path, "--k", 0, "--rps", f"{fitted_top * 1.1:.3f}")
    assert predicted["rps_fitted_max"] == pytest.approx(fitted_top)
    assert predicted["points"][0]["extrapolated"]


def test_slo_table_and_figure_mark_what_slo_marks(mock_sampling, tmp_path, capsys):
    """Plumbing (prior draws stand in for the posterior): the page's goodput table and the
    SLO figure's triangles against `slo --json` on the same fit and targets."""
    from bayesspec.bayes.workflow import fit

    data = tmp_path / "slo.csv"
    assert main(["simulate", "--grid", str(EXAMPLES / "slo.toml"), "--requests", "200",
                 "-o", str(data), "--quiet"]) == 0
    path = tmp_path / "tails.nc"
    fit(read_tidy(data), "tails", settings=SamplerSettings(draws=50, tune=50, chains=2, seed=1,
                                                            progress=False)).save(path)
    from bayesspec.bayes import load_fit

    targets = {"ttft_p99": 0.08, "itl_p99": 0.015}
    section = report_document([load_fit(path)], [str(path)],
                              slo_targets=targets)["sections"][0]
    command = next(c for c in section["commands"] if c.startswith("bayesspec slo"))
    answer = cli_json(capsys, *shlex.split(command)[1:])
    rows = {r[0]: r for r in table(section, "goodput under the SLO")["rows"]}
    for entry in answer["configurations"]:
        cell = rows[entry["configuration"]][2]
        assert cell.endswith("*") == entry["extrapolated"]
        assert cell.rstrip("*") == number(entry["rps_meeting_slo"])
    axis = figure(section, "slo").axes[0]
    triangles = [line for line in axis.get_lines() if line.get_gid() in ("extrapolated",
                                                                         "fitted")]
    assert len(triangles) == len(answer["configurations"])
    for line, entry in zip(triangles, answer["configurations"]):
        assert (line.get_gid() == "extrapolated") == entry["extrapolated"]
        assert (to_rgba(line.get_markerfacecolor()) == WHITE) == entry["extrapolated"]
    assert all(math.isfinite(line.get_xdata()[0]) for line in triangles)
