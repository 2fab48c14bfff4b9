"""The ``tails`` model's count law (``--option tail_law=count``): an end-to-end percentile
off the mean law and the spread of the load each request meets
(``laws.count_spread_quantile_expr``). One definition for NumPy and the graph, its limits,
a fit that recovers a known law, and the options' bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.special import ndtri

from bayesspec.cli import main
from bayesspec.data import prepare
from bayesspec.laws import count_spread_quantile_expr, latency
from bayesspec.simulate.synthetic import (count_truth, generate_tail_sweeps, placeholder_truth,
                                 tail_truth)

Z99 = float(ndtri(0.99))


def _eq1(utilisation, c1=2.0, c2=0.05):
    rps = np.asarray(utilisation) / c2
    return rps, latency(rps, c1, c2)


def test_numpy_and_graph_compute_the_same_percentile():
    import pytensor.tensor as pt

    rng = np.random.default_rng(0)
    mean = rng.uniform(1.0, 20.0, 50)
    loaded = mean / rng.uniform(1.0, 5.0, 50)
    c2, spread, dispersion = (rng.uniform(0.01, 0.2, 50), rng.uniform(0.01, 0.5, 50),
                              rng.uniform(0.3, 3.0, 50))
    by_numpy = count_spread_quantile_expr(mean, loaded, c2, spread, dispersion, Z99)
    by_graph = count_spread_quantile_expr(pt.as_tensor(mean), pt.as_tensor(loaded),
                                          pt.as_tensor(c2), pt.as_tensor(spread),
                                          pt.as_tensor(dispersion), Z99, xp=pt).eval()
    assert np.allclose(by_numpy, by_graph, rtol=1e-12)


def test_zero_load_is_the_own_work_quantile_and_the_ratio_flattens_near_the_pole():
    c1, c2, spread, dispersion = 2.0, 0.05, 0.08, 1.3
    zero = count_spread_quantile_expr(c1, c1, c2, spread, dispersion, Z99)
    s = np.sqrt(np.log1p(spread ** 2))
    assert zero == pytest.approx(c1 * np.exp(Z99 * s - 0.5 * s ** 2), rel=1e-12)
    # A median sits below the mean by the spread; a p99 above it.
    assert count_spread_quantile_expr(c1, c1, c2, spread, dispersion, 0.0) < c1 < zero
    _, mean = _eq1(np.array([0.0, 0.3, 0.6, 0.9, 0.99, 0.999]))
    p99 = count_spread_quantile_expr(mean, c1, c2, spread, dispersion, Z99)
    ratio = p99 / mean
    # The stalls' spread first raises p99/mean, then p99 grows like the mean: the ratio
    # stays bounded at the pole (its relative variance tends to d^2 C2/C1), where a power
    # law with gamma > 1 diverges.
    assert ratio[1] > ratio[0]
    limit = np.exp(Z99 * np.sqrt(np.log1p(dispersion ** 2 * c2 / c1))
                   - 0.5 * np.log1p(dispersion ** 2 * c2 / c1))
    assert ratio[-1] == pytest.approx(limit, rel=0.01)
    assert np.all(np.diff(p99) > 0)
    # Without dispersion a request's own spread is all: p99/mean falls toward 1.
    flat = count_spread_quantile_expr(mean, c1, c2, spread, 0.0, Z99) / mean
    assert np.all(np.diff(flat) < 0) and flat[-1] < 1.001


COUNT_LAWS = {"p99": (0.05, 1.2)}
POWER_LAWS = {"ttft_p99": (0.01, 0.8)}


def _count_sweeps(groups, seed: int, ttft: bool = False, count_dispersion: str = "chain"):
    """Sweeps whose p99 follows a known count law (and, with ``ttft``, a TTFT p99 the
    power law)."""
    truth = placeholder_truth()
    truth = truth[truth["verifier"] == "Qwen3-8B"].iloc[groups].reset_index(drop=True)
    if ttft:
        truth = tail_truth(truth, POWER_LAWS, seed=seed)
    truth = count_truth(truth, COUNT_LAWS, seed=seed)
    return truth, generate_tail_sweeps(truth, seed=seed, spread=0.08,
                                       count_dispersion=count_dispersion)


@pytest.mark.long
def test_a_fit_recovers_a_known_batch_count_law():
    """``count_dispersion`` "batch": three groups generated from the Poisson count of
    stalls (no cap, so no slot wait). The fit converges, the dispersion's 90% intervals
    hold the truth in most groups, and the answering p99 curve is the law up to 70% of
    eq. (1)'s pole."""
    from bayesspec.bayes import workflow
    from bayesspec.inference import SamplerSettings
    from bayesspec.laws import batch_count_quantile_expr

    truth, raw = _count_sweeps([0, 5, 10], seed=4, count_dispersion="batch")
    settings = SamplerSettings(draws=500, chains=4, seed=1, progress=False)
    fit = workflow.fit(prepare(raw), "tails",
                       config={"tail_law": "count", "count_dispersion": "batch"},
                       settings=settings)
    assert fit.diagnostics["converged"], fit.diagnostics["text"]
    model = fit.model()
    inside, errors = 0, []
    for g in range(len(truth)):
        row = truth.iloc[g]
        curve = model.metric_curve(fit, g, "p99")
        assert curve.count["batch"]
        lo, hi = np.quantile(curve.count["dispersion"], [0.05, 0.95])
        inside += int(lo <= row["dispersion_p99"] <= hi)
        rps = np.linspace(0.1, 0.7, 4) / row["C2"]
        mean = latency(rps, row["C1"], row["C2"])
        true = batch_count_quantile_expr(mean, row["C1"], row["C2"], row["spread_p99"],
                                         row["dispersion_p99"], Z99, mean - row["C1"], 0.0)
        errors.append(np.median(curve.latency(rps), axis=0) / true - 1.0)
    assert inside >= 2, inside
    assert np.max(np.abs(np.concatenate(errors))) < 0.05, errors


@pytest.mark.slow
def test_the_held_out_check_of_a_summary_passes_a_right_law_and_flags_a_wrong_truth():
    """``check --ppc --hold-out-above`` on a tails fit (``checks.rate_holdout_check``):
    three groups from a known count law, fitted below 0.6 of each top rate. The held-out
    p99s, each a new report of its own requests, fall where a model exactly right puts
    them (neither tail of ``coverage_reference`` below 1%). The same fit asked about
    p99s 0.6 or 2 times the truth flags them: its coverage is one a right model gives
    less than 1% of the time."""
    from bayesspec import checks
    from bayesspec.inference import SamplerSettings

    _, raw = _count_sweeps([0, 5, 10], seed=4)
    data = prepare(raw)
    fit, document = checks.rate_holdout_check(
        data, model="tails", fraction=0.6, config={"tail_law": "count"},
        settings=SamplerSettings(draws=1000, chains=4, seed=1, progress=False))
    assert fit.diagnostics["converged"], fit.diagnostics["text"]
    held_out = document["summaries"]["p99"]["pooled"]["held_out"]
    assert held_out["points"] == 9
    reference = held_out["reference"]
    assert reference["p_as_low"] >= 0.01 and reference["p_as_high"] >= 0.01, held_out
    _, high = checks.split_by_rate(data, 0.6)
    for factor in (0.6, 2.0):
        wrong = high.assign(latency_p99_s=high["latency_p99_s"] * factor)
        checked = checks.summary_check(fit, wrong)["p99"]["pooled"]["held_out"]
        assert checked["coverage"] < held_out["coverage"], (factor, checked)
        assert checked["reference"]["p_as_low"] < 0.01, (factor, checked)
    # ... and the check's one verdict says so, naming the summary
    verdict = checks.predictive_check(fit, wrong)["verdict"]
    assert "Summaries: p99:" in verdict and "too narrow" in verdict, verdict


@pytest.mark.long
def test_a_fit_recovers_a_known_count_law_and_its_curve_is_the_law():
    """A real fit of three groups generated from the count law (about a minute): it
    converges, its intervals hold the truth, and the answering curve is the law."""
    from bayesspec.bayes import workflow
    from bayesspec.inference import SamplerSettings
    from bayesspec.prediction import MetricCurve

    truth, raw = _count_sweeps([0, 5, 10], seed=4)
    fit = workflow.fit(prepare(raw), "tails", config={"tail_law": "count"},
                       settings=SamplerSettings(draws=1000, chains=4, seed=1, progress=False))
    assert fit.diagnostics["converged"], fit.diagnostics["text"]
    model = fit.model()
    assert list(fit.posterior["tail_spread"].coords["count_metric"].values) == ["p99"]
    inside, errors, covered = 0, [], []
    for g in range(len(truth)):
        row = truth.iloc[g]
        curve = model.metric_curve(fit, g, "p99")
        assert curve.count is not None and np.all(curve.exponent == 1.0)
        lo, hi = np.quantile(curve.count["dispersion"], [0.05, 0.95])
        inside += int(lo <= row["dispersion_p99"] <= hi)
        own = ((raw["prefill_tokens"] == row["prefill_tokens"])
               & (raw["decode_tokens"] == row["decode_tokens"]))
        rps = raw.loc[own, "rps"].to_numpy(float)
        rps = rps[rps * row["C2"] < 0.9]      # the group's measured rates
        true = count_spread_quantile_expr(latency(rps, row["C1"], row["C2"]), row["C1"],
                                          row["C2"], row["spread_p99"],
                                          row["dispersion_p99"], Z99)
        draws = curve.latency(rps)
        lo_q, hi_q = np.quantile(draws, [0.05, 0.95], axis=0)
        covered.append((lo_q <= true) & (true <= hi_q))
        light = rps * row["C2"] < 0.7      # below, a small C2 error is not amplified
        errors.append((np.median(draws, axis=0) / true - 1.0)[light])
    assert inside >= 2, inside
    # the population p99 curve's 90% intervals hold the true law at most measured rates
    # (correlated along a sweep, so not a calibration check; the slow test below is)
    assert np.mean(np.concatenate(covered)) >= 0.75, covered
    assert np.max(np.abs(np.concatenate(errors))) < 0.05, errors

    # The answers' curve (NumPy) is the law at every draw.
    curve = model.metric_curve(fit, 0, "p99")
    c1, c2 = fit.draws("C1", 0)[:5], curve.c2[:5]
    rebuilt = MetricCurve(curve.c1[:5], c2, curve.exponent[:5], metric="p99", mean_c1=c1,
                          count={"spread": curve.count["spread"][:5],
                                 "dispersion": curve.count["dispersion"][:5], "z": Z99})
    rps = np.array([0.5, 2.0])
    expected = count_spread_quantile_expr(latency(rps[None, :], c1[:, None], c2[:, None]),
                                          c1[:, None], c2[:, None],
                                          curve.count["spread"][:5, None],
                                          curve.count["dispersion"][:5, None], Z99)
    assert np.allclose(rebuilt.latency(rps), expected)
    # the zero-load summary the graph records is the law's value at zero load
    assert np.allclose(curve.c1[:5], rebuilt.latency(np.array([0.0]))[:, 0], rtol=1e-9)


def test_count_law_fit_file_answers_and_summary(tmp_path, capsys, mock_sampling):
    truth, raw = _count_sweeps([0, 5], seed=2, ttft=True)
    path = tmp_path / "count.csv"
    raw.to_csv(path, index=False)
    out_fit = tmp_path / "count.nc"
    assert main(["fit", str(path), "--model", "tails", "--option", "tail_law=count",
                 "-o", str(out_fit), "--draws", "50", "--chains", "2", "--seed", "1",
                 "--quiet"]) == 0
    capsys.readouterr()
    assert main(["summary", str(out_fit), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    laws = {(e["metric"], e.get("law", "power")) for e in document["summaries"]}
    assert ("p99", "count") in laws and ("ttft_p99", "power") in laws
    assert main(["summary", str(out_fit)]) == 0
    assert "count law, dispersion" in capsys.readouterr().out
    assert main(["predict", str(out_fit), "--rps", "1,3", "--metric", "p99", "--json",
                 "--prefill", str(int(truth["prefill_tokens"].iloc[0])), "--decode",
                 str(int(truth["decode_tokens"].iloc[0]))]) == 0
    assert json.loads(capsys.readouterr().out)["metric"] == "p99"


@pytest.mark.parametrize("option, value", [("tail_law", "weibull"), ("tail_law", "1"),
                                           ("count_dispersion", "poisson")])
def test_an_unknown_tail_law_exits_2_with_one_line(tmp_path, capsys, option, value):
    _, raw = _count_sweeps([0], seed=1)
    path = tmp_path / "d.csv"
    raw.to_csv(path, index=False)
    code = main(["fit", str(path), "--model", "tails", "--option", "tail_law=count",
                 "--option", f"{option}={value}", "-o", str(tmp_path / "x.nc"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and option in err[-1]
    assert not (tmp_path / "x.nc").exists()


def test_the_count_law_needs_a_mean(tmp_path, capsys):
    _, raw = _count_sweeps([0], seed=1)
    path = tmp_path / "percentiles.csv"
    raw[["verifier", "prefill_tokens", "decode_tokens", "rps", "n_requests",
         "latency_p99_s"]].to_csv(path, index=False)
    code = main(["fit", str(path), "--model", "tails", "--option", "tail_law=count",
                 "-o", str(tmp_path / "x.nc"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "tail_law count" in err[-1] and "latency_mean_s" in err[-1]
    assert not (tmp_path / "x.nc").exists()


@pytest.mark.slow
def test_count_law_goodput_intervals_are_calibrated_over_replicates():
    """10 replicate data sets of 3 groups generated from the count law: the 90% intervals
    of the goodput at a p99 target (the SLO decision) and of the dispersion cover the
    truth at about the nominal rate."""
    from bayesspec.inference import SamplerSettings
    from bayesspec.checks.replicates import fit_same_design, interval_covers

    truths, datasets = [], []
    for r in range(10):
        truth, raw = _count_sweeps([0, 5, 10], seed=100 + r)
        truths.append(truth)
        datasets.append(prepare(raw))
    fits = fit_same_design(datasets, model="tails", config={"tail_law": "count"},
                           settings=SamplerSettings(seed=1, progress=False))
    covers = {"goodput": [], "dispersion": []}
    for fit, truth in zip(fits, truths):
        assert fit.diagnostics["converged"], fit.diagnostics["text"]
        model = fit.model()
        for g in range(len(truth)):
            row = truth.iloc[g]
            curve = model.metric_curve(fit, g, "p99")
            # the target the truth meets at 70% utilisation
            at = 0.7 / row["C2"]
            target = float(count_spread_quantile_expr(
                latency(at, row["C1"], row["C2"]), row["C1"], row["C2"], row["spread_p99"],
                row["dispersion_p99"], Z99))
            covers["goodput"].append(interval_covers(curve.rate_meeting(target)[:, None],
                                                     np.array([at]))[0])
            covers["dispersion"].append(interval_covers(curve.count["dispersion"][:, None],
                                                        np.array([row["dispersion_p99"]]))[0])
    rates = {name: float(np.mean(values)) for name, values in covers.items()}
    print(rates)
    # 30 intervals each: nominal 0.9, a binomial 3-sigma band
    assert 0.74 <= rates["goodput"] <= 1.0, rates
    assert 0.74 <= rates["dispersion"] <= 1.0, rates


@pytest.mark.parametrize("profiled, variance",
                         [(False, "chain"), (True, "chain"), (False, "batch"),
                          (True, "batch")])
def test_the_graph_reads_each_percentile_as_the_curve_does(tmp_path, profiled, variance):
    """At the model's starting point, the log p99 the likelihood reads at every point
    equals the answering ``MetricCurve``'s: the slot queue with a stated cap, and with
    the decode profile (its Poisson law, whose stretch the count law's own work takes)."""
    import pandas as pd

    from bayesspec.bayes import TailLatencyModel
    from bayesspec.prediction import MetricCurve, ProfileCurve
    from tests.data.test_decode_profile import SIZES, TIMES, profile_frame

    cap = 48
    truth = ProfileCurve(np.array([10.4]), np.array([0.063]), batch_sizes=SIZES,
                         iteration_s=TIMES, decode_tokens=256, cap=cap)
    rps = np.linspace(0.05, 0.9, 9) * truth.ceiling[0]
    mean = truth.latency(rps)[0]
    frame = pd.DataFrame({"verifier": "Llama-2-70B", "gpu": "A100", "prefill_tokens": 256,
                          "decode_tokens": 256, "rps": rps, "latency_mean_s": mean,
                          "latency_p99_s": mean * 1.3, "n_requests": 1000,
                          "max_num_seqs": cap})
    config = {"tail_law": "count", "saturation_spread": 0.0, "count_dispersion": variance}
    if profiled:
        path = tmp_path / "profile.csv"
        profile_frame().to_csv(path, index=False)
        config["decode_profile"] = str(path)
    model_class = TailLatencyModel(config)
    assert model_class.config["profile_law"] == "poisson"
    data = prepare(frame)
    model = model_class.build(data)
    # every group keeps its cap in the graph here, as the answers do
    assert "cap" in {v.name for v in model.data_vars}
    point = model.initial_point()
    names = ["C1", "C2", "tail_spread", "tail_dispersion"]
    outputs = model.replace_rvs_by_values([model[n] for n in names] + [model.summary_log_law])
    values = model.compile_fn(outputs, inputs=model.value_vars,
                              on_unused_input="ignore")(point)
    c1, c2, spread, dispersion, law = (np.asarray(v, dtype=float) for v in values)
    profile = ({"batch_sizes": SIZES, "iteration_s": TIMES, "decode_tokens": 256.0}
               if profiled else None)
    curve = MetricCurve(np.ones(1), c2[:1], np.ones(1), metric="p99", mean_c1=c1[:1],
                        cap=np.array([float(cap)]), profile=profile,
                        count={"spread": spread[0, :1], "dispersion": dispersion[0, :1],
                               "z": Z99, "batch": variance == "batch"})
    rows = data.loc[~data["excluded"]]
    answered = np.log(curve.latency(rows["rps"].to_numpy(float))[0])
    if variance == "batch":
        # the rates reach past the cap, so the slot wait's part is read too
        rates = rows["rps"].to_numpy(float)
        _, queue = curve.stretch_and_queue(rates)
        assert np.nanmax(queue[0] - curve._eq1_factor(rates)[0]) > 0.05
    # past this draw's ceiling the curve says inf, the graph a steep finite penalty
    below = np.isfinite(answered)
    assert below.sum() >= 5
    np.testing.assert_allclose(law[0][below], answered[below], rtol=1e-6)


def test_the_batch_variance_is_a_poisson_count_of_stalls_plus_the_slot_wait():
    """``count_dispersion`` "batch": with no cap binding the whole load is stalls, whose
    variance is d^2 C2 (L - C1) (no chain factor L/C1); past the cap the wait for a slot
    adds its square, and the p99 lies between the chain's reading at light load and
    above the Poisson stalls' alone once the wait starts."""
    from bayesspec.laws import (batch_count_loads, batch_count_quantile_expr,
                                log_normal_quantile_expr)

    own_work, c2, spread, dispersion = 4.0, 0.05, 0.02, 1.5
    factor = np.array([1.1, 2.0, 4.0])
    stall, wait = batch_count_loads(own_work, 1.0, factor, factor)
    np.testing.assert_allclose(stall, own_work * (factor - 1))
    np.testing.assert_allclose(wait, 0.0)
    latency_s = own_work * factor
    batch = batch_count_quantile_expr(latency_s, own_work, c2, spread, dispersion, Z99,
                                      stall, wait)
    variance = (spread * own_work) ** 2 + dispersion ** 2 * c2 * (latency_s - own_work)
    np.testing.assert_allclose(batch, log_normal_quantile_expr(latency_s, variance, Z99))
    chain = count_spread_quantile_expr(latency_s, own_work, c2, spread, dispersion, Z99)
    # the chain over-disperses by L/C1: equal in the limit of no load, larger under it
    assert np.all(chain > batch)
    # a capped queue factor of 5 over eq. (1)'s 4: a slot wait of C1, its square added
    stall, wait = batch_count_loads(own_work, 1.0, np.array([5.0]), np.array([4.0]))
    np.testing.assert_allclose(stall, own_work * 3.0)
    np.testing.assert_allclose(wait, own_work)
    waited = batch_count_quantile_expr(5 * own_work, own_work, c2, spread, dispersion,
                                       Z99, stall, wait)
    unwaited = batch_count_quantile_expr(5 * own_work, own_work, c2, spread, dispersion,
                                         Z99, stall, 0.0)
    assert waited > unwaited
    # the profile's dip, counted signed, cancels the stalls
    signed, _ = batch_count_loads(own_work, 0.9, np.array([1.05]), np.array([1.05]))
    np.testing.assert_allclose(signed, 0.0)
