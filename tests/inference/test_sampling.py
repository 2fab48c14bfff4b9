"""Sampling helpers: nutpie's compiled density, optimised chain starts, model defaults,
and a model that cannot start said in one line (exit 2), never a traceback or a signal."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import numpy as np
import xarray as xr
import pymc as pm
import pytest

from bayesspec import inference
from bayesspec.inference import SamplerSettings


@pytest.fixture(scope="module")
def toy():
    """mu ~ N(0, 10), log_sigma ~ N(0, 1), y ~ N(mu, exp(log_sigma)); mode near mean(y)."""
    y = np.random.default_rng(0).normal(3.0, 0.5, size=200)
    with pm.Model() as model:
        data = pm.Data("y", y)
        mu = pm.Normal("mu", 0.0, 10.0)
        sigma = pm.LogNormal("sigma", 0.0, 1.0)
        pm.Normal("obs", mu, sigma, observed=data)
    return model, y, inference.compile_model(model, SamplerSettings(progress=False))


def test_log_density_is_the_models_logp(toy):
    model, _, compiled = toy
    f = inference.log_density(compiled)
    x = np.asarray(compiled.initial_point_func(7), dtype=float)
    names = [model.rvs_to_values[rv].name for rv in model.free_RVs]
    point = dict(zip(names, x))
    value, gradient = f(x)
    assert value == pytest.approx(model.compile_logp()(point), rel=1e-10)
    assert gradient == pytest.approx(np.array(model.compile_dlogp()(point)), rel=1e-8)
    # new data through with_data: the density follows
    shifted = compiled.with_data(y=np.full(200, 100.0))
    assert inference.log_density(shifted)(x)[0] < value - 1e5
    # a point outside the support is -inf, not an exception
    assert inference.log_density(compiled)(np.array([0.0, 1e6]))[0] == -np.inf


def test_optimised_starts_climb_to_the_mode_and_sampling_starts_there(toy):
    _, y, compiled = toy
    starts = inference.optimised_starts(compiled, seed=1, candidates=6, keep=3)
    f = inference.log_density(compiled)
    jittered = [f(np.asarray(compiled.initial_point_func(s), float))[0] for s in range(6)]
    assert len(starts) == 3
    assert all(f(s)[0] > max(jittered) for s in starts)
    values = [f(s)[0] for s in starts]
    assert values == sorted(values, reverse=True)
    assert abs(starts[0][0] - y.mean()) < 0.05            # mu at the mode
    settings = SamplerSettings(draws=100, tune=100, chains=2, seed=3, progress=False,
                               init="optimised")
    started = inference.with_optimised_starts(compiled, settings)
    chain_starts = [started.initial_point_func(s) for s in (11, 12, 13, 14)]
    best = inference.optimised_starts(compiled, seed=3)[0]
    for x in chain_starts:                      # every chain near the best climb, jittered
        assert np.abs(x - best).max() <= 0.1
    assert len({tuple(x) for x in chain_starts}) == 4
    tree = inference.sample_compiled(compiled, settings)
    assert abs(float(tree["posterior"]["mu"].mean()) - y.mean()) < 0.1


def test_settings_left_unset_take_the_models_defaults():
    from bayesspec.bayes import get_model_class

    hierarchical = get_model_class("hierarchical")()
    filled = inference.settings_for(hierarchical, SamplerSettings(tune=None, draws=None))
    assert (filled.tune, filled.draws, filled.adaptation, filled.init) == (
        2000, 2000, "diag", "optimised")
    assert filled.target_accept == hierarchical.target_accept
    assert filled.retry_target_accept == hierarchical.retry_target_accept > filled.target_accept
    chosen = inference.settings_for(hierarchical, SamplerSettings(target_accept=0.95))
    assert chosen.retry_target_accept is None      # a target the user chose is kept
    dense = inference.settings_for(get_model_class("dense")(),
                                   SamplerSettings(tune=300, init="optimised"))
    assert (dense.tune, dense.init) == (300, "optimised")     # what the user set wins


def test_divergent_sampling_is_retried_once_at_the_higher_target():
    """Neal's funnel, centred: at target 0.6 NUTS diverges in the neck; the retry samples
    again at the higher target, says so in the tree and in the verdict, and a fit
    without divergences is left as it was."""
    with pm.Model() as funnel:
        log_scale = pm.Normal("log_scale", 0.0, 3.0)
        pm.Normal("x", 0.0, pm.math.exp(log_scale / 2), shape=5)
    settings = SamplerSettings(draws=200, tune=200, chains=2, seed=1, progress=False,
                               target_accept=0.6, retry_target_accept=0.99)
    tree = inference.sample_compiled(inference.compile_model(funnel, settings), settings)
    assert "divergent transitions at target_accept 0.6; sampled again at 0.99" in (
        tree.attrs["retried"])
    assert tree.attrs["target_accept"] == 0.99
    assert tree.attrs["gradients_before_retry"] > 800    # 2 x (200 + 200) draws, >= 1 each
    verdict = inference.convergence_verdict(tree, ["log_scale"])
    assert "sampled again at 0.99" in verdict["text"]

    with pm.Model() as plain:
        pm.Normal("mu", 0.0, 1.0)
    tree = inference.sample_compiled(inference.compile_model(plain, settings), settings)
    assert inference.divergences_of(tree) == 0
    assert "retried" not in tree.attrs and tree.attrs["target_accept"] == 0.6


def _tree_with_steps(steps):
    stats = xr.Dataset({"step_size": (("chain", "draw"), np.asarray(steps, float)),
                        "n_steps": (("chain", "draw"), np.full(np.shape(steps), 7))})
    return xr.DataTree.from_dict({"sample_stats": stats})


def test_a_chain_whose_step_size_collapsed_is_stalled():
    assert inference.stalled_chains(_tree_with_steps([[0.06] * 5, [1e-5] * 5])) == [1]
    assert inference.stalled_chains(_tree_with_steps([[0.06] * 5, [0.02] * 5])) == []
    assert inference.stalled_chains(_tree_with_steps([[1e-5] * 5])) == []   # one chain
    assert inference.stalled_chains(xr.DataTree()) == []


def test_a_stalled_chain_is_sampled_again_once_with_another_seed(monkeypatch):
    """The restart's plumbing: a sampling with a chain standing still is done once more
    with a new seed, the tree says why and what the first cost; a second stall stays
    for R-hat to judge."""
    from bayesspec.inference import sampling

    with pm.Model() as plain:
        pm.Normal("mu", 0.0, 1.0)
    settings = SamplerSettings(draws=5, tune=5, chains=2, seed=4, progress=False)
    compiled = inference.compile_model(plain, settings)
    seeds = []
    outcomes = iter([[[0.06] * 5, [1e-5] * 5], [[0.06] * 5, [0.05] * 5]])

    def fake(compiled, chosen):
        seeds.append(chosen.seed)
        return _tree_with_steps(next(outcomes))

    monkeypatch.setattr(sampling, "_nutpie_sample", fake)
    tree = inference.sample_compiled(compiled, settings)
    assert seeds == [4, 4 + 7919]
    assert "chain 1 stood still" in tree.attrs["restarted"]
    assert tree.attrs["gradients_before_retry"] == 2 * 5 * 7
    outcomes = iter([[[0.06] * 5, [1e-5] * 5]] * 2)
    seeds.clear()
    tree = inference.sample_compiled(compiled, settings)
    assert len(seeds) == 2 and inference.stalled_chains(tree) == [1]


# ------------------------------------------------------------ a model that cannot start

IMPOSSIBLE_MODEL = '''
import subprocess
import sys

import numpy as np
import pymc as pm

with pm.Model() as impossible:
    low = pm.Normal("low", 0.0, 1.0)
    # data 50 standard deviations of the prior away from any support the model has
    pm.Uniform("obs", low, low + 1.0, observed=np.array([50.0, 51.0, 52.0]))
'''


@pytest.fixture(scope="module")
def impossible():
    """A model whose log density is -inf wherever a chain could start."""
    namespace: dict = {}
    exec(IMPOSSIBLE_MODEL, namespace)
    model = namespace["impossible"]
    return model, inference.compile_model(model, SamplerSettings(progress=False))


def one_line_with_hint(message: str) -> None:
    assert "\n" not in message
    assert "--units ms" in message and "--units rpm" in message


def test_a_model_that_cannot_start_is_refused_before_sampling(impossible, toy):
    from bayesspec.errors import BadInput
    from bayesspec.inference.sampling import SamplingFailed, check_starts

    model, compiled = impossible
    settings = SamplerSettings(draws=50, tune=50, chains=2, seed=0, progress=False)
    with pytest.raises(SamplingFailed) as caught:
        inference.sample_compiled(compiled, settings)
    assert isinstance(caught.value, BadInput)              # the CLI's one line, exit 2
    assert "cannot start" in str(caught.value) and "16 starting points" in str(caught.value)
    one_line_with_hint(str(caught.value))
    with pytest.raises(SamplingFailed):
        inference.sample_compiled(compiled, replace(settings, init="optimised"))
    check_starts(toy[2], seed=0)                           # a model that can start passes
    with pytest.raises(SamplingFailed) as caught:
        inference.sample_model(model, SamplerSettings(draws=20, tune=20, chains=2, cores=1,
                                                      seed=0, progress=False,
                                                      sampler="pymc"))
    assert "PyMC: Initial evaluation of model at starting point failed" in str(caught.value)
    one_line_with_hint(str(caught.value))


def test_a_failing_sampler_ends_in_one_line_not_a_signal(tmp_path):
    """nutpie's own "All initialization points failed" (reached here past the check of
    the starts): one line and the exit code the CLI gives, not a segmentation fault as
    the failed sampler's threads outlive the error into interpreter shutdown."""
    script = tmp_path / "fail.py"
    script.write_text(IMPOSSIBLE_MODEL + '''
import sys
from bayesspec import inference
from bayesspec.errors import BadInput
from bayesspec.inference.sampling import _nutpie_sample

settings = inference.SamplerSettings(draws=50, tune=50, chains=4, cores=2, progress=False)
try:
    _nutpie_sample(inference.compile_model(impossible, settings), settings)
except BadInput as error:
    print(f"{type(error).__name__}: {error}", file=sys.stderr)
    sys.exit(2)
''')
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("SamplingFailed: the sampler cannot start")
    assert "All initialization points failed" in lines[0]
    one_line_with_hint(lines[0])


def test_a_failed_refit_job_stays_one_line():
    from bayesspec.inference.sampling import SamplingFailed, job_failure

    said = ("SamplingFailed: the sampler cannot start: the model's log density is not "
            "finite at any of 16 starting points; check the data: the table wa")  # cut
    failure = job_failure(said, "sampling fold 2 failed")
    assert isinstance(failure, SamplingFailed)
    assert str(failure).startswith("sampling fold 2 failed: the sampler cannot start")
    one_line_with_hint(str(failure))
    other = job_failure("ValueError: shapes differ", "sampling fold 2 failed")
    assert type(other) is RuntimeError and "ValueError: shapes differ" in str(other)


@pytest.mark.parametrize("verb", ["fit", "check"])
def test_the_command_line_says_a_sampler_failure_in_one_line(tmp_path, monkeypatch, capsys,
                                                             verb):
    from bayesspec.cli import main
    from bayesspec.inference.sampling import SAMPLING_HINT, SamplingFailed
    from bayesspec.simulate import setup, sweep

    def cannot_start(pm_model, settings):
        raise SamplingFailed(f"the sampler cannot start: the model's log density is not "
                             f"finite at any of 16 starting points; {SAMPLING_HINT}")

    monkeypatch.setattr(inference, "sample_model", cannot_start)
    path = tmp_path / "sweep.csv"
    sweep(setup("Qwen3-8B", "H100", prefill=512, decode=512), 6, n_requests=200,
          seed=0).rows.to_csv(path, index=False)
    out = tmp_path / "fit.nc"
    argv = (["fit", str(path), "-o", str(out)] if verb == "fit"
            else ["check", str(path), "--ppc", "--model", "dense"])
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    error = lines[-1]
    assert error.startswith("bayesspec: error: ") and "the sampler cannot start" in error
    one_line_with_hint(error)
    if verb == "fit":
        assert error.startswith(f"bayesspec: error: {path}: ") and not out.exists()
