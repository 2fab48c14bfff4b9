"""What a reader returns: load points with their measured columns and the design facts
that the file itself records (each with the field path it came from)."""

from __future__ import annotations

from dataclasses import dataclass, field

from bayesspec.errors import BadInput

#: Design columns that may come from the file, a sidecar or a flag.
#: The engine's limits on what shares a batch (vLLM's names): reports rarely hold them,
#: so they come from flags or a sidecar like the design values.
ENGINE_LIMIT_FIELDS = ("max_num_seqs", "kv_cache_tokens", "max_num_batched_tokens")
DESIGN_FIELDS = ("verifier", "drafter", "k", "alpha", "prefill_tokens", "decode_tokens",
                 "gpu", "engine", "engine_version", "method", *ENGINE_LIMIT_FIELDS)
INT_FIELDS = ("k", "prefill_tokens", "decode_tokens", *ENGINE_LIMIT_FIELDS)
FLOAT_FIELDS = ("alpha",)
COUNTER_COLUMNS = ("num_drafts", "draft_tokens", "accepted_tokens")


@dataclass
class Point:
    """One load point of a report."""

    row: dict                                   # measured tidy columns
    where: str                                  # field path of the point ('benchmarks[3]')
    line: int | None = None                     # line of a JSONL file
    facts: dict = field(default_factory=dict)   # design field -> (value, field path)
    fallback: dict = field(default_factory=dict)  # weak values: served model name, token means
    key: tuple | None = None                    # identity of the load point within the file


@dataclass
class Report:
    file: str
    kind: str                                   # guidellm-v1, guidellm-v2, vllm-bench
    points: list[Point]


def same_value(name: str, a, b) -> bool:
    """Whether two design values say the same thing (names compared loosely)."""
    if name in INT_FIELDS:
        return int(a) == int(b)
    if name in FLOAT_FIELDS:
        return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(a)))
    return same_name(str(a), str(b), model=name in ("verifier", "drafter"))


def same_name(a: str, b: str, *, model: bool = False) -> bool:
    from bayesspec.data.catalog import normalize_name

    if normalize_name(a) == normalize_name(b):
        return True
    if not model:
        return False
    if normalize_name(a.rsplit("/", 1)[-1]) == normalize_name(b.rsplit("/", 1)[-1]):
        return True
    try:
        from bayesspec.data.catalog import default_catalog

        catalog = default_catalog()
        card_a, card_b = catalog.find_model(a), catalog.find_model(b)
    except Exception:  # an unusable catalog only makes the comparison stricter
        return False
    return card_a is not None and card_a is card_b


def add_fact(point: Point, name: str, value, path: str, file: str) -> None:
    """Record a design value found in the file; two places that disagree are an error."""
    if value is None or value == "":
        return
    if name in point.facts:
        old, old_path = point.facts[name]
        if not same_value(name, old, value):
            raise BadInput(f"{name} is {value!r} here but {old!r} at {old_path}", file=file,
                           row=point.line, column=path)
        return
    point.facts[name] = (value, path)
