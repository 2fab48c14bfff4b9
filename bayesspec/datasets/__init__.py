"""Datasets shipped with bayesspec, so that ``bayesspec demo`` works offline."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

_HERE = Path(__file__).resolve().parent

BUNDLED = {
    "dense": "sim_dense.csv",
    "speculative": "sim_speculative.csv",
    "moe": "sim_moe.csv",
}


def path(name: str) -> Path:
    """Path of a bundled dataset by name (see ``BUNDLED``)."""
    try:
        return _HERE / BUNDLED[name]
    except KeyError:
        raise KeyError(f"no bundled dataset '{name}'; available: {', '.join(BUNDLED)}") from None


def load(name: str) -> pd.DataFrame:
    """The raw bundled table (validate it with ``bayesspec.data.prepare``)."""
    return pd.read_csv(path(name))
