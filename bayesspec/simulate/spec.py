"""Speculative-decoding cycles: how many drafted tokens the verifier accepts.

A cycle drafts k tokens, verifies k+1 positions in one verifier pass and commits the
accepted prefix plus one token of the verifier's own (the bonus / correction token).
Acceptance follows unconditional per-position rates r_j = P(at least j drafts accepted),
non-increasing in j, as vLLM's synthetic rejection sampler defines them (FORMATS.md);
i.i.d. acceptance with probability alpha is the special case r_j = alpha^j. One uniform
per cycle decides the count, so the nested events stay consistent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bayesspec.errors import BadInput

__all__ = ["SpecConfig", "expected_cycles", "zero_load_latency"]


@dataclass(frozen=True)
class SpecConfig:
    """Draft length ``k`` and the acceptance schedule (``alpha`` or ``rates``)."""

    k: int = 0
    alpha: float | None = None
    rates: tuple[float, ...] | None = None

    def __post_init__(self):
        if int(self.k) != self.k or self.k < 0:
            raise BadInput(f"k must be an integer >= 0, got {self.k}", argument="k")
        object.__setattr__(self, "k", int(self.k))
        if self.k == 0:
            if self.rates:
                raise BadInput("per-position acceptance rates need k > 0", argument="rates")
            return
        if self.rates is not None:
            rates = tuple(float(r) for r in self.rates)
            if len(rates) != self.k:
                raise BadInput(f"{len(rates)} per-position rates for k = {self.k}; give one per "
                               "drafted position", argument="rates")
            if any(not (0.0 <= r <= 1.0) for r in rates):
                raise BadInput("per-position acceptance rates must lie in [0, 1]", argument="rates")
            if any(b > a + 1e-12 for a, b in zip(rates, rates[1:])):
                raise BadInput("per-position acceptance rates are unconditional "
                               "(P(at least j accepted)) and must not increase with j",
                               argument="rates")
            object.__setattr__(self, "rates", rates)
        else:
            if self.alpha is None:
                raise BadInput("speculative decoding (k > 0) needs --alpha or per-position "
                               "rates", argument="alpha")
            if not (0.0 <= float(self.alpha) <= 1.0) or math.isnan(float(self.alpha)):
                raise BadInput(f"alpha must lie in [0, 1], got {self.alpha}", argument="alpha")
            object.__setattr__(self, "alpha", float(self.alpha))

    @property
    def speculative(self) -> bool:
        return self.k > 0

    def position_rates(self) -> np.ndarray:
        """r_j = P(at least j of the k drafts accepted), j = 1..k."""
        if self.k == 0:
            return np.zeros(0)
        if self.rates is not None:
            return np.asarray(self.rates, dtype=float)
        return float(self.alpha) ** np.arange(1, self.k + 1)

    def accepted_pmf(self) -> np.ndarray:
        """P(exactly j drafts accepted), j = 0..k."""
        survival = np.concatenate([[1.0], self.position_rates(), [0.0]])
        return survival[:-1] - survival[1:]

    def expected_accepted(self) -> float:
        """Mean accepted drafts per cycle (sum of the position rates)."""
        return float(self.position_rates().sum())

    def tokens_per_cycle(self) -> float:
        """E = mean tokens committed per cycle, bonus token included (E(alpha, k) of BRIEF)."""
        return 1.0 + self.expected_accepted()

    def acceptance_rate(self) -> float:
        """accepted / drafted, what vLLM's counters report."""
        return self.expected_accepted() / self.k if self.k else float("nan")

    def label(self) -> float:
        """The ``alpha`` column: alpha itself, or for per-position rates the i.i.d. alpha
        with the same tokens per cycle E, the quantity the latency law depends on."""
        if self.k == 0:
            return float("nan")
        if self.rates is None:
            return float(self.alpha)
        target = self.tokens_per_cycle()
        lo, hi = 0.0, 1.0
        for _ in range(60):   # E(alpha, k) increases with alpha: bisect
            mid = 0.5 * (lo + hi)
            if float(np.sum(mid ** np.arange(self.k + 1))) < target:
                lo = mid
            else:
                hi = mid
        return 0.5 * (lo + hi)

    def draw_accepted(self, rng: np.random.Generator, counts: np.ndarray) -> tuple[np.ndarray,
                                                                                   np.ndarray]:
        """Accepted-draft counts for ``counts[i]`` cycles of request i, flattened.

        Returns ``(offsets, accepted)``: request i's cycles are
        ``accepted[offsets[i]:offsets[i+1]]`` (int8). A request of g output tokens needs
        at most g-1 cycles, so ``counts = output_tokens`` always suffices.
        """
        counts = np.asarray(counts, dtype=np.int64)
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        if self.k == 0:
            return offsets, np.zeros(int(offsets[-1]), dtype=np.int8)
        u = rng.random(int(offsets[-1]))
        ascending = self.position_rates()[::-1]
        # count of j with u < r_j, the r_j being non-increasing in j
        accepted = self.k - np.searchsorted(ascending, u, side="right")
        return offsets, accepted.astype(np.int8)


def expected_cycles(tokens: int, spec: SpecConfig) -> float:
    """Expected verification cycles to commit ``tokens`` tokens one cycle at a time.

    Exact, with the last cycle truncated at the end of the request:
    C(n) = 1 + sum_j P(commit j+1) C(n - j - 1), commits capped at n.
    """
    tokens = int(tokens)
    if tokens <= 0:
        return 0.0
    if spec.k == 0:
        return float(tokens)
    pmf = spec.accepted_pmf()          # accepted j = 0..k -> commits j + 1
    c = np.zeros(tokens + 1)
    for n in range(1, tokens + 1):
        total = 1.0
        for j, p in enumerate(pmf):
            left = n - (j + 1)
            if left > 0:
                total += p * c[left]
        c[n] = total
    return float(c[tokens])


def zero_load_latency(step_model, prefill: int, decode: int, spec: SpecConfig = SpecConfig(),
                      *, budget: int = 8192) -> float:
    """Expected latency of one request alone on the server, from the step model alone.

    Prefill runs in chunks of at most ``budget`` tokens; it ends with the first token.
    The other ``decode - 1`` tokens take :func:`expected_cycles` cycles (plain decode
    steps when k = 0), each costed at the request's mean decode context.
    """
    prefill, decode = int(prefill), int(decode)
    k = spec.k
    total = 0.0
    done = 0
    while done < prefill:
        chunk = min(budget, prefill - done)
        last = done + chunk == prefill
        total += float(step_model.step_time(tokens=chunk, kv_tokens=done + chunk, requests=1,
                                            k=k, drafting=1 if last else 0,
                                            drafting_kv=done + chunk))
        done += chunk
    if decode > 1:
        context = prefill + 0.5 * decode + k
        cycle = float(step_model.step_time(tokens=k + 1, kv_tokens=context, requests=1, k=k,
                                           drafting=1, drafting_kv=context))
        total += expected_cycles(decode - 1, spec) * cycle
    return total
