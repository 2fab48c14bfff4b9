"""The compute roof on eq. (1) (docs/findings/compute-roof.md): the least root, its
ceiling, the graph's implicit gradient, and the curve that answers from it."""

from __future__ import annotations

import numpy as np
import pytest

from bayesspec.data.catalog import default_catalog
from bayesspec.laws.roofline import (roof_card_values, roof_ceiling, roof_concurrency_expr,
                                     roof_excess_expr, roof_step_expr)


@pytest.fixture(scope="module")
def cards():
    catalog = default_catalog()
    values = roof_card_values(catalog.model("Qwen3-8B"), catalog.gpu("H100"),
                              catalog.model("EAGLE3-Qwen3-8B"), prefill_tokens=512,
                              decode_tokens=512)
    return {name: np.asarray(1.5 * value) for name, value in values.items()}


def test_step_is_flat_then_steep_and_excess_is_convex(cards):
    batch = np.array([1.0, 8.0, 64.0, 256.0])
    step, slope = roof_step_expr(batch, cards, 7.0, 0.0)
    assert np.all(np.diff(slope) > 0)                       # convex
    assert slope[-1] > 3 * slope[0]       # past the knee: 8 tokens of arithmetic, not a KV read
    eps = 1e-4
    upper, _ = roof_step_expr(batch + eps, cards, 7.0, 0.0)
    np.testing.assert_allclose((upper - step) / eps, slope, rtol=1e-4)
    n = np.array([0.0, 1.0, 10.0, 100.0])
    excess, excess_slope = roof_excess_expr(n, 3.0, 0.02, cards, 7.0, 146.0, 0.2)
    assert excess[0] == 0.0 and abs(excess_slope[0]) < 1e-15
    assert np.all(np.diff(excess_slope) > 0) and np.all(excess >= 0)


def test_the_bend_raises_the_marginal_cost_by_a_bounded_share():
    """Past the knee the bend raises a pass's marginal cost per token, smoothly (its
    slope is the value's derivative), and never by more than bend x reach."""
    from bayesspec.laws.roofline import ROOF_BEND_REACH, roof_pass_expr

    batch = np.geomspace(1.0, 1e6, 25)
    floor, kv, token, bend = 5e-3, 1e-6, 2e-5, 0.1
    value, slope = roof_pass_expr(batch, floor, kv, token, 8.0, bend)
    eps = 1e-6 * batch
    upper, _ = roof_pass_expr(batch + eps, floor, kv, token, 8.0, bend)
    np.testing.assert_allclose((upper - value) / eps, slope, rtol=1e-4)
    plain, plain_slope = roof_pass_expr(batch, floor, kv, token, 8.0, 0.0)
    assert np.all(np.diff(slope) >= -1e-15) and np.all(value >= plain)
    share = slope[-1] / plain_slope[-1] - 1.0
    assert 0.9 * bend * ROOF_BEND_REACH < share <= bend * ROOF_BEND_REACH


def test_least_root_and_ceiling_agree_with_a_scan(cards):
    c1, c2, k, cycles, bend = 3.0, 0.02, 7.0, 512 / 3.5, 0.1
    grid = np.linspace(0.0, 3000.0, 300001)
    excess, _ = roof_excess_expr(grid, c1, c2, cards, k, cycles, bend)
    ceiling = float(roof_ceiling(c1, c2, cards, k, cycles, bend))
    assert ceiling == pytest.approx(np.max(grid / (c1 + c2 * grid + excess)), rel=1e-6)
    assert ceiling < 0.5 / c2                               # the roof, not eq. (1)'s pole
    rates = ceiling * np.array([0.1, 0.5, 0.9, 0.999, 1.001, 1.5])
    n, felt, found = roof_concurrency_expr(rates, c1, c2, cards, k, cycles, bend)
    assert found.tolist() == [True, True, True, True, False, False]
    for rate, root in zip(rates[:4], n[:4]):
        first = grid[np.argmax(rate * (c1 + c2 * grid + excess) - grid <= 0)]
        assert root == pytest.approx(first, abs=0.02)
    assert np.all(np.diff(felt[:4]) > 0) and felt[0] >= c2   # marginal cost grows


def test_graph_root_and_its_implicit_gradient():
    import pytensor
    import pytensor.tensor as pt

    from bayesspec.laws.roofline import ROOF_CARD_FIELDS, roof_concurrency_graph

    catalog = default_catalog()
    values = roof_card_values(catalog.model("Qwen3-8B"), catalog.gpu("H100"),
                              catalog.model("EAGLE3-Qwen3-8B"), prefill_tokens=512,
                              decode_tokens=512)
    factor = pt.dscalar("factor")
    rps = np.array([1.0, 6.0, 10.0])
    roof = {name: values[name] * factor for name in ROOF_CARD_FIELDS}
    n, _ = roof_concurrency_graph(rps, 3.0, 0.02, roof, 7.0, 146.0, 0.1)
    f = pytensor.function([factor], [n, pytensor.grad(n.sum(), factor)],
                          mode="FAST_COMPILE")
    value, gradient = f(1.5)
    expected, _, found = roof_concurrency_expr(
        rps, 3.0, 0.02, {k: np.asarray(v * 1.5) for k, v in values.items()}, 7.0, 146.0, 0.1)
    assert found.all()
    np.testing.assert_allclose(value, expected, rtol=1e-9)
    eps = 1e-6
    upper, _, _ = roof_concurrency_expr(
        rps, 3.0, 0.02, {k: np.asarray(v * (1.5 + eps)) for k, v in values.items()},
        7.0, 146.0, 0.1)
    assert gradient == pytest.approx(float(np.sum(upper - expected) / eps), rel=1e-4)


def test_roof_curve_answers_from_the_law(cards):
    from bayesspec.prediction import RoofCurve

    raw = {name: float(value) / 1.5 for name, value in cards.items()}
    draws = 4
    curve = RoofCurve(np.full(draws, 3.0), np.full(draws, 0.02), cards=raw,
                      memory_factor=np.full(draws, 1.5), compute_factor=np.full(draws, 1.5),
                      bend=np.full(draws, 0.1), k=7.0, cycles=512 / 3.5)
    ceiling = curve.ceiling
    assert ceiling == pytest.approx(np.full(draws, roof_ceiling(3.0, 0.02, cards, 7.0,
                                                                512 / 3.5, 0.1)))
    latency = curve.latency(np.array([1.0, 0.9 * ceiling[0], 1.1 * ceiling[0]]))
    assert latency.shape == (draws, 3)
    assert np.isfinite(latency[:, :2]).all() and np.isinf(latency[:, 2]).all()
    met = curve.rate_meeting(float(latency[0, 1]))
    assert met == pytest.approx(np.full(draws, 0.9 * ceiling[0]), rel=1e-6)
    # eq. (1)'s x/(1-x) at the C2 a point feels: larger than eq. (1)'s own
    rates = np.array([0.9 * ceiling[0]])
    assert np.all(curve.amplification(rates, latency[:, 1:2])
                  > 0.9 * ceiling[0] * 0.02 / (1 - 0.9 * ceiling[0] * 0.02))


def test_roof_curve_shapes_for_several_k(cards):
    from bayesspec.prediction import RoofCurve

    raw = {name: float(value) / 1.5 for name, value in cards.items()}
    draws, ks = 3, np.array([1.0, 3.0, 7.0])
    c1 = np.tile([3.0, 2.6, 2.9], (draws, 1))
    curve = RoofCurve(c1, np.full((draws, 3), 0.02), cards=raw,
                      memory_factor=np.full(draws, 1.5), compute_factor=np.full(draws, 1.5),
                      bend=np.zeros(draws), k=ks, cycles=np.full((draws, 3), 150.0))
    assert curve.latency(2.0).shape == (draws, 3)
    assert curve.latency(np.array([0.0, 2.0])).shape == (draws, 3, 2)
    np.testing.assert_allclose(curve.latency(np.array([0.0, 2.0]))[..., 0], c1)
    ceilings = curve.ceiling
    assert ceilings.shape == (draws, 3) and np.all(np.diff(ceilings[0]) < 0)   # falls with k


# ---------------------------------------------------------------------------------------
# The roof and the engine's cap in one law
# ---------------------------------------------------------------------------------------

ROOF_K, ROOF_CYCLES, ROOF_BEND = 7.0, 512 / 3.5, 0.1


def _capped(rates, cap, cards, c1=3.0, c2=0.02, bend=ROOF_BEND):
    from bayesspec.laws.roofline import roof_capped_latency

    return roof_capped_latency(rates, c1, c2, cap, cards, ROOF_K, ROOF_CYCLES, bend)


def test_roof_with_the_cap_numpy_equals_pytensor(cards):
    import pytensor
    import pytensor.tensor as pt

    from bayesspec.laws.roofline import (roof_capped_ceiling, roof_concurrency_graph,
                                         roof_slot_queue_latency_expr)

    cap = 48.0
    rates = roof_capped_ceiling(3.0, 0.02, cap, cards, ROOF_K, ROOF_CYCLES, ROOF_BEND) \
        * np.array([0.2, 0.6, 0.9, 0.97])
    expected, _, within = _capped(rates, cap, cards)
    assert within.all()
    rps = pt.dvector("rps")
    roof = {name: pt.as_tensor_variable(value) for name, value in cards.items()}
    n, _ = roof_concurrency_graph(rps, 3.0, 0.02, roof, ROOF_K, ROOF_CYCLES, ROOF_BEND)
    law = roof_slot_queue_latency_expr(rps, 3.0, 0.02, cap, roof, ROOF_K, ROOF_CYCLES,
                                       ROOF_BEND, n, xp=pt)
    value = pytensor.function([rps], law, mode="FAST_COMPILE")(rates)
    # two implementations of the incomplete beta (as the slot queue's own test)
    np.testing.assert_allclose(value, expected, rtol=1e-5)
    assert value[-1] > 1.5 * value[0]         # near the cap: the queue, not eq. (1)


def test_roof_with_an_infinite_cap_is_the_roof_law(cards):
    from bayesspec.laws.roofline import roof_slot_queue_latency_expr

    rates = roof_ceiling(3.0, 0.02, cards, ROOF_K, ROOF_CYCLES, ROOF_BEND) \
        * np.array([0.1, 0.5, 0.9, 0.99])
    n, _, found = roof_concurrency_expr(rates, 3.0, 0.02, cards, ROOF_K, ROOF_CYCLES,
                                        ROOF_BEND)
    assert found.all()
    latency, _, _ = _capped(rates, np.inf, cards)
    np.testing.assert_array_equal(latency, n / rates)
    # the formula itself: the slot queue at C1 + R(N) far from its cap is N / RPS
    far = roof_slot_queue_latency_expr(rates, 3.0, 0.02, 1e5, cards, ROOF_K, ROOF_CYCLES,
                                       ROOF_BEND, n)
    np.testing.assert_allclose(far, n / rates, rtol=1e-9)


def test_roof_with_the_cap_and_no_roof_is_the_slot_queue(cards):
    from bayesspec.laws import ceiling_rps, slot_queue_latency_expr
    from bayesspec.laws.roofline import roof_capped_ceiling

    cap = 24.0
    rates = ceiling_rps(3.0, 0.02, cap) * np.array([0.1, 0.5, 0.9, 0.99])
    queue = slot_queue_latency_expr(rates, 3.0, 0.02, cap, wait_scale=0.5)
    # no compute (knee at infinity) and no memory beyond the floor: R = 0
    flat = {name: np.asarray(value)
            * (0.0 if name.endswith(("token_s", "kv_s", "prompt_s")) else 1.0)
            for name, value in cards.items()}
    from bayesspec.laws.roofline import roof_capped_latency

    latency, _, within = roof_capped_latency(rates, 3.0, 0.02, cap, flat, ROOF_K, ROOF_CYCLES,
                                             0.0, wait_scale=0.5)
    assert within.all()
    np.testing.assert_allclose(latency, queue, rtol=1e-12)
    assert float(roof_capped_ceiling(3.0, 0.02, cap, flat, ROOF_K, ROOF_CYCLES, 0.0)) == \
        pytest.approx(float(ceiling_rps(3.0, 0.02, cap)), rel=1e-12)


def test_the_cap_binds_before_the_roofs_peak_and_the_roof_after(cards):
    from bayesspec.laws.roofline import roof_capped_ceiling, roof_full_batch_time_expr

    peak = float(roof_ceiling(3.0, 0.02, cards, ROOF_K, ROOF_CYCLES, ROOF_BEND))
    for cap in (16.0, 48.0, 20000.0):
        ceiling = float(roof_capped_ceiling(3.0, 0.02, cap, cards, ROOF_K, ROOF_CYCLES,
                                            ROOF_BEND))
        full = cap / float(roof_full_batch_time_expr(3.0, 0.02, cap, cards, ROOF_K,
                                                     ROOF_CYCLES, ROOF_BEND))
        latency, _, _ = _capped(ceiling * np.array([0.999, 1.001]), cap, cards)
        assert np.isfinite(latency[0]) and np.isinf(latency[1])   # the law's own edge
        if cap < 100:    # a small batch fills before the roof's peak: its rate binds
            assert ceiling == pytest.approx(full, rel=1e-12) and ceiling < peak
        else:            # the peak comes first: the roof's ceiling, not the fuller batch's
            assert ceiling == pytest.approx(peak, rel=1e-12) and full < peak
    # the cap only ever adds latency
    rates = np.array([2.0, 6.0, 10.0])
    capped, _, _ = _capped(rates, 16.0, cards)
    alone, _, _ = _capped(rates, np.inf, cards)
    assert np.all(capped >= alone) and capped[-1] > 1.05 * alone[-1]


def test_roof_with_the_cap_is_near_the_exact_birth_death_chain(cards):
    """The mean field against the chain in which n requests leave at n / L_roof(n - 1)
    (exact for the Markov queue): within 4% up to nine tenths of the ceiling, on a cap
    that binds before the roof's peak and on one past it."""
    from bayesspec.laws import profile_chain_latency_expr
    from bayesspec.laws.roofline import roof_capped_ceiling

    for cap in (48.0, 160.0):
        ceiling = float(roof_capped_ceiling(1.4, 0.01, cap, cards, ROOF_K, 256 / 3.5, 0.1))
        rates = ceiling * np.array([0.2, 0.5, 0.8, 0.9])
        law, _, _ = roof_capped_latency_at(rates, cap, cards)
        others = np.arange(int(cap)) * 1.0
        extra, _ = roof_excess_expr(others, 1.4, 0.01, cards, ROOF_K, 256 / 3.5, 0.1)
        shape = (len(rates), int(cap))
        chain = profile_chain_latency_expr(rates, np.full(4, 1.4), np.full(4, 0.01),
                                           np.full(4, cap), np.broadcast_to(extra, shape),
                                           np.ones(shape))
        np.testing.assert_allclose(law, chain, rtol=0.04)


def roof_capped_latency_at(rates, cap, cards):
    from bayesspec.laws.roofline import roof_capped_latency

    return roof_capped_latency(rates, 1.4, 0.01, cap, cards, ROOF_K, 256 / 3.5, 0.1)


def test_roof_curve_with_the_cap(cards):
    from bayesspec.laws.roofline import roof_capped_ceiling
    from bayesspec.prediction import RoofCurve

    raw = {name: float(value) / 1.5 for name, value in cards.items()}
    draws = 3
    common = dict(cards=raw, memory_factor=np.full(draws, 1.5),
                  compute_factor=np.full(draws, 1.5), bend=np.full(draws, ROOF_BEND),
                  k=ROOF_K, cycles=ROOF_CYCLES)
    curve = RoofCurve(np.full(draws, 3.0), np.full(draws, 0.02), cap=16.0, wait_scale=0.5,
                      **common)
    open_curve = RoofCurve(np.full(draws, 3.0), np.full(draws, 0.02), **common)
    ceiling = curve.ceiling
    assert ceiling == pytest.approx(np.full(draws, float(roof_capped_ceiling(
        3.0, 0.02, 16.0, cards, ROOF_K, ROOF_CYCLES, ROOF_BEND))))
    assert np.all(ceiling < open_curve.ceiling) and curve.ceiling_binding == "cap"
    far = RoofCurve(np.full(draws, 3.0), np.full(draws, 0.02), cap=2000.0, **common)
    assert far.ceiling_binding == "compute roof"
    assert far.ceiling == pytest.approx(open_curve.ceiling, rel=1e-12)
    rates = np.array([1.0, 0.9 * ceiling[0], 1.01 * ceiling[0]])
    latency = curve.latency(rates)
    assert np.isfinite(latency[:, :2]).all() and np.isinf(latency[:, 2]).all()
    assert np.all(latency[:, :2] >= open_curve.latency(rates[:2]))
    met = curve.rate_meeting(float(latency[0, 1]))
    assert met == pytest.approx(np.full(draws, rates[1]), rel=1e-6)
    amplification = curve.amplification(rates[1:2], latency[:, 1:2])
    assert np.all(np.isfinite(amplification)) and np.all(amplification > 0)
    assert curve.point_c2(rates[1:2], latency[:, 1:2]) * rates[1] == pytest.approx(
        amplification / (1 + amplification))


def test_an_admitted_limit_reads_the_roofs_own_full_batch(cards):
    """The ceiling that admits an unmeasured limit takes a full batch's throughput from
    the roof (eq. (1)'s formula with C2 = 1/ceiling understated it); with no roof it is
    the slot queue's curve's admitted limit exactly."""
    from bayesspec.prediction import Curve, RoofCurve
    from bayesspec.prediction.ceilings import admitted_limit

    raw = {name: float(value) / 1.5 for name, value in cards.items()}
    draws = 4
    common = dict(cards=raw, memory_factor=np.full(draws, 1.5),
                  compute_factor=np.full(draws, 1.5), bend=np.full(draws, ROOF_BEND),
                  k=ROOF_K, cycles=ROOF_CYCLES)
    curve = RoofCurve(np.full(draws, 3.0), np.full(draws, 0.02), cap=48.0, **common)
    batch = curve.batch_reaching(0.6 * curve.ceiling)
    np.testing.assert_allclose(curve.batch_throughput(batch), 0.6 * curve.ceiling,
                               rtol=1e-9)
    past_peak = 1.01 * roof_ceiling(3.0, 0.02, cards, ROOF_K, ROOF_CYCLES, ROOF_BEND)
    assert np.all(np.isinf(curve.batch_reaching(past_peak)))   # no batch is that fast
    top = 0.5 * float(curve.ceiling[0])
    limit = admitted_limit(curve, top)
    assert np.all(limit >= top) and np.all(limit <= curve.ceiling)
    assert np.all(limit > curve.batch_throughput(curve.batch_reaching(top)) - 1e-9)
    flat = {name: value * (0.0 if name.endswith(("token_s", "kv_s", "prompt_s")) else 1.0)
            for name, value in raw.items()}
    no_roof = RoofCurve(np.full(draws, 3.0), np.full(draws, 0.02), cap=48.0,
                        **{**common, "cards": flat, "bend": np.zeros(draws)})
    plain = Curve(np.full(draws, 3.0), np.full(draws, 0.02), cap=48.0)
    np.testing.assert_allclose(admitted_limit(no_roof, 20.0), admitted_limit(plain, 20.0),
                               rtol=1e-9)


def test_prompt_step_is_the_poisson_expectation_of_the_larger_part(cards):
    """The step with m ~ Poisson(mean) prompts: its closed form against the sum over m of
    the larger of the decode pass and its arithmetic with m prompts, its derivatives
    against differences, and the graph's truncated distribution against scipy's."""
    import pytensor.tensor as pt
    from scipy.stats import poisson

    from bayesspec.laws.roofline import _pass_parts, roof_prompt_step

    batch = np.array([1.0, 20.0, 80.0, 300.0])
    mean = np.array([0.02, 0.4, 1.3, 3.0])
    for k in (0.0, 5.0):
        step, d_batch, d_mean = roof_prompt_step(batch, cards, k, 0.1, mean)
        direct = np.zeros_like(batch)
        for m in range(60):
            weight = poisson.pmf(m, mean)
            for floor, kv, token, prompt, tokens in (
                    ("verifier_floor_s", "verifier_kv_s", "verifier_token_s",
                     "verifier_prompt_s", k + 1.0),
                    ("drafter_floor_s", "drafter_kv_s", "drafter_token_s",
                     "drafter_prompt_s", k + 1.0)):
                if k == 0 and floor.startswith("drafter"):
                    continue
                joined, _, compute, _ = _pass_parts(batch, cards[floor], cards[kv],
                                                    cards[token], tokens, 0.1, np, 4.0)
                direct += weight * np.maximum(joined, compute + m * cards[prompt])
        if k:
            later, _, _, _ = _pass_parts(batch, cards["drafter_floor_s"],
                                         cards["drafter_kv_s"], cards["drafter_token_s"],
                                         1.0, 0.1, np, 4.0)
            direct += (k - 1.0) * later
        np.testing.assert_allclose(step, direct, rtol=1e-10)
        eps = 1e-6
        np.testing.assert_allclose(
            (roof_prompt_step(batch * (1 + eps), cards, k, 0.1, mean)[0] - step)
            / (batch * eps), d_batch, rtol=1e-4)
        np.testing.assert_allclose(
            (roof_prompt_step(batch, cards, k, 0.1, mean * (1 + eps))[0] - step)
            / (mean * eps), d_mean, rtol=1e-4)
        graph = [v.eval() for v in roof_prompt_step(
            pt.as_tensor_variable(batch), {n: pt.as_tensor_variable(v)
                                           for n, v in cards.items()},
            k, 0.1, pt.as_tensor_variable(mean), xp=pt)]
        np.testing.assert_allclose(graph, [step, d_batch, d_mean], rtol=1e-10)


def test_prompt_count_is_the_rate_times_the_step_at_the_root(cards):
    """At the law's least root the prompt count is the rate times the step with them
    (Little's law makes N / L the rate); the excess with prompts stays zero with zero
    slope at no load, and with plain decoding the floor hides the prompts more as the
    batch grows: the ceiling passes eq. (1)'s pole."""
    from bayesspec.laws.roofline import roof_prompt_count, roof_prompt_step

    c1, c2, cycles = 3.0, 0.02, 512 / 3.5
    rates = roof_ceiling(c1, c2, cards, 7.0, cycles, 0.1) * np.array([0.1, 0.5, 0.95])
    n, _, found = roof_concurrency_expr(rates, c1, c2, cards, 7.0, cycles, 0.1)
    assert found.all()
    count = roof_prompt_count(n, c1, c2, cards, 7.0, cycles, 0.1)
    step, _, _ = roof_prompt_step(1.0 + n, cards, 7.0, 0.1, count)
    np.testing.assert_allclose(count, rates * step, rtol=1e-9)
    excess, slope = roof_excess_expr(np.array([0.0, 1e-4]), c1, c2, cards, 7.0, cycles, 0.1)
    assert abs(excess[0]) < 1e-15 and abs(slope[0]) < 1e-12
    plain = roof_ceiling(1.5, 0.03, cards, 0.0, 256.0, 0.0)
    assert plain > 1.0 / 0.03


def test_numba_searches_are_the_numpy_ones(cards):
    """The roof's searches compiled by numba (the models nutpie samples) give the numpy
    searches' roots and counts (and a kernel edited since its last compile
    runs its new code: its cache key carries its source's version)."""
    import pytensor
    import pytensor.tensor as pt

    from bayesspec.laws.roofline import roof_concurrency_graph

    rates = pt.dvector("rates")
    # plain decoding, k = 7 past its knee, and a C1 below a request's own steps
    k = np.array([0.0, 0.0, 7.0, 7.0, 7.0, 3.0])
    cycles = np.array([256.0, 256.0, 60.0, 60.0, 60.0, 85.0])
    c1 = np.array([1.8, 1.8, 2.2, 2.2, 2.2, 0.05])
    roof = {name: pt.as_tensor_variable(np.full(6, float(value)))
            for name, value in cards.items()}
    outputs = list(roof_concurrency_graph(rates, c1, 0.03, roof, k, cycles, 0.04))
    at = np.array([3.0, 25.0, 3.0, 12.0, 40.0, 5.0])
    numpy_side = pytensor.function([rates], outputs, mode="FAST_COMPILE")(at)
    numba_side = pytensor.function([rates], outputs, mode="NUMBA")(at)
    for a, b in zip(numpy_side, numba_side):
        np.testing.assert_allclose(b, a, rtol=1e-9)


def test_kernel_version_follows_the_source():
    from bayesspec.laws._numeric import kernel_version

    def first(x):
        return x + 1

    def second(x):
        return x + 2

    assert kernel_version(first) == kernel_version(first)
    assert kernel_version(first) != kernel_version(second)
    assert kernel_version(first, constants={"reach": 4.0}) != kernel_version(
        first, constants={"reach": 5.0})


def test_cards_without_prompts_are_the_decode_tokens_step(cards):
    """Cards without the prompt fields (fits made before the prompts entered the step)
    give the decode tokens' step alone, the law those fits were made with."""
    from bayesspec.laws.roofline import roof_prompt_step

    old = {name: value for name, value in cards.items() if not name.endswith("prompt_s")}
    batch = np.array([1.0, 40.0, 200.0])
    step, slope, per_prompt = roof_prompt_step(batch, old, 5.0, 0.1, np.full(3, 0.7))
    expected, expected_slope = roof_step_expr(batch, old, 5.0, 0.1)
    np.testing.assert_allclose(step, expected, rtol=1e-14)
    np.testing.assert_allclose(slope, expected_slope, rtol=1e-14)
    assert np.all(per_prompt == 0.0)
    excess, _ = roof_excess_expr(np.array([10.0, 100.0]), 3.0, 0.02, old, 5.0, 73.0, 0.1)
    line_step, line_slope = roof_step_expr(np.array([1.0]), old, 5.0, 0.1)
    at, _ = roof_step_expr(np.array([11.0, 101.0]), old, 5.0, 0.1)
    np.testing.assert_allclose(
        excess, 73.0 * (at - line_step - np.array([10.0, 100.0]) * line_slope), rtol=1e-12)
