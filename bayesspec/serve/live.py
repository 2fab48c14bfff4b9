"""The simulator's scheduler, stepped in wall-clock time for live requests.

:mod:`bayesspec.simulate.engine` runs a whole load point at once in compiled code, with
every arrival known beforehand. A live server learns of requests as they come, so this
module keeps the same scheduling policy (see that module's docstring: running requests
first within the token budget, recompute preemption of the most recently admitted one,
first-come first-served admission while the batch-size limit and KV blocks allow, chunked
prefill, k+1 verification tokens per speculative cycle) as plain Python over request
objects, one step at a time: :meth:`LiveEngine.plan` decides a step and its simulated
duration, :meth:`LiveEngine.commit` applies it. :meth:`LiveEngine.run` sleeps for each
step's duration (times ``time_scale``) between the two, so tokens come out as simulated
steps complete and a crowded server really is slower.

Timing: each step's end is scheduled on a virtual clock (previous scheduled end + step
time), not on "now + step time", so the Python work between steps (HTTP, JSON, scheduling)
is absorbed instead of accumulating; a step that ends late is followed by a shorter
sleep. Only when the engine falls more than ``max_lag_s`` behind does the clock jump to
now, losing that time; :class:`StepStats` reports how far real step times drifted from
the simulated ones.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field

import numpy as np

from bayesspec.errors import BadInput

__all__ = ["LiveRequest", "LiveEngine", "StepStats", "StepPlan"]


@dataclass(eq=False)
class LiveRequest:
    """One request in the live engine; ``notify(new_tokens, finished)`` is called at each
    step that commits tokens for it (from the engine's event loop)."""

    prompt: int
    output: int
    notify: object = None
    arrival: float = 0.0
    computed: int = 0
    generated: int = 0
    blocks: int = 0
    preemptions: int = 0
    cycles: int = 0
    drafted: int = 0
    accepted: int = 0
    #: The token process's state of the last committed token (None: not drawn yet).
    guessable: bool | None = None
    first_token: float | None = None
    finish: float | None = None
    aborted: bool = False

    @property
    def done(self) -> bool:
        return self.finish is not None or self.aborted


@dataclass
class StepPlan:
    """One scheduled step: ``(request, tokens, drafts)`` entries (drafts -1 for a prefill
    chunk) and the step's simulated duration in seconds (before ``time_scale``)."""

    entries: list
    seconds: float
    tokens: int
    batch: int


@dataclass
class StepStats:
    """How real step times compare with simulated ones.

    ``simulated_s``: sum of the scaled step times asked for; ``real_s``: sum of the real
    times between consecutive commits of a busy engine (the first step of a busy period
    counts from its start). ``drift`` = real / simulated - 1 over all steps;
    ``lateness``: how long after its scheduled end each step was committed.
    """

    steps: int = 0
    simulated_s: float = 0.0
    real_s: float = 0.0
    clock_resets: int = 0
    lost_s: float = 0.0
    abs_error_s: float = 0.0
    lateness: list = field(default_factory=list)

    @property
    def drift(self) -> float:
        return self.real_s / self.simulated_s - 1.0 if self.simulated_s > 0 else float("nan")

    def as_dict(self) -> dict:
        late = np.asarray(self.lateness[-100_000:], dtype=float)
        return {
            "steps": self.steps,
            "simulated_step_s_total": self.simulated_s,
            "real_step_s_total": self.real_s,
            "drift": self.drift,
            "mean_abs_step_error_rel": (self.abs_error_s / self.simulated_s
                                        if self.simulated_s > 0 else float("nan")),
            "lateness_ms_p50": float(np.percentile(late, 50) * 1e3) if late.size else None,
            "lateness_ms_p99": float(np.percentile(late, 99) * 1e3) if late.size else None,
            "lateness_ms_max": float(late.max() * 1e3) if late.size else None,
            "clock_resets": self.clock_resets,
            "lost_s": self.lost_s,
        }


class LiveEngine:
    """The simulated server of a :class:`~bayesspec.simulate.sweep.Setup`, live.

    ``time_scale`` multiplies every simulated step time (2.0: everything takes twice as
    long in real time, so latencies double and rates halve). ``metrics``: an optional
    object with the :class:`~bayesspec.serve.metrics.ServerMetrics` hooks.
    """

    def __init__(self, setup, *, time_scale: float = 1.0, seed: int = 0, metrics=None,
                 clock=time.monotonic, max_lag_s: float = 0.25):
        if not (time_scale > 0 and math.isfinite(time_scale)):
            raise BadInput(f"time scale must be a positive number, got {time_scale}",
                           argument="time_scale")
        self.setup = setup
        self.model = setup.step_model
        self.server = setup.server
        self.k = setup.spec.k
        self.time_scale = float(time_scale)
        self.metrics = metrics
        self.clock = clock
        self.max_lag_s = float(max_lag_s)
        self.rng = np.random.default_rng(seed)
        # r_j ascending, as SpecConfig.draw_accepted searches them
        self._ascending = setup.spec.position_rates()[::-1].copy()
        persistence = getattr(setup.spec, "persistence", None)
        self._tokens = None
        if persistence is not None:
            from bayesspec.simulate.spec import TokenProcess

            self._tokens = TokenProcess(*persistence)
        self.free_blocks = self.server.kv_capacity_tokens // self.server.block_size
        self.running: list[LiveRequest] = []
        self.waiting: list[LiveRequest] = []       # FIFO of never-admitted requests
        self.preempted: list[LiveRequest] = []     # re-queued at the front (a stack)
        self.stats = StepStats()
        self._jitter_sigma = self.server.step_jitter
        self._wake: asyncio.Event | None = None
        self._stopping = False

    # ------------------------------------------------------------------ requests
    def max_request_tokens(self) -> int:
        return self.server.kv_capacity_tokens - self.k - self.server.block_size

    def submit(self, request: LiveRequest) -> None:
        """Queue a request; too large for the KV cache is a :class:`BadInput`."""
        if request.prompt < 1 or request.output < 1:
            raise BadInput("a request needs at least one prompt and one output token")
        if request.prompt + request.output > self.max_request_tokens():
            raise BadInput(f"a request of {request.prompt + request.output} tokens does not "
                           f"fit in the KV cache ({self.server.kv_capacity_tokens} tokens)")
        request.arrival = self.clock()
        self.waiting.append(request)
        if self.metrics is not None:
            self.metrics.queue(len(self.running), self.queued)
        if self._wake is not None:
            self._wake.set()

    def abort(self, request: LiveRequest) -> None:
        """Drop a request (client gone); its KV blocks are freed at once."""
        if request.done:
            return
        request.aborted = True
        for queue in (self.running, self.waiting, self.preempted):
            if request in queue:
                queue.remove(request)
        self.free_blocks += request.blocks
        request.blocks = 0

    @property
    def queued(self) -> int:
        return len(self.waiting) + len(self.preempted)

    @property
    def busy(self) -> bool:
        return bool(self.running or self.waiting or self.preempted)

    # ------------------------------------------------------------------ one step
    def plan(self) -> StepPlan | None:
        """Schedule one step (mutates block bookkeeping and preemptions, as the engine
        kernel does before timing a step); ``None`` when there is nothing to run."""
        bs = self.server.block_size
        k = self.k
        left = self.server.max_num_batched_tokens
        tokens = kv = n_draft = kv_draft = 0
        entries = []
        preempted = False
        i = 0
        while i < len(self.running):
            r = self.running[i]
            need = r.prompt + r.generated - r.computed
            decoding = r.generated > 0 and need <= 1
            s = min(1 + k if decoding else need, left)
            if s <= 0:
                break
            nb = (r.computed + s + bs - 1) // bs - r.blocks
            self_out = False
            while nb > self.free_blocks:
                victim = self.running.pop()
                self.free_blocks += victim.blocks
                victim.blocks = 0
                victim.computed = 0
                victim.preemptions += 1
                self.preempted.append(victim)
                preempted = True
                if self.metrics is not None:
                    self.metrics.preempted()
                if victim is r:
                    self_out = True
                    break
            if self_out:
                break
            if nb > 0:
                self.free_blocks -= nb
                r.blocks += nb
            left -= s
            tokens += s
            kv += r.computed + s
            if decoding:
                entries.append((r, s, s - 1))
                n_draft += 1
                kv_draft += r.computed + s
            else:
                entries.append((r, s, -1))
                if s == need:            # the prefill completes: drafting starts
                    n_draft += 1
                    kv_draft += r.computed + s
            i += 1
        if not preempted:
            while left > 0 and len(self.running) < self.server.max_num_seqs:
                if self.preempted:
                    r, source = self.preempted[-1], self.preempted
                elif self.waiting:
                    r, source = self.waiting[0], self.waiting
                else:
                    break
                need = r.prompt + r.generated - r.computed
                s = min(need, left)
                nb = (s + bs - 1) // bs
                if nb > self.free_blocks:
                    break
                if source is self.preempted:
                    source.pop()
                else:
                    source.pop(0)
                self.free_blocks -= nb
                r.blocks = nb
                self.running.append(r)
                entries.append((r, s, -1))
                left -= s
                tokens += s
                kv += s
                if s == need:
                    n_draft += 1
                    kv_draft += s
        if tokens == 0:
            return None
        seconds = float(self.model.step_time(tokens=tokens, kv_tokens=kv,
                                             requests=len(entries), k=k, drafting=n_draft,
                                             drafting_kv=kv_draft))
        if self._jitter_sigma:
            sigma = self._jitter_sigma
            seconds *= math.exp(sigma * self.rng.standard_normal() - 0.5 * sigma * sigma)
        return StepPlan(entries=entries, seconds=seconds, tokens=tokens, batch=len(entries))

    def _accepted(self, drafts: int, request: LiveRequest | None = None) -> int:
        if self._tokens is not None and request is not None:
            # the token process: walk this request's own tokens
            if request.guessable is None:
                request.guessable = bool(self.rng.random()
                                         < self._tokens.stationary_guessable())
            accepted, state = self._tokens.cycle(self.rng, np.array([request.guessable]),
                                                 self.k, drafts=np.array([drafts]))
            request.guessable = bool(state[0])
            return int(accepted[0])
        a = self.k - int(np.searchsorted(self._ascending, self.rng.random(), side="right"))
        return min(a, drafts)

    def commit(self, plan: StepPlan, now: float) -> list[tuple[LiveRequest, int, bool]]:
        """Apply a planned step at real time ``now``: commit tokens, time-stamp first
        tokens and completions, free finished requests. Returns ``(request, new tokens,
        finished)`` for every request that got tokens."""
        events = []
        finished = set()
        for r, s, drafts in plan.entries:
            if r.aborted:
                continue
            new = 0
            if drafts >= 0:
                a = 0
                if self.k > 0:
                    a = self._accepted(drafts, r)
                    r.drafted += drafts
                    r.accepted += a
                    if self.metrics is not None:
                        self.metrics.draft(drafts, a)
                r.cycles += 1
                new = min(a + 1, r.output - r.generated)
                r.generated += new
                r.computed = r.prompt + r.generated - 1
            else:
                r.computed += s
                if r.computed == r.prompt + r.generated:
                    r.generated += 1
                    new = 1
                    if r.generated == 1:
                        r.first_token = now
            done = r.generated >= r.output
            if done:
                r.finish = now
                self.free_blocks += r.blocks
                r.blocks = 0
                finished.add(id(r))
            if new or done:
                events.append((r, new, done))
        if finished:
            self.running = [r for r in self.running if id(r) not in finished]
        return events

    # ------------------------------------------------------------------ wall clock
    def stop(self) -> None:
        self._stopping = True
        if self._wake is not None:
            self._wake.set()

    async def run(self) -> None:
        """Step forever (until :meth:`stop`): plan, sleep the step's scaled time on the
        virtual clock, commit, deliver."""
        self._wake = asyncio.Event()
        virtual = None
        last_commit = None
        while not self._stopping:
            if not self.busy:
                virtual = None
                self._wake.clear()
                await self._wake.wait()
                continue
            plan = self.plan()
            if plan is None:
                # Nothing fits (cannot happen for admitted sizes): do not spin.
                await asyncio.sleep(0.01)
                continue
            now = self.clock()
            if virtual is None:
                virtual = now
                last_commit = now
            wanted = plan.seconds * self.time_scale
            target = virtual + wanted
            delay = target - now
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)       # let HTTP handlers run between steps
            now = self.clock()
            late = now - target
            if late > self.max_lag_s:
                self.stats.clock_resets += 1
                self.stats.lost_s += late
                virtual = now
            else:
                virtual = target
            real = now - last_commit
            last_commit = now
            self.stats.steps += 1
            self.stats.simulated_s += wanted
            self.stats.real_s += real
            self.stats.abs_error_s += abs(real - wanted)
            self.stats.lateness.append(max(late, 0.0))
            if len(self.stats.lateness) > 200_000:
                del self.stats.lateness[:100_000]
            events = self.commit(plan, now)
            if self.metrics is not None:
                self.metrics.step(wanted, real, plan.batch)
            for r, new, done in events:
                if r.notify is not None:
                    r.notify(new, done)
            if self.metrics is not None:
                self.metrics.queue(len(self.running), self.queued)
