"""`predict --concurrency` and `kstar --concurrency` on the command line: synthetic fits (no
sampling), the JSON shape, the text table, and one-line refusals of bad levels."""

from __future__ import annotations

import json
import types

import numpy as np
import pandas as pd
import pytest

from bayesspec.cli import deciding, main
from tests.decisions.test_concurrency import closed_loop_fit, coefficient_law


@pytest.fixture(scope="module")
def closed_fit_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("closed") / "closed.nc"
    closed_loop_fit(draws=300).save(path)
    return path


def run(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_predict_concurrency_json_and_text(capsys, closed_fit_path):
    code, out, _ = run(capsys, "predict", closed_fit_path, "--concurrency", "1,8,32,64",
                       "--json")
    assert code == 0
    document = json.loads(out)
    assert document["axis"] == "concurrency"
    points = document["points"]
    assert [p["concurrency"] for p in points] == [1, 8, 32, 64]
    latency = [p["latency_s"]["median"] for p in points]
    assert latency == sorted(latency) and latency[0] == pytest.approx(1.23, rel=0.03)
    for p in points:   # Little's law: N = throughput x latency, per draw, so in medians
        assert p["rps"]["median"] * p["latency_s"]["median"] == pytest.approx(
            p["concurrency"], rel=1e-3)
    assert [p["extrapolated"] for p in points] == [False, False, False, True]
    assert document["convergence"]["status"]
    code, out, _ = run(capsys, "predict", closed_fit_path, "--concurrency", "4,64")
    assert code == 0
    assert "throughput RPS" in out and "64*" in out
    assert "above the highest fitted concurrency (32)" in out


@pytest.mark.parametrize("argv, flag", [
    (["--concurrency", "0"], "--concurrency"),
    (["--concurrency", "2.5"], "--concurrency"),
    (["--concurrency", "many"], "--concurrency"),
    (["--concurrency", "4", "--metric", "p99"], "--metric"),
    (["--concurrency", "4", "--requests", "100"], "--requests"),
])
def test_predict_refuses_bad_levels_in_one_line(capsys, closed_fit_path, argv, flag):
    code, out, err = run(capsys, "predict", closed_fit_path, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and flag in err


def test_rps_and_concurrency_are_one_axis(capsys, closed_fit_path):
    with pytest.raises(SystemExit) as both:
        main(["predict", str(closed_fit_path), "--rps", "1", "--concurrency", "4"])
    assert both.value.code == 2
    with pytest.raises(SystemExit) as neither:
        main(["predict", str(closed_fit_path)])
    assert neither.value.code == 2


class SpeculativeStub:
    """What `kstar` reads of a fit, with a law of synthetic draws: a dense group fitted to
    64 clients, the SD groups (k 1..4 at alpha 0.8) to 32."""

    def __init__(self):
        ks = [0, 1, 2, 3, 4]
        labels = [f"g{k}" for k in ks]
        self.groups = pd.DataFrame({"label": labels, "k": ks, "verifier": "Llama-3.1-8B",
                                    "prefill_tokens": 512, "decode_tokens": 512})
        self.data = pd.DataFrame({"group": labels, "k": ks, "excluded": False,
                                  "max_concurrency": [64, 32, 32, 32, 32]})
        self.diagnostics = {"status": "converged", "converged": True, "text": "converged"}
        self.setups = pd.DataFrame()      # one setup: the question names no other
        self._law = coefficient_law(spread=0.02, seed=3)

    def model(self):
        return types.SimpleNamespace(check_metric=lambda fit, metric: None)

    def law(self, selection, metric=None):
        return self._law


def test_kstar_concurrency_json_and_text(capsys, monkeypatch):
    monkeypatch.setattr(deciding, "load_fit", lambda path: SpeculativeStub())
    code, out, _ = run(capsys, "kstar", "stub.nc", "--alpha", "0.8", "--concurrency",
                       "1,16,32,64", "--kmax", "4", "--json")
    assert code == 0
    document = json.loads(out)
    assert document["axis"] == "concurrency" and document["ks"] == [0, 1, 2, 3, 4]
    rows = document["table"]
    assert [row["concurrency"] for row in rows] == [1, 16, 32, 64]
    for row in rows:
        assert 0 <= row["k"] <= 4 and 0 < row["p_best"] <= 1
        assert row["rps"]["median"] * row["latency_s"]["median"] == pytest.approx(
            row["concurrency"], rel=1e-3)
    # the SD groups were fitted up to 32 clients: 64 is the law's extrapolation
    assert [row["extrapolated"] for row in rows if row["k"] > 0] == \
        [row["concurrency"] > 32 for row in rows if row["k"] > 0]
    code, out, _ = run(capsys, "kstar", "stub.nc", "--alpha", "0.8", "--concurrency",
                       "1,64", "--kmax", "4")
    assert code == 0 and "throughput RPS" in out and "k*" in out


@pytest.mark.parametrize("argv, flag", [
    (["--concurrency", "1,0.5"], "--concurrency"),
    (["--concurrency", "8", "--vllm"], "--vllm"),
    (["--concurrency", "8", "--plot", "k.png"], "--plot"),
])
def test_kstar_refuses_in_one_line(capsys, monkeypatch, argv, flag):
    monkeypatch.setattr(deciding, "load_fit", lambda path: SpeculativeStub())
    code, out, err = run(capsys, "kstar", "stub.nc", "--alpha", "0.8", *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and flag in err


def test_kstar_rate_axis_unchanged(capsys, monkeypatch):
    monkeypatch.setattr(deciding, "load_fit", lambda path: SpeculativeStub())
    code, out, _ = run(capsys, "kstar", "stub.nc", "--alpha", "0.8", "--rps", "1,4",
                       "--kmax", "4", "--json")
    assert code == 0
    table = json.loads(out)["table"]
    assert [row["rps"] for row in table] == [1.0, 4.0]
    assert np.all([isinstance(row["rps"], float) for row in table])
