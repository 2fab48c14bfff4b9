"""Two roofline regimes, each a law of eq. (1): for sweeps that bend where the batch
turns a step from memory-bound to compute-bound.

Eq. (1) takes a step's cost as linear in the batch. On real GPUs it is closer to the
larger of two linear costs: streaming the weights and KV cache (memory: a large constant,
a small slope) and the batch's arithmetic (compute: a small constant, a large slope).
With Little's law each regime is a law of eq. (1), and the latency is the larger of the
two (:func:`bayesspec.laws.two_regime_latency_expr`): flat while memory-bound, then
rising towards the compute-bound pole. Measured on Vidur sweeps of 70B models on A100s
(examples/vidur): flat to about 45% of the ceiling, then a kink that eq. (1) fitted to
the lower rates misses.

Parameterisation, per group (as the dense model: nothing crosses a pole at an observed
rate by construction):

- C2c = u / rps_max, u in (0, 1) (the saturating branch: the compute one);
- C2m = C2c * s2 and C1c = C1m * s1, shares s1, s2 in (0, 1) with logit-normal priors:
  s1 -> 0 hides the compute branch (eq. 1 with C1m, C2m), s1 -> 1 makes it lead
  everywhere (eq. 1 with C1c, C2c), so eq. (1) is nested at both ends;
- log C1m pooled across groups (centred, as the dense model's C1).

When the data stop below the kink, s1 is left to its prior and the prediction above the
data widens: the honest answer to "where does the compute regime start?".
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from bayesspec.bayes.lazymodule import lazy_module

pm, pt = lazy_module("pymc"), lazy_module("pytensor.tensor")  # loaded on first use

from bayesspec.laws import two_regime_latency_expr
from bayesspec.prediction import TwoRegimeCurve
from bayesspec.bayes.dense import DenseLatencyModel
from bayesspec.bayes.priors import latency_likelihood
from bayesspec.bayes.options import model_defaults


class TwoRegimeLatencyModel(DenseLatencyModel):
    checks_cap_on_draws = False  # a law of its own: the cap stays as the data put it
    name = "dense-roofline"
    version = "1"
    own_mean_law = True
    curve_parameters = 4
    default_config = model_defaults("dense-roofline", DenseLatencyModel.default_config)

    def build(self, data: pd.DataFrame) -> pm.Model:
        inputs, model = self.empty_model(data)
        cfg = self.config
        with model:
            data = self.add_data(inputs)
            rps, rps_max, g = data["rps"], data["rps_max"], data["group_index"]
            log_c1m, utilisation = self.group_costs(data, len(inputs.groups), name="log_C1m")
            share_c1 = pm.math.sigmoid(pm.Normal("logit_share_C1c", 0.0,
                                                 cfg["share_logit_scale"], dims="group"))
            share_c2 = pm.math.sigmoid(pm.Normal("logit_share_C2m", 0.0,
                                                 cfg["share_logit_scale"], dims="group"))
            c2c = pm.Deterministic("C2c", utilisation / rps_max, dims="group")
            c2m = pm.Deterministic("C2m", c2c * share_c2, dims="group")
            c1m = pm.Deterministic("C1m", pt.exp(log_c1m), dims="group")
            c1c = pm.Deterministic("C1c", c1m * share_c1, dims="group")
            sharpness = float(cfg["sharpness"])
            mean_latency = two_regime_latency_expr(rps, c1m[g], c2m[g], c1c[g], c2c[g],
                                                   sharpness)
            zero_load = two_regime_latency_expr(0.0, c1m, c2m, c1c, c2c, sharpness)
            # The noise's load amplification uses the saturating branch's C2.
            latency_likelihood(zero_load, c2c, cfg, data, mean_latency=mean_latency)
        return model

    def posterior_variables(self) -> list[str]:
        return super().posterior_variables() + ["C1m", "C2m", "C1c", "C2c"]

    # ------------------------------------------------------------------ prediction contract
    def decision_variables(self) -> list[str]:
        return super().decision_variables() + ["C1m", "C2m", "C1c", "C2c"]

    def group_curve(self, fit, group: int) -> TwoRegimeCurve:
        return TwoRegimeCurve(*(fit.draws(n, group) for n in ("C1m", "C2m", "C1c", "C2c")),
                              sharpness=float(self.config["sharpness"]),
                              label=str(fit.groups["label"].iloc[group]),
                              noise=self.noise(fit))

    def comparable_parameters(self, fit) -> dict[str, dict[str, np.ndarray]]:
        families = super().comparable_parameters(fit)
        labels = fit.groups["label"].tolist()
        for name in ("C1m", "C2m", "C1c", "C2c"):
            families[name] = {label: fit.draws(name, g) for g, label in enumerate(labels)}
        return families
