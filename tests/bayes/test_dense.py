"""The dense latency-law model: recovery of known truth, convergence, plumbing."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pymc as pm
import pytest
from pymc.testing import mock_sample

from bayesspec.bayes import DenseLatencyModel
from bayesspec.data import prepare
from bayesspec.bayes import load_fit
from bayesspec.inference.fitfile import Fit
from bayesspec.inference import diagnostics
from bayesspec.simulate.synthetic import generate_sweeps
from bayesspec.checks.replicates import dense_replicate_coverage, interval_covers


def test_model_graph_has_one_cost_pair_per_group(truth_16):
    data = prepare(generate_sweeps(truth_16, seed=1))
    model = DenseLatencyModel().build(data)
    assert model.named_vars["C1"].eval().shape == (16,)
    names = set(model.named_vars)
    assert {"C1", "C2", "noise_base", "noise_load", "log_latency"} <= names


def test_saturated_points_are_not_in_the_likelihood(truth_16):
    data = prepare(generate_sweeps(truth_16, seed=1))
    assert data["excluded"].sum() == 16  # one throughput run per group
    model = DenseLatencyModel().build(data)
    assert model.named_vars["log_latency"].eval().shape == (16 * 8,)


def test_every_observed_point_stays_below_saturation_under_the_prior(truth_16):
    """The parameterisation guarantees RPS*C2 < 1 for every draw, so no draw hits the pole."""
    data = prepare(generate_sweeps(truth_16, seed=1))
    model_obj = DenseLatencyModel()
    model = model_obj.build(data)
    with model:
        prior = pm.sample_prior_predictive(draws=300, random_seed=1)
    c2 = prior["prior"]["C2"].values.reshape(-1, 16)
    rps = model_obj.inputs.rows["rps"].to_numpy()
    group = model_obj.inputs.group_index
    assert np.all(rps[None, :] * c2[:, group] < 1.0)


def test_plumbing_with_mock_sample_saves_and_loads(tmp_path, truth_16, monkeypatch):
    """Fit file round trip with prior draws standing in for a posterior (fast)."""
    data = prepare(generate_sweeps(truth_16, seed=2))
    model_obj = DenseLatencyModel()
    model = model_obj.build(data)
    with model:
        tree = mock_sample(draws=20, chains=2, random_seed=1)
    result = Fit.from_sampling(model_obj, data, tree)
    path = tmp_path / "fit.nc"
    result.save(path)
    loaded = load_fit(path)
    assert loaded.model_name == "dense"
    assert len(loaded.groups) == 16
    assert loaded.draws("C1").shape == (40, 16)
    pd.testing.assert_series_equal(loaded.data["rps"], data["rps"].reset_index(drop=True),
                                   check_names=False)
    assert loaded.data["excluded"].dtype == bool
    assert set(loaded.data["group"]) - {""} == set(loaded.groups["label"])


def test_real_fit_recovers_truth_and_converges(real_fit, truth_16):
    result, _ = real_fit
    diag = result.diagnostics
    assert diag["divergences"] == 0
    assert diag["rhat_max"] <= 1.01
    covered_c1 = interval_covers(result.draws("C1"), truth_16["C1"].to_numpy())
    covered_c2 = interval_covers(result.draws("C2"), truth_16["C2"].to_numpy())
    # 90% intervals: 16 groups, expect ~14.4 each; fewer than 12 would be a 1% event.
    assert covered_c1.sum() >= 12, covered_c1
    assert covered_c2.sum() >= 12, covered_c2
    # and they are informative, not vacuous
    c2 = result.draws("C2")
    width = (np.quantile(c2, 0.95, axis=0) - np.quantile(c2, 0.05, axis=0)) / truth_16["C2"]
    assert np.median(width) < 0.1


def test_noise_grows_with_load(real_fit):
    """The generator's top-load points are noisier; the model must learn a load term."""
    result, _ = real_fit
    assert np.quantile(result.draws("noise_load"), 0.05) > 0.005


def test_unconverged_fit_is_flagged(truth_16):
    data = prepare(generate_sweeps(truth_16, seed=4))
    model = DenseLatencyModel().build(data)
    with model:
        tree = mock_sample(draws=30, chains=2, random_seed=1)
    # prior draws are not a posterior: diagnostics must say so, not pass quietly
    diag = diagnostics(tree, ["C1", "C2"])
    assert not diag["converged"]
    assert diag["problems"]


@pytest.mark.slow
def test_interval_coverage_over_replicates(truth_16):
    """Over 20 replicate datasets, 90% intervals of C1 and C2 cover 85-95% of the time."""
    result = dense_replicate_coverage(truth_16, replicates=20, seed=100)
    for name, rows in result.groupby("parameter"):
        assert 0.85 <= rows["covers"].mean() <= 0.95, (name, rows["covers"].mean())
    assert (result["divergences"] == 0).all()
