"""The prediction contract: what a fitted model answers, as numpy objects over draws.

Every model class (:mod:`bayesspec.bayes`) turns a fit into these objects; decisions,
reports, plots and checks use only them, never the posterior's variable names:

- :class:`Curve`: one mean-latency curve L(RPS), eq. (1) from draws of (C1, C2), or
  :class:`MoECurve`, eq. (4) from the covered/saturated split. ``model.group_curve(fit, g)``
  gives one fitted group's curve.
- :class:`Law`: one *setup* (a verifier at given lengths, with a drafter when there is
  one): the dense baseline (k = 0) and speculative decoding at the (alpha, k) the model
  can answer: any, from six cycle coefficients (:class:`CoefficientLaw`, eq. 3), or the
  fitted ones (:class:`ConfigurationLaw`). ``model.law(fit, selection)`` gives it.
- :class:`Noise`: the measurement model of a mean latency (for predictive draws).

Shapes (S = posterior draws, K = draft lengths, R = rates): a curve's cost arrays are (S,)
or, for several k at once, (S, K); ``latency(rps)`` is (S[, K]) for a scalar rate,
(S[, K], R) for rates (R,), and (S, G) for rates (S, G) (row s at draw s, arrays (S,)).
Saturation is ``inf`` latency; a speedup is 0 where only SD is saturated, ``inf`` where
only the dense baseline is, 1 where both are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bayesspec.errors import BadInput
from bayesspec.laws import (capped_latency, capped_load_elasticity, ceiling_rps,
                   concurrency_cap, costs_for_acceptance_length,
                   batch_count_loads, batch_count_quantile_expr,
                   count_spread_quantile_expr, crossover_rps, spreading_load_expr,
                   curved_latency, effective_costs, expert_coverage, latency,
                   load_amplification_expr, load_elasticity_expr,
                   measured_load_amplification, moe_latency, percentile_latency,
                   batched_prefill_stall_expr, prefill_fixed_part, profile_chain_extra,
                   profile_chain_latency_expr, run_mean_log_sd, run_process_conditional,
                   _profile_time, percentile_latency_expr, quantile_sampling_moments, rate_meeting_target,
                   fluid_run_latency, profile_concurrency_expr, profile_segments,
                   sampled_quantile_error_expr, slot_wait_in_run, two_regime_latency,
                   verification_tokens)

COEFFICIENT_NAMES = ("c1p", "c1v", "c1d", "c2p", "c2v", "c2d")

__all__ = ["Noise", "Curve", "ProfileCurve", "MoECurve", "MetricCurve", "SummarySampling",
           "Law", "CoefficientLaw", "ConfigurationLaw", "MoESplit", "MeasuredConfiguration",
           "COEFFICIENT_NAMES"]


def _lift(values, rps: np.ndarray):
    """Cost arrays aligned with the rates (see the module's shapes)."""
    values = np.asarray(values, dtype=float)
    if rps.ndim == 0:
        return values
    if rps.ndim == 1:
        return values[..., None]
    return values.reshape(values.shape[0], *([1] * (rps.ndim - 1)))


def _known_requests(n_requests) -> bool:
    """Whether a new load test's request count is given for at least one rate."""
    if n_requests is None:
        return False
    return bool(np.any(np.isfinite(np.asarray(n_requests, dtype=float))))


# --------------------------------------------------------------------------- noise

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


# --------------------------------------------------------------------------- curves

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


class Curve:
    """Draws of one mean-latency law L(RPS) = C1/(1 - RPS*C2) (eq. 1), or, with the
    engine's concurrency ``cap`` (requests in the batch), the slot queue of
    :func:`bayesspec.laws.capped_latency`: eq. (1) well below the cap, a kink near it,
    and a ceiling at the cap's throughput (:attr:`ceiling`)."""

    law_name = "eq. (1)"
    #: The highest unsaturated rate the curve was fitted on (nan when unknown): answers
    #: above it are the law's extrapolation.
    rps_fitted_max = float("nan")
    #: Per draw (S,), the fitted sweep's run effect in units of a point's run sd
    #: (:func:`bayesspec.laws.run_mean_log_sd`), where the fit has one (``run_effect``
    #: "shared"): what a measurement of this sweep at any of its rates shares. None: the
    #: points' errors are their own. Decisions never read it: it is the sweep's arrival
    #: pattern, not the server.
    run_effect: np.ndarray | None = None
    #: The share of a point's run variance the run effect carries (the rest is its own).
    run_share: float = 0.0
    #: The fitted points' own run errors as a process along the rates (None: each
    #: point's own, independent): a measurement next to them is partly known.
    run_own: RunProcess | None = None

    def __init__(self, c1, c2, *, label: str = "", noise: Noise | None = None, cap=None,
                 wait_scale: float = 1.0):
        self.c1 = np.asarray(c1, dtype=float)
        self.c2 = np.asarray(c2, dtype=float)
        self.label = label
        self.noise = noise
        #: The engine's concurrency cap, broadcast to the cost arrays' shape; None: the
        #: cap is unknown and the curve is eq. (1) alone.
        self.cap = None if cap is None else np.broadcast_to(
            np.asarray(cap, dtype=float), self.c2.shape)
        #: How long the wait for a batch slot is against the Markov queue's
        #: (:func:`bayesspec.laws.queue_wait_scale`).
        self.wait_scale = float(wait_scale)

    @property
    def draws(self) -> int:
        return self.c2.shape[0]

    @property
    def zero_load(self) -> np.ndarray:
        """Latency at RPS -> 0 (what C1R compares)."""
        return self.c1

    @property
    def saturation_cost(self) -> np.ndarray:
        """C2 at full load: 1/C2 is eq. (1)'s pole (what C2R compares)."""
        return self.c2

    @property
    def ceiling(self) -> np.ndarray:
        """Per draw, the highest rate the server sustains: eq. (1)'s pole 1/C2, or the
        cap's throughput when the engine's cap binds first (always, when known)."""
        if self.cap is None:
            with np.errstate(divide="ignore"):
                return 1.0 / self.saturation_cost
        return ceiling_rps(self.c1, self.c2, self.cap)

    @property
    def ceiling_binding(self) -> str:
        """What sets :attr:`ceiling`: "cap" or "1/C2"."""
        return "1/C2" if self.cap is None else "cap"

    def latency(self, rps) -> np.ndarray:
        rps = np.asarray(rps, dtype=float)
        if self.cap is None:
            return latency(rps, _lift(self.c1, rps), _lift(self.c2, rps))
        return capped_latency(rps, _lift(self.c1, rps), _lift(self.c2, rps),
                              _lift(self.cap, rps), wait_scale=self.wait_scale)

    def zero_load_at(self, rps) -> np.ndarray:
        """Per draw, the zero-load latency a point at ``rps`` has: C1 (C1 plus the decode
        profile's shift at the point's N for :class:`ProfileCurve`)."""
        return _lift(self.c1, np.asarray(rps, dtype=float))

    def amplification(self, rps, curve: np.ndarray) -> np.ndarray:
        """d log L / d log RPS at ``rps`` for every draw (the shape of ``curve``): how a
        relative error in the measured rate moves the measured latency."""
        rps = np.asarray(rps, dtype=float)
        if self.cap is None:
            point_c2 = self.point_c2(rps, curve)
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                return np.where(rps * point_c2 < 1, load_amplification_expr(rps, point_c2),
                                np.inf)
        return np.broadcast_to(capped_load_elasticity(
            rps, _lift(self.c1, rps), _lift(self.c2, rps), _lift(self.cap, rps),
            wait_scale=self.wait_scale), np.shape(curve))

    def noise_sigma(self, rps, curve: np.ndarray, log_se=0.0, measured=None) -> np.ndarray:
        """The measurement noise sd of a mean latency at ``rps`` (shape of ``curve``).
        ``measured`` (one per rate, NaN where none): the mean latency the fit's
        likelihood read at that rate; where the fit bounded its load term by it
        (``Noise.bounded_in_fit``), the load term is bounded here too, so that a fitted
        point's predictive is the fit's own likelihood (a new rate keeps the law's
        elasticity)."""
        amplification = self.amplification(rps, curve)
        if measured is not None and self.noise.bounded_in_fit:
            measured = np.broadcast_to(np.asarray(measured, dtype=float), np.shape(rps))
            with np.errstate(divide="ignore", invalid="ignore"):
                bound = np.where(np.isfinite(measured), measured_load_amplification(
                    measured, self.zero_load_at(rps)), np.inf)
            amplification = np.fmin(amplification, bound)
        return self.noise.sigma(rps, log_se=log_se, amplification=amplification)

    def rate_meeting(self, target: float, *, steps: int = 48) -> np.ndarray:
        """Per draw (S,), the highest rate at which this curve stays within ``target``
        seconds (0 when zero load already misses it). Latency rises with load up to the
        ceiling, so the rate is found by bisection below it, all draws at once;
        eq. (1) and :class:`MetricCurve` answer in closed form."""
        if type(self) is Curve and self.cap is None:
            return rate_meeting_target(target, self.c1, self.c2, 1.0)
        ceiling = self.ceiling
        lo, hi = np.zeros_like(ceiling), ceiling * (1.0 - 1e-9)
        missed_at_idle = self.latency(np.zeros((ceiling.size, 1)))[:, 0] > target
        for _ in range(steps):
            if np.all(missed_at_idle | (hi - lo <= BISECTION_RTOL * hi)):
                break
            mid = 0.5 * (lo + hi)
            with np.errstate(invalid="ignore", over="ignore"):
                within = self.latency(mid[:, None])[:, 0] <= target
            lo, hi = np.where(within, mid, lo), np.where(within, hi, mid)
        return np.where(missed_at_idle, 0.0, lo)

    def utilisation(self, rps, curve: np.ndarray) -> np.ndarray:
        """How far up its ceiling each rate (R,) sits, at the posterior median: RPS x C2
        for eq. (1), RPS over the ceiling with a cap (``curve``: draws x rates)."""
        rps = np.asarray(rps, dtype=float)
        if self.cap is None:
            return rps * np.median(self.point_c2(rps, curve), axis=0)
        return rps / np.median(self.ceiling)

    def point_c2(self, rps, curve: np.ndarray) -> np.ndarray:
        """The C2 a point at ``rps`` feels (its utilisation is RPS times it)."""
        rps = np.asarray(rps, dtype=float)
        return np.broadcast_to(_lift(self.c2, rps), np.shape(curve))

    @property
    def has_fluid_run(self) -> bool:
        """Whether :meth:`run_latency` has a finite run for this law (eq. (1), the slot
        queue, the decode profile); other laws answer with the steady state."""
        return type(self) is Curve

    def _fluid_parts(self, rps):
        """(C1, C2, cap, profile pieces, C1 + the profile's shift at the steady N) of
        the run's fluid model (:func:`bayesspec.laws.fluid_run_latency`) aligned with
        ``rps``, or None for a law it does not cover (the run is then the steady law)."""
        if not self.has_fluid_run:
            return None
        c1 = _lift(self.c1, rps)
        cap = np.inf if self.cap is None else _lift(self.cap, rps)
        return c1, _lift(self.c2, rps), cap, None, c1

    def run_latency(self, rps, n_requests) -> np.ndarray:
        """Per draw, the mean latency one load test of ``n_requests`` requests at ``rps``
        measures, from an empty server to its last response: the law's fluid run
        (:func:`bayesspec.laws.fluid_run_latency`: its fill, its drain, and the queue it
        has time to build near and past the ceiling), plus the share of the slot queue's
        stochastic wait such a run builds (:func:`bayesspec.laws.slot_wait_in_run`).
        Finite at every rate. The fit's answers (RPS*, k*, ``predict`` without
        ``--requests``) are the steady state's; this is what a new load test sees."""
        rps = np.asarray(rps, dtype=float)
        parts = self._fluid_parts(rps)
        if parts is None:
            return self.latency(rps)
        c1, c2, cap, pieces, loaded_c1 = parts
        with np.errstate(invalid="ignore", over="ignore"):
            fluid_steady = latency(rps, loaded_c1, c2)
        run = fluid_run_latency(rps, n_requests, c1, c2, cap, pieces, steady=fluid_steady)
        if self.cap is None:
            return run
        steady = self.latency(rps)
        with np.errstate(invalid="ignore", over="ignore"):
            steady_wait = np.where(np.isfinite(steady),
                                   np.maximum(steady - fluid_steady, 0.0), np.inf)
        return run + slot_wait_in_run(steady_wait, rps, n_requests, self.wait_scale)

    def run_amplification(self, rps, n_requests, step: float = 1e-3) -> np.ndarray:
        """d log (run mean) / d log RPS: :meth:`amplification` for a finite run."""
        rps = np.asarray(rps, dtype=float)
        up = self.run_latency(rps * np.exp(step), n_requests)
        down = self.run_latency(rps * np.exp(-step), n_requests)
        with np.errstate(divide="ignore", invalid="ignore"):
            return (np.log(up) - np.log(down)) / (2.0 * step)

    def _with_run(self, rps, curve, sigma, log_se, run_requests):
        """``curve`` and ``sigma`` with the rates whose ``run_requests`` is known (a whole
        run from an idle server of that many requests) taken from the finite run
        (:meth:`run_latency`, its noise's load term from the run's own elasticity)."""
        if not _known_requests(run_requests) or not self.has_fluid_run:
            return curve, sigma
        counts = np.broadcast_to(np.asarray(run_requests, dtype=float), rps.shape)
        known = np.isfinite(counts)
        if rps.ndim == 1:               # the runs of the rates that have one, only
            at = np.flatnonzero(known)
            some = np.asarray(log_se, dtype=float)
            some = some[at] if some.ndim == 1 else some
            run = self.run_latency(rps[at], counts[at])
            run_sigma = self.noise.sigma(rps[at], log_se=some, amplification=np.broadcast_to(
                self.run_amplification(rps[at], counts[at]), np.shape(run)))
            curve, sigma = np.array(curve, copy=True), np.array(
                np.broadcast_to(sigma, np.shape(curve)), copy=True)
            curve[..., at], sigma[..., at] = run, run_sigma
            return curve, sigma
        safe = np.where(known, counts, 1.0)
        run = self.run_latency(rps, safe)
        run_sigma = self.noise.sigma(rps, log_se=log_se, amplification=np.broadcast_to(
            self.run_amplification(rps, safe), np.shape(run)))
        return np.where(known, run, curve), np.where(known, run_sigma, sigma)

    def measurement(self, rps, log_se=0.0, run_requests=None, measured=None,
                    run_spread=None) -> tuple[np.ndarray, np.ndarray]:
        """Per draw and rate, the centre and the log sd of a measured mean latency at
        ``rps``: the steady law, or, where ``run_requests`` (scalar or one per rate;
        NaN: not a whole run) gives one, a whole load test of that many requests from an
        idle server (:meth:`run_latency`), finite at every rate. ``measured``: see
        :meth:`noise_sigma` (a replicate of a fitted point). ``run_spread`` (cv, n), one
        each per rate, where the curve has the sweep's :attr:`run_effect`: a measurement
        of this sweep, its run sd (:func:`bayesspec.laws.run_mean_log_sd` at N = RPS x
        the measured mean where ``measured`` gives one, as the fit's likelihood read it,
        else the draw's) split into the sweep's shared part, which moves the centre, and
        the point's own, in place of ``log_se``."""
        rps = np.asarray(rps, dtype=float)
        shared = self.run_effect is not None and run_spread is not None
        own_se = 0.0 if shared else log_se
        curve = self.latency(rps)
        sigma = self.noise_sigma(rps, curve, own_se, measured)
        curve, sigma = self._with_run(rps, curve, sigma, own_se, run_requests)
        if not shared:
            return curve, sigma
        cv, count = (np.broadcast_to(np.asarray(v, dtype=float), rps.shape) for v in run_spread)
        load = curve
        if measured is not None:
            measured = np.broadcast_to(np.asarray(measured, dtype=float), rps.shape)
            load = np.where(np.isfinite(measured), measured, curve)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            run_sd = run_mean_log_sd(cv, count, rps * load)
            run_sd = np.where(np.isfinite(run_sd), run_sd, np.where(np.isfinite(load), 0.0,
                                                                     np.inf))
            effect = self.run_effect.reshape((-1,) + (1,) * (np.ndim(curve) - 1))
            own_variance = 1.0
            if self.run_own is not None and np.ndim(rps) <= 1:
                # a fitted point (``measured``) is conditioned on its neighbours alone
                fitted = (np.isfinite(measured) if measured is not None
                          else np.zeros(rps.shape, bool))
                own_mean, own_variance = self.run_own.at(np.atleast_1d(rps),
                                                         np.atleast_1d(fitted))
                own_mean = own_mean.reshape((-1,) + rps.shape)
                own_variance = own_variance.reshape((-1,) + rps.shape)
                effect = effect + np.sqrt(1.0 - self.run_share) * own_mean
            sigma = np.sqrt(sigma**2 + (1.0 - self.run_share) * own_variance * run_sd**2)
            curve = np.where(np.isfinite(curve), curve * np.exp(run_sd * effect), curve)
        return curve, sigma

    def predictive(self, rps, rng: np.random.Generator, log_se=0.0,
                   run_requests=None, measured=None, run_spread=None) -> np.ndarray:
        """Draws of a new measured mean latency at ``rps`` (curve and noise; the
        arguments are :meth:`measurement`'s)."""
        if self.noise is None:
            raise ValueError(f"curve '{self.label}' has no noise model")
        curve, sigma = self.measurement(rps, log_se, run_requests, measured, run_spread)
        return self.noise.draw(curve, sigma, rng)

    def log_predictive_density(self, rps, observed, log_se=0.0,
                               run_requests=None, run_spread=None) -> np.ndarray:
        """Log pointwise predictive density of observed mean latencies (R,) at rates
        (R,): log mean over draws of the error density of log obs around log L
        (saturated draws count as 0); where ``run_requests`` gives a count, around the
        mean of a whole run of that many requests (:meth:`measurement`)."""
        curve, sigma = self.measurement(rps, log_se, run_requests, run_spread=run_spread)
        with np.errstate(invalid="ignore", divide="ignore"):
            logp = self.noise.log_density(
                np.log(np.asarray(observed, dtype=float)) - np.log(curve), sigma)
        logp = np.where(np.isfinite(logp), logp, -np.inf)
        top = np.max(logp, axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return top + np.log(np.mean(np.exp(logp - top[None, :]), axis=0))


class ProfileCurve(Curve):
    """Eq. (1) (or the slot queue, with a cap) whose decode iterations follow the
    engine's measured profile t_d(B) (:mod:`bayesspec.data.decode_profile`):
    L = C1 + C2 N + shift(N), N = RPS x L, the shift of
    :func:`bayesspec.laws.decode_profile_shift`; C2 is then the stall by later arrivals'
    prefills alone. N at a rate is the smallest self-consistent one (the system filling
    from empty), solved piece by piece of the profile
    (:func:`bayesspec.laws.profile_concurrency_expr`, the fit's own law); with a cap the
    latency is the slot queue's at C1 + shift(N). The ceiling is the highest rate with a
    finite latency."""

    law_name = "eq. (1) with the decode profile"

    def __init__(self, c1, c2, *, batch_sizes, iteration_s, decode_tokens: float,
                 label: str = "", noise: Noise | None = None, cap=None,
                 wait_scale: float = 1.0, law: str = "poisson",
                 prefill_batching: bool = False, prefill_fixed_power: float = 1.0):
        super().__init__(c1, c2, label=label, noise=noise, cap=cap, wait_scale=wait_scale)
        #: Whether the chain's stall per arrival is the batched prefill's
        #: (:func:`bayesspec.laws.batched_prefill_stall_expr`), as the fit's, and the
        #: power of its fixed part (:func:`bayesspec.laws.prefill_fixed_part`).
        self.prefill_batching = bool(prefill_batching) and law == "chain"
        self.prefill_fixed_power = float(prefill_fixed_power)
        #: "poisson" (one self-consistent N) or "chain" (the profile inside the slot
        #: queue's birth-death chain, :func:`bayesspec.laws.profile_chain_latency_expr`;
        #: needs the cap).
        self.law = law
        self.batch_sizes = np.asarray(batch_sizes, dtype=float)
        self.iteration_s = np.asarray(iteration_s, dtype=float)
        self.decode_tokens = float(decode_tokens)
        if self.cap is not None and np.unique(self.cap).size > 1:
            raise ValueError("a decode profile takes a stated cap, not draws of one")
        cap_value = np.inf if self.cap is None else float(np.ravel(self.cap)[0])
        self.pieces = profile_segments(self.decode_tokens, self.batch_sizes,
                                       self.iteration_s, cap_value)
        self._cap_value = cap_value
        self._ceiling = None
        if law == "chain":
            if not np.isfinite(cap_value):
                raise ValueError("the decode profile's chain law needs the engine's cap")
            self._chain_extra = profile_chain_extra(self.decode_tokens, self.batch_sizes,
                                                    self.iteration_s, int(cap_value))
            self._chain_decode_s = _profile_time(np.arange(1.0, int(cap_value) + 1.0),
                                                 self.batch_sizes, self.iteration_s)

    def shift(self, concurrency) -> np.ndarray:
        """Seconds the profile adds to a request at ``concurrency`` requests in flight, as
        the law has it: :func:`bayesspec.laws.decode_profile_shift` linear between whole
        requests (:func:`bayesspec.laws.profile_segments`)."""
        knots, values, slopes = self.pieces
        n = np.asarray(concurrency, dtype=float)
        return np.where(n > knots[-1], values[-1] + slopes[-1] * (n - knots[-1]),
                        np.interp(n, knots, values))

    def _base(self, rps, c1, c2):
        """The law without the profile at ``rps`` with zero-load latency ``c1``."""
        if self.cap is None:
            return latency(rps, c1, c2)
        return capped_latency(rps, c1, c2, self._cap_value, wait_scale=self.wait_scale)

    def _prefill_fixed(self, c2):
        """The batched prefill's fixed part at prompt prefill ``c2``."""
        return prefill_fixed_part(c2, self._chain_decode_s[0],
                                  power=self.prefill_fixed_power)

    def _batched_stall(self, rps, c2) -> np.ndarray:
        """The stall per arrival at ``rps`` with the batched prefill
        (:func:`bayesspec.laws.batched_prefill_stall_expr`), its decode iteration the
        profile's at the chain's mean number in flight (the cap past the ceiling): the
        C2 of the laws that take one stall per rate (the fluid run of a whole load test,
        the Poisson N)."""
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            steady = self._chain_latency(rps)
            n = np.where(np.isfinite(steady), rps * steady, self._cap_value)
        decode_s = _profile_time(np.clip(n, 1.0, self._cap_value), self.batch_sizes,
                                 self.iteration_s)
        fixed = self._prefill_fixed(c2)
        return batched_prefill_stall_expr(rps, c2, fixed, decode_s)[0]

    def _solution(self, rps):
        """(rates, C2, C1 + shift at N*, N*, whether N* exists), broadcast to latency's
        shape; C2 the batched prefill's stall at each rate where the chain has it."""
        rps = np.asarray(rps, dtype=float)
        c1, c2 = _lift(self.c1, rps), _lift(self.c2, rps)
        shape = np.broadcast_shapes(np.shape(c1), rps.shape)
        rps, c1, c2 = (np.broadcast_to(v, shape) for v in (rps, c1, c2))
        if self.prefill_batching:
            c2 = self._batched_stall(rps, c2)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            n, shift, found = profile_concurrency_expr(rps[..., None], c1[..., None],
                                                       c2[..., None], *self.pieces)
        return rps, c2, c1 + shift, n, found

    has_fluid_run = True

    def _fluid_parts(self, rps):
        rps = np.asarray(rps, dtype=float)
        _, c2, loaded_c1, _, found = self._solution(rps)
        c1 = _lift(self.c1, rps)
        return c1, c2, self._cap_value, self.pieces, np.where(found, loaded_c1, np.inf)

    def concurrency(self, rps) -> np.ndarray:
        """Per draw, the smallest self-consistent N at ``rps`` (``inf`` where none)."""
        *_, n, found = self._solution(rps)
        return np.where(found, n, np.inf)

    def latency(self, rps) -> np.ndarray:
        if self.law == "chain":
            return self._chain_latency(rps)
        rps, c2, c1, _, found = self._solution(rps)
        value = self._base(rps, np.where(found, c1, 1.0), c2)
        return np.where(found, value, np.inf)

    def _chain_latency(self, rps) -> np.ndarray:
        rps = np.asarray(rps, dtype=float)
        c1, c2 = _lift(self.c1, rps), _lift(self.c2, rps)
        shape = np.broadcast_shapes(np.shape(c1), rps.shape)
        rps, c1, c2 = (np.broadcast_to(v, shape) for v in (rps, c1, c2))
        extra = self._chain_extra
        batched = {}
        if self.prefill_batching:
            batched = {"prefill_fixed": self._prefill_fixed(c2),
                       "decode_s": self._chain_decode_s}
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return profile_chain_latency_expr(
                rps, c1, c2, np.full(shape, self._cap_value), extra,
                np.ones_like(extra), wait_scale=self.wait_scale, **batched)

    @property
    def ceiling(self) -> np.ndarray:
        """Per draw, the highest rate with a finite latency, by bisection below 1/C2
        (cached)."""
        if self._ceiling is None:
            with np.errstate(divide="ignore"):
                # a batched prefill's stall per arrival falls towards C2 - a, never below
                hi = 1.0 / (self.c2 - self._prefill_fixed(self.c2)
                            if self.prefill_batching else self.c2)
            lo = np.zeros_like(hi)
            for _ in range(64):
                if np.all(hi - lo <= BISECTION_RTOL * hi):
                    break
                mid = 0.5 * (lo + hi)
                finite = np.isfinite(self.latency(mid[:, None])[:, 0])
                lo, hi = np.where(finite, mid, lo), np.where(finite, hi, mid)
            self._ceiling = lo
        return self._ceiling

    @property
    def ceiling_binding(self) -> str:
        return "decode profile" if self.cap is None else "cap"

    def zero_load_at(self, rps) -> np.ndarray:
        _, _, loaded_c1, _, found = self._solution(rps)
        return np.where(found, loaded_c1, np.inf)

    def amplification(self, rps, curve: np.ndarray) -> np.ndarray:
        """The noise's load term as the fit has it: the law's elasticity at C1 + shift
        (the chain's own elasticity with the chain law)."""
        if self.law == "chain":
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                return np.broadcast_to(load_elasticity_expr(
                    self._chain_latency, np.asarray(rps, dtype=float)), np.shape(curve))
        rps, c2, c1, _, found = self._solution(rps)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if self.cap is None:
                value = np.where(rps * c2 < 1, load_amplification_expr(rps, c2), np.inf)
            else:
                value = capped_load_elasticity(rps, np.where(found, c1, 1.0), c2,
                                               self._cap_value, wait_scale=self.wait_scale)
        return np.broadcast_to(np.where(found, value, np.inf), np.shape(curve))

    def utilisation(self, rps, curve: np.ndarray) -> np.ndarray:
        rps = np.asarray(rps, dtype=float)
        return rps / np.median(self.ceiling)


class CurvedCurve(Curve):
    """Draws of the second-order law L = C1 (1 + bend*x)/(1 - x), x = RPS*C2
    (:func:`bayesspec.laws.curved_latency`); eq. (1) when bend = 0."""

    law_name = "second-order eq. (1)"

    def __init__(self, c1, c2, bend, *, label: str = "", noise: Noise | None = None):
        super().__init__(c1, c2, label=label, noise=noise)
        self.bend = np.asarray(bend, dtype=float)

    def latency(self, rps) -> np.ndarray:
        rps = np.asarray(rps, dtype=float)
        return curved_latency(rps, _lift(self.c1, rps), _lift(self.c2, rps),
                              _lift(self.bend, rps))


class TwoRegimeCurve(Curve):
    """Draws of the two-regime roofline law (:func:`bayesspec.laws.two_regime_latency`):
    the larger of a memory-bound law (C1m, C2m) and a compute-bound one (C1c, C2c).
    ``c1``/``c2`` are the zero-load latency and the C2 of the saturating branch."""

    law_name = "two-regime eq. (1)"

    def __init__(self, c1m, c2m, c1c, c2c, *, sharpness: float, label: str = "",
                 noise: Noise | None = None):
        c1m, c2m = np.asarray(c1m, dtype=float), np.asarray(c2m, dtype=float)
        c1c, c2c = np.asarray(c1c, dtype=float), np.asarray(c2c, dtype=float)
        zero_load = two_regime_latency(0.0, c1m, c2m, c1c, c2c, sharpness)
        super().__init__(zero_load, np.maximum(c2m, c2c), label=label, noise=noise)
        self.parts = (c1m, c2m, c1c, c2c)
        self.sharpness = float(sharpness)

    def latency(self, rps) -> np.ndarray:
        rps = np.asarray(rps, dtype=float)
        return two_regime_latency(rps, *(_lift(p, rps) for p in self.parts), self.sharpness)


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
    #: ``in_flight(rps, run_requests)``: draws (S[, R]) of the requests in flight N. Where
    #: given, one run's requests are correlated and the order statistic's variance is
    #: 1 + 2N times that of independent requests (the tails model's ``summary_run``).
    in_flight: object = None
    #: The share of that variance the fitted file's run shares (``summary_run``
    #: "shared"), and its draws (S,), in units of each summary's run sd.
    run_share: float | None = None
    run_effect: np.ndarray | None = None

    def error(self, rps, n_requests, run_requests=None,
              new_run: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(bias, variance) of the reported log summary at ``rps`` with ``n_requests``
        requests (scalars or arrays like ``rps``). With the run's correlation
        (:attr:`in_flight`), a report of the fitted file's run (its shared draw moves
        the centre), or with ``new_run`` of another run (all of it scatter)."""
        shift, variance = quantile_sampling_moments(self.quantile, n_requests, self.rule)
        bias, variance = sampled_quantile_error_expr(self.spread(rps), np.asarray(shift),
                                                     np.asarray(variance))
        if self.in_flight is None:
            return bias, variance
        with np.errstate(invalid="ignore", over="ignore"):
            variance = variance * (1.0 + 2.0 * self.in_flight(rps, run_requests))
            if self.run_share is None or new_run:
                return bias, variance
            effect = np.reshape(self.run_effect, (-1,) + (1,) * np.ndim(rps))
            return (bias + np.sqrt(self.run_share * variance) * effect,
                    (1.0 - self.run_share) * variance)


class MetricCurve(Curve):
    """Draws of one latency summary under load (a percentile of end-to-end latency, of
    TTFT or of ITL): q = A F^gamma, F the mean law's load factor L/C1 at the summary's own
    saturation cost C2 (near the mean's): 1/(1 - RPS*C2) for eq. (1)
    (:func:`bayesspec.laws.percentile_latency`), or, with the engine's concurrency
    ``cap``, the slot queue's (:func:`bayesspec.laws.capped_latency` over the mean's
    zero-load latency ``mean_c1``). With the engine's decode profile, q = A P F^gamma:
    the profile's stretch P = (C1 + shift)/C1 slows every request alike, so it scales a
    summary as it scales the mean; only the queue's factor F = L/(C1 + shift) carries the
    exponent (:meth:`stretch_and_queue`). ``c1`` is A, the summary at zero load. The curve is
    the summary of the whole request population; ``sampling`` says how one load test's
    reported value scatters around it (:meth:`predictive` with ``n_requests``)."""

    law_name = "eq. (1) tail"

    def __init__(self, scale, c2, exponent, *, metric: str, label: str = "", group: str = "",
                 noise: Noise | None = None, sampling: SummarySampling | None = None,
                 mean_c1=None, cap=None, wait_scale: float = 1.0, profile: dict | None = None,
                 count: dict | None = None):
        if (cap is not None or profile is not None or count is not None) and mean_c1 is None:
            raise ValueError("a capped, profiled or count-law summary needs the mean's "
                             "zero-load latency")
        super().__init__(scale, c2, label=label, noise=noise, cap=cap, wait_scale=wait_scale)
        self.exponent = np.asarray(exponent, dtype=float)
        self.metric = metric
        #: The fitted group's label (its rows in ``fit.data`` carry it as ``group``).
        self.group = group
        self.sampling = sampling
        #: The mean law's C1 (draws), which the capped load factor needs.
        self.mean_c1 = None if mean_c1 is None else np.asarray(mean_c1, dtype=float)
        #: With the engine's decode profile (``batch_sizes``, ``iteration_s``,
        #: ``decode_tokens``), the mean law whose L/C1 is the load factor: a
        #: :class:`ProfileCurve` at this summary's C2.
        self.mean_law = (None if profile is None else ProfileCurve(
            self.mean_c1, self.c2, cap=cap, wait_scale=wait_scale, **profile))
        #: The count law's draws (``spread``, ``dispersion``) and normal score ``z``
        #: (:func:`bayesspec.laws.count_spread_quantile_expr`), or None: the power law.
        #: ``magnitude``: the profile's stretch spreads by its size
        #: (:func:`bayesspec.laws.spreading_load_expr`; the tails model's ``count_stretch``).
        self.count = None if count is None else {
            "spread": np.asarray(count["spread"], dtype=float),
            "dispersion": np.asarray(count["dispersion"], dtype=float),
            "z": float(count["z"]), "magnitude": bool(count.get("magnitude", False)),
            "batch": bool(count.get("batch", False))}

    @property
    def ceiling(self) -> np.ndarray:
        if self.mean_law is not None:
            return self.mean_law.ceiling
        if self.cap is None:
            return super().ceiling
        return ceiling_rps(self.mean_c1, self.c2, self.cap)

    def load_factor(self, rps) -> np.ndarray:
        """The mean law's L/C1 at this summary's saturation cost (``inf`` at or past
        the ceiling)."""
        stretch, queue = self.stretch_and_queue(rps)
        return stretch * queue

    def stretch_and_queue(self, rps, mean=None) -> tuple[np.ndarray, np.ndarray]:
        """The mean law's load factor L/C1 in its two parts: the decode profile's stretch
        (C1 + shift)/C1, every request slowed alike by the larger batches it meets (1
        without a profile), and the queue's factor L/(C1 + shift) (eq. (1)'s
        1/(1 - RPS*C2), or the slot queue's). ``mean``: the mean law's latency at ``rps``
        when the caller has another (a finite run's) in place of the steady one."""
        rps = np.asarray(rps, dtype=float)
        if self.mean_law is not None:
            _, _, loaded_c1, _, found = self.mean_law._solution(rps)
            if mean is None:
                mean = self.mean_law.latency(rps)
            with np.errstate(invalid="ignore"):
                stretch = np.where(found, loaded_c1 / _lift(self.mean_c1, rps), 1.0)
                queue = np.where(found, mean / loaded_c1, np.inf)
            return stretch, queue
        if mean is not None:
            return np.ones_like(mean), mean / _lift(self.mean_c1, rps)
        return np.ones(()), self._queue_factor(rps)

    def _queue_factor(self, rps) -> np.ndarray:
        if self.cap is None:
            return latency(rps, 1.0, _lift(self.c2, rps))
        c1 = _lift(self.mean_c1, rps)
        return capped_latency(rps, c1, _lift(self.c2, rps), _lift(self.cap, rps),
                              wait_scale=self.wait_scale) / c1

    def latency(self, rps) -> np.ndarray:
        rps = np.asarray(rps, dtype=float)
        if self.cap is None and self.mean_law is None and self.count is None:
            return percentile_latency(rps, _lift(self.c1, rps), _lift(self.c2, rps),
                                      _lift(self.exponent, rps))
        return self._summary_at(rps, *self.stretch_and_queue(rps))

    def _summary_at(self, rps, stretch, factor) -> np.ndarray:
        """The summary given the mean law's stretch and queue factor at ``rps``: the
        power law, or the count law off the mean L = C1 stretch factor (a request's own
        work C1; all the load adds to it, the profile's stretch too, spreads with the
        load it meets)."""
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            if self.count is None:
                value = percentile_latency_expr(factor, _lift(self.c1, rps) * stretch,
                                                _lift(self.exponent, rps))
            elif self.count["batch"]:
                own_work = _lift(self.mean_c1, rps)
                stall_load, slot_wait = batch_count_loads(
                    own_work, stretch, factor, self._eq1_factor(rps),
                    self.count["magnitude"])
                value = batch_count_quantile_expr(
                    own_work * stretch * factor, own_work, _lift(self.c2, rps),
                    _lift(self.count["spread"], rps), _lift(self.count["dispersion"], rps),
                    self.count["z"], stall_load, slot_wait)
            else:
                own_work = _lift(self.mean_c1, rps)
                value = count_spread_quantile_expr(
                    own_work * stretch * factor, own_work, _lift(self.c2, rps),
                    _lift(self.count["spread"], rps), _lift(self.count["dispersion"], rps),
                    self.count["z"], load=(spreading_load_expr(own_work, stretch, factor)
                                           if self.count["magnitude"] else None))
        return np.where(np.isfinite(factor), value, np.inf)

    def _eq1_factor(self, rps) -> np.ndarray:
        """Eq. (1)'s load factor 1/(1 - RPS*C2) at this summary's C2, as the graph reads it
        (the summaries' profile law is the Poisson one, whose C2 is not batched): the
        stalls' part of the queue factor, the rest being the wait for a slot (the count
        law's ``batch`` variance)."""
        rps = np.asarray(rps, dtype=float)
        return latency(rps, 1.0, _lift(self.c2, rps))

    def amplification(self, rps, curve: np.ndarray) -> np.ndarray:
        """d log L / d log RPS of the mean law at this summary's C2 (the fitted noise's
        load term carries gamma)."""
        if self.mean_law is not None:
            return self.mean_law.amplification(rps, curve)
        if self.cap is None:
            return super().amplification(rps, curve)
        rps = np.asarray(rps, dtype=float)
        return np.broadcast_to(capped_load_elasticity(
            rps, _lift(self.mean_c1, rps), _lift(self.c2, rps), _lift(self.cap, rps),
            wait_scale=self.wait_scale), np.shape(curve))

    def predictive(self, rps, rng: np.random.Generator, log_se=0.0,
                   n_requests=None, run_requests=None, measured=None,
                   new_run: bool = False) -> np.ndarray:
        """Draws of a new reported summary at ``rps``: of a load test of ``n_requests``
        requests per rate (its order-statistic bias and scatter), or without one the
        law's value with the fitted noise alone. Where ``run_requests`` gives a count
        (a whole run from an idle server), the load factor is that finite run's
        (:meth:`Curve.run_latency` of the mean law), finite at every rate. ``new_run``:
        see :meth:`SummarySampling.error` (by default a report of the fitted run)."""
        if self.noise is None:
            raise ValueError(f"curve '{self.label}' has no noise model")
        rps = np.asarray(rps, dtype=float)
        curve = self.latency(rps)
        sigma = self.noise_sigma(rps, curve, log_se, measured)
        curve, sigma = self._with_run(rps, curve, sigma, log_se, run_requests)
        if n_requests is not None and self.sampling is not None:
            bias, variance = self.sampling.error(rps, n_requests, run_requests, new_run)
            with np.errstate(invalid="ignore", over="ignore"):
                curve = curve * np.exp(bias)
            sigma = np.sqrt(sigma**2 + variance)
        return self.noise.draw(curve, sigma, rng)

    @property
    def has_fluid_run(self) -> bool:
        return self.run_law is not None

    def run_latency(self, rps, n_requests) -> np.ndarray:
        """The summary of a whole run of ``n_requests``: the law at the load factor of the
        mean law's finite run (:meth:`Curve.run_latency`)."""
        rps = np.asarray(rps, dtype=float)
        run = self.run_law.run_latency(rps, n_requests)
        return self._summary_at(rps, *self.stretch_and_queue(rps, run))

    def run_amplification(self, rps, n_requests, step: float = 1e-3) -> np.ndarray:
        """The mean law's run elasticity (the fitted noise's load term carries gamma, as
        in :meth:`amplification`)."""
        return self.run_law.run_amplification(rps, n_requests, step)

    @property
    def run_law(self) -> Curve | None:
        """The mean law whose finite run (:meth:`Curve.run_latency`) gives a new load
        test's load factor, or None where the mean's zero-load latency is unknown (the
        fill and drain need the time scale)."""
        if self.mean_law is not None:
            return self.mean_law
        if self.mean_c1 is None:
            return None
        return Curve(self.mean_c1, self.c2, cap=self.cap, wait_scale=self.wait_scale)

    def rate_meeting(self, target: float) -> np.ndarray:
        """Per draw (S,), the highest rate at which this summary stays within ``target``
        (0 when zero load already misses it): in closed form for eq. (1), by bisection
        below the ceiling with a cap."""
        if self.cap is None and self.count is None:
            return rate_meeting_target(target, self.c1, self.c2, self.exponent)
        return super().rate_meeting(target)


class MoECurve(Curve):
    """Draws of eq. (4): L = (C1u + phi C1s)/(1 - RPS (C2u + phi C2s)), phi the expert
    coverage at T = offset + RPS*L*tokens, solved for its least fixed point."""

    law_name = "eq. (4)"

    def __init__(self, c1u, c1s, c2u, c2s, *, m: float, M: float, tokens=1.0,
                 offset: float = 0.0, label: str = "", noise: Noise | None = None):
        self.parts = tuple(np.asarray(p, dtype=float) for p in (c1u, c1s, c2u, c2s))
        self.m, self.M = float(m), float(M)
        self.tokens = np.asarray(tokens, dtype=float)
        self.offset = float(offset)
        start = expert_coverage(self.offset, self.m, self.M)
        super().__init__(self.parts[0] + start * self.parts[1],
                         self.parts[2] + self.parts[3], label=label, noise=noise)

    def latency(self, rps) -> np.ndarray:
        rps = np.asarray(rps, dtype=float)
        tokens = self.tokens if rps.ndim == 0 else (
            self.tokens[..., None] if rps.ndim == 1 else self.tokens)
        return moe_latency(rps, *(_lift(p, rps) for p in self.parts), self.m, self.M,
                           tokens, token_offset=self.offset)

    def point_c2(self, rps, curve: np.ndarray) -> np.ndarray:
        rps = np.asarray(rps, dtype=float)
        tokens = self.tokens if rps.ndim == 0 else (
            self.tokens[..., None] if rps.ndim == 1 else self.tokens)
        with np.errstate(invalid="ignore", over="ignore"):
            routed = np.where(np.isfinite(curve), self.offset + rps * curve * tokens, np.inf)
        phi = expert_coverage(routed, self.m, self.M)
        return _lift(self.parts[2], rps) + phi * _lift(self.parts[3], rps)


# --------------------------------------------------------------------------- laws

def _ratio_of_latencies(l_dense, l_sd) -> np.ndarray:
    """L_dense/L_sd; 1 where both are saturated."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = l_dense / l_sd
    both = np.isinf(l_dense) & np.isinf(l_sd)
    return np.where(both, 1.0, ratio)


#: Bisections stop once every draw's bracket is this narrow relative to its upper end
#: (answers print 4 significant digits), or after their step limit.
BISECTION_RTOL = 1e-9


def first_crossing(sd_latency, dense_latency, ceiling: np.ndarray, *, grid: int = 48,
                   steps: int = 44) -> np.ndarray:
    """Lowest rate where L_sd = L_dense below ``ceiling`` (per draw), else nan.

    The latency functions take rates of shape (S, G), row s for draw s. Laws without a
    closed form (eq. 4): the sign of log(L_sd/L_dense) is scanned on a grid of fractions
    of each draw's ceiling (the lower saturation rate) and the first change is refined by
    bisection, all draws at once. Eq. (4) can bend the curves into more than one
    crossing; the first is the one a deployment meets when load rises.
    """
    fractions = np.append(np.arange(grid) / grid, 1.0 - 1e-9)
    rates = ceiling[:, None] * fractions[None, :]                      # (S, G)
    with np.errstate(divide="ignore", invalid="ignore"):
        gap = np.log(sd_latency(rates)) - np.log(dense_latency(rates))
    start = np.sign(gap[:, 0])
    changed = (np.sign(gap) != start[:, None]) & (start[:, None] != 0) & ~np.isnan(gap)
    has = changed.any(axis=1)
    first = np.argmax(changed, axis=1)
    draws = np.arange(len(ceiling))
    lo = rates[draws, np.maximum(first - 1, 0)]
    hi = rates[draws, first]
    for _ in range(steps):
        if np.all(~has | (hi - lo <= BISECTION_RTOL * hi)):
            break
        mid = 0.5 * (lo + hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            sign = np.sign(np.log(sd_latency(mid[:, None]))
                           - np.log(dense_latency(mid[:, None])))[:, 0]
        same = sign == start
        lo = np.where(same, mid, lo)
        hi = np.where(same, hi, mid)
    return np.where(has, 0.5 * (lo + hi), np.nan)


@dataclass(frozen=True)
class MeasuredConfiguration:
    """An SD configuration the fit saw: its acceptance (None when it was latent, from
    counters), draft length and highest fitted (unsaturated) rate."""

    alpha: float | None
    k: int
    rps_fitted_max: float


class Law:
    """One setup's latency laws: the dense baseline and SD at the (alpha, k) it answers.

    Subclasses say how SD curves come about (:meth:`sd`). What the data measured is per
    configuration (:meth:`measured`): an answer about SD at (alpha, k) against the dense
    baseline rests on both curves, so it is measured up to the lower of their highest
    fitted rates, and only inside the measured alphas and draft lengths; anything else
    is the law's extrapolation and is marked so.
    """

    #: True when any (alpha, k) can be answered (six coefficients), False when only the
    #: fitted configurations can.
    answers_any_configuration = False

    def __init__(self, label: str, dense: Curve | None, *,
                 measured_configurations=(), dense_hint: str = "", unmeasured_setup: str = ""):
        self.label = label
        self._dense = dense
        self.measured_configurations = tuple(measured_configurations)
        self.dense_hint = dense_hint
        #: Why the setup itself (its lengths) was never measured, "" when it was: the
        #: hierarchical model predicts such setups from its trends.
        self.unmeasured_setup = unmeasured_setup
        # The last speedup_draws answer: `kstar --vllm` asks for the same (S, K, R) draws
        # twice (the table, then the schedule), and each is the costliest step of a verb.
        self._last_speedups: tuple | None = None

    # ---------------------------------------------------------------- what was measured
    def _sd_fitted_max(self, alpha, k: int) -> float:
        configurations = self.measured_configurations
        exact = [c.rps_fitted_max for c in configurations if c.k == k and (
            c.alpha is None or alpha is None or np.isnan(alpha)
            or abs(c.alpha - float(alpha)) < 1e-9)]
        if exact:
            return float(max(exact))
        # Between measured configurations: measured only as far as all its neighbours were.
        same_k = [c.rps_fitted_max for c in configurations if c.k == k]
        pool = same_k or [c.rps_fitted_max for c in configurations]
        return float(min(pool)) if pool else float("nan")

    def design_notes(self, alpha, k) -> list[str]:
        """Why (alpha, k) lies outside what the data measured ([] when inside)."""
        notes = []
        if self.unmeasured_setup:
            notes.append(self.unmeasured_setup)
        if int(k) == 0 or not self.measured_configurations:
            return notes
        ks = sorted({c.k for c in self.measured_configurations})
        alphas = sorted({c.alpha for c in self.measured_configurations if c.alpha is not None})
        k = int(k)
        if k < ks[0] or k > ks[-1]:
            notes.append(f"k {k} is outside the measured draft lengths "
                         f"({ks[0]}" + (f"-{ks[-1]})" if ks[-1] != ks[0] else ")"))
        elif k not in ks:
            notes.append(f"k {k} was not measured (measured: {', '.join(map(str, ks))})")
        if alpha is not None and not np.isnan(alpha) and alphas:
            if alpha < alphas[0] - 1e-9 or alpha > alphas[-1] + 1e-9:
                span = (f"{alphas[0]:g}-{alphas[-1]:g}" if alphas[-1] != alphas[0]
                        else f"{alphas[0]:g}")
                notes.append(f"alpha {float(alpha):g} is outside the measured acceptance "
                             f"({span})")
        return notes

    def measured(self, alpha=None, k=0) -> dict:
        """What the data measured for an answer about SD at (alpha, k) (k = 0: the dense
        baseline alone): ``rps_fitted_max``, the highest rate both curves were fitted up
        to (rates above it are extrapolated); the two curves' own; and ``design_notes``,
        why the configuration itself lies outside the measured alphas and draft lengths
        (``design_extrapolated`` when there are any)."""
        dense_max = (float(self._dense.rps_fitted_max) if self._dense is not None
                     else float("nan"))
        sd_max = float("nan") if int(k) == 0 else self._sd_fitted_max(alpha, int(k))
        both = [v for v in (dense_max, sd_max if int(k) else np.nan) if np.isfinite(v)]
        notes = self.design_notes(alpha, k)
        ks = sorted({c.k for c in self.measured_configurations})
        alphas = sorted({c.alpha for c in self.measured_configurations if c.alpha is not None})
        return {"rps_fitted_max": float(min(both)) if both else float("nan"),
                "dense_rps_fitted_max": dense_max,
                "sd_rps_fitted_max": sd_max,
                "k_measured": ks,
                "alpha_measured": [alphas[0], alphas[-1]] if alphas else None,
                "design_extrapolated": bool(notes), "design_notes": notes}

    def extrapolated(self, rps, alpha=None, k=0) -> np.ndarray:
        """Per rate, whether an answer about (alpha, k) there is the law's extrapolation:
        above the highest fitted rate of the curves it compares, or outside the measured
        design."""
        measured = self.measured(alpha, k)
        rps = np.asarray(rps, dtype=float)
        top = measured["rps_fitted_max"]
        beyond = rps > top if np.isfinite(top) else np.zeros(rps.shape, bool)
        return beyond | measured["design_extrapolated"]

    # ---------------------------------------------------------------- curves
    @property
    def dense(self) -> Curve:
        """The dense baseline; a clear error when the fit has none for this setup."""
        if self._dense is None:
            raise BadInput(
                f"the fit has no dense baseline (k = 0 rows) for '{self.label}': speedup, "
                "crossover and k* compare SD with plain decoding of the same verifier and "
                "lengths. Add dense rows to the data (a load test without speculation, or "
                f"`bayesspec simulate {self.dense_hint or '--verifier V --prefill P --decode G'}"
                " -o dense.csv`), put them in one file with the SD rows and refit")
        return self._dense

    @property
    def has_dense(self) -> bool:
        return self._dense is not None

    @property
    def c1_dense(self) -> np.ndarray:
        """The dense baseline's zero-load latency draws (S,)."""
        return self.dense.zero_load

    @property
    def c2_dense(self) -> np.ndarray:
        """The dense baseline's saturation cost draws (S,): 1/C2 is its saturation rate."""
        return self.dense.saturation_cost

    def dense_latency(self, rps) -> np.ndarray:
        return self.dense.latency(rps)

    @property
    def law_name(self) -> str:
        """'eq. (1)' or 'eq. (4)' (MoE): the law latencies follow."""
        return self.dense.law_name if self.has_dense else Curve.law_name

    def sd(self, alpha: float, k) -> Curve:  # pragma: no cover - abstract
        """SD curve(s) at acceptance ``alpha``: k an int gives arrays (S,), a vector (S, K)."""
        raise NotImplementedError

    def curve(self, alpha: float | None, k: int) -> Curve:
        """The curve of one configuration (k = 0: the dense baseline)."""
        return self.dense if int(k) == 0 else self.sd(alpha, int(k))

    def latency(self, rps, alpha: float | None = None, k=0) -> np.ndarray:
        """Mean-latency draws at ``rps`` for one configuration (k = 0: dense)."""
        return self.curve(alpha, k).latency(rps)

    # ---------------------------------------------------------------- decisions
    def costs(self, alpha: float, k):
        """(C1, C2) of SD: zero-load latency and saturation cost, (S[, K])."""
        curve = self.sd(alpha, k)
        return curve.zero_load, curve.saturation_cost

    def speedup_draws(self, alpha: float, k, rps) -> np.ndarray:
        """L_dense/L_sd, shape (S, R) for an int k, (S, K, R) for a vector of k."""
        rps = np.asarray(rps, dtype=float)
        key = (None if alpha is None else float(alpha), np.asarray(k).tolist(), rps.shape,
               rps.tobytes())
        if self._last_speedups is not None and self._last_speedups[0] == key:
            return self._last_speedups[1]
        l_sd = self.sd(alpha, k).latency(rps)
        l_dense = self.dense.latency(rps)
        if l_sd.ndim == 3:
            l_dense = l_dense[:, None, :]
        ratio = _ratio_of_latencies(l_dense, l_sd)
        ratio.flags.writeable = False       # shared by every caller of the memo
        self._last_speedups = (key, ratio)
        return ratio

    def crossover_draws(self, alpha: float, k: int) -> np.ndarray:
        """RPS* per draw (nan without a crossover below both ceilings)."""
        sd, dense = self.sd(alpha, int(k)), self.dense
        if type(sd) is Curve and type(dense) is Curve and sd.cap is None and dense.cap is None:
            return crossover_rps(dense.c1, dense.c2, sd.c1, sd.c2)
        return first_crossing(sd.latency, dense.latency,
                              np.minimum(dense.ceiling, sd.ceiling))


@dataclass
class MoESplit:
    """How a six-coefficient law splits its (fully covered) costs for a sparse verifier:
    learned shares of the saturating part (eq. 4 on top of eq. 3)."""

    m: float
    M: float
    offset: float
    verify_tokens: str                               # tokens per verification: "k" or "k+1"
    sd_shares: tuple[np.ndarray, np.ndarray]         # (share of C1, share of C2), (S,)


class CoefficientLaw(Law):
    """SD at any (alpha, k) from six cycle coefficients (eq. 3), split by eq. (4) for a
    sparse verifier (``moe``)."""

    answers_any_configuration = True

    def __init__(self, label: str, dense: Curve | None, coefficients: dict[str, np.ndarray],
                 decode_tokens: float, *, moe: MoESplit | None = None, noise: Noise | None = None,
                 engine_limits: dict | None = None, **options):
        super().__init__(label, dense, **options)
        #: The engine's limits SD runs under (``max_num_seqs``, ``kv_cache_tokens``,
        #: ``max_num_batched_tokens`` and the lengths ``prefill``, ``decode``: the
        #: arguments of :func:`bayesspec.laws.concurrency_cap`); the cap of any k follows.
        self.engine_limits = dict(engine_limits or {})
        self.coefficients = {n: np.asarray(coefficients[n], dtype=float)
                             for n in COEFFICIENT_NAMES}
        self.decode_tokens = float(decode_tokens)
        self.moe = moe
        self.noise = noise
        #: (S, K + 1) draws of E(k), k = 0..K, from acceptance by position; None: eq. (3)'s
        #: i.i.d. E(alpha, k).
        self.acceptance_lengths: np.ndarray | None = None

    def with_acceptance_lengths(self, lengths: np.ndarray, *, seed: int = 0) -> "CoefficientLaw":
        """The same law answering SD from measured acceptance by position: E(k) draws
        (S_a, K + 1) instead of E(alpha, k); alpha is then ignored. The two posteriors are
        independent, so draws are paired at random (resampled to this law's draws)."""
        import copy

        lengths = np.asarray(lengths, dtype=float)
        draws = next(iter(self.coefficients.values())).shape[0]
        pick = np.random.default_rng(seed).integers(0, lengths.shape[0], draws)
        law = copy.copy(self)
        law._last_speedups = None
        law.acceptance_lengths = lengths[pick]
        law.label = f"{self.label} (acceptance by position)"
        return law

    def cap_at(self, k) -> np.ndarray | None:
        """The engine's concurrency cap at draft length(s) ``k`` (None when unknown): the
        step's token budget binds harder the more tokens each verification carries."""
        if not self.engine_limits:
            return None
        limits = self.engine_limits
        cap = concurrency_cap(limits.get("max_num_seqs", np.nan),
                              limits.get("kv_cache_tokens", np.nan),
                              limits.get("max_num_batched_tokens", np.nan),
                              limits.get("prefill", np.nan), limits.get("decode", np.nan),
                              np.asarray(k, dtype=float))
        cap = np.asarray(cap, dtype=float)
        if not np.isfinite(cap).all():
            return None
        return cap.reshape((1,) + cap.shape)

    def sd(self, alpha: float, k) -> Curve:
        alpha = np.asarray(alpha, dtype=float)
        k = np.asarray(k, dtype=float)
        shape = (-1,) + (1,) * k.ndim
        coefficients = [self.coefficients[n].reshape(shape) for n in COEFFICIENT_NAMES]
        if self.acceptance_lengths is None:
            c1, c2 = effective_costs(alpha, k, self.decode_tokens, *coefficients)
            label = f"{self.label} alpha {float(alpha):g} k {k.tolist()}"
        else:
            top = self.acceptance_lengths.shape[1] - 1
            if np.any(k > top):
                raise BadInput(f"acceptance by position answers k up to {top}, not "
                               f"{int(np.max(k))}", argument="kmax")
            length = self.acceptance_lengths[:, k.astype(int)].reshape(
                (-1,) + np.shape(k))
            with np.errstate(divide="ignore", invalid="ignore"):
                c1, c2 = costs_for_acceptance_length(length, k, self.decode_tokens,
                                                     *coefficients)
            label = f"{self.label} k {k.tolist()}"
        if self.moe is None:
            return Curve(c1, c2, label=label, noise=self.noise, cap=self.cap_at(k),
                         wait_scale=self.engine_limits.get("wait_scale", 1.0))
        s1, s2 = (share.reshape(shape) for share in self.moe.sd_shares)
        return MoECurve(c1 * (1 - s1), c1 * s1, c2 * (1 - s2), c2 * s2, m=self.moe.m,
                        M=self.moe.M, tokens=verification_tokens(k, self.moe.verify_tokens),
                        offset=self.moe.offset, label=label, noise=self.noise)


class ConfigurationLaw(Law):
    """SD only at the fitted (alpha, k): one fitted curve each (per-configuration fits)."""

    def __init__(self, label: str, dense: Curve | None,
                 configurations: dict[tuple[float, int], Curve], **options):
        options.setdefault("measured_configurations", [
            MeasuredConfiguration(alpha, k, float(curve.rps_fitted_max))
            for (alpha, k), curve in configurations.items()])
        super().__init__(label, dense, **options)
        self.configurations = configurations

    def sd(self, alpha: float, k) -> Curve:
        if np.ndim(k):
            raise BadInput("this fit answers only the (alpha, k) it has groups for, one at a "
                           "time; fit the speculative model to compare draft lengths")
        key = (None if alpha is None or np.isnan(alpha) else round(float(alpha), 9), int(k))
        if key not in self.configurations and (None, int(k)) in self.configurations:
            key = (None, int(k))   # measured at k without a set alpha: the k decides
        if key not in self.configurations:
            known = ", ".join(f"k {kk}" if a is None else f"alpha {a:g} k {kk}" for a, kk in
                              sorted(self.configurations,
                                     key=lambda c: (c[1], -1.0 if c[0] is None else c[0])))
            raise BadInput(f"this fit has no group at alpha {float(alpha):g}, k {int(k)} for "
                           f"{self.label}; fit the speculative model to query any (alpha, k)"
                           f" (fitted: {known or 'none'})")
        return self.configurations[key]
