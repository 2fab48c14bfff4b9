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

from bayesspec.errors import BadInput
from bayesspec.data.filekinds import SNIFF_BYTES, describe_report
from bayesspec.data.schema import METRIC_COLUMNS
from bayesspec.data.units import convert as convert_units

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
                  "source", "strategy", "run", "saturation_reason")
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
BOOLEAN_COLUMNS = ("saturated", "latency_reconstructed", "whole_run")

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
# ``run``: repeated load tests of one configuration (each its own curve; `compare` gives
# them a run-level effect, so run-to-run drift is not read as a version effect).
EXTRA_GROUP_COLUMNS = ("gpu", "engine", "engine_version", "method", "run")

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
              engine_limits: dict | None = None, units=()) -> pd.DataFrame:
    """Read and validate a tidy CSV or Parquet file.

    Returns a DataFrame with every CONTRACT column that applies, the defaults filled,
    catalog covariates attached, and two bookkeeping columns: ``excluded`` (bool) and
    ``exclusion_reason`` (str). ``df.attrs['source_file']`` holds the path.
    ``units``: what the file's rates and latencies are in when not per second and
    seconds (``("rpm",)``, ``("ms",)``: :mod:`bayesspec.data.units`); converted on reading.
    ``engine_limits`` ({column of :data:`ENGINE_LIMIT_COLUMNS`: value}, from flags such as
    ``--max-num-seqs``) fill those columns where the file has no value.
    """
    path = Path(path)
    raw = _read_raw(path)
    return prepare(raw, source=str(path), catalog=catalog, saturation=saturation,
                   engine_limits=engine_limits, units=units)


def _rows_with_clean_columns(raw: pd.DataFrame, source: str) -> pd.DataFrame:
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


def prepare(raw: pd.DataFrame, *, source: str = "<data>", catalog=None,
            saturation: SaturationRule | None = None,
            engine_limits: dict | None = None, units=()) -> pd.DataFrame:
    """Validate an in-memory table the same way as a file (used by tests and readers).

    Rates and latencies implausible for the verifier on the GPU (when the catalog knows
    both) are refused, naming the likely unit mistake (:mod:`bayesspec.data.units`)."""
    frame = _rows_with_clean_columns(raw, source)
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
    if units:
        out = convert_units(out, units)
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
    catalog = _attach_catalog(out, catalog)
    _mark_saturated(out, saturation or SaturationRule())
    _check_units(out, catalog, source, units)
    out.attrs["source_file"] = source
    if units:
        out.attrs["units_converted"] = ",".join(units)
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


def _attach_catalog(out: pd.DataFrame, catalog):
    """Fill parameter counts and expert counts from the catalog where the data lack them.
    Returns the catalog used (None when none could be loaded)."""
    if catalog is None:
        try:
            from bayesspec.data.catalog import default_catalog
            catalog = default_catalog()
        except Exception:  # an unusable user catalog must not block reading data
            return None
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
    return catalog


def _check_units(out: pd.DataFrame, catalog, source: str, units) -> None:
    """Refuse a group whose rates or latencies are impossible for its verifier on its
    GPU (both known to the catalog), naming the likely unit mistake."""
    if catalog is None or "gpu" not in out.columns:
        return
    from bayesspec.data.units import GroupEvidence, plausibility_problem

    rps = out["rps"].to_numpy(float)
    latency = out["latency_mean_s"].to_numpy(float)
    kept = ~out["excluded"].to_numpy(bool)
    columns = group_columns(out)
    _, index = assign_groups(out)
    cards: dict = {}
    for group in np.unique(index):
        members = np.flatnonzero(index == group)
        first = out.iloc[members[0]]
        key = (first["verifier"], first["gpu"])
        if key not in cards:
            cards[key] = (catalog.find_model(key[0]) if key[0] else None,
                          catalog.find_gpu(key[1]) if key[1] else None)
        verifier_card, gpu_card = cards[key]
        if verifier_card is None or gpu_card is None:
            continue
        used = members[kept[members]]
        ceiling = None
        if len(used) >= LAW_MIN_POINTS and latency[used].max() > 1.3 * latency[used].min():
            line = _law_line(rps[used], latency[used])
            ceiling = None if line is None else -line[0] / line[1]
        lowest = members[np.argmin(rps[members])]
        evidence = GroupEvidence(
            label=group_label(first.to_dict(), columns), row=int(members[0]) + 1,
            prefill_tokens=float(first["prefill_tokens"]) if not _isna(first["prefill_tokens"])
            else None,
            decode_tokens=float(first["decode_tokens"]) if not _isna(first["decode_tokens"])
            else None,
            k=int(first["k"]), batch1_latency=float(latency[lowest]),
            rps_max=float(rps[members].max()), ceiling=ceiling)
        problem = plausibility_problem(evidence, verifier_card, gpu_card, units)
        if problem is not None:
            column, message = problem
            raise BadInput(message, file=source, row=evidence.row, column=column)


#: The simulator's ``saturation_reason`` codes (bayesspec.simulate.engine) in words a
#: user can act on. A file may list several, joined by ";".
SATURATION_REASONS = {
    "throughput": "throughput run (clients sending back to back, to find the ceiling): "
                  "no set rate, not a point of the law",
    "preemption": "requests were preempted (the KV cache ran out): past the engine's "
                  "capacity, measure below this rate",
    "batch_wait": "requests waited for a batch slot (max_num_seqs): eq. (1) alone does "
                  "not describe it; give the cap (column max_num_seqs) to fit it",
    "kv_wait": "requests waited for KV blocks (cache full): eq. (1) alone does not "
               "describe it; give the cap (column kv_cache_tokens) to fit it",
    "shortfall": "achieved rate fell short of the offered rate (the server could not keep "
                 "up): past the ceiling, measure below this rate",
    "drift": "the queue kept growing through the window (no steady state): past the "
             "ceiling, measure below this rate",
    "unsettled": "the queue had not settled when the window opened: run more requests "
                 "(a longer warm-up)",
    "short_window": "window too short for this latency: run more requests",
}
#: Codes of a wait at the engine's concurrency cap, and the column that gives that cap:
#: with the cap known, the capped law describes the point (past the cap is judged there).
CAPACITY_WAITS = {"batch_wait": "max_num_seqs", "kv_wait": "kv_cache_tokens"}
# Request lifetimes a measured window should hold (bayesspec.simulate.engine), over the
# share of the requests that are measured (10% warm-up and cool-down left out).
WINDOW_LIFETIMES = 5.0
MEASURED_SHARE = 0.8


def _requests_needed(rps: float, latency: float) -> int:
    """Requests for a window of WINDOW_LIFETIMES latencies at this rate (Little's law:
    rps x latency requests are in flight), plus one lifetime of ramp, rounded up to 100."""
    lifetimes = WINDOW_LIFETIMES / 0.75 + 1.0   # the window may lose a quarter to its ends
    needed = lifetimes * rps * latency / MEASURED_SHARE
    return int(math.ceil(needed / 100.0) * 100)


def saturation_reason_text(codes: str, row: pd.Series | dict | None = None) -> str:
    """Words for a ``saturation_reason`` cell ("" when it names nothing)."""
    listed = [c.strip() for c in str(codes).split(";") if c.strip()]
    if set(listed) & {"throughput", "preemption", "shortfall", "drift"}:
        # past the ceiling: more requests would not help, and a preemption implies the
        # cache was full
        listed = [c for c in listed if c not in ("short_window", "unsettled")]
    if "throughput" in listed:
        listed = ["throughput"]   # the rest follow from 512 clients back to back
    if "preemption" in listed:
        listed = [c for c in listed if c != "kv_wait"]
    parts = []
    for code in listed:
        text = SATURATION_REASONS.get(code, code)
        if code == "short_window" and row is not None:
            try:
                text += f" (>= {_requests_needed(float(row['rps']), float(row['latency_mean_s']))})"
            except (KeyError, TypeError, ValueError):
                pass
        parts.append(text)
    return "; ".join(parts)


def _mark_saturated(out: pd.DataFrame, rule: SaturationRule) -> None:
    reason = pd.Series("", index=out.index, dtype=object)
    if "saturated" in out.columns:
        marked = out["saturated"].astype(bool)
        codes = (out["saturation_reason"] if "saturation_reason" in out.columns
                 else pd.Series("", index=out.index))
        for i in np.flatnonzero(marked.to_numpy()):
            listed = [c.strip() for c in str(codes.iloc[i]).split(";") if c.strip()]
            caps = {code: column for code, column in CAPACITY_WAITS.items() if code in listed}
            if listed and len(caps) == len(listed) and all(
                    column in out.columns and pd.notna(out[column].iloc[i])
                    for column in caps.values()):
                continue   # only waited at a cap the file gives: the capped law's point
            if listed:
                reason.iloc[i] = saturation_reason_text(codes.iloc[i], out.iloc[i])
            elif "strategy" in out.columns and out["strategy"].iloc[i].lower() == "throughput":
                reason.iloc[i] = SATURATION_REASONS["throughput"]
            else:
                reason.iloc[i] = "marked saturated in the file (column `saturated`)"
    if "strategy" in out.columns:
        throughput = out["strategy"].str.lower().eq("throughput") & reason.eq("")
        reason = reason.where(~throughput, SATURATION_REASONS["throughput"])
    if "rps_target" in out.columns:
        short = (out["rps"] < rule.shortfall * out["rps_target"]).fillna(False) & reason.eq("")
        for i in np.flatnonzero(short.to_numpy()):
            reason.iloc[i] = (f"achieved rate {out['rps'].iloc[i]:.4g} RPS fell short of the "
                              f"target {out['rps_target'].iloc[i]:.4g} (< {rule.shortfall:.0%}):"
                              " the server could not keep up, past its ceiling")
    if rule.max_rps is not None:
        above = (out["rps"] > rule.max_rps) & reason.eq("")
        reason = reason.where(~above, f"rate above --max-rps {rule.max_rps:g}")
    reason = _past_the_cap(out, reason)
    if rule.detect:
        reason = detect_saturation(out, reason)
    out["exclusion_reason"] = reason.astype(str)
    out["excluded"] = reason.ne("")


# Saturation read off the numbers of one group, sorted by achieved rate:
PLATEAU_RISE = 0.03   # an achieved rate rising by less than 3% over the previous point ...
PLATEAU_JUMP = 1.3    # ... while the mean latency rises by more than 1.3x: a plateau;
#                       and a latency 1.3x that of a point at a higher rate: overloaded
#                       (a steady state's latency rises with the rate, never falls);
LAW_EXCESS = 2.5      # a latency over 2.5x eq. (1) drawn through the group's lower
#                       points, or a rate beyond that line's ceiling 1/C2;
RATE_SHORTFALL = 0.88  # or, where that line puts the point at 60% of its ceiling or more,
RATE_JUDGED_FROM = 0.6  # an achieved rate 12% below the rate the line needs for the
#                       point's latency (near the ceiling a latency is a poor measure of
#                       a point's distance from the law, its rate a good one).
LAW_MIN_POINTS = 3    # lower points needed to draw the line


def _law_line(rps: np.ndarray, latency: np.ndarray) -> tuple[float, float] | None:
    """Intercept and slope of 1/L against the rate (eq. (1) is that line), robust to a
    stray point among the lower ones (Theil-Sen: the median of the pairwise slopes);
    None when the points do not fall with the rate (no law to judge by)."""
    if np.ptp(rps) <= 0:
        return None
    inverse = 1.0 / latency
    i, j = np.triu_indices(len(rps), k=1)
    run = rps[j] - rps[i]
    keep = run != 0
    slope = float(np.median((inverse[j] - inverse[i])[keep] / run[keep]))
    intercept = float(np.median(inverse - slope * rps))
    if intercept <= 0 or slope >= 0:
        return None
    return intercept, slope


def detect_saturation(data: pd.DataFrame, reason: pd.Series) -> pd.Series:
    """Reasons for the points of each group that the numbers show to be saturated.

    ``reason`` holds the reasons found so far ("" = kept); only kept points are judged.
    A steady state's mean latency rises with the rate, so a point whose latency is over
    1.3x that of a point at a higher rate is past the ceiling (its achieved rate fell as
    the server overloaded: a throughput run, a queue that kept growing), as is a point
    whose rate stopped rising while its latency jumped. Eq. (1) makes 1/L linear in the
    rate (1/L = 1/C1 - (C2/C1) RPS), so a line through a group's lower-rate points is the
    law they imply; every point with at least three kept points below it is judged
    against the line through them, from the top down, and set aside when its latency is
    over 2.5x the line's, its rate lies beyond the line's ceiling, or (from 60% of that
    ceiling on) its rate is 12% below the one at which the line reaches its latency. On
    law-generated sweeps (``synthetic.generate_sweeps``, 20 seeds, 4,800 judgements) none
    of these fires on a point of the law; the largest latency excess seen was 2.25x and
    the largest rate shortfall above 60% of the ceiling 9%. A group whose lower
    points do not fall with the rate (noise at light load only) is left alone: there is
    no law to judge by. Returns the updated reasons.
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
                                     f"{latency[this] / latency[previous]:.1f}x: past the "
                                     "ceiling, measure below this rate")
        kept = [m for m in members if reason.iloc[m] == ""]
        # From the top down, so a high point judged against the lowest latency above it
        # is one the later points do not hide.
        lowest_above = np.inf
        faster = -1
        for m in reversed(kept):
            if latency[m] > PLATEAU_JUMP * lowest_above and rps[m] < rps[faster]:
                reason.iloc[m] = (f"latency {latency[m]:.4g} s is {latency[m] / lowest_above:.1f}x "
                                  f"that at a higher rate ({rps[faster]:.4g} RPS): the achieved "
                                  "rate fell as the server overloaded (a throughput run or a "
                                  "growing queue), measure below this rate")
            elif latency[m] < lowest_above:
                lowest_above, faster = latency[m], m
        kept = [m for m in kept if reason.iloc[m] == ""]
        for position in range(len(kept) - 1, LAW_MIN_POINTS - 1, -1):
            top, lower = kept[position], kept[:position]
            if moe[top]:
                continue
            lower = [m for m in lower if reason.iloc[m] == ""]
            if len(lower) < LAW_MIN_POINTS:
                break
            line = _law_line(rps[lower], latency[lower])
            if line is None:
                continue
            intercept, slope = line
            ceiling = -intercept / slope
            excess = latency[top] * (intercept + slope * rps[top])
            if rps[top] >= ceiling:
                reason.iloc[top] = (f"rate beyond the ceiling {ceiling:.4g} RPS of the law "
                                    "through the group's lower-rate points: past saturation, "
                                    "measure below it")
            elif excess > LAW_EXCESS:
                reason.iloc[top] = (f"latency {excess:.1f}x the law through the group's "
                                    "lower-rate points: past the ceiling (or another regime), "
                                    "measure below this rate")
            elif rps[top] >= RATE_JUDGED_FROM * ceiling:
                needed = (1.0 / latency[top] - intercept) / slope
                if rps[top] < RATE_SHORTFALL * needed:
                    reason.iloc[top] = (
                        f"achieved rate {rps[top]:.4g} RPS is {1 - rps[top] / needed:.0%} "
                        f"below the {needed:.4g} RPS at which the law through the group's "
                        "lower-rate points reaches this latency: past the ceiling (a "
                        "throughput run, a queue at the engine's cap), measure below it")
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


# ------------------------------------------------------------------------------------
# Acceptance counters alone (CONTRACT.md, round three: a valid input to `acceptance`)
# ------------------------------------------------------------------------------------

#: vLLM's spec_decode_num_accepted_tokens_per_pos: drafts whose first I tokens were accepted.
POSITION_COUNT_COLUMN = "accepted_tokens_pos{}"
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
    return counters_of(_read_raw(path), source=str(path))


def counters_of(raw: pd.DataFrame, *, source: str = "<data>") -> pd.DataFrame:
    """:func:`read_counters` for an in-memory table (a raw file or a prepared tidy one)."""
    frame = _rows_with_clean_columns(raw, source)
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
    k = _as_integers(frame["k"].reset_index(drop=True), source, "k")
    drafts = _as_integers(frame["num_drafts"].reset_index(drop=True), source, "num_drafts")
    counts = {i: _as_integers(frame[POSITION_COUNT_COLUMN.format(i)].reset_index(drop=True),
                              source, POSITION_COUNT_COLUMN.format(i)) for i in positions}
    totals = {name: _as_integers(frame[name].reset_index(drop=True), source, name)
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
            numbers = _as_floats(values, source, column, required=False)
            out[column] = numbers
        elif column in INTEGER_COLUMNS:
            out[column] = _as_integers(values, source, column)
        else:
            out[column] = _as_strings(values)
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
