"""Tables in fit files: a DataFrame as a NetCDF-safe ``xarray.Dataset`` and back, each
column's kind kept so that it reads back as written.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

def frame_to_dataset(frame: pd.DataFrame, dim: str) -> xr.Dataset:
    """A DataFrame as a NetCDF-safe Dataset (nullable ints to float, bools to int8)."""
    variables = {}
    kinds = {}
    for column in frame.columns:
        values = frame[column]
        if pd.api.types.is_bool_dtype(values):
            variables[column] = (dim, values.astype("int8").to_numpy())
            kinds[column] = "bool"
        elif pd.api.types.is_integer_dtype(values) and values.isna().any():
            variables[column] = (dim, values.astype("Float64").to_numpy(dtype=float,
                                                                         na_value=np.nan))
            kinds[column] = "Int64"
        elif pd.api.types.is_integer_dtype(values):
            variables[column] = (dim, values.to_numpy(dtype=np.int64))
            kinds[column] = "Int64" if str(values.dtype) == "Int64" else "int64"
        elif pd.api.types.is_numeric_dtype(values):
            variables[column] = (dim, pd.to_numeric(values).to_numpy(dtype=float))
            kinds[column] = "float64"
        elif _numbers_or_missing(values, column):
            # An object column of numbers and None (a group table's alpha when some or all
            # groups have none): as text, None would come back as a string.
            variables[column] = (dim, pd.to_numeric(values).to_numpy(dtype=float))
            kinds[column] = "float64"
        else:
            text = values.astype(object).where(values.notna(), "").astype(str)
            variables[column] = (dim, text.to_numpy(dtype=str))
            kinds[column] = "str"
    dataset = xr.Dataset(variables)
    dataset.attrs["column_kinds"] = ",".join(f"{k}:{v}" for k, v in kinds.items())
    return dataset


def _numbers_or_missing(values: pd.Series, column: str) -> bool:
    """Whether every entry is a number or missing, with at least one number unless the
    column is a numeric tidy column (then all missing is a column of NaN)."""
    from bayesspec.data.schema import TEXT_COLUMNS, TIDY_COLUMNS

    present = values.notna().to_numpy()
    is_number = np.array([isinstance(v, (int, float, np.integer, np.floating))
                          and not isinstance(v, bool) for v in values], dtype=bool)
    if not (is_number | ~present).all():
        return False
    return bool(present.any() or (column in TIDY_COLUMNS and column not in TEXT_COLUMNS))


def dataset_to_frame(dataset: xr.Dataset) -> pd.DataFrame:
    """Inverse of :func:`frame_to_dataset`."""
    kinds = dict(item.split(":", 1) for item in
                 dataset.attrs.get("column_kinds", "").split(",") if item)
    frame = pd.DataFrame({name: dataset[name].values for name in kinds
                          if name in dataset.data_vars})
    for column, kind in kinds.items():
        if column not in frame.columns:
            continue
        if kind == "bool":
            frame[column] = frame[column].astype(bool)
        elif kind == "Int64":
            frame[column] = pd.array(np.where(np.isnan(frame[column].astype(float)), np.nan,
                                              frame[column]), dtype="Float64").astype("Int64")
        elif kind == "str":
            frame[column] = frame[column].astype(str).astype(object)
    return frame
