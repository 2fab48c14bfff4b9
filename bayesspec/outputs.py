"""Everything bayesspec writes: JSON documents, files written atomically, progress lines.

A leaf module (it imports nothing of bayesspec but the tidy column order), so the library
and the command line share one way to write: every file goes through a temporary file in
the same folder and ``os.replace``, so a reader never sees half a file and a failure
leaves nothing behind; JSON has no NaN or infinity (they become ``null``); progress and
warnings go to stderr, never stdout (stdout carries ``--json`` documents only).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

__all__ = ["json_safe", "json_text", "emit_json", "atomic_path", "write_text_atomic",
           "log", "ProgressLine"]


def json_safe(value):
    """A JSON-safe copy: numpy scalars to Python, inf/NaN/pd.NA to None, keys to str."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return [json_safe(v) for v in value.tolist()]
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int, bool)):
        return value
    import pandas as pd

    if value is pd.NA or value is pd.NaT:
        return None
    return str(value)


def json_text(document, *, indent: int | None = 2) -> str:
    """The document as JSON text with a final newline (strict: no NaN, no Infinity)."""
    return json.dumps(json_safe(document), indent=indent, allow_nan=False) + "\n"


def emit_json(document) -> None:
    """Print one JSON document on stdout (the ``--json`` contract)."""
    sys.stdout.write(json_text(document))
    sys.stdout.flush()


def _default_mode(path: str) -> None:
    """mkstemp makes 0600 files; give the result the permissions a plain open() would."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike):
    """A temporary path beside ``path`` to write to; renamed onto ``path`` on success,
    removed on failure. The suffix is kept (writers that choose a format by it work)."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    handle, temporary = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix,
                                         dir=folder)
    os.close(handle)
    try:
        yield temporary
        _default_mode(temporary)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> str:
    """Write text (UTF-8, newlines as given) atomically; returns the path."""
    with atomic_path(path) as temporary:
        with open(temporary, "w", encoding="utf-8", newline="") as stream:
            stream.write(text)
    return str(path)


def log(message: str, enabled: bool = True) -> None:
    """A progress or warning line on stderr."""
    if enabled:
        print(message, file=sys.stderr, flush=True)


class ProgressLine:
    """A one-line progress bar on stderr for long loops (a plain line per item when
    stderr is not a terminal): ``progress(i, total, label)``."""

    def __init__(self, name: str, *, enabled: bool = True, stream=None):
        self.name = name
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start = time.monotonic()

    def __call__(self, i: int, total: int, label: str) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.start
        width = 28
        filled = int(width * i / max(total, 1))
        eta = elapsed / i * (total - i) if i else float("nan")
        eta_text = f" eta {eta:4.0f}s" if i and i < total else ""
        line = (f"{self.name} [{'#' * filled}{'.' * (width - filled)}] {i}/{total} "
                f"{elapsed:5.1f}s{eta_text}  {label}")
        if self.tty:
            self.stream.write("\r" + line[:120].ljust(120) + ("\n" if i >= total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
