"""compare: a 10% increase of C2 between engine versions is flagged, C1 is not."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bayesspec.cli import main
from bayesspec.data import prepare
from bayesspec.decisions import compare_fits
from bayesspec.inference import SamplerSettings
from bayesspec.synthetic import generate_sweeps
from bayesspec.validation import fit_same_design


@pytest.fixture(scope="session")
def version_fits(truth_16):
    newer = truth_16.copy()
    newer["C2"] = newer["C2"] * 1.10
    datasets = [prepare(generate_sweeps(truth_16, seed=31)),
                prepare(generate_sweeps(newer, seed=32)),
                prepare(generate_sweeps(truth_16, seed=33))]
    settings = SamplerSettings(draws=500, tune=500, chains=4, seed=7, progress=False)
    return fit_same_design(datasets, model="dense", settings=settings)


def per_group(document, name):
    return {k: v for k, v in document["parameters"].items() if k.startswith(f"{name}[")}


def test_ten_percent_c2_increase_is_flagged_and_c1_is_not(version_fits):
    old, new, _ = version_fits
    document = compare_fits(old, new)
    c2 = per_group(document, "C2")
    c1 = per_group(document, "C1")
    assert len(c2) == 16
    assert np.mean([e["p_increase"] >= 0.95 for e in c2.values()]) >= 0.8
    assert np.mean([e["p_increase"] >= 0.95 for e in c1.values()]) <= 0.2
    assert document["parameters"]["C2"]["ratio"]["lo"] > 1.05
    assert "higher in B" in document["parameters"]["C2"]["verdict"]


def test_two_runs_of_the_same_engine_show_no_difference(version_fits):
    old, _, same = version_fits
    document = compare_fits(old, same)
    for name in ("C1", "C2"):
        entries = per_group(document, name).values()
        no_difference = [e["p_practically_higher"] < 0.95 and e["p_practically_lower"] < 0.95
                         for e in entries]
        assert np.mean(no_difference) >= 0.8


def test_compare_verb_json_and_plot(capsys, version_fits, tmp_path):
    old, new, _ = version_fits
    a, b, plot = tmp_path / "a.nc", tmp_path / "b.nc", tmp_path / "forest.png"
    old.save(a)
    new.save(b)
    assert main(["compare", str(a), str(b), "--json", "--plot", str(plot)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {"parameters", "verdict"} <= set(document)
    assert {"ratio", "p_increase"} <= set(document["parameters"]["C1"])
    assert plot.stat().st_size > 10_000
    assert main(["compare", str(a), str(b), "--rope", "2"]) == 2
