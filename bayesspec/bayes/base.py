"""What every PyMC latency model of bayesspec provides.

A model turns a validated tidy table (``bayesspec.data``) into a ``pymc.Model`` whose
posterior holds, for every fitted group, the per-request costs ``C1`` and ``C2`` (dims
``group``). Its name and version are written into every fit file so that a file is never
read by a model that would interpret it differently.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..data import assign_groups, included
from ..errors import BadInput


@dataclass
class ModelInputs:
    """The arrays a model is built from, kept so that predictions use the same groups."""

    rows: pd.DataFrame            # the rows entering the likelihood
    groups: pd.DataFrame          # one row per group, with a ``label`` column
    group_index: np.ndarray       # group of each likelihood row
    extras: dict = field(default_factory=dict)


def measurement_log_se(rows: pd.DataFrame) -> np.ndarray:
    """Standard error of log(mean latency) from the per-request spread, 0 when unknown."""
    if not {"latency_std_s", "n_requests"} <= set(rows.columns):
        return np.zeros(len(rows))
    std = pd.to_numeric(rows["latency_std_s"], errors="coerce").to_numpy(float)
    count = pd.to_numeric(rows["n_requests"], errors="coerce").to_numpy(float)
    se = std / np.sqrt(count) / rows["latency_mean_s"].to_numpy(float)
    return np.where(np.isfinite(se), se, 0.0)


def group_scales(rows: pd.DataFrame, group_index: np.ndarray, n_groups: int):
    """Per group: the highest observed rate and the latency at the lowest rate."""
    rps = rows["rps"].to_numpy(float)
    latency = rows["latency_mean_s"].to_numpy(float)
    rps_max = np.zeros(n_groups)
    latency_low = np.zeros(n_groups)
    for g in range(n_groups):
        members = np.flatnonzero(group_index == g)
        rps_max[g] = rps[members].max()
        latency_low[g] = latency[members[np.argmin(rps[members])]]
    return rps_max, latency_low


# Prior scales every latency model shares (each model adds its own options).
COMMON_CONFIG = {
    "noise_base_scale": 0.1,      # prior scale of the load-independent log-noise
    "noise_load_scale": 0.05,     # prior scale of the relative error in the rate
    "log_c1_scale": 2.0,          # prior scale of log C1 across groups
    "utilisation_logit_mean": 1.0,
    "utilisation_logit_scale": 1.5,
}


class LatencyModel:
    """Base class: subclasses set ``name``/``version`` and implement ``build``."""

    name: str = "base"
    version: str = "0"
    default_config: dict = {}
    # NUTS target acceptance: 0.9 rather than 0.8 because the steep top-load points of a
    # sweep otherwise give a rare divergence; models with more curvature raise it.
    target_accept: float = 0.9
    # nutpie mass-matrix adaptation ("diag" or "low_rank"), chosen by measurement.
    adaptation: str = "diag"
    # Chain starts ("jitter" or "optimised", see inference.optimised_starts).
    init: str = "jitter"
    # Tuning steps and draws per chain when the user does not say (``--tune``, ``--draws``).
    default_tune: int = 1000
    default_draws: int = 1000

    def __init__(self, config: dict | None = None):
        unknown = set(config or {}) - set(self.default_config)
        if unknown:
            raise ValueError(f"unknown {self.name} model option(s): {sorted(unknown)}")
        self.config = {**self.default_config, **(config or {})}
        self.inputs: ModelInputs | None = None

    @property
    def identity(self) -> str:
        """A short hash of the model's name, version and configuration."""
        blob = json.dumps({"name": self.name, "version": self.version, "config": self.config},
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def prepare(self, data: pd.DataFrame) -> ModelInputs:
        """The likelihood rows, the groups with their scales, and each row's group."""
        rows = included(data).reset_index(drop=True)
        if rows.empty:
            raise BadInput("every row is saturated or excluded; nothing left to fit",
                           file=data.attrs.get("source_file"))
        groups, group_index = assign_groups(rows)
        rps_max, latency_low = group_scales(rows, group_index, len(groups))
        groups["rps_max"] = rps_max
        groups["latency_low"] = latency_low
        groups["n_points"] = np.bincount(group_index, minlength=len(groups))
        self.inputs = ModelInputs(rows=rows, groups=groups, group_index=group_index,
                                  extras={"log_se": measurement_log_se(rows)})
        return self.inputs

    def data_arrays(self, inputs: ModelInputs) -> dict[str, tuple[np.ndarray, str | None]]:
        """Every ``pm.Data`` of the model: name -> (values, dim)."""
        return {
            "group_index": (inputs.group_index, "point"),
            "rps": (inputs.rows["rps"].to_numpy(float), "point"),
            "log_se": (inputs.extras["log_se"], "point"),
            "rps_max": (inputs.groups["rps_max"].to_numpy(float), "group"),
            "observed_log_latency": (np.log(inputs.rows["latency_mean_s"].to_numpy(float)),
                                     "point"),
        }

    def add_data(self, inputs: ModelInputs) -> dict:
        """Register :meth:`data_arrays` in the current ``pm.Model`` and return them."""
        import pymc as pm

        return {name: pm.Data(name, values, dims=dim)
                for name, (values, dim) in self.data_arrays(inputs).items()}

    def data_values(self, data: pd.DataFrame) -> dict[str, np.ndarray]:
        """Values of every ``pm.Data`` of the model for new data of the same shape.

        Lets a compiled model be re-sampled on replicate or held-out data without
        recompiling (``bayesspec.inference.sample_compiled``).
        """
        inputs = self.prepare(data)
        return {name: values for name, (values, _) in self.data_arrays(inputs).items()}

    def build(self, data: pd.DataFrame):  # pragma: no cover - abstract
        raise NotImplementedError

    def posterior_variables(self) -> list[str]:
        """Variables worth reporting in ``summary`` besides the per-group costs."""
        return []
