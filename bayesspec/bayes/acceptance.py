"""Acceptance as a property of the output tokens, from vLLM's per-position counters.

Eq. (3) takes every drafted token as accepted with one probability alpha (i.i.d.). What
is measured says otherwise: an n-gram proposer either has a match and rides it or has
none, a draft head has easy and hard stretches, and the first position's acceptance
falls as k grows. The mechanism (docs/laws.md, "the acceptance process"): whether the
drafter can guess the next token persists from one token to the next, a Markov chain
over token states. A cycle accepts the run of guessable tokens from its first drafted
position, capped at k, and commits it plus one token, so where cycles start depends on
k: a long draft uses up an easy stretch in fewer cycles, and more cycles then start in
hard text. The law, P(A = a | k) for a = 0..k, is
:func:`bayesspec.laws.token_cycle_acceptance_expr`; it gives the per-position counters
of any k (drafts with at least i accepted, vLLM's counter) and E(k) = 1 + E[A].

Structures (per setup; the richer ones where the data ask for them):

- ``iid``: one alpha, eq. (3) (the chain with p + q = 1);
- ``chain``: two states, guessable or not, with persistences p and q;
- ``spread``: the persistence of guessable stretches is not one number: two guessable
  states, persistences logit^-1(x -+ delta), entered equally often after an unguessable
  token (a distribution of persistence; three states in all);
- ``+depth``: a trained drafter's own errors grow with its depth in the draft (it
  drafts from its own outputs): a guessable token at depth i is accepted with
  probability exp(-lambda (i - 1)) up to the deepest measured depth D, and past the
  head's trained depth T (a parameter; taken as D where it lies past D, which no count
  tells apart) falls by ``deep_decay`` per depth: a cliff inside the measured k is
  measured, past D the loss is the prior's. An n-gram proposer copies, so it has none.
- ``position``: the per-position decay logit alpha_i = a + b log i of the previous
  version (no k dependence), kept for comparison (:class:`PositionAcceptanceModel`).

The likelihood of a window (a row: N drafts at draft length k) is multinomial over the
accepted count A (the counts of A = a are differences of the position counters); a
setup with more than one window at some k gets a Dirichlet-multinomial instead, with a
concentration learned from the scatter of those windows (prompt-to-prompt variation);
with one window per k that scatter cannot be measured and the intervals are those of
the window as measured. A window of totals alone (vLLM's Prometheus totals, or a
published acceptance length per k) measures E_k[A] only: a normal likelihood with its
counting error, its rounding and a run-to-run term (each run is its own measurement,
:func:`totals_log_likelihood`). Past the deepest measured k a trained drafter's
reliability is the prior's (``deep_decay``, :func:`bayesspec.laws.depth_reliability_expr`):
E(k) there is an interval that widens with k, from a head that keeps its level to one
that plateaus. Setups (verifier, drafter, method and the labels rows carry,
:data:`bayesspec.data.COUNTER_LABEL_COLUMNS`) are fitted side by side, never pooled.
With two or more distinct k in a setup the structure is chosen by held-out k (fit the
other k, predict the windows of one, summed over folds; by per-position counters: a few
totals cannot tell the structures apart); with one k or totals alone, by the drafter's
kind (``spread`` for an n-gram proposer, ``spread+depth`` for a trained drafter: the
choice measured on public traces, benchmarks/acceptance_traces.py).

In three modules, re-exported here: the windows and structures
(:mod:`bayesspec.bayes.acceptance_windows`), the model and its likelihood
(:mod:`bayesspec.bayes.acceptance_model`) and the verb's answers
(:mod:`bayesspec.bayes.acceptance_answers`).
"""

from __future__ import annotations

from bayesspec.bayes.acceptance_answers import (MISFIT_P, AcceptanceFit,
                                                acceptance_length_draws, acceptance_report,
                                                fit_acceptance, held_out_k_scores,
                                                measured_check, predictive_check)
from bayesspec.bayes.acceptance_model import (DEEP_DECAY_SCALE, RUN_SCATTER_SCALE,
                                              TOKEN_VARIABLES, TRAINED_DEPTH_SCALE,
                                              PositionAcceptanceModel, TokenAcceptanceModel,
                                              chain_parameters, token_acceptance_lengths,
                                              totals_log_likelihood, window_log_likelihood)
from bayesspec.bayes.acceptance_windows import (COPYING_PROPOSERS, STRUCTURE_PARAMETERS,
                                                STRUCTURES, counter_windows,
                                                default_structure, measured_depths,
                                                replicated_setups, setup_label,
                                                token_windows_of)

__all__ = ["MISFIT_P", "AcceptanceFit", "acceptance_length_draws", "acceptance_report",
           "fit_acceptance", "held_out_k_scores", "measured_check", "predictive_check",
           "DEEP_DECAY_SCALE", "RUN_SCATTER_SCALE", "TOKEN_VARIABLES", "TRAINED_DEPTH_SCALE",
           "PositionAcceptanceModel", "TokenAcceptanceModel", "chain_parameters",
           "token_acceptance_lengths", "totals_log_likelihood", "window_log_likelihood",
           "COPYING_PROPOSERS", "STRUCTURE_PARAMETERS", "STRUCTURES", "counter_windows",
           "default_structure", "measured_depths", "replicated_setups", "setup_label",
           "token_windows_of"]
