"""Load drivers: run one load point (a constant rate R, N requests) against a live
OpenAI-compatible endpoint and return it as one tidy row (CONTRACT columns).

- :func:`run_builtin`: a small asyncio HTTP/1.1 client (no dependency beyond the standard
  library): requests sent at fixed spacing 1/R (GuideLLM's ``constant`` profile),
  streamed so TTFT and ITL are measured, each bounded by a timeout, the whole point by a
  deadline. The first tenth of the requests warm the server up and are not measured.
- :func:`run_guidellm`: GuideLLM in a subprocess (``guidellm run``/``benchmark`` with a
  constant profile and a request cap), its JSON report read by ``bayesspec ingest``'s
  GuideLLM reader. Used when GuideLLM is importable.

Speculative-decoding counters come from the server's ``/metrics`` scraped before and
after the point (:mod:`bayesspec.ingest.prometheus`). An endpoint that cannot be reached
raises :class:`Unreachable` naming it.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import numpy as np

__all__ = ["Endpoint", "Unreachable", "PointSpec", "run_builtin", "run_guidellm",
           "scrape_metrics", "WARMUP_FRACTION"]

#: A target rate at or above this sends every request at once (a throughput burst).
BURST_RATE = 1e5
#: Share of a point's requests that warm the server up and are left out of its summary.
WARMUP_FRACTION = 0.1


class Unreachable(Exception):
    """An endpoint that refused, timed out or answered every request with an error."""

    def __init__(self, endpoint: "Endpoint", reason: str):
        self.endpoint = endpoint
        self.reason = reason
        super().__init__(f"endpoint k={endpoint.k} ({endpoint.url}) is unreachable: {reason}")


@dataclass(frozen=True)
class Endpoint:
    """One live server configuration: its draft length (0: dense) and base URL."""

    k: int
    url: str
    alpha: float | None = None

    @property
    def host_port(self) -> tuple[str, int]:
        parts = urlsplit(self.url)
        return parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https"
                                                             else 80)

    @property
    def base_path(self) -> str:
        path = urlsplit(self.url).path.rstrip("/")
        return path[:-3] if path.endswith("/v1") else path


@dataclass(frozen=True)
class PointSpec:
    rate: float
    requests: int
    prompt_tokens: int
    output_tokens: int
    model: str | None = None
    timeout_s: float = 60.0


# --------------------------------------------------------------------------- HTTP

async def _http(endpoint: Endpoint, method: str, path: str, body: bytes | None,
                timeout: float):
    host, port = endpoint.host_port
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    head = (f"{method} {endpoint.base_path}{path} HTTP/1.1\r\nhost: {host}:{port}\r\n"
            "connection: close\r\n")
    if body is not None:
        head += f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
    writer.write(head.encode() + b"\r\n" + (body or b""))
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), timeout)
    parts = status_line.decode("latin-1").split()
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    headers = {}
    while True:
        line = await asyncio.wait_for(reader.readline(), timeout)
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return reader, writer, status, headers


async def _body_chunks(reader, headers, timeout: float):
    """The response body as it arrives (chunked, sized, or until close)."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size_line = await asyncio.wait_for(reader.readline(), timeout)
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await asyncio.wait_for(reader.readline(), timeout)
                return
            data = await asyncio.wait_for(reader.readexactly(size + 2), timeout)
            yield data[:-2]
    elif "content-length" in headers:
        yield await asyncio.wait_for(reader.readexactly(int(headers["content-length"])),
                                     timeout)
    else:
        yield await asyncio.wait_for(reader.read(), timeout)


async def _get(endpoint: Endpoint, path: str, timeout: float) -> tuple[int, bytes]:
    reader, writer, status, headers = await _http(endpoint, "GET", path, None, timeout)
    try:
        body = b"".join([chunk async for chunk in _body_chunks(reader, headers, timeout)])
    finally:
        writer.close()
    return status, body


async def _completion(endpoint: Endpoint, spec: PointSpec, timeout: float) -> dict:
    """One streamed completion: send, first-token and finish times, tokens, error."""
    body = {"prompt": "x " * max(int(spec.prompt_tokens) - 1, 0) + "x",
            "max_tokens": int(spec.output_tokens), "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True}
    if spec.model:
        body["model"] = spec.model
    sent = time.monotonic()
    out = {"sent": sent, "first": np.nan, "end": np.nan, "tokens": 0, "error": None}
    try:
        reader, writer, status, headers = await _http(
            endpoint, "POST", "/v1/completions", json.dumps(body).encode(), timeout)
        try:
            if status != 200:
                out["error"] = f"HTTP {status}"
                return out
            buffer = b""
            events = 0
            async for chunk in _body_chunks(reader, headers, timeout):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    line = line.strip()
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        continue
                    event = json.loads(data)
                    if event.get("choices"):
                        events += 1
                        if np.isnan(out["first"]):
                            out["first"] = time.monotonic()
                    usage = event.get("usage")
                    if usage:
                        out["tokens"] = int(usage.get("completion_tokens", 0))
            out["end"] = time.monotonic()
            out["tokens"] = out["tokens"] or events
        finally:
            writer.close()
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as error:
        out["error"] = type(error).__name__ + (f": {error}" if str(error) else "")
    return out


def scrape_metrics(endpoint: Endpoint, timeout: float = 10.0) -> str | None:
    """The server's Prometheus text, or None when it has no /metrics."""
    async def go():
        return await _get(endpoint, "/metrics", timeout)
    try:
        status, body = asyncio.run(go())
    except (OSError, asyncio.TimeoutError) as error:
        raise Unreachable(endpoint, f"/metrics: {type(error).__name__} {error}") from None
    return body.decode("utf-8", "replace") if status == 200 else None


def check_reachable(endpoint: Endpoint, timeout: float = 10.0) -> None:
    """A cheap GET of /v1/models; :class:`Unreachable` when nothing answers."""
    async def go():
        return await _get(endpoint, "/v1/models", timeout)
    try:
        status, _ = asyncio.run(go())
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as error:
        raise Unreachable(endpoint, f"{type(error).__name__}: {error}") from None
    if status >= 500 or status == 0:
        raise Unreachable(endpoint, f"/v1/models answered HTTP {status}")


# --------------------------------------------------------------------------- built-in

async def _drive(endpoint: Endpoint, spec: PointSpec) -> list[dict]:
    start = time.monotonic() + 0.05
    deadline = spec.requests / spec.rate + spec.timeout_s + 5.0

    async def one(i):
        delay = start + i / spec.rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        return await _completion(endpoint, spec, spec.timeout_s)

    tasks = [asyncio.ensure_future(one(i)) for i in range(spec.requests)]
    done, pending = await asyncio.wait(tasks, timeout=deadline)
    for task in pending:
        task.cancel()
    results = []
    for task in tasks:
        if task in done and not task.cancelled() and task.exception() is None:
            results.append(task.result())
        else:
            results.append({"sent": np.nan, "first": np.nan, "end": np.nan, "tokens": 0,
                            "error": "deadline"})
    return results


def summarise(results: list[dict], spec: PointSpec) -> dict:
    """The tidy measurement columns of one point from its per-request results."""
    burst = spec.rate >= BURST_RATE
    warm = 0 if burst else int(np.floor(WARMUP_FRACTION * len(results)))
    measured = results[warm:]
    ok = [r for r in measured if r["error"] is None and np.isfinite(r["end"])]
    failed = len(measured) - len(ok)
    row = {"rps_target": np.nan if burst else float(spec.rate),
           "strategy": "throughput" if burst else "constant",
           "n_requests": len(ok), "failed_requests": failed}
    if len(ok) < 2:
        row.update(rps=np.nan, latency_mean_s=np.nan, saturated=True)
        return row
    sent = np.array([r["sent"] for r in ok])
    latency = np.array([r["end"] - r["sent"] for r in ok])
    ttft = np.array([r["first"] - r["sent"] for r in ok])
    tokens = np.array([r["tokens"] for r in ok], dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        itl = np.where(tokens > 1, (latency - ttft) / (tokens - 1), np.nan)
    span = sent.max() - sent.min()
    if burst:   # all at once: the rate the server completed them at is its ceiling
        rps = len(ok) / (max(r["end"] for r in ok) - sent.min())
    else:
        rps = (len(ok) - 1) / span if span > 0 else float(spec.rate)
    thirds = np.array_split(latency, 3)
    # A queue that keeps growing (the server cannot keep up) or requests that fail:
    # the point is past saturation and the fit sets it aside.
    growing = thirds[-1].mean() > 1.5 * thirds[0].mean()
    row.update({
        "rps": rps, "latency_mean_s": float(latency.mean()),
        "latency_std_s": float(latency.std(ddof=1)),
        **{f"latency_p{q}_s": float(np.percentile(latency, q)) for q in (50, 90, 95, 99)},
        "ttft_mean_s": float(np.nanmean(ttft)),
        **{f"ttft_p{q}_s": float(np.nanpercentile(ttft, q)) for q in (50, 90, 95, 99)},
        "mean_concurrency": float(rps * latency.mean()),
        "saturated": bool(burst or growing or failed > 0.05 * len(measured)
                          or rps < 0.9 * spec.rate),
    })
    if np.isfinite(itl).any():
        row["itl_mean_s"] = float(np.nanmean(itl))
        row.update({f"itl_p{q}_s": float(np.nanpercentile(itl, q)) for q in (50, 90, 95, 99)})
    return row


def run_builtin(endpoint: Endpoint, spec: PointSpec) -> tuple[dict, float]:
    """(the point's measurement columns, wall seconds it took)."""
    started = time.monotonic()
    results = asyncio.run(_drive(endpoint, spec))
    if all(r["error"] is not None for r in results):
        errors = {r["error"] for r in results}
        raise Unreachable(endpoint, "every request failed (" + "; ".join(sorted(errors))[:200]
                          + ")")
    return summarise(results, spec), time.monotonic() - started


# --------------------------------------------------------------------------- GuideLLM

def run_guidellm(endpoint: Endpoint, spec: PointSpec, folder, version: str) -> tuple[dict, float]:
    """One constant-rate point with GuideLLM in a subprocess, read back by the ingest
    reader (the first benchmark of its report)."""
    import shlex
    import subprocess
    from pathlib import Path

    from bayesspec.ingest import ingest_files
    from bayesspec.loadtest.commands import command_lines

    out = Path(folder) / f"guidellm-k{endpoint.k}-r{spec.rate:g}-n{spec.requests}.json"
    entry = {"k": endpoint.k, "alpha": endpoint.alpha, "rps": spec.rate,
             "requests": spec.requests}
    line = command_lines(entry, target=endpoint.url, model=spec.model or "model",
                         prefill=spec.prompt_tokens, decode=spec.output_tokens,
                         version=version)["guidellm"]
    line = line.rsplit(" ", 1)[0] + " " + (f"--output-path {out}"
                                           if "--output-path" in line
                                           else f"kind=json,path={out}")
    started = time.monotonic()
    run = subprocess.run(shlex.split(line), capture_output=True, text=True,
                         timeout=spec.requests / spec.rate + 10 * spec.timeout_s)
    if run.returncode != 0:
        raise Unreachable(endpoint, "guidellm failed: "
                          + (run.stderr.strip().splitlines() or ["?"])[-1][:200])
    rows = ingest_files([out], flags={"k": endpoint.k}, check=False).rows
    row = {k: v for k, v in rows.iloc[0].to_dict().items()
           if k not in {"verifier", "drafter", "k", "alpha"}}
    return row, time.monotonic() - started
