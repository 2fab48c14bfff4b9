"""Two engine versions in one model: a version effect on log C1 and log C2 per group.

For ``compare DATA --by engine_version``. Each base group (the design without the
version column) has version A's costs, parameterised as in the dense model, and
version B's costs ``C1_B = C1_A * exp(d1)``, ``C2_B = C2_A * exp(d2)``. The effects d1,
d2 are partially pooled across base groups (population mean and spread learned), so a
consistent change is detected with more certainty than any single group shows, and an
odd group is shrunk toward the others.

Saturation by construction for both versions: ``C2_A = u / R`` with R a smooth maximum
of ``rps_max_A`` and ``rps_max_B * exp(d2)`` (bounding the true maximum from above), so
RPS*C2 < 1 at every observed point of either version.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt

from ..data import EXTRA_GROUP_COLUMNS, GROUP_COLUMNS, group_label
from ..errors import BadInput
from .base import COMMON_CONFIG, LatencyModel, ModelInputs
from .priors import latency_likelihood, pooled_normal


class VersionEffectModel(LatencyModel):
    name = "versions"
    version = "1"
    target_accept = 0.95
    default_config = {
        **COMMON_CONFIG,
        "effect_scale": 0.2,          # prior sd of the population log effect
        "effect_spread_scale": 0.1,   # prior scale of its spread across groups
        "by": "engine_version",
    }

    def prepare(self, data: pd.DataFrame) -> ModelInputs:
        by = self.config["by"]
        source = data.attrs.get("source_file")
        if by not in data.columns:
            raise BadInput("the data have no such column to compare by", file=source,
                           column=by)
        levels = sorted(pd.unique(data[by].astype(str)))
        if len(levels) != 2:
            raise BadInput(f"needs exactly two values to compare, found {len(levels)}: "
                           f"{', '.join(levels[:5])}", file=source, column=by)
        inputs = super().prepare(data)
        groups = inputs.groups
        columns = [c for c in GROUP_COLUMNS + EXTRA_GROUP_COLUMNS
                   if c in groups.columns and c != by]
        records = groups.to_dict("records")
        groups["base"] = [group_label({**r, by: ""}, columns) for r in records]
        groups["version_index"] = [levels.index(str(r[by])) for r in records]
        bases = list(dict.fromkeys(groups["base"]))
        groups["base_index"] = [bases.index(b) for b in groups["base"]]
        table = np.full((len(bases), 2), -1)
        for g, (b, v) in enumerate(zip(groups["base_index"], groups["version_index"])):
            table[b, v] = g
        if (table < 0).any():
            missing = bases[int(np.flatnonzero((table < 0).any(axis=1))[0])]
            raise BadInput(f"group '{missing}' is measured in only one of {levels}; compare "
                           "needs both versions of every group", file=source, column=by)
        inputs.extras.update({"bases": bases, "levels": levels, "table": table})
        return inputs

    def build(self, data: pd.DataFrame) -> pm.Model:
        inputs = self.prepare(data)
        cfg = self.config
        groups = inputs.groups
        bases, table = inputs.extras["bases"], inputs.extras["table"]
        n_bases = len(bases)
        coords = {"group": groups["label"].tolist(), "point": np.arange(len(inputs.rows)),
                  "base": bases}
        with pm.Model(coords=coords) as model:
            data = self.add_data(inputs)
            rps_max = data["rps_max"]
            center = float(np.log(np.median(groups["latency_low"])))
            log_c1_a = pooled_normal("log_C1_A", center, cfg["log_c1_scale"], "base",
                                     n_bases, centred=True)
            utilisation = pm.math.sigmoid(pm.Normal(
                "utilisation_logit", cfg["utilisation_logit_mean"],
                cfg["utilisation_logit_scale"], dims="base"))
            effects = {}
            for name in ("C1", "C2"):
                mean = pm.Normal(f"log_effect_{name}_mean", 0.0, cfg["effect_scale"])
                spread = pm.HalfNormal(f"log_effect_{name}_sd", cfg["effect_spread_scale"])
                z = pm.Normal(f"log_effect_{name}_z", 0.0, 1.0, dims="base")
                effects[name] = pm.Deterministic(f"log_effect_{name}", mean + spread * z,
                                                 dims="base")
                pm.Deterministic(f"ratio_{name}", pt.exp(effects[name]), dims="base")
                pm.Deterministic(f"ratio_{name}_population", pt.exp(mean))
            sharp = 40.0
            log_reach = pt.stack([pt.log(rps_max[table[:, 0]]),
                                  pt.log(rps_max[table[:, 1]]) + effects["C2"]], axis=1)
            reach = pt.exp(pt.logsumexp(sharp * log_reach, axis=1) / sharp)
            c1_a = pt.exp(log_c1_a)
            c2_a = utilisation / reach
            c1 = pt.zeros(len(groups))
            c2 = pt.zeros(len(groups))
            c1 = pt.set_subtensor(c1[table[:, 0]], c1_a)
            c1 = pt.set_subtensor(c1[table[:, 1]], c1_a * pt.exp(effects["C1"]))
            c2 = pt.set_subtensor(c2[table[:, 0]], c2_a)
            c2 = pt.set_subtensor(c2[table[:, 1]], c2_a * pt.exp(effects["C2"]))
            latency_likelihood(c1, c2, cfg, data)
        return model

    def posterior_variables(self) -> list[str]:
        return ["noise_base", "noise_load", "log_effect_C1_mean", "log_effect_C1_sd",
                "log_effect_C2_mean", "log_effect_C2_sd"]
