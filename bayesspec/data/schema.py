"""The tidy table's columns (docs/CONTRACT.md, "Tidy data"): one list every writer orders by.

A leaf module. The readers' checks live in :mod:`bayesspec.data`; the simulator, ingest
and every file writer order their columns by :data:`TIDY_COLUMNS`, so a file written by
any of them reads the same way.
"""

from __future__ import annotations

__all__ = ["TIDY_COLUMNS", "LAST_COLUMNS", "POSITION_COUNT_COLUMN", "order_columns",
           "METRIC_COLUMNS", "metric_description", "metric_quantile", "metric_family",
           "TEXT_COLUMNS"]

#: CONTRACT columns first (design, then measurements), then what the simulator and
#: ingest add; columns no row has are simply absent.
TIDY_COLUMNS = [
    "verifier", "drafter", "k", "alpha", "prefill_tokens", "decode_tokens",
    "rps", "latency_mean_s", "rps_target", "n_requests", "whole_run", "latency_std_s", "latency_p50_s",
    "latency_p90_s", "latency_p95_s", "latency_p99_s", "ttft_mean_s", "itl_mean_s",
    "ttft_p50_s", "ttft_p90_s", "ttft_p95_s", "ttft_p99_s",
    "itl_p50_s", "itl_p90_s", "itl_p95_s", "itl_p99_s", "mean_concurrency",
    "max_concurrency",
    "max_num_seqs", "kv_cache_tokens", "max_num_batched_tokens", "saturated",
    "saturation_reason", "strategy", "latency_reconstructed", "gpu", "engine", "engine_version",
    "method", "num_drafts", "draft_tokens", "accepted_tokens", "acceptance_rate",
    "acceptance_length", "verifier_params_b", "drafter_params_b", "experts_active",
    "experts_total",
]
#: Tidy columns that hold text; the others hold numbers (or nothing).
TEXT_COLUMNS = ("verifier", "drafter", "strategy", "saturation_reason", "gpu", "engine",
                "engine_version", "method", "source")
#: Written after every other column (provenance).
LAST_COLUMNS = ["source"]
#: vLLM's per-position counter as a tidy column: drafts whose first i tokens were
#: accepted (i = 1..k).
POSITION_COUNT_COLUMN = "accepted_tokens_pos{}"
POSITION_PREFIXES = ("acceptance_rate_pos", "accepted_tokens_pos")


def _position_columns(columns) -> list[str]:
    found = [c for c in columns if c.startswith(POSITION_PREFIXES)
             and c.rsplit("pos", 1)[-1].isdigit()]
    return sorted(found, key=lambda c: (c.startswith("accepted"), int(c.rsplit("pos", 1)[-1])))


def order_columns(columns) -> list[str]:
    """``columns`` in the written order: CONTRACT and known columns, per-position
    columns by position, the rest as given, provenance last."""
    columns = list(columns)
    ordered = [c for c in TIDY_COLUMNS if c in columns]
    ordered += _position_columns(columns)
    last = [c for c in LAST_COLUMNS if c in columns]
    return ordered + [c for c in columns if c not in ordered and c not in last] + last


#: Latency summaries besides the mean (``--metric``, SLO targets) -> their tidy column.
METRIC_COLUMNS = {
    **{f"p{q}": f"latency_p{q}_s" for q in (50, 90, 95, 99)},
    "ttft_mean": "ttft_mean_s",
    **{f"ttft_p{q}": f"ttft_p{q}_s" for q in (50, 90, 95, 99)},
    "itl_mean": "itl_mean_s",
    **{f"itl_p{q}": f"itl_p{q}_s" for q in (50, 90, 95, 99)},
}


def metric_description(metric: str) -> str:
    """'p99 end-to-end latency', 'TTFT p99', 'ITL mean', 'mean end-to-end latency'."""
    if metric == "mean":
        return "mean end-to-end latency"
    head, _, tail = metric.partition("_")
    if head in ("ttft", "itl"):
        return f"{head.upper()} {tail}"
    return f"{metric} end-to-end latency"


def metric_quantile(metric: str) -> float:
    """The quantile level of a summary (``p99`` -> 0.99, ``ttft_p50`` -> 0.5); NaN for a
    mean (``ttft_mean``)."""
    tail = metric.rpartition("_")[2] if "_" in metric else metric
    if tail.startswith("p") and tail[1:].isdigit():
        return int(tail[1:]) / 100.0
    return float("nan")


def metric_family(metric: str) -> str:
    """What a summary summarises: ``latency`` (end to end), ``ttft`` or ``itl``."""
    head = metric.partition("_")[0]
    return head if head in ("ttft", "itl") else "latency"
