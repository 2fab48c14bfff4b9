"""Errors that the command line turns into a one-line message and exit code 2."""

from __future__ import annotations


class BadInput(Exception):
    """User input that cannot be used: a file, a row, a field, or an option.

    The message is one line and names where the problem is, so that the CLI can print
    it as is (``bayesspec: error: <message>``) and exit with status 2.
    """

    def __init__(self, message: str, *, file: str | None = None, row: int | None = None,
                 column: str | None = None):
        self.file = file
        self.row = row
        self.column = column
        self.reason = message
        where = []
        if file is not None:
            where.append(str(file))
        if row is not None:
            where.append(f"row {row}")
        if column is not None:
            where.append(f"column '{column}'")
        text = f"{': '.join([', '.join(where)])}: {message}" if where else message
        super().__init__(" ".join(text.split()))


class CatalogError(BadInput):
    """A model or GPU card that is missing or malformed."""


class FitFileError(BadInput):
    """A fit file that is missing, unreadable, or made by another model or version."""


class ConvergenceWarning(UserWarning):
    """The sampler's diagnostics (R-hat, ESS, divergences) say the posterior is unreliable."""
