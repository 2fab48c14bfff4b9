"""Typed, path-aware access to parsed JSON/YAML documents.

Every value read from a user's file goes through :class:`Field`, which knows the file,
the row (line of a JSONL file) and the field path (``benchmarks[3].metrics.request_latency
.successful.mean``), so that any problem becomes one :class:`~bayesspec.errors.BadInput`
naming all three.
"""

from __future__ import annotations

import math
from typing import Any

from bayesspec.errors import BadInput

MISSING: Any = type("Missing", (), {"__repr__": lambda self: "<missing>"})()


def describe(value) -> str:
    """A short description of an unexpected value for an error message."""
    if value is MISSING:
        return "nothing"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, str):
        text = value if len(value) <= 30 else value[:27] + "..."
        return f"string {text!r}"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, (int, float)):
        try:
            return f"{value:g}" if isinstance(value, float) else str(value)[:30]
        except ValueError:   # pragma: no cover - int too long to print
            return "a huge number"
    return f"a {type(value).__name__}"


def join(path: str, key) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


class Field:
    """A value at ``path`` inside the document read from ``file`` (``row``: JSONL line)."""

    __slots__ = ("value", "path", "file", "row")

    def __init__(self, value, path: str = "", file: str | None = None, row: int | None = None):
        self.value = value
        self.path = path
        self.file = file
        self.row = row

    # ----------------------------------------------------------------- structure
    def error(self, message: str) -> BadInput:
        return BadInput(message, file=self.file, row=self.row, column=self.path or None)

    @property
    def missing(self) -> bool:
        return self.value is MISSING

    @property
    def absent(self) -> bool:
        """Missing or null."""
        return self.value is MISSING or self.value is None

    def __getitem__(self, key) -> "Field":
        """The child ``key`` (``MISSING`` if absent); an error if this is not a container."""
        value = self.value
        if isinstance(key, int):
            if not isinstance(value, list):
                raise self.error(f"expected a list, got {describe(value)}")
            child = value[key] if -len(value) <= key < len(value) else MISSING
        else:
            if not isinstance(value, dict):
                raise self.error(f"expected an object, got {describe(value)}")
            child = value.get(key, MISSING)
        return Field(child, join(self.path, key), self.file, self.row)

    def at(self, *keys) -> "Field":
        """A descendant; stops at the first absent level (its path names that level)."""
        node = self
        for key in keys:
            if node.absent:
                return Field(MISSING, join(node.path, key), self.file, self.row)
            node = node[key]
        return node

    def mapping(self, *, required: bool = True) -> "Field | None":
        if self.absent:
            if required:
                raise self.error("missing" if self.missing else "is null")
            return None
        if not isinstance(self.value, dict):
            raise self.error(f"expected an object, got {describe(self.value)}")
        return self

    def items(self) -> list["Field"]:
        """The elements of a list."""
        if not isinstance(self.value, list):
            raise self.error(f"expected a list, got {describe(self.value)}")
        return [self[i] for i in range(len(self.value))]

    # ----------------------------------------------------------------- scalars
    def string(self, *, required: bool = False) -> str | None:
        if self.absent:
            if required:
                raise self.error("missing" if self.missing else "is null")
            return None
        if not isinstance(self.value, str):
            raise self.error(f"expected a string, got {describe(self.value)}")
        return self.value

    def number(self, *, required: bool = False, minimum: float | None = 0.0,
               positive: bool = False, integer: bool = False, maximum: float | None = None,
               allow_text: bool = False) -> float | int | None:
        """A finite number (``None`` when absent and not required).

        Booleans are not numbers. ``allow_text`` also takes numbers written as strings
        (``--metadata k=v`` values). ``minimum`` defaults to 0: negative values are errors.
        """
        value = self.value
        if value is MISSING or value is None:
            if required:
                raise self.error("missing" if value is MISSING else "is null")
            return None
        if allow_text and isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                raise self.error(f"expected a number, got {describe(self.value)}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(f"expected a number, got {describe(value)}")
        try:
            number = float(value)
        except OverflowError:
            raise self.error("number out of range") from None
        if math.isnan(number):
            raise self.error("is NaN")
        if math.isinf(number):
            raise self.error("is infinite")
        if positive and number <= 0:
            raise self.error(f"must be > 0, got {describe(value)}")
        if minimum is not None and number < minimum:
            raise self.error(f"must be >= {minimum:g}, got {describe(value)}")
        if maximum is not None and number > maximum:
            raise self.error(f"must be <= {maximum:g}, got {describe(value)}")
        if integer:
            if number != math.floor(number):
                raise self.error(f"expected a whole number, got {describe(value)}")
            if abs(number) > 2 ** 62:
                raise self.error("number out of range")
            return int(number)
        return number
