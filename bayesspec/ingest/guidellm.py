"""GuideLLM benchmark reports (FORMATS.md): schema v1 (GuideLLM 0.5.x-0.6.x: ``metadata``,
``args``, ``benchmarks``) and v2 (0.7+: ``metadata``, ``config``, ``benchmarks``), JSON or
YAML, told apart by ``metadata.version``. Reports of GuideLLM 0.3/0.4 (no ``metadata``,
``benchmarks[i].run_stats``) are refused with a clear message.

One benchmark is one load point. Achieved rate = ``metrics.request_totals.successful /
duration`` (not ``requests_per_second.mean``); latency from
``metrics.request_latency.successful``; TTFT and ITL are milliseconds in the file and
seconds in the tidy rows.
"""

from __future__ import annotations

import json

from bayesspec.data.filekinds import is_guidellm
from bayesspec.ingest.fields import Field
from bayesspec.ingest.records import Point, Report, add_fact

KNOWN_VERSIONS = {1: "GuideLLM 0.5.x-0.6.x", 2: "GuideLLM 0.7+"}
OPEN_LOOP = ("constant", "poisson")
_DESIGN_KEYS = {  # x_bayesspec key (the simulator's extension) -> (design field, kind)
    "verifier": ("verifier", "str"), "drafter": ("drafter", "str"), "k": ("k", "int"),
    "alpha": ("alpha", "float"), "prefill_tokens": ("prefill_tokens", "int"),
    "decode_tokens": ("decode_tokens", "int"), "gpu": ("gpu", "str"),
    "engine": ("engine", "str"), "engine_version": ("engine_version", "str"),
    "method": ("method", "str"),
}


def read(value: dict, name: str) -> Report:
    root = Field(value, "", name)
    meta = root["metadata"]
    if meta.absent:
        _refuse_legacy(root)
        raise meta.error("missing: not a GuideLLM report of a known schema (GuideLLM 0.5 "
                         "or newer writes metadata.version)")
    meta.mapping()
    version_field = meta["version"]
    if isinstance(version_field.value, str) and version_field.value.strip().isdigit():
        version = int(version_field.value.strip())
    else:
        version = version_field.number(required=True, integer=True)
    if version not in KNOWN_VERSIONS:
        known = ", ".join(f"{v} ({what})" for v, what in KNOWN_VERSIONS.items())
        raise version_field.error(f"unknown GuideLLM report schema version {version} "
                                  f"(known: {known})")
    benchmarks = root["benchmarks"]
    if benchmarks.absent:
        raise benchmarks.error("no benchmarks")
    items = benchmarks.items()
    if not items:
        raise benchmarks.error("no benchmarks (empty list)")

    # Design facts the report holds for all its points.
    shared: list[tuple[str, object, str]] = []
    extension = meta["x_bayesspec"].mapping(required=False)
    if extension is not None:
        for key, (field_name, kind) in _DESIGN_KEYS.items():
            node = extension[key]
            shared.append((field_name, _typed(node, kind), node.path))
    if version == 1:
        args = root["args"].mapping(required=False)
        model = args["model"] if args is not None else None
        data = args["data"] if args is not None else None
    else:
        config = root["config"].mapping(required=False)
        spec = config["spec"].mapping(required=False) if config is not None else None
        backend = spec["backend"].mapping(required=False) if spec is not None else None
        model = backend["model"] if backend is not None else None
        data = spec["data"] if spec is not None else None
    served = model.string() if model is not None and not isinstance(model.value, (dict, list)) \
        else None
    if data is not None:
        tokens = _data_tokens(data.value)
        for key, field_name in (("prompt_tokens", "prefill_tokens"),
                                ("output_tokens", "decode_tokens")):
            if key in tokens:
                shared.append((field_name, tokens[key], f"{data.path} ({key})"))

    points = []
    seen: dict[tuple, str] = {}
    for bench in items:
        point = _benchmark(bench, name)
        if not point.fallback.get("verifier"):
            point.fallback["verifier"] = served
        for field_name, value, path in shared:
            add_fact(point, field_name, value, path, name)
        for key in point.key or ():
            if key in seen:
                raise bench.error(f"duplicated load point: the same {key[0]} as "
                                  f"{seen[key]}")
            seen[key] = bench.path
        points.append(point)
    return Report(name, f"guidellm-v{version}", points)


def _typed(node: Field, kind: str):
    if kind == "str":
        value = node.string()
        return value.strip() if value else None
    if kind == "int":
        return node.number(integer=True)
    return node.number(maximum=1.0)


def _refuse_legacy(root: Field) -> None:
    benchmarks = root["benchmarks"].value
    if isinstance(benchmarks, list) and benchmarks and isinstance(benchmarks[0], dict):
        first = benchmarks[0]
        legacy = ("run_stats" in first or "worker" in first
                  or (isinstance(first.get("args"), dict) and "strategy" in first["args"]))
        if legacy:
            raise root["benchmarks"][0].error(
                "a GuideLLM 0.3/0.4 report (run_stats/args.strategy, no metadata.version): "
                "not supported; re-run or re-export with GuideLLM 0.5 or newer")


def _data_tokens(value) -> dict[str, int]:
    """prompt_tokens / output_tokens from a GuideLLM data spec, when it is synthetic."""
    found: dict[str, int] = {}
    specs = value if isinstance(value, list) else [value]
    for spec in specs:
        if isinstance(spec, str):
            text = spec.strip()
            if text.startswith("{"):
                try:
                    spec = json.loads(text)
                except (ValueError, RecursionError):
                    continue
            else:
                spec = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        if not isinstance(spec, dict):
            continue
        for key in ("prompt_tokens", "output_tokens"):
            raw = spec.get(key)
            if isinstance(raw, bool):
                continue
            try:
                number = float(str(raw).strip()) if isinstance(raw, (str, int, float)) else None
            except (ValueError, OverflowError):
                number = None
            if number is not None and number >= 1 and number == int(number) \
                    and number < 1e9 and key not in found:
                found[key] = int(number)
    return found


def _benchmark(bench: Field, name: str) -> Point:
    bench.mapping()
    legacy = bench.value
    if "run_stats" in legacy or (isinstance(legacy.get("args"), dict)
                                 and "strategy" in legacy["args"]):
        raise bench.error("a GuideLLM 0.3/0.4 benchmark (run_stats/args.strategy): not "
                          "supported; re-run with GuideLLM 0.5 or newer")
    strategy = bench.at("config", "strategy").mapping()
    kind_field = strategy["type_"]
    kind = kind_field.string(required=True).strip()
    if not kind:
        raise kind_field.error("empty strategy type")
    rate = strategy["rate"].number(positive=True) if kind in OPEN_LOOP else None
    streams = strategy["streams"].number(integer=True, minimum=1)
    limit = strategy["max_concurrency"].number(integer=True, minimum=1)
    in_flight_limit = {"synchronous": 1, "concurrent": streams,
                       "throughput": limit}.get(kind)
    duration = bench["duration"].number(required=True, positive=True)
    metrics = bench["metrics"].mapping()
    totals = metrics["request_totals"].mapping()
    successful_field = totals["successful"]
    successful = successful_field.number(required=True, integer=True)
    errored = totals["errored"].number(integer=True) or 0
    totals["incomplete"].number(integer=True)
    if successful == 0:
        detail = f" ({errored} errored)" if errored else ""
        raise successful_field.error(f"no successful requests{detail}")
    latency = metrics.at("request_latency", "successful").mapping()

    def mean_of(*keys, scale=1.0):
        value = metrics.at(*keys, "successful", "mean").number()
        return None if value is None else value * scale

    def percentile_of(key, q, scale=1.0):
        value = metrics.at(key, "successful", "percentiles", f"p{q}").number()
        return None if value is None else value * scale

    row = {
        "rps": successful / duration,
        "latency_mean_s": latency["mean"].number(required=True, positive=True),
        "rps_target": rate,
        "n_requests": successful,
        "latency_std_s": latency["std_dev"].number(),
        "latency_p50_s": latency["median"].number(),
        "latency_p95_s": latency.at("percentiles", "p95").number(),
        "latency_p99_s": latency.at("percentiles", "p99").number(),
        "latency_p90_s": latency.at("percentiles", "p90").number(),
        "ttft_mean_s": mean_of("time_to_first_token_ms", scale=1e-3),
        "itl_mean_s": mean_of("inter_token_latency_ms", scale=1e-3),
        **{f"{short}_p{q}_s": percentile_of(key, q, scale=1e-3)
           for short, key in (("ttft", "time_to_first_token_ms"),
                              ("itl", "inter_token_latency_ms"))
           for q in (50, 90, 95, 99)},
        "mean_concurrency": mean_of("request_concurrency"),
        # a closed loop: at most this many requests in flight (synchronous: one)
        "max_concurrency": in_flight_limit,
        "saturated": kind == "throughput",
        "strategy": kind,
        "latency_reconstructed": False,
    }
    if (rps := row["rps"]) != rps or rps == float("inf"):  # overflow of a huge count
        raise successful_field.error("rate out of range")
    latency["count"].number(integer=True)
    point = Point(row=row, where=bench.path)
    for key, column in (("prompt_token_count", "prefill_tokens"),
                        ("output_token_count", "decode_tokens")):
        value = mean_of(key)
        if value is not None and 0.5 <= value < 1e9:
            point.fallback[column] = (value, successful)
    model = bench.at("config", "backend", "model")
    if not isinstance(model.value, (dict, list)):
        point.fallback["verifier"] = model.string()
    extension = bench["x_bayesspec"].mapping(required=False)
    # a GuideLLM benchmark starts from an idle server and reports every request it sent;
    # the simulator's reports (with its extension) measure a window in the steady middle
    row["whole_run"] = extension is None
    # GuideLLM's percentiles take the first value whose cumulative share reaches p; the
    # simulator's reports interpolate as numpy does
    row["percentile_rule"] = "inverted_cdf" if extension is None else "linear"
    if extension is not None:
        for column in ("num_drafts", "draft_tokens", "accepted_tokens"):
            value = extension[column].number(integer=True)
            if value is not None:
                row[column] = value
    identity = [(f"{kind} strategy" + (f" at rate {rate:g}" if rate else "")
                 + (f" with {streams} streams" if streams else ""), kind, rate, streams)]
    bench_id = bench["id_"].value
    if isinstance(bench_id, str) and bench_id:
        identity.append(("benchmark id_", bench_id))
    point.key = tuple(identity)
    return point
