"""The crossover search: regula falsi brackets and a bisection that evaluates only inside
them give the plain bisection's answer exactly, draw for draw."""

from __future__ import annotations

import numpy as np
import pytest

from bayesspec.laws import capped_latency
from bayesspec.prediction.curves import BISECTION_RTOL
from bayesspec.prediction.setups import first_crossing, sign_change_cells


def plain_bisection(sd_latency, dense_latency, ceiling, grid=48, steps=44):
    """The search as a bisection evaluating every midpoint of every draw, from the same
    grid scan."""
    scan = sign_change_cells(sd_latency, dense_latency, ceiling, grid)
    start, has, lo, hi = scan["start"], scan["has"], scan["lo"], scan["hi"]
    for _ in range(steps):
        if np.all(~has | (hi - lo <= BISECTION_RTOL * hi)):
            break
        mid = 0.5 * (lo + hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            sign = np.sign(np.log(sd_latency(mid[:, None]))
                           - np.log(dense_latency(mid[:, None])))[:, 0]
        same = sign == start
        lo = np.where(same, mid, lo)
        hi = np.where(same, hi, mid)
    return np.where(has, 0.5 * (lo + hi), np.nan)


def capped_curve(c1, c2, cap):
    def latency(rates):
        return capped_latency(rates, c1[:, None], c2[:, None], cap[:, None])
    return latency


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_search_gives_the_plain_bisections_crossing_draw_for_draw(seed):
    rng = np.random.default_rng(seed)
    draws = 600
    dense_c1, dense_c2 = rng.uniform(0.8, 1.2, draws), rng.uniform(0.04, 0.06, draws)
    # SD: lower zero-load latency, higher saturation cost (a crossing below the ceiling
    # for most draws, none for some), engine caps binding near the ceiling for some
    sd_c1 = dense_c1 * rng.uniform(0.5, 1.05, draws)
    sd_c2 = dense_c2 * rng.uniform(0.95, 1.6, draws)
    dense_cap = rng.choice([np.inf, 24.0, 64.0], draws)
    sd_cap = rng.choice([np.inf, 16.0, 48.0], draws)
    sd, dense = capped_curve(sd_c1, sd_c2, sd_cap), capped_curve(dense_c1, dense_c2, dense_cap)
    ceiling = np.minimum(1 / dense_c2, 1 / sd_c2)
    found = first_crossing(sd, dense, ceiling)
    expected = plain_bisection(sd, dense, ceiling)
    assert 0.1 < np.mean(np.isnan(expected)) < 0.5   # draws with and without a crossing
    assert np.array_equal(found, expected, equal_nan=True)


def test_a_stretch_where_the_curves_coincide_gives_its_lower_end():
    """Where L_sd = L_dense over a stretch (the gap exactly 0), the first crossing is
    where the stretch begins, as the bisection finds it."""
    draws = 50
    rng = np.random.default_rng(3)
    edge = rng.uniform(3.0, 6.0, draws)

    def dense(rates):
        return 1.0 + 0.0 * rates

    def sd(rates):
        return np.where(rates < edge[:, None], 0.9 + 0.1 * rates / edge[:, None], 1.0)

    ceiling = np.full(draws, 10.0)
    found = first_crossing(sd, dense, ceiling)
    assert np.array_equal(found, plain_bisection(sd, dense, ceiling), equal_nan=True)
    assert np.allclose(found, edge, rtol=1e-8)
