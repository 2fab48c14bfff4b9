"""The engine's decode-iteration profile t_d(B) and its batched prefill in the mean law.

The latency the profile adds to eq. (1) at N requests in flight (t_d averaged over the
batches a request meets), the same in linear pieces and the smallest self-consistent N on
them; the profile inside the slot queue's birth-death chain (the mean and its elasticity
in one pass); and prompts batched into one prefill iteration, whose fixed part is paid
once per iteration, so that the stall per arrival falls as the rate rises.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

__all__ = ["decode_profile_shift", "PROFILE_PAD_KNOT", "profile_segments",
           "profile_concurrency_expr", "profile_chain_extra", "prompts_per_prefill_expr",
           "PREFILL_FIXED_SHARE_MAX", "prefill_fixed_part", "batched_prefill_stall_expr",
           "profile_chain_latency_expr"]


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
    iteration chain that matched Vidur's logs the stall per arrival it gives, (a + b m)/m,
    is within 3.4% over 320 grid points (median 0.09%; docs/findings/decode-profile-law.md,
    "Batched prefill", measured 2026-12-05). Returns (m, dm/d log RPS)."""
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
    of the five Vidur sets and replays (docs/findings/decode-profile-law.md, "Batched
    prefill", measured 2026-12-05).
    ``power`` p > 1: the weights read overlaps the prompts' compute, a soft roofline
    t_p(m) = (t_d(1)^p + (b m)^p)^(1/p), whose fixed share at m = 1 is
    a / C2 = (t_d(1) / C2)^p: batching saves little where one prompt's compute already
    outlasts the read (long prompts). Vidur's iteration logs put the share at 8-56%,
    below t_d(1)/C2 for long prompts (docs/findings/decode-profile-law.md, "Batched
    prefill", measured 2026-12-06)."""
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
    was negative in 24 of 25 vidur_dense groups replayed with a seed per rate;
    docs/findings/decode-profile-law.md, "Batched prefill", measured 2026-12-05). Returns
    (stall, d stall / d log RPS)."""
    m, m_slope = prompts_per_prefill_expr(rps, decode_s, c2, xp=xp)
    stall = c2 - prefill_fixed * (1.0 - 1.0 / m)
    return stall, -prefill_fixed * m_slope / (m * m)


def profile_chain_latency_expr(rps, c1, c2, cap, extra, valid, xp: ModuleType = np, *,
                               wait_scale=1.0, soft_margin=None, elasticity: bool = False,
                               prefill_fixed=None, decode_s=None):
    """Mean latency of the slot queue's birth-death chain with the decode profile in it.

    :func:`~bayesspec.laws.slot_queue_latency_expr` is the chain in which n requests in
    flight each take T(n) = C1 + C2 (n - 1) and leave at rate n / T(n), the batch stopping
    at ``cap``. Here T(n) = C1 + C2 (n - 1) + extra(n), extra(n) = (decode - 1)(t_d(n) -
    t_d(1)) the decode profile's slowdown at a batch of n (:func:`profile_chain_extra`).
    Where the profile rises, a burst of arrivals slows every request and so makes itself
    worse: the count spreads wider than Poisson and its mean sits above the single
    self-consistent N of :func:`decode_profile_shift`'s law. With a flat profile this is the
    slot queue exactly.
    Weights w(n) = prod_{k<=n} RPS T(k)/k for n = 0..cap, then the geometric line for a
    slot in rho = RPS T(cap)/cap, with the slot queue's ``wait_scale``:

        N = [sum n w(n) + w(cap)(cap rho/(1-rho) + s rho/(1-rho)^2)]
            / [sum w(n) + w(cap) rho/(1-rho)],   L = N / RPS.

    Shapes: ``rps``, ``c1``, ``c2``, ``cap`` broadcast together (...); ``extra`` and
    ``valid`` (..., K) with K >= cap, ``valid`` 1 for n = 1..cap and 0 beyond (padding
    where caps differ). ``soft_margin``: rho capped smoothly below 1, as in
    :func:`~bayesspec.laws.slot_queue_latency_expr`. Infinite at and past the ceiling
    (rho >= 1) without it.

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
