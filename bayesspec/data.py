"""Tidy load-test data: one row per load point (CONTRACT.md, "Tidy data").

``read_tidy`` is the one door through which files enter the package. It reads CSV or
Parquet, checks every value, fills the design defaults, attaches catalog covariates and
marks the saturated points that the likelihood must ignore. Any problem raises
:class:`bayesspec.errors.BadInput` naming the file, the row (1-based data row, the
header is not counted) and the column.
"""

from __future__ import annotations

import csv
import difflib
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import BadInput
from .filekinds import SNIFF_BYTES, describe_report
from .schema import METRIC_COLUMNS

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

STRING_COLUMNS = ("verifier", "drafter", "gpu", "engine", "engine_version", "method",
                  "source", "strategy")
# The engine's limits on what shares a batch (vLLM's names): the concurrency cap comes
# from them (``concurrency_caps``).
ENGINE_LIMIT_COLUMNS = ("max_num_seqs", "kv_cache_tokens", "max_num_batched_tokens")
INTEGER_COLUMNS = ("k", "prefill_tokens", "decode_tokens", "n_requests", "num_drafts",
                   "draft_tokens", "accepted_tokens", "experts_active", "experts_total",
                   *ENGINE_LIMIT_COLUMNS)
POSITIVE_FLOAT_COLUMNS = ("rps", "latency_mean_s")
NONNEGATIVE_FLOAT_COLUMNS = tuple(dict.fromkeys(
    ("rps_target", "latency_std_s") + SUMMARY_COLUMNS
    + ("verifier_params_b", "drafter_params_b", "mean_concurrency")))
BOOLEAN_COLUMNS = ("saturated", "latency_reconstructed")

# Columns other producers write (ingest, the simulator) and the bookkeeping columns of a
# prepared table: known, so that a near miss of one of them is caught as a typo.
OTHER_KNOWN_COLUMNS = ("acceptance_rate", "acceptance_length", "excluded",
                       "exclusion_reason")
KNOWN_COLUMNS = tuple(dict.fromkeys(
    REQUIRED_COLUMNS + tuple(DESIGN_DEFAULTS) + STRING_COLUMNS + INTEGER_COLUMNS
    + POSITIVE_FLOAT_COLUMNS + NONNEGATIVE_FLOAT_COLUMNS + BOOLEAN_COLUMNS
    + OTHER_KNOWN_COLUMNS))

# Columns that, when present, split the data into separately fitted groups.
GROUP_COLUMNS = ("verifier", "drafter", "k", "alpha", "prefill_tokens", "decode_tokens")
EXTRA_GROUP_COLUMNS = ("gpu", "engine", "engine_version", "method")

# An achieved rate this far below the target rate means the server could not keep up.
SHORTFALL_FRACTION = 0.90

_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f", ""}


@dataclass(frozen=True)
class SaturationRule:
    """How saturated load points are recognised (all rules apply together).

    - the row's ``saturated`` column is true;
    - the row's ``strategy`` is ``throughput`` (GuideLLM's ceiling-finding run);
    - ``rps_target`` is given and the achieved ``rps`` is below ``shortfall`` of it;
    - ``max_rps`` is given and the row's ``rps`` exceeds it (a user override);
    - with ``detect``, what the numbers show (:func:`detect_saturation`).
    """

    max_rps: float | None = None
    shortfall: float = SHORTFALL_FRACTION
    # Also read saturation off the data themselves (:func:`detect_saturation`), for
    # files that do not say which points were overloaded.
    detect: bool = True


def read_tidy(path: str | os.PathLike, *, catalog=None,
              saturation: SaturationRule | None = None,
              engine_limits: dict | None = None) -> pd.DataFrame:
    """Read and validate a tidy CSV or Parquet file.

    Returns a DataFrame with every CONTRACT column that applies, the defaults filled,
    catalog covariates attached, and two bookkeeping columns: ``excluded`` (bool) and
    ``exclusion_reason`` (str). ``df.attrs['source_file']`` holds the path.
    ``engine_limits`` ({column of :data:`ENGINE_LIMIT_COLUMNS`: value}, from flags such as
    ``--max-num-seqs``) fill those columns where the file has no value.
    """
    path = Path(path)
    raw = _read_raw(path)
    return prepare(raw, source=str(path), catalog=catalog, saturation=saturation,
                   engine_limits=engine_limits)


def prepare(raw: pd.DataFrame, *, source: str = "<data>", catalog=None,
            saturation: SaturationRule | None = None,
            engine_limits: dict | None = None) -> pd.DataFrame:
    """Validate an in-memory table the same way as a file (used by tests and readers)."""
    if raw.shape[0] == 0:
        raise BadInput("no data rows", file=source)
    frame = raw.copy()
    frame.columns = [str(c).strip() for c in frame.columns]
    duplicated = frame.columns[frame.columns.duplicated()]
    if len(duplicated):
        raise BadInput("column appears twice", file=source, column=duplicated[0])
    summaries = [c for c in SUMMARY_COLUMNS if c in frame.columns]
    mean_given = "latency_mean_s" in frame.columns and not _blank(frame["latency_mean_s"]).all()
    for column in REQUIRED_COLUMNS:
        if column not in frame.columns:
            if column == "latency_mean_s" and summaries:
                continue          # percentiles without a mean: the tails model's case
            near = difflib.get_close_matches(column, [str(c) for c in frame.columns], n=1,
                                             cutoff=0.6)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            if column == "latency_mean_s":
                hint += " (or give latency percentiles: latency_p50_s, ttft_p99_s, ...)"
            raise BadInput(f"required column is missing{hint}", file=source, column=column)
    if not mean_given and summaries:
        frame = frame.drop(columns=["latency_mean_s"], errors="ignore")
    for column in frame.columns:
        known = near_miss(column)
        if known is not None:
            raise BadInput(f"unknown column: did you mean '{known}'? (rename it; columns "
                           f"that are not near misses of known ones are kept as they are)",
                           file=source, column=column)

    out = pd.DataFrame(index=pd.RangeIndex(len(frame)))
    for column in frame.columns:
        values = frame[column]
        if column in STRING_COLUMNS:
            out[column] = _as_strings(values)
        elif column in BOOLEAN_COLUMNS:
            out[column] = _as_booleans(values, source, column)
        elif column in INTEGER_COLUMNS:
            out[column] = _as_integers(values, source, column)
        elif column in POSITIVE_FLOAT_COLUMNS or column in NONNEGATIVE_FLOAT_COLUMNS \
                or column == "alpha":
            out[column] = _as_floats(values, source, column,
                                     required=column in REQUIRED_COLUMNS)
        else:
            out[column] = values.reset_index(drop=True)

    if "latency_mean_s" not in out.columns:
        out["latency_mean_s"] = np.nan
        _check_summaries_given(out, summaries, source)
    _apply_engine_limits(out, engine_limits or {}, source)
    _check_ranges(out, source)
    for column, default in DESIGN_DEFAULTS.items():
        if column not in out.columns:
            out[column] = default
    out["prefill_tokens"] = out["prefill_tokens"].astype("Int64")
    out["decode_tokens"] = out["decode_tokens"].astype("Int64")
    k_given = out["k"].notna()
    out["k"] = out["k"].fillna(0).astype("int64")
    out["alpha"] = out["alpha"].astype(float)
    _check_speculative_rows(out, k_given, "k" in frame.columns, source)
    _check_design(out, source)
    _check_engine_limits(out, source)
    _attach_catalog(out, catalog)
    _mark_saturated(out, saturation or SaturationRule())
    out.attrs["source_file"] = source
    return out


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


def _check_summaries_given(out: pd.DataFrame, summaries: list[str], source: str) -> None:
    """Without a mean latency, every row needs a latency summary of its own."""
    given = np.zeros(len(out), dtype=bool)
    for column in summaries:
        given |= (out[column] > 0).to_numpy()
    if not given.all():
        raise BadInput("no latency: the file has no latency_mean_s and this row has none of "
                       f"its percentile columns ({', '.join(summaries)})", file=source,
                       row=_first_bad(~pd.Series(given)), column=summaries[0])


def included(data: pd.DataFrame) -> pd.DataFrame:
    """Rows that enter the likelihood (not saturated, not otherwise excluded)."""
    return data.loc[~data["excluded"]]


def near_miss(column: str) -> str | None:
    """The known column that ``column`` looks like a misspelling of, or None.

    Known columns (CONTRACT.md, what ingest and the simulator write) are never near misses.
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
        if not _isna(alpha):
            parts.append(f"a{float(alpha):g}")
    if not _isna(row.get("prefill_tokens")):
        parts.append(f"p{int(row['prefill_tokens'])}")
    if not _isna(row.get("decode_tokens")):
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


def plain_value(value):
    """A table cell as a plain Python value: None for missing, int/float for numpy."""
    if value is None or value is pd.NA:
        return None
    if isinstance(value, (float, np.floating)) and math.isnan(value):
        return None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def _isna(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


# ------------------------------------------------------------------------------------
# Reading
# ------------------------------------------------------------------------------------

def _read_raw(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise BadInput("no such file", file=str(path))
    if path.is_dir():
        raise BadInput("is a directory, not a data file", file=str(path))
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError as error:
        raise BadInput(f"cannot read: {error.strerror}", file=str(path)) from None
    if not head.strip():
        raise BadInput("empty file", file=str(path))
    if head.startswith(b"PAR1") or path.suffix.lower() in {".parquet", ".pq"}:
        try:
            return pd.read_parquet(path)
        except Exception as error:  # pyarrow raises many types for a damaged file
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise BadInput(f"not a readable Parquet file ({reason})", file=str(path)) from None
    if b"\x00" in head:
        raise BadInput("binary file, expected CSV or Parquet", file=str(path))
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as error:
        if error.start < len(head) - 4:  # a cut multi-byte character at the end is fine
            raise BadInput("not UTF-8 text, expected CSV or Parquet", file=str(path)) from None
    _refuse_report(path, head)
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True,
                            comment=None)
    except pd.errors.EmptyDataError:
        raise BadInput("empty file", file=str(path)) from None
    except pd.errors.ParserError as error:
        raise _ragged_csv(path, _parser_error_line(str(error))) from None
    except UnicodeDecodeError:
        raise BadInput("not UTF-8 text, expected CSV or Parquet", file=str(path)) from None
    if not isinstance(frame.index, pd.RangeIndex):
        # Every data row has one field more than the header: pandas silently took the
        # first column as the index and shifted the others onto the wrong names.
        raise _ragged_csv(path, None)
    # pandas renames a repeated header name ('rps', 'rps.1'); the raw header tells.
    try:
        header = _csv_records(path, 1)
    except (UnicodeDecodeError, csv.Error):  # pandas read it; leave the rest to prepare()
        header = []
    names = [name.strip() for name in header[0][1]] if header else []
    repeated = [name for i, name in enumerate(names) if name in names[:i]]
    if repeated:
        raise BadInput("column appears twice", file=str(path), column=repeated[0])
    return frame


def _refuse_report(path: Path, head: bytes) -> None:
    """A load-test report or a scrape given where a tidy table belongs: say what it is
    and that ``bayesspec ingest`` turns it into one."""
    first = head.decode("utf-8", errors="ignore").lstrip("\ufeff \t\r\n")
    if not (first[:1] in ("{", "[") or path.suffix.lower() in (".yaml", ".yml", ".json",
                                                                ".jsonl", ".prom", ".metrics")
            or first.startswith("# ") or re.search(r"^benchmarks:\s*$", first, re.MULTILINE)):
        return          # the common case, a CSV: no second read
    try:
        with open(path, "rb") as handle:
            text = handle.read(SNIFF_BYTES).decode("utf-8", errors="ignore")
    except OSError as error:
        raise BadInput(f"cannot read: {error.strerror}", file=str(path)) from None
    what = describe_report(text, path.name)
    if what is None:
        return
    if what == "a Prometheus /metrics scrape":
        raise BadInput(f"{what}, not a tidy table: give it to `bayesspec ingest` with the "
                       f"load-test report it goes with (--metrics BEFORE AFTER)",
                       file=str(path))
    if what in ("a JSON document", "a JSON Lines file", "a YAML file"):
        raise BadInput(f"{what}, not a tidy table (CSV or Parquet); for a GuideLLM or vllm "
                       f"bench report, run `bayesspec ingest {path.name} -o data.csv` first",
                       file=str(path))
    raise BadInput(f"{what}, not a tidy table: run `bayesspec ingest {path.name} -o "
                   f"data.csv` first", file=str(path))


def _csv_records(path: Path, limit: int | None = None) -> list[tuple[int, list[str]]]:
    """Non-blank CSV records with the file line each ends on (header first)."""
    records = []
    with open(path, newline="", encoding="utf-8-sig") as stream:
        reader = csv.reader(stream, skipinitialspace=True)
        for record in reader:
            if len(record) > 1 or (record and record[0].strip()):  # pandas skips blank lines
                records.append((reader.line_num, record))
                if limit is not None and len(records) >= limit:
                    break
    return records


def _ragged_csv(path: Path, line: int | None) -> BadInput:
    """The error for the first data row with more fields than the header."""
    try:
        records = _csv_records(path)
    except (OSError, UnicodeDecodeError, csv.Error):
        records = []
    if records:
        width = len(records[0][1])
        for row, (end_line, record) in enumerate(records[1:], start=1):
            if len(record) > width:
                return BadInput(f"malformed CSV: {len(record)} fields but the header has "
                                f"{width} (line {end_line})", file=str(path), row=row)
    where = f" at line {line}" if line else ""
    return BadInput(f"malformed CSV{where}: wrong number of fields", file=str(path))


def _parser_error_line(message: str) -> int | None:
    words = message.replace(",", " ").split()
    for i, word in enumerate(words[:-1]):
        if word == "line" and words[i + 1].isdigit():
            return int(words[i + 1])
    return None


def _blank(values: pd.Series) -> pd.Series:
    if values.dtype == object or pd.api.types.is_string_dtype(values):
        text = values.astype(str).str.strip()
        return values.isna() | text.eq("") | text.str.lower().isin({"nan", "na", "null", "none"})
    return values.isna()


def _as_strings(values: pd.Series) -> pd.Series:
    blank = _blank(values)
    return values.astype(str).str.strip().where(~blank, "").reset_index(drop=True)


def _first_bad(mask: pd.Series) -> int:
    return int(np.flatnonzero(np.asarray(mask))[0]) + 1


def _as_floats(values: pd.Series, source: str, column: str, *, required: bool) -> pd.Series:
    values = values.reset_index(drop=True)
    blank = _blank(values)
    numbers = pd.to_numeric(values.where(~blank), errors="coerce").astype(float)
    not_numeric = ~blank & numbers.isna()
    if not_numeric.any():
        row = _first_bad(not_numeric)
        raise BadInput(f"not a number: {str(values.iloc[row - 1])[:40]!r}",
                       file=source, row=row, column=column)
    if required and blank.any():
        raise BadInput("missing value (NaN or empty)", file=source, row=_first_bad(blank),
                       column=column)
    infinite = np.isinf(numbers)
    if infinite.any():
        raise BadInput("infinite value", file=source, row=_first_bad(infinite), column=column)
    return numbers


def _as_integers(values: pd.Series, source: str, column: str) -> pd.Series:
    numbers = _as_floats(values, source, column, required=False)
    fractional = numbers.notna() & (numbers != np.round(numbers))
    if fractional.any():
        row = _first_bad(fractional)
        raise BadInput(f"not a whole number: {numbers.iloc[row - 1]:g}", file=source,
                       row=row, column=column)
    return numbers.round().astype("Int64")


def _as_booleans(values: pd.Series, source: str, column: str) -> pd.Series:
    values = values.reset_index(drop=True)
    if pd.api.types.is_bool_dtype(values):
        return values.astype(bool)
    text = values.astype(str).str.strip().str.lower().where(~values.isna(), "")
    text = text.replace({"1.0": "1", "0.0": "0"})
    unknown = ~text.isin(_TRUE | _FALSE)
    if unknown.any():
        row = _first_bad(unknown)
        raise BadInput(f"not true/false: {str(values.iloc[row - 1])[:40]!r}", file=source,
                       row=row, column=column)
    return text.isin(_TRUE)


def _check_ranges(out: pd.DataFrame, source: str) -> None:
    for column in POSITIVE_FLOAT_COLUMNS:
        bad = out[column] <= 0
        if bad.any():
            row = _first_bad(bad)
            raise BadInput(f"must be > 0, got {out[column].iloc[row - 1]:g}", file=source,
                           row=row, column=column)
    for column in NONNEGATIVE_FLOAT_COLUMNS:
        if column in out.columns:
            bad = out[column] < 0
            if bad.any():
                row = _first_bad(bad)
                raise BadInput(f"must be >= 0, got {out[column].iloc[row - 1]:g}",
                               file=source, row=row, column=column)
    if "alpha" in out.columns:
        bad = (out["alpha"] < 0) | (out["alpha"] > 1)
        if bad.any():
            row = _first_bad(bad)
            raise BadInput(f"must be within [0, 1], got {out['alpha'].iloc[row - 1]:g}",
                           file=source, row=row, column="alpha")
    for column in INTEGER_COLUMNS:
        if column not in out.columns:
            continue
        low = 1 if column in {"prefill_tokens", "decode_tokens", "n_requests",
                              "experts_total", *ENGINE_LIMIT_COLUMNS} else 0
        bad = out[column].notna() & (out[column] < low)
        if bad.any():
            row = _first_bad(bad.fillna(False))
            raise BadInput(f"must be an integer >= {low}, got {out[column].iloc[row - 1]}",
                           file=source, row=row, column=column)


def _check_speculative_rows(out: pd.DataFrame, k_given: pd.Series, k_column: bool,
                            source: str) -> None:
    """A drafter or an alpha on a row that is dense by k (k = 0, empty or no k column) is
    a contradiction: the row would silently be fitted as dense."""
    drafter = out["drafter"].ne("")
    alpha = out["alpha"].notna()
    bad = (drafter | alpha) & out["k"].eq(0)
    if not bad.any():
        return
    row = _first_bad(bad)
    i = row - 1
    what = (f"drafter '{out['drafter'].iloc[i]}'" if drafter.iloc[i] else "")
    if alpha.iloc[i]:
        what += (" and " if what else "") + f"alpha {out['alpha'].iloc[i]:g}"
    if not k_column:
        state = "there is no k column"
    elif not k_given.iloc[i]:
        state = "k is empty"
    else:
        state = "k is 0 (dense)"
    raise BadInput(f"{state} but the row has {what}: add k (the draft length) to "
                   f"speculative rows, or clear drafter and alpha on dense rows", file=source,
                   row=row, column="k")


def _check_design(out: pd.DataFrame, source: str) -> None:
    if {"experts_active", "experts_total"} <= set(out.columns):
        bad = (out["experts_active"] > out["experts_total"]).fillna(False)
        if bad.any():
            raise BadInput("more active experts than experts", file=source,
                           row=_first_bad(bad), column="experts_active")
    if {"draft_tokens", "accepted_tokens"} <= set(out.columns):
        bad = (out["accepted_tokens"] > out["draft_tokens"]).fillna(False)
        if bad.any():
            raise BadInput("more accepted than drafted tokens", file=source,
                           row=_first_bad(bad), column="accepted_tokens")


#: The command-line flag of each engine limit.
ENGINE_LIMIT_FLAGS = {"max_num_seqs": "--max-num-seqs", "kv_cache_tokens": "--kv-cache-tokens",
                      "max_num_batched_tokens": "--max-num-batched-tokens"}


def _apply_engine_limits(out: pd.DataFrame, limits: dict, source: str) -> None:
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
            row = _first_bad(differs.fillna(False))
            raise BadInput(f"the file says {out[column].iloc[row - 1]}, {flag} says "
                           f"{int(value)}: drop the flag or fix the file", file=source,
                           row=row, column=column)
        out[column] = out[column].fillna(int(value)).astype("Int64")


def _check_engine_limits(out: pd.DataFrame, source: str) -> None:
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
    from .laws import binding_cap_source, concurrency_cap

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


def _in_system(data: pd.DataFrame) -> np.ndarray:
    """Requests in the system per row: the measured time-average where the file has it,
    otherwise RPS x mean latency (Little's law; a file without a mean: its reference
    latency, :func:`reference_latency`)."""
    little = data["rps"].to_numpy(float) * reference_latency(data)
    if "mean_concurrency" not in data.columns:
        return little
    measured = pd.to_numeric(data["mean_concurrency"], errors="coerce").to_numpy(float)
    return np.where(np.isfinite(measured), measured, little)


def _past_the_cap(out: pd.DataFrame, reason: pd.Series) -> pd.Series:
    """Points with more requests in the system than the engine can batch: past the
    ceiling, in a queue that grows with the run, where no steady-state law applies."""
    caps, sources = concurrency_caps(out)
    if not np.isfinite(caps).any():
        return reason
    in_system = _in_system(out)
    past = np.isfinite(caps) & (in_system > caps) & reason.eq("").to_numpy()
    if not past.any():
        return reason
    reason = reason.copy()
    _, index = assign_groups(out)
    rps = out["rps"].to_numpy(float)
    for i in np.flatnonzero(past):
        below = np.flatnonzero((index == index[i]) & ~past & reason.eq("").to_numpy())
        hint = (f"the highest rate below it here is {rps[below].max():.4g} RPS; measure "
                "between that and this rate to place the ceiling" if len(below)
                else "measure at lower rates")
        reason.iloc[i] = (f"past the engine's ceiling: {in_system[i]:.0f} requests in the "
                          f"system against a cap of {caps[i]:.0f} ({sources[i]}), so the "
                          f"queue grows with the run and no steady-state law applies; "
                          f"{hint}")
    return reason


def _attach_catalog(out: pd.DataFrame, catalog) -> None:
    """Fill parameter counts and expert counts from the catalog where the data lack them."""
    if catalog is None:
        try:
            from .catalog import default_catalog
            catalog = default_catalog()
        except Exception:  # an unusable user catalog must not block reading data
            return
    def lookup(name):
        return catalog.find_model(name) if name else None

    cards = {name: lookup(name) for name in set(out["verifier"]) | set(out["drafter"])}
    fill = {
        "verifier_params_b": ("verifier", lambda c: c.params_total_b),
        "drafter_params_b": ("drafter", lambda c: c.params_total_b),
        "experts_active": ("verifier", lambda c: c.experts_active if c.is_moe else pd.NA),
        "experts_total": ("verifier", lambda c: c.experts_total if c.is_moe else pd.NA),
    }
    for column, (by, getter) in fill.items():
        from_catalog = out[by].map(lambda name: getter(cards[name]) if cards.get(name) else pd.NA)
        if column in out.columns:
            out[column] = out[column].where(out[column].notna(), from_catalog)
        else:
            out[column] = from_catalog
    for column in ("verifier_params_b", "drafter_params_b"):
        out[column] = pd.to_numeric(out[column], errors="coerce").astype(float)
    for column in ("experts_active", "experts_total"):
        out[column] = pd.to_numeric(out[column], errors="coerce").astype("Int64")


def _mark_saturated(out: pd.DataFrame, rule: SaturationRule) -> None:
    reason = pd.Series("", index=out.index, dtype=object)
    if "saturated" in out.columns:
        reason = reason.where(~out["saturated"].astype(bool), "marked saturated")
    if "strategy" in out.columns:
        throughput = out["strategy"].str.lower().eq("throughput") & reason.eq("")
        reason = reason.where(~throughput, "throughput run")
    if "rps_target" in out.columns:
        short = (out["rps"] < rule.shortfall * out["rps_target"]).fillna(False) & reason.eq("")
        reason = reason.where(~short, f"achieved rate < {rule.shortfall:.0%} of target")
    if rule.max_rps is not None:
        above = (out["rps"] > rule.max_rps) & reason.eq("")
        reason = reason.where(~above, f"rps above --max-rps {rule.max_rps:g}")
    reason = _past_the_cap(out, reason)
    if rule.detect:
        reason = detect_saturation(out, reason)
    out["exclusion_reason"] = reason.astype(str)
    out["excluded"] = reason.ne("")


# Saturation read off the numbers of one group, sorted by achieved rate:
PLATEAU_RISE = 0.03   # an achieved rate rising by less than 3% over the previous point ...
PLATEAU_JUMP = 1.3    # ... while the mean latency rises by more than 1.3x: a plateau;
LAW_EXCESS = 2.0      # a latency over 2x eq. (1) drawn through the group's lower points,
LAW_CEILING = 0.98    # or a rate at 98% or more of that line's ceiling 1/C2 with a
#                       latency jump over the previous point like a plateau's.
LAW_MIN_POINTS = 3    # lower points needed to draw the line


def detect_saturation(data: pd.DataFrame, reason: pd.Series) -> pd.Series:
    """Reasons for the points of each group that the numbers show to be saturated.

    ``reason`` holds the reasons found so far ("" = kept); only kept points are judged.
    Eq. (1) makes 1/L linear in the rate (1/L = 1/C1 - (C2/C1) RPS), so a straight line
    through a group's lower-rate points is the law they imply; the highest points are
    judged against it one at a time, from the top. A group whose lower points do not
    fall with the rate (noise at light load only) is left alone: there is no law to
    judge by. Returns the updated reasons.
    """
    reason = reason.copy()
    rps = data["rps"].to_numpy(float)
    latency = reference_latency(data)
    # Sparse MoE curves bend the other way at light load (expert coverage), so a line
    # through their lower points is not their law.
    moe = (pd.to_numeric(data["experts_total"], errors="coerce").fillna(0).to_numpy() > 0
           if "experts_total" in data.columns else np.zeros(len(data), bool))
    _, index = assign_groups(data)
    for group in np.unique(index):
        members = np.flatnonzero((index == group) & reason.eq("").to_numpy())
        members = members[np.argsort(rps[members], kind="stable")]
        for previous, this in zip(members[:-1], members[1:]):
            if (rps[this] < (1 + PLATEAU_RISE) * rps[previous]
                    and latency[this] > PLATEAU_JUMP * latency[previous]):
                reason.iloc[this] = (f"achieved rate stopped rising ({rps[previous]:.4g} -> "
                                     f"{rps[this]:.4g} RPS) while latency rose "
                                     f"{latency[this] / latency[previous]:.1f}x")
        kept = [m for m in members if reason.iloc[m] == ""]
        while len(kept) > LAW_MIN_POINTS and not moe[kept[-1]]:
            top, lower = kept[-1], kept[:-1]
            if np.ptp(rps[lower]) <= 0:  # every point at one rate: no law to draw
                break
            slope, intercept = np.polyfit(rps[lower], 1.0 / latency[lower], 1)
            if intercept <= 0 or slope >= 0:
                break
            ceiling = -intercept / slope
            excess = latency[top] * (intercept + slope * rps[top])
            jump = latency[top] / latency[lower[-1]]
            if rps[top] >= LAW_CEILING * ceiling and jump > PLATEAU_JUMP:
                reason.iloc[top] = (f"rate at {rps[top] / ceiling:.0%} of the ceiling "
                                    f"{ceiling:.4g} RPS of the law through the group's "
                                    "lower-rate points")
            elif excess > LAW_EXCESS:
                reason.iloc[top] = (f"latency {excess:.1f}x the law through the group's "
                                    "lower-rate points")
            else:
                break
            kept.pop()
    return reason


def describe_exclusions(data: pd.DataFrame) -> list[str]:
    """One line per row set aside from the likelihood: its 1-based data row, the verifier
    and lengths, the rate and why."""
    lines = []
    columns = group_columns(data)
    for position in np.flatnonzero(data["excluded"].to_numpy(bool)):
        row = data.iloc[position]
        where = group_label(row.to_dict(), columns)
        lines.append(f"row {position + 1} ({where}, RPS {row['rps']:.4g}): "
                     f"{row['exclusion_reason']}")
    return lines
