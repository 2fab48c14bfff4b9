"""Speculative-decoding cycles: how many drafted tokens the verifier accepts.

A cycle drafts k tokens, verifies k+1 positions in one verifier pass and commits the
accepted prefix plus one token of the verifier's own (the bonus / correction token).
Acceptance follows unconditional per-position rates r_j = P(at least j drafts accepted),
non-increasing in j, as vLLM's synthetic rejection sampler defines them (FORMATS.md);
i.i.d. acceptance with probability alpha is the special case r_j = alpha^j. One uniform
per cycle decides the count, so the nested events stay consistent.

Or acceptance is a property of the output tokens (``persistence=(p, q)``): every token
is guessable or not, a two-state Markov chain (a guessable token is followed by another
with probability p, an unguessable one by another unguessable one with probability q).
A cycle accepts the run of guessable tokens from its first drafted position, capped at k,
and commits it plus one token (the rejected position's, unguessable by definition, or
the bonus token, whose state follows the chain); the next cycle drafts from the token
after that. Where cycles start then depends on k, and so do the per-position rates
(:func:`bayesspec.laws.token_chain_acceptance`, the law the acceptance model fits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bayesspec.errors import BadInput

__all__ = ["SpecConfig", "TokenProcess", "expected_cycles", "zero_load_latency"]


@dataclass(frozen=True)
class SpecConfig:
    """Draft length ``k`` and the acceptance schedule (``alpha``, ``rates`` or the token
    process's ``persistence`` (p, q))."""

    k: int = 0
    alpha: float | None = None
    rates: tuple[float, ...] | None = None
    persistence: tuple[float, float] | None = None

    def __post_init__(self):
        if int(self.k) != self.k or self.k < 0:
            raise BadInput(f"k must be an integer >= 0, got {self.k}", argument="k")
        object.__setattr__(self, "k", int(self.k))
        if self.k == 0:
            if self.rates:
                raise BadInput("per-position acceptance rates need k > 0", argument="rates")
            if self.persistence:
                raise BadInput("a token process needs k > 0", argument="persistence")
            return
        given = [name for name, value in (("alpha", self.alpha), ("rates", self.rates),
                                          ("persistence", self.persistence))
                 if value is not None]
        if len(given) > 1:
            raise BadInput(f"give one acceptance schedule, not {' and '.join(given)}",
                           argument=given[1])
        if self.persistence is not None:
            try:
                p, q = (float(x) for x in self.persistence)
            except (TypeError, ValueError):
                raise BadInput("the token process needs two persistences P,Q",
                               argument="persistence") from None
            if not (0.0 <= p <= 1.0 and 0.0 <= q <= 1.0):
                raise BadInput(f"token persistences must lie in [0, 1], got {p:g}, {q:g}",
                               argument="persistence")
            if p == 1.0 and q == 1.0:
                raise BadInput("token persistences 1, 1 never change state: give P < 1 or "
                               "Q < 1", argument="persistence")
            object.__setattr__(self, "persistence", (p, q))
        elif self.rates is not None:
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
        if self.persistence is not None:
            from bayesspec.laws import token_chain_acceptance

            pmf = token_chain_acceptance(*self.persistence, self.k)
            return np.cumsum(pmf[::-1])[::-1][1:]
        return float(self.alpha) ** np.arange(1, self.k + 1)

    def accepted_pmf(self) -> np.ndarray:
        """P(exactly j drafts accepted), j = 0..k."""
        survival = np.concatenate([[1.0], self.position_rates(), [0.0]])
        return survival[:-1] - survival[1:]

    def expected_accepted(self) -> float:
        """Mean accepted drafts per cycle (sum of the position rates)."""
        return float(self.position_rates().sum())

    def tokens_per_cycle(self) -> float:
        """E = mean tokens committed per cycle, bonus token included (E(alpha, k) of
        docs/laws.md, eq. (3))."""
        return 1.0 + self.expected_accepted()

    def acceptance_rate(self) -> float:
        """accepted / drafted, what vLLM's counters report."""
        return self.expected_accepted() / self.k if self.k else float("nan")

    def label(self) -> float:
        """The ``alpha`` column: alpha itself, or for per-position rates the i.i.d. alpha
        with the same tokens per cycle E, the quantity the latency law depends on. A token
        process has no alpha (nan): its rate changes with k, so its rows carry the
        counters and leave alpha to them."""
        if self.k == 0 or self.persistence is not None:
            return float("nan")
        if self.alpha is not None:
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
        if self.persistence is not None:
            return offsets, TokenProcess(*self.persistence).cycles(rng, counts, self.k)
        u = rng.random(int(offsets[-1]))
        ascending = self.position_rates()[::-1]
        # count of j with u < r_j, the r_j being non-increasing in j
        accepted = self.k - np.searchsorted(ascending, u, side="right")
        return offsets, accepted.astype(np.int8)


@dataclass(frozen=True)
class TokenProcess:
    """Guessable (True) or not, token by token: a two-state Markov chain with
    persistences ``stay_guessable`` p and ``stay_unguessable`` q."""

    stay_guessable: float
    stay_unguessable: float

    def stationary_guessable(self) -> float:
        """The share of guessable tokens, (1 - q)/(2 - p - q)."""
        p, q = self.stay_guessable, self.stay_unguessable
        return (1.0 - q) / (2.0 - p - q)

    def next_guessable(self, rng: np.random.Generator, guessable: np.ndarray) -> np.ndarray:
        """The next token's state for each current state."""
        stay = np.where(guessable, self.stay_guessable, 1.0 - self.stay_unguessable)
        return rng.random(np.shape(guessable)) < stay

    def cycle(self, rng: np.random.Generator, last_guessable: np.ndarray, k: int,
              drafts=None) -> tuple[np.ndarray, np.ndarray]:
        """One cycle of each request whose last committed token has state
        ``last_guessable``: (drafts accepted, the state of the last token it commits).
        ``drafts`` (default k) caps the drafted positions per request."""
        last = np.asarray(last_guessable, dtype=bool)
        cap = np.full(last.shape, k) if drafts is None else np.asarray(drafts)
        accepted = np.zeros(last.shape, dtype=np.int64)
        state = last.copy()
        going = np.ones(last.shape, dtype=bool)   # every position so far accepted
        for depth in range(int(np.max(cap, initial=0))):
            nxt = self.next_guessable(rng, state)
            drafting = going & (depth < cap)
            hit = drafting & nxt
            accepted += hit
            # a drafted token is committed whether accepted or not (a rejected one as
            # the verifier's own); the cycle ends at the first rejection
            state = np.where(drafting, nxt, state)
            going = np.where(depth < cap, hit, going)
        # every draft accepted (or none drafted): the verifier's bonus token follows
        state = np.where(going, self.next_guessable(rng, state), state)
        return accepted, state

    def cycles(self, rng: np.random.Generator, counts: np.ndarray, k: int) -> np.ndarray:
        """``counts[i]`` consecutive cycles of request i (flattened, int8), walking each
        request's tokens from a first output token in the stationary state."""
        counts = np.asarray(counts, dtype=np.int64)
        state = rng.random(len(counts)) < self.stationary_guessable()
        longest = int(counts.max(initial=0))
        table = np.zeros((longest, len(counts)), dtype=np.int8)
        for c in range(longest):
            table[c], state = self.cycle(rng, state, k)
        keep = np.arange(longest)[:, None] < counts[None, :]
        return table.T[keep.T]


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
