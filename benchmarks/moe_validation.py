"""Validation: the moe model on replicate eq. (4) datasets, at the defaults.

The data are generated independently of bayesspec's MoE code.

    nice python -W ignore::UserWarning benchmarks/moe_validation.py --replicates 10 \
        --first-seed 140 --out moe.csv       # 25-530 s per fit on 2 cores

Data: ``moe_data.validation_design(seed)`` (independent of bayesspec's MoE code and of
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
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import moe_data  # noqa: E402

PARTS = ("C1u", "C1s", "C2u", "C2s")


def low_load_r2(result, truth: pd.DataFrame, fractions) -> float:
    """R^2 of the posterior-mean latency against the true eq. (4) curve on the rates in
    the lower half of each sweep, each group normalised by its true lowest-rate latency."""
    observed, predicted = [], []
    for _, row in truth.iterrows():
        rates = moe_data.sweep_rates(row, fractions)
        rates = rates[rates <= np.median(rates)]
        true = moe_data.true_latency(row, rates)
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
        truth, raw, design = moe_data.validation_design(seed)
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
