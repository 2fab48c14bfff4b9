"""A draft-length schedule in the serving engine's own terms: batch size -> k.

vLLM decides per step from the number of running requests (the batch), not from the
arrival rate; by Little's law the mean number in the system at a rate RPS is
``RPS * L(RPS)``, L the mean latency under the configuration running there. The posterior
gives, per rate, the expected speedup of every k (k = 0: do not speculate); walking up the
rates, the schedule switches k only when the new best beats the running k by more than
``min_gain`` speedup points (hysteresis: a switch that gains less than that is not worth
the operational risk), and each switch says how well the data place it.
"""

from __future__ import annotations

import numpy as np

from bayesspec.errors import BadInput
from bayesspec.uncertainty import DEFAULT_PROB, uncertain
from bayesspec.decisions.speculative import SPEEDUP_CAP

# A switch point is "pinned down" when its interval (in batch size) spans less than this
# ratio hi/lo and nearly every draw has the switch within the searched rates.
PINNED_RATIO = 1.5
PINNED_SHARE = 0.9

#: The last range's end where the fit does not know the engine's batch cap: vLLM's
#: max_num_seqs on a current GPU (the document says it was assumed).
ASSUMED_MAX_NUM_SEQS = 1024


def _speedups(law, alpha: float, ks: np.ndarray, rps: np.ndarray) -> np.ndarray:
    """(S, K, R) speedup draws, k = 0 (speedup 1) included where asked."""
    sd_ks = ks[ks > 0]
    draws = law.speedup_draws(alpha, sd_ks, rps) if len(sd_ks) else None
    columns, j = [], 0
    for k in ks:
        if k == 0:
            columns.append(np.ones((law.dense.zero_load.shape[0], len(rps))))
        else:
            columns.append(draws[:, j])
            j += 1
    return np.stack(columns, axis=1)


def _batch_cap(law, alpha: float, k: int) -> float:
    """The most requests the engine batches running k (inf when its cap is unknown)."""
    curve = law.dense if k == 0 else law.curve(alpha, k)
    # the median where the cap was learned (a stated cap is one number)
    return float(np.median(curve.cap)) if curve.cap is not None else float("inf")


def _concurrency(law, alpha: float, k: int, rps: np.ndarray) -> np.ndarray:
    """Median batch size at each rate, running k: the mean number of requests in the
    system (Little), of which at most the engine's cap run in the batch (the rest wait
    for a slot)."""
    curve = law.dense if k == 0 else law.curve(alpha, k)
    latency = curve.latency(rps)
    with np.errstate(invalid="ignore"):
        median = np.median(np.where(np.isfinite(latency), latency, np.inf), axis=0)
    return np.minimum(rps * median, _batch_cap(law, alpha, k))


def vllm_schedule(law, alpha: float, rps, *, ks=range(0, 11), min_gain: float = 0.02,
                  prob: float = DEFAULT_PROB) -> dict:
    """Batch-size ranges -> k (0 = speculation off) for one acceptance rate.

    ``rps``: the rates to search, ascending (fine enough to place switches: 40+ points up
    to the rate of interest). Returns ``ranges`` (``batch_min``, ``batch_max`` (None: no
    upper end), ``k``, ``rps_min``, ``rps_max``, ``p_best``: the share of draws for which
    this k is the best over the range, ``speedup`` at the range's middle rate,
    ``extrapolated``), ``switches`` (``from_k``, ``to_k``, ``batch`` and its interval over
    draws, ``pinned``), ``num_speculative_tokens_per_batch_size`` ([[start_bs, end_bs, k],
    ...], every batch size up to the engine's cap, or to :data:`ASSUMED_MAX_NUM_SEQS` with
    ``batch_max_assumed``), and ``speculative_config``, the part of vLLM's
    ``--speculative-config`` it sets, ready to paste: ``num_speculative_tokens`` (the
    largest k of the schedule) and the schedule.
    """
    if not law.answers_any_configuration:
        raise BadInput("a schedule over k needs the speculative model (six cycle "
                       "coefficients); fit with --model speculative")
    rps = np.asarray(rps, dtype=float)
    if rps.ndim != 1 or len(rps) < 3 or np.any(np.diff(rps) <= 0):
        raise BadInput("give at least 3 increasing rates to build a schedule over",
                       argument="rps")
    if min_gain < 0:
        raise BadInput(f"must be >= 0, got {min_gain}", argument="min_gain")
    ks = np.asarray(sorted(set(int(k) for k in ks) | {0}), dtype=int)
    draws = np.minimum(_speedups(law, alpha, ks, rps), SPEEDUP_CAP)      # (S, K, R)
    expected = draws.mean(axis=0)                                        # (K, R)
    per_draw_best = np.argmax(draws, axis=1)                             # (S, R)

    chosen = np.empty(len(rps), dtype=int)
    current = int(np.argmax(expected[:, 0]))
    for j in range(len(rps)):
        best = int(np.argmax(expected[:, j]))
        if expected[best, j] - expected[current, j] > min_gain:
            current = best
        chosen[j] = current

    concurrency = {int(ks[i]): _concurrency(law, alpha, int(ks[i]), rps)
                   for i in np.unique(chosen)}
    starts = [0] + [j for j in range(1, len(rps)) if chosen[j] != chosen[j - 1]]
    ends = starts[1:] + [len(rps)]
    ranges, switches = [], []
    for n, (a, b) in enumerate(zip(starts, ends)):
        index = chosen[a]
        k = int(ks[index])
        middle = (a + b - 1) // 2
        ranges.append({
            "k": k, "rps_min": float(rps[a]), "rps_max": float(rps[b - 1]),
            "p_best": float(np.mean(per_draw_best[:, a:b] == index)),
            "speedup": uncertain(draws[:, index, middle], prob),
            "extrapolated": bool(law.extrapolated(rps[a:b], alpha, k).any())})
        if n:
            switches.append(_switch(draws, ks, chosen[a - 1], index, rps, a,
                                    concurrency[int(ks[chosen[a - 1]])], min_gain, prob))
    # Batch sizes: the running k's concurrency at the switch (the engine reaches the
    # boundary while still running the old k).
    # The engine never batches more than its cap: the schedule stops there.
    cap = max(_batch_cap(law, alpha, int(ks[i])) for i in np.unique(chosen))
    engine_max = int(cap) if np.isfinite(cap) else None
    for n, row in enumerate(ranges):
        row["batch_min"] = 1 if n == 0 else switches[n - 1]["batch"]
        row["batch_max"] = (switches[n]["batch"] - 1) if n < len(switches) else engine_max
        if engine_max is not None and row["batch_max"] is not None:
            row["batch_max"] = min(row["batch_max"], engine_max)
    ranges = [r for r in ranges if r["batch_max"] is None or r["batch_max"] >= r["batch_min"]]
    # vLLM's dynamic speculative decoding takes [start_bs, end_bs, K] entries covering
    # every batch size up to its max_num_seqs, each K at most num_speculative_tokens
    # (the K the engine loads and captures graphs for); K = 0 turns speculation off.
    last = engine_max if engine_max is not None else ASSUMED_MAX_NUM_SEQS
    schedule = contiguous_entries(
        [[int(r["batch_min"]), int(r["batch_max"] if r["batch_max"] is not None
                                   else max(last, r["batch_min"])), int(r["k"])]
         for r in ranges])
    top_k = max(entry[2] for entry in schedule)
    config = {"num_speculative_tokens": top_k,
              "num_speculative_tokens_per_batch_size": schedule}
    if top_k > 0:
        check_vllm_schedule(schedule, top_k)
    low_k = ranges[0]["k"]
    return {"setup": law.label, "alpha": float(alpha), "min_gain": float(min_gain),
            "ks": ks.tolist(), "ranges": ranges, "switches": switches,
            "num_speculative_tokens_per_batch_size": schedule,
            "batch_max_assumed": engine_max is None,
            "speculative_config": config if top_k > 0 else {"speculation": "off"},
            "rps_measured_max": law.measured(alpha, low_k)["rps_fitted_max"],
            "max_num_seqs": engine_max,
            "unpinned_switches": sum(not s["pinned"] for s in switches)}


def _switch(draws, ks, before: int, after: int, rps, at: int, concurrency, min_gain,
            prob) -> dict:
    """Where the switch from ``before`` to ``after`` falls in each draw (the first rate of
    the grid at which ``after`` beats ``before`` by more than ``min_gain``, the rule the
    schedule applies to expected speedups), in batch sizes: the interval over draws is
    the data's uncertainty about the switch. ``at``: the grid index of the switch."""
    beats = draws[:, after, :] - draws[:, before, :] > min_gain           # (S, R)
    crosses = beats.any(axis=1)
    first = np.where(crosses, np.argmax(beats, axis=1), len(rps) - 1)
    batch_draws = concurrency[first]
    finite = np.isfinite(batch_draws)
    interval = uncertain(batch_draws[finite], prob) if finite.any() else None
    batch = concurrency[at - 1] if np.isfinite(concurrency[at - 1]) else concurrency[at]
    pinned = bool(interval is not None and crosses.mean() >= PINNED_SHARE
                  and interval["lo"] > 0 and interval["hi"] / interval["lo"] < PINNED_RATIO)
    return {"from_k": int(ks[before]), "to_k": int(ks[after]), "rps": float(rps[at]),
            "batch": max(1, int(np.ceil(batch))), "batch_interval": interval,
            "p_switch_in_range": float(crosses.mean()), "pinned": pinned}


# ------------------------------------------------------------------ vLLM's form, checked
#: vLLM's open upper end of the context axis (its schedules' last context range is
#: read as reaching any length).
CONTEXT_MAX = 2**31 - 1


def contiguous_entries(entries: list[list[int]]) -> list[list[int]]:
    """[start_bs, end_bs, K] entries made what vLLM takes: sorted, each range starting
    where the one before ended (a range the switch points left empty is dropped, and
    its neighbours meet), neighbours with the same K merged, the first starting at 1."""
    out: list[list[int]] = []
    for start, end, k in sorted(entries):
        start = 1 if not out else out[-1][1] + 1
        if end < start:
            continue
        if out and out[-1][2] == k:
            out[-1][1] = end
        else:
            out.append([start, end, k])
    return out


def check_vllm_schedule(entries, num_speculative_tokens: int) -> None:
    """Raise ValueError unless ``entries`` are a schedule vLLM's dynamic speculative
    decoding takes as they are: all [start_bs, end_bs, K] or all [start_bs, end_bs,
    ctx_lo, ctx_hi, K] integers; batch-size ranges positive, start <= end, sorted,
    non-overlapping and contiguous from 1; context ranges positive, contiguous from 1,
    and the same for every batch-size range (a rectangular grid, no cell twice); each K
    within 0..num_speculative_tokens (the K the engine loads, > 0)."""
    if not isinstance(num_speculative_tokens, int) or num_speculative_tokens <= 0:
        raise ValueError(f"num_speculative_tokens must be an integer > 0, got "
                         f"{num_speculative_tokens!r}")
    if not isinstance(entries, list) or not entries:
        raise ValueError("the schedule must be a non-empty list")
    sizes = {len(entry) if isinstance(entry, list) else -1 for entry in entries}
    if sizes not in ({3}, {5}):
        raise ValueError("entries must all be [start_bs, end_bs, K] or all "
                         "[start_bs, end_bs, ctx_lo, ctx_hi, K] lists")
    if any(not isinstance(v, int) or isinstance(v, bool) for e in entries for v in e):
        raise ValueError("every value of the schedule must be an integer")
    cells = [(e[0], e[1], 1, CONTEXT_MAX, e[2]) if len(e) == 3 else tuple(e)
             for e in entries]
    for bs_lo, bs_hi, ctx_lo, ctx_hi, k in cells:
        if not 1 <= bs_lo <= bs_hi:
            raise ValueError(f"batch-size range {bs_lo}-{bs_hi} must be positive, start <= end")
        if not 1 <= ctx_lo <= ctx_hi:
            raise ValueError(f"context range {ctx_lo}-{ctx_hi} must be positive, start <= end")
        if not 0 <= k <= num_speculative_tokens:
            raise ValueError(f"K {k} must be within 0..num_speculative_tokens "
                             f"({num_speculative_tokens})")
    batch = sorted({(c[0], c[1]) for c in cells})
    context = sorted({(c[2], c[3]) for c in cells})
    for ranges, what in ((batch, "batch-size"), (context, "context")):
        if ranges[0][0] != 1:
            raise ValueError(f"the first {what} range must start at 1")
        for (_, end), (start, _) in zip(ranges, ranges[1:]):
            if start != end + 1:
                raise ValueError(f"{what} ranges must be contiguous and non-overlapping: "
                                 f"one ends at {end}, the next starts at {start}")
    if len({c[:4] for c in cells}) != len(cells) or len(cells) != len(batch) * len(context):
        raise ValueError("the schedule must hold each (batch-size range, context range) "
                         "cell exactly once")


def context_schedule(bands: list[dict]) -> dict:
    """One schedule over batch size and context length from per-prompt-length schedules.

    ``bands``: per prompt length, ``prefill_tokens``, ``decode_tokens`` and the
    ``num_speculative_tokens_per_batch_size`` of :func:`vllm_schedule` for it. vLLM reads
    a step's context as its requests' sequence lengths, which while decoding run from the
    prompt length to prompt + output; a band is centred on the mean, prompt + output/2,
    and bands meet at the geometric mean of neighbouring centres. Batch-size ranges are
    the union of every band's switch points (a rectangular grid, as vLLM needs), each
    cell taking its band's K. Returns ``context_bands`` (prefill, decode, context_min,
    context_max), the 5-item ``num_speculative_tokens_per_batch_size`` and the
    ``speculative_config`` that sets it."""
    bands = sorted(bands, key=lambda b: b["prefill_tokens"] + b["decode_tokens"] / 2)
    centres = [b["prefill_tokens"] + b["decode_tokens"] / 2 for b in bands]
    edges = [int(np.floor(np.sqrt(a * b))) for a, b in zip(centres, centres[1:])]
    lows = [1] + [e + 1 for e in edges]
    highs = edges + [CONTEXT_MAX]
    if any(lo > hi for lo, hi in zip(lows, highs)):
        raise BadInput("two prompt-length bands share a context length; choose one with "
                       "--prefill", argument="prefill")
    tables = [b["num_speculative_tokens_per_batch_size"] for b in bands]
    last = max(t[-1][1] for t in tables)
    starts = sorted({entry[0] for t in tables for entry in t})
    ranges = list(zip(starts, [s - 1 for s in starts[1:]] + [last]))

    def k_at(table, size):
        for start, end, k in table:
            if start <= size <= end:
                return k
        return table[-1][2]            # past a band's own cap: its last K

    grid = [[start, end, lo, hi, int(k_at(table, start))]
            for start, end in ranges for lo, hi, table in zip(lows, highs, tables)]
    top_k = max(entry[4] for entry in grid)
    described = [{"prefill_tokens": int(b["prefill_tokens"]),
                  "decode_tokens": int(b["decode_tokens"]),
                  "context_min": int(lo), "context_max": int(hi)}
                 for b, lo, hi in zip(bands, lows, highs)]
    if top_k > 0:
        check_vllm_schedule(grid, top_k)
    return {"context_bands": described, "num_speculative_tokens_per_batch_size": grid,
            "speculative_config": ({"num_speculative_tokens": top_k,
                                    "num_speculative_tokens_per_batch_size": grid}
                                   if top_k > 0 else {"speculation": "off"})}
