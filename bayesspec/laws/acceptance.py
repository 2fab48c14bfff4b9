"""How many tokens a speculative cycle commits (docs/laws.md, eq. (3) and "the acceptance
process").

With i.i.d. acceptance alpha a cycle of k drafts commits E(alpha, k) = sum_{j<=k} alpha^j
tokens; with acceptance by draft position, E(k) follows from the conditional acceptance of
each position. Where acceptance is a property of the output tokens (a Markov chain over a
few token states), what a cycle accepts depends on where it starts, and P(A = a | k)
comes from the embedded chain of cycle starts and its stationary law.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from bayesspec.laws._numeric import _as_float, _static_size

__all__ = ["expected_accepted_expr", "expected_accepted_positions_expr",
           "stationary_law_expr", "token_cycle_acceptance_expr",
           "token_cycle_acceptance_upto_expr", "token_regimes_acceptance_expr",
           "acceptance_length_of_pmf_expr", "accepted_moments_of_pmf_expr",
           "depth_reliability_expr", "two_state_transition_expr",
           "token_chain_acceptance", "token_chain_expected_accepted", "expected_accepted"]


def expected_accepted_expr(alpha, k, xp: ModuleType = np):
    """E(alpha, k) = sum_{j=0..k} alpha^j, accurate near alpha = 1, exact at alpha = 1.

    Written as expm1 ratios because (1 - a^(k+1))/(1 - a) loses most of its digits when
    a is within 1e-8 of one; the alpha >= 1 branch is masked with a harmless stand-in
    so that gradients through ``where`` stay finite.
    """
    at_one = alpha >= 1.0
    safe_alpha = xp.where(at_one, 0.5, alpha)
    log_alpha = xp.log(safe_alpha)
    geometric = xp.expm1((k + 1.0) * log_alpha) / xp.expm1(log_alpha)
    return xp.where(at_one, k + 1.0, geometric)


def expected_accepted_positions_expr(conditional, xp: ModuleType = np):
    """Tokens committed per SD cycle when acceptance depends on the draft position:
    E(k) = 1 + sum_{j<=k} prod_{i<=j} alpha_i, for every k = 0..K at once.

    ``conditional`` (..., K): alpha_i = P(accept position i | positions < i accepted).
    Returns (..., K + 1): E(0) = 1, ..., E(K). With alpha_i = alpha for every i it is
    :func:`expected_accepted_expr` (eq. 3's i.i.d. case)."""
    survival = xp.cumprod(conditional, axis=-1)
    ones = xp.ones_like(survival[..., :1])
    return xp.concatenate([ones, 1.0 + xp.cumsum(survival, axis=-1)], axis=-1)


def stationary_law_expr(matrix, xp: ModuleType = np):
    """The stationary law pi (pi M = pi) of an irreducible stochastic matrix (..., n, n),
    n <= 3, from the principal minors of I - M (the Markov chain tree theorem): closed
    forms, so that a PyMC graph stays small and differentiable."""
    n = _static_size(matrix)
    if n == 1:
        return xp.ones_like(matrix[..., 0, :])
    a = xp.eye(n) - matrix
    if n == 2:
        weights = [a[..., 1, 1], a[..., 0, 0]]
    elif n == 3:
        def minor(i):
            j, l = [m for m in range(3) if m != i]
            return a[..., j, j] * a[..., l, l] - a[..., j, l] * a[..., l, j]
        weights = [minor(0), minor(1), minor(2)]
    else:
        raise ValueError(f"stationary_law_expr handles up to 3 states, got {n}")
    weights = xp.stack(weights, axis=-1)
    return weights / weights.sum(axis=-1, keepdims=True)


def _matmul3(a, b, xp):
    """a @ b over the last two axes by broadcasting (small matrices): elementwise work
    that a compiled graph fuses, cheaper to compile than a batched matrix product."""
    return (a[..., :, :, None] * b[..., None, :, :]).sum(axis=-2)


def token_cycle_acceptance_expr(transition, acceptance, k: int, xp: ModuleType = np):
    """P(A = a | k), a = 0..k: drafts accepted per speculative cycle when acceptance is a
    property of the output tokens.

    The tokens a request emits follow a Markov chain over a few states (``transition``
    (..., n, n)); a token in state s drafted at depth i of a cycle is accepted with
    probability ``acceptance[..., i - 1, s]`` ((..., K >= k, n); 1 for a guessable token
    and 0 for one that is not in the plain token process, below 1 where a drafter's
    own errors grow with the depth). A cycle accepts drafts until the first rejection,
    capped at k, and commits them plus one token of the verifier's (the rejected
    position's, or after k accepted the bonus token, whose state follows the chain);
    the next cycle drafts from the token after that. So where cycles start depends on k:
    the states of cycle starts form an embedded Markov chain whose stationary law
    (:func:`stationary_law_expr`) weights what a cycle accepts from each start. Returns
    (..., k + 1). Chains of up to 3 states; k a Python int (the graph is unrolled).
    """
    return token_cycle_acceptance_upto_expr(transition, acceptance, [int(k)], xp=xp)[0]


def token_cycle_acceptance_upto_expr(transition, acceptance, ks, xp: ModuleType = np):
    """:func:`token_cycle_acceptance_expr` for every k in ``ks`` (Python ints) in one pass
    over the depths: a list of (..., k + 1) arrays. Depth i's rejections are the same for
    every k >= i; only the last step (all k accepted) differs."""
    ks = sorted(set(int(k) for k in ks))
    wanted = set(ks)
    n = _static_size(transition)
    reached = xp.eye(n) + 0.0 * transition   # rows: start state; law of the depth-i token
    ends = []                                # P(A = i - 1 | start), i = 1..k
    embedded = 0.0 * transition              # start state -> next cycle's start, so far
    out = {}
    for i in range(max(ks)):
        accept = acceptance[..., i, :][..., None, :]
        rejected = reached * (1.0 - accept)
        ends.append(rejected.sum(axis=-1))
        embedded = embedded + _matmul3(rejected, transition, xp)
        reached = _matmul3(reached * accept, transition, xp)
        if i + 1 in wanted:
            # all i + 1 accepted: ``reached`` is the bonus token's law
            full = embedded + _matmul3(reached, transition, xp)
            starts = stationary_law_expr(full, xp=xp)
            per_start = xp.stack(ends + [reached.sum(axis=-1)], axis=-1)
            out[i + 1] = (starts[..., :, None] * per_start).sum(axis=-2)
    return [out[k] for k in ks]


def token_regimes_acceptance_expr(stay_a, stay_b, enter_a, stay_unguessable,
                                  reliability_reached, xp: ModuleType = np):
    """:func:`token_cycle_acceptance_expr` in closed form for every k = 1..K at once, for
    the chain of two guessable *regimes* and one unguessable state.

    A guessable stretch is of regime a with probability ``enter_a`` (else b) and
    continues with probability ``stay_a`` (``stay_b``); an unguessable token is followed
    by another with probability ``stay_unguessable``. Equal persistences are the
    two-state chain; different ones, a spread of persistence. A guessable token drafted
    at depth i is accepted with probability r_i; ``reliability_reached`` (..., K + 1)
    holds R_i = prod_{j<=i} r_j for i = 0..K (R_0 = 1; all 1 for the plain token
    process). From a start in regime g, P(A >= i) = R_i p_g^(i-1), and the next cycle
    starts from the chain's row of the unguessable state (an unguessable token rejected:
    U), of g (a guessable token the drafter missed: V) or of g two tokens on (all k
    accepted, then the bonus token: W): sums of geometric terms, cumulative in k. The
    stationary law of the cycle starts comes from the principal minors of I - M. Written
    out elementwise with constant matrices for the cumulative sums (no matrix products,
    no joins), so that a PyMC graph of it compiles quickly for any K. Returns
    (..., K, K + 1): row k - 1 is P(A = a | k), 0 beyond a = k.
    """
    p_a, p_b, e_a, q, reached = stay_a, stay_b, enter_a, stay_unguessable, reliability_reached
    e_b = 1.0 - e_a
    depth = _static_size(reached) - 1
    a = np.arange(depth + 1, dtype=float)
    up_to = np.tril(np.ones((depth, depth + 1)))      # row k - 1 sums a = 0..k - 1
    drop = reached[..., :-1] - reached[..., 1:]       # R_a - R_(a+1), a = 0..K - 1

    def shares(p):
        """U, V, W for k = 1..K (..., K), and R_i p^(i-1) for i = 1..K."""
        log_p = xp.log(p)[..., None]
        power = xp.exp(a * log_p)                                        # p^a
        lower = (a >= 1) * xp.exp(xp.maximum(a - 1.0, 0.0) * log_p)      # p^(a-1), a >= 1
        reach = reached * lower                                          # R_a p^(a-1)
        u = (reach * (1.0 - p)[..., None])[..., None, :] * up_to
        v = (power[..., :-1] * drop)[..., None, :] * up_to[:, :-1]
        return u.sum(axis=-1), v.sum(axis=-1), reach[..., 1:]

    u_a, v_a, w_a = shares(p_a)
    u_b, v_b, w_b = shares(p_b)
    pa, pb, q_ = p_a[..., None], p_b[..., None], q[..., None]
    leave_a, leave_b = (1.0 - q_) * e_a[..., None], (1.0 - q_) * e_b[..., None]
    # the embedded chain of cycle starts (a, b, B): rows from a and b (B's is the chain's)
    m_aa = u_a * leave_a + v_a * pa + w_a * (pa * pa + (1.0 - pa) * leave_a)
    m_ab = u_a * leave_b + w_a * (1.0 - pa) * leave_b
    m_ba = u_b * leave_a + w_b * (1.0 - pb) * leave_a
    m_bb = u_b * leave_b + v_b * pb + w_b * (pb * pb + (1.0 - pb) * leave_b)
    m_aB, m_bB = 1.0 - m_aa - m_ab, 1.0 - m_ba - m_bb
    # its stationary law from the principal minors of I - M
    weight_a = (1.0 - m_bb) * (1.0 - q_) - m_bB * leave_b
    weight_b = (1.0 - m_aa) * (1.0 - q_) - m_aB * leave_a
    weight_B = (1.0 - m_aa) * (1.0 - m_bb) - m_ab * m_ba
    total = weight_a + weight_b + weight_B
    start_a, start_b = weight_a / total, weight_b / total                # (..., K)
    # P(A >= i | k) for i = 1..K, kept for i <= k, then P(A = a | k) as differences
    survival = (start_a[..., :, None] * w_a[..., None, :]
                + start_b[..., :, None] * w_b[..., None, :]) * np.tril(np.ones((depth, depth)))
    difference = np.zeros((depth + 1, depth))         # P(A = a) = S(a) - S(a + 1), S(0) = 1
    difference[np.arange(depth), np.arange(depth)] -= 1.0
    difference[np.arange(1, depth + 1), np.arange(depth)] += 1.0
    first = (a == 0).astype(float)
    return first + (survival[..., None, :] * difference).sum(axis=-1)


def acceptance_length_of_pmf_expr(pmf, xp: ModuleType = np):
    """E(k) = 1 + E[A] from P(A = a), a = 0..k on the last axis."""
    k = _static_size(pmf) - 1
    return 1.0 + (pmf * np.arange(k + 1, dtype=float)).sum(axis=-1)


def accepted_moments_of_pmf_expr(pmf, xp: ModuleType = np):
    """Mean and variance of the drafts accepted per cycle, E[A] and Var[A], from
    P(A = a), a = 0..k on the last axis: a window of N cycles accepts N E[A] tokens in
    all, give or take sqrt(N Var[A]) (the totals vLLM's counters keep)."""
    k = _static_size(pmf) - 1
    a = np.arange(k + 1, dtype=float)
    mean = (pmf * a).sum(axis=-1)
    return mean, xp.maximum((pmf * a * a).sum(axis=-1) - mean * mean, 0.0)


def depth_reliability_expr(decay, deep_decay, measured_depth, max_depth: int,
                           xp: ModuleType = np, trained_depth=None):
    """R_i = prod_{j<=i} r_j, i = 0..max_depth: the chance that a trained drafter's own
    guesses hold up to depth i of a draft (R_0 = 1).

    A drafter that drafts from its own outputs errs more the deeper it goes:
    log r_j = -decay (j - 1), the trend measured up to ``measured_depth`` D; past D the
    trend is not carried on (a drafter never gets better deeper, and nothing measured
    says it gets worse at the same pace), so r_j keeps r_D. A head is trained to guess a
    few tokens ahead: past its ``trained_depth`` T it drafts from its own outputs beyond
    what it learned and loses ``deep_decay`` more per depth,
    log r_j -= deep_decay (j - T) for j > T (a large value is a cliff: an MTP head
    applied recursively; near 0 keeps the level, as EAGLE-3 does to depth 7). T is not
    an integer of the data: a T inside the measured depths is a loss the counts
    measure, a T past D one that only the prior speaks of, which widens E(k) past the
    measured k. ``trained_depth`` None is T = D. Broadcasts over the parameters
    (``measured_depth`` a numpy constant shaped like them, ``trained_depth`` a parameter
    or a constant, max_depth a Python int); returns (..., max_depth + 1)."""
    i = np.arange(max_depth + 1, dtype=float)
    depth = np.asarray(measured_depth, dtype=float)[..., None]
    within = np.minimum(i, depth)
    beyond = np.maximum(i - depth, 0.0)
    trend = within * (within - 1.0) / 2.0 + np.maximum(depth - 1.0, 0.0) * beyond
    if trained_depth is None:
        lost = beyond * (beyond + 1.0) / 2.0
    else:
        # sum over j <= i of (j - T)^+, by a constant lower-triangular sum over j
        hinge = xp.maximum(np.arange(1, max_depth + 1, dtype=float)
                           - trained_depth[..., None], 0.0)            # (..., max_depth)
        up_to = np.tril(np.ones((max_depth + 1, max_depth)), k=-1)
        lost = (hinge[..., None, :] * up_to).sum(axis=-1)
    return xp.exp(-decay[..., None] * trend - deep_decay[..., None] * lost)


def two_state_transition_expr(stay_guessable, stay_unguessable, xp: ModuleType = np):
    """The token chain of two states, guessable (first) or not, with persistences p, q:
    (..., 2, 2) = [[p, 1 - p], [1 - q, q]]. p + q = 1 is i.i.d. acceptance."""
    p, q = stay_guessable, stay_unguessable
    return xp.stack([xp.stack([p, 1.0 - p], axis=-1), xp.stack([1.0 - q, q], axis=-1)],
                    axis=-2)


def token_chain_acceptance(stay_guessable, stay_unguessable, k: int) -> np.ndarray:
    """P(A = a | k), a = 0..k (last axis), of the two-state token process with
    persistences p and q (numpy, broadcasting over p and q), in closed form: cycles start
    in guessable text with probability pi(k) = (1 - q)/(1 + p^k (1 - p - q)), and
    P(A >= i | k) = pi(k) p^(i-1). It is :func:`token_cycle_acceptance_expr` for two
    states; i.i.d. acceptance alpha is p = alpha, q = 1 - alpha."""
    p, q = np.broadcast_arrays(*_as_float(stay_guessable, stay_unguessable))
    k = int(k)
    with np.errstate(divide="ignore", invalid="ignore"):
        start = (1.0 - q) / (1.0 + p**k * (1.0 - p - q))
    survival = start[..., None] * p[..., None] ** np.arange(k, dtype=float)
    padded = np.concatenate([np.ones(p.shape + (1,)), survival, np.zeros(p.shape + (1,))],
                            axis=-1)
    return padded[..., :-1] - padded[..., 1:]


def token_chain_expected_accepted(stay_guessable, stay_unguessable, k: int) -> np.ndarray:
    """Tokens committed per cycle E(k) of the two-state token process (numpy)."""
    return acceptance_length_of_pmf_expr(token_chain_acceptance(stay_guessable,
                                                                stay_unguessable, k))[()]


def expected_accepted(alpha, k):
    """Expected tokens committed per SD cycle: (1 - alpha^(k+1))/(1 - alpha).

    Equals k + 1 at alpha = 1 and 1 at k = 0 (plain decoding).
    """
    alpha, k = _as_float(alpha, k)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = expected_accepted_expr(alpha, k)
    return np.where(k == 0, 1.0, value)[()]
