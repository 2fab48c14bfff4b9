"""A fit file read with h5py straight into an xarray DataTree.

``xr.open_datatree(engine="h5netcdf")`` spends most of an answering verb's reading time
in per-variable bookkeeping: the walkthrough's fit (8 groups, 178 variables) took 45
times longer through it than h5py takes to read every array (measured when this reader
was written, 2026-12-04; ``benchmarks/answer_speed.py`` times the verbs that read fits).
The files bayesspec writes use a small part of netCDF-4: numeric and text variables on
dimension scales, coordinates that are dimension scales, NaN fill values, booleans as
int8 marked ``dtype: bool``, and string or numeric attributes. This reader handles
exactly that and gives the tree xarray would give (``tests/cli/test_light_answers.py``
compares them); anything else in a file (scale factors, time units, other fill values,
compound or enum types, ...) raises :class:`Unsupported`, and the caller reads the file
with xarray instead.

No bayesspec imports.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

#: netCDF-4 bookkeeping attributes, never shown as attributes.
_NETCDF_ATTRS = {"CLASS", "NAME", "REFERENCE_LIST", "DIMENSION_LIST", "_Netcdf4Coordinates",
                 "_Netcdf4Dimid", "_NCProperties", "_FillValue", "dtype"}
#: What a dimension scale without a variable of its name is called in its NAME attribute.
_DIMENSION_ONLY = "This is a netCDF dimension but not a netCDF variable."
#: Attributes that ask xarray to decode a variable in a way this reader does not.
_DECODED_ELSEWHERE = {"scale_factor", "add_offset", "calendar", "_Unsigned", "missing_value",
                      "compress", "flag_values", "_Encoding"}


class Unsupported(Exception):
    """The file uses a netCDF feature this reader leaves to xarray."""


def read_datatree(path) -> xr.DataTree:
    """The whole file as a DataTree, loaded into memory."""
    import h5py

    with h5py.File(path, "r") as handle:
        return xr.DataTree.from_dict(_groups(handle))


def _groups(handle) -> dict:
    import h5py

    found = {}

    def visit(group, name: str) -> None:
        found[name] = _dataset(group)
        for key, item in group.items():
            if isinstance(item, h5py.Group):
                visit(item, f"{name.rstrip('/')}/{key}")

    visit(handle, "/")
    return found


def _attrs(attributes) -> dict:
    out = {}
    for key in attributes:
        if key in _NETCDF_ATTRS:
            continue
        if key in _DECODED_ELSEWHERE:
            raise Unsupported(f"attribute {key}")
        out[key] = _attribute(attributes, key)
    return out


def _attribute(attributes, key: str):
    """An attribute as h5netcdf gives it to xarray: fixed-length text decoded, text arrays
    as lists, one-element arrays and lists as their element."""
    import h5py

    value = attributes[key]
    if isinstance(value, h5py.Empty):
        raise Unsupported(f"empty attribute {key}")
    info = h5py.check_string_dtype(attributes.get_id(key).dtype)
    if info is not None:
        if info.length is not None and info.length > 1:
            value = (value.decode(info.encoding, "surrogateescape") if np.isscalar(value)
                     else [b.decode(info.encoding, "surrogateescape") for b in value.flat])
        elif not np.isscalar(value):
            value = value.tolist()
    if isinstance(value, (np.ndarray, list)) and len(value) == 1:
        return value[0]
    return value


def _dimension_names(dataset, handle, scales: dict) -> tuple[str, ...]:
    """A variable's dimensions: from the netCDF dimension ids it lists, looked up among
    its group's dimension scales (fast), else from its HDF5 dimension list."""
    if dataset.is_scale:
        return (dataset.name.rsplit("/", 1)[-1],)
    if dataset.ndim == 0:
        return ()
    ids = dataset.attrs.get("_Netcdf4Coordinates")
    if ids is not None and len(ids) == dataset.ndim and all(int(i) in scales for i in ids):
        return tuple(scales[int(i)] for i in ids)
    references = dataset.attrs.get("DIMENSION_LIST")
    if references is None or len(references) != dataset.ndim:
        raise Unsupported(f"{dataset.name}: dimensions without scales")
    return tuple(handle[reference[0]].name.rsplit("/", 1)[-1] for reference in references)


def _data(dataset) -> np.ndarray:
    import h5py

    dtype = dataset.dtype
    string = h5py.check_string_dtype(dtype)
    if string is not None:
        # xarray decodes text to numpy's fixed-width unicode
        return np.asarray(dataset.asstr()[()], dtype=object).astype(str)
    if dtype.kind not in "biuf" or h5py.check_enum_dtype(dtype) is not None:
        raise Unsupported(f"{dataset.name}: type {dtype}")
    values = dataset[()]
    fill = dataset.attrs.get("_FillValue")
    if fill is not None:
        fill = np.asarray(fill).ravel()
        # xarray leaves a NaN fill as is on floats; any other fill value it masks (and
        # turns integers into floats): left to xarray
        if not (dtype.kind == "f" and fill.size == 1 and np.isnan(fill[0])):
            raise Unsupported(f"{dataset.name}: fill value {fill}")
    marked = dataset.attrs.get("dtype")
    if marked is not None:
        marked = marked.decode("utf-8", "replace") if isinstance(marked, bytes) else marked
        if marked != "bool" or dtype.kind not in "iu":
            raise Unsupported(f"{dataset.name}: dtype attribute {marked!r}")
        values = values.astype(bool)
    # netCDF stores big-endian scales (dimension-only ones); xarray gives native order
    if values.dtype.byteorder not in ("=", "|"):
        values = values.astype(values.dtype.newbyteorder("="))
    return values


def _dataset(group) -> xr.Dataset:
    import h5py

    handle = group.file
    items = [(key, item) for key, item in group.items() if isinstance(item, h5py.Dataset)]
    scales = {int(item.attrs["_Netcdf4Dimid"]): key for key, item in items
              if item.is_scale and "_Netcdf4Dimid" in item.attrs}
    coords, variables = {}, {}
    for key, item in items:
        if not isinstance(item, h5py.Dataset):
            continue
        if "coordinates" in item.attrs:
            raise Unsupported(f"{item.name}: coordinates attribute")
        if item.is_scale:
            name_attr = item.attrs.get("NAME", b"")
            if isinstance(name_attr, bytes):
                name_attr = name_attr.decode("utf-8", "replace")
            if str(name_attr).startswith(_DIMENSION_ONLY):
                continue  # a dimension only: its length comes with the variables on it
            coords[key] = xr.Variable((key,), _data(item), _attrs(item.attrs), fastpath=True)
        else:
            variables[key] = xr.Variable(_dimension_names(item, handle, scales), _data(item),
                                         _attrs(item.attrs), fastpath=True)
    return xr.Dataset(variables, coords=coords, attrs=_attrs(group.attrs))
