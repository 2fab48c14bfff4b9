"""Units judged without catalog cards: a table in milliseconds or requests per minute is
refused, naming the column and the --units option, whether or not the catalog knows
the verifier and the GPU; legitimate sweeps, fast and slow, pass (bayesspec.data.units)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bayesspec.data import prepare
from bayesspec.data.units import (FASTEST_SECONDS_PER_TOKEN, IN_FLIGHT_PER_REQUEST,
                                  LATENCY_COLUMNS, MAX_IN_FLIGHT, SLOWEST_SECONDS_PER_TOKEN,
                                  GroupEvidence, in_flight_problem, measured_in_flight_problem,
                                  pace_problem)
from bayesspec.errors import BadInput

ROOT = Path(__file__).resolve().parents[2]
BAYESSPEC = Path(sys.executable).with_name("bayesspec")
MINIMAL = ["verifier", "prefill_tokens", "decode_tokens", "rps", "latency_mean_s"]


def simulated(verifier="Qwen3-8B", gpu="H100", *, n_points=9, n_requests=300, **options):
    from bayesspec.simulate import setup, sweep

    return sweep(setup(verifier, gpu, **options), n_points, n_requests=n_requests,
                 seed=0).rows


@pytest.fixture(scope="module")
def dense_sweep():
    """A GuideLLM-like sweep of Qwen3-8B on an H100 (synchronous, 7 rates, throughput)."""
    return simulated(prefill=512, decode=512)


def in_milliseconds(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    columns = [c for c in LATENCY_COLUMNS if c in frame.columns]
    frame[columns] = frame[columns] * 1000.0
    return frame


def per_minute(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    columns = [c for c in ("rps", "rps_target") if c in frame.columns]
    frame[columns] = frame[columns] * 60.0
    return frame


def refusal(frame: pd.DataFrame, **options) -> str:
    with pytest.raises(BadInput) as caught:
        prepare(frame, **options)
    message = str(caught.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------- milliseconds, no cards

@pytest.mark.parametrize("variant", ["no gpu column", "unknown verifier", "minimal",
                                     "percentiles only"])
def test_milliseconds_are_refused_without_cards(dense_sweep, variant):
    table = in_milliseconds(dense_sweep)
    if variant == "no gpu column":
        table = table.drop(columns=["gpu"])
    elif variant == "unknown verifier":
        table = table.assign(verifier="MyModel-8B")
    elif variant == "minimal":
        table = table[MINIMAL]
    else:
        table = table[["verifier", "prefill_tokens", "decode_tokens", "rps",
                       "latency_p50_s", "latency_p99_s"]]
    column = "latency_p50_s" if variant == "percentiles only" else "latency_mean_s"
    message = refusal(table)
    assert f"column '{column}'" in message and "--units ms" in message
    assert "look like milliseconds" in message and "per output token" in message
    converted = prepare(table, units=("ms",))
    assert np.allclose(converted[column], dense_sweep[column])


def test_milliseconds_with_cards_keep_the_roofline_message(dense_sweep):
    message = refusal(in_milliseconds(dense_sweep))
    assert "roofline" in message and "H100" in message and "--units ms" in message


# --------------------------------------------------------------- rates per minute, no cards

def test_rates_per_minute_are_refused_without_cards_by_littles_law(dense_sweep):
    minimal = per_minute(dense_sweep)[MINIMAL]
    message = refusal(minimal)
    # no counts: the throughput point (the last row) holds tens of thousands in flight
    top = len(minimal)
    in_flight = minimal["rps"].iloc[-1] * minimal["latency_mean_s"].iloc[-1]
    assert in_flight > MAX_IN_FLIGHT
    assert f"row {top}, column 'rps'" in message and "Little's law" in message
    assert "--units rpm" in message and f"{in_flight:,.0f} requests in flight" in message
    # with the counts each point measured, a fitted point is over its own count
    counted = per_minute(dense_sweep).drop(columns=["gpu"])
    message = refusal(counted)
    row = int(message.split("row ")[1].split(",")[0])
    assert row < top and "requests the point measured" in message
    assert "--units rpm" in message
    assert len(prepare(minimal, units=("rpm",))) == len(minimal)
    assert len(prepare(counted, units=("rpm",))) == len(counted)


def test_a_conversion_already_asked_for_is_not_suggested_again(dense_sweep):
    twice = per_minute(per_minute(dense_sweep))[MINIMAL]
    message = refusal(twice, units=("rpm",))
    assert "--units rpm" not in message and "--units ms" in message
    seconds = dense_sweep[MINIMAL]
    message = refusal(seconds, units=("ms",))
    assert "faster than any GPU serves" in message
    assert "rerun without --units ms" in message


def test_a_per_token_latency_is_refused_without_cards(dense_sweep):
    per_token = dense_sweep.drop(columns=["gpu"])
    per_token["latency_mean_s"] = per_token["latency_mean_s"] / 512
    message = refusal(per_token)
    assert "column 'latency_mean_s'" in message and "faster than any GPU serves" in message
    assert "per-token latency?" in message


# --------------------------------------------------------- legitimate data pass, both sides

def readme_sweeps() -> pd.DataFrame:
    """The README's walkthrough sweeps (examples/walkthrough.toml)."""
    from bayesspec.simulate.grid import load_grid, run_grid

    return run_grid(load_grid(str(ROOT / "examples" / "walkthrough.toml")))[0]


# name -> (the table, whether its fitted points hold enough of their run in flight that
# rates per minute break the count bound without cards: a sweep that stays light, or
# counts that dwarf what is in flight, leave only the catalog's compute ceiling to
# catch them, where the catalog knows the verifier and the GPU)
LEGITIMATE = {
    "bundled dense": (lambda: pd.read_csv(ROOT / "bayesspec/datasets/sim_dense.csv"), True),
    "bundled speculative": (
        lambda: pd.read_csv(ROOT / "bayesspec/datasets/sim_speculative.csv"), True),
    "bundled moe": (lambda: pd.read_csv(ROOT / "bayesspec/datasets/sim_moe.csv"), True),
    "vidur dense": (lambda: pd.read_csv(ROOT / "examples/vidur/vidur_dense.csv"), True),
    "vidur fresh": (lambda: pd.read_csv(ROOT / "examples/vidur/vidur_fresh.csv"), True),
    "vidur capped": (lambda: pd.read_csv(ROOT / "examples/vidur/vidur_capped.csv"), False),
    "README sweeps": (readme_sweeps, True),
    # slow: a 32B model on an A100 answering 4096 tokens, 170 s a request at batch 1
    "32B on A100, 4096 tokens": (
        lambda: simulated("Qwen3-32B", "A100", n_points=6, n_requests=150, prefill=1024,
                          decode=4096), False),
    # fast: a 0.6B model with EAGLE k = 4 on an H200, 2.3 ms a token
    "0.6B k4 on H200": (lambda: simulated("Qwen3-0.6B", "H200", n_points=7, k=4, alpha=0.9,
                                          prefill=128, decode=128), True),
}


@pytest.mark.parametrize("name", list(LEGITIMATE))
def test_legitimate_sweeps_pass_and_the_same_in_other_units_do_not(name):
    make, rates_judged_without_cards = LEGITIMATE[name]
    table = make()
    cardless = table.drop(columns=["gpu"])
    assert len(prepare(table)) == len(table)
    assert len(prepare(cardless)) == len(table)
    assert "--units ms" in refusal(in_milliseconds(cardless))
    if rates_judged_without_cards:
        assert "--units rpm" in refusal(per_minute(cardless))


def test_slow_and_prompt_heavy_requests_pass():
    """Tens of seconds to minutes a request at batch 1 is a slow server, not milliseconds:
    a 70B model over 4096 output tokens at 25 ms each, and a 100k-token prompt with a
    16-token answer (its prefill takes most of the 40 s)."""
    rates = np.array([0.01, 0.05, 0.1, 0.2, 0.3])
    slow = pd.DataFrame({"verifier": "Llama-3.1-70B", "prefill_tokens": 1024,
                         "decode_tokens": 4096, "rps": rates,
                         "latency_mean_s": 4096 * 0.025 / (1 - rates / 0.5)})
    assert len(prepare(slow)) == len(slow)
    prompt = pd.DataFrame({"verifier": "my-70b", "prefill_tokens": 100_000,
                           "decode_tokens": 16, "rps": rates / 10,
                           "latency_mean_s": 40.0 / (1 - rates / 0.5)})
    assert len(prepare(prompt)) == len(prompt)
    assert "--units ms" in refusal(in_milliseconds(slow))
    assert "--units ms" in refusal(in_milliseconds(prompt))


# --------------------------------------------------------------------- the bounds themselves

def evidence(latency: float, decode=512.0, prefill=512.0) -> GroupEvidence:
    return GroupEvidence(label="m p512 g512", row=1, prefill_tokens=prefill,
                         decode_tokens=decode, k=0, batch1_latency=latency, rps_max=1.0,
                         ceiling=None, fastest_latency=latency, fastest_row=1)


def test_pace_bounds():
    slowest = SLOWEST_SECONDS_PER_TOKEN * 512 + 0.01 * 512
    assert pace_problem(evidence(slowest * 0.99)) is None
    column, message = pace_problem(evidence(slowest * 1.01))
    assert column == "latency_mean_s" and "--units ms" in message
    assert pace_problem(evidence(FASTEST_SECONDS_PER_TOKEN * 512 * 1.01)) is None
    assert "faster" in pace_problem(evidence(FASTEST_SECONDS_PER_TOKEN * 512 * 0.99))[1]
    assert pace_problem(evidence(1e6, decode=None)) is None     # lengths unknown: no pace


def test_in_flight_bounds():
    latency = np.array([1.0, 1.0])
    assert in_flight_problem([MAX_IN_FLIGHT * 0.99, 1.0], latency) is None
    index, column, message = in_flight_problem([1.0, MAX_IN_FLIGHT * 1.01], latency)
    assert (index, column) == (1, "rps") and "Little's law" in message
    counts = np.array([100.0, 100.0])
    limit = IN_FLIGHT_PER_REQUEST * 100
    assert in_flight_problem([1.0, limit * 0.99], latency, counts) is None
    assert in_flight_problem([1.0, limit * 1.01], latency, counts)[0] == 1
    # a set-aside point with a count is not judged; without one it is
    assert in_flight_problem([1.0, limit * 1.01], latency, counts,
                             fitted=[True, False]) is None
    assert in_flight_problem([1.0, MAX_IN_FLIGHT * 1.01], latency, np.array([100.0, np.nan]),
                             fitted=[True, False])[0] == 1


# ------------------------------------------------------------------------- the command line

@pytest.mark.parametrize("make", ["ms without gpu", "ms minimal", "rpm minimal"])
def test_fit_refuses_other_units_in_one_line(tmp_path, dense_sweep, make):
    table = {"ms without gpu": lambda: in_milliseconds(dense_sweep).drop(columns=["gpu"]),
             "ms minimal": lambda: in_milliseconds(dense_sweep)[MINIMAL],
             "rpm minimal": lambda: per_minute(dense_sweep)[MINIMAL]}[make]()
    path = tmp_path / "data.csv"
    table.to_csv(path, index=False)
    out = tmp_path / "fit.nc"
    result = subprocess.run([str(BAYESSPEC), "fit", str(path), "-o", str(out)],
                            capture_output=True, text=True)
    assert result.returncode == 2 and not out.exists()
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"bayesspec: error: {path}")
    assert ("--units rpm" if "rpm" in make else "--units ms") in lines[0]


def test_a_light_sweep_per_minute_is_refused_by_its_measured_in_flight(dense_sweep):
    """A light sweep in requests per minute puts few requests in flight, within any server's
    bounds; the file's own measured mean in flight gives the factor away (Little's law)."""
    light = dense_sweep.loc[dense_sweep["rps"] < 0.25 * dense_sweep["rps"].max()]
    columns = ["verifier", "rps", "latency_mean_s", "mean_concurrency"]
    assert len(light) >= 2 and len(prepare(light[columns])) == len(light)
    slipped = per_minute(light)[columns]
    assert in_flight_problem(slipped["rps"], slipped["latency_mean_s"]) is None
    message = refusal(slipped)
    assert "mean_concurrency" in message and "--units rpm" in message
    assert "--units ms" not in message
    assert len(prepare(slipped, units=("rpm",))) == len(light)
    milliseconds = in_milliseconds(light)[columns]
    message = refusal(milliseconds)
    assert "--units ms" in message and "--units rpm" not in message


def test_measured_in_flight_bounds():
    latency = np.array([2.0, 2.0, 2.0])
    rps = np.array([1.0, 2.0, 3.0])
    assert measured_in_flight_problem(rps, latency, rps * latency * 1.05) is None
    assert measured_in_flight_problem(rps, latency, rps * latency / 60.0) is not None
    assert measured_in_flight_problem(rps, latency, [np.nan] * 3) is None
    # set-aside points are not the evidence
    assert measured_in_flight_problem(rps, latency, rps * latency / 60.0,
                                      fitted=[False] * 3) is None
