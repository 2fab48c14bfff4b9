"""Acceptance counters: one window of drafts per row, from a counters-only file or a
tidy one (a file of counters alone, without latencies, is a valid input to ``bayesspec
acceptance``; docs/laws.md, "the acceptance process").
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from bayesspec.data.cells import as_floats, as_integers, as_strings
from bayesspec.data.columns import INTEGER_COLUMNS, near_miss, with_clean_columns
from bayesspec.data.groups import POSITION_COUNT_COLUMN
from bayesspec.data.read import read_raw
from bayesspec.errors import BadInput


#: Columns that label a window's configuration: windows that differ in any of them are
#: never pooled by the acceptance model (k is not among them: it is what varies).
COUNTER_LABEL_COLUMNS = ("verifier", "drafter", "method", "alpha", "prefill_tokens",
                         "decode_tokens", "dataset", "workload", "temperature", "gpu",
                         "engine", "engine_version")
_POSITION_PATTERN = re.compile(r"^accepted_tokens_pos(\d+)$")


def read_counters(path: str | os.PathLike) -> pd.DataFrame:
    """Read the acceptance counters of a file: one row per window of drafts (a run, or
    a stretch of one between two scrapes).

    Needs ``k`` (> 0) and, per window, one of: ``accepted_tokens_pos1..k`` (the drafts
    whose first I tokens were accepted) with ``num_drafts``; the totals
    ``accepted_tokens`` with ``num_drafts`` or ``draft_tokens`` (vLLM's Prometheus
    totals); or ``acceptance_length``, the mean tokens per verification step a run
    reported (a published table, one row per k; ``num_drafts`` where known). Any tidy
    file with them is fine too (its other columns are not needed and not checked beyond
    the labels). Rows with k = 0 (dense) and speculative rows without any counter are
    skipped. Refused: counts that are not whole numbers, a count above the one before
    it (position I-1, num_drafts before position 1), accepted tokens above the drafted
    ones (``draft_tokens`` or k x num_drafts), a window with num_drafts 0, an
    acceptance length outside 1..k + 1, totals that disagree with the position counts.
    Returns the windows with their labels (:data:`COUNTER_LABEL_COLUMNS` present),
    ``k``, ``num_drafts`` (NaN where a table gave no count), the position counts (0
    beyond a row's k and on windows without them), ``has_positions``,
    ``accepted_mean`` (accepted drafts per draft, E[A] as measured) and
    ``resolution`` (the unit of the finest digit the file's acceptance lengths without
    counts were reported to, 0 for counts); ``attrs['source_file']`` and ``attrs['data_rows']``
    (each window's 1-based row in the file).
    """
    path = Path(path)
    return counters_of(read_raw(path), source=str(path))


def reported_resolution(value: float) -> float:
    """The unit of the last digit a number was reported to: 0.01 for 3.54."""
    for digits in range(0, 7):
        if abs(value - round(value, digits)) < 1e-9:
            return 10.0 ** -digits
    return 1e-6


def counters_of(raw: pd.DataFrame, *, source: str = "<data>") -> pd.DataFrame:
    """:func:`read_counters` for an in-memory table (a raw file or a prepared tidy one)."""
    frame = with_clean_columns(raw, source)
    for column in frame.columns:
        if _POSITION_PATTERN.match(column):
            continue
        known = near_miss(column)
        if known is not None:
            raise BadInput(f"unknown column: did you mean '{known}'?", file=source,
                           column=column)
    if "k" not in frame.columns:
        near = difflib.get_close_matches("k", list(frame.columns), n=1, cutoff=0.7)
        hint = f" (did you mean '{near[0]}'?)" if near else ""
        raise BadInput(f"acceptance counters need this column{hint}", file=source,
                       column="k")
    positions = sorted(int(m.group(1)) for c in frame.columns
                       if (m := _POSITION_PATTERN.match(c)))
    has_totals = "accepted_tokens" in frame.columns
    has_length = "acceptance_length" in frame.columns
    if not positions and not has_totals and not has_length:
        raise BadInput("acceptance counters need accepted_tokens_pos1..k (vLLM's "
                       "spec_decode_num_accepted_tokens_per_pos), the totals "
                       "accepted_tokens with num_drafts, or acceptance_length per k "
                       "(`bayesspec ingest --metrics` reads vLLM's counters)", file=source,
                       column="accepted_tokens_pos1")
    if (positions or has_totals) and not ({"num_drafts", "draft_tokens"} & set(frame.columns)):
        near = difflib.get_close_matches("num_drafts", list(frame.columns), n=1, cutoff=0.7)
        hint = f" (did you mean '{near[0]}'?)" if near else ""
        raise BadInput(f"acceptance counters need this column{hint}", file=source,
                       column="num_drafts")

    def integers(name):
        if name not in frame.columns:
            return pd.Series([pd.NA] * len(frame), dtype="Int64")
        return as_integers(frame[name].reset_index(drop=True), source, name)

    k = integers("k")
    drafts = integers("num_drafts")
    drafted_column = integers("draft_tokens")
    accepted_column = integers("accepted_tokens")
    lengths = (as_floats(frame["acceptance_length"].reset_index(drop=True), source,
                         "acceptance_length", required=False) if has_length
               else pd.Series(np.nan, index=range(len(frame))))
    counts = {i: integers(POSITION_COUNT_COLUMN.format(i)) for i in positions}
    keep, windows = [], []
    for row in range(len(frame)):
        where = {"file": source, "row": row + 1}
        k_row = k.iloc[row]
        if pd.isna(k_row):
            raise BadInput("missing value (NaN or empty)", column="k", **where)
        k_row = int(k_row)
        if k_row < 0:
            raise BadInput(f"must be an integer >= 0, got {k_row}", column="k", **where)
        cells = [counts[i].iloc[row] if i in counts else pd.NA for i in range(1, k_row + 1)]
        n, drafted = drafts.iloc[row], drafted_column.iloc[row]
        stated, length = accepted_column.iloc[row], lengths.iloc[row]
        any_position = any(not pd.isna(c) for c in cells)
        if k_row == 0 or (pd.isna(n) and not any_position and pd.isna(stated)
                          and pd.isna(length)):
            continue                     # dense, or a speculative row without counters
        if pd.isna(n) and not pd.isna(drafted):
            if int(drafted) % k_row:
                raise BadInput(f"draft_tokens {int(drafted)} is not a multiple of k = "
                               f"{k_row}: give num_drafts", column="draft_tokens", **where)
            n = int(drafted) // k_row
        if not pd.isna(n) and int(n) < 0:
            raise BadInput(f"must be an integer >= 0, got {int(n)}", column="num_drafts",
                           **where)
        if not pd.isna(n) and int(n) == 0:
            raise BadInput("a window with no drafts measures no acceptance: drop the row "
                           "or give its counters", column="num_drafts", **where)
        counted = any_position or not pd.isna(stated)
        if counted and pd.isna(n):
            raise BadInput("missing value (NaN or empty): accepted counts need the drafts "
                           "they came from", column="num_drafts", **where)
        if not counted and pd.isna(length):
            raise BadInput("a window of drafts without accepted counts (accepted_tokens_pos1"
                           "..k, accepted_tokens or acceptance_length)",
                           column="accepted_tokens", **where)
        window = {"has_positions": False, "accepted": np.nan, "resolution": 0.0}
        if any_position:
            missing = [i for i, c in zip(range(1, k_row + 1), cells) if pd.isna(c)]
            if missing:
                raise BadInput(f"k is {k_row} but this position count is missing",
                               column=POSITION_COUNT_COLUMN.format(missing[0]), **where)
            previous, previous_name = int(n), "num_drafts"
            for i, count in zip(range(1, k_row + 1), cells):
                name = POSITION_COUNT_COLUMN.format(i)
                if int(count) < 0:
                    raise BadInput(f"must be an integer >= 0, got {int(count)}", column=name,
                                   **where)
                if int(count) > previous:
                    raise BadInput(f"{int(count)} drafts accepted position {i} but only "
                                   f"{previous} reached it ({previous_name}): position counts"
                                   " must not increase with the position", column=name,
                                   **where)
                previous, previous_name = int(count), name
            window["has_positions"] = True
            window["accepted"] = float(sum(int(c) for c in cells))
        for i in positions:
            if i > k_row and not pd.isna(counts[i].iloc[row]) and counts[i].iloc[row] != 0:
                raise BadInput(f"a count beyond the draft length k = {k_row}",
                               column=POSITION_COUNT_COLUMN.format(i), **where)
        if not pd.isna(stated) and int(stated) < 0:
            raise BadInput(f"must be an integer >= 0, got {int(stated)}",
                           column="accepted_tokens", **where)
        for accepted, column in ((window["accepted"], "draft_tokens"),
                                 (float(stated) if not pd.isna(stated) else np.nan,
                                  "accepted_tokens")):
            if np.isnan(accepted):
                continue
            if not pd.isna(drafted) and accepted > int(drafted):
                raise BadInput(f"{int(accepted)} accepted tokens but only {int(drafted)} "
                               "drafted", column=column, **where)
            if accepted > k_row * int(n):
                raise BadInput(f"{int(accepted)} accepted tokens but only {k_row * int(n)} "
                               f"drafted (k x num_drafts)", column="accepted_tokens", **where)
        if not pd.isna(stated):
            if any_position and int(stated) != int(window["accepted"]):
                raise BadInput(f"accepted_tokens {int(stated)} is not the sum of the position"
                               f" counts ({int(window['accepted'])})", column="accepted_tokens",
                               **where)
            window["accepted"] = float(stated)
        accepted = window["accepted"]
        if not pd.isna(length):
            if not 1.0 <= float(length) <= k_row + 1.0:
                raise BadInput(f"an acceptance length (tokens per verification step, the "
                               f"bonus token included) lies within 1..k + 1 = {k_row + 1}, "
                               f"got {float(length):g}", column="acceptance_length", **where)
            if not np.isnan(accepted):
                implied = 1.0 + accepted / int(n)
                if abs(implied - float(length)) > reported_resolution(float(length)) + 1e-6:
                    raise BadInput(f"acceptance_length {float(length):g} but the counts give "
                                   f"{implied:.4g} (1 + accepted / num_drafts)",
                                   column="acceptance_length", **where)
            else:
                window["accepted"] = (float(length) - 1.0) * (int(n) if not pd.isna(n)
                                                              else 1.0)
                window["resolution"] = reported_resolution(float(length))
        window["drafts"] = float(n) if not pd.isna(n) else np.nan
        window["accepted_mean"] = (window["accepted"] / window["drafts"]
                                   if window["resolution"] == 0.0
                                   else float(length) - 1.0)
        keep.append(row)
        windows.append(window)
    if not keep:
        raise BadInput("no window of acceptance counters (a row with k > 0 and "
                       "accepted_tokens_pos1..k, accepted_tokens or acceptance_length)",
                       file=source, column="k")
    out = pd.DataFrame(index=pd.RangeIndex(len(keep)))
    for column in COUNTER_LABEL_COLUMNS:
        if column not in frame.columns:
            continue
        values = frame[column].reset_index(drop=True).iloc[keep].reset_index(drop=True)
        if column in ("alpha", "temperature"):
            numbers = as_floats(values, source, column, required=False)
            out[column] = numbers
        elif column in INTEGER_COLUMNS:
            out[column] = as_integers(values, source, column)
        else:
            out[column] = as_strings(values)
    out["verifier"] = out["verifier"] if "verifier" in out else "model"
    out["drafter"] = out["drafter"] if "drafter" in out else ""
    out["k"] = k.iloc[keep].to_numpy(np.int64)
    out["num_drafts"] = np.array([w["drafts"] for w in windows], dtype=float)
    out["has_positions"] = np.array([w["has_positions"] for w in windows], dtype=bool)
    out["accepted_mean"] = np.array([w["accepted_mean"] for w in windows], dtype=float)
    # "2.10" reads as 2.1: a table is written to one precision, its finest digit's
    resolution = np.array([w["resolution"] for w in windows], dtype=float)
    reported = resolution > 0
    if reported.any():
        resolution[reported] = resolution[reported].min()
    out["resolution"] = resolution
    for i in range(1, max(positions + [int(out["k"].max())]) + 1):
        values = (counts[i].iloc[keep].fillna(0).to_numpy(np.int64) if i in counts
                  else np.zeros(len(keep), np.int64))
        values = np.where(out["has_positions"].to_numpy(), values, 0)
        out[POSITION_COUNT_COLUMN.format(i)] = np.where(out["k"].to_numpy() >= i, values, 0)
    out.attrs["source_file"] = source
    out.attrs["data_rows"] = [row + 1 for row in keep]
    return out
