"""One run's correlated requests in a reported percentile (the tails model's
``summary_run``): an order statistic of n requests that share their batches scatters
like one of n/(1 + 2N), and one arrival seed replayed at every rate shares that luck."""

from __future__ import annotations

import numpy as np
import pytest

from bayesspec.cli import main
from bayesspec.data import prepare
from bayesspec.laws import RUN_EFFECT_SHARE, quantile_sampling_moments
from bayesspec.prediction import SummarySampling
from bayesspec.simulate.synthetic import generate_tail_sweeps, placeholder_truth, tail_truth

METRICS = {"p99": (2.0, 1.2), "ttft_p99": (0.01, 0.8)}


def _truth(rows=(0, 5, 10), seed: int = 0):
    truth = placeholder_truth()
    truth = truth[truth["verifier"] == "Qwen3-8B"].iloc[list(rows)].reset_index(drop=True)
    return tail_truth(truth, METRICS, seed=seed)


def test_order_statistic_variance_grows_by_the_requests_in_flight():
    from bayesspec.bayes import TailLatencyModel

    data = prepare(generate_tail_sweeps(_truth(), seed=0))
    plain = TailLatencyModel().prepare(data).extras
    for option in ("independent", "shared"):
        inputs = TailLatencyModel({"summary_run": option}).prepare(data)
        extras, rows = inputs.extras, inputs.rows
        point = extras["tail_point"]
        in_flight = (rows["rps"].to_numpy(float) * rows["latency_mean_s"].to_numpy(float))[point]
        assert np.all(in_flight > 0.5)
        np.testing.assert_allclose(extras["sampling_variance"],
                                   plain["sampling_variance"] * (1.0 + 2.0 * in_flight))
        # the bias is the order statistic's of n requests: correlation does not move it
        np.testing.assert_array_equal(extras["sampling_shift"], plain["sampling_shift"])


def test_sampling_error_splits_the_run_variance_into_the_files_share_and_the_points():
    spread, n, in_flight = 0.3, 200.0, 12.0
    shift, variance = quantile_sampling_moments(0.99, n)
    effect = np.array([-1.0, 0.0, 2.0])
    base = SummarySampling(0.99, lambda rps: np.full(np.shape(rps), spread))
    bias0, variance0 = base.error(np.array([1.0, 2.0]), n)
    np.testing.assert_allclose(bias0, spread * shift)
    np.testing.assert_allclose(variance0, spread**2 * variance)

    run = spread**2 * variance * (1 + 2 * in_flight)
    flight = lambda rps, runs=None: np.full((3,) + np.shape(rps), in_flight)  # noqa: E731
    independent = SummarySampling(0.99, base.spread, in_flight=flight)
    bias, var = independent.error(np.array([1.0, 2.0]), n)
    np.testing.assert_allclose(var, run)
    np.testing.assert_allclose(bias, spread * shift)

    shared = SummarySampling(0.99, base.spread, in_flight=flight,
                             run_share=RUN_EFFECT_SHARE, run_effect=effect)
    bias, var = shared.error(np.array([1.0, 2.0]), n)
    assert bias.shape == var.shape == (3, 2)
    np.testing.assert_allclose(var, (1 - RUN_EFFECT_SHARE) * run)
    np.testing.assert_allclose(bias, np.broadcast_to(
        spread * shift + np.sqrt(RUN_EFFECT_SHARE * run) * effect[:, None], (3, 2)))
    # another run (a new seed): the file's draw does not carry over, all is scatter
    bias, var = shared.error(np.array([1.0, 2.0]), n, new_run=True)
    np.testing.assert_allclose(var, np.full((3, 2), run))
    np.testing.assert_allclose(bias, spread * shift)


def test_generated_runs_scatter_as_the_option_says():
    """The generator's own claim, checked over many files: a summary's log error around
    the law and its order-statistic bias has sd spread sqrt(var (1 + 2N)), and two points
    of one file correlate RUN_EFFECT_SHARE."""
    from bayesspec.laws import percentile_latency_expr, load_factor_expr

    truth = _truth(rows=(0,))
    errors = []
    for seed in range(250):
        rows = generate_tail_sweeps(truth, seed=seed, noise=1e-9, run_share=RUN_EFFECT_SHARE,
                                    n_rates=4)
        rows = rows.loc[~rows["saturated"].astype(bool)]
        # the law at the rate the run felt, recovered from the mean's own ratio
        utilisation = 1.0 - float(truth["C1"].iloc[0]) / rows["latency_mean_s"].to_numpy(float)
        law = percentile_latency_expr(load_factor_expr(utilisation, 1.0),
                                      float(truth["A_p99"].iloc[0]),
                                      float(truth["gamma_p99"].iloc[0]))
        shift, variance = quantile_sampling_moments(0.99, rows["n_requests"].to_numpy(float))
        in_flight = rows["rps"].to_numpy(float) * rows["latency_mean_s"].to_numpy(float)
        sd = 0.25 * np.sqrt(variance * (1 + 2 * in_flight))
        errors.append((np.log(rows["latency_p99_s"].to_numpy(float) / law) - 0.25 * shift) / sd)
    z = np.array([e[:2] for e in errors if len(e) >= 2])
    assert abs(np.std(z) - 1.0) < 0.1
    assert abs(np.corrcoef(z[:, 0], z[:, 1])[0, 1] - RUN_EFFECT_SHARE) < 0.15


def test_summary_run_options_fit_and_answer_a_new_report(mock_sampling):
    from bayesspec.bayes import workflow
    from bayesspec.inference import SamplerSettings

    data = prepare(generate_tail_sweeps(_truth(), seed=0, run_share=RUN_EFFECT_SHARE))
    settings = SamplerSettings(draws=50, chains=2, seed=1)
    widths = {}
    for option in ("none", "independent", "shared"):
        fit = workflow.fit(data, "tails", settings=settings, config={"summary_run": option})
        curve = fit.model().metric_curve(fit, 0, "p99")
        assert ("tail_run_z" in fit.posterior) == (option == "shared")
        if option == "shared":
            assert curve.sampling.run_effect.shape == (100,)
        rng = np.random.default_rng(0)
        rate = 0.9 * float(fit.groups["rps_max"].iloc[0])
        draws = curve.predictive(np.array([rate]), rng, n_requests=600.0)[:, 0]
        assert np.all(np.isfinite(draws))
        widths[option] = np.std(np.log(draws))
    # prior draws of the law are the same for all three: the report's own scatter orders them
    assert widths["none"] < widths["independent"]


@pytest.mark.parametrize("value, message", [("sometimes", "summary_run"),
                                            ("independent", "percentiles only")])
def test_bad_summary_run_exits_2_in_one_line(tmp_path, capsys, value, message):
    truth = _truth(rows=(0,))
    data = generate_tail_sweeps(truth, seed=3)
    if value == "independent":
        data = data.drop(columns=["latency_mean_s"])
    path = tmp_path / "runs.csv"
    data.to_csv(path, index=False)
    out = tmp_path / "x.nc"
    code = main(["fit", str(path), "--model", "tails", "--option", f"summary_run={value}",
                 "-o", str(out), "--quiet"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    assert code == 2 and len(errors) == 1 and message in errors[0], err
    assert not out.exists()


def test_predict_reads_a_new_load_test_as_a_new_run(mock_sampling):
    """`predict --metric`'s new measurement is another run: the fitted file's draw of
    its arrival luck does not move it (the held-out check, a report of the same file,
    keeps it)."""
    from bayesspec.bayes import workflow
    from bayesspec.decisions.predict import predict_group
    from bayesspec.inference import SamplerSettings

    data = prepare(generate_tail_sweeps(_truth(rows=(0,)), seed=0, run_share=RUN_EFFECT_SHARE))
    fit = workflow.fit(data, "tails", settings=SamplerSettings(draws=50, chains=2, seed=1),
                       config={"summary_run": "shared"})
    rate = np.array([0.8 * float(fit.groups["rps_max"].iloc[0])])
    document = predict_group(fit, 0, rate, metric="p99", n_requests=1000.0, seed=3)
    curve = fit.model().metric_curve(fit, 0, "p99")
    fresh = curve.predictive(rate, np.random.default_rng(3), n_requests=1000.0, new_run=True)
    assert np.isclose(document["points"][0]["predictive_s"]["median"], np.median(fresh),
                      rtol=1e-9)
    same_file = curve.predictive(rate, np.random.default_rng(3), n_requests=1000.0)
    assert not np.isclose(np.median(same_file), np.median(fresh), rtol=1e-9)


def test_a_planned_report_scatters_as_one_run_where_the_fit_reads_it_so():
    """``plan``'s simulated measurement of a summary: ``spread``'s rough order statistic
    of independent requests without ``summary_run``; with it, the fit's own error of a new
    run's report (the draw's order statistic times 1 + 2N in variance, all of it the new
    run's), which the pre-posterior weights read."""
    from bayesspec.loadtest.planning import Configuration, observation_log_weights, planned_log_se
    from bayesspec.prediction import MetricCurve, Noise, SummarySampling

    draws = 3
    curve = MetricCurve(np.full(draws, 2.0), np.full(draws, 0.1), np.ones(draws),
                        metric="p99", noise=Noise(np.full(draws, 0.01), np.zeros(draws)),
                        sampling=SummarySampling(0.99, lambda rps: np.full(draws, 0.3)))
    assert planned_log_se(curve, 0.2, 5.0, 400, curve.latency(5.0)) == pytest.approx(0.01)
    configuration = Configuration(k=0, alpha=None, curves=[curve], spreads=[0.2],
                                  index=np.arange(draws))
    observed = np.log(curve.latency(5.0)[:1] * 1.1)[None, :]
    independent = observation_log_weights(configuration, 5.0, 400, observed)
    in_flight = np.array([4.0, 8.0, 16.0])
    curve.sampling.in_flight = lambda rps, run_requests=None: in_flight
    se = planned_log_se(curve, 0.2, 5.0, 400, curve.latency(5.0))
    _, order_variance = quantile_sampling_moments(0.99, 400.0)
    np.testing.assert_allclose(se, 0.3 * np.sqrt(order_variance * (1 + 2 * in_flight)))
    one_run = observation_log_weights(configuration, 5.0, 400, observed)
    assert np.all(one_run > independent)  # a 10% miss is no surprise from one run
