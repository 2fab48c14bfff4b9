"""Convergence verdicts on what users act on, carried by every verb that answers.

Posteriors here are synthetic draw arrays (tests/conftest.py ``synthetic_dense_fit``):
a chain that sits apart from the other is an unmixed posterior by construction, so the
verdict's three outcomes can be provoked without sampling.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from bayesspec.cli import main
from bayesspec.inference import convergence_verdict


def run(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def spread_draws(shift: float | None = None, draws: int = 1000, seed: int = 5):
    """A pooling spread's draws (2 chains); the second chain ``shift`` times the first."""
    values = 0.3 * np.exp(np.random.default_rng(seed).normal(0, 0.05, (2, draws)))
    if shift is not None:
        values[1] *= shift
    return values


def test_a_well_mixed_posterior_is_converged(dense_fit_factory):
    fit = dense_fit_factory(extra={"log_C1_sd": spread_draws()})
    verdict = fit.diagnostics
    assert verdict["status"] == "converged" and verdict["converged"]
    assert verdict["text"].startswith("converged (R-hat <=")
    assert verdict["advice"] == ""


def test_slow_pooling_spread_is_harmless_when_decision_quantities_converged(
        dense_fit_factory):
    fit = dense_fit_factory(extra={"log_C1_sd": spread_draws(shift=1.5)})
    verdict = fit.diagnostics
    assert verdict["status"] == "decisions converged" and verdict["converged"]
    assert verdict["other"]["worst"] == "log_C1_sd" and verdict["other"]["rhat_max"] > 1.1
    assert verdict["decision"]["rhat_max"] < 1.05
    assert "decision quantities converged" in verdict["text"]
    assert "log_C1_sd mixes slowly" in verdict["text"] and "harmless" in verdict["text"]


def test_an_unmixed_decision_quantity_fails_and_says_what_to_do(dense_fit_factory):
    fit = dense_fit_factory(chain_shift={"C1": 1.2})
    verdict = fit.diagnostics
    assert verdict["status"] == "not converged" and not verdict["converged"]
    assert verdict["decision"]["worst"] == "C1"
    assert "did not converge" in verdict["text"] and "What to do:" in verdict["text"]
    assert verdict["advice"]


def test_divergences_fail_the_fit_whatever_mixed(dense_fit_factory):
    fit = dense_fit_factory(divergences=3)
    verdict = fit.diagnostics
    assert verdict["status"] == "not converged"
    assert verdict["divergences"] == 3
    assert "3 divergent transitions" in verdict["text"]
    assert "--target-accept" in verdict["advice"]


def test_verdict_judges_only_the_named_decision_variables(dense_fit_factory):
    fit = dense_fit_factory(chain_shift={"noise_load": 1.5})
    assert convergence_verdict(fit.tree, ["C1", "C2"])["status"] == "decisions converged"
    assert convergence_verdict(fit.tree, ["C1", "C2", "noise_load"])["status"] == \
        "not converged"


@pytest.fixture
def saved(tmp_path, dense_fit_factory):
    def save(name, **options):
        path = tmp_path / name
        dense_fit_factory(n_groups=1, **options).save(path)
        return str(path)
    return save


@pytest.mark.parametrize("verb", [["summary"], ["predict", "--rps", "0.5,1"]])
def test_answers_from_an_unconverged_fit_carry_the_warning(capsys, saved, verb):
    path = saved("bad.nc", chain_shift={"C2": 1.3})
    code, out, err = run(capsys, verb[0], path, *verb[1:], "--json")
    assert code == 0
    document = json.loads(out)
    assert document["convergence"]["status"] == "not converged"
    assert "did not converge" in document["warning"]
    assert "did not converge" in err


def test_strict_exits_3_on_an_unconverged_fit_and_0_on_a_converged_one(capsys, saved):
    bad, good = saved("bad.nc", chain_shift={"C2": 1.3}), saved("good.nc")
    code, out, err = run(capsys, "predict", bad, "--rps", "1", "--json",
                         "--strict")
    assert code == 3 and "--strict" in err
    assert json.loads(out)["warning"]  # the answer is still printed, flagged
    code, _, _ = run(capsys, "predict", good, "--rps", "1", "--json",
                     "--strict")
    assert code == 0
    code, _, _ = run(capsys, "predict", bad, "--rps", "1", "--json")
    assert code == 0


def test_compare_models_does_not_rank_an_unconverged_fit_without_a_word(
        capsys, saved, monkeypatch):
    """The ranking itself is az.compare's (tested with real fits elsewhere); here: what
    the verb says when one of the ranked fits did not converge."""
    from bayesspec import checks

    good, bad = saved("good.nc"), saved("bad.nc", chain_shift={"C1": 1.2})

    def ranked(fits):
        names = list(fits)
        return {"models": [{"name": n, "rank": i, "elpd_loo": -10.0 * (i + 1), "se": 1.0,
                            "elpd_diff": 10.0 * i, "dse": 1.0, "p_loo": 3.0,
                            "weight": 1.0 - i, "warning": False}
                           for i, n in enumerate(names)],
                "verdict": f"{names[0]} is preferred"}

    monkeypatch.setattr(checks, "compare_models", ranked)
    code, out, err = run(capsys, "compare-models", good, bad, "--json")
    document = json.loads(out)
    assert code == 0
    assert document["verdict"].startswith("not decisive: bad.nc did not converge")
    assert {row["name"]: row["verdict"] for row in document["models"]} == {
        "good.nc": "converged", "bad.nc": "not converged"}
    assert "did not converge" in err
    code, _, _ = run(capsys, "compare-models", good, bad, "--json", "--strict")
    assert code == 3


def test_compare_models_verdict_reads_arviz_negative_differences(monkeypatch):
    """ArviZ 1 gives the worse model a negative elpd_diff; 11 +- 1.5 is clear, not 'within
    2 SE'."""
    import types

    import arviz as az
    import pandas as pd
    import xarray as xr

    from bayesspec import checks, inference

    table = pd.DataFrame({"rank": [0, 1], "elpd": [113.0, 102.0], "se": [1.9, 3.1],
                          "elpd_diff": [0.0, -11.0], "dse": [0.0, 1.5], "p": [6.4, 14.2],
                          "weight": [1.0, 0.0], "warning": [False, False]},
                         index=["sd.nc", "dense.nc"])
    monkeypatch.setattr(az, "compare", lambda trees, var_name: table)
    monkeypatch.setattr(inference, "add_log_likelihood", lambda fit: None)
    points = xr.DataArray(np.zeros((1, 1, 5)), dims=("chain", "draw", "point"))
    fake = types.SimpleNamespace(tree={"log_likelihood": {"log_latency": points}})
    verdict = checks.compare_models({"sd.nc": fake, "dense.nc": fake})["verdict"]
    assert verdict == "sd.nc is preferred over dense.nc by 11.0 +- 1.5 elpd (clear: > 2 SE)"
    table.loc["dense.nc", "elpd_diff"] = -2.0
    verdict = checks.compare_models({"sd.nc": fake, "dense.nc": fake})["verdict"]
    assert verdict.endswith("by 2.0 +- 1.5 elpd (within 2 SE: not decisive)")
