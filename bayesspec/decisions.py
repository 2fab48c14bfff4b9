"""Posterior summaries and predictions: numbers with their uncertainty.

Every function works on whole arrays of draws (no Python loop over draws) and returns
plain dicts in the JSON shapes of CONTRACT.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .errors import BadInput
from .laws import crossover_rps, effective_costs, latency, load_amplification_expr

DEFAULT_PROB = 0.9


def uncertain(draws, prob: float = DEFAULT_PROB) -> dict:
    """``{"mean", "median", "lo", "hi", "prob"}`` of draws (equal-tailed interval).

    Infinite draws (past saturation) are kept: the mean is then ``inf`` and the
    quantiles say how much of the posterior lies there.
    """
    values = np.asarray(draws, dtype=float).ravel()
    values = values[~np.isnan(values)]
    if values.size == 0:
        return {"mean": None, "median": None, "lo": None, "hi": None, "prob": prob}
    tail = (1.0 - prob) / 2.0
    with np.errstate(invalid="ignore"):  # quantiles between two infinities
        lo, median, hi = np.quantile(values, [tail, 0.5, 1.0 - tail])
    with np.errstate(invalid="ignore"):
        mean = float(np.mean(values))
    return {"mean": _number(mean), "median": _number(median), "lo": _number(lo),
            "hi": _number(hi), "prob": prob}


def _number(value: float):
    value = float(value)
    if np.isnan(value):
        return None
    if np.isinf(value):
        return value  # serialised as Infinity by json; the CLI maps it to null
    return value


def latency_draws(c1, c2, rps) -> np.ndarray:
    """Mean-latency draws, shape (samples, len(rps)); ``inf`` past saturation."""
    c1 = np.asarray(c1, dtype=float)[:, None]
    c2 = np.asarray(c2, dtype=float)[:, None]
    return latency(np.asarray(rps, dtype=float)[None, :], c1, c2)


def predictive_latency_draws(c1, c2, rps, noise_base, noise_load, rng, *,
                             curve=None) -> np.ndarray:
    """Draws of a new measured mean latency: the curve times the fitted log-noise."""
    if curve is None:
        curve = latency_draws(c1, c2, rps)
    rps = np.asarray(rps, dtype=float)[None, :]
    c2 = np.asarray(c2, dtype=float)[:, None]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        amplification = np.where(rps * c2 < 1, load_amplification_expr(rps, c2), np.inf)
        sigma = np.sqrt(np.asarray(noise_base)[:, None] ** 2
                        + (np.asarray(noise_load)[:, None] * amplification) ** 2)
        noise = rng.standard_normal(curve.shape) * sigma
        return np.where(np.isfinite(curve), curve * np.exp(noise), np.inf)


def group_latency_draws(fit, group: int, rps) -> np.ndarray:
    """Mean-latency draws (samples, rates) of one fitted group, by the fit's own law."""
    if "C1u" in fit.posterior:
        from .laws import moe_latency

        row = fit.groups.iloc[group]
        config = fit.model_config
        parts = [fit.draws(name, group)[:, None] for name in ("C1u", "C1s", "C2u", "C2s")]
        rps = np.asarray(rps, dtype=float)[None, :]
        if float(config.get("token_offset", 0.0)) != 0.0:
            raise BadInput("predictions for token_offset != 0 are not supported yet")
        return moe_latency(rps, *parts, float(row["experts_active"]),
                           float(row["experts_total"]), float(row["tokens_per_request"]))
    return latency_draws(fit.draws("C1", group), fit.draws("C2", group), rps)


def predict_group(fit, group: int, rps, *, prob: float = DEFAULT_PROB, seed: int = 0) -> dict:
    """CONTRACT ``predict``: latency with intervals at each rate for one group."""
    c1 = fit.draws("C1", group)
    c2 = fit.draws("C2", group)
    curve = group_latency_draws(fit, group, rps)
    rng = np.random.default_rng(seed)
    observed = predictive_latency_draws(c1, c2, rps, fit.draws("noise_base"),
                                        fit.draws("noise_load"), rng, curve=curve)
    points = []
    for j, rate in enumerate(np.asarray(rps, dtype=float)):
        points.append({
            "rps": float(rate),
            "latency_s": uncertain(curve[:, j], prob),
            "predictive_s": uncertain(observed[:, j], prob),
            "p_saturated": float(np.mean(rate * c2 >= 1.0)),
        })
    return {"group": fit.groups["label"].iloc[group], "points": points}


# --------------------------------------------------------------------------------------
# Speculative decoding decisions: speedup, crossover, best draft length
# --------------------------------------------------------------------------------------

COEFFICIENT_NAMES = ("c1p", "c1v", "c1d", "c2p", "c2v", "c2d")
# A draw in which only the dense baseline is saturated has an infinite speedup; in
# expectations it counts as this large finite value so one such draw cannot swamp a mean.
SPEEDUP_CAP = 1e3


@dataclass
class SpeculativeCosts:
    """Posterior draws needed to evaluate any (alpha, k) for one setup."""

    label: str
    decode_tokens: float
    c1_dense: np.ndarray
    c2_dense: np.ndarray
    coefficients: dict[str, np.ndarray] | None  # None for fits without the six coefficients
    per_config: dict[tuple[float, int], tuple[np.ndarray, np.ndarray]]

    def costs(self, alpha, k):
        """(C1_sd, C2_sd) draws broadcast against alpha and k (trailing axes)."""
        if self.coefficients is None:
            key = (round(float(alpha), 9), int(k))
            if key not in self.per_config:
                known = ", ".join(f"alpha {a:g} k {kk}" for a, kk in sorted(self.per_config))
                raise BadInput(f"this fit has no group at alpha {alpha:g}, k {k} for "
                               f"{self.label}; fit the speculative model to query any (alpha, k)"
                               f" (fitted: {known or 'none'})")
            return self.per_config[key]
        c = self.coefficients
        alpha = np.asarray(alpha, dtype=float)
        k = np.asarray(k, dtype=float)
        extra = max(alpha.ndim, k.ndim)
        shape = (-1,) + (1,) * extra
        return effective_costs(alpha, k, self.decode_tokens,
                               *(c[name].reshape(shape) for name in COEFFICIENT_NAMES))


def speculative_costs(fit, criteria: dict) -> SpeculativeCosts:
    """Collect the draws for the setup chosen by the CLI group options."""
    if "C1u" in fit.posterior:
        # Eq. (2) assumes the dense law; an MoE fit's latency follows eq. (4) instead.
        raise BadInput("speedup, crossover and kstar are not available for MoE fits yet "
                       "(their latency follows eq. 4, not eq. 1); use predict per group")
    if fit.model_name == "speculative" or "c1v" in fit.posterior:
        if fit.setups.empty:
            raise BadInput("this fit has no speculative rows (k > 0); nothing to compare")
        s = fit.select_setup(**criteria)
        setup = fit.setups.iloc[s]
        c1_dense = fit.draws("C1_dense", setup=s)
        if np.isnan(c1_dense).all():
            raise BadInput(f"setup '{setup['setup']}' has no dense baseline rows (k = 0) "
                           "to compare against")
        return SpeculativeCosts(
            label=str(setup["setup"]), decode_tokens=float(setup["decode_tokens"]),
            c1_dense=c1_dense, c2_dense=fit.draws("C2_dense", setup=s),
            coefficients={n: fit.draws(n, setup=s) for n in COEFFICIENT_NAMES},
            per_config={})
    # A per-configuration fit (e.g. the dense model over SD rows): only fitted (alpha, k).
    groups = fit.groups
    options = {k: v for k, v in criteria.items() if k not in {"k", "alpha", "drafter"}}
    dense_mask = groups["k"].to_numpy(int) == 0
    dense_table = groups.loc[dense_mask].reset_index()
    d = fit.select_group(_table=dense_table, **options)
    base = dense_table.iloc[d]
    same = np.ones(len(groups), dtype=bool)
    for column in ("verifier", "prefill_tokens", "decode_tokens", "gpu", "engine",
                   "engine_version"):
        if column in groups.columns:
            same &= (groups[column].astype(str) == str(base[column])).to_numpy()
    if criteria.get("drafter") is not None:
        same &= groups["drafter"].astype(str).str.lower().eq(
            str(criteria["drafter"]).lower()).to_numpy()
    per_config = {}
    for g in np.flatnonzero(same & ~dense_mask):
        key = (round(float(groups["alpha"].iloc[g]), 9), int(groups["k"].iloc[g]))
        per_config[key] = (fit.draws("C1", int(g)), fit.draws("C2", int(g)))
    return SpeculativeCosts(label=str(base["label"]),
                            decode_tokens=float(base["decode_tokens"]),
                            c1_dense=fit.draws("C1", int(base["index"])),
                            c2_dense=fit.draws("C2", int(base["index"])),
                            coefficients=None, per_config=per_config)


def _speedup_draws(c1_dense, c2_dense, c1_sd, c2_sd, rps) -> np.ndarray:
    """Speedup draws with saturation made explicit (see SPEEDUP_CAP)."""
    l_dense = latency(rps, c1_dense, c2_dense)
    l_sd = latency(rps, c1_sd, c2_sd)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = l_dense / l_sd
    both = np.isinf(l_dense) & np.isinf(l_sd)
    return np.where(both, 1.0, ratio)


def speedup_curve(costs: SpeculativeCosts, alpha: float, k: int, rps, *,
                  prob: float = DEFAULT_PROB) -> dict:
    """CONTRACT ``speedup``: speedup vs RPS with intervals, p_slower, C1R and C2R."""
    rps = np.asarray(rps, dtype=float)
    c1_sd, c2_sd = costs.costs(alpha, k)
    c1_sd, c2_sd = np.ravel(c1_sd), np.ravel(c2_sd)
    draws = _speedup_draws(costs.c1_dense[:, None], costs.c2_dense[:, None],
                           c1_sd[:, None], c2_sd[:, None], rps[None, :])
    points = [{"rps": float(r), "speedup": uncertain(draws[:, j], prob),
               "p_slower": float(np.mean(draws[:, j] < 1.0))}
              for j, r in enumerate(rps)]
    return {"setup": costs.label, "alpha": float(alpha), "k": int(k), "points": points,
            "C1R": uncertain(c1_sd / costs.c1_dense, prob),
            "C2R": uncertain(c2_sd / costs.c2_dense, prob)}


def crossover(costs: SpeculativeCosts, alpha: float, k: int, *,
              prob: float = DEFAULT_PROB) -> dict:
    """CONTRACT ``crossover``: the RPS* distribution over the draws that have one."""
    c1_sd, c2_sd = costs.costs(alpha, k)
    c1_sd, c2_sd = np.ravel(c1_sd), np.ravel(c2_sd)
    star = crossover_rps(costs.c1_dense, costs.c2_dense, c1_sd, c2_sd)
    has = np.isfinite(star)
    # Which way it crosses: SD faster below RPS* (the common case) or only above it.
    faster_below = c1_sd < costs.c1_dense
    return {
        "setup": costs.label, "alpha": float(alpha), "k": int(k),
        "rps_star": uncertain(star[has], prob) if has.any() else None,
        "p_crossover": float(has.mean()),
        "p_sd_faster_below": float(np.mean(faster_below[has])) if has.any() else None,
        "saturation_rps": uncertain(1.0 / c2_sd, prob),
        "dense_saturation_rps": uncertain(1.0 / costs.c2_dense, prob),
        "C1R": uncertain(c1_sd / costs.c1_dense, prob),
        "C2R": uncertain(c2_sd / costs.c2_dense, prob),
    }


def _lower_quantile(values: np.ndarray, q: float) -> np.ndarray:
    """Quantile along axis 0 by partial sort (several times faster than np.quantile)."""
    index = int(np.floor(q * (values.shape[0] - 1)))
    return np.partition(values, index, axis=0)[index]


def kstar_table(costs: SpeculativeCosts, alphas, rps, *, ks=range(0, 11),
                objective: str = "mean", prob: float = DEFAULT_PROB) -> dict:
    """CONTRACT ``kstar``: the best k per (alpha, RPS), its probability of being best.

    Candidates include k = 0 (do not speculate; speedup 1 by definition). ``objective``
    ``mean`` maximises the posterior expected speedup, ``q10`` its 10% quantile (the
    risk-averse choice). ``loss_vs_batch1`` is the expected speedup given up by running
    the k that is best at zero load instead.
    """
    if objective not in {"mean", "q10"}:
        raise BadInput(f"objective must be mean or q10, got {objective!r}", column="--objective")
    alphas = np.asarray(alphas, dtype=float)
    rps = np.asarray(rps, dtype=float)
    ks = np.asarray(list(ks), dtype=int)
    if costs.coefficients is None:
        raise BadInput("k* needs the speculative model (six cycle coefficients); "
                       "fit with --model speculative")
    sd_ks = ks[ks > 0]
    table = []
    c1d = costs.c1_dense[:, None, None]
    c2d = costs.c2_dense[:, None, None]
    for alpha in alphas:
        c1_sd, c2_sd = costs.costs(alpha, sd_ks)                     # (S, K)
        draws = _speedup_draws(c1d, c2d, c1_sd[:, :, None], c2_sd[:, :, None],
                               rps[None, None, :])                    # (S, K, R)
        if (ks == 0).any():
            draws = np.concatenate([np.ones_like(draws[:, :1]), draws], axis=1)
        capped = np.minimum(draws, SPEEDUP_CAP)
        expected = capped.mean(axis=0)                                # (K, R)
        score = expected if objective == "mean" else _lower_quantile(capped, 0.10)
        best = np.argmax(score, axis=0)                               # (R,)
        per_draw_best = np.argmax(capped, axis=1)                     # (S, R)
        # Zero-load speedup is C1_dense/C1_sd: the k a batch-1 benchmark would pick.
        zero_load = costs.c1_dense[:, None] / _c1_candidates(costs, alpha, ks)
        batch1 = int(np.argmax(np.minimum(zero_load, SPEEDUP_CAP).mean(axis=0)))
        for j, rate in enumerate(rps):
            b = best[j]
            table.append({
                "alpha": float(alpha), "rps": float(rate), "k": int(ks[b]),
                "p_best": float(np.mean(per_draw_best[:, j] == b)),
                "speedup": uncertain(draws[:, b, j], prob),
                "k_batch1": int(ks[batch1]),
                "loss_vs_batch1": float(expected[b, j] - expected[batch1, j]),
            })
    return {"setup": costs.label, "objective": objective, "ks": ks.tolist(), "table": table}


def _c1_candidates(costs: SpeculativeCosts, alpha: float, ks: np.ndarray) -> np.ndarray:
    """C1 of every candidate k (k = 0 is the dense baseline), shape (S, K)."""
    sd = ks[ks > 0]
    c1_sd, _ = costs.costs(alpha, sd)
    columns = []
    j = 0
    for k in ks:
        if k == 0:
            columns.append(costs.c1_dense)
        else:
            columns.append(c1_sd[:, j])
            j += 1
    return np.stack(columns, axis=1)


# --------------------------------------------------------------------------------------
# Comparing two fits (e.g. two engine versions)
# --------------------------------------------------------------------------------------

def _ratio_entry(ratio: np.ndarray, rope: float, prob: float) -> dict:
    return {"ratio": uncertain(ratio, prob),
            "p_increase": float(np.mean(ratio > 1.0)),
            "p_practically_higher": float(np.mean(ratio > 1.0 + rope)),
            "p_practically_lower": float(np.mean(ratio < 1.0 - rope)),
            "p_equivalent": float(np.mean(np.abs(ratio - 1.0) <= rope)),
            "verdict": _verdict(ratio, rope)}


def _verdict(ratio: np.ndarray, rope: float, level: float = 0.95) -> str:
    if np.mean(ratio > 1.0 + rope) >= level:
        return f"higher in B (by more than {rope:.0%})"
    if np.mean(ratio < 1.0 - rope) >= level:
        return f"lower in B (by more than {rope:.0%})"
    if np.mean(np.abs(ratio - 1.0) <= rope) >= level:
        return f"equivalent (within +-{rope:.0%})"
    return "uncertain: collect more data"


def compare_fits(fit_a, fit_b, *, rope: float = 0.02, prob: float = DEFAULT_PROB,
                 seed: int = 0) -> dict:
    """CONTRACT ``compare``: B relative to A for C1 and C2 of every shared group.

    The two posteriors are independent, so ratio draws pair each draw of B with a random
    draw of A. ``pooled`` parameters are the geometric mean ratio over shared groups.
    Speculative fits also compare the six cycle coefficients of shared setups.
    """
    if not 0.0 <= rope < 1.0:
        raise BadInput(f"must be within [0, 1), got {rope}", column="--rope")
    labels_a = list(fit_a.groups["label"])
    labels_b = list(fit_b.groups["label"])
    shared = [label for label in labels_a if label in labels_b]
    if not shared:
        raise BadInput("the two fits share no group (compare fits of the same verifier, "
                       "drafter, lengths and (alpha, k))")
    rng = np.random.default_rng(seed)
    parameters = {}
    pooled_logs = {"C1": [], "C2": []}
    for label in shared:
        a, b = labels_a.index(label), labels_b.index(label)
        for name in ("C1", "C2"):
            draws_b = fit_b.draws(name, b)
            draws_a = rng.choice(fit_a.draws(name, a), size=draws_b.size, replace=True)
            ratio = draws_b / draws_a
            parameters[f"{name}[{label}]"] = _ratio_entry(ratio, rope, prob)
            pooled_logs[name].append(np.log(ratio))
    for name, logs in pooled_logs.items():
        parameters[name] = _ratio_entry(np.exp(np.mean(logs, axis=0)), rope, prob)
    if not fit_a.setups.empty and not fit_b.setups.empty:
        setups_a = list(fit_a.setups["setup"])
        setups_b = list(fit_b.setups["setup"])
        for setup in (s for s in setups_a if s in setups_b):
            for name in COEFFICIENT_NAMES:
                draws_b = fit_b.draws(name, setup=setups_b.index(setup))
                draws_a = rng.choice(fit_a.draws(name, setup=setups_a.index(setup)),
                                     size=draws_b.size, replace=True)
                parameters[f"{name}[{setup}]"] = _ratio_entry(draws_b / draws_a, rope, prob)
    verdict = (f"C1 {parameters['C1']['verdict']}; C2 {parameters['C2']['verdict']} "
               f"(geometric mean over {len(shared)} shared groups)")
    return {"parameters": parameters, "verdict": verdict, "shared_groups": len(shared),
            "rope": rope, "prob": prob}


def compare_versions(fit, *, rope: float = 0.02, prob: float = DEFAULT_PROB) -> dict:
    """CONTRACT ``compare`` from one joint fit of two versions (``--by COLUMN``).

    Per base group, the ratio B/A is exp(version effect); ``C1``/``C2`` are the
    population ratios (the mean effect across groups, partially pooled).
    """
    if fit.model_name != "versions":
        raise BadInput("this fit is not a two-version fit; use compare A.nc B.nc or "
                       "compare DATA --by COLUMN")
    if not 0.0 <= rope < 1.0:
        raise BadInput(f"must be within [0, 1), got {rope}", column="--rope")
    bases = [str(b) for b in fit.posterior["base"].values]
    parameters = {}
    for name in ("C1", "C2"):
        draws = fit.draws(f"ratio_{name}")
        for j, base in enumerate(bases):
            parameters[f"{name}[{base}]"] = _ratio_entry(draws[:, j], rope, prob)
        parameters[name] = _ratio_entry(fit.draws(f"ratio_{name}_population"), rope, prob)
    levels = sorted(pd.unique(fit.data[fit.model_config["by"]].astype(str)))
    verdict = (f"{levels[1]} vs {levels[0]}: C1 {parameters['C1']['verdict']}; C2 "
               f"{parameters['C2']['verdict']} (population effect over {len(bases)} groups)")
    return {"parameters": parameters, "verdict": verdict, "shared_groups": len(bases),
            "a": levels[0], "b": levels[1], "rope": rope, "prob": prob}
