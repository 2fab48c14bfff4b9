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

Kept whole: the token-process model, its per-position fallback and the report that
chooses between them read one set of counters with one set of checks.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayesspec.data import COUNTER_LABEL_COLUMNS, POSITION_COUNT_COLUMN
from bayesspec.errors import BadInput
from bayesspec.laws import (acceptance_length_of_pmf_expr, accepted_moments_of_pmf_expr,
                            depth_reliability_expr, expected_accepted_positions_expr,
                            token_regimes_acceptance_expr)

#: The token-process structures: which parts of the chain are switched on.
STRUCTURES = {
    "iid": {"memoryless": 1.0, "spread": 0.0, "depth": 0.0},
    "chain": {"memoryless": 0.0, "spread": 0.0, "depth": 0.0},
    "chain+depth": {"memoryless": 0.0, "spread": 0.0, "depth": 1.0},
    "spread": {"memoryless": 0.0, "spread": 1.0, "depth": 0.0},
    "spread+depth": {"memoryless": 0.0, "spread": 1.0, "depth": 1.0},
}
#: The free parameters each structure uses (what its convergence is judged on).
STRUCTURE_PARAMETERS = {
    "iid": ["logit_persistence"],
    "chain": ["logit_persistence", "logit_stay_unguessable"],
    "chain+depth": ["logit_persistence", "logit_stay_unguessable", "depth_decay"],
    "spread": ["logit_persistence", "logit_stay_unguessable", "persistence_spread"],
    "spread+depth": ["logit_persistence", "logit_stay_unguessable", "persistence_spread",
                     "depth_decay"],
}
#: Proposers that copy earlier text (no model of their own, no error that grows with
#: the depth): matched by name in the drafter or method label.
COPYING_PROPOSERS = ("ngram", "n-gram", "prompt_lookup", "prompt-lookup", "lookup",
                     "suffix", "pld")


def default_structure(labels: dict) -> str:
    """The structure for a setup measured at one k: ``spread`` for a copying proposer
    (n-gram, prompt lookup, suffix decoding), ``spread+depth`` for a trained drafter."""
    text = " ".join(str(labels.get(c, "")) for c in ("drafter", "method")).lower()
    return "spread" if any(name in text for name in COPYING_PROPOSERS) else "spread+depth"


# ----------------------------------------------------------------------------- windows

def counter_windows(counters: pd.DataFrame) -> dict:
    """The windows of :func:`bayesspec.data.read_counters` grouped into setups.

    Per window: ``setup`` (index), ``k``, ``drafts`` (NaN where a table gave none) and
    ``counts`` (W, max_k + 1): the drafts that accepted exactly a = 0..k tokens (0
    beyond k, and all 0 on a window of totals alone), ``inside`` (a <= k),
    ``has_positions``, and the totals every window has: ``accepted_mean`` (accepted
    drafts per draft), ``inv_drafts`` (1 / num_drafts, 0 where unknown) and
    ``resolution`` (the reported digit of an acceptance length without counts, else 0);
    per setup: ``setups`` (labels), ``labels`` (dicts), ``k_measured``. Two windows
    share a setup only when every label column they carry is equal.
    """
    label_columns = [c for c in COUNTER_LABEL_COLUMNS if c in counters.columns]
    keys = counters[label_columns].astype(object).where(counters[label_columns].notna(), None)
    tuples = [tuple(row) for row in keys.itertuples(index=False, name=None)]
    order: dict[tuple, int] = {}
    setup = np.array([order.setdefault(t, len(order)) for t in tuples], dtype=int)
    labels = [dict(zip(label_columns, key)) for key in order]
    k = counters["k"].to_numpy(int)
    max_k = int(k.max())
    drafts = counters["num_drafts"].to_numpy(float)
    has_positions = (counters["has_positions"].to_numpy(bool)
                     if "has_positions" in counters.columns else np.ones(len(k), bool))
    positions = np.stack([counters[POSITION_COUNT_COLUMN.format(i)].to_numpy(float)
                          if POSITION_COUNT_COLUMN.format(i) in counters.columns
                          else np.zeros(len(counters)) for i in range(1, max_k + 1)], axis=1)
    inside = np.arange(max_k + 1)[None, :] <= k[:, None]
    at_least = np.concatenate([np.nan_to_num(drafts)[:, None], positions,
                               np.zeros((len(k), 1))], axis=1)
    at_least = np.where(np.arange(max_k + 2)[None, :] <= k[:, None], at_least, 0.0)
    counts = np.where(inside & has_positions[:, None], at_least[:, :-1] - at_least[:, 1:], 0.0)
    if "accepted_mean" in counters.columns:
        accepted_mean = counters["accepted_mean"].to_numpy(float)
        resolution = counters["resolution"].to_numpy(float)
    else:
        accepted_mean = (counts * np.arange(max_k + 1)).sum(axis=1) / drafts
        resolution = np.zeros(len(k))
    with np.errstate(divide="ignore"):
        inv_drafts = np.where(np.isfinite(drafts) & (drafts > 0), 1.0 / drafts, 0.0)
    return {"setup": setup, "setups": [setup_label(lab) for lab in labels],
            "labels": labels, "k": k, "drafts": drafts, "counts": counts, "inside": inside,
            "max_k": max_k, "has_positions": has_positions, "accepted_mean": accepted_mean,
            "inv_drafts": inv_drafts, "resolution": resolution,
            "k_measured": [sorted(set(k[setup == s].tolist())) for s in range(len(labels))],
            "data_rows": list(counters.attrs.get("data_rows", range(1, len(k) + 1)))}


def setup_label(labels: dict) -> str:
    """'Llama-3.1-8B + EAGLE3' and the other labels a setup carries."""
    text = f"{labels.get('verifier') or 'model'}"
    if labels.get("drafter"):
        text += f" + {labels['drafter']}"
    extra = [f"{c}={labels[c]:g}" if isinstance(labels[c], float) else f"{c}={labels[c]}"
             for c in COUNTER_LABEL_COLUMNS if c not in ("verifier", "drafter")
             and c in labels and labels[c] not in (None, "")
             and not (isinstance(labels[c], float) and np.isnan(labels[c]))]
    return text + (f" ({', '.join(extra)})" if extra else "")


def replicated_setups(windows: dict) -> np.ndarray:
    """Per setup: True when some k has more than one window (the scatter between windows
    can then be measured: a Dirichlet-multinomial with a learned concentration)."""
    out = np.zeros(len(windows["setups"]), dtype=bool)
    counted = windows.get("has_positions", np.ones(len(windows["k"]), bool))
    for s in range(len(out)):
        ks = windows["k"][(windows["setup"] == s) & counted]
        out[s] = len(ks) > len(set(ks.tolist()))
    return out


def window_log_likelihood(counts: np.ndarray, pmf: np.ndarray, inside: np.ndarray,
                          concentration=None, xp=np, gammaln=None) -> np.ndarray:
    """Log-likelihood of windows' counts of A = a given the law ``pmf`` (..., W, a),
    multinomial, or Dirichlet-multinomial with ``concentration`` (..., W) where given.
    With ``xp`` numpy the multinomial coefficient is included (comparable densities);
    in a PyMC graph it is a constant and left out."""
    safe = xp.where(inside, pmf, 1.0)
    if concentration is None:
        value = (counts * xp.log(safe)).sum(axis=-1)
        if xp is np:
            from scipy.special import gammaln as lg

            drafts = counts.sum(axis=-1)
            value = value + lg(drafts + 1.0) - lg(counts + 1.0).sum(axis=-1)
        return value
    drafts = counts.sum(axis=-1)
    kappa = concentration[..., None]
    terms = xp.where(inside, gammaln(counts + kappa * safe) - gammaln(kappa * safe), 0.0)
    value = gammaln(concentration) - gammaln(drafts + concentration) + terms.sum(axis=-1)
    if xp is np:
        value = value + gammaln(drafts + 1.0) - gammaln(counts + 1.0).sum(axis=-1)
    return value


def totals_log_likelihood(pmf, accepted_mean, inv_drafts, resolution, run_scatter, xp=np):
    """Log density of each window's accepted drafts per draft (``accepted_mean``: the
    totals' accepted / num_drafts, or a table's acceptance length minus one) given the
    law ``pmf`` (..., W, a) of its k.

    A window is a run of its own: what it measures is E_k[A] times a run effect
    (another launch, another sample of prompts: relative sd ``run_scatter``, a
    parameter of the setup), plus the counting error of its N drafts (Var_k[A] / N;
    ``inv_drafts`` 0 where N is unknown) and the rounding of a reported number
    (``resolution``, uniform). Runs at different k are separate measurements: nothing
    is pooled into one binomial. Normal, since the windows hold hundreds of drafts or
    more."""
    mean, variance = accepted_moments_of_pmf_expr(pmf, xp=xp)
    var = (variance * inv_drafts + (run_scatter * mean) ** 2 + resolution ** 2 / 12.0
           + 1e-10)
    return -0.5 * (accepted_mean - mean) ** 2 / var - 0.5 * xp.log(2.0 * np.pi * var)


def chain_parameters(logit_persistence, spread, logit_stay_unguessable, decay,
                     switches: dict, max_depth: int, xp=np, deep_decay=None,
                     measured_depth=None, trained_depth=None):
    """The token chain of a structure (:func:`bayesspec.laws.token_regimes_acceptance_expr`'s
    arguments): the persistences of two guessable regimes, entered equally often, the
    unguessable state's persistence and the reliability reached by depth i = 0..max_depth
    (:func:`bayesspec.laws.depth_reliability_expr`: the decay measured up to
    ``measured_depth``, ``deep_decay`` past ``trained_depth``), from the parameters and a structure's
    switches (arrays broadcasting with the parameters)."""
    def sigmoid(v):
        return 1.0 / (1.0 + xp.exp(-v))

    delta = spread * switches["spread"]
    memoryless = switches["memoryless"]
    stay_bad = (memoryless * (1.0 - sigmoid(logit_persistence))
                + (1.0 - memoryless) * sigmoid(logit_stay_unguessable))
    depth = switches["depth"]
    deep = 0.0 * decay if deep_decay is None else deep_decay
    measured = max_depth if measured_depth is None else measured_depth
    if trained_depth is not None:
        # a loss that starts at a T past the deepest measured position D is, to every
        # count, one that starts at D at a slower rate: the counts place T only below D
        trained_depth = xp.minimum(trained_depth, np.asarray(measured, dtype=float))
    reached = depth_reliability_expr(decay * depth, deep * depth, measured, max_depth, xp=xp,
                                     trained_depth=trained_depth)
    return (sigmoid(logit_persistence - delta), sigmoid(logit_persistence + delta),
            0.5 + 0.0 * stay_bad, stay_bad, reached)


def measured_depths(windows: dict) -> np.ndarray:
    """Per setup, the deepest draft position its windows measured (its largest k)."""
    return np.array([max(ks) for ks in windows["k_measured"]], dtype=float)


#: Prior scale (HalfCauchy) of the loss of a trained drafter's reliability per depth
#: past the deepest measured position (:func:`bayesspec.laws.depth_reliability_expr`).
#: Heads differ most there: EAGLE-3 keeps its conditional rates to depth 7, an MTP head
#: applied recursively loses them at once. A half-Cauchy holds both: its 5% quantile
#: (0.024) keeps the last measured level, its 95% (3.8) is a cliff. Chosen on one K = 10
#: run of Llama-3.1-8B + EAGLE-3 on MT-Bench and one on SpecBench (E(1..4) fitted,
#: E(5..10) predicted) and on simulated depth-limited drafters of seeds 1000-1019
#: (benchmarks/acceptance_totals.py, "choose"): a half-normal of the same scale covered
#: the K = 10 runs but only 0.60 of the simulated E(5..8), missing every cliff.
DEEP_DECAY_SCALE = 0.3
#: Prior scale of a trained drafter's trained depth T (Normal at 1 truncated to T >= 1):
#: the depth past which it loses ``deep_decay`` per depth. Heads are trained from one
#: token ahead (an MTP head) to about seven (EAGLE-3's training-time test); a T inside the
#: measured depths is a cliff the counts show, one past them the prior's.
TRAINED_DEPTH_SCALE = 2.0
#: Prior scale (HalfNormal) of the run-to-run relative scatter of E[A] between separate
#: runs. Chosen on replicated runs of one build (3 runs per k, stderr 0.00-0.01 on an
#: acceptance length near 2.7 and 3.4) and on two runs that differ in one setting
#: (3.64, 3.67): about 1% of E[A].
RUN_SCATTER_SCALE = 0.02


# ----------------------------------------------------------------------------- model

class TokenAcceptanceModel:
    """The token process fitted to per-position counters: build / fit / predict.

    Not a latency model: it answers P(A = a | k), the per-position rates and E(k) of any
    k. ``structures``: one name of :data:`STRUCTURES` per setup, or one for all (None:
    :func:`default_structure`). The graph is compiled once; other structures and
    held-out folds are data (:meth:`refit`)."""

    name = "token-acceptance"
    version = "1"
    # One window constrains fewer directions than a rich structure has (spread+depth: 4
    # parameters, 3 free probabilities at k = 3): the posterior is a narrow curved ridge.
    # Measured on the eight public traces (benchmarks/acceptance_traces.py): 1000 + 1000
    # draws left R-hat up to 1.034 and bulk ESS 209; 2000 tune + 3000 draws converged in
    # all 16 fits (2 seeds), R-hat <= 1.007, ESS >= 655. The model is small: seconds.
    default_tune = 2000
    default_draws = 3000
    target_accept = 0.95
    retry_target_accept = 0.99
    adaptation = "diag"
    init = "jitter"

    def __init__(self, *, priors: dict | None = None):
        self.priors = {"logit_persistence": (0.0, 1.5), "logit_stay_unguessable": (0.0, 1.5),
                       "persistence_spread": 1.0, "depth_decay": 0.05,
                       "deep_decay": DEEP_DECAY_SCALE, "trained_depth": TRAINED_DEPTH_SCALE,
                       "run_scatter": RUN_SCATTER_SCALE,
                       "log_concentration": (np.log(2000.0), 1.5), **(priors or {})}
        self.windows: dict | None = None
        self.structures: list[str] = []
        self.pm_model = None
        self.compiled = None
        self.tree = None

    # ------------------------------------------------------------------ graph
    def _switch_data(self, structures: list[str]) -> dict:
        unknown = [s for s in structures if s not in STRUCTURES]
        if unknown:
            raise BadInput(f"unknown acceptance structure {unknown[0]!r}; have "
                           f"{', '.join(STRUCTURES)}", option="--structure")
        return {f"switch_{name}": np.array([STRUCTURES[s][name] for s in structures])
                for name in ("memoryless", "spread", "depth")}

    def resolve_structures(self, structures) -> list[str]:
        n = len(self.windows["setups"])
        if structures is None:
            return [default_structure(lab) for lab in self.windows["labels"]]
        if isinstance(structures, str):
            return [structures] * n
        return list(structures)

    def build(self, counters: pd.DataFrame | dict, structures=None, weights=None):
        import pymc as pm
        import pytensor.tensor as pt

        windows = self.windows = (counters if isinstance(counters, dict)
                                  else counter_windows(counters))
        self.structures = self.resolve_structures(structures)
        n_setups = len(windows["setups"])
        replicated = replicated_setups(windows)
        max_k = windows["max_k"]
        priors = self.priors
        coords = {"setup": windows["setups"], "window": np.arange(len(windows["k"])),
                  "accepted": np.arange(max_k + 1)}
        with pm.Model(coords=coords) as model:
            switches = {name: pm.Data(name, values, dims="setup")
                        for name, values in self._switch_data(self.structures).items()}
            switches = {name.removeprefix("switch_"): v for name, v in switches.items()}
            weight = pm.Data("window_weight", np.ones(len(windows["k"])) if weights is None
                             else np.asarray(weights, float), dims="window")
            counts = pm.Data("window_counts", windows["counts"], dims=("window", "accepted"))
            x = pm.Normal("logit_persistence", *priors["logit_persistence"], dims="setup")
            q = pm.Normal("logit_stay_unguessable", *priors["logit_stay_unguessable"],
                          dims="setup")
            spread = pm.HalfNormal("persistence_spread", priors["persistence_spread"],
                                   dims="setup")
            decay = pm.HalfNormal("depth_decay", priors["depth_decay"], dims="setup")
            deep = pm.HalfCauchy("deep_decay", priors["deep_decay"], dims="setup")
            trained = pm.TruncatedNormal("trained_depth", 1.0, priors["trained_depth"],
                                         lower=1.0, dims="setup")
            scatter = pm.HalfNormal("run_scatter", priors["run_scatter"], dims="setup")
            totals = {name: pm.Data(f"window_{name}", windows[name], dims="window")
                      for name in ("accepted_mean", "inv_drafts", "resolution")}
            by_totals = pm.Data("window_by_totals", (~windows["has_positions"]).astype(float),
                                dims="window")
            # each window's own law: its setup's parameters, its k picked by a constant
            # one-hot (cheaper to compile than gathering from a table)
            setup = windows["setup"]
            table = token_regimes_acceptance_expr(*chain_parameters(
                x[setup], spread[setup], q[setup], decay[setup],
                {n: v[setup] for n, v in switches.items()}, max_k, xp=pt,
                deep_decay=deep[setup], measured_depth=measured_depths(windows)[setup],
                trained_depth=trained[setup]),
                xp=pt)
            pick = (np.arange(1, max_k + 1)[None, :] == windows["k"][:, None]).astype(float)
            pmf = (table * pick[:, :, None]).sum(axis=1)            # (W, max_k + 1)
            inside = windows["inside"]
            plain = window_log_likelihood(counts, pmf, inside, xp=pt)
            if replicated.any():
                log_kappa = pm.Normal("log_concentration", *priors["log_concentration"],
                                      dims="setup")
                kappa = pt.exp(log_kappa)[windows["setup"]]
                scattered = window_log_likelihood(counts, pmf, inside, kappa, xp=pt,
                                                  gammaln=pt.gammaln)
                loglik = pt.where(replicated[windows["setup"]], scattered, plain)
            else:
                loglik = plain
            # a window of totals alone: its accepted drafts per draft (its counts are 0)
            loglik = loglik + by_totals * totals_log_likelihood(
                pmf, totals["accepted_mean"], totals["inv_drafts"], totals["resolution"],
                scatter[setup], xp=pt)
            pm.Potential("window_log_likelihood", (weight * loglik).sum())
        self.pm_model = model
        return model

    def fit(self, counters, structures=None, settings=None):
        """Compile (once) and sample; returns the DataTree (also kept as ``tree``)."""
        from bayesspec.inference import compile_model, sample_compiled, settings_for

        settings = settings_for(self, settings)
        if self.compiled is None:
            self.build(counters, structures)
            self.compiled = compile_model(self.pm_model, settings)
        else:
            self.structures = self.resolve_structures(structures)
        return self.refit(self.structures, settings=settings)

    def refit(self, structures, weights=None, settings=None):
        """Sample the compiled model again with other structures and window weights (a
        held-out fold: weight 0)."""
        from bayesspec.inference import sample_compiled, settings_for

        self.structures = self.resolve_structures(structures)
        data = self._switch_data(self.structures)
        data["window_counts"] = self.windows["counts"]
        for name in ("accepted_mean", "inv_drafts", "resolution"):
            data[f"window_{name}"] = self.windows[name]
        data["window_by_totals"] = (~self.windows["has_positions"]).astype(float)
        data["window_weight"] = (np.ones(len(self.windows["k"])) if weights is None
                                 else np.asarray(weights, float))
        self.tree = sample_compiled(self.compiled, settings_for(self, settings), data=data)
        return self.tree

    # ------------------------------------------------------------------ answers
    def _draws(self, name: str, setup: int) -> np.ndarray:
        posterior = self.tree["posterior"]
        if name not in posterior:
            return None
        return np.asarray(posterior[name].isel(setup=setup).stack(s=("chain", "draw")).values,
                          dtype=float)

    def pmf_draws(self, setup: int, k: int, structure: str | None = None) -> np.ndarray:
        """(S, k + 1) draws of P(A = a | k)."""
        return self.pmf_table(setup, k, structure)[:, int(k) - 1, :int(k) + 1]

    def pmf_table(self, setup: int, k_max: int, structure: str | None = None) -> np.ndarray:
        """(S, k_max, k_max + 1) draws of P(A = a | k) for k = 1..k_max (row k - 1)."""
        structure = structure or self.structures[setup]
        switches = {n: np.float64(v) for n, v in STRUCTURES[structure].items()}
        return token_regimes_acceptance_expr(*chain_parameters(
            self._draws("logit_persistence", setup), self._draws("persistence_spread", setup),
            self._draws("logit_stay_unguessable", setup), self._draws("depth_decay", setup),
            switches, int(k_max), deep_decay=self._draws("deep_decay", setup),
            measured_depth=measured_depths(self.windows)[setup],
            trained_depth=self._draws("trained_depth", setup)))

    def acceptance_length_draws(self, setup: int, k_max: int) -> np.ndarray:
        """(S, k_max + 1) draws of E(k), k = 0..k_max (E(0) = 1)."""
        lengths = acceptance_length_of_pmf_expr(self.pmf_table(setup, k_max))
        return np.column_stack([np.ones(len(lengths)), lengths])

    def log_likelihood(self, select=None) -> np.ndarray:
        """(S, W) log-likelihood of every window at every draw (numpy, multinomial
        coefficient included); ``select``: a boolean mask of windows."""
        from scipy.special import gammaln

        w = self.windows
        replicated = replicated_setups(w)
        chosen = np.ones(len(w["k"]), bool) if select is None else np.asarray(select, bool)
        out = []
        for i in np.flatnonzero(chosen):
            s, k = int(w["setup"][i]), int(w["k"][i])
            pmf = self.pmf_draws(s, k)
            counts = w["counts"][i, :k + 1][None, :]
            inside = np.ones_like(counts, dtype=bool)
            if not w["has_positions"][i]:
                out.append(totals_log_likelihood(
                    pmf, w["accepted_mean"][i], w["inv_drafts"][i], w["resolution"][i],
                    self._draws("run_scatter", s)))
                continue
            kappa = None
            if replicated[s]:
                kappa = np.exp(self._draws("log_concentration", s))
            out.append(window_log_likelihood(counts, pmf, inside, kappa, gammaln=gammaln))
        return np.column_stack(out) if out else np.zeros((0, 0))

    def new_run_draws(self, setup: int, k_max: int, seed: int = 0) -> np.ndarray:
        """(S, k_max + 1) draws of the acceptance length a new run at each k would
        report: E(k) with the setup's run-to-run scatter on E[A] (many drafts, so no
        counting error)."""
        lengths = self.acceptance_length_draws(setup, k_max)
        scatter = self._draws("run_scatter", setup)
        rng = np.random.default_rng(seed)
        effect = 1.0 + scatter[:, None] * rng.standard_normal(lengths.shape)
        return 1.0 + (lengths - 1.0) * effect

    def verdict(self) -> dict:
        from bayesspec.inference import convergence_verdict

        names = sorted({n for s in self.structures for n in STRUCTURE_PARAMETERS[s]})
        if replicated_setups(self.windows).any():
            names.append("log_concentration")
        if any(STRUCTURES[s]["depth"] for s in self.structures):
            names += ["deep_decay", "trained_depth"]
        if not self.windows["has_positions"].all():
            names.append("run_scatter")
        return convergence_verdict(self.tree, names)


class PositionAcceptanceModel:
    """Acceptance by draft position with no k dependence (every cycle accepts its first
    i drafts with the same probabilities whatever k), per setup:

    - ``shape="decay"``: the previous version's logit alpha_i = a + b log(i), a
      Beta-Binomial chain of conditional counts with a learned concentration, kept for
      comparison;
    - ``shape="free"``: every measured position its own conditional rate, partially
      pooled (logit alpha_i ~ Normal(mu, tau)); positions never measured are drawn from
      that population, so E(k) beyond the measured k is honestly wide. Binomial counts,
      Beta-Binomial with a learned concentration where a setup has several windows at
      one k. It reproduces any measured counters of one k: the fallback when the token
      process cannot (a cycle process that is not a token process, like the simulator's
      ``--acceptance-rates``).
    """

    name = "position-acceptance"
    version = "3"
    default_tune = 1000
    default_draws = 1000
    target_accept = 0.95
    retry_target_accept = 0.99
    adaptation = "diag"
    init = "jitter"

    def __init__(self, *, shape: str = "decay", concentration_prior: tuple = (np.log(200.0), 1.5)):
        if shape not in ("decay", "free"):
            raise ValueError(f"shape must be decay or free, got {shape!r}")
        self.shape = shape
        self.concentration_prior = concentration_prior
        self.windows: dict | None = None
        self.pm_model = None
        self.tree = None

    @property
    def decision_variables(self) -> list[str]:
        if self.shape == "decay":
            return ["logit_alpha_1", "decay", "log_concentration"]
        return ["logit_alpha_mean", "logit_alpha_sd", "logit_alpha", "log_concentration"]

    def build(self, counters) -> object:
        import pymc as pm
        import pytensor.tensor as pt

        windows = self.windows = (counters if isinstance(counters, dict)
                                  else counter_windows(counters))
        max_k = windows["max_k"]
        at_least = windows["counts"][:, ::-1].cumsum(axis=1)[:, ::-1]   # (W, max_k + 1)
        trials = np.where(windows["inside"][:, 1:], at_least[:, :-1], 0.0).astype(int)
        accepted = np.where(windows["inside"][:, 1:], at_least[:, 1:], 0.0).astype(int)
        coords = {"setup": windows["setups"], "window": np.arange(len(windows["k"])),
                  "position": np.arange(1, max_k + 1)}
        log_position = np.log(np.arange(1, max_k + 1, dtype=float))
        s = windows["setup"]
        with pm.Model(coords=coords) as model:
            if self.shape == "decay":
                level = pm.Normal("logit_alpha_1", 1.0, 1.5, dims="setup")
                slope = pm.Normal("decay", 0.0, 1.0, dims="setup")
                conditional = pm.math.sigmoid(level[:, None]
                                              + slope[:, None] * log_position[None, :])
                kappa = pt.exp(pm.Normal("log_concentration", *self.concentration_prior,
                                         dims="setup"))
                rate = conditional[s]
                pm.BetaBinomial("position_count", n=trials, alpha=rate * kappa[s][:, None],
                                beta=(1.0 - rate) * kappa[s][:, None], observed=accepted,
                                dims=("window", "position"))
            else:
                mean = pm.Normal("logit_alpha_mean", 1.0, 1.5, dims="setup")
                spread = pm.HalfNormal("logit_alpha_sd", 1.0, dims="setup")
                logit = pm.Normal("logit_alpha", mean[:, None], spread[:, None],
                                  dims=("setup", "position"))
                rate = pm.math.sigmoid(logit)[s]
                replicated = replicated_setups(windows)
                if replicated.any():
                    kappa = pt.exp(pm.Normal("log_concentration", *self.concentration_prior,
                                             dims="setup"))
                    big = pt.where(replicated, kappa, 1e9)[s][:, None]
                    pm.BetaBinomial("position_count", n=trials, alpha=rate * big,
                                    beta=(1.0 - rate) * big, observed=accepted,
                                    dims=("window", "position"))
                else:
                    pm.Binomial("position_count", n=trials, p=rate, observed=accepted,
                                dims=("window", "position"))
        self.pm_model = model
        return model

    def fit(self, counters, settings=None):
        from bayesspec.inference import sample_model, settings_for

        self.tree = sample_model(self.build(counters), settings_for(self, settings))
        return self.tree

    def _stacked(self, name: str, setup: int) -> np.ndarray:
        values = self.tree["posterior"][name].isel(setup=setup).stack(s=("chain", "draw"))
        return np.asarray(values.transpose("s", ...).values, dtype=float)

    def conditional_draws(self, setup: int, k_max: int, seed: int = 0) -> np.ndarray:
        """(S, k_max) draws of alpha_i; beyond the measured positions of a free shape,
        new positions from the setup's population of positions."""
        if self.shape == "decay":
            level, slope = self._stacked("logit_alpha_1", setup), self._stacked("decay", setup)
            logit = level[:, None] + slope[:, None] * np.log(np.arange(1, k_max + 1))[None, :]
            return 1.0 / (1.0 + np.exp(-logit))
        measured = max(self.windows["k_measured"][setup])
        logit = self._stacked("logit_alpha", setup)[:, :measured]
        if k_max > measured:
            rng = np.random.default_rng(seed)
            mean, spread = (self._stacked("logit_alpha_mean", setup),
                            self._stacked("logit_alpha_sd", setup))
            new = mean[:, None] + spread[:, None] * rng.standard_normal(
                (len(mean), k_max - measured))
            logit = np.concatenate([logit, new], axis=1)
        return 1.0 / (1.0 + np.exp(-logit[:, :k_max]))

    def pmf_draws(self, setup: int, k: int) -> np.ndarray:
        survival = np.cumprod(self.conditional_draws(setup, max(int(k), 1))[:, :k], axis=1)
        padded = np.concatenate([np.ones((survival.shape[0], 1)), survival,
                                 np.zeros((survival.shape[0], 1))], axis=1)
        return padded[:, :-1] - padded[:, 1:]

    def acceptance_length_draws(self, setup: int, k_max: int) -> np.ndarray:
        return expected_accepted_positions_expr(self.conditional_draws(setup, k_max))

    def verdict(self) -> dict:
        from bayesspec.inference import convergence_verdict

        names = [n for n in self.decision_variables if n in self.tree["posterior"]]
        return convergence_verdict(self.tree, names)


def predictive_check(model, setup: int, rng: np.random.Generator, draws: int = 400) -> float:
    """Posterior predictive p-value of the setup's counters: the share of draws whose
    replicated windows (multinomial counts at the window's drafts) are further from the
    law (deviance G^2) than the measured ones. Small (< 0.01): the structure does not
    reproduce the measured counters within counting error. None for a setup of totals
    alone (no per-position counts to check)."""
    w = model.windows
    members = np.flatnonzero((w["setup"] == setup) & w["has_positions"])
    if not len(members):
        return None
    total, pick = None, None
    for i in members:
        k, drafts = int(w["k"][i]), int(w["drafts"][i])
        pmf = np.clip(model.pmf_draws(setup, k), 1e-300, None)
        pmf = pmf / pmf.sum(axis=1, keepdims=True)
        if pick is None:     # the same draws for every window of the setup
            pick = rng.choice(len(pmf), size=min(draws, len(pmf)), replace=False)
        pmf = pmf[pick]
        observed = w["counts"][i, :k + 1]
        replicated = np.array([rng.multinomial(drafts, p) for p in pmf])

        def deviance(counts):
            with np.errstate(divide="ignore", invalid="ignore"):
                terms = np.where(counts > 0, counts * np.log(counts / (drafts * pmf)), 0.0)
            return 2.0 * terms.sum(axis=1)

        gap = deviance(replicated) - deviance(np.broadcast_to(observed, pmf.shape))
        total = gap if total is None else total + gap
    return float(np.mean(total >= 0.0))


MISFIT_P = 0.01


# ----------------------------------------------------------------------------- answers

def _interval(values: np.ndarray, prob: float) -> dict:
    tail = (1.0 - prob) / 2.0
    lo, median, hi = np.quantile(values, [tail, 0.5, 1.0 - tail])
    return {"mean": float(np.mean(values)), "median": float(median), "lo": float(lo),
            "hi": float(hi), "prob": prob}


def held_out_k_scores(model: TokenAcceptanceModel, candidates: list[str], settings=None,
                      progress=None) -> dict:
    """Per setup and candidate structure: the log predictive density of each held-out
    k's windows when the structure is fitted to the setup's other k (folds: the j-th
    distinct k of every setup with more than one k at once), summed over folds. Setups
    with one k get no score."""
    from scipy.special import logsumexp

    w = model.windows
    n_setups = len(w["setups"])
    # by the per-position counters: a few totals cannot tell five structures apart
    per_setup_k = [sorted(set(w["k"][(w["setup"] == s) & w["has_positions"]].tolist()))
                   for s in range(n_setups)]
    folds = max(len(ks) for ks in per_setup_k)
    scores = {s: {c: 0.0 for c in candidates} for s in range(n_setups)
              if len(per_setup_k[s]) > 1}
    if not scores:
        return {}
    for candidate in candidates:
        for fold in range(folds):
            held = np.zeros(len(w["k"]), dtype=bool)
            for s in scores:
                if fold < len(per_setup_k[s]):
                    held |= ((w["setup"] == s) & (w["k"] == per_setup_k[s][fold])
                             & w["has_positions"])
            if not held.any():
                continue
            if progress:
                progress(f"held-out k: {candidate}, fold {fold + 1} of {folds}")
            model.refit(candidate, weights=(~held).astype(float), settings=settings)
            loglik = model.log_likelihood(held)                     # (S, held windows)
            lpd = logsumexp(loglik, axis=0) - np.log(loglik.shape[0])
            for column, i in enumerate(np.flatnonzero(held)):
                scores[int(w["setup"][i])][candidate] += float(lpd[column])
    return scores


def measured_check(model, setup: int, prob: float, rng: np.random.Generator) -> list[dict]:
    """Per measured window of a setup: each position's measured rate (drafts with at
    least i accepted over drafts) against its posterior predictive interval (the law's
    draws plus the counting noise of the window's drafts); a window of totals alone, its
    acceptance length against the interval of a new run's (run scatter, counting and
    rounding error included)."""
    w = model.windows
    tail = (1.0 - prob) / 2.0
    out = []
    for i in np.flatnonzero(w["setup"] == setup):
        k = int(w["k"][i])
        pmf = model.pmf_draws(setup, k)
        pmf = np.clip(pmf, 0.0, None)
        pmf = pmf / pmf.sum(axis=1, keepdims=True)
        if not w["has_positions"][i]:
            mean, variance = accepted_moments_of_pmf_expr(pmf)
            scatter = model._draws("run_scatter", setup)
            if scatter is None:            # a per-position model has no run term
                scatter = np.zeros(len(mean))
            sd = np.sqrt(variance * w["inv_drafts"][i] + (scatter * mean) ** 2
                         + w["resolution"][i] ** 2 / 12.0)
            replay = 1.0 + mean + sd * rng.standard_normal(len(mean))
            lo, hi = np.quantile(replay, [tail, 1.0 - tail])
            measured = 1.0 + float(w["accepted_mean"][i])
            drafts = w["drafts"][i]
            out.append({"row": int(w["data_rows"][i]), "k": k,
                        "drafts": int(drafts) if np.isfinite(drafts) else None,
                        "positions": [],
                        "acceptance_length": {"measured": measured, "lo": float(lo),
                                              "hi": float(hi),
                                              "inside": bool(lo <= measured <= hi)},
                        "inside": int(lo <= measured <= hi)})
            continue
        drafts = int(w["drafts"][i])
        replay = np.array([rng.multinomial(drafts, p) for p in pmf]) / drafts
        predicted = replay[:, ::-1].cumsum(axis=1)[:, ::-1][:, 1:]   # P(A >= i)
        measured = w["counts"][i, :k + 1][::-1].cumsum()[::-1][1:] / drafts
        lo, hi = np.quantile(predicted, [tail, 1.0 - tail], axis=0)
        rows = [{"position": j + 1, "measured": float(measured[j]), "lo": float(lo[j]),
                 "hi": float(hi[j]), "inside": bool(lo[j] <= measured[j] <= hi[j])}
                for j in range(k)]
        out.append({"row": int(w["data_rows"][i]), "k": k, "drafts": drafts,
                    "positions": rows, "inside": sum(r["inside"] for r in rows)})
    return out


class AcceptanceFit:
    """The fitted acceptance of every setup: which model and structure answers it."""

    def __init__(self, windows: dict):
        self.windows = windows
        self.answer: dict[int, tuple] = {}     # setup -> (model, structure)
        self.scores: dict = {}                 # setup -> held-out k score per structure
        self.fit_p: dict[int, float] = {}      # setup -> predictive p-value of the token fit
        self.fallback: dict[int, str] = {}     # setup -> why it fell back

    def model(self, setup: int):
        return self.answer[setup][0]

    def structure(self, setup: int) -> str:
        return self.answer[setup][1]

    def verdicts(self) -> list[dict]:
        seen, out = set(), []
        for model, _ in self.answer.values():
            if id(model) not in seen:
                seen.add(id(model))
                out.append(model.verdict())
        return out


def fit_acceptance(counters: pd.DataFrame, *, structure: str = "auto", settings=None,
                   progress=None, seed: int = 0) -> AcceptanceFit:
    """Fit every setup's acceptance. ``structure`` "auto": the token process, its
    structure chosen by held-out k where a setup has two or more k, else by the drafter's
    kind; a setup whose measured counters the chosen structure does not reproduce
    (posterior predictive p < 0.01) falls back to free per-position rates (``free``).
    A structure name forces it for every setup; ``position`` / ``free``: the per-position
    models (decay / free)."""
    windows = counter_windows(counters)
    result = AcceptanceFit(windows)
    n_setups = len(windows["setups"])
    if structure in ("position", "free"):
        if not windows["has_positions"].all():
            row = windows["data_rows"][int(np.flatnonzero(~windows["has_positions"])[0])]
            raise BadInput(f"per-position rates need per-position counters "
                           f"(accepted_tokens_pos1..k) on every window; row {row} has "
                           f"totals alone: use the token process (--structure auto)",
                           option="--structure")
        model = PositionAcceptanceModel(shape="decay" if structure == "position" else "free")
        model.fit(windows, settings)
        result.answer = {s: (model, structure) for s in range(n_setups)}
        return result
    model = TokenAcceptanceModel()
    model.windows = windows
    chosen = model.resolve_structures(None if structure == "auto" else structure)
    model.fit(windows, chosen, settings)
    if structure == "auto":
        result.scores = held_out_k_scores(model, list(STRUCTURES), settings, progress)
        for s, by_candidate in result.scores.items():
            chosen[s] = max(by_candidate, key=by_candidate.get)
        if result.scores:
            model.refit(chosen, settings=settings)
    result.answer = {s: (model, chosen[s]) for s in range(n_setups)}
    if structure != "auto":
        return result
    rng = np.random.default_rng(seed)
    misfits = []
    for s in range(n_setups):
        result.fit_p[s] = predictive_check(model, s, rng)
        if result.fit_p[s] is not None and result.fit_p[s] < MISFIT_P:
            misfits.append(s)
    if misfits:
        if progress:
            progress(f"the token process ({', '.join(chosen[s] for s in misfits)}) does not "
                     f"reproduce the measured counters of {len(misfits)} setup(s): fitting "
                     "free per-position rates there")
        free = PositionAcceptanceModel(shape="free")
        free.fit(windows, settings)
        for s in misfits:
            result.answer[s] = (free, "free")
            result.fallback[s] = (f"{chosen[s]} does not reproduce the measured counters "
                                  f"(posterior predictive p = {result.fit_p[s]:.3f} < "
                                  f"{MISFIT_P}): free per-position rates, no k dependence")
    return result


def acceptance_report(counters: pd.DataFrame, *, k_max: int = 8, prob: float = 0.9,
                      settings=None, structure: str = "auto", progress=None,
                      seed: int = 0) -> dict:
    """Fit the acceptance (:func:`fit_acceptance`) and answer per setup: the structure and
    why, E(k) for k = 1..k_max, the rates P(A >= i) and the conditional alpha_i of every
    position at each measured k, and how well the measured counters are reproduced."""
    fitted = fit_acceptance(counters, structure=structure, settings=settings,
                            progress=progress, seed=seed)
    windows = fitted.windows
    verdicts = fitted.verdicts()
    worst = next((v for v in verdicts if v["status"] == "not converged"), verdicts[0])
    rng = np.random.default_rng(seed)
    setups = []
    for s, label in enumerate(windows["setups"]):
        model, chosen = fitted.answer[s]
        measured = windows["k_measured"][s]
        lengths = model.acceptance_length_draws(s, k_max)
        by_k = []
        for k in measured:
            pmf = model.pmf_draws(s, k)
            survival = pmf[:, ::-1].cumsum(axis=1)[:, ::-1][:, 1:]
            conditional = survival / np.concatenate([np.ones((len(pmf), 1)),
                                                     survival[:, :-1]], axis=1)
            at_k = (windows["setup"] == s) & (windows["k"] == k)
            pooled = windows["counts"][at_k & windows["has_positions"], :k + 1].sum(axis=0)
            measured_rates = (pooled[::-1].cumsum()[::-1][1:] / pooled.sum()
                              if pooled.sum() > 0 else [])
            by_k.append({"k": k, "measured": [float(r) for r in measured_rates],
                         "acceptance_length_measured": [
                             1.0 + float(m) for m in windows["accepted_mean"][at_k]],
                         "rates": [{"position": i + 1,
                                    **_interval(survival[:, i], prob)}
                                   for i in range(k)],
                         "alpha_position": [{"position": i + 1,
                                             **_interval(conditional[:, i], prob)}
                                            for i in range(k)]})
        check = measured_check(model, s, prob, rng)
        inside = sum(c["inside"] for c in check)
        total = sum(c["k"] if c["positions"] else 1 for c in check)
        by_position = windows["has_positions"][windows["setup"] == s]
        if fitted.fallback.get(s):
            why = fitted.fallback[s]
        elif fitted.scores.get(s):
            why = "held-out k"
        elif structure == "auto" and not by_position.any():
            why = "the drafter's kind (totals alone: no per-position counts to choose by)"
        elif structure == "auto":
            why = "the drafter's kind (one k measured)"
        else:
            why = "--structure"
        has_run_term = chosen in STRUCTURES and not by_position.all()
        new_run = model.new_run_draws(s, k_max, seed) if has_run_term else None
        entry = {"setup": label, "labels": {c: _plain(v) for c, v in
                                            windows["labels"][s].items()},
                 "structure": chosen, "chosen_by": why, "k_measured": measured,
                 "windows": int((windows["setup"] == s).sum()),
                 "acceptance_length": [{"k": k, **_interval(lengths[:, k], prob),
                                        **_length_basis(k, measured, chosen),
                                        **({} if new_run is None else
                                           {"new_run": _interval(new_run[:, k], prob)})}
                                       for k in range(1, k_max + 1)],
                 "at_measured_k": by_k, "measured_check": check,
                 "reproduced": {"inside": inside, "positions": total,
                                "share": inside / total if total else float("nan"),
                                "token_process_p": fitted.fit_p.get(s)},
                 "held_out_k": fitted.scores.get(s)}
        if chosen in STRUCTURES:
            entry["parameters"] = _parameters(model, s, chosen, prob)
            if has_run_term:
                entry["parameters"]["run_scatter"] = _interval(
                    model._draws("run_scatter", s), prob)
        setups.append(entry)
    return {"prob": prob, "k_max": k_max, "setups": setups,
            "convergence": worst["status"], "convergence_text": worst["text"],
            "diagnostics": {"rhat_max": worst.get("rhat_max"),
                            "ess_bulk_min": worst.get("ess_bulk_min"),
                            "divergences": worst.get("divergences")}}


def _length_basis(k: int, measured: list[int], structure: str) -> dict:
    """Whether E(k) was measured and, where not, what it rests on. Not measured is
    ``extrapolated`` (the rule every answer marks with: a k outside the measured ones),
    whether k lies above, below or between the measured draft lengths. The token process
    carries acceptance from one k to another through where cycles start; per-position
    rates (``free``, ``position``) carry the measured positions unchanged, assuming
    acceptance does not depend on k, which counters at one k cannot check, so their
    narrow interval at an unmeasured k is not a measurement."""
    if k in measured:
        return {"measured": True, "extrapolated": False, "basis": "measured"}
    at = ", ".join(map(str, measured))
    if structure in STRUCTURES:
        basis = f"the token process ({structure}) fitted at k = {at}"
    else:
        basis = (f"per-position rates measured at k = {at}, assuming acceptance does not "
                 "depend on k (not checked: where cycles start depends on k)")
    return {"measured": False, "extrapolated": True, "basis": basis}


def _plain(value):
    from bayesspec.data import plain_value

    return plain_value(value)


def _parameters(model: TokenAcceptanceModel, setup: int, structure: str, prob: float) -> dict:
    """The chain's readable parameters: persistences p (of the guessable states) and q,
    the depth decay lambda, as used by the structure."""
    def sigmoid(v):
        return 1.0 / (1.0 + np.exp(-v))

    x = model._draws("logit_persistence", setup)
    switches = STRUCTURES[structure]
    delta = model._draws("persistence_spread", setup) * switches["spread"]
    out = {}
    if switches["memoryless"]:
        out["alpha"] = _interval(sigmoid(x), prob)
        return out
    q = sigmoid(model._draws("logit_stay_unguessable", setup))
    if switches["spread"]:
        out["stay_guessable_low"] = _interval(sigmoid(x - delta), prob)
        out["stay_guessable_high"] = _interval(sigmoid(x + delta), prob)
    else:
        out["stay_guessable"] = _interval(sigmoid(x), prob)
    out["stay_unguessable"] = _interval(q, prob)
    if switches["depth"]:
        out["depth_decay"] = _interval(model._draws("depth_decay", setup), prob)
        out["deep_decay"] = _interval(model._draws("deep_decay", setup), prob)
        out["trained_depth"] = _interval(model._draws("trained_depth", setup), prob)
    return out


def acceptance_length_draws(counters: pd.DataFrame, k_max: int, *, drafter: str | None = None,
                            settings=None) -> tuple[np.ndarray, str, dict, list[int]]:
    """Fit the acceptance of counters (:func:`fit_acceptance`, structure auto) and return
    the E(k) draws (S, k_max + 1) of the setup whose drafter is ``drafter`` (the only one
    when None), its label, the convergence verdict and the draft lengths its counters
    measured."""
    windows = counter_windows(counters)
    setups = windows["setups"]
    drafters = [str(lab.get("drafter") or "") for lab in windows["labels"]]
    if drafter is not None:
        chosen = [i for i, d in enumerate(drafters) if d.strip().lower() == drafter.strip().lower()]
    else:
        chosen = list(range(len(setups)))
    if len(chosen) != 1:
        raise BadInput(f"the counters hold setups {', '.join(setups)}; "
                       + ("none" if not chosen else "more than one")
                       + (f" with drafter '{drafter}'" if drafter else "")
                       + ": name the drafter", argument="drafter")
    fitted = fit_acceptance(counters, settings=settings)
    model = fitted.model(chosen[0])
    return (model.acceptance_length_draws(chosen[0], k_max), setups[chosen[0]],
            model.verdict(), list(windows["k_measured"][chosen[0]]))


# ----------------------------------------------------------------------------- joint use
# The speculative latency model's option ``acceptance_law="token"``: the token process of
# each setup is fitted from its SD rows' per-position counters inside the latency model,
# and E(k) of every SD group enters eq. (3) from the same draws.

def token_windows_of(groups: pd.DataFrame, counters: dict, counter_group: np.ndarray,
                     n_setups: int, source=None) -> dict:
    """The counter windows of a speculative model's SD groups, as
    :func:`counter_windows` reads them for ``acceptance``: every row with complete
    per-position counters is a window of its group's setup, and so is every row with
    totals alone (accepted tokens with num_drafts or draft_tokens) or a reported
    acceptance length. ``counters``: the model's ``_counter_totals``; every SD group
    needs at least one window."""
    from bayesspec.data.counters import reported_resolution

    is_sd = groups["is_sd"].to_numpy(bool)
    setup_of_group = groups["setup_index"].to_numpy(int)
    counted = counters["valid"] | counters["reported"]
    usable = counted & (counter_group >= 0)
    usable &= is_sd[np.maximum(counter_group, 0)]
    lacking = [g for g in np.flatnonzero(is_sd) if not (usable & (counter_group == g)).any()]
    if lacking:
        raise BadInput(f"acceptance_law=token needs acceptance counters (num_drafts with "
                       f"accepted_tokens_pos1..k or accepted_tokens, or acceptance_length) "
                       f"on the SD group '{groups['label'].iloc[lacking[0]]}'",
                       file=source, column="accepted_tokens")
    rows = np.flatnonzero(usable)
    k = counters["k"][rows].astype(int)
    max_k = int(k.max())
    by_position = counters["complete"][rows]
    drafts = np.where(counters["valid"][rows], counters["drafts"][rows], np.nan)
    positions = np.nan_to_num(counters["positions"][rows, :max_k])
    at_least = np.concatenate([np.nan_to_num(drafts)[:, None], positions,
                               np.zeros((len(rows), 1))], axis=1)
    at_least = np.where(np.arange(max_k + 2)[None, :] <= k[:, None], at_least, 0.0)
    inside = np.arange(max_k + 1)[None, :] <= k[:, None]
    counts = np.where(inside & by_position[:, None], at_least[:, :-1] - at_least[:, 1:], 0.0)
    from_counts = counters["valid"][rows]
    with np.errstate(divide="ignore", invalid="ignore"):
        accepted_mean = np.where(from_counts, counters["accepted"][rows] / drafts,
                                 counters["length"][rows] - 1.0)
        inv_drafts = np.where(from_counts, 1.0 / drafts, 0.0)
    resolution = np.array([0.0 if c else reported_resolution(float(v))
                           for c, v in zip(from_counts, counters["length"][rows])])
    setup = setup_of_group[counter_group[rows]]
    replicated = np.zeros(n_setups, dtype=bool)
    depth = np.ones(n_setups)
    for s in range(n_setups):
        ks = k[(setup == s) & by_position]
        replicated[s] = len(ks) > len(set(ks.tolist()))
        if (setup == s).any():
            depth[s] = k[setup == s].max()
    return {"setup": setup, "k": k, "counts": np.round(counts), "inside": inside,
            "max_k": max_k, "replicated": replicated, "rows": rows,
            "has_positions": by_position, "accepted_mean": accepted_mean,
            "inv_drafts": inv_drafts, "resolution": resolution, "measured_depth": depth}


def token_acceptance_lengths(windows: dict, structures: list[str], n_setups: int,
                             k_max: int, counts, priors: dict | None = None, totals=None):
    """Inside a PyMC model with a ``setup`` dim: the token process of every setup, the
    likelihood of its counter windows (:func:`window_log_likelihood` for per-position
    counts, :func:`totals_log_likelihood` for totals), and the Deterministic
    ``acceptance_length`` (setup, draft_length = 0..k_max): E(k) for the latency law.
    ``counts``: the model's data of the windows' counts of A = a; ``totals``: its data
    ``accepted_mean``, ``inv_drafts``, ``resolution`` (the windows' own when None).
    Returns that tensor."""
    import pymc as pm
    import pytensor.tensor as pt

    priors = {**TokenAcceptanceModel().priors, **(priors or {})}
    switches = {name: np.array([STRUCTURES[s][name] for s in structures])
                for name in ("memoryless", "spread", "depth")}
    model = pm.modelcontext(None)
    if "draft_length" not in model.coords:
        model.add_coord("draft_length", np.arange(k_max + 1))
    x = pm.Normal("acceptance_logit_persistence", *priors["logit_persistence"], dims="setup")
    q = pm.Normal("acceptance_logit_stay_unguessable", *priors["logit_stay_unguessable"],
                  dims="setup")
    spread = pm.HalfNormal("acceptance_persistence_spread", priors["persistence_spread"],
                           dims="setup")
    decay = pm.HalfNormal("acceptance_depth_decay", priors["depth_decay"], dims="setup")
    deep = pm.HalfCauchy("acceptance_deep_decay", priors["deep_decay"], dims="setup")
    trained = pm.TruncatedNormal("acceptance_trained_depth", 1.0, priors["trained_depth"],
                                 lower=1.0, dims="setup")
    depth = max(k_max, windows["max_k"])
    table = token_regimes_acceptance_expr(*chain_parameters(
        x, spread, q, decay, switches, depth, xp=pt, deep_decay=deep,
        measured_depth=windows["measured_depth"], trained_depth=trained), xp=pt)
    lengths = 1.0 + (table * np.arange(depth + 1, dtype=float)).sum(axis=-1)  # (S, depth)
    lengths = pt.concatenate([pt.ones((n_setups, 1)), lengths[:, :k_max]], axis=1)
    pm.Deterministic("acceptance_length", lengths, dims=("setup", "draft_length"))
    setup, k, max_k = windows["setup"], windows["k"], windows["max_k"]
    pick = (np.arange(1, depth + 1)[None, :] == k[:, None]).astype(float)
    pmf = (table[setup] * pick[:, :, None]).sum(axis=1)[:, :max_k + 1]
    plain = window_log_likelihood(counts, pmf, windows["inside"], xp=pt)
    replicated = windows["replicated"]
    if replicated.any():
        log_kappa = pm.Normal("acceptance_token_log_concentration",
                              *priors["log_concentration"], dims="setup")
        scattered = window_log_likelihood(counts, pmf, windows["inside"],
                                          pt.exp(log_kappa)[setup], xp=pt, gammaln=pt.gammaln)
        loglik = pt.where(replicated[setup], scattered, plain)
    else:
        loglik = plain
    by_totals = ~windows["has_positions"]
    if by_totals.any():
        scatter = pm.HalfNormal("acceptance_run_scatter", priors["run_scatter"], dims="setup")
        totals = totals or {name: windows[name] for name in
                            ("accepted_mean", "inv_drafts", "resolution")}
        loglik = loglik + by_totals * totals_log_likelihood(
            pmf, totals["accepted_mean"], totals["inv_drafts"], totals["resolution"],
            scatter[setup], xp=pt)
    pm.Potential("acceptance_token_log_likelihood", loglik.sum())
    return lengths


#: The token process's variables in a speculative fit (its decision quantities).
TOKEN_VARIABLES = ["acceptance_logit_persistence", "acceptance_logit_stay_unguessable",
                   "acceptance_persistence_spread", "acceptance_depth_decay",
                   "acceptance_deep_decay", "acceptance_trained_depth", "acceptance_run_scatter",
                   "acceptance_token_log_concentration", "acceptance_length"]
