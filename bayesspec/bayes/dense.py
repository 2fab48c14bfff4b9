"""Dense latency law L = C1/(1 - RPS*C2), one (C1, C2) per group, partially pooled.

Parameterisation (why it looks like this):

- ``C2`` is written as ``u / rps_max`` with ``u`` in (0, 1) through a logistic link, where
  ``rps_max`` is the highest unsaturated rate observed in the group. Every observed point
  then satisfies RPS*C2 < 1 by construction, so the sampler never meets the pole of the
  law (that is where divergences come from). ``u`` is the utilisation reached by the
  group's highest rate, with a weak logit-normal prior per group.
- ``log C1`` is pooled across groups with a learned spread (wide hyperpriors centred on
  the median latency at the groups' lowest rates). Anchoring each C1 to its own lowest
  observed latency instead would tie it to that one noisy point and make it overconfident.
- The error is multiplicative (normal on log L). Its scale grows with load: a relative
  error ``e`` in the measured rate moves log L by ``e * x/(1-x)``, x = RPS*C2, and finite
  runs near saturation have large queueing variance; a constant relative noise would be
  overconfident about C2 there. When ``latency_std_s`` and ``n_requests`` are given, the
  standard error of each mean is added in quadrature.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt

from .base import COMMON_CONFIG, LatencyModel
from .priors import latency_likelihood, pooled_normal


class DenseLatencyModel(LatencyModel):
    name = "dense"
    version = "1"
    default_config = {
        **COMMON_CONFIG,
    }

    def build(self, data: pd.DataFrame) -> pm.Model:
        inputs = self.prepare(data)
        cfg = self.config
        groups = inputs.groups
        coords = {"group": groups["label"].tolist(), "point": np.arange(len(inputs.rows))}
        rps = inputs.rows["rps"].to_numpy(float)
        log_latency = np.log(inputs.rows["latency_mean_s"].to_numpy(float))
        with pm.Model(coords=coords) as model:
            group_index = pm.Data("group_index", inputs.group_index, dims="point")
            rps_data = pm.Data("rps", rps, dims="point")
            log_se = pm.Data("log_se", inputs.extras["log_se"], dims="point")
            rps_max = pm.Data("rps_max", groups["rps_max"].to_numpy(float), dims="group")
            log_c1_center = pm.Data("log_C1_center",
                                    float(np.log(np.median(groups["latency_low"]))))
            observed = pm.Data("observed_log_latency", log_latency, dims="point")

            # Centred: every group's data pin C1 down and C1 differs a lot between groups,
            # the case where the centred form samples better than the non-centred one.
            n_groups = len(groups)
            log_c1 = pooled_normal("log_C1", log_c1_center, cfg["log_c1_scale"], "group",
                                   n_groups, centred=True)
            # Not pooled: how close a sweep came to its ceiling is a property of the test
            # design, not of the system, and pooling it is a funnel one way or the other
            # (non-centred when every sweep pins u down, centred when they all agree).
            utilisation = pm.math.sigmoid(pm.Normal(
                "utilisation_logit", cfg["utilisation_logit_mean"],
                cfg["utilisation_logit_scale"], dims="group"))

            latency_likelihood(pt.exp(log_c1), utilisation / rps_max, cfg,
                               group_index=group_index, rps=rps_data, log_se=log_se,
                               observed=observed)
        return model

    def data_values(self, data: pd.DataFrame) -> dict[str, np.ndarray]:
        values = super().data_values(data)
        values["log_C1_center"] = np.asarray(
            float(np.log(np.median(self.inputs.groups["latency_low"]))))
        return values

    def posterior_variables(self) -> list[str]:
        return ["noise_base", "noise_load", "log_C1_mean", "log_C1_sd"]
