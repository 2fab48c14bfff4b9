"""Units of a tidy table: converting rates per minute and latencies in milliseconds,
and catching the mistake when a file was written in them.

The tidy table is in requests per second and seconds. A file in requests per minute
fits without complaint and gives a ceiling 60 times too high (1/C2 = 1490 RPS for an
8B model on one H100, batch sizes in the thousands from ``kstar --vllm``); one in
milliseconds gives latencies 1000 times too long. When the catalog knows the verifier
and the GPU, the roofline bounds what a load point can be:

- a request's batch-1 latency is at least the time to stream the verifier's weights
  once per verification pass (``decode_tokens / (k + 1)`` passes; with speculation at
  most k + 1 tokens are committed per pass), and at most a few times the roofline of
  the whole request (prefill compute plus ``decode_tokens`` weight reads);
- a server cannot complete more requests per second than its compute ceiling, the
  GPU's peak FLOP/s over the FLOPs of one request (2 x active parameters per token).

Tensor parallelism spreads the weights and the FLOPs over several GPUs that the tidy
table does not record, so each bound allows a node of up to ``NODE_GPUS`` GPUs; a unit
mistake is a factor of 60 or 1000, far outside them.

Without cards (a verifier or a GPU the catalog does not know, or no ``gpu`` column) the
bounds that hold for any LLM server still judge the table (:func:`pace_problem`,
:func:`in_flight_problem`):

- the pace of a group's fastest point, its mean latency per output token, lies between
  what no GPU stack serves faster (``FASTEST_SECONDS_PER_TOKEN``) and slower
  (``SLOWEST_SECONDS_PER_TOKEN``, prompt tokens charged ``PREFILL_SECONDS_PER_TOKEN``);
- the requests in flight, RPS x mean latency (Little's law), stay below what one server
  holds (``MAX_IN_FLIGHT``) and, where a point says how many requests it measured, below
  ``IN_FLIGHT_PER_REQUEST`` times that count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bayesspec.errors import BadInput

__all__ = ["UNITS", "parse_units", "convert", "RATE_COLUMNS", "LATENCY_COLUMNS",
           "GroupEvidence", "plausibility_problem", "pace_problem", "in_flight_problem",
           "measured_in_flight_problem",
           "compute_ceiling_rps", "weights_read_seconds"]

#: --units names and what each converts.
UNITS = {"rpm": "rates in requests per minute", "ms": "latencies in milliseconds"}
RATE_COLUMNS = ("rps", "rps_target")
#: Every latency column of the tidy table (seconds).
LATENCY_COLUMNS = tuple(
    ["latency_mean_s", "latency_std_s", "ttft_mean_s", "itl_mean_s"]
    + [f"{what}_p{q}_s" for what in ("latency", "ttft", "itl") for q in (50, 90, 95, 99)])

#: GPUs one server may spread a model over (tensor parallelism) that the table does not say.
NODE_GPUS = 8
#: A measured ceiling this many times one GPU's compute ceiling (``compute_ceiling_rps``)
#: is not a server: requests per minute (x60) read as per second. A node of NODE_GPUS
#: GPUs reaches at most NODE_GPUS times it (memory-bound servers far less: the
#: simulator's Qwen3-8B saturates at 0.4 of one H100's).
CEILING_MARGIN = 10.0
#: A batch-1 latency this many times the whole request's roofline (one GPU) is not a
#: server either: milliseconds (x1000) read as seconds. Real stacks run within a few times
#: the roofline (the simulator's Qwen3-8B on an H100: 1.5x).
SLOW_MARGIN = 100.0

#: Seconds per output token, at a group's fastest point, that no GPU stack serves slower
#: than. Measured batch-1 paces: 2.3 ms (Qwen3-0.6B with EAGLE k = 4 on an H200,
#: simulated) to 42 ms (Vidur's Qwen-72B, prompt included); a 70B-class model at
#: 4096 output tokens takes tens of seconds a request, still under 50 ms a token. Read as
#: seconds, milliseconds put the fastest of those at 2.3 s a token.
SLOWEST_SECONDS_PER_TOKEN = 1.0
#: Prompt tokens are charged this much each in that bound: a long prompt's prefill can
#: dominate a short answer (100x the 0.1 ms a token a 70B model prefills on one GPU).
PREFILL_SECONDS_PER_TOKEN = 0.01
#: ... and faster than: the fastest stacks stream 1-2 thousand tokens a second to one
#: request (0.5 ms a token); a per-token latency in the latency column, or seconds
#: converted as if milliseconds, land 10-1000 times below this.
FASTEST_SECONDS_PER_TOKEN = 1e-4
#: Requests in flight (RPS x mean latency, Little's law) that no server holds: engines
#: batch a few hundred to a few thousand (vLLM's max_num_seqs), the bundled and simulated
#: sweeps peak near 600 with their overloaded points; rates per minute or milliseconds
#: put an 8B model's sweep at 31,000 and 175,000.
MAX_IN_FLIGHT = 20_000
#: Requests in flight per request a point measured: a run of n requests cannot hold more
#: than n at once (its mean in flight is n x mean latency / its duration, at most n;
#: simulated sweeps reach 0.44 on overloaded points, tables drawn from the law itself 1.3);
#: 3 leaves room for a rate that is the offered one rather than the achieved.
IN_FLIGHT_PER_REQUEST = 3.0


def parse_units(text: str | None, *, option: str = "--units") -> tuple[str, ...]:
    """``"rpm"``, ``"ms"``, ``"rpm,ms"`` -> the units named (empty for None)."""
    if text is None:
        return ()
    names = tuple(dict.fromkeys(part.strip().lower() for part in str(text).split(",")
                                if part.strip()))
    unknown = [name for name in names if name not in UNITS]
    if unknown or not names:
        raise BadInput(f"unknown unit {unknown[0] if unknown else text!r}: use rpm (rates "
                       "per minute), ms (latencies in milliseconds) or rpm,ms", option=option)
    return names


def convert(frame: pd.DataFrame, units) -> pd.DataFrame:
    """The table in requests per second and seconds (a copy), from ``units``."""
    frame = frame.copy()
    for unit in units:
        columns = RATE_COLUMNS if unit == "rpm" else LATENCY_COLUMNS
        factor = 1.0 / 60.0 if unit == "rpm" else 1e-3
        for column in columns:
            if column in frame.columns:
                frame[column] = frame[column] * factor
    return frame


def weights_read_seconds(verifier_card, gpu_card) -> float:
    """Seconds for one GPU to stream the weights one token touches (one decode step)."""
    return verifier_card.active_weight_bytes / gpu_card.hbm_bandwidth_bytes_s


def compute_ceiling_rps(verifier_card, gpu_card, prefill_tokens: float,
                        decode_tokens: float) -> float:
    """Requests per second one GPU's peak bf16 FLOP/s allow: every prompt and output token
    costs 2 FLOP per active parameter (speculation only adds drafted tokens)."""
    flops = 2.0 * verifier_card.params_active_b * 1e9 * (prefill_tokens + decode_tokens)
    return gpu_card.peak_bf16_flops / flops


@dataclass(frozen=True)
class GroupEvidence:
    """What one group's points say, for the bounds: its label and first data row, the
    lengths and k, the latency at its lowest rate (batch 1 when that rate is light),
    the highest rate and the ceiling of the law through its points (None when the
    points do not rise with the rate); its fastest point's latency and data row, and
    the column that latency was read from."""

    label: str
    row: int
    prefill_tokens: float | None
    decode_tokens: float | None
    k: int
    batch1_latency: float
    rps_max: float
    ceiling: float | None
    fastest_latency: float = math.nan
    fastest_row: int | None = None
    latency_column: str = "latency_mean_s"


def plausibility_problem(evidence: GroupEvidence, verifier_card, gpu_card,
                         units=()) -> tuple[str, str] | None:
    """(column, message) when the group is impossible for the verifier on the GPU in the
    units the table claims, naming the likely mistake; None when it is plausible."""
    decode, prefill = evidence.decode_tokens, evidence.prefill_tokens
    where = f"{evidence.label} on {gpu_card.name}"
    if decode is not None and math.isfinite(decode) and decode > 0:
        read = weights_read_seconds(verifier_card, gpu_card)
        fastest = read * decode / (evidence.k + 1) / NODE_GPUS
        prefill_s = (2.0 * verifier_card.params_active_b * 1e9 * (prefill or 0.0)
                     / gpu_card.peak_bf16_flops)
        roofline = read * decode + prefill_s
        latency = evidence.batch1_latency
        if latency > SLOW_MARGIN * roofline and "ms" not in units:
            return (evidence.latency_column,
                    f"latency {latency:.4g} s at the lowest rate is {latency / roofline:.0f}x "
                    f"the roofline of one request ({roofline:.3g} s for {where}): these "
                    "look like milliseconds; if so, rerun with --units ms")
        if latency < fastest:
            return (evidence.latency_column,
                    f"latency {latency:.4g} s at the lowest rate is below the {fastest:.3g} s "
                    f"that even {NODE_GPUS} GPUs take to read {verifier_card.name}'s weights "
                    f"once per verification pass ({where}, {decode:g} decode tokens): a "
                    "per-token latency, or minutes? The table wants each request's mean "
                    "latency in seconds")
    if prefill is not None and decode is not None and math.isfinite(prefill + decode):
        ceiling = compute_ceiling_rps(verifier_card, gpu_card, prefill, decode)
        seen = max(evidence.rps_max, evidence.ceiling or 0.0)
        if seen > CEILING_MARGIN * ceiling and "rpm" not in units:
            what = ("a measured rate of" if evidence.rps_max >= (evidence.ceiling or 0.0)
                    else "the law through the points puts the ceiling at")
            return ("rps",
                    f"{what} {seen:.4g} RPS, over {CEILING_MARGIN:g}x the compute ceiling "
                    f"of {where} ({ceiling:.3g} RPS for one GPU at "
                    f"{prefill:g}+{decode:g} tokens per request): these look like requests "
                    "per minute; if so, rerun with --units rpm")
    return None


def _units_hint(units, *, rates: bool, latencies: bool) -> str:
    """What to rerun with, leaving out a conversion already asked for."""
    hints = []
    if rates and "rpm" not in units:
        hints.append("rates in requests per minute (--units rpm)")
    if latencies and "ms" not in units:
        hints.append("latencies in milliseconds (--units ms)")
    if not hints:
        return "check the rps and latency columns: the table wants requests per second " \
               "and seconds"
    return f"{' or '.join(hints)}? if so, rerun with that option"


def pace_problem(evidence: GroupEvidence, units=()) -> tuple[str, str] | None:
    """(column, message) when the group's fastest point is slower or faster per output
    token than any LLM server (needs no card: ``SLOWEST_SECONDS_PER_TOKEN``,
    ``FASTEST_SECONDS_PER_TOKEN``); None when it is plausible or the lengths are unknown."""
    decode, prefill = evidence.decode_tokens, evidence.prefill_tokens or 0.0
    latency, column = evidence.fastest_latency, evidence.latency_column
    if decode is None or not math.isfinite(decode) or decode <= 0 \
            or not math.isfinite(latency) or not math.isfinite(prefill):
        return None
    pace = latency / decode
    slowest = SLOWEST_SECONDS_PER_TOKEN * decode + PREFILL_SECONDS_PER_TOKEN * prefill
    said = (f"{column} {latency:.4g} s at the fastest point of {evidence.label} is "
            f"{pace:.3g} s per output token")
    if latency > slowest:
        advice = ("these look like milliseconds; if so, rerun with --units ms"
                  if "ms" not in units else
                  "even read as milliseconds; check the column: the table wants each "
                  "request's mean latency in seconds")
        return (column, f"{said}, slower than any GPU serves ({SLOWEST_SECONDS_PER_TOKEN:g} "
                        f"s an output token, {PREFILL_SECONDS_PER_TOKEN:g} s a prompt token): "
                        f"{advice}")
    if pace < FASTEST_SECONDS_PER_TOKEN:
        advice = ("the file may be in seconds already: rerun without --units ms"
                  if "ms" in units else
                  "a per-token latency? the table wants each request's mean latency in "
                  "seconds")
        return (column, f"{said}, faster than any GPU serves (at least "
                        f"{FASTEST_SECONDS_PER_TOKEN:g} s a token): {advice}")
    return None


#: RPS x mean latency over the measured mean in flight, median over a file's points: Little's
#: law makes it 1 (a window's edges move it by a few percent); a unit mistake makes it 60
#: (rates per minute), 1,000 (milliseconds) or their inverses, far outside this factor.
LITTLE_LAW_FACTOR = 4.0


def measured_in_flight_problem(rps, latency, mean_concurrency, units=(),
                               latency_column: str = "latency_mean_s",
                               fitted=None) -> tuple[int, str, str] | None:
    """(index, column, message) when the file's own measured requests in flight
    (``mean_concurrency``, GuideLLM's and the simulator's) disagree with RPS x latency by
    more than ``LITTLE_LAW_FACTOR`` at the median of its fitted points: the one unit check
    a light sweep cannot pass by being light. None when they agree or nothing says."""
    rps = np.asarray(rps, dtype=float)
    latency = np.asarray(latency, dtype=float)
    measured = np.asarray(mean_concurrency, dtype=float)
    fitted = np.ones(len(rps), bool) if fitted is None else np.asarray(fitted, bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = rps * latency / measured
    judged = fitted & np.isfinite(ratio) & (ratio > 0) & (measured > 0)
    if not judged.any():
        return None
    typical = float(np.median(ratio[judged]))
    if 1.0 / LITTLE_LAW_FACTOR <= typical <= LITTLE_LAW_FACTOR:
        return None
    i = int(np.flatnonzero(judged)[np.argmin(np.abs(np.log(ratio[judged] / typical)))])
    return (i, "rps",
            f"RPS {rps[i]:.4g} x {latency_column} {latency[i]:.4g} s puts "
            f"{rps[i] * latency[i]:,.4g} requests in flight (Little's law) where the point "
            f"measured {measured[i]:,.4g} (mean_concurrency), {typical:,.3g} times off over "
            "the file: " + _units_hint(units, **_factor_units(typical)))


def _factor_units(factor: float) -> dict[str, bool]:
    """Which conversions a factor RPS x latency / measured in flight points to: 60 rates
    per minute, 1,000 milliseconds, 60,000 both; anything else names both to check."""
    near = {"rates": (60.0,), "latencies": (1000.0,), "both": (60_000.0,)}
    close = {name: any(abs(math.log(factor / f)) < math.log(LITTLE_LAW_FACTOR) for f in fs)
             for name, fs in near.items()}
    if close["rates"] and not close["latencies"]:
        return {"rates": True, "latencies": False}
    if close["latencies"] and not close["rates"]:
        return {"rates": False, "latencies": True}
    return {"rates": True, "latencies": True}


def in_flight_problem(rps, latency, requests=None, units=(),
                      latency_column: str = "latency_mean_s",
                      fitted=None) -> tuple[int, str, str] | None:
    """(index, column, message) for the first point whose requests in flight, RPS x
    latency (Little's law), no server holds; None when every point is plausible. Needs
    no card.

    A point that says how many requests it measured (``requests``, NaN where unknown)
    is held to ``IN_FLIGHT_PER_REQUEST`` times that count, the sharper bound, where it
    is fitted (``fitted``, a mask; None: every point); a point set aside is not fitted,
    so on its own it cannot mislead the fit, and the fitted points carry the evidence.
    A point without a count is held to ``MAX_IN_FLIGHT``, fitted or not: without counts
    that bound is loose at the fitted points, and the overloaded points, the most
    crowded, are the evidence left."""
    rps = np.asarray(rps, dtype=float)
    latency = np.asarray(latency, dtype=float)
    counts = (np.full(len(rps), np.nan) if requests is None
              else np.asarray(requests, dtype=float))
    fitted = np.ones(len(rps), bool) if fitted is None else np.asarray(fitted, bool)
    in_flight = rps * latency
    known = np.isfinite(counts) & (counts > 0)
    limit = np.where(known, IN_FLIGHT_PER_REQUEST * np.where(known, counts, 0.0),
                     MAX_IN_FLIGHT)
    judged = ~known | fitted
    over = judged & np.isfinite(in_flight) & (in_flight > limit)
    if not over.any():
        return None
    i = int(np.flatnonzero(over)[0])
    bound = (f"{IN_FLIGHT_PER_REQUEST:g}x the {counts[i]:.0f} requests the point measured"
             if known[i] else f"the {MAX_IN_FLIGHT:,} any LLM server holds")
    return (i, "rps",
            f"RPS {rps[i]:.4g} x {latency_column} {latency[i]:.4g} s puts "
            f"{in_flight[i]:,.0f} requests in flight (Little's law), more than {bound}: "
            + _units_hint(units, rates=True, latencies=True))
