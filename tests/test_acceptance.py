"""Acceptance by draft position: recovery of a known decay, E(k) for an unmeasured k,
the i.i.d. case, PSIS-LOO between them, and the verb."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from bayesspec.bayes.acceptance import acceptance_report, position_windows
from bayesspec.cli import main
from bayesspec.errors import BadInput
from bayesspec.inference import SamplerSettings
from bayesspec.laws import expected_accepted, expected_accepted_positions_expr
from bayesspec.synthetic import add_position_counters


def windows(decay: float, *, ks=(2, 3, 4), per_k: int = 5, seed: int = 1, alpha=0.84):
    rows = [{"verifier": "Llama-3.1-8B", "drafter": "EAGLE3", "k": k, "alpha": alpha,
             "rps": 1.0 + w, "latency_mean_s": 3.0, "prefill_tokens": 512,
             "decode_tokens": 512} for k in ks for w in range(per_k)]
    return add_position_counters(pd.DataFrame(rows), drafts_per_row=5000, concentration=150,
                                 decay=decay, seed=seed)


def settings(draws: int, tune: int, seed: int) -> SamplerSettings:
    return SamplerSettings(draws=draws, tune=tune, chains=2, seed=seed, progress=False)


def true_conditional(alpha, decay, k_max):
    logit = np.log(alpha / (1 - alpha)) + decay * np.log(np.arange(1, k_max + 1))
    return 1 / (1 + np.exp(-logit))


def test_position_law_is_eq3_when_acceptance_is_iid():
    for alpha in (0.3, 0.8, 0.95):
        lengths = expected_accepted_positions_expr(np.full(7, alpha))
        assert np.allclose(lengths, expected_accepted(alpha, np.arange(8)))
    # the public counters: position rates 0.84, 0.60, 0.39, 0.27 at k = 4
    unconditional = np.array([0.84, 0.60, 0.39, 0.27])
    conditional = unconditional / np.concatenate([[1.0], unconditional[:-1]])
    assert expected_accepted_positions_expr(conditional)[-1] == pytest.approx(3.10)


@pytest.fixture(scope="module")
def decaying_report():
    return acceptance_report(windows(-0.9), k_max=7, settings=settings(400, 500, 3))


def test_decay_is_recovered_and_unmeasured_k_is_predicted(decaying_report):
    report = decaying_report
    assert report["decay_supported"] and report["elpd_difference"] > 10
    setup = report["setups"][0]
    assert setup["k_measured"] == [2, 3, 4]
    decay = setup["decay"]
    assert decay["lo"] <= -0.9 <= decay["hi"]
    truth = true_conditional(0.84, -0.9, 7)
    lengths = expected_accepted_positions_expr(truth)
    for entry in setup["acceptance_length"]:
        assert entry["lo"] <= lengths[entry["k"]] <= entry["hi"], entry
        assert entry["extrapolated"] == (entry["k"] > 4)
    # the i.i.d. law fitted to the same counters would promise more at k = 7
    assert expected_accepted(0.84, 7) > setup["acceptance_length"][-1]["hi"]


def test_iid_counters_do_not_claim_a_decay():
    report = acceptance_report(windows(0.0, seed=2), k_max=5, settings=settings(300, 400, 1))
    assert not report["decay_supported"]
    decay = report["setups"][0]["decay"]
    assert decay["lo"] <= 0.0 <= decay["hi"]


def test_windows_refuse_missing_and_impossible_counters():
    data = windows(-0.5).drop(columns=["accepted_tokens_pos4"])
    with pytest.raises(BadInput, match="accepted_tokens_pos4"):
        position_windows(data)
    data = windows(-0.5)
    data.loc[data.index[-1], "accepted_tokens_pos3"] = 10 ** 7
    with pytest.raises(BadInput, match="must not increase"):
        position_windows(data)
    with pytest.raises(BadInput, match="no speculative rows"):
        position_windows(data.assign(k=0))


def test_acceptance_verb(tmp_path, capsys):
    source = tmp_path / "counters.csv"
    windows(-0.9).to_csv(source, index=False)
    plot = tmp_path / "acceptance.png"
    assert main(["acceptance", str(source), "--k-max", "6", "--draws", "200", "--tune", "300",
                 "--chains", "2", "--json", "--plot", str(plot)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["k_max"] == 6 and plot.exists()
    assert len(document["setups"][0]["acceptance_length"]) == 6
    assert {"decay", "iid"} == set(document["loo"])
    assert main(["acceptance", str(source), "--k-max", "0"]) == 2
    assert "--k-max" in capsys.readouterr().err


@pytest.mark.slow
def test_acceptance_length_coverage_over_replicates():
    """90% intervals of E(k), k = 1..7, from windows at k = 2..4, over 20 replicates."""
    truth = expected_accepted_positions_expr(true_conditional(0.8, -0.7, 7))
    inside = []
    for seed in range(20):
        report = acceptance_report(windows(-0.7, seed=100 + seed, alpha=0.8), k_max=7,
                                   settings=settings(400, 500, seed))
        for entry in report["setups"][0]["acceptance_length"]:
            inside.append(entry["lo"] <= truth[entry["k"]] <= entry["hi"])
    assert 0.8 <= np.mean(inside) <= 0.98, np.mean(inside)
