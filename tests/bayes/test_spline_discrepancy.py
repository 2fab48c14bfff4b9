"""The dense law with a pooled spline discrepancy (``dense-spline``): its algebra, its
curve and its plumbing (prior draws standing in for a posterior), and the predictive
quantiles of draws that saturate."""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
import pytest

from bayesspec import laws
from bayesspec import checks
from bayesspec.bayes.spline_discrepancy import (SplineDiscrepancyCurve,
                                                SplineDiscrepancyLatencyModel, knots,
                                                spline_basis, spline_discrepancy)
from bayesspec.data import prepare
from bayesspec.inference import SamplerSettings
from bayesspec.prediction import Noise
from bayesspec.simulate.synthetic import generate_sweeps, placeholder_truth
from bayesspec.bayes.workflow import fit


def test_knots_basis_and_discrepancy():
    kappa = knots(0.1, 2.0)
    assert len(kappa) == 20 and kappa[0] == pytest.approx(0.1) and kappa[-1] == pytest.approx(2.0)
    rng = np.random.default_rng(0)
    r = rng.uniform(0, 1.5, 40)
    weights = rng.normal(0, 1, (40, len(kappa)))
    basis = spline_basis(r, kappa)
    assert basis.shape == (40, 20) and (basis >= 0).all()
    # the model's in-graph sum (basis as data) is the curve's numpy one
    symbolic = (pt.as_tensor(basis) * pt.as_tensor(weights)).sum(axis=-1).eval()
    assert np.allclose(symbolic, spline_discrepancy(r, weights, kappa))
    # zero below the first knot: C1 is the zero-load latency, eq. (1)'s slope at zero load
    assert np.allclose(spline_discrepancy(np.array([0.0, 0.05]), np.ones((2, 20)), kappa), 0.0)
    # one slope change of w at kappa_k: delta = w (r - kappa_k) above it
    one = np.zeros((1, 20))
    one[0, 4] = 2.0
    assert spline_discrepancy(np.array(0.8), one, kappa) == pytest.approx(2.0 * 0.3)


def test_curve_is_eq1_at_zero_weights_and_follows_the_contract_shapes():
    s = 7
    rng = np.random.default_rng(1)
    c1, c2 = rng.uniform(1, 2, s), rng.uniform(0.05, 0.1, s)
    kappa = knots(0.1, 2.0)
    flat = SplineDiscrepancyCurve(c1, c2, np.zeros((s, 20)), kappa, 4.0)
    rps = np.array([0.5, 3.0, 8.0])
    assert np.allclose(flat.latency(rps), laws.latency(rps, c1[:, None], c2[:, None]))
    weights = rng.normal(0, 2, (s, 20))
    curve = SplineDiscrepancyCurve(c1, c2, weights, kappa, 4.0, label="g",
                                   noise=Noise(np.full(s, 0.02), np.full(s, 0.01)))
    assert curve.latency(1.0).shape == (s,)
    assert curve.latency(rps).shape == (s, 3)
    per_draw = rng.uniform(0, 5, (s, 4))
    assert curve.latency(per_draw).shape == (s, 4)
    assert np.allclose(curve.latency(per_draw)[:, 2], np.diag(curve.latency(per_draw[:, 2])))
    expected = laws.latency(3.0, c1, c2) * np.exp(spline_discrepancy(np.full(s, 3.0 / 4.0),
                                                                     weights, kappa))
    assert np.allclose(curve.latency(3.0), expected)
    assert np.isinf(curve.latency(1.0 / c2.min() + 1.0)).any()
    draws = curve.predictive(rps, np.random.default_rng(2))
    assert draws.shape == (s, 3)
    assert curve.log_predictive_density(rps, curve.latency(rps)[0]).shape == (3,)


def test_draw_quantiles_keep_saturated_draws_as_an_open_upper_end():
    draws = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [np.inf, 4.0], [np.inf, np.nan]])
    lo, median, hi = checks.draw_quantiles(draws, [0.05, 0.5, 0.95])
    assert lo[0] == pytest.approx(1.2) and median[0] == 3.0 and np.isinf(hi[0])
    # NaN draws count as saturated; finite columns keep numpy's linear interpolation
    assert np.isinf(hi[1]) and median[1] == 3.0
    finite = np.arange(11.0)[:, None]
    assert np.allclose(checks.draw_quantiles(finite, [0.05, 0.95]).ravel(),
                       np.quantile(finite, [0.05, 0.95]))


@pytest.fixture(scope="module")
def spline_sweeps():
    truth = placeholder_truth()
    truth = truth[truth["verifier"] == "Qwen3-8B"].head(3).reset_index(drop=True)
    return prepare(generate_sweeps(truth, n_rates=9, seed=3), source="<spline>")


@pytest.mark.parametrize("config", [{}, {"bend_scale": 0.5, "likelihood": "student_t"}])
def test_spline_model_plumbing_with_prior_draws(spline_sweeps, mock_sampling, tmp_path,
                                                config):
    from bayesspec.bayes import get_model_class, load_fit

    assert get_model_class("dense-spline") is SplineDiscrepancyLatencyModel
    settings = SamplerSettings(draws=30, tune=10, chains=2, seed=1, progress=False)
    low, high = checks.split_by_rate(spline_sweeps, 0.6)
    result = fit(low, "dense-spline", settings=settings, config=config)
    assert result.posterior["spline_weight"].shape[-2:] == (3, 10)    # every 0.2 to 2.0
    curve = result.group_curve(1)
    assert isinstance(curve, SplineDiscrepancyCurve)
    assert curve.latency(np.array([0.1, 0.2])).shape == (60, 2)
    assert (curve.noise.nu is not None) == (config.get("likelihood") == "student_t")
    document = checks.predictive_check(result, high)
    assert set(document["pooled"]) == {"held_in", "held_out"}
    assert "spline_weight" in result.model().decision_variables()
    path = tmp_path / "spline.nc"
    result.save(path)
    again = load_fit(path)
    assert np.allclose(again.group_curve(1).latency([0.1, 0.3]),
                       curve.latency([0.1, 0.3]), equal_nan=True)


@pytest.mark.slow
def test_real_profile_sweeps_spline_covers_the_rates_above_a_light_load_test():
    """The Vidur sweeps (examples/vidur), fitted on each group's rates up to 60% of the
    ceiling: dense-spline's 90% intervals cover most of the higher rates, the A100 70B
    kinks included, where eq. (1) covers about half (measured at these
    settings: 0.94 pooled, two groups at 0.5, with R-hat 1.06 in the hold-out fit; at the
    defaults, 4 chains x 1000: 0.96 and none below 0.75, docs/findings/calibration.md)."""
    from pathlib import Path

    from bayesspec.data import read_tidy

    path = Path(__file__).resolve().parents[2] / "examples" / "vidur" / "vidur_dense.csv"
    data = read_tidy(path)
    settings = SamplerSettings(draws=500, tune=700, chains=2, seed=1, progress=False)
    _, document = checks.rate_holdout_check(data, model="dense-spline", fraction=0.63,
                                            settings=settings)
    outs = [g["held_out"]["coverage"] for g in document["groups"]]
    print(document["pooled"], sorted(outs)[:4])
    assert 0.85 <= document["pooled"]["held_out"]["coverage"] <= 1.0, document["pooled"]
    assert sum(c < 0.7 for c in outs) <= 2, sorted(outs)
    points = document["_points"]
    held = points.loc[points["held_out"]]
    # not by unbounded intervals: most of them end below saturation
    assert np.isfinite(held["hi"]).mean() >= 0.8
    # and not far above what the model itself expects (0.90, 0.81-0.98 at the defaults)
    reference = document["pooled"]["held_out"]["reference"]
    assert reference["p_as_high"] >= 0.01 and reference["p_as_low"] >= 0.01, reference


@pytest.mark.slow
@pytest.mark.parametrize("csv, model, consistent", [
    ("vidur_dense.csv", "dense", False), ("vidur_fresh.csv", "dense-spline", True)])
def test_real_profile_holdout_against_the_models_own_reference(csv, model, consistent):
    """Held-out coverage read against what the model would give if it were exactly right
    (checks.coverage_reference): eq. (1) is overconfident above 60% of the ceiling on the
    first Vidur set (0.55 where it expects 0.90); dense-spline on the fresh set, which it
    was not chosen on, covers 0.98 where it expects 0.91 (0.80-1.00): consistent (4 x 1000
    draws, evaluate.py, docs/findings/calibration.md)."""
    from pathlib import Path

    from bayesspec.data import read_tidy

    path = Path(__file__).resolve().parents[2] / "examples" / "vidur" / csv
    settings = SamplerSettings(draws=500, tune=700, chains=2, seed=1, progress=False)
    _, document = checks.rate_holdout_check(read_tidy(path), model=model, fraction=0.63,
                                            settings=settings)
    reference = document["pooled"]["held_out"]["reference"]
    print(document["pooled"]["held_out"]["coverage"], reference)
    assert reference["coverage_mean"] == pytest.approx(0.9, abs=0.03)
    if consistent:
        assert min(reference["p_as_low"], reference["p_as_high"]) >= 0.01, reference
        assert "too narrow" not in document["verdict"]
    else:
        assert reference["p_as_low"] < 0.01, reference
        assert "too narrow above the fitted rates" in document["verdict"]


@pytest.mark.slow
def test_real_profile_sweeps_spline_held_in_coverage_by_refits():
    """Held in, asked honestly: five refits of the Vidur sweeps, each without every fifth
    rate of every group, and dense-spline's 90% intervals of the left-out points (issue
    16's 85-95% with no group below 70%; measured at these settings 0.92, lowest group
    0.73; the in-sample share of the same model is 0.996, see the next test for why)."""
    from pathlib import Path

    from bayesspec.data import read_tidy

    path = Path(__file__).resolve().parents[2] / "examples" / "vidur" / "vidur_dense.csv"
    settings = SamplerSettings(draws=500, tune=500, chains=2, seed=1, progress=False)
    document = checks.fold_check(read_tidy(path), model="dense-spline", folds=5,
                                 settings=settings)
    coverages = [g["coverage"] for g in document["groups"]]
    print(document["coverage"], sorted(coverages)[:4])
    assert document["points"] == 275
    assert 0.85 <= document["coverage"] <= 0.95, document["coverage"]
    assert min(coverages) >= 0.7, sorted(coverages)[:4]


@pytest.mark.slow
def test_in_sample_coverage_of_a_right_flexible_model_is_near_one():
    """Data simulated from a dense-spline posterior draw on the Vidur design (the model is
    the truth): refitted, its in-sample 90% coverage is far above 0.9 (about 0.5
    effective parameters per point) while the left-out (PSIS) coverage stays near 0.9.
    So an in-sample share above 95% does not mean a flexible model is miscalibrated."""
    import importlib.util
    from pathlib import Path

    from bayesspec.data import read_tidy
    from bayesspec.checks.replicates import fit_same_design

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location(
        "insample_calibration", root / "benchmarks" / "insample_calibration.py")
    calibration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(calibration)
    settings = SamplerSettings(draws=300, tune=300, chains=2, seed=1, progress=False)
    reference = fit(read_tidy(root / "examples" / "vidur" / "vidur_dense.csv"),
                    "dense-spline", settings=settings)
    frames, _ = calibration.replicate_frames(reference, [150, 450], seed=1)
    for result in fit_same_design(frames, model="dense-spline", settings=settings):
        held_in = checks.predictive_check(result)["pooled"]["held_in"]
        print(held_in)
        assert held_in["coverage"] >= 0.97, held_in
        assert 0.85 <= held_in["coverage_loo"] <= 0.95, held_in
