"""How a measurement scatters around the law: the measurement model of a mean latency
(:class:`Noise`), the fitted sweep's own run errors as a process along its rates
(:class:`RunProcess`), and the sampling error of a reported summary of n requests
(:class:`SummarySampling`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bayesspec.laws import (load_amplification_expr, quantile_sampling_moments,
                            run_process_conditional, sampled_quantile_error_expr)

__all__ = ["Noise", "RunProcess", "SummarySampling"]


@dataclass
class Noise:
    """A measured mean latency: log L_obs = log L + e, e ~ Normal(0, sigma),
    sigma^2 = base^2 + (load * x/(1 - x))^2 + se^2, x = RPS*C2 at the point (the
    likelihood of :func:`bayesspec.bayes.priors.latency_likelihood`); se is the
    standard error of the measured mean (0 when unknown). A new measurement's load term
    is the law's elasticity (what a relative error in its rate does); with
    ``bounded_in_fit`` the fit's likelihood took at most the measured latency's L/C1 - 1
    (``noise_load_at`` "measured"), so a measured point's density
    (:mod:`bayesspec.loadtest.planning`'s reweighting) takes the lesser of the two too."""

    base: np.ndarray     # (S,)
    load: np.ndarray     # (S,)
    #: Student-t degrees of freedom (S,) when the model's error is Student-t, else None.
    nu: np.ndarray | None = None
    bounded_in_fit: bool = False

    def _nu(self, ndim: int) -> np.ndarray:
        return np.asarray(self.nu, dtype=float).reshape((-1,) + (1,) * (ndim - 1))

    def sigma(self, rps, point_c2=None, log_se=0.0, *, amplification=None) -> np.ndarray:
        """The noise sd at each point. The load term is the law's elasticity
        d log L / d log RPS: x/(1 - x) from ``point_c2`` for eq. (1), or given as
        ``amplification`` (the capped law, :meth:`Curve.amplification`)."""
        rps = np.asarray(rps, dtype=float)
        if amplification is None:
            point_c2 = np.asarray(point_c2, dtype=float)
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                utilisation = rps * point_c2
                amplification = np.where(utilisation < 1,
                                         load_amplification_expr(rps, point_c2), np.inf)
        amplification = np.asarray(amplification, dtype=float)
        shape = (-1,) + (1,) * (amplification.ndim - 1)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return np.sqrt(self.base.reshape(shape) ** 2
                           + (self.load.reshape(shape) * amplification) ** 2
                           + np.asarray(log_se, dtype=float) ** 2)

    def draw(self, curve: np.ndarray, sigma: np.ndarray, rng: np.random.Generator):
        """A new measurement of each curve draw (inf stays inf)."""
        with np.errstate(invalid="ignore", over="ignore"):
            if self.nu is None:
                standard = rng.standard_normal(curve.shape)
            else:
                standard = rng.standard_t(np.broadcast_to(self._nu(curve.ndim), curve.shape))
            return np.where(np.isfinite(curve), curve * np.exp(standard * sigma), np.inf)

    def log_density(self, log_residual: np.ndarray, sigma: np.ndarray) -> np.ndarray:
        """Log density of log L_obs - log L under the error (per draw and point)."""
        z = log_residual / sigma
        if self.nu is None:
            return -0.5 * z**2 - np.log(sigma) - 0.5 * np.log(2 * np.pi)
        from scipy.special import gammaln

        nu = self._nu(np.ndim(z))
        return (gammaln((nu + 1) / 2) - gammaln(nu / 2) - 0.5 * np.log(nu * np.pi)
                - np.log(sigma) - (nu + 1) / 2 * np.log1p(z**2 / nu))


@dataclass
class RunProcess:
    """The fitted sweep's own run errors as a process along its rates (``run_own_length``
    of the dense model): at each fitted point's ``log_rps`` (K,), per draw its value
    ``values`` (S, K) in units of that part's sd, the correlation ``length`` (a number,
    or one per draw where the fit learned it) and the ``nugget`` share of the part that
    stays independent."""

    log_rps: np.ndarray
    values: np.ndarray
    length: float | np.ndarray
    nugget: float

    def at(self, rps, exclude_fitted=None):
        """(mean (S, R), variance (S, R)) of the point's own run error (unit sd) at ``rps``
        given the fitted ones (:func:`bayesspec.laws.run_process_conditional`), the
        nugget included; ``exclude_fitted`` (R,): leave out a fitted point at the same
        rate (that point's own value)."""
        with np.errstate(divide="ignore"):
            log_rps = np.log(np.asarray(rps, dtype=float))
        mean, variance = run_process_conditional(log_rps, self.log_rps, self.values,
                                                 self.length, exclude_equal=exclude_fitted)
        kept = np.sqrt(1.0 - self.nugget)
        return kept * mean, self.nugget + (1.0 - self.nugget) * variance


@dataclass
class SummarySampling:
    """How a summary reported by a load test of n requests scatters around the law's
    value for the whole population (:func:`bayesspec.laws.quantile_sampling_moments`):
    the summary's quantile level (NaN: a mean), the rule its percentiles were computed
    by, and ``spread(rps)``: draws (S[, R]) of the per-request log-latency spread at the
    rates."""

    quantile: float
    spread: object
    rule: str = "linear"

    def error(self, rps, n_requests) -> tuple[np.ndarray, np.ndarray]:
        """(bias, variance) of the reported log summary at ``rps`` with ``n_requests``
        requests (scalars or arrays like ``rps``)."""
        shift, variance = quantile_sampling_moments(self.quantile, n_requests, self.rule)
        return sampled_quantile_error_expr(self.spread(rps), np.asarray(shift),
                                           np.asarray(variance))
