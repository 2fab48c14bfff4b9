"""Shared fixtures: a few real, session-scoped fits; everything else is cheap."""

from __future__ import annotations

import os

import matplotlib
import pandas as pd
import pytest

from bayesspec.data import prepare
from bayesspec.inference import SamplerSettings
from bayesspec.synthetic import generate_sweeps, placeholder_truth
from bayesspec.workflow import fit

matplotlib.use("Agg")
os.environ.setdefault("PYTENSOR_FLAGS", "")


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False,
                     help="run slow statistical checks too")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def truth_16() -> pd.DataFrame:
    truth = placeholder_truth()
    return truth[truth["verifier"] == "Qwen3-14B"].reset_index(drop=True)


@pytest.fixture(scope="session")
def real_fit(truth_16):
    """One real fit of 16 groups x 9 rates (the issue's acceptance case, smaller draws)."""
    data = prepare(generate_sweeps(truth_16, seed=11))
    settings = SamplerSettings(draws=500, tune=500, chains=4, seed=3, progress=False)
    return fit(data, "dense", settings=settings), data


@pytest.fixture(scope="session")
def real_fit_path(real_fit, tmp_path_factory):
    path = tmp_path_factory.mktemp("fits") / "dense16.nc"
    real_fit[0].save(path)
    return path
