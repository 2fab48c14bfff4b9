"""`bayesspec ingest`: GuideLLM v1/v2 reports, vllm bench results and /metrics scrapes
to tidy rows, and the design flags that label them."""

from __future__ import annotations

import atexit
import copy
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, generate_latest

from bayesspec.cli import main
from bayesspec.data import prepare
from bayesspec.errors import BadInput
from bayesspec.ingest import (ingest_files, parse_report, parse_scrape, parse_sidecar,
                              scrape_delta)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ingest"
ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------
# Writers: one simulated sweep as GuideLLM v2 (the simulator's own), GuideLLM v1, vllm bench
# ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sim():
    from bayesspec.simulate import guidellm_report, setup, sweep

    result = sweep(setup("Qwen3-8B", "H100", k=3, alpha=0.8, prefill=128, decode=64), 5,
                   n_requests=600, seed=3)
    return result, guidellm_report(result)


def as_v1(report: dict) -> dict:
    """The same benchmarks under GuideLLM 0.5's top level; the design goes to a sidecar."""
    v1 = copy.deepcopy(report)
    spec = v1.pop("config")["spec"]
    v1["metadata"] = {"version": 1, "guidellm_version": "0.5.4", "python_version": "3.12.3",
                      "platform": "Linux"}
    v1["args"] = {"target": spec["backend"]["target"], "model": spec["backend"]["model"],
                  "profile": "sweep", "rate": spec["profile"]["sweep_size"],
                  "data": spec["data"][0].replace("kind=synthetic_text,", "")}
    v1.pop("conclusions")
    for bench in v1["benchmarks"]:
        bench.pop("x_bayesspec")      # its counters come from /metrics scrapes instead
    return v1


def design_of(report: dict) -> dict:
    x = report["metadata"]["x_bayesspec"]
    return {key: x[key] for key in ("verifier", "drafter", "k", "alpha", "gpu", "engine",
                                    "engine_version", "method")}


def as_vllm(report: dict) -> list[dict]:
    """One `vllm bench serve --save-result` object per benchmark, with --metadata pairs."""
    runs = []
    for i, bench in enumerate(report["benchmarks"]):
        m = bench["metrics"]
        ok = m["request_totals"]["successful"]
        strategy = bench["config"]["strategy"]
        rate, concurrency = {"synchronous": ("inf", 1), "throughput": ("inf", None)}.get(
            strategy["type_"], (strategy.get("rate"), None))
        latency = m["request_latency"]["successful"]
        x = bench["x_bayesspec"]
        run = {
            "date": f"20260101-{i:06d}", "backend": "vllm",
            "model_id": bench["config"]["backend"]["model"], "num_prompts": ok,
            "request_rate": rate, "burstiness": 1.0, "max_concurrency": concurrency,
            "duration": bench["duration"], "completed": ok, "failed": 0,
            "total_input_tokens": round(m["prompt_token_count"]["successful"]["mean"] * ok),
            "total_output_tokens": round(m["output_token_count"]["successful"]["mean"] * ok),
            "request_throughput": ok / bench["duration"],
            "mean_ttft_ms": m["time_to_first_token_ms"]["successful"]["mean"],
            "mean_tpot_ms": m["time_per_output_token_ms"]["successful"]["mean"],
            "mean_itl_ms": m["inter_token_latency_ms"]["successful"]["mean"],
            "mean_e2el_ms": latency["mean"] * 1e3, "median_e2el_ms": latency["median"] * 1e3,
            "std_e2el_ms": latency["std_dev"] * 1e3,
            "p95_e2el_ms": latency["percentiles"]["p95"] * 1e3,
            "p99_e2el_ms": latency["percentiles"]["p99"] * 1e3,
            "spec_decode_num_drafts": x["num_drafts"],
            "spec_decode_draft_tokens": x["draft_tokens"],
            "spec_decode_accepted_tokens": x["accepted_tokens"],
        }
        run.update({key: str(value) for key, value in design_of(report).items()})
        runs.append(run)
    return runs


def exposition(drafts: int, drafted: int, accepted: int, per_pos: list[int], *,
               engines: int = 2, model: str = "Qwen3-8B") -> str:
    """vLLM-like /metrics text written by prometheus_client, split over ``engines``."""
    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    counters = {
        "drafts": Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.",
                          labels, registry=registry),
        "drafted": Counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.",
                           labels, registry=registry),
        "accepted": Counter("vllm:spec_decode_num_accepted_tokens",
                            "Number of accepted tokens.", labels, registry=registry),
    }
    per_position = Counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                           "Accepted tokens per draft position.", labels + ["position"],
                           registry=registry)
    Counter("vllm:prompt_tokens", "Prefill tokens.", labels, registry=registry) \
        .labels(model, "0").inc(12345)

    def split(total):
        share = [total // engines] * engines
        share[0] += total - sum(share)
        return share

    for key, total in (("drafts", drafts), ("drafted", drafted), ("accepted", accepted)):
        for engine, part in enumerate(split(total)):
            counters[key].labels(model, str(engine)).inc(part)
    for position, total in enumerate(per_pos):
        for engine, part in enumerate(split(total)):
            per_position.labels(model, str(engine), str(position)).inc(part)
    return generate_latest(registry).decode()


def write_scrapes(folder: Path, counts: list[dict], *, k: int, start: int = 1000) -> list:
    """Cumulative scrapes around each point: before_i, after_i (counters never reset)."""
    pairs = []
    total = {"drafts": start, "drafted": start * k, "accepted": start * k // 2}
    pos = [start // (p + 2) for p in range(k)]

    def dump(name):
        path = folder / name
        path.write_text(exposition(total["drafts"], total["drafted"], total["accepted"], pos))
        return path

    for i, c in enumerate(counts):
        before = dump(f"p{i}.before.prom")
        total["drafts"] += c["num_drafts"]
        total["drafted"] += c["draft_tokens"]
        total["accepted"] += c["accepted_tokens"]
        for p in range(k):
            pos[p] += int(round(c["num_drafts"] * 0.8 ** (p + 1)))
        after = dump(f"p{i}.after.prom")
        pairs.append((before, after))
    return pairs


@pytest.fixture(scope="module")
def three_formats(sim, tmp_path_factory):
    """The simulated sweep as GuideLLM v2 JSON, GuideLLM v1 YAML (+ sidecar and scrapes)
    and a vllm bench JSONL file."""
    result, report = sim
    folder = tmp_path_factory.mktemp("formats")
    v2 = folder / "sweep_v2.json"
    v2.write_text(json.dumps(report))
    v1 = folder / "sweep_v1.yaml"
    v1.write_text(yaml.safe_dump(as_v1(report)))
    counts = [b["x_bayesspec"] for b in report["benchmarks"]]
    pairs = write_scrapes(folder, counts, k=3)
    lines = [f'{key} = {json.dumps(value)}' for key, value in design_of(report).items()]
    for before, after in pairs:
        lines += ["[[metrics]]", f'before = "{before.name}"', f'after = "{after.name}"']
    (folder / "sweep_v1.yaml.meta.toml").write_text("\n".join(lines) + "\n")
    vllm = folder / "sweep_vllm.jsonl"
    vllm.write_text("".join(json.dumps(run) + "\n" for run in as_vllm(report)))
    return {"v2": v2, "v1": v1, "vllm": vllm, "result": result, "report": report}


# ---------------------------------------------------------------------------------------
# The same sweep in three formats ingests to identical tidy rows
# ---------------------------------------------------------------------------------------

KEY_COLUMNS = ["verifier", "drafter", "k", "alpha", "prefill_tokens", "decode_tokens", "rps",
               "latency_mean_s", "rps_target", "n_requests", "latency_std_s", "latency_p50_s",
               "latency_p95_s", "latency_p99_s", "ttft_mean_s", "itl_mean_s", "saturated",
               "strategy", "gpu", "engine", "engine_version", "method", "num_drafts",
               "draft_tokens", "accepted_tokens", "acceptance_rate", "acceptance_length",
               "latency_reconstructed"]


def test_three_formats_ingest_to_identical_rows(three_formats):
    frames = {name: ingest_files([three_formats[name]]).rows for name in ("v2", "v1", "vllm")}
    # whole_run says who ran the test, which a format conversion does not carry: the
    # simulator's GuideLLM report (its extension) measures a window in the steady middle,
    # a GuideLLM v1 or vllm bench file is a whole run from an idle server
    assert not frames["v2"]["whole_run"].any()
    assert frames["v1"]["whole_run"].all() and frames["vllm"]["whole_run"].all()
    # GuideLLM's percentiles read the first value reaching p; the simulator's interpolate
    assert set(frames["v2"]["percentile_rule"]) == {"linear"}
    assert set(frames["v1"]["percentile_rule"]) == {"inverted_cdf"}
    # the in-flight limit is what each client states: GuideLLM's throughput run holds at
    # most its max_concurrency, `vllm bench serve` at an infinite rate none
    assert list(frames["v2"]["max_concurrency"].fillna(0)) == [1, 0, 0, 0, 512]
    assert list(frames["vllm"]["max_concurrency"].fillna(0)) == [1, 0, 0, 0, 0]
    common = (set.intersection(*(set(f.columns) for f in frames.values()))
              - {"source", "whole_run", "max_concurrency", "percentile_rule"})
    assert set(KEY_COLUMNS) <= common
    columns = [c for c in frames["v2"].columns if c in common]
    reference = frames["v2"][columns]
    assert len(reference) == 5
    for name in ("v1", "vllm"):
        pd.testing.assert_frame_equal(frames[name][columns], reference, check_dtype=False,
                                      rtol=1e-6, atol=0.0, obj=name)
    # The scrapes of the v1 file brought the counters, per-position rates and k.
    assert frames["v1"]["acceptance_rate_pos1"].between(0.79, 0.81).all()
    assert (frames["v1"]["k"] == 3).all()


def test_simulated_guidellm_report_ingests_and_is_fit_ready(three_formats):
    result = three_formats["result"]
    rows = ingest_files([three_formats["v2"]]).rows
    data = prepare(rows)
    sim_rows = result.rows
    assert len(data) == len(sim_rows)
    for column in ("verifier", "drafter", "k", "prefill_tokens", "decode_tokens", "strategy",
                   "n_requests", "num_drafts", "accepted_tokens"):
        assert list(data[column]) == list(sim_rows[column]), column
    np.testing.assert_allclose(data["latency_mean_s"], sim_rows["latency_mean_s"], rtol=1e-9)
    np.testing.assert_allclose(data["alpha"], sim_rows["alpha"])
    open_loop = ~sim_rows["saturated"].to_numpy()
    np.testing.assert_allclose(data["rps"][open_loop], sim_rows["rps"][open_loop], rtol=1e-9)
    # the throughput run is excluded from the likelihood; what only the simulator knows
    # (preemptions, short windows) is not in a GuideLLM file
    assert data["excluded"].tolist()[-1] and data["exclusion_reason"].iloc[-1]
    assert not data["excluded"].iloc[0]


def test_cli_writes_fit_ready_csv_and_json_summary(three_formats, tmp_path):
    out = tmp_path / "data.csv"
    proc = subprocess.run([sys.executable, "-m", "bayesspec", "ingest",
                           str(three_formats["v2"]), str(three_formats["vllm"]),
                           "--engine-version", "0.1.0", "-o", str(out), "--json"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    # the vllm file is the same sweep under the same design: a duplicate of every point
    assert proc.returncode == 2 and not out.exists()
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "duplicated load point" in proc.stderr and "sweep_vllm.jsonl" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "bayesspec", "ingest",
                           str(three_formats["v2"]), "-o", str(out), "--json"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["rows"] == 5 and summary["saturated_rows"] == 1
    assert summary["files"][0]["kind"] == "guidellm-v2"
    from bayesspec.data import read_tidy

    data = read_tidy(out)
    written = ingest_files([three_formats["v2"]]).rows
    np.testing.assert_array_equal(data["rps"], written["rps"])        # full precision
    np.testing.assert_array_equal(data["latency_mean_s"], written["latency_mean_s"])
    assert not list(tmp_path.glob(".*tmp"))


# ---------------------------------------------------------------------------------------
# The fixture files of each documented shape
# ---------------------------------------------------------------------------------------

def test_guidellm_v1_fixture():
    rows = ingest_files([FIXTURES / "guidellm_v1.json"]).rows
    assert rows["strategy"].tolist() == ["synchronous", "constant", "throughput"]
    assert rows["saturated"].tolist() == [False, False, True]
    np.testing.assert_allclose(rows["rps"], [114 / 60, 708 / 60, 1830 / 60])  # not rps.mean
    assert rows["rps_target"].iloc[1] == 12.0 and math.isnan(rows["rps_target"].iloc[0])
    assert rows["ttft_mean_s"].iloc[0] == pytest.approx(0.0215)                # ms -> s
    assert rows["latency_p95_s"].iloc[0] == pytest.approx(0.5241 + 1.6 * 0.041928)
    # design from args: served model name (as the catalog names it) and the data spec
    assert set(rows["verifier"]) == {"Qwen3-8B"}
    assert set(rows["prefill_tokens"]) == {256} and set(rows["decode_tokens"]) == {128}


def test_guidellm_v2_yaml_fixture_with_flags():
    rows = ingest_files([FIXTURES / "guidellm_v2.yaml"],
                        flags={"verifier": "Qwen3-8B", "gpu": "H100"}).rows
    # the flag and the served name "qwen3-8b" agree; the flag's spelling is kept
    assert set(rows["verifier"]) == {"Qwen3-8B"}
    # data spec is a file: prefill/decode from the measured means, pooled over the points
    assert set(rows["prefill_tokens"]) == {512} and set(rows["decode_tokens"]) == {128}
    assert rows["strategy"].tolist() == ["synchronous", "poisson", "throughput"]
    assert rows["rps_target"].iloc[1] == 6.5
    prepare(rows)


def test_vllm_without_e2el_reconstructs_latency():
    rows = ingest_files([FIXTURES / "vllm_bench_no_e2el.json"]).rows
    row = rows.iloc[0]
    assert bool(row["latency_reconstructed"])
    assert row["latency_mean_s"] == pytest.approx((48.5 + (256 - 1) * 7.25) / 1e3)
    assert row["rps"] == pytest.approx(498 / 64.2)
    assert row["strategy"] == "poisson" and row["rps_target"] == 8.0
    assert row["prefill_tokens"] == 1024 and row["decode_tokens"] == 256
    assert "latency_p99_s" not in rows.columns      # no e2el percentiles to report


def test_vllm_jsonl_spec_decode_and_metadata():
    rows = ingest_files([FIXTURES / "vllm_bench_append.jsonl"]).rows
    assert len(rows) == 4
    assert rows["strategy"].tolist() == ["synchronous", "poisson", "poisson", "throughput"]
    assert rows["saturated"].tolist() == [False, False, False, True]
    assert set(rows["k"]) == {3} and set(rows["alpha"]) == {0.8}
    assert set(rows["drafter"]) == {"EAGLE3-Qwen3-8B"} and set(rows["gpu"]) == {"H100"}
    assert set(rows["engine_version"]) == {"0.11.0"}
    assert rows["acceptance_rate"].iloc[0] == pytest.approx(
        rows["accepted_tokens"].iloc[0] / rows["draft_tokens"].iloc[0])
    assert rows["acceptance_rate_pos2"].iloc[0] == pytest.approx(0.64)
    assert rows["source"].iloc[2].endswith("#line 3")
    assert not rows["latency_reconstructed"].any()


def test_vllm_odd_keys_are_tolerated(tmp_path):
    run = json.loads((FIXTURES / "vllm_bench_no_e2el.json").read_text())
    run["request_throughput:"] = run.pop("request_throughput")
    run[" completed "] = run.pop("completed")
    run["weird key: (%)"] = [1, {"x": None}]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(run))
    assert ingest_files([path]).rows["rps"].iloc[0] == pytest.approx(498 / 64.2)


# ---------------------------------------------------------------------------------------
# Design metadata: file values, flags, sidecars
# ---------------------------------------------------------------------------------------

def test_flag_conflicting_with_file_is_an_error():
    with pytest.raises(BadInput) as info:
        ingest_files([FIXTURES / "vllm_bench_append.jsonl"], flags={"k": 4})
    message = str(info.value)
    assert "vllm_bench_append.jsonl" in message and "--k" in message and "row 1" in message
    # agreeing flags are fine, and fill what the file lacks
    rows = ingest_files([FIXTURES / "vllm_bench_append.jsonl"],
                        flags={"k": 3, "alpha": 0.8, "method": "eagle3"}).rows
    assert set(rows["method"]) == {"eagle3"}


def test_sidecar_next_to_the_file_and_explicit(tmp_path):
    data = tmp_path / "run.json"
    data.write_bytes((FIXTURES / "vllm_bench_no_e2el.json").read_bytes())
    (tmp_path / "run.meta.toml").write_text('verifier = "Llama-3.1-8B"\ngpu = "H100"\n'
                                            'engine_version = "0.10.2"\n')
    rows = ingest_files([data]).rows
    assert rows["verifier"].iloc[0] == "Llama-3.1-8B"
    assert rows["engine_version"].iloc[0] == "0.10.2"
    side = tmp_path / "other.json"
    side.write_text('{"gpu": "A100"}')
    with pytest.raises(BadInput, match="gpu"):
        ingest_files([data], sidecar=str(side))            # disagrees with run.meta.toml
    with pytest.raises(BadInput, match="--gpu"):
        ingest_files([data], flags={"gpu": "L40S"})
    (tmp_path / "run.meta.toml").write_text('drafer = "x"\n')
    with pytest.raises(BadInput, match="unknown sidecar key"):
        ingest_files([data])


def test_sidecar_parsing():
    side = parse_sidecar('k = 3\nprefill = 512\n[[metrics]]\npoint = 2\nbefore = "a.prom"\n'
                         'after = "b.prom"\n', "dir/x.meta.toml")
    assert side.design["k"].value == 3 and side.design["prefill_tokens"].value == 512
    assert side.metrics[0].point == 2 and side.metrics[0].before == Path("dir/a.prom")
    for text, column in (('k = -1', "k"), ('alpha = 1.5', "alpha"), ('k = "three"', "k"),
                         ('[[metrics]]\nbefore = "a"', "metrics[0].after")):
        with pytest.raises(BadInput) as info:
            parse_sidecar(text, "s.toml")
        assert column in str(info.value)
    with pytest.raises(BadInput, match="not valid TOML"):
        parse_sidecar("k = = 3", "s.toml")


# ---------------------------------------------------------------------------------------
# Prometheus scrapes
# ---------------------------------------------------------------------------------------

def test_prometheus_scrape_parsing_sums_engines_and_ignores_created():
    text = exposition(drafts=101, drafted=303, accepted=201, per_pos=[90, 70, 41], engines=3)
    assert "_created" in text and 'engine="2"' in text
    scrape = parse_scrape(text, "s.prom")
    assert scrape.totals == {"num_drafts": 101, "draft_tokens": 303, "accepted_tokens": 201}
    assert scrape.per_position == {0: 90, 1: 70, 2: 41}
    assert scrape.models == {"Qwen3-8B"}


def test_prometheus_differences_and_rates():
    before = parse_scrape(exposition(1000, 3000, 1500, [700, 500, 300]), "before.prom")
    after = parse_scrape(exposition(1400, 4200, 2380, [1020, 756, 504]), "after.prom")
    delta = scrape_delta(before, after)
    assert delta["num_drafts"] == 400 and delta["draft_tokens"] == 1200
    assert delta["accepted_tokens"] == 880
    assert delta["acceptance_rate"] == pytest.approx(880 / 1200)
    assert delta["acceptance_length"] == pytest.approx(1 + 880 / 400)
    assert [delta[f"acceptance_rate_pos{i}"] for i in (1, 2, 3)] == pytest.approx(
        [320 / 400, 256 / 400, 204 / 400])
    assert delta["k"] == 3
    dense = parse_scrape("# TYPE vllm:num_requests_running gauge\n"
                         'vllm:num_requests_running{model_name="m"} 3\n', "d.prom")
    assert scrape_delta(dense, dense) == {}


def test_prometheus_restart_is_detected():
    before = parse_scrape(exposition(1000, 3000, 1500, [700, 500, 300]), "before.prom")
    after = parse_scrape(exposition(40, 120, 70, [30, 25, 15]), "after.prom")
    with pytest.raises(BadInput) as info:
        scrape_delta(before, after)
    message = str(info.value)
    assert "after.prom" in message and "went backwards" in message
    assert "vllm:spec_decode_num_drafts_total" in message


def test_scrapes_paired_with_flags(tmp_path):
    pairs = write_scrapes(tmp_path, [{"num_drafts": 500, "draft_tokens": 1500,
                                      "accepted_tokens": 1000}], k=3)
    before, after = pairs[0]
    rows = ingest_files([FIXTURES / "vllm_bench_no_e2el.json"],
                        metrics=[(str(before), str(after))]).rows
    row = rows.iloc[0]
    assert (row["num_drafts"], row["draft_tokens"], row["accepted_tokens"]) == (500, 1500, 1000)
    assert row["k"] == 3 and row["acceptance_length"] == pytest.approx(3.0)
    assert row["accepted_tokens_pos1"] == 400
    with pytest.raises(BadInput, match="2 --metrics pairs for 1 load points"):
        ingest_files([FIXTURES / "vllm_bench_no_e2el.json"],
                     metrics=[(str(before), str(after))] * 2)
    with pytest.raises(BadInput, match="went backwards"):
        ingest_files([FIXTURES / "vllm_bench_no_e2el.json"], metrics=[(str(after), str(before))])


def test_sidecar_metrics_named_points(tmp_path):
    run = json.loads((FIXTURES / "vllm_bench_no_e2el.json").read_text())
    second = dict(run, date="20260115-120000", request_rate=4.0, duration=130.0)
    second["request_throughput"] = second["completed"] / second["duration"]
    data = tmp_path / "runs.jsonl"
    data.write_text(json.dumps(run) + "\n" + json.dumps(second) + "\n")
    (before, after), = write_scrapes(tmp_path, [{"num_drafts": 300, "draft_tokens": 600,
                                                 "accepted_tokens": 420}], k=2)
    sidecar = tmp_path / "runs.meta.toml"
    sidecar.write_text(f'gpu = "H100"\n[[metrics]]\npoint = 1\nbefore = "{before.name}"\n'
                       f'after = "{after.name}"\n')
    # a glob that catches the sidecar too: it is recognised and read as the sidecar
    rows = ingest_files([data, sidecar]).rows
    assert pd.isna(rows["num_drafts"].iloc[0]) and rows["num_drafts"].iloc[1] == 300
    assert rows["k"].tolist() == [0, 2]
    assert rows["acceptance_rate"].iloc[1] == pytest.approx(0.7)
    sidecar.write_text(f'[[metrics]]\npoint = 5\nbefore = "{before.name}"\n'
                       f'after = "{after.name}"\n')
    with pytest.raises(BadInput, match="point 5 does not exist"):
        ingest_files([data])
    sidecar.write_text(f'[[metrics]]\nbefore = "{before.name}"\nafter = "missing.prom"\n'
                       f'[[metrics]]\nbefore = "{before.name}"\nafter = "{after.name}"\n')
    with pytest.raises(BadInput, match="missing.prom.*no such file"):
        ingest_files([data])
    stray = tmp_path / "other.meta.json"
    stray.write_text("{}")
    with pytest.raises(BadInput, match="a sidecar, not a load-test file"):
        ingest_files([data, stray])


# ---------------------------------------------------------------------------------------
# Bad files: BadInput naming the file and the field
# ---------------------------------------------------------------------------------------

def _v2_text() -> str:
    return (FIXTURES / "guidellm_v2.yaml").read_text()


def _v2() -> dict:
    return yaml.safe_load(_v2_text())


def _set(doc, path, value):
    node = doc
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


_DELETE = object()
LATENCY = ("benchmarks", 1, "metrics", "request_latency", "successful", "mean")
LAT_PATH = "benchmarks[1].metrics.request_latency.successful.mean"


def _json(doc) -> bytes:
    return json.dumps(doc).encode()


def _jsonl_lines() -> list[str]:
    return (FIXTURES / "vllm_bench_append.jsonl").read_text().splitlines()


BAD_FILES = {
    "truncated JSON": (lambda: json.dumps(_v2(), indent=1).encode()[:5000], "not valid JSON"),
    "truncated JSONL": (lambda: ("\n".join(_jsonl_lines())[:-40]).encode(), "row 4"),
    "unknown schema version": (lambda: _json(_set(_v2(), ("metadata", "version"), 3)),
                               "metadata.version"),
    "version of the wrong type": (lambda: _json(_set(_v2(), ("metadata", "version"), [2])),
                                  "metadata.version"),
    "GuideLLM 0.4": (lambda: (FIXTURES / "guidellm_v04.json").read_bytes(), "0.3/0.4"),
    "no benchmarks": (lambda: _json(_set(_v2(), ("benchmarks",), [])), "no benchmarks"),
    "benchmarks missing": (lambda: _json(_set(_v2(), ("benchmarks",), _DELETE)),
                           "no benchmarks"),
    "only errored requests": (lambda: _json(_set(_set(
        _v2(), ("benchmarks", 1, "metrics", "request_totals", "successful"), 0),
        ("benchmarks", 1, "metrics", "request_totals", "errored"), 50)),
        "benchmarks[1].metrics.request_totals.successful"),
    "latency of the wrong type": (lambda: _json(_set(_v2(), LATENCY, "fast")), LAT_PATH),
    "metrics of the wrong type": (lambda: _json(_set(_v2(), ("benchmarks", 0, "metrics"), [])),
                                  "benchmarks[0].metrics"),
    "duration as a string": (lambda: _json(_set(_v2(), ("benchmarks", 2, "duration"), "30")),
                             "benchmarks[2].duration"),
    "negative latency": (lambda: _json(_set(_v2(), LATENCY, -0.5)), LAT_PATH),
    "negative duration": (lambda: _json(_set(_v2(), ("benchmarks", 0, "duration"), -1)),
                          "benchmarks[0].duration"),
    "NaN latency (JSON)": (lambda: _json(_set(_v2(), LATENCY, float("nan"))), LAT_PATH),
    "NaN latency (YAML)": (lambda: _v2_text().replace("mean: 0.9035", "mean: .nan", 1).encode(),
                           LAT_PATH),
    "infinite std": (lambda: _json(_set(_v2(), ("benchmarks", 0, "metrics", "request_latency",
                                              "successful", "std_dev"), float("inf"))),
                     "std_dev"),
    "negative vllm count": (lambda: "\n".join([_jsonl_lines()[0].replace(
        '"completed": 200', '"completed": -3')]).encode(), "completed"),
    "duplicated benchmark": (lambda: _json(_set(_v2(), ("benchmarks",),
                                                _v2()["benchmarks"] + [_v2()["benchmarks"][1]])),
                             "duplicated load point"),
    "duplicated JSONL line": (lambda: "\n".join(_jsonl_lines() + [_jsonl_lines()[1]]).encode(),
                              "duplicated load point"),
    "binary file": (lambda: b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)), "binary"),
    "not UTF-8": (lambda: "métrique".encode("latin-1") * 20, "not UTF-8"),
    "empty file": (lambda: b"  \n", "empty file"),
    "a JSON list of numbers": (lambda: b"[1, 2, 3]", "not a known file"),
    "a scrape given as a report": (lambda: exposition(1, 3, 2, [1, 1, 0]).encode(),
                                   "--metrics BEFORE AFTER"),
    "vllm without e2el nor tpot": (lambda: _json({k: v for k, v in json.loads(
        (FIXTURES / "vllm_bench_no_e2el.json").read_text()).items() if k != "mean_tpot_ms"}),
        "mean_tpot_ms"),
    "more accepted than drafted": (lambda: _jsonl_lines()[0].replace(
        '"spec_decode_accepted_tokens": 33313', '"spec_decode_accepted_tokens": 99999').encode(),
        "spec_decode_accepted_tokens"),
    "conflicting design in one file": (lambda: _jsonl_lines()[0].replace(
        '"k": "3"', '"k": "4"').encode(), "spec_decode_per_position_acceptance_rates"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_file_is_refused(case, tmp_path):
    make, expected = BAD_FILES[case]
    suffix = ".yaml" if "YAML" in case else ".json"
    path = tmp_path / f"bad{suffix}"
    path.write_bytes(make())
    out = tmp_path / "out.csv"
    with pytest.raises(BadInput) as info:
        ingest_files([path])
    message = str(info.value)
    assert str(path) in message, message
    assert expected in message, message
    assert "\n" not in message
    assert main(["ingest", str(path), "-o", str(out)]) == 2
    assert not out.exists()


def test_missing_file_directory_and_repeated_file(tmp_path):
    with pytest.raises(BadInput, match="no such file"):
        ingest_files([tmp_path / "nope.json"])
    with pytest.raises(BadInput, match="directory"):
        ingest_files([tmp_path])
    copy_path = tmp_path / "copy.json"
    copy_path.write_bytes((FIXTURES / "guidellm_v1.json").read_bytes())
    with pytest.raises(BadInput, match="given twice"):
        ingest_files([copy_path, str(copy_path)])
    with pytest.raises(BadInput, match="duplicated load point") as info:
        ingest_files([FIXTURES / "guidellm_v1.json", copy_path])
    assert "copy.json" in str(info.value)


def test_bad_options(tmp_path, capsys):
    out = tmp_path / "x.csv"
    src = str(FIXTURES / "guidellm_v1.json")
    for argv in (["--k", "three"], ["--alpha", "1.5"], ["--decode", "0"], ["--k", "-1"]):
        assert main(["ingest", src, "-o", str(out), *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and argv[0] in err[0]
    assert main(["ingest", src, "-o", str(tmp_path / "x.txt")]) == 2
    assert main(["ingest", src, "-o", str(tmp_path / "no" / "x.csv")]) == 2
    assert not out.exists()


def test_cli_subprocess_bad_files_exit_2_one_line(tmp_path):
    truncated = tmp_path / "cut.json"
    truncated.write_bytes((FIXTURES / "guidellm_v1.json").read_bytes()[:3000])
    pairs = write_scrapes(tmp_path, [{"num_drafts": 5, "draft_tokens": 15,
                                      "accepted_tokens": 9}], k=3)
    out = tmp_path / "out.csv"
    for extra in (["cut.json"],
                  [str(FIXTURES / "vllm_bench_no_e2el.json"), "--metrics",
                   str(pairs[0][1]), str(pairs[0][0])]):
        proc = subprocess.run([sys.executable, "-m", "bayesspec", "ingest", *extra, "-o",
                               str(out)], capture_output=True, text=True, timeout=120,
                              cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("bayesspec: error:"), proc.stderr
        assert "Traceback" not in proc.stderr and proc.stdout == ""
        assert not out.exists()
    assert "cut.json" in lines[0] or "went backwards" in lines[0]


# ---------------------------------------------------------------------------------------
# Fuzz: generated and mutated documents; only BadInput may escape
# ---------------------------------------------------------------------------------------

def _small_v2() -> dict:
    doc = _v2()
    doc["benchmarks"] = doc["benchmarks"][:2]
    for bench in doc["benchmarks"]:
        for name, metric in bench["metrics"].items():
            if isinstance(metric, dict) and isinstance(metric.get("successful"), dict):
                dist = metric["successful"]
                dist["percentiles"] = {"p50": dist["median"], "p95": dist["percentiles"]["p95"]}
        bench.pop("requests")
        bench["config"].pop("profile")
    doc["metadata"]["x_bayesspec"] = {"verifier": "Qwen3-8B", "k": 2, "alpha": 0.7}
    doc["benchmarks"][0]["x_bayesspec"] = {"num_drafts": 10, "draft_tokens": 20,
                                           "accepted_tokens": 12}
    return doc


def _small_v1() -> dict:
    doc = _small_v2()
    doc.pop("config")
    doc["metadata"]["version"] = 1
    doc["args"] = {"model": "Qwen/Qwen3-8B", "data": "prompt_tokens=512,output_tokens=128"}
    return doc


BASES = {
    "v2": _small_v2(),
    "v1": _small_v1(),
    "vllm": json.loads(_jsonl_lines()[1]),
    "vllm-no-e2el": json.loads((FIXTURES / "vllm_bench_no_e2el.json").read_text()),
    "legacy": json.loads((FIXTURES / "guidellm_v04.json").read_text()),
}

scalars = (st.none() | st.booleans() | st.integers(-10**20, 10**20)
           | st.integers(-3, 5000) | st.floats(allow_nan=True, allow_infinity=True)
           | st.sampled_from([0, 1, 2, 3, -1, 0.5, "inf", "3", "", "synchronous", "throughput",
                              "poisson", 1e308, 10**400])
           | st.text(max_size=6))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                           max_leaves=6)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, prefix + (i,))


def _mutate(doc, data):
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = data.draw(st.sampled_from(paths), label="path")
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        op = data.draw(st.sampled_from(["replace", "replace", "delete", "duplicate"]))
        if op == "replace":
            parent[path[-1]] = data.draw(json_values, label="value")
        elif op == "delete":
            del parent[path[-1]]
        elif isinstance(parent, list):
            parent.append(copy.deepcopy(parent[path[-1]]))
        else:
            parent[str(path[-1]) + ":"] = copy.deepcopy(parent[path[-1]])
    return doc


def _encode(doc, data) -> tuple[bytes, str]:
    form = data.draw(st.sampled_from(["json", "json", "yaml", "jsonl"]), label="form")
    if form == "yaml":
        raw = yaml.safe_dump(doc).encode()
        name = "doc.yaml"
    elif form == "jsonl":
        second = dict(doc, date="20260102-000000") if isinstance(doc, dict) else doc
        raw = (json.dumps(doc) + "\n" + json.dumps(second) + "\n").encode()
        name = "doc.jsonl"
    else:
        raw = json.dumps(doc).encode()
        name = "doc.json"
    damage = data.draw(st.sampled_from(["none", "none", "none", "truncate", "byte"]))
    if damage == "truncate" and raw:
        raw = raw[:data.draw(st.integers(0, len(raw) - 1), label="cut")]
    elif damage == "byte" and raw:
        i = data.draw(st.integers(0, len(raw) - 1), label="at")
        raw = raw[:i] + bytes([data.draw(st.integers(0, 255), label="byte")]) + raw[i + 1:]
    return raw, name


FUZZ = settings(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
                database=None)


@settings(FUZZ, max_examples=650)
@given(st.data())
def test_fuzz_readers_raise_only_badinput(data):
    base = data.draw(st.sampled_from(sorted(BASES)), label="base")
    raw, name = _encode(_mutate(BASES[base], data), data)
    try:
        report = parse_report(raw, name)
    except BadInput as error:
        assert str(error) and "\n" not in str(error)
        return
    assert report.points


_FUZZ_DIR = tempfile.mkdtemp(prefix="bayesspec-ingest-fuzz-")
atexit.register(shutil.rmtree, _FUZZ_DIR, True)


@settings(FUZZ, max_examples=100)
@given(st.data())
def test_fuzz_whole_pipeline_raise_only_badinput(data):
    """Mutated files through ingest_files, prepare included (an ingested file is fit-ready)."""
    base = data.draw(st.sampled_from(["v1", "v2", "vllm", "vllm-no-e2el"]), label="base")
    raw, name = _encode(_mutate(BASES[base], data), data)
    path = Path(_FUZZ_DIR) / name
    path.write_bytes(raw)
    flags = data.draw(st.fixed_dictionaries({}, optional={
        "k": st.integers(0, 4), "verifier": st.sampled_from(["Qwen3-8B", "other"]),
        "alpha": st.sampled_from([0.7, 0.8]), "prefill_tokens": st.integers(1, 600)}))
    try:
        rows = ingest_files([path], flags=flags).rows
    except BadInput:
        return
    prepare(rows)


@settings(FUZZ, max_examples=150)
@given(st.data())
def test_fuzz_prometheus_raise_only_badinput(data):
    text = exposition(data.draw(st.integers(0, 10**6)), data.draw(st.integers(0, 10**6)),
                      data.draw(st.integers(0, 10**6)),
                      data.draw(st.lists(st.integers(0, 10**5), max_size=4)))
    lines = text.splitlines()
    for _ in range(data.draw(st.integers(0, 3))):
        i = data.draw(st.integers(0, len(lines) - 1))
        op = data.draw(st.sampled_from(["drop", "garble", "value", "label"]))
        if op == "drop":
            lines.pop(i)
        elif op == "garble":
            lines[i] = data.draw(st.text(max_size=30))
        elif op == "value" and not lines[i].startswith("#"):
            lines[i] = lines[i].rsplit(" ", 1)[0] + " " + data.draw(st.sampled_from(
                ["NaN", "+Inf", "-1", "1e400", "abc", "3.5", "0", "9e15"]))
        elif op == "label":
            lines[i] = lines[i].replace('position="', 'position="' + data.draw(
                st.sampled_from(["x", "-", "99", "1"])), 1)
        if not lines:
            break
    mutated = "\n".join(lines) + "\n"
    try:
        before = parse_scrape(text, "before.prom")
        after = parse_scrape(mutated, "after.prom")
        delta = scrape_delta(before, after)
        scrape_delta(after, before)
    except BadInput as error:
        assert "\n" not in str(error)
        return
    for value in delta.values():
        assert math.isfinite(value)


@settings(FUZZ, max_examples=100)
@given(st.dictionaries(st.sampled_from(["k", "alpha", "verifier", "prefill", "decode_tokens",
                                        "gpu", "metrics", "typo"]), json_values, max_size=4),
       st.text(max_size=40))
def test_fuzz_sidecar_raise_only_badinput(document, toml_text):
    for text, name in ((json.dumps(document), "x.meta.json"),
                       ("k = 3\n" + toml_text, "x.meta.toml")):
        try:
            parse_sidecar(text, name)
        except BadInput as error:
            assert "\n" not in str(error)


# --------------------------------------------------------------------------------------
# Real output: GuideLLM 0.8.1 against `bayesspec serve`, with its /metrics scrapes

REAL_081 = Path(__file__).parents[1] / "fixtures" / "ingest" / "guidellm081"


def test_real_guidellm_081_report_with_real_scrapes_ingests():
    pairs = [(str(REAL_081 / f"point{i}_before.prom"), str(REAL_081 / f"point{i}_after.prom"))
             for i in range(3)]
    rows = ingest_files([str(REAL_081 / "sd_report.json")],
                        flags={"drafter": "EAGLE3-Qwen3-0.6B"}, metrics=pairs).rows
    assert list(rows["strategy"]) == ["synchronous", "throughput", "constant"]
    assert list(rows["saturated"]) == [False, True, False]
    assert (rows["verifier"] == "Qwen3-0.6B").all()
    assert (rows["prefill_tokens"] == 128).all() and (rows["decode_tokens"] == 32).all()
    assert (rows["k"] == 3).all()                       # from the per-position series
    doc = json.loads((REAL_081 / "sd_report.json").read_text())
    first = doc["benchmarks"][0]
    assert rows["rps"].iloc[0] == pytest.approx(
        first["metrics"]["request_totals"]["successful"] / first["duration"])
    assert (rows["draft_tokens"] == 3 * rows["num_drafts"]).all()
    assert rows["acceptance_rate_pos1"].between(0.7, 0.9).all()   # forced alpha 0.8
    assert rows["num_drafts"].min() > 100
    assert set(rows["percentile_rule"]) == {"inverted_cdf"}


# ---------------------------------------------------------------------------------------
# Design flags never stamp a file that says otherwise
# ---------------------------------------------------------------------------------------

def test_speculative_flags_refused_when_files_disagree(tmp_path, capsys):
    """A dense GuideLLM report next to an SD vllm bench result: --k/--alpha/--drafter
    would stamp the dense rows; refused with the file named and nothing written."""
    out = tmp_path / "rows.csv"
    code = main(["ingest", str(FIXTURES / "guidellm_v1.json"),
                 str(FIXTURES / "vllm_bench_append.jsonl"), "--drafter", "EAGLE3-Qwen3-8B",
                 "--k", "3", "--alpha", "0.8", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert "guidellm_v1.json does not record speculative decoding" in err
    assert "option --drafter" in err and "column" not in err


def test_files_without_flags_keep_their_own_design(tmp_path):
    out = tmp_path / "rows.csv"
    assert main(["ingest", str(FIXTURES / "guidellm_v1.json"),
                 str(FIXTURES / "vllm_bench_append.jsonl"), "--quiet", "-o", str(out)]) == 0
    rows = pd.read_csv(out)
    dense = rows[rows["source"].str.startswith("guidellm_v1.json")]
    sd = rows[rows["source"].str.startswith("vllm_bench_append.jsonl")]
    assert len(dense) and (dense["k"] == 0).all() and dense["alpha"].isna().all()
    assert len(sd) and (sd["k"] == 3).all() and np.allclose(sd["alpha"], 0.8)


def test_per_file_sidecar_settles_the_design(tmp_path):
    """Per-file values in a sidecar next to the dense report: the flags then agree with
    what every file says, so they are accepted."""
    for name in ("guidellm_v1.json", "vllm_bench_append.jsonl"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    (tmp_path / "guidellm_v1.json.meta.toml").write_text(
        'drafter = "EAGLE3-Qwen3-8B"\nk = 3\nalpha = 0.8\n')
    out = tmp_path / "rows.csv"
    assert main(["ingest", str(tmp_path / "guidellm_v1.json"),
                 str(tmp_path / "vllm_bench_append.jsonl"), "--k", "3", "--quiet",
                 "-o", str(out)]) == 0
    assert (pd.read_csv(out)["k"] == 3).all()


def test_one_file_takes_the_flags(tmp_path):
    """With one file the flags are the user's statement about it (GuideLLM cannot know)."""
    out = tmp_path / "rows.csv"
    assert main(["ingest", str(FIXTURES / "guidellm_v1.json"), "--drafter", "EAGLE3-Qwen3-8B",
                 "--k", "3", "--alpha", "0.8", "--quiet", "-o", str(out)]) == 0
    assert (pd.read_csv(out)["k"] == 3).all()


def test_percentiles_of_latency_ttft_and_itl_are_kept():
    """Tail decisions need the percentiles the reports already carry."""
    report = json.loads((FIXTURES / "guidellm_v1.json").read_text())
    first = report["benchmarks"][0]["metrics"]
    rows = ingest_files([FIXTURES / "guidellm_v1.json"]).rows
    expected_ttft = first["time_to_first_token_ms"]["successful"]["percentiles"]["p99"] / 1e3
    assert expected_ttft in set(rows["ttft_p99_s"].round(12))
    expected_latency = first["request_latency"]["successful"]["percentiles"]["p90"]
    assert expected_latency in set(rows["latency_p90_s"].round(12))
    bench = ingest_files([FIXTURES / "vllm_bench_no_e2el.json"]).rows
    raw = json.loads((FIXTURES / "vllm_bench_no_e2el.json").read_text())
    assert bench["itl_p99_s"].iloc[0] == pytest.approx(raw["p99_itl_ms"] / 1e3)
    assert bench["ttft_p50_s"].iloc[0] == pytest.approx(raw["median_ttft_ms"] / 1e3)
