"""Decisions on synthetic posterior draws (no sampling): the numbers a user acts on
follow from the law's draws, extrapolations are marked, and a missing dense baseline is
said as such.

The laws here are built from draws around the Llama-3.1-8B + EAGLE-3 truth
(bayesspec.simulate.synthetic); expected values come from bayesspec.laws, the single definition
of each formula, evaluated independently of the decision code.
"""

from __future__ import annotations

import numpy as np
import pytest

from bayesspec.decisions.schedule import ASSUMED_MAX_NUM_SEQS
from bayesspec.decisions import crossover, kstar_table, predict_group, speedup_curve
from bayesspec.errors import BadInput
from bayesspec.laws import effective_costs, latency
from bayesspec.prediction import (COEFFICIENT_NAMES, CoefficientLaw, ConfigurationLaw, Curve,
                                  MeasuredConfiguration)
from bayesspec.simulate.synthetic import DENSE_TRUTH_8B, SPECULATIVE_TRUTH_8B

DRAWS = 2000
DECODE = 512.0


def coefficient_law(*, spread: float = 0.03, seed: int = 0, dense: bool = True,
                    dense_fitted_max: float = np.nan, measured=(), cap=None,
                    engine_limits=None) -> CoefficientLaw:
    rng = np.random.default_rng(seed)
    coefficients = {n: SPECULATIVE_TRUTH_8B[n] * np.exp(rng.normal(0, spread, DRAWS))
                    for n in COEFFICIENT_NAMES}
    baseline = Curve(DENSE_TRUTH_8B["C1"] * np.exp(rng.normal(0, spread / 2, DRAWS)),
                     DENSE_TRUTH_8B["C2"] * np.exp(rng.normal(0, spread / 2, DRAWS)),
                     cap=cap)
    baseline.rps_fitted_max = dense_fitted_max
    return CoefficientLaw("8B + EAGLE3 512/512", baseline if dense else None, coefficients,
                          DECODE, measured_configurations=measured,
                          engine_limits=engine_limits)


@pytest.fixture(scope="module")
def law():
    return coefficient_law()


def test_speedup_is_the_ratio_of_the_two_laws_draw_by_draw(law):
    alpha, k, rps = 0.8, 3, np.array([0.5, 2.0, 5.0])
    document = speedup_curve(law, alpha, k, rps, prob=0.9)
    c1, c2 = effective_costs(alpha, k, DECODE, *(law.coefficients[n] for n in
                                                COEFFICIENT_NAMES))
    dense = latency(rps[None, :], law.dense.c1[:, None], law.dense.c2[:, None])
    sd = latency(rps[None, :], c1[:, None], c2[:, None])
    ratio = dense / sd
    for j, point in enumerate(document["points"]):
        assert point["speedup"]["median"] == pytest.approx(np.median(ratio[:, j]), rel=1e-9)
        assert point["p_slower"] == pytest.approx(np.mean(ratio[:, j] < 1))
        lo, hi = np.quantile(ratio[:, j], [0.05, 0.95])
        assert point["speedup"]["lo"] == pytest.approx(lo, rel=1e-6)
        assert point["speedup"]["hi"] == pytest.approx(hi, rel=1e-6)
    assert document["C1R"]["median"] == pytest.approx(np.median(c1 / law.dense.c1))


def test_crossover_is_where_the_two_laws_meet(law):
    document = crossover(law, 0.8, 3)
    star = document["rps_star"]["median"]
    c1, c2 = effective_costs(0.8, 3, DECODE, *(law.coefficients[n] for n in
                                              COEFFICIENT_NAMES))
    # the point-estimate crossing of the median costs lies inside the interval
    c1m, c2m, d1, d2 = (np.median(v) for v in (c1, c2, law.dense.c1, law.dense.c2))
    point = (d1 - c1m) / (d1 * c2m - c1m * d2)
    assert document["rps_star"]["lo"] < point < document["rps_star"]["hi"]
    assert latency(star, d1, d2) == pytest.approx(latency(star, c1m, c2m), rel=0.05)
    assert document["p_crossover"] > 0.9


def test_answers_beyond_the_highest_fitted_rate_are_marked_extrapolated():
    law = coefficient_law(dense_fitted_max=3.0,
                          measured=[MeasuredConfiguration(0.8, 3, 5.0)])
    points = speedup_curve(law, 0.8, 3, [1.0, 3.0, 4.0])["points"]
    assert [p["extrapolated"] for p in points] == [False, False, True]
    document = crossover(law, 0.8, 3)
    assert document["rps_measured_max"] == 3.0
    assert document["extrapolated"] == (document["rps_star"]["median"] > 3.0)
    assert 0.0 <= document["p_beyond_measured"] <= 1.0
    table = kstar_table(law, [0.8], [2.0, 5.0], ks=range(0, 5))["table"]
    assert [row["extrapolated"] for row in table] == [False, True]
    # no fitted ceiling known: no rate is called an extrapolation
    assert not any(p["extrapolated"] for p in
                   speedup_curve(coefficient_law(), 0.8, 3, [50.0])["points"])


def test_the_ceiling_is_the_lower_fitted_rate_of_the_two_curves_compared():
    """A set-aside point of another configuration (k = 2 up to 22 RPS) must not
    lift the ceiling of an answer about dense vs k = 3 (fitted to 7.2 and 10.5 RPS)."""
    law = coefficient_law(dense_fitted_max=7.2, measured=[
        MeasuredConfiguration(0.8, 3, 10.5), MeasuredConfiguration(0.8, 2, 21.98),
        MeasuredConfiguration(0.7, 3, 9.0)])
    measured = law.measured(0.8, 3)
    assert measured["rps_fitted_max"] == 7.2
    assert (measured["dense_rps_fitted_max"], measured["sd_rps_fitted_max"]) == (7.2, 10.5)
    document = crossover(law, 0.8, 3)
    assert document["rps_measured_max"] == 7.2
    # RPS* of these laws lies far above 7.2: it is an extrapolation, and says so
    assert document["rps_star"]["median"] > 7.2 and document["extrapolated"]
    # between two measured alphas at a measured k: measured as far as both were
    assert law.measured(0.75, 3)["sd_rps_fitted_max"] == 9.0
    assert not law.measured(0.75, 3)["design_extrapolated"]


def test_configurations_outside_the_measured_design_are_marked():
    law = coefficient_law(dense_fitted_max=12.0, measured=[
        MeasuredConfiguration(alpha, k, 12.0) for alpha in (0.7, 0.8) for k in (2, 3, 4)])
    inside = speedup_curve(law, 0.8, 3, [1.0, 2.0])
    assert not inside["measured"]["design_extrapolated"]
    assert not any(p["extrapolated"] for p in inside["points"])
    for alpha, k, words in ((0.95, 3, "alpha 0.95 is outside"), (0.8, 5, "k 5 is outside"),
                            (0.8, 1, "k 1 is outside")):
        document = speedup_curve(law, alpha, k, [1.0])
        assert document["measured"]["design_extrapolated"]
        assert any(words in note for note in document["measured"]["design_notes"])
        assert all(p["extrapolated"] for p in document["points"])
    # k* that lands on an unmeasured k is marked on its row, a measured one is not
    table = kstar_table(law, [0.8], [1.0], ks=range(0, 11))["table"]
    row = table[0]
    assert row["extrapolated"] == (row["k"] not in (0, 2, 3, 4))
    if row["extrapolated"]:
        assert any(f"k {row['k']}" in note for note in row["design_notes"])


def test_the_engine_cap_sets_the_ceiling_and_crossover_respects_it():
    """With the engine's concurrency cap the ceiling is the cap's throughput (below
    1/C2), SD saturates there, and a crossover above it does not exist."""
    from bayesspec.laws import ceiling_rps

    limits = {"max_num_seqs": 64, "prefill": 512, "decode": 512}
    capped = coefficient_law(cap=64, engine_limits=limits)
    free = coefficient_law()
    sd_capped, sd_free = capped.sd(0.8, 3), free.sd(0.8, 3)
    assert np.all(sd_capped.ceiling < sd_free.ceiling)
    np.testing.assert_allclose(sd_capped.ceiling,
                               ceiling_rps(sd_capped.c1, sd_capped.c2, 64))
    document = crossover(capped, 0.8, 3)
    assert document["ceiling_binding"] == {"sd": "cap", "dense": "cap"}
    star = capped.crossover_draws(0.8, 3)
    ceiling = np.minimum(capped.dense.ceiling, sd_capped.ceiling)
    assert np.all(~np.isfinite(star) | (star < ceiling))
    # above the SD ceiling SD is saturated in every draw
    above = float(np.max(sd_capped.ceiling)) * 1.01
    point = speedup_curve(capped, 0.8, 3, [above])["points"][0]
    assert point["p_sd_saturated"] == 1.0


def test_kstar_picks_the_k_with_the_highest_expected_speedup(law):
    rates = [0.1, 10.0]
    document = kstar_table(law, [0.8], rates, ks=range(0, 7))
    for row, rate in zip(document["table"], rates):
        expected = [1.0] + [
            np.mean(np.minimum(law.speedup_draws(0.8, k, np.array([rate]))[:, 0], 1e3))
            for k in range(1, 7)]
        assert row["k"] == int(np.argmax(expected))
        assert 0 < row["p_best"] <= 1
        assert row["loss_vs_batch1"] >= 0
    # the batch-1 choice is the k with the lowest zero-load latency
    assert document["table"][0]["k_batch1"] == document["table"][0]["k"]


def test_kstar_at_the_top_of_the_searched_range_is_flagged():
    law = coefficient_law()
    table = kstar_table(law, [0.99], [0.05], ks=range(0, 3))["table"]
    assert table[0]["k"] == 2 and table[0]["at_max_k"]
    table = kstar_table(law, [0.99], [0.05], ks=range(0, 11))["table"]
    assert not table[0]["at_max_k"] or table[0]["k"] == 10


def test_a_missing_dense_baseline_is_named_with_how_to_add_it():
    law = coefficient_law(dense=False)
    for ask in (lambda: speedup_curve(law, 0.8, 3, [1.0]), lambda: crossover(law, 0.8, 3),
                lambda: kstar_table(law, [0.8], [1.0])):
        with pytest.raises(BadInput) as info:
            ask()
        message = str(info.value)
        assert "no dense baseline" in message and "bayesspec simulate" in message
        assert "groups: " not in message


def test_kstar_needs_coefficients_not_only_fitted_configurations():
    rng = np.random.default_rng(1)
    dense = Curve(np.full(100, 4.0), np.full(100, 0.05))
    fitted = {(0.8, 3): Curve(3.0 + rng.normal(0, 0.01, 100), np.full(100, 0.07))}
    law = ConfigurationLaw("one config", dense, fitted)
    assert speedup_curve(law, 0.8, 3, [1.0])["points"][0]["speedup"]["median"] > 1
    with pytest.raises(BadInput, match="six cycle coefficients"):
        kstar_table(law, [0.8], [1.0])


def test_predict_marks_rates_beyond_the_data(dense_fit_factory):
    fit = dense_fit_factory(n_groups=1, draws=200)
    ceiling = float(fit.groups["rps_max"].iloc[0])
    document = predict_group(fit, 0, [0.5 * ceiling, 1.2 * ceiling])
    assert document["rps_measured_max"] == ceiling
    inside, beyond = document["points"]
    assert not inside["extrapolated"] and beyond["extrapolated"]
    band, new = inside["latency_s"], inside["predictive_s"]
    assert band["lo"] <= band["median"] <= band["hi"]
    # a new measurement is at least as uncertain as the mean curve
    assert new["hi"] - new["lo"] >= band["hi"] - band["lo"]
    # the data's highest rate is a throughput run at the ceiling: beyond it, saturated
    assert beyond["p_saturated"] > 0.5


# ------------------------------------------------------------------- vLLM schedule

def test_vllm_schedule_follows_the_expected_best_k_and_littles_law(law):
    from bayesspec.decisions import vllm_schedule

    saturation = 1 / np.median(law.dense.c2)
    rates = np.linspace(0.05, 0.95 * saturation, 50)
    schedule = vllm_schedule(law, 0.6, rates, ks=range(0, 7), min_gain=0.0)
    # with no hysteresis every range holds the k of highest expected speedup
    table = kstar_table(law, [0.6], rates, ks=range(0, 7))["table"]
    best = [row["k"] for row in table]
    for row in schedule["ranges"]:
        inside = [k for k, r in zip(best, rates) if row["rps_min"] <= r <= row["rps_max"]]
        assert set(inside) == {row["k"]}
    # ranges tile the batch sizes from 1 upwards, switch batch = rate x latency of the old k
    ranges = schedule["ranges"]
    assert ranges[0]["batch_min"] == 1 and ranges[-1]["batch_max"] is None
    for before, after in zip(ranges, ranges[1:]):
        assert after["batch_min"] == before["batch_max"] + 1
    for switch in schedule["switches"]:
        j = int(np.flatnonzero(rates == switch["rps"])[0]) - 1
        curve = law.dense if switch["from_k"] == 0 else law.curve(0.6, switch["from_k"])
        expected = rates[j] * np.median(curve.latency(rates[j]))
        assert switch["batch"] == max(1, int(np.ceil(expected)))
    # at alpha 0.6 this setup stops paying under load: speculation is switched off
    assert ranges[-1]["k"] == 0
    config = schedule["speculative_config"]
    entries = config["num_speculative_tokens_per_batch_size"]
    assert config["num_speculative_tokens"] == max(r["k"] for r in ranges)
    # vLLM's form: [start_bs, end_bs, K], contiguous from batch 1, each K within the max
    assert entries[0][0] == 1 and all(a[1] + 1 == b[0] for a, b in zip(entries, entries[1:]))
    assert all(lo <= hi and 0 <= k <= config["num_speculative_tokens"] for lo, hi, k in entries)
    assert [k for _, _, k in entries] == [r["k"] for r in ranges]
    assert entries[-1][2] == 0 and entries[-1][0] == ranges[-1]["batch_min"]
    # the fit does not know the engine's cap: the last range runs to vLLM's default, said so
    assert schedule["batch_max_assumed"] and entries[-1][1] == ASSUMED_MAX_NUM_SEQS


def test_vllm_schedule_hysteresis_merges_switches_that_gain_little(law):
    from bayesspec.decisions import vllm_schedule

    saturation = 1 / np.median(law.dense.c2)
    rates = np.linspace(0.05, 0.95 * saturation, 50)
    eager = vllm_schedule(law, 0.8, rates, min_gain=0.0)
    calm = vllm_schedule(law, 0.8, rates, min_gain=0.1)
    assert len(calm["switches"]) < len(eager["switches"])
    # every switch the calm schedule keeps gains more than 0.1 in expectation
    for switch in calm["switches"]:
        j = int(np.flatnonzero(rates == switch["rps"])[0])
        gain = (np.mean(law.speedup_draws(0.8, switch["to_k"], rates[j:j + 1]))
                - np.mean(law.speedup_draws(0.8, switch["from_k"], rates[j:j + 1])))
        assert gain > 0.1


def test_vllm_schedule_flags_switches_the_data_do_not_pin_down():
    from bayesspec.decisions import vllm_schedule

    sharp, vague = coefficient_law(spread=0.005), coefficient_law(spread=0.15)
    saturation = 1 / np.median(sharp.dense.c2)
    rates = np.linspace(0.05, 0.9 * saturation, 50)
    sharp_switches = vllm_schedule(sharp, 0.8, rates)["switches"]
    vague_switches = vllm_schedule(vague, 0.8, rates)["switches"]
    assert sharp_switches and all(s["pinned"] for s in sharp_switches[:3])
    assert any(not s["pinned"] for s in vague_switches)
    for switch in sharp_switches + vague_switches:
        interval = switch["batch_interval"]
        assert interval["lo"] <= interval["median"] <= interval["hi"]


def test_vllm_schedule_refuses_what_it_cannot_answer():
    from bayesspec.decisions import vllm_schedule

    with pytest.raises(BadInput, match="increasing rates"):
        vllm_schedule(coefficient_law(), 0.8, [1.0, 2.0])
    with pytest.raises(BadInput, match="no dense baseline"):
        vllm_schedule(coefficient_law(dense=False), 0.8, [1.0, 2.0, 3.0])


def test_speedup_draws_are_reused_only_for_the_same_question():
    """`kstar --vllm` asks for the same (draws, k, rates) block twice: the second answer
    is the first's array; any other question, or a law answering from other acceptance,
    computes afresh."""
    law = coefficient_law(seed=3)
    ks, rps = np.arange(1, 5), np.array([1.0, 4.0, 8.0])
    first = law.speedup_draws(0.8, ks, rps)
    assert law.speedup_draws(0.8, ks, rps.copy()) is first
    assert not first.flags.writeable          # shared, so no caller may change it
    assert law.speedup_draws(0.7, ks, rps) is not first
    assert law.speedup_draws(0.8, ks[:3], rps).shape[1] == 3
    again = law.speedup_draws(0.8, ks, rps)
    np.testing.assert_array_equal(again, first)
    lengths = np.tile(1.0 + np.arange(6) * 0.5, (50, 1))
    by_position = law.with_acceptance_lengths(lengths)
    other = by_position.speedup_draws(0.8, ks, rps)
    assert other is not again and not np.allclose(other, again)


# ------------------------------------------------------------------ one notion of "outside"

WALKTHROUGH_DESIGN = [MeasuredConfiguration(alpha, k, 15.0) for alpha in (0.7, 0.8)
                      for k in (2, 3, 4)]


def test_do_not_speculate_at_an_unmeasured_alpha_is_marked_extrapolated():
    """Measured alphas 0.7-0.8: at alpha 0.3 k* = 0 with P(best) near 1 rests on SD's
    law at an acceptance never measured, and says so; at a measured alpha and rate the
    same answer is not marked."""
    law = coefficient_law(dense_fitted_max=16.5, measured=WALKTHROUGH_DESIGN)
    table = kstar_table(law, [0.3, 0.8], [1.0, 8.0], ks=range(0, 11))["table"]
    low = [row for row in table if row["alpha"] == 0.3]
    assert all(row["k"] == 0 and row["p_best"] > 0.8 for row in low)   # the case
    for row in low:
        assert row["extrapolated"]
        assert any("alpha 0.3 is outside the measured acceptance (0.7-0.8)" in note
                   for note in row["design_notes"])
    assert law.measured(0.3, 0)["design_extrapolated"]
    assert not law.measured(None, 0)["design_extrapolated"]     # the dense baseline alone
    assert not law.measured(0.75, 0)["design_extrapolated"]
    measured = [row for row in table if row["alpha"] == 0.8 and row["k"] in (2, 3, 4)]
    assert measured and not any(row["extrapolated"] for row in measured)


def test_every_document_marks_by_the_laws_one_rule():
    """speedup points, the crossover and k* rows are extrapolated exactly where
    Law.extrapolated says, and carry the boundary they were judged against."""
    tops = {2: 16.0, 3: 25.0}
    law = coefficient_law(dense_fitted_max=20.0, measured=[
        MeasuredConfiguration(0.8, k, top) for k, top in tops.items()])
    rates = np.array([2.0, 10.0, 17.0, 21.0])
    for k in (2, 3):
        document = speedup_curve(law, 0.8, k, rates)
        expected = law.extrapolated(rates, 0.8, k)
        assert [p["extrapolated"] for p in document["points"]] == expected.tolist()
        assert document["rps_fitted_max"] == document["rps_measured_max"] == min(20.0,
                                                                                 tops[k])
        star = crossover(law, 0.8, k)
        assert star["extrapolated"] == bool(law.extrapolated(star["rps_star"]["median"],
                                                             0.8, k))
    # k = 2's RPS* (about 17) lies above its own fitted rate and below the dense one's
    star = crossover(law, 0.8, 2)
    assert 16.0 < star["rps_star"]["median"] < 20.0 and star["extrapolated"]
    # k = 3's (about 23) above the dense baseline's, the lower of its two curves' rates
    three = crossover(law, 0.8, 3)
    assert three["rps_fitted_max"] == 20.0 and three["extrapolated"]
    for row in kstar_table(law, [0.8], rates, ks=[0, 2, 3])["table"]:
        assert row["extrapolated"] == bool(law.extrapolated(row["rps"], 0.8, row["k"]))
        assert row["rps_fitted_max"] == law.measured(0.8, row["k"])["rps_fitted_max"]


def test_kstar_over_fitted_configurations_alone():
    """A fit of the configurations (no six coefficients) answers k* among them: the same
    choice as comparing their expected speedups, marked by the same rule."""
    rng = np.random.default_rng(2)
    dense = Curve(4.0 * np.exp(rng.normal(0, 0.01, 400)), 0.05 * np.exp(rng.normal(0, 0.01, 400)))
    dense.rps_fitted_max = 12.0
    fitted = {}
    for k, (c1, c2) in {2: (3.0, 0.06), 4: (2.6, 0.075)}.items():
        curve = Curve(c1 * np.exp(rng.normal(0, 0.01, 400)), c2 * np.exp(rng.normal(0, 0.01, 400)))
        curve.rps_fitted_max = {2: 11.0, 4: 8.0}[k]
        fitted[(0.8, k)] = curve
    law = ConfigurationLaw("configurations", dense, fitted)
    rates = [0.5, 6.0, 10.0]
    table = kstar_table(law, [0.8], rates, ks=[0, 2, 4])["table"]
    for row, rate in zip(table, rates):
        expected = [1.0] + [np.mean(speedup_curve(law, 0.8, k, [rate])["points"][0]["speedup"]
                                    ["mean"]) for k in (2, 4)]
        assert row["k"] == [0, 2, 4][int(np.argmax(expected))]
        assert row["extrapolated"] == bool(law.extrapolated(rate, 0.8, row["k"]))
    with pytest.raises(BadInput, match="six cycle coefficients"):
        kstar_table(law, [0.8], rates, ks=[0, 3])


def test_slo_rows_are_marked_against_the_configurations_they_judge():
    """Per rate the SLO answer is measured as far as the configuration chosen was fitted;
    "none meets it" judges every configuration, so as far as the least fitted one."""
    from bayesspec.decisions import slo_decision

    dense = Curve(np.full(200, 1.0), np.full(200, 0.04))
    dense.rps_fitted_max = 15.0
    sd = Curve(np.full(200, 0.8), np.full(200, 0.06))
    sd.rps_fitted_max = 10.0
    law = ConfigurationLaw("slo", dense, {(0.8, 2): sd})
    # the mean law as the "p99" law: dense meets 2 s up to (1 - 1/2)/0.04 = 12.5 RPS, SD
    # up to (1 - 0.8/2)/0.06 = 10 RPS
    document = slo_decision({"p99": law}, law, {"p99": 2.0}, [4.0, 9.0, 12.0, 19.0])
    rows = {row["rps"]: row for row in document["best_by_rps"]}
    assert rows[4.0]["k"] == 2 and not rows[4.0]["extrapolated"]
    assert rows[12.0]["k"] == 0 and not rows[12.0]["extrapolated"]   # dense, fitted to 15
    assert rows[19.0]["k"] is None and rows[19.0]["extrapolated"]
    assert rows[19.0]["rps_fitted_max"] == 10.0
    entries = {e["k"]: e for e in document["configurations"]}
    assert entries[0]["extrapolated"] == (entries[0]["rps_meeting_slo"] > 15.0)
    assert entries[0]["beyond_fitted"] == entries[0]["extrapolated"]
    assert document["rps_fitted_max"] == document["rps_measured_max"] == 15.0


def test_acceptance_by_position_marks_the_k_its_counters_never_measured():
    """`kstar --acceptance`: E(k) from counters at k = 4 only; an answer at any other k
    rests on the acceptance model's E(k), not on counts, and is marked so."""
    law = coefficient_law(dense_fitted_max=16.5, measured=WALKTHROUGH_DESIGN)
    lengths = np.tile(1.0 + np.cumsum([0.0, 0.84, 0.6, 0.39, 0.27, 0.2, 0.15]), (50, 1))
    counted = law.with_acceptance_lengths(lengths, measured_ks=[4])
    assert not counted.measured(np.nan, 4)["design_extrapolated"]
    notes = counted.measured(np.nan, 3)["design_notes"]
    assert notes == ["the counters measured acceptance at k 4, not at k 3"]
    table = kstar_table(counted, [np.nan], [1.0, 8.0], ks=range(0, 7))["table"]
    for row in table:
        assert row["extrapolated"] == (row["k"] not in (0, 4) or row["rps"] > 15.0)
