"""A column's cells read as text, numbers, whole numbers or true/false, each refusal naming
the first bad row (1-based data row, the header not counted); and a cell as a plain
Python value.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from bayesspec.errors import BadInput


_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f", ""}


def plain_value(value):
    """A table cell as a plain Python value: None for missing, int/float for numpy."""
    if value is None or value is pd.NA:
        return None
    if isinstance(value, (float, np.floating)) and math.isnan(value):
        return None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def is_missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def blank_cells(values: pd.Series) -> pd.Series:
    if values.dtype == object or pd.api.types.is_string_dtype(values):
        text = values.astype(str).str.strip()
        return values.isna() | text.eq("") | text.str.lower().isin({"nan", "na", "null", "none"})
    return values.isna()


def as_strings(values: pd.Series) -> pd.Series:
    blank = blank_cells(values)
    return values.astype(str).str.strip().where(~blank, "").reset_index(drop=True)


def first_bad_row(mask: pd.Series) -> int:
    return int(np.flatnonzero(np.asarray(mask))[0]) + 1


def as_floats(values: pd.Series, source: str, column: str, *, required: bool) -> pd.Series:
    values = values.reset_index(drop=True)
    blank = blank_cells(values)
    numbers = pd.to_numeric(values.where(~blank), errors="coerce").astype(float)
    not_numeric = ~blank & numbers.isna()
    if not_numeric.any():
        row = first_bad_row(not_numeric)
        raise BadInput(f"not a number: {str(values.iloc[row - 1])[:40]!r}",
                       file=source, row=row, column=column)
    if required and blank.any():
        raise BadInput("missing value (NaN or empty)", file=source, row=first_bad_row(blank),
                       column=column)
    infinite = np.isinf(numbers)
    if infinite.any():
        raise BadInput("infinite value", file=source, row=first_bad_row(infinite), column=column)
    return numbers


def as_integers(values: pd.Series, source: str, column: str) -> pd.Series:
    numbers = as_floats(values, source, column, required=False)
    fractional = numbers.notna() & (numbers != np.round(numbers))
    if fractional.any():
        row = first_bad_row(fractional)
        raise BadInput(f"not a whole number: {numbers.iloc[row - 1]:g}", file=source,
                       row=row, column=column)
    return numbers.round().astype("Int64")


def as_booleans(values: pd.Series, source: str, column: str) -> pd.Series:
    values = values.reset_index(drop=True)
    if pd.api.types.is_bool_dtype(values):
        return values.astype(bool)
    text = values.astype(str).str.strip().str.lower().where(~values.isna(), "")
    text = text.replace({"1.0": "1", "0.0": "0"})
    unknown = ~text.isin(_TRUE | _FALSE)
    if unknown.any():
        row = first_bad_row(unknown)
        raise BadInput(f"not true/false: {str(values.iloc[row - 1])[:40]!r}", file=source,
                       row=row, column=column)
    return text.isin(_TRUE)
