"""The roofline trends of eq. (3)'s cycle coefficients (docs/laws.md, eq. (3)), as algebra.

Each cycle coefficient is a sum of positive terms, a covariate (parameters in billions,
tokens in thousands) times a rate; the roofline gives each rate's physical value from a
GPU card (bandwidth, peak FLOP/s) and the verifiers' cards (KV bytes per token). The
hierarchical model (:mod:`bayesspec.bayes.hierarchical`) puts priors around these values
and builds its graph with the same functions; :mod:`bayesspec.simulate.synthetic` generates data
from them with known truth. numpy or pytensor arrays alike.
"""

from __future__ import annotations

import numpy as np

__all__ = ["TREND_TERMS", "TERM_NAMES", "covariates", "trend_coefficients",
           "physics_centres", "ROOF_JOIN_POWER", "ROOF_CARD_FIELDS", "roof_card_values",
           "roof_pass_expr", "roof_step_expr", "roof_excess_expr", "ROOF_NEWTON_STEPS",
           "roof_concurrency_expr", "ROOF_FAR_IN_FLIGHT", "roof_ceiling",
           "roof_concurrency_graph", "roof_full_batch_time_expr",
           "roof_slot_queue_latency_expr", "roof_capped_latency", "roof_capped_ceiling",
           "roof_cap_binds"]

# (coefficient, term name, covariate) for every positive term, in a fixed order.
TREND_TERMS = (
    ("c1p", "overhead", "one"),
    ("c1p", "weights", "verifier_b"),
    ("c1p", "prefill_compute", "verifier_b*prefill_k"),
    ("c1v", "overhead", "one"),
    ("c1v", "weights", "verifier_b"),
    ("c2p", "overhead", "one"),
    ("c2p", "prefill_compute", "verifier_b*prefill_k"),
    ("c2v", "token_compute", "verifier_b"),
    ("c2v", "kv_reads", "context_k"),
    ("c2v", "kv_reads_by_size", "verifier_b*context_k"),
    ("c1d", "overhead", "one"),
    ("c1d", "weights", "drafter_b"),
    ("c2d", "overhead", "one"),
    ("c2d", "token_compute", "drafter_b"),
    ("c2d", "verify_compute", "verifier_b"),
)
TERM_NAMES = tuple(f"{c}.{t}" for c, t, _ in TREND_TERMS)


def covariates(verifier_b, drafter_b, prefill_tokens, decode_tokens, xp=np) -> dict:
    """The trend covariates (parameters in billions, tokens in thousands)."""
    prefill_k = prefill_tokens / 1000.0
    context_k = (prefill_tokens + 0.5 * decode_tokens) / 1000.0
    return {"one": 1.0, "verifier_b": verifier_b, "drafter_b": drafter_b,
            "verifier_b*prefill_k": verifier_b * prefill_k, "context_k": context_k,
            "verifier_b*context_k": verifier_b * context_k}


def trend_coefficients(rates, covariate_values: dict) -> dict:
    """The six coefficients before deviations: sum over terms of rate x covariate.

    ``rates`` is indexable by term position (numpy array or pytensor vector, last axis
    for draws-first numpy arrays); the same function builds the PyMC graph and the numpy
    predictions of configurations nobody measured.
    """
    out = {}
    for i, (coefficient, _, covariate) in enumerate(TREND_TERMS):
        term = rates[..., i] * covariate_values[covariate]
        out[coefficient] = term if coefficient not in out else out[coefficient] + term
    return out


def physics_centres(gpu_card, verifier_cards) -> dict[str, float]:
    """Roofline values of each trend rate, in seconds per covariate unit."""
    bandwidth = gpu_card.hbm_bandwidth_bytes_s
    flops = gpu_card.peak_bf16_flops
    weights = 2e9 / bandwidth                     # one pass over 1B bf16 parameters
    token_compute = 2e9 / flops                   # 2 FLOP per parameter per token
    kv_bytes = [c.kv_bytes_per_token for c in verifier_cards if c is not None]
    kv_per_k = (float(np.median(kv_bytes)) if kv_bytes else 1.3e5) * 1000.0 / bandwidth
    size = float(np.median([c.params_total_b for c in verifier_cards if c is not None]
                           or [8.0]))
    return {
        "c1p.overhead": 2e-3, "c1p.weights": weights,
        "c1p.prefill_compute": token_compute * 1000.0,
        "c1v.overhead": 1e-3, "c1v.weights": weights,
        "c2p.overhead": 1e-4, "c2p.prefill_compute": token_compute * 1000.0,
        "c2v.token_compute": token_compute, "c2v.kv_reads": 0.7 * kv_per_k,
        "c2v.kv_reads_by_size": 0.3 * kv_per_k / size,
        "c1d.overhead": 1e-3, "c1d.weights": weights,
        "c2d.overhead": 2e-5, "c2d.token_compute": token_compute,
        "c2d.verify_compute": token_compute,
    }


# ---------------------------------------------------------------------------------------
# The compute roof of one engine step (docs/findings/compute-roof.md)
# ---------------------------------------------------------------------------------------

#: The power of the smooth maximum that joins a pass's memory floor and its compute slope,
#: (memory^p + compute^p)^(1/p): 4 stays within 19% of the hard maximum at the knee and
#: within 1% a factor 2 either side of it (kernels overlap loads and arithmetic only in
#: part near the knee).
ROOF_JOIN_POWER = 4.0

#: The card values of one configuration's roof, in this order (seconds): the verifier's
#: weight stream per pass, its KV read per request in the batch, its arithmetic per token
#: processed; the same for the drafter (zeros for plain decoding).
ROOF_CARD_FIELDS = ("verifier_floor_s", "verifier_kv_s", "verifier_token_s",
                    "drafter_floor_s", "drafter_kv_s", "drafter_token_s")


def roof_card_values(verifier_card, gpu_card, drafter_card=None, *, prefill_tokens: float,
                     decode_tokens: float) -> dict[str, float]:
    """The bounds a configuration's step cannot beat, from its cards: weight bytes (active
    ones for a sparse verifier: the experts a full batch touches are the weights read) over
    HBM bandwidth, a request's KV bytes at its mean context (prompt + half its output) over
    bandwidth, 2 x active parameters per token over peak bf16 FLOP/s. Real stacks run
    slower than these bounds; the factors that say how much are learned
    (:func:`roof_pass_expr`)."""
    bandwidth = gpu_card.hbm_bandwidth_bytes_s
    flops = gpu_card.peak_bf16_flops
    context = float(prefill_tokens) + 0.5 * float(decode_tokens)

    def card(c):
        if c is None:
            return 0.0, 0.0, 0.0
        return (c.weight_bytes / bandwidth, c.kv_bytes_per_token * context / bandwidth,
                2e9 * c.params_active_b / flops)

    values = card(verifier_card) + card(drafter_card)
    return dict(zip(ROOF_CARD_FIELDS, (float(v) for v in values)))


def roof_pass_expr(batch, floor, kv, token, tokens_per_request, bend, xp=np,
                   power: float = ROOF_JOIN_POWER):
    """Seconds of one forward pass over ``batch`` requests of ``tokens_per_request``
    tokens each, and its derivative in the batch: the smooth maximum of the memory floor
    (``floor`` + ``batch`` x ``kv``: weights streamed once, each request's KV read) and
    the arithmetic, ``batch`` x ``tokens_per_request`` x ``token`` x (1 + ``bend`` x its
    ratio to the floor). ``bend`` >= 0 lets the marginal cost keep rising past the knee
    (kernels past the engine's CUDA-graph sizes, tile steps, a token budget split over
    more steps): 0 is the plain roofline."""
    per_request = tokens_per_request * token
    memory = floor + batch * kv
    work = batch * per_request
    compute = work * (1.0 + bend * work / floor)
    compute_slope = per_request * (1.0 + 2.0 * bend * work / floor)
    # scaled by the larger part, so that no power overflows however large the batch
    top = xp.maximum(memory, compute)
    a, b = memory / top, compute / top
    if power == 4.0:   # products and square roots: numpy's float powers cost 5x these
        a2, b2 = a * a, b * b
        norm = xp.sqrt(xp.sqrt(a2 * a2 + b2 * b2))
        joined = top * norm
        a, b = a / norm, b / norm
        return joined, a * a * a * kv + b * b * b * compute_slope
    joined = top * (a ** power + b ** power) ** (1.0 / power)
    slope = ((memory / joined) ** (power - 1.0) * kv
             + (compute / joined) ** (power - 1.0) * compute_slope)
    return joined, slope


def roof_step_expr(batch, roof: dict, k, bend, xp=np):
    """One speculative cycle's engine step at ``batch`` requests and its derivative: the
    verifier's pass over k + 1 tokens per request, the drafter's first pass over the same
    tokens and its k - 1 further passes over one token each (plain decoding: k = 0, one
    pass of one token). ``roof``: :data:`ROOF_CARD_FIELDS` as arrays, already in the
    seconds of the stack (the card's bounds times the learned factors)."""
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


def roof_excess_expr(concurrency, roof: dict, k, cycles, bend, xp=np, alone=None):
    """The latency the compute roof adds to eq. (1) at ``concurrency`` requests in
    flight, and its derivative in it: a request's ``cycles`` steps, each at a batch of
    itself and the others, h(1 + N), less the straight line eq. (1) already holds,
    h(1) + N h'(1). Zero with zero slope at N = 0, convex, so eq. (1)'s C1 and C2 keep
    their meaning (a request alone, what each other one adds at light load) and the roof
    bends the curve upward only past its knee."""
    at_batch, slope = roof_step_expr(1.0 + concurrency, roof, k, bend, xp=xp)
    if alone is None:   # (h(1), h'(1)): callers that evaluate often pass them once
        alone = roof_step_expr(xp.ones_like(concurrency), roof, k, bend, xp=xp)
    alone, alone_slope = alone
    excess = cycles * (at_batch - alone - concurrency * alone_slope)
    return excess, cycles * (slope - alone_slope)


#: Newton steps of :func:`roof_concurrency_expr` (from eq. (1)'s N, quadratic near the
#: root: 24 reach a relative 1e-12 on every configuration of the study).
ROOF_NEWTON_STEPS = 24
#: Where the Newton iterate of a rate past the roof's ceiling stops growing (requests in
#: flight): far beyond any engine's batch, its latency far beyond any measurement.
ROOF_FAR_IN_FLIGHT = 1e7


def roof_concurrency_expr(rps, c1, c2, roof: dict, k, cycles, bend, xp=np,
                          steps: int = ROOF_NEWTON_STEPS):
    """The least number in flight N of eq. (1) with the compute roof,
    N = RPS (C1 + C2 N + R(N)) (:func:`roof_excess_expr`), by Newton's method from
    eq. (1)'s own N. The residual RPS (C1 + R(N)) - N (1 - RPS C2) is convex in N and
    positive at the start, so the steps rise monotonically to its least root, the one a
    load rising from zero reaches. Where there is none (past the roof's ceiling), a step
    on a flat or rising residual is taken with a floor on the slope, so the iterate keeps
    growing and the latency with it, smoothly in the parameters.
    Returns (N, R'(N) + C2 = the C2 a point feels, whether N is a root)."""
    if xp is np:
        return _roof_concurrency_numpy(rps, c1, c2, roof, k, cycles, bend, steps)
    free = 1.0 - rps * c2
    safe_free = xp.where(free > 0, free, 1.0)
    n = rps * c1 / safe_free
    floor_slope = -0.05 * safe_free
    alone = roof_step_expr(xp.ones_like(n), roof, k, bend, xp=xp)
    for _ in range(steps):
        excess, slope = roof_excess_expr(n, roof, k, cycles, bend, xp=xp, alone=alone)
        residual = rps * (c1 + excess) - n * safe_free
        derivative = rps * slope - safe_free
        n = xp.minimum(n - residual / xp.minimum(derivative, floor_slope), ROOF_FAR_IN_FLIGHT)
    excess, slope = roof_excess_expr(n, roof, k, cycles, bend, xp=xp, alone=alone)
    residual = rps * (c1 + excess) - n * safe_free
    found = ((free > 0) & (rps * slope < safe_free)
             & (xp.abs(residual) <= 1e-6 * (rps * c1 + n * safe_free + 1e-300)))
    return n, c2 + slope, found


def _roof_concurrency_numpy(rps, c1, c2, roof, k, cycles, bend, steps):
    """:func:`roof_concurrency_expr`'s steps in numpy on the points not yet settled only
    (most settle in a few steps; answers evaluate it over draws x k x rates)."""
    arrays = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (
        rps, c1, c2, k, cycles, bend, *(roof[name] for name in ROOF_CARD_FIELDS))))
    shape = arrays[0].shape
    rps, c1, c2, k, cycles, bend, *cards = (a.ravel() for a in arrays)
    roof = dict(zip(ROOF_CARD_FIELDS, cards))
    free = 1.0 - rps * c2
    safe_free = np.where(free > 0, free, 1.0)
    n = rps * c1 / safe_free
    alone = roof_step_expr(np.ones_like(n), roof, k, bend)
    active = np.arange(n.size)
    for _ in range(steps + 1):
        if not active.size:
            break
        part = {name: value[active] for name, value in roof.items()}
        at = n[active]
        excess, slope = roof_excess_expr(at, part, k[active], cycles[active], bend[active],
                                         alone=(alone[0][active], alone[1][active]))
        residual = rps[active] * (c1[active] + excess) - at * safe_free[active]
        derivative = rps[active] * slope - safe_free[active]
        moved = np.minimum(at - residual / np.minimum(derivative, -0.05 * safe_free[active]),
                           ROOF_FAR_IN_FLIGHT)
        n[active] = moved
        settled = (np.abs(moved - at) <= 1e-13 * np.abs(moved)) | (moved >= ROOF_FAR_IN_FLIGHT)
        active = active[~settled]
    excess, slope = roof_excess_expr(n, roof, k, cycles, bend, alone=alone)
    residual = rps * (c1 + excess) - n * safe_free
    found = ((free > 0) & (rps * slope < safe_free)
             & (np.abs(residual) <= 1e-6 * (rps * c1 + n * safe_free + 1e-300)))
    return n.reshape(shape), (c2 + slope).reshape(shape), found.reshape(shape)


def roof_ceiling(c1, c2, roof: dict, k, cycles, bend, *, steps: int = 48) -> np.ndarray:
    """The highest rate eq. (1) with the compute roof sustains: the largest throughput
    N / L(N), L(N) = C1 + C2 N + R(N). L is convex and positive at N = 0, so N / L rises
    to one maximum, where L = N L'(N): found by bisection in log N. Without a roof it is
    eq. (1)'s pole 1/C2. numpy; arrays broadcast together."""
    c1, c2, k, cycles, bend = np.broadcast_arrays(*(np.asarray(v, dtype=float)
                                                    for v in (c1, c2, k, cycles, bend)))
    lo = np.full(c1.shape, -6.0)
    hi = np.full(c1.shape, np.log10(ROOF_FAR_IN_FLIGHT))
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        n = 10.0 ** mid
        excess, slope = roof_excess_expr(n, roof, k, cycles, bend)
        rising = c1 + c2 * n + excess - n * (c2 + slope) > 0
        lo, hi = np.where(rising, mid, lo), np.where(rising, hi, mid)
        if np.all(hi - lo < 1e-12):
            break
    n = 10.0 ** lo
    excess, _ = roof_excess_expr(n, roof, k, cycles, bend)
    return n / (c1 + c2 * n + excess)


def roof_full_batch_time_expr(c1, c2, cap, roof: dict, k, cycles, bend, xp=np):
    """A request's time in a full batch of ``cap`` with the compute roof:
    L_roof(cap - 1) = C1 + C2 (cap - 1) + R(cap - 1), the law's time with cap - 1 others
    in flight; cap over it is the rate the engine sustains with every slot busy."""
    excess, _ = roof_excess_expr(cap - 1.0, roof, k, cycles, bend, xp=xp)
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
    shift, _ = roof_excess_expr(held, roof, k, cycles, bend, xp=xp)
    return slot_queue_latency_expr(rps, c1 + shift, c2, cap, xp, wait_scale=wait_scale,
                                   soft_margin=soft_margin)


def _past_roof_peak(c1, c2, batch_others, roof, k, cycles, bend):
    """Whether N / L_roof(N) falls at N = ``batch_others`` (past the roof's peak
    throughput): L(N) <= N L'(N), the test :func:`roof_ceiling` bisects on."""
    excess, slope = roof_excess_expr(batch_others, roof, k, cycles, bend)
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
        *(roof[name] for name in ROOF_CARD_FIELDS))))
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
        shift, _ = roof_excess_expr(held, roof, k, cycles, bend)
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
    numpy otherwise), then one Newton step from its root N0 held fixed,
    N0 - F(N0)/F'(N0), carries the implicit gradient dN/dtheta = -F_theta/F_N. Unrolled
    in the graph the search took 48 s to compile a seven-group model's log density
    alone (measured 2026-12-07). Returns (N, the C2 a point feels)."""
    import pytensor.tensor as pt

    inputs = (rps, c1, c2, *(roof[name] for name in ROOF_CARD_FIELDS), k, cycles, bend)
    root = _RoofRootSearch.apply(inputs)
    free = 1.0 - rps * c2
    safe_free = pt.where(free > 0, free, 1.0)
    excess, slope = roof_excess_expr(root, roof, k, cycles, bend, xp=pt)
    residual = rps * (c1 + excess) - root * safe_free
    derivative = rps * slope - safe_free
    return root - residual / pt.minimum(derivative, -0.05 * safe_free), c2 + slope


class _RoofRootSearch:
    """The Newton search of :func:`roof_concurrency_expr` as one PyTensor Op, its gradient
    disconnected (the implicit step after it carries the gradient)."""

    _op_class = None

    @classmethod
    def apply(cls, inputs):
        import pytensor.tensor as pt

        if cls._op_class is None:
            cls._op_class = cls._make_op_class()
        inputs = pt.broadcast_arrays(*(pt.as_tensor_variable(x).astype("float64")
                                       for x in inputs))
        return cls._op_class()(*inputs)

    @staticmethod
    def _make_op_class():
        from pytensor.gradient import disconnected_type
        from pytensor.graph.basic import Apply
        from pytensor.graph.op import Op

        class RoofRootSearch(Op):
            __props__ = ()

            def make_node(self, *inputs):
                return Apply(self, list(inputs), [inputs[0].type()])

            def perform(self, node, inputs, outputs):
                rps, c1, c2, *cards, k, cycles, bend = inputs
                roof = dict(zip(ROOF_CARD_FIELDS, cards))
                with np.errstate(all="ignore"):
                    n, _, _ = roof_concurrency_expr(rps, c1, c2, roof, k, cycles, bend)
                outputs[0][0] = np.asarray(n, dtype="float64")

            def connection_pattern(self, node):
                return [[False] for _ in node.inputs]

            def grad(self, inputs, output_gradients):
                return [disconnected_type() for _ in inputs]

            def infer_shape(self, fgraph, node, shapes):
                return [shapes[0]]

        _register_numba_roof_search(RoofRootSearch)
        return RoofRootSearch


def _register_numba_roof_search(op_class) -> None:
    """The search element by element in numba, for the models nutpie compiles (the same
    steps as :func:`roof_concurrency_expr`; without it numba runs the numpy ``perform``
    in object mode)."""
    try:
        from pytensor.link.numba.dispatch import basic as numba_basic
    except ImportError:   # no numba: the numpy perform serves
        return

    power = ROOF_JOIN_POWER
    steps, far = ROOF_NEWTON_STEPS, ROOF_FAR_IN_FLIGHT

    @numba_basic.register_funcify_default_op_cache_key(op_class)
    def funcify(op, node=None, **kwargs):
        @numba_basic.numba_njit
        def one_pass(batch, floor, kv, token, per_request_tokens, bend):
            per_request = per_request_tokens * token
            memory = floor + batch * kv
            work = batch * per_request
            compute = work * (1.0 + bend * work / floor)
            compute_slope = per_request * (1.0 + 2.0 * bend * work / floor)
            top = max(memory, compute)
            joined = top * ((memory / top) ** power + (compute / top) ** power) ** (1.0 / power)
            slope = ((memory / joined) ** (power - 1.0) * kv
                     + (compute / joined) ** (power - 1.0) * compute_slope)
            return joined, slope

        @numba_basic.numba_njit
        def step(batch, vf, vk, vt, df, dk, dt, k, bend):
            verify, verify_slope = one_pass(batch, vf, vk, vt, k + 1.0, bend)
            if k <= 0:
                return verify, verify_slope
            floor = max(df, 1e-12)
            first, first_slope = one_pass(batch, floor, dk, dt, k + 1.0, bend)
            later, later_slope = one_pass(batch, floor, dk, dt, 1.0, bend)
            passes = max(k - 1.0, 0.0)
            return (verify + first + passes * later,
                    verify_slope + first_slope + passes * later_slope)

        @numba_basic.numba_njit
        def one(rps, c1, c2, vf, vk, vt, df, dk, dt, k, cycles, bend):
            free = 1.0 - rps * c2
            if not free > 0:
                free = 1.0
            n = rps * c1 / free
            alone, alone_slope = step(1.0, vf, vk, vt, df, dk, dt, k, bend)
            for _ in range(steps):
                at, slope = step(1.0 + n, vf, vk, vt, df, dk, dt, k, bend)
                excess = cycles * (at - alone - n * alone_slope)
                residual = rps * (c1 + excess) - n * free
                derivative = rps * cycles * (slope - alone_slope) - free
                n = min(n - residual / min(derivative, -0.05 * free), far)
            return n

        @numba_basic.numba_njit
        def search(rps, c1, c2, vf, vk, vt, df, dk, dt, k, cycles, bend):
            out = np.empty(rps.shape, dtype=np.float64)
            flat = out.reshape(-1)
            a, b, c = rps.ravel(), c1.ravel(), c2.ravel()
            d, e, f, g, h, i = vf.ravel(), vk.ravel(), vt.ravel(), df.ravel(), dk.ravel(), dt.ravel()
            kk, cy, be = k.ravel(), cycles.ravel(), bend.ravel()
            for j in range(flat.size):
                flat[j] = one(a[j], b[j], c[j], d[j], e[j], f[j], g[j], h[j], i[j], kk[j],
                              cy[j], be[j])
            return out

        return search
