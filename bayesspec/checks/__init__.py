"""Checks of a fit, one module per check: refits that hold points out (``leave_out``:
leave-n-out combinations or verifiers, interleaved rate folds), the prior predictive
check (``prior_predictive``), PSIS-LOO, the left-out PIT and model comparison (``loo``),
the posterior predictive check per group (``posterior_predictive``, scored by
``calibration``; a ``tails`` fit's summaries in ``summaries``), the rate hold-out
(``rate_holdout``), simulation-based calibration (``sbc``, ``ranks``) and replicate
coverage (``replicates``).

The names below are imported on first use (``from bayesspec.checks import X`` reads the
submodule that defines X), so importing one light submodule never loads the others.
"""

from importlib import import_module
from importlib.util import find_spec

#: the submodules whose public names this package re-exports, searched in order (the
#: light ones first: a name found there never loads the refit machinery of the last two)
_SUBMODULES = ('calibration', 'loo', 'summaries', 'posterior_predictive', 'rate_holdout',
               'prior_predictive', 'leave_out')


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
