"""The point's own run error as a process along the sweep's rates (``run_own_length`` of
the dense model): its factor, its conditional at new rates, the likelihood that uses it
and the curves that read it back."""

from __future__ import annotations

import numpy as np
import pytest

from bayesspec.bayes import DenseLatencyModel
from bayesspec.bayes.base import run_spread
from bayesspec.cli import main
from bayesspec.data import prepare
from bayesspec.laws import (RUN_EFFECT_SHARE, latency, run_mean_log_sd, run_process_conditional,
                            run_process_factor)
from bayesspec.prediction import Curve, Noise, RunProcess
from bayesspec.simulate.synthetic import generate_shared_run_sweeps, placeholder_truth

LENGTH = 0.35


def _covariance(x, group, length):
    distance = np.abs(x[:, None] - x[None, :])
    return np.exp(-distance / length) * (group[:, None] == group[None, :])


def test_the_factor_gives_the_ou_covariance_within_sweeps_and_none_across():
    rng = np.random.default_rng(4)
    x = np.log(rng.uniform(0.5, 10.0, 12))
    group = rng.integers(0, 3, 12)
    factor = run_process_factor(x, group, LENGTH)
    np.testing.assert_allclose(factor @ factor.T, _covariance(x, group, LENGTH), atol=1e-12)
    # a point's value depends on its own rate and lower ones of its sweep only
    for i in range(12):
        assert np.all(factor[i, (group != group[i]) | (x > x[i])] == 0.0)


@pytest.mark.parametrize("new", [np.log(2.4), np.log(0.3), np.log(40.0), np.log(3.0)])
def test_the_conditional_is_the_gaussian_one_given_every_known_rate(new):
    """The Markov bridge from the two nearest known rates equals the full Gaussian
    conditional on all of them (the OU process forgets everything beyond them)."""
    known = np.log(np.array([0.5, 1.0, 2.0, 3.0, 5.0, 8.0]))
    covariance = _covariance(np.append(known, new), np.zeros(7), LENGTH)
    rng = np.random.default_rng(0)
    values = rng.multivariate_normal(np.zeros(6), covariance[:6, :6], size=5)
    exclude = np.isclose(known, new).any()
    use = ~np.isclose(known, new) if exclude else np.ones(6, bool)
    weights = np.linalg.solve(covariance[:6, :6][np.ix_(use, use)], covariance[6, :6][use])
    mean, variance = run_process_conditional([new], known, values, LENGTH,
                                             exclude_equal=[exclude])
    np.testing.assert_allclose(mean[:, 0], values[:, use] @ weights, atol=1e-12)
    np.testing.assert_allclose(variance[:, 0], 1.0 - covariance[6, :6][use] @ weights,
                               atol=1e-12)


def test_without_known_rates_the_conditional_is_the_prior_and_at_a_known_one_exact():
    mean, variance = run_process_conditional([0.0, 1.0], np.array([]), np.zeros((3, 0)), LENGTH)
    assert np.all(mean == 0.0) and np.all(variance == 1.0)
    values = np.array([[0.4, -1.2]])
    mean, variance = run_process_conditional([0.0], [0.0, 1.0], values, LENGTH)
    assert mean[0, 0] == pytest.approx(0.4) and variance[0, 0] == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("config, words", [
    ({"run_effect": "shared", "run_own_length": -0.1}, "run_own_length"),
    ({"run_effect": "shared", "run_own_length": True}, "run_own_length"),
    ({"run_effect": "shared", "run_own_length": "fitted"}, "run_own_length"),
    ({"run_effect": "none", "run_own_length": "learned"}, "run_effect=shared"),
    ({"run_effect": "none", "run_own_length": 0.3}, "run_effect=shared"),
    ({"run_effect": "shared", "run_own_length": 0.3, "run_own_nugget": 1.5}, "run_own_nugget"),
])
def test_bad_process_options_are_refused(config, words):
    with pytest.raises(ValueError, match=words):
        DenseLatencyModel(config)


def _sweeps(seed=0, rows=slice(0, 48, 12), **options):
    truth = placeholder_truth().iloc[rows].reset_index(drop=True)
    options = {"latency_cv": 0.1, "n_requests": 1000, "top_utilisation": 0.85,
               "n_rates": 10, "common_share": RUN_EFFECT_SHARE, "own_length": LENGTH,
               **options}
    return truth, generate_shared_run_sweeps(truth, seed=seed, **options)


def test_the_synthetic_own_errors_follow_the_process():
    """Over many sweeps, the own parts of two neighbouring rates correlate as
    exp(-dx/length); without a length they do not."""
    truth = placeholder_truth().iloc[:1]
    pairs = {}
    for length in (LENGTH, 0.0):
        residuals = []
        for seed in range(300):
            raw = generate_shared_run_sweeps(truth, seed=seed, latency_cv=0.1, n_rates=6,
                                             drift=0.0, share=0.0, own_length=length)
            law = latency(raw["rps"], truth["C1"].iloc[0], truth["C2"].iloc[0])
            run_sd = run_mean_log_sd(0.1, 1000, raw["rps"] * law)
            residuals.append(np.log(raw["latency_mean_s"] / law) / run_sd)
        residuals = np.array(residuals)
        pairs[length] = np.corrcoef(residuals[:, 3], residuals[:, 4])[0, 1]
    rates = raw["rps"].to_numpy(float)
    expected = np.exp(-np.log(rates[4] / rates[3]) / LENGTH)
    assert abs(pairs[LENGTH] - expected) < 0.08, pairs
    assert abs(pairs[0.0]) < 0.15, pairs


def test_the_likelihood_moves_each_point_by_its_process_value():
    """At a chosen point of the graph, each fitted point's log density is the normal one
    around the law moved by run_sd x (the sweep's effect + sqrt((1 - share)(1 - nugget))
    x the process value F z), with the nugget's share of the own variance left in the sd."""
    _, raw = _sweeps(rows=slice(0, 2))
    data = prepare(raw.drop(columns=["run_effect_true"]))
    nugget = 0.2
    model_obj = DenseLatencyModel({"run_effect": "shared", "run_own_length": LENGTH,
                                   "run_own_nugget": nugget})
    model = model_obj.build(data)
    assert model.named_vars_to_dims["run_own"] == ("point",)
    point = model.initial_point()
    z = np.random.default_rng(2).normal(size=len(model_obj.inputs.rows))
    point["run_own_z"] = z
    point["run_effect_common_z"] = np.array(0.6)
    point["utilisation_logit"] = np.array([1.2, 0.4])
    pointwise = model.compile_fn(model.logp(vars=[model["log_latency"]], sum=False,
                                            jacobian=False)[0], inputs=model.value_vars,
                                 on_unused_input="ignore")(point)
    names = ["C1", "C2", "noise_base", "noise_load", "run_effect", "run_own"]
    values = model.compile_fn(model.replace_rvs_by_values([model[n] for n in names]),
                              inputs=model.value_vars, on_unused_input="ignore")(point)
    c1, c2, base, load, effect, own = (np.atleast_1d(np.asarray(v, float)) for v in values)
    rows, index = model_obj.inputs.rows, model_obj.inputs.group_index
    factor = run_process_factor(np.log(rows["rps"].to_numpy(float)), index, LENGTH)
    np.testing.assert_allclose(own, factor @ z, atol=1e-12)
    cv, count = run_spread(rows)
    run_sd = run_mean_log_sd(cv, count, rows["rps"].to_numpy(float)
                             * rows["latency_mean_s"].to_numpy(float))
    law = latency(rows["rps"].to_numpy(float), c1[index], c2[index])
    centre = np.log(law) + run_sd * (effect[index] + np.sqrt(
        (1 - RUN_EFFECT_SHARE) * (1 - nugget)) * own)
    utilisation = rows["rps"].to_numpy(float) * c2[index]
    sigma = np.sqrt(base**2 + (load * utilisation / (1 - utilisation)) ** 2
                    + (1 - RUN_EFFECT_SHARE) * nugget * run_sd**2)
    observed = np.log(rows["latency_mean_s"].to_numpy(float))
    expected = -0.5 * ((observed - centre) / sigma) ** 2 - np.log(sigma) - 0.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(pointwise, expected, rtol=1e-8, atol=1e-8)


def test_a_measurement_next_to_fitted_rates_is_conditioned_on_them():
    """A new rate between two fitted ones: the centre moves by the bridge mean and the own
    variance shrinks to the bridge variance; a fitted rate itself (``measured``) leaves
    its own value out; far from every fitted rate the process is its prior."""
    draws = 3
    curve = Curve(np.full(draws, 2.0), np.full(draws, 0.1),
                  noise=Noise(np.full(draws, 0.01), np.zeros(draws)))
    curve.run_effect, curve.run_share = np.array([0.2, 0.0, -0.3]), RUN_EFFECT_SHARE
    known = np.array([1.0, 2.0, 4.0])
    values = np.array([[0.5, 1.0, -1.0], [0.0, 0.0, 0.0], [-2.0, 1.5, 0.3]])
    curve.run_own = RunProcess(np.log(known), values, LENGTH, 0.0)
    rps = np.array([3.0, 2.0, 2000.0])
    spread = (np.full(3, 0.2), np.full(3, 400.0))
    measured = np.array([np.nan, latency(2.0, 2.0, 0.1) * 1.01, np.nan])
    centre, sigma = curve.measurement(rps, 0.0, measured=measured, run_spread=spread)
    bridge_mean, bridge_var = run_process_conditional(
        np.log(rps), np.log(known), values, LENGTH, exclude_equal=[False, True, False])
    law = latency(rps, 2.0, 0.1)
    load = np.where(np.isfinite(measured), measured, law)
    run_sd = run_mean_log_sd(0.2, 400.0, rps * load)
    own = np.sqrt(1 - RUN_EFFECT_SHARE)
    finite = np.isfinite(law)
    with np.errstate(invalid="ignore"):
        expected = law * np.exp(run_sd * (curve.run_effect[:, None] + own * bridge_mean))
    np.testing.assert_allclose(centre[:, finite], expected[:, finite])
    np.testing.assert_allclose(sigma[:, :2], np.sqrt(
        0.01**2 + own**2 * bridge_var[:, :2] * run_sd[:2] ** 2))
    assert np.all((0.0 < bridge_var[:, :2]) & (bridge_var[:, :2] < 1.0))
    np.testing.assert_allclose(bridge_var[:, 2], 1.0, atol=1e-6)  # far above: the prior


def test_a_length_per_draw_is_each_draws_own_conditional():
    known, values = np.log([1.0, 2.0]), np.array([[1.0, -1.0], [0.5, 0.2]])
    lengths = np.array([0.2, 2.0])
    mean, variance = run_process_conditional(np.log([1.4]), known, values, lengths)
    for s, length in enumerate(lengths):
        one_mean, one_variance = run_process_conditional(np.log([1.4]), known, values[s:s + 1],
                                                         float(length))
        assert mean[s, 0] == pytest.approx(one_mean[0, 0])
        assert variance[s, 0] == pytest.approx(one_variance[0, 0])
    assert variance[1, 0] < variance[0, 0]  # a longer memory knows the rate better


@pytest.fixture(scope="module")
def process_fits():
    """Four sweeps whose own errors follow the process, fitted below half their pole with
    the sweep-wide run effect alone and with the process (about 40 s)."""
    from bayesspec.inference import SamplerSettings
    from bayesspec.bayes.workflow import fit

    truth, raw = _sweeps(seed=3, rows=slice(0, 48, 12), latency_cv=0.2)
    data = prepare(raw.drop(columns=["run_effect_true"]))
    utilisation = data["rps"].to_numpy(float) * np.repeat(truth["C2"].to_numpy(float), 10)
    low, high = data.loc[utilisation <= 0.5], data.loc[utilisation > 0.5]
    settings = SamplerSettings(seed=1, progress=False)
    options = {"effect": {"run_effect": "shared"},
               "process": {"run_effect": "shared", "run_own_length": LENGTH}}
    return truth, high, {name: fit(low, "dense", config=config, settings=settings)
                         for name, config in options.items()}


def test_a_process_fit_converges_recovers_the_laws_and_reads_its_curves(process_fits):
    truth, _, fits = process_fits
    fitted = fits["process"]
    assert fitted.diagnostics["converged"], fitted.diagnostics["text"]
    for name in ("C1", "C2"):
        lo, hi = np.quantile(fitted.draws(name), [0.05, 0.95], axis=0)
        assert np.sum((lo <= truth[name]) & (truth[name] <= hi)) >= 3, name
    curve = fitted.group_curve(1)
    assert curve.run_own is not None
    fitted_rows = fitted.data.loc[fitted.data["group"] == fitted.groups["label"].iloc[1]]
    np.testing.assert_allclose(np.sort(curve.run_own.log_rps), np.sort(np.log(fitted_rows["rps"])))
    samples = fitted.posterior.sizes["chain"] * fitted.posterior.sizes["draw"]
    assert curve.run_own.values.shape == (samples, len(fitted_rows))


def test_the_process_narrows_the_next_rates_and_still_covers_them(process_fits):
    """Held out above half the pole: the process fit's intervals at the rate next to the
    fitted ones are narrower than the sweep-effect fit's, and its pooled coverage of the
    held-out points stays at least 0.8."""
    from bayesspec import checks

    _, high, fits = process_fits
    points = {name: checks.predictive_check(fitted, high)["_points"]
              for name, fitted in fits.items()}
    held = {name: p.loc[p["held_out"]].reset_index(drop=True) for name, p in points.items()}
    width = {name: np.log(h["hi"] / h["lo"]) for name, h in held.items()}
    nearest = held["process"].groupby("group")["rps"].transform("min") == held["process"]["rps"]
    assert np.all(width["process"][nearest] < width["effect"][nearest]), width
    assert held["process"]["inside"].mean() >= 0.8, held["process"]


def test_a_saved_process_fit_checks_held_out_rates(tmp_path, capsys, mock_sampling):
    """Plumbing: the fit file keeps the process values per point, and ``check --ppc
    --hold-out-above`` runs with it."""
    import json

    from bayesspec.bayes import load_fit

    _, raw = _sweeps(rows=slice(0, 24, 12))
    path = tmp_path / "shared.csv"
    raw.drop(columns=["run_effect_true"]).to_csv(path, index=False)
    out_fit = tmp_path / "shared.nc"
    options = ["--option", "run_effect=shared", "--option", f"run_own_length={LENGTH}"]
    assert main(["fit", str(path), *options, "-o", str(out_fit), "--draws", "50",
                 "--chains", "2", "--seed", "1", "--quiet"]) == 0
    fitted = load_fit(out_fit)
    curve = fitted.group_curve(0)
    assert curve.run_own is not None and curve.run_own.values.shape == (100, 10)
    capsys.readouterr()
    assert main(["check", str(path), "--ppc", "--hold-out-above", "0.6", *options,
                 "--draws", "50", "--tune", "50", "--chains", "2", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["pooled"]["held_out"]["points"] > 0


def test_psis_loo_of_a_process_fit_integrates_each_points_own_value(process_fits):
    """The pointwise log-likelihood PSIS-LOO reads is each point's density with its own
    process value integrated out given its neighbours (the graph's is conditional on it,
    a parameter per point): finite, and its Pareto k reliable at most points."""
    from bayesspec.checks import loo_summary

    fitted = process_fits[2]["process"]
    summary = loo_summary(fitted)
    assert np.isfinite(summary["elpd_loo"]) and summary["points"] == len(fitted.data)
    assert summary["pareto_k_bad"] <= 2, summary
    pointwise = fitted.tree["log_likelihood"]["log_latency"]
    assert pointwise.dims == ("chain", "draw", "point")


def test_a_learned_length_is_a_parameter_the_curves_read_per_draw(tmp_path, mock_sampling):
    """``run_own_length=learned``: the length is a parameter (its gradient finite at the
    start, the sweep's lowest rate included), and a saved fit's curves condition each
    draw on its own length."""
    from bayesspec.bayes import load_fit

    _, raw = _sweeps(rows=slice(0, 24, 12))
    data = prepare(raw.drop(columns=["run_effect_true"]))
    model = DenseLatencyModel({"run_effect": "shared", "run_own_length": "learned"}).build(data)
    assert "run_own_length" in model.named_vars
    gradient = model.compile_dlogp()(model.initial_point())
    assert np.all(np.isfinite(gradient))
    path = tmp_path / "shared.csv"
    raw.drop(columns=["run_effect_true"]).to_csv(path, index=False)
    out_fit = tmp_path / "learned.nc"
    assert main(["fit", str(path), "--option", "run_effect=shared", "--option",
                 "run_own_length=learned", "-o", str(out_fit), "--draws", "50",
                 "--chains", "2", "--seed", "1", "--quiet"]) == 0
    curve = load_fit(out_fit).group_curve(1)
    assert np.shape(curve.run_own.length) == (100,)
    mean, variance = curve.run_own.at(np.array([1.0, 2.0]))
    assert mean.shape == variance.shape == (100, 2)
