"""Shared fixtures: a few real, session-scoped fits; everything else is cheap."""

from __future__ import annotations

import os

import matplotlib
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from bayesspec.data import catalog as catalog_module
from bayesspec.data.catalog import default_catalog
from bayesspec.data import prepare
from bayesspec.inference import SamplerSettings
from bayesspec.simulate.synthetic import generate_sweeps, placeholder_truth
from bayesspec.bayes.workflow import fit

matplotlib.use("Agg")
os.environ.setdefault("PYTENSOR_FLAGS", "")

# PyTensor resolves its compile directory (and numba's cache inside it) from $HOME the
# first time it is asked. Ask now, under the real home: the fixture below empties HOME
# for every test (catalog cards), and a compile cache under an empty home is a cold one,
# i.e. every model compiled from scratch in every run (the sbc CLI test: 33 s of CPU cold,
# 8 s warm; measured). Importing bayesspec does not import PyMC, so nothing else does.
import pytensor  # noqa: E402

pytensor.config.base_compiledir  # noqa: B018 - resolved here, kept for the session


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False,
                     help="run slow statistical checks too")
    parser.addoption("--walkthrough", action="store_true", default=False,
                     help="run the README walkthrough as pasted (make test-readme)")


def pytest_collection_modifyitems(config, items):
    # The README walkthrough (every command as pasted, three real fits at the defaults)
    # is one serial chain of about ten minutes on 2 cores: CI runs it as its own step
    # (`make test-readme`) so that the fast suite stays fast.
    run_slow = config.getoption("--runslow")
    run_walkthrough = config.getoption("--walkthrough") or run_slow
    skip_slow = pytest.mark.skip(reason="slow: run with --runslow")
    skip_walkthrough = pytest.mark.skip(reason="README walkthrough: make test-readme")
    for item in items:
        if "walkthrough" in item.keywords and not run_walkthrough:
            item.add_marker(skip_walkthrough)
        elif "slow" in item.keywords and not run_slow:
            item.add_marker(skip_slow)
    # Longest first: xdist hands tests out in this order, and a 80-s test handed out last
    # keeps one worker busy after the others have finished (the suite's wall time).
    items.sort(key=lambda item: "long" not in item.keywords)


@pytest.fixture(scope="session")
def truth_16() -> pd.DataFrame:
    truth = placeholder_truth()
    return truth[truth["verifier"] == "Qwen3-14B"].reset_index(drop=True)


@pytest.fixture(scope="session")
def real_fit(truth_16):
    """One real fit of 16 groups x 9 rates (the dense model's recovery case, smaller draws)."""
    data = prepare(generate_sweeps(truth_16, seed=11))
    settings = SamplerSettings(draws=500, tune=500, chains=4, seed=3, progress=False)
    return fit(data, "dense", settings=settings), data


@pytest.fixture(scope="session")
def real_fit_path(real_fit, tmp_path_factory):
    path = tmp_path_factory.mktemp("fits") / "dense16.nc"
    real_fit[0].save(path)
    return path


@pytest.fixture(autouse=True)
def _isolated_catalog(monkeypatch, tmp_path_factory):
    """Every test sees only the bundled catalog: no $BAYESSPEC_CATALOG, an empty home
    (a user's own cards must not change what a test computes)."""
    monkeypatch.delenv(catalog_module.ENV_VAR, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))
    default_catalog.cache_clear()
    yield
    default_catalog.cache_clear()


def synthetic_dense_fit(n_groups: int = 4, draws: int = 1000, seed: int = 0, *,
                        chain_shift: dict | None = None, divergences: int = 0,
                        extra: dict | None = None):
    """A dense-model Fit whose posterior is synthetic draws around the true C1, C2 of
    ``n_groups`` Qwen3-14B groups (2 chains, no sampling).

    ``chain_shift`` {variable: factor}: the second chain sits ``factor`` times the first
    (an unmixed posterior, large R-hat); ``divergences``: that many divergent transitions
    in sample_stats; ``extra`` {name: (chain, draw) array}: more posterior variables
    (e.g. a pooling spread)."""
    from bayesspec.bayes import DenseLatencyModel
    from bayesspec.inference.fitfile import Fit

    truth = placeholder_truth()
    truth = truth[truth["verifier"] == "Qwen3-14B"].head(n_groups).reset_index(drop=True)
    data = prepare(generate_sweeps(truth, seed=seed))
    model = DenseLatencyModel()
    model.prepare(data)
    groups = model.inputs.groups
    keyed = truth.set_index(["prefill_tokens", "decode_tokens"])
    centre = keyed.loc[list(zip(groups["prefill_tokens"].astype(int),
                                groups["decode_tokens"].astype(int)))]
    rng = np.random.default_rng(seed)
    shape = (2, draws, len(groups))
    shift = chain_shift or {}

    def around(name, values, sd, size):
        values = np.asarray(values, dtype=float) * np.exp(rng.normal(0, sd, size))
        if name in shift:
            values[1] *= shift[name]
        return values

    variables = {
        "C1": (("chain", "draw", "group"), around("C1", centre["C1"], 0.01, shape)),
        "C2": (("chain", "draw", "group"), around("C2", centre["C2"], 0.01, shape)),
        "noise_base": (("chain", "draw"), around("noise_base", 0.02, 0.1, shape[:2])),
        "noise_load": (("chain", "draw"), around("noise_load", 0.02, 0.1, shape[:2]))}
    for name, values in (extra or {}).items():
        variables[name] = (("chain", "draw"), np.asarray(values, dtype=float))
    posterior = xr.Dataset(variables, coords={"chain": [0, 1], "draw": np.arange(draws),
                                              "group": groups["label"].tolist()})
    diverging = np.zeros(shape[:2], dtype=bool)
    diverging.flat[:divergences] = True
    stats = xr.Dataset({"diverging": (("chain", "draw"), diverging)},
                       coords={"chain": [0, 1], "draw": np.arange(draws)})
    tree = xr.DataTree.from_dict({"posterior": posterior, "sample_stats": stats})
    return Fit.from_sampling(model, data, tree)


@pytest.fixture
def dense_fit_factory():
    """:func:`synthetic_dense_fit`, for tests that need a fit without sampling."""
    return synthetic_dense_fit


@pytest.fixture
def mock_sampling(monkeypatch):
    """Sampling replaced by prior draws (``pymc.testing.mock_sample``): for tests of
    plumbing, files and JSON shapes, never of statistics. At most 100 draws per chain."""
    from pymc.testing import mock_sample

    from bayesspec import inference

    def prior_draws(pm_model, settings):
        return mock_sample(model=pm_model, draws=min(settings.draws, 100),
                           chains=settings.chains, random_seed=settings.seed,
                           sample_stats={"diverging": lambda size: np.zeros(size, bool)})

    monkeypatch.setattr(inference, "sample_model", prior_draws)
