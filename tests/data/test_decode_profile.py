"""The engine's decode-iteration profile (``fit --decode-profile``, bayesspec.data.decode_profile):
L = C1 + C2 N + (decode - 1) [t_d(N + 1) - t_d(1)], N = RPS x L."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from bayesspec import laws
from bayesspec.data import prepare
from bayesspec.data.decode_profile import match_profiles, read_decode_profile
from bayesspec.errors import BadInput
from bayesspec.prediction import Curve, ProfileCurve

# A 70B model's decode iteration on A100 TP4 as Vidur predicts it (ms): flat to 16, the
# all-reduce's fast band at 20-40, a GEMM tile step at 64-72 (examples/vidur/README.md).
SIZES = np.array([1, 8, 16, 20, 28, 40, 48, 56, 64, 72, 96, 128], dtype=float)
TIMES = np.array([39.9, 40.2, 41.3, 36.3, 35.7, 36.6, 40.6, 43.9, 44.5, 46.3, 48.0,
                  50.6]) / 1e3


def profile_frame(**keys) -> pd.DataFrame:
    return pd.DataFrame({**{k: v for k, v in keys.items()}, "batch_size": SIZES.astype(int),
                         "decode_iteration_s": TIMES})


def test_the_shift_averages_the_profile_over_the_batches_a_request_meets():
    from scipy.stats import poisson

    assert laws.decode_profile_shift(0.0, 256, SIZES, TIMES) == pytest.approx(0.0)
    # N requests in flight: a batch of 1 + K, K ~ Poisson(N)
    counts = np.arange(0, 400)
    expected = 255 * (np.sum(poisson.pmf(counts, 27.0) * np.interp(1 + counts, SIZES, TIMES))
                      - TIMES[0])
    assert laws.decode_profile_shift(27.0, 256, SIZES, TIMES) == pytest.approx(expected)
    # around the all-reduce's fast band the average is above the time at the mean batch
    assert expected > 255 * (TIMES[4] - TIMES[0]) + 0.05
    flat = laws.decode_profile_shift(27.0, 256, SIZES, np.full(12, 0.04))
    assert flat == pytest.approx(0.0, abs=1e-12)    # rounding: 1.8e-15 with numpy 2.5
    # a linear profile: eq. (1)'s slope exactly, averaging changes nothing
    linear = 0.04 + 2e-4 * SIZES
    assert laws.decode_profile_shift(30.0, 101, SIZES, linear) == pytest.approx(100 * 2e-4 * 30)
    # the cap holds the batch
    assert laws.decode_profile_shift(200.0, 256, SIZES, TIMES, cap=48) == pytest.approx(
        255 * (TIMES[6] - TIMES[0]))
    # past the profile: the upper half's slope continues
    slope = np.polyfit(SIZES[SIZES >= 64.5], TIMES[SIZES >= 64.5], 1)[0]
    assert laws.decode_profile_shift(400.0, 2, SIZES, TIMES) == pytest.approx(
        TIMES[-1] + (401 - 128) * slope - TIMES[0], rel=1e-3)
    # the pieces the graph solves on follow the shift between whole requests (within a few
    # ms, against latencies of seconds: the curvature of the average over one request)
    knots, values, slopes = laws.profile_segments(256, SIZES, TIMES, 128)
    middle = knots[:-1] + 0.5
    assert np.allclose(values[:-1] + 0.5 * slopes[:-1],
                       laws.decode_profile_shift(middle, 256, SIZES, TIMES, 128), atol=5e-3)
    assert slopes[-1] == 0.0 and knots[-1] >= 127 + 4 * np.sqrt(127) - 1


def test_the_curve_is_self_consistent_and_eq1_when_the_profile_is_flat():
    c1, c2 = np.array([10.4, 9.8]), np.array([0.063, 0.07])
    curve = ProfileCurve(c1, c2, batch_sizes=SIZES, iteration_s=TIMES, decode_tokens=256)
    rps = np.array([0.0, 0.5, 1.5, 2.2, 3.0, 4.5])
    value, n = curve.latency(rps), curve.concurrency(rps)
    assert np.allclose(rps * value, n, rtol=1e-9, atol=1e-9)
    assert np.allclose(value, c1[:, None] + c2[:, None] * n + curve.shift(n), rtol=1e-9)
    # the dip of the all-reduce band: latency falls while the load rises
    assert value[0, 3] < value[0, 2]
    flat = ProfileCurve(c1, c2, batch_sizes=SIZES, iteration_s=np.full(12, 0.04),
                        decode_tokens=256)
    assert np.allclose(flat.latency(rps), Curve(c1, c2).latency(rps), rtol=1e-9)
    capped = ProfileCurve(c1, c2, batch_sizes=SIZES, iteration_s=np.full(12, 0.04),
                          decode_tokens=256, cap=48)
    assert np.allclose(capped.latency(rps[:4]), Curve(c1, c2, cap=48).latency(rps[:4]),
                       rtol=1e-7)
    assert np.allclose(capped.ceiling, laws.ceiling_rps(c1, c2, 48), rtol=1e-6)


def test_the_ceiling_is_the_last_rate_with_a_self_consistent_concurrency():
    c1, c2 = np.array([10.4]), np.array([0.063])
    curve = ProfileCurve(c1, c2, batch_sizes=SIZES, iteration_s=TIMES, decode_tokens=256,
                         cap=48)
    ceiling = curve.ceiling[0]
    assert np.isfinite(curve.latency(np.array([0.999 * ceiling]))).all()
    assert np.isinf(curve.latency(np.array([1.001 * ceiling]))).all()
    # between a full batch's throughput (every iteration at 48) and the mean-field's: the
    # batch is Poisson about eq. (1)'s N at that rate, a little short of full
    full = laws.cap_throughput(c1 + 255 * (TIMES[6] - TIMES[0]), c2, 48)[0]
    assert full < ceiling < 1.03 * full
    n = curve.concurrency(np.array([ceiling]))[0, 0]
    assert ceiling == pytest.approx(laws.cap_throughput(c1 + curve.shift(n), c2, 48)[0],
                                    rel=1e-6)


@pytest.mark.parametrize("edit, column, reason", [
    (lambda f: f.drop(columns="decode_iteration_s"), None, "decode_iteration_s"),
    (lambda f: f.assign(batch_size=f["batch_size"].astype(float) + 0.5), "batch_size",
     "integer"),
    (lambda f: f.assign(decode_iteration_s=np.r_[TIMES[:3], -1.0, TIMES[4:]]),
     "decode_iteration_s", "positive"),
    (lambda f: pd.concat([f, f.iloc[[2]]]), "batch_size", "twice"),
    (lambda f: f.head(1), "batch_size", "two batch sizes"),
])
def test_a_bad_profile_is_one_line_naming_the_file_row_and_column(tmp_path, edit, column,
                                                                  reason):
    path = tmp_path / "profile.csv"
    edit(profile_frame(verifier="X")).to_csv(path, index=False)
    with pytest.raises(BadInput, match=reason) as error:
        read_decode_profile(path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)
    if column:
        assert f"column '{column}'" in str(error.value) and "row " in str(error.value)


def sweep(verifier="Llama-2-70B", prefill=256, decode=256, c1=10.4, c2=0.063, cap=128,
          shares=np.linspace(0.05, 0.92, 11), noise=0.005, seed=0) -> pd.DataFrame:
    """Mean latencies of the profile law with log-normal noise, the cap stated."""
    rng = np.random.default_rng(seed)
    curve = ProfileCurve(np.array([c1]), np.array([c2]), batch_sizes=SIZES,
                         iteration_s=TIMES, decode_tokens=decode, cap=cap)
    rps = shares * curve.ceiling[0]
    mean = curve.latency(rps)[0] * np.exp(noise * rng.standard_normal(len(rps)))
    return pd.DataFrame({"verifier": verifier, "gpu": "A100", "prefill_tokens": prefill,
                         "decode_tokens": decode, "rps": rps, "latency_mean_s": mean,
                         "max_num_seqs": cap})


def test_profiles_go_to_the_groups_their_keys_name(tmp_path):
    data = prepare(pd.concat([sweep(), sweep(prefill=512), sweep(verifier="Other")]))
    from bayesspec.data import assign_groups

    groups, index = assign_groups(data)
    profile = pd.concat([profile_frame(verifier="Llama-2-70B", prefill_tokens=256),
                         profile_frame(verifier="Llama-2-70B", prefill_tokens=512)])
    profile["decode_iteration_s"] *= np.repeat([1.0, 1.1], len(SIZES))
    profile.attrs["source_file"] = "p.csv"
    sizes, times = match_profiles(data, index, len(groups), profile)
    assert np.isfinite(sizes[0]).all() and np.isfinite(sizes[1]).all()
    assert np.isnan(sizes[2]).all()
    assert times[1, 0] == pytest.approx(1.1 * times[0, 0])
    # keyed by the verifier alone, two profiles match the 256 group: ambiguous
    ambiguous = profile.drop(columns="prefill_tokens")
    ambiguous.attrs["source_file"] = "p.csv"
    with pytest.raises(BadInput, match="more than one profile"):
        match_profiles(data, index, len(groups), ambiguous)
    speculative = data.assign(k=2, drafter="d", alpha=0.7)
    groups, index = assign_groups(speculative)
    with pytest.raises(BadInput, match="speculative"):
        match_profiles(speculative, index, len(groups), profile)


@pytest.fixture(scope="module")
def profile_fit(tmp_path_factory):
    """A real dense fit with the profile, of two groups drawn from the profile law."""
    from bayesspec.inference import SamplerSettings
    from bayesspec.bayes.workflow import fit

    folder = tmp_path_factory.mktemp("profile")
    path = folder / "profile.csv"
    profile_frame().to_csv(path, index=False)
    truth = {256: (10.4, 0.063), 512: (21.6, 0.40)}
    frames = [sweep(prefill=256, decode=256, c1=10.4, c2=0.063, seed=1),
              sweep(prefill=2048, decode=512, c1=21.6, c2=0.40, seed=2)]
    data = prepare(pd.concat(frames, ignore_index=True))
    # 1000 draws after 1000 tuning steps: with 500 of each, a fresh install (2026-12-06:
    # pytensor 3.3.8, nutpie 0.16.11) left saturation_rps at R-hat 1.011
    settings = SamplerSettings(draws=1000, tune=1000, chains=4, seed=5, progress=False)
    # the data follow the Poisson law, so it is named (the default with a profile is the
    # chain: tests/laws/test_profile_chain.py recovers that one)
    return fit(data, "dense", settings=settings,
               config={"decode_profile": str(path), "profile_law": "poisson"}), truth


@pytest.mark.slow
def test_a_profile_fit_recovers_the_costs_and_predicts_past_the_kink(profile_fit):
    from bayesspec.checks.posterior_predictive import predictive_check

    result, truth = profile_fit
    assert result.diagnostics["converged"], result.diagnostics
    for g, decode in enumerate(result.groups["decode_tokens"].astype(int)):
        c1, c2 = truth[decode]
        for name, value in (("C1", c1), ("C2", c2)):
            lo, hi = np.quantile(result.draws(name, g), [0.05, 0.95])
            assert lo <= value <= hi, (name, decode, lo, value, hi)
    curve = result.group_curve(0)
    assert isinstance(curve, ProfileCurve)
    # rates between the fitted ones and up to the ceiling: the truth's curve is inside
    true = ProfileCurve(np.array([10.4]), np.array([0.063]), batch_sizes=SIZES,
                        iteration_s=TIMES, decode_tokens=256, cap=128)
    rps = np.linspace(0.1, 0.9, 9) * true.ceiling[0]
    lo, hi = np.quantile(curve.latency(rps), [0.05, 0.95], axis=0)
    assert np.all((lo <= true.latency(rps)[0] * 1.001) & (true.latency(rps)[0] <= hi * 1.001))
    check = predictive_check(result)
    assert check["pooled"]["held_in"]["coverage"] >= 0.8


def test_fit_takes_the_profile_and_the_fit_answers_without_the_file(tmp_path, capsys,
                                                                   mock_sampling):
    from bayesspec.bayes import load_fit
    from bayesspec.cli import main

    data, profile, out = tmp_path / "d.csv", tmp_path / "p.csv", tmp_path / "f.nc"
    pd.concat([sweep(), sweep(verifier="Other")]).to_csv(data, index=False)
    profile_frame(verifier="Llama-2-70B").to_csv(profile, index=False)
    assert main(["fit", str(data), "-o", str(out), "--decode-profile", str(profile),
                 "--draws", "50", "--tune", "50", "--chains", "2", "--no-loo"]) == 0
    err = capsys.readouterr().err
    assert "decode profile: 1 of 2 group(s) follow it" in err and "Other" in err
    profile.unlink()
    result = load_fit(out)
    assert isinstance(result.group_curve(0), ProfileCurve)
    assert type(result.group_curve(1, admit_unmeasured=False)) is Curve
    assert main(["predict", str(out), "--rps", "0.5", "--verifier", "Llama-2-70B",
                 "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer
    assert main(["summary", str(out), "--json"]) == 0
    groups = {g["label"]: g for g in json.loads(capsys.readouterr().out)["groups"]}
    profiled = next(g for label, g in groups.items() if label.startswith("Llama-2-70B"))
    assert profiled["ceiling_binding"] == "cap"
    again = tmp_path / "g.nc"
    profile_frame(verifier="Llama-2-70B").to_csv(profile, index=False)
    assert main(["fit", str(data), "-o", str(again), "--decode-profile", str(profile),
                 "--draws", "50", "--tune", "50", "--chains", "2", "--no-loo",
                 "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["decode_profile"].startswith("decode profile: 1 of 2")


def test_the_profile_is_refused_where_the_law_cannot_take_it(tmp_path, capsys):
    from bayesspec.cli import main

    data, profile, out = tmp_path / "d.csv", tmp_path / "p.csv", tmp_path / "f.nc"
    sweep().to_csv(data, index=False)
    profile_frame().to_csv(profile, index=False)
    for extra, words in ((["--model", "dense-spline"], "does not take decode_profile"),
                         (["--cap-prior", "catalog"], "stated, not learned")):
        code = main(["fit", str(data), "-o", str(out), "--decode-profile", str(profile),
                     *extra])
        err = capsys.readouterr().err
        assert code == 2 and words in err and not out.exists()
    bad = tmp_path / "bad.csv"
    profile_frame().drop(columns="batch_size").to_csv(bad, index=False)
    assert main(["fit", str(data), "-o", str(out), "--decode-profile", str(bad)]) == 2
    assert "batch_size" in capsys.readouterr().err and not out.exists()


def test_check_holds_out_with_the_profile(tmp_path, capsys, mock_sampling):
    from bayesspec.cli import main

    data, profile = tmp_path / "d.csv", tmp_path / "p.csv"
    sweep().to_csv(data, index=False)
    profile_frame().to_csv(profile, index=False)
    assert main(["check", str(data), "--ppc", "--hold-out-above", "0.6", "--decode-profile",
                 str(profile), "--draws", "50", "--tune", "50", "--chains", "2",
                 "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert "median_relative_width" in document["pooled"]["held_out"]
    assert main(["check", str(data), "--ppc", "--decode-profile", str(tmp_path / "no.csv"),
                 "--json"]) == 2
    assert "no.csv" in capsys.readouterr().err


def test_each_group_starts_at_its_own_costs(tmp_path, monkeypatch):
    """A pooled profile fit starts every group near its own data's C1 and u (a far mode
    that held one group's top rates at the ceiling went unseen by R-hat otherwise)."""
    from bayesspec import inference
    from bayesspec.inference import compile_cache as nutpie_cache
    from bayesspec.bayes import get_model_class
    from bayesspec.bayes.dense import profile_starts

    path = tmp_path / "profile.csv"
    profile_frame().to_csv(path, index=False)
    truth = {(256, 256): (10.4, 0.063), (2048, 512): (21.6, 0.40), (512, 128): (5.2, 0.11)}
    data = prepare(pd.concat(
        [sweep(prefill=p, decode=d, c1=c1, c2=c2, seed=i)
         for i, ((p, d), (c1, c2)) in enumerate(truth.items())], ignore_index=True))
    model = get_model_class("dense")(config={"decode_profile": str(path),
                                             "profile_law": "poisson"})
    inputs = model.prepare(data)
    starts = profile_starts(inputs)
    log_c1, logit_u = starts["log_C1"], starts["utilisation_logit"]
    for g in range(len(inputs.groups)):
        row = inputs.groups.iloc[g]
        c1, c2 = truth[(int(row["prefill_tokens"]), int(row["decode_tokens"]))]
        assert np.exp(log_c1[g]) == pytest.approx(c1, rel=0.05)
        u = 1.0 / (1.0 + np.exp(-logit_u[g]))
        assert u == pytest.approx(c2 * row["rps_max"], abs=0.08)
    # the built model carries them and compiling hands them to nutpie
    pm_model = model.build(data)
    assert np.allclose(pm_model.chain_starts["log_C1"], log_c1)
    seen = {}

    def fake_compile(pm_model, **options):
        seen.update(options)
        return "compiled"

    monkeypatch.setattr(nutpie_cache, "compile_pymc_model", fake_compile)
    inference.compile_model(pm_model, inference.SamplerSettings(progress=False))
    assert np.allclose(seen["initial_points"]["utilisation_logit"], logit_u)


def with_percentiles(frame: pd.DataFrame, spread: float = 0.3) -> pd.DataFrame:
    """A p99 of a log-normal spread around each point's mean, 1000 requests per point."""
    from scipy.stats import norm

    return frame.assign(latency_p99_s=frame["latency_mean_s"]
                        * np.exp(spread * norm.ppf(0.99) - 0.5 * spread**2),
                        n_requests=1000)


def test_a_summary_follows_the_profiled_mean_law():
    from bayesspec.prediction import MetricCurve

    c1, c2, cap = np.array([10.4, 9.8]), np.array([0.063, 0.07]), 48.0
    scale, exponent = np.array([14.0, 13.0]), np.array([1.3, 1.1])
    rps = np.array([0.3, 1.0, 2.0, 3.0])
    profile = {"batch_sizes": SIZES, "iteration_s": TIMES, "decode_tokens": 256.0}
    curve = MetricCurve(scale, c2, exponent, metric="p99", mean_c1=c1, cap=cap,
                        profile=profile)
    mean = ProfileCurve(c1, c2, cap=cap, **profile)
    # the profiled mean law's L/C1 in two parts: the profile's stretch (C1 + shift)/C1,
    # which slows every request alike and scales the summary linearly, and the queue's
    # factor L/(C1 + shift), raised to the summary's gamma
    loaded = mean._solution(rps)[2]
    stretch, queue = loaded / c1[:, None], mean.latency(rps) / loaded
    assert np.all(abs(stretch[:, -1] - 1) > 0.05)     # the profile moves these rates
    assert np.allclose(curve.latency(rps),
                       scale[:, None] * stretch * queue ** exponent[:, None], rtol=1e-9)
    assert np.allclose(curve.load_factor(rps), mean.latency(rps) / c1[:, None], rtol=1e-9)
    # against the whole load factor to the gamma, a tail (gamma > 1) differs by
    # P^(1 - gamma): the stretch is not raised to the queue's exponent
    whole = scale[:, None] * (stretch * queue) ** exponent[:, None]
    assert np.allclose(curve.latency(rps) / whole,
                       stretch ** (1 - exponent[:, None]), rtol=1e-9)
    assert np.allclose(curve.ceiling, mean.ceiling)
    # a flat profile is the capped summary law without one
    flat = dict(profile, iteration_s=np.full(len(SIZES), 0.04))
    assert np.allclose(MetricCurve(scale, c2, exponent, metric="p99", mean_c1=c1, cap=cap,
                                   profile=flat).latency(rps),
                       MetricCurve(scale, c2, exponent, metric="p99", mean_c1=c1,
                                   cap=cap).latency(rps), rtol=1e-7)


def test_tails_takes_the_profile_and_answers_with_it(tmp_path, capsys, mock_sampling):
    from bayesspec.bayes import load_fit
    from bayesspec.cli import main

    data, profile, out = tmp_path / "d.csv", tmp_path / "p.csv", tmp_path / "f.nc"
    with_percentiles(sweep()).to_csv(data, index=False)
    profile_frame().to_csv(profile, index=False)
    assert main(["fit", str(data), "-o", str(out), "--model", "tails", "--decode-profile",
                 str(profile), "--draws", "50", "--tune", "50", "--chains", "2",
                 "--no-loo"]) == 0
    capsys.readouterr()
    result = load_fit(out)
    model = result.model()
    assert isinstance(result.group_curve(0), ProfileCurve)
    curve = model.metric_curve(result, 0, "p99")
    assert isinstance(curve.mean_law, ProfileCurve)
    # its chains start at the group's own costs, as dense's do
    starts = model.build(prepare(with_percentiles(sweep()))).chain_starts
    assert np.exp(starts["log_C1"][0]) == pytest.approx(10.4, rel=0.05)
    assert main(["predict", str(out), "--rps", "0.5", "--metric", "p99", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)
    # a file of percentiles alone has no mean law for the profile to enter
    only = tmp_path / "only.csv"
    with_percentiles(sweep()).drop(columns="latency_mean_s").to_csv(only, index=False)
    assert main(["fit", str(only), "-o", str(tmp_path / "o.nc"), "--model", "tails",
                 "--decode-profile", str(profile)]) == 2
    err = capsys.readouterr().err
    assert "percentiles only" in err and "--decode-profile" in err


@pytest.mark.slow
def test_tails_recovers_a_tails_exponent_under_the_profiles_stretch(tmp_path):
    """p99s drawn from q = A P F_q^gamma (a waiting-time tail, gamma 1.6) along a sweep
    whose profile first speeds the batch up and then slows it: the fit at the defaults
    converges (2000 draws) and its 90% interval of gamma holds the truth (the graph and
    ``MetricCurve`` read the stretch alike: raised to gamma, it would bend gamma away)."""
    from bayesspec.inference import SamplerSettings
    from bayesspec.prediction import MetricCurve
    from bayesspec.bayes.workflow import fit

    c1, c2, cap, gamma = 10.4, 0.063, 128, 1.6
    frame = sweep(c1=c1, c2=c2, cap=cap, noise=0.003, seed=5)
    profile = {"batch_sizes": SIZES, "iteration_s": TIMES, "decode_tokens": 256.0}
    truth = MetricCurve(np.array([1.3 * c1]), np.array([c2]), np.array([gamma]),
                        metric="p99", mean_c1=np.array([c1]), cap=cap, profile=profile)
    rng = np.random.default_rng(6)
    frame["latency_p99_s"] = (truth.latency(frame["rps"].to_numpy(float))[0]
                              * np.exp(0.003 * rng.standard_normal(len(frame))))
    frame["n_requests"] = 1000
    frame["latency_std_s"] = 0.1 * frame["latency_mean_s"]
    stretch, _ = truth.stretch_and_queue(frame["rps"].to_numpy(float))
    assert np.ptp(stretch) > 0.1        # the profile moves the sweep both ways
    path = tmp_path / "profile.csv"
    profile_frame().to_csv(path, index=False)
    result = fit(prepare(frame), "tails", settings=SamplerSettings(seed=2, draws=2000, progress=False),
                 config={"decode_profile": str(path)})
    assert result.diagnostics["status"] == "converged"
    exponent = result.model().metric_curve(result, 0, "p99").exponent
    lo, hi = np.quantile(exponent, [0.05, 0.95])
    assert lo <= gamma <= hi, (lo, hi)
