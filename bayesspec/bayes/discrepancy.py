"""The dense law with room for its own misfit: for sweeps the law was not written for.

On real serving traces eq. (1) is a first-order approximation: the batch-1 latency is
reached only at zero load, a step's cost is not exactly linear in the batch, and some
sweeps bend away from the law more than others. A model that has no way to say so puts
its predictive intervals around the wrong curve and covers far fewer points than it
promises. This one adds, per group:

- a second-order term: L = C1 (1 + bend*x)/(1 - x), x = RPS*C2
  (:func:`bayesspec.laws.curved_latency_expr`), with bend = exp(s) - 1 > -1 and
  s ~ Normal(0, tau) partially pooled, tau ~ HalfNormal(``bend_scale``): shrunk to eq. (1)
  unless the data bend; where the data stop, its uncertainty widens the prediction;
- its own noise scale (the shared one times a log-normal factor of fixed spread
  ``group_noise_scale``);
- optionally a Student-t error (``likelihood="student_t"``).

Which of these earns its place is decided by PSIS-LOO and held-out coverage
(``bayesspec compare-models``, ``bayesspec check --ppc --hold-out-above``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from bayesspec.bayes.lazymodule import lazy_module

pm, pt = lazy_module("pymc"), lazy_module("pytensor.tensor")  # loaded on first use

from bayesspec.laws import curved_latency_expr
from bayesspec.prediction import CurvedCurve, Noise
from bayesspec.bayes.dense import DenseLatencyModel
from bayesspec.bayes.priors import latency_likelihood
from bayesspec.bayes.options import model_defaults


class DiscrepancyLatencyModel(DenseLatencyModel):
    checks_cap_on_draws = False  # a law of its own: the cap stays as the data put it
    name = "dense-discrepancy"
    version = "1"
    own_mean_law = True
    curve_parameters = 3
    default_config = model_defaults("dense-discrepancy", DenseLatencyModel.default_config)

    def build(self, data: pd.DataFrame) -> pm.Model:
        inputs, model = self.empty_model(data)
        cfg = self.config
        n_groups = len(inputs.groups)
        with model:
            data = self.add_data(inputs)
            rps, g = data["rps"], data["group_index"]
            log_c1, utilisation = self.group_costs(data, n_groups)
            c1, c2 = pt.exp(log_c1), utilisation / data["rps_max"]
            if n_groups >= 3:
                # Non-centred: most groups' data say little about their bend, so it
                # follows tau (the case where the centred form is a funnel).
                bend_sd = pm.HalfNormal("bend_sd", cfg["bend_scale"])
                log_bend = bend_sd * pm.Normal("bend_z", 0.0, 1.0, dims="group")
            else:
                # Too few groups to learn a spread; a group-level noise factor would only
                # trade with the shared noise scale.
                log_bend = pm.Normal("log_bend", 0.0, cfg["bend_scale"], dims="group")
                cfg = {**cfg, "group_noise_scale": 0.0}
            bend = pm.Deterministic("bend", pt.expm1(log_bend), dims="group")
            mean_latency = curved_latency_expr(rps, c1[g], c2[g], bend[g])
            latency_likelihood(c1, c2, cfg, data, mean_latency=mean_latency)
        return model

    def posterior_variables(self) -> list[str]:
        extra = ["bend", "bend_sd", "noise_base_group"]
        if self.config["likelihood"] == "student_t":
            extra.append("nu")
        return super().posterior_variables() + extra

    # ------------------------------------------------------------------ prediction contract
    def decision_variables(self) -> list[str]:
        return super().decision_variables() + ["bend"]

    def noise(self, fit, group: int | None = None) -> Noise:
        nu = fit.draws("nu") if self.config["likelihood"] == "student_t" else None
        per_group = group is not None and "noise_base_group" in fit.posterior
        base = fit.draws("noise_base_group", group) if per_group else fit.draws("noise_base")
        return Noise(base, fit.draws("noise_load"), nu)

    def group_curve(self, fit, group: int) -> CurvedCurve:
        return CurvedCurve(fit.draws("C1", group), fit.draws("C2", group),
                           fit.draws("bend", group),
                           label=str(fit.groups["label"].iloc[group]),
                           noise=self.noise(fit, group))

    def comparable_parameters(self, fit) -> dict[str, dict[str, np.ndarray]]:
        families = super().comparable_parameters(fit)
        labels = fit.groups["label"].tolist()
        families["bend"] = {label: fit.draws("bend", g) for g, label in enumerate(labels)}
        return families
