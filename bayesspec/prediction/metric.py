"""Draws of a latency summary under load (a percentile of end-to-end latency, of TTFT or
of ITL): :class:`MetricCurve`, the power law or the count law on the mean law's load
factor, and a reported summary's scatter around it.
"""

from __future__ import annotations

import numpy as np

from bayesspec.laws import (batch_count_loads, batch_count_quantile_expr, capped_latency,
                            capped_load_elasticity, ceiling_rps, count_spread_quantile_expr,
                            latency, percentile_latency, percentile_latency_expr,
                            rate_meeting_target)
from bayesspec.prediction.curves import Curve, _lift
from bayesspec.prediction.noise import Noise, SummarySampling
from bayesspec.prediction.profile import ProfileCurve

__all__ = ["MetricCurve"]


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
        self.count = None if count is None else {
            "spread": np.asarray(count["spread"], dtype=float),
            "dispersion": np.asarray(count["dispersion"], dtype=float),
            "z": float(count["z"]),
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
                    own_work, stretch, factor, self._eq1_factor(rps))
                value = batch_count_quantile_expr(
                    own_work * stretch * factor, own_work, _lift(self.c2, rps),
                    _lift(self.count["spread"], rps), _lift(self.count["dispersion"], rps),
                    self.count["z"], stall_load, slot_wait)
            else:
                own_work = _lift(self.mean_c1, rps)
                value = count_spread_quantile_expr(
                    own_work * stretch * factor, own_work, _lift(self.c2, rps),
                    _lift(self.count["spread"], rps), _lift(self.count["dispersion"], rps),
                    self.count["z"])
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
                   n_requests=None, run_requests=None, measured=None) -> np.ndarray:
        """Draws of a new reported summary at ``rps``: of a load test of ``n_requests``
        requests per rate (its order-statistic bias and scatter), or without one the
        law's value with the fitted noise alone. Where ``run_requests`` gives a count
        (a whole run from an idle server), the load factor is that finite run's
        (:meth:`Curve.run_latency` of the mean law), finite at every rate."""
        if self.noise is None:
            raise ValueError(f"curve '{self.label}' has no noise model")
        rps = np.asarray(rps, dtype=float)
        curve = self.latency(rps)
        sigma = self.noise_sigma(rps, curve, log_se, measured)
        curve, sigma = self._with_run(rps, curve, sigma, log_se, run_requests)
        if n_requests is not None and self.sampling is not None:
            bias, variance = self.sampling.error(rps, n_requests)
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
