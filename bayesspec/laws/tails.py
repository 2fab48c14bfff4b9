"""Latency summaries under load, and how one load test's reported summary scatters
(docs/laws.md, "runs and summaries").

A percentile of latency, TTFT or ITL as a power of the mean law's load factor,
q = A F^gamma, or by the count law: a log-normal whose variance is the spread of the load
each request meets (the birth-death chain's, or a batching engine's Poisson count and
slot wait). The highest rate that meets a target. A reported percentile of n requests is
an order statistic under the rule it was computed by: its bias and scatter in units of
the per-request spread.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from bayesspec.laws._numeric import _as_float
from bayesspec.laws.mean import load_factor_expr

__all__ = ["percentile_latency_expr", "count_spread_quantile_expr",
           "log_normal_quantile_expr", "batch_count_quantile_expr", "batch_count_loads",
           "rate_meeting_target", "percentile_latency",
           "QUANTILE_RULES", "quantile_rank", "quantile_sampling_moments",
           "sampled_quantile_error_expr"]


def percentile_latency_expr(load_factor, scale, exponent, xp: ModuleType = np):
    """A latency percentile (or a TTFT/ITL summary) under load: q = A F^gamma, F = L/C1
    the mean law's load factor (:func:`~bayesspec.laws.load_factor_expr` for eq. (1),
    where q = A (1 - RPS*C2)^-gamma).

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
                               xp: ModuleType = np):
    """A percentile of end-to-end latency from the mean law and the spread of the load
    each request meets (the ``tails`` model's ``tail_law`` "count").

    A request's latency is its own work (``own_work``, C1) plus what the load adds: the
    stalls of later arrivals' prefills, the wait for a batch slot, and the decode
    profile's stretch of the batches it meets. The mean of that part is
    ``latency - own_work``, but how much of it one request meets varies with how many
    arrive during its life and how crowded the batch is then. In eq. (1)'s birth-death
    chain the number in the system is negative binomial with variance N F, F = L/C1 its
    load factor (Poisson at light load, over-dispersed as it fills;
    :func:`~bayesspec.laws.slot_queue_latency_expr`), so the load's part has variance about
    d^2 C2^2 N F = d^2 C2 (L - C1) L/C1, d a dispersion (1: the chain's own). With a
    zero-load spread s0 (the relative sd of a request's own work: the spread of its
    lengths) the variance is

        v = (s0 C1)^2 + d^2 C2 (L - C1) L/C1,

    and the p-quantile, z = Phi^-1(p), is that of a log-normal of mean L and variance v:
    q = L exp(z s - s^2/2), s^2 = log(1 + v/L^2). Its excess over the mean grows like
    sqrt(N) while the stalls dominate: q/L rises with load and then flattens (towards
    exp(z s - s^2/2) with s^2 = log(1 + d^2 C2/C1) at the pole), where the power law
    q = A F^gamma (:func:`percentile_latency_expr`) carries the early rise on (measured
    on the Vidur sets' prefill-heavy sweeps: docs/findings/tail-laws.md, "Held-out p99 on
    Vidur's sets", measured 2026-12-06). The part that spreads is the net
    ``latency - own_work``: counting the decode profile's stretch by its size instead was
    tried on the p99 and not adopted (docs/findings/tail-laws.md)."""
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
    does or more (docs/findings/tail-laws.md, "How over-dispersed is the load a request
    meets", measured 2026-12-06)."""
    variance = (spread * own_work) ** 2 + dispersion ** 2 * c2 * stall_load + slot_wait ** 2
    return log_normal_quantile_expr(latency, variance, z, xp=xp)


def batch_count_loads(own_work, stretch, queue_factor, eq1_factor, xp: ModuleType = np):
    """(S, W) of :func:`batch_count_quantile_expr` from the mean law's parts: eq. (1)'s
    load factor ``eq1_factor`` carries the stalls, the rest of the (capped) queue
    factor is the wait for a slot. S with the decode profile's stretch P signed: the net
    C1 (P F1 - 1), floored at 0."""
    stall_factor = xp.minimum(queue_factor, eq1_factor)
    slot_wait = own_work * stretch * (queue_factor - stall_factor)
    stall_load = xp.maximum(own_work * (stretch * stall_factor - 1.0), 0.0)
    return stall_load, slot_wait


def rate_meeting_target(target, scale, c2, exponent):
    """The highest RPS at which :func:`percentile_latency_expr` on eq. (1)'s load factor
    stays at or below ``target``: (1 - (A/target)^(1/gamma))/C2; 0 when even zero load
    misses it."""
    scale, c2, exponent, target = _as_float(scale, c2, exponent, target)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        headroom = 1.0 - np.exp(np.log(scale / target) / exponent)
        value = headroom / c2
    return np.where(scale > target, 0.0, value)[()]


def percentile_latency(rps, scale, c2, exponent):
    """:func:`percentile_latency_expr` on eq. (1)'s load factor, ``inf`` at or past
    saturation (rps*C2 >= 1)."""
    rps, scale, c2, exponent = _as_float(rps, scale, c2, exponent)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        value = percentile_latency_expr(load_factor_expr(rps, c2), scale, exponent)
    return np.where(rps * c2 >= 1.0, np.inf, value)[()]


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
