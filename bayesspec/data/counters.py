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
    """Read the acceptance counters of a file: one row per window of drafts.

    Needs ``k`` (> 0), ``num_drafts`` and ``accepted_tokens_pos1..k`` (the drafts whose
    first I tokens were accepted); any tidy file with them is fine too (its other columns
    are not needed and not checked beyond the labels). Rows with k = 0 (dense) and
    speculative rows without any counter are skipped. Checked: whole numbers, a count
    never above the one before it (position I-1, num_drafts before position 1), and
    ``accepted_tokens`` / ``draft_tokens`` where given agreeing with them. Returns the
    windows with their labels (:data:`COUNTER_LABEL_COLUMNS` present), ``k``,
    ``num_drafts`` and the position counts (0 beyond a row's k); ``attrs['source_file']``
    and ``attrs['data_rows']`` (each window's 1-based row in the file).
    """
    path = Path(path)
    return counters_of(read_raw(path), source=str(path))


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
    for column in ("k", "num_drafts"):
        if column not in frame.columns:
            near = difflib.get_close_matches(column, list(frame.columns), n=1, cutoff=0.7)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            raise BadInput(f"acceptance counters need this column{hint}", file=source,
                           column=column)
    positions = sorted(int(m.group(1)) for c in frame.columns
                       if (m := _POSITION_PATTERN.match(c)))
    if not positions:
        raise BadInput("acceptance counters need accepted_tokens_pos1..k (vLLM's "
                       "spec_decode_num_accepted_tokens_per_pos; `bayesspec ingest "
                       "--metrics` reads them)", file=source, column="accepted_tokens_pos1")
    k = as_integers(frame["k"].reset_index(drop=True), source, "k")
    drafts = as_integers(frame["num_drafts"].reset_index(drop=True), source, "num_drafts")
    counts = {i: as_integers(frame[POSITION_COUNT_COLUMN.format(i)].reset_index(drop=True),
                              source, POSITION_COUNT_COLUMN.format(i)) for i in positions}
    totals = {name: as_integers(frame[name].reset_index(drop=True), source, name)
              for name in ("accepted_tokens", "draft_tokens") if name in frame.columns}
    keep = []
    for row in range(len(frame)):
        where = {"file": source, "row": row + 1}
        k_row = k.iloc[row]
        if pd.isna(k_row):
            raise BadInput("missing value (NaN or empty)", column="k", **where)
        k_row = int(k_row)
        if k_row < 0:
            raise BadInput(f"must be an integer >= 0, got {k_row}", column="k", **where)
        cells = [counts[i].iloc[row] if i in counts else pd.NA for i in range(1, k_row + 1)]
        n = drafts.iloc[row]
        if k_row == 0 or (pd.isna(n) and all(pd.isna(c) for c in cells)):
            continue                     # dense, or a speculative row without counters
        if pd.isna(n):
            raise BadInput("missing value (NaN or empty)", column="num_drafts", **where)
        missing = [i for i, c in zip(range(1, k_row + 1), cells) if pd.isna(c)]
        if missing:
            raise BadInput(f"k is {k_row} but this position count is missing",
                           column=POSITION_COUNT_COLUMN.format(missing[0]), **where)
        previous, previous_name = int(n), "num_drafts"
        if previous < 0:
            raise BadInput(f"must be an integer >= 0, got {previous}", column="num_drafts",
                           **where)
        for i, count in zip(range(1, k_row + 1), cells):
            name = POSITION_COUNT_COLUMN.format(i)
            if int(count) < 0:
                raise BadInput(f"must be an integer >= 0, got {int(count)}", column=name,
                               **where)
            if int(count) > previous:
                raise BadInput(f"{int(count)} drafts accepted position {i} but only "
                               f"{previous} reached it ({previous_name}): position counts "
                               "must not increase with the position", column=name, **where)
            previous, previous_name = int(count), name
        for i in positions:
            if i > k_row and not pd.isna(counts[i].iloc[row]) and counts[i].iloc[row] != 0:
                raise BadInput(f"a count beyond the draft length k = {k_row}",
                               column=POSITION_COUNT_COLUMN.format(i), **where)
        accepted = sum(int(c) for c in cells)
        if "draft_tokens" in totals and not pd.isna(totals["draft_tokens"].iloc[row]):
            drafted = int(totals["draft_tokens"].iloc[row])
            if accepted > drafted:
                raise BadInput(f"{accepted} accepted tokens (the position counts) but only "
                               f"{drafted} drafted", column="draft_tokens", **where)
        if "accepted_tokens" in totals and not pd.isna(totals["accepted_tokens"].iloc[row]):
            stated = int(totals["accepted_tokens"].iloc[row])
            if stated > k_row * int(n):
                raise BadInput(f"{stated} accepted tokens but only {k_row * int(n)} drafted "
                               f"(k x num_drafts)", column="accepted_tokens", **where)
            if stated != accepted:
                raise BadInput(f"accepted_tokens {stated} is not the sum of the position "
                               f"counts ({accepted})", column="accepted_tokens", **where)
        if int(n) == 0:
            continue                     # an empty window tells nothing
        keep.append(row)
    if not keep:
        raise BadInput("no window of acceptance counters (a row with k > 0, num_drafts > 0 "
                       "and accepted_tokens_pos1..k)", file=source, column="num_drafts")
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
    out["num_drafts"] = drafts.iloc[keep].to_numpy(np.int64)
    for i in range(1, max(positions + [int(out["k"].max())]) + 1):
        values = (counts[i].iloc[keep].fillna(0).to_numpy(np.int64) if i in counts
                  else np.zeros(len(keep), np.int64))
        out[POSITION_COUNT_COLUMN.format(i)] = np.where(out["k"].to_numpy() >= i, values, 0)
    out.attrs["source_file"] = source
    out.attrs["data_rows"] = [row + 1 for row in keep]
    return out
