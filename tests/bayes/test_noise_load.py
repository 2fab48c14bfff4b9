"""The noise's load term with ``noise_load_at`` "measured": the rate error's
amplification in the likelihood is the law's elasticity, at most what the measured
latency shows (L/C1 - 1). Without the bound ("curve", the default), a draw whose ceiling
sits just above a sweep's top rate widens that point's noise and escapes it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bayesspec.bayes import DenseLatencyModel
from bayesspec.data import prepare
from bayesspec.laws import measured_load_amplification


def test_eq1s_elasticity_is_the_latencys_own_load():
    """For eq. (1), L/C1 - 1 is x/(1-x) exactly: the bound changes nothing below a cap."""
    c1, c2 = 2.0, 0.1
    rps = np.array([0.5, 3.0, 8.0, 9.7])
    x = rps * c2
    latency = c1 / (1.0 - x)
    assert measured_load_amplification(latency, c1) == pytest.approx(x / (1.0 - x))
    # a point measured below its zero-load latency has no load term, not a negative one
    assert measured_load_amplification(np.array([1.5]), c1)[0] == 0.0


def _one_sweep(c1=2.0, c2=0.1):
    """One group measured exactly on eq. (1), up to 90% of its pole."""
    rps = np.arange(1.0, 10.0)
    return pd.DataFrame({
        "verifier": "Qwen3-14B", "drafter": "", "k": 0, "alpha": np.nan,
        "prefill_tokens": 512, "decode_tokens": 256, "rps": rps,
        "latency_mean_s": c1 / (1.0 - rps * c2)})


def _top_point_log_density(noise_load_at: str, utilisation_logit: float) -> tuple:
    """(log density of the top point, and of all points) with C1 at its truth and the
    top rate at sigmoid(``utilisation_logit``) of the draw's pole."""
    model_obj = DenseLatencyModel({"noise_load_at": noise_load_at})
    model = model_obj.build(prepare(_one_sweep()))
    point = model.initial_point()
    point["utilisation_logit"] = np.array([utilisation_logit])
    point["log_C1"] = np.array([np.log(2.0)])
    pointwise = model.compile_fn(model.logp(vars=[model["log_latency"]], sum=False,
                                            jacobian=False)[0], inputs=model.value_vars,
                                 on_unused_input="ignore")(point)
    return float(pointwise[-1]), float(np.sum(pointwise))


def test_a_draw_cannot_escape_the_top_point_by_its_ceiling():
    """With the law's elasticity alone, a draw whose pole sits 0.05% above the top rate
    predicts 200 times the measured latency there, yet loses little: its own elasticity
    (about 2,000) makes the point's noise enormous. Bounded by the measured latency's
    L/C1 - 1 (9 at the top), the point rules that draw out. At the truth the two agree."""
    truth = np.log(0.9 / 0.1)            # u = 0.9: the top rate at 90% of the pole
    near_pole = np.log(0.9995 / 0.0005)
    for reading in ("measured", "curve"):
        top, _ = _top_point_log_density(reading, truth)
        assert top > 0.0                 # sigma of a few percent: a density above 1
    assert (_top_point_log_density("measured", truth)[1]
            == pytest.approx(_top_point_log_density("curve", truth)[1], abs=1e-6))
    escaped, _ = _top_point_log_density("curve", near_pole)
    bounded, _ = _top_point_log_density("measured", near_pole)
    assert escaped > -8.0                # about -log(0.02 * 2000): barely penalised
    assert bounded < escaped - 100.0     # about -z^2/2 with z = log(200)/0.2


def test_an_unknown_noise_reading_is_refused():
    with pytest.raises(ValueError, match="noise_load_at"):
        DenseLatencyModel({"noise_load_at": "data"})


def test_a_fitted_points_replicate_is_the_bounded_likelihoods_and_a_new_rates_is_not():
    """With the fit's load term bounded by the measurement, a fitted point's predictive
    noise is the likelihood's (the lesser of the law's elasticity and the measured
    L/C1 - 1), a rate without a measurement (NaN) keeps the law's elasticity, and a fit
    that did not bound its term ignores the measurement."""
    from bayesspec.prediction import Curve, Noise

    draws = 3
    base, load = np.full(draws, 0.01), np.full(draws, 0.05)
    rps = np.array([1.0, 7.0, 7.4])
    # cap 16 binds before 1/C2 = 10: near its ceiling the elasticity runs far above L/C1 - 1
    bounded = Curve(np.full(draws, 2.0), np.full(draws, 0.1), cap=16.0,
                    noise=Noise(base, load, bounded_in_fit=True))
    curve = bounded.latency(rps)
    elasticity = bounded.amplification(rps, curve)
    measured = np.array([2.3, 9.0, np.nan])
    sigma = bounded.noise_sigma(rps, curve, measured=measured)
    lesser = np.fmin(elasticity[:, :2], measured_load_amplification(measured[:2], 2.0))
    assert np.all(lesser[:, 1] < elasticity[:, 1])
    np.testing.assert_allclose(sigma[:, :2], np.sqrt(0.01**2 + (0.05 * lesser) ** 2))
    np.testing.assert_allclose(sigma[:, 2], bounded.noise_sigma(rps, curve)[:, 2])
    free = Curve(np.full(draws, 2.0), np.full(draws, 0.1), cap=16.0, noise=Noise(base, load))
    np.testing.assert_allclose(free.noise_sigma(rps, curve, measured=measured),
                               free.noise_sigma(rps, curve))
