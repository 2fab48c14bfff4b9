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


@dataclass
class ModelInputs:
    """The arrays a model is built from, kept so that predictions use the same groups."""

    rows: pd.DataFrame            # the rows entering the likelihood
    groups: pd.DataFrame          # one row per group, with a ``label`` column
    group_index: np.ndarray       # group of each likelihood row
    extras: dict = field(default_factory=dict)


class LatencyModel:
    """Base class: subclasses set ``name``/``version`` and implement ``build``."""

    name: str = "base"
    version: str = "0"
    default_config: dict = {}
    # NUTS target acceptance: 0.9 rather than 0.8 because the steep top-load points of a
    # sweep otherwise give a rare divergence; models with more curvature raise it.
    target_accept: float = 0.9

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

    def build(self, data: pd.DataFrame):  # pragma: no cover - abstract
        raise NotImplementedError

    def posterior_variables(self) -> list[str]:
        """Variables worth reporting in ``summary`` besides the per-group costs."""
        return []
