"""The engine's concurrency cap in a fit (docs/laws.md, "the concurrency cap").

Per group: the cap the engine limits set and the slot queue's wait scale, whether the cap
can move the latency of the measured points (else it stays out of the likelihood), how
far it moves eq. (1) in each posterior draw, the importance weights that check a cap left
out on the fitted points' evidence, and the cap a fitted group answers with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from bayesspec.bayes.cap_prior import LEARNED_CAP
from bayesspec.data import ENGINE_LIMIT_COLUMNS, concurrency_caps
from bayesspec.data.saturation import closed_loop_rows
from bayesspec.laws import capped_latency, latency, queue_wait_scale

if TYPE_CHECKING:
    from bayesspec.inference.fitfile import Fit


def group_caps(rows: pd.DataFrame, group_index: np.ndarray, n_groups: int):
    """Per group, the engine's concurrency cap (``inf`` when unknown), which limit sets it
    (:func:`bayesspec.data.concurrency_caps`; one value per group, checked on read), and
    the slot queue's wait scale (:func:`bayesspec.laws.queue_wait_scale`) from the spread
    of request times at the group's lightest load, where a request's latency is its time
    in the batch (1 when the file has no spread)."""
    caps, sources = concurrency_caps(rows)
    rps = rows["rps"].to_numpy(float)
    spread = (pd.to_numeric(rows["latency_std_s"], errors="coerce").to_numpy(float)
              / rows["latency_mean_s"].to_numpy(float)
              if "latency_std_s" in rows.columns else np.full(len(rows), np.nan))
    cap = np.full(n_groups, np.inf)
    source = [""] * n_groups
    wait = np.ones(n_groups)
    for g in range(n_groups):
        members = np.flatnonzero(group_index == g)
        if len(members):
            cap[g], source[g] = caps[members[0]], sources[members[0]]
            lightest = members[np.argmin(rps[members])]
            wait[g] = queue_wait_scale(spread[lightest])
    return cap, source, wait


#: How far (relative) the slot queue may depart from eq. (1) at the loosest load the
#: data could imply before the likelihood needs it: well below any measured mean's noise.
CAP_REACH_TOLERANCE = 1e-3
#: The same for a latency summary (``tails``), whose own noise is 3% or more (its prior
#: median): the cap may move a fitted percentile by at most a third of that.
CAP_REACH_SUMMARY_TOLERANCE = 1e-2
#: A cap left out of the likelihood on the fitted points' evidence alone is checked on the
#: posterior draws (``LatencyModel.fit``). Where it would move some fitted point beyond
#: its tolerance in some draws, the draws are weighed by the density of the model with
#: the cap over the one without, and resampled within each chain: the posterior with the
#: cap, by importance sampling. It is trusted when the weights' effective sample size is
#: at least this share of the draws and no draw weighs more than
#: :data:`CAP_IMPORTANCE_MAX_WEIGHT` times an even share (a bounded ratio bounds the
#: estimate's variance, whatever a Pareto tail fitted to ratios within a few percent of
#: each other says); otherwise ``fit`` samples again with the cap in.
CAP_IMPORTANCE_MIN_ESS_SHARE = 0.9
CAP_IMPORTANCE_MAX_WEIGHT = 5.0
#: Where :func:`cap_reaches_the_data` looks: the share of the top point's headroom (1 - x)
#: added to its load. 0.5 (about twice the requests in flight) when nothing checks the
#: draws afterwards; 0 (the top point itself) when ``fit`` checks them.
CAP_REACH_HEADROOM = 0.5


def cap_reaches_the_data(rows: pd.DataFrame, group_index: np.ndarray, caps: np.ndarray,
                         wait: np.ndarray, headroom: float = CAP_REACH_HEADROOM,
                         slope: str = "steepest") -> np.ndarray:
    """Per group, whether the engine's cap can move the latency of the measured points.

    Far below the cap (hundreds of KV-cache slots against tens of requests in flight) the
    slot queue is eq. (1) to within rounding, but its special functions (an incomplete
    beta and its parameter gradients) make a fit several times slower and its geometry
    worse. So the likelihood uses the queue only where it matters: with the group's
    costs read off its points (C1 the lowest latency, C2 the steepest load term any point
    implies: both lean towards a heavier queue tail), the queue must stay within
    :data:`CAP_REACH_TOLERANCE` of eq. (1) at ``headroom`` times the highest point's
    headroom added to its load (0.5: about twice the requests in flight; 0: at the point).
    ``slope`` "top": C2 the load term the top point itself implies instead of the steepest
    (one noisy light point can imply a steep one; ``fit``'s check of the draws backs this
    reading). Decisions keep the cap either way (the ceiling is the cap's throughput when
    that is lower than 1/C2). A group measured in a closed loop (``max_concurrency``) never
    queues for a slot at its fitted points (those past the cap are set aside), which
    follow eq. (1) exactly, L = C1 + C2 N: the open-loop slot queue would put a wait of
    several lifetimes at a point at the cap that has none."""
    reaches = np.isfinite(caps)
    closed = closed_loop_rows(rows).to_numpy()
    for g in np.flatnonzero(reaches):
        reaches[g] = not closed[group_index == g].all()
    if "latency_mean_s" not in rows.columns:
        return reaches
    rps = rows["rps"].to_numpy(float)
    measured = pd.to_numeric(rows["latency_mean_s"], errors="coerce").to_numpy(float)
    for g in np.flatnonzero(reaches):
        members = group_index == g
        r, mean = rps[members], measured[members]
        if len(r) == 0 or not np.all(np.isfinite(mean)) or np.max(r * mean) >= caps[g] / 2:
            continue
        c1 = float(np.min(mean))
        implied = (1.0 - c1 / mean) / r
        c2 = max(float(implied[np.argmax(r)] if slope == "top" else np.max(implied)), 1e-12)
        utilisation = 1.0 - (1.0 - min(float(np.max(r)) * c2, 1.0)) * (1.0 - headroom)
        if utilisation >= 1.0:
            continue
        at = utilisation / c2
        with np.errstate(all="ignore"):
            departure = (capped_latency(at, c1, c2, caps[g], wait_scale=wait[g])
                         / latency(at, c1, c2) - 1.0)
        reaches[g] = not (np.isfinite(departure) and abs(departure) < CAP_REACH_TOLERANCE)
    return reaches


def cap_departure(rps, c1, c2, cap: float, wait_scale: float, power=1.0) -> np.ndarray:
    """Per draw (``c1``, ``c2``, ``power``: (draws,)), the largest |log| ratio of the slot
    queue's latency to eq. (1)'s over the rates ``rps``, times ``power`` (a summary's
    exponent; 1 for the mean); ``inf`` where a draw puts a rate at or past the cap's
    ceiling."""
    rps = np.asarray(rps, dtype=float)[None, :]
    c1, c2 = np.asarray(c1, float)[:, None], np.asarray(c2, float)[:, None]
    with np.errstate(all="ignore"):
        ratio = (capped_latency(rps, c1, c2, cap, wait_scale=wait_scale)
                 / latency(rps, c1, c2))
        departure = np.asarray(power, float)[..., None] * np.abs(np.log(ratio))
    departure = np.where(np.isfinite(departure), departure, np.inf)
    return departure.max(axis=1) if departure.shape[1] else np.zeros(len(departure))


def log_density_at_draws(pm_model, fit: Fit) -> np.ndarray:
    """(S,) ``pm_model``'s log density (C backend) at each posterior draw of ``fit``, whose
    free variables it shares, mapped to the unconstrained space it samples in."""
    logp = pm_model.compile_logp()
    columns = {}
    for rv in pm_model.free_RVs:
        values = fit.posterior[rv.name].stack(sample=("chain", "draw")).transpose(
            "sample", ...).values.astype(float)
        transform = pm_model.rvs_to_transforms.get(rv)
        if transform is not None:
            values = np.asarray(transform.forward(values, *rv.owner.inputs).eval(), float)
        columns[pm_model.rvs_to_values[rv].name] = values
    count = len(next(iter(columns.values())))
    return np.array([logp({name: values[i] for name, values in columns.items()})
                     for i in range(count)], dtype=float)


def importance_summary(log_ratio) -> dict | None:
    """The effective sample size of importance weights given as log ratios, as a share of
    the draws, and the largest weight in units of an even share; None without a finite
    one."""
    if log_ratio is None or not np.isfinite(np.max(log_ratio)):
        return None
    weights = np.exp(np.where(np.isfinite(log_ratio), log_ratio, -np.inf) - np.max(log_ratio))
    weights /= weights.sum()
    return {"ess_share": float(1.0 / np.sum(weights**2) / len(weights)),
            "max_weight": float(np.max(weights) * len(weights))}


def engine_limits(groups: pd.DataFrame, group: int, prefill=np.nan, decode=np.nan) -> dict:
    """The engine limits a fitted group ran under, as :func:`bayesspec.laws.concurrency_cap`
    takes them ({} when the fit knew none)."""
    row = groups.iloc[group]
    limits = {c: float(row[c]) for c in ENGINE_LIMIT_COLUMNS
              if c in groups.columns and np.isfinite(float(row[c]))}
    if not limits:
        return {}
    def number(value):
        value = pd.to_numeric(pd.Series([value]), errors="coerce").iloc[0]
        return float(value) if pd.notna(value) else float("nan")

    return {**limits, "prefill": number(prefill), "decode": number(decode)}


def fitted_cap(groups: pd.DataFrame, group: int, fit=None) -> dict:
    """A fitted group's concurrency cap as :class:`~bayesspec.prediction.Curve` takes it
    (``cap``: a number, or (S,) draws where the fit learned it; ``wait_scale``); {} when
    the fit knew none (eq. (1) alone)."""
    wait = float(groups["wait_scale"].iloc[group]) if "wait_scale" in groups.columns else 1.0
    if "cap_learned" in groups.columns and bool(groups["cap_learned"].iloc[group]):
        if fit is None:
            raise ValueError("a learned cap is read from the fit's posterior: pass fit")
        position = int(np.count_nonzero(groups["cap_learned"].to_numpy(bool)[:group]))
        return {"cap": fit.draws(LEARNED_CAP)[:, position], "wait_scale": wait}
    if "cap" not in groups.columns or not np.isfinite(float(groups["cap"].iloc[group])):
        return {}
    return {"cap": float(groups["cap"].iloc[group]), "wait_scale": wait}
