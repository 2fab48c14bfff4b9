"""The engine's concurrency cap: eq. (1) as a queue with ``cap`` batch slots (docs/laws.md,
"the concurrency cap").

The slot queue's mean latency in closed form (one regularised incomplete beta), its full
batch's throughput and the server's ceiling, the capped law's elasticity, the FIFO wait's
scale for requests of less variable length, and the cap itself from an engine's limits
(``max_num_seqs``, the KV cache, the step's token budget).
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from bayesspec.laws._numeric import _as_float, _gathered, _special
from bayesspec.laws.mean import latency_expr, load_elasticity_expr

__all__ = ["cap_throughput_expr", "slot_queue_latency_expr", "queue_wait_scale",
           "LOG_NEGLIGIBLE_CAP_TAIL", "cap_tail_log_bound", "capped_latency",
           "cap_throughput", "ceiling_rps", "capped_load_elasticity",
           "kv_tokens_per_request", "concurrency_cap", "CAP_SOURCES", "binding_cap_source"]


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


def queue_wait_scale(service_cv):
    """The slot queue's ``wait_scale`` for requests whose time in the batch varies with
    coefficient of variation ``service_cv``: (1 + cv^2)/2, the heavy-traffic
    (Allen-Cunneen) factor by which a FIFO wait differs from the Markov queue's; 1/2 for
    requests of one length, 1 for exponential ones. NaN (unknown spread) gives 1."""
    cv = np.asarray(service_cv, dtype=float)
    return np.where(np.isfinite(cv), 0.5 * (1.0 + cv**2), 1.0)[()]


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
    shape = np.broadcast_shapes(rps.shape, c1.shape, c2.shape, cap.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = c1 / c2
        x = rps * c2
        s = cap / (r + cap)
        # r log((1-x)/(1-s)) + cap log(x/s), its passes over draws x rates in place
        # (at most three such arrays alive: memory the system need not map anew)
        bound = np.subtract(1.0, x, out=np.empty(shape))
        second = np.divide(x, s, out=np.empty(shape))
        bounded = x < s
        del x
        np.divide(bound, 1.0 - s, out=bound)
        np.log(bound, out=bound)
        np.multiply(r, bound, out=bound)
        np.log(second, out=second)
        np.multiply(cap, second, out=second)
        np.add(bound, second, out=bound)
        del second
        bounded &= np.isfinite(bound)
        np.minimum(bound, 0.0, out=bound)
        np.copyto(bound, 0.0, where=~bounded)
    return bound[()]


def capped_latency(rps, c1, c2, cap, *, wait_scale=1.0):
    """Mean latency with the engine's concurrency cap (:func:`slot_queue_latency_expr`):
    eq. (1) where ``cap`` is ``inf`` or NaN (unknown), ``inf`` at or past the ceiling
    (:func:`ceiling_rps`), C1 at zero load."""
    rps, c1, c2, cap, wait_scale = _as_float(rps, c1, c2, cap, wait_scale)
    shape = np.broadcast_shapes(*(v.shape for v in (rps, c1, c2, cap, wait_scale)))

    def full(values):
        return np.broadcast_to(values, shape)

    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        # The ceiling (:func:`ceiling_rps`) depends on the costs and the cap alone: taken
        # once per draw, not per draw and rate (decisions evaluate draws x rates x
        # configurations, and every pass over those arrays counts in an answer's time).
        capped = np.isfinite(cap)
        past = full(rps >= ceiling_rps(c1, c2, np.where(capped, cap, np.inf)))
        value = latency_expr(rps, c1, c2)
        if not isinstance(value, np.ndarray) or value.shape != shape:
            value = np.array(np.broadcast_to(value, shape), dtype=float)
        live = np.array(capped & ~past & (rps > 0), dtype=bool)
        if live.any():
            # Where cap-many requests in the system are practically impossible the queue
            # is eq. (1) (most points of a decision lie there). The bound's parts that
            # depend on the draw alone are taken once per draw (broadcast, not gathered).
            live &= cap_tail_log_bound(rps, c1, c2, np.where(capped, cap, 1.0)) \
                > LOG_NEGLIGIBLE_CAP_TAIL
        if live.any():
            at = np.nonzero(live) if live.ndim else live
            value[at] = slot_queue_latency_expr(*(_gathered(v, at) for v in (rps, c1, c2, cap)),
                                                wait_scale=_gathered(wait_scale, at))
    np.copyto(value, full(c1), where=full(rps) <= 0)
    np.copyto(value, np.inf, where=past)
    return value[()]


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


def kv_tokens_per_request(prefill, decode, k=0):
    """KV cache a running request holds on average, in tokens: its prompt and, over its
    decode, half its output (a request's cache grows linearly while it decodes); with
    speculation, the k lookahead slots the engine reserves for every running request's
    next verification (vLLM allocates them before the step)."""
    prefill, decode, k = _as_float(prefill, decode, k)
    return (prefill + 0.5 * decode + np.maximum(k, 0.0))[()]


def concurrency_cap(max_num_seqs=np.nan, kv_cache_tokens=np.nan,
                    max_num_batched_tokens=np.nan, prefill=np.nan, decode=np.nan, k=0):
    """The engine's effective cap on requests in the batch: the smallest of
    ``max_num_seqs``; the KV cache over a running request's average footprint
    (``kv_cache_tokens`` / (prefill + decode/2 + k), :func:`kv_tokens_per_request`); and, with speculation, the step's token
    budget over the k + 1 tokens each verification carries
    (``max_num_batched_tokens`` / (k + 1); for plain decoding the budget holds one token
    per request and never binds before ``max_num_seqs`` does in practice, so it counts
    only for k > 0). ``inf`` where nothing is known (NaN inputs are unknown)."""
    seqs, kv, budget, prefill, decode, k = np.broadcast_arrays(
        *_as_float(max_num_seqs, kv_cache_tokens, max_num_batched_tokens, prefill, decode,
                   k))
    with np.errstate(divide="ignore", invalid="ignore"):
        by_kv = kv / kv_tokens_per_request(prefill, decode, k)
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
