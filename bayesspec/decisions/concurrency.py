"""Answers on the concurrency axis: a closed loop of N clients (``vllm bench serve
--max-concurrency N``, GuideLLM's ``concurrent`` profile), CONTRACT ``predict
--concurrency`` and ``kstar --concurrency``.

The law is one law in either axis: with N = RPS x L (Little's law), eq. (1) reads
L = C1 + C2 N, and past the engine's cap the extra requests wait for a slot
(:meth:`bayesspec.prediction.Curve.latency_at_concurrency`). A level's answer is the mean
latency and the throughput it gives, N / L. At a fixed N the server is compared with the
same number of requests in flight, so SD's speedup there is both a latency ratio and a
throughput ratio, L_dense(N) / L_sd(N).

Extrapolation is judged at the same boundary every rate answer uses, the highest fitted
point of the curves an answer rests on, read on the axis it was measured on: where those
curves were fitted to closed-loop points (``max_concurrency``), a level above their
highest fitted level is marked; otherwise (open-loop sweeps) a level whose throughput
(its median over the draws) lies above their highest fitted rate (``rps_fitted_max``).
A closed-loop point's measured throughput and the law's at its level differ by the
point's noise, so the rate alone marks the highest measured level itself whenever the
law's throughput there comes out above the measured one (seen on a simulated sweep fitted
up to 64 clients: 19.66 against 19.63 RPS). A configuration outside the measured design
is marked at every level.
"""

from __future__ import annotations

import numpy as np

from bayesspec.decisions.speculative import SPEEDUP_CAP, measured_section
from bayesspec.errors import BadInput
from bayesspec.uncertainty import DEFAULT_PROB, uncertain

__all__ = ["check_levels", "fitted_levels", "predict_concurrency", "kstar_at_concurrency"]

#: The columns that name a setup (verifier, lengths, hardware, engine), whatever its k.
SETUP_SELECTORS = {"verifier": "verifier", "prefill": "prefill_tokens",
                   "decode": "decode_tokens", "gpu": "gpu", "engine_version": "engine_version"}


def check_levels(levels, *, option: str = "--concurrency") -> np.ndarray:
    """Concurrency levels as floats: whole numbers of clients >= 1, or a one-line error."""
    levels = np.asarray(levels, dtype=float).ravel()
    if levels.size == 0 or not np.all(np.isfinite(levels)) or np.any(levels < 1) \
            or np.any(levels != np.round(levels)):
        shown = ", ".join(f"{v:g}" for v in levels[:5])
        raise BadInput(f"must be whole numbers of clients >= 1, got {shown}", option=option)
    return levels


def _matches(column, value) -> np.ndarray:
    try:
        return np.isclose(column.astype(float).to_numpy(), float(value), rtol=1e-9)
    except (TypeError, ValueError):
        return column.astype(str).str.strip().str.lower().eq(
            str(value).strip().lower()).to_numpy()


def fitted_levels(fit, criteria: dict | None = None, *, group: int | None = None) -> dict:
    """Per draft length k, the highest concurrency level among the closed-loop points that
    entered the fit (``max_concurrency``), for one fitted ``group`` or for every group of
    the setup the group options in ``criteria`` name; empty when no fitted point is
    closed-loop."""
    data = fit.data
    if "max_concurrency" not in data.columns:
        return {}
    groups = fit.groups
    if group is not None:
        chosen = groups.iloc[[group]]
    else:
        mask = np.ones(len(groups), dtype=bool)
        for option, value in (criteria or {}).items():
            column = SETUP_SELECTORS.get(option)
            if value is not None and column in groups.columns:
                mask &= _matches(groups[column], value)
        chosen = groups.loc[mask]
    rows = data.loc[data["group"].isin(set(chosen["label"]))
                    & ~data["excluded"].astype(bool)]
    levels = rows.assign(level=lambda r: np.asarray(
        r["max_concurrency"].astype(float))).dropna(subset=["level"])
    return {int(k): float(v) for k, v in levels.groupby("k")["level"].max().items()}


def _latency(curve, levels: np.ndarray) -> np.ndarray:
    """(S, R) mean-latency draws of a closed loop at each level."""
    latency = np.asarray(curve.latency_at_concurrency(levels), dtype=float)
    return latency.reshape(-1, levels.size)


def _top(value) -> float | None:
    value = float(value)
    return value if np.isfinite(value) else None


def predict_concurrency(fit, group: int, levels, *, prob: float = DEFAULT_PROB) -> dict:
    """The group's law read on the concurrency axis: per level the mean latency and the
    throughput it gives, N / L, each with its interval; ``p_past_cap`` is the share of
    draws in which the level exceeds the engine's cap (requests wait for a batch slot;
    0 when the cap is unknown). ``extrapolated``: above the group's highest fitted level
    (``concurrency_fitted_max``), or for a group fitted to open-loop points, a median
    throughput above its highest fitted rate."""
    levels = check_levels(levels)
    curve = fit.group_curve(group)
    latency = _latency(curve, levels)
    throughput = levels / latency
    top = float(curve.rps_fitted_max)
    top_level = max(fitted_levels(fit, group=group).values(), default=None)
    # the engine's cap, not a limit the answer admits above the measured levels
    engine_cap = getattr(curve, "engine_cap", getattr(curve, "cap", None))
    cap = None if engine_cap is None else np.ravel(engine_cap)
    points = []
    for j, level in enumerate(levels):
        rate = float(np.nanmedian(throughput[:, j]))
        points.append({
            "concurrency": int(level),
            "latency_s": uncertain(latency[:, j], prob),
            "rps": uncertain(throughput[:, j], prob),
            "p_past_cap": float(np.mean(level > cap)) if cap is not None else 0.0,
            "extrapolated": bool(level > top_level if top_level is not None
                                 else np.isfinite(top) and rate > top),
        })
    return {"group": fit.groups["label"].iloc[group], "metric": "mean",
            "axis": "concurrency", "concurrency_fitted_max": top_level,
            "rps_fitted_max": _top(top),
            "rps_measured_max": _top(top),
            "ceiling_rps": uncertain(np.ravel(curve.ceiling), prob),
            "ceiling_binding": curve.ceiling_binding, "points": points}


def kstar_at_concurrency(law, alphas, levels, *, ks=range(0, 11), objective: str = "mean",
                         prob: float = DEFAULT_PROB, fitted: dict | None = None) -> dict:
    """CONTRACT ``kstar --concurrency``: the best k per (alpha, concurrency level).

    Each candidate k (k = 0: do not speculate) is the law's curve at (alpha, k) read at
    N requests in flight; the best k maximises the posterior expected speedup
    L_dense(N) / L_k(N) (``objective`` ``mean``) or its 10% quantile (``q10``), and
    ``p_best`` is the share of draws in which it has the lowest latency. A row carries
    the chosen k's latency and throughput N / L. It is ``extrapolated`` when the level
    lies above the highest fitted level of the dense baseline or the chosen k
    (``fitted``: k -> level, :func:`fitted_levels`), or, for curves fitted to open-loop
    points, when the higher of the two throughputs it compares (medians) lies above their
    highest fitted rate; and wherever the configuration is outside the measured design
    (:meth:`bayesspec.prediction.Law.extrapolated`)."""
    if objective not in {"mean", "q10"}:
        raise BadInput(f"objective must be mean or q10, got {objective!r}",
                       argument="objective")
    levels = check_levels(levels)
    alphas = np.asarray(alphas, dtype=float)
    ks = np.asarray(list(ks), dtype=int)
    if not law.answers_any_configuration:
        raise BadInput("k* needs the speculative model (six cycle coefficients); "
                       "fit with --model speculative")
    dense_latency = _latency(law.dense, levels)                        # (S, R)
    table = []
    for alpha in alphas:
        latency = np.stack([dense_latency if k == 0 else _latency(law.sd(alpha, int(k)),
                                                                   levels)
                            for k in ks], axis=1)                      # (S, K, R)
        with np.errstate(divide="ignore", invalid="ignore"):
            speedup = np.where(np.isfinite(latency), dense_latency[:, None, :] / latency,
                               0.0)
        capped = np.minimum(np.nan_to_num(speedup, nan=0.0), SPEEDUP_CAP)
        score = (capped.mean(axis=0) if objective == "mean"
                 else np.quantile(capped, 0.10, axis=0))               # (K, R)
        best = np.argmax(score, axis=0)
        per_draw_best = np.argmax(capped, axis=1)                      # (S, R)
        for j, level in enumerate(levels):
            b = int(best[j])
            chosen = int(ks[b])
            rate = level / latency[:, b, j]
            dense_rate = float(np.nanmedian(level / dense_latency[:, j]))
            judged = max(float(np.nanmedian(rate)), dense_rate)
            measured = law.measured(alpha, chosen)
            tops = [fitted[c] for c in {0, chosen} if c in (fitted or {})]
            top_level = min(tops) if len(tops) == len({0, chosen}) else None
            if top_level is not None:
                extrapolated = bool(level > top_level or measured["design_extrapolated"])
            else:
                extrapolated = bool(law.extrapolated(judged, alpha, chosen))
            table.append({
                "alpha": float(alpha), "concurrency": int(level), "k": chosen,
                "p_best": float(np.mean(per_draw_best[:, j] == b)),
                "speedup": uncertain(speedup[:, b, j], prob),
                "latency_s": uncertain(latency[:, b, j], prob),
                "rps": uncertain(rate, prob),
                "at_max_k": bool(chosen == ks.max() and chosen > 0),
                "extrapolated": extrapolated,
                "concurrency_fitted_max": top_level,
                "rps_fitted_max": _top(measured["rps_fitted_max"]),
                "design_notes": measured["design_notes"],
            })
    dense_top = law.measured(None, 0)["rps_fitted_max"]
    return {"setup": law.label, "objective": objective, "axis": "concurrency",
            "ks": ks.tolist(), "table": table,
            "rps_fitted_max": _top(dense_top), "rps_measured_max": _top(dense_top),
            "measured": measured_section(law, alphas[0] if len(alphas) else None,
                                         int(ks.max()))}
