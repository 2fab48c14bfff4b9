"""The questions a fit can answer (``bayesspec plan --question``): each question built
from a fit with its defaults, refused with what to fit when the fit cannot answer it,
the per-request spread a new point would be measured with, and the points the fit set
aside (a candidate equivalent to one of them is not proposed: it would be set aside
again)."""

from __future__ import annotations

import numpy as np

from bayesspec.errors import BadInput
from bayesspec.loadtest.questions import (Question, Ruling, SetAside, ceiling_question,
                                          compare_question, crossover_question,
                                          kstar_question, slo_question)

QUESTIONS = ("crossover", "kstar", "slo", "compare", "ceiling")
#: What counts as right, by default: a rate within +-5%; a k within 1% of the best
#: speedup; a configuration within 5% of the best goodput.
DEFAULT_WITHIN = {"crossover": 0.05, "kstar": 0.01, "slo": 0.05, "ceiling": 0.05,
                  "compare": 0.02}

#: The per-request spread of latency (std/mean) assumed when the data do not carry
#: ``latency_std_s``.
DEFAULT_SPREAD = 0.3
#: Words in an exclusion reason saying the rate itself was past what the configuration
#: sustains (the data layer's saturation reasons): then every higher rate is past it too.
from bayesspec.prediction.ceilings import PAST_CEILING_WORDS  # noqa: E402  (one definition)


def measurement_spread(data, columns: tuple[str, str] = ("latency_std_s", "latency_mean_s")
                       ) -> tuple[float, bool]:
    """(the median per-request spread std/mean over the rows that have it, whether it was
    measured): the standard error of a new point's log mean is this over sqrt(N)."""
    std, mean = columns
    if data is None or std not in data.columns or mean not in data.columns:
        return DEFAULT_SPREAD, False
    ratio = (data[std].astype(float) / data[mean].astype(float)).to_numpy()
    ratio = ratio[np.isfinite(ratio) & (ratio > 0)]
    if ratio.size == 0:
        return DEFAULT_SPREAD, False
    return float(np.median(ratio)), True


def set_aside_points(data, version: str | None = None) -> list[SetAside]:
    """The open-loop points a fit's data set aside (``excluded`` with its
    ``exclusion_reason``). Synchronous and throughput runs are not rates a plan
    proposes, so they are left out."""
    if data is None or "excluded" not in data.columns:
        return []
    rows = data[data["excluded"].astype(bool)]
    if "strategy" in rows.columns:
        strategy = rows["strategy"].astype(str).str.lower()
        rows = rows[~strategy.isin(["synchronous", "throughput", "concurrent"])]
    out = []
    for _, row in rows.iterrows():
        target = float(row["rps_target"]) if "rps_target" in row.index else float("nan")
        rate = target if np.isfinite(target) and target > 0 else float(row["rps"])
        if not (np.isfinite(rate) and rate > 0):
            continue
        requests = float(row["n_requests"]) if "n_requests" in row.index \
            and np.isfinite(float(row["n_requests"])) else float("inf")
        reason = str(row.get("exclusion_reason", ""))
        k = int(row["k"]) if "k" in row.index else 0
        alpha = float(row["alpha"]) if "alpha" in row.index else float("nan")
        out.append(SetAside(k, None if not np.isfinite(alpha) or k == 0 else alpha, rate,
                            requests, any(w in reason.lower() for w in PAST_CEILING_WORDS),
                            reason, version))
    return out


def _has_speculative_groups(fit) -> bool:
    return bool((fit.groups["k"].astype(int) > 0).any()) if "k" in fit.groups else False


def _fitted_configurations(fit, law) -> list[tuple]:
    """(alpha, k) of the setup's fitted groups, dense first."""
    keys = sorted(getattr(law, "configurations", {}),
                  key=lambda key: (key[1], -1.0 if key[0] is None else key[0]))
    if not keys and law.answers_any_configuration:
        groups = fit.groups
        keys = sorted({(None if np.isnan(a) else round(float(a), 9), int(k))
                       for a, k in zip(groups["alpha"].astype(float), groups["k"].astype(int))
                       if k > 0}, key=lambda key: (key[1], -1.0 if key[0] is None else key[0]))
    return ([(None, 0)] if law.has_dense else []) + list(keys)


def question_from_fit(fit, question: str, **options) -> Question:
    """The :class:`Question` ``question`` asks of a fit (``other``: the second fit of
    ``compare``), knowing which of the fit's points were set aside. A question the fit
    cannot answer is refused naming what to fit."""
    built = _question_from_fit(fit, question, **options)
    fits = [fit]
    if question == "compare":
        fits.append(options.get("other"))
        built.set_aside = (set_aside_points(fit.data, "A")
                           + set_aside_points(options.get("other").data, "B"))
    else:
        built.set_aside = set_aside_points(fit.data)
        if question != "ceiling":
            built.with_workload(_setup_workload(fit, options.get("selection") or {}))
    built.unconverged = [f.diagnostics.get("text", "the posterior did not converge")
                         for f in fits if f.diagnostics.get("status") == "not converged"]
    return built


#: Columns that say what a load test of a group asks for (its commands and its rows).
WORKLOAD_COLUMNS = ("verifier", "drafter", "prefill_tokens", "decode_tokens")


def _workload_of(row) -> dict:
    """What a load test of one group asks for: the ``WORKLOAD_COLUMNS`` it has."""
    out = {}
    for column in WORKLOAD_COLUMNS:
        value = row.get(column) if hasattr(row, "get") else None
        if value is None or (isinstance(value, float) and np.isnan(value)):
            continue
        out[column] = int(value) if column.endswith("_tokens") else str(value)
    return out


def _setup_workload(fit, selection: dict) -> dict:
    """What the groups of the setup ``selection`` names share (verifier, lengths): the
    workload of every configuration of a question about that setup. A value the groups do
    not share is left out."""
    from bayesspec.inference.fitfile import SELECTORS

    groups = fit.groups
    mask = np.ones(len(groups), dtype=bool)
    for option, value in selection.items():
        column = SELECTORS.get(option)
        if value is None or option in ("k", "alpha", "drafter") or column not in groups:
            continue
        values = groups[column]
        try:
            mask &= np.isclose(values.astype(float).to_numpy(), float(value))
        except (TypeError, ValueError):
            mask &= values.astype(str).str.strip().str.lower().eq(
                str(value).strip().lower()).to_numpy()
    chosen = groups[mask]
    out = {}
    for column in ("verifier", "prefill_tokens", "decode_tokens"):
        if column in chosen and chosen[column].nunique() == 1:
            out.update(_workload_of({column: chosen[column].iloc[0]}))
    drafters = (chosen.loc[chosen["k"].astype(int) > 0, "drafter"].astype(str).unique()
                if {"k", "drafter"} <= set(chosen.columns) else [])
    if selection.get("drafter") is not None:
        out["drafter"] = str(selection["drafter"])
    elif len(drafters) == 1 and drafters[0].strip():
        out["drafter"] = drafters[0]
    return out


def _question_from_fit(fit, question: str, *, selection: dict | None = None,
                       alpha: float | None = None, k: int | None = None, rps=None,
                       ks=None, kmax: int = 8, targets: dict | None = None, other=None,
                       within: float | None = None, rope: float = 0.02,
                       max_draws: int = 2000, seed: int = 0) -> Question:
    from bayesspec.data import included

    if question not in QUESTIONS:
        raise BadInput(f"unknown question {question!r}; one of {', '.join(QUESTIONS)}",
                       argument="question")
    selection = dict(selection or {})
    within = DEFAULT_WITHIN[question] if within is None else float(within)
    if not 0 < within < 1:
        raise BadInput(f"must be within (0, 1), got {within}", argument="within")
    spread, _ = measurement_spread(included(fit.data))
    options = {"spread": spread, "max_draws": max_draws, "seed": seed}
    if question == "crossover":
        if alpha is None or k is None or int(k) < 1:
            raise BadInput("crossover needs --alpha A and --k K (K >= 1)", argument="k")
        if not _has_speculative_groups(fit):
            raise BadInput(f"this fit has only dense (k = 0) groups: RPS* needs speculative "
                           f"rows too; fit a sweep at k = {int(k)}, alpha {alpha:g} with the "
                           "dense one (`bayesspec simulate --k K --alpha A` or your load test "
                           "of that configuration)", argument="fit")
        law = fit.law(selection, admit_unmeasured=False)
        return crossover_question(law, float(alpha), int(k), within=within, **options)
    if question == "kstar":
        if rps is None:
            raise BadInput("k* needs the rates to choose at (--rps R1,R2)", argument="rps")
        # the fitted law: a refit's likelihood reads a new point by it, and the
        # pre-posterior must weigh the draws as a refit would (the ceiling question reads
        # the admitted ceilings, which only a point past the top one settles)
        law = fit.law(selection, admit_unmeasured=False)
        if ks is None:
            if law.answers_any_configuration:
                if alpha is None:
                    raise BadInput("k* from six cycle coefficients needs --alpha",
                                   argument="alpha")
                ks = range(0, int(kmax) + 1)
            else:
                fitted = [kk for a, kk in _fitted_configurations(fit, law)
                          if kk == 0 or alpha is None or a is None or abs(a - alpha) < 1e-9]
                ks = fitted
        if not law.has_dense and 0 in set(ks):
            law.dense  # names how to add the baseline
        if len(set(ks)) < 2:
            raise BadInput("this fit has fewer than two configurations to choose among at "
                           "that alpha; fit sweeps of at least two draft lengths (k = 0 is "
                           "dense)", argument="ks")
        return kstar_question(law, alpha, rps, ks, within=within, **options)
    if question == "slo":
        known = fit.model().metrics(fit)
        if not known:
            raise BadInput(f"this {fit.model_name} fit models mean latency only: an SLO "
                           "question needs a fit of `--model tails` on data with percentile "
                           "columns (latency_p99_s, ttft_p99_s, itl_p99_s, ...)",
                           argument="fit")
        if not targets:
            raise BadInput("give at least one SLO target, e.g. --ttft-p99 0.5",
                           argument="targets")
        missing = [m for m in targets if m not in known]
        if missing:
            raise BadInput(f"this fit has no law for {', '.join(missing)}; it answers "
                           f"{', '.join(known)}", argument="targets")
        mean_law = fit.law(selection, admit_unmeasured=False)
        laws = {m: fit.law(selection, metric=m, admit_unmeasured=False) for m in targets}
        return slo_question(mean_law, laws, targets, _fitted_configurations(fit, mean_law),
                            within=within, **options)
    if question == "compare":
        if other is None:
            raise BadInput("compare needs two fits: bayesspec plan A.nc B.nc --question "
                           "compare", argument="fits")
        return compare_question(_group_curves(fit), _group_curves(other), rope=rope,
                                rulings=compare_rulings(fit, other, rope),
                                workloads=_group_workloads(fit), **options)
    curves = [(kk, a, label, curve) for label, (kk, a, curve) in _group_curves(fit).items()
              if k is None or kk == int(k)]
    if not curves:
        raise BadInput(f"the fit has no group at k = {k}", argument="k")
    return ceiling_question(curves, within=within, workloads=_group_workloads(fit),
                            **options)


def compare_rulings(fit, other, rope: float) -> dict:
    """``compare``'s own verdict on the pooled C1 and C2 of two fits (the same ratios,
    draws paired as ``compare`` pairs them), as the planner's compare answers show it."""
    from bayesspec.decisions.compare import parameter_ratios, verdict_reached

    parameters, _ = parameter_ratios(fit, other, rope=rope)
    rulings = {}
    for family in ("C1", "C2"):
        entry = parameters[family]
        likeliest = max(entry["p_practically_higher"], entry["p_practically_lower"],
                        entry["p_equivalent"])
        rulings[family] = Ruling(entry["verdict"], float(likeliest), verdict_reached(entry),
                                 "compare")
    return rulings


def _group_workloads(fit) -> dict:
    """label -> what a load test of that fitted group asks for."""
    groups = fit.groups
    return {str(groups["label"].iloc[g]): _workload_of(groups.iloc[g])
            for g in range(len(groups))}


def _group_curves(fit) -> dict:
    """label -> (k, alpha, Curve) of every fitted group."""
    groups = fit.groups
    out = {}
    for g in range(len(groups)):
        alpha = float(groups["alpha"].iloc[g]) if "alpha" in groups else float("nan")
        out[str(groups["label"].iloc[g])] = (
            int(groups["k"].iloc[g]) if "k" in groups else 0,
            None if np.isnan(alpha) else alpha, fit.group_curve(g))
    return out
