"""Step-time models: how long one engine step of a vLLM-like server takes.

One engine step runs one verifier forward pass over every token scheduled in it (decode
tokens, the k+1 verification tokens of speculative requests, prefill chunks) and, with
speculative decoding, the drafter's k forward passes. Each pass costs

    fixed + combine(weights(T) + a * kv_tokens, b * tokens)

where ``tokens`` are the tokens processed in the pass, ``kv_tokens`` the cached context
its attention reads, ``weights(T)`` the time to stream the weights (for a mixture of
experts only the experts that the pass's T routed tokens touch) and ``combine`` is a sum
(default, the form of SpecDecode-Bench's published fit) or a max (an overlapping
roofline). The step adds a scheduler overhead and optional per-request host costs.

A :class:`StepModel` is plain data, so it is easy to swap: build one by hand, take the
public Llama-3.1-8B/H100 fit (:func:`public_llama8b_h100`), derive one from catalog
cards (:func:`roofline`), or let :func:`default_step_model` choose.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from bayesspec.data.catalog import (ACTIVATION_RESERVE_GB, GPU_MEMORY_UTILIZATION,
                               kv_cache_tokens_estimate)
from bayesspec.errors import BadInput

__all__ = [
    "ForwardCost",
    "StepModel",
    "RooflineParams",
    "OVERLAPPING_ROOFLINE",
    "PUBLIC_FIT",
    "public_llama8b_h100",
    "roofline",
    "roofline_forward",
    "synthetic_eagle_head",
    "default_step_model",
    "kv_capacity_tokens",
]


@dataclass(frozen=True)
class ForwardCost:
    """Cost of one forward pass of one model (seconds).

    ``experts_s`` is the time to stream *all* routed-expert weights; a pass pays the share
    ``1 - (1 - m/M)^T`` of it, the expected fraction of experts touched by T routed tokens
    each choosing m of M (docs/laws.md, eq. (4) MoE expert coverage). It is zero for a
    dense model, whose whole weight stream is in ``weights_s``.
    """

    fixed_s: float
    weights_s: float
    kv_s_per_token: float
    token_s: float
    experts_s: float = 0.0
    expert_fraction: float = 0.0
    overlap: bool = False

    def __post_init__(self):
        for name in ("fixed_s", "weights_s", "kv_s_per_token", "token_s", "experts_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise BadInput(f"step model: {name} must be a finite number >= 0, got {value}")
        if not 0.0 <= self.expert_fraction < 1.0:
            raise BadInput("step model: expert_fraction (m/M) must be in [0, 1), "
                           f"got {self.expert_fraction}")

    def coverage(self, tokens):
        """Expected share of experts touched by ``tokens`` routed tokens."""
        tokens = np.asarray(tokens, dtype=float)
        if self.expert_fraction <= 0.0:
            return np.zeros_like(tokens)
        return -np.expm1(tokens * math.log1p(-self.expert_fraction))

    def time(self, tokens, kv_tokens):
        """Seconds for one pass over ``tokens`` tokens reading ``kv_tokens`` cached ones."""
        tokens = np.asarray(tokens, dtype=float)
        kv_tokens = np.asarray(kv_tokens, dtype=float)
        memory = self.weights_s + self.experts_s * self.coverage(tokens) \
            + self.kv_s_per_token * kv_tokens
        compute = self.token_s * tokens
        combined = np.maximum(memory, compute) if self.overlap else memory + compute
        return self.fixed_s + combined

    def as_array(self) -> np.ndarray:
        """The layout the engine kernel reads (see ``engine._forward``)."""
        log_miss = math.log1p(-self.expert_fraction) if self.expert_fraction > 0 else 0.0
        return np.array([self.fixed_s, self.weights_s, self.experts_s, log_miss,
                         self.kv_s_per_token, self.token_s, 1.0 if self.overlap else 0.0],
                        dtype=np.float64)


@dataclass(frozen=True)
class StepModel:
    """Time of one engine step: verifier pass, drafter passes, scheduler overheads.

    ``request_overhead_s`` is host work per scheduled request per step;
    ``draft_request_overhead_s`` is per drafting request per draft pass (proposal
    bookkeeping and sampling that a roofline does not see). Both default to zero.
    """

    verifier: ForwardCost
    drafter: ForwardCost | None = None
    step_overhead_s: float = 0.0
    request_overhead_s: float = 0.0
    draft_request_overhead_s: float = 0.0
    name: str = "custom"
    notes: str = field(default="", compare=False)

    def with_drafter(self, drafter: ForwardCost | None, **changes) -> "StepModel":
        return replace(self, drafter=drafter, **changes)

    def step_time(self, *, tokens, kv_tokens, requests, k: int = 0, drafting=None,
                  drafting_kv=None):
        """Reference (numpy) step time; the engine kernel computes the same thing.

        ``tokens``/``kv_tokens``: all tokens the verifier processes and the context they
        read; ``requests``: requests scheduled; ``drafting``/``drafting_kv``: requests that
        draft after this step and their context (default: all of them, all the context).
        """
        tokens = np.asarray(tokens, dtype=float)
        kv_tokens = np.asarray(kv_tokens, dtype=float)
        t = self.step_overhead_s + self.request_overhead_s * np.asarray(requests, float) \
            + self.verifier.time(tokens, kv_tokens)
        if k > 0:
            if self.drafter is None:
                raise BadInput("speculative decoding (k > 0) needs a drafter in the step model")
            drafting = np.asarray(requests if drafting is None else drafting, dtype=float)
            drafting_kv = kv_tokens if drafting_kv is None else np.asarray(drafting_kv, float)
            # The first draft pass re-reads every token the verifier just processed (an
            # EAGLE head needs their hidden states, a draft model its own KV); each further
            # pass proposes one token per drafting request.
            t = t + self.drafter.time(tokens, kv_tokens) \
                + (k - 1) * np.where(drafting > 0, self.drafter.time(drafting, drafting_kv), 0.0) \
                + k * self.draft_request_overhead_s * drafting
        return t

    def decode_step_time(self, batch: float, context: float, k: int = 0):
        """Step time of ``batch`` requests all decoding at mean context ``context``."""
        batch = np.asarray(batch, dtype=float)
        return self.step_time(tokens=batch * (k + 1), kv_tokens=batch * (context + k + 1),
                              requests=batch, k=k, drafting=batch,
                              drafting_kv=batch * (context + k + 1))

    def knee_batch(self, k: int = 0, context: float = 0.0) -> float:
        """The batch of requests decoding at mean context ``context`` at which the
        verifier's pass turns compute-bound: its arithmetic over the batch's k + 1 tokens
        each reaches its memory traffic (weights, experts fully touched, KV reads).
        ``inf`` where it never does (KV reads grow faster than the arithmetic, as in plain
        decoding of long contexts). Past it an overlapping roofline's step grows by the
        arithmetic alone, k + 1 times faster per request than below it."""
        v = self.verifier
        per_request = v.token_s * (k + 1) - v.kv_s_per_token * (context + k + 1)
        if per_request <= 0:
            return float("inf")
        return float((v.weights_s + v.experts_s) / per_request)

    def as_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        drafter = self.drafter.as_array() if self.drafter is not None else np.zeros(7)
        stack = np.array([self.step_overhead_s, self.request_overhead_s,
                          self.draft_request_overhead_s], dtype=np.float64)
        return self.verifier.as_array(), drafter, stack


# ---------------------------------------------------------------------------------------
# The public Llama-3.1-8B / H100 fit (the SpecDecode-Bench simulator's linear fit)
# ---------------------------------------------------------------------------------------

PUBLIC_FIT = {
    "verifier": {"kv_s_per_token": 3.926e-8, "token_s": 2.101e-5, "constant_s": 5.886e-3},
    "eagle": {"kv_s_per_token": 2.378e-9, "token_s": 8.414e-7, "constant_s": 2.135e-3},
    "scheduler_overhead_s": 1.207e-3,
}


def _public_verifier() -> ForwardCost:
    v = PUBLIC_FIT["verifier"]
    return ForwardCost(fixed_s=0.0, weights_s=v["constant_s"], kv_s_per_token=v["kv_s_per_token"],
                       token_s=v["token_s"])


def _public_eagle() -> ForwardCost:
    d = PUBLIC_FIT["eagle"]
    return ForwardCost(fixed_s=0.0, weights_s=d["constant_s"], kv_s_per_token=d["kv_s_per_token"],
                       token_s=d["token_s"])


def public_llama8b_h100(eagle: bool = True, *, draft_request_overhead_s: float = 0.0) -> StepModel:
    """The published linear step-time fit for Llama-3.1-8B on one H100 (with its EAGLE head)."""
    return StepModel(
        verifier=_public_verifier(),
        drafter=_public_eagle() if eagle else None,
        step_overhead_s=PUBLIC_FIT["scheduler_overhead_s"],
        draft_request_overhead_s=draft_request_overhead_s,
        name="public-fit:Llama-3.1-8B/H100",
        notes="SpecDecode-Bench linear fit",
    )


# ---------------------------------------------------------------------------------------
# Roofline from catalog cards
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RooflineParams:
    """Efficiencies and fixed costs that turn card sizes into seconds.

    The defaults are calibrated, not measured: they make the roofline of Llama-3.1-8B on
    an H100 reproduce SpecDecode-Bench's published fit (weights 16.06 GB at 0.814 of
    3.35 TB/s = 5.89 ms; 131072 KV bytes per token at full bandwidth = 3.91e-8 s; 2 x 8.03
    GFLOP per token at 0.773 of 989 TFLOP/s = 2.10e-5 s; EAGLE head pass 2.135 ms), so
    other models and GPUs scale from the one pair that was measured.

    ``draft_request_overhead_s``: per drafting request per draft pass. A roofline gives
    an EAGLE head almost no per-request cost, and then SD at alpha = 0.8, k = 3 *lowers*
    the marginal cost of load of Qwen3-8B at 512/512 (fitted C2 ratio about 0.87):
    amortising each request's KV read over E tokens outweighs the extra verification
    FLOPs. The paper's vLLM measurements (docs/laws.md, eq. (3)) show C2 ratios above 1
    up to alpha of about 0.9, so the serving stack pays per-request drafting work that no
    roofline sees (proposal sampling, rejection sampling over the vocabulary, CPU-side
    bookkeeping). 20 us per request per draft pass puts that configuration at a C2 ratio
    of about 1.1 and alpha = 0.9 near 1; it is a calibration to the paper's finding, not a
    measurement. Set 0 for a pure roofline.

    ``drafter_fixed_s`` reads the public EAGLE constant (2.135 ms per "draft step") as the
    cost of one draft pass. That makes drafting expensive next to a fast MoE verifier
    step: gpt-oss-20b and Qwen3-30B-A3B are slower with SD at zero load.
    """

    weight_bandwidth_efficiency: float = 0.814
    kv_bandwidth_efficiency: float = 1.0
    compute_efficiency: float = 0.773
    verifier_fixed_s: float = 0.0
    drafter_fixed_s: float = 1.823e-3
    step_overhead_s: float = PUBLIC_FIT["scheduler_overhead_s"]
    request_overhead_s: float = 0.0
    draft_request_overhead_s: float = 20e-6
    #: False: a pass costs its memory traffic plus its arithmetic (the published fit's
    #: form, linear in the tokens of a step: eq. (1) holds exactly). True: the larger of
    #: the two (kernels overlap loads and arithmetic): a step stays near its memory floor
    #: until the arithmetic of its N x (k + 1) tokens outgrows it, then grows k + 1 times
    #: faster per request, so large k reach the compute roof at small batches and their
    #: throughput flattens below eq. (1)'s pole (:data:`OVERLAPPING_ROOFLINE`).
    overlap: bool = False

    def __post_init__(self):
        for name in ("weight_bandwidth_efficiency", "kv_bandwidth_efficiency",
                     "compute_efficiency"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.5:
                raise BadInput(f"roofline: {name} must be in (0, 1.5], got {value}")


#: The roofline with overlapping memory and compute: sweeps where the compute roof binds
#: (large k, batches past :meth:`StepModel.knee_batch`), the known truth the compute-roof
#: law is tested against (benchmarks/roof_validation.py).
OVERLAPPING_ROOFLINE = RooflineParams(overlap=True)


def roofline_forward(card, gpu, params: RooflineParams = RooflineParams(), *,
                     fixed_s: float | None = None) -> ForwardCost:
    """One model's forward-pass cost on one GPU from its catalog cards.

    Memory-bound part: weight bytes / HBM bandwidth (for a MoE split into the always-read
    shared weights and the routed experts, from total and active sizes), plus KV bytes per
    token / bandwidth per cached token read. Compute-bound part: 2 x active parameters
    FLOPs per token / peak bf16 throughput.
    """
    weight_bw = gpu.hbm_bandwidth_gb_s * 1e9 * params.weight_bandwidth_efficiency
    kv_bw = gpu.hbm_bandwidth_gb_s * 1e9 * params.kv_bandwidth_efficiency
    flops = gpu.peak_bf16_tflops * 1e12 * params.compute_efficiency
    if fixed_s is None:
        fixed_s = params.verifier_fixed_s
    token_s = 2.0 * card.params_active_b * 1e9 / flops
    kv_s = card.kv_bytes_per_token / kv_bw
    if card.is_moe:
        fraction = card.experts_active / card.experts_total
        total, active = card.weight_bytes, card.active_weight_bytes
        # total = shared + experts and active = shared + experts*m/M, solved for the two.
        experts = max(total - active, 0.0) / (1.0 - fraction)
        shared = max(total - experts, 0.0)
        return ForwardCost(fixed_s=fixed_s, weights_s=shared / weight_bw, kv_s_per_token=kv_s,
                           token_s=token_s, experts_s=experts / weight_bw,
                           expert_fraction=fraction, overlap=params.overlap)
    return ForwardCost(fixed_s=fixed_s, weights_s=card.weight_bytes / weight_bw,
                       kv_s_per_token=kv_s, token_s=token_s, overlap=params.overlap)


def roofline(verifier, gpu, drafter=None, params: RooflineParams = RooflineParams()) -> StepModel:
    """Step model of ``verifier`` (+ ``drafter``) on ``gpu`` from their catalog cards."""
    v = roofline_forward(verifier, gpu, params)
    d = None
    if drafter is not None:
        d = roofline_forward(drafter, gpu, params, fixed_s=params.drafter_fixed_s)
    name = f"roofline:{verifier.name}" + (f"+{drafter.name}" if drafter is not None else "") \
        + f"/{gpu.name}"
    return StepModel(verifier=v, drafter=d, step_overhead_s=params.step_overhead_s,
                     request_overhead_s=params.request_overhead_s,
                     draft_request_overhead_s=params.draft_request_overhead_s if d else 0.0,
                     name=name, notes="roofline from catalog cards")


def synthetic_eagle_head(verifier):
    """An EAGLE-3-shaped head for a verifier the catalog has no head for.

    One decoder layer of the verifier's width (MLP 3x wider), an fc fusing three hidden
    states, and an lm_head over a 32000-token draft vocabulary, in bf16; its KV cache is
    one layer of the verifier's. Good enough for timing; not a real checkpoint.
    """
    from bayesspec.data.catalog import ModelCard

    h = verifier.hidden_size
    q = verifier.num_attention_heads * verifier.head_dim
    kv = verifier.num_kv_heads * verifier.head_dim
    attention = 2 * h * (q + 2 * kv) + q * h   # EAGLE-3 attention reads [embedding, hidden]
    mlp = 3 * h * (3 * h)
    params = attention + mlp + 3 * h * h + 32000 * h
    return ModelCard(
        name=f"EAGLE3-{verifier.name}", hf_id="", aliases=(), role="drafter",
        architecture="eagle3", target=verifier.name,
        params_total_b=params / 1e9, params_active_b=params / 1e9, layers=1,
        hidden_size=h, num_attention_heads=verifier.num_attention_heads,
        num_kv_heads=verifier.num_kv_heads, head_dim=verifier.head_dim, bytes_per_param=2.0,
        experts_total=0, experts_active=0,
        notes="synthesised by bayesspec.simulate (no catalog card)", sources={}, path="",
        kv_bytes_per_value=2.0,
    )


def _is(card, name: str) -> bool:
    from bayesspec.data.catalog import normalize_name

    return any(normalize_name(n) == normalize_name(name) for n in card.names)


def default_step_model(verifier, gpu, drafter=None, *,
                       params: RooflineParams = RooflineParams()) -> StepModel:
    """The public fit for Llama-3.1-8B on an H100 (with its EAGLE-3 head), else a roofline.

    Arguments are catalog cards. For Llama-3.1-8B/H100 with another drafter, the verifier
    keeps the public fit and the drafter gets a roofline. Per-request drafting overhead
    comes from ``params`` in every case (see :class:`RooflineParams`).
    """
    if _is(verifier, "Llama-3.1-8B") and _is(gpu, "H100"):
        model = public_llama8b_h100(eagle=False)
        if drafter is None:
            return model
        if drafter.architecture == "eagle3" and drafter.target and _is(verifier, drafter.target):
            d = _public_eagle()
            name = "public-fit:Llama-3.1-8B+EAGLE3/H100"
        else:
            d = roofline_forward(drafter, gpu, params, fixed_s=params.drafter_fixed_s)
            name = f"public-fit:Llama-3.1-8B+roofline:{drafter.name}/H100"
        return model.with_drafter(d, draft_request_overhead_s=params.draft_request_overhead_s,
                                  name=name)
    return roofline(verifier, gpu, drafter, params)


def kv_capacity_tokens(verifier, gpu, drafter=None, *,
                       gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
                       reserve_gb: float = ACTIVATION_RESERVE_GB) -> int:
    """KV-cache tokens that fit next to the weights, vLLM style
    (:func:`bayesspec.data.catalog.kv_cache_tokens_estimate`); a clear error when the weights
    do not fit on one GPU."""
    tokens = kv_cache_tokens_estimate(verifier, gpu, drafter,
                                      gpu_memory_utilization=gpu_memory_utilization,
                                      reserve_gb=reserve_gb)
    if tokens is None:
        weights = verifier.weight_bytes + (drafter.weight_bytes if drafter is not None else 0.0)
        raise BadInput(f"{verifier.name}"
                       + (f" + {drafter.name}" if drafter is not None else "")
                       + f" does not fit on one {gpu.name} ({weights / 1e9:.1f} GB of weights, "
                       f"{gpu.memory_gb:g} GB of HBM); tensor parallelism is not simulated")
    return int(tokens)
