"""``vllm bench serve --save-result`` results (FORMATS.md): one flat JSON object per run;
``--append-result`` files hold one object per line (a JSON array of them is read too).

Achieved rate = ``request_throughput`` (``completed / duration`` when absent). Latency =
``mean_e2el_ms`` when the run had ``--percentile-metrics ...,e2el``; otherwise it is
reconstructed per mean as ``mean_ttft_ms + (output_len - 1) * mean_tpot_ms`` with
``output_len = total_output_tokens / completed`` and the row says so
(``latency_reconstructed``). Keys are read defensively: surrounding blanks and trailing
colons are dropped (old files wrote ``"request_goodput:"``), unknown keys ignored.
``--metadata k=v`` pairs (top-level keys) may carry design values: verifier, drafter, k
(or num_speculative_tokens), alpha, prefill_tokens, decode_tokens, gpu, engine,
engine_version (or vllm_version), method.
"""

from __future__ import annotations

import math

from bayesspec.data.filekinds import clean_key, is_vllm_bench
from bayesspec.ingest.fields import MISSING, Field
from bayesspec.ingest.records import Point, Report, add_fact

_METADATA = {  # --metadata key -> (design field, kind)
    "verifier": ("verifier", "str"), "drafter": ("drafter", "str"),
    "draft_model": ("drafter", "str"), "k": ("k", "int"),
    "num_speculative_tokens": ("k", "int"), "alpha": ("alpha", "float"),
    "prefill_tokens": ("prefill_tokens", "int"), "prefill": ("prefill_tokens", "int"),
    "decode_tokens": ("decode_tokens", "int"), "decode": ("decode_tokens", "int"),
    "gpu": ("gpu", "str"), "engine": ("engine", "str"),
    "engine_version": ("engine_version", "str"), "vllm_version": ("engine_version", "str"),
    "method": ("method", "str"),
}
MAX_POSITIONS = 64
_INFINITE = {"inf", "+inf", "infinity", "+infinity"}


def read(objects: list[tuple[int | None, str, object]], name: str, kind: str) -> Report:
    """``objects``: (JSONL line or None, field path prefix, parsed object) per run."""
    points = []
    seen: dict[tuple, str] = {}
    for line, prefix, value in objects:
        node = Field(value, prefix, name, line)
        node.mapping()
        cleaned: dict = {}
        for key, item in value.items():     # an exact key wins over an odd spelling of it
            cleaned.setdefault(clean_key(key), MISSING)
            if cleaned[clean_key(key)] is MISSING or str(key) == clean_key(key):
                cleaned[clean_key(key)] = item
        point = _run(Field(cleaned, prefix, name, line), name)
        where = f"line {line}" if line is not None else (prefix or "the run")
        if point.key in seen:
            raise node.error(f"duplicated load point: the same run (rate, concurrency, "
                             f"date, counts) as {seen[point.key]}")
        seen[point.key] = where
        points.append(point)
    return Report(name, kind, points)


def _rate(node: Field) -> tuple[float | None, bool | None]:
    """(finite target rate, whether the rate was infinite); (None, None) when absent."""
    value = node.value
    if node.absent:
        return None, None
    if isinstance(value, str) and value.strip().lower() in _INFINITE:
        return None, True
    if isinstance(value, float) and math.isinf(value) and value > 0:
        return None, True
    return node.number(positive=True, allow_text=True), False


def _run(obj: Field, name: str) -> Point:
    completed_field = obj["completed"]
    completed = completed_field.number(required=True, integer=True)
    failed = obj["failed"].number(integer=True) or 0
    if completed == 0:
        detail = f" ({failed} failed)" if failed else ""
        raise completed_field.error(f"no successful requests{detail}")
    duration = obj["duration"].number(required=True, positive=True)
    rps = obj["request_throughput"].number(positive=True)
    if rps is None:
        rps = completed / duration
    total_in = obj["total_input_tokens"].number(integer=True)
    total_out = obj["total_output_tokens"].number(integer=True)
    ms = {}
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "p90", "p95", "p99"):
            ms[stat, metric] = obj[f"{stat}_{metric}_ms"].number()
    # a bench run starts from an idle server and reports every request it sent
    row: dict = {"rps": rps, "n_requests": completed, "whole_run": True}
    if ms["mean", "e2el"] is not None:
        latency_field = obj["mean_e2el_ms"]
        latency = latency_field.number(positive=True) / 1e3
        row.update(latency_std_s=_s(ms["std", "e2el"]), latency_p50_s=_s(ms["median", "e2el"]),
                   latency_p90_s=_s(ms["p90", "e2el"]),
                   latency_p95_s=_s(ms["p95", "e2el"]), latency_p99_s=_s(ms["p99", "e2el"]),
                   latency_reconstructed=False)
    else:
        for metric, field_name in (("ttft", "mean_ttft_ms"), ("tpot", "mean_tpot_ms")):
            if ms["mean", metric] is None:
                raise obj[field_name].error("missing, and there is no mean_e2el_ms: cannot "
                                            "reconstruct the latency")
        if total_out is None:
            raise obj["total_output_tokens"].error(
                "missing, and there is no mean_e2el_ms: cannot reconstruct the latency")
        output_len = total_out / completed
        latency = (ms["mean", "ttft"] + max(output_len - 1.0, 0.0) * ms["mean", "tpot"]) / 1e3
        if not latency > 0:
            raise obj["mean_ttft_ms"].error("reconstructed latency (ttft + (output_len - 1) "
                                            "x tpot) is not > 0")
        row["latency_reconstructed"] = True
    row["latency_mean_s"] = latency
    row["ttft_mean_s"] = _s(ms["mean", "ttft"])
    for metric in ("ttft", "itl"):
        for stat, quantile in (("median", "p50"), ("p90", "p90"), ("p95", "p95"),
                               ("p99", "p99")):
            row[f"{metric}_{quantile}_s"] = _s(ms[stat, metric])
    row["itl_mean_s"] = _s(ms["mean", "itl"])

    rate, infinite = _rate(obj["request_rate"])
    concurrency = obj["max_concurrency"].number(integer=True, minimum=1)
    burstiness = obj["burstiness"].number(positive=True, allow_text=True)
    if infinite is None:
        strategy = ""
    elif not infinite:
        strategy = "poisson" if burstiness in (None, 1.0) else "gamma"
    elif concurrency == 1:
        strategy = "synchronous"
    elif concurrency is not None:
        strategy = "concurrent"
    else:
        strategy = "throughput"   # every request sent at once: the server's ceiling
    row.update(rps_target=rate, strategy=strategy, saturated=strategy == "throughput")
    if concurrency is not None:
        row["max_concurrency"] = concurrency   # a closed loop: the rate follows from it

    point = Point(row=row, where=obj.path, line=obj.row)
    counts = {}
    for column, key in (("num_drafts", "spec_decode_num_drafts"),
                        ("draft_tokens", "spec_decode_draft_tokens"),
                        ("accepted_tokens", "spec_decode_accepted_tokens")):
        counts[column] = obj[key].number(integer=True)
        if counts[column] is not None:
            row[column] = counts[column]
    if counts["accepted_tokens"] is not None and counts["draft_tokens"] is not None \
            and counts["accepted_tokens"] > counts["draft_tokens"]:
        raise obj["spec_decode_accepted_tokens"].error("more accepted than drafted tokens")
    rate_pct = obj["spec_decode_acceptance_rate"].number(maximum=100.0)
    if rate_pct is not None:
        row["acceptance_rate"] = rate_pct / 100.0
    length = obj["spec_decode_acceptance_length"].number()
    if length is not None:
        row["acceptance_length"] = length
    positions = obj["spec_decode_per_position_acceptance_rates"]
    if not positions.absent:
        items = positions.items()
        if len(items) > MAX_POSITIONS:
            raise positions.error(f"more than {MAX_POSITIONS} positions")
        rates = [item.number(required=True, maximum=1.0) for item in items]
        for i, value in enumerate(rates, start=1):
            row[f"acceptance_rate_pos{i}"] = value
        if rates:
            add_fact(point, "k", len(rates), positions.path, name)

    for key, (field_name, kind) in _METADATA.items():
        node = obj[key]
        if node.absent:
            continue
        if kind == "int":
            value = node.number(integer=True, allow_text=True)
        elif kind == "float":
            value = node.number(maximum=1.0, allow_text=True)
        elif isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            value = str(node.value)
        else:
            value = node.string().strip()
        add_fact(point, field_name, value, node.path, name)
    model = obj["model_id"]
    if isinstance(model.value, str) and model.value.strip():
        point.fallback["verifier"] = model.value.strip()
    for column, total in (("prefill_tokens", total_in), ("decode_tokens", total_out)):
        if total is not None and 0.5 <= total / completed < 1e9:
            point.fallback[column] = (total / completed, completed)
    date = obj["date"].value
    point.key = (repr(obj["request_rate"].value), concurrency, burstiness,
                 date if isinstance(date, str) else None, completed, duration)
    return point


def _s(value_ms: float | None) -> float | None:
    return None if value_ms is None else value_ms / 1e3
