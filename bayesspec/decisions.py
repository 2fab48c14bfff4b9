"""Posterior summaries and predictions: numbers with their uncertainty.

Every function works on whole arrays of draws (no Python loop over draws) and returns
plain dicts in the JSON shapes of CONTRACT.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .errors import BadInput
from .laws import (crossover_rps, effective_costs, latency, load_amplification_expr,
                   moe_latency, verification_tokens)

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
        row = fit.groups.iloc[group]
        parts = [fit.draws(name, group)[:, None] for name in ("C1u", "C1s", "C2u", "C2s")]
        rps = np.asarray(rps, dtype=float)[None, :]
        m, M = float(row["experts_active"]), float(row["experts_total"])
        if not np.isfinite(m + M):  # a dense verifier inside an MoE-split fit: no split
            m, M = 0.0, 1.0
        return moe_latency(rps, *parts, m, M, float(row["tokens_per_request"]),
                           token_offset=_moe_token_offset(fit))
    return latency_draws(fit.draws("C1", group), fit.draws("C2", group), rps)


def _moe_token_offset(fit) -> float:
    """T = offset + RPS*L*tokens: the offset the fit was made with (moe or speculative)."""
    config = fit.model_config
    return float(config.get("token_offset", config.get("moe_token_offset", 0.0)))


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
class MoELaw:
    """What eq. (4) needs besides the costs, for the MoE verifier of one setup.

    A speculative fit gives the fully covered costs of any (alpha, k) through eq. (3)
    and the learned shares split them (``sd_shares``); a per-configuration ``moe`` fit
    gives the split costs of the (alpha, k) it has groups for (``per_config_parts``).
    """

    m: float
    M: float
    token_offset: float
    verify_tokens: str
    dense_parts: tuple[np.ndarray, ...]          # C1u, C1s, C2u, C2s of the dense baseline
    sd_shares: tuple[np.ndarray, np.ndarray] | None = None
    per_config_parts: dict | None = None         # (alpha, k) -> (C1u, C1s, C2u, C2s, tokens)


@dataclass
class SpeculativeCosts:
    """Posterior draws needed to evaluate any (alpha, k) for one setup."""

    label: str
    decode_tokens: float
    c1_dense: np.ndarray
    c2_dense: np.ndarray
    coefficients: dict[str, np.ndarray] | None  # None for fits without the six coefficients
    per_config: dict[tuple[float, int], tuple[np.ndarray, np.ndarray]]
    moe: MoELaw | None = None                   # set when the verifier is sparse (eq. 4)

    def costs(self, alpha, k):
        """(C1_sd, C2_sd) draws broadcast against alpha and k (trailing axes).

        For an MoE verifier of a speculative fit these are the fully covered costs
        (split by the learned shares in :meth:`sd_latency`)."""
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

    # ---------------------------------------------------------------- MoE verifiers
    def _sd_parts(self, alpha, k):
        """C1u, C1s, C2u, C2s draws (S[, K]) and tokens per request ([K]) of SD at k."""
        law = self.moe
        if law.per_config_parts is not None:
            self.costs(alpha, k)  # the same "no group at (alpha, k)" error
            return law.per_config_parts[(round(float(alpha), 9), int(k))]
        c1, c2 = self.costs(alpha, k)
        s1, s2 = (share.reshape((-1,) + (1,) * (np.ndim(c1) - 1)) for share in law.sd_shares)
        return (c1 * (1 - s1), c1 * s1, c2 * (1 - s2), c2 * s2,
                verification_tokens(k, law.verify_tokens))

    def _moe_latency(self, rps, c1u, c1s, c2u, c2s, tokens):
        law = self.moe
        rps = np.asarray(rps, dtype=float)
        lift = (lambda a: np.asarray(a)[..., None]) if rps.ndim else (lambda a: a)
        return moe_latency(rps, lift(c1u), lift(c1s), lift(c2u), lift(c2s), law.m, law.M,
                           lift(tokens), token_offset=law.token_offset)

    def dense_latency(self, rps) -> np.ndarray:
        """Dense mean-latency draws, shape (S, R) for rates (R,), (S,) for a scalar;
        rates (S, R) give row s at draw s."""
        if self.moe is None:
            rps = np.asarray(rps, dtype=float)
            if rps.ndim:
                return latency(rps, self.c1_dense[:, None], self.c2_dense[:, None])
            return latency(rps, self.c1_dense, self.c2_dense)
        return self._moe_latency(rps, *self.moe.dense_parts, 1.0)

    def sd_latency(self, alpha, k, rps) -> np.ndarray:
        """SD mean-latency draws, shape (S[, K], R) for k scalar (or (K,)) and rates (R,)."""
        if self.moe is None:
            c1, c2 = self.costs(alpha, k)
            rps = np.asarray(rps, dtype=float)
            if rps.ndim:
                return latency(rps, np.asarray(c1)[..., None], np.asarray(c2)[..., None])
            return latency(rps, c1, c2)
        return self._moe_latency(rps, *self._sd_parts(alpha, k))

    def zero_load(self, alpha, k):
        """(C1, C2) that C1R and C2R compare: the zero-load latency and the saturation
        cost (for an MoE verifier the latency at RPS -> 0 and the fully covered C2)."""
        c1, c2 = self.costs(alpha, k)
        if self.moe is None:
            return c1, c2
        if self.moe.per_config_parts is None:  # speculative fit: c1 is fully covered
            c1 = self.sd_latency(alpha, k, 0.0)
        return c1, c2

    def dense_zero_load(self) -> np.ndarray:
        return self.c1_dense if self.moe is None else self.dense_latency(0.0)

    def speedup_draws(self, alpha, k, rps) -> np.ndarray:
        """L_dense/L_sd draws, shape (S[, K], R); saturation as in :func:`_speedup_draws`."""
        rps = np.asarray(rps, dtype=float)
        if self.moe is None:
            c1_sd, c2_sd = self.costs(alpha, k)
            c1_sd, c2_sd = np.asarray(c1_sd)[..., None], np.asarray(c2_sd)[..., None]
            extra = (1,) * (c1_sd.ndim - 1)
            return _speedup_draws(self.c1_dense.reshape(-1, *extra),
                                  self.c2_dense.reshape(-1, *extra), c1_sd, c2_sd, rps)
        l_dense = self.dense_latency(rps)
        l_sd = self.sd_latency(alpha, k, rps)
        if l_sd.ndim == 3:
            l_dense = l_dense[:, None, :]
        return _ratio_of_latencies(l_dense, l_sd)

    def crossover_draws(self, alpha, k) -> np.ndarray:
        """RPS* per draw (nan without a crossover below both saturation rates)."""
        c1_sd, c2_sd = self.costs(alpha, k)
        c1_sd, c2_sd = np.ravel(c1_sd), np.ravel(c2_sd)
        if self.moe is None:
            return crossover_rps(self.c1_dense, self.c2_dense, c1_sd, c2_sd)
        return _first_crossing(lambda rates: self.sd_latency(alpha, k, rates),
                               self.dense_latency,
                               np.minimum(1.0 / self.c2_dense, 1.0 / c2_sd))


def _first_crossing(sd_latency, dense_latency, ceiling: np.ndarray, *, grid: int = 48,
                    steps: int = 44) -> np.ndarray:
    """Lowest rate where L_sd = L_dense below ``ceiling`` (per draw), else nan.

    The latency functions take rates of shape (S, G), row s for draw s.

    The MoE law has no closed form: the sign of log(L_sd/L_dense) is scanned on a grid of
    fractions of each draw's ceiling (the lower saturation rate, where one latency
    diverges) and the first change is refined by bisection, all draws at once. The
    dense-law closed form admits one crossing; eq. (4) can bend the curves into more,
    and the first is the one a deployment meets when load rises.
    """
    fractions = np.append(np.arange(grid) / grid, 1.0 - 1e-9)
    rates = ceiling[:, None] * fractions[None, :]                      # (S, G)
    with np.errstate(divide="ignore", invalid="ignore"):
        gap = np.log(sd_latency(rates)) - np.log(dense_latency(rates))
    start = np.sign(gap[:, 0])
    changed = (np.sign(gap) != start[:, None]) & (start[:, None] != 0) & ~np.isnan(gap)
    has = changed.any(axis=1)
    first = np.argmax(changed, axis=1)
    draws = np.arange(len(ceiling))
    lo = rates[draws, np.maximum(first - 1, 0)]
    hi = rates[draws, first]
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            sign = np.sign(np.log(sd_latency(mid[:, None]))
                           - np.log(dense_latency(mid[:, None])))[:, 0]
        same = sign == start
        lo = np.where(same, mid, lo)
        hi = np.where(same, hi, mid)
    return np.where(has, 0.5 * (lo + hi), np.nan)


def speculative_costs(fit, criteria: dict) -> SpeculativeCosts:
    """Collect the draws for the setup chosen by the CLI group options."""
    if fit.model_name == "speculative" or "c1v" in fit.posterior:
        if fit.setups.empty:
            raise BadInput("this fit has no speculative rows (k > 0); nothing to compare")
        s = fit.select_setup(**criteria)
        setup = fit.setups.iloc[s]
        c1_dense = fit.draws("C1_dense", setup=s)
        if np.isnan(c1_dense).all():
            raise BadInput(f"setup '{setup['setup']}' has no dense baseline rows (k = 0) "
                           "to compare against")
        costs = SpeculativeCosts(
            label=str(setup["setup"]), decode_tokens=float(setup["decode_tokens"]),
            c1_dense=c1_dense, c2_dense=fit.draws("C2_dense", setup=s),
            coefficients={n: fit.draws(n, setup=s) for n in COEFFICIENT_NAMES},
            per_config={})
        if "share_C1s" in fit.posterior and bool(setup.get("moe_split", False)):
            costs.moe = _split_moe_law(fit, s, setup, costs)
        return costs
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
    members = {}
    for g in np.flatnonzero(same & ~dense_mask):
        key = (round(float(groups["alpha"].iloc[g]), 9), int(groups["k"].iloc[g]))
        per_config[key] = (fit.draws("C1", int(g)), fit.draws("C2", int(g)))
        members[key] = int(g)
    costs = SpeculativeCosts(label=str(base["label"]),
                             decode_tokens=float(base["decode_tokens"]),
                             c1_dense=fit.draws("C1", int(base["index"])),
                             c2_dense=fit.draws("C2", int(base["index"])),
                             coefficients=None, per_config=per_config)
    if "C1u" in fit.posterior:
        costs.moe = _per_config_moe_law(fit, int(base["index"]), members)
    return costs


MOE_PARTS = ("C1u", "C1s", "C2u", "C2s")


def _split_moe_law(fit, s: int, setup, costs: SpeculativeCosts) -> MoELaw:
    """Eq. (4) for a speculative fit of a sparse verifier: the fully covered costs of any
    (alpha, k) split by the setup's learned shares (bayesspec.bayes.moe_split)."""
    config = fit.model_config
    share_c1 = fit.draws("share_C1s_dense", setup=s)
    share_c2 = fit.draws("share_C2s_dense", setup=s)
    c1, c2 = costs.c1_dense, costs.c2_dense
    return MoELaw(m=float(setup["experts_active"]), M=float(setup["experts_total"]),
                  token_offset=float(config.get("moe_token_offset", 0.0)),
                  verify_tokens=str(config.get("moe_verify_tokens", "k+1")),
                  dense_parts=(c1 * (1 - share_c1), c1 * share_c1,
                               c2 * (1 - share_c2), c2 * share_c2),
                  sd_shares=(fit.draws("share_C1s", setup=s), fit.draws("share_C2s", setup=s)))


def _per_config_moe_law(fit, dense_group: int, members: dict) -> MoELaw:
    """Eq. (4) for a per-configuration moe fit: each fitted group's own split costs."""
    row = fit.groups.iloc[dense_group]
    config = fit.model_config
    parts = {key: tuple(fit.draws(name, g) for name in MOE_PARTS)
             + (float(fit.groups["tokens_per_request"].iloc[g]),)
             for key, g in members.items()}
    return MoELaw(m=float(row["experts_active"]), M=float(row["experts_total"]),
                  token_offset=_moe_token_offset(fit),
                  verify_tokens=str(config.get("verify_tokens", "k+1")),
                  dense_parts=tuple(fit.draws(name, dense_group) for name in MOE_PARTS),
                  per_config_parts=parts)


def _ratio_of_latencies(l_dense, l_sd) -> np.ndarray:
    """L_dense/L_sd; 1 where both are saturated (see SPEEDUP_CAP for one side)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = l_dense / l_sd
    both = np.isinf(l_dense) & np.isinf(l_sd)
    return np.where(both, 1.0, ratio)


def _speedup_draws(c1_dense, c2_dense, c1_sd, c2_sd, rps) -> np.ndarray:
    """Speedup draws with saturation made explicit (see SPEEDUP_CAP)."""
    return _ratio_of_latencies(latency(rps, c1_dense, c2_dense), latency(rps, c1_sd, c2_sd))


def speedup_curve(costs: SpeculativeCosts, alpha: float, k: int, rps, *,
                  prob: float = DEFAULT_PROB) -> dict:
    """CONTRACT ``speedup``: speedup vs RPS with intervals, p_slower, C1R and C2R."""
    rps = np.asarray(rps, dtype=float)
    draws = costs.speedup_draws(alpha, k, rps)
    c1_sd, c2_sd = (np.ravel(v) for v in costs.zero_load(alpha, k))
    points = [{"rps": float(r), "speedup": uncertain(draws[:, j], prob),
               "p_slower": float(np.mean(draws[:, j] < 1.0))}
              for j, r in enumerate(rps)]
    return {"setup": costs.label, "alpha": float(alpha), "k": int(k), "points": points,
            "C1R": uncertain(c1_sd / costs.dense_zero_load(), prob),
            "C2R": uncertain(c2_sd / costs.c2_dense, prob)}


def crossover(costs: SpeculativeCosts, alpha: float, k: int, *,
              prob: float = DEFAULT_PROB) -> dict:
    """CONTRACT ``crossover``: the RPS* distribution over the draws that have one.

    For an MoE verifier RPS* is the lowest rate where the two eq. (4) latencies meet
    below both saturation rates (found numerically, all draws at once)."""
    c1_sd, c2_sd = (np.ravel(v) for v in costs.zero_load(alpha, k))
    c1_dense = costs.dense_zero_load()
    star = costs.crossover_draws(alpha, k)
    has = np.isfinite(star)
    # Which way it crosses: SD faster below RPS* (the common case) or only above it.
    faster_below = c1_sd < c1_dense
    return {
        "setup": costs.label, "alpha": float(alpha), "k": int(k),
        "rps_star": uncertain(star[has], prob) if has.any() else None,
        "p_crossover": float(has.mean()),
        "p_sd_faster_below": float(np.mean(faster_below[has])) if has.any() else None,
        "saturation_rps": uncertain(1.0 / c2_sd, prob),
        "dense_saturation_rps": uncertain(1.0 / costs.c2_dense, prob),
        "C1R": uncertain(c1_sd / c1_dense, prob),
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
    the k that is best at zero load instead. An MoE verifier's latencies follow eq. (4).
    """
    if objective not in {"mean", "q10"}:
        raise BadInput(f"objective must be mean or q10, got {objective!r}", argument="objective")
    alphas = np.asarray(alphas, dtype=float)
    rps = np.asarray(rps, dtype=float)
    ks = np.asarray(list(ks), dtype=int)
    if costs.coefficients is None:
        raise BadInput("k* needs the speculative model (six cycle coefficients); "
                       "fit with --model speculative")
    sd_ks = ks[ks > 0]
    table = []
    for alpha in alphas:
        draws = costs.speedup_draws(alpha, sd_ks, rps)                # (S, K, R)
        if (ks == 0).any():
            draws = np.concatenate([np.ones_like(draws[:, :1]), draws], axis=1)
        capped = np.minimum(draws, SPEEDUP_CAP)
        expected = capped.mean(axis=0)                                # (K, R)
        score = expected if objective == "mean" else _lower_quantile(capped, 0.10)
        best = np.argmax(score, axis=0)                               # (R,)
        per_draw_best = np.argmax(capped, axis=1)                     # (S, R)
        # Zero-load speedup is C1_dense/C1_sd: the k a batch-1 benchmark would pick.
        zero_load = costs.dense_zero_load()[:, None] / _c1_candidates(costs, alpha, ks)
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
    """Zero-load latency of every candidate k (k = 0 is the dense baseline), (S, K)."""
    sd = ks[ks > 0]
    c1_sd, _ = costs.zero_load(alpha, sd)
    columns = []
    j = 0
    for k in ks:
        if k == 0:
            columns.append(costs.dense_zero_load())
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
        raise BadInput(f"must be within [0, 1), got {rope}", argument="rope")
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
    population ratios (the mean effect across groups, partially pooled). A speculative
    two-version fit also compares the six cycle coefficients
    (:func:`_compare_speculative_versions`).
    """
    if fit.model_name not in {"versions", "speculative_versions"}:
        raise BadInput("this fit is not a two-version fit; use compare A.nc B.nc or "
                       "compare DATA --by COLUMN")
    if not 0.0 <= rope < 1.0:
        raise BadInput(f"must be within [0, 1), got {rope}", argument="rope")
    if fit.model_name == "speculative_versions":
        return _compare_speculative_versions(fit, rope=rope, prob=prob)
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


def _compare_speculative_versions(fit, *, rope: float, prob: float) -> dict:
    """``compare`` from a speculative two-version fit (``SpeculativeVersionEffectModel``).

    ``c1p..c2d``: population ratios of the six cycle coefficients (the mean log effect
    across base setups), then per base setup when there are several. ``C1``/``C2``: the
    dense baseline's population ratio when the data have dense rows, otherwise the
    geometric mean over SD configurations; ``C1_sd``/``C2_sd``: the geometric mean ratio
    of the effective costs over every SD configuration measured in both versions (eq. 3
    at each configuration's own alpha and k). Draws are paired: one joint posterior.
    """
    posterior = fit.posterior
    groups = fit.groups
    levels = sorted(pd.unique(fit.data[fit.model_config["by"]].astype(str)))
    base_setups = [str(b) for b in posterior["base_setup"].values]
    has_dense = "ratio_C1_dense" in posterior
    parameters = {}
    # Effective-cost ratios per SD configuration, paired by the group without version.
    sd = groups["is_sd"].to_numpy(bool)
    version = groups["version_index"].to_numpy(int)
    index_b = {base: g for g, base in enumerate(groups["base"]) if version[g] == 1}
    pairs = [(g, index_b[base]) for g, base in enumerate(groups["base"])
             if sd[g] and version[g] == 0 and base in index_b]
    headline = {}
    for name in ("C1", "C2"):
        draws = fit.draws(name)
        logs = np.stack([np.log(draws[:, b] / draws[:, a]) for a, b in pairs], axis=1)
        headline[f"{name}_sd"] = np.exp(logs.mean(axis=1))
        headline[name] = (fit.draws(f"ratio_{name}_dense_population") if has_dense
                          else headline[f"{name}_sd"])
    for name in ("C1", "C2", "C1_sd", "C2_sd"):
        parameters[name] = _ratio_entry(headline[name], rope, prob)
    from .bayes.versions import SpeculativeVersionEffectModel, version_effect_prior_sd

    config = {**SpeculativeVersionEffectModel.default_config, **fit.model_config}
    prior_population, prior_setup = version_effect_prior_sd(config, len(base_setups))
    population = {name: fit.draws(f"ratio_{name}_population") for name in COEFFICIENT_NAMES}
    for name, draws in population.items():
        parameters[name] = _identified(_ratio_entry(draws, rope, prob), draws,
                                       prior_population)
    if len(base_setups) > 1:
        for name in COEFFICIENT_NAMES:
            draws = fit.draws(f"ratio_{name}")
            for j, base in enumerate(base_setups):
                parameters[f"{name}[{base}]"] = _identified(
                    _ratio_entry(draws[:, j], rope, prob), draws[:, j], prior_setup)
    tradeoffs = _tradeoffs(population)
    if has_dense:
        base_baselines = [str(b) for b in posterior["base_baseline"].values]
        if len(base_baselines) > 1:
            for name in ("C1", "C2"):
                draws = fit.draws(f"ratio_{name}_dense")
                for j, base in enumerate(base_baselines):
                    parameters[f"{name}[{base}]"] = _ratio_entry(draws[:, j], rope, prob)
    summary = ("C1", "C2") + COEFFICIENT_NAMES
    by_verdict: dict[str, list[str]] = {}
    for name in summary:
        by_verdict.setdefault(parameters[name]["verdict"], []).append(name)
    order = sorted(by_verdict, key=lambda v: (not v.startswith(("higher", "lower")),
                                              v.startswith("uncertain"),
                                              v.startswith("not identified"), v))
    flagged = {n for n in COEFFICIENT_NAMES
               if parameters[n]["verdict"].startswith(("higher", "lower"))}
    notes = []
    for tradeoff in tradeoffs:
        a, b = tradeoff["parameters"]
        if {a, b} & flagged:
            notes.append(f"{a} and {b} trade off (correlation {tradeoff['correlation']:+.2f}):"
                         f" read them together with {a[:2].upper()}_sd")
    verdict = (f"{levels[1]} vs {levels[0]}: "
               + "; ".join(f"{', '.join(by_verdict[v])} {v}" for v in order)
               + f" (population effects over {len(base_setups)} SD setup(s); C1, C2 of the "
               + ("dense baseline)" if has_dense else "SD configurations)")
               + "".join(f"; {note}" for note in notes))
    return {"parameters": parameters, "verdict": verdict, "shared_groups": len(pairs),
            "setups": len(base_setups), "headline": "dense" if has_dense else "sd",
            "tradeoffs": tradeoffs,
            "a": levels[0], "b": levels[1], "rope": rope, "prob": prob}


# Below this share of the prior variance removed by the data, a version effect's
# posterior is mostly its prior: "uncertain: collect more data" would mislead, since
# more sweeps of the same design do not separate it (c1p at one (prefill, decode) pair).
IDENTIFIED_CONTRACTION = 0.5
# Log effects this anti-correlated are separated by the design only through their sum
# (c2p vs c2v at one decode length): a flag on one alone is half the story.
TRADEOFF_CORRELATION = -0.7


def _identified(entry: dict, ratio: np.ndarray, prior_sd: float) -> dict:
    """Add ``prior_contraction`` (1 - posterior/prior variance of the log effect) and,
    when the data barely moved the prior, say so instead of asking for more data."""
    contraction = 1.0 - float(np.var(np.log(ratio))) / prior_sd ** 2
    entry["prior_contraction"] = contraction
    if contraction < IDENTIFIED_CONTRACTION and entry["verdict"].startswith("uncertain"):
        entry["verdict"] = ("not identified: the posterior is mostly the prior (more "
                            "sweeps of this design will not separate it)")
    return entry


def _tradeoffs(population: dict) -> list[dict]:
    """Pairs of same-side coefficients (c1*, c2*) whose log effects are strongly
    anti-correlated in the posterior."""
    names = list(population)
    logs = np.log(np.stack([population[n] for n in names]))
    with np.errstate(invalid="ignore", divide="ignore"):
        correlation = np.corrcoef(logs)
    found = []
    for i, a in enumerate(names):
        for j in range(i + 1, len(names)):
            b = names[j]
            r = float(correlation[i, j])
            if a[:2] == b[:2] and np.isfinite(r) and r <= TRADEOFF_CORRELATION:
                found.append({"parameters": [a, b], "correlation": r})
    return found
