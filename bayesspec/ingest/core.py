"""Files to tidy rows: recognise each file by content, read its load points, attach
Prometheus scrape differences and design values, check, and return fit-ready rows."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bayesspec.data import plain_value
from bayesspec.errors import BadInput
from bayesspec.data.schema import order_columns
from bayesspec.ingest import guidellm, vllm_bench
from bayesspec.ingest.design import (SIDECAR_SUFFIXES, MetricsPair, Sidecar, UserValue, find_sidecars,
                     flag_values, load_sidecar, merge_user_values)
from bayesspec.ingest.loaders import WHAT, load, read_bytes
from bayesspec.ingest.prometheus import Scrape, read_scrape, scrape_delta
from bayesspec.ingest.records import COUNTER_COLUMNS, DESIGN_FIELDS, Point, Report, add_fact, same_value

ALWAYS = ("verifier", "drafter", "k", "alpha", "prefill_tokens", "decode_tokens")
#: Measured mean token counts of a file's points are pooled when they agree this well.
POOL_TOLERANCE = 0.10


@dataclass
class IngestResult:
    rows: pd.DataFrame                              # tidy rows, as written
    files: list[dict] = field(default_factory=list)  # per input file: kind, rows, ...


# ------------------------------------------------------------------------ one report

def parse_report(data: bytes, name: str) -> Report:
    """The load points of one file's content (GuideLLM v1/v2, vllm bench JSON/JSONL)."""
    doc = load(data, name)
    if doc.kind == "prometheus":
        raise BadInput("a Prometheus /metrics scrape, not a load-test report: give it with "
                       "--metrics BEFORE AFTER or in a sidecar's [[metrics]]", file=name)
    if doc.kind == "jsonl":
        for line, value in doc.value:
            if not vllm_bench.is_vllm_bench(value):
                raise BadInput(f"not a vllm bench result; {WHAT}", file=name, row=line)
        return vllm_bench.read([(line, "", value) for line, value in doc.value], name,
                               "vllm-bench-jsonl")
    value = doc.value
    if guidellm.is_guidellm(value):
        return guidellm.read(value, name)
    if vllm_bench.is_vllm_bench(value):
        return vllm_bench.read([(None, "", value)], name, "vllm-bench")
    if isinstance(value, list) and value and all(vllm_bench.is_vllm_bench(v) for v in value):
        return vllm_bench.read([(None, f"[{i}]", v) for i, v in enumerate(value)], name,
                               "vllm-bench")
    if isinstance(value, dict) and "metadata" in value and ("config" in value
                                                            or "args" in value):
        raise BadInput("no benchmarks", file=name, column="benchmarks")
    raise BadInput(f"not a known file: {WHAT}", file=name)


def read_report(path: str | Path) -> Report:
    return parse_report(read_bytes(path), str(path))


# ------------------------------------------------------------------------ scrapes

class _Scrapes:
    """Scrape files read once each (the 'after' of a point is often the next 'before')."""

    def __init__(self):
        self.cache: dict[Path, Scrape] = {}

    def get(self, path: Path) -> Scrape:
        key = path.resolve() if path.exists() else path
        if key not in self.cache:
            self.cache[key] = read_scrape(path)
        return self.cache[key]


def _assign_pairs(pairs: list[MetricsPair], report: Report) -> dict[int, MetricsPair]:
    """Which load point each scrape pair belongs to."""
    if not pairs:
        return {}
    n = len(report.points)
    indexed = [p for p in pairs if p.point is not None]
    if indexed and len(indexed) != len(pairs):
        raise BadInput("give 'point' in every [[metrics]] entry or in none", file=pairs[0].where)
    if not indexed:
        if len(pairs) != n:
            raise BadInput(f"{len(pairs)} scrape pairs for {n} load points (give one pair per "
                           f"point, or name each pair's point)", file=report.file)
        return dict(enumerate(pairs))
    out = {}
    for pair in pairs:
        if pair.point >= n:
            raise BadInput(f"point {pair.point} does not exist ({n} load points)",
                           file=pair.where, column="point")
        if pair.point in out:
            raise BadInput(f"point {pair.point} has two scrape pairs", file=pair.where,
                           column="point")
        out[pair.point] = pair
    return out


def _apply_delta(point: Point, delta: dict, pair: MetricsPair, report: Report) -> None:
    for column, value in delta.items():
        if column == "k":
            add_fact(point, "k", value, f"positions in {pair.after}", report.file)
            continue
        old = point.row.get(column)
        if old is not None and not _close(old, value):
            raise BadInput(f"{column} is {old!r} in the file but {value!r} from the scrapes "
                           f"{pair.before} -> {pair.after}", file=report.file, row=point.line,
                           column=f"{point.where} {column}".strip())
        point.row[column] = value


def _close(a, b) -> bool:
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        return a == b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


# ------------------------------------------------------------------------ design

def _design(point: Point, users: dict[str, UserValue], report: Report) -> dict:
    """Design values of one point: the file's, else the user's; a disagreement is an error."""
    out = {}
    for name in DESIGN_FIELDS:
        fact = point.facts.get(name)
        user = users.get(name)
        if fact is not None and user is not None:
            value, path = fact
            if not same_value(name, value, user.value):
                raise BadInput(f"{name} is {value!r} in the file but {user.source} says "
                               f"{user.value!r}", file=report.file, row=point.line, column=path)
            # Same value: numbers are equal; keep the user's spelling of names, so that
            # several files land in the same group.
            out[name] = user.value
        elif fact is not None:
            out[name] = fact[0]
        elif user is not None:
            out[name] = user.value
    return out


def _fill_measured(report: Report, designs: list[dict]) -> None:
    """Served model name and measured mean token counts where nothing else gave a value."""
    for point, design in zip(report.points, designs):
        if "verifier" not in design and point.fallback.get("verifier"):
            design["verifier"] = _catalog_name(point.fallback["verifier"])
        if "k" not in design:
            drafts, drafted = point.row.get("num_drafts"), point.row.get("draft_tokens")
            if drafts and drafted and drafted % drafts == 0:
                design["k"] = drafted // drafts   # every draft proposed k tokens
    for column in ("prefill_tokens", "decode_tokens"):
        need = [(design, point.fallback[column]) for point, design
                in zip(report.points, designs) if column not in design
                and point.fallback.get(column)]
        if not need:
            continue
        means = np.array([mean for _, (mean, _) in need], dtype=float)
        weights = np.array([weight for _, (_, weight) in need], dtype=float)
        pooled = float((means * weights).sum() / weights.sum())
        same = np.all(np.abs(means - pooled) <= POOL_TOLERANCE * pooled)
        for (design, _), mean in zip(need, means):
            value = int(round(pooled if same else mean))
            if value >= 1:
                design[column] = value


def _catalog_name(served: str) -> str:
    """The catalog's name for a served model name ('Qwen/Qwen3-8B' -> 'Qwen3-8B'), so that
    files naming the model differently land in one group; unknown names are kept."""
    try:
        from bayesspec.data.catalog import default_catalog

        card = default_catalog().find_model(served)
    except Exception:  # noqa: BLE001 - an unusable catalog leaves the name as it is
        card = None
    return card.name if card is not None else served


# ------------------------------------------------------------------------ files

def _sidecar_pairs(sidecar: Sidecar | None, path: str, n_files: int) -> list[MetricsPair]:
    if sidecar is None:
        return []
    pairs = []
    for pair in sidecar.metrics:
        if pair.file is None:
            if n_files > 1:
                raise BadInput("this sidecar serves several data files: name the data file "
                               "of each [[metrics]] entry with file = ...", file=pair.where)
            pairs.append(pair)
        elif pair.file in (path, Path(path).name) or \
                Path(sidecar.path).parent.joinpath(pair.file).resolve() == Path(path).resolve():
            pairs.append(pair)
    return pairs


SPECULATIVE_FIELDS = ("drafter", "k", "alpha", "method")


def _records_speculation(path: str, report: Report) -> bool:
    """Whether a file (or its own sidecar) says how it decoded: a design value (drafter,
    k, alpha, method) or spec-decode counters on any of its points."""
    if any(name in load_sidecar(side).design for side in find_sidecars(path)
           for name in SPECULATIVE_FIELDS):
        return True
    return any(any(point.facts.get(name) is not None for name in SPECULATIVE_FIELDS)
               or any(point.row.get(name) is not None for name in COUNTER_COLUMNS)
               for point in report.points)


def _check_flags_fit_every_file(given: dict, paths: list[str], reports: list) -> None:
    """Speculative design flags apply to every file; refuse them when some files record
    their decoding and others do not (a dense GuideLLM report next to an SD vllm bench
    result would otherwise be stamped as SD without a word)."""
    flagged = [name for name in SPECULATIVE_FIELDS if name in given]
    if len(paths) < 2 or not flagged:
        return
    recorded = [_records_speculation(path, report) for path, report in zip(paths, reports)]
    if all(recorded) or not any(recorded):
        return
    silent = paths[recorded.index(False)]
    speaking = paths[recorded.index(True)]
    raise BadInput(f"the design flags apply to every file, but {Path(silent).name} does "
                   f"not record speculative decoding while {Path(speaking).name} does: "
                   f"ingest the files separately, or put per-file values in a sidecar "
                   f"({Path(silent).name}.meta.toml)", argument=flagged[0])


def ingest_files(paths, *, flags: dict | None = None, sidecar: str | None = None,
                 metrics: list[tuple[str, str]] | None = None,
                 check: bool = True) -> IngestResult:
    """Read load-test files into tidy rows (see :mod:`bayesspec.ingest`).

    ``flags``: design values from the command line (``{"k": 3, ...}``); ``sidecar``: a
    sidecar for every file (besides the ones found next to each file); ``metrics``:
    (before, after) scrape paths, one pair per load point of all files in order.
    ``check`` runs :func:`bayesspec.data.prepare` on the rows (they are fit-ready).
    """
    paths = [str(p) for p in paths]
    if not paths:
        raise BadInput("no input files")
    seen: dict[Path, str] = {}
    for path in paths:
        key = Path(path).resolve()
        if key in seen:
            raise BadInput(f"given twice (also as {seen[key]})", file=path)
        seen[key] = path
    sidecars_of_inputs = {p.resolve() for path in paths for p in find_sidecars(path)}
    for path in paths:
        if path.lower().endswith(SIDECAR_SUFFIXES):
            if Path(path).resolve() in sidecars_of_inputs:
                continue
            raise BadInput("a sidecar, not a load-test file (a sidecar is read next to its "
                           "data file, or given with --sidecar)", file=path)
    paths = [p for p in paths if Path(p).resolve() not in sidecars_of_inputs]
    if not paths:
        raise BadInput("no load-test files, only sidecars")
    given = flag_values(flags or {})
    explicit = load_sidecar(sidecar) if sidecar else None
    reports = [read_report(path) for path in paths]
    _check_flags_fit_every_file(given, paths, reports)
    scrapes = _Scrapes()

    cli_pairs: list[MetricsPair] = []
    for i, (before, after) in enumerate(metrics or []):
        cli_pairs.append(MetricsPair(Path(before), Path(after), None, None,
                                     f"--metrics pair {i + 1}"))
    total = sum(len(r.points) for r in reports)
    if cli_pairs and len(cli_pairs) != total:
        raise BadInput(f"{len(cli_pairs)} --metrics pairs for {total} load points (one pair "
                       f"per point, in file order; or use a sidecar's [[metrics]] with "
                       f"point = ...)", argument="metrics")

    frames, files, offset = [], [], 0
    for path, report in zip(paths, reports):
        found = [load_sidecar(p) for p in find_sidecars(path)
                 if explicit is None or p.resolve() != Path(explicit.path).resolve()]
        users = merge_user_values(given, *([explicit.design] if explicit else []),
                                  *[s.design for s in found])
        pairs = _sidecar_pairs(explicit, path, len(paths))
        for side in found:
            pairs += _sidecar_pairs(side, path, 1)
        if pairs and cli_pairs:
            raise BadInput("scrapes given both in a sidecar and with --metrics", file=path)
        if cli_pairs:
            assigned = dict(enumerate(cli_pairs[offset:offset + len(report.points)]))
        else:
            assigned = _assign_pairs(pairs, report)
        offset += len(report.points)
        for index, pair in sorted(assigned.items()):
            delta = scrape_delta(scrapes.get(pair.before), scrapes.get(pair.after))
            _apply_delta(report.points[index], delta, pair, report)
        designs = [_design(point, users, report) for point in report.points]
        _fill_measured(report, designs)
        rows = []
        for point, design in zip(report.points, designs):
            row = {name: value for name, value in point.row.items() if value is not None}
            row.update(design)
            _derive_rates(row)
            row["source"] = _where(Path(path).name, point, sep="#")
            rows.append(row)
        frame = _frame(rows)
        if check:
            from bayesspec.data import prepare

            prepare(frame, source=path)
        frames.append((path, report, frame))
        files.append({"file": path, "kind": report.kind, "rows": len(frame),
                      "sidecars": ([explicit.path] if explicit else []) + [s.path for s in found],
                      "scrape_pairs": len(assigned)})
    combined = _frame([row for _, _, frame in frames for row in frame.to_dict("records")])
    _check_duplicates(frames)
    if check:
        from bayesspec.data import prepare

        prepare(combined, source=", ".join(paths) if len(paths) < 4 else f"{len(paths)} files")
    return IngestResult(rows=combined, files=files)


def _derive_rates(row: dict) -> None:
    accepted, drafted, drafts = (row.get("accepted_tokens"), row.get("draft_tokens"),
                                 row.get("num_drafts"))
    if "acceptance_rate" not in row and accepted is not None and drafted:
        row["acceptance_rate"] = accepted / drafted
    if "acceptance_length" not in row and accepted is not None and drafts:
        row["acceptance_length"] = 1.0 + accepted / drafts


def _frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    for column, default in (("verifier", "model"), ("drafter", ""), ("k", 0)):
        if column not in frame.columns:
            frame[column] = default
        frame[column] = frame[column].where(frame[column].notna(), default)
    for column in ALWAYS:
        if column not in frame.columns:
            frame[column] = np.nan
    if "latency_reconstructed" in frame.columns:
        frame["latency_reconstructed"] = frame["latency_reconstructed"].fillna(False).astype(bool)
    if "saturated" in frame.columns:
        frame["saturated"] = frame["saturated"].fillna(False).astype(bool)
    for column in COUNTER_COLUMNS + ("n_requests", "k", "prefill_tokens", "decode_tokens"):
        if column in frame.columns:
            frame[column] = pd.to_numeric(frame[column]).astype("Int64")
    for column in [c for c in frame.columns if c.startswith("accepted_tokens_pos")]:
        frame[column] = pd.to_numeric(frame[column]).astype("Int64")
    return frame[order_columns(frame.columns)]


def _check_duplicates(frames) -> None:
    """The same measurement twice (a file given under two names, a run appended twice)."""
    seen: dict[tuple, str] = {}
    for path, report, frame in frames:
        design = [c for c in ALWAYS if c in frame.columns]
        for i, record in enumerate(frame.to_dict("records")):
            key = tuple(plain_value(record.get(c)) for c in design) + tuple(
                plain_value(record.get(c)) for c in ("strategy", "rps", "latency_mean_s",
                                                   "n_requests"))
            point = report.points[i]
            where = _where(path, point)
            if key in seen:
                raise BadInput(f"duplicated load point: the same measurement as {seen[key]}",
                               file=path, row=point.line, column=point.where or None)
            seen[key] = where


def _where(name: str, point: Point, sep: str = " ") -> str:
    """'sweep.json#benchmarks[3]', 'runs.jsonl#line 4', or the file name alone."""
    inside = point.where or (f"line {point.line}" if point.line is not None else "")
    return f"{name}{sep}{inside}" if inside else name
