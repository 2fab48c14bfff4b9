"""Which groups follow the compute roof, and the fitted roof's answers (plumbing: prior
draws, no sampling)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bayesspec.errors import BadInput


def _sweeps(gpu="H100", verifier="Qwen3-8B", drafter="EAGLE3-Qwen3-8B", **extra):
    rows = []
    for k, alpha in ((0, np.nan), (3, 0.8), (7, 0.8)):
        for i, rps in enumerate((0.5, 3.0, 6.0, 9.0, 12.0)):
            rows.append({"verifier": verifier, "drafter": drafter if k else "", "k": k,
                         "alpha": alpha, "prefill_tokens": 512, "decode_tokens": 256,
                         "rps": rps, "latency_mean_s": (1.9 - 0.08 * k) * (1 + 0.02 * i),
                         "gpu": gpu, **extra})
    from bayesspec.data import prepare

    return prepare(pd.DataFrame(rows), source="<roof test>")


def _prepared(data, model="speculative", **config):
    from bayesspec.bayes import MODEL_CLASSES

    m = MODEL_CLASSES[model](config)
    m.prepare(data)
    return m.inputs.groups, m.inputs.extras["mean_law_note"]


def test_roof_where_the_cards_exist_and_eq1_elsewhere():
    # eq. (1) unless asked: the roof is experimental (docs/findings/compute-roof.md)
    groups, _ = _prepared(_sweeps())
    assert (groups["mean_law"] == "eq1").all()
    groups, note = _prepared(_sweeps(), mean_law="auto")
    assert (groups["mean_law"] == "roof").all() and "compute roof" in note
    assert groups.loc[groups["k"] == 0, "drafter_floor_s"].eq(0).all()
    groups, note = _prepared(_sweeps(gpu="TPU-v9"), mean_law="auto")
    assert (groups["mean_law"] == "eq1").all() and "no card for the GPU TPU-v9" in note
    groups, note = _prepared(_sweeps(), mean_law="eq1")
    assert (groups["mean_law"] == "eq1").all()
    # a stated cap keeps the roof: the roof and the cap are one law
    groups, note = _prepared(_sweeps(max_num_seqs=64), mean_law="auto")
    assert (groups["mean_law"] == "roof").all() and "engine's cap stated in 3" in note
    assert np.isfinite(groups["cap"]).all()
    # without cards a stated cap keeps the slot queue's eq. (1)
    groups, note = _prepared(_sweeps(gpu="TPU-v9", max_num_seqs=64), mean_law="auto")
    assert (groups["mean_law"] == "eq1").all() and "no card for the GPU" in note
    with pytest.raises(BadInput, match="no card for the GPU"):
        _prepared(_sweeps(gpu="TPU-v9"), mean_law="roofline")


def test_dense_model_knows_its_cycles_and_other_laws_keep_eq1():
    groups, _ = _prepared(_sweeps(), model="dense", mean_law="auto")
    sd = groups["k"] == 7
    from bayesspec.laws import expected_accepted

    assert groups.loc[sd, "roof_cycles"].iloc[0] == pytest.approx(
        256 / expected_accepted(0.8, 7))
    groups, _ = _prepared(_sweeps(), model="dense-roofline")
    assert (groups["mean_law"] == "eq1").all()


@pytest.mark.slow   # builds and draws the whole speculative graph: about a minute
def test_fitted_roof_answers_any_k_with_its_curve(mock_sampling):
    from bayesspec.bayes.workflow import fit
    from bayesspec.inference import SamplerSettings
    from bayesspec.prediction import RoofCurve

    result = fit(_sweeps(), "speculative", config={"mean_law": "auto"},
                 settings=SamplerSettings(draws=40, tune=10, chains=1, seed=0, progress=False))
    law = result.law({})
    assert isinstance(law.dense, RoofCurve) and isinstance(law.sd(0.8, 5), RoofCurve)
    ks = np.array([1, 3, 5, 7])
    latency = law.sd(0.8, ks).latency(np.array([1.0, 4.0]))
    assert latency.shape == (40, 4, 2)
    assert isinstance(result.group_curve(2), RoofCurve)
    assert "roof_bend" in result.model().decision_variables()


def test_plain_decoding_alone_stays_on_eq1_unless_asked():
    data = _sweeps()
    dense_only = data.loc[data["k"] == 0]
    groups, note = _prepared(dense_only, model="dense", mean_law="auto")
    assert (groups["mean_law"] == "eq1").all() and "plain decoding only" in note
    groups, _ = _prepared(dense_only, model="dense", mean_law="roofline")
    assert (groups["mean_law"] == "roof").all()


@pytest.mark.slow   # builds the graph and draws from it: about 15 s
def test_a_cap_that_reaches_the_data_enters_the_roofs_likelihood():
    """The graph's mean latency with the roof and a binding cap is the curve's law at the
    same parameters (prior draws, where both are finite)."""
    import pymc as pm

    from bayesspec.bayes import MODEL_CLASSES
    from bayesspec.laws.roofline import (ROOF_CARD_FIELDS, ROOF_COMPUTE_FIELDS,
                                         roof_capped_latency)

    model = MODEL_CLASSES["dense"]({"mean_law": "auto"})
    built = model.build(_sweeps(max_num_seqs=8))
    groups, rows, g = model.inputs.groups, model.inputs.rows, model.inputs.group_index
    assert (groups["mean_law"] == "roof").all()
    assert groups["cap_in_likelihood"].all() and "cap" in built.named_vars
    names = ["C1", "C2", "roof_memory_factor", "roof_compute_factor", "roof_bend"]
    compared = 0
    for seed in range(4):
        *values, mu = pm.draw([built[n] for n in names]
                              + [built["log_latency"].owner.inputs[2]], random_seed=seed)
        c1, c2, memory, compute, bend = values
        roof = {name: groups[name].to_numpy(float)[g]
                * (compute if name in ROOF_COMPUTE_FIELDS else memory)
                for name in ROOF_CARD_FIELDS}
        expected, _, _ = roof_capped_latency(
            rows["rps"].to_numpy(float), c1[g], c2[g], groups["cap"].to_numpy(float)[g],
            roof, groups["k"].to_numpy(float)[g], groups["roof_cycles"].to_numpy(float)[g],
            bend, wait_scale=groups["wait_scale"].to_numpy(float)[g])
        both = np.isfinite(expected) & np.isfinite(mu)
        np.testing.assert_allclose(np.exp(mu)[both], expected[both], rtol=1e-5)
        compared += int(both.sum())
    assert compared >= 8


def test_the_roofs_steps_alone_are_bounded_by_the_light_load_latency():
    """The potential that holds cycles x the step alone within C1 is the numpy bound at
    the same parameters: about zero where the steps fit well within C1, a penalty that
    grows with the excess where they do not."""
    import pymc as pm

    from bayesspec.bayes import MODEL_CLASSES
    from bayesspec.bayes.profile_inputs import LIGHT_LOAD_BOUND_WIDTH
    from bayesspec.laws.roofline import ROOF_CARD_FIELDS, ROOF_COMPUTE_FIELDS, roof_step_expr

    model = MODEL_CLASSES["dense"]({"mean_law": "auto"})
    built = model.build(_sweeps())
    groups = model.inputs.groups
    names = ["C1", "roof_memory_factor", "roof_compute_factor", "roof_bend",
             "roof_floor_within_light_load"]
    draws = pm.draw([built[n] for n in names], draws=12, random_seed=0)
    excesses = []
    for c1, memory, compute, bend, potential in zip(*draws):
        roof = {name: groups[name].to_numpy(float)
                * (compute if name in ROOF_COMPUTE_FIELDS else memory)
                for name in ROOF_CARD_FIELDS}
        alone, _ = roof_step_expr(1.0, roof, groups["k"].to_numpy(float), bend)
        room = np.log(c1) - np.log(groups["roof_cycles"].to_numpy(float) * alone)
        expected = -np.sum(np.logaddexp(0.0, -room / LIGHT_LOAD_BOUND_WIDTH))
        assert potential == pytest.approx(expected, rel=1e-6, abs=1e-9)
        excesses.append((-room.min(), potential))
    for excess, potential in excesses:
        if excess > 0.1:       # a floor 10% past its light-load latency
            assert potential < -3.0
        if excess < -0.2:
            assert potential > -0.01
    assert any(e > 0.1 for e, _ in excesses) and any(e < -0.2 for e, _ in excesses)
