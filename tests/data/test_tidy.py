"""Tidy data: ``read_tidy`` on good files, and every kind of bad file, directly and
through the command line (CONTRACT.md, "Tidy data" and "Command line")."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bayesspec.data import catalog as cat_mod
from bayesspec.data.catalog import load_catalog
from bayesspec.data import SaturationRule, near_miss, prepare, read_tidy
from bayesspec.errors import BadInput

BAYESSPEC = Path(sys.executable).with_name("bayesspec")
INGEST_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ingest"


def fixture_bytes(name: str) -> bytes:
    return (INGEST_FIXTURES / name).read_bytes()


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(include_user=False)


GOOD_CSV = """\
verifier,drafter,k,alpha,prefill_tokens,decode_tokens,rps,latency_mean_s,rps_target,n_requests,latency_p95_s,strategy,gpu
Qwen3-8B,EAGLE3-Qwen3-8B,3,0.8,512,256,0.5,2.0,0.5,100,2.5,constant,H100
Qwen3-8B,EAGLE3-Qwen3-8B,3,0.8,512,256,1.5,2.4,1.5,100,3.1,constant,H100
Qwen3-8B,,0,,512,256,1.0,2.2,1.0,100,2.9,constant,H100
gpt-oss-20b,,0,,512,256,2.0,2.5,,100,3.3,throughput,H100
gpt-oss-20b,,0,,512,256,3.0,2.9,4.0,100,3.8,constant,H100
"""


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


# ------------------------------------------------------------------------ good files

def test_good_csv_reads(tmp_path, catalog):
    data = read_tidy(write(tmp_path, "good.csv", GOOD_CSV), catalog=catalog)
    assert len(data) == 5
    assert data["rps"].tolist() == [0.5, 1.5, 1.0, 2.0, 3.0]
    assert data["latency_mean_s"].dtype == float
    assert data["k"].tolist() == [3, 3, 0, 0, 0]
    assert data["prefill_tokens"].tolist() == [512] * 5
    assert data["verifier"].tolist()[0] == "Qwen3-8B"
    assert data["drafter"].tolist() == ["EAGLE3-Qwen3-8B"] * 2 + [""] * 3
    assert data.attrs["source_file"].endswith("good.csv")
    assert {"excluded", "exclusion_reason"} <= set(data.columns)


def test_csv_and_parquet_give_the_same_frame(tmp_path, catalog):
    csv_path = write(tmp_path, "good.csv", GOOD_CSV)
    parquet_path = tmp_path / "good.parquet"
    pd.read_csv(csv_path).to_parquet(parquet_path)
    from_csv = read_tidy(csv_path, catalog=catalog)
    from_parquet = read_tidy(parquet_path, catalog=catalog)
    pd.testing.assert_frame_equal(from_csv, from_parquet)


def test_parquet_with_a_filtered_index_reads_like_csv(tmp_path, catalog):
    frame = pd.read_csv(write(tmp_path, "good.csv", GOOD_CSV))
    frame.index = [10, 20, 30, 40, 50]
    frame.to_parquet(tmp_path / "indexed.parquet")
    got = read_tidy(tmp_path / "indexed.parquet", catalog=catalog)
    pd.testing.assert_frame_equal(got, read_tidy(tmp_path / "good.csv", catalog=catalog))


def test_defaults_when_design_columns_absent(tmp_path, catalog):
    data = read_tidy(write(tmp_path, "min.csv", "rps,latency_mean_s\n1,2\n2,2.5\n"),
                     catalog=catalog)
    assert data["verifier"].tolist() == ["model", "model"]
    assert data["drafter"].tolist() == ["", ""]
    assert data["k"].tolist() == [0, 0]
    assert data["k"].dtype == np.int64
    assert data["alpha"].isna().all() and data["alpha"].dtype == float
    assert data["prefill_tokens"].isna().all() and data["decode_tokens"].isna().all()
    assert not data["excluded"].any()
    assert data["exclusion_reason"].tolist() == ["", ""]


def test_blank_design_values_take_defaults(tmp_path, catalog):
    text = "verifier,drafter,k,alpha,rps,latency_mean_s\nQwen3-8B,,,,1,2\n"
    data = read_tidy(write(tmp_path, "blank.csv", text), catalog=catalog)
    assert data["drafter"].tolist() == [""]
    assert data["k"].tolist() == [0]
    assert math.isnan(data["alpha"].iloc[0])


def test_alpha_kept_on_speculative_rows_and_unknown_stays_unknown(tmp_path, catalog):
    text = "k,alpha,rps,latency_mean_s\n0,,1,2\n2,0.7,1,2\n3,,1,2\n"
    data = read_tidy(write(tmp_path, "alpha.csv", text), catalog=catalog)
    assert math.isnan(data["alpha"].iloc[0])
    assert data["alpha"].iloc[1] == 0.7
    assert math.isnan(data["alpha"].iloc[2])  # unknown acceptance stays unknown


def test_producers_write_no_drafter_or_alpha_on_dense_rows(catalog):
    """The bundled datasets and the generators the tests use pass the rule that refuses a
    drafter or alpha on a k = 0 row (their dense rows have drafter "" and no alpha)."""
    from bayesspec import datasets
    from bayesspec.simulate.synthetic import (add_acceptance_counters, generate_sweeps,
                                     hierarchical_truth, placeholder_truth,
                                     speculative_truth)

    tables = [datasets.load(name) for name in datasets.BUNDLED]
    tables += [generate_sweeps(placeholder_truth().iloc[:2], n_rates=5),
               add_acceptance_counters(generate_sweeps(speculative_truth(), n_rates=5),
                                       drop_alpha=False),
               generate_sweeps(hierarchical_truth(verifiers=("Qwen3-8B",), lengths=(512,)),
                               n_rates=5)]
    for table in tables:
        data = prepare(table, catalog=catalog)
        dense = data["k"] == 0
        assert dense.any()
        assert data.loc[dense, "drafter"].eq("").all()
        assert data.loc[dense, "alpha"].isna().all()


def test_catalog_covariates_attached(tmp_path, catalog):
    data = read_tidy(write(tmp_path, "good.csv", GOOD_CSV), catalog=catalog)
    qwen = data[data["verifier"] == "Qwen3-8B"]
    card = catalog.find_model("Qwen3-8B")
    assert qwen["verifier_params_b"].tolist() == [card.params_total_b] * 3
    assert 7.0 < card.params_total_b < 9.0
    assert qwen["experts_active"].isna().all() and qwen["experts_total"].isna().all()
    drafter = catalog.find_model("EAGLE3-Qwen3-8B")
    assert qwen["drafter_params_b"].iloc[0] == drafter.params_total_b
    assert math.isnan(qwen["drafter_params_b"].iloc[2])  # dense: no drafter
    oss = data[data["verifier"] == "gpt-oss-20b"]
    assert oss["experts_active"].tolist() == [4, 4]
    assert oss["experts_total"].tolist() == [32, 32]
    assert oss["verifier_params_b"].iloc[0] == pytest.approx(20.91)


def test_catalog_covariates_from_the_default_catalog(tmp_path):
    data = read_tidy(write(tmp_path, "good.csv", GOOD_CSV))
    assert data.loc[data["verifier"] == "gpt-oss-20b", "experts_total"].tolist() == [32, 32]


def test_data_covariates_win_over_the_catalog(tmp_path, catalog):
    text = ("verifier,rps,latency_mean_s,verifier_params_b,experts_active,experts_total\n"
            "gpt-oss-20b,1,2,21.5,,\n"
            "gpt-oss-20b,2,3,,2,16\n")
    data = read_tidy(write(tmp_path, "cov.csv", text), catalog=catalog)
    assert data["verifier_params_b"].tolist() == [21.5, pytest.approx(20.91)]
    assert data["experts_active"].tolist() == [4, 2]
    assert data["experts_total"].tolist() == [32, 16]


def test_unknown_verifier_has_no_covariates(tmp_path, catalog):
    data = read_tidy(write(tmp_path, "u.csv", "verifier,rps,latency_mean_s\nMy-Model,1,2\n"),
                     catalog=catalog)
    assert math.isnan(data["verifier_params_b"].iloc[0])
    assert pd.isna(data["experts_total"].iloc[0])


# ---------------------------------------------------------------------------- saturation

def test_saturation_marking_by_every_rule(tmp_path, catalog):
    text = ("rps,latency_mean_s,saturated,strategy,rps_target\n"
            "1.0,2.0,false,constant,1.0\n"      # 1 kept
            "2.0,2.2,true,constant,2.0\n"       # 2 marked saturated
            "3.0,2.5,no,throughput,\n"          # 3 throughput run
            "3.5,2.9,0,constant,4.0\n"          # 4 3.5 < 0.9 * 4.0
            "3.7,3.1,,constant,4.0\n"           # 5 3.7 >= 3.6: kept
            "6.0,9.0,false,constant,6.0\n")     # 6 kept unless --max-rps
    data = read_tidy(write(tmp_path, "sat.csv", text), catalog=catalog)
    assert data["saturated"].tolist() == [False, True, False, False, False, False]
    assert data["excluded"].tolist() == [False, True, True, True, False, False]
    reasons = data["exclusion_reason"].tolist()
    assert reasons[0] == reasons[4] == reasons[5] == ""
    assert reasons[1] == "marked saturated in the file (column `saturated`)"
    assert reasons[2].startswith("throughput run")
    assert reasons[3].startswith("achieved rate 3.5 RPS fell short of the target 4 (< 90%)")

    ruled = read_tidy(tmp_path / "sat.csv", catalog=catalog,
                      saturation=SaturationRule(max_rps=5.0))
    assert ruled["excluded"].tolist() == [False, True, True, True, False, True]
    assert ruled["exclusion_reason"].iloc[5] == "rate above --max-rps 5"
    assert ruled["exclusion_reason"].iloc[1].startswith("marked saturated")  # first rule wins


def test_shortfall_fraction_is_settable(tmp_path, catalog):
    text = "rps,latency_mean_s,rps_target\n3.7,3.1,4.0\n"
    path = write(tmp_path, "short.csv", text)
    assert not read_tidy(path, catalog=catalog)["excluded"].iloc[0]
    strict = read_tidy(path, catalog=catalog, saturation=SaturationRule(shortfall=0.95))
    assert strict["excluded"].iloc[0]
    assert "(< 95%)" in strict["exclusion_reason"].iloc[0]


@pytest.mark.parametrize("word", ["true", "True", "1", "yes", "t", "Y"])
def test_saturated_truthy_spellings(tmp_path, catalog, word):
    data = read_tidy(write(tmp_path, "s.csv", f"rps,latency_mean_s,saturated\n1,2,{word}\n"),
                     catalog=catalog)
    assert data["excluded"].iloc[0]


# ----------------------------------------------------------------------------- bad files

HEAD = "verifier,k,alpha,rps,latency_mean_s\n"
OK_ROW = "Qwen3-8B,2,0.8,1.0,2.0\n"


def rows(*lines: str) -> str:
    return HEAD + "".join(line + "\n" for line in lines)


# (id, file name, content, expected row or None, expected column or None, text in reason)
BAD_CASES = [
    ("missing-rps", "bad.csv", "verifier,latency_mean_s\nQwen3-8B,2.0\n", None, "rps",
     "missing"),
    ("missing-latency", "bad.csv", "verifier,rps\nQwen3-8B,1.0\n", None, "latency_mean_s",
     "missing"),
    ("non-numeric", "bad.csv", rows("Qwen3-8B,2,0.8,1.0,2.0", "Qwen3-8B,2,0.8,2.0,2.1",
                                    "Qwen3-8B,2,0.8,abc,2.2"), 3, "rps", "abc"),
    ("non-numeric-latency", "bad.csv", rows("Qwen3-8B,2,0.8,1.0,2.0", "Qwen3-8B,2,0.8,2.0,x1"),
     2, "latency_mean_s", "not a number"),
    ("nan-rps", "bad.csv", rows("Qwen3-8B,2,0.8,1.0,2.0", "Qwen3-8B,2,0.8,NaN,2.0"), 2, "rps",
     "missing"),
    ("empty-latency", "bad.csv", rows("Qwen3-8B,2,0.8,1.0,2.0", "Qwen3-8B,2,0.8,1.0,"), 2,
     "latency_mean_s", "missing"),
    ("negative-rps", "bad.csv", rows("Qwen3-8B,2,0.8,1.0,2.0", "Qwen3-8B,2,0.8,-1.0,2.0"), 2,
     "rps", "> 0"),
    ("zero-rps", "bad.csv", rows("Qwen3-8B,2,0.8,0,2.0"), 1, "rps", "> 0"),
    ("zero-latency", "bad.csv", rows("Qwen3-8B,2,0.8,1.0,2.0", "Qwen3-8B,2,0.8,1.5,2.1",
                                     "Qwen3-8B,2,0.8,2.0,0"), 3, "latency_mean_s", "> 0"),
    ("negative-latency", "bad.csv", rows("Qwen3-8B,2,0.8,1.0,-2.0"), 1, "latency_mean_s",
     "> 0"),
    ("infinite-latency", "bad.csv", rows("Qwen3-8B,2,0.8,1.0,inf"), 1, "latency_mean_s",
     "infinite"),
    ("alpha-above-1", "bad.csv", rows(OK_ROW.strip(), "Qwen3-8B,2,1.2,1.0,2.0"), 2, "alpha",
     "[0, 1]"),
    ("alpha-below-0", "bad.csv", rows("Qwen3-8B,2,-0.1,1.0,2.0"), 1, "alpha", "[0, 1]"),
    ("negative-k", "bad.csv", rows(OK_ROW.strip(), OK_ROW.strip(), "Qwen3-8B,-1,0.8,1.0,2.0"),
     3, "k", ">= 0"),
    ("fractional-k", "bad.csv", rows(OK_ROW.strip(), "Qwen3-8B,2.5,0.8,1.0,2.0"), 2, "k",
     "whole number"),
    ("non-numeric-k", "bad.csv", rows("Qwen3-8B,three,0.8,1.0,2.0"), 1, "k", "not a number"),
    ("zero-prefill", "bad.csv", "prefill_tokens,rps,latency_mean_s\n512,1,2\n0,1,2\n", 2,
     "prefill_tokens", ">= 1"),
    ("negative-p95", "bad.csv", "rps,latency_mean_s,latency_p95_s\n1,2,-3\n", 1,
     "latency_p95_s", ">= 0"),
    ("saturated-not-boolean", "bad.csv", "rps,latency_mean_s,saturated\n1,2,maybe\n", 1,
     "saturated", "true/false"),
    ("more-accepted-than-drafted", "bad.csv",
     "rps,latency_mean_s,draft_tokens,accepted_tokens\n1,2,300,200\n2,3,300,301\n", 2,
     "accepted_tokens", "accepted"),
    ("experts-active-above-total", "bad.csv",
     "verifier,rps,latency_mean_s,experts_active,experts_total\n"
     "gpt-oss-20b,1,2,4,32\ngpt-oss-20b,2,3,40,32\n", 2, "experts_active", "experts"),
    ("unknown-percentile-rule", "bad.csv",
     "rps,latency_mean_s,percentile_rule\n1,2,linear\n2,3,nearest\n", 2, "percentile_rule",
     "inverted_cdf"),
    ("duplicate-column", "bad.csv", "rps,latency_mean_s,rps\n1,2,3\n", None, "rps", "twice"),
    ("ragged-row", "bad.csv", rows(OK_ROW.strip(), "Qwen3-8B,2,0.8,1.0,2.0,7"), 2, None,
     "fields"),
    ("ragged-after-blank-line", "bad.csv", HEAD + OK_ROW + "\n" + OK_ROW + "Qwen3-8B,2,0.8,1,2,7\n",
     3, None, "fields"),
    ("every-row-one-field-too-many", "bad.csv", "rps,latency_mean_s\n1,2,3\n4,5,6\n", 1, None,
     "fields"),
    ("empty-file", "empty.csv", b"", None, None, "empty"),
    ("header-only", "header.csv", HEAD, None, None, "no data rows"),
    ("whitespace-only", "blank.csv", "  \n\t\n   \n", None, None, "empty"),
    ("binary", "binary.csv", bytes(np.random.default_rng(5).integers(0, 256, 2048,
                                                                    dtype=np.uint8))
     + b"\x00\x00", None, None, "binary"),
    ("not-utf8", "latin1.csv", (HEAD + "Caf\xe9-7B,2,0.8,1.0,2.0\n" + OK_ROW * 3)
     .encode("latin-1"), None, None, "UTF-8"),
    ("not-utf8-at-end", "latin1end.csv", (HEAD + OK_ROW * 3 + "Caf\xe9,2,0.8,1.0,2.0\n")
     .encode("latin-1"), None, None, "UTF-8"),
    ("damaged-parquet", "damaged.parquet", b"PAR1" + bytes(range(200)) + b"garbage", None,
     None, "Parquet"),
    ("damaged-parquet-named-csv", "damaged.csv", b"PAR1" + b"\x13\x37" * 100, None, None,
     "Parquet"),
    # a drafter or an alpha on a row that k says is dense (no silent dense fit)
    ("dense-row-with-alpha", "bad.csv", rows(OK_ROW.strip(), "Qwen3-8B,0,0.8,1.0,2.0"), 2,
     "k", "k is 0 (dense) but the row has alpha 0.8"),
    ("drafter-and-alpha-without-k-column", "bad.csv",
     "verifier,drafter,alpha,rps,latency_mean_s\nQwen3-8B,,,1,2\n"
     "Qwen3-8B,EAGLE3-Qwen3-8B,0.8,2,3\n", 2, "k",
     "no k column but the row has drafter 'EAGLE3-Qwen3-8B' and alpha 0.8: add k"),
    ("drafter-with-empty-k", "bad.csv",
     "verifier,drafter,k,rps,latency_mean_s\nQwen3-8B,EAGLE3-Qwen3-8B,3,1,2\n"
     "Qwen3-8B,EAGLE3-Qwen3-8B,,2,3\n", 2, "k", "k is empty but the row has drafter"),
    # report files where a tidy table belongs: say what they are and what to run
    ("guidellm-json", "sweep.json", fixture_bytes("guidellm_v1.json"), None, None,
     "a GuideLLM report (JSON), not a tidy table: run `bayesspec ingest sweep.json -o"),
    ("guidellm-json-named-csv", "sweep.csv", fixture_bytes("guidellm_v1.json"), None, None,
     "a GuideLLM report (JSON), not a tidy table: run `bayesspec ingest sweep.csv -o"),
    ("guidellm-yaml", "sweep.yaml", fixture_bytes("guidellm_v2.yaml"), None, None,
     "a GuideLLM report (YAML), not a tidy table: run `bayesspec ingest"),
    ("vllm-bench-json", "run.json", fixture_bytes("vllm_bench_no_e2el.json"), None, None,
     "a vllm bench result (JSON), not a tidy table: run `bayesspec ingest"),
    ("vllm-bench-jsonl", "runs.jsonl", fixture_bytes("vllm_bench_append.jsonl"), None, None,
     "vllm bench results (JSON Lines), not a tidy table: run `bayesspec ingest"),
    ("prometheus-scrape", "metrics.txt", fixture_bytes("guidellm081/point0_after.prom"), None,
     None, "a Prometheus /metrics scrape, not a tidy table: give it to `bayesspec ingest`"),
    ("other-json", "notes.csv", b'{"rps": [1, 2], "latency_mean_s": [2, 3]}', None, None,
     "a JSON document, not a tidy table (CSV or Parquet)"),
    # misspelt columns: suggest the near match
    ("misspelt-required-column", "bad.csv", "rps,latency_mean\n1,2\n", None,
     "latency_mean_s", "required column is missing (did you mean 'latency_mean'?)"),
    ("misspelt-design-column", "bad.csv", "rps,latency_mean_s,prefil_tokens\n1,2,512\n",
     None, "prefil_tokens", "unknown column: did you mean 'prefill_tokens'?"),
    ("misspelt-case-and-blanks", "bad.csv", "rps,latency_mean_s,Decode Tokens\n1,2,512\n",
     None, "Decode Tokens", "did you mean 'decode_tokens'?"),
]


@pytest.mark.parametrize("name, content, row, column, reason",
                         [case[1:] for case in BAD_CASES], ids=[case[0] for case in BAD_CASES])
def test_bad_input_is_refused(tmp_path, catalog, name, content, row, column, reason):
    path = write(tmp_path, name, content)
    with pytest.raises(BadInput) as caught:
        read_tidy(path, catalog=catalog)
    error = caught.value
    message = str(error)
    assert "\n" not in message
    assert str(path) in message
    assert reason in message
    assert error.file == str(path)
    assert error.row == row
    if row is not None:
        assert f"row {row}" in message
    if column is not None:
        assert error.column == column
        assert f"column '{column}'" in message


def test_missing_file(tmp_path):
    path = tmp_path / "nowhere.csv"
    with pytest.raises(BadInput, match="no such file") as caught:
        read_tidy(path)
    assert str(path) in str(caught.value)


def test_directory(tmp_path):
    folder = tmp_path / "sweep.csv"
    folder.mkdir()
    with pytest.raises(BadInput, match="directory") as caught:
        read_tidy(folder)
    assert str(folder) in str(caught.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(tmp_path):
    path = write(tmp_path, "secret.csv", "rps,latency_mean_s\n1,2\n")
    path.chmod(0)
    try:
        with pytest.raises(BadInput, match="cannot read"):
            read_tidy(path)
    finally:
        path.chmod(0o644)


def test_bad_value_in_parquet_names_row_and_column(tmp_path, catalog):
    frame = pd.DataFrame({"rps": [1.0, 2.0, -3.0], "latency_mean_s": [1.0, 1.1, 1.2]})
    frame.to_parquet(tmp_path / "neg.parquet")
    with pytest.raises(BadInput) as caught:
        read_tidy(tmp_path / "neg.parquet", catalog=catalog)
    assert (caught.value.row, caught.value.column) == (3, "rps")


def test_missing_value_in_parquet(tmp_path, catalog):
    frame = pd.DataFrame({"rps": [1.0, None], "latency_mean_s": [1.0, 1.1]})
    frame.to_parquet(tmp_path / "nan.parquet")
    with pytest.raises(BadInput, match="missing") as caught:
        read_tidy(tmp_path / "nan.parquet", catalog=catalog)
    assert (caught.value.row, caught.value.column) == (2, "rps")


# ----------------------------------------------------------------- the same through the CLI

CLI_CASES = ["missing-rps", "non-numeric", "nan-rps", "negative-rps", "alpha-above-1",
             "negative-k", "empty-file", "binary", "guidellm-json", "dense-row-with-alpha",
             "misspelt-design-column"]
MISSING_FILE = "no_such_sweep.csv"


def run_fit(folder: Path, data_name: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != cat_mod.ENV_VAR}
    env["HOME"] = str(folder)
    return subprocess.run(
        [str(BAYESSPEC), "fit", data_name, "-o", "OUT.nc", "--draws", "10", "--tune", "10",
         "--chains", "1", "--quiet"],
        cwd=folder, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
    """Every CLI case, run side by side: each process pays ~2 s of imports."""
    jobs = {}
    for case_id in CLI_CASES:
        _, name, content, *_ = next(c for c in BAD_CASES if c[0] == case_id)
        folder = tmp_path_factory.mktemp(f"cli-{case_id}")
        write(folder, name, content)
        jobs[case_id] = (folder, name)
    jobs["missing-file"] = (tmp_path_factory.mktemp("cli-missing-file"), MISSING_FILE)
    workers = min(len(jobs), max(2, os.cpu_count() or 2))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {case_id: pool.submit(run_fit, folder, name)
                   for case_id, (folder, name) in jobs.items()}
        return {case_id: (jobs[case_id][0], future.result())
                for case_id, future in futures.items()}


def assert_one_line_error(result, folder, needles):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("bayesspec: error: ")
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0]
    assert result.stdout == ""
    assert not (folder / "OUT.nc").exists()
    assert not list(folder.glob("*OUT.nc*"))


@pytest.mark.parametrize("case_id", CLI_CASES)
def test_cli_fit_refuses_bad_data(cli_runs, case_id):
    _, name, _, row, column, reason = next(c for c in BAD_CASES if c[0] == case_id)
    folder, result = cli_runs[case_id]
    needles = [name, reason]
    if row is not None:
        needles.append(f"row {row}")
    if column is not None:
        needles.append(f"column '{column}'")
    assert_one_line_error(result, folder, needles)


def test_cli_fit_missing_file(cli_runs):
    folder, result = cli_runs["missing-file"]
    assert_one_line_error(result, folder, [MISSING_FILE, "no such file"])


# ------------------------------------------------------------------------ misspelt columns

def test_columns_that_are_not_near_misses_pass_through(tmp_path, catalog):
    # p90 is not p95 (only digits differ), tpot is not ttft (two edits in a short name),
    # short names are never guessed at, ingest's per-position columns are far from any
    text = ("rps,latency_mean_s,latency_p90_s,tpot_mean_s,cpu,my_note,acceptance_rate_pos1\n"
            "1,2,2.5,0.01,x,hello,0.8\n")
    data = read_tidy(write(tmp_path, "extra.csv", text), catalog=catalog)
    for column in ("latency_p90_s", "tpot_mean_s", "cpu", "my_note", "acceptance_rate_pos1"):
        assert column in data.columns
    assert data["my_note"].iloc[0] == "hello"


@pytest.mark.parametrize("name, known", [
    ("prefil_tokens", "prefill_tokens"), ("decode_token", "decode_tokens"),
    ("latency_mean", "latency_mean_s"), ("lantecy_mean_s", "latency_mean_s"),
    ("RPS", "rps"), ("Latency-Mean-S", "latency_mean_s"), ("verifer", "verifier"),
    ("n_request", "n_requests"), ("rps_targt", "rps_target"),
    ("latency_p90_s", None), ("tpot_mean_s", None), ("alpha_true", None), ("k", None),
    ("cpu", None), ("accepted_tokens_pos3", None), ("prefill_tokens", None),
])
def test_near_miss(name, known):
    assert near_miss(name) == known


# ------------------------------------------------------------ saturation the numbers show

def _law_rows(rates, c1=1.0, c2=0.1):
    return [(r, c1 / (1 - r * c2)) for r in rates]


def _csv(rows) -> str:
    return "rps,latency_mean_s\n" + "".join(f"{r},{lat}\n" for r, lat in rows)


def test_plateau_of_the_achieved_rate_is_set_aside(tmp_path, catalog):
    rows = _law_rows([1, 2, 3, 4]) + [(4.05, 4.0)]
    data = read_tidy(write(tmp_path, "p.csv", _csv(rows)), catalog=catalog)
    assert data["excluded"].tolist() == [False] * 4 + [True]
    assert data["exclusion_reason"].iloc[4].startswith("achieved rate stopped rising")


def test_points_beyond_the_law_of_the_lower_points_are_set_aside(tmp_path, catalog):
    # the law through 1..4 RPS puts the ceiling at 10 RPS
    beyond = _law_rows([1, 2, 3, 4]) + [(10.5, 6.0)]
    data = read_tidy(write(tmp_path, "b.csv", _csv(beyond)), catalog=catalog)
    assert data["excluded"].tolist() == [False] * 4 + [True]
    assert "beyond the ceiling 10 RPS" in data["exclusion_reason"].iloc[4]
    far_above = _law_rows([1, 2, 3, 4, 5]) + [(5.5, 6.0)]   # the law says 2.22 s at 5.5 RPS
    data = read_tidy(write(tmp_path, "f.csv", _csv(far_above)), catalog=catalog)
    assert data["excluded"].tolist() == [False] * 5 + [True]
    assert data["exclusion_reason"].iloc[5].startswith(
        "latency 2.7x the law through the group's lower-rate points")
    # 8 s at 7 RPS: 2.4x the law, but the law reaches 8 s only at 8.75 RPS (20% more)
    short = _law_rows([1, 2, 3, 4, 5]) + [(7, 8.0)]
    data = read_tidy(write(tmp_path, "s.csv", _csv(short)), catalog=catalog)
    assert data["excluded"].tolist() == [False] * 5 + [True]
    assert data["exclusion_reason"].iloc[5].startswith(
        "achieved rate 7 RPS is 20% below the 8.75 RPS at which the law")
    on_the_law = _law_rows([1, 2, 3, 4, 5, 7, 9])
    data = read_tidy(write(tmp_path, "k.csv", _csv(on_the_law)), catalog=catalog)
    assert not data["excluded"].any()
    kept = read_tidy(tmp_path / "f.csv", catalog=catalog,
                     saturation=SaturationRule(detect=False))
    assert not kept["excluded"].any()


def test_moe_curves_are_not_judged_by_the_dense_law(tmp_path, catalog):
    """An MoE curve rises steeply at light load and then flattens: a line through its
    lower points predicts a ceiling that its higher points pass without saturating."""
    rates = [0.5, 1, 1.5, 2, 3, 4, 5]
    rows = [(r, 2.0 + 3.0 * (1 - np.exp(-r)) + 0.1 * r) for r in rates]
    text = "verifier,rps,latency_mean_s\n" + "".join(f"Qwen3-30B-A3B,{r},{lat}\n"
                                                   for r, lat in rows)
    data = read_tidy(write(tmp_path, "m.csv", text), catalog=catalog)
    assert data["experts_total"].notna().all()
    assert not data["excluded"].any()


def test_a_minimal_csv_of_a_simulated_sweep_sets_its_throughput_point_aside(catalog):
    """The simulator's sweep without saturated/strategy/rps_target columns: the throughput
    point is still found, and nothing the simulator kept is set aside."""
    from bayesspec.simulate import setup, sweep

    rows = sweep(setup("Qwen3-8B", "H100", prefill=512, decode=512), 9, n_requests=400,
                 seed=0).rows
    minimal = rows[["verifier", "prefill_tokens", "decode_tokens", "rps", "latency_mean_s"]]
    data = prepare(minimal, catalog=catalog)
    throughput = rows["strategy"].eq("throughput").to_numpy()
    assert data["excluded"].to_numpy()[throughput].all()
    marked = prepare(rows, catalog=catalog, saturation=SaturationRule(detect=False))
    assert not (data["excluded"] & ~marked["excluded"]).any()


def test_detection_flags_nothing_the_generators_keep(catalog):
    """Bundled datasets and simulator sweeps over seeds (dense and SD): with their own
    saturation columns, detection adds no flag to a point they keep."""
    from bayesspec.simulate import setup, sweep

    root = Path(__file__).resolve().parents[2] / "bayesspec" / "datasets"
    tables = [pd.read_csv(path) for path in sorted(root.glob("*.csv"))]
    setups = [setup("Qwen3-8B", "H100", prefill=256, decode=128),
              setup("Llama-3.1-8B", "H100", prefill=2048, decode=256),
              setup("Qwen3-8B", "H100", prefill=512, decode=512, k=3, alpha=0.8,
                    drafter="EAGLE3-Qwen3-8B")]
    tables += [sweep(s, 9, n_requests=300, seed=seed).rows for s in setups
               for seed in range(4)]
    for table in tables:
        detected = prepare(table, catalog=catalog)["excluded"]
        marked = prepare(table, catalog=catalog, saturation=SaturationRule(detect=False))
        assert not (detected & ~marked["excluded"]).any()


# ------------------------------------------------------ set-aside points with known truth

def _law_sweeps_with_planted(seed: int, factor: float):
    """Law-generated sweeps (known C1, C2; no flag columns, no throughput run) with one
    planted point per group at ``factor`` x the true law, between two of the group's
    measured rates at 50-75% of its ceiling (nearer the ceiling, 3x the true law is
    within what the lower points leave open about the law). Returns the minimal table
    and the planted mask."""
    from bayesspec import laws
    from bayesspec.simulate.synthetic import generate_sweeps, placeholder_truth

    truth = placeholder_truth()
    rows = generate_sweeps(truth, seed=seed)
    rows = rows[rows["strategy"] != "throughput"].reset_index(drop=True)
    keys = ["verifier", "prefill_tokens", "decode_tokens"]
    rng = np.random.default_rng(seed)
    planted = []
    for key, group in rows.groupby(keys):
        c1, c2 = truth.set_index(keys).loc[key, ["C1", "C2"]]
        rates = np.sort(group["rps"].to_numpy())
        i = int(rng.integers(4, 6))
        rate = 0.5 * (rates[i] + rates[i + 1])
        extra = group.iloc[0].copy()
        extra["rps"], extra["latency_mean_s"] = rate, factor * laws.latency(rate, c1, c2)
        planted.append(extra)
    table = pd.concat([rows, pd.DataFrame(planted)], ignore_index=True)
    mask = np.r_[np.zeros(len(rows), bool), np.ones(len(planted), bool)]
    return table[keys + ["rps", "latency_mean_s", "latency_std_s", "n_requests"]], mask


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_detection_catches_points_three_times_the_law_and_keeps_the_law(catalog, seed):
    """Known truth: a point at 3x the true law (a throughput run or a queue past the
    ceiling, below the group's top rate) is set aside in every one of 48 groups, and
    not one of the 384 points drawn from the law is."""
    table, planted = _law_sweeps_with_planted(seed, 3.0)
    data = prepare(table, catalog=catalog)
    excluded = data["excluded"].to_numpy()
    assert excluded[planted].all(), data.loc[planted & ~excluded, ["rps", "latency_mean_s"]]
    assert not excluded[~planted].any(), data.loc[excluded & ~planted, "exclusion_reason"]


def test_detection_catches_a_top_point_three_times_the_law_of_the_lower_points(catalog):
    """At the top of a group, where only the lower points say what the law is."""
    rows = _law_rows([0.5, 2, 3.5, 5, 6, 7]) + [(7.8, 3 * 1.0 / (1 - 0.78))]
    data = prepare(pd.DataFrame(rows, columns=["rps", "latency_mean_s"]), catalog=catalog)
    assert data["excluded"].tolist() == [False] * 6 + [True]


def test_a_throughput_point_below_a_higher_rate_is_set_aside(catalog):
    """The walkthrough case (k = 2, alpha 0.8): the throughput run's achieved rate
    (18.96 RPS, 27.5 s) lies below a Poisson point's (21.98 RPS, 9.6 s). A steady state's
    latency never falls as the rate rises: the slower, later one is past the ceiling."""
    rows = [(0.41, 2.46), (2.53, 2.74), (5.10, 3.13), (7.30, 3.54), (10.78, 4.50),
            (11.52, 4.66), (15.27, 6.57), (21.98, 9.58), (18.96, 27.49)]
    data = prepare(pd.DataFrame(rows, columns=["rps", "latency_mean_s"]), catalog=catalog)
    assert data["excluded"].tolist() == [False] * 8 + [True]
    assert "that at a higher rate (21.98 RPS)" in data["exclusion_reason"].iloc[8]


def test_set_aside_reasons_are_words_a_user_can_act_on(catalog):
    """The simulator's codes become advice; a wait at a cap the file gives is kept (the
    capped law describes it), and set aside with what to add when the cap is missing."""
    base = {"rps": [1.0, 2.0, 3.0, 4.0], "latency_mean_s": [2.0, 2.2, 2.5, 2.9],
            "saturated": [False, True, True, True],
            "saturation_reason": ["", "short_window", "batch_wait", "preemption;kv_wait"]}
    data = prepare(pd.DataFrame(base), catalog=catalog)
    reasons = data["exclusion_reason"].tolist()
    assert reasons[0] == ""
    assert reasons[1] == "window too short for this latency: run more requests (>= 100)"
    assert reasons[2].startswith("requests waited for a batch slot (max_num_seqs)")
    assert "give the cap (column max_num_seqs)" in reasons[2]
    assert reasons[3].startswith("requests were preempted (the KV cache ran out)")
    assert "KV blocks" not in reasons[3]          # implied by the preemption
    capped = prepare(pd.DataFrame({**base, "max_num_seqs": [64] * 4}), catalog=catalog)
    assert capped["excluded"].tolist() == [False, True, False, True]
    throughput = prepare(pd.DataFrame({**base, "saturation_reason": [
        "", "", "", "throughput;preemption;kv_wait"]}), catalog=catalog)
    assert throughput["exclusion_reason"].iloc[3] == (
        "throughput run (clients sending back to back, to find the ceiling): no set rate, "
        "not a point of the law")
    legacy = prepare(pd.DataFrame({k: v for k, v in base.items()
                                   if k != "saturation_reason"}), catalog=catalog)
    assert legacy["exclusion_reason"].iloc[1] == ("marked saturated in the file (column "
                                                  "`saturated`)")


# -------------------------------------------------------------------------------- units

@pytest.fixture(scope="module")
def simulated_sweep():
    from bayesspec.simulate import setup, sweep

    return sweep(setup("Qwen3-8B", "H100", prefill=512, decode=512), 9, n_requests=400,
                 seed=0).rows


def test_rates_per_minute_are_refused_and_converted(simulated_sweep, catalog):
    per_minute = simulated_sweep.copy()
    per_minute[["rps", "rps_target"]] *= 60.0
    with pytest.raises(BadInput) as caught:
        prepare(per_minute, catalog=catalog)
    message = str(caught.value)
    assert "look like requests per minute" in message and "--units rpm" in message
    assert "column 'rps'" in message and "H100" in message
    converted = prepare(per_minute, catalog=catalog, units=("rpm",))
    assert np.allclose(converted["rps"], simulated_sweep["rps"])
    assert np.allclose(converted["rps_target"].dropna(), simulated_sweep["rps_target"].dropna())


def test_milliseconds_and_per_token_latencies_are_refused(simulated_sweep, catalog):
    milliseconds = simulated_sweep.copy()
    columns = [c for c in milliseconds.columns if c.endswith("_s")]
    milliseconds[columns] *= 1000.0
    with pytest.raises(BadInput, match="look like milliseconds.*--units ms"):
        prepare(milliseconds, catalog=catalog)
    converted = prepare(milliseconds, catalog=catalog, units=("ms",))
    assert np.allclose(converted["latency_mean_s"], simulated_sweep["latency_mean_s"])
    assert np.allclose(converted["ttft_p99_s"], simulated_sweep["ttft_p99_s"])
    per_token = simulated_sweep.copy()
    per_token["latency_mean_s"] /= 512
    with pytest.raises(BadInput, match="read Qwen3-8B's weights"):
        prepare(per_token, catalog=catalog)


def test_units_are_judged_without_catalog_cards_too(simulated_sweep, catalog):
    """Without a card for the verifier or the GPU, Little's law still refuses rates per
    minute (tests/data/test_units.py has the card-free bounds)."""
    per_minute = simulated_sweep.copy()
    per_minute["rps"] *= 60.0
    for column, value in (("gpu", "my-accelerator"), ("verifier", "my-model")):
        unknown = per_minute.assign(**{column: value})
        with pytest.raises(BadInput, match="Little's law.*--units rpm"):
            prepare(unknown, catalog=catalog)
        assert len(prepare(unknown, catalog=catalog, units=("rpm",))) == len(per_minute)
    with pytest.raises(BadInput, match="Little's law.*--units rpm"):
        prepare(per_minute.drop(columns=["gpu"]), catalog=catalog)


def test_units_option_on_the_command_line(tmp_path, simulated_sweep):
    from bayesspec.data.units import parse_units

    assert parse_units("rpm") == ("rpm",) and parse_units("ms, rpm") == ("ms", "rpm")
    with pytest.raises(BadInput, match="unknown unit 'sec'"):
        parse_units("sec")
    per_minute = simulated_sweep.copy()
    per_minute[["rps", "rps_target"]] *= 60.0
    path = tmp_path / "rpm.csv"
    per_minute.to_csv(path, index=False)
    out = tmp_path / "fit.nc"
    result = subprocess.run([str(BAYESSPEC), "fit", str(path), "-o", str(out)],
                            capture_output=True, text=True)
    assert result.returncode == 2 and not out.exists()
    assert "--units rpm" in result.stderr and "Traceback" not in result.stderr
