"""The closed-form latency laws of speculative decoding (BRIEF.md sections 2 to 5).

Every formula is written once here. The public functions work on numpy arrays with
broadcasting and handle the edge cases (saturation -> ``inf``, no crossover -> ``nan``).
The underscore-free ``*_expr`` helpers are the bare algebra and take an ``xp`` namespace
(``numpy`` or ``pytensor.tensor``); the PyMC models in :mod:`bayesspec.bayes` build their
graphs from those same helpers, so a prediction and a likelihood can never drift apart.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

__all__ = [
    "latency",
    "expected_accepted",
    "effective_costs",
    "speedup",
    "crossover_rps",
    "expert_coverage",
    "moe_latency",
    "verification_tokens",
    "latency_expr",
    "expected_accepted_expr",
    "effective_costs_expr",
    "expert_coverage_expr",
    "moe_costs_expr",
    "load_amplification_expr",
    "percentile_latency",
    "percentile_latency_expr",
    "rate_meeting_target",
    "capped_latency",
    "cap_throughput",
    "ceiling_rps",
    "capped_load_elasticity",
    "concurrency_cap",
    "binding_cap_source",
    "kv_tokens_per_request",
    "slot_queue_latency_expr",
    "cap_throughput_expr",
    "load_elasticity_expr",
    "queue_wait_scale",
]


# --------------------------------------------------------------------------------------
# Bare algebra shared with the PyMC models (backend-agnostic: numpy or pytensor.tensor)
# --------------------------------------------------------------------------------------

def latency_expr(rps, c1, c2):
    """Eq. (1): L = C1 / (1 - RPS*C2); no saturation handling (the caller constrains it)."""
    return c1 / (1.0 - rps * c2)


def curved_latency_expr(rps, c1, c2, bend):
    """The second-order law L = C1 (1 + bend*x)/(1 - x), x = RPS*C2: the batch-1 latency
    C1 is reached only at zero load, and the cost of a step grows with the batch by more
    (bend > 0) or less (-1 < bend < 0) than eq. (1) says. bend = 0 is eq. (1)."""
    utilisation = rps * c2
    return c1 * (1.0 + bend * utilisation) / (1.0 - utilisation)


def two_regime_latency_expr(rps, c1m, c2m, c1c, c2c, sharpness=12.0):
    """The roofline's two regimes, each a law of eq. (1): a step costs the larger of its
    memory time (C1m + C2m*B: weights, KV reads) and its compute time (C1c + C2c*B), so
    with B = RPS*L (Little) the mean latency is the larger of the two laws' latencies,
    max(C1m/(1 - RPS*C2m), C1c/(1 - RPS*C2c)) (the least L with L >= C1_r + C2_r*RPS*L
    for both r). The max is smoothed as a p-norm of sharpness p (at the crossover the
    p-norm is 2^(1/p) above either: 6% at p = 12), which also matches a step's gradual
    change of regime. One law when either branch never leads."""
    memory = c1m / (1.0 - rps * c2m)
    compute = c1c / (1.0 - rps * c2c)
    top = memory + compute  # scale out before the power: latencies^12 overflow nothing
    return top * ((memory / top) ** sharpness + (compute / top) ** sharpness) ** (1.0 / sharpness)


def percentile_latency_expr(rps, scale, c2, exponent, xp: ModuleType = np):
    """A latency percentile (or a TTFT/ITL summary) under load: q = A (1 - x)^(-gamma),
    x = RPS*C2 with the C2 of the group's mean law.

    All of a server's latency summaries diverge at the rate its mean latency does (the
    queue is unstable past 1/C2), each at its own pace: with step time a + b*batch and
    Little's law the mean and per-token latency grow as 1/(1 - x) (gamma = 1); a
    waiting-time tail grows faster (gamma > 1), a summary dominated by a load-free part
    (prompt processing in TTFT, the spread of output lengths in p99) more slowly.
    ``A`` is the summary at zero load."""
    return scale * xp.exp(-exponent * xp.log1p(-rps * c2))


def rate_meeting_target(target, scale, c2, exponent):
    """The highest RPS at which :func:`percentile_latency_expr` stays at or below
    ``target``: (1 - (A/target)^(1/gamma))/C2; 0 when even zero load misses it."""
    scale, c2, exponent, target = _as_float(scale, c2, exponent, target)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        headroom = 1.0 - np.exp(np.log(scale / target) / exponent)
        value = headroom / c2
    return np.where(scale > target, 0.0, value)[()]


def load_amplification_expr(rps, c2):
    """x/(1-x) with x = RPS*C2: how a relative error in RPS is amplified in log L."""
    utilisation = rps * c2
    return utilisation / (1.0 - utilisation)


# --------------------------------------------------------------------------------------
# The engine's concurrency cap: eq. (1) as a queue with ``cap`` batch slots
# --------------------------------------------------------------------------------------

def _special(xp):
    """(betainc, gammaln) of the backend: scipy's for numpy, PyTensor's for its tensors."""
    if xp is np:
        from scipy.special import betainc, gammaln

        return betainc, gammaln
    return xp.betainc, xp.gammaln


def cap_throughput_expr(c1, c2, cap):
    """The rate the engine sustains with every one of its ``cap`` batch slots busy:
    cap / (C1 + C2 (cap - 1)), a request's time in a full batch being C1 + C2 (cap - 1)."""
    return cap / (c1 + c2 * (cap - 1.0))


def slot_queue_latency_expr(rps, c1, c2, cap, xp: ModuleType = np, *, wait_scale=1.0,
                            soft_margin=None):
    """Mean latency of eq. (1)'s server when at most ``cap`` requests share the batch.

    The birth-death form of eq. (1): with n requests in the batch a step serves each at
    the pace that makes a request's time there C1 + C2 (n - 1), so n requests leave at
    rate n / (C1 + C2 (n - 1)). Without a cap the number in the system is then negative
    binomial with r = C1/C2, x = RPS*C2, and Little's law gives exactly C1/(1 - x): eq. (1)
    (processor sharing, so this holds whatever the spread of request lengths). With a cap
    the batch stops growing at ``cap``: further requests wait for a slot, leaving at the
    full batch's rate mu = cap/(C1 + C2 (cap - 1)) (:func:`cap_throughput_expr`), and the
    queue length beyond the cap is geometric in rho = RPS/mu. Writing P_c for the negative
    binomial's probability of exactly ``cap`` and I for the regularised incomplete beta
    (its partial sums), the mean number in the system is

        N = [r x/(1-x) I_{1-x}(r+1, cap) + P_c (cap rho/(1-rho) + s rho/(1-rho)^2)]
            / [I_{1-x}(r, cap+1) + P_c rho/(1-rho)],

    L = N/RPS. With s = ``wait_scale`` = 1 this is exact for the Markov queue; the waiting
    line beyond the cap is FIFO, whose wait (unlike processor sharing) depends on the
    spread of service times: s < 1 shortens it as for less variable requests (s = 1/2 for
    deterministic ones in heavy traffic). The curve follows eq. (1) while the system is
    well below the cap and kinks upward as it nears it; the ceiling is mu, always below
    1/C2. ``cap`` may be fractional (the formula is smooth in it).

    ``soft_margin`` (PyTensor models): rho is capped smoothly below 1 as
    :func:`bayesspec.bayes.priors.soft_utilisation_cap` caps x, so a draw that puts an
    observed point past the ceiling gets a finite, steeply worse latency.
    """
    betainc, gammaln = _special(xp)
    utilisation = rps * c2
    free = 1.0 - utilisation
    shape = c1 / c2
    rho = rps / cap_throughput_expr(c1, c2, cap)
    if soft_margin is not None:
        edge = 1.0 - soft_margin
        excess = xp.maximum(rho - edge, 0.0)
        rho = xp.where(rho < edge, rho, 1.0 - soft_margin / (1.0 + excess / soft_margin))
    # P(N = cap) of the uncapped negative binomial, in logs: (r)_cap x^cap (1-x)^r / cap!
    log_at_cap = (gammaln(shape + cap) - gammaln(shape) - gammaln(cap + 1.0)
                  + shape * xp.log(free) + cap * xp.log(utilisation))
    at_cap = xp.exp(log_at_cap)
    below = betainc(shape, cap + 1.0, free)                 # P(N <= cap)
    mean_below = c1 / free * betainc(shape + 1.0, cap, free)  # E[N; N <= cap] / RPS
    waiting = rho / (1.0 - rho)
    # tail terms / RPS: each term's rho carries a factor RPS, so divide it out (finite at
    # light load, where the tail vanishes)
    per_rate = (c1 + c2 * (cap - 1.0)) / cap              # rho / RPS
    tail_mean = at_cap * per_rate / (1.0 - rho) * (cap + wait_scale / (1.0 - rho))
    return (mean_below + tail_mean) / (below + at_cap * waiting)


def queue_wait_scale(service_cv):
    """The slot queue's ``wait_scale`` for requests whose time in the batch varies with
    coefficient of variation ``service_cv``: (1 + cv^2)/2, the heavy-traffic
    (Allen-Cunneen) factor by which a FIFO wait differs from the Markov queue's; 1/2 for
    requests of one length, 1 for exponential ones. NaN (unknown spread) gives 1."""
    cv = np.asarray(service_cv, dtype=float)
    return np.where(np.isfinite(cv), 0.5 * (1.0 + cv**2), 1.0)[()]


def load_elasticity_expr(latency_of, rps, step: float = 1e-4, xp: ModuleType = np):
    """d log L / d log RPS of a latency law ``latency_of(rps)`` by a central difference
    in log RPS: how a relative error in the measured rate moves log L. For eq. (1) it is
    x/(1-x) (:func:`load_amplification_expr`); laws without a closed form (the capped
    law) use this. First derivatives only, so the model's gradient needs no second
    derivative of the law's special functions."""
    up = xp.log(latency_of(rps * np.exp(step)))
    down = xp.log(latency_of(rps * np.exp(-step)))
    return (up - down) / (2.0 * step)


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


def effective_costs_expr(alpha, k, decode_tokens, c1p, c1v, c1d, c2p, c2v, c2d,
                         xp: ModuleType = np):
    """Eq. (3): per-request costs of speculative decoding from six cycle coefficients."""
    return costs_for_acceptance_length(expected_accepted_expr(alpha, k, xp=xp), k,
                                       decode_tokens, c1p, c1v, c1d, c2p, c2v, c2d)


def costs_for_acceptance_length(length, k, decode_tokens, c1p, c1v, c1d, c2p, c2v, c2d):
    """Eq. (3) given the tokens committed per cycle E directly (i.i.d. acceptance gives
    E = expected_accepted(alpha, k); acceptance by position gives
    :func:`expected_accepted_positions_expr`): g/E cycles of a verification and k drafts."""
    cycles = decode_tokens / length
    c1_eff = c1p + cycles * (c1v + k * c1d)
    c2_eff = c2p + cycles * (c2v + k * c2d)
    return c1_eff, c2_eff


def expert_coverage_expr(tokens, m, M, xp: ModuleType = np):
    """phi(T) = 1 - (1 - m/M)^T, computed as -expm1(T*log1p(-m/M)) for small m/M."""
    return -xp.expm1(tokens * xp.log1p(-m / M))


def moe_costs_expr(phi, c1u, c1s, c2u, c2s):
    """Eq. (4): costs split into an uncovered part and a coverage-saturating increment."""
    return c1u + phi * c1s, c2u + phi * c2s


#: Steps of the in-graph solve of eq. (4) (:func:`moe_latency_expr`): bisections for the
#: minimum of F on its convex part and for the least root, then Newton steps inside the
#: final bracket. 2^-20 of the bracket's log-width, then four Newton steps: the least root
#: to 1e-12 on 400k random inputs over decades of costs, also where coverage rises steeply
#: within a sweep (tests/test_moe.py); 12 bisections still did, 8 missed one input by a
#: factor 55. Each step costs one evaluation per row in every gradient of a fit.
MOE_BISECTION_STEPS = 20
MOE_NEWTON_STEPS = 4


def _without_gradient(value, xp):
    """``value`` with its gradient cut (PyTensor), or itself (numpy). Disconnected, not
    zeroed: a zeroed gradient still differentiates the whole search behind it, and that
    graph took 50 s to compile."""
    if xp is np:
        return value
    from pytensor.gradient import disconnected_grad

    return disconnected_grad(value)


def moe_latency_expr(rps, c1u, c1s, c2u, c2s, m, M, tokens_per_request=1.0, *,
                     token_offset=0.0, xp: ModuleType = np,
                     bisection_steps: int = MOE_BISECTION_STEPS,
                     newton_steps: int = MOE_NEWTON_STEPS):
    """Eq. (4) solved inside a graph: the least fixed point, as :func:`moe_latency`.

    Of fixed cost and differentiable, for the PyMC models. The roots of
    F(L) = C1u + phi(L)*(C1s + rps*C2s*L) - L*(1 - rps*C2u) are the fixed points; F is
    convex below its inflection and concave above (see :func:`moe_latency`), so the least
    root is found by bracketing alone: a bisection on the sign of F' for F's minimum over
    the convex part, then one on the sign of F for the root left of it (when F dips to 0
    there) or right of it, then safeguarded Newton steps inside the bracket.

    The search runs without gradients; the result is one Newton step from the found root
    L0 with L0 held fixed, L0 - F(L0)/F'(L0), whose gradient is the implicit one,
    dL/dtheta = -F_theta/F_L. An earlier solve (fixed-point steps from the phi = 0 latency,
    then Newton) stalled where coverage rises steeply within a sweep: on the failing design
    of issue 35 it returned latencies up to 61% off the least root at half the draws of one
    group, and the chains settled in the modes those wrong latencies made.
    T = token_offset + rps*L*tokens_per_request. The caller keeps rps*(c2u + c2s) < 1.
    """
    tiny = 1e-300
    per_latency = -rps * tokens_per_request * xp.log1p(-m / M)     # beta: T's slope in L
    at_zero = -token_offset * xp.log1p(-m / M)                       # beta0: T at L = 0
    kappa = rps * c2s
    free = 1.0 - rps * c2u

    def coverage(latency):
        return -xp.expm1(-(at_zero + per_latency * latency))

    def residual(latency):                                           # F
        return c1u + coverage(latency) * (c1s + kappa * latency) - latency * free

    def slope(latency):                                              # F'
        phi = coverage(latency)
        return per_latency * (1.0 - phi) * (c1s + kappa * latency) + phi * kappa - free

    def bisect(lo, hi, go_up, steps):
        for _ in range(steps):
            mid = xp.sqrt(lo * hi)          # geometric: brackets span decades near the pole
            up = go_up(mid)
            lo, hi = xp.where(up, mid, lo), xp.where(up, hi, mid)
        return lo, hi

    phi0 = coverage(0.0 * per_latency)
    low = (c1u + phi0 * c1s) / (1.0 - rps * (c2u + phi0 * c2s))
    full_free = xp.maximum(1.0 - rps * (c2u + c2s), tiny)
    high = xp.maximum((c1u + c1s) / full_free, low)
    convex = (per_latency > 0) & (kappa > 0)
    inflection = xp.where(convex, 2.0 / xp.where(convex, per_latency, 1.0)
                          - c1s / xp.where(convex, kappa, 1.0), 0.0)
    convex_end = xp.minimum(xp.maximum(inflection, low), high)
    # F's minimum over the convex part [low, convex_end]: F' increases there
    lo, hi = bisect(low, convex_end, lambda x: slope(x) < 0.0, bisection_steps)
    minimum = xp.where(slope(convex_end) < 0.0, convex_end,
                       xp.where(slope(low) >= 0.0, low, xp.sqrt(lo * hi)))
    # F >= 0 at low and <= 0 at high; where F dips to zero on the convex part, the least
    # root is the one left of the minimum, else the only one right of it.
    dips = residual(minimum) <= 0.0
    lo, hi = bisect(xp.where(dips, low, minimum), xp.where(dips, minimum, high),
                    lambda x: residual(x) > 0.0, bisection_steps)
    latency = xp.sqrt(lo * hi)
    for _ in range(newton_steps):
        step = residual(latency) / xp.minimum(slope(latency), -tiny)
        latency = xp.minimum(xp.maximum(latency - step, lo), hi)
    latency = _without_gradient(latency, xp)
    # one Newton step with the root held fixed: its gradient is the implicit one
    return latency - residual(latency) / xp.minimum(slope(latency), -tiny)


# --------------------------------------------------------------------------------------
# Public numpy API (CONTRACT.md)
# --------------------------------------------------------------------------------------

def _as_float(*values):
    return [np.asarray(v, dtype=float) for v in values]


def latency(rps, c1, c2):
    """Mean latency C1/(1 - rps*C2); ``inf`` where rps*C2 >= 1 (at or past saturation)."""
    rps, c1, c2 = _as_float(rps, c1, c2)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = latency_expr(rps, c1, c2)
    return np.where(rps * c2 >= 1.0, np.inf, value)[()]


def capped_latency(rps, c1, c2, cap, *, wait_scale=1.0):
    """Mean latency with the engine's concurrency cap (:func:`slot_queue_latency_expr`):
    eq. (1) where ``cap`` is ``inf`` or NaN (unknown), ``inf`` at or past the ceiling
    (:func:`ceiling_rps`), C1 at zero load."""
    rps, c1, c2, cap, wait_scale = _as_float(rps, c1, c2, cap, wait_scale)
    rps, c1, c2, cap, wait_scale = np.broadcast_arrays(rps, c1, c2, cap, wait_scale)
    capped = np.isfinite(cap)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        open_law = latency_expr(rps, c1, c2)
        safe_cap = np.where(capped, cap, 1.0)
        past = rps >= ceiling_rps(c1, c2, np.where(capped, cap, np.inf))
        live = capped & ~past & (rps > 0)
        value = np.array(open_law, dtype=float, copy=True)
        if live.any():
            value[live] = slot_queue_latency_expr(rps[live], c1[live], c2[live],
                                                  safe_cap[live],
                                                  wait_scale=wait_scale[live])
    return np.where(past, np.inf, np.where(rps <= 0, c1, value))[()]


def cap_throughput(c1, c2, cap):
    """The rate a full batch of ``cap`` requests sustains (:func:`cap_throughput_expr`);
    ``inf`` where the cap is unknown (``inf`` or NaN)."""
    c1, c2, cap = _as_float(c1, c2, cap)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = cap_throughput_expr(c1, c2, cap)
    return np.where(np.isfinite(cap), value, np.inf)[()]


def ceiling_rps(c1, c2, cap=np.inf):
    """The highest rate the server sustains: min(1/C2, the cap's throughput). Eq. (1)'s
    pole 1/C2 alone when the cap is unknown; the cap's throughput is always below 1/C2
    (a full batch's requests take C1 + C2 (cap - 1) > C2 cap each)."""
    c1, c2, cap = _as_float(c1, c2, cap)
    with np.errstate(divide="ignore"):
        return np.minimum(1.0 / c2, cap_throughput(c1, c2, cap))[()]


def capped_load_elasticity(rps, c1, c2, cap, *, wait_scale=1.0):
    """d log L / d log RPS of :func:`capped_latency` (``inf`` at or past the ceiling):
    x/(1-x) where the cap is unknown."""
    rps = np.asarray(rps, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        value = load_elasticity_expr(
            lambda r: capped_latency(r, c1, c2, cap, wait_scale=wait_scale), rps)
    return np.where(np.isnan(value), np.inf, value)[()]


#: KV cache a running request holds on average, in tokens: its prompt and, over its
#: decode, half its output (a request's cache grows linearly while it decodes).
def kv_tokens_per_request(prefill, decode):
    prefill, decode = _as_float(prefill, decode)
    return (prefill + 0.5 * decode)[()]


def concurrency_cap(max_num_seqs=np.nan, kv_cache_tokens=np.nan,
                    max_num_batched_tokens=np.nan, prefill=np.nan, decode=np.nan, k=0):
    """The engine's effective cap on requests in the batch: the smallest of
    ``max_num_seqs``; the KV cache over a running request's average footprint
    (``kv_cache_tokens`` / (prefill + decode/2)); and, with speculation, the step's token
    budget over the k + 1 tokens each verification carries
    (``max_num_batched_tokens`` / (k + 1); for plain decoding the budget holds one token
    per request and never binds before ``max_num_seqs`` does in practice, so it counts
    only for k > 0). ``inf`` where nothing is known (NaN inputs are unknown)."""
    seqs, kv, budget, prefill, decode, k = np.broadcast_arrays(
        *_as_float(max_num_seqs, kv_cache_tokens, max_num_batched_tokens, prefill, decode,
                   k))
    with np.errstate(divide="ignore", invalid="ignore"):
        by_kv = kv / kv_tokens_per_request(prefill, decode)
        by_budget = np.where(k > 0, budget / (k + 1.0), np.nan)
    candidates = np.stack([seqs, by_kv, by_budget])
    candidates = np.where(np.isfinite(candidates) & (candidates > 0), candidates, np.inf)
    return np.floor(np.min(candidates, axis=0))[()]


CAP_SOURCES = ("max_num_seqs", "kv_cache_tokens", "max_num_batched_tokens")


def binding_cap_source(max_num_seqs=np.nan, kv_cache_tokens=np.nan,
                       max_num_batched_tokens=np.nan, prefill=np.nan, decode=np.nan, k=0):
    """Which of :data:`CAP_SOURCES` sets :func:`concurrency_cap` (scalar inputs), or ""
    when none is known."""
    values = [
        concurrency_cap(max_num_seqs, np.nan, np.nan, prefill, decode, k),
        concurrency_cap(np.nan, kv_cache_tokens, np.nan, prefill, decode, k),
        concurrency_cap(np.nan, np.nan, max_num_batched_tokens, prefill, decode, k),
    ]
    best = int(np.argmin(values))
    return CAP_SOURCES[best] if np.isfinite(values[best]) else ""


def percentile_latency(rps, scale, c2, exponent):
    """:func:`percentile_latency_expr` with ``inf`` at or past saturation (rps*C2 >= 1)."""
    rps, scale, c2, exponent = _as_float(rps, scale, c2, exponent)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        value = percentile_latency_expr(rps, scale, c2, exponent)
    return np.where(rps * c2 >= 1.0, np.inf, value)[()]


def curved_latency(rps, c1, c2, bend):
    """:func:`curved_latency_expr` with ``inf`` at or past saturation (rps*C2 >= 1)."""
    rps, c1, c2, bend = _as_float(rps, c1, c2, bend)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = curved_latency_expr(rps, c1, c2, bend)
    return np.where(rps * c2 >= 1.0, np.inf, value)[()]


def two_regime_latency(rps, c1m, c2m, c1c, c2c, sharpness=12.0):
    """:func:`two_regime_latency_expr` with ``inf`` at or past either branch's
    saturation."""
    rps, c1m, c2m, c1c, c2c, sharpness = _as_float(rps, c1m, c2m, c1c, c2c, sharpness)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        value = two_regime_latency_expr(rps, c1m, c2m, c1c, c2c, sharpness)
    return np.where(rps * np.maximum(c2m, c2c) >= 1.0, np.inf, value)[()]


def expected_accepted(alpha, k):
    """Expected tokens committed per SD cycle: (1 - alpha^(k+1))/(1 - alpha).

    Equals k + 1 at alpha = 1 and 1 at k = 0 (plain decoding).
    """
    alpha, k = _as_float(alpha, k)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = expected_accepted_expr(alpha, k)
    return np.where(k == 0, 1.0, value)[()]


def effective_costs(alpha, k, decode_tokens, c1p, c1v, c1d, c2p, c2v, c2d):
    """(C1_eff, C2_eff) of eq. (3) for acceptance ``alpha``, draft length ``k``."""
    arrays = _as_float(alpha, k, decode_tokens, c1p, c1v, c1d, c2p, c2v, c2d)
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha, k = arrays[:2]
        c1_eff, c2_eff = costs_for_acceptance_length(expected_accepted(alpha, k), k,
                                                     *arrays[2:])
    return c1_eff[()], c2_eff[()]


def speedup(rps, c1_dense, c2_dense, c1_sd, c2_sd):
    """L_dense / L_sd at ``rps`` (eq. 2).

    Past the SD saturation rate the speedup is 0 (SD latency is infinite); past the
    dense saturation rate it is ``inf``; past both it is ``nan``.
    """
    l_dense = latency(rps, c1_dense, c2_dense)
    l_sd = latency(rps, c1_sd, c2_sd)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.asarray(l_dense / l_sd, dtype=float)
    return ratio[()]


def crossover_rps(c1_dense, c2_dense, c1_sd, c2_sd):
    """RPS* at which speedup = 1, or ``nan`` when there is none below saturation.

    r* = (C1R - 1)/(C1R - C2R) with r = RPS*C2_dense; the crossover is real only where
    0 < r* < 1 (below dense saturation) and r*C2R < 1 (below SD saturation).
    """
    c1_dense, c2_dense, c1_sd, c2_sd = _as_float(c1_dense, c2_dense, c1_sd, c2_sd)
    with np.errstate(divide="ignore", invalid="ignore"):
        c1_ratio = c1_sd / c1_dense
        c2_ratio = c2_sd / c2_dense
        r_star = (c1_ratio - 1.0) / (c1_ratio - c2_ratio)
        valid = (r_star > 0.0) & (r_star < 1.0) & (r_star * c2_ratio < 1.0) & (c1_ratio != c2_ratio)
        value = r_star / c2_dense
    return np.where(valid, value, np.nan)[()]


def expert_coverage(tokens, m, M):
    """Share of experts touched when ``tokens`` are routed to m of M experts each."""
    tokens, m, M = _as_float(tokens, m, M)
    if np.any((m < 0) | (m > M) | (M <= 0)):
        raise ValueError("expert counts need 0 <= m <= M and M > 0")
    tokens = np.maximum(tokens, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = expert_coverage_expr(tokens, m, M)
    # No tokens (or no routed experts) cover nothing, also where the expression is
    # 0 * log(0) = nan (m = M with zero tokens, m = 0 with infinitely many).
    return np.where((tokens == 0.0) | (m == 0.0), 0.0, value)[()]


def verification_tokens(k, rule: str = "k+1"):
    """Routed tokens per request per step in eq. (4): 1 when dense (k = 0); per
    verification ``k`` (the paper's T = RPS*L*k) or ``k+1`` (the verifier's own token
    rides along). The ``tokens_per_request`` of :func:`moe_latency`."""
    k = np.asarray(k, dtype=float)
    if rule == "k":
        return np.where(k > 0, k, 1.0)[()]
    if rule == "k+1":
        return (k + 1.0)[()]
    raise ValueError(f"verify_tokens must be 'k' or 'k+1', got {rule!r}")


def moe_latency(rps, c1u, c1s, c2u, c2s, m, M, tokens_per_request=1.0, *,
                token_offset=0.0, rtol: float = 1e-13, max_iter: int = 200):
    """Mean latency of a sparse MoE model, eq. (4), solved for its least fixed point in L.

    The routed tokens per step T = token_offset + rps*L*tokens_per_request depend on L,
    so L solves L = (C1u + phi(T)*C1s)/(1 - rps*(C2u + phi(T)*C2s)). ``token_offset`` 1
    is the variant in which a request's own tokens count even alone (T = 1 + RPS*L);
    the paper's T = RPS*L is 0. Saturation is rps*(C2u + C2s) >= 1 (at high load every
    expert is touched, phi -> 1): ``inf``.

    Below saturation the fixed points are the roots of
    F(L) = C1u + phi(L)*(C1s + rps*C2s*L) - L*(1 - rps*C2u),
    phi(L) = 1 - exp(-(beta0 + beta*L)), beta = -rps*tokens_per_request*log(1 - m/M),
    beta0 = -token_offset*log(1 - m/M). The offset only scales the exponential by
    exp(-beta0), which moves neither the inflection below nor the sign argument.
    F >= 0 at the phi = 0 latency and
    F <= 0 at the phi = 1 latency, but eq. (4) can have three fixed points in that
    bracket. The served latency is the least one: the one that the load reaches when it
    rises from zero, and the limit of the iteration L <- rhs(L) from the phi = 0 latency.
    F is convex below L_i = 2/beta - C1s/(rps*C2s) and concave above, so with x the
    minimiser of F over the convex part of the bracket, the least root is the only root
    in [phi=0 latency, x] when F(x) <= 0, and the only root in [x, phi=1 latency]
    otherwise; a vectorised bisection finds it.
    """
    arrays = np.broadcast_arrays(
        *_as_float(rps, c1u, c1s, c2u, c2s, m, M, tokens_per_request, token_offset))
    shape = arrays[0].shape
    # flat copies: the solver below works on the shrinking set of unconverged entries
    rps, c1u, c1s, c2u, c2s, m, M, tpr, offset = [np.ravel(a) for a in arrays]
    saturated = rps * (c2u + c2s) >= 1.0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        low = np.where(saturated, 1.0, latency_expr(rps, c1u, c2u))
        high = np.where(saturated, 1.0, latency_expr(rps, c1u + c1s, c2u + c2s))
        # beta = inf where every expert is routed (phi = 1 at any load), also when
        # rps*tokens_per_request underflows to 0
        routed = (rps > 0.0) & (tpr > 0.0) & (m > 0.0)
        beta = np.where(routed, np.where(m >= M, np.inf, -rps * tpr * np.log1p(-m / M)), 0.0)
        beta0 = np.where((offset > 0.0) & (m > 0.0),
                         np.where(m >= M, np.inf, -offset * np.log1p(-m / M)), 0.0)
        kappa = rps * c2s
        free = 1.0 - rps * c2u
        inflection = 2.0 / beta - c1s / kappa
        # no convex part where F is concave or linear (kappa = 0 or beta = 0), or where
        # the terms over/underflow (inf - inf): phi is then flat to double precision
        inflection = np.where((kappa > 0.0) & (beta > 0.0) & ~np.isnan(inflection),
                              inflection, -np.inf)
        convex_end = np.clip(inflection, low, high)
        everything = slice(None)

        def coverage(candidate, i):
            # phi(0) = phi(offset) also where beta is inf (m = M)
            return -np.expm1(-(beta0[i] + np.where(candidate > 0.0, beta[i] * candidate, 0.0)))

        def excess(candidate, i):  # rhs(L) - L = F(L)/(1 - rps*C2(phi)): the sign of F
            c1, c2 = moe_costs_expr(coverage(candidate, i), c1u[i], c1s[i], c2u[i], c2s[i])
            return latency_expr(rps[i], c1, c2) - candidate

        def slope(candidate, i):  # F'(L), increasing on the convex part
            phi = coverage(candidate, i)
            return beta[i] * (1.0 - phi) * (c1s[i] + kappa[i] * candidate) + phi * kappa[i] - free[i]

        def curvature(candidate, i):  # F''(L), positive on the convex part
            phi = coverage(candidate, i)
            return beta[i] * (1.0 - phi) * (2.0 * kappa[i] - beta[i] * (c1s[i] + kappa[i] * candidate))

        def residual(candidate, i):  # F(L)
            phi = coverage(candidate, i)
            return c1u[i] + phi * (c1s[i] + kappa[i] * candidate) - candidate * free[i]

        def solve(lo, hi, go_up, value, derivative):
            """Safeguarded Newton: the bracket [lo, hi] shrinks by the sign test at every
            step (so the least root stays the one found); a Newton step is taken only
            when it stays inside the bracket and is no longer than the previous step,
            otherwise the midpoint. Far fewer steps than plain bisection, and only the
            unconverged entries are carried on, which matters when decisions solve
            millions of (draw, k, rate) points."""
            lo, hi = lo.copy(), hi.copy()
            x = 0.5 * (lo + hi)
            previous = np.abs(hi - lo)
            i = np.arange(x.size)
            for _ in range(max_iter):
                xi, loi, hii = x[i], lo[i], hi[i]
                up = go_up(xi, i)
                loi = np.where(up, xi, loi)
                hii = np.where(up, hii, xi)
                correction = value(xi, i) / derivative(xi, i)
                # x is the root to rtol: done (a Newton step from a point within an ulp
                # of the root can land just outside the bracket, which would bisect away)
                close = np.abs(correction) <= rtol * np.abs(xi)
                newton = xi - correction
                # a root at a bracket end (phi flat at 1) puts Newton an ulp past it
                slack = 4.0 * np.spacing(np.abs(hii))
                use = ((newton >= loi - slack) & (newton <= hii + slack)
                       & (np.abs(correction) <= previous[i]))
                new = np.where(close, xi, np.where(use, np.clip(newton, loi, hii),
                                                   0.5 * (loi + hii)))
                step = np.abs(new - xi)
                converged = close | (step <= rtol * np.abs(new)) | ((hii - loi) <= rtol * np.abs(hii))
                x[i], lo[i], hi[i], previous[i] = new, loi, hii, step
                i = i[~converged]
                if i.size == 0:
                    break
            return x

        # F' is increasing on [low, convex_end]: its minimiser is an end unless F'
        # changes sign inside (otherwise Newton would only push outwards)
        at_end = slope(convex_end, everything) < 0.0
        at_low = ~at_end & (slope(low, everything) >= 0.0)
        inside = ~(at_end | at_low)
        lowest = solve(np.where(at_end, convex_end, low),
                       np.where(inside | at_end, convex_end, low),
                       lambda x, i: slope(x, i) < 0.0, slope, curvature)
        dips = excess(lowest, everything) <= 0.0
        result = solve(np.where(dips, low, lowest), np.where(dips, lowest, high),
                       lambda x, i: excess(x, i) > 0.0, residual, slope)
    return np.where(saturated, np.inf, result).reshape(shape)[()]
