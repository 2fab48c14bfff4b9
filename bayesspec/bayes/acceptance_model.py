"""The token process of acceptance as a PyMC model: the likelihood of counter windows
(per-position counts, totals), the chain's parameters and their priors, the fitted model
that answers P(A = a | k) and E(k) (:class:`TokenAcceptanceModel`), the per-position
models kept for comparison and as a fallback (:class:`PositionAcceptanceModel`), and the
same process inside the speculative latency fit (:func:`token_acceptance_lengths`).
The windows it reads are :mod:`bayesspec.bayes.acceptance_windows`; the answers of the
``acceptance`` verb, :mod:`bayesspec.bayes.acceptance_answers`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayesspec.bayes.acceptance_windows import (STRUCTURE_PARAMETERS, STRUCTURES,
                                                counter_windows, default_structure,
                                                measured_depths, position_counted,
                                                replicated_setups)
from bayesspec.errors import BadInput
from bayesspec.laws import (acceptance_length_of_pmf_expr, accepted_moments_of_pmf_expr,
                            depth_reliability_expr, expected_accepted_positions_expr,
                            token_regimes_acceptance_expr)


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
                     measured_depth=None, trained_depth=None, counted=None,
                     ends_at_measured=None):
    """The token chain of a structure (:func:`bayesspec.laws.token_regimes_acceptance_expr`'s
    arguments): the persistences of two guessable regimes, entered equally often, the
    unguessable state's persistence and the reliability reached by depth i = 0..max_depth
    (:func:`bayesspec.laws.depth_reliability_expr`: the decay measured up to
    ``measured_depth``, ``deep_decay`` past ``trained_depth``), from the parameters and
    a structure's switches (arrays broadcasting with the parameters).
    ``ends_at_measured``: a uniform draw; below :data:`ENDS_AT_MEASURED_PROBABILITY`, a
    head whose trained depth is not inside the measured depths ends at the deepest one
    and drafts nothing acceptable past it (the counts cannot tell the two apart, so this
    is the prior's alone)."""
    def sigmoid(v):
        return 1.0 / (1.0 + xp.exp(-v))

    delta = spread * switches["spread"]
    memoryless = switches["memoryless"]
    stay_bad = (memoryless * (1.0 - sigmoid(logit_persistence))
                + (1.0 - memoryless) * sigmoid(logit_stay_unguessable))
    depth = switches["depth"]
    deep = 0.0 * decay if deep_decay is None else deep_decay
    measured = max_depth if measured_depth is None else measured_depth
    if trained_depth is not None and counted is not None:
        # per-position counts show the shape of every measured position themselves: a
        # trained depth inside them is what the decay already fits (and made such fits
        # diverge); only the depth past D, which no count reaches, is the prior's
        trained_depth = xp.where(np.asarray(counted, dtype=bool),
                                 xp.maximum(trained_depth, np.asarray(measured, dtype=float)),
                                 trained_depth)
    if trained_depth is not None and ends_at_measured is not None:
        at = np.asarray(measured, dtype=float)
        ends = (trained_depth >= at) & (ends_at_measured < ENDS_AT_MEASURED_PROBABILITY)
        trained_depth = xp.where(ends, at, trained_depth)
        deep = xp.where(ends, CLIFF_DECAY, deep)
    reached = depth_reliability_expr(decay * depth, deep * depth, measured, max_depth, xp=xp,
                                     trained_depth=trained_depth)
    return (sigmoid(logit_persistence - delta), sigmoid(logit_persistence + delta),
            0.5 + 0.0 * stay_bad, stay_bad, reached)


#: Prior scale (HalfCauchy) of the loss of a trained drafter's reliability per depth
#: past its trained depth (:func:`bayesspec.laws.depth_reliability_expr`); past the
#: deepest measured position nothing but this prior speaks of it.
#: Heads differ most there: EAGLE-3 keeps its conditional rates to depth 7, an MTP head
#: applied recursively loses them at once. A half-Cauchy holds both: its 5% quantile
#: (0.024) keeps the last measured level, its 95% (3.8) is a cliff. Chosen on one K = 10
#: run of Llama-3.1-8B + EAGLE-3 on MT-Bench and one on SpecBench (E(1..4) fitted,
#: E(5..10) predicted) and on simulated depth-limited drafters of seeds 1000-1019
#: (benchmarks/acceptance_totals.py, "choose"): a half-normal of the same scale covered
#: the K = 10 runs but only 0.60 of the simulated E(5..8), missing every cliff.
#: With the trained depth free past D, a scale of 1.0 gave 0.863 and 18 of 20 of the
#: choosing traces below (0.3: 0.90 and 19 of 20).
DEEP_DECAY_SCALE = 0.3
#: Prior scale of a trained drafter's trained depth T (Normal at 1 truncated to T >= 1):
#: the depth past which it loses ``deep_decay`` per depth. Heads are trained from one
#: token ahead (an MTP head) to about seven (EAGLE-3's training-time test) and public
#: EAGLE-3 heads keep their level to depth 10: a T inside the measured depths is a cliff
#: the counts show, one past them the prior's, which keeps the measured level out to T.
#: Chosen on simulated depth-limited drafters of seeds 1000-1019 (totals at k = 1..4,
#: coverage of E(5..8) 0.85 / 0.90 / 0.85 at scales 4 / 6 / 8) and on the k = 3 window of
#: the SpecDecode-Bench EAGLE-3 traces of gsm8k and ShareGPT (E(1..10): 18 / 19 of 20 at
#: scales 4 / 6; 16 of 20 when T stopped at D) (benchmarks/acceptance_totals.py,
#: benchmarks/acceptance_traces.py, docs/acceptance.md).
TRAINED_DEPTH_SCALE = 6.0
#: Prior probability that a head whose trained depth the counts do not place inside the
#: measured depths was trained to exactly the deepest of them, and drafts nothing
#: acceptable past it: an MTP head measured at k = 1, its one trained position, then
#: applied recursively. The counts of k <= D cannot tell this from a head trained
#: deeper, so the posterior keeps the prior's share. Chosen on the sets that chose the
#: trained depth's scale (docs/acceptance.md).
ENDS_AT_MEASURED_PROBABILITY = 0.1
#: The loss per depth past such a head's end: a plateau (exp(-50) of the guesses hold).
CLIFF_DECAY = 50.0
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
            x, q, spread, decay, deep, trained, ends = token_process_priors(priors)
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
                trained_depth=trained[setup], counted=position_counted(windows)[setup],
                ends_at_measured=ends[setup]),
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
            trained_depth=self._draws("trained_depth", setup),
            counted=bool(position_counted(self.windows)[setup]),
            ends_at_measured=self._draws("ends_at_measured", setup)))

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


# ----------------------------------------------------------------------------- joint use
# The speculative latency model's option ``acceptance_law="token"``: the token process of
# each setup is fitted from its SD rows' per-position counters inside the latency model,
# and E(k) of every SD group enters eq. (3) from the same draws.

def token_process_priors(priors: dict, prefix: str = ""):
    """The token process's parameters per setup, in the current model (the acceptance
    verb's names, or the speculative fit's with ``prefix`` "acceptance_"): logit
    persistence, logit stay-unguessable, persistence spread, depth decay, deep decay,
    trained depth and the uniform draw of whether the head ends at the deepest measured
    depth."""
    import pymc as pm

    return (pm.Normal(f"{prefix}logit_persistence", *priors["logit_persistence"],
                      dims="setup"),
            pm.Normal(f"{prefix}logit_stay_unguessable", *priors["logit_stay_unguessable"],
                      dims="setup"),
            pm.HalfNormal(f"{prefix}persistence_spread", priors["persistence_spread"],
                          dims="setup"),
            pm.HalfNormal(f"{prefix}depth_decay", priors["depth_decay"], dims="setup"),
            pm.HalfCauchy(f"{prefix}deep_decay", priors["deep_decay"], dims="setup"),
            pm.TruncatedNormal(f"{prefix}trained_depth", 1.0, priors["trained_depth"],
                               lower=1.0, dims="setup"),
            pm.Uniform(f"{prefix}ends_at_measured", 0.0, 1.0, dims="setup"))


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
    x, q, spread, decay, deep, trained, ends = token_process_priors(priors,
                                                                    prefix="acceptance_")
    depth = max(k_max, windows["max_k"])
    table = token_regimes_acceptance_expr(*chain_parameters(
        x, spread, q, decay, switches, depth, xp=pt, deep_decay=deep,
        measured_depth=windows["measured_depth"], trained_depth=trained,
        counted=position_counted(windows, n_setups), ends_at_measured=ends), xp=pt)
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
                   "acceptance_deep_decay", "acceptance_trained_depth",
                   "acceptance_ends_at_measured", "acceptance_run_scatter",
                   "acceptance_token_log_concentration", "acceptance_length"]
