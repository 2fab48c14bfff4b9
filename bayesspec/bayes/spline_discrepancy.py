"""The dense law times a smooth, pooled discrepancy whose uncertainty grows above the
measured rates: for extrapolating real sweeps from a light load test.

    log L = log(C1/(1 - RPS*C2)) + delta_g(r),   r = RPS/RPS_max,g

(eq. 1 times exp(delta); RPS_max,g the group's highest fitted rate). delta_g is an
integrated random walk in r (the prior of a cubic smoothing spline, a Gaussian process
whose variance grows with the distance from where the data pin it): piecewise linear
with a random change of slope at knots every ``knot_spacing`` of r, up to ``knot_max``,

    delta_g(r) = sum_k beta_gk * max(r - kappa_k, 0),  beta_gk ~ Normal(0, a_g^2 h),

so delta(0) = 0 and delta'(0) = 0 (C1 stays the zero-load latency and eq. 1's slope at
zero load stays). Inside the measured range the points pin delta down; above it (r > 1)
the slope changes are left to their prior and the predictive spread grows like
a_g (r - 1)^(3/2): the honest answer to "how far above my load test does the law hold?".

Why r and not the utilisation x = RPS*C2: with knots in x, a larger C2 moves more of the
data past more knots and buys the fit flexibility, so the likelihood pulls C2 up and puts
the pole just above the data (measured on the Vidur sweeps: held-out points below the
interval, the fitted utilisation at the top held-out rate about 1). In r the basis is
data, fixed before sampling, and C2 is left to the law.

The amplitude a_g is pooled across groups on the log scale (log a_g = log a + s z_g,
a and s learned): sweeps that bend inside their range tell the others how far a law of
this kind can be off above theirs. Each group also has its own noise scale, base and
load term alike (``latency_likelihood(..., group_load_noise=True)``); ``bend_scale`` > 0
adds the second-order law of ``dense-discrepancy``. Above the last knot (``knot_max`` times the
highest fitted rate) delta continues with its last slope and its spread stops growing;
answers above the measured rates stay marked as extrapolations either way.

In-sample coverage is not the check for this model: it has about one effective
parameter per two points (p_loo 135 of 275 on the Vidur sweeps), so each fitted point
widens its own interval, and in-sample 90% intervals cover 0.996-1.0 even of data
simulated from the model itself (benchmarks/insample_calibration.py). Read the points
left out: PSIS-LOO (0.92-0.93 there) or ``check --ppc --folds 5`` (0.924).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from bayesspec.bayes.lazymodule import lazy_module

pm, pt = lazy_module("pymc"), lazy_module("pytensor.tensor")  # loaded on first use

from bayesspec.laws import curved_latency, curved_latency_expr
from bayesspec.prediction import Curve, Noise
from bayesspec.prediction.curves import _lift
from bayesspec.bayes.dense import DenseLatencyModel
from bayesspec.bayes.priors import latency_likelihood
from bayesspec.bayes.options import model_defaults


def knots(spacing: float, last: float = 2.0) -> np.ndarray:
    """Knots of the slope changes: every ``spacing`` of r = RPS/RPS_max up to ``last``."""
    count = int(np.floor(last / spacing + 1e-9))
    return spacing * np.arange(1, count + 1)


def spline_basis(coordinate, knot_values) -> np.ndarray:
    """max(r - kappa_k, 0): shape (..., K)."""
    return np.maximum(np.asarray(coordinate, dtype=float)[..., None] - knot_values, 0.0)


def spline_discrepancy(coordinate, weights, knot_values) -> np.ndarray:
    """delta(r) = sum_k w_k max(r - kappa_k, 0) (the model's discrepancy in log L) for
    ``coordinate`` of shape (S,) or (S, ...) and ``weights`` (S, K)."""
    weights = np.asarray(weights, dtype=float)
    weights = weights.reshape(weights.shape[0], *([1] * (np.ndim(coordinate) - 1)),
                              weights.shape[-1])
    return (spline_basis(coordinate, knot_values) * weights).sum(axis=-1)


class SplineDiscrepancyCurve(Curve):
    """Draws of eq. (1) (or the second-order law, ``bend``) times exp(delta(RPS/rps_ref)),
    delta the integrated-random-walk discrepancy (:func:`spline_discrepancy`); eq. (1)
    when every weight is 0."""

    law_name = "eq. (1) with a spline discrepancy"

    def __init__(self, c1, c2, weights, knot_values, rps_ref: float, bend=0.0, *,
                 label: str = "", noise: Noise | None = None):
        super().__init__(c1, c2, label=label, noise=noise)
        self.weights = np.asarray(weights, dtype=float)          # (S, K)
        self.knot_values = np.asarray(knot_values, dtype=float)  # (K,)
        self.rps_ref = float(rps_ref)
        self.bend = np.broadcast_to(np.asarray(bend, dtype=float), self.c2.shape)

    def latency(self, rps) -> np.ndarray:
        rps = np.asarray(rps, dtype=float)
        base = curved_latency(rps, _lift(self.c1, rps), _lift(self.c2, rps),
                              _lift(self.bend, rps))
        coordinate = np.broadcast_to(rps / self.rps_ref, np.shape(base))
        with np.errstate(over="ignore", invalid="ignore"):
            delta = spline_discrepancy(coordinate, self.weights, self.knot_values)
            return np.where(np.isfinite(base), base * np.exp(delta), np.inf)


class SplineDiscrepancyLatencyModel(DenseLatencyModel):
    checks_cap_on_draws = False  # a law of its own: the cap stays as the data put it
    name = "dense-spline"
    version = "1"
    own_mean_law = True
    default_config = model_defaults("dense-spline", DenseLatencyModel.default_config)
    # Measured on the Vidur sweeps (4 chains x 1000, knots every 0.2): 4 divergences in
    # 4000 draws at 0.95, none at 0.98.
    target_accept = 0.98

    def knot_values(self) -> np.ndarray:
        return knots(float(self.config["knot_spacing"]), float(self.config["knot_max"]))

    def data_arrays(self, inputs):
        arrays = super().data_arrays(inputs)
        rps = inputs.rows["rps"].to_numpy(float)
        coordinate = rps / inputs.groups["rps_max"].to_numpy(float)[inputs.group_index]
        arrays["spline_basis"] = (spline_basis(coordinate, self.knot_values()),
                                  ("point", "knot"))
        return arrays

    def build(self, data: pd.DataFrame) -> pm.Model:
        inputs, model = self.empty_model(data)
        cfg = self.config
        if len(inputs.groups) < 3:
            # Too few groups to learn a spread of amplitudes, and a group noise factor
            # would only trade with the shared scales.
            cfg = {**cfg, "amplitude_spread": 0.0, "group_noise_scale": 0.0}
        kappa = self.knot_values()
        model.add_coord("knot", kappa)
        with model:
            data = self.add_data(inputs)
            rps, g = data["rps"], data["group_index"]
            log_c1, utilisation = self.group_costs(data, len(inputs.groups))
            c1, c2 = pt.exp(log_c1), utilisation / data["rps_max"]
            amplitude = pm.HalfNormal("spline_amplitude", cfg["amplitude_scale"])
            if cfg["amplitude_spread"]:
                spread = pm.HalfNormal("spline_amplitude_sd", cfg["amplitude_spread"])
                factor = pt.exp(spread * pm.Normal("spline_amplitude_z", 0.0, 1.0,
                                                   dims="group"))
            else:
                # One amplitude for every group (fully pooled).
                factor = pt.ones(len(inputs.groups))
            group_amplitude = pm.Deterministic("spline_amplitude_group", amplitude * factor,
                                               dims="group")
            # Non-centred: most weights are left to their prior (knots above the data).
            z = pm.Normal("spline_z", 0.0, 1.0, dims=("group", "knot"))
            weights = pm.Deterministic(
                "spline_weight", group_amplitude[:, None] * np.sqrt(cfg["knot_spacing"]) * z,
                dims=("group", "knot"))
            if cfg["bend_scale"]:
                bend_sd = pm.HalfNormal("bend_sd", cfg["bend_scale"])
                bend = pm.Deterministic(
                    "bend", pt.expm1(bend_sd * pm.Normal("bend_z", 0.0, 1.0, dims="group")),
                    dims="group")
            else:
                bend = pt.zeros(len(inputs.groups))
            delta = (data["spline_basis"] * weights[g]).sum(axis=-1)
            mean_latency = curved_latency_expr(rps, c1[g], c2[g], bend[g]) * pt.exp(delta)
            # The whole noise scale per group, load term included: with the load term
            # shared, the noisy groups set it for all, and a quiet group's intervals at
            # high load are several times its scatter (Vidur sweeps: H100 Llama-2-70B
            # residuals 0.15-0.5%, the shared load term 1.2%); per group, elpd_loo rose
            # from 832 to 859-862 (knots every 0.1, 4 chains x 1000).
            latency_likelihood(c1, c2, cfg, data, mean_latency=mean_latency,
                               group_load_noise=True)
        return model

    def posterior_variables(self) -> list[str]:
        extra = ["spline_amplitude", "spline_amplitude_group", "noise_base_group",
                 "noise_load_group"]
        if self.config["amplitude_spread"]:
            extra.append("spline_amplitude_sd")
        if self.config["likelihood"] == "student_t":
            extra.append("nu")
        return super().posterior_variables() + extra

    # ------------------------------------------------------------------ prediction contract
    def decision_variables(self) -> list[str]:
        return super().decision_variables() + ["spline_weight"]

    def noise(self, fit, group: int | None = None) -> Noise:
        nu = fit.draws("nu") if self.config["likelihood"] == "student_t" else None
        if group is None:
            return Noise(fit.draws("noise_base"), fit.draws("noise_load"), nu)
        return Noise(fit.draws("noise_base_group", group),
                     fit.draws("noise_load_group", group), nu)

    def group_curve(self, fit, group: int) -> SplineDiscrepancyCurve:
        return SplineDiscrepancyCurve(fit.draws("C1", group), fit.draws("C2", group),
                                      fit.draws("spline_weight", group), self.knot_values(),
                                      float(fit.groups["rps_max"].iloc[group]),
                                      fit.draws("bend", group) if "bend" in fit.posterior
                                      else 0.0,
                                      label=str(fit.groups["label"].iloc[group]),
                                      noise=self.noise(fit, group))
