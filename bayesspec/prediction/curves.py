"""Per-group mean-latency curves over posterior draws: eq. (1) and the slot queue
(:class:`Curve`), its second-order and two-regime variants, and eq. (4) (:class:`MoECurve`).

A curve answers the law's latency at any rate, its ceiling and the rate that meets a
target, and what a new measurement there would read: the steady law, or a whole load test
from an idle server (:meth:`Curve.run_latency`), with the measurement noise of
:mod:`bayesspec.prediction.noise`. The decode profile's curve is
:class:`~bayesspec.prediction.profile.ProfileCurve`, a latency summary's
:class:`~bayesspec.prediction.metric.MetricCurve`.

Shapes (S = posterior draws, K = draft lengths, R = rates): a curve's cost arrays are (S,)
or, for several k at once, (S, K); ``latency(rps)`` is (S[, K]) for a scalar rate,
(S[, K], R) for rates (R,), and (S, G) for rates (S, G) (row s at draw s, arrays (S,)).
Saturation is ``inf`` latency.
"""

from __future__ import annotations

import numpy as np

from bayesspec.laws import (capped_latency, capped_load_elasticity, ceiling_rps,
                            curved_latency, expert_coverage, fluid_run_latency, latency,
                            load_amplification_expr, measured_load_amplification,
                            moe_latency, rate_meeting_target, run_mean_log_sd,
                            slot_wait_in_run, two_regime_latency)
from bayesspec.prediction.noise import Noise, RunProcess

__all__ = ["BISECTION_RTOL", "Curve", "CurvedCurve", "TwoRegimeCurve", "MoECurve"]


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


#: Bisections stop once every draw's bracket is this narrow relative to its upper end
#: (answers print 4 significant digits), or after their step limit.
BISECTION_RTOL = 1e-9


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

    def latency_at_concurrency(self, levels) -> np.ndarray:
        """Per draw, the mean latency of a closed loop that keeps ``levels`` requests in
        flight ((S,) for a scalar level, (S, R) for levels (R,)): the same law read on the
        concurrency axis, N = RPS x L. Eq. (1) is L = C1 + C2 N; with the engine's cap,
        at most ``cap`` of the N share a batch and the rest wait for a slot, so past the cap
        L = N (C1 + C2 cap)/cap. Other laws (a profile, eq. (4), a bend) are read off their
        rate curve where RPS x L(RPS) reaches N (:meth:`_latency_where_in_flight`)."""
        levels = np.asarray(levels, dtype=float)
        if np.any(~(levels >= 1)):
            raise ValueError("concurrency levels must be >= 1")
        if type(self) is not Curve:
            return self._latency_where_in_flight(levels)
        c1, c2 = _lift(self.c1, levels), _lift(self.c2, levels)
        if self.cap is None:
            return c1 + c2 * levels
        cap = _lift(self.cap, levels)
        batched = np.minimum(levels, cap)
        return (c1 + c2 * batched) * levels / batched

    def _latency_where_in_flight(self, levels: np.ndarray, *, points: int = 600) -> np.ndarray:
        """L at the rate where the curve holds ``levels`` requests in flight, interpolated
        per draw on a log grid of rates below the ceiling (N = RPS x L rises with RPS)."""
        ceiling = np.where(np.isfinite(self.ceiling), self.ceiling, np.nan)
        top = np.nanmax(ceiling) if np.isfinite(ceiling).any() else 1e6
        grid = np.geomspace(top * 1e-6, top * (1 - 1e-9), points)
        latency_grid = self.latency(grid)                           # (S, P)
        in_flight = grid * latency_grid
        flat = np.atleast_1d(levels)
        out = np.empty((latency_grid.shape[0], flat.size))
        for s in range(latency_grid.shape[0]):
            finite = np.isfinite(in_flight[s])
            out[s] = np.interp(flat, in_flight[s][finite], latency_grid[s][finite],
                               right=np.nan)
        return out[:, 0] if levels.ndim == 0 else out

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
