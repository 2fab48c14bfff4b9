"""Bytes to documents: JSON, JSON Lines, YAML or Prometheus text, told apart by content."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bayesspec.errors import BadInput
from bayesspec.data.filekinds import YAML_SUFFIXES, looks_like_prometheus  # noqa: F401 - re-exported

WHAT = ("expected a GuideLLM report (JSON/YAML), a vllm bench result (JSON/JSONL) "
        "or a Prometheus /metrics scrape")
_YAML_SUFFIXES = YAML_SUFFIXES
MAX_BYTES = 256 * 1024 * 1024


@dataclass
class Document:
    """A parsed file: ``kind`` is json, jsonl, yaml or prometheus."""

    kind: str
    value: Any    # dict/list (json, yaml); [(line, value), ...] (jsonl); str (prometheus)
    name: str


def read_bytes(path: str | Path) -> bytes:
    path = Path(path)
    if not path.exists():
        raise BadInput("no such file", file=str(path))
    if path.is_dir():
        raise BadInput("is a directory, not a file", file=str(path))
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise BadInput(f"too large ({size / 2**20:.0f} MiB)", file=str(path))
        return path.read_bytes()
    except OSError as error:
        raise BadInput(f"cannot read: {error.strerror or error}", file=str(path)) from None


def decode_text(data: bytes, name: str) -> str:
    if not data.strip():
        raise BadInput("empty file", file=name)
    if b"\x00" in data[:65536]:
        raise BadInput(f"binary file; {WHAT}", file=name)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"not UTF-8 text (binary file?); {WHAT}", file=name) from None
    return text.lstrip("\ufeff")


def load(data: bytes, name: str) -> Document:
    """Parse ``data`` (the content of the file ``name``)."""
    text = decode_text(data, name)
    stripped = text.lstrip()
    suffix = Path(name).suffix.lower()
    if stripped[:1] in ("{", "[") and suffix not in _YAML_SUFFIXES:
        return _load_json(text, name)
    if looks_like_prometheus(text, name):
        return Document("prometheus", text, name)
    return _load_yaml(text, name)


def _json_error(error: Exception, name: str, *, row: int | None = None) -> BadInput:
    if isinstance(error, json.JSONDecodeError):
        where = f" (line {error.lineno}, column {error.colno})" if row is None else \
            f" (column {error.colno})"
        truncated = " (truncated?)" if error.pos >= len(error.doc.rstrip()) else ""
        return BadInput(f"not valid JSON{truncated}: {error.msg}{where}", file=name, row=row)
    if isinstance(error, RecursionError):
        return BadInput("not valid JSON: nested too deeply", file=name, row=row)
    return BadInput(f"not valid JSON: {str(error).splitlines()[0][:120]}", file=name, row=row)


def _load_json(text: str, name: str) -> Document:
    try:
        return Document("json", json.loads(text), name)
    except (ValueError, RecursionError) as error:
        first_error = error
    lines = [(i, line) for i, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if len(lines) > 1 and all(line.lstrip().startswith("{") for _, line in lines):
        values = []
        for number, line in lines:       # JSON Lines: one object per line
            try:
                values.append((number, json.loads(line)))
            except (ValueError, RecursionError) as error:
                raise _json_error(error, name, row=number) from None
        return Document("jsonl", values, name)
    raise _json_error(first_error, name) from None


def _load_yaml(text: str, name: str) -> Document:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        value = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise BadInput(f"not valid JSON or YAML: {problem}{where}; {WHAT}",
                       file=name) from None
    except (RecursionError, ValueError, OverflowError) as error:
        raise BadInput(f"not valid YAML: {type(error).__name__}", file=name) from None
    if not isinstance(value, (dict, list)):
        raise BadInput(f"not a known file: {WHAT}", file=name)
    return Document("yaml", value, name)
