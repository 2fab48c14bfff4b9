"""Sampling and convergence diagnostics.

``sample_model`` compiles a model with nutpie (the default sampler: measured fastest on
these models, see benchmarks/) and returns an ``xarray.DataTree``; ``fit`` wraps it with
the data and the model's identity into a :class:`bayesspec.inference.fitfile.Fit`.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import xarray as xr

from bayesspec.outputs import log

RHAT_LIMIT = 1.01
ESS_LIMIT = 400


#: Chains when nobody says (the CLI and the Python API alike): four chains give R-hat
#: something to compare and keep two cores busy.
DEFAULT_CHAINS = 4


@dataclass
class SamplerSettings:
    """How to sample. Every field left None is resolved in one place,
    :func:`settings_for`, from the model's measured defaults (draws, tune,
    target_accept, adaptation, init) and from the machine (cores)."""

    draws: int | None = None
    tune: int | None = None
    chains: int | None = None
    cores: int | None = None     # None: one per chain, at most the usable cores
    seed: int | None = None
    progress: bool = True
    sampler: str = "nutpie"      # "nutpie", "pymc", or with JAX "numpyro" / "blackjax"
    target_accept: float | None = None
    # When sampling at the model's own target_accept gives divergent transitions, sample
    # once more at this higher one (the model's ``retry_target_accept``; settings_for
    # leaves it None when target_accept was given: a chosen target is kept as given).
    retry_target_accept: float | None = None
    # nutpie mass-matrix adaptation: "diag" or "low_rank".
    adaptation: str | None = None
    # Chain starts: "jitter" (nutpie's: the prior's support point, jittered) or
    # "optimised" (see optimised_starts).
    init: str | None = None
    # "nuts" (sample), or "advi": mean-field ADVI checked by Pareto-smoothed importance
    # resampling (bayesspec.inference.approximate).
    method: str = "nuts"
    # Optimisation steps of an approximation (None: approximate.DEFAULT_STEPS).
    steps: int | None = None
    # Sample with NUTS when the approximation's Pareto k is above the limit (0.7).
    fallback: bool = True


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def settings_for(latency_model, settings: SamplerSettings | None = None) -> SamplerSettings:
    """The settings with every unset field filled: the model's defaults for draws, tune,
    target_accept, adaptation and init, DEFAULT_CHAINS chains, one core per chain up to
    the usable cores; the model's ``retry_target_accept`` unless a target was given."""
    settings = settings or SamplerSettings()
    model_defaults = {"tune": latency_model.default_tune, "draws": latency_model.default_draws,
                      "target_accept": latency_model.target_accept,
                      "adaptation": latency_model.adaptation, "init": latency_model.init,
                      "chains": DEFAULT_CHAINS}
    filled = {name: value for name, value in model_defaults.items()
              if getattr(settings, name) is None}
    if settings.target_accept is None and settings.retry_target_accept is None:
        filled["retry_target_accept"] = getattr(latency_model, "retry_target_accept", None)
    settings = replace(settings, **filled)
    if settings.cores is None:
        settings = replace(settings, cores=max(1, min(settings.chains, usable_cores())))
    return settings


METHODS = ("nuts", "advi")


@dataclass(frozen=True)
class WithPyMCModel:
    """A nutpie-compiled model kept with the PyMC model it came from: an approximate
    method fits on the PyMC model and checks against the compiled density (and falls back
    to NUTS on the compiled model). ``with_data`` as nutpie's."""

    compiled: object
    pm_model: object

    def with_data(self, **data) -> "WithPyMCModel":
        return replace(self, compiled=self.compiled.with_data(**data))


def check_method(settings: SamplerSettings) -> None:
    if settings.method not in METHODS:
        raise ValueError(f"unknown method {settings.method!r}; have {', '.join(METHODS)}")


def compile_model(pm_model, settings: SamplerSettings):
    """Compile once with nutpie; reuse the result with ``sample_compiled`` and new data.
    For an approximate ``settings.method`` the PyMC model is kept with it
    (:class:`WithPyMCModel`). Compiled code is cached on disk across runs
    (:mod:`bayesspec.inference.compile_cache`)."""
    from bayesspec.inference.compile_cache import compile_pymc_model

    check_method(settings)
    started = time.perf_counter()
    log("compiling model (numba)...", settings.progress)
    # A model may say where its chains start (e.g. dense with a decode profile: each
    # group at its own data's costs); the starts are jittered around it as usual.
    starts = getattr(pm_model, "chain_starts", None)
    compiled = (compile_pymc_model(pm_model, initial_points=starts) if starts
                else compile_pymc_model(pm_model))
    log(f"compiled in {time.perf_counter() - started:.1f} s", settings.progress)
    if settings.method != "nuts":
        return WithPyMCModel(compiled, pm_model)
    return compiled


def sample_compiled(compiled, settings: SamplerSettings,
                    data: dict | None = None) -> xr.DataTree:
    """Sample a compiled model, optionally with new values for its ``pm.Data``; with an
    approximate ``settings.method``, approximate (:func:`approximate`) instead. Always
    nutpie (``settings.sampler`` chooses only for :func:`sample_model`). With divergent
    transitions and a higher ``settings.retry_target_accept``, samples once more at that
    target (said on stderr; the tree's attrs ``retried`` says why, ``target_accept``
    which target the draws come from)."""
    check_method(settings)
    if data:
        compiled = compiled.with_data(**data)
    if settings.method != "nuts":
        if not isinstance(compiled, WithPyMCModel):
            raise ValueError(f"method {settings.method!r} needs the PyMC model: compile with "
                             "compile_model(pm_model, settings) with that method set")
        return approximate(compiled, settings)
    if isinstance(compiled, WithPyMCModel):
        compiled = compiled.compiled
    if settings.init == "optimised":
        compiled = with_optimised_starts(compiled, settings)
    tree = _nutpie_sample(compiled, settings)
    target, retry = settings.target_accept or 0.9, settings.retry_target_accept
    divergent = divergences_of(tree)
    if divergent and retry is not None and retry > target:
        # A divergence means the step size was too large somewhere in the posterior;
        # a smaller one (a higher target) usually reaches it. Most data sets need no
        # retry, and a fixed high target would cost them twice the gradients per draw.
        reason = (f"{divergent} divergent transitions at target_accept {target:g}; "
                  f"sampled again at {retry:g}")
        log(f"note: {reason}", settings.progress)
        spent = sum(int(tree[group]["n_steps"].values.sum())
                    for group in ("warmup_sample_stats", "sample_stats")
                    if group in tree.children and "n_steps" in tree[group].data_vars)
        tree = _nutpie_sample(compiled, replace(settings, target_accept=retry,
                                                retry_target_accept=None))
        tree.attrs["retried"] = reason
        # what the discarded first sampling cost, for honest gradient counts
        tree.attrs["gradients_before_retry"] = spent
        target = retry
    tree.attrs["target_accept"] = float(target)
    return tree


def _nutpie_sample(compiled, settings: SamplerSettings) -> xr.DataTree:
    import nutpie

    started = time.perf_counter()
    log(f"sampling {settings.chains} chains x ({settings.tune} tune + {settings.draws} "
        f"draws) at target_accept {settings.target_accept or 0.9:g}...", settings.progress)
    tree = nutpie.sample(compiled, draws=settings.draws, tune=settings.tune,
                         chains=settings.chains, seed=settings.seed,
                         progress_bar=settings.progress and sys.stderr.isatty(),
                         cores=settings.cores or 1,
                         target_accept=settings.target_accept or 0.9,
                         adaptation=settings.adaptation or "diag")
    log(f"sampled in {time.perf_counter() - started:.1f} s", settings.progress)
    return tree


def approximate(model: WithPyMCModel, settings: SamplerSettings) -> xr.DataTree:
    """The approximate posterior of ``settings.method`` (:mod:`bayesspec.inference.approximate`),
    started at the best optimised start; when its Pareto k is above the limit, NUTS on
    the same compiled model (said on stderr, recorded in the tree's attrs ``fallback``,
    ``approximation`` and ``pareto_k``) unless ``settings.fallback`` is False."""
    from bayesspec.inference.approximate import PARETO_K_LIMIT, approximate_posterior

    _sync_data(model)
    started = time.perf_counter()
    log(f"fitting the {settings.method} approximation...", settings.progress)
    f = log_density(model.compiled)
    start = optimised_starts(model.compiled, settings.seed)[0]
    tree = approximate_posterior(model.pm_model, model.compiled, f, start,
                                 method=settings.method, steps=settings.steps,
                                 chains=settings.chains, draws=settings.draws,
                                 seed=settings.seed)
    k = float(tree.attrs["pareto_k"])
    log(f"{settings.method} in {time.perf_counter() - started:.1f} s: Pareto k {k:.2f}, "
        f"importance ESS {tree.attrs['importance_ess']:.0f} of {tree.attrs['proposals']}",
        settings.progress)
    if k <= PARETO_K_LIMIT or not settings.fallback:
        return tree
    reason = (f"the {settings.method} approximation is not trusted (Pareto k {k:.2f} > "
              f"{PARETO_K_LIMIT}); sampled with NUTS instead")
    log(f"note: {reason}")
    fallen = sample_compiled(model.compiled, replace(settings, method="nuts"))
    fallen.attrs.update({"method": "nuts", "approximation": settings.method,
                         "pareto_k": tree.attrs["pareto_k"], "fallback": reason,
                         "approximation_seconds": tree.attrs["approximation_seconds"]})
    return fallen


def _sync_data(model: WithPyMCModel) -> None:
    """Give the PyMC model's shared variables (``pm.Data``, and the lifted observations
    of ``sbc.swappable_observations``) the values the compiled model holds now, so the
    approximation is fitted to the data the density checks it against."""
    from pytensor.compile.sharedvalue import SharedVariable
    from pytensor.graph.traversal import ancestors

    pm_model, compiled = model.pm_model, model.compiled
    graph = [pm_model.logp(), *pm_model.deterministics]
    shared = {v.name: v for v in ancestors(graph) if isinstance(v, SharedVariable) and v.name}
    for var, key in compiled.shared_var_keys.items():
        if var.name in shared:
            target = shared[var.name]
            target.set_value(np.asarray(compiled.shared_data[key], dtype=target.dtype))


def log_density(compiled):
    """``f(x) -> (logp, gradient)`` at an unconstrained point: the very function nutpie
    samples (its compiled numba callback, with the model's current data), so no second
    compilation. A point where it fails or is not finite gives (-inf, zeros)."""
    import ctypes

    callback = compiled.compiled_logp_func.ctypes
    n = compiled.n_dim
    user_data = ctypes.c_void_p(compiled.user_data.ctypes.data)
    double_p = ctypes.POINTER(ctypes.c_double)

    def f(x):
        x = np.ascontiguousarray(x, dtype=float)
        gradient, logp = np.zeros(n), np.zeros(1)
        code = callback(n, x.ctypes.data_as(double_p), gradient.ctypes.data_as(double_p),
                        logp.ctypes.data_as(double_p), user_data)
        if code != 0 or not np.isfinite(logp[0]):
            return -np.inf, np.zeros(n)
        return float(logp[0]), gradient
    return f


def optimised_starts(compiled, seed: int | None, candidates: int = 8, keep: int = 4,
                     max_iterations: int = 300) -> list[np.ndarray]:
    """Chain starts near the posterior's mode(s): ``candidates`` of nutpie's own jittered
    starts, the ``keep`` with the highest density each climbed by L-BFGS, best first.

    Why: with broad priors a jittered start can land where the model misfits the data
    (a design pushed past saturation, the noise scale inflated to explain it) and a
    chain can spend the whole run in that local mode. Measured on the hierarchical SBC
    design: 4 of the first 31 simulations had one chain stuck so (R-hat 1.83-1.85);
    started here, the same simulations gave R-hat 1.020 and 1.009. The climbs start from
    different points; ``with_optimised_starts`` starts every chain near the best.
    """
    from scipy import optimize
    from threadpoolctl import threadpool_limits

    f = log_density(compiled)
    rng = np.random.default_rng(seed)
    points = [np.asarray(compiled.initial_point_func(int(s)), dtype=float)
              for s in rng.integers(0, 2**31, candidates)]
    values = np.array([f(x)[0] for x in points])
    order = [i for i in np.argsort(-values) if np.isfinite(values[i])][:keep]
    climbed = []
    for i in order:
        # One BLAS thread: L-BFGS on a few hundred dimensions is tiny work, and threads
        # fighting over 2 busy cores made it 40x slower (16.6 s vs 0.45 s, measured).
        with threadpool_limits(1):
            result = optimize.minimize(lambda x: tuple(-v for v in f(x)), points[i],
                                       jac=True, method="L-BFGS-B",
                                       options={"maxiter": max_iterations})
        improved = np.isfinite(result.fun) and -result.fun >= values[i]
        climbed.append((-result.fun, result.x) if improved else (values[i], points[i]))
    climbed.sort(key=lambda item: -item[0])
    return [x for _, x in climbed] or points[:1]


def with_optimised_starts(compiled, settings: SamplerSettings):
    """The compiled model with every chain starting at the best optimised start, each
    jittered by +-0.1 on the unconstrained scale.

    Only the best: measured on the bundled dense data (4 chains), the fourth-best climb
    ended in a secondary mode 11 nats below the best (c1p's level e^-3.4 lower, the noise
    moved to the load term) and the chain started there never left it (R-hat 1.53), while
    jittered starts and the best climb both found the main mode. Chains still separate in
    warm-up, so R-hat measures their mixing; what it no longer sees is a mode that no
    chain is started in.
    """
    starts = optimised_starts(compiled, settings.seed)
    log(f"starting {settings.chains} chains near the best of {len(starts)} optimised "
         f"points", settings.progress)

    def initial_point(seed):
        jitter = np.random.default_rng(int(seed) % 2**32).uniform(-0.1, 0.1, len(starts[0]))
        return starts[0] + jitter

    return replace(compiled, initial_point_func=initial_point)


def sample_model(pm_model, settings: SamplerSettings) -> xr.DataTree:
    """Draw from the posterior of a built PyMC model (``settings.method`` "nuts"), or
    approximate it (an approximate method: :func:`approximate`; the nutpie compilation
    gives the exact density it is checked against, and the NUTS fallback)."""
    check_method(settings)
    if settings.method != "nuts":
        return approximate(compile_model(pm_model, settings), settings)
    if settings.sampler == "nutpie":
        return sample_compiled(compile_model(pm_model, settings), settings)
    if settings.sampler in JAX_SAMPLERS:
        return sample_jax(pm_model, settings)
    if settings.sampler == "pymc":
        import pymc as pm

        started = time.perf_counter()
        with pm_model:
            tree = pm.sample(draws=settings.draws, tune=settings.tune, chains=settings.chains,
                             random_seed=settings.seed, progressbar=settings.progress,
                             nuts_sampler="pymc", cores=settings.cores or 1,
                             target_accept=settings.target_accept or 0.9)
        log(f"sampled in {time.perf_counter() - started:.1f} s", settings.progress)
        return tree
    raise ValueError(f"unknown sampler {settings.sampler!r}")


#: NUTS on JAX through PyMC (the optional extra ``bayesspec[gpu]``).
JAX_SAMPLERS = ("numpyro", "blackjax")


def jax_missing(sampler: str) -> str | None:
    """Why ``sampler`` cannot run here (a sentence), or None when it can."""
    import importlib.util

    for package in ("jax", sampler):
        if importlib.util.find_spec(package) is None:
            return (f"--sampler {sampler} needs {package}, an optional extra: pip install "
                    "'bayesspec[gpu]' (on a machine without a CUDA GPU: pip install jax "
                    + ("numpyro)" if sampler == "numpyro" else "'blackjax<1.6')"))
    return None


def jax_gpu() -> bool:
    """Whether JAX sees a GPU."""
    import jax

    return any(device.platform == "gpu" for device in jax.devices())


def sample_jax(pm_model, settings: SamplerSettings) -> xr.DataTree:
    """PyMC's JAX NUTS (numpyro or blackjax): chains vectorised (one program steps every
    chain) on a GPU, or on a CPU with fewer JAX devices than chains; else one device per
    chain. The tree has the /posterior and /sample_stats (``diverging``) the verdict
    reads."""
    import jax
    import pymc as pm

    reason = jax_missing(settings.sampler)
    if reason:
        raise ValueError(reason)
    chain_method = ("vectorized" if jax_gpu() or jax.local_device_count() < settings.chains
                    else "parallel")
    started = time.perf_counter()
    log(f"sampling {settings.chains} chains with {settings.sampler} (JAX, {chain_method})...",
        settings.progress)
    # No progress bar with blackjax: its bar is a JAX IO callback, which JAX refuses
    # inside vectorised chains ("IO effect not supported in vmap-of-cond").
    progressbar = settings.progress and settings.sampler == "numpyro"
    with pm_model:
        tree = pm.sample(draws=settings.draws, tune=settings.tune, chains=settings.chains,
                         random_seed=settings.seed, progressbar=progressbar,
                         nuts_sampler=settings.sampler,
                         nuts={"chain_method": chain_method,
                               "target_accept": settings.target_accept or 0.9})
    log(f"sampled in {time.perf_counter() - started:.1f} s", settings.progress)
    tree.attrs["sampler"] = settings.sampler
    return tree


def stacked_draws(tree: xr.DataTree, name: str) -> np.ndarray:
    """A posterior variable's draws with chains and draws stacked first (samples, ...)."""
    values = tree["posterior"][name].stack(sample=("chain", "draw")).transpose("sample", ...)
    return np.asarray(values.values, dtype=float)


def resample_within_chains(tree: xr.DataTree, log_weights: np.ndarray) -> xr.DataTree:
    """The draws of ``tree`` reweighted by ``log_weights`` (one per draw, chains stacked
    first as in :func:`stacked_draws`): each chain keeps its length and order, its draws
    repeated or dropped by systematic resampling on its own normalised weights (a draw of
    weight w appears about w times the chain's length). Applied alike to the posterior
    and the sample stats, so each draw keeps its own stats; warm-up is left as sampled."""
    import copy

    posterior = tree["posterior"]
    chains, draws = posterior.sizes["chain"], posterior.sizes["draw"]
    # stacked_draws orders (chain, draw) with the chain outermost
    logs = np.asarray(log_weights, dtype=float).reshape(chains, draws)
    picks = np.empty((chains, draws), dtype=int)
    offsets = (np.arange(draws) + 0.5) / draws
    for c in range(chains):
        weights = np.exp(logs[c] - np.max(logs[c]))
        cumulative = np.cumsum(weights / weights.sum())
        picks[c] = np.minimum(np.searchsorted(cumulative, offsets), draws - 1)
    out = copy.deepcopy(tree)
    index = xr.DataArray(picks, dims=("chain", "draw"))
    for name in ("posterior", "sample_stats"):
        if name not in out.children:
            continue
        dataset = out[name].to_dataset()
        chosen = dataset.isel(draw=index)
        out[name] = xr.DataTree(chosen.assign_coords(draw=dataset["draw"]),
                                name=name)
    return out


#: Root attr of a fit file holding every posterior variable's (R-hat max, bulk ESS min),
#: computed once when the fit is made: answering from a saved fit then needs no ArviZ
#: (about a second of imports). Stored with a fingerprint of the draws it was computed
#: from, and recomputed when that does not match (or in an older file without it).
DIAGNOSTICS_ATTR = "variable_diagnostics"


def _posterior_fingerprint(posterior: xr.Dataset) -> str:
    import hashlib

    digest = hashlib.sha256()
    for name in sorted(posterior.data_vars):
        values = np.ascontiguousarray(posterior[name].values)
        digest.update(f"{name}|{values.dtype.str}|{values.shape}|".encode())
        digest.update(values.tobytes())
    return digest.hexdigest()


def stored_variable_diagnostics(tree: xr.DataTree) -> dict[str, tuple] | None:
    """The per-variable diagnostics kept in the tree's attrs, or None when absent or
    computed from other draws than the tree's posterior."""
    import json

    text = tree.attrs.get(DIAGNOSTICS_ATTR)
    if not text or "posterior" not in tree.children:
        return None
    try:
        stored = json.loads(text)
        variables = {str(n): (float(r), float(e)) for n, (r, e) in stored["variables"].items()}
        fingerprint = stored["fingerprint"]
    except (ValueError, KeyError, TypeError):
        return None
    if fingerprint != _posterior_fingerprint(tree["posterior"].to_dataset()):
        return None
    return variables


def record_variable_diagnostics(tree: xr.DataTree) -> dict[str, tuple]:
    """Compute every posterior variable's diagnostics (ArviZ) unless the tree already
    holds them for its draws, and keep them in its attrs (:data:`DIAGNOSTICS_ATTR`)."""
    import json

    stored = stored_variable_diagnostics(tree)
    if stored is not None:
        return stored
    posterior = tree["posterior"].to_dataset()
    computed = _computed_diagnostics(posterior, list(posterior.data_vars))
    tree.attrs[DIAGNOSTICS_ATTR] = json.dumps(
        {"fingerprint": _posterior_fingerprint(posterior),
         "variables": {n: [r, e] for n, (r, e) in computed.items()}})
    return computed


def _variable_diagnostics(tree: xr.DataTree, names: list[str]) -> dict[str, tuple]:
    """Per posterior variable: (R-hat max, bulk ESS min) over its finite elements (from
    the tree's stored diagnostics when they are those of its draws).

    Deterministics that are NaN by construction (a setup without a dense baseline) carry
    no information about convergence and are left out."""
    stored = stored_variable_diagnostics(tree)
    if stored is not None:
        return {n: stored[n] for n in names if n in stored}
    return _computed_diagnostics(tree["posterior"].to_dataset(), names)


def _computed_diagnostics(posterior: xr.Dataset, names: list[str]) -> dict[str, tuple]:
    import arviz as az

    names = [n for n in names if n in posterior.data_vars
             and not np.isnan(posterior[n].values).all()]
    if not names:
        return {}
    subset = posterior[names]
    n_chains = subset.sizes.get("chain", 1)
    rhat = az.rhat(subset) if n_chains > 1 else None
    ess = az.ess(subset, method="bulk")
    return {n: (_finite_extreme(rhat[n].values, np.max) if rhat is not None else float("nan"),
                _finite_extreme(ess[n].values, np.min)) for n in names}


def divergences_of(tree: xr.DataTree) -> int:
    if "sample_stats" in tree.children and "diverging" in tree["sample_stats"].data_vars:
        return int(tree["sample_stats"]["diverging"].values.sum())
    return 0


def diagnostics(tree: xr.DataTree, variables: list[str] | None = None) -> dict:
    """R-hat max, bulk-ESS min and divergences over the named posterior variables (all
    when None), and whether they pass (R-hat <= RHAT_LIMIT, ESS >= ESS_LIMIT, no
    divergent transition, more than one chain)."""
    posterior = tree["posterior"].to_dataset()
    per_variable = _variable_diagnostics(tree, list(variables or posterior.data_vars))
    rhat_max = max((r for r, _ in per_variable.values() if not np.isnan(r)),
                   default=float("nan"))
    ess_min = min((e for _, e in per_variable.values() if not np.isnan(e)),
                  default=float("nan"))
    divergences = divergences_of(tree)
    n_chains = posterior.sizes.get("chain", 1)
    problems = _problems(rhat_max, ess_min, n_chains)
    if divergences:
        problems.append(f"{divergences} divergent transitions")
    return {"rhat_max": rhat_max, "ess_bulk_min": ess_min, "divergences": divergences,
            "converged": not problems, "problems": problems}


def _problems(rhat_max: float, ess_min: float, n_chains: int) -> list[str]:
    problems = []
    if n_chains > 1 and not rhat_max <= RHAT_LIMIT:
        problems.append(f"R-hat {rhat_max:.3f} > {RHAT_LIMIT}")
    if not ess_min >= ESS_LIMIT:
        problems.append(f"bulk ESS {ess_min:.0f} < {ESS_LIMIT}")
    if n_chains < 2:
        problems.append("one chain: R-hat cannot be computed")
    return problems


def convergence_verdict(tree: xr.DataTree, decision_variables: list[str]) -> dict:
    """Whether the answers drawn from a posterior can be trusted, in words.

    The *decision quantities* (what answers are computed from: C1, C2, the cycle
    coefficients, noise scales, latent alpha; the model's ``decision_variables``) are
    judged apart from the rest (pooling means and spreads, standardised deviations,
    shares): a pooling spread that mixes slowly while every C1 and C2 has converged
    makes no answer wrong, and is said as such instead of failing the fit. Divergent
    transitions fail it whatever the variable: the sampler could not explore part of
    the posterior, so any summary may be biased.

    Returns ``status`` ("converged", "decisions converged" or "not converged"), ``text``
    (one line), ``advice`` (what to do, when not converged), and the diagnostics:
    ``rhat_max``/``ess_bulk_min`` over every variable, ``decision`` and ``other``
    (``rhat_max``, ``ess_bulk_min``, ``worst``: the variable behind them),
    ``divergences``, ``converged`` (the decision quantities can be used),
    ``problems``.

    An approximate posterior (root attr ``method`` other than "nuts":
    :func:`approximate`) is judged by the Pareto k of its importance weights instead
    (R-hat and ESS do not apply to resampled draws): status "approximate" with k <=
    0.7, "not converged" above; ``pareto_k`` and ``method`` are then in the verdict. A
    fit that fell back to NUTS gets the sampled verdict, its text saying so.
    """
    attrs = tree.attrs
    if attrs.get("method", "nuts") != "nuts" and "pareto_k" in attrs:
        return _approximate_verdict(tree)
    verdict = _sampled_verdict(tree, decision_variables)
    if attrs.get("retried"):
        verdict["text"] += f" ({attrs['retried']})"
        verdict["retried"] = str(attrs["retried"])
    if attrs.get("fallback"):
        verdict["text"] += f" ({attrs['fallback']})"
        verdict.update(method="nuts", approximation=str(attrs.get("approximation")),
                       pareto_k=float(attrs["pareto_k"]))
    return verdict


def _approximate_verdict(tree: xr.DataTree) -> dict:
    from bayesspec.inference.approximate import PARETO_K_LIMIT

    method, k = str(tree.attrs["method"]), float(tree.attrs["pareto_k"])
    ess = float(tree.attrs.get("importance_ess", float("nan")))
    nothing = {"rhat_max": float("nan"), "ess_bulk_min": float("nan"), "worst": None}
    if k <= PARETO_K_LIMIT:
        status, problems, advice = "approximate", [], ""
        text = (f"approximate ({method}), Pareto k = {k:.2f} <= {PARETO_K_LIMIT}: draws "
                f"importance-resampled from the approximation (importance ESS {ess:.0f}); "
                "R-hat and ESS do not apply; intervals close to, not exactly, NUTS's")
    else:
        status = "not converged"
        problems = [f"Pareto k {k:.2f} > {PARETO_K_LIMIT}"]
        advice = ("fit with --method nuts (the default), or leave the NUTS fallback on; "
                  "--strict makes scripts stop on this")
        text = (f"approximate ({method}), Pareto k = {k:.2f} > {PARETO_K_LIMIT}: the "
                "approximation is not close enough to the posterior; intervals and "
                f"decisions from it are unreliable. What to do: {advice}")
    return {"status": status, "converged": status != "not converged", "text": text,
            "advice": advice, "rhat_max": float("nan"), "ess_bulk_min": float("nan"),
            "divergences": 0, "decision": dict(nothing), "other": dict(nothing),
            "problems": problems, "method": method, "pareto_k": k}


def _sampled_verdict(tree: xr.DataTree, decision_variables: list[str]) -> dict:
    posterior = tree["posterior"].to_dataset()
    names = list(posterior.data_vars)
    per_variable = _variable_diagnostics(tree, names)
    decision = {n: v for n, v in per_variable.items() if n in set(decision_variables)}
    other = {n: v for n, v in per_variable.items() if n not in decision}
    n_chains = posterior.sizes.get("chain", 1)
    divergences = divergences_of(tree)

    def summary(group: dict) -> dict:
        if not group:
            return {"rhat_max": float("nan"), "ess_bulk_min": float("nan"), "worst": None,
                    "variables": 0}
        rhat = {n: r for n, (r, _) in group.items() if not np.isnan(r)}
        ess = {n: e for n, (_, e) in group.items() if not np.isnan(e)}
        worst_rhat = max(rhat, key=rhat.get) if rhat else None
        worst_ess = min(ess, key=ess.get) if ess else None
        problems = _problems(rhat.get(worst_rhat, float("nan")),
                             ess.get(worst_ess, float("nan")), n_chains)
        worst = worst_rhat if rhat and rhat[worst_rhat] > RHAT_LIMIT else worst_ess
        return {"rhat_max": rhat.get(worst_rhat, float("nan")),
                "ess_bulk_min": ess.get(worst_ess, float("nan")), "worst": worst,
                "variables": len(group), "problems": problems}

    decided, rest = summary(decision), summary(other)
    every = summary(per_variable)
    problems = list(decided.get("problems", []))
    if divergences:
        problems.append(f"{divergences} divergent transitions")
    if problems:
        status = "not converged"
        where = (f" (worst: {decided['worst']})" if decided["worst"] and
                 decided.get("problems") else "")
        text = ("posterior did not converge: " + "; ".join(problems) + where +
                ": intervals and decisions from it are unreliable")
        advice = _advice(problems, divergences)
        text += f". What to do: {advice}"
    elif rest.get("problems"):
        status = "decisions converged"
        text = (f"decision quantities converged (R-hat <= {decided['rhat_max']:.3f}, bulk ESS "
                f">= {decided['ess_bulk_min']:.0f}, no divergences); {rest['worst']} mixes "
                f"slowly (R-hat {rest['rhat_max']:.3f}, ESS {rest['ess_bulk_min']:.0f}): a "
                "pooling or shape parameter, harmless for these answers")
        advice = ""
    else:
        status = "converged"
        text = (f"converged (R-hat <= {every['rhat_max']:.3f}, bulk ESS >= "
                f"{every['ess_bulk_min']:.0f}, no divergences)")
        advice = ""
    return {"status": status, "converged": status != "not converged", "text": text,
            "advice": advice, "rhat_max": every["rhat_max"],
            "ess_bulk_min": every["ess_bulk_min"], "divergences": divergences,
            "decision": {k: decided[k] for k in ("rhat_max", "ess_bulk_min", "worst")},
            "other": {k: rest[k] for k in ("rhat_max", "ess_bulk_min", "worst")},
            "problems": problems}


def thin_groups(data: pd.DataFrame, parameters: int = 2) -> list[dict]:
    """Fitted groups with fewer rates than ``parameters`` + 2: no sampler setting pins
    their curve down, only more load points do. Each with its label, how many it has and
    needs, and the rates to measure between: from its lowest rate to its highest fitted
    one, or to just below the lowest point set aside above that (its ceiling)."""
    if "group" not in data.columns:
        return []
    needed = int(parameters) + 2
    out = []
    for label, rows in data.groupby("group", sort=False):
        kept = rows.loc[~rows["excluded"].astype(bool)]
        have = int(kept["rps"].nunique())
        if not label or have >= needed:
            continue
        low = float(rows["rps"].min())
        high = float(kept["rps"].max()) if len(kept) else low
        above = rows.loc[rows["excluded"].astype(bool) & (rows["rps"] > high), "rps"]
        if len(above):
            high = max(high, 0.9 * float(above.min()))
        if high < 2.0 * low:      # one rate, or a few close together: sweep up to it
            low = high / 10.0
        out.append({"group": str(label), "rates": have, "needed": needed,
                    "from_rps": low, "to_rps": high})
    return out


def design_advice(groups: list[dict]) -> str:
    """'measure at least N rates between X and Y RPS in G (it has n)' for thin groups."""
    if not groups:
        return ""
    parts = [f"{g['group']}: measure at least {g['needed']} rates between "
             f"{g['from_rps']:.3g} and {g['to_rps']:.3g} RPS (it has {g['rates']})"
             for g in groups[:3]]
    more = f"; and {len(groups) - 3} more groups" if len(groups) > 3 else ""
    return "; ".join(parts) + more


def with_design_advice(verdict: dict, data: pd.DataFrame, parameters: int = 2) -> dict:
    """The verdict with 'run longer' replaced by what would help when some group has too
    few rates to pin its curve down (a longer run of the same data fails the same way)."""
    thin = thin_groups(data, parameters)
    if not thin:
        return verdict
    verdict = {**verdict, "thin_groups": thin}
    if verdict["status"] != "not converged":
        return verdict
    advice = design_advice(thin)
    longer = "run longer (e.g. --tune 2000 --draws 2000)"
    old = verdict.get("advice", "")
    steps = [step for step in old.split("; ") if step and step != longer]
    new = "; ".join([f"too few load points to pin the curve down, {advice}"] + steps)
    verdict["advice"] = new
    verdict["text"] = verdict["text"].replace(old, new) if old else verdict["text"]
    return verdict


def _advice(problems: list[str], divergences: int) -> str:
    steps = []
    if divergences:
        steps.append("raise --target-accept (e.g. 0.99)")
        steps.append("look for saturated points the data do not mark (a load point past "
                     "the ceiling; `bayesspec fit` lists those it sets aside; --max-rps "
                     "sets more aside)")
    if any(p.startswith(("R-hat", "bulk ESS")) for p in problems):
        steps.append("run longer (e.g. --tune 2000 --draws 2000)")
    if any(p.startswith("one chain") for p in problems):
        steps.append("use 2 or more --chains")
    steps.append("--strict makes scripts stop on this")
    return "; ".join(steps)


def _finite_extreme(values: np.ndarray, reduce) -> float:
    finite = np.asarray(values, dtype=float)
    finite = finite[~np.isnan(finite)]
    return float(reduce(finite)) if finite.size else float("nan")


def frame_to_dataset(frame: pd.DataFrame, dim: str) -> xr.Dataset:
    """A DataFrame as a NetCDF-safe Dataset (nullable ints to float, bools to int8)."""
    variables = {}
    kinds = {}
    for column in frame.columns:
        values = frame[column]
        if pd.api.types.is_bool_dtype(values):
            variables[column] = (dim, values.astype("int8").to_numpy())
            kinds[column] = "bool"
        elif pd.api.types.is_integer_dtype(values) and values.isna().any():
            variables[column] = (dim, values.astype("Float64").to_numpy(dtype=float,
                                                                         na_value=np.nan))
            kinds[column] = "Int64"
        elif pd.api.types.is_integer_dtype(values):
            variables[column] = (dim, values.to_numpy(dtype=np.int64))
            kinds[column] = "Int64" if str(values.dtype) == "Int64" else "int64"
        elif pd.api.types.is_numeric_dtype(values):
            variables[column] = (dim, pd.to_numeric(values).to_numpy(dtype=float))
            kinds[column] = "float64"
        elif _numbers_or_missing(values, column):
            # An object column of numbers and None (a group table's alpha when some or all
            # groups have none): as text, None would come back as a string.
            variables[column] = (dim, pd.to_numeric(values).to_numpy(dtype=float))
            kinds[column] = "float64"
        else:
            text = values.astype(object).where(values.notna(), "").astype(str)
            variables[column] = (dim, text.to_numpy(dtype=str))
            kinds[column] = "str"
    dataset = xr.Dataset(variables)
    dataset.attrs["column_kinds"] = ",".join(f"{k}:{v}" for k, v in kinds.items())
    return dataset


def _numbers_or_missing(values: pd.Series, column: str) -> bool:
    """Whether every entry is a number or missing, with at least one number unless the
    column is a numeric tidy column (then all missing is a column of NaN)."""
    from bayesspec.data.schema import TEXT_COLUMNS, TIDY_COLUMNS

    present = values.notna().to_numpy()
    is_number = np.array([isinstance(v, (int, float, np.integer, np.floating))
                          and not isinstance(v, bool) for v in values], dtype=bool)
    if not (is_number | ~present).all():
        return False
    return bool(present.any() or (column in TIDY_COLUMNS and column not in TEXT_COLUMNS))


def dataset_to_frame(dataset: xr.Dataset) -> pd.DataFrame:
    """Inverse of :func:`frame_to_dataset`."""
    kinds = dict(item.split(":", 1) for item in
                 dataset.attrs.get("column_kinds", "").split(",") if item)
    frame = pd.DataFrame({name: dataset[name].values for name in kinds
                          if name in dataset.data_vars})
    for column, kind in kinds.items():
        if column not in frame.columns:
            continue
        if kind == "bool":
            frame[column] = frame[column].astype(bool)
        elif kind == "Int64":
            frame[column] = pd.array(np.where(np.isnan(frame[column].astype(float)), np.nan,
                                              frame[column]), dtype="Float64").astype("Int64")
        elif kind == "str":
            frame[column] = frame[column].astype(str).astype(object)
    return frame


def add_log_likelihood(fit):
    """Add the pointwise log-likelihood group to a Fit (for PSIS-LOO and az.compare)."""
    import pymc as pm

    if "log_likelihood" not in fit.tree.children:
        integrated = fit.model().integrated_log_likelihood(fit)
        if integrated is not None:
            fit.tree["log_likelihood"] = xr.DataTree(integrated)
    if "log_likelihood" not in fit.tree.children:
        pm_model = fit.model().build(fit.data)
        pointwise = pm.compute_log_likelihood(fit.tree, model=pm_model,
                                              var_names=["log_latency"],
                                              extend_inferencedata=False, progressbar=False)
        fit.tree["log_likelihood"] = xr.DataTree(pointwise)
    return fit
