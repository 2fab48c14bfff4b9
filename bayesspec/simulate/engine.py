"""A discrete-time model of one vLLM-like server instance under a request stream.

Each engine step (V1-style scheduler):

1. running requests, in admission order, get their tokens first: one decode token (k+1
   verification tokens with speculative decoding) or the next prefill chunk, within the
   per-step token budget; a request whose KV blocks cannot be allocated preempts the most
   recently admitted running request (recompute: its cache is dropped and it re-queues at
   the front);
2. if nothing was preempted, waiting requests are admitted first-come first-served while
   the token budget, the batch-size limit and free KV blocks allow (chunked prefill: a
   prompt larger than what is left of the budget is split over steps);
3. the step takes the step model's time; tokens are committed, first tokens and
   completions time-stamped.

A step's time depends only on aggregate counts, so the loop is one compiled function
(numba; a plain-Python fallback works without it, slowly). Randomness (arrivals, lengths,
acceptance, step jitter) is drawn beforehand from a numpy ``Generator``, so a seed fixes
the result and acceptance draws belong to the request, not to the schedule.

Kept whole: one engine step loop whose parts share the scheduler's state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from bayesspec.errors import BadInput

from bayesspec.simulate.spec import SpecConfig
from bayesspec.simulate.stepmodel import StepModel

try:  # numba earns its place: the step loop is sequential and branchy
    from numba import njit
except ImportError:  # pragma: no cover - exercised only without numba
    def njit(*args, **kwargs):
        if args and callable(args[0]):
            return args[0]
        return lambda f: f

__all__ = [
    "ServerConfig",
    "Workload",
    "Arrivals",
    "PointResult",
    "simulate_point",
    "STRATEGIES",
]

THROUGHPUT_STREAMS = 512
STRATEGIES = ("synchronous", "throughput", "concurrent", "constant", "poisson")


@dataclass(frozen=True)
class ServerConfig:
    """Scheduler limits of the simulated server.

    Names follow vLLM; the defaults are vLLM V1's for the OpenAI server on a GPU with at
    least 70 GiB (8192 tokens per step, 1024 sequences). ``kv_capacity_tokens`` normally
    comes from :func:`~bayesspec.simulate.stepmodel.kv_capacity_tokens`.
    ``step_jitter``: log-normal spread of each step's time (run-to-run noise).
    """

    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024
    block_size: int = 16
    kv_capacity_tokens: int = 400_000
    step_jitter: float = 0.02

    def __post_init__(self):
        for name in ("max_num_batched_tokens", "max_num_seqs", "block_size",
                     "kv_capacity_tokens"):
            value = getattr(self, name)
            if int(value) != value or value < 1:
                raise BadInput(f"{name} must be a positive integer, got {value}")
        if not 0.0 <= self.step_jitter < 1.0:
            raise BadInput(f"step_jitter must be in [0, 1), got {self.step_jitter}")


@dataclass(frozen=True)
class Workload:
    """Prompt and output lengths: fixed (GuideLLM's synthetic data) or distributed.

    ``dist`` is ``fixed``, ``uniform`` (mean x [1 - cv*sqrt(3), 1 + cv*sqrt(3)]) or
    ``lognormal`` (given coefficient of variation ``cv``); lengths are at least 1.
    """

    prefill: int = 512
    decode: int = 512
    dist: str = "fixed"
    cv: float = 0.0

    def __post_init__(self):
        for name in ("prefill", "decode"):
            value = getattr(self, name)
            if int(value) != value or value < 1:
                raise BadInput(f"{name} tokens must be a positive integer, got {value}",
                               argument=f"{name}_tokens")
        if self.dist not in ("fixed", "uniform", "lognormal"):
            raise BadInput(f"length distribution must be fixed, uniform or lognormal, "
                           f"got {self.dist!r}")
        if self.cv < 0 or (self.dist == "uniform" and self.cv * math.sqrt(3) >= 1):
            raise BadInput(f"length cv {self.cv} is out of range for {self.dist}")

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        return self._one(rng, n, self.prefill), self._one(rng, n, self.decode)

    def _one(self, rng, n, mean):
        if self.dist == "fixed" or self.cv == 0:
            return np.full(n, int(mean), dtype=np.int64)
        if self.dist == "uniform":
            half = self.cv * math.sqrt(3.0)
            x = mean * rng.uniform(1.0 - half, 1.0 + half, n)
        else:
            sigma = math.sqrt(math.log1p(self.cv ** 2))
            x = mean * rng.lognormal(-0.5 * sigma ** 2, sigma, n)
        return np.maximum(np.rint(x), 1).astype(np.int64)


@dataclass(frozen=True)
class Arrivals:
    """How requests reach the server (GuideLLM strategy names).

    ``synchronous``: one request at a time; ``throughput``: ``streams`` clients (default
    512, GuideLLM's default maximum concurrency) sending back to back, to find the ceiling;
    ``concurrent``: ``streams`` clients; ``constant`` / ``poisson``: open loop at ``rate``.
    """

    strategy: str = "poisson"
    rate: float | None = None
    streams: int | None = None

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise BadInput(f"unknown arrival strategy {self.strategy!r}; use one of "
                           f"{', '.join(STRATEGIES)}")
        if self.strategy in ("constant", "poisson"):
            if self.rate is None or not (self.rate > 0 and math.isfinite(self.rate)):
                raise BadInput(f"a {self.strategy} run needs a positive rate, got {self.rate}",
                               argument="rps")
        if self.strategy == "concurrent" and not (self.streams and self.streams > 0):
            raise BadInput("a concurrent run needs a positive number of streams")

    @property
    def open_loop(self) -> bool:
        return self.strategy in ("constant", "poisson")

    def client_streams(self, server: ServerConfig) -> int:
        if self.strategy == "synchronous":
            return 1
        if self.strategy == "throughput":
            return self.streams or THROUGHPUT_STREAMS
        return int(self.streams or 0)

    def times(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.strategy == "constant":
            return np.arange(n, dtype=np.float64) / self.rate
        if self.strategy == "poisson":
            gaps = rng.exponential(1.0 / self.rate, n)
            gaps[0] = 0.0
            return np.cumsum(gaps)
        return np.zeros(n, dtype=np.float64)   # closed loop: filled in by the engine


# ---------------------------------------------------------------------------------------
# The compiled step loop
# ---------------------------------------------------------------------------------------

@njit(cache=True)
def _forward(p, tokens, kv):
    """One forward pass; ``p`` is ``ForwardCost.as_array()``."""
    memory = p[1] + p[4] * kv
    if p[2] > 0.0:
        memory += p[2] * (-math.expm1(tokens * p[3]))
    compute = p[5] * tokens
    if p[6] > 0.5:
        return p[0] + max(memory, compute)
    return p[0] + memory + compute


@njit(cache=True)
def _run(arrival, streams, prompt, output, acc_off, acc, k, vp, dp, sp, budget, max_seqs,
         total_blocks, block_size, jitter, t_first, t_finish, n_preempt, cap_wait, cycles,
         accepted, drafted, accepted_pos):
    n = prompt.shape[0]
    computed = np.zeros(n, np.int64)
    generated = np.zeros(n, np.int64)
    blocks = np.zeros(n, np.int64)
    run = np.empty(max_seqs, np.int64)
    sched = np.zeros(max_seqs, np.int64)
    drafts = np.zeros(max_seqs, np.int64)   # drafts verified this step; -1 marks a prefill chunk
    pre = np.empty(n, np.int64)              # preempted requests, re-queued at the front
    npre = 0
    nrun = 0
    wait_head = 0                            # next never-admitted request (arrival order)
    free = total_blocks
    if streams > 0:
        n_arrived = min(streams, n)
        for i in range(n_arrived):
            arrival[i] = 0.0
    else:
        n_arrived = 0
    t = 0.0
    done = 0
    steps = 0
    busy = 0.0
    n_jitter = jitter.shape[0]
    while done < n:
        if streams == 0:
            while n_arrived < n and arrival[n_arrived] <= t:
                n_arrived += 1
        if nrun == 0 and npre == 0 and wait_head >= n_arrived:
            t = arrival[n_arrived]           # idle until the next arrival
            continue
        left = budget
        tokens = 0
        kv = 0
        n_draft = 0
        kv_draft = 0
        n_sched = 0
        preempted = False
        i = 0
        while i < nrun:
            r = run[i]
            need = prompt[r] + generated[r] - computed[r]
            decoding = generated[r] > 0 and need <= 1
            if decoding:
                s = 1 + k
            else:
                s = need
            if s > left:
                s = left
            if s <= 0:
                break
            nb = (computed[r] + s + block_size - 1) // block_size - blocks[r]
            self_out = False
            while nb > free:
                v = run[nrun - 1]
                nrun -= 1
                free += blocks[v]
                blocks[v] = 0
                computed[v] = 0
                n_preempt[v] += 1
                pre[npre] = v
                npre += 1
                preempted = True
                if v == r:
                    self_out = True
                    break
            if self_out:
                break
            if nb > 0:
                free -= nb
                blocks[r] += nb
            sched[i] = s
            n_sched += 1
            left -= s
            tokens += s
            kv += computed[r] + s
            if decoding:
                drafts[i] = s - 1
                n_draft += 1
                kv_draft += computed[r] + s
            else:
                drafts[i] = -1
                if s == need:                 # prefill completes: drafting starts
                    n_draft += 1
                    kv_draft += computed[r] + s
            i += 1
        for j in range(i, nrun):
            sched[j] = 0
        if not preempted:
            while left > 0 and nrun < max_seqs:
                if npre > 0:
                    r = pre[npre - 1]
                elif wait_head < n_arrived:
                    r = wait_head
                else:
                    break
                need = prompt[r] + generated[r] - computed[r]
                s = need if need < left else left
                nb = (s + block_size - 1) // block_size
                if nb > free:
                    cap_wait[r] |= 2            # waits for KV blocks
                    break
                if npre > 0:
                    npre -= 1
                else:
                    wait_head += 1
                free -= nb
                blocks[r] = nb
                run[nrun] = r
                sched[nrun] = s
                drafts[nrun] = -1
                nrun += 1
                n_sched += 1
                left -= s
                tokens += s
                kv += s
                if s == need:
                    n_draft += 1
                    kv_draft += s
            if nrun >= max_seqs:            # waits for a batch slot
                if npre > 0:
                    cap_wait[pre[npre - 1]] |= 1
                elif wait_head < n_arrived:
                    cap_wait[wait_head] |= 1
        if tokens == 0:
            return -1, t, busy               # nothing can run: a request exceeds the cache
        dt = sp[0] + sp[1] * n_sched + _forward(vp, tokens, kv)
        if k > 0:
            dt += _forward(dp, tokens, kv)
            if n_draft > 0:
                dt += (k - 1) * _forward(dp, n_draft, kv_draft) + k * sp[2] * n_draft
        dt *= jitter[steps % n_jitter]
        t += dt
        busy += dt
        steps += 1
        keep = 0
        for j in range(nrun):
            r = run[j]
            s = sched[j]
            if s > 0:
                if drafts[j] >= 0:
                    a = 0
                    if k > 0:
                        a = acc[acc_off[r] + cycles[r]]
                        if a > drafts[j]:
                            a = drafts[j]
                        drafted[r] += drafts[j]
                        accepted[r] += a
                        for i in range(a):   # vLLM's per-position counter
                            accepted_pos[r, i] += 1
                    cycles[r] += 1
                    c = a + 1
                    if c > output[r] - generated[r]:
                        c = output[r] - generated[r]
                    generated[r] += c
                    computed[r] = prompt[r] + generated[r] - 1
                else:
                    computed[r] += s
                    if computed[r] == prompt[r] + generated[r]:
                        generated[r] += 1
                        if generated[r] == 1:
                            t_first[r] = t
                if generated[r] >= output[r]:
                    t_finish[r] = t
                    free += blocks[r]
                    blocks[r] = 0
                    done += 1
                    if streams > 0 and n_arrived < n:
                        arrival[n_arrived] = t
                        n_arrived += 1
                    continue
            run[keep] = r
            keep += 1
        nrun = keep
    return steps, t, busy


# ---------------------------------------------------------------------------------------
# One load point
# ---------------------------------------------------------------------------------------

@dataclass
class PointResult:
    """Per-request outcome of one load point plus its measured summary."""

    arrivals: Arrivals
    spec: SpecConfig
    arrival: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    preemptions: np.ndarray
    capacity_wait: np.ndarray               # int8 per request: 1 waited for a batch slot, 2 for KV blocks
    cycles: np.ndarray
    accepted: np.ndarray
    drafted: np.ndarray
    accepted_pos: np.ndarray                # (requests, k): drafts whose first i+1 were accepted
    steps: int
    busy_s: float
    window: tuple[float, float]
    measured: np.ndarray                    # bool mask of the requests in the window
    summary: dict = field(default_factory=dict)

    @property
    def latency(self) -> np.ndarray:
        return self.finish - self.arrival


def simulate_point(step_model: StepModel, server: ServerConfig, workload: Workload,
                   arrivals: Arrivals, spec: SpecConfig = SpecConfig(), *, n_requests: int = 1000,
                   seed=0, warmup: float = 0.1, cooldown: float = 0.1,
                   saturation_tolerance: float = 0.01, relaxation_times: float = 3.0,
                   max_warmup_factor: float = 8.0, min_window_latencies: float = 5.0,
                   max_window_factor: float = 8.0) -> PointResult:
    """Simulate one load point and measure it over its steady-state window.

    ``seed`` is anything ``numpy.random.default_rng`` accepts (an int, a SeedSequence).
    ``warmup``/``cooldown``: fractions of the ``n_requests`` left out at each end.

    An open-loop point starts from an empty server, and near saturation the queue takes
    long to fill: linearising dN/dt = rate - N/L(N) with L(N) = C1 + N*C2 gives a
    relaxation time L^2/C1, which exceeds a 1000-request run at high load. A first run
    estimates L; if its window opens before ``relaxation_times`` relaxation times,
    warm-up requests (at most ``max_warmup_factor`` x ``n_requests``) are put in front of
    the measured ones and the point is run again.

    ``n_requests`` is a minimum, as a load test's duration is: at high load a window of
    ``n_requests`` holds few request lifetimes (at 17 RPS and 11 s per request, 400
    requests span under two), and the requests in flight at its edges then weigh so much
    that the averages are not those of the steady state (the achieved rate off by up to
    30%). So an open-loop point whose window holds fewer than ``min_window_latencies``
    mean latencies is run again with enough measured requests (at most
    ``max_window_factor`` x ``n_requests``), as a load generator given a duration would.
    A point that still cannot reach steady state or a long enough window is marked
    saturated with its reason (see :func:`_measure`; ``summary["saturation_reason"]``).
    """
    if int(n_requests) != n_requests or n_requests < 10:
        raise BadInput(f"need at least 10 requests per load point, got {n_requests}",
                       argument="n_requests")
    if not (0 <= warmup < 0.5 and 0 <= cooldown < 0.5):
        raise BadInput("warm-up and cool-down fractions must each be in [0, 0.5)")
    if spec.k > 0 and step_model.drafter is None:
        raise BadInput("speculative decoding (k > 0) needs a drafter", argument="drafter")
    base = int(n_requests)
    n = base
    seq = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    extra = 0
    zero_load = None
    for _ in range(5):
        w = int(math.floor(warmup * n))
        c = int(math.floor(cooldown * n))
        result = _simulate(step_model, server, workload, arrivals, spec, extra + n, seq)
        _measure(result, warm=extra + w, cool=c, tolerance=saturation_tolerance,
                 min_lifetimes=min_window_latencies)
        if not arrivals.open_loop:
            break
        if zero_load is None:
            from bayesspec.simulate.spec import zero_load_latency

            zero_load = zero_load_latency(step_model, workload.prefill, workload.decode, spec,
                                          budget=server.max_num_batched_tokens)
        latency = result.summary["latency_mean_s"]
        needed = relaxation_times * latency * latency / zero_load
        warmed = result.window[0] >= 0.9 * needed
        result.summary["steady"] = bool(warmed and result.summary["steady"])
        short = result.summary["short_window"]
        if (warmed or extra >= max_warmup_factor * base) and not short:
            break
        grown = False
        if not warmed:
            more = int(min(math.ceil(arrivals.rate * needed), max_warmup_factor * base))
            if more > extra:
                extra, grown = more, True
        if short:
            # The window opens about one latency after the last warm-up arrival and may
            # lose a quarter of its length to matching the occupancy at its ends.
            span = (min_window_latencies / 0.75 + 1.0) * latency * 1.1
            wanted = int(math.ceil(arrivals.rate * span / (1.0 - warmup - cooldown)))
            wanted = min(wanted, int(max_window_factor * base))
            if wanted > n:
                n, grown = wanted, True
        if not grown:
            break
    if arrivals.open_loop and not result.summary["steady"]:
        codes = [code for code in result.summary["saturation_reason"].split(";") if code]
        if "drift" not in codes:
            codes.append("unsettled")
        result.summary["saturation_reason"] = ";".join(codes)
        result.summary["saturated"] = True
    result.summary["warmup_requests"] = extra + int(math.floor(warmup * n))
    result.summary["requests_run"] = extra + n
    return result


def _simulate(step_model: StepModel, server: ServerConfig, workload: Workload,
              arrivals: Arrivals, spec: SpecConfig, n: int,
              seq: np.random.SeedSequence) -> PointResult:
    """One run of ``n`` requests; the draws depend only on ``seq`` and ``n``."""
    # Children built by hand: SeedSequence.spawn counts its calls, so a rerun would not
    # see the same draws.
    arrival_seq, length_seq, accept_seq, jitter_seq = (
        np.random.SeedSequence(seq.entropy, spawn_key=(*seq.spawn_key, i),
                               pool_size=seq.pool_size) for i in range(4))
    arrival = arrivals.times(np.random.default_rng(arrival_seq), n)
    prompt, output = workload.sample(np.random.default_rng(length_seq), n)
    longest = int((prompt + output).max()) + spec.k + server.block_size
    if longest > server.kv_capacity_tokens:
        raise BadInput(f"a request of {longest} tokens does not fit in the KV cache "
                       f"({server.kv_capacity_tokens} tokens)")
    acc_off, acc = spec.draw_accepted(np.random.default_rng(accept_seq), output)
    sigma = server.step_jitter
    jitter_rng = np.random.default_rng(jitter_seq)
    jitter = np.exp(sigma * jitter_rng.standard_normal(8192) - 0.5 * sigma ** 2) if sigma \
        else np.ones(1)

    t_first = np.full(n, np.nan)
    t_finish = np.full(n, np.nan)
    n_preempt = np.zeros(n, np.int64)
    cap_wait = np.zeros(n, np.int8)   # bit 1: a batch slot, bit 2: KV blocks
    cycles = np.zeros(n, np.int64)
    accepted = np.zeros(n, np.int64)
    drafted = np.zeros(n, np.int64)
    accepted_pos = np.zeros((n, max(int(spec.k), 1)), np.int64)
    vp, dp, sp = step_model.as_arrays()
    streams = 0 if arrivals.open_loop else arrivals.client_streams(server)
    steps, _end, busy = _run(arrival, np.int64(streams), prompt, output, acc_off, acc,
                             np.int64(spec.k), vp, dp, sp,
                             np.int64(server.max_num_batched_tokens),
                             np.int64(server.max_num_seqs),
                             np.int64(server.kv_capacity_tokens // server.block_size),
                             np.int64(server.block_size), jitter, t_first, t_finish,
                             n_preempt, cap_wait, cycles, accepted, drafted, accepted_pos)
    if steps < 0:
        raise BadInput("the simulated server stalled: a request does not fit in the KV cache")
    return PointResult(arrivals=arrivals, spec=spec, arrival=arrival, first_token=t_first,
                       finish=t_finish, prompt=prompt, output=output, preemptions=n_preempt,
                       capacity_wait=cap_wait, cycles=cycles, accepted=accepted,
                       drafted=drafted, accepted_pos=accepted_pos, steps=int(steps), busy_s=float(busy),
                       window=(0.0, 0.0), measured=np.zeros(n, bool))


def _matching_end(arrival: np.ndarray, finish: np.ndarray, t0: float, t1: float,
                  slack: float = 0.25) -> tuple[float, int, int]:
    """Move the window's end back (by at most ``slack`` of it) to where as many requests
    are in the system as at its start.

    Over a window, the time-average of N(t) and throughput x mean latency differ by what
    the requests present at the two edges carry in and out. That difference is zero on
    average in steady state, but near saturation N(t) wanders by tens of requests over
    several latencies, which in a window of a few latencies is several percent. Equal
    occupancy at both ends removes the leading term; completions in the window then equal
    arrivals in it. Returns the new end and the occupancy at the start and at the end: if
    no time near the end comes close to the starting occupancy, the queue is drifting.
    """
    times = np.concatenate([arrival, finish])
    steps = np.concatenate([np.ones(arrival.size, np.int64), -np.ones(finish.size, np.int64)])
    order = np.argsort(times, kind="stable")
    times, level = times[order], np.cumsum(steps[order])   # N on [times[j], times[j+1])
    start = np.searchsorted(times, t0, side="right") - 1
    target = level[start] if start >= 0 else 0
    lo = np.searchsorted(times, t1 - slack * (t1 - t0), side="left")
    hi = np.searchsorted(times, t1, side="right") - 1
    if hi < lo or hi + 1 >= times.size:
        return t1, int(target), int(level[min(max(hi, 0), times.size - 1)])
    gap = np.abs(level[lo:hi + 1] - target)
    j = lo + int(np.flatnonzero(gap == gap.min())[-1])
    return float(min(0.5 * (times[j] + times[j + 1]), t1)), int(target), int(level[j])


def _equal_age_window(arrival: np.ndarray, finish: np.ndarray, t0: float, t1: float,
                      slack: float = 0.25) -> tuple[float, float]:
    """Window edges, each moved inward by at most ``slack`` of [t0, t1], at which the
    requests in the system carry the same total age.

    Over a window, the time integral of N(t) equals the measured requests' summed latency
    plus A(end) - A(start), where A(t) is the total age of the requests in the system at
    t (a request in flight at an edge carries in the part of its latency before the
    window and out the part after). A closed loop's clients finish in bursts, so edges
    picked by completion counts sit at different phases of a burst (one just as a burst
    begins, the other just after one), and A(end) - A(start) stays a few percent of the
    integral however long the window. A(t) rises continuously (slope N(t)) and drops only
    at completions, so it crosses its own time average upwards again and again: opening
    the window at the first such crossing and closing it at the last makes the
    time-average N equal throughput x mean latency exactly (Little's law over the
    window). Returns ``(t0, t1)`` unchanged when either span holds no crossing.
    """
    times = np.concatenate([arrival, finish])
    steps = np.concatenate([np.ones(arrival.size), -np.ones(finish.size)])
    weights = np.concatenate([arrival, -arrival])      # the arrival times of those present
    order = np.argsort(times, kind="stable")
    times, level, arrived_sum = times[order], np.cumsum(steps[order]), np.cumsum(weights[order])
    lo = np.searchsorted(times, t0, side="right") - 1
    hi = np.searchsorted(times, t1, side="right") - 1
    if lo < 0 or hi <= lo:
        return t0, t1
    # Segments of constant N between events, clipped to [t0, t1]; A(t) = N t - (sum of the
    # present requests' arrival times) is linear on each.
    start = np.maximum(times[lo:hi + 1], t0)
    end = np.minimum(np.append(times[lo + 1:hi + 1], t1), t1)
    n = level[lo:hi + 1]
    age = n * start - arrived_sum[lo:hi + 1]
    width = end - start
    mean_age = float((age * width + 0.5 * n * width ** 2).sum() / (t1 - t0))
    up = np.flatnonzero((n > 0) & (age <= mean_age) & (mean_age < age + n * width))
    first = up[start[up] <= t0 + slack * (t1 - t0)]
    last = up[end[up] >= t1 - slack * (t1 - t0)]
    if first.size == 0 or last.size == 0 or last[-1] <= first[0]:
        return t0, t1
    a, b = first[0], last[-1]
    return (float(start[a] + (mean_age - age[a]) / n[a]),
            float(start[b] + (mean_age - age[b]) / n[b]))


def _measure(res: PointResult, *, warm: int, cool: int, tolerance: float,
             min_lifetimes: float = 5.0) -> None:
    """Steady-state metrics over a window that leaves out the ramp-up and the drain.

    ``warm``/``cool``: requests left out at the start and at the end. The window opens at
    the later of the first measured arrival and the ``warm``-th completion, and closes
    while clients are still sending: near the arrival of the first cool-down request (open
    loop; moved back to equal occupancy, see :func:`_matching_end`) or at the last arrival
    (closed loop; a concurrent run's two edges then move in to equal total age of the
    requests in flight, see :func:`_equal_age_window`, so that its mean concurrency is
    exactly ``rps`` x mean latency). The measured requests are those completing inside the window;
    ``rps`` is their number over its length (a throughput run counts decode progress
    instead); ``mean_concurrency`` is the time average of the number of requests in the
    system, counting every request, measured or not.

    ``saturated`` marks a point the latency law does not describe: the throughput run; a
    preemption, or more than ``tolerance`` of the requests waiting for a batch slot or KV
    blocks, among requests alive in the window; completions falling 10% short of the
    window's arrivals; a queue that drifts (see :func:`_matching_end`); or, for an
    open-loop point, a window shorter than ``min_lifetimes`` mean latencies: the requests
    in flight at its two edges then weigh so much that the averages are not yet those of
    the steady state (Little's law is off by more than 3% in about a fifth of such
    windows; it stays within 3% beyond five lifetimes). ``saturation_reason`` lists
    which of these fired, as codes joined by ";": ``throughput``, ``preemption``,
    ``batch_wait``, ``kv_wait``, ``shortfall``, ``drift``, ``short_window`` (and
    ``unsettled`` from :func:`simulate_point`).
    """
    n = len(res.arrival)
    w, c = int(warm), int(cool)
    drift = False
    done_sorted = np.sort(res.finish)
    arrival_sorted = np.sort(res.arrival)
    t0 = max(arrival_sorted[w], done_sorted[w])
    if res.arrivals.open_loop:
        t1 = arrival_sorted[n - c - 1] if c else arrival_sorted[-1]
    else:
        t1 = arrival_sorted[-1] if res.arrivals.strategy != "synchronous" else 0.0
        if res.arrivals.strategy == "synchronous" or t1 <= t0:
            t1 = done_sorted[n - c - 1]
    if not t1 > t0:
        # The load never reached steady state (too few requests for this much
        # concurrency): fall back to the completions between the two trimmed ends.
        t0, t1 = done_sorted[w], done_sorted[n - c - 1]
    elif res.arrivals.strategy == "concurrent":
        # (a synchronous run's edges hold one fresh request each, A = 0 at both already;
        # a throughput run counts decode progress, not completions)
        t0, t1 = _equal_age_window(res.arrival, res.finish, t0, t1)
    elif res.arrivals.open_loop:
        t1, start_level, end_level = _matching_end(res.arrival, res.finish, t0, t1)
        # A stationary queue's occupancy wanders, by about sqrt(N) at light load and by a
        # good part of N near the ceiling (levels 150 -> 104 and 107 -> 144 were seen in
        # windows of ~1,200 arrivals on the law); a queue past its ceiling grows by
        # (rate - ceiling) per second, over 5% of the window's arrivals at 5% overload.
        arrived = int(((res.arrival >= t0) & (res.arrival < t1)).sum())
        drift = end_level - start_level > max(3.0, 3.0 * math.sqrt(start_level),
                                              0.05 * arrived)
    measured = (res.finish > t0) & (res.finish <= t1)
    if measured.sum() < 2:
        measured = np.zeros(n, bool)
        measured[np.argsort(res.finish)[w:n - c]] = True
        t0, t1 = float(res.finish[measured].min()), float(res.finish[measured].max())
    duration = t1 - t0
    res.window = (float(t0), float(t1))
    res.measured = measured

    lat = res.latency[measured]
    in_system = np.clip(np.minimum(res.finish, t1) - np.maximum(res.arrival, t0), 0.0, None)
    concurrency = float(in_system.sum() / duration) if duration > 0 else float("nan")
    if res.arrivals.strategy == "throughput":
        # A full server admits identical requests in cohorts that also finish together,
        # so counting completions in a window of a few lifetimes over- or under-counts a
        # cohort. Count decoding progress instead: each request contributes the share of
        # its decode span (first token to last) that falls inside the window.
        span = np.maximum(res.finish - res.first_token, 1e-12)
        inside = np.clip(np.minimum(res.finish, t1) - np.maximum(res.first_token, t0), 0.0, None)
        rps = float((inside / span).sum() / duration)
    else:
        rps = float(measured.sum() / duration) if duration > 0 else float("nan")
    ttft = res.first_token[measured] - res.arrival[measured]
    out = res.output[measured]
    multi = out > 1
    itl = (res.finish[measured][multi] - res.first_token[measured][multi]) / (out[multi] - 1)
    # Requests alive during the window: preemptions or capacity waits among them mean
    # the server ran out of room, so the point is not the steady state the law describes.
    alive = (res.arrival < t1) & (res.finish > t0)
    preempted = int((res.preemptions[alive] > 0).sum())
    waited = float((res.capacity_wait[alive] > 0).mean()) if alive.any() else 0.0
    target = res.arrivals.rate if res.arrivals.open_loop else float("nan")
    # Judged against the arrivals this window actually saw, not the nominal rate, so that
    # a Poisson run is not flagged for a slow stretch of its own arrivals.
    offered = float(((res.arrival >= t0) & (res.arrival < t1)).sum() / duration)
    shortfall = bool(res.arrivals.open_loop and rps < 0.9 * offered)
    short = bool(res.arrivals.open_loop and duration < min_lifetimes * float(lat.mean()))
    kinds = res.capacity_wait[alive]
    # Why the point is set aside, in codes a reader turns into words (bayesspec.data):
    # a throughput run has no set rate; a preemption recomputes a request, which no
    # latency law describes; a wait for a batch slot or KV blocks is the engine's
    # concurrency cap binding (a law with the cap describes it, eq. (1) alone does not).
    codes = []
    if res.arrivals.strategy == "throughput":
        codes.append("throughput")
    if preempted > 0:
        codes.append("preemption")
    if waited > tolerance:
        if (kinds & 1).any():
            codes.append("batch_wait")
        if (kinds & 2).any():
            codes.append("kv_wait")
    if shortfall:
        codes.append("shortfall")
    if drift:
        codes.append("drift")
    if short:
        codes.append("short_window")
    saturated = bool(codes)
    spec_on = res.spec.k > 0
    res.summary = {
        "rps": rps,
        "rps_target": target,
        "n_requests": int(measured.sum()),
        "latency_mean_s": float(lat.mean()),
        "latency_std_s": float(lat.std(ddof=1)) if lat.size > 1 else 0.0,
        "latency_p50_s": float(np.percentile(lat, 50)),
        "latency_p95_s": float(np.percentile(lat, 95)),
        "latency_p99_s": float(np.percentile(lat, 99)),
        "latency_p90_s": float(np.percentile(lat, 90)),
        "ttft_mean_s": float(ttft.mean()),
        **{f"ttft_p{q}_s": float(np.percentile(ttft, q)) for q in (50, 90, 95, 99)},
        "itl_mean_s": float(itl.mean()) if itl.size else float("nan"),
        # Over requests (each request's mean gap, GuideLLM's inter-token latency): the
        # simulator keeps no per-token gaps, which vLLM's own ITL percentiles are over.
        **{f"itl_p{q}_s": float(np.percentile(itl, q)) if itl.size else float("nan")
           for q in (50, 90, 95, 99)},
        "mean_concurrency": concurrency,
        "saturated": bool(saturated),
        "saturation_reason": ";".join(codes),
        "strategy": res.arrivals.strategy,
        "num_drafts": int(res.cycles[measured].sum()) if spec_on else 0,
        "draft_tokens": int(res.drafted[measured].sum()) if spec_on else 0,
        "accepted_tokens": int(res.accepted[measured].sum()) if spec_on else 0,
        "accepted_tokens_pos": ([int(v) for v in res.accepted_pos[measured].sum(axis=0)]
                                if spec_on else []),
        "preempted_requests": preempted,
        "capacity_wait_share": waited,
        "duration_s": float(duration),
        "steady": not drift,
        "short_window": short,
    }
