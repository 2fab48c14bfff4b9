"""A module imported on first use, so that answering from a saved fit never loads PyMC.

The model classes (``bayes/``) both build PyMC graphs and answer from a saved fit with
numpy. Importing PyMC and PyTensor costs about a second, which an answering verb
(``predict``, ``speedup``, ...) would pay for nothing. Each model module therefore binds
``pm = lazy_module("pymc")`` and ``pt = lazy_module("pytensor.tensor")``: the names read as
before, and the real module is imported the first time an attribute is looked up, i.e.
when a model is built. ``tests/test_architecture.py`` checks that answering from a fit
file imports neither.

The proxy is not put into ``sys.modules``: other code importing ``pymc`` gets the real
module, and ``"pymc" in sys.modules`` keeps meaning that PyMC was loaded.
"""

from __future__ import annotations

import types
from importlib import import_module


class LazyModule(types.ModuleType):
    """Stands for the module ``name``; imports it on the first attribute lookup."""

    def __init__(self, name: str):
        super().__init__(name)
        self.__dict__["_lazy_target"] = None

    def _lazy_load(self) -> types.ModuleType:
        target = self.__dict__["_lazy_target"]
        if target is None:
            target = import_module(self.__name__)
            self.__dict__["_lazy_target"] = target
        return target

    def __getattr__(self, attribute: str):
        # only called for names the proxy itself does not hold (i.e. the module's own)
        return getattr(self._lazy_load(), attribute)

    def __dir__(self):
        return dir(self._lazy_load())

    def __repr__(self) -> str:
        state = "loaded" if self.__dict__["_lazy_target"] is not None else "not loaded yet"
        return f"<lazy module {self.__name__!r} ({state})>"


def lazy_module(name: str) -> types.ModuleType:
    """``name``'s module when it is already imported, else a proxy that imports it on
    first use."""
    import sys

    loaded = sys.modules.get(name)
    return loaded if loaded is not None else LazyModule(name)
