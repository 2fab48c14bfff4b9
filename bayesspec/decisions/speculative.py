"""Speculative decoding decisions of one setup: speedup, crossover RPS*, best draft length.

Every function takes a :class:`bayesspec.prediction.Law` (``fit.law(selection)``) and
works on all posterior draws at once; its latencies follow the law the model fitted
(eq. 1, its slot queue when the engine's concurrency cap is known, or eq. 4 for an MoE
verifier). What was measured is per configuration (``law.measured(alpha, k)``): rates
above the highest fitted rate of the dense baseline and of the SD configuration
compared, and configurations outside the measured alphas and draft lengths, are
answered and marked ``extrapolated`` by :meth:`bayesspec.prediction.Law.extrapolated`, the
one rule every output (tables, JSON, figures, the report) marks with; the document says
why (``measured``). ``rps_fitted_max`` is that highest fitted rate; ``rps_measured_max``
holds the same number under its older name.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from bayesspec.errors import BadInput
from bayesspec.laws import expected_accepted
from bayesspec.uncertainty import DEFAULT_PROB, uncertain

# A draw in which only the dense baseline is saturated has an infinite speedup; in
# expectations it counts as this large finite value so one such draw cannot swamp a mean.
SPEEDUP_CAP = 1e3


def measured_section(law, alpha, k) -> dict:
    """The ``measured`` entry of a document: what the data measured for (alpha, k)
    (:meth:`bayesspec.prediction.Law.measured`), JSON-ready."""
    measured = law.measured(alpha, k)
    return {key: (None if isinstance(value, float) and not np.isfinite(value) else value)
            for key, value in measured.items()}


def speedup_curve(law, alpha: float, k: int, rps, *, prob: float = DEFAULT_PROB) -> dict:
    """CONTRACT ``speedup``: speedup vs RPS with intervals, p_slower, C1R and C2R."""
    rps = np.asarray(rps, dtype=float)
    draws = law.speedup_draws(alpha, k, rps)
    sd = law.sd(alpha, k)
    c1_sd, c2_sd = np.ravel(sd.zero_load), np.ravel(sd.saturation_cost)
    ceiling = np.ravel(sd.ceiling)
    extrapolated = law.extrapolated(rps, alpha, k)
    points = [{"rps": float(r), "speedup": uncertain(draws[:, j], prob),
               "p_slower": float(np.mean(draws[:, j] < 1.0)),
               "p_sd_saturated": float(np.mean(r >= ceiling)),
               "extrapolated": bool(extrapolated[j])}
              for j, r in enumerate(rps)]
    measured = measured_section(law, alpha, k)
    return {"setup": law.label, "alpha": float(alpha), "k": int(k), "points": points,
            "C1R": uncertain(c1_sd / law.dense.zero_load, prob),
            "C2R": uncertain(c2_sd / law.dense.saturation_cost, prob),
            **_fitted_top(measured["rps_fitted_max"]), "measured": measured}


def _fitted_top(top) -> dict:
    """The highest fitted rate of an answer, under its name and its older one."""
    return {"rps_fitted_max": top, "rps_measured_max": top}


def crossover(law, alpha: float, k: int, *, prob: float = DEFAULT_PROB) -> dict:
    """CONTRACT ``crossover``: the RPS* distribution over the draws that have one.

    For an MoE verifier RPS* is the lowest rate where the two eq. (4) latencies meet
    below both saturation rates (found numerically, all draws at once)."""
    sd = law.sd(alpha, int(k))
    c1_sd, c2_sd = np.ravel(sd.zero_load), np.ravel(sd.saturation_cost)
    star = law.crossover_draws(alpha, k)
    has = np.isfinite(star)
    # Which way it crosses: SD faster below RPS* (the common case) or only above it.
    faster_below = c1_sd < law.dense.zero_load
    summary = uncertain(star[has], prob) if has.any() else None
    measured = measured_section(law, alpha, k)
    top = measured["rps_fitted_max"]
    top = float("nan") if top is None else top
    # The crossover is read off the fitted law beyond the fitted rates of the two
    # curves, or for a configuration the data did not measure: the rule of every output.
    extrapolated = bool(summary is not None
                        and law.extrapolated(summary["median"], alpha, k))
    return {
        "setup": law.label, "alpha": float(alpha), "k": int(k),
        "rps_star": summary,
        "p_crossover": float(has.mean()),
        "p_sd_faster_below": float(np.mean(faster_below[has])) if has.any() else None,
        # The ceilings: eq. (1)'s pole 1/C2, or the cap's throughput when the engine's
        # concurrency cap is known (it binds first).
        "saturation_rps": uncertain(np.ravel(sd.ceiling), prob),
        "dense_saturation_rps": uncertain(law.dense.ceiling, prob),
        "ceiling_binding": {"sd": sd.ceiling_binding, "dense": law.dense.ceiling_binding},
        "C1R": uncertain(c1_sd / law.dense.zero_load, prob),
        "C2R": uncertain(c2_sd / law.dense.saturation_cost, prob),
        **_fitted_top(measured["rps_fitted_max"]), "measured": measured,
        "extrapolated": extrapolated,
        "p_beyond_measured": (float(np.mean(star[has] > top)) if has.any()
                              and np.isfinite(top) else None),
    }


def _lower_quantile(values: np.ndarray, q: float) -> np.ndarray:
    """Quantile along axis 0 by partial sort (several times faster than np.quantile)."""
    index = int(np.floor(q * (values.shape[0] - 1)))
    return np.partition(values, index, axis=0)[index]


def kstar_table(law, alphas, rps, *, ks=range(0, 11), objective: str = "mean",
                prob: float = DEFAULT_PROB) -> dict:
    """CONTRACT ``kstar``: the best k per (alpha, RPS), its probability of being best.

    Candidates include k = 0 (do not speculate; speedup 1 by definition). ``objective``
    ``mean`` maximises the posterior expected speedup, ``q10`` its 10% quantile (the
    risk-averse choice). ``loss_vs_batch1`` is the expected speedup given up (in speedup
    points, a difference of expected speedups) by running the k that is best at zero
    load instead. ``at_max_k``: the best k is the largest searched, so the optimum may
    lie beyond the range. A fit of the configurations alone (no six coefficients)
    answers when every k searched is one of its fitted configurations.

    A row is ``extrapolated`` (:meth:`~bayesspec.prediction.Law.extrapolated` of the
    chosen k at that alpha): above the highest fitted rate of the chosen configuration and
    the dense baseline, or a k or alpha the data did not measure; k* = 0 at an alpha
    outside the measured ones too, since "do not speculate" there rests on SD's law at
    that alpha.
    """
    if objective not in {"mean", "q10"}:
        raise BadInput(f"objective must be mean or q10, got {objective!r}",
                       argument="objective")
    alphas = np.asarray(alphas, dtype=float)
    rps = np.asarray(rps, dtype=float)
    ks = np.asarray(list(ks), dtype=int)
    sd_ks = ks[ks > 0]
    if not law.answers_any_configuration and not _fitted_configurations(law, alphas, sd_ks):
        raise BadInput("k* needs the speculative model (six cycle coefficients); "
                       "fit with --model speculative")
    dense_zero_load = law.dense.zero_load
    table = []
    for alpha in alphas:
        draws = _speedup_candidates(law, alpha, sd_ks, rps)             # (S, K, R)
        if (ks == 0).any():
            draws = np.concatenate([np.ones_like(draws[:, :1]), draws], axis=1)
        capped = np.minimum(draws, SPEEDUP_CAP)
        expected = capped.mean(axis=0)                                # (K, R)
        score = expected if objective == "mean" else _lower_quantile(capped, 0.10)
        best = np.argmax(score, axis=0)                               # (R,)
        per_draw_best = np.argmax(capped, axis=1)                     # (S, R)
        # Zero-load speedup is C1_dense/C1_sd: the k a batch-1 benchmark would pick.
        zero_load = dense_zero_load[:, None] / _c1_candidates(law, alpha, ks)
        batch1 = int(np.argmax(np.minimum(zero_load, SPEEDUP_CAP).mean(axis=0)))
        for j, rate in enumerate(rps):
            b = best[j]
            chosen = int(ks[b])
            measured = law.measured(alpha, chosen)
            table.append({
                "alpha": float(alpha), "rps": float(rate), "k": chosen,
                "p_best": float(np.mean(per_draw_best[:, j] == b)),
                "speedup": uncertain(draws[:, b, j], prob),
                "k_batch1": int(ks[batch1]),
                "loss_vs_batch1": float(expected[b, j] - expected[batch1, j]),
                "at_max_k": bool(ks[b] == ks.max() and ks[b] > 0),
                "extrapolated": bool(law.extrapolated(rate, alpha, chosen)),
                "rps_fitted_max": (measured["rps_fitted_max"]
                                   if np.isfinite(measured["rps_fitted_max"]) else None),
                "design_notes": measured["design_notes"],
            })
    dense_top = law.measured(None, 0)["rps_fitted_max"]
    return {"setup": law.label, "objective": objective, "ks": ks.tolist(), "table": table,
            **_fitted_top(dense_top if np.isfinite(dense_top) else None),
            "measured": measured_section(law, alphas[0] if len(alphas) else None,
                                         int(sd_ks.max()) if len(sd_ks) else 0)}


def _fitted_configurations(law, alphas, sd_ks) -> bool:
    """Whether a law of fitted configurations has every (alpha, k) asked."""
    fitted = getattr(law, "configurations", {})
    return bool(fitted) and all(
        (None, int(k)) in fitted or (not np.isnan(a) and (round(float(a), 9), int(k)) in fitted)
        for a in alphas for k in sd_ks)


def _speedup_candidates(law, alpha: float, sd_ks: np.ndarray, rps: np.ndarray) -> np.ndarray:
    """Speedup draws of every SD candidate, (S, K, R): at once from six coefficients, one
    fitted configuration at a time otherwise."""
    if not len(sd_ks):
        return np.ones((len(law.dense.zero_load), 0, len(rps)))
    if law.answers_any_configuration:
        return law.speedup_draws(alpha, sd_ks, rps)
    return np.stack([law.speedup_draws(alpha, int(k), rps) for k in sd_ks], axis=1)


def _c1_candidates(law, alpha: float, ks: np.ndarray) -> np.ndarray:
    """Zero-load latency of every candidate k (k = 0 is the dense baseline), (S, K)."""
    sd = ks[ks > 0]
    if law.answers_any_configuration and len(sd):
        c1_sd, _ = law.costs(alpha, sd)
    else:
        c1_sd = np.stack([np.ravel(law.costs(alpha, int(k))[0]) for k in sd], axis=1) \
            if len(sd) else np.empty((len(law.dense.zero_load), 0))
    columns = []
    j = 0
    for k in ks:
        if k == 0:
            columns.append(law.dense.zero_load)
        else:
            columns.append(c1_sd[:, j])
            j += 1
    return np.stack(columns, axis=1)


# ------------------------------------------------------------------ the measured configuration
#: E(k) kept per draw for a latent alpha's law, k = 0..this (kstar's --kmax is at most 64).
MEASURED_K_MAX = 64


@dataclass
class MeasuredAcceptance:
    """One acceptance the data measured for a setup, and the law that answers SD at it.

    ``alpha``: what the decisions are asked with (nan: the law's own E(k) per draw, for
    acceptance measured by counters); ``ks``: the draft lengths measured at it;
    ``name``: how a person reads it ("alpha 0.8", "acceptance from the counters", ...)."""

    name: str
    law: object
    alpha: float
    ks: list[int]
    source: str          # "stated" (alpha column), "counters", or "what-if" (--alpha)


def _equivalent_alpha(lengths: np.ndarray, k: int, *, steps: int = 48) -> np.ndarray:
    """The i.i.d. alpha whose E(alpha, k) equals each draw's E(k) (bisection; E grows
    with alpha)."""
    lo, hi = np.zeros(lengths.shape), np.ones(lengths.shape)
    for _ in range(steps):
        middle = 0.5 * (lo + hi)
        below = expected_accepted(middle, k) < lengths
        lo, hi = np.where(below, middle, lo), np.where(below, hi, middle)
    return 0.5 * (lo + hi)


def _setup_number(fit, law) -> int | None:
    setups = fit.setups
    if setups.empty or "setup" not in setups:
        return None
    label = law.label.split(" (acceptance by position)")[0]
    matches = np.flatnonzero(setups["setup"].astype(str).to_numpy() == label)
    return int(matches[0]) if len(matches) else None


def _latent_groups(fit, law) -> list[tuple[int, int, np.ndarray]]:
    """(group, k, alpha draws) of every SD group of the law's setup whose alpha the fit
    learned from its counters."""
    groups = fit.groups
    s = _setup_number(fit, law)
    if s is None or "alpha_latent" not in groups or "alpha_latent" not in fit.posterior:
        return []
    latent = groups["alpha_latent"].to_numpy(bool)
    number = np.cumsum(latent) - 1
    members = np.flatnonzero(latent & (groups["setup_index"].to_numpy(int) == s))
    draws = fit.draws("alpha_latent")
    return [(int(g), int(groups["k"].iloc[g]), draws[:, number[g]]) for g in members]


def mark_measured_acceptance(fit, law, *, prob: float = DEFAULT_PROB):
    """Give a six-coefficient law the alpha range its counters measured (``alpha_span``),
    where the data set no alpha: the interval at ``prob`` of the learned alphas, or of
    the i.i.d. alpha equivalent to the token process's E(k) at the measured k. An alpha
    asked outside it is then marked as the law's extrapolation, like a rate past the
    fitted ones. Returns the law."""
    if not law.answers_any_configuration or law.measured_alphas:
        return law
    tail = (1.0 - prob) / 2.0
    if getattr(law, "joint_acceptance", False) and law.acceptance_lengths is not None:
        spans = [np.quantile(_equivalent_alpha(law.acceptance_lengths[:, k], k),
                             [tail, 1.0 - tail])
                 for k in law.measured_ks if 0 < k < law.acceptance_lengths.shape[1]]
    else:
        spans = [np.quantile(draws, [tail, 1.0 - tail])
                 for _, _, draws in _latent_groups(fit, law)]
    if spans:
        law.alpha_span = (float(min(s[0] for s in spans)), float(max(s[1] for s in spans)))
    return law


def eq3_law(law):
    """The same costs answering eq. (3)'s i.i.d. alpha: for a what-if ``--alpha`` on a
    law whose acceptance is measured E(k) per draw."""
    if getattr(law, "acceptance_lengths", None) is None:
        return law
    iid = copy.copy(law)
    iid.acceptance_lengths = None
    iid.joint_acceptance = False
    iid._last_speedups = None
    return iid


def _law_at_alpha_draws(law, alphas: np.ndarray, label: str):
    """The law answering SD at an alpha known only as posterior draws (paired with the
    costs draw by draw): E(alpha_s, k) for k = 0..MEASURED_K_MAX."""
    answered = copy.copy(law)
    ks = np.arange(MEASURED_K_MAX + 1, dtype=float)
    answered.acceptance_lengths = expected_accepted(np.asarray(alphas)[:, None], ks[None, :])
    answered._last_speedups = None
    answered.label = label
    return answered


def measured_acceptances(fit, law) -> list[MeasuredAcceptance]:
    """Every acceptance the data measured for the law's setup, in the order a person
    reads them: stated alphas (the alpha column) ascending; acceptance from the counters
    (the token process's E(k), one for the setup; or each group's learned alpha).
    A law of fitted configurations answers each of them as fitted."""
    if not law.answers_any_configuration:
        fitted = getattr(law, "configurations", {})
        return [MeasuredAcceptance(f"k {k}" if alpha is None else f"alpha {alpha:g}", law,
                                   float("nan") if alpha is None else float(alpha), [int(k)],
                                   "counters" if alpha is None else "stated")
                for alpha, k in sorted(fitted, key=lambda c: (
                    -1.0 if c[0] is None else c[0], c[1]))]
    mark_measured_acceptance(fit, law)
    answers = []
    for alpha in law.measured_alphas:
        ks = sorted({c.k for c in law.measured_configurations
                     if c.alpha is not None and abs(c.alpha - alpha) < 1e-9})
        answers.append(MeasuredAcceptance(f"alpha {alpha:g}", law, float(alpha), ks, "stated"))
    counted = sorted({c.k for c in law.measured_configurations if c.alpha is None})
    if not counted:
        return answers
    if getattr(law, "joint_acceptance", False):
        answers.append(MeasuredAcceptance("the counters' token process",
                                          law, float("nan"), counted, "counters"))
        return answers
    for group, k, draws in _latent_groups(fit, law):
        name = f"alpha of the k {k} group from its counters"
        answers.append(MeasuredAcceptance(
            name, _law_at_alpha_draws(law, draws, f"{law.label} ({name})"),
            float("nan"), [k], "counters"))
    return answers
