"""Two fits compared (e.g. two engine versions): ratios B/A with probabilities
(CONTRACT ``compare``), and a whole-curve outcome a CI job can gate on.

What is compared is what each fit's model class says is comparable
(``model.comparable_parameters(fit)``: families such as C1 and C2 per group, the six
cycle coefficients per setup); a joint two-version fit answers through its own model
(``model.version_comparison``).

The whole-curve outcome (:func:`curve_outcome`) reads the mean-latency curves of both
versions over the rates both fitted, group by group: at each rate the latency ratio B/A
with its interval and the probability that B is worse (or better) by more than the
region of practical equivalence (ROPE). Over all groups (the geometric mean of the
groups' ratios at the same place in each group's shared range) one outcome results:

- ``regressed``: at some rate, P(B slower by more than the ROPE) >= ``level``;
- ``improved``: none regressed, and at some rate P(B faster by more than the ROPE)
  >= ``level``;
- ``no change``: at every rate P(|ratio - 1| <= ROPE) >= ``equivalence``;
- ``inconclusive``: none of these; the document then says how many more requests per
  load point would settle it, from the posterior's own width (the interval of a ratio
  narrows as 1/sqrt(requests) when both versions measure that many more).
"""

from __future__ import annotations

import math

import numpy as np

from bayesspec.errors import BadInput
from bayesspec.uncertainty import DEFAULT_PROB, ratio_entry, uncertain

# Families summarised over every shared entry (geometric mean of the ratios).
POOLED_FAMILIES = ("C1", "C2")

#: Posterior probability at which a rate counts as regressed (or improved).
DEFAULT_LEVEL = 0.95
#: Posterior probability inside the ROPE, at every rate, for "no change".
DEFAULT_EQUIVALENCE = 0.9
#: Rates at which each group's shared range is read.
DEFAULT_POINTS = 8
#: One-sided normal quantile matching ``DEFAULT_LEVEL`` (settling estimates).
_Z_LEVEL = 1.645
#: Beyond this many times the requests, a difference is called unsettleable by requests.
_MAX_FACTOR = 100.0

OUTCOMES = ("regressed", "improved", "no change", "inconclusive")


def _check_rope(rope: float) -> None:
    if not 0.0 <= rope < 1.0:
        raise BadInput(f"must be within [0, 1), got {rope}", argument="rope")


def _check_same_kind(fit_a, fit_b) -> None:
    """Fits of different models (the served model or the statistical one) are not two
    versions of one system: one line saying which differs."""
    if fit_a.model_name != fit_b.model_name:
        raise BadInput(f"A is a {fit_a.model_name} fit and B a {fit_b.model_name} fit: "
                       "refit one with the other's --model so both read the data alike")
    served_a = set(fit_a.groups["verifier"].astype(str))
    served_b = set(fit_b.groups["verifier"].astype(str))
    if not served_a & served_b:
        raise BadInput(f"A fits {', '.join(sorted(served_a))} and B fits "
                       f"{', '.join(sorted(served_b))}: compare fits of the same served "
                       "model")


def _runs_in(fit) -> list[str]:
    """Groups that hold more than one run (a ``run`` column in the data)."""
    if "run" not in fit.groups.columns:
        return []
    base = _base_labels(fit)
    return sorted({b for b in base if base.count(b) > 1})


def _base_labels(fit) -> list[str]:
    """Group labels without the run part (``run=...``)."""
    return [" ".join(part for part in str(label).split(" ") if not part.startswith("run="))
            for label in fit.groups["label"]]


def compare_fits(fit_a, fit_b, *, rope: float = 0.02, prob: float = DEFAULT_PROB,
                 seed: int = 0, level: float = DEFAULT_LEVEL,
                 equivalence: float = DEFAULT_EQUIVALENCE,
                 points: int = DEFAULT_POINTS) -> dict:
    """CONTRACT ``compare``: B relative to A for every parameter both fits hold, and the
    whole-curve ``outcome``.

    The two posteriors are independent, so ratio draws pair each draw of B with a random
    draw of A. ``C1``/``C2`` alone are the geometric mean ratio over shared groups.
    """
    parameters, shared_groups = parameter_ratios(fit_a, fit_b, rope=rope, prob=prob,
                                                 seed=seed)
    verdict = (f"C1 {parameters['C1']['verdict']}; C2 {parameters['C2']['verdict']} "
               f"(geometric mean over {shared_groups} shared groups)")
    document = {"parameters": parameters, "verdict": verdict,
                "shared_groups": shared_groups, "rope": rope, "prob": prob}
    pairs = fit_curve_pairs(fit_a, fit_b)
    document.update(curve_outcome(pairs, parameters, rope=rope, prob=prob, level=level,
                                  equivalence=equivalence, points=points, seed=seed))
    return document


def parameter_ratios(fit_a, fit_b, *, rope: float = 0.02, prob: float = DEFAULT_PROB,
                     seed: int = 0) -> tuple[dict, int]:
    """(``parameters`` of the ``compare`` document, the number of shared groups): B/A of
    every parameter both fits hold, each with its verdict
    (:func:`bayesspec.uncertainty.ratio_verdict`); ``C1``/``C2`` pooled over the shared
    groups first. The one rule by which ``compare`` and the planner's compare question
    call a difference."""
    _check_rope(rope)
    _check_same_kind(fit_a, fit_b)
    for name, fit in (("A", fit_a), ("B", fit_b)):
        repeated = _runs_in(fit)
        if repeated:
            raise BadInput(f"{name} holds several runs of '{repeated[0]}': give the data "
                           "files instead (bayesspec compare A.csv B.csv) for one joint fit "
                           "with a run-level effect, so run-to-run drift is not read as a "
                           "version effect")
    params_a = fit_a.model().comparable_parameters(fit_a)
    params_b = fit_b.model().comparable_parameters(fit_b)
    shared_groups = [label for label in params_a.get("C1", {}) if label in params_b.get("C1", {})]
    if not shared_groups:
        raise BadInput("the two fits share no group (compare fits of the same verifier, "
                       "drafter, lengths and (alpha, k))")
    rng = np.random.default_rng(seed)
    parameters = {}
    pooled = {name: [] for name in POOLED_FAMILIES}
    for family, entries_a in params_a.items():
        entries_b = params_b.get(family, {})
        for label, draws_a in entries_a.items():
            if label not in entries_b:
                continue
            draws_b = entries_b[label]
            ratio = draws_b / rng.choice(draws_a, size=draws_b.size, replace=True)
            parameters[f"{family}[{label}]"] = ratio_entry(ratio, rope, prob)
            if family in pooled:
                pooled[family].append(np.log(ratio))
    for family, logs in pooled.items():
        parameters[family] = ratio_entry(np.exp(np.mean(logs, axis=0)), rope, prob)
    # The headline families first, then the entries.
    parameters = {**{f: parameters[f] for f in POOLED_FAMILIES},
                  **{k: v for k, v in parameters.items() if k not in POOLED_FAMILIES}}
    return parameters, len(shared_groups)


def verdict_reached(entry: dict) -> bool:
    """Whether ``compare``'s verdict on a ratio entry calls it (higher, lower or
    equivalent) rather than "uncertain"."""
    return not str(entry["verdict"]).startswith("uncertain")


def compare_versions(fit, *, rope: float = 0.02, prob: float = DEFAULT_PROB,
                     seed: int = 0, level: float = DEFAULT_LEVEL,
                     equivalence: float = DEFAULT_EQUIVALENCE,
                     points: int = DEFAULT_POINTS) -> dict:
    """CONTRACT ``compare`` from one joint fit of two versions (``--by COLUMN``), with
    the whole-curve ``outcome`` (paired draws: one posterior)."""
    _check_rope(rope)
    model = fit.model()
    document = model.version_comparison(fit, rope=rope, prob=prob)
    pairs = [curve_pair(label, curve_a, curve_b, rows_a, rows_b, paired=True)
             for label, curve_a, curve_b, rows_a, rows_b in model.version_curves(fit)]
    document.update(curve_outcome(pairs, document["parameters"], rope=rope, prob=prob,
                                  level=level, equivalence=equivalence, points=points,
                                  seed=seed))
    return document


# --------------------------------------------------------------------------------------
# Whole-curve outcome
# --------------------------------------------------------------------------------------

def fitted_rows(fit, label: str):
    """The rows of group ``label`` that entered the likelihood."""
    data = fit.data
    return data.loc[data["group"].eq(label) & ~data["excluded"].astype(bool)]


def curve_pair(label: str, curve_a, curve_b, rows_a, rows_b, *, paired: bool) -> dict:
    """One group's two curves with the rates each version fitted (and the requests per
    load point, when the data say): what :func:`curve_outcome` reads."""
    def summary(rows):
        rates = rows["rps"].to_numpy(float)
        requests = (np.nanmean(rows["n_requests"].to_numpy(float))
                    if "n_requests" in rows.columns and rows["n_requests"].notna().any()
                    else None)
        return (float(rates.min()) if rates.size else math.nan,
                float(rates.max()) if rates.size else math.nan, requests)

    low_a, high_a, requests_a = summary(rows_a)
    low_b, high_b, requests_b = summary(rows_b)
    return {"label": label, "a": curve_a, "b": curve_b, "paired": paired,
            "range_a": (low_a, high_a), "range_b": (low_b, high_b),
            "requests": [r for r in (requests_a, requests_b) if r is not None]}


def fit_curve_pairs(fit_a, fit_b) -> list[dict]:
    """Curve pairs of the groups two independent fits share (by label)."""
    labels_b = {label: g for g, label in enumerate(fit_b.groups["label"])}
    pairs = []
    for g, label in enumerate(fit_a.groups["label"]):
        if label not in labels_b:
            continue
        h = labels_b[label]
        pairs.append(curve_pair(str(label), fit_a.group_curve(g), fit_b.group_curve(h),
                                fitted_rows(fit_a, label), fitted_rows(fit_b, label),
                                paired=False))
    return pairs


def _log_ratio_draws(pair: dict, rates: np.ndarray, index_a: np.ndarray | None):
    """(S, R) log L_B/L_A; independent posteriors pair B's draw s with A's draw
    ``index_a[s]`` (one mapping for every rate and group, so curves stay whole)."""
    latency_b = pair["b"].latency(rates)
    latency_a = pair["a"].latency(rates)
    if index_a is not None:
        latency_a = latency_a[index_a]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(latency_b) - np.log(latency_a)


def _rate_entry(rate: float, log_ratio: np.ndarray, rope: float, prob: float) -> dict:
    ratio = np.exp(log_ratio)
    return {"rps": float(rate), "ratio": uncertain(ratio, prob),
            "p_worse": float(np.mean(ratio > 1.0 + rope)),
            "p_better": float(np.mean(ratio < 1.0 - rope)),
            "p_equivalent": float(np.mean(np.abs(ratio - 1.0) <= rope))}


def _outcome(entries: list[dict], level: float, equivalence: float) -> str:
    if any(e["p_worse"] >= level for e in entries):
        return "regressed"
    if any(e["p_better"] >= level for e in entries):
        return "improved"
    if all(e["p_equivalent"] >= equivalence for e in entries):
        return "no change"
    return "inconclusive"


def _requests_factor(log_ratio: np.ndarray, rope: float) -> tuple[float, str]:
    """How many times the requests per load point (in both versions) would settle this
    rate, from the posterior's width (sd of the log ratio, shrinking as 1/sqrt(n)), and
    towards which answer: inside the ROPE, or beyond it on the side the median leans."""
    finite = log_ratio[np.isfinite(log_ratio)]
    if finite.size < 2:
        return math.inf, "unknown"
    centre, spread = float(np.median(finite)), float(np.std(finite))
    edge = math.log1p(rope)
    if abs(centre) < edge:
        needed, towards = (edge - abs(centre)) / _Z_LEVEL, "no change"
    else:
        needed = (abs(centre) - edge) / _Z_LEVEL
        towards = "regressed" if centre > 0 else "improved"
    if needed <= 0:
        return math.inf, towards
    return max(1.0, (spread / needed) ** 2), towards


def _settle(entries: list[dict], logs: list[np.ndarray], requests: float | None,
            rope: float) -> dict:
    """What would settle an inconclusive comparison: per rate the factor on the requests
    per point, and the cheapest way to an answer (one rate beyond the ROPE decides a
    regression or an improvement; "no change" needs every rate)."""
    per_rate = []
    for entry, log_ratio in zip(entries, logs):
        factor, towards = _requests_factor(log_ratio, rope)
        per_rate.append({"rps": entry["rps"], "fraction": entry.get("fraction"),
                         "where": _where(entry), "towards": towards,
                         "factor": None if not math.isfinite(factor) else factor,
                         "more_requests_per_point": (None if requests is None
                                                     or not math.isfinite(factor)
                                                     else int(math.ceil(requests
                                                                        * (factor - 1))))})
    leaning = [p for p in per_rate if p["towards"] in ("regressed", "improved")
               and p["factor"] is not None]
    if leaning:
        best = min(leaning, key=lambda p: p["factor"])
        towards, factor, rates = best["towards"], best["factor"], [best["where"]]
    else:
        inside = [p for p in per_rate if p["towards"] == "no change"]
        factors = [p["factor"] for p in inside]
        if not inside or any(f is None for f in factors):
            towards, factor, rates = "no change", None, [p["where"] for p in inside]
        else:
            worst = max(inside, key=lambda p: p["factor"])
            towards, factor, rates = "no change", worst["factor"], [worst["where"]]
    unsettleable = factor is None or factor > _MAX_FACTOR
    more = (None if requests is None or factor is None
            else int(math.ceil(requests * (factor - 1))))
    if unsettleable:
        text = (f"the difference sits at the edge of the +-{rope:.0%} region of practical "
                f"equivalence: more than {_MAX_FACTOR:.0f}x the requests would be needed; "
                "widen --rope, or accept the difference as too small to matter")
    else:
        per_point = (f"about {more} more requests per load point ({factor:.1f}x the "
                     f"{requests:.0f} now)" if more is not None
                     else f"about {factor:.1f}x the requests per load point")
        where = (f"at every rate of the shared range (the widest: {rates[0]})"
                 if towards == "no change" else f"near {rates[0]}")
        text = (f"{per_point}, in both A and B, {where}, would likely settle it as "
                f"'{towards}' (from the posterior's own width, which narrows as "
                "1/sqrt(requests))")
    return {"towards": towards, "factor": factor, "more_requests_per_point": more,
            "requests_per_point": requests, "where": rates, "per_rate": per_rate,
            "settleable": not unsettleable, "text": text, "source": "posterior width"}


def _why(parameters: dict) -> str:
    """Which cost moved: the fixed cost C1 (batch-1 latency) or the load cost C2."""
    parts = []
    for name, what in (("C1", "fixed cost C1 (latency at zero load)"),
                       ("C2", "load cost C2 (what each concurrent request adds)")):
        entry = parameters.get(name)
        if entry is None or entry["ratio"]["median"] is None:
            continue
        ratio = entry["ratio"]
        parts.append(f"{what} B/A {ratio['median']:.3f} [{ratio['lo']:.3f}, "
                     f"{ratio['hi']:.3f}]: {entry['verdict']}")
    return "; ".join(parts)


def curve_outcome(pairs: list[dict], parameters: dict, *, rope: float, prob: float,
                  level: float = DEFAULT_LEVEL, equivalence: float = DEFAULT_EQUIVALENCE,
                  points: int = DEFAULT_POINTS, seed: int = 0) -> dict:
    """The whole-curve part of a ``compare`` document: per group and pooled, the latency
    ratio B/A at ``points`` rates of the range both versions fitted, the ``outcome``, why
    (C1 and C2 from ``parameters``) and, when inconclusive, what would settle it."""
    if not 0.5 < level < 1.0 or not 0.5 < equivalence < 1.0:
        raise BadInput("decision probabilities must be within (0.5, 1)", argument="level")
    if points < 2:
        raise BadInput(f"must be >= 2, got {points}", argument="points")
    usable, ranges = [], []
    for pair in pairs:
        low = max(pair["range_a"][0], pair["range_b"][0])
        high = min(pair["range_a"][1], pair["range_b"][1])
        if np.isfinite(low) and np.isfinite(high) and high > low:
            usable.append(pair)
            ranges.append((low, high))
    if not usable:
        shown = "; ".join(f"{p['label']}: A {p['range_a'][0]:.3g}-{p['range_a'][1]:.3g}, "
                          f"B {p['range_b'][0]:.3g}-{p['range_b'][1]:.3g} RPS"
                          for p in pairs[:3])
        raise BadInput("the two fits share no load range (the rates each fitted do not "
                       f"overlap: {shown or 'no shared group'})")
    rng = np.random.default_rng(seed + 1)
    draws_b = usable[0]["b"].draws
    index_a = (None if usable[0]["paired"]
               else rng.choice(usable[0]["a"].draws, size=draws_b, replace=True))
    groups, group_logs = [], []
    for pair, (low, high) in zip(usable, ranges):
        rates = np.linspace(low, high, points)
        logs = _log_ratio_draws(pair, rates, index_a)
        entries = [_rate_entry(rate, logs[:, j], rope, prob) for j, rate in enumerate(rates)]
        groups.append({"label": pair["label"], "rps_range": [low, high], "points": entries,
                       "outcome": _outcome(entries, level, equivalence)})
        group_logs.append(logs)
    pooled_logs = np.mean(np.stack(group_logs), axis=0)                   # (S, R)
    fractions = np.linspace(0.0, 1.0, points)
    single = len(groups) == 1
    curve = []
    for j, fraction in enumerate(fractions):
        entry = _rate_entry(groups[0]["points"][j]["rps"] if single else float("nan"),
                            pooled_logs[:, j], rope, prob)
        entry["fraction"] = float(fraction)
        if not single:
            entry["rps"] = None
        curve.append(entry)
    outcome = _outcome(curve, level, equivalence)
    requests = [r for pair in usable for r in pair["requests"]]
    document = {
        "outcome": outcome,
        "level": level, "equivalence": equivalence,
        "rps_range": ([ranges[0][0], ranges[0][1]] if single
                      else [min(r[0] for r in ranges), max(r[1] for r in ranges)]),
        "curve": curve,
        "curve_groups": groups,
        "why": _why(parameters),
    }
    if outcome == "inconclusive":
        document["settle"] = _settle(curve, [pooled_logs[:, j] for j in range(points)],
                                     float(np.mean(requests)) if requests else None, rope)
    document["outcome_text"] = outcome_text(document, rope)
    return document


def _where(entry: dict) -> str:
    if entry.get("rps") is not None:
        return f"{entry['rps']:.4g} RPS"
    return f"{entry['fraction']:.0%} of each group's shared range"


def outcome_text(document: dict, rope: float) -> str:
    """The outcome in one paragraph: what, where, by how much, why."""
    outcome, curve = document["outcome"], document["curve"]
    level = document["level"]
    groups = document["curve_groups"]
    scope = ("" if len(groups) == 1 else
             f" (geometric mean over {len(groups)} shared groups)")
    if outcome in ("regressed", "improved"):
        key = "p_worse" if outcome == "regressed" else "p_better"
        hits = [e for e in curve if e[key] >= level]
        worst = max(hits, key=lambda e: abs(math.log(e["ratio"]["median"])))
        ratio = worst["ratio"]
        word = "higher" if outcome == "regressed" else "lower"
        where = (f"{_where(hits[0])} to {_where(hits[-1])}" if len(hits) > 1
                 else _where(hits[0]))
        text = (f"{outcome}: B's mean latency is {word} than A's by more than {rope:.0%} "
                f"with P >= {level:g} at {where}{scope}; at {_where(worst)} B/A = "
                f"{ratio['median']:.3f} [{ratio['lo']:.3f}, {ratio['hi']:.3f}]")
        if outcome == "regressed" and any(e["p_better"] >= level for e in curve):
            text += " (lower elsewhere in the range: a trade-off, not a plain regression)"
    elif outcome == "no change":
        widest = max(curve, key=lambda e: e["ratio"]["hi"] - e["ratio"]["lo"])
        text = (f"no change: B/A stays within +-{rope:.0%} with P >= "
                f"{document['equivalence']:g} at every rate of the shared range{scope} "
                f"(widest: {widest['ratio']['median']:.3f} [{widest['ratio']['lo']:.3f}, "
                f"{widest['ratio']['hi']:.3f}] at {_where(widest)})")
    else:
        leaning = max(curve, key=lambda e: max(e["p_worse"], e["p_better"]))
        text = (f"inconclusive: neither inside nor beyond +-{rope:.0%} with enough "
                f"probability{scope}; most telling at {_where(leaning)}: B/A "
                f"{leaning['ratio']['median']:.3f} [{leaning['ratio']['lo']:.3f}, "
                f"{leaning['ratio']['hi']:.3f}], P(worse) {leaning['p_worse']:.2f}, "
                f"P(better) {leaning['p_better']:.2f}")
        if document.get("settle"):
            text += f". To settle: {document['settle']['text']}"
    regressed_groups = [g["label"] for g in groups if g["outcome"] == "regressed"]
    if len(groups) > 1 and regressed_groups and outcome != "regressed":
        text += (f". Regressed on its own: {', '.join(regressed_groups[:4])}"
                 + (" ..." if len(regressed_groups) > 4 else ""))
    if document.get("why"):
        text += f". Why: {document['why']}"
    return text
