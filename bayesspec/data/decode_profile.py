"""The engine's decode-iteration profile: seconds per decode iteration by batch size.

Eq. (1) takes a decode iteration's time as linear in the batch. Real engines are not:
on Vidur's A100 TP4 profiles a 70B model's decode iteration takes 40 ms up to 16
sequences, 36 ms at 28 (the all-reduce's fast band) and 51 ms at 128 (a GEMM tile step on
the way), and the sweeps kink at about 30 requests in flight, far below any cap
(examples/vidur/README.md). The profile is a measured curve per setup, not a free
function of the load: vLLM's ``benchmark_latency`` at a few batch sizes, or the engine's
per-iteration timings, give it. With it the law is
L = C1 + C2 N + :func:`bayesspec.laws.decode_profile_shift` (N), N = RPS x L.

A profile file (CSV or Parquet) has one row per batch size:

- ``batch_size`` (integer >= 1) and ``decode_iteration_s`` (seconds, > 0);
- any of :data:`PROFILE_KEY_COLUMNS`, naming the setup the row belongs to. A profile
  applies to every fitted group whose rows carry the same values in the key columns the
  file has (a file without key columns is one profile for every group).

:func:`read_decode_profile` checks a file; :func:`match_profiles` gives each fitted
group its profile.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from bayesspec.errors import BadInput

PROFILE_COLUMNS = ("batch_size", "decode_iteration_s")
#: Columns that say which setup a profile row belongs to (tidy-data names).
PROFILE_KEY_COLUMNS = ("verifier", "gpu", "tensor_parallel", "engine", "engine_version",
                       "prefill_tokens", "decode_tokens")


def read_decode_profile(path: str | os.PathLike) -> pd.DataFrame:
    """The profile table of ``path``, checked: the two value columns present and valid,
    one row per batch size within each setup, at least two batch sizes per setup.
    A one-line :class:`BadInput` naming the file, row and column otherwise."""
    from pathlib import Path

    from bayesspec.data.read import read_raw

    source = str(path)
    table = read_raw(Path(path))
    table.columns = [str(c).strip() for c in table.columns]
    missing = [c for c in PROFILE_COLUMNS if c not in table.columns]
    if missing:
        raise BadInput(f"a decode profile needs the column(s) {', '.join(missing)} "
                       f"(and optionally {', '.join(PROFILE_KEY_COLUMNS)})", file=source)
    if table.empty:
        raise BadInput("no rows", file=source)
    sizes = pd.to_numeric(table["batch_size"], errors="coerce")
    bad = sizes.isna() | (sizes < 1) | (sizes != np.floor(sizes))
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise BadInput(f"must be an integer >= 1, got {table['batch_size'].iloc[row]!r}",
                       file=source, row=row + 1, column="batch_size")
    times = pd.to_numeric(table["decode_iteration_s"], errors="coerce")
    bad = times.isna() | ~np.isfinite(times) | (times <= 0)
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise BadInput(f"must be a positive number of seconds, got "
                       f"{table['decode_iteration_s'].iloc[row]!r}",
                       file=source, row=row + 1, column="decode_iteration_s")
    table = table.assign(batch_size=sizes.astype(int), decode_iteration_s=times.astype(float))
    keys = profile_keys(table)
    seen = table.duplicated(subset=[*keys, "batch_size"], keep="first")
    if seen.any():
        row = int(np.flatnonzero(seen.to_numpy())[0])
        raise BadInput(f"batch size {table['batch_size'].iloc[row]} appears twice for one "
                       "setup", file=source, row=row + 1, column="batch_size")
    for _, rows in (table.groupby(keys, dropna=False, sort=False) if keys
                    else [(None, table)]):
        if len(rows) < 2:
            row = int(rows.index[0])
            raise BadInput("a setup's profile needs at least two batch sizes",
                           file=source, row=row + 1, column="batch_size")
    table.attrs["source_file"] = source
    return table


def profile_keys(table: pd.DataFrame) -> list[str]:
    """The key columns a profile table has."""
    return [c for c in PROFILE_KEY_COLUMNS if c in table.columns]


def _same(value, wanted) -> bool:
    if pd.isna(value) and pd.isna(wanted):
        return True
    try:
        return float(value) == float(wanted)
    except (TypeError, ValueError):
        return str(value).strip() == str(wanted).strip()


def match_profiles(rows: pd.DataFrame, group_index: np.ndarray, n_groups: int,
                   profile: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each fitted group's profile: (batch sizes, seconds per iteration), both (G, K)
    padded with NaN, rows of NaN for a group no profile names. Speculative groups
    (k > 0) take none: a profile times one-token decode iterations, not verifications.
    Two different profiles for one group is an error naming the group's first row."""
    source = profile.attrs.get("source_file")
    keys = profile_keys(profile)
    missing = [c for c in keys if c not in rows.columns]
    if missing:
        raise BadInput(f"the decode profile is keyed by {', '.join(missing)}, which the "
                       "data do not have", file=source, column=missing[0])
    chosen: list[pd.DataFrame | None] = []
    for g in range(n_groups):
        first = rows.iloc[int(np.flatnonzero(group_index == g)[0])]
        mask = np.ones(len(profile), dtype=bool)
        for column in keys:
            mask &= np.array([_same(v, first[column]) for v in profile[column]])
        members = profile.loc[mask]
        if members.empty:
            chosen.append(None)
            continue
        if members["batch_size"].duplicated().any():
            raise BadInput(f"more than one profile matches the group of data row "
                           f"{int(np.flatnonzero(group_index == g)[0]) + 1}: add key columns "
                           f"({', '.join(c for c in PROFILE_KEY_COLUMNS if c not in keys)}) "
                           "to tell them apart", file=source)
        k = pd.to_numeric(first.get("k", 0), errors="coerce")
        if pd.notna(k) and k > 0:
            raise BadInput("a decode profile times one-token decode iterations; it does not "
                           f"apply to speculative rows (k = {int(k)}): fit those without "
                           "--decode-profile", file=source)
        chosen.append(members.sort_values("batch_size"))
    width = max([len(m) for m in chosen if m is not None], default=0)
    sizes = np.full((n_groups, width), np.nan)
    times = np.full((n_groups, width), np.nan)
    for g, members in enumerate(chosen):
        if members is not None:
            sizes[g, :len(members)] = members["batch_size"].to_numpy(float)
            times[g, :len(members)] = members["decode_iteration_s"].to_numpy(float)
    return sizes, times


def group_profile(sizes: np.ndarray, times: np.ndarray, group: int):
    """One group's (batch sizes, seconds per iteration) without padding, or None."""
    keep = np.isfinite(sizes[group])
    if not keep.any():
        return None
    return sizes[group][keep], times[group][keep]
