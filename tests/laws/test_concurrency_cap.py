"""The engine's concurrency cap: the slot-queue law, where the cap comes from, points past
it, and bad caps."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bayesspec import laws
from bayesspec.data import concurrency_caps, prepare
from bayesspec.errors import BadInput


def birth_death_latency(rps, c1, c2, cap, n_max=20000):
    """Mean sojourn time of the birth-death chain the law describes, summed directly: in
    state n, min(n, cap) requests are served, each in C1 + C2 (min(n, cap) - 1)."""
    n = np.arange(n_max)
    served = np.minimum(n, cap)
    rate_out = served / (c1 + c2 * (served - 1))
    log_weight = np.zeros(n_max)
    log_weight[1:] = np.cumsum(np.log(rps) - np.log(rate_out[1:]))
    weight = np.exp(log_weight - log_weight.max())
    return float((n * weight).sum() / weight.sum() / rps)


@pytest.mark.parametrize("cap", [4, 16, 64, 200])
@pytest.mark.parametrize("share", [0.05, 0.5, 0.9, 0.99])
def test_slot_queue_is_the_birth_death_chain(cap, share):
    c1, c2 = 3.5, 0.03
    rps = share * laws.ceiling_rps(c1, c2, cap)
    assert laws.capped_latency(rps, c1, c2, cap) == pytest.approx(
        birth_death_latency(rps, c1, c2, cap), rel=1e-7)


@pytest.mark.parametrize("shape", [0.5, 1.25, 5.0])
@pytest.mark.parametrize("cap", [16, 200])
@pytest.mark.parametrize("share", [0.5, 0.99])
def test_slot_queue_holds_where_its_partial_sums_subtract(shape, cap, share):
    """E[N; N <= cap] comes from P(N <= cap - 1) minus cap P(N = cap)/r; with few requests'
    worth of C1 per C2 (small r) and a large cap the batch fills at x = RPS C2 near 1,
    where the two terms nearly cancel."""
    c2 = 0.02
    c1 = shape * c2
    rps = share * laws.ceiling_rps(c1, c2, cap)
    assert laws.capped_latency(rps, c1, c2, cap) == pytest.approx(
        birth_death_latency(rps, c1, c2, cap), rel=1e-7)


def test_without_a_binding_cap_it_is_eq1():
    c1, c2 = 4.0, 0.04
    rps = np.linspace(0.1, 24.0, 30)
    np.testing.assert_allclose(laws.capped_latency(rps, c1, c2, np.inf),
                               laws.latency(rps, c1, c2), rtol=1e-12)
    # a cap far above the number in the system changes nothing either
    np.testing.assert_allclose(laws.capped_latency(rps[:10], c1, c2, 5000),
                               laws.latency(rps[:10], c1, c2), rtol=1e-9)


def test_the_ceiling_is_the_full_batch_throughput_and_below_the_pole():
    c1, c2 = 4.0, 0.04
    for cap in (8, 32, 128, 1024):
        ceiling = laws.ceiling_rps(c1, c2, cap)
        assert ceiling == pytest.approx(cap / (c1 + c2 * (cap - 1)))
        assert ceiling < 1 / c2
        assert np.isinf(laws.capped_latency(ceiling * 1.0001, c1, c2, cap))
        assert np.isfinite(laws.capped_latency(ceiling * 0.999, c1, c2, cap))
    assert laws.ceiling_rps(c1, c2) == pytest.approx(1 / c2)


def test_the_curve_kinks_upward_near_the_cap():
    c1, c2, cap = 4.0, 0.04, 32
    ceiling = laws.ceiling_rps(c1, c2, cap)
    low, high = 0.3 * ceiling, 0.97 * ceiling
    # well below the cap: eq. (1); near it: far above eq. (1)
    assert laws.capped_latency(low, c1, c2, cap) == pytest.approx(laws.latency(low, c1, c2),
                                                                 rel=1e-3)
    assert laws.capped_latency(high, c1, c2, cap) > 1.5 * laws.latency(high, c1, c2)
    # a shorter wait for less variable requests, never below eq. (1)
    half = laws.capped_latency(high, c1, c2, cap, wait_scale=0.5)
    assert laws.latency(high, c1, c2) < half < laws.capped_latency(high, c1, c2, cap)


def test_elasticity_is_eq1s_without_a_cap_and_diverges_at_the_ceiling():
    c1, c2 = 4.0, 0.04
    rps = np.array([1.0, 10.0, 20.0])
    np.testing.assert_allclose(laws.capped_load_elasticity(rps, c1, c2, np.inf),
                               laws.load_amplification_expr(rps, c2), rtol=1e-6)
    ceiling = laws.ceiling_rps(c1, c2, 32)
    near = laws.capped_load_elasticity(np.array([0.5, 0.99]) * ceiling, c1, c2, 32)
    assert near[1] > 20 * near[0]


def test_pytensor_and_numpy_agree():
    import pytensor
    import pytensor.tensor as pt

    rps = pt.dvector("rps")
    latency = laws.slot_queue_latency_expr(rps, 4.0, 0.04, 32.0, xp=pt)
    evaluate = pytensor.function([rps], latency)
    rates = np.array([0.5, 3.0, 5.5, 6.0]) * laws.ceiling_rps(4.0, 0.04, 32) / 6.1
    np.testing.assert_allclose(evaluate(rates), laws.capped_latency(rates, 4.0, 0.04, 32),
                               rtol=1e-5)   # two implementations of the incomplete beta


def test_the_effective_cap_is_the_tightest_limit():
    assert laws.concurrency_cap(256, np.nan, np.nan, 512, 512, 0) == 256
    # the KV cache over a running request's average footprint (prompt + half the output)
    assert laws.concurrency_cap(1024, 76_800, np.nan, 512, 512, 0) == 100
    assert laws.binding_cap_source(1024, 76_800, np.nan, 512, 512, 0) == "kv_cache_tokens"
    # verification carries k + 1 tokens per request against the step's budget
    assert laws.concurrency_cap(1024, np.nan, 2048, 512, 512, 3) == 512
    assert laws.concurrency_cap(1024, np.nan, 2048, 512, 512, 0) == 1024
    assert np.isinf(laws.concurrency_cap())


def frame(**columns) -> pd.DataFrame:
    base = {"rps": [1.0, 2.0, 3.0, 4.0], "latency_mean_s": [4.0, 4.2, 4.5, 4.9],
            "prefill_tokens": 512, "decode_tokens": 512}
    return pd.DataFrame({**base, **columns})


def test_points_past_the_cap_are_set_aside_with_an_actionable_reason():
    data = prepare(frame(max_num_seqs=16), source="caps.csv")
    assert data["excluded"].tolist() == [False, False, False, True]
    reason = data["exclusion_reason"].iloc[3]
    assert "past the engine's ceiling" in reason and "cap of 16 (max_num_seqs)" in reason
    assert "3 RPS" in reason       # the highest rate below it, where to measure from
    # the measured time-average beats Little's estimate when the file has it
    data = prepare(frame(max_num_seqs=16, mean_concurrency=[4, 8, 14, 15]))
    assert not data["excluded"].any()
    caps, sources = concurrency_caps(data)
    assert caps.tolist() == [16] * 4 and sources == ["max_num_seqs"] * 4


def test_engine_limit_flags_fill_and_must_agree_with_the_file():
    data = prepare(frame(), engine_limits={"max_num_seqs": 16})
    assert data["max_num_seqs"].tolist() == [16] * 4 and data["excluded"].iloc[3]
    with pytest.raises(BadInput, match="--max-num-seqs says 32"):
        prepare(frame(max_num_seqs=16), source="caps.csv",
                engine_limits={"max_num_seqs": 32})
    for bad in (0, -3, 2.5):
        with pytest.raises(BadInput) as info:
            prepare(frame(), engine_limits={"max_num_seqs": bad})
        assert info.value.option == "--max-num-seqs"


@pytest.mark.parametrize("values, words", [
    ([16, 16, 0, 16], "integer >= 1"),
    ([16, 16, -2, 16], "integer >= 1"),
    ([16, 16, 16.5, 16], "whole number"),
    ([16, 16, 32, 16], "differs within one configuration"),
])
def test_bad_caps_name_the_column_and_row(values, words):
    with pytest.raises(BadInput) as info:
        prepare(frame(max_num_seqs=values), source="caps.csv")
    message = str(info.value)
    assert words in message and "max_num_seqs" in message and "caps.csv" in message
    assert "\n" not in message


# ------------------------------------------------------------------ the CLI's marks

@pytest.fixture(scope="module")
def uneven_sweeps(tmp_path_factory):
    """Dense fitted only up to low rates, k = 3 higher, and k = 2 far higher (the README
    walkthrough's shape, where a set-aside k = 2 point at 22 RPS must not set every verb's
    ceiling)."""
    from bayesspec.simulate.synthetic import generate_sweeps, speculative_truth

    truth = speculative_truth(alphas=(0.8,), ks=(2, 3))
    data = generate_sweeps(truth, n_rates=9, seed=4)
    keep = []
    tops = {0: 0.45, 3: 0.7, 2: 1.0}       # share of each curve's rates kept
    for k, part in data.groupby("k"):
        part = part.loc[~part["saturated"]].sort_values("rps")
        keep.append(part.iloc[:max(3, int(round(tops[int(k)] * len(part))))])
    frame = pd.concat(keep, ignore_index=True)
    path = tmp_path_factory.mktemp("uneven") / "uneven.csv"
    frame.to_csv(path, index=False)
    highest = {int(k): float(part["rps"].max()) for k, part in frame.groupby("k")}
    return path, highest


def _cli(argv, capsys):
    import json

    from bayesspec.cli import main

    code = main(argv)
    out = capsys.readouterr().out
    return code, (json.loads(out) if "--json" in argv else out)


def test_every_verb_marks_against_the_configurations_it_compares(
        uneven_sweeps, tmp_path, capsys, mock_sampling):
    import matplotlib

    matplotlib.use("Agg")
    path, highest = uneven_sweeps
    fit_path = tmp_path / "fit.nc"
    code, _ = _cli(["fit", str(path), "--model", "speculative", "-o", str(fit_path),
                    "--seed", "1", "--draws", "50", "--tune", "50", "--no-loo"], capsys)
    assert code in (0, 3)
    code, document = _cli(["crossover", str(fit_path), "--alpha", "0.8", "--k", "3",
                           "--json"], capsys)
    ceiling = min(highest[0], highest[3])
    assert document["rps_measured_max"] == pytest.approx(ceiling)
    assert document["measured"]["dense_rps_fitted_max"] == pytest.approx(highest[0])
    assert document["measured"]["sd_rps_fitted_max"] == pytest.approx(highest[3])
    assert document["rps_measured_max"] < highest[2]      # not the k = 2 curve's top
    star = document["rps_star"]
    if star is not None:
        assert document["extrapolated"] == (star["median"] > ceiling)
    # a rate between the two curves' tops is an extrapolation of the dense baseline
    between = 0.5 * (highest[0] + highest[3])
    code, document = _cli(["speedup", str(fit_path), "--alpha", "0.8", "--k", "3",
                           "--rps", f"{0.5 * highest[0]},{between}", "--json"], capsys)
    assert [p["extrapolated"] for p in document["points"]] == [False, True]
    # an alpha or k the data never had: marked in JSON, text and the plot's legend
    plot = tmp_path / "speedup.png"
    for alpha, k in ((0.95, 3), (0.8, 5)):
        code, document = _cli(["speedup", str(fit_path), "--alpha", str(alpha), "--k",
                               str(k), "--rps", f"{0.5 * highest[0]}", "--json"], capsys)
        assert document["measured"]["design_extrapolated"]
        assert all(p["extrapolated"] for p in document["points"])
        code, text = _cli(["speedup", str(fit_path), "--alpha", str(alpha), "--k", str(k),
                           "--rps", f"{0.5 * highest[0]}", "--plot", str(plot)], capsys)
        assert "*" in text.splitlines()[3]
        assert "outside the measured" in text
    from bayesspec.bayes import load_fit
    from bayesspec.reporting.plots import speedup_bands_plot

    law = load_fit(fit_path).law({})
    figure = speedup_bands_plot(law, 0.8, [1, 3, 8])
    labels = [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
    assert any(label.startswith("k = 8") and "not measured" in label for label in labels)
    assert any(label == "k = 3" for label in labels)


# ------------------------------------------------------------------ caps from users' files

VLLM_LOG = """\
INFO 12-11 00:06:40 [utils.py:253] non-default args: {'model': 'Qwen/Qwen3-8B', 'max_num_seqs': 128}
(EngineCore_DP0 pid=2412130) INFO 12-11 00:06:53 [kv_cache_utils.py:1286] GPU KV cache size: 686,320 tokens
(EngineCore_DP0 pid=2412130) INFO 12-11 00:06:54 [kv_cache_utils.py:1291] Maximum concurrency for 100,000 tokens per request: 6.86x
"""


def test_ingest_takes_the_caps_from_the_server_log_flags_or_sidecar(tmp_path, capsys):
    from pathlib import Path

    from bayesspec.cli import main
    from bayesspec.data import read_tidy

    report = Path(__file__).parents[1] / "fixtures" / "ingest" / "guidellm_v1.json"
    log = tmp_path / "vllm.log"
    log.write_text(VLLM_LOG)
    out = tmp_path / "rows.csv"
    assert main(["ingest", str(report), "--server-log", str(log), "-o", str(out)]) == 0
    data = read_tidy(out)
    assert data["max_num_seqs"].tolist() == [128] * len(data)
    assert data["kv_cache_tokens"].tolist() == [686320] * len(data)
    # a flag that contradicts the log is refused, naming both
    assert main(["ingest", str(report), "--server-log", str(log), "--max-num-seqs", "64",
                 "-o", str(tmp_path / "x.csv")]) == 2
    assert "max_num_seqs 128" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()
    # a log without the lines says what it looked for
    other = tmp_path / "other.log"
    other.write_text("INFO starting\n")
    assert main(["ingest", str(report), "--server-log", str(other), "-o",
                 str(tmp_path / "y.csv")]) == 2
    assert "GPU KV cache size" in capsys.readouterr().err
    # a sidecar key works like the flag
    sidecar = tmp_path / "limits.meta.toml"
    sidecar.write_text("max_num_seqs = 48\n")
    assert main(["ingest", str(report), "--sidecar", str(sidecar), "-o",
                 str(tmp_path / "z.csv")]) == 0
    assert read_tidy(tmp_path / "z.csv")["max_num_seqs"].eq(48).all()


def test_fit_says_once_where_the_cap_came_from_or_that_it_is_unknown(tmp_path, capsys,
                                                                     mock_sampling):
    from bayesspec.cli import main

    path = tmp_path / "sweep.csv"
    frame(max_num_seqs=16).to_csv(path, index=False)
    assert main(["fit", str(path), "-o", str(tmp_path / "a.nc"), "--draws", "20",
                 "--tune", "20", "--no-loo"]) in (0, 3)
    said = capsys.readouterr().err
    assert said.count("concurrency cap: 16 requests (max_num_seqs)") == 1
    frame().to_csv(path, index=False)
    assert main(["fit", str(path), "-o", str(tmp_path / "b.nc"), "--draws", "20",
                 "--tune", "20", "--no-loo"]) in (0, 3)
    said = capsys.readouterr().err
    assert said.count("concurrency cap: unknown") == 1 and "--max-num-seqs" in said


def _law_sweep(cap, shares=(0.1, 0.3, 0.5, 0.7, 0.85), c1=3.5, c2=0.04):
    ceiling = laws.ceiling_rps(c1, c2, cap)
    rps = np.asarray(shares) * ceiling
    return pd.DataFrame({"rps": rps, "latency_mean_s": laws.capped_latency(rps, c1, c2, cap),
                         "prefill_tokens": 512, "decode_tokens": 512, "max_num_seqs": cap})


def test_the_likelihood_carries_the_cap_only_where_it_moves_the_measured_points():
    """A cap far above the requests in flight leaves the graph eq. (1)'s (no incomplete
    beta to compile and differentiate), while decisions still read its ceiling; a cap
    the measured points approach stays in the likelihood."""
    from bayesspec.bayes import get_model_class
    from bayesspec.bayes.base import fitted_cap

    model = get_model_class("dense")()
    far = _law_sweep(5000, shares=(0.05, 0.1, 0.2, 0.3, 0.4))
    inputs = model.prepare(prepare(far))
    assert not inputs.groups["cap_in_likelihood"].any()
    assert "cap" not in model.data_arrays(inputs)
    assert fitted_cap(inputs.groups, 0)["cap"] == 5000         # the ceiling still knows it
    near = _law_sweep(16)
    inputs = model.prepare(prepare(near))
    assert inputs.groups["cap_in_likelihood"].all()
    arrays = model.data_arrays(inputs)
    assert arrays["has_cap"][0].tolist() == [1.0] and arrays["cap"][0].tolist() == [16.0]
    # where the cap's departure from eq. (1) at the measured points is below the rule's
    # tolerance, eq. (1) is what the data would say anyway
    for sweep in (far,):
        c1, c2 = 3.5, 0.04
        departure = (sweep["latency_mean_s"] / laws.latency(sweep["rps"], c1, c2) - 1).abs()
        assert departure.max() < 1e-3


def test_the_tail_bound_holds_and_skipping_the_queue_changes_nothing():
    """capped_latency skips the special functions where P(N >= cap) is below e^-70 by a
    Chernoff bound: the bound must hold, and the skipped values must be the queue's."""
    from scipy.stats import nbinom

    rng = np.random.default_rng(5)
    skipped = 0
    for _ in range(400):
        c1 = rng.uniform(0.05, 10.0)
        c2 = c1 * rng.uniform(1e-4, 0.2) / rng.uniform(1.0, 200.0)
        cap = int(rng.integers(1, 1000))
        rps = rng.uniform(0.0, 1.0) * laws.ceiling_rps(c1, c2, cap)
        bound = laws.cap_tail_log_bound(rps, c1, c2, cap)
        assert nbinom.logsf(cap - 1, c1 / c2, 1.0 - rps * c2) <= bound + 1e-9
        if bound < laws.LOG_NEGLIGIBLE_CAP_TAIL:
            skipped += 1
            assert laws.capped_latency(rps, c1, c2, cap) == pytest.approx(
                laws.slot_queue_latency_expr(rps, c1, c2, cap), rel=1e-12)
    assert 50 < skipped < 400


def test_fit_leaves_out_a_cap_its_points_stay_below_only_when_it_checks_the_draws():
    """Between the two rules (the top point far enough below the cap, its load doubled
    not): an unchecked build keeps the slot queue, ``fit``'s build leaves it out and marks
    the group for the check on the draws; with a decode profile it never does."""
    from bayesspec.bayes import get_model_class

    raw = _law_sweep(400, shares=(0.1, 0.3, 0.5, 0.7, 0.8))
    sweep = prepare(raw.assign(latency_p99_s=2.5 * raw["latency_mean_s"]))
    top = sweep["rps"].max() * sweep["latency_mean_s"].iloc[-1]
    assert 0.3 * 400 < top < 0.5 * 400                      # well inside the cap
    for name in ("dense", "tails"):
        model = get_model_class(name)()
        assert model.prepare(sweep).groups["cap_in_likelihood"].all()
        model.cap_checked_on_draws = True
        groups = model.prepare(sweep).groups
        assert not groups["cap_in_likelihood"].any()
        assert groups["cap_left_out_on_trust"].all()
    near = _law_sweep(16)
    model = get_model_class("dense")()
    model.cap_checked_on_draws = True
    groups = model.prepare(prepare(near)).groups
    assert groups["cap_in_likelihood"].all() and not groups["cap_left_out_on_trust"].any()
    assert not get_model_class("dense-spline").checks_cap_on_draws


def test_the_caps_departure_per_draw_is_nil_far_below_it_and_infinite_past_its_ceiling():
    from bayesspec.bayes.base import cap_departure

    rps = np.array([2.0, 8.0, 16.0])
    c1, c2, cap = np.array([3.5, 3.5, 3.5]), np.array([0.04, 0.052, 0.054]), 400.0
    departure = cap_departure(rps, c1, c2, cap, 1.0)
    assert departure[0] < 1e-9                            # N = 156 at the top: far below
    assert 1e-3 < departure[1] < np.inf                   # N = 333 of 400: the queue shows
    assert departure[2] == np.inf                         # the top rate past its ceiling
    # exactly the slot queue against eq. (1), scaled by a summary's exponent
    expected = np.abs(np.log(laws.capped_latency(16.0, 3.5, 0.052, cap)
                             / laws.latency(16.0, 3.5, 0.052)))
    assert departure[1] == pytest.approx(expected)
    assert cap_departure(rps, c1, c2, cap, 1.0, power=np.full(3, 2.0))[1] == pytest.approx(
        2 * expected)


@pytest.mark.filterwarnings("ignore::bayesspec.errors.ConvergenceWarning")  # prior draws
@pytest.mark.parametrize("share, log_ratio, check", [
    (0.0, None, "left out"),        # no draw moves a point: left out, nothing weighed
    (0.3, "few", "reweighted"),     # some do: the draws reweighed by the capped model
    (0.3, "many", "refitted"),      # too many: too few effective draws left
    (0.3, "boost", "refitted"),     # one draw would count for a quarter of the chain
])
def test_fit_settles_a_left_out_cap_by_the_draws(monkeypatch, mock_sampling, capsys, share,
                                                  log_ratio, check):
    from bayesspec.bayes import base, get_model_class
    from bayesspec.inference import SamplerSettings

    shares, weighings = [], []
    real = base.LatencyModel.cap_reach_share
    draws = 4 * 20

    def reported(self, fit):
        measured = real(self, fit)
        shares.append(measured)
        return None if measured is None else share

    def weigh(self, fit, data, free_model):
        ratio = np.zeros(draws)
        if log_ratio == "few":
            ratio[::40] = -50.0                 # 2 of 80 draws the cap rules out
        elif log_ratio == "many":
            ratio[::2] = -50.0                  # half of them
        elif log_ratio == "boost":
            ratio[7] = np.log(25.0)
        kept = self.inputs, self.cap_checked_on_draws
        self.cap_checked_on_draws = False
        self.build(data)
        capped = self.inputs
        self.inputs, self.cap_checked_on_draws = kept
        weighings.append(ratio)
        return ratio, capped

    monkeypatch.setattr(base.LatencyModel, "cap_reach_share", reported)
    monkeypatch.setattr(base.LatencyModel, "cap_importance", weigh)
    sweep = prepare(_law_sweep(400, shares=(0.1, 0.3, 0.5, 0.7, 0.8)))
    model = get_model_class("dense")()
    result = model.fit(sweep, SamplerSettings(draws=20, tune=20, chains=4, seed=1,
                                              progress=True))
    assert shares[0] is not None and 0.0 <= shares[0] <= 1.0   # the check ran on the draws
    assert len(weighings) == (share > 0)
    attrs = result.tree.attrs
    assert attrs["cap_check"] == check and attrs["cap_reach_share"] == share
    assert ("fitting again with its slot queue" in capsys.readouterr().err) == (
        check == "refitted")
    # the posterior is the capped law's unless nothing moved
    assert bool(result.groups["cap_in_likelihood"].all()) == (check != "left out")
    if check == "reweighted":
        assert attrs["cap_importance_ess_share"] == pytest.approx(78 / 80, abs=1e-3)
        assert result.posterior["C2"].shape == (4, 20, 1)
    assert not model.cap_checked_on_draws                     # only for fit's own build
    assert model.prepare(sweep).groups["cap_in_likelihood"].all()


def test_the_caps_importance_weights_are_the_likelihood_ratio_of_the_two_models(
        mock_sampling):
    """Draws far below the cap weigh the same in both models; draws that put the top rate
    past the cap's ceiling weigh very differently in the model with the cap."""
    from bayesspec import inference
    from bayesspec.bayes import base, get_model_class
    from bayesspec.data import included
    from bayesspec.inference.fitfile import Fit
    from bayesspec.inference import SamplerSettings

    sweep = prepare(_law_sweep(400, shares=(0.1, 0.3, 0.5, 0.7, 0.8)))
    model = get_model_class("dense")()
    model.cap_checked_on_draws = True
    free_model = model.build(sweep)
    settings = inference.settings_for(model, SamplerSettings(draws=100, tune=10, seed=3))
    fit = Fit.from_sampling(model, sweep, inference.sample_model(free_model, settings))
    model.cap_checked_on_draws = False
    capped_model = model.build(sweep)
    ratio = (base.log_density_at_draws(capped_model, fit)
             - base.log_density_at_draws(free_model, fit))
    rps = included(fit.data)["rps"].to_numpy(float)
    departure = base.cap_departure(rps, fit.draws("C1", 0), fit.draws("C2", 0), 400.0,
                                   float(fit.groups["wait_scale"].iloc[0]))
    far, past = departure < 1e-9, ~np.isfinite(departure)
    assert far.sum() > 10 and past.sum() > 10                 # prior draws span both
    # (prior draws sit far off the data with small noise, which magnifies a departure of
    # 1e-9 to a few thousandths of a log unit; posterior draws do not)
    assert np.abs(ratio[far]).max() < 0.01
    assert np.abs(ratio[past]).min() > 1.0 and np.median(ratio[past]) < -10.0


def test_tails_checks_each_summary_at_its_own_saturation_cost(mock_sampling):
    from bayesspec import inference
    from bayesspec.bayes import base, get_model_class
    from bayesspec.inference.fitfile import Fit
    from bayesspec.inference import SamplerSettings

    raw = _law_sweep(400, shares=(0.1, 0.3, 0.5, 0.7, 0.8))
    sweep = prepare(raw.assign(latency_p99_s=2.5 * raw["latency_mean_s"], n_requests=500))
    model = get_model_class("tails")()
    model.cap_checked_on_draws = True
    pm_model = model.build(sweep)
    settings = inference.settings_for(model, SamplerSettings(draws=30, tune=10, seed=2))
    fit = Fit.from_sampling(model, sweep, inference.sample_model(pm_model, settings))
    assert fit.groups["cap_left_out_on_trust"].all()
    rps = sweep["rps"].to_numpy(float)
    found = model.cap_departures(fit, 0, rps)
    assert [tolerance for _, tolerance in found] == [base.CAP_REACH_TOLERANCE,
                                                     base.CAP_REACH_SUMMARY_TOLERANCE]
    tail = fit.posterior["tail_C2"].sel(metric="p99").isel(group=0)
    exponent = fit.posterior["tail_exponent"].sel(metric="p99").isel(group=0)
    expected = base.cap_departure(rps, fit.draws("C1", 0),
                                  tail.stack(sample=("chain", "draw")).values, 400.0,
                                  float(fit.groups["wait_scale"].iloc[0]),
                                  exponent.stack(sample=("chain", "draw")).values)
    np.testing.assert_allclose(found[1][0], expected)


def test_resampling_within_chains_drops_the_draws_of_no_weight_and_keeps_each_chains_order():
    import xarray as xr

    from bayesspec.inference import resample_within_chains

    values = np.arange(2 * 10, dtype=float).reshape(2, 10)
    tree = xr.DataTree.from_dict({
        "posterior": xr.Dataset({"C2": (("chain", "draw"), values)},
                                coords={"chain": [0, 1], "draw": np.arange(10)}),
        "sample_stats": xr.Dataset({"diverging": (("chain", "draw"), values % 3 == 0)},
                                   coords={"chain": [0, 1], "draw": np.arange(10)})})
    log_weights = np.zeros(20)
    log_weights[[3, 14]] = -np.inf              # chain 0's draw 3, chain 1's draw 4
    log_weights[[5]] = np.log(2.0)              # chain 0's draw 5 counts twice
    out = resample_within_chains(tree, log_weights)
    kept = out["posterior"]["C2"].values
    assert kept.shape == (2, 10) and 3.0 not in kept[0] and 14.0 not in kept[1]
    assert np.all(np.diff(kept, axis=1) >= 0)                 # order kept within each chain
    assert list(kept[0]).count(5.0) == 2 and set(kept[1]) == set(range(10, 20)) - {14}
    np.testing.assert_array_equal(out["sample_stats"]["diverging"].values, kept % 3 == 0)
    np.testing.assert_array_equal(tree["posterior"]["C2"].values, values)   # not in place


def test_fits_first_reading_of_a_left_out_cap_is_the_top_points_own_load():
    """One light point measured 10% slow implies a steep C2 that puts the top rate near
    the cap; the top point's own load term does not, and ``fit``'s draws check that
    reading."""
    from bayesspec.bayes.base import cap_reaches_the_data

    sweep = _law_sweep(464, shares=(0.05, 0.15, 0.3, 0.5, 0.7, 0.8))
    sweep.loc[1, "latency_mean_s"] *= 1.10
    rows = prepare(sweep)
    index, caps, wait = np.zeros(len(rows), dtype=int), np.array([464.0]), np.array([1.0])
    assert cap_reaches_the_data(rows, index, caps, wait, headroom=0.0)[0]
    assert not cap_reaches_the_data(rows, index, caps, wait, headroom=0.0, slope="top")[0]


def test_draws_by_rates_give_each_points_own_latency_exactly():
    """Decisions ask draws x configurations x rates at once (the ceiling and the tail's
    bound taken per draw, the queue gathered from each draw's costs): every point is
    exactly what it is asked alone."""
    rng = np.random.default_rng(11)
    c1 = rng.uniform(0.5, 2.0, (30, 3, 1))
    c2 = c1 * rng.uniform(0.005, 0.05, (30, 3, 1))
    cap = rng.choice([np.inf, np.nan, 4.0, 24.0, 96.0], (30, 3, 1))
    wait = rng.uniform(0.5, 1.0, (30, 1, 1))
    rps = np.linspace(0.0, 1.1, 12) / np.median(c2)
    together = laws.capped_latency(rps, c1, c2, cap, wait_scale=wait)
    assert together.shape == (30, 3, 12)
    alone = np.array([[[laws.capped_latency(r, c1[s, j, 0], c2[s, j, 0], cap[s, j, 0],
                                            wait_scale=wait[s, 0, 0]) for r in rps]
                        for j in range(3)] for s in range(30)])
    assert np.array_equal(together, alone)
    # the queue itself was in play at some points, and the ceiling at others
    queued = np.isfinite(together) & (together != laws.latency(rps, c1, c2))
    assert queued.any() and np.isinf(together).any()
