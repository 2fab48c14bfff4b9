"""A fast approximate posterior with a check: variational inference, then Pareto-smoothed
importance resampling (PSIS) against the exact log density.

``approximate_posterior`` fits PyMC's mean-field ADVI started at the posterior's mode
(the L-BFGS climb ``inference.optimised_starts`` makes) with each coordinate's scale from
the curvature there (the exact mean-field optimum when the posterior is Gaussian:
1/sqrt of the diagonal of the negative Hessian), so PyMC's optimiser starts near its
answer (from PyMC's own start, 60,000 steps had not converged on the bundled dense
data). It then draws proposals from the approximation on the unconstrained space, weighs
each by log p(theta, y) - log q(theta) (the model's compiled density, the very
function nutpie samples, and the approximation's own Gaussian density), smooths the
weights with PSIS (``arviz_stats``: ``psislw``) and resamples the requested number of
draws. The Pareto k of the weights says whether the approximation can be trusted
(k <= 0.7; Vehtari et al. 2024, "Pareto smoothed importance sampling");
``inference.sample_model`` falls back to NUTS when it cannot.

Pathfinder (pymc-extras) is not offered: every pymc-extras release on the package index
(0.15.1 the newest) requires pymc < 6.4 and bayesspec needs pymc >= 6.4. Full-rank ADVI
is not offered either: PyMC's optimiser moves every entry of the Cholesky factor by about
its learning rate per step, and these posteriors' scales span 0.002 to 0.1 on the
unconstrained space: from the same start, at PyMC's default rate the loss diverged, at
0.1-10 x the median scale k was 5 after one step and 10-40 after 2000 (bundled dense
data; docs/findings/sampler-geometry.md, "Other sampler findings", measured 2026-12-02).

This module takes the compiled model's log density and start as arguments and imports
nothing of bayesspec, so ``inference`` can call it without an import cycle.
"""

from __future__ import annotations

import ctypes
import logging
import time

import numpy as np
import xarray as xr

#: Methods offered, and how PyMC's ``pm.fit`` names them.
APPROXIMATE_METHODS = {"advi": "advi"}
#: Above this Pareto k the importance-resampled draws are not trusted (PSIS paper).
PARETO_K_LIMIT = 0.7
#: Optimisation steps of ADVI when nobody says (from the mode, measured enough).
DEFAULT_STEPS = 2000
#: Proposals drawn from the approximation before resampling, at least.
MIN_PROPOSALS = 4000


def _named_slices(compiled) -> dict[str, tuple[slice, tuple]]:
    names, slices, shapes = compiled.shape_info
    return {name: (s, tuple(int(n) for n in shape))
            for name, s, shape in zip(names, slices, shapes)}


def _by_name(pm_model, compiled, flat: np.ndarray) -> dict[str, np.ndarray]:
    """A flat unconstrained vector in nutpie's layout as PyMC's {value variable: array}."""
    layout = _named_slices(compiled)
    missing = [v.name for v in pm_model.value_vars if v.name not in layout]
    if missing:
        raise ValueError(f"the compiled model has no unconstrained {', '.join(missing)}: "
                         "it was not compiled from this PyMC model")
    return {v.name: flat[layout[v.name][0]].reshape(layout[v.name][1])
            for v in pm_model.value_vars}


def _flat(pm_model, compiled, values: dict, n_dim: int) -> np.ndarray:
    """PyMC's {value variable: array} in nutpie's flat layout."""
    layout = _named_slices(compiled)
    flat = np.empty(n_dim)
    for v in pm_model.value_vars:
        flat[layout[v.name][0]] = np.ravel(values[v.name])
    return flat


def curvature_scales(logp_and_gradient, x: np.ndarray, step: float = 1e-5) -> np.ndarray:
    """1/sqrt(-d2 log p / dx_i^2) at ``x`` by central differences of the gradient (2
    gradients per coordinate); a coordinate without negative curvature gets scale 1."""
    n = len(x)
    diagonal = np.empty(n)
    for i in range(n):
        e = np.zeros(n)
        e[i] = step
        diagonal[i] = -(logp_and_gradient(x + e)[1][i]
                        - logp_and_gradient(x - e)[1][i]) / (2 * step)
    good = np.isfinite(diagonal) & (diagonal > 0)
    return np.where(good, 1.0 / np.sqrt(np.where(good, diagonal, 1.0)), 1.0)


class Gaussian:
    """The fitted mean-field approximation on nutpie's unconstrained layout."""

    def __init__(self, mean, scale):
        self.mean = np.asarray(mean, dtype=float)
        self.scale = np.asarray(scale, dtype=float)

    def draw(self, count: int, rng) -> tuple[np.ndarray, np.ndarray]:
        """``count`` draws (count, n) and their log density under the approximation."""
        z = rng.standard_normal((count, len(self.mean)))
        x = self.mean + z * self.scale
        log_det = np.sum(np.log(self.scale))
        log_q = -0.5 * np.sum(z**2, axis=1) - 0.5 * len(self.mean) * np.log(2 * np.pi) - log_det
        return x, log_q


def fit_gaussian(pm_model, compiled, logp_and_gradient, start: np.ndarray, *, method: str,
                 steps: int, seed: int | None) -> Gaussian:
    """PyMC's mean-field ADVI from ``start`` (nutpie's layout), its scales started at the
    curvature there; the result in nutpie's layout."""
    import pymc as pm

    if method != "advi":
        raise ValueError(f"unknown approximate method {method!r}")
    scales = _by_name(pm_model, compiled, curvature_scales(logp_and_gradient, start))
    # PyMC places start_sigma into its flat vector as given: flat arrays.
    inference = pm.ADVI(model=pm_model, random_seed=seed,
                        start=_by_name(pm_model, compiled, start),
                        start_sigma={name: np.ravel(v) for name, v in scales.items()})
    # PyMC says "Finished [100%]: Average Loss = ..." at INFO; bayesspec says its own.
    quiet = logging.getLogger("pymc.variational.inference")
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        approximation = inference.fit(n=steps, progressbar=False)
    finally:
        quiet.setLevel(level)
    group = approximation.groups[0]
    order = {name: s for name, s, *_ in group.ordering.values()}
    n_dim = len(start)
    # PyMC's flat layout to nutpie's (the same order for these models; mapped by name).
    index = np.empty(n_dim, dtype=int)
    layout = _named_slices(compiled)
    for v in pm_model.value_vars:
        index[layout[v.name][0]] = np.arange(n_dim)[order[v.name]]
    return Gaussian(np.asarray(approximation.mean.eval(), dtype=float)[index],
                    np.asarray(approximation.std.eval(), dtype=float)[index])


def pareto_smoothed_weights(log_ratios: np.ndarray) -> tuple[np.ndarray, float]:
    """Normalised PSIS weights of importance ratios given as logs, and their Pareto k.

    ``arviz_stats``'s ``psislw`` smooths the ratios ``exp(-argument)`` (its argument is a
    log-likelihood in PSIS-LOO), hence the minus sign."""
    from arviz_stats.base import array_stats

    finite = np.where(np.isfinite(log_ratios), log_ratios, -np.inf)
    if not np.isfinite(finite).any():
        return np.full(len(finite), 1.0 / len(finite)), float("inf")
    shifted = finite - np.max(finite)
    if np.ptp(shifted[np.isfinite(shifted)]) < 1e-12:
        # Equal ratios (the approximation is the posterior): no tail to fit, k = 0.
        weights = np.isfinite(shifted).astype(float)
        return weights / weights.sum(), 0.0
    log_weights, k = array_stats.psislw(-np.where(np.isfinite(shifted), shifted, -1e300))
    weights = np.exp(log_weights - np.max(log_weights))
    weights[~np.isfinite(finite)] = 0.0
    k = float(k)
    # A tail PSIS could not fit is no evidence the approximation is good.
    return weights / weights.sum(), k if np.isfinite(k) else float("inf")


def expand(compiled, points: np.ndarray) -> np.ndarray:
    """Every posterior variable (constrained values and deterministics) at unconstrained
    points (m, n), through nutpie's compiled expand function: (m, n_expanded)."""
    callback = compiled.compiled_expand_func.ctypes
    user_data = ctypes.c_void_p(compiled.user_data.ctypes.data)
    double_p = ctypes.POINTER(ctypes.c_double)
    out = np.empty((len(points), compiled.n_expanded))
    row = np.empty(compiled.n_expanded)
    for i, x in enumerate(points):
        x = np.ascontiguousarray(x, dtype=float)
        code = callback(compiled.n_dim, compiled.n_expanded, x.ctypes.data_as(double_p),
                        row.ctypes.data_as(double_p), user_data)
        if code != 0:
            raise RuntimeError(f"nutpie's expand function failed (code {code})")
        out[i] = row
    return out


def posterior_tree(compiled, points: np.ndarray, log_density: np.ndarray, chains: int,
                   draws: int) -> xr.DataTree:
    """A DataTree shaped as nutpie's: /posterior (chain, draw, ...) with the same
    variables, dims and coords, and a minimal /sample_stats (``logp``, ``diverging``)."""
    import arviz as az

    values = expand(compiled, points)
    names, slices, shapes = compiled.shape_info
    hidden = set(getattr(compiled, "reparameterized_names", None) or [])
    hidden |= {v for v in names if v.endswith("__")}
    posterior = {name: values[:, s].reshape((chains, draws) + tuple(int(n) for n in shape))
                 for name, s, shape in zip(names, slices, shapes) if name not in hidden}
    stats = {"logp": log_density.reshape(chains, draws),
             "diverging": np.zeros((chains, draws), dtype=bool)}
    dims = {name: list(d) for name, d in (compiled.dims or {}).items() if name in posterior}
    return az.from_dict({"posterior": posterior, "sample_stats": stats}, dims=dims,
                        coords=dict(compiled.coords or {}))


def approximate_posterior(pm_model, compiled, logp_and_gradient, start: np.ndarray, *,
                          method: str, steps: int | None, chains: int, draws: int,
                          seed: int | None) -> xr.DataTree:
    """The approximate posterior as a DataTree of ``chains`` x ``draws`` resampled draws,
    with root attrs ``method``, ``pareto_k``, ``approximation_steps``, ``proposals``,
    ``importance_ess`` (the effective sample size of the smoothed weights) and
    ``approximation_seconds``. ``pm_model``'s data must be those ``compiled`` holds."""
    if method not in APPROXIMATE_METHODS:
        raise ValueError(f"unknown approximate method {method!r}; have "
                         f"{', '.join(APPROXIMATE_METHODS)}")
    started = time.perf_counter()
    steps = DEFAULT_STEPS if steps is None else int(steps)
    rng = np.random.default_rng(seed)
    gaussian = fit_gaussian(pm_model, compiled, logp_and_gradient, start, method=method,
                            steps=steps, seed=None if seed is None else int(seed))
    count = max(MIN_PROPOSALS, chains * draws)
    proposals, log_q = gaussian.draw(count, rng)
    log_p = np.array([logp_and_gradient(x)[0] for x in proposals])
    weights, k = pareto_smoothed_weights(log_p - log_q)
    chosen = rng.choice(count, size=chains * draws, replace=True, p=weights)
    tree = posterior_tree(compiled, proposals[chosen], log_p[chosen], chains, draws)
    tree.attrs.update({
        "method": method, "pareto_k": round(k, 4) if np.isfinite(k) else float("inf"),
        "approximation_steps": steps, "proposals": count,
        "importance_ess": round(float(1.0 / np.sum(weights**2)), 1),
        "approximation_seconds": round(time.perf_counter() - started, 3)})
    return tree
