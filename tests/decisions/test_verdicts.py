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


# ---------------------------------------------------------------------- advice that helps

def test_too_few_rates_get_measure_more_not_run_longer(dense_fit_factory):
    """Two load points per group: a longer run fails the same way, so the verdict says
    which rates to measure instead of 'run longer'."""
    import pandas as pd

    from bayesspec.inference import thin_groups, with_design_advice

    fit = dense_fit_factory(chain_shift={"C1": 1.2})
    assert "run longer" in fit.diagnostics["advice"]
    data = fit.data
    labels = data["group"].unique()
    keep = data["group"].ne(labels[0]) | data["rps"].isin(
        data.loc[data["group"].eq(labels[0]), "rps"].nsmallest(2)) | data["excluded"]
    thin = data.loc[keep].reset_index(drop=True)
    groups = thin_groups(thin)
    assert [g["group"] for g in groups] == [labels[0]]
    assert groups[0]["rates"] == 2 and groups[0]["needed"] == 4
    verdict = with_design_advice(fit.diagnostics, thin)
    assert verdict["status"] == "not converged"
    assert "run longer" not in verdict["advice"] and "run longer" not in verdict["text"]
    assert f"{labels[0]}: measure at least 4 rates between" in verdict["advice"]
    assert verdict["advice"] in verdict["text"]
    # a converged fit keeps its verdict, with the thin groups listed for `fit` to say
    good = with_design_advice(dense_fit_factory().diagnostics, thin)
    assert good["status"] == "converged" and good["thin_groups"] == groups


def _law_table(rows):
    """A tidy table of eq. (1) points: rows of (k, alpha, C1, C2) -> 6 rates each."""
    import pandas as pd

    out = []
    for k, alpha, c1, c2 in rows:
        for rate in np.linspace(0.5, 0.8 / c2, 6):
            out.append({"verifier": "Qwen3-8B", "prefill_tokens": 512, "decode_tokens": 512,
                        "k": k, "alpha": alpha,
                        "drafter": "EAGLE3-Qwen3-8B" if k else "", "rps": rate,
                        "latency_mean_s": c1 / (1 - rate * c2)})
    return pd.DataFrame(out)


@pytest.fixture
def advice_fits(tmp_path, capsys, mock_sampling):
    """Dense (per-configuration) fits of: dense rows only; dense + k 3 without an alpha
    (an llm-d-like file); dense + k 3 at two alphas."""
    paths = {}
    for name, rows in {
            "dense_only": [(0, None, 3.7, 0.04)],
            "no_alpha": [(0, None, 3.7, 0.04), (3, None, 2.4, 0.045)],
            "two_alphas": [(0, None, 3.7, 0.04), (3, 0.7, 2.8, 0.05), (3, 0.8, 2.4, 0.045)]}.items():
        source = tmp_path / f"{name}.csv"
        _law_table(rows).to_csv(source, index=False)
        out = tmp_path / f"{name}.nc"
        code, stdout, stderr = run(capsys, "fit", str(source), "-o", str(out), "--draws",
                                   "20", "--tune", "20", "--chains", "2", "--no-loo")
        assert code == 0, stderr
        paths[name] = (out, stdout)
    return paths


def test_speedup_on_a_fit_per_configuration_uses_or_reports_alpha(advice_fits, capsys):
    """A real llm-d file gave identical numbers at --alpha 0.3 and 0.7: the group has no
    alpha. Not required then, and said to be unused when given."""
    path = str(advice_fits["no_alpha"][0])
    code, plain, err = run(capsys, "speedup", path, "--k", "3", "--rps", "1,2", "--json")
    assert code == 0, err
    code, given, err = run(capsys, "speedup", path, "--k", "3", "--alpha", "0.3", "--rps",
                           "1,2", "--json")
    assert code == 0 and "--alpha 0.3 is not used" in err
    assert json.loads(given)["ignored"].startswith("--alpha 0.3 is not used")
    assert json.loads(given)["points"] == json.loads(plain)["points"]
    code, _, err = run(capsys, "crossover", path, "--k", "3", "--alpha", "0.7")
    assert code == 0 and "--alpha 0.7 is not used" in err
    two = str(advice_fits["two_alphas"][0])
    # two measured acceptances at k 3: each is answered, neither picked silently
    code, out, err = run(capsys, "speedup", two, "--k", "3", "--rps", "1", "--json")
    assert code == 0, err
    answers = json.loads(out)["answers"]
    assert sorted(a["alpha"] for a in answers) == [0.7, 0.8]
    code, _, err = run(capsys, "speedup", two, "--k", "3", "--alpha", "0.8", "--rps", "1")
    assert code == 0 and "not used" not in err


def test_questions_on_a_dense_fit_go_straight_to_the_real_error(advice_fits, capsys):
    only = str(advice_fits["dense_only"][0])
    for argv in (["kstar", only, "--alpha", "0.8", "--rps", "1,2"],
                 ["speedup", only, "--alpha", "0.8", "--k", "3", "--rps", "1"],
                 ["crossover", only, "--alpha", "0.8", "--k", "3"]):
        code, _, err = run(capsys, *argv)
        assert code == 2 and "only dense groups (k = 0)" in err, argv
        assert "Add load tests with speculation" in err
    code, _, err = run(capsys, "kstar", str(advice_fits["two_alphas"][0]), "--alpha", "0.8",
                       "--rps", "1")
    assert code == 2 and "refit the same data with --model speculative" in err


def test_fit_says_which_questions_it_answers(advice_fits):
    only = advice_fits["dense_only"][1]
    assert "questions this fit answers:" in only
    assert "cannot: speedup, crossover, kstar: no speculative groups" in only
    per_configuration = advice_fits["two_alphas"][1]
    assert "speedup, crossover: at the fitted configurations only (alpha 0.7 k 3, alpha " \
           "0.8 k 3)" in per_configuration
    assert "cannot: kstar, other alpha or k: fit --model speculative" in per_configuration
