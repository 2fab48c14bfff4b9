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
mistake is a factor of 60 or 1000, far outside them. Without a
card for the verifier or the GPU nothing is checked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from bayesspec.errors import BadInput

__all__ = ["UNITS", "parse_units", "convert", "RATE_COLUMNS", "LATENCY_COLUMNS",
           "GroupEvidence", "plausibility_problem", "compute_ceiling_rps",
           "weights_read_seconds"]

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
    points do not rise with the rate)."""

    label: str
    row: int
    prefill_tokens: float
    decode_tokens: float
    k: int
    batch1_latency: float
    rps_max: float
    ceiling: float | None


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
            return ("latency_mean_s",
                    f"latency {latency:.4g} s at the lowest rate is {latency / roofline:.0f}x "
                    f"the roofline of one request ({roofline:.3g} s for {where}): these "
                    "look like milliseconds; if so, rerun with --units ms")
        if latency < fastest:
            return ("latency_mean_s",
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
