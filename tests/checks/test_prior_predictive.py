"""The prior predictive check: intervals from the finite draws only, the draws past
saturation counted and said, a point without a finite draw never "outside", and advice
that fits the model the check ran."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from bayesspec.checks import prior_verdict
from bayesspec.checks.prior_predictive import interval_shares
from bayesspec.cli import main

GRID = """\
requests = 200
seed = 0
sweep = 7
arrivals = "poisson"
gpu = "H100"

[[configs]]
verifier = "Qwen3-8B"
drafter = "EAGLE3-Qwen3-8B"
prefill = 512
decode = 512
k = [0, 3]
alpha = [0.8]
"""


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory) -> Path:
    """A simulated dense and speculative sweep, as the README walkthrough makes them."""
    folder = tmp_path_factory.mktemp("prior")
    grid = folder / "grid.toml"
    grid.write_text(GRID)
    path = folder / "sweeps.csv"
    assert main(["simulate", "--grid", str(grid), "-o", str(path), "--quiet"]) == 0
    return path


# ------------------------------------------------------------------ the shares

def test_shares_of_data_drawn_like_the_draws_are_the_levels_despite_non_finite_draws():
    """Observations from the draws' own distribution fall inside the 50/90/99% intervals
    about 50/90/99% of the time, with a tenth of the draws not finite (NaN or inf, as a
    prior draw past saturation is): those draws are left out and counted, not read as
    intervals that hold nothing."""
    rng = np.random.default_rng(0)
    draws, points = 2000, 600
    simulated = rng.normal(0.0, 1.0, (draws, points))
    observed = rng.normal(0.0, 1.0, points)
    lost = rng.random((draws, points)) < 0.1
    simulated[lost] = np.where(rng.random(lost.sum()) < 0.5, np.nan, np.inf)
    shares = interval_shares(simulated, observed)
    for level, share in shares["inside"].items():
        # a binomial 99.9% band around the level
        lo, hi = stats.binom.ppf([0.0005, 0.9995], points, float(level)) / points
        assert lo <= share <= hi, (level, share)
    assert shares["inside"]["0.5"] < shares["inside"]["0.9"] < shares["inside"]["0.99"]
    assert shares["non_finite"]["draws"] == int(lost.sum())
    assert shares["non_finite"]["of"] == draws * points
    assert shares["judged_points"] == points


def test_a_point_without_a_finite_draw_is_not_counted_outside():
    simulated = np.zeros((100, 3)) + np.linspace(-1, 1, 100)[:, None]
    simulated[:, 2] = np.nan
    shares = interval_shares(simulated, np.array([0.0, 0.1, 5.0]))
    assert shares["judged_points"] == 2
    assert shares["inside"]["0.99"] == 1.0
    assert shares["non_finite"] == {"draws": 100, "of": 300, "points": 1,
                                    "points_without_finite": 1}


# ------------------------------------------------------------------ the check on simulated sweeps

@pytest.mark.parametrize("model", ["dense", "speculative"])
def test_the_simulated_sweeps_are_admitted_and_non_finite_draws_are_said(sweeps, model,
                                                                         capsys):
    assert main(["check", str(sweeps), "--model", model, "--prior-predictive",
                 "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["admits"] and document["model"] == model
    inside = document["inside"]
    assert inside["0.5"] <= inside["0.9"] <= inside["0.99"]
    assert document["judged_points"] == document["points"]
    bad = document["non_finite"]
    assert 0 <= bad["draws"] < bad["of"] == document["draws"] * document["points"]
    assert main(["check", str(sweeps), "--model", model, "--prior-predictive"]) == 0
    out = capsys.readouterr().out
    assert "PRIORS EXCLUDE THE DATA" not in out and "the priors admit the data" in out
    if bad["draws"]:
        assert f"{bad['draws']:,} of {bad['of']:,} draws" in out and "not finite" in out


def test_a_dense_check_whose_priors_exclude_the_data_never_advises_the_dense_model(
        sweeps, capsys):
    """A C1 prior narrowed to nothing puts the speculative sweep's C1 outside: the shares
    at 50/90/99% then differ, and the advice is the dense model's own."""
    code = main(["check", str(sweeps), "--model", "dense", "--prior-predictive",
                 "--option", "log_c1_scale=0.01", "--json"])
    assert code == 0
    document = json.loads(capsys.readouterr().out)
    inside = document["inside"]
    assert not document["admits"]
    assert inside["0.5"] < inside["0.9"] <= inside["0.99"] < 0.95
    assert "PRIORS EXCLUDE THE DATA" in document["verdict"]
    assert "--model dense" not in document["verdict"]
    assert "--option log_c1_scale=2" in document["verdict"]


@pytest.mark.parametrize("model, physics, said, unsaid", [
    ("dense", False, "log_c1_scale", "--model dense"),
    ("tails", False, "log_c1_scale", "--model dense"),
    ("speculative", False, "--model dense", "physics_priors"),
    ("hierarchical", True, "physics_priors=off", "log_c1_scale"),
    ("hierarchical", False, "--model dense", "physics_priors"),
])
def test_the_advice_fits_the_model_it_ran_on(model, physics, said, unsaid):
    verdict = prior_verdict(0.5, 10, model=model, physics=physics)
    assert not verdict["admits"]
    assert said in verdict["verdict"] and unsaid not in verdict["verdict"]


def test_a_check_without_any_finite_draw_admits_nothing():
    verdict = prior_verdict(float("nan"), 0, model="dense")
    assert not verdict["admits"] and verdict["verdict"].startswith("NO PRIOR INTERVAL")
