"""``bayesspec tune`` against ``bayesspec serve`` endpoints on loopback (bounded in time),
its resumable points file, and the load driver's summaries."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bayesspec.data.catalog import load_catalog
from bayesspec.errors import BadInput
from bayesspec.loadtest.loadgen import Endpoint, PointSpec, run_builtin, summarise
from bayesspec.serve import SimulatedServer
from bayesspec.simulate.sweep import setup
from bayesspec.loadtest.tune import endpoints_from_options

ROOT = Path(__file__).resolve().parents[2]
SLOW_CARD = ROOT / "examples" / "guidellm_e2e" / "catalog"


class Running:
    """A SimulatedServer on its own event loop in a thread, on an ephemeral port."""

    def __init__(self, s, **kw):
        self.server = SimulatedServer(s, port=0, **kw)
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def main():
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self.server.start())
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=main, daemon=True)
        self.thread.start()
        assert ready.wait(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    def close(self):
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def servers():
    catalog = load_catalog([SLOW_CARD])
    dense = Running(setup("Qwen3-0.6B", "SLOW-E2E", catalog=catalog), fixed_prompt_tokens=16)
    sd = Running(setup("Qwen3-0.6B", "SLOW-E2E", k=3, alpha=0.8, catalog=catalog),
                 fixed_prompt_tokens=16)
    yield dense, sd
    dense.close()
    sd.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tune_command(points, *endpoints, extra=()):
    return [sys.executable, "-m", "bayesspec", "tune", *[a for e in endpoints
                                                          for a in ("--endpoint", e)],
            "--alpha", "0.8", "--rps", "2", "--prompt-tokens", "16", "--output-tokens", "8",
            "--budget-minutes", "6", "-o", str(points), *extra]


# ----------------------------------------------------------------------------- driver

def test_endpoint_options():
    endpoints = endpoints_from_options(["k=0=http://127.0.0.1:8000/v1",
                                        "k=3=http://127.0.0.1:8001"], 0.8)
    assert endpoints[3].alpha == 0.8 and endpoints[0].alpha is None
    assert endpoints[0].host_port == ("127.0.0.1", 8000) and endpoints[0].base_path == ""
    for bad in (["k=x=http://a"], ["3=http://a"], ["k=1=ftp://a"],
                ["k=1=http://a", "k=1=http://b"]):
        with pytest.raises(BadInput):
            endpoints_from_options(bad, None)


def test_summary_of_a_point():
    spec = PointSpec(rate=10.0, requests=40, prompt_tokens=16, output_tokens=9)
    results = [{"sent": i / 10.0, "first": i / 10.0 + 0.05, "end": i / 10.0 + 0.45,
                "tokens": 9, "error": None} for i in range(40)]
    row = summarise(results, spec)
    assert row["n_requests"] == 36                 # the first tenth warms up
    assert row["rps"] == pytest.approx(10.0)
    assert row["latency_mean_s"] == pytest.approx(0.45)
    assert row["itl_mean_s"] == pytest.approx(0.05)
    assert row["saturated"] is False
    growing = [dict(r, end=r["end"] + 0.1 * i) for i, r in enumerate(results)]
    assert summarise(growing, spec)["saturated"] is True


def test_builtin_driver_measures_a_live_point(servers):
    dense, _ = servers
    row, seconds = run_builtin(Endpoint(0, dense.url),
                               PointSpec(rate=5.0, requests=20, prompt_tokens=16,
                                         output_tokens=4))
    assert row["n_requests"] == 18 and row["rps"] == pytest.approx(5.0, rel=0.1)
    assert 0 < row["ttft_mean_s"] < row["latency_mean_s"] < 5 and seconds >= 20 / 5.0 * 0.9


# ----------------------------------------------------------------------------- loop

@pytest.mark.long
def test_unreachable_endpoint_exits_2_after_saving(servers, tmp_path):
    dense, _ = servers
    points = tmp_path / "points.csv"
    # small points: what is checked is the refusal and the points saved before it
    run = subprocess.run(tune_command(points, f"k=0={dense.url}",
                                      f"k=3=http://127.0.0.1:{closed_port()}",
                                      extra=("--seed-requests", "30",
                                             "--burst-requests", "60")),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert "k=3" in lines[-1] and "unreachable" in lines[-1] and "saved" in lines[-1]
    rows = pd.read_csv(points)
    assert len(rows) == 4 and set(rows["k"]) == {0}       # the burst and three seed rates


@pytest.mark.slow
def test_tune_settles_k_star_and_resumes_after_a_kill(servers, tmp_path):
    dense, sd = servers
    points = tmp_path / "points.csv"
    command = tune_command(points, f"k=0={dense.url}", f"k=3={sd.url}",
                           extra=("--fit-out", str(tmp_path / "tuned.nc")))
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if points.exists() and len(pd.read_csv(points)) >= 3:
            break
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(30)
    before = pd.read_csv(points)                    # intact: written atomically
    assert 3 <= len(before) < 8
    run = subprocess.run(command, capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"resuming from {points}: {len(before)} points" in run.stderr
    assert "SETTLED" in run.stdout and "k* at 2 RPS: 3" in run.stdout
    after = pd.read_csv(points)
    assert len(after) >= 8
    pd.testing.assert_frame_equal(after.iloc[: len(before)][before.columns], before,
                                  check_dtype=False)
    # every configuration measured once in the seed design, none twice
    assert (after["source"] == "tune burst").sum() == 2
    assert (tmp_path / "tuned.nc").exists()
    assert np.isfinite(after.loc[~after["saturated"].astype(bool), "latency_mean_s"]).all()
