"""Answers of the ``acceptance`` verb: the fit of every setup (the token process, its
structure chosen by held-out k or by the drafter's kind, free per-position rates where
it does not reproduce the measured counters), the checks against the measured counters
and the report per setup (:func:`acceptance_report`), and E(k) draws for the deciding
verbs (:func:`acceptance_length_draws`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayesspec.bayes.acceptance_model import (PositionAcceptanceModel,
                                              TokenAcceptanceModel)
from bayesspec.bayes.acceptance_windows import STRUCTURES, counter_windows
from bayesspec.errors import BadInput
from bayesspec.laws import accepted_moments_of_pmf_expr


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
