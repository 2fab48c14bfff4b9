"""A trained drafter with a depth limit: acceptance counters with known truth past the
measured draft lengths.

A draft head is trained to guess a few tokens ahead (an MTP head for one, EAGLE's for
several); drafted deeper than that, from its own outputs, it is confused more and more
often. Here the output tokens follow the two-state token process of
:class:`bayesspec.simulate.spec.TokenProcess` (guessable or not, persistences p and q),
and a guessable token drafted at depth i is guessed right with probability r_i:
``1 - error`` up to the ``trained_depth`` D, then ``(1 - error) exp(-loss (i - D))``
(``loss`` large: a head applied past its depth, whose acceptance length plateaus).
This is not the acceptance model's own depth law (whose decay grows with the depth),
so a fit of it is a test, not a replay. The exact law of the drafts accepted per cycle
is :func:`bayesspec.laws.token_cycle_acceptance_upto_expr` with these r_i.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from bayesspec.errors import BadInput

__all__ = ["DepthLimitedDrafter", "depth_limited_counters"]


@dataclass(frozen=True)
class DepthLimitedDrafter:
    """Token persistences ``stay_guessable`` p and ``stay_unguessable`` q; the drafter's
    ``trained_depth`` D, its ``error`` within it and its ``loss`` per depth past it."""

    stay_guessable: float
    stay_unguessable: float
    trained_depth: int
    loss: float
    error: float = 0.0

    def __post_init__(self):
        p, q = self.stay_guessable, self.stay_unguessable
        if not (0.0 <= p < 1.0 and 0.0 <= q < 1.0):
            raise BadInput(f"token persistences must lie in [0, 1), got {p:g}, {q:g}",
                           argument="persistence")
        if int(self.trained_depth) != self.trained_depth or self.trained_depth < 1:
            raise BadInput(f"trained depth must be an integer >= 1, got {self.trained_depth}",
                           argument="trained_depth")
        if not (self.loss >= 0.0 and 0.0 <= self.error < 1.0):
            raise BadInput("loss must be >= 0 and error within [0, 1)", argument="loss")

    def reliability(self, depth: int) -> np.ndarray:
        """r_i for i = 1..depth."""
        i = np.arange(1, int(depth) + 1, dtype=float)
        past = np.maximum(i - self.trained_depth, 0.0)
        return (1.0 - self.error) * np.exp(-self.loss * past)

    def accepted_pmf(self, ks) -> list[np.ndarray]:
        """P(A = a | k), a = 0..k, for every k in ``ks`` (the exact law)."""
        from bayesspec.laws import token_cycle_acceptance_upto_expr, two_state_transition_expr

        ks = [int(k) for k in ks]
        transition = two_state_transition_expr(np.float64(self.stay_guessable),
                                               np.float64(self.stay_unguessable))
        acceptance = np.stack([self.reliability(max(ks)), np.zeros(max(ks))], axis=-1)
        table = dict(zip(sorted(set(ks)),
                         token_cycle_acceptance_upto_expr(transition, acceptance, ks)))
        return [table[k] for k in ks]

    def acceptance_length(self, ks) -> np.ndarray:
        """E(k) = 1 + E[A | k], the truth a fit is scored against."""
        return np.array([1.0 + float((pmf * np.arange(len(pmf))).sum())
                         for pmf in self.accepted_pmf(ks)])

    def cycles(self, rng: np.random.Generator, requests: int, cycles: int,
               k: int) -> np.ndarray:
        """(requests, cycles) drafts accepted per cycle, walking each request's tokens
        from a first output token in the stationary state."""
        p, q = self.stay_guessable, self.stay_unguessable
        reliability = self.reliability(k)
        state = rng.random(requests) < (1.0 - q) / (2.0 - p - q)
        out = np.zeros((requests, cycles), dtype=np.int64)
        for c in range(cycles):
            going = np.ones(requests, dtype=bool)
            for depth in range(k):
                guessable = rng.random(requests) < np.where(state, p, 1.0 - q)
                right = guessable & (rng.random(requests) < reliability[depth])
                out[going, c] += right[going]
                # the token at this position is committed (drafted or the verifier's)
                state = np.where(going, guessable, state)
                going &= right
            bonus = rng.random(requests) < np.where(state, p, 1.0 - q)
            state = np.where(going, bonus, state)
        return out


def depth_limited_counters(drafter: DepthLimitedDrafter, ks, *, drafts_per_window: int = 4000,
                           requests: int = 8, seed: int | None = 0, positions: bool = False,
                           verifier: str = "sim-verifier", name: str = "sim-head") -> pd.DataFrame:
    """One window per k, each a separate run (its own requests): ``k``, ``num_drafts``,
    ``draft_tokens``, ``accepted_tokens`` (vLLM's totals) and, with ``positions``,
    ``accepted_tokens_pos1..k``."""
    rng = np.random.default_rng(seed)
    rows = []
    for k in ks:
        k = int(k)
        per_request = int(np.ceil(drafts_per_window / requests))
        accepted = drafter.cycles(rng, requests, per_request, k).ravel()[:drafts_per_window]
        row = {"verifier": verifier, "drafter": name, "method": "eagle", "k": k,
               "num_drafts": len(accepted), "draft_tokens": k * len(accepted),
               "accepted_tokens": int(accepted.sum())}
        if positions:
            for i in range(1, k + 1):
                row[f"accepted_tokens_pos{i}"] = int((accepted >= i).sum())
        rows.append(row)
    return pd.DataFrame(rows)
