"""Fit summaries as CONTRACT JSON documents and as tables a person reads.

Terms, as the tables use them: C1 is the batch-1 (zero-load) latency of a request, in
seconds; C2 the marginal cost of one more concurrent request, in seconds per request, so
1/C2 is the saturation rate (the RPS at which latency diverges); every number is a
posterior median with its equal-tailed credible interval (the range holding the true
value with the stated probability, given the model and the data).
"""

from __future__ import annotations

import numpy as np

from bayesspec.data import plain_value
from bayesspec.data.groups import labels_in_short
from bayesspec.uncertainty import uncertain

GROUP_FIELDS = ("verifier", "drafter", "k", "alpha", "prefill_tokens", "decode_tokens",
                "gpu", "engine", "engine_version", "method")


def summary_document(fit, *, prob: float = 0.9) -> dict:
    groups = fit.groups
    entries = []
    model = fit.model()
    # A tails fit of percentiles alone has no mean law: no C1, only the saturation cost.
    has_mean = model.has_mean(fit)
    for g, row in groups.iterrows():
        entry = {"label": row["label"]}
        for field in GROUP_FIELDS:
            if field in groups.columns:
                entry[field] = plain_value(row[field])
        if not has_mean:
            c2 = fit.draws("C2", g)
            entry["C1"] = {"mean": None, "median": None, "lo": None, "hi": None, "prob": prob}
            entry["C2"] = uncertain(c2, prob)
            entry["saturation_rps"] = uncertain(1.0 / c2, prob)
        else:
            curve = fit.group_curve(g)
            entry["C1"] = uncertain(curve.zero_load, prob)
            entry["C2"] = uncertain(curve.saturation_cost, prob)
            # The ceiling: eq. (1)'s pole 1/C2, or the cap's throughput when the engine's
            # concurrency cap is known (it binds first).
            entry["saturation_rps"] = uncertain(curve.ceiling, prob)
            entry["ceiling_binding"] = curve.ceiling_binding
            if curve.cap is not None:
                entry["pole_rps"] = uncertain(1.0 / curve.saturation_cost, prob)
                entry["cap"] = float(np.median(curve.cap))
                entry["cap_source"] = str(row.get("cap_source", ""))
                if bool(row.get("cap_learned", False)):
                    entry["cap_interval"] = uncertain(curve.cap, prob)
        entry["rps_measured_max"] = fit.rps_measured_max(g)
        fitted = float(row["rps_max"]) if "rps_max" in groups.columns else float("nan")
        entry["rps_fitted_max"] = fitted if np.isfinite(fitted) else None
        if "n_points" in groups.columns:
            entry["n_points"] = plain_value(row["n_points"])
        entries.append(entry)
    summaries = []
    for metric in model.metrics(fit):
        for g, row in groups.iterrows():
            if int(row.get(f"observed_{metric}", 0)) < 2:
                continue
            curve = model.metric_curve(fit, g, metric)
            entry = {"label": row["label"], "metric": metric,
                     "zero_load_s": uncertain(curve.zero_load, prob),
                     "exponent": uncertain(curve.exponent, prob)}
            if getattr(curve, "count", None) is not None:
                # tail_law count: the percentile off the mean law and the spread of the
                # load each request meets; its exponent is 1 by construction.
                entry.update(law="count", dispersion=uncertain(curve.count["dispersion"], prob),
                             zero_load_spread=uncertain(curve.count["spread"], prob))
            summaries.append(entry)
    coefficients = {}
    for name in model.posterior_variables():
        if name not in fit.posterior:
            continue
        variable = fit.posterior[name]
        extra = [d for d in variable.dims if d not in ("chain", "draw")]
        if not extra:
            coefficients[name] = uncertain(fit.draws(name), prob)
            continue
        # One entry per setup or group: pooling their draws would mix different systems.
        draws = fit.draws(name).reshape(-1, variable.shape[-1])
        for j, label in enumerate(variable[extra[-1]].values):
            if np.isnan(draws[:, j]).all():
                continue
            key = name if variable.shape[-1] == 1 else f"{name}[{label}]"
            coefficients[key] = uncertain(draws[:, j], prob)
    verdict = fit.diagnostics
    return {
        "model": fit.model_name,
        "groups": entries,
        "coefficients": coefficients,
        # Latency summaries (tails model): q = A (1 - RPS*C2)^-gamma per group.
        "summaries": summaries,
        "diagnostics": {"rhat_max": verdict["rhat_max"],
                        "ess_bulk_min": verdict["ess_bulk_min"],
                        "divergences": verdict["divergences"]},
        "convergence": verdict,
        "n_rows": int(len(fit.data)),
        "n_excluded": int(fit.data["excluded"].sum()),
        "prob": prob,
    }


def _cell(u: dict) -> str:
    if u.get("median") is None:
        return "n/a"
    return f"{u['median']:.4g} [{u['lo']:.4g}, {u['hi']:.4g}]"


def summary_text(document: dict) -> str:
    prob = document["prob"]
    lines = [f"model: {document['model']}   groups: {len(document['groups'])}   rows: "
             f"{document['n_rows']} ({document['n_excluded']} excluded as saturated)   "
             f"intervals: {prob:.0%} equal-tailed (posterior median [lo, hi])",
             "C1: batch-1 latency; C2: marginal cost of one more concurrent request; "
             "ceiling: the highest sustainable rate (1/C2, or the cap's throughput where "
             "the engine's concurrency cap is known, marked c); fitted max: the highest "
             "rate fitted (measured max: reached, set-aside points included)"]
    width = max([len(e["label"]) for e in document["groups"]] + [5])
    lines.append(f"{'group':<{width}}  {'C1 (s)':>28}  {'C2 (s/request)':>30}  "
                 f"{'ceiling RPS':>29}  {'fitted max':>10}  {'measured max':>12}")
    for entry in document["groups"]:
        ceiling = entry.get("rps_measured_max")
        fitted = entry.get("rps_fitted_max")
        mark = "c" if entry.get("ceiling_binding") == "cap" else " "
        lines.append(f"{entry['label']:<{width}}  {_cell(entry['C1']):>28}  "
                     f"{_cell(entry['C2']):>30}  {_cell(entry['saturation_rps']):>28}{mark}  "
                     f"{fitted if fitted is None else f'{fitted:.4g}':>10}  "
                     f"{ceiling if ceiling is None else f'{ceiling:.4g}':>12}")
    capped = [e for e in document["groups"] if e.get("cap") is not None]
    if capped:
        by_cap: dict[tuple, list[str]] = {}
        for e in capped:
            if "cap_interval" not in e:
                by_cap.setdefault((e["cap"], e["cap_source"]), []).append(e["label"])
        if len(by_cap) == 1:
            (cap, source), = by_cap
            lines.append(f"c: the engine's concurrency cap binds first ({cap:.0f} requests "
                         f"from {source})")
        elif by_cap:
            lines.append("c: the engine's concurrency cap binds first ("
                         + "; ".join(f"{cap:.0f} requests from {source} for "
                                     f"{labels_in_short(labels)}"
                                     for (cap, source), labels in sorted(by_cap.items()))
                         + ")")
        for e in capped:
            if "cap_interval" in e:
                lines.append(f"{e['label']}: concurrency cap {_cell(e['cap_interval'])} "
                             f"requests, {e['cap_source']}")
    if document.get("summaries"):
        lines += ["", "latency summaries: q = A (1 - RPS*C2)^-gamma (A: the summary at zero "
                  "load; gamma: 1 grows like the mean, > 1 faster)"]
        if any(entry.get("law") == "count" for entry in document["summaries"]):
            lines.append("  count law rows (tail_law count): the quantile of a log-normal with "
                         "the mean law's mean, its variance growing with the load each "
                         "request meets (d: its dispersion)")
        lines.append(f"{'group':<{width}}  {'summary':<9} {'A (s)':>30}  {'gamma':>26}")
        for entry in document["summaries"]:
            pace = (f"count law, dispersion {_cell(entry['dispersion'])}"
                    if entry.get("law") == "count" else f"{_cell(entry['exponent']):>26}")
            lines.append(f"{entry['label']:<{width}}  {entry['metric']:<9} "
                         f"{_cell(entry['zero_load_s']):>30}  {pace}")
    if document["coefficients"]:
        lines.append("")
        lines.append("population and noise:")
        name_width = max(26, *(len(name) for name in document["coefficients"]))
        for name, u in document["coefficients"].items():
            lines.append(f"  {name:<{name_width}} {_cell(u)}")
    d = document["diagnostics"]
    verdict = document["convergence"]
    lines.append("")
    if verdict.get("method", "nuts") != "nuts":
        lines.append(f"diagnostics: {verdict['method']} approximation, Pareto k "
                     f"{verdict['pareto_k']:.2f} (R-hat and ESS do not apply)")
    else:
        lines.append(f"diagnostics: R-hat max {d['rhat_max']:.4f}, bulk ESS min "
                     f"{d['ess_bulk_min']:.0f}, divergences {d['divergences']}")
    lines.append(f"verdict: {verdict['text']}")
    return "\n".join(lines)


#: The group options that pick a setup (``fit.law(selection)``), by group column.
_SETUP_OPTIONS = {"verifier": "verifier", "prefill_tokens": "prefill",
                  "decode_tokens": "decode", "gpu": "gpu"}


def answerable(fit) -> list[dict]:
    """Per setup (verifier, lengths, GPU), which questions the fit answers and what to add
    for those it cannot: ``{"setup", "answers": [...], "cannot": [...]}``, each item
    ``"verb(s): detail"``. Through the prediction contract only (``fit.law``)."""
    from bayesspec.errors import BadInput

    groups = fit.groups
    columns = [c for c in _SETUP_OPTIONS if c in groups.columns]
    metrics = fit.model().metrics(fit)
    out = []
    for _, first in groups.drop_duplicates(columns).iterrows():
        selection = {_SETUP_OPTIONS[c]: plain_value(first[c]) for c in columns
                     if plain_value(first[c]) not in (None, "")}
        here = (_as_text(groups[columns]) == _as_text(first[columns])).all(axis=1)
        sd = here & (groups["k"].astype(int) > 0)
        count = int(here.sum())
        predict = f"predict: mean latency at any rate ({count} group{'s' * (count != 1)})"
        setup = " ".join(f"{_SETUP_OPTIONS[c]} {plain_value(first[c])}" for c in columns
                         if plain_value(first[c]) not in (None, ""))
        if not sd.any():
            out.append({"setup": str(first["label"]), "answers": [predict], "cannot": [
                "speedup, crossover, kstar: no speculative groups; add load tests with "
                "speculation (k > 0, with alpha or vLLM's acceptance counters) at "
                f"{setup}, and fit --model speculative"]})
            continue
        try:
            law = fit.law(selection)
        except BadInput as error:
            out.append({"setup": str(first["label"]), "answers": [predict],
                        "cannot": [f"speedup, crossover, kstar: {error.reason}"]})
            continue
        answers = [predict]
        cannot = []
        configurations = getattr(law, "configurations", {})
        if not law.has_dense:
            cannot.append("speedup, crossover, kstar: no dense baseline; add a load test "
                          f"without speculation (k = 0) at {setup}")
        elif law.answers_any_configuration:
            fitted = groups.loc[sd]
            alphas = pd_numbers(fitted["alpha"])
            span = (f"measured: k {int(fitted['k'].min())}-{int(fitted['k'].max())}"
                    + (f", alpha {min(alphas):g}-{max(alphas):g}" if alphas else ""))
            answers.append(f"speedup, crossover, kstar: any alpha and k ({span})")
        else:
            shown = ", ".join(f"k {k}" if a is None else f"alpha {a:g} k {k}"
                              for a, k in sorted(configurations, key=lambda c: (
                                  c[1], -1.0 if c[0] is None else c[0])))
            answers.append(f"speedup, crossover: at the fitted configurations only ({shown})")
            cannot.append("kstar, other alpha or k: fit --model speculative (six cycle "
                          "coefficients shared by every alpha and k)")
        if metrics:
            answers.append(f"slo, --metric: {', '.join(metrics)}")
        out.append({"setup": law.label, "answers": answers, "cannot": cannot})
    return out


def _as_text(values):
    """Values compared as text, a missing one as "" (NaN never equals itself)."""
    return values.astype(object).where(values.notna(), "").astype(str)


def pd_numbers(values) -> list[float]:
    """The finite numbers among ``values``."""
    numbers = [plain_value(v) for v in values]
    return sorted({float(v) for v in numbers if isinstance(v, (int, float))
                   and np.isfinite(v)})
