"""GuideLLM-like sweeps: synchronous run, throughput run, evenly spaced rates between.

:class:`Setup` bundles what a configuration is (verifier, drafter, GPU, lengths, k,
acceptance, server limits, step model); :func:`sweep` runs it as GuideLLM's ``sweep``
profile does, :func:`at_rates` at given rates, and both return tidy rows (CONTRACT.md)
plus the per-point results for a GuideLLM-shaped report.

Seeds: every load point draws from ``SeedSequence([seed, group, point])`` where ``group``
is a stable hash of (verifier, prefill, decode). A dense sweep and its speculative
variants at the same seed therefore draw their arrivals and lengths from the same streams
at each point index (common random numbers), which makes their ratios less noisy.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from bayesspec.errors import BadInput

from bayesspec.simulate.engine import (THROUGHPUT_STREAMS, Arrivals, PointResult, ServerConfig, Workload,
                     simulate_point)
from bayesspec.simulate.spec import SpecConfig
from bayesspec.simulate.stepmodel import (RooflineParams, StepModel, default_step_model, kv_capacity_tokens,
                        synthetic_eagle_head)

__all__ = ["Setup", "SweepResult", "setup", "sweep", "at_rates", "at_concurrency",
           "timed_rates", "ENGINE"]

ENGINE = "bayesspec-sim"


@dataclass(frozen=True)
class Setup:
    """One configuration to sweep: labels for the tidy rows and what the engine needs."""

    verifier: str
    gpu: str
    step_model: StepModel
    server: ServerConfig
    workload: Workload
    spec: SpecConfig = SpecConfig()
    drafter: str = ""
    method: str = ""
    verifier_params_b: float = float("nan")
    drafter_params_b: float = float("nan")
    experts_active: int | None = None
    experts_total: int | None = None

    def labels(self) -> dict:
        """Design and provenance columns shared by every row of this configuration."""
        from bayesspec import __version__

        return {
            "verifier": self.verifier,
            "drafter": self.drafter if self.spec.k > 0 else "",
            "k": self.spec.k,
            "alpha": self.spec.label(),
            "prefill_tokens": self.workload.prefill,
            "decode_tokens": self.workload.decode,
            "gpu": self.gpu,
            "engine": ENGINE,
            "engine_version": __version__,
            "method": self.method if self.spec.k > 0 else "",
            "verifier_params_b": self.verifier_params_b,
            "drafter_params_b": self.drafter_params_b if self.spec.k > 0 else float("nan"),
            "experts_active": self.experts_active if self.experts_active else pd.NA,
            "experts_total": self.experts_total if self.experts_total else pd.NA,
        }

    def group_key(self) -> int:
        text = f"{self.verifier}|{self.workload.prefill}|{self.workload.decode}"
        return zlib.crc32(text.encode())


def setup(verifier: str, gpu: str = "H100", *, drafter: str | None = None, k: int = 0,
          alpha: float | None = None, rates: tuple[float, ...] | None = None,
          persistence: tuple[float, float] | None = None, prefill: int = 512, decode: int = 512, length_dist: str = "fixed",
          length_cv: float = 0.0, catalog=None, step_model: StepModel | None = None,
          roofline_params: RooflineParams = RooflineParams(), max_num_batched_tokens: int = 8192,
          max_num_seqs: int = 1024, kv_capacity: int | None = None,
          gpu_memory_utilization: float = 0.9, step_jitter: float = 0.02) -> Setup:
    """Build a :class:`Setup` from catalog names.

    With ``k > 0`` and no ``drafter``, the verifier's EAGLE-3 head from the catalog is used
    (or, if the catalog has none, an EAGLE-3-shaped head synthesised from the verifier's
    shape). ``step_model`` overrides the default (public fit or roofline).
    """
    if catalog is None:
        from bayesspec.data.catalog import default_catalog

        catalog = default_catalog()
    spec = SpecConfig(k=k, alpha=alpha, rates=tuple(rates) if rates is not None else None,
                      persistence=tuple(persistence) if persistence is not None else None)
    v_card = catalog.model(verifier)
    if not v_card.is_verifier:
        raise BadInput(f"{v_card.name} is a drafter, not a verifier", argument="verifier")
    g_card = catalog.gpu(gpu)
    d_card = None
    if drafter:
        d_card = catalog.model(drafter)
        if not d_card.is_drafter:
            raise BadInput(f"{d_card.name} cannot draft (role {d_card.role!r})",
                           argument="drafter")
        if d_card.target and catalog.find_model(d_card.target) is not v_card:
            raise BadInput(f"{d_card.name} is a head for {d_card.target}, not for "
                           f"{v_card.name}", argument="drafter")
    elif spec.k > 0:
        heads = [m for m in catalog.drafters_for(v_card.name) if m.architecture == "eagle3"]
        d_card = heads[0] if heads else synthetic_eagle_head(v_card)
    if spec.k == 0:
        d_card_for_memory = None
    else:
        d_card_for_memory = d_card
    model = step_model or default_step_model(v_card, g_card, d_card if spec.k > 0 else None,
                                             params=roofline_params)
    capacity = kv_capacity if kv_capacity is not None else kv_capacity_tokens(
        v_card, g_card, d_card_for_memory, gpu_memory_utilization=gpu_memory_utilization)
    server = ServerConfig(max_num_batched_tokens=max_num_batched_tokens,
                          max_num_seqs=max_num_seqs, kv_capacity_tokens=capacity,
                          step_jitter=step_jitter)
    method = ""
    if d_card is not None:
        method = "eagle3" if d_card.architecture == "eagle3" else "draft_model"
    return Setup(
        verifier=v_card.name, gpu=g_card.name, step_model=model, server=server,
        workload=Workload(prefill, decode, length_dist, length_cv), spec=spec,
        drafter=d_card.name if d_card is not None else "", method=method,
        verifier_params_b=v_card.params_total_b,
        drafter_params_b=d_card.params_total_b if d_card is not None else float("nan"),
        experts_active=v_card.experts_active or None,
        experts_total=v_card.experts_total or None,
    )


@dataclass
class SweepResult:
    """Tidy rows plus the per-point results behind them."""

    setup: Setup
    rows: pd.DataFrame
    points: list[PointResult] = field(default_factory=list)
    seed: int = 0
    profile: str = "sweep"
    n_points: int = 0


def _row(s: Setup, res: PointResult, seed: int) -> dict:
    row = s.labels()
    summary = dict(res.summary)
    row.update({
        "rps": summary["rps"],
        "latency_mean_s": summary["latency_mean_s"],
        "rps_target": summary["rps_target"],
        "n_requests": summary["n_requests"],
        "latency_std_s": summary["latency_std_s"],
        **{f"latency_p{q}_s": summary[f"latency_p{q}_s"] for q in (50, 90, 95, 99)},
        "ttft_mean_s": summary["ttft_mean_s"],
        "itl_mean_s": summary["itl_mean_s"],
        **{f"ttft_p{q}_s": summary[f"ttft_p{q}_s"] for q in (50, 90, 95, 99)},
        **{f"itl_p{q}_s": summary[f"itl_p{q}_s"] for q in (50, 90, 95, 99)},
        "mean_concurrency": summary["mean_concurrency"],
        "max_concurrency": _in_flight_limit(res.arrivals),
        "max_num_seqs": s.server.max_num_seqs,
        "kv_cache_tokens": s.server.kv_capacity_tokens,
        "saturated": summary["saturated"],
        "saturation_reason": summary["saturation_reason"],
        "strategy": summary["strategy"],
        "num_drafts": summary["num_drafts"],
        "draft_tokens": summary["draft_tokens"],
        "accepted_tokens": summary["accepted_tokens"],
        **{f"accepted_tokens_pos{i + 1}": count
           for i, count in enumerate(summary.get("accepted_tokens_pos", []))},
        "source": f"{ENGINE} seed={seed}",
    })
    return row


def _in_flight_limit(arrivals: Arrivals) -> float:
    """The client's limit on requests in flight (a closed loop), NaN for an open loop."""
    if arrivals.open_loop:
        return float("nan")
    if arrivals.strategy == "synchronous":
        return 1.0
    return float(arrivals.streams or THROUGHPUT_STREAMS)


def _point_seed(s: Setup, seed: int, index: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([int(seed), s.group_key(), int(index)])


def _check_common(n_requests: int, seed) -> None:
    if int(n_requests) != n_requests or n_requests < 10:
        raise BadInput(f"need at least 10 requests per load point, got {n_requests}",
                       argument="requests")
    if int(seed) != seed or seed < 0:
        raise BadInput(f"seed must be a non-negative integer, got {seed}", argument="seed")


def sweep(s: Setup, n_points: int = 9, *, n_requests: int = 1000, seed: int = 0,
          arrivals: str = "poisson", warmup: float = 0.1, cooldown: float = 0.1,
          throughput_requests: int | None = None) -> SweepResult:
    """GuideLLM's sweep profile: ``n_points`` benchmarks in all.

    A synchronous run (one request at a time), a throughput run (clients sending back to
    back, to find the ceiling; always marked saturated), then ``n_points - 2`` rates evenly
    spaced strictly between the two measured rates, as ``constant`` or ``poisson`` arrivals.
    The throughput run uses at least four times its client streams in requests, so that
    the server stays full long enough to measure its ceiling.
    """
    _check_common(n_requests, seed)
    if int(n_points) != n_points or n_points < 3:
        raise BadInput(f"a sweep needs at least 3 points, got {n_points}", argument="sweep")
    if arrivals not in ("constant", "poisson"):
        raise BadInput(f"sweep arrivals must be constant or poisson, got {arrivals!r}")
    kw = dict(warmup=warmup, cooldown=cooldown)
    sync = simulate_point(s.step_model, s.server, s.workload, Arrivals("synchronous"), s.spec,
                          n_requests=n_requests, seed=_point_seed(s, seed, 0), **kw)
    n_thr = throughput_requests or max(int(n_requests), 4 * THROUGHPUT_STREAMS)
    thr = simulate_point(s.step_model, s.server, s.workload, Arrivals("throughput"), s.spec,
                         n_requests=n_thr, seed=_point_seed(s, seed, 1), **kw)
    low, high = sync.summary["rps"], thr.summary["rps"]
    points = [sync]
    if high > low:
        for i, rate in enumerate(np.linspace(low, high, int(n_points))[1:-1]):
            points.append(simulate_point(s.step_model, s.server, s.workload,
                                         Arrivals(arrivals, float(rate)), s.spec,
                                         n_requests=n_requests,
                                         seed=_point_seed(s, seed, i + 2), **kw))
    points.append(thr)
    rows = pd.DataFrame([_row(s, p, seed) for p in points])
    return SweepResult(setup=s, rows=rows, points=points, seed=int(seed), profile="sweep",
                       n_points=int(n_points))


def at_rates(s: Setup, rates, *, n_requests: int = 1000, seed: int = 0,
             arrivals: str = "poisson", warmup: float = 0.1,
             cooldown: float = 0.1) -> SweepResult:
    """Open-loop runs at the given request rates (one row each)."""
    _check_common(n_requests, seed)
    rates = [float(r) for r in rates]
    if not rates or any(not (r > 0 and math.isfinite(r)) for r in rates):
        raise BadInput("rates must be positive numbers", argument="rps")
    points = [simulate_point(s.step_model, s.server, s.workload, Arrivals(arrivals, r), s.spec,
                             n_requests=n_requests, seed=_point_seed(s, seed, i + 2),
                             warmup=warmup, cooldown=cooldown)
              for i, r in enumerate(rates)]
    rows = pd.DataFrame([_row(s, p, seed) for p in points])
    return SweepResult(setup=s, rows=rows, points=points, seed=int(seed), profile=arrivals,
                       n_points=len(points))


def at_concurrency(s: Setup, levels, *, n_requests: int = 1000, seed: int = 0,
                   warmup: float = 0.1, cooldown: float = 0.1) -> SweepResult:
    """Closed-loop runs, one per level: that many clients each sending its next request
    when the last one finishes (``vllm bench serve --max-concurrency C``, GuideLLM's
    ``concurrent`` profile). Each point runs at least ``n_requests`` requests and long
    enough for every client to complete several (20 per client), so that its window is a
    steady state."""
    _check_common(n_requests, seed)
    levels = [int(c) for c in levels]
    if not levels or any(c < 1 for c in levels):
        raise BadInput("concurrency levels must be whole numbers >= 1", argument="concurrency")
    points = [simulate_point(s.step_model, s.server, s.workload,
                             Arrivals("synchronous") if c == 1 else Arrivals("concurrent",
                                                                              streams=c),
                             s.spec, n_requests=max(int(n_requests), 20 * c),
                             seed=_point_seed(s, seed, i + 2), warmup=warmup,
                             cooldown=cooldown)
              for i, c in enumerate(levels)]
    rows = pd.DataFrame([_row(s, p, seed) for p in points])
    return SweepResult(setup=s, rows=rows, points=points, seed=int(seed), profile="concurrent",
                       n_points=len(points))


def timed_rates(s: Setup, rates, duration_s: float, *, seed: int = 0,
                arrivals: str = "constant", warmup: float = 0.1,
                cooldown: float = 0.1) -> SweepResult:
    """Open-loop runs of a fixed duration at the given rates, as a load test with a time
    limit per rate (GuideLLM's ``--max-seconds``) runs them: each rate sends
    rate x duration_s requests into its measured window (at least 10 in all), so low
    rates measure few requests and their percentiles are thin."""
    if not (duration_s > 0 and math.isfinite(duration_s)):
        raise BadInput(f"duration must be a positive number of seconds, got {duration_s}",
                       argument="duration")
    _check_common(10, seed)
    rates = [float(r) for r in rates]
    if not rates or any(not (r > 0 and math.isfinite(r)) for r in rates):
        raise BadInput("rates must be positive numbers", argument="rps")
    measured_share = 1.0 - warmup - cooldown
    points = [simulate_point(s.step_model, s.server, s.workload, Arrivals(arrivals, r), s.spec,
                             n_requests=max(10, int(round(r * duration_s / measured_share))),
                             seed=_point_seed(s, seed, i + 2), warmup=warmup,
                             cooldown=cooldown)
              for i, r in enumerate(rates)]
    rows = pd.DataFrame([_row(s, p, seed) for p in points])
    return SweepResult(setup=s, rows=rows, points=points, seed=int(seed), profile=arrivals,
                       n_points=len(points))
