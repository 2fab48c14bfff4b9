"""Sampling a posterior.

The sampler settings and their defaults (:func:`settings_for`), compiling with nutpie
(the default sampler: as many effective draws per second as PyMC's NUTS on these models,
and a compiled model refits new data without recompiling;
docs/findings/sampler-geometry.md, "Other sampler findings"), NUTS through nutpie, PyMC
or JAX, the approximate path with its NUTS fallback, optimised chain starts, and the
draws reweighted within chains. ``sample_model`` returns an ``xarray.DataTree``;
``LatencyModel.fit`` wraps it with the data and the model's identity into a
:class:`bayesspec.inference.fitfile.Fit`, and :mod:`bayesspec.inference.convergence`
judges its draws.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, replace

import numpy as np
import xarray as xr

from bayesspec.errors import BadInput
from bayesspec.inference.convergence import divergences_of
from bayesspec.outputs import log


class SamplingFailed(BadInput):
    """The sampler could not start, or stopped: the model's density is not finite where
    the chains are (data the law cannot give: most often latencies or rates in other
    units than the table's). One line, exit 2, like any input that cannot be used."""


#: What to check when the sampler cannot start.
SAMPLING_HINT = ("check the data: the table wants latencies in seconds and rates in "
                 "requests per second (--units ms or --units rpm converts), and every row "
                 "one load point of the configuration its group names")

#: Chain starts tried before sampling: where the density is finite at none of them,
#: nutpie fails the same way, but only after its threads have started.
START_CANDIDATES = 16


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
    check_starts(compiled, settings.seed)
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
        spent = _gradients_spent(tree)
        tree = _nutpie_sample(compiled, replace(settings, target_accept=retry,
                                                retry_target_accept=None))
        tree.attrs["retried"] = reason
        # what the discarded first sampling cost, for honest gradient counts
        tree.attrs["gradients_before_retry"] = spent
        target = retry
        settings = replace(settings, target_accept=retry, retry_target_accept=None)
    stalled = stalled_chains(tree)
    if stalled and settings.seed is not None:
        # A chain flung by its first trajectories into a stiff corner (a compute roof's
        # factors that put measured rates past its ceiling) shrank its step size to
        # nothing and stood still for the whole run (1 of 2 chains on a roof study
        # sweep, docs/findings/compute-roof.md); new seeds give new first trajectories.
        # Once only: a chain that stalls again stays in the draws for R-hat to judge.
        reason = (f"chain {', '.join(str(c) for c in stalled)} stood still (its step size "
                  f"under {STALLED_STEP_RATIO:g} of the others'); sampled again with "
                  f"another seed")
        log(f"note: {reason}", settings.progress)
        kept = {name: tree.attrs[name] for name in ("retried", "gradients_before_retry")
                if name in tree.attrs}
        spent = _gradients_spent(tree)
        tree = _nutpie_sample(compiled, replace(settings, seed=settings.seed + 7919))
        tree.attrs.update(kept)
        tree.attrs["restarted"] = reason
        tree.attrs["gradients_before_retry"] = kept.get("gradients_before_retry", 0) + spent
    tree.attrs["target_accept"] = float(target)
    return tree


def _gradients_spent(tree: xr.DataTree) -> int:
    """The gradient evaluations a sampling took, warm-up included."""
    return sum(int(tree[group]["n_steps"].values.sum())
               for group in ("warmup_sample_stats", "sample_stats")
               if group in tree.children and "n_steps" in tree[group].data_vars)


#: A chain whose adapted step size is below this share of the largest chain's stood
#: still: its draws barely move (a step size of 1e-5 against 0.06, every draw at the
#: tree's full depth, measured on a compute-roof fit).
STALLED_STEP_RATIO = 0.01


def stalled_chains(tree: xr.DataTree) -> list[int]:
    """The chains of ``tree`` whose median step size after warm-up is under
    :data:`STALLED_STEP_RATIO` of the largest chain's (none with a single chain)."""
    if "sample_stats" not in tree.children or "step_size" not in tree["sample_stats"]:
        return []
    steps = np.asarray(tree["sample_stats"]["step_size"].values, dtype=float)
    if steps.ndim != 2 or steps.shape[0] < 2:
        return []
    typical = np.median(steps, axis=1)
    return [int(c) for c in np.flatnonzero(typical < STALLED_STEP_RATIO * typical.max())]


def check_starts(compiled, seed: int | None, candidates: int = START_CANDIDATES) -> None:
    """Raise :class:`SamplingFailed` when the model's density or its gradient is finite at
    none of ``candidates`` of nutpie's own jittered chain starts: the sampler would fail
    to initialise on them."""
    f = log_density(compiled)
    rng = np.random.default_rng(seed)
    for start_seed in rng.integers(0, 2**31, candidates):
        value, gradient = f(np.asarray(compiled.initial_point_func(int(start_seed)), float))
        if np.isfinite(value) and np.isfinite(gradient).all():
            return
    raise SamplingFailed(f"the sampler cannot start: the model's log density is not finite "
                         f"at any of {candidates} starting points; {SAMPLING_HINT}")


def job_failure(text: str, what: str) -> Exception:
    """The error for a sampling job that failed with ``text`` (``parallel.run_job``'s
    "Type: message"): a model that cannot be sampled stays one line with its hint
    (:class:`SamplingFailed`); anything else a RuntimeError."""
    name, _, message = text.partition(": ")
    if name == SamplingFailed.__name__:
        said = message.split("; check the data")[0]
        return SamplingFailed(f"{what}: {said}; {SAMPLING_HINT}")
    return RuntimeError(f"{what}: {text}")


def _os_threads() -> int | None:
    """This process's threads, native ones included (None where the system does not say)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


#: Longest wait for a failed sampler's threads to end.
THREADS_END_SECONDS = 10.0


def _await_threads(before: int | None) -> None:
    """Wait until the process has no more threads than ``before`` (at most
    THREADS_END_SECONDS); where threads cannot be counted, a fixed 2 s."""
    if before is None:
        time.sleep(2.0)
        return
    deadline = time.monotonic() + THREADS_END_SECONDS
    while time.monotonic() < deadline:
        now = _os_threads()
        if now is None or now <= before:
            return
        time.sleep(0.05)


def _nutpie_sample(compiled, settings: SamplerSettings) -> xr.DataTree:
    """nutpie's draws; a sampler that fails (e.g. "All initialization points failed") is
    :class:`SamplingFailed`, raised after nutpie's threads are gone."""
    import gc

    import nutpie

    started = time.perf_counter()
    log(f"sampling {settings.chains} chains x ({settings.tune} tune + {settings.draws} "
        f"draws) at target_accept {settings.target_accept or 0.9:g}...", settings.progress)
    threads_before = _os_threads()
    sampler = nutpie.sample(compiled, draws=settings.draws, tune=settings.tune,
                            chains=settings.chains, seed=settings.seed,
                            progress_bar=settings.progress and sys.stderr.isatty(),
                            cores=settings.cores or 1,
                            target_accept=settings.target_accept or 0.9,
                            adaptation=settings.adaptation or "diag", blocking=False)
    failure = None
    try:
        tree = sampler.wait()
    except KeyboardInterrupt:
        tree = sampler.abort()        # the draws so far, as nutpie.sample gives them
    except RuntimeError as error:
        failure = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
    if failure is not None:
        # A failed sampler's worker threads outlive the error, and a process that exits
        # before they are gone dies of a segmentation fault after the message (measured:
        # they end 0.2-0.7 s after the sampler is dropped). Drop it here, with the
        # traceback that held it, and let them end before the error travels on.
        sampler.cancel()
        del sampler
        gc.collect()
        _await_threads(threads_before)
        starting = "initiali" in failure.lower()
        raise SamplingFailed(f"the sampler {'cannot start' if starting else 'failed'} "
                             f"(nutpie: {failure}); {SAMPLING_HINT}")
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
    check_starts(model.compiled, settings.seed)
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
    of ``checks.sbc.swappable_observations``) the values the compiled model holds now, so
    the approximation is fitted to the data the density checks it against."""
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
        from pymc.exceptions import SamplingError

        started = time.perf_counter()
        try:
            with pm_model:
                tree = pm.sample(draws=settings.draws, tune=settings.tune,
                                 chains=settings.chains, random_seed=settings.seed,
                                 progressbar=settings.progress, nuts_sampler="pymc",
                                 cores=settings.cores or 1,
                                 target_accept=settings.target_accept or 0.9)
        except SamplingError as error:
            said = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            raise SamplingFailed(f"the sampler cannot start (PyMC: {said}); "
                                 f"{SAMPLING_HINT}") from None
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
