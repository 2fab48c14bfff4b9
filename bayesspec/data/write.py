"""Tidy rows written to disk: CSV or Parquet by suffix, CONTRACT columns first, atomically."""

from __future__ import annotations

import io
import os
from pathlib import Path

from bayesspec.data.schema import order_columns
from bayesspec.outputs import atomic_path, write_text_atomic

__all__ = ["write_table"]


def write_table(path: str | os.PathLike, rows, *, float_format: str | None = None) -> str:
    """Tidy rows as CSV or Parquet (by suffix), CONTRACT columns first, atomically."""
    rows = rows[order_columns(rows.columns)]
    if Path(path).suffix.lower() in (".parquet", ".pq"):
        with atomic_path(path) as temporary:
            rows.to_parquet(temporary, index=False)
        return str(path)
    buffer = io.StringIO()
    rows.to_csv(buffer, index=False, float_format=float_format, lineterminator="\n")
    return write_text_atomic(path, buffer.getvalue())
