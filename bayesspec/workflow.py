"""The high-level path from a tidy table to a saved posterior (used by the CLI and demo)."""

from __future__ import annotations

import dataclasses
import time

import pandas as pd

from .bayes import get_model_class
from .fitfile import Fit
from .inference import SamplerSettings, sample_model, settings_for


def fit(data: pd.DataFrame, model: str = "dense", *, settings: SamplerSettings | None = None,
        config: dict | None = None) -> Fit:
    """Build the named model on validated tidy ``data`` and sample its posterior."""
    settings = settings or SamplerSettings()
    latency_model = get_model_class(model)(config)
    settings = settings_for(latency_model, settings)
    started = time.perf_counter()
    pm_model = latency_model.build(data)
    tree = sample_model(pm_model, settings)
    result = Fit.from_sampling(latency_model, data, tree,
                               settings=dataclasses.asdict(settings))
    result.tree.attrs["fit_seconds"] = round(time.perf_counter() - started, 3)
    return result
