"""Curves over posterior draws read on the concurrency axis: a closed loop keeps N requests
in flight, and the same law gives its latency (N = RPS x L)."""

from __future__ import annotations

import numpy as np
import pytest

from bayesspec.prediction import Curve, CurvedCurve

C1 = np.array([2.0, 3.0, 4.5])
C2 = np.array([0.05, 0.04, 0.02])


def test_a_closed_loop_reads_the_open_loop_law_at_its_own_rate():
    curve = Curve(C1, C2)
    levels = np.array([1.0, 4.0, 32.0, 256.0])
    latency = curve.latency_at_concurrency(levels)
    assert latency.shape == (3, 4)
    rps = levels / latency                       # Little's law in the closed loop
    for s in range(3):
        open_loop = Curve(C1[s:s + 1], C2[s:s + 1]).latency(rps[s])[0]
        np.testing.assert_allclose(open_loop, latency[s], rtol=1e-12)
    # throughput rises with concurrency towards 1/C2 and never reaches it
    assert np.all(np.diff(rps, axis=1) > 0) and np.all(rps < 1 / C2[:, None])


def test_past_the_cap_requests_wait_for_a_slot_and_throughput_stays_at_the_caps():
    curve = Curve(C1, C2, cap=16)
    latency = curve.latency_at_concurrency([8, 16, 64, 256])
    np.testing.assert_allclose(latency[:, 0], C1 + 8 * C2)
    throughput = np.array([16, 64, 256]) / latency[:, 1:]
    np.testing.assert_allclose(throughput, np.repeat((16 / (C1 + 16 * C2))[:, None], 3, 1))


def test_other_laws_are_read_where_their_rate_curve_holds_the_level():
    curve = CurvedCurve(C1, C2, np.array([0.3, 0.1, 0.0]))
    levels = np.array([2.0, 20.0])
    latency = curve.latency_at_concurrency(levels)
    rps = levels / latency
    for s in range(3):
        at = curve.latency(rps[s])[s]
        np.testing.assert_allclose(at, latency[s], rtol=2e-3)


def test_a_level_below_one_is_refused():
    with pytest.raises(ValueError):
        Curve(C1, C2).latency_at_concurrency([0.5])
