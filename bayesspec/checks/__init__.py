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

from bayesspec import lazy_export

#: the submodules whose public names this package re-exports, searched in order (the
#: light ones first: a name found there never loads the refit machinery of the last two)
_SUBMODULES = ('calibration', 'loo', 'summaries', 'posterior_predictive', 'rate_holdout',
               'prior_predictive', 'leave_out')


def __getattr__(name: str):
    return lazy_export(globals(), _SUBMODULES, name)
