"""The compute roof of one engine step (docs/models.md, "The compute roof";
docs/findings/compute-roof.md), as algebra: a pass's memory floor and arithmetic from
the GPU's and the models' cards, the step with the prompts it carries, the excess over
eq. (1)'s line, its least root, ceilings and the engine's cap. numpy or PyTensor arrays
alike; the searches run as Ops (:mod:`bayesspec.laws.roof_kernels`) inside a graph.
"""

from __future__ import annotations

import numpy as np

from bayesspec.laws.roof_kernels import SearchOp

__all__ = ["ROOF_JOIN_POWER", "ROOF_CARD_FIELDS", "roof_card_values",
           "roof_pass_expr", "roof_step_expr", "roof_excess_expr", "ROOF_NEWTON_STEPS",
           "roof_concurrency_expr", "ROOF_FAR_IN_FLIGHT", "roof_ceiling",
           "roof_concurrency_graph", "roof_full_batch_time_expr",
           "roof_slot_queue_latency_expr", "roof_capped_latency", "roof_capped_ceiling",
           "roof_cap_binds", "ROOF_COMPUTE_FIELDS", "roof_prompt_step", "roof_prompt_count",
           "roof_alone_expr", "PROMPT_POISSON_TERMS"]

#: The power of the smooth maximum that joins a pass's memory floor and its compute slope,
#: (memory^p + compute^p)^(1/p): 4 stays within 19% of the hard maximum at the knee and
#: within 1% a factor 2 either side of it (kernels overlap loads and arithmetic only in
#: part near the knee).
ROOF_JOIN_POWER = 4.0

#: Where the bend stops growing: a pass's arithmetic is its work x (1 + bend x r / (1 +
#: r / reach)), r the work over the memory floor, so the bend's share grows like bend x r
#: well below the reach and levels at bend x reach past it. What makes a step's marginal
#: cost rise (kernels past the engine's CUDA-graph sizes, a token budget split over more
#: steps) adds a bounded cost per token, not one that grows without end; the public load
#: test that shows the rise reaches r of about 4 (k = 6, 128 in flight, a 32B verifier on
#: an H100). Unbounded (the bend x r of before), a bend the data never saw multiplied a
#: small verifier's full batch (r past 10) by 1.5-5 (docs/findings/compute-roof.md).
ROOF_BEND_REACH = 4.0

#: The card values of one configuration's roof, in this order (seconds): the verifier's
#: weight stream per pass, its KV read per request in the batch, its arithmetic per token
#: processed, its arithmetic over one prompt; the same for the drafter (zeros for plain
#: decoding).
ROOF_CARD_FIELDS = ("verifier_floor_s", "verifier_kv_s", "verifier_token_s",
                    "verifier_prompt_s", "drafter_floor_s", "drafter_kv_s",
                    "drafter_token_s", "drafter_prompt_s")
#: The fields that are arithmetic (scaled by the learned compute factor; the others are
#: memory traffic, scaled by the memory factor).
ROOF_COMPUTE_FIELDS = ("verifier_token_s", "verifier_prompt_s", "drafter_token_s",
                       "drafter_prompt_s")


def roof_card_values(verifier_card, gpu_card, drafter_card=None, *, prefill_tokens: float,
                     decode_tokens: float) -> dict[str, float]:
    """The bounds a configuration's step cannot beat, from its cards: weight bytes (active
    ones for a sparse verifier: the experts a full batch touches are the weights read) over
    HBM bandwidth, a request's KV bytes at its mean context (prompt + half its output) over
    bandwidth, 2 x active parameters per token over peak bf16 FLOP/s, and that arithmetic
    over one prompt (prefill rides in the decode steps: :func:`roof_prompt_step`). Real
    stacks run slower than these bounds; the factors that say how much are learned
    (:func:`roof_pass_expr`)."""
    bandwidth = gpu_card.hbm_bandwidth_bytes_s
    flops = gpu_card.peak_bf16_flops
    context = float(prefill_tokens) + 0.5 * float(decode_tokens)

    def card(c):
        if c is None:
            return 0.0, 0.0, 0.0, 0.0
        token = 2e9 * c.params_active_b / flops
        return (c.weight_bytes / bandwidth, c.kv_bytes_per_token * context / bandwidth,
                token, token * float(prefill_tokens))

    values = card(verifier_card) + card(drafter_card)
    return dict(zip(ROOF_CARD_FIELDS, (float(v) for v in values)))


def _pass_parts(batch, floor, kv, token, tokens_per_request, bend, xp, power):
    """(joined, its slope in the batch, the arithmetic, its slope) of one decode pass."""
    per_request = tokens_per_request * token
    memory = floor + batch * kv
    work = batch * per_request
    ratio = work / floor
    held = 1.0 / (1.0 + ratio / ROOF_BEND_REACH)
    compute = work * (1.0 + bend * ratio * held)
    compute_slope = per_request * (1.0 + bend * ratio * held * (1.0 + held))
    # scaled by the larger part, so that no power overflows however large the batch
    top = xp.maximum(memory, compute)
    a, b = memory / top, compute / top
    if power == 4.0:   # products and square roots: numpy's float powers cost 5x these
        a2, b2 = a * a, b * b
        norm = xp.sqrt(xp.sqrt(a2 * a2 + b2 * b2))
        joined = top * norm
        a, b = a / norm, b / norm
        return joined, a * a * a * kv + b * b * b * compute_slope, compute, compute_slope
    joined = top * (a ** power + b ** power) ** (1.0 / power)
    slope = ((memory / joined) ** (power - 1.0) * kv
             + (compute / joined) ** (power - 1.0) * compute_slope)
    return joined, slope, compute, compute_slope


def roof_pass_expr(batch, floor, kv, token, tokens_per_request, bend, xp=np,
                   power: float = ROOF_JOIN_POWER):
    """Seconds of one forward pass over ``batch`` requests of ``tokens_per_request``
    tokens each, and its derivative in the batch: the smooth maximum of the memory floor
    (``floor`` + ``batch`` x ``kv``: weights streamed once, each request's KV read) and
    the arithmetic, ``batch`` x ``tokens_per_request`` x ``token`` x (1 + ``bend`` x r /
    (1 + r / :data:`ROOF_BEND_REACH`)), r its ratio to the floor. ``bend`` >= 0 lets the
    marginal cost keep rising past the knee, by a bounded share (kernels past the
    engine's CUDA-graph sizes, tile steps, a token budget split over more steps): 0 is
    the plain roofline."""
    joined, slope, _, _ = _pass_parts(batch, floor, kv, token, tokens_per_request, bend, xp,
                                      power)
    return joined, slope


def roof_step_expr(batch, roof: dict, k, bend, xp=np):
    """One speculative cycle's engine step at ``batch`` requests and its derivative: the
    verifier's pass over k + 1 tokens per request, the drafter's first pass over the same
    tokens and its k - 1 further passes over one token each (plain decoding: k = 0, one
    pass of one token); decode tokens only (:func:`roof_prompt_step` adds the prompts).
    ``roof``: :data:`ROOF_CARD_FIELDS` as arrays, already in the seconds of the stack
    (the card's bounds times the learned factors)."""
    verify, verify_slope = roof_pass_expr(batch, roof["verifier_floor_s"],
                                          roof["verifier_kv_s"], roof["verifier_token_s"],
                                          k + 1.0, bend, xp=xp)
    drafter_floor = xp.maximum(roof["drafter_floor_s"], 1e-12)
    first, first_slope = roof_pass_expr(batch, drafter_floor, roof["drafter_kv_s"],
                                        roof["drafter_token_s"], k + 1.0, bend, xp=xp)
    later, later_slope = roof_pass_expr(batch, drafter_floor, roof["drafter_kv_s"],
                                        roof["drafter_token_s"], 1.0, bend, xp=xp)
    drafting = (k > 0) * 1.0
    later_passes = xp.maximum(k - 1.0, 0.0)
    step = verify + drafting * (first + later_passes * later)
    slope = verify_slope + drafting * (first_slope + later_passes * later_slope)
    return step, slope


#: Poisson terms the graph sums for a count's distribution function (exact to 1e-12 for
#: means up to about 20 prompts a step; the searches use the full function).
PROMPT_POISSON_TERMS = 48
#: The most a step's prompt-free room is counted in prompts (a step far from its
#: arithmetic: the prompts never reach it).
_FAR_PROMPTS = 1e9


def _poisson_at(count, mean, xp):
    """P(m = count) and P(m > count) for m ~ Poisson(``mean``), ``count`` a whole number
    >= 0 (as a float)."""
    if xp is np:
        from scipy.special import gammaln, pdtrc

        log_mean = np.log(np.maximum(mean, 1e-300))
        pmf = np.exp(count * log_mean - mean - gammaln(count + 1.0))
        return pmf, pdtrc(count, mean)
    from pytensor.gradient import disconnected_grad

    count = disconnected_grad(count)
    log_mean = xp.log(xp.maximum(mean, 1e-300))
    pmf = xp.exp(count * log_mean - mean - xp.gammaln(count + 1.0))
    j = xp.arange(PROMPT_POISSON_TERMS + 1, dtype="float64")
    terms = xp.exp(j * log_mean[..., None] - mean[..., None] - xp.gammaln(j + 1.0))
    below = xp.sum(xp.where(j <= count[..., None], terms, 0.0), axis=-1)
    return pmf, xp.clip(1.0 - below, 0.0, 1.0)


def _prompt_pass(batch, floor, kv, token, tokens_per_request, bend, prompt, mean, xp):
    """(seconds, d/d batch, d/d mean) of one pass that carries, besides its batch's decode
    tokens, m ~ Poisson(``mean``) prompts of ``prompt`` seconds of arithmetic each: the
    larger of the decode pass and its arithmetic with the prompts,
    E max(S, C + m q) = S + q E(m - T)+, T = (S - C)/q the prompt-free room of the decode
    pass S over its arithmetic C. E(m - T)+ = mean P(m >= n) - T P(m > n), n = floor T."""
    joined, slope, compute, compute_slope = _pass_parts(batch, floor, kv, token,
                                                        tokens_per_request, bend, xp,
                                                        ROOF_JOIN_POWER)
    has = prompt > 0
    safe = xp.where(has, prompt, 1.0)
    room = xp.minimum(xp.maximum((joined - compute) / safe, 0.0), _FAR_PROMPTS)
    count = xp.floor(room)
    pmf, above = _poisson_at(count, mean, xp)
    at_least = above + pmf
    extra = xp.where(has, safe * (mean * at_least - room * above), 0.0)
    d_batch = slope - xp.where(has, above * (slope - compute_slope), 0.0)
    d_mean = xp.where(has, safe * (above + pmf * (1.0 - room + count)), 0.0)
    return joined + extra, d_batch, d_mean


def roof_prompt_step(batch, roof: dict, k, bend, mean, xp=np):
    """(seconds, d/d batch, d/d mean) of one engine step at ``batch`` decoding requests
    that also carries m ~ Poisson(``mean``) prompts: the verifier's pass and the
    drafter's first pass process the prompts' tokens with the batch's k + 1 a request
    (chunked prefill rides in the decode steps), the drafter's later passes one token a
    request (:func:`roof_step_expr` at ``mean`` 0). A step's floor hides a prompt's
    arithmetic below the knee and hides nothing past it."""
    zero = roof.get("verifier_prompt_s", 0.0) * 0.0
    verify, verify_batch, verify_mean = _prompt_pass(
        batch, roof["verifier_floor_s"], roof["verifier_kv_s"], roof["verifier_token_s"],
        k + 1.0, bend, roof.get("verifier_prompt_s", zero), mean, xp)
    drafter_floor = xp.maximum(roof["drafter_floor_s"], 1e-12)
    first, first_batch, first_mean = _prompt_pass(
        batch, drafter_floor, roof["drafter_kv_s"], roof["drafter_token_s"], k + 1.0, bend,
        roof.get("drafter_prompt_s", zero), mean, xp)
    later, later_slope = roof_pass_expr(batch, drafter_floor, roof["drafter_kv_s"],
                                        roof["drafter_token_s"], 1.0, bend, xp=xp)
    drafting = (k > 0) * 1.0
    later_passes = xp.maximum(k - 1.0, 0.0)
    return (verify + drafting * (first + later_passes * later),
            verify_batch + drafting * (first_batch + later_passes * later_slope),
            verify_mean + drafting * first_mean)


def _has_prompts(roof: dict) -> bool:
    """Whether the numpy cards state any prompt arithmetic."""
    return any(np.any(np.asarray(roof.get(name, 0.0)) > 0)
               for name in ("verifier_prompt_s", "drafter_prompt_s"))


def roof_alone_expr(roof: dict, k, bend, like, xp=np):
    """(h(1), h'(1), s0): a request's step alone, its slope in the batch, and one prompt's
    stall of it at light load (the step's growth per prompt a step at no load), the
    light-load line eq. (1)'s C1 and C2 hold. ``like``: an array of the shape wanted."""
    ones = xp.ones_like(like)
    step, slope, stall = roof_prompt_step(ones, roof, k, bend, like * 0.0, xp=xp)
    return step, slope, stall


def _excess_at(n, mean, c1, c2, roof, k, cycles, bend, alone, xp):
    """The roof's excess at ``n`` others in flight with ``mean`` prompts a step, its
    partial derivatives, and the prompt count's residual g = mean L - n h and its partial
    derivatives (zero where ``mean`` is the rate the latency implies times the step)."""
    step, step_n, step_mean = roof_prompt_step(1.0 + n, roof, k, bend, mean, xp=xp)
    alone_step, alone_slope, stall = alone
    # eq. (1)'s C2 holds the prompts' stall at light load, where the rate is N / C1 (a C1
    # below a request's own steps is no server's: the steps bound it)
    line_slope = alone_slope + alone_step * stall / xp.maximum(c1, cycles * alone_step)
    excess = cycles * (step - alone_step - n * line_slope)
    excess_n = cycles * (step_n - line_slope)
    excess_mean = cycles * step_mean
    latency = c1 + c2 * n + excess
    residual = mean * latency - n * step
    residual_n = mean * (c2 + excess_n) - step - n * step_n
    residual_mean = latency + mean * excess_mean - n * step_mean
    return excess, excess_n, excess_mean, residual, residual_n, residual_mean


#: Newton steps of the prompt count (:func:`roof_prompt_count`; from the decode step's
#: count, 1e-12 within 5 on every configuration of the study).
PROMPT_NEWTON_STEPS = 40


def roof_prompt_count(concurrency, c1, c2, roof: dict, k, cycles, bend, *, alone=None,
                      start=None, steps: int = PROMPT_NEWTON_STEPS):
    """numpy: the mean number of prompts an engine step carries at ``concurrency`` others
    in flight, a fixed point: m = X h(m), the arrival rate X = N / L(N) times the step
    that collects them, which the prompts lengthen; L holds the roof's excess at m
    (:func:`roof_excess_expr`). Newton's method from the decode step's count (or
    ``start``), the fixed-point map where Newton's slope fails."""
    n = np.asarray(concurrency, dtype=float)
    if alone is None:
        alone = roof_alone_expr(roof, k, bend, n)
    if start is None:
        step, _ = roof_step_expr(1.0 + n, roof, k, bend)
        alone_step, alone_slope, _ = alone
        latency = c1 + c2 * n + cycles * (step - alone_step - n * alone_slope)
        start = n * step / np.maximum(latency, 1e-300)
    mean = np.maximum(np.asarray(start, dtype=float), 0.0)
    for _ in range(steps):
        excess, _, _, residual, _, residual_mean = _excess_at(n, mean, c1, c2, roof, k,
                                                              cycles, bend, alone, np)
        newton = mean - residual / np.where(residual_mean > 0, residual_mean, np.inf)
        latency = c1 + c2 * n + excess
        fixed = (mean * latency - residual) / np.maximum(latency, 1e-300)   # N h / L
        moved = np.where((residual_mean > 0) & (newton >= 0), newton,
                         np.maximum(fixed, 0.0))
        settled = np.abs(moved - mean) <= 1e-13 * np.maximum(np.abs(moved), 1e-300)
        mean = moved
        if np.all(settled):
            break
    return mean


def roof_excess_expr(concurrency, c1, c2, roof: dict, k, cycles, bend, xp=np, alone=None,
                     prompts=None):
    """The latency the compute roof adds to eq. (1) at ``concurrency`` requests in
    flight, and its derivative in it: a request's ``cycles`` steps, each at a batch of
    itself and the others, h(1 + N), less the straight line eq. (1) already holds,
    h(1) + N (h'(1) + h(1) s0 / C1) (at light load prompts arrive at N / C1 a second
    and each stalls a step by s0: eq. (1)'s C2 holds it). Zero with zero slope at N = 0,
    so eq. (1)'s C1 and C2 keep their meaning (a request alone, what each other one adds
    at light load) and the roof bends the curve only past its knee.

    The step carries the prompts that arrive during it (:func:`roof_prompt_step`), m of
    them on average, m = X h: with X = N / L(N) (Little's law, exact at the law's root)
    the count is a fixed point at each N (:func:`roof_prompt_count`), so the excess is a
    function of N alone and the least root, the ceiling and the full batch keep their
    form. ``prompts``: the count where the caller has it (a start in numpy; in a graph,
    the searched count the implicit step refines); ``alone``: :func:`roof_alone_expr`.
    Returns (excess, d excess / dN with the count following N)."""
    if alone is None:
        alone = roof_alone_expr(roof, k, bend, concurrency, xp=xp)
    if xp is np:
        excess, slope, _ = _excess_numpy(concurrency, c1, c2, roof, k, cycles, bend, alone,
                                         prompts)
        return excess, slope
    mean = prompts if prompts is not None else _PromptCountSearch.apply(
        (concurrency, c1, c2, *(roof[name] for name in ROOF_CARD_FIELDS), k, cycles, bend))
    # one Newton step from the searched count held fixed: its implicit gradient
    _, _, _, residual, _, residual_mean = _excess_at(concurrency, mean, c1, c2, roof, k,
                                                     cycles, bend, alone, xp)
    mean = mean - residual / xp.where(residual_mean > 0, residual_mean, 1.0)
    return _excess_following_count(concurrency, mean, c1, c2, roof, k, cycles, bend, alone,
                                   xp)


def _excess_following_count(n, mean, c1, c2, roof, k, cycles, bend, alone, xp):
    """(excess, its total derivative in N) at the count ``mean``: the count follows N,
    dm/dN = -g_N / g_m (the implicit function of :func:`roof_prompt_count`)."""
    excess, excess_n, excess_mean, _, residual_n, residual_mean = _excess_at(
        n, mean, c1, c2, roof, k, cycles, bend, alone, xp)
    safe = xp.where(residual_mean > 0, residual_mean, 1.0)
    return excess, excess_n - excess_mean * xp.where(residual_mean > 0, residual_n / safe,
                                                     0.0)


def _excess_numpy(n, c1, c2, roof, k, cycles, bend, alone, start=None):
    """numpy: (excess, its total derivative, the prompt count); decode tokens alone where
    no prompt arithmetic is stated (the count then zero)."""
    if not _has_prompts(roof):
        step, slope = roof_step_expr(1.0 + n, roof, k, bend)
        alone_step, alone_slope, _ = alone
        return (cycles * (step - alone_step - n * alone_slope),
                cycles * (slope - alone_slope), np.zeros_like(step))
    mean = roof_prompt_count(n, c1, c2, roof, k, cycles, bend, alone=alone, start=start)
    excess, slope = _excess_following_count(n, mean, c1, c2, roof, k, cycles, bend, alone,
                                            np)
    return excess, slope, mean


#: Newton steps of :func:`roof_concurrency_expr` (from eq. (1)'s N, quadratic near the
#: root: 24 reach a relative 1e-12 on every configuration of the study; a throughput
#: that flattens towards its ceiling, as a bounded bend's does, slows the steps on the
#: slope's floor to linear: 64 reach the root at 0.999 of such a ceiling). Settled
#: points stop early.
ROOF_NEWTON_STEPS = 64
#: Where the Newton iterate of a rate past the roof's ceiling stops growing (requests in
#: flight): far beyond any engine's batch, its latency far beyond any measurement.
ROOF_FAR_IN_FLIGHT = 1e7


def roof_concurrency_expr(rps, c1, c2, roof: dict, k, cycles, bend, xp=np,
                          steps: int = ROOF_NEWTON_STEPS):
    """The least number in flight N of eq. (1) with the compute roof,
    N = RPS (C1 + C2 N + R(N)) (:func:`roof_excess_expr`), by Newton's method from
    the zero-load N, RPS C1. The residual RPS (C1 + C2 N + R(N)) - N is positive there
    (a latency that grows with the load), so the steps rise to its least root, the one a
    load rising from zero reaches (monotonically where the residual is convex; the
    prompts' stall, which a step's floor hides more of as the batch grows, can bend it
    the other way in plain decoding, and can lift its ceiling above eq. (1)'s pole).
    Where there is none (past the roof's ceiling), a step on a flat or rising residual is
    taken with a floor on the slope, so the iterate keeps growing and the latency with
    it, smoothly in the parameters.
    Returns (N, R'(N) + C2 = the C2 a point feels, whether N is a root)."""
    if xp is np:
        return _roof_concurrency_numpy(rps, c1, c2, roof, k, cycles, bend, steps)
    free = 1.0 - rps * c2
    safe_free = xp.where(free > 0, free, 1.0)
    n = rps * c1
    floor_slope = -0.05 * safe_free
    alone = roof_alone_expr(roof, k, bend, n, xp=xp)
    for _ in range(steps):
        excess, slope = roof_excess_expr(n, c1, c2, roof, k, cycles, bend, xp=xp,
                                         alone=alone)
        residual = rps * (c1 + c2 * n + excess) - n
        derivative = rps * (c2 + slope) - 1.0
        n = xp.clip(n - residual / xp.minimum(derivative, floor_slope), 0.0,
                    ROOF_FAR_IN_FLIGHT)
    excess, slope = roof_excess_expr(n, c1, c2, roof, k, cycles, bend, xp=xp, alone=alone)
    residual = rps * (c1 + c2 * n + excess) - n
    found = ((rps * (c2 + slope) < 1.0)
             & (xp.abs(residual) <= 1e-6 * (rps * c1 + n + 1e-300)))
    return n, c2 + slope, found


def _roof_concurrency_numpy(rps, c1, c2, roof, k, cycles, bend, steps):
    """:func:`roof_concurrency_expr`'s steps in numpy on the points not yet settled only
    (most settle in a few steps; answers evaluate it over draws x k x rates), each
    point's prompt count carried from one step to the next."""
    arrays = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (
        rps, c1, c2, k, cycles, bend, *(roof.get(name, 0.0) for name in ROOF_CARD_FIELDS))))
    shape = arrays[0].shape
    rps, c1, c2, k, cycles, bend, *cards = (a.ravel() for a in arrays)
    roof = dict(zip(ROOF_CARD_FIELDS, cards))
    free = 1.0 - rps * c2
    safe_free = np.where(free > 0, free, 1.0)
    n = rps * c1
    alone = roof_alone_expr(roof, k, bend, n)
    counts = np.zeros_like(n)
    active = np.arange(n.size)
    for first in range(steps + 1):
        if not active.size:
            break
        part = {name: value[active] for name, value in roof.items()}
        at = n[active]
        excess, slope, count = _excess_numpy(
            at, c1[active], c2[active], part, k[active], cycles[active], bend[active],
            tuple(a[active] for a in alone), None if first == 0 else counts[active])
        counts[active] = count
        residual = rps[active] * (c1[active] + c2[active] * at + excess) - at
        derivative = rps[active] * (c2[active] + slope) - 1.0
        moved = np.clip(at - residual / np.minimum(derivative, -0.05 * safe_free[active]),
                        0.0, ROOF_FAR_IN_FLIGHT)
        n[active] = moved
        settled = (np.abs(moved - at) <= 1e-13 * np.abs(moved)) | (moved >= ROOF_FAR_IN_FLIGHT)
        active = active[~settled]
    excess, slope, _ = _excess_numpy(n, c1, c2, roof, k, cycles, bend, alone, counts)
    residual = rps * (c1 + c2 * n + excess) - n
    found = ((rps * (c2 + slope) < 1.0)
             & (np.abs(residual) <= 1e-6 * (rps * c1 + n + 1e-300)))
    return n.reshape(shape), (c2 + slope).reshape(shape), found.reshape(shape)


def roof_ceiling(c1, c2, roof: dict, k, cycles, bend, *, steps: int = 48) -> np.ndarray:
    """The highest rate eq. (1) with the compute roof sustains: the largest throughput
    N / L(N), L(N) = C1 + C2 N + R(N). Where L is convex and positive at N = 0, N / L
    rises to one maximum, where L = N L'(N): found by bisection in log N. Without a roof
    it is eq. (1)'s pole 1/C2. numpy; arrays broadcast together."""
    arrays = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (
        c1, c2, k, cycles, bend, *(roof.get(name, 0.0) for name in ROOF_CARD_FIELDS))))
    c1, c2, k, cycles, bend, *cards = arrays
    roof = dict(zip(ROOF_CARD_FIELDS, cards))
    lo = np.full(c1.shape, -6.0)
    hi = np.full(c1.shape, np.log10(ROOF_FAR_IN_FLIGHT))
    alone = roof_alone_expr(roof, k, bend, lo)
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        n = 10.0 ** mid
        excess, slope = roof_excess_expr(n, c1, c2, roof, k, cycles, bend, alone=alone)
        rising = c1 + c2 * n + excess - n * (c2 + slope) > 0
        lo, hi = np.where(rising, mid, lo), np.where(rising, hi, mid)
        if np.all(hi - lo < 1e-12):
            break
    n = 10.0 ** lo
    excess, _ = roof_excess_expr(n, c1, c2, roof, k, cycles, bend, alone=alone)
    return n / (c1 + c2 * n + excess)


def roof_full_batch_time_expr(c1, c2, cap, roof: dict, k, cycles, bend, xp=np):
    """A request's time in a full batch of ``cap`` with the compute roof:
    L_roof(cap - 1) = C1 + C2 (cap - 1) + R(cap - 1), the law's time with cap - 1 others
    in flight; cap over it is the rate the engine sustains with every slot busy."""
    excess, _ = roof_excess_expr(cap - 1.0, c1, c2, roof, k, cycles, bend, xp=xp)
    return c1 + c2 * (cap - 1.0) + excess


def roof_slot_queue_latency_expr(rps, c1, c2, cap, roof: dict, k, cycles, bend, concurrency,
                                 xp=np, *, wait_scale=1.0, soft_margin=None):
    """Mean latency of eq. (1) with the compute roof when at most ``cap`` requests share
    the batch (the slot cap ``max_num_seqs``, the KV cache over a request's tokens:
    :func:`bayesspec.laws.concurrency_cap`).

    Mean field for the roof, the slot queue for the cap: the roof's excess R
    (:func:`roof_excess_expr`) is held at the roof's least root N (``concurrency``:
    :func:`roof_concurrency_expr`, or :func:`roof_concurrency_graph` in a model) but
    never past cap - 1, the most others a request can share the batch with; with that
    excess added to C1 the batch is the slot queue's birth-death chain
    (:func:`bayesspec.laws.slot_queue_latency_expr`: eq. (1) below the cap, a waiting
    line for a slot past it, whose slots free at the full batch's rate).

    Where the cap is far, the slot queue at C1 + R(N) is (C1 + R(N))/(1 - RPS C2) = N/RPS:
    the roof's law exactly; without a roof (R = 0) it is the slot queue exactly. Where
    the roof's N would pass cap - 1 the excess is the full batch's, R(cap - 1), and the
    rate the engine sustains is cap / L_roof(cap - 1) (:func:`roof_full_batch_time_expr`).
    So the cap binds where it comes before the roof's peak throughput, and the roof's
    ceiling where the peak comes first (:func:`roof_capped_ceiling`).
    numpy or PyTensor (``xp``), arrays broadcast together."""
    from bayesspec.laws.queue import slot_queue_latency_expr

    held = xp.minimum(concurrency, cap - 1.0)
    shift, _ = roof_excess_expr(held, c1, c2, roof, k, cycles, bend, xp=xp)
    return slot_queue_latency_expr(rps, c1 + shift, c2, cap, xp, wait_scale=wait_scale,
                                   soft_margin=soft_margin)


def _past_roof_peak(c1, c2, batch_others, roof, k, cycles, bend):
    """Whether N / L_roof(N) falls at N = ``batch_others`` (past the roof's peak
    throughput): L(N) <= N L'(N), the test :func:`roof_ceiling` bisects on."""
    excess, slope = roof_excess_expr(batch_others, c1, c2, roof, k, cycles, bend)
    return c1 + c2 * batch_others + excess - batch_others * (c2 + slope) <= 0


def _broadcast_with_roof(c1, c2, cap, k, cycles, bend, roof: dict):
    """The arguments as float arrays of one shape, the roof's cards broadcast to it."""
    arrays = np.broadcast_arrays(*(np.asarray(v, dtype=float)
                                   for v in (c1, c2, cap, k, cycles, bend)))
    return (*arrays, {name: np.broadcast_to(np.asarray(v, dtype=float), arrays[0].shape)
                      for name, v in roof.items()})


def roof_cap_binds(c1, c2, cap, roof: dict, k, cycles, bend) -> np.ndarray:
    """Whether the engine's cap sets :func:`roof_capped_ceiling` (it comes before the
    roof's peak throughput), not the roof; False where ``cap`` is ``inf`` or NaN. numpy."""
    c1, c2, cap, k, cycles, bend, roof = _broadcast_with_roof(c1, c2, cap, k, cycles, bend,
                                                              roof)
    capped = np.isfinite(cap)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return capped & ~_past_roof_peak(c1, c2, np.where(capped, cap, 1.0) - 1.0, roof, k,
                                         cycles, bend)


def roof_capped_ceiling(c1, c2, cap, roof: dict, k, cycles, bend) -> np.ndarray:
    """The highest rate of :func:`roof_slot_queue_latency_expr`: the full batch's rate
    cap / L_roof(cap - 1) where the cap comes before the roof's peak throughput (the
    batch fills before the roof binds), the roof's own (:func:`roof_ceiling`) where the
    peak comes first or ``cap`` is ``inf`` or NaN. numpy."""
    c1, c2, cap, k, cycles, bend, roof = _broadcast_with_roof(c1, c2, cap, k, cycles, bend,
                                                              roof)
    safe_cap = np.where(np.isfinite(cap), cap, 1.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        full_batch = safe_cap / roof_full_batch_time_expr(c1, c2, safe_cap, roof, k, cycles,
                                                          bend)
    before_peak = roof_cap_binds(c1, c2, cap, roof, k, cycles, bend)
    if before_peak.all():
        return full_batch
    return np.where(before_peak, full_batch, roof_ceiling(c1, c2, roof, k, cycles, bend))


def roof_capped_latency(rps, c1, c2, cap, roof: dict, k, cycles, bend, *, wait_scale=1.0):
    """numpy: (mean latency, the roof's least root N, whether the rate is below the
    ceiling) of :func:`roof_slot_queue_latency_expr`; the roof's law alone where ``cap``
    is ``inf`` or NaN. ``inf`` at and past the ceiling (:func:`roof_capped_ceiling`), C1
    at zero load. Arrays broadcast together."""
    from bayesspec.laws.queue import LOG_NEGLIGIBLE_CAP_TAIL, cap_tail_log_bound

    arrays = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (
        rps, c1, c2, cap, k, cycles, bend, wait_scale,
        *(roof.get(name, 0.0) for name in ROOF_CARD_FIELDS))))
    rps, c1, c2, cap, k, cycles, bend, wait_scale, *cards = arrays
    roof = dict(zip(ROOF_CARD_FIELDS, cards))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        safe_rps = np.maximum(rps, 1e-300)
        n, _, found = roof_concurrency_expr(safe_rps, c1, c2, roof, k, cycles, bend)
        value = n / safe_rps
        capped = np.isfinite(cap)
        safe_cap = np.where(capped, cap, 1.0)
        below_cap = found & (n < safe_cap - 1.0)
        full = roof_full_batch_time_expr(c1, c2, safe_cap, roof, k, cycles, bend)
        within = np.where(capped, below_cap | (rps * full < safe_cap), found)
        held = np.where(below_cap, n, safe_cap - 1.0)
        shift, _ = roof_excess_expr(held, c1, c2, roof, k, cycles, bend)
        # where cap-many in the batch are practically impossible the queue is the roof's
        # law (answers evaluate draws x rates x configurations: most lie there)
        live = (capped & within & (rps > 0)
                & (~below_cap | (cap_tail_log_bound(rps, c1 + shift, c2, safe_cap)
                                 > LOG_NEGLIGIBLE_CAP_TAIL)))
        if live.any():
            part = {name: v[live] for name, v in roof.items()}
            value = np.array(value, dtype=float, copy=True)
            value[live] = roof_slot_queue_latency_expr(
                rps[live], c1[live], c2[live], safe_cap[live], part, k[live], cycles[live],
                bend[live], held[live], wait_scale=wait_scale[live])
    value = np.where(rps > 0, value, c1)
    return np.where(within | (rps <= 0), value, np.inf), n, within


def roof_concurrency_graph(rps, c1, c2, roof: dict, k, cycles, bend):
    """:func:`roof_concurrency_expr` inside a PyTensor graph at a fixed cost: the Newton
    search runs as one Op without gradients (numba element by element under nutpie,
    numpy otherwise) and gives the root N0 and its prompt count m0; one Newton step of
    the count from m0 and one of N from N0, both held fixed, carry the implicit gradient
    dN/dtheta = -F_theta/F_N (F's own through the count's, -g_theta/g_m). Unrolled in the
    graph the search took 48 s to compile a seven-group model's log density alone
    (measured 2026-12-07). Returns (N, the C2 a point feels)."""
    import pytensor.tensor as pt

    inputs = (rps, c1, c2, *(roof[name] for name in ROOF_CARD_FIELDS), k, cycles, bend)
    root, count = _RoofRootSearch.apply(inputs)
    free = 1.0 - rps * c2
    safe_free = pt.where(free > 0, free, 1.0)
    excess, slope = roof_excess_expr(root, c1, c2, roof, k, cycles, bend, xp=pt,
                                     prompts=count)
    residual = rps * (c1 + c2 * root + excess) - root
    derivative = rps * (c2 + slope) - 1.0
    return root - residual / pt.minimum(derivative, -0.05 * safe_free), c2 + slope


#: The constants the numba kernels take (:mod:`bayesspec.laws.roof_kernels`).
_KERNEL_CONSTANTS = {"power": ROOF_JOIN_POWER, "reach": ROOF_BEND_REACH,
                     "steps": ROOF_NEWTON_STEPS, "far": ROOF_FAR_IN_FLIGHT,
                     "count_steps": PROMPT_NEWTON_STEPS, "far_prompts": _FAR_PROMPTS}


def _numpy_root_and_count(rps, c1, c2, *rest):
    cards, (k, cycles, bend) = rest[:-3], rest[-3:]
    roof = dict(zip(ROOF_CARD_FIELDS, cards))
    with np.errstate(all="ignore"):
        n, _, _ = roof_concurrency_expr(rps, c1, c2, roof, k, cycles, bend)
        count = roof_prompt_count(n, c1, c2, roof, k, cycles, bend)
    return n, count


def _numpy_count(n, c1, c2, *rest):
    cards, (k, cycles, bend) = rest[:-3], rest[-3:]
    roof = dict(zip(ROOF_CARD_FIELDS, cards))
    with np.errstate(all="ignore"):
        return (roof_prompt_count(n, c1, c2, roof, k, cycles, bend),)


class _RoofRootSearch(SearchOp):
    """The least root of :func:`roof_concurrency_expr` and its prompt count."""

    outputs = 2
    numpy_search = staticmethod(_numpy_root_and_count)
    numba_kernel = "root"
    constants = _KERNEL_CONSTANTS


class _PromptCountSearch(SearchOp):
    """The prompt count of :func:`roof_prompt_count` at a given number in flight."""

    outputs = 1
    numpy_search = staticmethod(_numpy_count)
    numba_kernel = "count"
    constants = _KERNEL_CONSTANTS
