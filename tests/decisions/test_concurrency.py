"""Answers on the concurrency axis (closed loops of N clients) from synthetic posterior
draws (no sampling): the latency is eq. (1) read at N in flight, L = C1 + C2 N, the best
k minimises it, and the extrapolation marks sit at the highest fitted level."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from bayesspec.decisions.concurrency import (check_levels, fitted_levels,
                                             kstar_at_concurrency, predict_concurrency)
from bayesspec.errors import BadInput
from bayesspec.laws import effective_costs
from bayesspec.prediction import COEFFICIENT_NAMES, CoefficientLaw, Curve
from bayesspec.simulate.synthetic import (DENSE_TRUTH_8B, SPECULATIVE_TRUTH_8B,
                                          generate_closed_loop_sweeps)

DRAWS = 1000
LEVELS = (1, 2, 4, 8, 16, 32)


def closed_loop_fit(levels=LEVELS, draws: int = DRAWS, seed: int = 0):
    """A dense Fit of one closed-loop sweep from the law, its posterior synthetic draws
    around the truth (C1 1.2 s, C2 0.03 s)."""
    from bayesspec.bayes import DenseLatencyModel
    from bayesspec.data import prepare
    from bayesspec.inference.fitfile import Fit

    truth = pd.DataFrame({"verifier": ["Qwen3-8B"], "prefill_tokens": [512],
                          "decode_tokens": [512], "C1": [1.2], "C2": [0.03]})
    data = prepare(generate_closed_loop_sweeps(truth, levels, seed=seed))
    model = DenseLatencyModel()
    model.prepare(data)
    rng = np.random.default_rng(seed)
    shape = (2, draws, 1)
    posterior = xr.Dataset(
        {"C1": (("chain", "draw", "group"), 1.2 * np.exp(rng.normal(0, 0.01, shape))),
         "C2": (("chain", "draw", "group"), 0.03 * np.exp(rng.normal(0, 0.01, shape))),
         "noise_base": (("chain", "draw"), 0.02 * np.exp(rng.normal(0, 0.1, shape[:2]))),
         "noise_load": (("chain", "draw"), 0.02 * np.exp(rng.normal(0, 0.1, shape[:2])))},
        coords={"chain": [0, 1], "draw": np.arange(draws),
                "group": model.inputs.groups["label"].tolist()})
    stats = xr.Dataset({"diverging": (("chain", "draw"), np.zeros(shape[:2], bool))},
                       coords={"chain": [0, 1], "draw": np.arange(draws)})
    return Fit.from_sampling(model, data,
                             xr.DataTree.from_dict({"posterior": posterior,
                                                    "sample_stats": stats}))


@pytest.fixture(scope="module")
def closed_fit():
    return closed_loop_fit()


def test_predict_reads_eq1_at_n_in_flight_and_its_throughput(closed_fit):
    levels = np.array([1.0, 8.0, 32.0, 64.0])
    document = predict_concurrency(closed_fit, 0, levels, prob=0.9)
    curve = closed_fit.group_curve(0, admit_unmeasured=False)
    expected = np.ravel(curve.c1)[:, None] + np.ravel(curve.c2)[:, None] * levels
    assert document["axis"] == "concurrency"
    # below the top fitted level the answer is the fitted law; at the top the draws whose
    # throughput passes the highest fitted rate already admit an unmeasured limit
    for j, point in enumerate(document["points"][:3]):
        tolerance = 1e-6 if j < 2 else 1e-2
        assert point["concurrency"] == int(levels[j])
        assert point["latency_s"]["median"] == pytest.approx(np.median(expected[:, j]),
                                                             rel=tolerance)
        assert point["rps"]["median"] == pytest.approx(np.median(levels[j] / expected[:, j]),
                                                       rel=tolerance)
        assert point["p_past_cap"] == 0.0
    # past the fitted levels a limit the sweep did not reach may bind (the admitted
    # ceiling): never faster than the straight line
    beyond = document["points"][3]
    assert beyond["latency_s"]["median"] >= np.median(expected[:, 3]) * (1 - 1e-9)
    # measured up to 32 clients: 64 is read off the law, 32 is not (whatever the noise
    # of its own point's throughput against the law's)
    assert document["concurrency_fitted_max"] == 32
    assert [p["extrapolated"] for p in document["points"]] == [False, False, False, True]


def test_an_open_loop_fit_marks_levels_by_their_throughput(dense_fit_factory):
    fit = dense_fit_factory(n_groups=1, draws=400)
    curve = fit.group_curve(0)
    top = float(curve.rps_fitted_max)
    # the level whose median throughput is just below, and just above, the fitted top
    c1, c2 = np.median(np.ravel(curve.c1)), np.median(np.ravel(curve.c2))
    at_top = top * c1 / (1 - top * c2)          # N = RPS x L at the highest fitted rate
    document = predict_concurrency(fit, 0, [1, max(1, np.floor(at_top * 0.8)),
                                            np.ceil(at_top * 1.2)])
    assert document["concurrency_fitted_max"] is None
    assert [p["extrapolated"] for p in document["points"]] == [False, False, True]


def test_past_the_cap_the_extra_clients_wait_for_a_slot():
    rng = np.random.default_rng(1)
    c1, c2 = 1.0 * np.exp(rng.normal(0, 0.01, 500)), 0.02 * np.exp(rng.normal(0, 0.01, 500))
    curve = Curve(c1, c2, cap=16.0)
    latency = curve.latency_at_concurrency(np.array([8.0, 16.0, 32.0]))
    np.testing.assert_allclose(latency[:, 0], c1 + 8 * c2)
    np.testing.assert_allclose(latency[:, 2], 2 * (c1 + 16 * c2))   # twice the cap: twice


def coefficient_law(spread: float = 0.02, seed: int = 0, cap=None) -> CoefficientLaw:
    rng = np.random.default_rng(seed)
    coefficients = {n: SPECULATIVE_TRUTH_8B[n] * np.exp(rng.normal(0, spread, DRAWS))
                    for n in COEFFICIENT_NAMES}
    dense = Curve(DENSE_TRUTH_8B["C1"] * np.exp(rng.normal(0, spread / 2, DRAWS)),
                  DENSE_TRUTH_8B["C2"] * np.exp(rng.normal(0, spread / 2, DRAWS)), cap=cap)
    return CoefficientLaw("8B + EAGLE3 512/512", dense, coefficients, 512.0)


def test_kstar_per_level_is_the_k_of_lowest_expected_latency_ratio():
    law = coefficient_law()
    levels = np.array([1.0, 16.0, 64.0, 256.0])
    ks = np.arange(0, 7)
    document = kstar_at_concurrency(law, [0.8], levels, ks=ks)
    dense = law.dense.c1[:, None] + law.dense.c2[:, None] * levels          # (S, R)
    speedups = [np.ones_like(dense)]
    for k in ks[1:]:
        c1, c2 = effective_costs(0.8, int(k), 512.0, *(law.coefficients[n]
                                                       for n in COEFFICIENT_NAMES))
        speedups.append(dense / (c1[:, None] + c2[:, None] * levels))
    speedups = np.stack(speedups, axis=1)                                   # (S, K, R)
    expected_best = np.argmax(speedups.mean(axis=0), axis=0)
    chosen = [row["k"] for row in document["table"]]
    assert chosen == [int(ks[b]) for b in expected_best]
    for j, row in enumerate(document["table"]):
        b = expected_best[j]
        assert row["speedup"]["median"] == pytest.approx(np.median(speedups[:, b, j]))
        assert row["p_best"] == pytest.approx(np.mean(np.argmax(speedups[:, :, j], axis=1) == b))
        assert row["rps"]["median"] == pytest.approx(
            np.median(levels[j] / (dense[:, j] / speedups[:, b, j])))


def test_kstar_marks_levels_above_the_highest_fitted_level_of_both_curves():
    law = coefficient_law()
    document = kstar_at_concurrency(law, [0.8], [4, 32, 64], ks=range(0, 5),
                                    fitted={0: 64.0, 1: 32.0, 2: 32.0, 3: 32.0, 4: 32.0})
    rows = document["table"]
    assert [row["extrapolated"] for row in rows] == [False, False, True]
    assert all(row["concurrency_fitted_max"] == 32.0 for row in rows if row["k"] > 0)


@pytest.mark.parametrize("bad", [[0], [1.5], [-2], [np.nan], []])
def test_levels_are_whole_numbers_of_clients(bad):
    with pytest.raises(BadInput, match="--concurrency"):
        check_levels(bad)


def test_fitted_levels_per_k(closed_fit):
    assert fitted_levels(closed_fit, {}) == {0: 32.0}
    assert fitted_levels(closed_fit, {"verifier": "nobody"}) == {}
