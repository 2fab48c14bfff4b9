"""The tidy table's columns as the reader knows them (docs/CONTRACT.md, "Tidy data").

Each column's kind (text, whole number, positive or non-negative number, true/false), the
design columns' defaults, the known names and their near misses (a typo is refused, an
unknown name is kept), and which latency stands for a row when the file has no mean.
"""

from __future__ import annotations

import difflib
import re

import numpy as np
import pandas as pd

from bayesspec.data.schema import METRIC_COLUMNS
from bayesspec.errors import BadInput


REQUIRED_COLUMNS = ("rps", "latency_mean_s")
#: Latency summaries besides the mean (percentiles, TTFT, ITL). A file of summaries
#: without a mean (llm-d and inference-perf publish p50/p90 only) is read with
#: ``latency_mean_s`` all NaN; only ``--model tails`` fits it.
SUMMARY_COLUMNS = tuple(METRIC_COLUMNS.values())

# Design columns and their defaults when the column is absent.
DESIGN_DEFAULTS: dict[str, object] = {
    "verifier": "model",
    "drafter": "",
    "k": 0,
    "alpha": np.nan,
    "prefill_tokens": pd.NA,
    "decode_tokens": pd.NA,
}

# How the file's percentiles were computed from its requests (laws.QUANTILE_RULES):
# GuideLLM reads the first value whose cumulative share reaches p, numpy interpolates.
PERCENTILE_RULE_COLUMN = "percentile_rule"
STRING_COLUMNS = ("verifier", "drafter", "gpu", "engine", "engine_version", "method",
                  "source", "strategy", "run", "saturation_reason", PERCENTILE_RULE_COLUMN)
# The engine's limits on what shares a batch (vLLM's names): the concurrency cap comes
# from them (``concurrency_caps``).
ENGINE_LIMIT_COLUMNS = ("max_num_seqs", "kv_cache_tokens", "max_num_batched_tokens")
# The load client's limit on requests in flight (``vllm bench serve --max-concurrency``,
# GuideLLM's concurrent and throughput profiles): a point with it is a closed-loop point.
CLOSED_LOOP_COLUMN = "max_concurrency"
INTEGER_COLUMNS = ("k", "prefill_tokens", "decode_tokens", "n_requests", "num_drafts",
                   "draft_tokens", "accepted_tokens", "experts_active", "experts_total",
                   CLOSED_LOOP_COLUMN, *ENGINE_LIMIT_COLUMNS)
POSITIVE_FLOAT_COLUMNS = ("rps", "latency_mean_s")
NONNEGATIVE_FLOAT_COLUMNS = tuple(dict.fromkeys(
    ("rps_target", "latency_std_s") + SUMMARY_COLUMNS
    + ("verifier_params_b", "drafter_params_b", "mean_concurrency")))
BOOLEAN_COLUMNS = ("saturated", "latency_reconstructed", "whole_run")

# Columns other producers write (ingest, the simulator) and the bookkeeping columns of a
# prepared table: known, so that a near miss of one of them is caught as a typo.
OTHER_KNOWN_COLUMNS = ("acceptance_rate", "acceptance_length", "excluded",
                       "exclusion_reason")
KNOWN_COLUMNS = tuple(dict.fromkeys(
    REQUIRED_COLUMNS + tuple(DESIGN_DEFAULTS) + STRING_COLUMNS + INTEGER_COLUMNS
    + POSITIVE_FLOAT_COLUMNS + NONNEGATIVE_FLOAT_COLUMNS + BOOLEAN_COLUMNS
    + OTHER_KNOWN_COLUMNS))


def with_clean_columns(raw: pd.DataFrame, source: str) -> pd.DataFrame:
    """A copy of ``raw`` with stripped column names, refused when it has no rows or a
    column appears twice."""
    if raw.shape[0] == 0:
        raise BadInput("no data rows", file=source)
    frame = raw.copy()
    frame.columns = [str(c).strip() for c in frame.columns]
    duplicated = frame.columns[frame.columns.duplicated()]
    if len(duplicated):
        raise BadInput("column appears twice", file=source, column=duplicated[0])
    return frame


def has_mean_latency(data: pd.DataFrame) -> bool:
    """Whether the table measures mean latency (a file of percentiles alone does not)."""
    return "latency_mean_s" in data.columns and bool(
        pd.to_numeric(data["latency_mean_s"], errors="coerce").notna().any())


def reference_latency(data: pd.DataFrame) -> np.ndarray:
    """Per row, the latency that stands for the load point where one is needed outside
    the models (judging saturation): the mean, or without one the median end-to-end
    latency, or the lowest end-to-end percentile given, or else the first summary given
    (NaN where the row has none)."""
    if has_mean_latency(data):
        return pd.to_numeric(data["latency_mean_s"], errors="coerce").to_numpy(float)
    value = np.full(len(data), np.nan)
    for column in SUMMARY_COLUMNS:
        if column in data.columns:
            candidate = pd.to_numeric(data[column], errors="coerce").to_numpy(float)
            value = np.where(np.isnan(value) & (candidate > 0), candidate, value)
    return value


def near_miss(column: str) -> str | None:
    """The known column that ``column`` looks like a misspelling of, or None.

    Known columns (docs/CONTRACT.md, what ingest and the simulator write) are never near misses.
    A name matches when it differs only in case, blanks, dashes or dots
    (``Latency Mean S``), or by one edit (two from 12 characters on: ``prefil_tokens``,
    ``latency_mean``); names of four characters or fewer and names that differ only in
    digits (``latency_p90_s`` is not ``latency_p95_s``) are left alone.
    """
    name = str(column)
    if name in KNOWN_COLUMNS:
        return None
    normal = re.sub(r"[\s\-.]+", "_", name.strip().lower())
    if normal in KNOWN_COLUMNS:
        return normal
    if len(normal) <= 4:
        return None
    for known in difflib.get_close_matches(normal, KNOWN_COLUMNS, n=3, cutoff=0.75):
        if re.sub(r"\d", "", known) == re.sub(r"\d", "", normal):
            continue
        if _edit_distance(normal, known) <= (2 if len(known) >= 12 else 1):
            return known
    return None


def _edit_distance(a: str, b: str) -> int:
    """Levenshtein distance, a swap of neighbours counting as one edit."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        current = [i] + [0] * len(b)
        for j, y in enumerate(b, start=1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y))
            if i > 1 and j > 1 and x == b[j - 2] and a[i - 2] == y:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[-1]
