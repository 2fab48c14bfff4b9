"""The sweep's run effect (``--option run_effect=shared``): a measured mean's sampling
error as one run whose requests share the batch (``laws.run_mean_log_sd``), part of it
shared by every rate of a sweep that replays one arrival pattern. One definition for the
likelihood and the predictions, the option's bad input, and fits that recover a known
truth."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bayesspec.bayes import DenseLatencyModel
from bayesspec.bayes.base import measured_run_log_sd, run_spread
from bayesspec.cli import main
from bayesspec.data import prepare
from bayesspec.laws import RUN_EFFECT_SHARE, latency, run_mean_log_sd
from bayesspec.prediction import Curve, Noise
from bayesspec.simulate.synthetic import generate_shared_run_sweeps, placeholder_truth


def test_run_sd_is_the_independent_one_at_no_load_and_grows_with_requests_in_flight():
    import pytensor.tensor as pt

    cv, n = np.array([0.2, 0.2, 0.5]), np.array([1000.0, 1000.0, 50.0])
    in_flight = np.array([0.0, 1.5, 40.0])
    values = run_mean_log_sd(cv, n, in_flight)
    assert values[0] == pytest.approx(0.2 / np.sqrt(1000.0))
    # 1 + 2 N = 4: twice the independent requests' sd
    assert values[1] == pytest.approx(2.0 * 0.2 / np.sqrt(1000.0))
    graph = run_mean_log_sd(pt.as_tensor(cv), pt.as_tensor(n), pt.as_tensor(in_flight),
                            xp=pt).eval()
    np.testing.assert_allclose(graph, values, rtol=1e-12)


def test_a_rows_run_sd_is_read_at_its_measured_load_and_zero_where_unknown():
    rows = pd.DataFrame({"rps": [2.0, 4.0, 1.0], "latency_mean_s": [5.0, 10.0, 4.0],
                         "latency_std_s": [1.0, 3.0, np.nan],
                         "n_requests": [500, 800, 300]})
    cv, count = run_spread(rows)
    np.testing.assert_allclose(cv[:2], [0.2, 0.3])
    expected = run_mean_log_sd(np.array([0.2, 0.3]), np.array([500.0, 800.0]),
                               np.array([10.0, 40.0]))
    sd = measured_run_log_sd(rows)
    np.testing.assert_allclose(sd[:2], expected)
    assert sd[2] == 0.0
    assert np.all(measured_run_log_sd(rows.drop(columns=["n_requests"])) == 0.0)


@pytest.mark.parametrize("config, words", [
    ({"run_effect": "seeded"}, "run_effect must be"),
    ({"run_effect": "shared", "run_effect_share": 1.0}, "run_effect_share"),
    ({"run_effect": "shared", "run_effect_share": True}, "run_effect_share"),
    ({"run_effect": "shared", "run_effect_common_share": 0.8}, "run_effect_common_share"),
    ({"run_effect": "shared", "run_effect_common_share": -0.1}, "run_effect_common_share"),
])
def test_bad_run_effect_options_are_refused(config, words):
    with pytest.raises(ValueError, match=words):
        DenseLatencyModel(config)


@pytest.mark.parametrize("model", ["tails", "dense-discrepancy", "dense-spline"])
def test_laws_without_the_run_effect_refuse_it(model):
    from bayesspec.bayes import get_model_class

    with pytest.raises(ValueError, match="does not take run_effect"):
        get_model_class(model)({"run_effect": "shared"})


def _sweeps(seed=0, rows=slice(0, 48, 12), **options):
    """Sweeps of the known-truth design in docs/findings/run-effects.md."""
    truth = placeholder_truth().iloc[rows].reset_index(drop=True)
    options = {"latency_cv": 0.1, "n_requests": 1000, "top_utilisation": 0.85,
               "n_rates": 10, "common_share": RUN_EFFECT_SHARE, **options}
    return truth, generate_shared_run_sweeps(truth, seed=seed, **options)


def test_an_unknown_run_effect_exits_2_with_one_line(tmp_path, capsys):
    _, raw = _sweeps(rows=slice(0, 1))
    path = tmp_path / "d.csv"
    raw.drop(columns=["run_effect_true"]).to_csv(path, index=False)
    code = main(["fit", str(path), "--option", "run_effect=seeded",
                 "-o", str(tmp_path / "x.nc"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "run_effect" in err[-1]
    assert not (tmp_path / "x.nc").exists()


def test_without_the_option_the_graph_is_unchanged():
    _, raw = _sweeps(rows=slice(0, 2))
    data = prepare(raw.drop(columns=["run_effect_true"]))
    plain = DenseLatencyModel().build(data)
    shared = DenseLatencyModel({"run_effect": "shared"}).build(data)
    assert "run_effect_z" not in plain.named_vars and "run_sd" not in plain.named_vars
    assert "run_effect_common_z" in shared.named_vars and "run_sd" in shared.named_vars
    assert shared.named_vars_to_dims["run_effect"] == ("group",)


@pytest.mark.parametrize("common", [0.0, 0.4, RUN_EFFECT_SHARE])
def test_the_common_share_is_the_run_effects_correlation_between_sweeps(common):
    """Prior draws of two sweeps' run effects: each has variance ``run_effect_share``,
    and they correlate by ``run_effect_common_share`` / ``run_effect_share`` (one seed
    serving every sweep of the file); with all of it common the two are one draw."""
    import pymc as pm

    _, raw = _sweeps(rows=slice(0, 2))
    data = prepare(raw.drop(columns=["run_effect_true"]))
    model = DenseLatencyModel({"run_effect": "shared",
                               "run_effect_common_share": common}).build(data)
    with model:
        prior = pm.sample_prior_predictive(draws=4000, var_names=["run_effect"],
                                           random_seed=3)
    effect = prior.prior["run_effect"].values.reshape(-1, 2)
    np.testing.assert_allclose(effect.var(axis=0), RUN_EFFECT_SHARE, rtol=0.08)
    correlation = np.corrcoef(effect.T)[0, 1]
    assert abs(correlation - common / RUN_EFFECT_SHARE) < 0.05, correlation
    assert ("run_effect_common_z" in model.named_vars) == (common > 0)
    assert ("run_effect_z" in model.named_vars) == (common < RUN_EFFECT_SHARE)


def test_the_likelihood_is_the_curves_measurement():
    """At a chosen point of the graph, each fitted point's log density equals the one
    ``Curve.measurement`` gives from the same C1, C2, noise and run effect: the centre
    moved by the sweep's effect times the point's run sd, and the point's own part of
    the run variance in place of cv/sqrt(n)."""
    _, raw = _sweeps(rows=slice(0, 2))
    data = prepare(raw.drop(columns=["run_effect_true"]))
    model_obj = DenseLatencyModel({"run_effect": "shared", "run_effect_common_share": 0.3})
    model = model_obj.build(data)
    point = model.initial_point()
    point["run_effect_z"] = np.array([1.3, -0.7])
    point["run_effect_common_z"] = np.array(0.6)
    point["utilisation_logit"] = np.array([1.2, 0.4])
    point["log_C1"] = np.array([np.log(2.5), np.log(3.0)])
    pointwise = model.compile_fn(model.logp(vars=[model["log_latency"]], sum=False,
                                            jacobian=False)[0], inputs=model.value_vars,
                                 on_unused_input="ignore")(point)
    names = ["C1", "C2", "noise_base", "noise_load", "run_effect"]
    values = model.compile_fn(model.replace_rvs_by_values([model[n] for n in names]),
                              inputs=model.value_vars, on_unused_input="ignore")(point)
    c1, c2, base, load, effect = (np.atleast_1d(np.asarray(v, float)) for v in values)
    rows = model_obj.inputs.rows
    index = model_obj.inputs.group_index
    for g in range(2):
        members = np.flatnonzero(index == g)
        curve = Curve(c1[g:g + 1], c2[g:g + 1], noise=Noise(base, load))
        curve.run_effect, curve.run_share = effect[g:g + 1], RUN_EFFECT_SHARE
        part = rows.iloc[members]
        observed = part["latency_mean_s"].to_numpy(float)
        centre, sigma = curve.measurement(part["rps"].to_numpy(float), 0.0,
                                          measured=observed, run_spread=run_spread(part))
        expected = curve.noise.log_density(np.log(observed) - np.log(centre[0]), sigma[0])
        np.testing.assert_allclose(pointwise[members], expected, rtol=1e-9, atol=1e-9)


def test_a_measurement_of_the_sweep_moves_by_its_effect_and_a_new_run_does_not():
    draws = 4
    curve = Curve(np.full(draws, 2.0), np.full(draws, 0.1),
                  noise=Noise(np.full(draws, 0.01), np.full(draws, 0.0)))
    rps = np.array([1.0, 5.0])
    law = latency(rps, 2.0, 0.1)
    plain_centre, plain_sigma = curve.measurement(rps, 0.004)
    curve.run_effect, curve.run_share = np.array([0.5, -0.5, 1.0, 0.0]), 0.6
    # no spread given (a decision's new run): the law and its own noise
    centre, sigma = curve.measurement(rps, 0.004)
    np.testing.assert_allclose(centre, plain_centre)
    np.testing.assert_allclose(sigma, plain_sigma)
    spread = (np.array([0.2, 0.3]), np.array([500.0, 500.0]))
    centre, sigma = curve.measurement(rps, 0.004, run_spread=spread)
    run_sd = run_mean_log_sd(spread[0], spread[1], rps * law)
    np.testing.assert_allclose(centre, law * np.exp(run_sd[None, :]
                                                    * curve.run_effect[:, None]))
    np.testing.assert_allclose(sigma, np.broadcast_to(
        np.sqrt(0.01**2 + 0.4 * run_sd**2), (draws, 2)))


@pytest.fixture(scope="module")
def shared_run_fits():
    """Four sweeps replaying one arrival pattern each, fitted below half their pole with
    and without the run effect (about 20 s)."""
    from bayesspec.inference import SamplerSettings
    from bayesspec.bayes.workflow import fit

    truth, raw = _sweeps(seed=1, rows=slice(0, 48, 6))
    data = prepare(raw.drop(columns=["run_effect_true"]))
    utilisation = data["rps"].to_numpy(float) * np.repeat(truth["C2"].to_numpy(float), 10)
    low, high = data.loc[utilisation <= 0.5], data.loc[utilisation > 0.5]
    settings = SamplerSettings(seed=1, progress=False)
    return truth, high, {option: fit(low, "dense", config={"run_effect": option},
                                     settings=settings)
                         for option in ("none", "shared")}


def test_a_fit_with_the_run_effect_recovers_the_laws_of_shared_runs(shared_run_fits):
    """On sweeps whose errors are shared runs, the fit that knows it holds every group's
    C1 and at least 7 of 8 C2s in their 90% intervals; the fit that reads each mean's
    error as its own, independent requests' holds fewer C2s (4 of 8 on this seed)."""
    truth, _, fits = shared_run_fits
    inside = {}
    for option, fitted in fits.items():
        assert fitted.diagnostics["converged"], fitted.diagnostics["text"]
        for name in ("C1", "C2"):
            lo, hi = np.quantile(fitted.draws(name), [0.05, 0.95], axis=0)
            inside[option, name] = int(np.sum((lo <= truth[name]) & (truth[name] <= hi)))
    assert inside["shared", "C1"] == 8 and inside["shared", "C2"] >= 7, inside
    assert inside["none", "C2"] < inside["shared", "C2"], inside


def test_the_held_out_check_predicts_the_sweeps_next_rates(shared_run_fits):
    from bayesspec import checks

    _, high, fits = shared_run_fits
    check = checks.predictive_check(fits["shared"], high)
    held = check["pooled"]["held_out"]
    assert held["points"] == len(high)
    assert held["coverage"] >= 0.8, check["inside"]
    points = check["_points"]
    assert np.all(np.isfinite(points["predicted"]))


@pytest.mark.slow
def test_run_effect_intervals_are_calibrated_over_replicates():
    """10 replicate sets of 4 sweeps with shared runs, each fitted below half its pole:
    the 90% intervals of C1 and C2 cover the truth at about the nominal rate (40 each),
    and the held-out points' at least 80% of the time pooled."""
    from bayesspec import checks
    from bayesspec.inference import SamplerSettings
    from bayesspec.checks.replicates import fit_same_design

    truths, lows, highs = [], [], []
    for r in range(10):
        truth, raw = _sweeps(seed=200 + r)
        data = prepare(raw.drop(columns=["run_effect_true"]))
        utilisation = data["rps"].to_numpy(float) * np.repeat(truth["C2"].to_numpy(float), 10)
        truths.append(truth)
        lows.append(data.loc[utilisation <= 0.5].reset_index(drop=True))
        highs.append(data.loc[utilisation > 0.5])
    fits = fit_same_design(lows, config={"run_effect": "shared"},
                           settings=SamplerSettings(seed=1, progress=False))
    inside = {"C1": [], "C2": []}
    held = []
    for fitted, truth, high in zip(fits, truths, highs):
        assert fitted.diagnostics["converged"], fitted.diagnostics["text"]
        for name in inside:
            lo, hi = np.quantile(fitted.draws(name), [0.05, 0.95], axis=0)
            inside[name].extend((lo <= truth[name]) & (truth[name] <= hi))
        points = checks.predictive_check(fitted, high)["_points"]
        held.extend(points.loc[points["held_out"], "inside"])
    rates = {name: float(np.mean(values)) for name, values in inside.items()}
    rates["held_out"] = float(np.mean(held))
    print(rates)
    # 40 intervals each: nominal 0.9, a binomial 3-sigma band
    assert 0.76 <= rates["C1"] <= 1.0 and 0.76 <= rates["C2"] <= 1.0, rates
    assert rates["held_out"] >= 0.8, rates


def test_the_run_effect_without_spreads_exits_2_with_one_line(tmp_path, capsys):
    _, raw = _sweeps(rows=slice(0, 1))
    path = tmp_path / "means.csv"
    raw.drop(columns=["run_effect_true", "latency_std_s"]).to_csv(path, index=False)
    code = main(["fit", str(path), "--option", "run_effect=shared",
                 "-o", str(tmp_path / "x.nc"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "run_effect" in err[-1] and "latency_std_s" in err[-1]
    assert str(path) in err[-1]
    assert not (tmp_path / "x.nc").exists()


def test_a_saved_run_effect_fit_answers_and_checks_held_out_rates(tmp_path, capsys,
                                                                   mock_sampling):
    """Plumbing: the fit file keeps the run effect (its curves carry it, decisions do
    not read it) and ``check --ppc --hold-out-above`` runs with it."""
    import json

    from bayesspec.bayes import load_fit

    _, raw = _sweeps(rows=slice(0, 24, 12))
    path = tmp_path / "shared.csv"
    raw.drop(columns=["run_effect_true"]).to_csv(path, index=False)
    out_fit = tmp_path / "shared.nc"
    assert main(["fit", str(path), "--option", "run_effect=shared", "-o", str(out_fit),
                 "--draws", "50", "--chains", "2", "--seed", "1", "--quiet"]) == 0
    fitted = load_fit(out_fit)
    assert fitted.model().config["run_effect"] == "shared"
    curve = fitted.group_curve(0)
    assert curve.run_effect is not None and curve.run_effect.shape == (100,)
    assert curve.run_share == pytest.approx(RUN_EFFECT_SHARE)
    capsys.readouterr()
    assert main(["predict", str(out_fit), "--rps", "1,3", "--json", "--prefill", "256",
                 "--decode", "256"]) == 0
    assert json.loads(capsys.readouterr().out)
    assert main(["plan", str(out_fit), "--question", "ceiling", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["candidates"]
    assert main(["check", str(path), "--ppc", "--hold-out-above", "0.6", "--option",
                 "run_effect=shared", "--draws", "50", "--tune", "50", "--chains", "2",
                 "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["pooled"]["held_out"]["points"] > 0


def test_a_planned_run_reads_its_error_as_one_run_where_the_fit_does():
    """``plan``'s simulated measurement: cv/sqrt(n) for a fit of independent requests;
    for a fit with the run effect the run's sd, here N = 5 x L in flight, several times
    more, which the pre-posterior weights then read too."""
    from bayesspec.loadtest.planning import Configuration, observation_log_weights, planned_log_se

    draws = 3
    curve = Curve(np.full(draws, 2.0), np.full(draws, 0.1),
                  noise=Noise(np.full(draws, 0.01), np.zeros(draws)))
    latency_at = curve.latency(5.0)
    assert planned_log_se(curve, 0.3, 5.0, 400, latency_at) == pytest.approx(0.3 / 20)
    configuration = Configuration(k=0, alpha=None, curves=[curve], spreads=[0.3],
                                  index=np.arange(draws))
    observed = np.log(latency_at[:1] * 1.05)[None, :]
    independent = observation_log_weights(configuration, 5.0, 400, observed)
    curve.run_effect, curve.run_share = np.zeros(draws), RUN_EFFECT_SHARE
    se = planned_log_se(curve, 0.3, 5.0, 400, latency_at)
    np.testing.assert_allclose(se, run_mean_log_sd(0.3, 400, 5.0 * latency_at))
    assert np.all(se > 5 * 0.3 / 20)
    one_run = observation_log_weights(configuration, 5.0, 400, observed)
    sigma = np.sqrt(0.01**2 + se**2)
    np.testing.assert_allclose(one_run[:, 0], -0.5 * (np.log(1.05) / sigma) ** 2
                               - np.log(sigma) - 0.5 * np.log(2 * np.pi), rtol=1e-9)
    assert np.all(one_run > independent)  # a 5% miss is no surprise from one run


def test_check_takes_options_only_for_its_refits(tmp_path, capsys, real_fit_path):
    _, raw = _sweeps(rows=slice(0, 1))
    path = tmp_path / "d.csv"
    raw.drop(columns=["run_effect_true"]).to_csv(path, index=False)
    assert main(["check", str(real_fit_path), "--ppc", "--option", "run_effect=shared"]) == 2
    assert "fit file keeps the options" in capsys.readouterr().err
    assert main(["check", str(path), "--option", "run_effect=shared"]) == 2
    assert "--ppc" in capsys.readouterr().err
    assert main(["check", str(path), "--ppc", "--option", "run_effect=seeded"]) == 2
    assert "run_effect must be" in capsys.readouterr().err
