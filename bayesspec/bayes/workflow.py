"""The high-level path from a tidy table to a saved posterior (used by the CLI and demo)."""

from __future__ import annotations

import pandas as pd

from bayesspec.bayes import get_model_class
from bayesspec.inference.fitfile import Fit
from bayesspec.inference import SamplerSettings


def fit(data: pd.DataFrame, model: str = "dense", *, settings: SamplerSettings | None = None,
        config: dict | None = None, catalog=None) -> Fit:
    """Build the named model on validated tidy ``data`` and sample its posterior.

    ``settings`` left unset (None fields) take the model's measured defaults, the same
    the command line uses; ``catalog`` gives the model and GPU cards models read (the
    default catalog when None)."""
    return get_model_class(model)(config, catalog=catalog).fit(data, settings)
