"""Answers in the configuration measured: the acceptance law "auto" chooses, what it chose
said and stored; speedup, crossover and k* at the data's own acceptance and draft
lengths without --alpha or --k; a what-if --alpha outside the measured acceptance
marked; vLLM's schedule checked against the rules vLLM applies to it.

Fits here are synthetic posterior draws around the simulator's truth (no sampling): the
tests are of which configurations are answered and how they are marked."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from bayesspec.bayes import SpeculativeLatencyModel
from bayesspec.cli import main
from bayesspec.data import prepare
from bayesspec.decisions.schedule import (CONTEXT_MAX, check_vllm_schedule,
                                          context_schedule, contiguous_entries)
from bayesspec.inference.fitfile import Fit
from bayesspec.simulate.synthetic import (add_acceptance_counters, add_position_counters,
                                          generate_sweeps, speculative_truth)


def sweeps(ks=(2, 4), alphas=(0.75,), prefill=512, seed=1):
    truth = speculative_truth(alphas=alphas, ks=ks, prefill_tokens=prefill)
    return generate_sweeps(truth, n_rates=6, seed=seed)


def mock_fit(data: pd.DataFrame, path, **options):
    """:func:`synthetic_fit` of ``data`` saved to ``path``."""
    synthetic_fit(data, **options).save(path)
    return path


def synthetic_fit(data: pd.DataFrame, *, alpha_draws=(0.75, 0.004), draws=200) -> Fit:
    """A speculative fit of ``data`` whose posterior is synthetic draws around the
    simulator's truth (no sampling): the six coefficients and the dense costs within 2%,
    and the acceptance the data measured (a learned alpha per group, or the token
    process's E(k) of a setup) as i.i.d. alpha draws ~ Normal(``alpha_draws``), as
    20,000 drafts a window would pin it."""
    from bayesspec.laws import effective_costs, expected_accepted
    from bayesspec.simulate.synthetic import DENSE_TRUTH_8B, SPECULATIVE_TRUTH_8B

    model_obj = SpeculativeLatencyModel()
    inputs = model_obj.prepare(data)
    groups, setups = inputs.groups, inputs.extras["setups"]
    rng = np.random.default_rng(0)
    shape = (2, draws)

    def around(value, size, sd=0.02):
        return value * np.exp(rng.normal(0.0, sd, size))

    names = ("c1p", "c1v", "c1d", "c2p", "c2v", "c2d")
    posterior = {name: (("chain", "draw", "setup"),
                        around(SPECULATIVE_TRUTH_8B[name], shape + (len(setups),)))
                 for name in names}
    for name in ("C1", "C2"):
        posterior[f"{name}_dense"] = (("chain", "draw", "setup"),
                                      around(DENSE_TRUTH_8B[name], shape + (len(setups),)))
    alpha = np.where(np.isnan(groups["alpha"].to_numpy(float)), alpha_draws[0],
                     groups["alpha"].to_numpy(float))
    c1, c2 = effective_costs(alpha, groups["k"].to_numpy(float), 512.0,
                             *(SPECULATIVE_TRUTH_8B[n] for n in names))
    dense = groups["k"].to_numpy(int) == 0
    c1 = np.where(dense, DENSE_TRUTH_8B["C1"], c1)
    c2 = np.where(dense, DENSE_TRUTH_8B["C2"], c2)
    posterior["C1"] = (("chain", "draw", "group"), around(c1, shape + (len(groups),)))
    posterior["C2"] = (("chain", "draw", "group"), around(c2, shape + (len(groups),)))
    posterior["noise_base"] = (("chain", "draw"), around(0.02, shape, 0.05))
    posterior["noise_load"] = (("chain", "draw"), around(0.02, shape, 0.05))
    latent = groups["alpha_latent"].to_numpy(bool)
    coords = {"chain": [0, 1], "draw": np.arange(draws), "setup": setups["setup"].tolist(),
              "group": groups["label"].tolist()}
    if latent.any():
        posterior["alpha_latent"] = (("chain", "draw", "latent_alpha_group"),
                                     rng.normal(*alpha_draws, shape + (int(latent.sum()),)))
    if model_obj.acceptance_law_used == "token":
        ks = np.arange(17, dtype=float)
        drawn = rng.normal(*alpha_draws, shape + (len(setups), 1))
        posterior["acceptance_length"] = (("chain", "draw", "setup", "draft_length"),
                                          expected_accepted(drawn, ks))
        coords["draft_length"] = np.arange(17)
    stats = xr.Dataset({"diverging": (("chain", "draw"), np.zeros(shape, bool))},
                       coords={"chain": [0, 1], "draw": np.arange(draws)})
    tree = xr.DataTree.from_dict({"posterior": xr.Dataset(posterior, coords=coords),
                                  "sample_stats": stats})
    return Fit.from_sampling(model_obj, data, tree)


@pytest.fixture(scope="module")
def token_fits(tmp_path_factory):
    """Per-position counters, no alpha column: at one k and at two."""
    folder = tmp_path_factory.mktemp("measured")
    one = mock_fit(prepare(add_position_counters(sweeps(ks=(3,)), seed=2)),
                   folder / "one_k.nc")
    two = mock_fit(prepare(add_position_counters(sweeps(), seed=2)), folder / "two_k.nc")
    return one, two


@pytest.fixture(scope="module")
def latent_fit(tmp_path_factory):
    """Acceptance totals only (no per-position counts, no alpha): eq. (3)'s alpha learned
    per group, here pinned near 0.75 as 20,000 drafts a window would."""
    data = prepare(add_acceptance_counters(sweeps(), seed=2))
    return mock_fit(data, tmp_path_factory.mktemp("latent") / "latent.nc")


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def cli_json(capsys, *argv):
    code, out, err = cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


# ------------------------------------------------------------------ the acceptance law "auto"
def resolved(data: pd.DataFrame, **config) -> tuple[str, str]:
    model_obj = SpeculativeLatencyModel(config)
    model_obj.prepare(prepare(data))
    choice = model_obj.resolved.get("acceptance_law", {"value": None, "why": ""})
    return choice["value"], choice["why"]


def test_auto_acceptance_law_is_the_token_process_where_counters_are_per_position():
    assert resolved(add_position_counters(sweeps(), seed=2))[0] == "token"
    law, why = resolved(add_acceptance_counters(sweeps(), seed=2))
    assert law == "iid" and "per-position" in why
    # one token process per setup cannot hold two stated acceptances
    law, why = resolved(add_position_counters(sweeps(alphas=(0.6, 0.8)), seed=2,
                                              drop_alpha=False))
    assert law == "iid" and "several stated alphas" in why
    # options of the i.i.d. law ask for it
    assert resolved(add_position_counters(sweeps(), seed=2), latent_alpha="always")[0] == "iid"
    # set explicitly: no auto choice to report
    model_obj = SpeculativeLatencyModel({"acceptance_law": "iid"})
    model_obj.prepare(prepare(add_position_counters(sweeps(), seed=2)))
    assert "acceptance_law" not in model_obj.resolved


def test_fit_says_once_what_auto_chose_and_the_fit_file_keeps_it(tmp_path, capsys,
                                                                  monkeypatch):
    from bayesspec.bayes import load_fit, workflow

    monkeypatch.setattr(workflow, "fit", lambda data, model, **_: synthetic_fit(data))
    source = tmp_path / "counters.csv"
    add_position_counters(sweeps(), seed=2).to_csv(source, index=False)
    out = tmp_path / "fit.nc"
    code, stdout, stderr = cli(capsys, "fit", source, "--model", "speculative", "-o", out,
                               "--draws", "20", "--tune", "20", "--chains", "2",
                               "--no-loo", "--json")
    assert code == 0, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("auto options:")]
    assert len(lines) == 1 and "acceptance_law = token" in lines[0]
    assert json.loads(stdout)["resolved_options"]["acceptance_law"] == "token"
    assert load_fit(out).auto_choices["acceptance_law"]["value"] == "token"
    assert load_fit(out).model()._token_law()


# ------------------------------------------------------------------ answers without --alpha/--k
def test_counters_only_fit_answers_speedup_crossover_kstar_without_alpha_or_k(token_fits,
                                                                               capsys):
    one_k, two_k = token_fits
    curve = cli_json(capsys, "speedup", one_k, "--rps", "1,4")
    assert curve["k"] == 3 and curve["alpha"] is None
    assert curve["acceptance_source"] == "counters" and len(curve["points"]) == 2
    star = cli_json(capsys, "crossover", one_k)
    assert star["k"] == 3 and star["acceptance_source"] == "counters"
    table = cli_json(capsys, "kstar", one_k, "--rps", "1,4")["table"]
    assert [row["alpha"] for row in table] == [None, None]
    # two measured draft lengths: both answered, never one picked silently
    both = cli_json(capsys, "speedup", two_k, "--rps", "1")
    assert [answer["k"] for answer in both["answers"]] == [2, 4]
    code, text, _ = cli(capsys, "crossover", two_k)
    assert code == 0 and text.count("setup:") == 2
    # --k picks one
    assert cli_json(capsys, "crossover", two_k, "--k", "4")["k"] == 4


def test_learned_alphas_are_answered_each_at_their_own_k(latent_fit, capsys):
    both = cli_json(capsys, "speedup", latent_fit, "--rps", "1")
    answered = {(a["k"], a["acceptance"]) for a in both["answers"]}
    assert answered == {(2, "alpha of the k 2 group from its counters"),
                        (4, "alpha of the k 4 group from its counters")}
    rows = cli_json(capsys, "kstar", latent_fit, "--rps", "1,2")["table"]
    assert len(rows) == 4 and len({row["acceptance"] for row in rows}) == 2


def test_a_stated_alpha_fit_answers_each_measured_configuration(tmp_path, capsys):
    path = mock_fit(prepare(sweeps(alphas=(0.6, 0.8), ks=(3,))), tmp_path / "stated.nc")
    both = cli_json(capsys, "crossover", path)
    assert sorted(a["alpha"] for a in both["answers"]) == [0.6, 0.8]
    rows = cli_json(capsys, "kstar", path, "--rps", "1")["table"]
    assert sorted(row["alpha"] for row in rows) == [0.6, 0.8]


def test_alpha_outside_the_measured_acceptance_is_marked(latent_fit, token_fits, capsys):
    inside = cli_json(capsys, "speedup", latent_fit, "--alpha", "0.75", "--k", "2",
                      "--rps", "0.5")
    assert inside["acceptance_source"] == "what-if"
    assert not inside["measured"]["design_extrapolated"]
    outside = cli_json(capsys, "speedup", latent_fit, "--alpha", "0.9", "--k", "2",
                       "--rps", "0.5")
    assert all(point["extrapolated"] for point in outside["points"])
    assert any("alpha 0.9 is outside the measured acceptance" in note
               for note in outside["measured"]["design_notes"])
    lo, hi = outside["measured"]["alpha_measured"]
    assert 0.7 < lo < 0.75 < hi < 0.8
    star = cli_json(capsys, "crossover", latent_fit, "--alpha", "0.9", "--k", "2")
    assert star["measured"]["design_extrapolated"]
    code, text, _ = cli(capsys, "kstar", latent_fit, "--alpha", "0.9", "--rps", "0.5")
    assert code == 0 and "alpha 0.9 is outside the measured acceptance" in text
    # a fit whose acceptance is the token process takes a what-if alpha too
    one_k, _ = token_fits
    what_if = cli_json(capsys, "speedup", one_k, "--alpha", "0.7", "--rps", "1")
    assert what_if["k"] == 3 and what_if["alpha"] == 0.7


def test_one_measured_configuration_is_one_document_as_before(tmp_path, capsys):
    path = mock_fit(prepare(sweeps(alphas=(0.7,), ks=(2,))), tmp_path / "one.nc")
    curve = cli_json(capsys, "speedup", path, "--rps", "1")
    assert "answers" not in curve and (curve["alpha"], curve["k"]) == (0.7, 2)
    assert curve["acceptance_source"] == "stated"
    # the stated alpha asked again is the measured configuration, not a what-if
    assert cli_json(capsys, "speedup", path, "--rps", "1", "--alpha", "0.7")[
        "acceptance_source"] == "stated"


# ------------------------------------------------------------------ vLLM's schedule
def test_schedule_rules_are_those_vllm_checks():
    check_vllm_schedule([[1, 8, 3], [9, 64, 1], [65, 256, 0]], 3)
    check_vllm_schedule([[1, 8, 1, 1000, 3], [1, 8, 1001, CONTEXT_MAX, 2],
                         [9, 64, 1, 1000, 1], [9, 64, 1001, CONTEXT_MAX, 0]], 3)
    for entries, k_max in (([[2, 8, 3]], 3),                           # not from 1
                           ([[1, 8, 3], [8, 64, 1]], 3),               # overlap
                           ([[1, 8, 3], [10, 64, 1]], 3),              # gap
                           ([[1, 8, 4]], 3),                           # K above the max
                           ([[1, 8, 3], [9, 16, 1, 100, 2]], 3),       # mixed forms
                           ([[1, 8, 1, 100, 3], [1, 8, 101, CONTEXT_MAX, 2],
                             [9, 64, 1, CONTEXT_MAX, 1]], 3),          # not rectangular
                           ([[1, 8, 3.0]], 3),                         # not an integer
                           ([[1, 8, 0]], 0)):                          # K max 0
        with pytest.raises(ValueError):
            check_vllm_schedule(entries, k_max)
    # an empty range dropped, an overlap cut, the result a schedule vLLM takes
    entries = contiguous_entries([[1, 4, 3], [6, 5, 2], [5, 40, 2], [30, 99, 0]])
    assert entries == [[1, 4, 3], [5, 40, 2], [41, 99, 0]]
    check_vllm_schedule(entries, 3)


def test_context_axis_joins_prompt_length_schedules_into_one_vllm_grid():
    bands = [{"prefill_tokens": 4096, "decode_tokens": 256,
              "num_speculative_tokens_per_batch_size": [[1, 4, 2], [5, 512, 0]]},
             {"prefill_tokens": 512, "decode_tokens": 256,
              "num_speculative_tokens_per_batch_size": [[1, 16, 4], [17, 40, 2],
                                                        [41, 1024, 0]]}]
    combined = context_schedule(bands)
    grid = combined["num_speculative_tokens_per_batch_size"]
    check_vllm_schedule(grid, combined["speculative_config"]["num_speculative_tokens"])
    assert combined["speculative_config"]["num_speculative_tokens"] == 4
    short, long = combined["context_bands"]
    assert (short["prefill_tokens"], long["prefill_tokens"]) == (512, 4096)
    assert short["context_min"] == 1 and long["context_max"] == CONTEXT_MAX
    assert short["context_min"] <= 640 <= short["context_max"] < 4224 <= long["context_max"]
    cell = {(e[0], e[2]): e[4] for e in grid}
    assert cell[(1, 1)] == 4 and cell[(1, long["context_min"])] == 2
    assert cell[(5, long["context_min"])] == 0 and cell[(5, 1)] == 4
    assert cell[(41, 1)] == 0


def test_kstar_vllm_json_is_pasteable_with_and_without_the_context_axis(tmp_path, capsys,
                                                                        token_fits):
    one_k, _ = token_fits
    schedule = cli_json(capsys, "kstar", one_k, "--rps", "0.5:12:0.5", "--vllm")["vllm"]
    config = schedule["speculative_config"]
    if "num_speculative_tokens" in config:
        check_vllm_schedule(config["num_speculative_tokens_per_batch_size"],
                            config["num_speculative_tokens"])
        assert all(len(e) == 3 for e in config["num_speculative_tokens_per_batch_size"])
    data = pd.concat([add_position_counters(sweeps(ks=(3,), prefill=p), seed=2)
                      for p in (512, 2048)], ignore_index=True)
    path = mock_fit(prepare(data), tmp_path / "prompts.nc")
    vllm = cli_json(capsys, "kstar", path, "--rps", "0.5:12:0.5", "--vllm")["vllm"]
    assert vllm["context_axis"] and len(vllm["schedules"]) == 2
    assert [b["prefill_tokens"] for b in vllm["context_bands"]] == [512, 2048]
    grid = vllm["num_speculative_tokens_per_batch_size"]
    assert all(len(e) == 5 for e in grid)
    if "num_speculative_tokens" in vllm["speculative_config"]:
        check_vllm_schedule(grid, vllm["speculative_config"]["num_speculative_tokens"])
    code, text, _ = cli(capsys, "kstar", path, "--rps", "0.5:12:0.5", "--vllm")
    assert code == 0 and "ctx_lo, ctx_hi" in text
    # one prompt length asked: its own schedule, no context axis
    single = cli_json(capsys, "kstar", path, "--rps", "0.5:12:0.5", "--vllm",
                      "--prefill", "2048")["vllm"]
    assert "context_axis" not in single and single["ranges"]


def test_slo_judges_the_configuration_the_counters_measured_without_an_alpha():
    """A fit of the configurations (``--model tails``) whose SD group has counters and no
    alpha: `slo` judges it as measured, named by its k alone."""
    from bayesspec.decisions import slo_decision
    from bayesspec.prediction import Curve
    from bayesspec.prediction.setups import ConfigurationLaw

    rng = np.random.default_rng(0)

    def curve(c1, c2):
        fitted = Curve(c1 * np.exp(rng.normal(0, 0.01, 400)),
                       c2 * np.exp(rng.normal(0, 0.01, 400)))
        fitted.rps_fitted_max = 10.0
        return fitted

    law = ConfigurationLaw("Qwen3-8B p512 g512", curve(4.0, 0.035),
                           {(None, 3): curve(2.6, 0.045)})
    document = slo_decision({"mean": law}, law, {"mean": 4.0}, [1.0, 8.0])
    judged = {entry["configuration"]: entry for entry in document["configurations"]}
    assert set(judged) == {"dense (k = 0)", "k = 3"}
    assert judged["k = 3"]["alpha"] is None and judged["k = 3"]["k"] == 3
    # at low load the faster SD configuration is the best one, with no alpha to give
    assert document["best_by_rps"][0]["configuration"] == "k = 3"


def test_report_recommends_at_each_learned_alpha_never_at_an_unmeasured_one(latent_fit):
    """The report's decision of a fit whose acceptance is known only from counters: one
    recommendation per measured acceptance, none at an alpha the data did not give."""
    from bayesspec.bayes import load_fit
    from bayesspec.reporting.pages import _coefficient_setup, _Section

    fit = load_fit(latent_fit)
    section = _Section()
    _coefficient_setup(section, fit, str(latent_fit), {}, fit.law({}), 0.9, False)
    assert [choice["alpha"] for choice in section.choices] == [None, None]
    assert len({choice["label"] for choice in section.choices}) == 2
    assert not any("alpha 0.8" in sentence for sentence in section.decision)
    assert all("from its counters" in sentence for sentence in section.decision)


def test_several_setups_are_each_answered_never_one_picked(tmp_path, capsys):
    """Two drafters of one verifier, each measured at its own k: without group options
    every verb answers both setups."""
    first = sweeps(ks=(3,), alphas=(0.7,))
    second = sweeps(ks=(2,), alphas=(0.8,), seed=2)
    second = second[second["k"] > 0].assign(drafter="EAGLE-other")
    path = mock_fit(prepare(pd.concat([first, second], ignore_index=True)),
                    tmp_path / "two_drafters.nc")
    both = cli_json(capsys, "crossover", path)
    assert sorted((a["k"], a["alpha"]) for a in both["answers"]) == [(2, 0.8), (3, 0.7)]
    assert len({a["setup"] for a in both["answers"]}) == 2
    rows = cli_json(capsys, "kstar", path, "--rps", "1")["table"]
    assert len({row["setup"] for row in rows}) == 2
    schedules = cli_json(capsys, "kstar", path, "--rps", "0.5:8:0.5", "--vllm")["vllm"]
    assert len(schedules) == 2 and len({s["setup"] for s in schedules}) == 2
    # the group options still pick one
    one = cli_json(capsys, "speedup", path, "--rps", "1", "--drafter", "EAGLE-other")
    assert (one["k"], one["alpha"]) == (2, 0.8)
