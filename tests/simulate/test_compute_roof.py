"""The simulator's overlapping roofline reaches the compute roof: large k turn
compute-bound at small batches and bend the latency above eq. (1) fitted at light load
(docs/findings/compute-roof.md)."""

from __future__ import annotations

import numpy as np

from bayesspec.simulate import at_rates, setup
from bayesspec.simulate.stepmodel import OVERLAPPING_ROOFLINE, RooflineParams


def _eq1_through_two(rps, latency):
    """Eq. (1) through two points: (C1, C2)."""
    (r0, r1), (l0, l1) = rps, latency
    c2 = (l1 - l0) / (l1 * r1 - l0 * r0)
    return l0 * (1.0 - r0 * c2), c2


def test_knee_falls_with_k_and_plain_decoding_stays_memory_bound():
    s = setup("Qwen3-8B", "H100", k=7, alpha=0.8, roofline_params=OVERLAPPING_ROOFLINE)
    knees = [s.step_model.knee_batch(k, context=768) for k in (0, 1, 3, 7)]
    assert np.isinf(knees[0])          # KV reads outgrow 2 x 8B FLOP per token
    assert knees[1] > knees[2] > knees[3] and knees[3] < 64
    step = [float(s.step_model.decode_step_time(b, 768, k=7)) for b in (8, 16, 64, 128)]
    # a request's marginal cost past the knee (the arithmetic of its 8 tokens) is well
    # above the one below it (KV reads and the drafter's per-request work)
    assert 1.5 * (step[1] - step[0]) / 8 < (step[3] - step[2]) / 64


def test_roof_bends_the_sweep_above_eq1_at_large_k():
    def measured(params):
        s = setup("Qwen3-8B", "H100", k=7, alpha=0.8, roofline_params=params)
        rows = at_rates(s, [0.5, 4.5, 13.0], n_requests=300, seed=0).rows
        return rows["rps"].to_numpy(float), rows["latency_mean_s"].to_numpy(float)

    rps, latency = measured(OVERLAPPING_ROOFLINE)
    c1, c2 = _eq1_through_two(rps[:2], latency[:2])
    assert latency[2] > 1.15 * c1 / (1.0 - rps[2] * c2)
    rps, latency = measured(RooflineParams())   # memory + compute: a straight line
    c1, c2 = _eq1_through_two(rps[:2], latency[:2])
    assert latency[2] < 1.05 * c1 / (1.0 - rps[2] * c2)
