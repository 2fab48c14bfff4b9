"""Answering from a saved fit is light: the answering verbs load none of PyMC, PyTensor,
ArviZ, numba or matplotlib (checked in a fresh interpreter's ``sys.modules``, not timed:
``benchmarks/answer_speed.py`` times them), and the convergence verdict they read from
the fit file is the one its draws give, in older files too; fit files read with h5py are the
trees xarray reads.

Also the compile cache (:mod:`bayesspec.inference.compile_cache`): its C callbacks give nutpie's
log density and gradient, follow ``with_data``, and a second compile loads them from disk.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bayesspec.data import prepare
from bayesspec.simulate.synthetic import generate_sweeps, speculative_truth

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pymc", "pytensor", "arviz", "numba", "matplotlib", "dask")

# Every verb is run in one fresh interpreter; what it imported is printed at the end.
# (argv=None, as the console script calls it: the process's own command line)
PROBE = """
import contextlib, io, json, sys
from bayesspec.cli import main
codes, errors = {}, {}
for argv in json.loads(sys.argv[1]):
    said = io.StringIO()
    sys.argv = ["bayesspec", *argv]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(said):
        codes[argv[0]] = main()
    errors[argv[0]] = said.getvalue()[-500:]
loaded = sorted(name for name, module in sys.modules.items() if module is not None)
print(json.dumps({"codes": codes, "errors": errors, "modules": loaded}))
"""


@pytest.fixture(scope="module")
def speculative_fit_file(tmp_path_factory):
    """A speculative fit of prior draws (mock sampling: plumbing, not statistics) of a
    dense baseline and two SD configurations, saved as a user's `fit` would."""
    from pymc.testing import mock_sample

    from bayesspec import inference
    from bayesspec.bayes.workflow import fit

    def prior_draws(pm_model, settings):
        return mock_sample(model=pm_model, draws=50, chains=2, random_seed=1,
                           sample_stats={"diverging": lambda size: np.zeros(size, bool)})

    truth = speculative_truth(alphas=(0.8,), ks=(2, 3))
    data = prepare(generate_sweeps(truth, n_rates=6, seed=3))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(inference, "sample_model", prior_draws)
        result = fit(data, "speculative")
    path = tmp_path_factory.mktemp("light") / "fit.nc"
    result.save(path)
    return path


def run_verbs(*argvs) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps([list(a) for a in argvs])],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def loaded(modules: list[str], package: str) -> bool:
    return any(m == package or m.startswith(package + ".") for m in modules)


def test_answering_verbs_import_no_pymc_arviz_numba_or_matplotlib(speculative_fit_file):
    fit = str(speculative_fit_file)
    probe = run_verbs(("predict", fit, "--rps", "1,2,4", "--k", "0"),
                      ("speedup", fit, "--alpha", "0.8", "--k", "3", "--rps", "1,2,4"),
                      ("crossover", fit, "--alpha", "0.8", "--k", "3", "--json"),
                      ("kstar", fit, "--alpha", "0.8", "--rps", "1,4"),
                      ("summary", fit, "--json"))
    assert set(probe["codes"].values()) <= {0, 3}, (probe["codes"], probe["errors"])
    heavy = [package for package in HEAVY if loaded(probe["modules"], package)]
    assert heavy == [], f"answering from a fit file imported {heavy}"
    # the probe sees what it should: the answers did need the posterior and pandas
    assert loaded(probe["modules"], "bayesspec.decisions")
    assert loaded(probe["modules"], "xarray")


def test_the_verdict_read_from_the_file_is_the_one_the_draws_give(speculative_fit_file):
    from bayesspec.bayes import load_fit
    from bayesspec.inference import DIAGNOSTICS_ATTR, convergence_verdict

    fit = load_fit(speculative_fit_file)
    assert DIAGNOSTICS_ATTR in fit.tree.attrs
    stored = fit.diagnostics
    # the same tree without the stored numbers (a file written before they were kept)
    fresh = fit.tree.copy()
    del fresh.attrs[DIAGNOSTICS_ATTR]
    computed = convergence_verdict(fresh, fit.model().decision_variables())
    assert json.dumps(stored, sort_keys=True, default=str) == \
        json.dumps(computed, sort_keys=True, default=str)


def test_an_older_file_without_stored_diagnostics_still_answers(speculative_fit_file,
                                                                tmp_path):
    from bayesspec.bayes import load_fit
    from bayesspec.inference import DIAGNOSTICS_ATTR, stored_variable_diagnostics

    fit = load_fit(speculative_fit_file)
    verdict = fit.diagnostics
    old = fit.tree.copy()
    del old.attrs[DIAGNOSTICS_ATTR]
    path = tmp_path / "old.nc"
    old.to_netcdf(path, engine="h5netcdf")
    again = load_fit(path)
    assert DIAGNOSTICS_ATTR not in again.tree.attrs
    assert again.diagnostics["text"] == verdict["text"]
    # computed when asked, and kept (a later save writes them)
    assert stored_variable_diagnostics(again.tree) is not None


def test_stored_diagnostics_of_other_draws_are_not_used(speculative_fit_file):
    """Changed draws (the fingerprint no longer matches) mean the verdict is recomputed,
    never read from numbers that belong to other draws."""
    from bayesspec.bayes import load_fit
    from bayesspec.inference import DIAGNOSTICS_ATTR, stored_variable_diagnostics

    tree = load_fit(speculative_fit_file).tree.copy()
    assert stored_variable_diagnostics(tree) is not None
    posterior = tree["posterior"].to_dataset()
    name = next(iter(posterior.data_vars))
    posterior[name] = posterior[name] * 1.0001
    tree["posterior"] = posterior
    assert DIAGNOSTICS_ATTR in tree.attrs
    assert stored_variable_diagnostics(tree) is None


def test_model_modules_load_pymc_only_when_a_model_is_built():
    code = ("import sys; from bayesspec.bayes import get_model_class; "
            "model = get_model_class('speculative')(); "
            "print('pymc' in sys.modules, 'pytensor' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ,
                                                               "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "False"]


# ----------------------------------------------------------------------- compile cache

def test_cached_callbacks_give_nutpies_density_follow_new_data_and_reload(truth_16):
    import ctypes

    from bayesspec.bayes import DenseLatencyModel
    from bayesspec.inference.compile_cache import compile_pymc_model

    data = prepare(generate_sweeps(truth_16.iloc[:2], n_rates=5, seed=2))
    pm_model = DenseLatencyModel().build(data)
    first = compile_pymc_model(pm_model)
    assert first.compiled_logp_func._pyfunc.__name__ == "bayesspec_logp"

    def density(compiled, x):
        gradient, value = np.zeros(compiled.n_dim), np.zeros(())
        pointer = ctypes.POINTER(ctypes.c_double)
        code = compiled.compiled_logp_func.ctypes(
            compiled.n_dim, x.ctypes.data_as(pointer), gradient.ctypes.data_as(pointer),
            value.ctypes.data_as(pointer), compiled.user_data.ctypes.data)
        assert code == 0
        return float(value), gradient

    x = np.random.default_rng(0).normal(0, 0.3, first.n_dim)
    value, gradient = density(first, x)
    # PyTensor's own function of the same graph (its shared data: the model's)
    expected_value, expected_gradient = first.logp_func(x)
    assert np.isclose(value, expected_value, rtol=1e-10)
    assert np.allclose(gradient, expected_gradient, rtol=1e-8, atol=1e-10)

    # new data of the same shape reach the callback through nutpie's with_data
    shared = {var.name: var for var in first.shared_var_keys}
    name = next(n for n, var in shared.items() if np.asarray(var.get_value()).dtype == float
                and np.asarray(var.get_value()).ndim == 1)
    changed = np.asarray(shared[name].get_value()) * 1.1
    moved_value, _ = density(first.with_data(**{name: changed}), x)
    shared[name].set_value(changed)
    assert np.isclose(moved_value, first.logp_func(x)[0], rtol=1e-10)
    assert not np.isclose(moved_value, value)

    # a second compile (a new process does the same) loads the callbacks from disk
    shared[name].set_value(changed / 1.1)
    second = compile_pymc_model(pm_model)
    assert second.compiled_logp_func.cache_hits == 1
    assert np.isclose(density(second, x)[0], value, rtol=1e-12)


# ----------------------------------------------------------------------- reading fit files

def assert_same_tree(fast, slow) -> None:
    import xarray as xr

    assert set(fast.groups) == set(slow.groups)
    for group in slow.groups:
        ours, theirs = fast[group].to_dataset(), slow[group].to_dataset()
        xr.testing.assert_identical(ours, theirs)
        assert list(ours.data_vars) == list(theirs.data_vars), group
        for name in theirs.variables:
            assert ours[name].dtype == theirs[name].dtype, (group, name)
        for key, value in theirs.attrs.items():
            assert type(ours.attrs[key]) is type(value), (group, key)


def test_fit_files_read_with_h5py_are_the_trees_xarray_reads(speculative_fit_file, tmp_path,
                                                            dense_fit_factory):
    import xarray as xr

    from bayesspec.inference.netcdf_read import read_datatree

    dense = tmp_path / "dense.nc"
    dense_fit_factory(n_groups=3, draws=50).save(dense)
    for path in (speculative_fit_file, dense):
        slow = xr.open_datatree(path, engine="h5netcdf")
        slow.load()
        assert_same_tree(read_datatree(path), slow)


def test_a_file_the_fast_reader_does_not_know_is_read_by_xarray(speculative_fit_file,
                                                               tmp_path):
    import shutil

    import h5py

    from bayesspec.inference.fitfile import read_tree
    from bayesspec.inference.netcdf_read import Unsupported, read_datatree

    path = tmp_path / "scaled.nc"
    shutil.copy(speculative_fit_file, path)
    with h5py.File(path, "r+") as handle:
        handle["fit_data/rps"].attrs["scale_factor"] = 2.0
    with pytest.raises(Unsupported):
        read_datatree(path)
    tree = read_tree(path)   # xarray applies the scale factor
    original = read_tree(speculative_fit_file)
    assert np.allclose(tree["fit_data"]["rps"].values, 2 * original["fit_data"]["rps"].values)
