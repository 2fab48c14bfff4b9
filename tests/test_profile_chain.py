"""The decode profile inside the slot queue's birth-death chain (``profile_law`` "chain"):
the slot queue and eq. (1) when the profile is flat, one formula in NumPy and PyTensor,
the curve's ceiling where the chain has no steady state, and a fit that recovers the costs
of data drawn from it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bayesspec import laws
from bayesspec.prediction import ProfileCurve

from test_decode_profile import SIZES, TIMES, profile_frame


def chain(rps, c1, c2, cap, extra, wait_scale=1.0, xp=np, soft_margin=None):
    rps = np.asarray(rps, dtype=float)[:, None]
    return laws.profile_chain_latency_expr(
        rps, np.array([c1]), np.array([c2]), np.array([float(cap)]), extra[None, :],
        np.ones((1, extra.size)), xp=xp, wait_scale=wait_scale,
        soft_margin=soft_margin)[:, 0]


@pytest.mark.parametrize("wait_scale", [1.0, 0.5])
def test_a_flat_profile_gives_the_slot_queue_and_eq1(wait_scale):
    cap, c1, c2 = 32, 2.0, 0.05
    ceiling = float(laws.cap_throughput_expr(c1, c2, cap))
    rates = np.linspace(0.01, 0.995, 30) * ceiling
    flat = np.zeros(cap)
    np.testing.assert_allclose(chain(rates, c1, c2, cap, flat, wait_scale),
                               laws.capped_latency(rates, c1, c2, cap, wait_scale=wait_scale),
                               rtol=1e-9)
    far = np.zeros(2000)   # a cap no rate below 1/C2 reaches: eq. (1)
    rates = np.linspace(0.01, 0.9, 10) / c2
    np.testing.assert_allclose(chain(rates, c1, c2, 2000, far), laws.latency(rates, c1, c2),
                               rtol=1e-9)


def test_the_graph_and_numpy_compute_the_same_chain():
    import pytensor.tensor as pt

    extra = laws.profile_chain_extra(256, SIZES, TIMES, 48)
    rates = np.array([0.5, 2.0, 3.5])
    symbolic = laws.profile_chain_latency_expr(
        pt.as_tensor(rates[:, None]), pt.as_tensor(np.array([10.4])),
        pt.as_tensor(np.array([0.063])), pt.as_tensor(np.array([48.0])),
        pt.as_tensor(extra[None, :]), pt.as_tensor(np.ones((1, 48))), xp=pt,
        wait_scale=0.5, soft_margin=1e-3).eval()[:, 0]
    np.testing.assert_allclose(symbolic, chain(rates, 10.4, 0.063, 48, extra, 0.5),
                               rtol=1e-10)


def test_the_chain_curve_ends_where_the_line_for_a_slot_never_clears():
    """The ceiling of the chain law is the full batch's throughput, cap / T(cap), with
    T(cap) = C1 + C2 (cap - 1) + the profile's seconds at a batch of cap."""
    curve = ProfileCurve(np.array([10.4]), np.array([0.063]), batch_sizes=SIZES,
                         iteration_s=TIMES, decode_tokens=256, cap=48, law="chain")
    extra = laws.profile_chain_extra(256, SIZES, TIMES, 48)
    expected = 48 / (10.4 + 0.063 * 47 + extra[-1])
    assert curve.ceiling[0] == pytest.approx(expected, rel=1e-6)
    rates = np.array([0.2, 0.6, 0.95]) * expected
    np.testing.assert_allclose(curve.latency(rates)[0],
                               chain(rates, 10.4, 0.063, 48, extra, 1.0), rtol=1e-12)
    assert np.isinf(curve.latency(np.array([1.01 * expected]))[0, 0])
    with pytest.raises(ValueError, match="cap"):
        ProfileCurve(np.array([10.4]), np.array([0.063]), batch_sizes=SIZES,
                     iteration_s=TIMES, decode_tokens=256, law="chain")


def test_the_chain_is_an_option_of_the_dense_models_profile_only():
    from bayesspec.bayes import DenseLatencyModel, get_model_class

    with pytest.raises(ValueError, match="profile_law"):
        DenseLatencyModel({"profile_law": "binomial"})
    with pytest.raises(ValueError, match="--decode-profile"):
        DenseLatencyModel({"profile_law": "chain"})
    with pytest.raises(ValueError, match="dense model"):
        get_model_class("tails")({"profile_law": "chain", "decode_profile": "x.csv"})


@pytest.mark.long
def test_a_chain_fit_recovers_the_costs_of_a_chain_sweep(tmp_path):
    """One group's sweep drawn from the chain law (cap 48, the profile's fast band and tile
    step inside the swept range): the fit with the chain law converges at the defaults and
    its 90% intervals hold C1 and C2; its curve is within 1% of the truth's at every rate."""
    from bayesspec.data import prepare
    from bayesspec.inference import SamplerSettings
    from bayesspec.workflow import fit

    path = tmp_path / "profile.csv"
    profile_frame().to_csv(path, index=False)
    truth = ProfileCurve(np.array([10.4]), np.array([0.063]), batch_sizes=SIZES,
                         iteration_s=TIMES, decode_tokens=256, cap=48, law="chain")
    rng = np.random.default_rng(3)
    rps = np.linspace(0.05, 0.93, 11) * truth.ceiling[0]
    mean = truth.latency(rps)[0] * np.exp(0.005 * rng.standard_normal(rps.size))
    data = prepare(pd.DataFrame({"verifier": "Llama-2-70B", "gpu": "A100",
                                 "prefill_tokens": 256, "decode_tokens": 256, "rps": rps,
                                 "latency_mean_s": mean, "max_num_seqs": 48}))
    result = fit(data, "dense", settings=SamplerSettings(seed=2, progress=False),
                 config={"decode_profile": str(path), "profile_law": "chain"})
    assert result.diagnostics["converged"], result.diagnostics["text"]
    for name, value in (("C1", 10.4), ("C2", 0.063)):
        lo, hi = np.quantile(result.draws(name, 0), [0.05, 0.95])
        assert lo <= value <= hi, (name, lo, value, hi)
    curve = result.group_curve(0)
    assert curve.law == "chain"
    median = np.median(curve.latency(rps), axis=0)
    np.testing.assert_allclose(median, truth.latency(rps)[0], rtol=0.01)
