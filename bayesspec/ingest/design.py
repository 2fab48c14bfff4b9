"""Design values the load-test files do not hold: from command-line flags or a sidecar.

A sidecar is a small TOML or JSON file next to the data (``FILE.meta.toml``,
``FILE.meta.json``, or the same with the data suffix replaced: ``sweep.meta.toml`` for
``sweep.json``), or any file given with ``--sidecar``. Its top-level keys are design
values and, optionally, the Prometheus scrapes that go with the load points::

    verifier = "Qwen3-8B"
    drafter = "EAGLE3-Qwen3-8B"
    k = 3
    alpha = 0.8            # only when forced (synthetic acceptance); else leave it out
    prefill_tokens = 1024  # also: prefill
    decode_tokens = 256    # also: decode
    gpu = "H100"
    engine_version = "0.11.0"
    max_num_seqs = 256     # the engine's limits (vLLM's names), when the report lacks them
    kv_cache_tokens = 421504

    [[metrics]]            # one per load point, in the file's order...
    before = "scrapes/p0.before.prom"     # paths relative to the sidecar
    after = "scrapes/p0.after.prom"
    [[metrics]]
    point = 3              # ...or naming the point: 0-based index of benchmarks[] / JSONL line
    before = "scrapes/p3.before.prom"
    after = "scrapes/p3.after.prom"
    file = "sweep.json"    # needed only when one --sidecar serves several data files

Unknown keys are errors (a typo must not pass silently).
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from bayesspec.errors import BadInput
from bayesspec.ingest.fields import Field, describe
from bayesspec.ingest.loaders import decode_text, read_bytes
from bayesspec.ingest.records import DESIGN_FIELDS

ALIASES = {"prefill": "prefill_tokens", "decode": "decode_tokens",
           "num_speculative_tokens": "k"}
SIDECAR_SUFFIXES = (".meta.toml", ".meta.json")
#: The command-line flag of each design field.
FLAGS = {"verifier": "--verifier", "drafter": "--drafter", "k": "--k", "alpha": "--alpha",
         "prefill_tokens": "--prefill", "decode_tokens": "--decode", "gpu": "--gpu",
         "engine": "--engine", "engine_version": "--engine-version", "method": "--method",
         "max_num_seqs": "--max-num-seqs", "kv_cache_tokens": "--kv-cache-tokens",
         "max_num_batched_tokens": "--max-num-batched-tokens"}


@dataclass
class UserValue:
    """A design value given by the user, with where it was given (for messages)."""

    value: object
    source: str                 # '--k' or 'k in sweep.meta.toml'
    file: str | None = None
    column: str | None = None


@dataclass
class MetricsPair:
    before: Path
    after: Path
    point: int | None
    file: str | None            # the data file it belongs to, when named
    where: str                  # sidecar and entry, for messages


@dataclass
class Sidecar:
    path: str
    design: dict[str, UserValue] = field(default_factory=dict)
    metrics: list[MetricsPair] = field(default_factory=list)


def check_value(name: str, node: Field):
    """A design value, validated (``node`` says where it came from)."""
    if name in ("k", "prefill_tokens", "decode_tokens", "max_num_seqs", "kv_cache_tokens",
                "max_num_batched_tokens"):
        return node.number(required=True, integer=True, minimum=0 if name == "k" else 1)
    if name == "alpha":
        return node.number(required=True, minimum=0.0, maximum=1.0)
    value = node.value
    if isinstance(value, (int, float)) and not isinstance(value, bool) \
            and name in ("engine_version",):
        value = str(value)
    if not isinstance(value, str):
        raise node.error(f"expected a string, got {describe(value)}")
    if name == "verifier" and not value.strip():
        raise node.error("empty verifier name")
    return value.strip()


def find_sidecars(data_path: str | Path) -> list[Path]:
    """Sidecars next to a data file, by the naming conventions above."""
    path = Path(data_path)
    candidates = [Path(str(path) + suffix) for suffix in SIDECAR_SUFFIXES]
    if path.suffix:
        candidates += [path.with_suffix(suffix) for suffix in SIDECAR_SUFFIXES]
    found, seen = [], set()
    for candidate in candidates:
        if candidate.is_file() and candidate.resolve() not in seen:
            seen.add(candidate.resolve())
            found.append(candidate)
    return found


def load_sidecar(path: str | Path) -> Sidecar:
    name = str(path)
    return parse_sidecar(decode_text(read_bytes(path), name), name)


def parse_sidecar(text: str, name: str) -> Sidecar:
    """A sidecar's content (TOML, or JSON when it starts with '{' or ends in .json)."""
    if text.lstrip().startswith("{") or name.lower().endswith(".json"):
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as error:
            raise BadInput(f"sidecar is not valid JSON: {str(error).splitlines()[0][:120]}",
                           file=name) from None
    else:
        try:
            value = tomllib.loads(text)
        except (tomllib.TOMLDecodeError, ValueError, RecursionError) as error:
            raise BadInput(f"sidecar is not valid TOML: {str(error).splitlines()[0][:120]}",
                           file=name) from None
    root = Field(value, "", name)
    root.mapping()
    sidecar = Sidecar(path=name)
    folder = Path(name).parent
    for key in value:
        node = root[key]
        if key == "metrics":
            sidecar.metrics = [_pair(item, folder) for item in node.items()]
            continue
        field_name = ALIASES.get(key, key)
        if field_name not in DESIGN_FIELDS:
            known = ", ".join(list(DESIGN_FIELDS) + list(ALIASES) + ["metrics"])
            raise node.error(f"unknown sidecar key (known: {known})")
        if field_name in sidecar.design:
            raise node.error(f"{field_name} given twice")
        sidecar.design[field_name] = UserValue(check_value(field_name, node),
                                               f"{key} in {name}", name, key)
    return sidecar


def _pair(item: Field, folder: Path) -> MetricsPair:
    item.mapping()
    for key in item.value:
        if key not in ("before", "after", "point", "file"):
            raise item[key].error("unknown key (known: before, after, point, file)")
    before = item["before"].string(required=True)
    after = item["after"].string(required=True)
    return MetricsPair(before=folder / before, after=folder / after,
                       point=item["point"].number(integer=True),
                       file=item["file"].string(), where=f"{item.file}: {item.path}")


def flag_values(flags: dict) -> dict[str, UserValue]:
    """Validated flag values (``flags``: design field -> value or None)."""
    out = {}
    for name, value in flags.items():
        if value is None:
            continue
        if name not in FLAGS:
            raise BadInput(f"unknown design field {name!r}")
        checked = check_value(name, Field(value, FLAGS[name]))
        out[name] = UserValue(checked, FLAGS[name], None, FLAGS[name])
    return out


def merge_user_values(*sources: dict[str, UserValue]) -> dict[str, UserValue]:
    """Flags and sidecars together; two that disagree are an error."""
    from bayesspec.ingest.records import same_value

    merged: dict[str, UserValue] = {}
    for source in sources:
        for name, given in source.items():
            if name in merged and not same_value(name, merged[name].value, given.value):
                first = merged[name]
                raise BadInput(f"{name} is {given.value!r} here but {first.source} says "
                               f"{first.value!r}", file=given.file, column=given.column)
            merged.setdefault(name, given)
    return merged
