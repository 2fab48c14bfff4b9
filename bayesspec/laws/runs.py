"""One load test as a run, not a steady state (docs/laws.md, "runs and summaries").

The sampling sd of a run's mean latency (its requests share the batch), the run error as
an Ornstein-Uhlenbeck process along a sweep's log RPS and the share of it a sweep's rates
have in common, and a whole run of n requests from an empty server in the fluid limit
(its fill, its drain, the queue it has time to build near the ceiling) with the share of
the slot queue's stochastic wait it builds.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from bayesspec.laws._numeric import _as_float
from bayesspec.laws.mean import latency

__all__ = ["run_mean_log_sd", "RUN_OWN_LENGTH", "run_process_layout",
           "run_process_factor_expr", "run_process_factor", "run_process_conditional",
           "RUN_EFFECT_SHARE", "FLUID_RUN_STEPS", "FLUID_RUN_LIFETIMES", "FLUID_RUN_CHUNK",
           "FLUID_RUN_MAX_STEPS", "FLUID_RUN_ROW_LIMIT", "fluid_run_latency",
           "slot_wait_in_run"]


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
#: seed-to-seed differences on replays of vidur_capped (docs/findings/run-effects.md, "A
#: run's mean varies like that of n/(1 + 2N) requests", measured 2026-12-06); fitted
#: lengths came out longer (0.8-3.3), the prior is wide.
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
    """S(N) of :func:`~bayesspec.laws.profile_segments`' pieces (0 without a profile)."""
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
    (``pieces`` of :func:`~bayesspec.laws.profile_segments`; none: eq. (1)), and gets the
    share of it that the prefills of later admissions leave (eq. (1)'s stall, C2 per
    admission). A request
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
