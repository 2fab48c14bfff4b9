"""Fitted groups: which columns split a tidy table into separately fitted curves, each
group's readable label, the rows that enter the likelihood, and whether a group's
acceptance counters say its rows are one configuration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from bayesspec.data.cells import is_missing
from bayesspec.errors import BadInput


# Columns that, when present, split the data into separately fitted groups.
GROUP_COLUMNS = ("verifier", "drafter", "k", "alpha", "prefill_tokens", "decode_tokens")
# ``run``: repeated load tests of one configuration (each its own curve; `compare` gives
# them a run-level effect, so run-to-run drift is not read as a version effect).
EXTRA_GROUP_COLUMNS = ("gpu", "engine", "engine_version", "method", "run")
#: vLLM's spec_decode_num_accepted_tokens_per_pos: drafts whose first I tokens were accepted.
POSITION_COUNT_COLUMN = "accepted_tokens_pos{}"


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


# ------------------------------------------------------------------ one acceptance per group

#: Rows of one fitted group whose windows disagree on acceptance with a tail probability
#: below this are not one configuration. The bound behind it lets every request accept
#: all its drafted tokens or none, so however much prompts differ, windows of requests
#: drawn from one workload stay inside it.
POOLED_ACCEPTANCE_P = 1e-6
#: Columns that label rows without splitting fitted groups: named when they tell apart
#: windows a group should not pool.
_TELLING_COLUMNS = ("dataset", "workload", "temperature", "source", "run")


def window_tokens(data: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: the drafted and the accepted tokens of its window of drafts, and how many
    requests drafted them (NaN where a row has no window: dense, no counters, or no way
    to count its requests).

    Drafted tokens are k x ``num_drafts`` (``draft_tokens`` without it); accepted ones
    ``accepted_tokens`` (the per-position counts' sum without it). Requests are
    ``n_requests``; without it, every cycle commits its accepted tokens plus one, so a
    window of N drafts and A accepted tokens served (N + A) / (decode_tokens - 1)
    requests (the first output token comes from the prefill).
    """
    n = len(data)

    def column(name):
        if name not in data.columns:
            return np.full(n, np.nan)
        return pd.to_numeric(data[name], errors="coerce").to_numpy(float)

    k = column("k")
    drafts = column("num_drafts")
    drafted = np.where(np.isfinite(drafts), k * drafts, column("draft_tokens"))
    max_k = int(np.nanmax(k)) if n and np.isfinite(k).any() else 0
    positions = np.stack([column(POSITION_COUNT_COLUMN.format(i))
                          for i in range(1, max_k + 1)], axis=1) if max_k > 0 \
        else np.zeros((n, 0))
    positions = np.where(np.arange(1, max_k + 1)[None, :] > k[:, None], 0.0, positions)
    accepted = column("accepted_tokens")
    accepted = np.where(np.isfinite(accepted), accepted, positions.sum(axis=1))
    windows = (k > 0) & (drafted > 0) & np.isfinite(accepted)
    drafted = np.where(windows, drafted, np.nan)
    accepted = np.where(windows, accepted, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        if not np.isfinite(drafts).all():
            drafts = np.where(np.isfinite(drafts), drafts, drafted / k)
        served = (drafts + accepted) / (column("decode_tokens") - 1.0)
    requests = column("n_requests")
    requests = np.where(np.isfinite(requests) & (requests > 0), requests, served)
    requests = np.where(windows & np.isfinite(requests) & (requests > 0), requests, np.nan)
    return drafted, accepted, requests


@dataclass(frozen=True)
class AcceptanceSpread:
    """How far the windows of one fitted group disagree on the share of drafted tokens
    accepted, against the most sampling error their requests allow.

    A window's share is a mean over its n requests of each request's share, a number in
    [0, 1]; whatever the prompts, its variance is at most rho (1 - rho) / n (every request
    accepting all its drafted tokens or none; for requests of like length, and the
    threshold leaves room for unlike ones). ``chi_square`` sums the squared
    deviations from the precision-weighted mean in those units, ``p_value`` its tail with
    ``windows`` - 1 degrees of freedom: an upper bound on the chance of a spread this
    large within one configuration. ``split``: the two sets of rows (1-based data rows)
    that differ most, each with its pooled share.
    """

    group: str
    rows: tuple[int, ...]
    accepted_share: float
    chi_square: float
    p_value: float
    split: tuple[tuple[int, ...], tuple[int, ...]]
    split_shares: tuple[float, float]
    telling_column: str | None = None

    @property
    def windows(self) -> int:
        return len(self.rows)

    @property
    def pooled_ok(self) -> bool:
        """Whether the windows may be one configuration."""
        return not self.p_value < POOLED_ACCEPTANCE_P

    def sentence(self) -> str:
        """'rows 10-18 and 19-27 accept 0.60 and 0.72 of their drafted tokens ...'."""
        first, second = self.split
        a, b = self.split_shares
        digits = 2
        while digits < 4 and round(a, digits) == round(b, digits):
            digits += 1
        told = (f" (they differ in '{self.telling_column}', which does not split fitted "
                "groups)" if self.telling_column else "")
        return (f"rows {row_ranges(first)} and {row_ranges(second)} accept {a:.{digits}f} "
                f"and {b:.{digits}f} of their drafted tokens, beyond any sampling error "
                f"(p = {self.p_value:.0e} even if each request accepted all its drafted "
                f"tokens or none){told}")

    def as_dict(self) -> dict:
        return {"group": self.group, "windows": self.windows,
                "accepted_share": self.accepted_share, "chi_square": self.chi_square,
                "p_value": self.p_value, "one_configuration": self.pooled_ok,
                "split": [{"rows": list(rows), "accepted_share": share}
                          for rows, share in zip(self.split, self.split_shares)]}


def row_ranges(rows) -> str:
    """1-based rows as ranges: (3, 4, 5, 9) -> '3-5, 9'."""
    rows = sorted(int(r) for r in rows)
    parts, start = [], None
    for i, row in enumerate(rows):
        if start is None:
            start = row
        if i + 1 == len(rows) or rows[i + 1] != row + 1:
            parts.append(f"{start}" if start == row else f"{start}-{row}")
            start = None
    return ", ".join(parts)


def acceptance_spread(data: pd.DataFrame, labels) -> dict[str, AcceptanceSpread]:
    """Per group label (``labels``: one per row of ``data``; "" for rows of no group),
    the :class:`AcceptanceSpread` of its windows, for groups with two or more windows
    whose requests are counted (:func:`window_tokens`). Windows of rows set aside from
    the latency likelihood count: acceptance does not depend on the load."""
    from scipy.special import chdtrc

    drafted, accepted, requests = window_tokens(data)
    labels = np.asarray(list(labels), dtype=object)
    counted = np.isfinite(drafted) & np.isfinite(requests)
    out = {}
    for label in dict.fromkeys(labels[counted & (labels != "")]):
        members = np.flatnonzero(counted & (labels == label))
        if len(members) < 2:
            continue
        share = accepted[members] / drafted[members]
        n = requests[members]
        pooled = float(accepted[members].sum() / drafted[members].sum())
        bound = pooled * (1.0 - pooled)
        centre = float(np.sum(n * share) / n.sum())
        chi_square = float(np.sum(n * (share - centre) ** 2) / bound) if bound > 0 else 0.0
        p_value = float(chdtrc(len(members) - 1, chi_square))
        first, second = _widest_split(share, n)
        parts = [members[first], members[second]]
        if parts[1].min() < parts[0].min():
            parts.reverse()
        split = tuple(tuple(int(i) + 1 for i in part) for part in parts)
        shares = tuple(float(accepted[part].sum() / drafted[part].sum()) for part in parts)
        out[str(label)] = AcceptanceSpread(
            group=str(label), rows=tuple(int(i) + 1 for i in members),
            accepted_share=pooled, chi_square=chi_square, p_value=p_value, split=split,
            split_shares=shares, telling_column=_telling_column(data, parts))
    return out


def _widest_split(share: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cut of the windows sorted by share that separates the two weighted means
    most (the largest between-set sum of squares); positions into ``share``."""
    order = np.argsort(share, kind="stable")
    best, cut = -1.0, 1
    for c in range(1, len(order)):
        low, high = order[:c], order[c:]
        w1, w2 = weight[low].sum(), weight[high].sum()
        m1 = np.sum(weight[low] * share[low]) / w1
        m2 = np.sum(weight[high] * share[high]) / w2
        between = w1 * w2 / (w1 + w2) * (m1 - m2) ** 2
        if between > best:
            best, cut = between, c
    return np.sort(order[:cut]), np.sort(order[cut:])


def _telling_column(data: pd.DataFrame, parts: list[np.ndarray]) -> str | None:
    """A labelling column constant within each set of rows and different between them."""
    for column in _TELLING_COLUMNS:
        if column not in data.columns:
            continue
        values = [data[column].iloc[part].astype(str).unique() for part in parts]
        if all(len(v) == 1 for v in values) and values[0][0] != values[1][0]:
            return column
    return None


def check_one_acceptance_per_group(data: pd.DataFrame, source: str = "<data>") -> None:
    """Refuse a fitted group whose acceptance counters say it pools more than one
    configuration (:class:`AcceptanceSpread`): one latent alpha, or one given alpha,
    would stand for sweeps that accept differently, and the latency fit would pay for it
    with set-aside points and a grown noise term."""
    if not {"num_drafts", "draft_tokens"} & set(data.columns):
        return
    groups, index = assign_groups(data)
    labels = groups["label"].to_numpy(object)[index]
    for label, spread in acceptance_spread(data, labels).items():
        if spread.pooled_ok:
            continue
        first = data.iloc[spread.split[0][0] - 1]
        alpha = first.get("alpha")
        if alpha is None or pd.isna(alpha):
            fix = ("set `alpha` per sweep (the acceptance each was run at), or another "
                   "design column that tells them apart")
        else:
            fix = (f"both are labelled alpha {float(alpha):g}: correct `alpha` per sweep, or "
                   "set another design column that tells them apart")
        raise BadInput(f"group '{label}' pools windows that are not one configuration: "
                       f"{spread.sentence()}; {fix}", file=source,
                       row=spread.split[1][0], column="alpha")


def labels_in_short(labels: list[str]) -> str:
    """Group labels said once: one label as it is; several as the words they share and,
    in parentheses, what sets each apart ('Qwen3-8B +EAGLE3 p512 g512 (k2 a0.7, k3 a0.8)')."""
    if len(labels) == 1:
        return labels[0]
    words = [label.split() for label in labels]
    shared = [w for w in words[0] if all(w in other for other in words[1:])]
    own = [" ".join(w for w in split if w not in shared) for split in words]
    if not shared or not all(own):       # one label inside another: say them whole
        return ", ".join(labels)
    return f"{' '.join(shared)} ({', '.join(own)})"
