"""Posterior answers a user acts on, computed over every draw at once.

Split along what is asked: :mod:`.predict` (latency of a fitted group at new rates),
:mod:`.speculative` (speedup, crossover RPS*, best k of a setup's :class:`Law`) and
:mod:`.compare` (two fits, or two engine versions in one fit), :mod:`.schedule` (batch size
-> k for the serving engine), :mod:`.slo` (goodput and the best configuration under a
latency SLO). Each takes the objects of
the prediction contract (:mod:`bayesspec.prediction`), which the fit's model class builds
(``fit.law(...)``, ``fit.group_curve(g)``), and returns the JSON shapes of CONTRACT.md.
"""

from bayesspec.uncertainty import DEFAULT_PROB, uncertain
from bayesspec.decisions.compare import compare_fits, compare_versions
from bayesspec.decisions.predict import predict_group
from bayesspec.decisions.schedule import vllm_schedule
from bayesspec.decisions.slo import DEFAULT_SLO_PROB, slo_decision
from bayesspec.decisions.speculative import SPEEDUP_CAP, crossover, kstar_table, speedup_curve

__all__ = ["DEFAULT_PROB", "uncertain", "predict_group", "speedup_curve", "crossover",
           "kstar_table", "vllm_schedule", "slo_decision", "DEFAULT_SLO_PROB", "SPEEDUP_CAP", "compare_fits", "compare_versions"]
