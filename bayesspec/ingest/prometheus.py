"""vLLM ``/metrics`` scrapes: speculative-decoding counters over a load point.

A scrape is parsed with ``prometheus_client.parser.text_string_to_metric_families`` (never
split by hand). Counters are summed over engines (and every other label, except
``position``); ``_created`` series are ignored. The difference of a scrape taken before a
load point and one taken after it gives, over that window (FORMATS.md):

- ``num_drafts``, ``draft_tokens``, ``accepted_tokens`` (counts);
- ``acceptance_rate`` = d_accepted / d_draft_tokens;
- ``acceptance_length`` = 1 + d_accepted / d_drafts (mean tokens per verification step);
- ``accepted_tokens_posI`` and ``acceptance_rate_posI`` = d_accepted_pos / d_drafts for
  I = 1..k (vLLM's ``position`` label 0..k-1; unconditional rates, alpha^I under i.i.d.
  acceptance); the number of positions is the draft length k.

A counter that is lower after than before means the server restarted between the
scrapes: an error, since the window's counts are lost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from bayesspec.errors import BadInput
from bayesspec.ingest.loaders import decode_text, read_bytes

PREFIX = "vllm:spec_decode_"
COUNTERS = {  # tidy column -> counter name (without _total)
    "num_drafts": "vllm:spec_decode_num_drafts",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens",
}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
MAX_POSITIONS = 64
MAX_COUNT = 2.0 ** 53          # counts above this are not exact in a float


@dataclass
class Scrape:
    """Speculative-decoding counter totals of one scrape (summed over engines)."""

    file: str
    totals: dict[str, float] = field(default_factory=dict)      # tidy column -> value
    per_position: dict[int, float] = field(default_factory=dict)  # position (0-based) -> value
    models: set[str] = field(default_factory=set)

    @property
    def has_counters(self) -> bool:
        return bool(self.totals or self.per_position)


def _base(sample_name: str) -> str | None:
    if sample_name.endswith("_created"):
        return None
    return sample_name[:-len("_total")] if sample_name.endswith("_total") else sample_name


def parse_scrape(text: str, name: str = "<scrape>") -> Scrape:
    """Counter totals from Prometheus exposition text."""
    from prometheus_client.parser import text_string_to_metric_families

    scrape = Scrape(file=name)
    wanted = {counter: column for column, counter in COUNTERS.items()}
    try:
        # The parser is lazy and raises several exception types on malformed text.
        samples = [sample for family in text_string_to_metric_families(text)
                   for sample in family.samples]
    except Exception as error:  # noqa: BLE001 - a third-party parser's many error types
        reason = str(error).splitlines()[0][:120] if str(error) else type(error).__name__
        raise BadInput(f"not Prometheus exposition text: {reason}", file=name) from None
    for sample in samples:
        base = _base(sample.name)
        if base is None or not base.startswith(PREFIX):
            continue
        if base not in wanted and base != PER_POSITION:
            continue
        value = sample.value
        where = base + "_total"
        if not isinstance(value, (int, float)) or math.isnan(value) or math.isinf(value):
            raise BadInput(f"counter value is {value}", file=name, column=where)
        if value < 0:
            raise BadInput(f"counter value is negative ({value:g})", file=name, column=where)
        if value > MAX_COUNT:
            raise BadInput(f"counter value {value:g} out of range", file=name, column=where)
        labels = sample.labels or {}
        if labels.get("model_name"):
            scrape.models.add(labels["model_name"])
        if base == PER_POSITION:
            text_pos = str(labels.get("position", "")).strip()
            if not text_pos.isdigit() or int(text_pos) >= MAX_POSITIONS:
                raise BadInput(f"position label {text_pos!r} is not an integer in "
                               f"0..{MAX_POSITIONS - 1}", file=name, column=where)
            position = int(text_pos)
            scrape.per_position[position] = scrape.per_position.get(position, 0.0) + value
        else:
            column = wanted[base]
            scrape.totals[column] = scrape.totals.get(column, 0.0) + value
    if len(scrape.models) > 1:
        raise BadInput(f"counters of several models ({', '.join(sorted(scrape.models))}); "
                       f"scrape one server per file", file=name)
    return scrape


def read_scrape(path: str | Path) -> Scrape:
    name = str(path)
    return parse_scrape(decode_text(read_bytes(path), name), name)


def scrape_delta(before: Scrape, after: Scrape) -> dict:
    """Counts, acceptance rate, acceptance length and per-position rates over the window.

    Empty when neither scrape has speculative-decoding counters (a dense server).
    """
    if not before.has_counters and not after.has_counters:
        return {}
    if before.models and after.models and before.models != after.models:
        raise BadInput(f"model {sorted(after.models)[0]!r} here but "
                       f"{sorted(before.models)[0]!r} in {before.file}", file=after.file)
    out: dict = {}
    pairs = [(column, COUNTERS[column] + "_total", before.totals.get(column),
              after.totals.get(column)) for column in COUNTERS]
    positions = sorted(set(before.per_position) | set(after.per_position))
    pairs += [(f"accepted_tokens_pos{p + 1}",
               f'{PER_POSITION}_total{{position="{p}"}}',
               before.per_position.get(p), after.per_position.get(p)) for p in positions]
    for column, where, old, new in pairs:
        if new is None and old is None:
            continue
        if new is None:
            raise BadInput(f"counter present in {before.file} but not here (server "
                           f"restarted?)", file=after.file, column=where)
        old = 0.0 if old is None else old     # a series created during the window
        if new < old:
            raise BadInput(f"counter went backwards from {old:g} to {new:g} (server "
                           f"restarted between the scrapes?)", file=after.file, column=where)
        delta = new - old
        if delta != round(delta):
            raise BadInput(f"counter difference {delta:g} is not a whole number",
                           file=after.file, column=where)
        out[column] = int(round(delta))
    drafts = out.get("num_drafts")
    drafted = out.get("draft_tokens")
    accepted = out.get("accepted_tokens")
    if accepted is not None and drafted is not None and accepted > drafted:
        raise BadInput(f"more accepted ({accepted}) than drafted ({drafted}) tokens in the "
                       f"window since {before.file}", file=after.file,
                       column=COUNTERS["accepted_tokens"] + "_total")
    if accepted is not None and drafted:
        out["acceptance_rate"] = accepted / drafted
    if accepted is not None and drafts:
        out["acceptance_length"] = 1.0 + accepted / drafts
    for p in positions:
        count = out.get(f"accepted_tokens_pos{p + 1}")
        if count is None:
            continue
        if drafts is not None and count > drafts:
            raise BadInput(f"more tokens accepted at position {p} ({count}) than drafts "
                           f"({drafts}) in the window since {before.file}", file=after.file,
                           column=f'{PER_POSITION}_total{{position="{p}"}}')
        if drafts:
            out[f"acceptance_rate_pos{p + 1}"] = count / drafts
    if positions and positions == list(range(len(positions))):
        out["k"] = len(positions)      # vLLM creates one series per draft position
    return out
