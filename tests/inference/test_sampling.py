"""Sampling helpers: nutpie's compiled density, optimised chain starts, model defaults."""

from __future__ import annotations

import numpy as np
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
