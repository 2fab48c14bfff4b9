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
    excess, excess_slope = roof_excess_expr(n, cards, 7.0, 146.0, 0.2)
    assert excess[0] == 0.0 and abs(excess_slope[0]) < 1e-15
    assert np.all(np.diff(excess_slope) > 0) and np.all(excess >= 0)


def test_least_root_and_ceiling_agree_with_a_scan(cards):
    c1, c2, k, cycles, bend = 3.0, 0.02, 7.0, 512 / 3.5, 0.1
    grid = np.linspace(0.0, 3000.0, 300001)
    excess, _ = roof_excess_expr(grid, cards, k, cycles, bend)
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
