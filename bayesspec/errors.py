"""Errors that the command line turns into a one-line message and exit code 2."""

from __future__ import annotations


class BadInput(Exception):
    """User input that cannot be used: a file, a row, a field, or an option.

    The message is one line and names where the problem is, so that the CLI can print
    it as is (``bayesspec: error: <message>``) and exit with status 2. Where it is:

    - ``file``, ``row`` (1-based data row), ``column``: a place in a data file;
    - ``option``: a command-line flag (``--alpha``), raised by the command line only;
    - ``argument``: a library argument (``leave_out``), raised by the library, which
      knows nothing of flags; the command line names the flag that set it
      (:meth:`text` with ``flag_of``).
    """

    def __init__(self, message: str, *, file: str | None = None, row: int | None = None,
                 column: str | None = None, option: str | None = None,
                 argument: str | None = None):
        self.file = file
        self.row = row
        self.column = column
        self.option = option
        self.argument = argument
        self.reason = message
        super().__init__(self.text())

    def text(self, flag_of=None) -> str:
        """The one-line message; ``flag_of(argument) -> flag or None`` names the flag
        behind a library argument."""
        where = []
        if self.file is not None:
            where.append(str(self.file))
        if self.row is not None:
            where.append(f"row {self.row}")
        if self.column is not None:
            where.append(f"column '{self.column}'")
        flag = self.option
        if flag is None and self.argument is not None and flag_of is not None:
            flag = flag_of(self.argument)
        if flag is not None:
            where.append(f"option {flag}")
        elif self.argument is not None:
            where.append(f"argument '{self.argument}'")
        text = f"{', '.join(where)}: {self.reason}" if where else self.reason
        return " ".join(text.split())


class CatalogError(BadInput):
    """A model or GPU card that is missing or malformed."""


class FitFileError(BadInput):
    """A fit file that is missing, unreadable, or made by another model or version."""


class ConvergenceWarning(UserWarning):
    """The sampler's diagnostics (R-hat, ESS, divergences) say the posterior is unreliable."""
