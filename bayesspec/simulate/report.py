"""A simulated sweep written as a GuideLLM benchmark report (schema version 2).

The shape follows FORMATS.md: top-level ``metadata`` (``version`` = 2), ``config``
(``config.spec.backend`` / ``config.spec.profile``), ``benchmarks`` (one per load point)
and ``conclusions``. Each benchmark has ``config.strategy`` (``type_``, ``rate`` for
constant/poisson, ``max_concurrency``), ``config.profile`` (the sweep's synchronous and
throughput rates and the async rates), ``start_time``/``end_time``/``duration`` (the
measured window), and ``metrics`` whose distributions all have GuideLLM's fields
(mean, median, mode, variance, std_dev, min, max, count, total_sum, percentiles p001 to
p999). Latencies are seconds, TTFT/ITL/TPOT milliseconds, as GuideLLM writes them.

GuideLLM does not record speculative settings; they travel in ``x_bayesspec`` blocks
(ignored by GuideLLM readers), together with what only the simulator knows.
"""

from __future__ import annotations

import json
import math
import os
import platform
import uuid
from pathlib import Path

import numpy as np

from bayesspec.outputs import write_text_atomic
from bayesspec.simulate.engine import THROUGHPUT_STREAMS, PointResult
from bayesspec.simulate.sweep import ENGINE, SweepResult

__all__ = ["guidellm_report", "write_guidellm_json", "distribution"]

#: GuideLLM version whose report layout this mimics (FORMATS.md: 0.8.1 was inspected).
GUIDELLM_VERSION = "0.8.1"
#: Wall-clock origin of the simulated runs: fixed, so a seed fixes the file byte for byte.
EPOCH = 1_767_225_600.0   # 2026-01-01T00:00:00Z
_PERCENTILES = {"p001": 0.1, "p01": 1.0, "p05": 5.0, "p10": 10.0, "p25": 25.0, "p50": 50.0,
                "p75": 75.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}


def _finite(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def distribution(values, weights=None) -> dict:
    """GuideLLM's distribution summary of ``values`` (optionally time-weighted)."""
    values = np.asarray(values, dtype=float)
    w = np.ones_like(values) if weights is None else np.asarray(weights, dtype=float)
    keep = np.isfinite(values) & np.isfinite(w) & (w > 0)
    values, w = values[keep], w[keep]
    if values.size == 0:
        zero = {k: 0.0 for k in ("mean", "median", "mode", "variance", "std_dev", "min", "max",
                                 "total_sum")}
        return {**zero, "count": 0, "percentiles": {k: 0.0 for k in _PERCENTILES}}
    order = np.argsort(values, kind="stable")
    v, w = values[order], w[order]
    total = w.sum()
    mean = float((v * w).sum() / total)
    variance = float((w * (v - mean) ** 2).sum() / total)
    cum = np.cumsum(w) / total

    def pct(q):
        if weights is None:   # the same interpolation as the tidy rows' percentiles
            return float(np.percentile(v, q))
        return float(v[min(np.searchsorted(cum, q / 100.0, side="left"), v.size - 1)])

    uniq, inverse = np.unique(v, return_inverse=True)
    mode = float(uniq[np.argmax(np.bincount(inverse, weights=w))])
    return {
        "mean": mean, "median": pct(50.0), "mode": mode, "variance": variance,
        "std_dev": math.sqrt(variance), "min": float(v[0]), "max": float(v[-1]),
        "count": int(values.size), "total_sum": float((v * w).sum()),
        "percentiles": {k: pct(q) for k, q in _PERCENTILES.items()},
    }


def _status(dist: dict) -> dict:
    return {"successful": dist, "errored": None, "incomplete": None, "total": dist}


def _concurrency(point: PointResult) -> tuple[np.ndarray, np.ndarray]:
    """Requests in the system over the window: each level and how long it held."""
    t0, t1 = point.window
    start = int(((point.arrival <= t0) & (point.finish > t0)).sum())
    times = np.concatenate([point.arrival, point.finish])
    steps = np.concatenate([np.ones(point.arrival.size), -np.ones(point.finish.size)])
    inside = (times > t0) & (times < t1)
    order = np.argsort(times[inside], kind="stable")
    times, steps = times[inside][order], steps[inside][order]
    edges = np.concatenate([[t0], times, [t1]])
    levels = start + np.concatenate([[0.0], np.cumsum(steps)])
    return levels, np.diff(edges)


def _rates_over_time(point: PointResult) -> np.ndarray:
    """Completions per second in one-second buckets of the window."""
    t0, t1 = point.window
    done = point.finish[point.measured]
    n_buckets = max(int(math.ceil(t1 - t0)), 1)
    counts, _ = np.histogram(done, bins=n_buckets, range=(t0, t0 + n_buckets))
    return counts.astype(float)


def _benchmark(result: SweepResult, index: int, point: PointResult, start: float,
               profile: dict) -> dict:
    s = result.setup
    m = point.measured
    summary = point.summary
    latency = point.latency[m]
    ttft_ms = (point.first_token[m] - point.arrival[m]) * 1e3
    out = point.output[m]
    multi = out > 1
    itl_ms = (point.finish[m][multi] - point.first_token[m][multi]) / (out[multi] - 1) * 1e3
    tpot_ms = latency / out * 1e3
    levels, held = _concurrency(point)
    strategy = {"type_": point.arrivals.strategy}
    if point.arrivals.open_loop:
        strategy["rate"] = float(point.arrivals.rate)
        strategy["max_concurrency"] = None
    elif point.arrivals.strategy == "throughput":
        strategy["max_concurrency"] = int(point.arrivals.streams or THROUGHPUT_STREAMS)
    elif point.arrivals.strategy == "synchronous":
        strategy["max_concurrency"] = 1
    else:
        strategy["streams"] = int(point.arrivals.streams)
    duration = summary["duration_s"]
    n = int(m.sum())
    rps_dist = distribution(_rates_over_time(point))
    rps_dist["mean"] = n / duration if duration > 0 else 0.0
    run_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"bayesspec-sim:{s.verifier}:{s.drafter}:"
                                                f"{s.spec}:{s.workload}:{result.seed}"))
    requests = []
    for i in np.flatnonzero(m)[:: max(1, n // 20)][:20]:
        requests.append({
            "request_latency": float(point.finish[i] - point.arrival[i]),
            "prompt_tokens": int(point.prompt[i]),
            "output_tokens": int(point.output[i]),
            "time_to_first_token_ms": float((point.first_token[i] - point.arrival[i]) * 1e3),
            "request_start_time": EPOCH + start + float(point.arrival[i]),
            "request_end_time": EPOCH + start + float(point.finish[i]),
        })
    return {
        "type_": "generative_benchmark",
        "id_": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{run_id}:{index}")),
        "run_id": run_id,
        "run_index": index,
        "config": {
            "strategy": strategy,
            "profile": profile,
            "backend": {"kind": "bayesspec_sim", "model": s.verifier,
                        "target": f"sim://{s.gpu}"},
        },
        "start_time": EPOCH + start + point.window[0],
        "end_time": EPOCH + start + point.window[1],
        "duration": duration,
        "metrics": {
            "request_totals": {"successful": n, "errored": 0, "incomplete": 0, "total": n},
            "requests_per_second": _status(rps_dist),
            "request_concurrency": _status(distribution(levels, held)),
            "request_latency": _status(distribution(latency)),
            "time_to_first_token_ms": _status(distribution(ttft_ms)),
            "inter_token_latency_ms": _status(distribution(itl_ms)),
            "time_per_output_token_ms": _status(distribution(tpot_ms)),
            "prompt_token_count": _status(distribution(point.prompt[m])),
            "output_token_count": _status(distribution(out)),
            "output_tokens_per_second": _status(distribution(
                [out.sum() / duration if duration > 0 else 0.0])),
        },
        "requests": {"successful": requests, "errored": [], "incomplete": []},
        "x_bayesspec": {
            "rps": summary["rps"],
            "saturated": summary["saturated"],
            "saturation_reason": summary.get("saturation_reason", ""),
            "mean_concurrency": summary["mean_concurrency"],
            "num_drafts": summary["num_drafts"],
            "draft_tokens": summary["draft_tokens"],
            "accepted_tokens": summary["accepted_tokens"],
            "preempted_requests": summary["preempted_requests"],
            "warmup_requests": summary.get("warmup_requests", 0),
            "note": "rps of a throughput run counts decoding progress in the window, "
                    "not completions (see bayesspec.simulate.engine)",
        },
    }


def guidellm_report(result: SweepResult) -> dict:
    """The sweep as a GuideLLM (schema v2) report, as a plain dict."""
    from bayesspec import __version__

    s = result.setup
    rates = [p.summary["rps"] for p in result.points]
    sync = [p.summary["rps"] for p in result.points if p.arrivals.strategy == "synchronous"]
    thr = [p.summary["rps"] for p in result.points if p.arrivals.strategy == "throughput"]
    asyncs = [float(p.arrivals.rate) for p in result.points if p.arrivals.open_loop]
    profile = {"type_": result.profile, "sweep_size": result.n_points,
               "synchronous_rate": _finite(sync[0]) if sync else None,
               "throughput_rate": _finite(thr[0]) if thr else None,
               "async_rates": asyncs, "measured_rates": [_finite(r) for r in rates]}
    benchmarks = []
    start = 0.0
    for i, point in enumerate(result.points):
        benchmarks.append(_benchmark(result, i, point, start, profile))
        start += float(np.nanmax(point.finish)) + 1.0
    data = (f"kind=synthetic_text,prompt_tokens={s.workload.prefill},"
            f"output_tokens={s.workload.decode}")
    return {
        "metadata": {
            "version": 2,
            "guidellm_version": GUIDELLM_VERSION,
            "python_version": platform.python_version(),
            "platform": "bayesspec-sim",
            "x_bayesspec": {
                "engine": ENGINE, "engine_version": __version__, "seed": result.seed,
                "verifier": s.verifier, "drafter": s.drafter if s.spec.k else "",
                "method": s.method if s.spec.k else "", "k": s.spec.k,
                "alpha": _finite(s.spec.label()) if s.spec.k else None,
                "acceptance_rates": [float(r) for r in s.spec.position_rates()],
                "gpu": s.gpu, "prefill_tokens": s.workload.prefill,
                "decode_tokens": s.workload.decode, "step_model": s.step_model.name,
            },
        },
        "config": {
            "spec": {
                "backend": {"kind": "bayesspec_sim", "target": f"sim://{s.gpu}",
                            "model": s.verifier},
                "profile": {"kind": result.profile, "sweep_size": result.n_points},
                "data": [data],
            },
        },
        "benchmarks": benchmarks,
        "conclusions": {},
    }


def write_guidellm_json(path: str | os.PathLike, result: SweepResult) -> None:
    """Write :func:`guidellm_report` of ``result`` to ``path`` atomically."""
    write_text_atomic(path, json.dumps(guidellm_report(result), indent=1, allow_nan=False)
                      + "\n")
