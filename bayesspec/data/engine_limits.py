"""The engine's limits on what shares a batch (``max_num_seqs``, ``kv_cache_tokens``,
``max_num_batched_tokens``): filled from command-line flags, one value per configuration,
and the concurrency cap they set (docs/laws.md, "the concurrency cap").
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayesspec.data.cells import first_bad_row
from bayesspec.data.columns import ENGINE_LIMIT_COLUMNS
from bayesspec.data.groups import assign_groups
from bayesspec.errors import BadInput


ENGINE_LIMIT_FLAGS = {"max_num_seqs": "--max-num-seqs", "kv_cache_tokens": "--kv-cache-tokens",
                      "max_num_batched_tokens": "--max-num-batched-tokens"}


def apply_engine_limits(out: pd.DataFrame, limits: dict, source: str) -> None:
    """Fill engine-limit columns from flags where the file has no value; a flag that
    contradicts a value the file has is an error (one of the two is wrong)."""
    for column, value in limits.items():
        if value is None:
            continue
        flag = ENGINE_LIMIT_FLAGS[column]
        if isinstance(value, bool) or not float(value).is_integer() or value < 1:
            raise BadInput(f"must be a whole number >= 1, got {value:g}", option=flag)
        if column not in out.columns:
            out[column] = pd.array([int(value)] * len(out), dtype="Int64")
            continue
        differs = out[column].notna() & out[column].ne(int(value))
        if differs.fillna(False).any():
            row = first_bad_row(differs.fillna(False))
            raise BadInput(f"the file says {out[column].iloc[row - 1]}, {flag} says "
                           f"{int(value)}: drop the flag or fix the file", file=source,
                           row=row, column=column)
        out[column] = out[column].fillna(int(value)).astype("Int64")


def check_engine_limits(out: pd.DataFrame, source: str) -> None:
    """One configuration ran on one engine: its rows must agree on each limit."""
    present = [c for c in ENGINE_LIMIT_COLUMNS if c in out.columns]
    if not present:
        return
    _, index = assign_groups(out)
    for column in present:
        values = out[column].astype("Float64")
        for group in np.unique(index):
            members = np.flatnonzero(index == group)
            seen = values.iloc[members]
            if seen.nunique(dropna=False) <= 1:
                continue
            first = seen.iloc[0]
            other = (seen.ne(first) if not pd.isna(first) else seen.notna()).fillna(True)
            row = int(members[np.flatnonzero(other.to_numpy(bool))[0]]) + 1
            shown = "empty" if pd.isna(values.iloc[row - 1]) else int(values.iloc[row - 1])
            raise BadInput(f"differs within one configuration ({shown} here, "
                           f"{'empty' if pd.isna(first) else int(first)} in row "
                           f"{members[0] + 1}): one configuration runs on one engine "
                           "setting; label the settings apart (e.g. engine_version) or fix "
                           "the value", file=source, row=row, column=column)


def concurrency_caps(data: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Per row, the engine's effective cap on requests in the batch
    (:func:`bayesspec.laws.concurrency_cap`: ``max_num_seqs``, the KV cache over a
    request's footprint, the step's token budget over k + 1 verification tokens) and
    which limit sets it; ``inf`` and "" where the row's limits are unknown."""
    from bayesspec.laws import binding_cap_source, concurrency_cap

    def column(name):
        if name not in data.columns:
            return np.full(len(data), np.nan)
        return pd.to_numeric(data[name], errors="coerce").to_numpy(float)

    inputs = [column(c) for c in ENGINE_LIMIT_COLUMNS] + [
        column("prefill_tokens"), column("decode_tokens"), data["k"].to_numpy(float)]
    caps = np.asarray(concurrency_cap(*inputs), dtype=float)
    if not np.isfinite(caps).any():
        return caps, [""] * len(data)
    sources = [binding_cap_source(*values) if np.isfinite(cap) else ""
               for cap, values in zip(caps, zip(*inputs))]
    return caps, sources
