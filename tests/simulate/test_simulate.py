"""The serving simulator: queueing sanity, the latency law, SD, MoE, outputs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import curve_fit

from bayesspec.errors import BadInput
from bayesspec.simulate import (Arrivals, ForwardCost, RooflineParams, SpecConfig, StepModel, Workload, at_concurrency, at_rates, default_step_model,
                                expected_cycles, guidellm_report, public_llama8b_h100,
                                roofline, setup, simulate_point, sweep, zero_load_latency)
from bayesspec.cli import simulate as sim_cli
from bayesspec.simulate.grid import expand_grid, load_grid

DATASETS = Path(__file__).resolve().parents[2] / "bayesspec" / "datasets"
REQUESTS = 1000     # per load point: well under a second of simulation each


def law(rps, c1, c2):
    return c1 / (1.0 - rps * c2)


def fit_law(rows: pd.DataFrame) -> tuple[float, float, float]:
    """(C1, C2, R^2) of eq. (1) on the unsaturated rows, by least squares as the paper."""
    u = rows[~rows["saturated"].astype(bool)]
    x, y = u["rps"].to_numpy(float), u["latency_mean_s"].to_numpy(float)
    (c1, c2), _ = curve_fit(law, x, y, p0=[y.min(), 0.5 / x.max()],
                            bounds=([0.0, 0.0], [np.inf, 0.9999 / x.max()]))
    r2 = 1.0 - np.sum((y - law(x, c1, c2)) ** 2) / np.sum((y - y.mean()) ** 2)
    return c1, c2, r2


@pytest.fixture(scope="module")
def dense_sweep():
    return sweep(setup("Qwen3-8B", "H100", prefill=512, decode=512), 9,
                 n_requests=REQUESTS, seed=0)


@pytest.fixture(scope="module")
def sd_sweep():
    return sweep(setup("Qwen3-8B", "H100", k=3, alpha=0.8, prefill=512, decode=512), 9,
                 n_requests=REQUESTS, seed=0)


# ---------------------------------------------------------------------------------------
# Queueing sanity and the latency law on a dense and a speculative sweep
# ---------------------------------------------------------------------------------------

def test_littles_law_on_every_unsaturated_point(dense_sweep, sd_sweep):
    for result in (dense_sweep, sd_sweep):
        u = result.rows[~result.rows["saturated"]]
        assert len(u) >= 5
        ratio = u["mean_concurrency"] / (u["rps"] * u["latency_mean_s"])
        assert np.all(np.abs(ratio - 1.0) <= 0.03), ratio.to_numpy()


@pytest.mark.parametrize("length_dist", ["fixed", "lognormal"])
def test_littles_law_holds_exactly_in_a_closed_loop_window(length_dist):
    """Clients finishing in bursts (fixed lengths: whole cohorts; a cap at 64 slots) put
    window edges chosen by completion counts at different phases of a burst; the window
    ends where the requests in flight carry the same total age as at its start."""
    s = setup("Llama-3.1-8B-Instruct", k=3, alpha=0.7, prefill=512, decode=512,
              length_dist=length_dist, length_cv=0.5 if length_dist != "fixed" else 0.0,
              max_num_seqs=64)
    rows = at_concurrency(s, [4, 32, 64, 128], n_requests=400, seed=1).rows
    ratio = rows["mean_concurrency"] / (rows["rps"] * rows["latency_mean_s"])
    np.testing.assert_allclose(ratio, 1.0, rtol=1e-9)
    np.testing.assert_allclose(rows["mean_concurrency"], [4, 32, 64, 128], rtol=1e-9)


def test_latency_law_fits_dense_and_speculative_sweeps(dense_sweep, sd_sweep):
    c1_d, c2_d, r2_d = fit_law(dense_sweep.rows)
    c1_s, c2_s, r2_s = fit_law(sd_sweep.rows)
    assert r2_d >= 0.98 and r2_s >= 0.98, (r2_d, r2_s)
    assert c1_s / c1_d < 1.0            # SD is faster alone on the server ...
    assert c2_s / c2_d > 1.0            # ... and pays more per unit of load


def test_zero_load_speedup_matches_step_model(dense_sweep, sd_sweep):
    def sync_latency(result):
        rows = result.rows
        return float(rows.loc[rows["strategy"] == "synchronous", "latency_mean_s"].iloc[0])

    simulated = sync_latency(dense_sweep) / sync_latency(sd_sweep)
    d, s = dense_sweep.setup, sd_sweep.setup
    expected = (zero_load_latency(d.step_model, 512, 512, d.spec)
                / zero_load_latency(s.step_model, 512, 512, s.spec))
    assert simulated == pytest.approx(expected, rel=0.05)
    assert expected > 1.2


def test_deterministic_for_a_fixed_seed(dense_sweep):
    again = sweep(setup("Qwen3-8B", "H100", prefill=512, decode=512), 9, n_requests=REQUESTS,
                  seed=0)
    pd.testing.assert_frame_equal(dense_sweep.rows, again.rows)
    other = sweep(setup("Qwen3-8B", "H100", prefill=512, decode=512), 5, n_requests=200,
                  seed=1)
    assert not np.isclose(other.rows["latency_mean_s"].iloc[1],
                          dense_sweep.rows["latency_mean_s"].iloc[1])


def test_sweep_shape_follows_guidellm(dense_sweep):
    rows = dense_sweep.rows
    assert list(rows["strategy"]) == ["synchronous"] + ["poisson"] * 7 + ["throughput"]
    assert bool(rows["saturated"].iloc[-1])
    assert rows["rps_target"].iloc[[0, -1]].isna().all()
    targets = rows["rps_target"].iloc[1:-1].to_numpy()
    sync, ceiling = rows["rps"].iloc[0], rows["rps"].iloc[-1]
    assert np.allclose(targets, np.linspace(sync, ceiling, 9)[1:-1])
    assert (rows["engine"] == "bayesspec-sim").all()
    assert rows["mean_concurrency"].iloc[0] == pytest.approx(1.0)
    assert (rows["latency_p50_s"] <= rows["latency_p95_s"]).all()
    assert (rows["latency_p95_s"] <= rows["latency_p99_s"]).all()
    assert (rows["ttft_mean_s"] < rows["latency_mean_s"]).all()


def test_speculative_counters(sd_sweep):
    spec = sd_sweep.setup.spec
    rows = sd_sweep.rows
    assert (rows["draft_tokens"] == 3 * rows["num_drafts"]).all()
    rate = rows["accepted_tokens"].sum() / rows["draft_tokens"].sum()
    assert rate == pytest.approx(spec.acceptance_rate(), abs=0.01)   # (0.8+0.64+0.512)/3
    # Each request commits its decode tokens after the first in num_drafts cycles.
    sync = rows.iloc[0]
    per_request = sync["num_drafts"] / sync["n_requests"]
    assert per_request == pytest.approx(expected_cycles(511, spec), rel=0.02)
    assert (rows["method"] == "eagle3").all() and (rows["drafter"] == "EAGLE3-Qwen3-8B").all()


# ---------------------------------------------------------------------------------------
# Acceptance model
# ---------------------------------------------------------------------------------------

def test_acceptance_draws_follow_the_schedule():
    rng = np.random.default_rng(5)
    for spec in (SpecConfig(4, alpha=0.7), SpecConfig(3, rates=(0.9, 0.6, 0.2))):
        _, acc = spec.draw_accepted(rng, np.array([200_000]))
        observed = np.bincount(acc, minlength=spec.k + 1) / acc.size
        assert np.allclose(observed, spec.accepted_pmf(), atol=0.005)
    assert SpecConfig(3, alpha=0.8).tokens_per_cycle() == pytest.approx(2.952)
    assert SpecConfig(3, rates=(0.8, 0.64, 0.512)).label() == pytest.approx(0.8)


def test_expected_cycles_edge_cases():
    assert expected_cycles(100, SpecConfig()) == 100
    assert expected_cycles(100, SpecConfig(3, alpha=1.0)) == 25
    assert expected_cycles(10, SpecConfig(4, alpha=0.0)) == 10
    e = SpecConfig(3, alpha=0.8).tokens_per_cycle()
    assert expected_cycles(1000, SpecConfig(3, alpha=0.8)) == pytest.approx(1000 / e, rel=0.01)


@pytest.mark.parametrize("kwargs", [dict(k=2), dict(k=2, alpha=1.5),
                                    dict(k=2, rates=(0.5, 0.7)), dict(k=2, rates=(0.5,)),
                                    dict(k=-1)])
def test_bad_speculative_settings(kwargs):
    with pytest.raises(BadInput):
        SpecConfig(**kwargs)


# ---------------------------------------------------------------------------------------
# Step models
# ---------------------------------------------------------------------------------------

def _cards():
    from bayesspec.data.catalog import default_catalog

    return default_catalog()


def test_public_fit_is_the_default_for_llama_on_h100():
    cat = _cards()
    model = default_step_model(cat.model("Llama-3.1-8B"), cat.gpu("H100"))
    assert model.name.startswith("public-fit")
    t = model.step_time(tokens=100, kv_tokens=50_000, requests=100)
    assert t == pytest.approx(1.207e-3 + 5.886e-3 + 3.926e-8 * 50_000 + 2.101e-5 * 100)
    with_head = default_step_model(cat.model("Llama-3.1-8B"), cat.gpu("H100"),
                                   cat.model("EAGLE3-Llama-3.1-8B"))
    assert with_head.drafter.weights_s == pytest.approx(2.135e-3)


def test_roofline_reproduces_the_public_fit_and_scales_with_hardware():
    cat = _cards()
    llama, h100 = cat.model("Llama-3.1-8B"), cat.gpu("H100")
    public = public_llama8b_h100(eagle=False)
    rl = roofline(llama, h100)
    for tokens, kv in ((1, 600), (64, 40_000), (2048, 200_000)):
        assert rl.step_time(tokens=tokens, kv_tokens=kv, requests=1) == pytest.approx(
            public.step_time(tokens=tokens, kv_tokens=kv, requests=1), rel=0.03)
    qwen = cat.model("Qwen3-8B")
    times = {g: roofline(qwen, cat.gpu(g)).decode_step_time(32, 768) for g in ("A100", "H100",
                                                                               "H200")}
    assert times["A100"] > times["H100"] > times["H200"]


def test_moe_weight_stream_grows_with_distinct_experts():
    cat = _cards()
    card, gpu = cat.model("Qwen3-30B-A3B"), cat.gpu("H100")
    fwd = roofline(card, gpu).verifier
    params = RooflineParams()
    bw = gpu.hbm_bandwidth_gb_s * 1e9 * params.weight_bandwidth_efficiency
    # one token reads the active weights; many tokens read nearly all of them
    assert fwd.weights_s + fwd.experts_s * fwd.coverage(1) == pytest.approx(
        card.active_weight_bytes / bw, rel=1e-6)
    assert fwd.weights_s + fwd.experts_s * fwd.coverage(4096) == pytest.approx(
        card.weight_bytes / bw, rel=1e-3)
    batch = np.array([1, 4, 16, 64])
    per_request = fwd.time(batch, 0) / batch
    assert np.all(np.diff(fwd.time(batch, 0)) > 0) and np.all(np.diff(per_request) < 0)
    # at batch 16 far cheaper than streaming every expert, as a dense model would
    assert fwd.time(16, 0) < 0.75 * (fwd.weights_s + fwd.experts_s + fwd.token_s * 16)


def test_moe_low_load_is_cheaper_than_the_dense_law_predicts():
    s = setup("Qwen3-30B-A3B", "H100", prefill=512, decode=512)
    result = sweep(s, 9, n_requests=600, seed=3)
    rows = result.rows[~result.rows["saturated"]]
    lat = rows["latency_mean_s"].to_numpy()
    # The first step up in load costs far more per request/s than the later ones
    # (coverage saturates): latency is concave in RPS, unlike C1/(1 - RPS*C2).
    slopes = np.diff(lat) / np.diff(rows["rps"].to_numpy())
    assert slopes[0] > 3 * slopes[-1]
    assert (rows["experts_active"] == 8).all() and (rows["experts_total"] == 128).all()


def test_a_custom_step_model_can_be_swapped_in():
    s = setup("Qwen3-8B", "H100", prefill=128, decode=64)
    flat = StepModel(verifier=ForwardCost(fixed_s=0.0, weights_s=0.01, kv_s_per_token=0.0,
                                          token_s=0.0), name="flat")
    res = simulate_point(flat, s.server, s.workload, Arrivals("synchronous"), n_requests=50,
                         seed=1)
    # 64 steps of 10 ms (+-2% jitter): prefill emits the first token, 63 decode steps
    assert res.summary["latency_mean_s"] == pytest.approx(0.64, rel=0.01)


# ---------------------------------------------------------------------------------------
# Scheduler: chunked prefill, batch limits, KV capacity
# ---------------------------------------------------------------------------------------

def test_chunked_prefill_splits_long_prompts():
    s = setup("Qwen3-8B", "H100", prefill=3000, decode=32, max_num_batched_tokens=512)
    res = simulate_point(s.step_model, s.server, s.workload, Arrivals("synchronous"),
                         n_requests=40, seed=0)
    ttft = res.summary["ttft_mean_s"]
    expected = zero_load_latency(s.step_model, 3000, 1, budget=512)   # 6 chunks
    assert ttft == pytest.approx(expected, rel=0.02)
    one_chunk = zero_load_latency(s.step_model, 3000, 1, budget=8192)
    assert ttft > one_chunk + 4 * s.step_model.verifier.weights_s


def test_kv_capacity_preempts_and_marks_saturation():
    s = setup("Qwen3-8B", "H100", prefill=512, decode=512, kv_capacity=20_000)
    res = simulate_point(s.step_model, s.server, s.workload, Arrivals("poisson", 8.0),
                         n_requests=400, seed=2)
    assert res.preemptions.sum() > 0
    assert res.summary["saturated"]
    assert np.isfinite(res.finish).all()        # preempted requests still finish


def test_batch_limit_makes_requests_wait():
    s = setup("Qwen3-8B", "H100", prefill=256, decode=256, max_num_seqs=8)
    res = simulate_point(s.step_model, s.server, s.workload, Arrivals("constant", 6.0),
                         n_requests=300, seed=0)
    assert res.summary["saturated"] and res.capacity_wait.any()
    assert res.summary["mean_concurrency"] > 8


def test_set_aside_points_carry_their_reason_and_the_caps():
    s = setup("Qwen3-8B", "H100", prefill=256, decode=256, max_num_seqs=8)
    res = simulate_point(s.step_model, s.server, s.workload, Arrivals("constant", 6.0),
                         n_requests=300, seed=0)
    assert "batch_wait" in res.summary["saturation_reason"].split(";")
    s = setup("Qwen3-8B", "H100", prefill=512, decode=512, kv_capacity=20_000)
    res = simulate_point(s.step_model, s.server, s.workload, Arrivals("poisson", 8.0),
                         n_requests=400, seed=2)
    assert "preemption" in res.summary["saturation_reason"].split(";")
    rows = at_rates(s, [1.0], n_requests=100, seed=0).rows
    assert rows["max_num_seqs"].tolist() == [1024]
    assert rows["kv_cache_tokens"].tolist() == [20_000]
    assert rows["saturation_reason"].tolist() == [""]


@pytest.mark.parametrize("k, alpha", [(0, None), (3, 0.8)])
def test_a_400_request_sweep_sets_aside_only_what_the_law_does_not_describe(k, alpha):
    """The walkthrough's 400 requests per point: a window shorter than 5 request
    lifetimes at the top Poisson rates would not reach a steady state and would be set
    aside as "saturated" (some at 40% of the ceiling), so the simulator runs such points
    long enough. Only the throughput run is set aside, and every kept point lies on
    eq. (1) within 3% up to 85% of the throughput run's rate."""
    s = setup("Qwen3-8B", "H100", k=k, alpha=alpha, prefill=512, decode=512)
    result = sweep(s, 9, n_requests=400, seed=0)
    rows = result.rows
    assert rows["saturated"].tolist() == [False] * 8 + [True]
    assert rows["saturation_reason"].iloc[-1].split(";")[0] == "throughput"
    for point in result.points[1:-1]:
        lifetimes = (point.window[1] - point.window[0]) / point.summary["latency_mean_s"]
        assert lifetimes >= 5.0
    kept = rows[~rows["saturated"]]
    assert kept["rps"].max() >= 0.85 * rows["rps"].iloc[-1]
    c1, c2, r2 = fit_law(rows)
    residual = kept["latency_mean_s"] / law(kept["rps"], c1, c2) - 1
    assert r2 >= 0.999 and residual.abs().max() <= 0.03, residual.to_numpy()


def test_a_request_larger_than_the_cache_is_refused():
    s = setup("Qwen3-8B", "H100", prefill=4000, decode=4000, kv_capacity=5000)
    with pytest.raises(BadInput):
        simulate_point(s.step_model, s.server, s.workload, Arrivals("synchronous"),
                       n_requests=20)


def test_workload_length_distributions():
    rng = np.random.default_rng(0)
    for dist in ("uniform", "lognormal"):
        p, g = Workload(512, 256, dist, 0.3).sample(rng, 50_000)
        assert p.mean() == pytest.approx(512, rel=0.02) and g.mean() == pytest.approx(256, rel=0.02)
        assert p.std() / p.mean() == pytest.approx(0.3, rel=0.05)
    p, _ = Workload(100, 10).sample(rng, 5)
    assert (p == 100).all()
    s = setup("Qwen3-8B", "H100", prefill=256, decode=128, length_dist="lognormal", length_cv=0.5)
    res = at_rates(s, [4.0], n_requests=300, seed=0)
    assert res.rows["n_requests"].iloc[0] > 100


def test_constant_arrivals_and_rate_lists():
    from bayesspec.cli.common import rates

    assert rates("1,2,5", positive=True).tolist() == [1.0, 2.0, 5.0]
    assert rates("1:2:0.25", positive=True).tolist() == [1.0, 1.25, 1.5, 1.75, 2.0]
    for bad in ("", "1:2", "a,b", "0,1", "2:1:1", "1:2:0"):
        with pytest.raises(BadInput):
            rates(bad, positive=True)
    s = setup("Qwen3-8B", "H100", prefill=256, decode=128)
    res = at_rates(s, [2.0, 4.0], n_requests=300, seed=1, arrivals="constant")
    assert (res.rows["strategy"] == "constant").all()
    assert res.rows["rps"].to_numpy() == pytest.approx([2.0, 4.0], rel=0.03)


# ---------------------------------------------------------------------------------------
# Bundled datasets
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["sim_dense", "sim_speculative", "sim_moe"])
def test_bundled_dataset_is_valid_and_obeys_littles_law(name):
    from bayesspec.data import read_tidy

    path = DATASETS / f"{name}.csv"
    data = read_tidy(path)
    raw = pd.read_csv(path)
    assert path.stat().st_size < 1_000_000
    u = raw[~raw["saturated"]]
    ratio = u["mean_concurrency"] / (u["rps"] * u["latency_mean_s"])
    assert np.all(np.abs(ratio - 1) <= 0.03)
    assert raw.loc[raw["strategy"] == "throughput", "saturated"].all()
    assert data["excluded"].sum() >= raw["saturated"].sum()
    sweeps = raw.groupby(["verifier", "k", "alpha", "prefill_tokens", "decode_tokens"],
                         dropna=False)
    assert (sweeps.size() == 9).all()
    assert (u.groupby(["verifier", "k", "alpha", "prefill_tokens", "decode_tokens"],
                      dropna=False).size() >= 5).all()
    dense = raw[raw["k"] == 0]
    if name == "sim_dense":
        assert dense["verifier"].nunique() >= 3
        assert len(dense.groupby(["prefill_tokens", "decode_tokens"])) == 16
    if name == "sim_speculative":
        sd = raw[raw["k"] > 0]
        assert set(sd["alpha"].round(2)) == {0.5, 0.6, 0.7, 0.8, 0.9}
        assert set(sd["k"]) == {1, 2, 4, 6, 8}
        assert len(sd.groupby(["prefill_tokens", "decode_tokens"])) == 2
        assert len(dense) == 2 * 9
    if name == "sim_moe":
        assert set(raw["verifier"]) == {"gpt-oss-20b", "Qwen3-30B-A3B"}
        assert set(raw["k"]) == {0, 1, 3}
        assert raw["experts_total"].notna().all()


def test_builtin_grids_describe_the_bundled_datasets():
    counts = {name: len(expand_grid(load_grid(name)))
              for name in ("paper-dense", "paper-speculative", "paper-moe")}
    assert counts == {"paper-dense": 64, "paper-speculative": 52, "paper-moe": 20}
    for name, n in counts.items():
        csv = {"paper-dense": "sim_dense", "paper-speculative": "sim_speculative",
               "paper-moe": "sim_moe"}[name]
        assert len(pd.read_csv(DATASETS / f"{csv}.csv")) == 9 * n


# ---------------------------------------------------------------------------------------
# GuideLLM report
# ---------------------------------------------------------------------------------------

def test_guidellm_report_has_the_v2_shape(sd_sweep):
    report = guidellm_report(sd_sweep)
    text = json.dumps(report, allow_nan=False)
    assert json.dumps(guidellm_report(sd_sweep), allow_nan=False) == text
    assert report["metadata"]["version"] == 2
    assert report["config"]["spec"]["profile"] == {"kind": "sweep", "sweep_size": 9}
    assert report["config"]["spec"]["backend"]["model"] == "Qwen3-8B"
    benches = report["benchmarks"]
    assert [b["config"]["strategy"]["type_"] for b in benches] == \
        ["synchronous"] + ["poisson"] * 7 + ["throughput"]
    fields = {"mean", "median", "mode", "variance", "std_dev", "min", "max", "count",
              "total_sum", "percentiles"}
    for b, (_, row) in zip(benches, sd_sweep.rows.iterrows()):
        m = b["metrics"]
        for key in ("request_latency", "time_to_first_token_ms", "inter_token_latency_ms",
                    "prompt_token_count", "output_token_count", "request_concurrency",
                    "requests_per_second"):
            assert set(m[key]["successful"]) == fields
        lat = m["request_latency"]["successful"]
        assert lat["mean"] == pytest.approx(row["latency_mean_s"])
        assert lat["percentiles"]["p95"] == pytest.approx(row["latency_p95_s"])
        assert m["time_to_first_token_ms"]["successful"]["mean"] == \
            pytest.approx(1e3 * row["ttft_mean_s"])
        assert m["request_concurrency"]["successful"]["mean"] == \
            pytest.approx(row["mean_concurrency"])
        assert m["request_totals"]["successful"] == row["n_requests"]
        if row["strategy"] == "poisson":
            assert b["config"]["strategy"]["rate"] == pytest.approx(row["rps_target"])
            assert m["request_totals"]["successful"] / b["duration"] == pytest.approx(row["rps"])
        assert m["prompt_token_count"]["successful"]["mean"] == 512
        assert b["end_time"] > b["start_time"]
    profile = benches[0]["config"]["profile"]
    assert profile["synchronous_rate"] == pytest.approx(sd_sweep.rows["rps"].iloc[0])
    assert len(profile["async_rates"]) == 7


# ---------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------

def _run(argv) -> int:
    parser = argparse.ArgumentParser(prog="bayesspec simulate")
    sim_cli.add_arguments(parser)
    return sim_cli.run(parser.parse_args(argv))


def test_cli_sweep_writes_tidy_rows_and_a_guidellm_report(tmp_path, capsys):
    out, report = tmp_path / "sd.csv", tmp_path / "sd.json"
    assert _run(["--verifier", "Qwen3-8B", "--gpu", "H100", "--prefill", "256", "--decode",
                 "128", "--k", "2", "--alpha", "0.7", "--sweep", "5", "--requests", "200",
                 "--seed", "4", "-o", str(out), "--guidellm-json", str(report), "--json",
                 "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = pd.read_csv(out)
    assert doc["rows"] == len(rows) == 5
    assert list(rows.columns[:8]) == ["verifier", "drafter", "k", "alpha", "prefill_tokens",
                                      "decode_tokens", "rps", "latency_mean_s"]
    assert (rows["k"] == 2).all() and (rows["alpha"] == 0.7).all()
    assert json.loads(report.read_text())["metadata"]["version"] == 2
    assert not list(tmp_path.glob(".*.tmp"))


def test_cli_rates_and_grid_file(tmp_path):
    out = tmp_path / "r.csv"
    assert _run(["--verifier", "Qwen3-1.7B", "--rps", "2:6:2", "--requests", "150",
                 "--arrivals", "constant", "-o", str(out), "--quiet"]) == 0
    rows = pd.read_csv(out)
    assert list(rows["rps_target"]) == [2.0, 4.0, 6.0]
    assert rows["alpha"].isna().all() and (rows["k"] == 0).all()

    grid = tmp_path / "grid.toml"
    grid.write_text('requests = 120\nsweep = 4\n\n[[configs]]\nverifier = "Qwen3-1.7B"\n'
                    'lengths = [[128, 64]]\nk = [0, 2]\nalpha = [0.6, 0.9]\n')
    folder = tmp_path / "reports"
    assert _run(["--grid", str(grid), "-o", str(tmp_path / "g.csv"), "--guidellm-json",
                 str(folder), "--quiet"]) == 0
    rows = pd.read_csv(tmp_path / "g.csv")
    assert len(rows) == 3 * 4
    assert sorted(rows["alpha"].dropna().unique()) == [0.6, 0.9]
    assert len(list(folder.glob("*.json"))) == 3


def test_a_grid_with_concurrency_runs_closed_loop_sweeps(tmp_path):
    grid = tmp_path / "closed.toml"
    grid.write_text('requests = 60\nconcurrency = [1, 4, 8]\nmax_num_seqs = 4\n\n'
                    '[[configs]]\nverifier = "Qwen3-1.7B"\nlengths = [[128, 64]]\n'
                    'k = [0, 2]\nalpha = [0.8]\n')
    folder = tmp_path / "reports"
    assert _run(["--grid", str(grid), "-o", str(tmp_path / "g.csv"), "--guidellm-json",
                 str(folder), "--quiet"]) == 0
    rows = pd.read_csv(tmp_path / "g.csv")
    assert list(rows["max_concurrency"]) == [1, 4, 8] * 2
    assert (rows["max_num_seqs"] == 4).all()
    # past the batch cap of 4 the eighth client waits for a slot: the simulator says so
    assert list(rows["saturated"]) == [False, False, True] * 2
    np.testing.assert_allclose(rows["mean_concurrency"], rows["max_concurrency"])
    for bad, column in (("concurrency = [0, 4]", "concurrency"),
                        ("max_num_seqs = 2.5", "max_num_seqs")):
        grid.write_text(f'{bad}\n\n[[configs]]\nverifier = "Qwen3-1.7B"\n')
        with pytest.raises(BadInput, match=column):
            expand_grid(load_grid(str(grid)))


@pytest.mark.parametrize("argv", [
    ["--verifier", "Qwen3-9B"],                                   # unknown model
    ["--verifier", "Qwen3-8B", "--k", "3"],                       # no alpha
    ["--verifier", "Qwen3-8B", "--gpu", "TPU"],                   # unknown GPU
    ["--verifier", "EAGLE3-Qwen3-8B"],                            # a drafter as verifier
    ["--verifier", "Qwen3-8B", "--k", "2", "--alpha", "0.8", "--drafter", "EAGLE3-Qwen3-14B"],
    ["--verifier", "Qwen3-235B-A22B"],                            # does not fit one GPU
    ["--verifier", "Qwen3-8B", "--rps", "fast"],
    ["--verifier", "Qwen3-8B", "--requests", "5"],
    ["--grid", "paper-dense", "--verifier", "Qwen3-8B"],
    ["--grid", "no-such-grid"],
])
def test_cli_bad_options_raise_bad_input(tmp_path, argv):
    out = tmp_path / "x.csv"
    with pytest.raises(BadInput):
        _run(argv + ["-o", str(out), "--quiet"])
    assert not out.exists()


def test_cli_output_is_atomic(tmp_path, monkeypatch):
    out = tmp_path / "keep.csv"
    out.write_text("old\n")

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(pd.DataFrame, "to_csv", boom)
    with pytest.raises(RuntimeError):
        _run(["--verifier", "Qwen3-1.7B", "--rps", "2", "--requests", "50", "-o", str(out),
              "--quiet"])
    assert out.read_text() == "old\n"
    assert not list(tmp_path.glob(".*.tmp"))


def test_sweeps_carry_latency_and_ttft_percentiles():
    """Per-request percentiles of end-to-end latency and TTFT, ordered."""
    from bayesspec.simulate import setup, sweep

    rows = sweep(setup("Qwen3-8B", prefill=256, decode=128), n_points=4, n_requests=300,
                 seed=2).rows
    for prefix in ("latency", "ttft"):
        p50, p90, p95, p99 = (rows[f"{prefix}_p{q}_s"].to_numpy(float) for q in (50, 90, 95, 99))
        assert np.all(p50 <= p90) and np.all(p90 <= p95) and np.all(p95 <= p99)
    assert np.all(rows["ttft_p99_s"] < rows["latency_p99_s"])
