"""Eq. (4) sweeps generated independently of bayesspec's own MoE code.

A helper of ``moe_validation.py``; not run on its own.

Nothing here calls ``bayesspec.laws`` or ``bayesspec.simulate.synthetic``: each load point's
mean latency is the least root of eq. (4),

    L = (C1u + phi*C1s) / (1 - RPS*(C2u + phi*C2s)),   phi = 1 - (1 - m/M)^(RPS*L),

found with ``scipy.optimize.brentq`` after a scan upwards from the phi = 0 latency for the
first sign change (the least fixed point: the one a load that rises from zero reaches).
Costs come from a roofline of a sparse verifier on one GPU (weights and KV bytes over HBM
bandwidth, FLOPs over compute), not from ``synthetic.moe_truth``. The measurement model
is also its own: the mean of ``n`` requests whose latencies are Gamma distributed with a
coefficient of variation that grows with utilisation (queueing), times a run-level
log-normal error (the 1-3% a repeated run moves by); the recorded ``latency_std_s`` is a
sample standard deviation of those ``n`` requests.

``validation_design(seed)`` is the replicate design; ``steep_design(seed)`` is a design
whose coverage rises steeply within a sweep (where an in-graph solve that stops short of
the least root is wrong: docs/findings/moe-and-cap.md).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import brentq

# Sparse verifiers: (name, experts_active, experts_total, expert weights GB, other
# weights GB streamed per step, active params B (compute per token), KV bytes per token).
VERIFIERS = {
    # 48 layers x 128 experts x 3 x 2048 x 768 x 2 B = 58 GB of experts; attention and
    # lm_head about 2.4 GB; 3.3B active; KV 2 x 48 layers x 4 heads x 128 x 2 B.
    "Qwen3-30B-A3B": (8, 128, 58.0, 2.4, 3.3, 98_304),
    # 24 layers x 32 experts (mxfp4 about 4.25 bits): about 12 GB of experts.
    "gpt-oss-20b": (4, 32, 12.0, 1.8, 3.6, 49_152),
}
GPU = {"bandwidth": 3.35e12, "flops": 7.0e14}


def roofline_costs(verifier: str, prefill: int, decode: int, *, decode_efficiency=1.0,
                   step_overhead_s=2.5e-3, c2_expert_share=0.25):
    """(C1u, C1s, C2u, C2s) in seconds of a dense-decoding request of one verifier.

    C1u: ``decode`` steps of overhead plus non-expert weights, plus prefill compute;
    C1s: the expert weights streamed per step once every expert is touched. C2: what one
    more concurrent request adds to everyone's latency (its KV reads and per-token compute
    in each of the ``decode`` steps, its prefill compute once), a ``c2_expert_share`` of
    which is expert work that grows with coverage. ``step_overhead_s``: a decode step's
    launch and scheduling time, which sets C1s/C1u. ``decode_efficiency``: the share of
    peak FLOP/s a decode step's per-token work reaches (small-batch grouped expert GEMMs
    reach a few per cent); it sets C2 against the weight streaming, so where in a sweep
    the experts become covered: at 1 coverage is complete by 5% of saturation, at 0.03
    it rises across the lower half of the sweep.
    """
    _, _, experts_gb, other_gb, active_b, kv_bytes = VERIFIERS[verifier]
    bandwidth, flops = GPU["bandwidth"], GPU["flops"]
    token_compute = 2 * active_b * 1e9 / flops
    c1u = decode * (step_overhead_s + other_gb * 1e9 / bandwidth) \
        + prefill * token_compute
    c1s = decode * experts_gb * 1e9 / bandwidth
    c2 = decode * ((prefill + decode / 2) * kv_bytes / bandwidth
                   + token_compute / decode_efficiency) + prefill * token_compute
    return c1u, c1s, (1 - c2_expert_share) * c2, c2_expert_share * c2


def truth_table(verifier: str, pairs, **options) -> pd.DataFrame:
    m, M = VERIFIERS[verifier][:2]
    rows = []
    for prefill, decode in pairs:
        c1u, c1s, c2u, c2s = roofline_costs(verifier, prefill, decode, **options)
        rows.append({"verifier": verifier, "prefill_tokens": int(prefill),
                     "decode_tokens": int(decode), "experts_active": m,
                     "experts_total": M, "C1u": c1u, "C1s": c1s, "C2u": c2u, "C2s": c2s})
    return pd.DataFrame(rows)


def least_root_latency(rps, c1u, c1s, c2u, c2s, m, M) -> float:
    """The least L solving eq. (4) (T = RPS*L), by a geometric scan and brentq."""
    if rps <= 0:
        return c1u
    if rps * (c2u + c2s) >= 1:
        return np.inf
    keep = 1.0 - m / M

    def excess(latency):
        phi = 1.0 - keep ** (rps * latency)
        return (c1u + phi * c1s) / (1.0 - rps * (c2u + phi * c2s)) - latency

    low = c1u / (1.0 - rps * c2u)                       # phi = 0: excess >= 0 here
    high = (c1u + c1s) / (1.0 - rps * (c2u + c2s))      # phi = 1: excess <= 0 here
    grid = np.geomspace(low, high, 400) if high > low else np.array([low])
    values = np.array([excess(x) for x in grid])
    below = np.flatnonzero(values <= 0.0)
    if not below.size:
        return high
    first = below[0]
    if first == 0 or values[first] == 0.0:
        return float(grid[first])
    return float(brentq(excess, grid[first - 1], grid[first], xtol=1e-14, rtol=1e-13))


def true_latency(row, rps) -> np.ndarray:
    return np.array([least_root_latency(float(r), row["C1u"], row["C1s"], row["C2u"],
                                        row["C2s"], row["experts_active"],
                                        row["experts_total"]) for r in np.atleast_1d(rps)])


def sweep_rates(row, fractions) -> np.ndarray:
    return np.asarray(fractions, float) / (row["C2u"] + row["C2s"])


def measure(truth: pd.DataFrame, fractions, *, noise: float, n_requests: int,
            rng: np.random.Generator) -> pd.DataFrame:
    """One load test per (group, rate): the mean and sample sd of ``n_requests`` Gamma
    latencies around the true mean, times a run-level log-normal error of sd ``noise``."""
    rows = []
    for _, row in truth.iterrows():
        rates = sweep_rates(row, fractions)
        for rate, fraction, mean in zip(rates, fractions, true_latency(row, rates)):
            cv = 0.25 + 0.9 * fraction ** 2            # spread grows with queueing
            run_mean = mean * np.exp(rng.normal(0.0, noise))
            shape = 1.0 / cv**2
            requests = rng.gamma(shape, run_mean / shape, n_requests)
            rows.append({"verifier": row["verifier"], "drafter": "", "k": 0,
                         "prefill_tokens": int(row["prefill_tokens"]),
                         "decode_tokens": int(row["decode_tokens"]), "gpu": "H100",
                         "experts_active": int(row["experts_active"]),
                         "experts_total": int(row["experts_total"]),
                         "rps": rate, "latency_mean_s": float(requests.mean()),
                         "latency_std_s": float(requests.std(ddof=1)),
                         "n_requests": n_requests, "strategy": "constant"})
    return pd.DataFrame(rows)


# A steep design: Qwen3-30B-A3B, 4 (prefill, decode) pairs, 9 rates from 1% to 88% of
# saturation, 1.5% noise plus the standard errors of 600 requests. The costs put coverage
# rising from about 0 to 1 across the whole sweep (8 ms of overhead per decode step,
# decode at 0.55% of peak FLOP/s, half of C2 expert work): C1s/C1u = 2,
# beta*C1f/C2f = 1, where an in-graph solve that stops short of the least root fails.
STEEP_PAIRS = ((256, 256), (512, 512), (1024, 256), (256, 1024))
STEEP_FRACTIONS = np.linspace(0.01, 0.88, 9)
STEEP_COSTS = {"decode_efficiency": 0.0055, "step_overhead_s": 8e-3, "c2_expert_share": 0.5}
LENGTHS = (256, 512, 768, 1024)


def steep_design(seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(truth, data) of the steep design above."""
    truth = truth_table("Qwen3-30B-A3B", STEEP_PAIRS, **STEEP_COSTS)
    data = measure(truth, STEEP_FRACTIONS, noise=0.015, n_requests=600,
                   rng=np.random.default_rng(seed))
    return truth, data


def replicate_design(seed: int) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(truth, data, design) of one replicate: a verifier, 4-16 (prefill, decode) pairs of
    {256, 512, 768, 1024}^2, 8-10 rates from 1-4% to 80-90% of saturation, noise 1-3%,
    300-1000 requests per point, all drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    verifier = str(rng.choice(list(VERIFIERS)))
    n_groups = int(rng.integers(4, 17))
    all_pairs = [(p, g) for p in LENGTHS for g in LENGTHS]
    pick = rng.choice(len(all_pairs), n_groups, replace=False)
    pairs = [all_pairs[i] for i in sorted(pick)]
    lowest, highest = rng.uniform(0.01, 0.04), rng.uniform(0.80, 0.90)
    n_rates = int(rng.integers(8, 11))
    noise = float(rng.uniform(0.01, 0.03))
    n_requests = int(rng.integers(300, 1001))
    truth = truth_table(verifier, pairs)
    fractions = np.linspace(lowest, highest, n_rates)
    data = measure(truth, fractions, noise=noise, n_requests=n_requests, rng=rng)
    design = {"verifier": verifier, "groups": n_groups, "rates": n_rates,
              "lowest": round(lowest, 3), "highest": round(highest, 3),
              "noise": round(noise, 4), "n_requests": n_requests}
    return truth, data, design


def coverage_at(row, rps) -> np.ndarray:
    """phi at the true latency of each rate (T = RPS*L)."""
    latency = true_latency(row, rps)
    return 1.0 - (1.0 - row["experts_active"] / row["experts_total"]) ** (rps * latency)


def validation_design(seed: int) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(truth, data, design) of one replicate of ``benchmarks/moe_validation.py``: a
    Qwen3-30B-A3B-like verifier (m = 8 of M = 128), 4-16 (prefill, decode) pairs of
    {256, 512, 768, 1024}^2, 8-10 rates from 0.8-1.5% to 85-90% of saturation, noise 1-3%,
    300-1000 requests per point; the roofline's decode efficiency (0.4-5% of peak),
    step overhead (4-10 ms) and expert share of C2 (0.25-0.6) drawn per replicate, so that
    coverage completes anywhere from a few per cent of the sweep to past its middle."""
    rng = np.random.default_rng(seed)
    n_groups = int(rng.integers(4, 17))
    all_pairs = [(p, g) for p in LENGTHS for g in LENGTHS]
    pick = rng.choice(len(all_pairs), n_groups, replace=False)
    pairs = [all_pairs[i] for i in sorted(pick)]
    lowest, highest = rng.uniform(0.008, 0.015), rng.uniform(0.85, 0.90)
    n_rates = int(rng.integers(8, 11))
    noise = float(rng.uniform(0.01, 0.03))
    n_requests = int(rng.integers(300, 1001))
    costs = {"decode_efficiency": float(np.exp(rng.uniform(np.log(0.004), np.log(0.05)))),
             "step_overhead_s": float(rng.uniform(4e-3, 10e-3)),
             "c2_expert_share": float(rng.uniform(0.25, 0.6))}
    truth = truth_table("Qwen3-30B-A3B", pairs, **costs)
    fractions = np.linspace(lowest, highest, n_rates)
    data = measure(truth, fractions, noise=noise, n_requests=n_requests, rng=rng)
    first = truth.iloc[0]
    phi = coverage_at(first, sweep_rates(first, fractions))
    design = {"groups": n_groups, "rates": n_rates, "fractions": fractions,
              "noise": round(noise, 4), "n_requests": n_requests,
              "decode_efficiency": round(costs["decode_efficiency"], 4),
              "phi_lowest": round(float(phi[0]), 3),
              "phi_middle": round(float(phi[n_rates // 2]), 3)}
    return truth, data, design
