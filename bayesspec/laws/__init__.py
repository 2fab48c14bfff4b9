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
    "run_mean_log_sd",
    "run_process_factor",
    "RUN_OWN_LENGTH",
    "run_process_factor_expr",
    "run_process_layout",
    "run_process_conditional",
    "percentile_latency",
    "percentile_latency_expr",
    "count_spread_quantile_expr",
    "spreading_load_expr",
    "log_normal_quantile_expr",
    "batch_count_quantile_expr",
    "batch_count_loads",
    "load_factor_expr",
    "rate_meeting_target",
    "token_chain_acceptance",
    "token_chain_expected_accepted",
    "token_cycle_acceptance_expr",
    "token_cycle_acceptance_upto_expr",
    "token_regimes_acceptance_expr",
    "two_state_transition_expr",
    "stationary_law_expr",
    "acceptance_length_of_pmf_expr",
    "quantile_sampling_moments",
    "sampled_quantile_error_expr",
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
    "decode_profile_shift",
    "profile_segments",
    "profile_concurrency_expr",
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


def load_factor_expr(rps, c2):
    """L/C1 of eq. (1): 1/(1 - RPS*C2), how much load lengthens a request (1 at zero
    load, diverging at the saturation rate). The load factor of any mean law L(RPS) is
    L(RPS)/C1; a latency summary grows as a power of it
    (:func:`percentile_latency_expr`)."""
    return 1.0 / (1.0 - rps * c2)


def percentile_latency_expr(load_factor, scale, exponent, xp: ModuleType = np):
    """A latency percentile (or a TTFT/ITL summary) under load: q = A F^gamma, F = L/C1
    the mean law's load factor (:func:`load_factor_expr` for eq. (1), where q =
    A (1 - RPS*C2)^-gamma).

    All of a server's latency summaries diverge where its mean latency does (the queue is
    unstable there), each at its own pace: with step time a + b*batch and Little's law
    the mean and per-token latency grow like the mean's load factor (gamma = 1); a
    waiting-time tail grows faster (gamma > 1), a summary dominated by a load-free part
    (prompt processing in TTFT, the spread of output lengths in p99) more slowly. ``A``
    is the summary at zero load. Written on the load factor, not on RPS*C2, so that a
    mean law with another pole (an engine's concurrency cap) carries its summaries
    with it."""
    return scale * xp.exp(exponent * xp.log(load_factor))


def count_spread_quantile_expr(latency, own_work, c2, spread, dispersion, z,
                               xp: ModuleType = np, load=None):
    """A percentile of end-to-end latency from the mean law and the spread of the load
    each request meets (the ``tails`` model's ``tail_law`` "count").

    A request's latency is its own work (``own_work``, C1) plus what the load adds: the
    stalls of later arrivals' prefills, the wait for a batch slot, and the decode
    profile's stretch of the batches it meets. The mean of that part is
    ``latency - own_work``, but how much of it one request meets varies with how many
    arrive during its life and how crowded the batch is then. In eq. (1)'s birth-death
    chain the number in the system is negative binomial with variance N F, F = L/C1 its
    load factor (Poisson at light load, over-dispersed as it fills;
    :func:`slot_queue_latency_expr`), so the load's part has variance about
    d^2 C2^2 N F = d^2 C2 (L - C1) L/C1, d a dispersion (1: the chain's own). With a
    zero-load spread s0 (the relative sd of a request's own work: the spread of its
    lengths) the variance is

        v = (s0 C1)^2 + d^2 C2 (L - C1) L/C1,

    and the p-quantile, z = Phi^-1(p), is that of a log-normal of mean L and variance v:
    q = L exp(z s - s^2/2), s^2 = log(1 + v/L^2). Its excess over the mean grows like
    sqrt(N) while the stalls dominate: q/L rises with load and then flattens (towards
    exp(z s - s^2/2) with s^2 = log(1 + d^2 C2/C1) at the pole), where the power law
    q = A F^gamma (:func:`percentile_latency_expr`) carries the early rise on (measured
    on the Vidur sets' prefill-heavy sweeps: benchmarks/README.md, section
    "2026-12-06 (tenth session)").

    ``load``: the part that spreads, where it is not the net ``latency - own_work``
    (the decode profile's stretch can be negative where the engine's iteration time dips
    with the batch, and the stalls still spread: :func:`spreading_load_expr`)."""
    if load is None:
        load = xp.maximum(latency - own_work, 0.0)
    variance = (spread * own_work) ** 2 + dispersion ** 2 * c2 * load * latency / own_work
    return log_normal_quantile_expr(latency, variance, z, xp=xp)


def log_normal_quantile_expr(mean, variance, z, xp: ModuleType = np):
    """The quantile at normal score ``z`` of a log-normal of this mean and variance:
    mean exp(z s - s^2/2), s^2 = log(1 + variance/mean^2)."""
    log_variance = xp.log1p(variance / mean ** 2)
    return mean * xp.exp(z * xp.sqrt(log_variance) - 0.5 * log_variance)


def batch_count_quantile_expr(latency, own_work, c2, spread, dispersion, z, stall_load,
                              slot_wait, xp: ModuleType = np):
    """A percentile of end-to-end latency with the load's spread as a batching engine
    makes it (the ``tails`` model's ``count_dispersion`` "batch"; the default "chain" is
    :func:`count_spread_quantile_expr`).

    Below the concurrency cap the batch serves every request in the system at once, so
    the number of others' prefills a request meets is a Poisson count, as in a queue
    with a server per request: its stall time has variance d^2 C2 S, S the stalls' mean
    (``stall_load``), with no over-dispersion from the birth-death chain's memory. Past
    the cap a request first waits for a slot, and that wait (``slot_wait``, its mean)
    is the exponential of a queue of ``cap`` servers: variance its mean squared. With
    the zero-load spread s0 of a request's own work,

        v = (s0 C1)^2 + d^2 C2 S + W^2,

    and the quantile is the log-normal's of mean L and variance v. The chain's factor
    L/C1 made the count law over-predict the held-out p99 of prefill-heavy sweeps whose
    p99/mean stays flat as they fill (Vidur's Qwen-72B at (1280, 96): 1.4-1.5 from 4 to
    38 requests in flight, over-predicted by 17-20%). Other sweeps spread as the chain
    does or more (benchmarks/count_dispersion_exponent.py; benchmarks/README.md, the
    fifteenth session)."""
    variance = (spread * own_work) ** 2 + dispersion ** 2 * c2 * stall_load + slot_wait ** 2
    return log_normal_quantile_expr(latency, variance, z, xp=xp)


def batch_count_loads(own_work, stretch, queue_factor, eq1_factor, magnitude: bool,
                      xp: ModuleType = np):
    """(S, W) of :func:`batch_count_quantile_expr` from the mean law's parts: eq. (1)'s
    load factor ``eq1_factor`` carries the stalls, the rest of the (capped) queue
    factor is the wait for a slot. S with the decode profile's stretch P signed (the net
    C1 (P F1 - 1), floored at 0) or by its size (:func:`spreading_load_expr`)."""
    stall_factor = xp.minimum(queue_factor, eq1_factor)
    slot_wait = own_work * stretch * (queue_factor - stall_factor)
    if magnitude:
        stall_load = spreading_load_expr(own_work, stretch, stall_factor, xp=xp)
    else:
        stall_load = xp.maximum(own_work * (stretch * stall_factor - 1.0), 0.0)
    return stall_load, slot_wait


def spreading_load_expr(own_work, stretch, queue_factor, xp: ModuleType = np):
    """The load a request meets that spreads its latency (the count law's ``load`` with
    the tails model's ``count_stretch`` "magnitude"): the queue's part, C1 P (F - 1), plus
    the decode profile's stretch by its size, C1 |P - 1|. Counted signed (the net
    L - C1), a profile whose iteration time dips with the batch (Vidur's InternLM-20B on
    the H100: 0.0147 s at 9 against 0.0168 s at 1) cancels the stalls, and the spread
    vanishes where the measured p99/mean rises from 1.03 to 1.12-1.27
    (benchmarks/README.md, the fourteenth session)."""
    return own_work * (stretch * (queue_factor - 1.0) + xp.abs(stretch - 1.0))


def rate_meeting_target(target, scale, c2, exponent):
    """The highest RPS at which :func:`percentile_latency_expr` on eq. (1)'s load factor
    stays at or below ``target``: (1 - (A/target)^(1/gamma))/C2; 0 when even zero load
    misses it."""
    scale, c2, exponent, target = _as_float(scale, c2, exponent, target)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        headroom = 1.0 - np.exp(np.log(scale / target) / exponent)
        value = headroom / c2
    return np.where(scale > target, 0.0, value)[()]


def load_amplification_expr(rps, c2):
    """x/(1-x) with x = RPS*C2: how a relative error in RPS is amplified in log L."""
    utilisation = rps * c2
    return utilisation / (1.0 - utilisation)


def measured_load_amplification(latency, c1, xp: ModuleType = np):
    """x/(1-x) read off a measured mean latency: eq. (1) gives L/C1 = 1/(1-x), so
    x/(1-x) = L/C1 - 1 (floored at 0 for a point measured below its zero-load latency).
    ``c1`` is the point's zero-load latency (with the decode profile, C1 plus its shift)."""
    return xp.maximum(latency / c1 - 1.0, 0.0)


def run_mean_log_sd(latency_cv, n_requests, in_flight, xp: ModuleType = np):
    """Sampling sd of log(mean latency) measured over one run of ``n_requests`` requests
    with per-request spread ``latency_cv`` (sd/mean), at ``in_flight`` = RPS x L requests
    in the system (Little's law): cv sqrt((1 + 2 N)/n).

    Requests that overlap in the batch share its slowness: a request's latency is
    correlated with those of the about N requests that arrive during its life before
    and after it, so the mean of n of them varies as that of n/(1 + 2N) independent
    ones (the sum of the correlations of a process that forgets in one lifetime). Seed
    to seed, Vidur's replayed runs scatter by this (mean square 1.05 and 1.50 of it on
    the dense and fresh sets, where cv/sqrt(n) alone gives 89 and 132;
    ``benchmarks/run_effect.py``)."""
    return latency_cv * xp.sqrt((1.0 + 2.0 * in_flight) / n_requests)


def _run_process_correlation(distance, length, xp: ModuleType = np):
    """Correlation of the point's own run error at two rates ``distance`` apart in log
    RPS: exp(-distance/length), an Ornstein-Uhlenbeck process along the sweep."""
    return xp.exp(-xp.abs(distance) / length)


#: The prior median of a learned correlation length of the point's own run error
#: (``run_own_length`` "learned"), in log RPS: 0.38-0.55 from the correlations of
#: seed-to-seed differences on replays of vidur_capped (benchmarks/README.md, the
#: thirteenth session); fitted lengths came out longer (0.8-3.3), the prior is wide.
RUN_OWN_LENGTH = 0.35

#: The gap before a sweep's lowest rate: no earlier rate to correlate with (finite, so
#: that a learned length's gradient stays 0 there, not 0 x inf).
_NO_PREVIOUS_RATE = 1e6


def run_process_layout(log_rps, group_index) -> dict:
    """The constants of :func:`run_process_factor_expr` for points at ``log_rps`` in
    groups ``group_index`` (their given order): ``distance`` (n, n), x_i - x_j where j
    is i or an earlier rate of i's sweep (0 elsewhere), ``lower`` (n, n) 1 there, and
    ``gap`` (n,), each rate's distance to the previous rate of its sweep."""
    log_rps = np.asarray(log_rps, dtype=float)
    group_index = np.asarray(group_index)
    n = len(log_rps)
    distance, lower, gap = np.zeros((n, n)), np.zeros((n, n)), np.full(n, _NO_PREVIOUS_RATE)
    for group in np.unique(group_index):
        members = np.flatnonzero(group_index == group)
        members = members[np.argsort(log_rps[members], kind="stable")]
        x = log_rps[members]
        gap[members[1:]] = np.diff(x)
        block = np.tril(np.ones((len(x), len(x))))
        lower[np.ix_(members, members)] = block
        distance[np.ix_(members, members)] = block * (x[:, None] - x[None, :])
    return {"distance": distance, "lower": lower, "gap": gap}


def run_process_factor_expr(distance, lower, gap, length, xp: ModuleType = np):
    """The lower-triangular factor F of :func:`run_process_factor` from its layout
    (:func:`run_process_layout`) and a correlation ``length`` (a number or a tensor):
    F_ij = exp(-(x_i - x_j)/length) sqrt(1 - exp(-2 gap_j/length)) within a sweep."""
    innovation = xp.sqrt(xp.maximum(1.0 - _run_process_correlation(gap, length, xp) ** 2,
                                    1e-12))
    return lower * _run_process_correlation(distance, length, xp) * innovation[None, :]


def run_process_factor(log_rps, group_index, length: float) -> np.ndarray:
    """A constant lower-triangular factor F (n x n, points in their given order) such
    that F z, z standard normal, is the points' own run error (in units of its sd) as an
    Ornstein-Uhlenbeck process along each sweep's log RPS with correlation length
    ``length``: unit variance, corr exp(-|dx|/length) within a group, 0 across groups.

    Why a process: one arrival pattern replayed at neighbouring rates gives runs whose
    burst-driven errors differ little (seed-to-seed differences 0.93 correlated between
    neighbours on capped replays, falling with the distance; benchmarks/run_effect.py),
    so a point measured next to fitted ones is partly known. The OU process is Markov
    along the rates, so F has the closed form of its recursion
    e_i = rho_i e_prev + sqrt(1 - rho_i^2) z_i (rho_i to the previous rate of the group),
    and a new rate is conditioned on its two neighbours alone
    (:func:`run_process_conditional`)."""
    layout = run_process_layout(log_rps, group_index)
    return run_process_factor_expr(layout["distance"], layout["lower"], layout["gap"],
                                   float(length))


def run_process_conditional(log_rps, known_log_rps, known_values, length,
                            exclude_equal=None):
    """Mean and variance of the unit OU process (:func:`run_process_factor`) at
    ``log_rps`` (R,), given its values ``known_values`` (S, K) at ``known_log_rps`` (K,)
    of the same sweep: the Markov bridge between the nearest known rate below and
    above (one side alone at the sweep's ends; the prior, 0 and 1, without any).
    ``length``: a number, or one per draw (S,). ``exclude_equal`` (R,) booleans: at
    those rates, leave out a known rate equal to it (a fitted point's own value: its
    leave-one-out conditional). Returns (mean (S, R), variance (S, R))."""
    log_rps = np.atleast_1d(np.asarray(log_rps, dtype=float))
    known_log_rps = np.asarray(known_log_rps, dtype=float)
    known_values = np.atleast_2d(np.asarray(known_values, dtype=float))
    draws = known_values.shape[0]
    length = np.broadcast_to(np.asarray(length, dtype=float), (draws,))
    order = np.argsort(known_log_rps, kind="stable")
    known_log_rps, known_values = known_log_rps[order], known_values[:, order]
    exclude = (np.zeros(log_rps.shape, bool) if exclude_equal is None
               else np.broadcast_to(np.asarray(exclude_equal, bool), log_rps.shape))
    mean = np.zeros((draws, log_rps.size))
    variance = np.ones((draws, log_rps.size))
    for r, x in enumerate(log_rps):
        usable = np.ones(known_log_rps.size, bool)
        if exclude[r]:
            same = np.flatnonzero(known_log_rps == x)
            usable[same[:1]] = False
        below = np.flatnonzero(usable & (known_log_rps <= x))
        above = np.flatnonzero(usable & (known_log_rps > x))
        if below.size and above.size:
            a = _run_process_correlation(x - known_log_rps[below[-1]], length)
            b = _run_process_correlation(known_log_rps[above[0]] - x, length)
            denominator = 1.0 - (a * b) ** 2
            mean[:, r] = (a * (1.0 - b**2) * known_values[:, below[-1]]
                          + b * (1.0 - a**2) * known_values[:, above[0]]) / denominator
            variance[:, r] = (1.0 - a**2) * (1.0 - b**2) / denominator
        elif below.size or above.size:
            nearest = below[-1] if below.size else above[0]
            a = _run_process_correlation(x - known_log_rps[nearest], length)
            mean[:, r] = a * known_values[:, nearest]
            variance[:, r] = 1.0 - a**2
    return mean, variance


#: Of a run's sampling error (:func:`run_mean_log_sd`), the share of its variance that
#: the rates of one sweep share when every rate replays one arrival pattern (Vidur, a
#: GuideLLM or ``vllm bench serve`` sweep with a fixed seed): the correlation of the
#: seed-to-seed difference between rates 0.3-2 apart in log RPS, 0.57-0.78 (0.67 on
#: average) on replays of vidur_dense and vidur_fresh with seeds 0 and 1 (0.85-0.97
#: between rates closer than that).
RUN_EFFECT_SHARE = 0.67


#: How a reported percentile was computed from the n sorted values, as the rank r
#: (1-based, fractional between two values) of the order statistic it reads:
#: ``linear``, numpy's default (vllm bench, this package's simulator): r = 1 + p(n - 1);
#: ``inverted_cdf``, the first value whose cumulative share reaches p (GuideLLM): ceil(pn).
QUANTILE_RULES = ("linear", "inverted_cdf")


def quantile_rank(quantile, n, rule: str = "linear"):
    """The rank r in 1..n of the order statistic a reported ``quantile`` (0..1) of ``n``
    values reads (:data:`QUANTILE_RULES`)."""
    quantile, n = _as_float(quantile, n)
    if rule == "linear":
        return (1.0 + quantile * (n - 1.0))[()]
    if rule == "inverted_cdf":
        return np.clip(np.ceil(quantile * n - 1e-9), 1.0, n)[()]
    raise ValueError(f"quantile rule must be one of {QUANTILE_RULES}, got {rule!r}")


def quantile_sampling_moments(quantile, n, rule: str = "linear", *, nodes: int = 96):
    """Sampling error of a reported percentile of ``n`` requests, in units of the
    per-request log-latency spread: (shift, variance) of W - z_p, W = Phi^-1(U).

    The sample p-quantile is the order statistic X_(r) (:func:`quantile_rank`), and
    U = F(X_(r)) ~ Beta(r, n + 1 - r) whatever the distribution F of one request's
    latency. Where F is log-normal of log-scale s around its p-quantile q_p, log X_(r) =
    log q_p + s (W - z_p): the reported value is biased by s * shift (below q_p for an
    upper percentile of few requests: a p99 of 13 requests is about the 92nd percentile)
    and scatters with variance s^2 * variance. ``quantile`` NaN marks a mean (ttft_mean):
    shift 0 and variance 1/n, the log-normal mean's sampling variance to first order.
    ``n`` NaN or 0 (not reported): (0, 0), no sampling error. Moments by Gauss-Legendre
    quadrature over the Beta's quantile function (``nodes`` nodes)."""
    quantile, n = np.broadcast_arrays(*_as_float(quantile, n))
    shape = quantile.shape
    quantile, n = quantile.ravel(), n.ravel()
    shift, variance = np.zeros(quantile.size), np.zeros(quantile.size)
    known = np.isfinite(n) & (n >= 1)
    mean = known & np.isnan(quantile)
    variance[mean] = 1.0 / n[mean]
    order = known & np.isfinite(quantile)
    if order.any():
        # Load points share request counts: each distinct (p, n) once.
        pairs, back = np.unique(np.column_stack([quantile[order], n[order]]), axis=0,
                                return_inverse=True)
        shift[order], variance[order] = (values[np.ravel(back)] for values in
                                         _order_statistic_moments(*pairs.T, rule, nodes))
    return shift.reshape(shape)[()], variance.reshape(shape)[()]


def _order_statistic_moments(p, count, rule: str, nodes: int):
    """(shift, variance) of :func:`quantile_sampling_moments` for known p and n."""
    from scipy.special import ndtri

    rank = np.asarray(quantile_rank(p, count, rule), dtype=float)
    # A fractional rank interpolates between two neighbouring order statistics (numpy's
    # linear rule): the mean is theirs interpolated (exact), the variance that of the
    # weighted sum, their correlation that of the uniform order statistics (the normal
    # scores keep it to first order): within 2% of simulated order statistics from 10
    # values on.
    low = np.minimum(np.floor(rank), count)
    high = np.minimum(low + 1.0, count)
    weight = rank - low
    first_low, second_low = _normal_order_moments(low, count, nodes)
    first_high, second_high = _normal_order_moments(high, count, nodes)
    correlation = np.sqrt(low * (count + 1.0 - high) / (high * (count + 1.0 - low)))
    shift = (1.0 - weight) * first_low + weight * first_high - ndtri(p)
    variance = ((1.0 - weight) ** 2 * second_low + weight**2 * second_high
                + 2.0 * weight * (1.0 - weight) * correlation * np.sqrt(second_low * second_high))
    return shift, variance


def _normal_order_moments(rank, n, nodes: int):
    """Mean and variance of the rank-th of n standard normal values (ranks may be
    fractional: U ~ Beta(rank, n + 1 - rank)), by quadrature over the Beta's quantile
    function."""
    from scipy.special import betaincinv, ndtri

    a, b = rank, n + 1.0 - rank
    t, w = np.polynomial.legendre.leggauss(nodes)
    t, w = 0.5 * (t + 1.0), 0.5 * w
    # Upper ranks through the complement 1 - U ~ Beta(b, a): U itself would round to 1
    # and its normal quantile to infinity.
    upper = (a > b)[:, None]
    with np.errstate(over="ignore", under="ignore"):
        normal = np.where(upper, -ndtri(betaincinv(b[:, None], a[:, None], 1.0 - t)),
                          ndtri(betaincinv(a[:, None], b[:, None], t)))
    first = normal @ w
    return first, np.maximum((normal - first[:, None]) ** 2 @ w, 0.0)


def sampled_quantile_error_expr(spread, shift, variance):
    """(bias, variance) in log latency of a reported summary whose per-request
    log-latency spread is ``spread``, from its :func:`quantile_sampling_moments`."""
    return spread * shift, spread**2 * variance
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
    # One incomplete beta serves both partial sums (the costliest term, and its gradient
    # in the shape the costliest of a fit): P(N <= cap - 1) = I_{1-x}(r, cap), and
    # E[N; N <= cap] = r x/(1-x) I_{1-x}(r+1, cap) = r x/(1-x) (P(N <= cap-1) - cap P_c/r).
    below_cap = betainc(shape, cap, free)                   # P(N <= cap - 1)
    below = below_cap + at_cap                               # P(N <= cap)
    mean_below = (c1 * below_cap - c2 * cap * at_cap) / free  # E[N; N <= cap] / RPS
    waiting = rho / (1.0 - rho)
    # tail terms / RPS: each term's rho carries a factor RPS, so divide it out (finite at
    # light load, where the tail vanishes)
    per_rate = (c1 + c2 * (cap - 1.0)) / cap              # rho / RPS
    tail_mean = at_cap * per_rate / (1.0 - rho) * (cap + wait_scale / (1.0 - rho))
    return (mean_below + tail_mean) / (below + at_cap * waiting)


def profile_chain_extra(decode_tokens, batch_sizes, iteration_s, cap: int) -> np.ndarray:
    """(cap,) the seconds the decode profile adds to a request with n in flight, n = 1..cap:
    (decode_tokens - 1)(t_d(n) - t_d(1)), the batch being the n requests
    (:func:`profile_chain_latency_expr`)."""
    batch = np.arange(1.0, float(cap) + 1.0)
    times = _profile_time(batch, batch_sizes, iteration_s)
    return (float(decode_tokens) - 1.0) * (times - times[0])


def prompts_per_prefill_expr(rps, decode_s, prefill_s, xp: ModuleType = np):
    """Mean prompts per prefill iteration of an engine that prefills, without chunking,
    every prompt waiting at an iteration boundary, and its derivative in log RPS.

    A prefill iteration carries the arrivals during the iteration before it, given at
    least one: that iteration was a decode of ``decode_s`` seconds, or, with probability
    q = 1 - exp(-mu_p), a prefill of about ``prefill_s`` (one prompt's). With
    f(mu) = mu/(1 - exp(-mu)), the mean of a Poisson count given that it is positive,
    m = (1 - q) f(mu_d) + q f(mu_p), mu_d = RPS t_d, mu_p = RPS t_p(1). Against the
    iteration chain that matched Vidur's logs (``benchmarks/prefill_batching.py``) the
    stall per arrival it gives, (a + b m)/m, is within 3.4% over 320 grid points (median
    0.09%; ``benchmarks/prefill_batching_law.py --check-closed-form``). Returns
    (m, dm/d log RPS)."""
    mu_d, mu_p = rps * decode_s, rps * prefill_s

    def positive_mean(mu):
        # f and f' by their series where 1 - exp(-mu) cancels (f -> 1, f' -> 1/2)
        small = mu < 1e-3
        safe = xp.where(small, 1.0, mu)
        kept = -xp.expm1(-safe)
        value = xp.where(small, 1.0 + mu / 2.0 + mu * mu / 12.0, safe / kept)
        slope = xp.where(small, 0.5 + mu / 6.0,
                         (kept - safe * xp.exp(-safe)) / (kept * kept))
        return value, slope

    decode_mean, decode_slope = positive_mean(mu_d)
    prefill_mean, prefill_slope = positive_mean(mu_p)
    stay = xp.exp(-mu_p)                                  # 1 - q
    m = stay * decode_mean + (1.0 - stay) * prefill_mean
    m_slope = (mu_p * stay * (prefill_mean - decode_mean)
               + stay * decode_slope * mu_d + (1.0 - stay) * prefill_slope * mu_p)
    return m, m_slope


#: The largest share of one prompt's prefill iteration taken as paid once per iteration:
#: the rest, b = C2 - a, is each prompt's own work, which no batching removes.
PREFILL_FIXED_SHARE_MAX = 0.9


def prefill_fixed_part(c2, decode_at_one, xp: ModuleType = np, power=1.0):
    """The part of a prefill iteration paid once however many prompts it carries, a in
    t_p(m) = a + b m, at most :data:`PREFILL_FIXED_SHARE_MAX` of C2 = t_p(1).

    ``power`` 1: one decode iteration at batch 1, t_d(1) (the weights read, the
    all-reduces and launches a prefill shares with a decode). Least squares that fitted a
    as well (a Normal(log t_d(1), 0.5) penalty) put it at 0.86-1.06 t_d(1) in every group
    of the five Vidur sets and replays (``benchmarks/prefill_chain_law.py``).
    ``power`` p > 1: the weights read overlaps the prompts' compute, a soft roofline
    t_p(m) = (t_d(1)^p + (b m)^p)^(1/p), whose fixed share at m = 1 is
    a / C2 = (t_d(1) / C2)^p: batching saves little where one prompt's compute already
    outlasts the read (long prompts). Vidur's iteration logs put the share at 8-56%,
    below t_d(1)/C2 for long prompts (``benchmarks/prefill_fixed_share.py``)."""
    if power == 1.0:
        return xp.minimum(decode_at_one, PREFILL_FIXED_SHARE_MAX * c2)
    ratio = xp.minimum(decode_at_one / c2, 1.0)
    return xp.minimum(c2 * ratio ** power, PREFILL_FIXED_SHARE_MAX * c2)


def batched_prefill_stall_expr(rps, c2, prefill_fixed, decode_s, xp: ModuleType = np):
    """The stall per arrival of eq. (1) when the engine batches waiting prompts into one
    prefill iteration, and its derivative in log RPS.

    C2 is one prompt's prefill iteration alone, t_p(1) = a + b with a = ``prefill_fixed``
    the part paid once per iteration (weights read, launches) and b per prompt. With m
    prompts per iteration (:func:`prompts_per_prefill_expr`, ``decode_s`` the decode
    iteration's seconds) each arrival stalls the batch (a + b m)/m = C2 - a (1 - 1/m):
    C2 at light load, falling towards b as prompts queue at iteration boundaries. This is
    why eq. (1) fitted at low load over-predicts the top of a sweep (the top's residual
    was negative in 24 of 25 vidur_dense groups; benchmarks/README.md, 2026-12-05 seventh
    session). Returns (stall, d stall / d log RPS)."""
    m, m_slope = prompts_per_prefill_expr(rps, decode_s, c2, xp=xp)
    stall = c2 - prefill_fixed * (1.0 - 1.0 / m)
    return stall, -prefill_fixed * m_slope / (m * m)


def profile_chain_latency_expr(rps, c1, c2, cap, extra, valid, xp: ModuleType = np, *,
                               wait_scale=1.0, soft_margin=None, elasticity: bool = False,
                               prefill_fixed=None, decode_s=None):
    """Mean latency of the slot queue's birth-death chain with the decode profile in it.

    :func:`slot_queue_latency_expr` is the chain in which n requests in flight each take
    T(n) = C1 + C2 (n - 1) and leave at rate n / T(n), the batch stopping at ``cap``. Here
    T(n) = C1 + C2 (n - 1) + extra(n), extra(n) = (decode - 1)(t_d(n) - t_d(1)) the decode
    profile's slowdown at a batch of n (:func:`profile_chain_extra`). Where the profile
    rises, a burst of arrivals slows every request and so makes itself worse: the count
    spreads wider than Poisson and its mean sits above the single self-consistent N of
    :func:`decode_profile_shift`'s law. With a flat profile this is the slot queue exactly.
    Weights w(n) = prod_{k<=n} RPS T(k)/k for n = 0..cap, then the geometric line for a
    slot in rho = RPS T(cap)/cap, with the slot queue's ``wait_scale``:

        N = [sum n w(n) + w(cap)(cap rho/(1-rho) + s rho/(1-rho)^2)]
            / [sum w(n) + w(cap) rho/(1-rho)],   L = N / RPS.

    Shapes: ``rps``, ``c1``, ``c2``, ``cap`` broadcast together (...); ``extra`` and
    ``valid`` (..., K) with K >= cap, ``valid`` 1 for n = 1..cap and 0 beyond (padding
    where caps differ). ``soft_margin``: rho capped smoothly below 1, as in
    :func:`slot_queue_latency_expr`. Infinite at and past the ceiling (rho >= 1) without it.

    ``elasticity``: also return d log L / d log RPS in closed form, (latency, elasticity).
    Every weight is RPS^n times terms free of the rate, so d w(n)/d log RPS = n w(n) and
    the elasticity is the sums' own ratios, d log(mean)/d log RPS - d log(total)/d log
    RPS - 1: one pass over the chain where a central difference needs three (the
    likelihood's noise takes it at every point and gradient step).

    ``prefill_fixed`` (...) and ``decode_s`` (..., K), the decode iteration's seconds at
    n = 1..K in flight: the stall per arrival C2 becomes the batched prefill's
    (:func:`batched_prefill_stall_expr`), which falls with the rate and, through the
    decode iteration, with n. The weights then carry the rate in T(k) too, and the
    elasticity adds d log T(k)/d log RPS summed over k <= n to each state's n.
    """
    rps, c1, c2, cap = (xp.asarray(v) if xp is np else v for v in (rps, c1, c2, cap))
    count = xp.arange(1, extra.shape[-1] + 1) * 1.0
    safe_rps = xp.maximum(rps, 1e-300)
    batched = prefill_fixed is not None
    if batched:
        fixed = xp.asarray(prefill_fixed) if xp is np else prefill_fixed
        stall, stall_slope = batched_prefill_stall_expr(
            rps[..., None], c2[..., None], fixed[..., None], decode_s, xp=xp)
    else:
        stall = c2[..., None]
    time_in_flight = c1[..., None] + stall * (count - 1.0) + extra
    log_ratio = (xp.log(safe_rps)[..., None] + xp.log(time_in_flight) - xp.log(count))
    log_weight = xp.cumsum(log_ratio * valid, axis=-1)
    at_cap_entry = xp.abs(count - cap[..., None]) < 0.5   # (== is not elementwise in PyTensor)
    log_at_cap = xp.sum(xp.where(at_cap_entry, log_weight, 0.0), axis=-1)
    top = xp.maximum(xp.max(xp.where(valid > 0, log_weight, -np.inf), axis=-1), 0.0)
    weight = xp.where(valid > 0, xp.exp(log_weight - top[..., None]), 0.0)
    at_cap = xp.exp(log_at_cap - top)
    at_zero = xp.exp(-top)
    time_at_cap = xp.sum(xp.where(at_cap_entry, time_in_flight, 0.0), axis=-1)
    rho = rps * time_at_cap / cap
    if batched:
        # d log w(n) / d log RPS: n from the rate itself, plus the rate in each T(k)
        time_slope = (count - 1.0) * stall_slope / time_in_flight
        state_slope = count + xp.cumsum(time_slope * valid, axis=-1)
        cap_slope = xp.sum(xp.where(at_cap_entry, state_slope, 0.0), axis=-1)
        rho_slope = rho * (1.0 + xp.sum(xp.where(at_cap_entry, time_slope, 0.0), axis=-1))
    else:
        state_slope, cap_slope, rho_slope = count, cap, rho   # d rho / d log RPS
    if soft_margin is not None:
        edge = 1.0 - soft_margin
        excess = xp.maximum(rho - edge, 0.0)
        below = rho < edge
        rho_slope = xp.where(below, rho_slope, rho_slope / (1.0 + excess / soft_margin) ** 2)
        rho = xp.where(below, rho, 1.0 - soft_margin / (1.0 + excess / soft_margin))
    waiting = rho / (1.0 - rho)
    line = wait_scale * rho / (1.0 - rho) ** 2
    spread = xp.sum(count * weight, axis=-1)
    mean = spread + at_cap * (cap * waiting + line)
    total = at_zero + xp.sum(weight, axis=-1) + at_cap * waiting
    value = mean / total / safe_rps
    # at zero load the chain holds no one: the latency is T(1) = C1
    value = xp.where(rps > 0, value, c1 * xp.ones_like(value))
    if soft_margin is None:
        value = xp.where(rho < 1.0, value, np.inf)
    if not elasticity:
        return value
    waiting_slope = rho_slope / (1.0 - rho) ** 2
    line_slope = wait_scale * rho_slope * (1.0 + rho) / (1.0 - rho) ** 3
    mean_slope = (xp.sum(count * state_slope * weight, axis=-1)
                  + at_cap * cap_slope * (cap * waiting + line)
                  + at_cap * (cap * waiting_slope + line_slope))
    total_slope = (xp.sum(state_slope * weight, axis=-1) + at_cap * cap_slope * waiting
                   + at_cap * waiting_slope)
    slope = mean_slope / mean - total_slope / total - 1.0
    return value, xp.where(rps > 0, slope, xp.zeros_like(slope))


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


def _static_size(array, axis: int = -1) -> int:
    """The length of ``axis``, known before any value (a pytensor graph's static shape)."""
    kind = getattr(array, "type", None)
    size = kind.shape[axis] if kind is not None and hasattr(kind, "shape") else None
    return int(size if size is not None else np.shape(array)[axis])


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
#: within a sweep (tests/bayes/test_moe.py); 12 bisections still did, 8 missed one input by a
#: factor 55. Each step costs one evaluation per row in every gradient of a fit.
MOE_BISECTION_STEPS = 20
MOE_NEWTON_STEPS = 4


def moe_latency_expr(rps, c1u, c1s, c2u, c2s, m, M, tokens_per_request=1.0, *,
                     token_offset=0.0, xp: ModuleType = np,
                     bisection_steps: int = MOE_BISECTION_STEPS,
                     newton_steps: int = MOE_NEWTON_STEPS, final_step: bool = True,
                     start=None):
    """Eq. (4) solved inside a graph: the least fixed point, as :func:`moe_latency`.

    Of fixed cost and differentiable, for the PyMC models. The roots of
    F(L) = C1u + phi(L)*(C1s + rps*C2s*L) - L*(1 - rps*C2u) are the fixed points; F is
    convex below its inflection and concave above (see :func:`moe_latency`), so the least
    root is found by bracketing alone: a bisection on the sign of F' for F's minimum over
    the convex part, then one on the sign of F for the root left of it (when F dips to 0
    there) or right of it, then safeguarded Newton steps inside the bracket.

    The search runs without gradients (with ``xp=pt``, in numpy inside one Op); the result
    is one Newton step from the found root L0 with L0 held fixed, L0 - F(L0)/F'(L0), whose
    gradient is the implicit one, dL/dtheta = -F_theta/F_L (``final_step``: whether to
    take it). ``start``: a root already found (L0): only the final step is taken. An earlier solve (fixed-point steps from the phi = 0 latency,
    then Newton) stalled where coverage rises steeply within a sweep: on the failing design
    of issue 35 it returned latencies up to 61% off the least root at half the draws of one
    group, and the chains settled in the modes those wrong latencies made.
    T = token_offset + rps*L*tokens_per_request. The caller keeps rps*(c2u + c2s) < 1.
    """
    tiny = 1e-300
    if xp is not np and start is None:
        inputs = (rps, c1u, c1s, c2u, c2s, m, M, tokens_per_request)
        found = _LeastRootSearch.apply(inputs, token_offset=token_offset,
                                       bisection_steps=bisection_steps,
                                       newton_steps=newton_steps)
        # the implicit-gradient step, in the graph
        return moe_latency_expr(*inputs, token_offset=token_offset, xp=xp, start=found)
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

    if start is not None:
        return start - residual(start) / xp.minimum(slope(start), -tiny)

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
    if final_step:
        # one Newton step with the root held fixed: its gradient is the implicit one
        latency = latency - residual(latency) / xp.minimum(slope(latency), -tiny)
    return latency


class _LeastRootSearch:
    """The bracketing search of :func:`moe_latency_expr` as one PyTensor Op that runs it
    in numpy, its gradient disconnected (the implicit step after it carries the
    gradient). Unrolled in the graph, the search's ~50 elementwise steps took the graph
    rewriter and numba 430 s to compile per model (measured, 2026-12-04); as an Op the
    model compiled in 30-64 s under the same load, and with the numba version of the search
    (:func:`_register_numba_search`) a gradient costs what the unrolled graph's did."""

    _op_class = None

    @classmethod
    def apply(cls, inputs, **options):
        import pytensor.tensor as pt

        if cls._op_class is None:
            cls._op_class = cls._make_op_class()
        inputs = pt.broadcast_arrays(*(pt.as_tensor_variable(x).astype("float64")
                                       for x in inputs))
        return cls._op_class(**options)(*inputs)

    @staticmethod
    def _make_op_class():
        from pytensor.gradient import disconnected_type
        from pytensor.graph.basic import Apply
        from pytensor.graph.op import Op

        class LeastRootSearch(Op):
            __props__ = ("token_offset", "bisection_steps", "newton_steps")

            def __init__(self, token_offset, bisection_steps, newton_steps):
                self.token_offset = float(token_offset)
                self.bisection_steps = int(bisection_steps)
                self.newton_steps = int(newton_steps)

            def make_node(self, *inputs):
                return Apply(self, list(inputs), [inputs[0].type()])

            def perform(self, node, inputs, outputs):
                with np.errstate(all="ignore"):
                    outputs[0][0] = np.asarray(moe_latency_expr(
                        *inputs, token_offset=self.token_offset, xp=np,
                        bisection_steps=self.bisection_steps,
                        newton_steps=self.newton_steps, final_step=False), dtype="float64")

            def connection_pattern(self, node):
                return [[False] for _ in node.inputs]

            def grad(self, inputs, output_gradients):
                return [disconnected_type() for _ in inputs]

            def infer_shape(self, fgraph, node, shapes):
                return [shapes[0]]

        _register_numba_search(LeastRootSearch)
        return LeastRootSearch


def _register_numba_search(op_class) -> None:
    """The search of :func:`moe_latency_expr` element by element in numba, for the
    models nutpie compiles (the same steps as the vectorised numpy search; without this,
    numba runs the Op's numpy ``perform`` in object mode at ~2 ms per gradient)."""
    try:
        from pytensor.link.numba.dispatch import basic as numba_basic
    except ImportError:   # no numba: the numpy perform serves
        return
    import math

    @numba_basic.register_funcify_default_op_cache_key(op_class)
    def funcify(op, node=None, **kwargs):
        offset = op.token_offset
        bisections, newtons = op.bisection_steps, op.newton_steps
        tiny = 1e-300

        @numba_basic.numba_njit
        def one(rps, c1u, c1s, c2u, c2s, m, M, tokens):
            keep = math.log1p(-m / M)
            per_latency, at_zero = -rps * tokens * keep, -offset * keep
            kappa, free = rps * c2s, 1.0 - rps * c2u

            def coverage(x):
                return -math.expm1(-(at_zero + per_latency * x))

            def residual(x):
                return c1u + coverage(x) * (c1s + kappa * x) - x * free

            def slope(x):
                phi = coverage(x)
                return per_latency * (1.0 - phi) * (c1s + kappa * x) + phi * kappa - free

            phi0 = coverage(0.0 * per_latency)
            low = (c1u + phi0 * c1s) / (1.0 - rps * (c2u + phi0 * c2s))
            high = max((c1u + c1s) / max(1.0 - rps * (c2u + c2s), tiny), low)
            if per_latency > 0 and kappa > 0:
                inflection = 2.0 / per_latency - c1s / kappa
            else:
                inflection = 0.0
            convex_end = min(max(inflection, low), high)
            lo, hi = low, convex_end
            for _ in range(bisections):
                mid = math.sqrt(lo * hi)
                if slope(mid) < 0.0:
                    lo = mid
                else:
                    hi = mid
            if slope(convex_end) < 0.0:
                minimum = convex_end
            elif slope(low) >= 0.0:
                minimum = low
            else:
                minimum = math.sqrt(lo * hi)
            if residual(minimum) <= 0.0:
                lo, hi = low, minimum
            else:
                lo, hi = minimum, high
            for _ in range(bisections):
                mid = math.sqrt(lo * hi)
                if residual(mid) > 0.0:
                    lo = mid
                else:
                    hi = mid
            x = math.sqrt(lo * hi)
            for _ in range(newtons):
                x = min(max(x - residual(x) / min(slope(x), -tiny), lo), hi)
            return x

        @numba_basic.numba_njit
        def search(rps, c1u, c1s, c2u, c2s, m, M, tokens):
            out = np.empty(rps.shape, dtype=np.float64)
            flat = out.reshape(-1)
            a, b, c, d = rps.ravel(), c1u.ravel(), c1s.ravel(), c2u.ravel()
            e, f, g, h = c2s.ravel(), m.ravel(), M.ravel(), tokens.ravel()
            for i in range(flat.size):
                flat[i] = one(a[i], b[i], c[i], d[i], e[i], f[i], g[i], h[i])
            return out

        return search


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


#: Below this log-probability of ``cap`` or more requests in eq. (1)'s system the cap
#: changes the mean latency by less than about 1e-12 relative (Cauchy-Schwarz on the
#: tail's share of the mean), so :func:`capped_latency` skips the special functions.
LOG_NEGLIGIBLE_CAP_TAIL = -70.0


def cap_tail_log_bound(rps, c1, c2, cap):
    """Log of a Chernoff bound on P(N >= cap) for eq. (1)'s uncapped number in the system
    (negative binomial, r = C1/C2, x = RPS*C2): with s = cap/(r + cap) > x,
    P(N >= cap) <= ((1-x)/(1-s))^r (x/s)^cap. 0 (no bound) where the mean is not below the
    cap."""
    rps, c1, c2, cap = _as_float(rps, c1, c2, cap)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = c1 / c2
        x = rps * c2
        s = cap / (r + cap)
        bound = r * np.log((1.0 - x) / (1.0 - s)) + cap * np.log(x / s)
    return np.where((x < s) & np.isfinite(bound), np.minimum(bound, 0.0), 0.0)[()]


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
        # Where cap-many requests in the system are practically impossible the queue is
        # eq. (1) (decisions evaluate draws x rates x configurations: most lie there).
        live &= cap_tail_log_bound(rps, c1, c2, safe_cap) > LOG_NEGLIGIBLE_CAP_TAIL
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


#: Time steps of a fluid run (:func:`fluid_run_latency`) over its arrivals, and the
#: longest stretch of them it simulates, in steady-state latencies: beyond it the run is
#: in its steady middle, which adds the steady latency per request and nothing else.
FLUID_RUN_STEPS = 320
FLUID_RUN_LIFETIMES = 32.0
#: Elements simulated at once (the run keeps its history for the departures' lookup),
#: the most steps over its arrivals, and the most steps in all (arrivals and drain).
FLUID_RUN_CHUNK = 2048
FLUID_RUN_MAX_STEPS = 4000
FLUID_RUN_ROW_LIMIT = 40000


def _piecewise_shift(concurrency, pieces):
    """S(N) of :func:`profile_segments`' pieces (0 without a profile)."""
    if pieces is None:
        return np.zeros_like(concurrency)
    knots, values, slopes = pieces
    return np.where(concurrency > knots[-1],
                    values[-1] + slopes[-1] * (concurrency - knots[-1]),
                    np.interp(concurrency, knots, values))


def fluid_run_latency(rps, n_requests, c1, c2, cap=np.inf, pieces=None, *, steady=None,
                      steps=FLUID_RUN_STEPS, lifetimes=FLUID_RUN_LIFETIMES):
    """Mean latency of one load test of ``n_requests`` requests sent at ``rps`` to an
    empty server, in the fluid limit of the law's own parts with requests of one length.

    Requests arrive evenly and are admitted as they come while the engine has prefill time
    left (a prefill takes C2). Every request in the batch advances at the same pace: it
    needs C1 + S(B) of the engine's time, S the decode profile's shift at the batch B
    (``pieces`` of :func:`profile_segments`; none: eq. (1)), and gets the share of it that
    the prefills of later admissions leave (eq. (1)'s stall, C2 per admission). A request
    leaves when its progress since admission reaches one request's work; arrivals stop
    after n/RPS. The mean latency is the area under the number in the system over n
    (Little's law over the whole run).

    With the ``cap``, a full batch serves mu = cap / (C1 + S(cap) + C2 cap) requests a
    second. Past mu the batch is admitted at mu and the rest wait in a line that grows at
    RPS - mu from the moment the batch first fills (cap/RPS) to the last arrival, and
    then drains at mu: the run's mean is the batch's run at mu plus that line's area
    over n.

    The steady state of the same equations is the law's, N = RPS (C1 + S(N))/(1 - RPS C2)
    (``steady``: that latency; eq. (1) at C1 when not given), so the run differs from it
    by
    - its fill: the first requests meet a batch still filling;
    - its drain: the last ones meet no later admissions to stall them;
    - near and past the ceiling, the queue it has time to build: a finite run has a
      finite mean at any rate, where the steady state has none past the ceiling.
    Fill and drain are each over in a few latencies, so a run longer than ``lifetimes``
    steady latencies is simulated for that long and its steady middle added. One length
    of request is the Vidur sets' design; the same fluid with exponential lengths (every
    request leaving at the pace's rate) made the fill twice as deep as Vidur's runs
    measure. Returns the run's mean latency (the broadcast inputs' shape)."""
    if steady is None:
        steady = latency(rps, c1, c2)
    rps, n, c1, c2, cap, steady = np.broadcast_arrays(
        *_as_float(rps, n_requests, c1, c2, cap, steady))
    capped = np.isfinite(cap)
    safe_cap = np.where(capped, cap, 1.0)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        full = np.where(capped, safe_cap / (c1 + _piecewise_shift(safe_cap, pieces)
                                            + c2 * safe_cap), np.inf)
        past = rps > full
        admitted_rate = np.where(past, full, rps)
        steady = np.where(past | (rps * steady > np.where(capped, safe_cap, np.inf)),
                          np.inf, steady)
        # the line waiting for a slot past mu: it grows from the batch's first filling to
        # the last arrival, then drains at mu
        duration = n / rps
        growing = np.maximum(duration - safe_cap / rps, 0.0)
        line = np.where(past, (rps - full) * growing, 0.0)
        line_area = 0.5 * line * growing + 0.5 * line**2 / np.where(past, full, 1.0)
    shape = rps.shape
    flat = [np.ravel(v).astype(float) for v in (admitted_rate, n, c1, c2, steady)]
    batch = np.empty(flat[0].size)
    for start in range(0, batch.size, FLUID_RUN_CHUNK):
        part = slice(start, start + FLUID_RUN_CHUNK)
        batch[part] = _fluid_run_flat(*(v[part] for v in flat), pieces, steps, lifetimes)
    with np.errstate(invalid="ignore"):
        return (batch.reshape(shape) + np.where(past, line_area / n, 0.0))[()]


def _fluid_run_flat(rps, n, c1, c2, steady, pieces, steps, lifetimes):
    """The batch's run of :func:`fluid_run_latency` (no cap) on flat arrays."""
    live = (rps > 0) & (n >= 1) & np.isfinite(c1) & np.isfinite(c2) & (c1 > 0)
    rps = np.where(live, rps, 1.0)
    n = np.where(live, n, 1.0)
    c1 = np.where(live, c1, 1.0)
    with np.errstate(over="ignore", invalid="ignore"):
        window = np.where(np.isfinite(steady) & (steady > 0), lifetimes * steady, np.inf)
    duration = np.minimum(n / rps, window)              # the stretch of arrivals simulated
    sent = rps * duration
    # at least ``steps`` steps over the arrivals, each under a twelfth of C1 (up to a limit)
    dt = np.maximum(np.minimum(duration / steps, c1 / 12.0), duration / FLUID_RUN_MAX_STEPS)
    rows = 3 * int(np.ceil(np.max(duration / dt))) + 2
    progress = np.zeros((rows, rps.size))
    admitted = np.zeros((rows, rps.size))
    columns = np.arange(rps.size)
    pointer = np.zeros(rps.size, dtype=int)
    area = np.zeros(rps.size)
    in_system = np.zeros(rps.size)
    departed_before = np.zeros(rps.size)
    finished = ~live
    step = 0
    while step < FLUID_RUN_ROW_LIMIT:
        if step + 2 >= rows:
            progress = np.concatenate([progress, np.zeros_like(progress)])
            admitted = np.concatenate([admitted, np.zeros_like(admitted)])
            rows = progress.shape[0]
        # departed: the admissions whose progress since admission is one request's work
        # (first come first served: the inverse of the progress history)
        target = progress[step] - 1.0
        while True:
            move = (pointer + 1 < step) & (progress[pointer + 1, columns] <= target)
            if not move.any():
                break
            pointer += move
        upper = np.minimum(pointer + 1, step)
        low, high = progress[pointer, columns], progress[upper, columns]
        gap = high - low
        share = np.clip((target - low) / np.where(gap > 0, gap, 1.0), 0.0, 1.0)
        below, above = admitted[pointer, columns], admitted[upper, columns]
        departed = np.where(target >= 0.0, below + share * (above - below), 0.0)
        arrived = np.minimum(step * dt * rps, sent)
        count = arrived - departed
        if step > 0:
            area += np.where(finished, 0.0, 0.5 * (in_system + count) * dt)
        in_system = count
        finished |= (arrived >= sent) & (count <= 1e-9 * sent)
        if finished.all():
            break
        # admissions over the step: the arrivals, as far as the prefill time goes; their
        # prefills stall the batch, whose size at the step's middle sets the iteration
        admit = np.minimum(np.minimum((step + 1) * dt * rps, sent), admitted[step] + dt / c2)
        admit = np.maximum(admit, admitted[step])
        admitted[step + 1] = admit
        stall = np.minimum((admit - admitted[step]) / dt * c2, 1.0)
        # (the step's departures taken at the last step's pace)
        middle = np.maximum(0.5 * (admitted[step] + admit) - departed
                            - 0.5 * (departed - departed_before), 0.0)
        pace = (1.0 - stall) / (c1 + _piecewise_shift(middle, pieces))
        progress[step + 1] = progress[step] + pace * dt
        departed_before = departed
        step += 1
    # a run cut at the row limit: its remaining requests leave at the last pace
    area += np.where(finished, 0.0, in_system * (c1 + _piecewise_shift(in_system, pieces)))
    simulated = area / sent
    with np.errstate(invalid="ignore"):
        # the steady middle of a longer run: each of its requests takes the steady latency
        mean = np.where(n > sent * (1.0 + 1e-9),
                        steady - (sent * steady - area) / n, simulated)
    return np.where(live, mean, c1)


def slot_wait_in_run(steady_wait, rps, n_requests, wait_scale=1.0):
    """How much of the slot queue's steady-state stochastic wait ``steady_wait`` (the
    capped law's latency above its fluid one) a run of ``n_requests`` has time to build.

    Beyond the cap the waiting line is a random walk with the arrivals' and departures'
    variance (2 RPS, times ``wait_scale`` for less variable requests). Its time-average
    over a run from empty is the steady Q_ss = RPS W when the run is long against the
    walk's relaxation, and at the critical rate (2/3) sqrt(2 sigma^2 T / pi) =
    (4/3) sqrt(s n / pi) requests (reflected Brownian motion); the harmonic combination
    of the two limits is used between. ``inf`` ``steady_wait`` (the fluid run is past
    its ceiling) gives the critical value, so the run's mean is continuous in the rate."""
    steady_wait, rps, n, scale = _as_float(steady_wait, rps, n_requests, wait_scale)
    critical = (4.0 / 3.0) * np.sqrt(scale * np.maximum(n, 0.0) / np.pi)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        steady_queue = rps * steady_wait
        queue = np.where(np.isinf(steady_queue), critical,
                         steady_queue * critical / (steady_queue + critical))
        wait = np.where(rps > 0, queue / rps, 0.0)
    return np.where(steady_wait > 0, wait, 0.0)[()]


def _profile_time(batch, batch_sizes, iteration_s):
    """t_d at ``batch``: linear between the profile's batch sizes and, beyond the largest,
    on with the slope of the profile's upper half (attention and the linear layers grow
    about linearly there)."""
    sizes = np.asarray(batch_sizes, dtype=float)
    times = np.asarray(iteration_s, dtype=float)
    upper = sizes >= 0.5 * (sizes[0] + sizes[-1])
    slope = (np.polyfit(sizes[upper], times[upper], 1)[0]
             if upper.sum() >= 2 and sizes[-1] > sizes[0] else 0.0)
    batch = np.asarray(batch, dtype=float)
    return np.where(batch > sizes[-1], times[-1] + slope * (batch - sizes[-1]),
                    np.interp(batch, sizes, times))


def decode_profile_shift(concurrency, decode_tokens, batch_sizes, iteration_s,
                         cap=np.inf):
    """The latency a request gains over eq. (1)'s linear term from the engine's
    decode-iteration profile t_d(B) (seconds per decode iteration at decode batch B):
    (decode_tokens - 1) (E[t_d(B)] - t_d(1)), with B = min(1 + K, cap), K ~ Poisson(N).

    With it the mean latency is L = C1 + C2 N + shift(N), N = RPS x L (Little's law):
    C2 N is the stall of a request's decode by the prefill iterations of later arrivals
    (linear in N), and the profile carries what one decode iteration costs at each batch
    size, which real engines make non-monotone (an all-reduce's fast band, a GEMM tile
    step). Eq. (1) is the flat profile. A request's batch holds itself and the others in
    flight, whose number fluctuates around N (Poisson for the many-slot queue of eq. (1)),
    and its decode time is t_d averaged over those batches, not t_d at the mean batch: on
    the Vidur set this was chosen on, averaging took the largest residual of a line
    through L - shift from 2.8% to 1.3% (median over 25 groups; eq. (1) alone 5.4%).
    ``batch_sizes`` ascending (K,), ``iteration_s`` (K,); t_d is linear between them and
    beyond the largest continues with the profile's upper slope."""
    from scipy.stats import poisson

    n = np.asarray(concurrency, dtype=float)
    flat = np.where(np.isfinite(n) & (n > 0), n, 0.0).ravel()
    top = float(flat.max()) if flat.size else 0.0
    counts = np.arange(0.0, np.ceil(top + 12.0 * np.sqrt(top) + 30.0))
    cap = float(cap) if np.isfinite(cap) else np.inf
    times = _profile_time(np.minimum(1.0 + counts, cap), batch_sizes, iteration_s)
    weights = poisson.pmf(counts[None, :], flat[:, None])
    mean_time = weights @ times / weights.sum(axis=1)
    at_one = float(_profile_time(1.0, batch_sizes, iteration_s))
    value = (np.asarray(decode_tokens, dtype=float) - 1.0) * (
        mean_time.reshape(n.shape) - at_one)
    return np.where(np.isnan(n), np.nan, value)[()]


#: The knot of a padding piece (groups with fewer pieces than the widest): no root of a
#: real system lies beyond it.
PROFILE_PAD_KNOT = 1e15


def profile_segments(decode_tokens, batch_sizes, iteration_s, cap=np.inf):
    """:func:`decode_profile_shift` as a function of N in linear pieces, one per request:
    knots n_j = 0, 1, 2, ... up to where the batch is full (the cap, or the profile's
    largest batch) plus four Poisson sd, the shift S_j there and the slope s_j of the piece
    that starts there (J,). The last piece runs to infinity: flat with a cap (the batch is
    full), the profile's upper slope without one."""
    sizes = np.asarray(batch_sizes, dtype=float)
    cap = float(cap) if np.isfinite(cap) else np.inf
    anchor = (cap if np.isfinite(cap) else sizes[-1]) - 1.0
    knots = np.arange(0.0, np.ceil(anchor + 4.0 * np.sqrt(max(anchor, 1.0))) + 1.0)
    values = np.asarray(decode_profile_shift(knots, decode_tokens, sizes, iteration_s, cap),
                        dtype=float)
    slopes = np.empty_like(knots)
    slopes[:-1] = np.diff(values)
    if np.isfinite(cap):
        slopes[-1] = 0.0
    else:
        far = knots[-1] + np.array([0.0, 1.0])
        slopes[-1] = float((decode_tokens - 1.0) * np.diff(
            _profile_time(far + 1.0, sizes, iteration_s))[0])
    return knots, values, slopes


def profile_concurrency_expr(rps, c1, c2, knots, values, slopes, xp: ModuleType = np):
    """The smallest self-consistent number in the system N* of eq. (1) with the decode
    profile, N = RPS (C1 + S(N)) / (1 - RPS C2), S piecewise linear
    (:func:`profile_segments`; the last axis of ``knots``, ``values``, ``slopes`` runs over
    the pieces; pad with :data:`PROFILE_PAD_KNOT` and zeros). On piece j the equation is linear, so its
    root is a (C1 + S_j - s_j n_j) / (1 - a s_j), a = RPS/(1 - RPS C2); the system filling
    from empty stops at the first piece whose root lies in it (the first up-crossing of
    N - RPS L(N) is on a piece where that gap grows, 1 - a s_j > 0). Returns (N*, the shift
    S(N*), whether a root exists); N* is 0 where none does. ``rps``, ``c1``, ``c2`` carry a
    trailing axis of length 1 against the pieces."""
    free = 1.0 - rps * c2
    a = rps / xp.where(free > 0, free, 1.0)
    grow = 1.0 - a * slopes
    root = a * (c1 + values - slopes * knots) / xp.where(grow > 0, grow, 1.0)
    upper = xp.concatenate([knots[..., 1:], xp.full_like(knots[..., :1], np.inf)], axis=-1)
    valid = (free > 0) & (grow > 0) & (root >= knots) & (root < upper)
    count = xp.cumsum(1.0 * valid, axis=-1)
    first = valid & (count < 1.5)
    found = xp.any(first, axis=-1)
    n = xp.sum(xp.where(first, root, 0.0), axis=-1)
    shift = xp.sum(xp.where(first, values + slopes * (root - knots), 0.0), axis=-1)
    return n, shift, found


def percentile_latency(rps, scale, c2, exponent):
    """:func:`percentile_latency_expr` on eq. (1)'s load factor, ``inf`` at or past
    saturation (rps*C2 >= 1)."""
    rps, scale, c2, exponent = _as_float(rps, scale, c2, exponent)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        value = percentile_latency_expr(load_factor_expr(rps, c2), scale, exponent)
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
