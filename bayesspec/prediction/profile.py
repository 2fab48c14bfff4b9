"""The mean-latency curve with the engine's decode-iteration profile
(:class:`ProfileCurve`): eq. (1) or the slot queue at C1 plus the profile's shift at the
self-consistent number in flight, or the profile inside the slot queue's birth-death chain,
with batched prefill where the fit has it.
"""

from __future__ import annotations

import numpy as np

from bayesspec.laws import (_profile_time, batched_prefill_stall_expr, capped_latency,
                            capped_load_elasticity, latency, load_amplification_expr,
                            load_elasticity_expr, prefill_fixed_part, profile_chain_extra,
                            profile_chain_latency_expr, profile_concurrency_expr,
                            profile_segments)
from bayesspec.prediction.curves import BISECTION_RTOL, Curve, _lift
from bayesspec.prediction.noise import Noise

__all__ = ["ProfileCurve", "RoofCurve"]


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


class RoofCurve(Curve):
    """Eq. (1) with the compute roof from the cards (docs/findings/compute-roof.md):
    L = C1 + C2 N + R(N), N = RPS x L, R the excess of a request's engine steps over the
    straight line at light load once a step's arithmetic outgrows its memory floor
    (:func:`bayesspec.laws.roofline.roof_excess_expr`). N at a rate is the least root
    (:func:`bayesspec.laws.roofline.roof_concurrency_expr`, the fit's own solver); the
    ceiling is the largest throughput N/L(N) (:func:`bayesspec.laws.roofline.roof_ceiling`),
    below eq. (1)'s pole 1/C2 by what the roof takes. The learned factors and bend are
    draws like C1 and C2, so what the sweep did not reach stays as uncertain as their
    posterior.

    With the engine's ``cap`` (requests in the batch: the slot cap, the KV cache over a
    request's tokens) the roof and the cap are one law
    (:func:`bayesspec.laws.roofline.roof_slot_queue_latency_expr`, the fit's own): past
    the cap requests wait for a slot that frees at the full batch's rate
    cap / L_roof(cap - 1), the ceiling
    (:func:`bayesspec.laws.roofline.roof_capped_ceiling`)."""

    law_name = "eq. (1) with the compute roof"

    def __init__(self, c1, c2, *, cards: dict, memory_factor, compute_factor, bend, k,
                 cycles, label: str = "", noise: Noise | None = None, cap=None,
                 wait_scale: float = 1.0):
        super().__init__(c1, c2, label=label, noise=noise, cap=cap, wait_scale=wait_scale)
        if self.cap is not None:
            self.law_name = "eq. (1) with the compute roof and the engine's cap"
        shape = (-1,) + (1,) * (self.c1.ndim - 1)
        memory = np.asarray(memory_factor, dtype=float).reshape(shape)
        compute = np.asarray(compute_factor, dtype=float).reshape(shape)
        #: (S[, K]) per draw: the cards' bounds in the stack's seconds, the bend, k and a
        #: request's engine steps
        from bayesspec.laws.roofline import ROOF_COMPUTE_FIELDS

        self.roof = {name: np.broadcast_to(
                         float(value) * (compute if name in ROOF_COMPUTE_FIELDS else memory),
                         self.c1.shape)
                     for name, value in cards.items()}
        self.bend = np.broadcast_to(np.asarray(bend, dtype=float).reshape(shape),
                                    self.c1.shape)
        self.k = np.broadcast_to(np.asarray(k, dtype=float), self.c1.shape)
        self.cycles = np.broadcast_to(np.asarray(cycles, dtype=float), self.c1.shape)
        self._ceiling = None

    def _solve(self, rps):
        from bayesspec.laws.roofline import roof_concurrency_expr

        rps = np.asarray(rps, dtype=float)
        parts = [_lift(v, rps) for v in (self.c1, self.c2, self.k, self.cycles, self.bend)]
        roof = {name: _lift(v, rps) for name, v in self.roof.items()}
        shape = np.broadcast_shapes(np.shape(parts[0]), rps.shape)
        rps = np.broadcast_to(rps, shape)
        c1, c2, k, cycles, bend = (np.broadcast_to(v, shape) for v in parts)
        roof = {name: np.broadcast_to(v, shape) for name, v in roof.items()}
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            n, felt, found = roof_concurrency_expr(np.maximum(rps, 1e-300), c1, c2, roof, k,
                                                   cycles, bend)
        self._solved_c1 = c1
        return rps, n, felt, found

    def _capped(self, rps) -> np.ndarray:
        """The latency with the engine's cap (:meth:`latency` where a cap is known)."""
        from bayesspec.laws.roofline import roof_capped_latency

        rps = np.asarray(rps, dtype=float)
        roof = {name: _lift(v, rps) for name, v in self.roof.items()}
        parts = [_lift(v, rps) for v in (self.c1, self.c2, self.cap, self.k, self.cycles,
                                         self.bend)]
        value, *_ = roof_capped_latency(rps, *parts[:3], roof, *parts[3:],
                                        wait_scale=self.wait_scale)
        return value

    def latency(self, rps) -> np.ndarray:
        if self.cap is not None:
            return self._capped(rps)
        rps, n, _, found = self._solve(rps)
        value = np.where(rps > 0, n / np.maximum(rps, 1e-300), self._solved_c1)
        return np.where(found | (rps <= 0), value, np.inf)

    def concurrency(self, rps) -> np.ndarray:
        """Per draw, the least self-consistent N at ``rps`` (``inf`` past the ceiling);
        with the cap, the mean number in the system, RPS x L."""
        if self.cap is not None:
            rps = np.asarray(rps, dtype=float)
            return rps * self._capped(rps)
        _, n, _, found = self._solve(rps)
        return np.where(found, n, np.inf)

    def point_c2(self, rps, curve: np.ndarray) -> np.ndarray:
        """C2 plus the roof's marginal cost at the point's N: the rate error's
        amplification is x/(1 - x) with x = RPS times it, as in the fit (with the cap,
        the C2 whose x/(1 - x) is the law's elasticity, as the fit passes it)."""
        if self.cap is not None:
            rps = np.asarray(rps, dtype=float)
            elasticity = self.amplification(rps, curve)
            with np.errstate(divide="ignore", invalid="ignore"):
                return elasticity / (rps * (1.0 + elasticity))
        _, _, felt, found = self._solve(rps)
        return np.broadcast_to(np.where(found, felt, np.inf), np.shape(curve))

    def amplification(self, rps, curve: np.ndarray) -> np.ndarray:
        if self.cap is None:
            return super().amplification(rps, curve)
        rps = np.asarray(rps, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            value = load_elasticity_expr(self._capped, rps)
        return np.broadcast_to(np.where(np.isnan(value), np.inf, value), np.shape(curve))

    @property
    def ceiling(self) -> np.ndarray:
        if self._ceiling is None:
            from bayesspec.laws.roofline import roof_capped_ceiling, roof_ceiling

            if self.cap is None:
                self._ceiling = roof_ceiling(self.c1, self.c2, self.roof, self.k,
                                             self.cycles, self.bend)
            else:
                self._ceiling = roof_capped_ceiling(self.c1, self.c2, self.cap, self.roof,
                                                    self.k, self.cycles, self.bend)
        return self._ceiling

    @property
    def saturation_cost(self) -> np.ndarray:
        """1 / the ceiling: what eq. (1)'s C2 is to its pole."""
        return 1.0 / self.ceiling

    def batch_throughput(self, batch) -> np.ndarray:
        """Per draw, the rate a full batch of ``batch`` requests sustains:
        batch / L_roof(batch - 1) (eq. (1)'s batch / (C1 + C2 (batch - 1)) plus the
        roof's excess; :func:`bayesspec.laws.roofline.roof_full_batch_time_expr`).
        ``batch``: the cost arrays' shape or broadcastable to it. What a ceiling that
        admits an unmeasured limit reads (:func:`bayesspec.prediction.ceilings.
        admitted_limit`)."""
        from bayesspec.laws.roofline import roof_full_batch_time_expr

        batch = np.asarray(batch, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return batch / roof_full_batch_time_expr(self.c1, self.c2, batch, self.roof,
                                                     self.k, self.cycles, self.bend)

    def batch_reaching(self, rate, *, steps: int = 64) -> np.ndarray:
        """Per draw, the least batch (at least 1) whose full throughput
        (:meth:`batch_throughput`) is ``rate``, on the rising side of the roof's peak;
        ``inf`` where no batch reaches it. Bisection in log batch."""
        from bayesspec.laws.roofline import _past_roof_peak

        rate = np.broadcast_to(np.asarray(rate, dtype=float), self.c1.shape)
        lo = np.zeros(self.c1.shape)
        hi = np.full(self.c1.shape, np.log10(1e7))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            for _ in range(steps):
                mid = 0.5 * (lo + hi)
                batch = 10.0 ** mid
                climbing = ~_past_roof_peak(self.c1, self.c2, batch - 1.0, self.roof, self.k,
                                            self.cycles, self.bend)
                short = climbing & (self.batch_throughput(batch) < rate)
                lo, hi = np.where(short, mid, lo), np.where(short, hi, mid)
            batch = 10.0 ** hi
            reached = self.batch_throughput(batch) >= rate * (1.0 - 1e-9)
        return np.where(reached, np.maximum(batch, 1.0), np.inf)

    @property
    def ceiling_binding(self) -> str:
        """"cap" where the engine's cap comes before the roof's peak throughput in most
        draws, else "compute roof"."""
        if self.cap is None:
            return "compute roof"
        from bayesspec.laws.roofline import roof_cap_binds

        binds = roof_cap_binds(self.c1, self.c2, self.cap, self.roof, self.k, self.cycles,
                               self.bend)
        return "cap" if np.mean(binds) > 0.5 else "compute roof"

    @property
    def has_fluid_run(self) -> bool:
        return False

    def utilisation(self, rps, curve: np.ndarray) -> np.ndarray:
        return np.asarray(rps, dtype=float) / np.median(self.ceiling)
