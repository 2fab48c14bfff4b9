"""Fitted groups: which columns split a tidy table into separately fitted curves, each
group's readable label, and the rows that enter the likelihood.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayesspec.data.cells import is_missing


# Columns that, when present, split the data into separately fitted groups.
GROUP_COLUMNS = ("verifier", "drafter", "k", "alpha", "prefill_tokens", "decode_tokens")
# ``run``: repeated load tests of one configuration (each its own curve; `compare` gives
# them a run-level effect, so run-to-run drift is not read as a version effect).
EXTRA_GROUP_COLUMNS = ("gpu", "engine", "engine_version", "method", "run")


def included(data: pd.DataFrame) -> pd.DataFrame:
    """Rows that enter the likelihood (not saturated, not otherwise excluded)."""
    return data.loc[~data["excluded"]]


def group_columns(data: pd.DataFrame) -> list[str]:
    """Columns that identify a fitted group: the design columns plus any extra present."""
    extra = [c for c in EXTRA_GROUP_COLUMNS if c in data.columns
             and data[c].nunique(dropna=False) > 1]
    return list(GROUP_COLUMNS) + extra


def group_label(row: pd.Series | dict, columns: list[str]) -> str:
    """A short readable label: 'Qwen3-8B p512 g512', '... +EAGLE k3 a0.8'."""
    parts = [str(row["verifier"])]
    if row.get("drafter"):
        parts.append(f"+{row['drafter']}")
    if int(row.get("k", 0)) > 0:
        parts.append(f"k{int(row['k'])}")
        alpha = row.get("alpha")
        if not is_missing(alpha):
            parts.append(f"a{float(alpha):g}")
    if not is_missing(row.get("prefill_tokens")):
        parts.append(f"p{int(row['prefill_tokens'])}")
    if not is_missing(row.get("decode_tokens")):
        parts.append(f"g{int(row['decode_tokens'])}")
    for column in columns:
        if column in EXTRA_GROUP_COLUMNS and row.get(column):
            parts.append(f"{column}={row[column]}")
    return " ".join(parts)


def assign_groups(data: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """The table of distinct groups (one row each, with a ``label``) and each row's index."""
    columns = group_columns(data)
    keys = data[columns].astype(object).where(data[columns].notna(), None)
    tuples = [tuple(row) for row in keys.itertuples(index=False, name=None)]
    order: dict[tuple, int] = {}
    index = np.empty(len(tuples), dtype=np.int64)
    for i, key in enumerate(tuples):
        index[i] = order.setdefault(key, len(order))
    table = pd.DataFrame([dict(zip(columns, key)) for key in order], columns=columns)
    table["label"] = [group_label(row, columns) for row in table.to_dict("records")]
    # Two groups differing only in an unprintable way would get the same label.
    if table["label"].duplicated().any():
        table["label"] = [f"{label} #{i}" for i, label in enumerate(table["label"])]
    return table, index


def row_group_labels(data: pd.DataFrame, groups: pd.DataFrame) -> list[str]:
    """The fitted group label of every row ("" for rows whose group was not fitted)."""
    columns = [c for c in groups.columns if c in data.columns and c in
               set(GROUP_COLUMNS) | set(EXTRA_GROUP_COLUMNS)]
    known = set(groups["label"])
    labels = [group_label(row, columns) for row in data.to_dict("records")]
    return [label if label in known else "" for label in labels]
