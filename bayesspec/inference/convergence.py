"""Whether a posterior's draws can be trusted: per-variable R-hat and bulk ESS (stored in
the fit file once computed), divergent transitions, the convergence verdict in words with
what to do, and the design advice when a group has too few rates to pin its curve down.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

RHAT_LIMIT = 1.01
ESS_LIMIT = 400


#: Root attr of a fit file holding every posterior variable's (R-hat max, bulk ESS min),
#: computed once when the fit is made: answering from a saved fit then needs no ArviZ
#: (about a second of imports). Stored with a fingerprint of the draws it was computed
#: from, and recomputed when that does not match (or in an older file without it).
DIAGNOSTICS_ATTR = "variable_diagnostics"


def _posterior_fingerprint(posterior: xr.Dataset) -> str:
    import hashlib

    digest = hashlib.sha256()
    for name in sorted(posterior.data_vars):
        values = np.ascontiguousarray(posterior[name].values)
        digest.update(f"{name}|{values.dtype.str}|{values.shape}|".encode())
        digest.update(values.tobytes())
    return digest.hexdigest()


def stored_variable_diagnostics(tree: xr.DataTree) -> dict[str, tuple] | None:
    """The per-variable diagnostics kept in the tree's attrs, or None when absent or
    computed from other draws than the tree's posterior."""
    import json

    text = tree.attrs.get(DIAGNOSTICS_ATTR)
    if not text or "posterior" not in tree.children:
        return None
    try:
        stored = json.loads(text)
        variables = {str(n): (float(r), float(e)) for n, (r, e) in stored["variables"].items()}
        fingerprint = stored["fingerprint"]
    except (ValueError, KeyError, TypeError):
        return None
    if fingerprint != _posterior_fingerprint(tree["posterior"].to_dataset()):
        return None
    return variables


def record_variable_diagnostics(tree: xr.DataTree) -> dict[str, tuple]:
    """Compute every posterior variable's diagnostics (ArviZ) unless the tree already
    holds them for its draws, and keep them in its attrs (:data:`DIAGNOSTICS_ATTR`)."""
    import json

    stored = stored_variable_diagnostics(tree)
    if stored is not None:
        return stored
    posterior = tree["posterior"].to_dataset()
    computed = _computed_diagnostics(posterior, list(posterior.data_vars))
    tree.attrs[DIAGNOSTICS_ATTR] = json.dumps(
        {"fingerprint": _posterior_fingerprint(posterior),
         "variables": {n: [r, e] for n, (r, e) in computed.items()}})
    return computed


def _variable_diagnostics(tree: xr.DataTree, names: list[str]) -> dict[str, tuple]:
    """Per posterior variable: (R-hat max, bulk ESS min) over its finite elements (from
    the tree's stored diagnostics when they are those of its draws).

    Deterministics that are NaN by construction (a setup without a dense baseline) carry
    no information about convergence and are left out."""
    stored = stored_variable_diagnostics(tree)
    if stored is not None:
        return {n: stored[n] for n in names if n in stored}
    return _computed_diagnostics(tree["posterior"].to_dataset(), names)


def _computed_diagnostics(posterior: xr.Dataset, names: list[str]) -> dict[str, tuple]:
    import arviz as az

    names = [n for n in names if n in posterior.data_vars
             and not np.isnan(posterior[n].values).all()]
    if not names:
        return {}
    subset = posterior[names]
    n_chains = subset.sizes.get("chain", 1)
    rhat = az.rhat(subset) if n_chains > 1 else None
    ess = az.ess(subset, method="bulk")
    return {n: (_finite_extreme(rhat[n].values, np.max) if rhat is not None else float("nan"),
                _finite_extreme(ess[n].values, np.min)) for n in names}


def divergences_of(tree: xr.DataTree) -> int:
    if "sample_stats" in tree.children and "diverging" in tree["sample_stats"].data_vars:
        return int(tree["sample_stats"]["diverging"].values.sum())
    return 0


def diagnostics(tree: xr.DataTree, variables: list[str] | None = None) -> dict:
    """R-hat max, bulk-ESS min and divergences over the named posterior variables (all
    when None), and whether they pass (R-hat <= RHAT_LIMIT, ESS >= ESS_LIMIT, no
    divergent transition, more than one chain)."""
    posterior = tree["posterior"].to_dataset()
    per_variable = _variable_diagnostics(tree, list(variables or posterior.data_vars))
    rhat_max = max((r for r, _ in per_variable.values() if not np.isnan(r)),
                   default=float("nan"))
    ess_min = min((e for _, e in per_variable.values() if not np.isnan(e)),
                  default=float("nan"))
    divergences = divergences_of(tree)
    n_chains = posterior.sizes.get("chain", 1)
    problems = _problems(rhat_max, ess_min, n_chains)
    if divergences:
        problems.append(f"{divergences} divergent transitions")
    return {"rhat_max": rhat_max, "ess_bulk_min": ess_min, "divergences": divergences,
            "converged": not problems, "problems": problems}


def _problems(rhat_max: float, ess_min: float, n_chains: int) -> list[str]:
    problems = []
    if n_chains > 1 and not rhat_max <= RHAT_LIMIT:
        problems.append(f"R-hat {rhat_max:.3f} > {RHAT_LIMIT}")
    if not ess_min >= ESS_LIMIT:
        problems.append(f"bulk ESS {ess_min:.0f} < {ESS_LIMIT}")
    if n_chains < 2:
        problems.append("one chain: R-hat cannot be computed")
    return problems


def convergence_verdict(tree: xr.DataTree, decision_variables: list[str]) -> dict:
    """Whether the answers drawn from a posterior can be trusted, in words.

    The *decision quantities* (what answers are computed from: C1, C2, the cycle
    coefficients, noise scales, latent alpha; the model's ``decision_variables``) are
    judged apart from the rest (pooling means and spreads, standardised deviations,
    shares): a pooling spread that mixes slowly while every C1 and C2 has converged
    makes no answer wrong, and is said as such instead of failing the fit. Divergent
    transitions fail it whatever the variable: the sampler could not explore part of
    the posterior, so any summary may be biased.

    Returns ``status`` ("converged", "decisions converged" or "not converged"), ``text``
    (one line), ``advice`` (what to do, when not converged), and the diagnostics:
    ``rhat_max``/``ess_bulk_min`` over every variable, ``decision`` and ``other``
    (``rhat_max``, ``ess_bulk_min``, ``worst``: the variable behind them),
    ``divergences``, ``converged`` (the decision quantities can be used),
    ``problems``.

    An approximate posterior (root attr ``method`` other than "nuts":
    :func:`approximate`) is judged by the Pareto k of its importance weights instead
    (R-hat and ESS do not apply to resampled draws): status "approximate" with k <=
    0.7, "not converged" above; ``pareto_k`` and ``method`` are then in the verdict. A
    fit that fell back to NUTS gets the sampled verdict, its text saying so.
    """
    attrs = tree.attrs
    if attrs.get("method", "nuts") != "nuts" and "pareto_k" in attrs:
        return _approximate_verdict(tree)
    verdict = _sampled_verdict(tree, decision_variables)
    if attrs.get("retried"):
        verdict["text"] += f" ({attrs['retried']})"
        verdict["retried"] = str(attrs["retried"])
    if attrs.get("restarted"):
        verdict["text"] += f" ({attrs['restarted']})"
        verdict["restarted"] = str(attrs["restarted"])
    if attrs.get("fallback"):
        verdict["text"] += f" ({attrs['fallback']})"
        verdict.update(method="nuts", approximation=str(attrs.get("approximation")),
                       pareto_k=float(attrs["pareto_k"]))
    return verdict


def _approximate_verdict(tree: xr.DataTree) -> dict:
    from bayesspec.inference.approximate import PARETO_K_LIMIT

    method, k = str(tree.attrs["method"]), float(tree.attrs["pareto_k"])
    ess = float(tree.attrs.get("importance_ess", float("nan")))
    nothing = {"rhat_max": float("nan"), "ess_bulk_min": float("nan"), "worst": None}
    if k <= PARETO_K_LIMIT:
        status, problems, advice = "approximate", [], ""
        text = (f"approximate ({method}), Pareto k = {k:.2f} <= {PARETO_K_LIMIT}: draws "
                f"importance-resampled from the approximation (importance ESS {ess:.0f}); "
                "R-hat and ESS do not apply; intervals close to, not exactly, NUTS's")
    else:
        status = "not converged"
        problems = [f"Pareto k {k:.2f} > {PARETO_K_LIMIT}"]
        advice = ("fit with --method nuts (the default), or leave the NUTS fallback on; "
                  "--strict makes scripts stop on this")
        text = (f"approximate ({method}), Pareto k = {k:.2f} > {PARETO_K_LIMIT}: the "
                "approximation is not close enough to the posterior; intervals and "
                f"decisions from it are unreliable. What to do: {advice}")
    return {"status": status, "converged": status != "not converged", "text": text,
            "advice": advice, "rhat_max": float("nan"), "ess_bulk_min": float("nan"),
            "divergences": 0, "decision": dict(nothing), "other": dict(nothing),
            "problems": problems, "method": method, "pareto_k": k}


def _sampled_verdict(tree: xr.DataTree, decision_variables: list[str]) -> dict:
    posterior = tree["posterior"].to_dataset()
    names = list(posterior.data_vars)
    per_variable = _variable_diagnostics(tree, names)
    decision = {n: v for n, v in per_variable.items() if n in set(decision_variables)}
    other = {n: v for n, v in per_variable.items() if n not in decision}
    n_chains = posterior.sizes.get("chain", 1)
    divergences = divergences_of(tree)

    def summary(group: dict) -> dict:
        if not group:
            return {"rhat_max": float("nan"), "ess_bulk_min": float("nan"), "worst": None,
                    "variables": 0}
        rhat = {n: r for n, (r, _) in group.items() if not np.isnan(r)}
        ess = {n: e for n, (_, e) in group.items() if not np.isnan(e)}
        worst_rhat = max(rhat, key=rhat.get) if rhat else None
        worst_ess = min(ess, key=ess.get) if ess else None
        problems = _problems(rhat.get(worst_rhat, float("nan")),
                             ess.get(worst_ess, float("nan")), n_chains)
        worst = worst_rhat if rhat and rhat[worst_rhat] > RHAT_LIMIT else worst_ess
        return {"rhat_max": rhat.get(worst_rhat, float("nan")),
                "ess_bulk_min": ess.get(worst_ess, float("nan")), "worst": worst,
                "variables": len(group), "problems": problems}

    decided, rest = summary(decision), summary(other)
    every = summary(per_variable)
    problems = list(decided.get("problems", []))
    if divergences:
        problems.append(f"{divergences} divergent transitions")
    if problems:
        status = "not converged"
        where = (f" (worst: {decided['worst']})" if decided["worst"] and
                 decided.get("problems") else "")
        text = ("posterior did not converge: " + "; ".join(problems) + where +
                ": intervals and decisions from it are unreliable")
        advice = _advice(problems, divergences)
        text += f". What to do: {advice}"
    elif rest.get("problems"):
        status = "decisions converged"
        text = (f"decision quantities converged (R-hat <= {decided['rhat_max']:.3f}, bulk ESS "
                f">= {decided['ess_bulk_min']:.0f}, no divergences); {rest['worst']} mixes "
                f"slowly (R-hat {rest['rhat_max']:.3f}, ESS {rest['ess_bulk_min']:.0f}): a "
                "pooling or shape parameter, harmless for these answers")
        advice = ""
    else:
        status = "converged"
        text = (f"converged (R-hat <= {every['rhat_max']:.3f}, bulk ESS >= "
                f"{every['ess_bulk_min']:.0f}, no divergences)")
        advice = ""
    return {"status": status, "converged": status != "not converged", "text": text,
            "advice": advice, "rhat_max": every["rhat_max"],
            "ess_bulk_min": every["ess_bulk_min"], "divergences": divergences,
            "decision": {k: decided[k] for k in ("rhat_max", "ess_bulk_min", "worst")},
            "other": {k: rest[k] for k in ("rhat_max", "ess_bulk_min", "worst")},
            "problems": problems}


def thin_groups(data: pd.DataFrame, parameters: int = 2) -> list[dict]:
    """Fitted groups with fewer rates than ``parameters`` + 2: no sampler setting pins
    their curve down, only more load points do. Each with its label, how many it has and
    needs, and the rates to measure between: from its lowest rate to its highest fitted
    one, or to just below the lowest point set aside above that (its ceiling)."""
    if "group" not in data.columns:
        return []
    needed = int(parameters) + 2
    out = []
    for label, rows in data.groupby("group", sort=False):
        kept = rows.loc[~rows["excluded"].astype(bool)]
        have = int(kept["rps"].nunique())
        if not label or have >= needed:
            continue
        low = float(rows["rps"].min())
        high = float(kept["rps"].max()) if len(kept) else low
        above = rows.loc[rows["excluded"].astype(bool) & (rows["rps"] > high), "rps"]
        if len(above):
            high = max(high, 0.9 * float(above.min()))
        if high < 2.0 * low:      # one rate, or a few close together: sweep up to it
            low = high / 10.0
        out.append({"group": str(label), "rates": have, "needed": needed,
                    "from_rps": low, "to_rps": high})
    return out


def design_advice(groups: list[dict]) -> str:
    """'measure at least N rates between X and Y RPS in G (it has n)' for thin groups."""
    if not groups:
        return ""
    parts = [f"{g['group']}: measure at least {g['needed']} rates between "
             f"{g['from_rps']:.3g} and {g['to_rps']:.3g} RPS (it has {g['rates']})"
             for g in groups[:3]]
    more = f"; and {len(groups) - 3} more groups" if len(groups) > 3 else ""
    return "; ".join(parts) + more


def with_design_advice(verdict: dict, data: pd.DataFrame, parameters: int = 2) -> dict:
    """The verdict with 'run longer' replaced by what would help when some group has too
    few rates to pin its curve down (a longer run of the same data fails the same way)."""
    thin = thin_groups(data, parameters)
    if not thin:
        return verdict
    verdict = {**verdict, "thin_groups": thin}
    if verdict["status"] != "not converged":
        return verdict
    advice = design_advice(thin)
    longer = "run longer (e.g. --tune 2000 --draws 2000)"
    old = verdict.get("advice", "")
    steps = [step for step in old.split("; ") if step and step != longer]
    new = "; ".join([f"too few load points to pin the curve down, {advice}"] + steps)
    verdict["advice"] = new
    verdict["text"] = verdict["text"].replace(old, new) if old else verdict["text"]
    return verdict


def _advice(problems: list[str], divergences: int) -> str:
    steps = []
    if divergences:
        steps.append("raise --target-accept (e.g. 0.99)")
        steps.append("look for saturated points the data do not mark (a load point past "
                     "the ceiling; `bayesspec fit` lists those it sets aside; --max-rps "
                     "sets more aside)")
    if any(p.startswith(("R-hat", "bulk ESS")) for p in problems):
        steps.append("run longer (e.g. --tune 2000 --draws 2000)")
    if any(p.startswith("one chain") for p in problems):
        steps.append("use 2 or more --chains")
    steps.append("--strict makes scripts stop on this")
    return "; ".join(steps)


def _finite_extreme(values: np.ndarray, reduce) -> float:
    finite = np.asarray(values, dtype=float)
    finite = finite[~np.isnan(finite)]
    return float(reduce(finite)) if finite.size else float("nan")
