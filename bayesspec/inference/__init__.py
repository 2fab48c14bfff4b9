"""Inference: sampling, the convergence verdict, the approximate path, the compile cache, parallel refits, fit files on disk and their tables, and the pointwise log-likelihood.

The names below are imported on first use (``from bayesspec.inference import X`` reads the
submodule that defines X), so importing one light submodule never loads the others.
"""

from bayesspec import lazy_export

#: the submodules whose public names this package re-exports, searched in order
_SUBMODULES = ('sampling', 'convergence', 'tables', 'log_likelihood')


def __getattr__(name: str):
    return lazy_export(globals(), _SUBMODULES, name)
