"""Tidy load-test data from disk: one row per load point (docs/CONTRACT.md, "Tidy data").

``read_tidy`` is the one door through which files enter the package. It reads CSV or
Parquet, refuses what is not a tidy table (an empty, binary or ragged file, a load-test
report that ``bayesspec ingest`` should read first) and hands the table to
:func:`bayesspec.data.validate.prepare`, which checks every value. Any problem raises
:class:`bayesspec.errors.BadInput` naming the file, the row (1-based data row, the
header is not counted) and the column.
"""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path

import pandas as pd

from bayesspec.data.filekinds import SNIFF_BYTES, describe_report
from bayesspec.data.saturation import SaturationRule
from bayesspec.data.validate import prepare
from bayesspec.errors import BadInput


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
    raw = read_raw(path)
    return prepare(raw, source=str(path), catalog=catalog, saturation=saturation,
                   engine_limits=engine_limits, units=units)


def read_raw(path: Path) -> pd.DataFrame:
    """A CSV or Parquet file as a raw table (CSV cells as text), refused when it is
    missing, empty, binary, not UTF-8, ragged, a load-test report or a scrape, or has a
    column twice."""
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
