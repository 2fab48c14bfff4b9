"""Saturated load points: the rows the likelihood must ignore, and why.

A point is set aside when the file says so (``saturated``, a throughput run, an achieved
rate short of its target, except in a closed loop where the client capped it), when the
user's ``--max-rps`` says so, when a closed-loop sweep's throughput stops rising with its
concurrency, when more requests are
in the system than the engine can batch, or when the numbers themselves show it
(:func:`detect_saturation`). Each set-aside row carries its reason in words.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bayesspec.data.columns import CLOSED_LOOP_COLUMN, reference_latency
from bayesspec.data.engine_limits import concurrency_caps
from bayesspec.data.groups import assign_groups, group_columns, group_label


# An achieved rate this far below the target rate means the server could not keep up.
SHORTFALL_FRACTION = 0.90


@dataclass(frozen=True)
class SaturationRule:
    """How saturated load points are recognised (all rules apply together).

    - the row's ``saturated`` column is true;
    - the row's ``strategy`` is ``throughput`` (GuideLLM's ceiling-finding run);
    - ``rps_target`` is given and the achieved ``rps`` is below ``shortfall`` of it;
    - ``max_rps`` is given and the row's ``rps`` exceeds it (a user override);
    - with ``detect``, what the numbers show (:func:`detect_saturation`).
    """

    max_rps: float | None = None
    shortfall: float = SHORTFALL_FRACTION
    # Also read saturation off the data themselves (:func:`detect_saturation`), for
    # files that do not say which points were overloaded.
    detect: bool = True


def _in_system(data: pd.DataFrame) -> np.ndarray:
    """Requests in the system per row: the measured time-average where the file has it,
    otherwise RPS x mean latency (Little's law; a file without a mean: its reference
    latency, :func:`reference_latency`); in a closed loop at most the client's limit
    (``max_concurrency``), which a time average of exactly that many reads a rounding
    above."""
    in_system = data["rps"].to_numpy(float) * reference_latency(data)
    if "mean_concurrency" in data.columns:
        measured = pd.to_numeric(data["mean_concurrency"], errors="coerce").to_numpy(float)
        in_system = np.where(np.isfinite(measured), measured, in_system)
    if CLOSED_LOOP_COLUMN in data.columns:
        limit = pd.to_numeric(data[CLOSED_LOOP_COLUMN], errors="coerce").to_numpy(float)
        in_system = np.where(np.isfinite(limit), np.fmin(in_system, limit), in_system)
    return in_system


def _past_the_cap(out: pd.DataFrame, reason: pd.Series) -> pd.Series:
    """Points with more requests in the system than the engine can batch: past the
    ceiling, in a queue that grows with the run, where no steady-state law applies."""
    caps, sources = concurrency_caps(out)
    if not np.isfinite(caps).any():
        return reason
    in_system = _in_system(out)
    past = np.isfinite(caps) & (in_system > caps) & reason.eq("").to_numpy()
    if not past.any():
        return reason
    reason = reason.copy()
    _, index = assign_groups(out)
    rps = out["rps"].to_numpy(float)
    for i in np.flatnonzero(past):
        below = np.flatnonzero((index == index[i]) & ~past & reason.eq("").to_numpy())
        hint = (f"the highest rate below it here is {rps[below].max():.4g} RPS; measure "
                "between that and this rate to place the ceiling" if len(below)
                else "measure at lower rates")
        reason.iloc[i] = (f"past the engine's ceiling: {in_system[i]:.0f} requests in the "
                          f"system against a cap of {caps[i]:.0f} ({sources[i]}), so the "
                          f"queue grows with the run and no steady-state law applies; "
                          f"{hint}")
    return reason


#: The simulator's ``saturation_reason`` codes (bayesspec.simulate.engine) in words a
#: user can act on. A file may list several, joined by ";".
SATURATION_REASONS = {
    "throughput": "throughput run (clients sending back to back, to find the ceiling): "
                  "no set rate, not a point of the law",
    "preemption": "requests were preempted (the KV cache ran out): past the engine's "
                  "capacity, measure below this rate",
    "batch_wait": "requests waited for a batch slot (max_num_seqs): eq. (1) alone does "
                  "not describe it; give the cap (column max_num_seqs) to fit it",
    "kv_wait": "requests waited for KV blocks (cache full): eq. (1) alone does not "
               "describe it; give the cap (column kv_cache_tokens) to fit it",
    "shortfall": "achieved rate fell short of the offered rate (the server could not keep "
                 "up): past the ceiling, measure below this rate",
    "drift": "the queue kept growing through the window (no steady state): past the "
             "ceiling, measure below this rate",
    "unsettled": "the queue had not settled when the window opened: run more requests "
                 "(a longer warm-up)",
    "short_window": "window too short for this latency: run more requests",
}
#: Codes of a wait at the engine's concurrency cap, and the column that gives that cap:
#: with the cap known, the capped law describes the point (past the cap is judged there).
CAPACITY_WAITS = {"batch_wait": "max_num_seqs", "kv_wait": "kv_cache_tokens"}
# Request lifetimes a measured window should hold (bayesspec.simulate.engine), over the
# share of the requests that are measured (10% warm-up and cool-down left out).
WINDOW_LIFETIMES = 5.0
MEASURED_SHARE = 0.8


def _requests_needed(rps: float, latency: float) -> int:
    """Requests for a window of WINDOW_LIFETIMES latencies at this rate (Little's law:
    rps x latency requests are in flight), plus one lifetime of ramp, rounded up to 100."""
    lifetimes = WINDOW_LIFETIMES / 0.75 + 1.0   # the window may lose a quarter to its ends
    needed = lifetimes * rps * latency / MEASURED_SHARE
    return int(math.ceil(needed / 100.0) * 100)


def saturation_reason_text(codes: str, row: pd.Series | dict | None = None) -> str:
    """Words for a ``saturation_reason`` cell ("" when it names nothing)."""
    listed = [c.strip() for c in str(codes).split(";") if c.strip()]
    if set(listed) & {"throughput", "preemption", "shortfall", "drift"}:
        # past the ceiling: more requests would not help, and a preemption implies the
        # cache was full
        listed = [c for c in listed if c not in ("short_window", "unsettled")]
    if "throughput" in listed:
        listed = ["throughput"]   # the rest follow from 512 clients back to back
    if "preemption" in listed:
        listed = [c for c in listed if c != "kv_wait"]
    parts = []
    for code in listed:
        text = SATURATION_REASONS.get(code, code)
        if code == "short_window" and row is not None:
            try:
                text += f" (>= {_requests_needed(float(row['rps']), float(row['latency_mean_s']))})"
            except (KeyError, TypeError, ValueError):
                pass
        parts.append(text)
    return "; ".join(parts)


def mark_saturated(out: pd.DataFrame, rule: SaturationRule) -> None:
    reason = pd.Series("", index=out.index, dtype=object)
    if "saturated" in out.columns:
        marked = out["saturated"].astype(bool)
        codes = (out["saturation_reason"] if "saturation_reason" in out.columns
                 else pd.Series("", index=out.index))
        for i in np.flatnonzero(marked.to_numpy()):
            listed = [c.strip() for c in str(codes.iloc[i]).split(";") if c.strip()]
            caps = {code: column for code, column in CAPACITY_WAITS.items() if code in listed}
            if listed and len(caps) == len(listed) and all(
                    column in out.columns and pd.notna(out[column].iloc[i])
                    for column in caps.values()):
                continue   # only waited at a cap the file gives: the capped law's point
            if listed:
                reason.iloc[i] = saturation_reason_text(codes.iloc[i], out.iloc[i])
            elif "strategy" in out.columns and out["strategy"].iloc[i].lower() == "throughput":
                reason.iloc[i] = SATURATION_REASONS["throughput"]
            else:
                reason.iloc[i] = "marked saturated in the file (column `saturated`)"
    if "strategy" in out.columns:
        throughput = out["strategy"].str.lower().eq("throughput") & reason.eq("")
        reason = reason.where(~throughput, SATURATION_REASONS["throughput"])
    if "rps_target" in out.columns:
        # A closed-loop point's achieved rate is below its target by design: the client
        # never has more than max_concurrency requests in flight.
        short = ((out["rps"] < rule.shortfall * out["rps_target"]).fillna(False)
                 & reason.eq("") & ~closed_loop_rows(out))
        for i in np.flatnonzero(short.to_numpy()):
            reason.iloc[i] = (f"achieved rate {out['rps'].iloc[i]:.4g} RPS fell short of the "
                              f"target {out['rps_target'].iloc[i]:.4g} (< {rule.shortfall:.0%}):"
                              " the server could not keep up, past its ceiling")
    if rule.max_rps is not None:
        above = (out["rps"] > rule.max_rps) & reason.eq("")
        reason = reason.where(~above, f"rate above --max-rps {rule.max_rps:g}")
    reason = _past_the_cap(out, reason)
    if rule.detect:
        reason = closed_loop_plateau(out, reason)
        reason = detect_saturation(out, reason)
    out["exclusion_reason"] = reason.astype(str)
    out["excluded"] = reason.ne("")


def closed_loop_rows(data: pd.DataFrame) -> pd.Series:
    """Rows measured in a closed loop: the client kept at most ``max_concurrency``
    requests in flight (its rate follows from the server's latency, L = C1 + C2 N)."""
    if CLOSED_LOOP_COLUMN not in data.columns:
        return pd.Series(False, index=data.index)
    return pd.to_numeric(data[CLOSED_LOOP_COLUMN], errors="coerce").notna()


# A closed-loop sweep past the server's ceiling: more concurrency no longer buys throughput.
CLOSED_LOOP_FALL = 0.97     # a throughput below 97% of one at lower concurrency: it fell;
CLOSED_LOOP_FLAT = 1.02     # within 2% of it while the latency rose over PLATEAU_JUMP: flat.


def closed_loop_plateau(data: pd.DataFrame, reason: pd.Series) -> pd.Series:
    """Reasons for the closed-loop points of each group past the server's ceiling.

    In a closed loop the law reads L = C1 + C2 N with N the client's concurrency, so the
    throughput N/L rises with N towards 1/C2 and never falls. A point whose throughput fell
    below that of a point at lower concurrency, or stayed flat while its latency jumped,
    is past the ceiling (a queue at the engine's cap, preemption): set aside. Only kept
    points are judged; returns the updated reasons."""
    reason = reason.copy()
    closed = closed_loop_rows(data).to_numpy()
    if not closed.any():
        return reason
    rps = data["rps"].to_numpy(float)
    latency = reference_latency(data)
    concurrency = pd.to_numeric(data[CLOSED_LOOP_COLUMN], errors="coerce").to_numpy(float)
    _, index = assign_groups(data)
    for group in np.unique(index[closed]):
        members = np.flatnonzero((index == group) & closed & reason.eq("").to_numpy())
        members = members[np.argsort(concurrency[members], kind="stable")]
        best = -1
        for m in members:
            if best >= 0 and concurrency[m] > concurrency[best]:
                fell = rps[m] < CLOSED_LOOP_FALL * rps[best]
                flat = (rps[m] < CLOSED_LOOP_FLAT * rps[best]
                        and latency[m] > PLATEAU_JUMP * latency[best])
                if fell or flat:
                    how = "fell" if fell else "stopped rising"
                    reason.iloc[m] = (
                        f"closed loop: throughput {how} with concurrency (max_concurrency "
                        f"{concurrency[best]:g} -> {concurrency[m]:g}: {rps[best]:.4g} -> "
                        f"{rps[m]:.4g} RPS) while latency rose "
                        f"{latency[m] / latency[best]:.1f}x: past the server's ceiling, "
                        "measure below this concurrency")
                    continue
            if best < 0 or rps[m] > rps[best]:
                best = m
    return reason


# Saturation read off the numbers of one group, sorted by achieved rate:
PLATEAU_RISE = 0.03   # an achieved rate rising by less than 3% over the previous point ...
PLATEAU_JUMP = 1.3    # ... while the mean latency rises by more than 1.3x: a plateau;
#                       and a latency 1.3x that of a point at a higher rate: overloaded
#                       (a steady state's latency rises with the rate, never falls);
LAW_EXCESS = 2.5      # a latency over 2.5x eq. (1) drawn through the group's lower
#                       points, or a rate beyond that line's ceiling 1/C2;
RATE_SHORTFALL = 0.88  # or, where that line puts the point at 60% of its ceiling or more,
RATE_JUDGED_FROM = 0.6  # an achieved rate 12% below the rate the line needs for the
#                       point's latency (near the ceiling a latency is a poor measure of
#                       a point's distance from the law, its rate a good one).
LAW_MIN_POINTS = 3    # lower points needed to draw the line


def law_line(rps: np.ndarray, latency: np.ndarray) -> tuple[float, float] | None:
    """Intercept and slope of 1/L against the rate (eq. (1) is that line), robust to a
    stray point among the lower ones (Theil-Sen: the median of the pairwise slopes);
    None when the points do not fall with the rate (no law to judge by)."""
    if np.ptp(rps) <= 0:
        return None
    inverse = 1.0 / latency
    i, j = np.triu_indices(len(rps), k=1)
    run = rps[j] - rps[i]
    keep = run != 0
    slope = float(np.median((inverse[j] - inverse[i])[keep] / run[keep]))
    intercept = float(np.median(inverse - slope * rps))
    if intercept <= 0 or slope >= 0:
        return None
    return intercept, slope


def detect_saturation(data: pd.DataFrame, reason: pd.Series) -> pd.Series:
    """Reasons for the points of each group that the numbers show to be saturated.

    ``reason`` holds the reasons found so far ("" = kept); only kept points are judged.
    A steady state's mean latency rises with the rate, so a point whose latency is over
    1.3x that of a point at a higher rate is past the ceiling (its achieved rate fell as
    the server overloaded: a throughput run, a queue that kept growing), as is a point
    whose rate stopped rising while its latency jumped. Eq. (1) makes 1/L linear in the
    rate (1/L = 1/C1 - (C2/C1) RPS), so a line through a group's lower-rate points is the
    law they imply; every point with at least three kept points below it is judged
    against the line through them, from the top down, and set aside when its latency is
    over 2.5x the line's, its rate lies beyond the line's ceiling, or (from 60% of that
    ceiling on) its rate is 12% below the one at which the line reaches its latency. On
    law-generated sweeps (``simulate.synthetic.generate_sweeps``, 20 seeds, 4,800
    judgements) none of these fires on a point of the law; the largest latency excess
    seen was 2.25x and the largest rate shortfall above 60% of the ceiling 9%. A group
    whose lower points do not fall with the rate (noise at light load only) is left
    alone: there is no law to judge by. Returns the updated reasons.
    """
    reason = reason.copy()
    rps = data["rps"].to_numpy(float)
    latency = reference_latency(data)
    # Sparse MoE curves bend the other way at light load (expert coverage), so a line
    # through their lower points is not their law.
    moe = (pd.to_numeric(data["experts_total"], errors="coerce").fillna(0).to_numpy() > 0
           if "experts_total" in data.columns else np.zeros(len(data), bool))
    _, index = assign_groups(data)
    for group in np.unique(index):
        members = np.flatnonzero((index == group) & reason.eq("").to_numpy())
        members = members[np.argsort(rps[members], kind="stable")]
        for previous, this in zip(members[:-1], members[1:]):
            if (rps[this] < (1 + PLATEAU_RISE) * rps[previous]
                    and latency[this] > PLATEAU_JUMP * latency[previous]):
                reason.iloc[this] = (f"achieved rate stopped rising ({rps[previous]:.4g} -> "
                                     f"{rps[this]:.4g} RPS) while latency rose "
                                     f"{latency[this] / latency[previous]:.1f}x: past the "
                                     "ceiling, measure below this rate")
        kept = [m for m in members if reason.iloc[m] == ""]
        # From the top down, so a high point judged against the lowest latency above it
        # is one the later points do not hide.
        lowest_above = np.inf
        faster = -1
        for m in reversed(kept):
            if latency[m] > PLATEAU_JUMP * lowest_above and rps[m] < rps[faster]:
                reason.iloc[m] = (f"latency {latency[m]:.4g} s is {latency[m] / lowest_above:.1f}x "
                                  f"that at a higher rate ({rps[faster]:.4g} RPS): the achieved "
                                  "rate fell as the server overloaded (a throughput run or a "
                                  "growing queue), measure below this rate")
            elif latency[m] < lowest_above:
                lowest_above, faster = latency[m], m
        kept = [m for m in kept if reason.iloc[m] == ""]
        for position in range(len(kept) - 1, LAW_MIN_POINTS - 1, -1):
            top, lower = kept[position], kept[:position]
            if moe[top]:
                continue
            lower = [m for m in lower if reason.iloc[m] == ""]
            if len(lower) < LAW_MIN_POINTS:
                break
            line = law_line(rps[lower], latency[lower])
            if line is None:
                continue
            intercept, slope = line
            ceiling = -intercept / slope
            excess = latency[top] * (intercept + slope * rps[top])
            if rps[top] >= ceiling:
                reason.iloc[top] = (f"rate beyond the ceiling {ceiling:.4g} RPS of the law "
                                    "through the group's lower-rate points: past saturation, "
                                    "measure below it")
            elif excess > LAW_EXCESS:
                reason.iloc[top] = (f"latency {excess:.1f}x the law through the group's "
                                    "lower-rate points: past the ceiling (or another regime), "
                                    "measure below this rate")
            elif rps[top] >= RATE_JUDGED_FROM * ceiling:
                needed = (1.0 / latency[top] - intercept) / slope
                if rps[top] < RATE_SHORTFALL * needed:
                    reason.iloc[top] = (
                        f"achieved rate {rps[top]:.4g} RPS is {1 - rps[top] / needed:.0%} "
                        f"below the {needed:.4g} RPS at which the law through the group's "
                        "lower-rate points reaches this latency: past the ceiling (a "
                        "throughput run, a queue at the engine's cap), measure below it")
    return reason


def describe_exclusions(data: pd.DataFrame) -> list[str]:
    """One line per row set aside from the likelihood: its 1-based data row, the verifier
    and lengths, the rate and why."""
    lines = []
    columns = group_columns(data)
    for position in np.flatnonzero(data["excluded"].to_numpy(bool)):
        row = data.iloc[position]
        where = group_label(row.to_dict(), columns)
        lines.append(f"row {position + 1} ({where}, RPS {row['rps']:.4g}): "
                     f"{row['exclusion_reason']}")
    return lines
