"""Validation: the moe model on replicate eq. (4) datasets, at the defaults.

The data are generated independently of bayesspec's MoE code.

    nice python -W ignore::UserWarning benchmarks/moe_validation.py --replicates 10 \
        --first-seed 140 --out moe.csv       # 25-530 s per fit on 2 cores

Data: ``validation_design(seed)`` (independent of bayesspec's MoE code and of
its tests: a brentq least root per point, Gamma request latencies, run-level log-normal
noise): a Qwen3-30B-A3B-like verifier (m = 8 of M = 128, T = RPS x L), 4-16 (prefill,
decode) pairs, 8-10 rates from about 1% to about 88% of saturation, 1-3% noise plus the
standard error of 300-1000 requests, and roofline costs whose decode efficiency is drawn
per replicate, so that coverage rises anywhere from the first few per cent of the sweep
to across its lower half.

Each replicate is fitted by ``workflow.fit`` (what ``fit --model moe`` runs) with the
model's defaults, and by the dense model on the same data. Prints per replicate the
convergence verdict (R-hat, bulk ESS, divergences), the share of groups whose 90%
intervals cover C1u, C1s, C2u, C2s, and the low-load R^2 against the true curve of both
models (lower half of each sweep's rates, each group normalised by its true latency at
the lowest rate); the last lines pool the coverage over groups and replicates.
``--out`` writes every (replicate, group, part). Sampler options left unset are the
model's defaults (``--chains/--draws/--tune/--init`` only for exploration).

The data: nothing here calls ``bayesspec.laws`` or ``bayesspec.simulate.synthetic``. Each
load point's mean latency is the least root of eq. (4),

    L = (C1u + phi*C1s) / (1 - RPS*(C2u + phi*C2s)),   phi = 1 - (1 - m/M)^(RPS*L),

found with ``scipy.optimize.brentq`` after a scan upwards from the phi = 0 latency for the
first sign change (the least fixed point: the one a load that rises from zero reaches).
Costs come from a roofline of a sparse verifier on one GPU (weights and KV bytes over HBM
bandwidth, FLOPs over compute), not from ``synthetic.moe_truth``. The measurement model
is also its own: the mean of ``n`` requests whose latencies are Gamma distributed with a
coefficient of variation that grows with utilisation (queueing), times a run-level
log-normal error (the 1-3% a repeated run moves by); the recorded ``latency_std_s`` is a
sample standard deviation of those ``n`` requests.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import brentq

PARTS = ("C1u", "C1s", "C2u", "C2s")

# Sparse verifiers: (name, experts_active, experts_total, expert weights GB, other
# weights GB streamed per step, active params B (compute per token), KV bytes per token).
VERIFIERS = {
    # 48 layers x 128 experts x 3 x 2048 x 768 x 2 B = 58 GB of experts; attention and
    # lm_head about 2.4 GB; 3.3B active; KV 2 x 48 layers x 4 heads x 128 x 2 B.
    "Qwen3-30B-A3B": (8, 128, 58.0, 2.4, 3.3, 98_304),
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


LENGTHS = (256, 512, 768, 1024)


def coverage_at(row, rps) -> np.ndarray:
    """phi at the true latency of each rate (T = RPS*L)."""
    latency = true_latency(row, rps)
    return 1.0 - (1.0 - row["experts_active"] / row["experts_total"]) ** (rps * latency)


def validation_design(seed: int) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(truth, data, design) of one replicate: a
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



def low_load_r2(result, truth: pd.DataFrame, fractions) -> float:
    """R^2 of the posterior-mean latency against the true eq. (4) curve on the rates in
    the lower half of each sweep, each group normalised by its true lowest-rate latency."""
    observed, predicted = [], []
    for _, row in truth.iterrows():
        rates = sweep_rates(row, fractions)
        rates = rates[rates <= np.median(rates)]
        true = true_latency(row, rates)
        group = result.select_group(prefill=int(row["prefill_tokens"]),
                                    decode=int(row["decode_tokens"]))
        mean = result.group_curve(group).latency(rates).mean(axis=0)
        observed.append(true / true[0])
        predicted.append(mean / true[0])
    observed, predicted = np.concatenate(observed), np.concatenate(predicted)
    return float(1.0 - np.sum((observed - predicted) ** 2)
                 / np.sum((observed - observed.mean()) ** 2))


def covers(result, truth: pd.DataFrame, prob: float = 0.9) -> pd.DataFrame:
    """Per (group, part): whether the central ``prob`` interval covers the truth."""
    tail = (1.0 - prob) / 2.0
    records = []
    for _, row in truth.iterrows():
        group = result.select_group(prefill=int(row["prefill_tokens"]),
                                    decode=int(row["decode_tokens"]))
        for part in PARTS:
            draws = result.draws(part, group)
            lo, hi = np.quantile(draws, [tail, 1.0 - tail])
            records.append({"prefill": int(row["prefill_tokens"]),
                            "decode": int(row["decode_tokens"]), "parameter": part,
                            "truth": float(row[part]), "lo": float(lo), "hi": float(hi),
                            "covers": bool(lo <= row[part] <= hi)})
    return pd.DataFrame(records)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=100)
    parser.add_argument("--chains", type=int)
    parser.add_argument("--draws", type=int)
    parser.add_argument("--tune", type=int)
    parser.add_argument("--init", choices=("jitter", "optimised"),
                        help="chain starts (default: the model's)")
    parser.add_argument("--no-dense", action="store_true", help="skip the dense fits")
    parser.add_argument("--out", type=Path, help="CSV of every (replicate, group, part)")
    args = parser.parse_args(argv)

    from bayesspec.data import prepare
    from bayesspec.inference import SamplerSettings
    from bayesspec.bayes.workflow import fit

    all_covers, summary = [], []
    for r in range(args.replicates):
        seed = args.first_seed + r
        truth, raw, design = validation_design(seed)
        data = prepare(raw, source=f"<moe validation seed {seed}>")
        settings = SamplerSettings(chains=args.chains, draws=args.draws, tune=args.tune,
                                   seed=seed, progress=False, init=args.init)
        started = time.perf_counter()
        moe = fit(data, "moe", settings=settings)
        seconds = time.perf_counter() - started
        diag = moe.diagnostics
        table = covers(moe, truth)
        table.insert(0, "seed", seed)
        all_covers.append(table)
        r2_moe = low_load_r2(moe, truth, design["fractions"])
        r2_dense = float("nan")
        if not args.no_dense:
            r2_dense = low_load_r2(fit(data, "dense", settings=settings), truth,
                                   design["fractions"])
        share = table.groupby("parameter")["covers"].mean()
        record = {"seed": seed, "groups": design["groups"], "rates": design["rates"],
                  "noise": design["noise"], "n_requests": design["n_requests"],
                  "efficiency": design["decode_efficiency"],
                  "phi_low": design["phi_lowest"], "phi_mid": design["phi_middle"],
                  "status": diag["status"], "rhat_max": round(diag["rhat_max"], 3),
                  "ess_min": round(diag["ess_bulk_min"]), "divergences": diag["divergences"],
                  **{f"cover_{p}": round(float(share[p]), 2) for p in PARTS},
                  "r2_moe": round(r2_moe, 4), "r2_dense": round(r2_dense, 4),
                  "seconds": round(seconds)}
        summary.append(record)
        print(" ".join(f"{k}={v}" for k, v in record.items()), flush=True)

    summary = pd.DataFrame(summary)
    pooled = pd.concat(all_covers)
    if args.out:
        pooled.to_csv(args.out, index=False)
        summary.to_csv(args.out.with_suffix(".summary.csv"), index=False)
    print()
    print(summary.to_string(index=False))
    by_part = pooled.groupby("parameter")["covers"].agg(["mean", "size"])
    print("90% interval coverage pooled over groups and replicates (target 0.85-0.95):")
    for part in PARTS:
        print(f"  {part}: {by_part.loc[part, 'mean']:.3f} of {int(by_part.loc[part, 'size'])}")
    print(f"  all four: {pooled['covers'].mean():.3f} of {len(pooled)}")
    converged = (summary["status"] == "converged").sum()
    print(f"converged: {converged} of {len(summary)}; low-load R^2 moe min "
          f"{summary['r2_moe'].min():.4f}, above dense in "
          f"{(summary['r2_moe'] > summary['r2_dense']).sum()} of {len(summary)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
