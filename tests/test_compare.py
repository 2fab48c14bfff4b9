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


@pytest.fixture(scope="session")
def two_version_data(truth_16, tmp_path_factory):
    import pandas as pd

    truth = truth_16.iloc[::2].reset_index(drop=True)          # 8 groups
    newer = truth.copy()
    newer["C2"] = newer["C2"] * 1.10
    old = generate_sweeps(truth, seed=41)
    old["engine_version"] = "0.13.0"
    new = generate_sweeps(newer, seed=42)
    new["engine_version"] = "0.14.0"
    path = tmp_path_factory.mktemp("versions") / "two_versions.csv"
    pd.concat([old, new], ignore_index=True).to_csv(path, index=False)
    return path


def test_joint_version_model_flags_c2_not_c1(capsys, two_version_data, tmp_path):
    fit_path = tmp_path / "versions.nc"
    assert main(["compare", str(two_version_data), "--by", "engine_version", "--json",
                 "--draws", "1000", "--tune", "1000", "--seed", "3", "--quiet",
                 "--save-fit", str(fit_path)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert "warning" not in document
    assert document["a"] == "0.13.0" and document["b"] == "0.14.0"
    c2, c1 = document["parameters"]["C2"], document["parameters"]["C1"]
    assert c2["p_increase"] >= 0.95 and c2["ratio"]["lo"] < 1.10 < c2["ratio"]["hi"]
    assert c1["p_practically_higher"] < 0.95 and c1["p_practically_lower"] < 0.95
    assert np.mean([e["p_increase"] >= 0.95 for e in per_group(document, "C2").values()]) >= 0.75
    # the saved joint fit answers the same question without refitting
    assert main(["compare", str(fit_path), "--by", "engine_version", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["parameters"]["C2"]["ratio"] == c2["ratio"]


def test_compare_by_needs_exactly_two_values(capsys, tmp_path, truth_16):
    data = generate_sweeps(truth_16.iloc[:2], seed=1)
    data["engine_version"] = "only"
    path = tmp_path / "one.csv"
    data.to_csv(path, index=False)
    assert main(["compare", str(path), "--by", "engine_version"]) == 2
    assert "exactly two values" in capsys.readouterr().err
    assert main(["compare", str(path), "--by", "gpu_model"]) == 2
    assert "gpu_model" in capsys.readouterr().err
