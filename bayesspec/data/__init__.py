"""Data in: the tidy table (read, validated, grouped, saturated points set aside), acceptance counters, its schema and units, the catalog of model and GPU cards, decode profiles.

The names below are imported on first use (``from bayesspec.data import X`` reads the
submodule that defines X), so importing one light submodule never loads the others.
"""

from bayesspec import lazy_export

#: the submodules whose public names this package re-exports, searched in order
_SUBMODULES = ('columns', 'cells', 'groups', 'engine_limits', 'saturation', 'validate', 'read',
               'counters')


def __getattr__(name: str):
    return lazy_export(globals(), _SUBMODULES, name)
