"""Ceilings that admit what was not measured (bayesspec.prediction.ceilings): synthetic
draws, no sampling."""

from __future__ import annotations

import numpy as np
import pytest

from bayesspec.laws import ceiling_rps, concurrency_cap, latency
from bayesspec.prediction import Curve
from bayesspec.prediction.ceilings import (admit_unmeasured_limit, admitted_limit,
                                           is_admitting, seen_rates, unmeasured_fractions)

S = 4000


def curve(cap=None):
    rng = np.random.default_rng(3)
    c1 = 3.7 * np.exp(0.005 * rng.standard_normal(S))
    c2 = 0.0395 * np.exp(0.005 * rng.standard_normal(S))
    return Curve(c1, c2, cap=cap)


def test_the_span_runs_from_the_top_point_to_the_laws_ceiling():
    law = curve(cap=464.0)
    top = 16.5
    limit = admitted_limit(law, top)
    pole = ceiling_rps(law.c1, law.c2, 464.0)
    assert np.all(limit >= top - 1e-9) and np.all(limit <= pole + 1e-9)
    lo, hi = np.quantile(limit, [0.05, 0.95])
    # the batch the top point held (about 175) to the cap (464): uniform in between
    assert lo < top * 1.05 and hi > 0.98 * np.median(pole)
    # and wider than the law's own interval, which it contains at its upper end
    assert hi - lo > 5 * (np.quantile(pole, 0.95) - np.quantile(pole, 0.05))


def test_a_top_point_at_the_ceiling_leaves_the_law_as_it_was():
    law = curve(cap=464.0)
    pole = ceiling_rps(law.c1, law.c2, 464.0)
    top = 0.999 * float(np.min(pole))
    limit = admitted_limit(law, top)
    assert np.all(limit >= top - 1e-9) and np.all(limit <= pole + 1e-9)
    assert np.all(pole - limit <= pole - top + 1e-9)


def test_the_largest_batch_without_a_cap_bounds_the_span():
    law = curve()
    small = admitted_limit(law, 16.5, largest_batch=300.0)
    large = admitted_limit(law, 16.5, largest_batch=3000.0)
    assert np.all(small <= large + 1e-12)
    assert np.max(small) <= np.max(300.0 / (law.c1 + law.c2 * 299.0)) + 1e-9


def test_a_throughput_run_raises_the_floor_and_a_collapsed_point_lowers_the_roof():
    law = curve(cap=464.0)
    plain = admitted_limit(law, 16.5)
    floored = admitted_limit(law, 16.5, floor=18.8)
    bounded = admitted_limit(law, 16.5, bound=19.5)
    assert np.min(floored) >= 18.8 - 1e-9 and np.median(floored) > np.median(plain)
    assert np.max(bounded) <= 19.5 + 1e-9


def test_below_the_top_point_the_curve_is_the_law_and_above_it_ends_at_the_limit():
    law = curve(cap=464.0)
    admitted = admit_unmeasured_limit(law, 16.5)
    assert is_admitting(admitted) and not is_admitting(law)
    below = np.linspace(1.0, 16.5, 12)
    np.testing.assert_array_equal(admitted.latency(below), law.latency(below))
    limit = admitted.ceiling
    # finite just below each draw's limit, infinite at it, rising in between
    rates = limit[:, None] * np.array([0.99, 0.999])
    inside = admitted.latency(rates)
    assert np.all(np.isfinite(inside)) and np.all(inside[:, 1] > inside[:, 0])
    assert np.all(np.isinf(admitted.latency(limit[:, None] * 1.0001)))
    # a scalar rate and a rate per draw agree
    np.testing.assert_allclose(admitted.latency(18.0),
                               admitted.latency(np.full((S, 1), 18.0))[:, 0])
    # and the rate meeting a target never lies past the admitted ceiling
    assert np.all(admitted.rate_meeting(1e6) <= limit)


def test_vector_k_costs_of_eq1_admit_one_top_per_k():
    rng = np.random.default_rng(0)
    c1 = 2.4 + 0.01 * rng.standard_normal((S, 3))
    c2 = np.array([0.042, 0.044, 0.047]) * (1 + 0.005 * rng.standard_normal((S, 3)))
    law = Curve(c1, c2)
    tops = np.array([[16.6, 16.1, 15.4]])
    admitted = admit_unmeasured_limit(law, tops, largest_batch=445.0)
    assert admitted.ceiling.shape == (S, 3)
    assert np.all(admitted.ceiling >= tops - 1e-9)
    value = admitted.latency(np.array([10.0, 17.0]))
    assert value.shape == (S, 3, 2)
    np.testing.assert_allclose(value[..., 0], latency(10.0, c1, c2))


def test_every_curve_of_a_fit_reads_the_same_fraction_at_a_draw():
    np.testing.assert_array_equal(unmeasured_fractions(100), unmeasured_fractions(100))
    a = admitted_limit(curve(cap=464.0), 16.5)
    b = admitted_limit(curve(cap=445.0), 15.0)
    # comonotone: the draws rank alike
    assert np.corrcoef(np.argsort(np.argsort(a)), np.argsort(np.argsort(b)))[0, 1] > 0.99


def test_the_k_lookahead_slots_lower_the_kv_cap_of_speculation():
    dense = concurrency_cap(np.nan, 341_928, np.nan, 512, 512, 0)
    speculating = concurrency_cap(np.nan, 341_928, np.nan, 512, 512, 3)
    assert dense == np.floor(341_928 / 768)
    assert speculating == np.floor(341_928 / 771)


def test_seen_rates_read_throughput_runs_and_points_past_the_ceiling():
    import pandas as pd

    data = pd.DataFrame({
        "group": ["g"] * 4 + ["h"],
        "rps": [10.0, 18.7, 18.9, 19.2, 30.0],
        "rps_target": [10.0, np.nan, 20.75, 19.5, 31.0],
        "strategy": ["poisson", "throughput", "poisson", "poisson", "throughput"],
        "excluded": [False, True, True, True, True],
        "exclusion_reason": ["", "throughput run (to find the ceiling)",
                             "preemption: past the ceiling", "window too short", ""]})
    floor, bound = seen_rates(data, ["g"])
    assert floor == pytest.approx(18.7) and bound == pytest.approx(20.75)
    assert np.isnan(seen_rates(data, ["nothing"])[0])
