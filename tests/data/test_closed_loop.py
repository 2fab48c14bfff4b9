"""Closed-loop sweeps (`vllm bench serve --max-concurrency C`, GuideLLM's concurrent
profile): the client keeps at most C requests in flight, so an achieved rate below the
target is the design, not overload; only a throughput that stops rising with C is."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bayesspec.cli import main
from bayesspec.data import prepare, read_tidy
from bayesspec.data.saturation import closed_loop_rows
from bayesspec.simulate import at_concurrency, setup

LEVELS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


@pytest.fixture(scope="module")
def closed_loop_sweep() -> pd.DataFrame:
    """Qwen3-8B on an H100 swept by concurrency past its batch cap of 128: the points at
    256 and 512 queue for a batch slot, their throughput flat at the cap's."""
    s = setup("Qwen3-8B", max_num_seqs=128)
    return at_concurrency(s, LEVELS, n_requests=300, seed=3).rows


def test_the_simulator_writes_closed_loop_points_with_their_limit(closed_loop_sweep):
    rows = closed_loop_sweep
    assert list(rows["max_concurrency"]) == list(LEVELS)
    # the client's limit is what is in flight: its time average is the level itself
    np.testing.assert_allclose(rows["mean_concurrency"], rows["max_concurrency"], rtol=1e-6)
    assert rows["rps"].is_monotonic_increasing is False   # flat, then down, past the cap
    assert rows["rps_target"].isna().all()


def test_points_below_the_plateau_are_fitted_and_past_it_set_aside(closed_loop_sweep):
    # as a `vllm bench serve` file comes: no simulator marks, no engine limits, a target
    # rate equal to C as `--max-concurrency C --request-rate C` sweeps are run
    raw = closed_loop_sweep.drop(columns=["saturated", "saturation_reason", "max_num_seqs",
                                          "kv_cache_tokens"])
    raw["rps_target"] = raw["max_concurrency"].astype(float)
    data = prepare(raw)
    assert closed_loop_rows(data).all()
    below = data["max_concurrency"] <= 128
    assert not data.loc[below, "excluded"].any(), data.loc[below, "exclusion_reason"].tolist()
    past = data.loc[~below]
    assert past["excluded"].all()
    assert past["exclusion_reason"].str.startswith("closed loop: throughput").all()
    assert past["exclusion_reason"].str.contains("measure below this concurrency").all()
    # with the engine's batch cap in the file, the cap says why first
    capped = prepare(closed_loop_sweep.drop(columns=["saturated", "saturation_reason"]))
    assert not capped.loc[below.to_numpy(), "excluded"].any()
    assert capped.loc[~below.to_numpy(), "exclusion_reason"].str.contains("ceiling").all()


def test_the_same_points_without_the_limit_are_read_as_overload(closed_loop_sweep):
    """What the column changes: without it, each point's rate short of its target reads
    as a server that could not keep up."""
    raw = closed_loop_sweep.drop(columns=["saturated", "saturation_reason", "max_concurrency"])
    raw["rps_target"] = raw["rps"] * 0 + np.array(LEVELS, float)
    data = prepare(raw)
    assert data.loc[data["rps"] < 0.9 * data["rps_target"], "excluded"].all()
    assert data["exclusion_reason"].str.contains("could not keep up").any()


@pytest.mark.parametrize("value, shown", [("0", "0"), ("2.5", "2.5"), ("many", "many")])
def test_a_bad_limit_exits_2_naming_the_row_and_column(tmp_path, capsys, closed_loop_sweep,
                                                       value, shown):
    raw = closed_loop_sweep.drop(columns=["saturated", "saturation_reason"]).astype(
        {"max_concurrency": object})
    raw.loc[3, "max_concurrency"] = value
    path = tmp_path / "closed.csv"
    raw.to_csv(path, index=False)
    assert main(["fit", str(path), "-o", str(tmp_path / "f.nc")]) == 2
    error = capsys.readouterr().err.strip()
    assert "max_concurrency" in error and "row 4" in error and shown in error
    assert len(error.splitlines()) == 1
    assert not (tmp_path / "f.nc").exists()


def test_the_column_is_read_back_as_written(tmp_path, closed_loop_sweep):
    path = tmp_path / "closed.csv"
    closed_loop_sweep.to_csv(path, index=False)
    data = read_tidy(path)
    assert list(data["max_concurrency"]) == list(LEVELS)


def test_simulate_concurrency_writes_a_closed_loop_sweep(tmp_path, capsys):
    out = tmp_path / "cl.csv"
    assert main(["simulate", "--verifier", "Qwen3-8B", "--concurrency", "1,4,16",
                 "--requests", "100", "--quiet", "-o", str(out)]) == 0
    rows = pd.read_csv(out)
    assert list(rows["max_concurrency"]) == [1, 4, 16]
    for bad in ("1.5", "0,4"):
        assert main(["simulate", "--verifier", "Qwen3-8B", "--concurrency", bad,
                     "-o", str(out)]) == 2
        error = capsys.readouterr().err.strip()
        assert error.splitlines() == [error] and "--concurrency" in error and "--rps" not in error


def test_a_closed_loop_at_exactly_the_cap_is_not_past_it(closed_loop_sweep):
    """The clients' limit bounds what is in flight: a time average of 128 requests that
    reads a rounding above 128 is a loop at the cap, not past it."""
    raw = closed_loop_sweep.drop(columns=["saturated", "saturation_reason"]).copy()
    at_cap = raw.index[raw["max_concurrency"] == 128][0]
    raw.loc[at_cap, "mean_concurrency"] = 128 * (1 + 1e-12)
    data = prepare(raw)
    assert not data.loc[at_cap, "excluded"], data.loc[at_cap, "exclusion_reason"]
    raw.loc[at_cap, "max_concurrency"] = np.nan          # an open-loop reading of it
    assert prepare(raw).loc[at_cap, "excluded"]


def test_the_public_closed_loop_example_is_read_as_one_with_nothing_set_aside():
    """vLLM-Omni's nightly `vllm bench serve --max-concurrency C` points (C = 1..32, two
    builds): every achieved rate is far below the request rate of inf, by design."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "closed_loop_vllm_omni.csv"
    data = read_tidy(path)
    assert closed_loop_rows(data).all() and len(data) == 10
    assert not data["excluded"].any(), data["exclusion_reason"].tolist()
    assert sorted(data["engine_version"].unique()) == ["nightly-10037", "nightly-10122"]
