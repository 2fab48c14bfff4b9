"""The closed-form latency laws (docs/CONTRACT.md, ``bayesspec.laws``; docs/laws.md,
eqs. (1) to (4)).

Every expected value here is written independently of :mod:`bayesspec.laws` (plain
``math`` on Python floats, exact sums with ``math.fsum``, the equations as docs/laws.md
prints them), so a slip in the library cannot be mirrored by the test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from bayesspec.laws import (
    crossover_rps,
    effective_costs,
    effective_costs_expr,
    expected_accepted,
    expected_accepted_expr,
    expert_coverage,
    latency,
    moe_latency,
    speedup,
)

PROPERTY = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def pos(lo: float, hi: float):
    """Finite positive floats in [lo, hi] (spread over decades by hypothesis)."""
    return st.floats(min_value=lo, max_value=hi, allow_nan=False, allow_infinity=False)


# ------------------------------------------------------------------ references (plain math)

def ref_latency(rps, c1, c2):
    return c1 / (1.0 - rps * c2)


def ref_expected(alpha: float, k: int) -> float:
    return math.fsum(alpha ** j for j in range(k + 1))


def ref_coverage(tokens: float, m: int, M: int) -> float:
    if tokens == 0:
        return 0.0
    return 1.0 - (1.0 - m / M) ** tokens


def ref_moe_map(L, rps, c1u, c1s, c2u, c2s, m, M, tpr):
    """Right-hand side of eq. (4) with T = rps*L*tokens_per_request."""
    if m == M:  # every expert routed: any token at all covers them (T may underflow)
        phi = 1.0 if rps > 0 and L > 0 and tpr > 0 else 0.0
    else:
        phi = ref_coverage(rps * L * tpr, m, M)
    return (c1u + phi * c1s) / (1.0 - rps * (c2u + phi * c2s))


def ref_least_fixed_point(rps, c1u, c1s, c2u, c2s, m, M, tpr, *, damping=0.8,
                          max_iter=200_000):
    """Damped fixed-point iteration from the phi = 0 latency.

    The map is increasing in L and the start lies below every fixed point, so the
    iterates rise monotonically to the least fixed point.
    """
    L = c1u / (1.0 - rps * c2u)
    for _ in range(max_iter):
        new = (1.0 - damping) * L + damping * ref_moe_map(L, rps, c1u, c1s, c2u, c2s, m, M, tpr)
        if abs(new - L) <= 1e-15 * abs(new):
            return new
        L = new
    return L


# ------------------------------------------------------------------------------ latency

def test_latency_zero_load_is_c1():
    assert latency(0.0, 1.7, 0.05) == 1.7
    assert latency(1e-12, 1.7, 0.05) == pytest.approx(1.7, rel=1e-10)


def test_latency_matches_eq1():
    rps = np.array([0.0, 1.0, 5.0, 9.9])
    np.testing.assert_allclose(latency(rps, 2.0, 0.1), [ref_latency(r, 2.0, 0.1) for r in rps],
                               rtol=1e-14)


@pytest.mark.parametrize("rps, c2", [(10.0, 0.1), (2.0, 0.5), (11.0, 0.1), (1e6, 0.1)])
def test_latency_inf_at_and_past_saturation(rps, c2):
    assert rps * c2 >= 1.0
    value = latency(rps, 2.0, c2)
    assert np.isinf(value) and value > 0


def test_latency_array_inf_only_where_saturated():
    rps = np.array([1.0, 5.0, 10.0, 20.0])
    out = latency(rps, 1.0, 0.1)
    assert np.all(np.isfinite(out[:2])) and np.all(np.isposinf(out[2:]))


def test_latency_broadcasts():
    rps = np.array([0.0, 2.0, 20.0])[:, None, None]
    c1 = np.array([1.0, 3.0])[None, :, None]
    c2 = np.array([0.01, 0.1])
    out = latency(rps, c1, c2)
    assert out.shape == (3, 2, 2)
    assert out[1, 1, 0] == pytest.approx(ref_latency(2.0, 3.0, 0.01), rel=1e-15)
    assert np.isposinf(out[2, :, 1]).all() and np.isfinite(out[2, :, 0]).all()
    assert np.ndim(latency(1.0, 2.0, 0.1)) == 0 and isinstance(latency(1.0, 2.0, 0.1), float)


@PROPERTY
@given(c1=pos(1e-3, 10.0), c2=pos(1e-4, 1.0), a=pos(0.0, 1.2), b=pos(0.0, 1.2))
def test_latency_increasing_in_rps(c1, c2, a, b):
    lo, hi = sorted((a, b))
    r_lo, r_hi = lo / c2, hi / c2
    l_lo, l_hi = latency(r_lo, c1, c2), latency(r_hi, c1, c2)
    assert l_lo <= l_hi
    if r_lo < r_hi and hi < 1.0 and (hi - lo) > 1e-9:
        assert l_lo < l_hi


def test_latency_normalised_collapse():
    """y = L/C1 against x = RPS*C2 is the same curve 1/(1-x) for every (C1, C2)."""
    x = np.linspace(0.0, 0.95, 20)
    for c1, c2 in [(0.3, 0.01), (5.0, 0.2), (40.0, 3.0)]:
        np.testing.assert_allclose(latency(x / c2, c1, c2) / c1, 1.0 / (1.0 - x), rtol=1e-12)


# --------------------------------------------------------------------- expected_accepted

@pytest.mark.parametrize("k", [0, 1, 2, 5, 10, 64])
def test_expected_at_alpha_one_is_k_plus_one(k):
    assert expected_accepted(1.0, k) == k + 1


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.5, 0.99, 1.0 - 1e-12, 1.0])
def test_expected_at_k_zero_is_one(alpha):
    assert expected_accepted(alpha, 0) == 1.0


def test_expected_at_k_zero_ignores_missing_alpha():
    assert expected_accepted(np.nan, 0) == 1.0


@pytest.mark.parametrize("k", [0, 1, 2, 3, 7, 10, 50, 200])
@pytest.mark.parametrize("alpha", [0.0, 0.05, 0.5, 0.8, 0.95, 1.0 - 1e-6, 1.0 - 1e-9,
                                   1.0 - 1e-12, 1.0 - 1e-15])
def test_expected_matches_exact_sum(alpha, k):
    assert expected_accepted(alpha, k) == pytest.approx(ref_expected(alpha, k), rel=1e-12)


def test_expected_accurate_next_to_one():
    """The naive (1 - a^(k+1))/(1 - a) keeps only ~4 digits here; the law must keep all."""
    alpha = 1.0 - 1e-12
    for k in (1, 4, 10):
        exact = ref_expected(alpha, k)
        assert abs(expected_accepted(alpha, k) - exact) <= 1e-14 * exact


def test_expected_matches_closed_form_away_from_one():
    alpha = np.linspace(0.0, 0.9, 10)[:, None]
    k = np.arange(0, 11)[None, :]
    np.testing.assert_allclose(expected_accepted(alpha, k), (1 - alpha ** (k + 1)) / (1 - alpha),
                               rtol=1e-13)


@PROPERTY
@given(a=pos(0.0, 1.0), b=pos(0.0, 1.0), k=st.integers(1, 30))
def test_expected_increasing_in_alpha(a, b, k):
    lo, hi = sorted((a, b))
    e_lo, e_hi = expected_accepted(lo, k), expected_accepted(hi, k)
    assert e_lo <= e_hi
    if hi - lo > 1e-9:
        assert e_lo < e_hi
    assert 1.0 <= e_lo <= k + 1 and 1.0 <= e_hi <= k + 1


@PROPERTY
@given(alpha=pos(0.0, 1.0), k=st.integers(0, 40))
def test_expected_increasing_in_k(alpha, k):
    e_k, e_next = expected_accepted(alpha, k), expected_accepted(alpha, k + 1)
    assert e_k <= e_next
    increment = alpha ** (k + 1)
    if increment > 1e-12 * e_next:  # else the step is below float resolution
        assert e_k < e_next
    assert e_next - e_k == pytest.approx(increment, rel=1e-9, abs=8 * np.spacing(e_next))


def test_expected_broadcasts():
    alpha = np.array([0.5, 0.8, 1.0])
    k = np.arange(4)[:, None]
    out = expected_accepted(alpha, k)
    assert out.shape == (4, 3)
    for i in range(4):
        for j in range(3):
            assert out[i, j] == pytest.approx(ref_expected(alpha[j], i), rel=1e-13)
    assert np.ndim(expected_accepted(0.5, 3)) == 0


# ----------------------------------------------------------------------- effective_costs

COEFFS = dict(c1p=0.05, c1v=0.011, c1d=0.0017, c2p=0.004, c2v=3e-4, c2d=2e-5)


def ref_effective(alpha, k, g, c1p, c1v, c1d, c2p, c2v, c2d):
    e = ref_expected(alpha, k)
    return c1p + (g / e) * (c1v + k * c1d), c2p + (g / e) * (c2v + k * c2d)


@pytest.mark.parametrize("alpha, k, g", [(0.5, 1, 256), (0.8, 3, 512), (0.95, 7, 1024),
                                         (1.0, 5, 768), (0.0, 4, 256), (0.7, 10, 300)])
def test_effective_costs_eq3(alpha, k, g):
    c1, c2 = effective_costs(alpha, k, g, **COEFFS)
    r1, r2 = ref_effective(alpha, k, g, **COEFFS)
    assert c1 == pytest.approx(r1, rel=1e-12)
    assert c2 == pytest.approx(r2, rel=1e-12)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0, np.nan])
def test_effective_costs_dense_at_k_zero(alpha):
    g = 512
    c1, c2 = effective_costs(alpha, 0, g, **COEFFS)
    assert c1 == pytest.approx(COEFFS["c1p"] + g * COEFFS["c1v"], rel=1e-14)
    assert c2 == pytest.approx(COEFFS["c2p"] + g * COEFFS["c2v"], rel=1e-14)


def test_effective_costs_broadcast():
    alpha = np.array([0.5, 0.7, 0.9])[None, :, None]
    k = np.arange(1, 5)[:, None, None]
    g = np.array([256.0, 1024.0])
    c1, c2 = effective_costs(alpha, k, g, **COEFFS)
    assert c1.shape == c2.shape == (4, 3, 2)
    r1, r2 = ref_effective(0.7, 3, 1024.0, **COEFFS)
    assert c1[2, 1, 1] == pytest.approx(r1, rel=1e-12)
    assert c2[2, 1, 1] == pytest.approx(r2, rel=1e-12)
    one = effective_costs(0.7, 3, 1024.0, **COEFFS)
    assert np.ndim(one[0]) == 0 and np.ndim(one[1]) == 0


def test_effective_costs_verifier_term_does_not_scale_with_k():
    """At alpha = 1 every cycle commits k+1 tokens; with no drafter cost C1 falls as 1/(k+1)."""
    coeffs = dict(COEFFS, c1d=0.0, c2d=0.0)
    k = np.arange(0, 6)
    c1, _ = effective_costs(1.0, k, 600.0, **coeffs)
    np.testing.assert_allclose(c1, coeffs["c1p"] + 600.0 / (k + 1) * coeffs["c1v"], rtol=1e-13)


# ------------------------------------------------------------------------- pytensor path

def test_pytensor_expected_accepted_matches_numpy():
    pt = pytest.importorskip("pytensor.tensor")
    alpha = np.array([0.0, 0.2, 0.5, 0.9, 0.999, 1.0 - 1e-9, 1.0 - 1e-12, 1.0])
    k = np.arange(0, 9, dtype=float)[:, None]
    got = expected_accepted_expr(pt.as_tensor(alpha), pt.as_tensor(k), xp=pt).eval()
    np.testing.assert_allclose(got, expected_accepted(alpha, k), rtol=1e-12)
    scalar = expected_accepted_expr(pt.as_tensor(0.8), pt.as_tensor(4.0), xp=pt).eval()
    assert float(scalar) == pytest.approx(ref_expected(0.8, 4), rel=1e-13)


def test_pytensor_effective_costs_match_numpy():
    pt = pytest.importorskip("pytensor.tensor")
    alpha = np.array([0.0, 0.55, 0.8, 0.95, 1.0])
    k = np.arange(0, 6, dtype=float)[:, None]
    g = np.array([256.0, 1024.0])[:, None, None]
    coeffs = {name: pt.as_tensor(value) for name, value in COEFFS.items()}
    c1, c2 = effective_costs_expr(pt.as_tensor(alpha), pt.as_tensor(k), pt.as_tensor(g),
                                  xp=pt, **coeffs)
    n1, n2 = effective_costs(alpha, k, g, **COEFFS)
    np.testing.assert_allclose(c1.eval(), n1, rtol=1e-12)
    np.testing.assert_allclose(c2.eval(), n2, rtol=1e-12)


# ------------------------------------------------------------------------------- speedup

def ref_speedup_eq2(rps, c1d, c2d, c1s, c2s):
    c1r, c2r = c1s / c1d, c2s / c2d
    r = rps * c2d
    return (1.0 / c1r) * (1.0 + (1.0 - c2r) * r / (1.0 - r))


@PROPERTY
@given(c1d=pos(1e-2, 20.0), c2d=pos(1e-3, 1.0), c1r=pos(0.05, 3.0), c2r=pos(0.05, 5.0),
       u=pos(0.0, 0.98))
def test_speedup_is_eq2(c1d, c2d, c1r, c2r, u):
    c1s, c2s = c1r * c1d, c2r * c2d
    rps = u / max(c2d, c2s)  # below both saturation rates
    got = speedup(rps, c1d, c2d, c1s, c2s)
    assert got == pytest.approx(ref_speedup_eq2(rps, c1d, c2d, c1s, c2s), rel=1e-9)
    assert got == pytest.approx(ref_latency(rps, c1d, c2d) / ref_latency(rps, c1s, c2s),
                                rel=1e-12)


def test_speedup_zero_load_is_inverse_c1_ratio():
    assert speedup(0.0, 2.0, 0.1, 0.8, 0.15) == pytest.approx(2.0 / 0.8, rel=1e-15)


def test_speedup_past_saturation():
    # SD saturates first (C2R > 1): speedup 0; dense saturates first: inf.
    assert speedup(8.0, 2.0, 0.1, 1.0, 0.2) == 0.0
    assert np.isposinf(speedup(12.0, 2.0, 0.1, 1.0, 0.05))
    assert np.isnan(speedup(100.0, 2.0, 0.1, 1.0, 0.2))


def test_speedup_broadcasts():
    rps = np.linspace(0.0, 4.0, 5)[:, None]
    c1s = np.array([0.5, 1.0, 1.5])
    out = speedup(rps, 2.0, 0.1, c1s, 0.12)
    assert out.shape == (5, 3)
    assert out[2, 1] == pytest.approx(ref_speedup_eq2(2.0, 2.0, 0.1, 1.0, 0.12), rel=1e-12)


# ------------------------------------------------------------------------------ crossover

def test_crossover_closed_form():
    c1d, c2d, c1s, c2s = 2.0, 0.1, 1.0, 0.2  # C1R = 0.5, C2R = 2
    r_star = (0.5 - 1.0) / (0.5 - 2.0)
    assert crossover_rps(c1d, c2d, c1s, c2s) == pytest.approx(r_star / c2d, rel=1e-14)
    assert speedup(r_star / c2d, c1d, c2d, c1s, c2s) == pytest.approx(1.0, abs=1e-12)


@PROPERTY
@given(c1d=pos(1e-2, 20.0), c2d=pos(1e-3, 1.0), c1r=pos(0.02, 0.999), c2r=pos(1.001, 20.0))
def test_crossover_round_trip_when_sd_gain_decays(c1d, c2d, c1r, c2r):
    """C1R < 1 < C2R: a crossover exists below saturation and speedup there is 1."""
    c1s, c2s = c1r * c1d, c2r * c2d
    star = crossover_rps(c1d, c2d, c1s, c2s)
    assert np.isfinite(star)
    assert 0.0 < star * c2d < 1.0 and star * c2s < 1.0
    assert speedup(star, c1d, c2d, c1s, c2s) == pytest.approx(1.0, abs=1e-9)
    assert star == pytest.approx((c1r - 1.0) / (c1r - c2r) / c2d, rel=1e-9)
    # SD faster just below, slower just above
    assert speedup(0.5 * star, c1d, c2d, c1s, c2s) > 1.0
    above = star + 0.5 * (min(1.0 / c2d, 1.0 / c2s) - star)
    assert speedup(above, c1d, c2d, c1s, c2s) < 1.0


@PROPERTY
@given(c1d=pos(1e-2, 20.0), c2d=pos(1e-3, 1.0), c1r=pos(0.02, 5.0), c2r=pos(0.02, 5.0))
@example(c1d=1.0, c2d=1.0, c1r=1.375, c2r=0.9999999999999999)
def test_crossover_round_trip_any_ratios(c1d, c2d, c1r, c2r):
    """Finite crossover <=> speedup - 1 changes sign below both saturation rates."""
    c1s, c2s = c1r * c1d, c2r * c2d
    star = crossover_rps(c1d, c2d, c1s, c2s)
    ceiling = min(1.0 / c2d, 1.0 / c2s)
    grid = ceiling * np.linspace(0.0, 1.0, 401)[1:-1]
    excess = speedup(grid, c1d, c2d, c1s, c2s) - 1.0
    if np.isfinite(star):
        assert 0.0 < star < ceiling
        if star < (1.0 - 1e-6) * ceiling:  # closer, r/(1-r) amplifies rounding past 1e-9
            assert speedup(star, c1d, c2d, c1s, c2s) == pytest.approx(1.0, abs=1e-9)
    else:
        # allow the grid to touch 1 only within rounding when the curve grazes it
        assert np.all(excess >= -1e-9) or np.all(excess <= 1e-9)


@pytest.mark.parametrize("c1r, c2r, why", [
    (0.5, 1.0, "C1R < 1, C2R = 1: flat speedup 1/C1R > 1"),
    (0.5, 0.8, "C1R < 1, C2R < 1, C1R < C2R: r* >= 1, past saturation"),
    (0.6, 0.3, "both < 1, C2R < C1R: r* < 0"),
    (0.7, 0.7, "equal ratios: speedup constant"),
    (1.5, 2.0, "both > 1: SD always slower, r* < 0"),
    (2.0, 1.5, "both > 1, C2R < C1R: r* >= 1"),
    (1.0, 2.0, "C1R = 1: crossover at zero load, not inside the range"),
])
def test_crossover_nan_without_crossing(c1r, c2r, why):
    c1d, c2d = 2.0, 0.1
    star = crossover_rps(c1d, c2d, c1r * c1d, c2r * c2d)
    assert np.isnan(star), why


def test_crossover_r_star_at_or_above_one_is_nan():
    # C1R = 0.5, C2R = 0.75 -> r* = (0.5 - 1)/(0.5 - 0.75) = 2 >= 1
    assert np.isnan(crossover_rps(2.0, 0.1, 1.0, 0.075))
    # C1R = 0.5, C2R = 0 (limit) -> r* = 1 exactly
    assert np.isnan(crossover_rps(2.0, 0.1, 1.0, 1e-300))


def test_crossover_broadcasts():
    c2s = np.array([0.05, 0.1, 0.2, 0.4])
    c1s = np.array([1.0, 3.0])[:, None]
    out = crossover_rps(2.0, 0.1, c1s, c2s)
    assert out.shape == (2, 4)
    assert np.isnan(out[0, :2]).all() and np.isfinite(out[0, 2:]).all()
    assert np.isnan(out[1, 2:]).all()  # C1R = 1.5 > 1 and C2R > 1: SD always slower
    assert np.isfinite(out[1, 0])      # C1R > 1 > C2R: SD becomes faster past r*
    assert speedup(out[1, 0], 2.0, 0.1, 3.0, 0.05) == pytest.approx(1.0, abs=1e-12)
    assert np.ndim(crossover_rps(2.0, 0.1, 1.0, 0.2)) == 0


# ------------------------------------------------------------------------ expert_coverage

@pytest.mark.parametrize("m, M", [(4, 32), (8, 128), (1, 1), (32, 32), (0, 16)])
def test_coverage_zero_tokens_is_zero(m, M):
    assert expert_coverage(0.0, m, M) == 0.0


@pytest.mark.parametrize("m, M", [(4, 32), (8, 128), (1, 2)])
def test_coverage_many_tokens_is_one(m, M):
    assert expert_coverage(1e5, m, M) == pytest.approx(1.0, abs=1e-12)
    assert expert_coverage(np.inf, m, M) == 1.0


@pytest.mark.parametrize("tokens", [1, 2, 3.5, 100])
def test_coverage_all_experts_is_one(tokens):
    assert expert_coverage(tokens, 32, 32) == 1.0


@pytest.mark.parametrize("tokens", [0.5, 1, 2, 7, 64, 300])
@pytest.mark.parametrize("m, M", [(4, 32), (8, 128), (1, 3), (0, 8)])
def test_coverage_values(tokens, m, M):
    assert expert_coverage(tokens, m, M) == pytest.approx(ref_coverage(tokens, m, M),
                                                          rel=1e-12, abs=1e-300)


def test_coverage_one_token_is_share_routed():
    assert expert_coverage(1, 4, 32) == pytest.approx(4 / 32, rel=1e-15)
    assert expert_coverage(1, 8, 128) == pytest.approx(8 / 128, rel=1e-15)


def test_coverage_tiny_share_keeps_digits():
    # 1 - (1 - 1e-12)^3 computed naively loses every digit but ~4
    assert expert_coverage(3, 1, 1e12) == pytest.approx(3e-12, rel=1e-9)


def test_coverage_broadcasts_and_increases():
    tokens = np.arange(0, 50)[:, None]
    out = expert_coverage(tokens, np.array([4, 8]), np.array([32, 128]))
    assert out.shape == (50, 2)
    assert np.all(np.diff(out, axis=0) > 0)
    assert np.all((out >= 0) & (out < 1))


def test_coverage_rejects_impossible_counts():
    with pytest.raises(ValueError):
        expert_coverage(3, 40, 32)
    with pytest.raises(ValueError):
        expert_coverage(3, 4, 0)


# ---------------------------------------------------------------------------- moe_latency

GPT_OSS = dict(c1u=0.8, c1s=1.6, c2u=0.02, c2s=0.05, m=4, M=32)


def moe_residual(L, rps, c1u, c1s, c2u, c2s, m, M, tpr=1.0):
    return abs(ref_moe_map(L, rps, c1u, c1s, c2u, c2s, m, M, tpr) - L) / L


@pytest.mark.parametrize("rps", [0.0, 0.5, 2.0, 5.0, 10.0, 13.0, 14.2])
@pytest.mark.parametrize("tpr", [1.0, 4.0])
def test_moe_fixed_point_residual(rps, tpr):
    L = moe_latency(rps, tokens_per_request=tpr, **GPT_OSS)
    assert np.isfinite(L)
    assert moe_residual(float(L), rps, tpr=tpr, **GPT_OSS) < 1e-9


def test_moe_zero_load_is_uncovered_c1():
    assert moe_latency(0.0, **GPT_OSS) == pytest.approx(GPT_OSS["c1u"], rel=1e-12)
    assert moe_latency(0.0, 0.8, 1.6, 0.02, 0.05, 32, 32) == pytest.approx(0.8, rel=1e-12)


@pytest.mark.parametrize("rps", [0.0, 1.0, 10.0, 40.0, 49.9])
def test_moe_without_split_is_dense_law(rps):
    assert moe_latency(rps, 0.8, 0.0, 0.02, 0.0, 4, 32) == pytest.approx(
        ref_latency(rps, 0.8, 0.02), rel=1e-12)


@pytest.mark.parametrize("rps", [1.0 / 0.07, 15.0, 100.0])
def test_moe_inf_past_saturation(rps):
    assert rps * (GPT_OSS["c2u"] + GPT_OSS["c2s"]) >= 1.0
    assert np.isposinf(moe_latency(rps, **GPT_OSS))


@pytest.mark.parametrize("rps", [5e-324, 1.1125369292536007e-308, 1e-300, 1e-200])
@pytest.mark.parametrize("m", [0, 1])
def test_moe_tiny_load_is_uncovered_c1(rps, m):
    """Vanishing load (down to subnormal rates) is the zero-load limit, not nan."""
    assert moe_latency(rps, 1.0, 2.0, 1.0, 1.0, m, 2) == pytest.approx(1.0, rel=1e-12)
    # every expert routed: any token covers them all, phi = 1 at any positive load
    assert moe_latency(rps, 1.0, 2.0, 1.0, 1.0, 2, 2) == pytest.approx(3.0, rel=1e-12)


def test_moe_all_experts_is_phi_one():
    L = moe_latency(5.0, 0.8, 1.6, 0.02, 0.05, 32, 32)
    assert L == pytest.approx(ref_latency(5.0, 2.4, 0.07), rel=1e-12)


def test_moe_between_phi_zero_and_phi_one():
    rps = np.linspace(0.0, 14.0, 29)
    L = moe_latency(rps, **GPT_OSS)
    low = latency(rps, GPT_OSS["c1u"], GPT_OSS["c2u"])
    high = latency(rps, GPT_OSS["c1u"] + GPT_OSS["c1s"], GPT_OSS["c2u"] + GPT_OSS["c2s"])
    assert np.all(low <= L * (1 + 1e-12)) and np.all(L <= high * (1 + 1e-12))
    assert np.all(np.diff(L) > 0)  # latency increases with load


def test_moe_vectorised_over_shapes():
    rps = np.array([0.5, 3.0, 9.0])[:, None, None]      # (3, 1, 1)
    c1s = np.array([0.4, 1.6])[None, :, None]            # (1, 2, 1)
    tpr = np.array([1.0, 2.0, 5.0, 11.0])                # (4,)
    out = moe_latency(rps, 0.8, c1s, 0.02, 0.05, 4, 32, tokens_per_request=tpr)
    assert out.shape == (3, 2, 4)
    for i, r in enumerate(rps.ravel()):
        for j, s in enumerate(c1s.ravel()):
            for n, t in enumerate(tpr):
                one = moe_latency(r, 0.8, s, 0.02, 0.05, 4, 32, tokens_per_request=t)
                assert np.ndim(one) == 0
                assert out[i, j, n] == pytest.approx(float(one), rel=1e-12)
                assert moe_residual(out[i, j, n], r, 0.8, s, 0.02, 0.05, 4, 32, t) < 1e-9


def test_moe_mixed_saturated_and_not():
    rps = np.array([1.0, 20.0, 5.0])
    out = moe_latency(rps, **GPT_OSS)
    assert np.isfinite(out[[0, 2]]).all() and np.isposinf(out[1])


def test_moe_least_fixed_point_when_several_exist():
    """Eq. (4) can have three fixed points; the served latency is the least one (the one
    reached by raising the load from zero), not whichever a bracket search lands on."""
    args = (7.619431334310022, 0.020872925834226154, 17.642086354471772,
            0.0039618225723194, 0.11186510415985075, 2, 111, 0.2561062799280753)
    rps, c1u, c1s, c2u, c2s, m, M, tpr = args
    expected = ref_least_fixed_point(*args)
    # at least one more fixed point exists above the least one
    L = expected * 1.01
    crossings = 0
    for _ in range(2000):
        sign_here = ref_moe_map(L, *args) - L > 0
        L2 = L * 1.01
        if (ref_moe_map(L2, *args) - L2 > 0) != sign_here:
            crossings += 1
        L = L2
        if rps * L * tpr > 1e4:
            break
    assert crossings >= 1
    got = moe_latency(rps, c1u, c1s, c2u, c2s, m, M, tokens_per_request=tpr)
    assert got == pytest.approx(expected, rel=1e-9)


def test_moe_agrees_with_iteration_on_random_batch():
    rng = np.random.default_rng(20260514)
    n = 3000
    c1u = 10 ** rng.uniform(-3, 1, n)
    c1s = 10 ** rng.uniform(-3, 1.5, n)
    c2u = 10 ** rng.uniform(-3, 0, n)
    c2s = 10 ** rng.uniform(-3, 1, n)
    M = rng.integers(1, 200, n)
    m = np.array([rng.integers(0, big + 1) for big in M])
    tpr = 10 ** rng.uniform(-1, 1.5, n)
    rps = rng.uniform(0, 0.999, n) / (c2u + c2s)
    got = moe_latency(rps, c1u, c1s, c2u, c2s, m, M, tokens_per_request=tpr)
    expected = np.array([ref_least_fixed_point(*args, damping=1.0) for args in
                         zip(rps, c1u, c1s, c2u, c2s, m, M, tpr)])
    bad = np.flatnonzero(~np.isclose(got, expected, rtol=1e-7, atol=0))
    assert bad.size == 0, (f"{bad.size} of {n} differ, first: inputs "
                           f"{[float(a[bad[0]]) for a in (rps, c1u, c1s, c2u, c2s, m, M, tpr)]} "
                           f"got {got[bad[0]]} least fixed point {expected[bad[0]]}")


def test_graph_solver_stays_between_no_coverage_and_full_coverage():
    """The in-graph solve (bracketed search for the least root, then the implicit Newton
    step) never leaves [no coverage, full coverage] and finds the least fixed point, also
    where C1s >> C1u (a plain fixed-point iteration misses it at 0.14% of these inputs
    and, without a bracket, can give negative latencies)."""
    from bayesspec.laws import latency, moe_latency_expr

    rng = np.random.default_rng(0)
    n = 50_000
    c1u = np.exp(rng.normal(0, 1, n))
    c1s = c1u * np.exp(rng.normal(0, 2.25, n))
    c2 = rng.uniform(0.005, 0.2, n) / (1 + np.exp(-rng.normal(1, 1.5, n)))
    share = 1 / (1 + np.exp(-rng.normal(0, 2.25, n)))
    c2u, c2s = c2 * (1 - share), c2 * share
    rps = rng.uniform(0, 1, n) / c2
    M = np.where(rng.random(n) < 0.5, 32.0, 128.0)
    m = np.where(M == 32, 4.0, 8.0)
    tpr = rng.choice([1.0, 2.0, 4.0, 6.0], n)
    with np.errstate(all="ignore"):
        solved = moe_latency_expr(rps, c1u, c1s, c2u, c2s, m, M, tpr)
    low = latency(rps, c1u, c2u)
    high = latency(rps, c1u + c1s, c2u + c2s)
    assert np.isfinite(solved).all()
    # 1e-9: one input sits at utilisation 0.99998 (L 35,000 s), where the final Newton
    # step's rounding is 8e-12 of L
    assert (solved >= low * (1 - 1e-9)).all() and (solved <= high * (1 + 1e-9)).all()
    exact = moe_latency(rps, c1u, c1s, c2u, c2s, m, M, tokens_per_request=tpr)
    assert np.isclose(solved, exact, rtol=1e-6).all()


@st.composite
def moe_inputs(draw):
    c1u = draw(pos(1e-3, 10.0))
    c1s = draw(pos(0.0, 30.0))
    c2u = draw(pos(1e-4, 1.0))
    c2s = draw(pos(0.0, 10.0))
    M = draw(st.integers(1, 256))
    m = draw(st.integers(0, M))
    tpr = draw(pos(0.05, 30.0))
    u = draw(pos(0.0, 0.995))
    return u / (c2u + c2s), c1u, c1s, c2u, c2s, m, M, tpr


@PROPERTY
@given(args=moe_inputs())
@example(args=(5e-324, 0.5, 1.0, 1.0, 0.0, 1, 1, 1.0))
@example(args=(5e-324, 1.0, 1.0, 1.0, 0.0, 1, 1, 0.5))
def test_moe_is_least_fixed_point(args):
    rps, c1u, c1s, c2u, c2s, m, M, tpr = args
    got = float(moe_latency(rps, c1u, c1s, c2u, c2s, m, M, tokens_per_request=tpr))
    assert np.isfinite(got)
    assert moe_residual(got, rps, c1u, c1s, c2u, c2s, m, M, tpr) < 1e-9
    expected = ref_least_fixed_point(rps, c1u, c1s, c2u, c2s, m, M, tpr)
    # a fixed point the iteration could not settle on (tangency) says nothing
    assume(moe_residual(expected, rps, c1u, c1s, c2u, c2s, m, M, tpr) < 1e-10)
    assert got == pytest.approx(expected, rel=1e-7)
    low = ref_latency(rps, c1u, c2u)
    high = ref_latency(rps, c1u + c1s, c2u + c2s)
    assert low * (1 - 1e-12) <= got <= high * (1 + 1e-12)


@PROPERTY
@given(args=moe_inputs(), v=pos(0.0, 1.0))
@example(args=(1.1125369292536007e-308, 1.0, 2.0, 1.0, 1.0, 0, 1, 1.0), v=0.0)
def test_moe_increasing_in_rps(args, v):
    rps, c1u, c1s, c2u, c2s, m, M, tpr = args
    lower = v * rps
    l_hi = moe_latency(rps, c1u, c1s, c2u, c2s, m, M, tokens_per_request=tpr)
    l_lo = moe_latency(lower, c1u, c1s, c2u, c2s, m, M, tokens_per_request=tpr)
    assert l_lo <= l_hi * (1 + 1e-12)


# ------------------------------------------------------- moe_latency with a token offset

@pytest.mark.parametrize("rps", [0.0, 0.5, 5.0, 13.0])
@pytest.mark.parametrize("offset", [0.5, 1.0, 3.0])
def test_moe_token_offset_fixed_point(rps, offset):
    """T = offset + RPS*L*tokens: the solution is a fixed point of that map, and at zero
    load the offset alone covers phi(offset) of the experts."""
    L = float(moe_latency(rps, tokens_per_request=2.0, token_offset=offset, **GPT_OSS))
    phi = ref_coverage(offset + rps * L * 2.0, GPT_OSS["m"], GPT_OSS["M"])
    rhs = (GPT_OSS["c1u"] + phi * GPT_OSS["c1s"]) / (
        1 - rps * (GPT_OSS["c2u"] + phi * GPT_OSS["c2s"]))
    assert abs(rhs / L - 1) < 1e-9
    if rps == 0.0:
        assert L == pytest.approx(GPT_OSS["c1u"] + ref_coverage(offset, 4, 32) * GPT_OSS["c1s"],
                                  rel=1e-12)


def test_moe_token_offset_zero_is_the_default_and_offset_raises_latency():
    rps = np.linspace(0.0, 14.0, 15)
    assert np.array_equal(moe_latency(rps, token_offset=0.0, **GPT_OSS),
                          moe_latency(rps, **GPT_OSS))
    assert np.all(moe_latency(rps, token_offset=1.0, **GPT_OSS)
                  >= moe_latency(rps, **GPT_OSS) * (1 - 1e-12))


def test_verification_tokens_rule():
    from bayesspec.laws import verification_tokens

    assert list(verification_tokens([0, 1, 3], "k")) == [1.0, 1.0, 3.0]
    assert list(verification_tokens([0, 1, 3], "k+1")) == [1.0, 2.0, 4.0]
    with pytest.raises(ValueError):
        verification_tokens(1, "k+2")
