"""The prediction contract: what a fitted model answers, as numpy objects over draws.

Every model class (:mod:`bayesspec.bayes`) turns a fit into these objects; decisions,
reports, plots and checks use only them, never the posterior's variable names:

- :mod:`~bayesspec.prediction.curves`: :class:`Curve`, one mean-latency curve L(RPS),
  eq. (1) from draws of (C1, C2) or the slot queue with the engine's cap, its variants,
  and :class:`MoECurve`, eq. (4) from the covered/saturated split.
  ``model.group_curve(fit, g)`` gives one fitted group's curve.
- :mod:`~bayesspec.prediction.profile`: :class:`ProfileCurve`, the curve with the
  engine's decode-iteration profile.
- :mod:`~bayesspec.prediction.metric`: :class:`MetricCurve`, a latency summary (p99,
  TTFT, ITL) under load.
- :mod:`~bayesspec.prediction.noise`: :class:`Noise`, the measurement model of a mean
  latency (for predictive draws), :class:`RunProcess` and :class:`SummarySampling`.
- :mod:`~bayesspec.prediction.setups`: :class:`Law`, one *setup* (a verifier at given
  lengths, with a drafter when there is one): the dense baseline (k = 0) and speculative
  decoding at the (alpha, k) the model can answer: any, from six cycle coefficients
  (:class:`CoefficientLaw`, eq. (3)), or the fitted ones (:class:`ConfigurationLaw`).
  ``model.law(fit, selection)`` gives it.

The names below are imported on first use (``from bayesspec.prediction import X`` reads the
submodule that defines X), so importing one light submodule never loads the others.
"""

from bayesspec import lazy_export

#: the submodules whose public names this package re-exports, searched in order
_SUBMODULES = ('noise', 'curves', 'profile', 'metric', 'setups')


def __getattr__(name: str):
    return lazy_export(globals(), _SUBMODULES, name)
