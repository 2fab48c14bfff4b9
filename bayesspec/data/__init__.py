"""Data in: the tidy table (read, validated, grouped, saturated points set aside), acceptance counters, its schema and units, the catalog of model and GPU cards, decode profiles.

The names below are imported on first use (``from bayesspec.data import X`` reads the
submodule that defines X), so importing one light submodule never loads the others.
"""

from importlib import import_module
from importlib.util import find_spec

#: the submodules whose public names this package re-exports, searched in order
_SUBMODULES = ('columns', 'cells', 'groups', 'engine_limits', 'saturation', 'validate', 'read',
               'counters')


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    if find_spec(f"{__name__}.{name}") is not None:  # a submodule, never a same-named value
        return import_module(f"{__name__}.{name}")
    for submodule in _SUBMODULES:
        module = import_module(f"{__name__}.{submodule}")
        if hasattr(module, name):
            value = getattr(module, name)
            globals()[name] = value
            return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
