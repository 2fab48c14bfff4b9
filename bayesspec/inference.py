"""Sampling and convergence diagnostics.

``sample_model`` compiles a model with nutpie (the default sampler: measured fastest on
these models, see benchmarks/) and returns an ``xarray.DataTree``; ``fit`` wraps it with
the data and the model's identity into a :class:`bayesspec.fitfile.Fit`.
"""

from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
import xarray as xr

from .errors import ConvergenceWarning

RHAT_LIMIT = 1.01
ESS_LIMIT = 400


@dataclass
class SamplerSettings:
    draws: int | None = 1000  # None: the model's default_draws
    tune: int | None = 1000   # None: the model's default_tune
    chains: int = 2
    seed: int | None = None
    progress: bool = True
    sampler: str = "nutpie"   # "nutpie" or "pymc"
    # None: the model's own default (its ``target_accept``), chosen by measurement.
    target_accept: float | None = None
    # nutpie mass-matrix adaptation: "diag" or "low_rank" (None: the model's default).
    adaptation: str | None = None
    # Chain starts: "jitter" (nutpie's: the prior's support point, jittered) or
    # "optimised" (see optimised_starts). None: the model's default.
    init: str | None = None


def settings_for(latency_model, settings: SamplerSettings) -> SamplerSettings:
    """Fill the settings a user left to the model (tune, draws, target_accept,
    adaptation, init)."""
    from dataclasses import replace

    if settings.tune is None:
        settings = replace(settings, tune=latency_model.default_tune)
    if settings.draws is None:
        settings = replace(settings, draws=latency_model.default_draws)
    if settings.target_accept is None:
        settings = replace(settings, target_accept=latency_model.target_accept)
    if settings.adaptation is None:
        settings = replace(settings, adaptation=latency_model.adaptation)
    if settings.init is None:
        settings = replace(settings, init=latency_model.init)
    return settings


def _log(message: str, enabled: bool) -> None:
    if enabled:
        print(message, file=sys.stderr, flush=True)


def compile_model(pm_model, settings: SamplerSettings):
    """Compile once with nutpie; reuse the result with ``sample_compiled`` and new data."""
    import nutpie

    started = time.perf_counter()
    _log("compiling model (numba)...", settings.progress)
    compiled = nutpie.compile_pymc_model(pm_model)
    _log(f"compiled in {time.perf_counter() - started:.1f} s", settings.progress)
    return compiled


def sample_compiled(compiled, settings: SamplerSettings,
                    data: dict | None = None) -> xr.DataTree:
    """Sample a compiled model, optionally with new values for its ``pm.Data``."""
    import nutpie

    if data:
        compiled = compiled.with_data(**data)
    if settings.init == "optimised":
        compiled = with_optimised_starts(compiled, settings)
    started = time.perf_counter()
    _log(f"sampling {settings.chains} chains x ({settings.tune} tune + {settings.draws} "
         f"draws)...", settings.progress)
    tree = nutpie.sample(compiled, draws=settings.draws, tune=settings.tune,
                         chains=settings.chains, seed=settings.seed,
                         progress_bar=settings.progress and sys.stderr.isatty(),
                         cores=min(settings.chains, 2),
                         target_accept=settings.target_accept or 0.9,
                         adaptation=settings.adaptation or "diag")
    _log(f"sampled in {time.perf_counter() - started:.1f} s", settings.progress)
    return tree


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
    import dataclasses

    starts = optimised_starts(compiled, settings.seed)
    _log(f"starting {settings.chains} chains near the best of {len(starts)} optimised "
         f"points", settings.progress)

    def initial_point(seed):
        jitter = np.random.default_rng(int(seed) % 2**32).uniform(-0.1, 0.1, len(starts[0]))
        return starts[0] + jitter

    return dataclasses.replace(compiled, initial_point_func=initial_point)


def sample_model(pm_model, settings: SamplerSettings) -> xr.DataTree:
    """Draw from the posterior of a built PyMC model."""
    if settings.sampler == "nutpie":
        return sample_compiled(compile_model(pm_model, settings), settings)
    if settings.sampler == "pymc":
        import pymc as pm

        started = time.perf_counter()
        with pm_model:
            tree = pm.sample(draws=settings.draws, tune=settings.tune, chains=settings.chains,
                             random_seed=settings.seed, progressbar=settings.progress,
                             nuts_sampler="pymc", cores=min(settings.chains, 2),
                             target_accept=settings.target_accept or 0.9)
        _log(f"sampled in {time.perf_counter() - started:.1f} s", settings.progress)
        return tree
    raise ValueError(f"unknown sampler {settings.sampler!r}")


def stacked_draws(tree: xr.DataTree, name: str) -> np.ndarray:
    """A posterior variable's draws with chains and draws stacked first (samples, ...)."""
    values = tree["posterior"][name].stack(sample=("chain", "draw")).transpose("sample", ...)
    return np.asarray(values.values, dtype=float)


def diagnostics(tree: xr.DataTree, variables: list[str] | None = None) -> dict:
    """R-hat max, bulk-ESS min and divergences over the named posterior variables."""
    import arviz as az

    posterior = tree["posterior"].to_dataset()
    names = variables or [v for v in posterior.data_vars]
    names = [n for n in names if n in posterior.data_vars]
    # Deterministics that are NaN by construction (a setup without a dense baseline)
    # carry no information about convergence.
    names = [n for n in names if not np.isnan(posterior[n].values).all()]
    subset = posterior[names]
    n_chains = subset.sizes.get("chain", 1)
    rhat_max = float("nan")
    if n_chains > 1:
        rhat = az.rhat(subset)
        rhat_max = float(max(_finite_extreme(rhat[v].values, np.max) for v in rhat.data_vars))
    ess = az.ess(subset, method="bulk")
    ess_min = float(min(_finite_extreme(ess[v].values, np.min) for v in ess.data_vars))
    divergences = 0
    if "sample_stats" in tree.children and "diverging" in tree["sample_stats"].data_vars:
        divergences = int(tree["sample_stats"]["diverging"].values.sum())
    problems = []
    if n_chains > 1 and not rhat_max <= RHAT_LIMIT:
        problems.append(f"R-hat {rhat_max:.3f} > {RHAT_LIMIT}")
    if not ess_min >= ESS_LIMIT:
        problems.append(f"bulk ESS {ess_min:.0f} < {ESS_LIMIT}")
    if divergences:
        problems.append(f"{divergences} divergent transitions")
    if n_chains < 2:
        problems.append("one chain: R-hat cannot be computed")
    return {"rhat_max": rhat_max, "ess_bulk_min": ess_min, "divergences": divergences,
            "converged": not problems, "problems": problems}


def _finite_extreme(values: np.ndarray, reduce) -> float:
    finite = np.asarray(values, dtype=float)
    finite = finite[~np.isnan(finite)]
    return float(reduce(finite)) if finite.size else float("nan")


def warn_if_unconverged(diag: dict) -> str | None:
    """Emit a ConvergenceWarning and return its text when diagnostics are bad."""
    if diag["converged"]:
        return None
    text = ("posterior did not converge (" + "; ".join(diag["problems"]) +
            "): intervals and decisions from it are unreliable; rerun with more "
            "--tune/--draws or check the data")
    warnings.warn(text, ConvergenceWarning, stacklevel=2)
    return text


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
        else:
            variables[column] = (dim, values.astype(str).to_numpy(dtype=str))
            kinds[column] = "str"
    dataset = xr.Dataset(variables)
    dataset.attrs["column_kinds"] = ",".join(f"{k}:{v}" for k, v in kinds.items())
    return dataset


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

    model = fit.model()
    pm_model = model.build(fit.data)
    if "log_likelihood" not in fit.tree.children:
        pointwise = pm.compute_log_likelihood(fit.tree, model=pm_model,
                                              var_names=["log_latency"],
                                              extend_inferencedata=False, progressbar=False)
        fit.tree["log_likelihood"] = xr.DataTree(pointwise)
    return fit
