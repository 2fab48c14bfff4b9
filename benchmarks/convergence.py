"""Robustness harness: do default fits converge?

Divergences and R-hat of `bayesspec fit` at its defaults on simulator sweeps with 1, 2, 4
and 16 groups, dense and speculative, over several seeds.

    python benchmarks/convergence.py --seeds 5        # about 10 minutes on 2 cores
    python benchmarks/convergence.py --quick --json

The data are what a user makes first: `bayesspec simulate` sweeps (GuideLLM-like: a
synchronous point, 7 Poisson rates, a throughput point) of Qwen3-8B on H100.

- dense, G groups: G (prefill, decode) pairs of plain decoding;
- speculative, G groups: G (alpha, k) configurations of EAGLE-3 drafting plus the dense
  baseline at the same lengths (G = 1 is the one-sweep SD file of the README).

Each fit uses the model's defaults (4 chains, its tune/draws/target_accept) and a new
sampler seed and simulator seed per replicate. Prints per fit: divergences, R-hat max
and bulk-ESS min over the decision quantities (C1, C2, cycle coefficients, noise; what
answers are computed from) and over every variable, the verdict and seconds; then one
summary row per (model, groups).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

PAIRS = [(p, d) for p in (256, 512, 1024, 2048) for d in (128, 256, 512, 1024)]
CONFIGS = [(a, k) for a in (0.8, 0.6, 0.7, 0.9) for k in (3, 2, 4, 1)]
GROUPS = (1, 2, 4, 16)
BAYESSPEC = Path(sys.executable).with_name("bayesspec")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def simulate(folder: Path, name: str, seed: int, *options: str) -> Path:
    path = folder / f"{name}.csv"
    subprocess.run([str(BAYESSPEC), "simulate", "--verifier", "Qwen3-8B", "--seed",
                    str(seed), "--quiet", "-o", str(path), *options], check=True,
                   capture_output=True, text=True)
    return path


def dataset(model: str, groups: int, seed: int, folder: Path):
    import pandas as pd

    from bayesspec.data import read_tidy

    parts = []
    if model == "dense":
        for i, (prefill, decode) in enumerate(PAIRS[:groups]):
            parts.append(simulate(folder, f"d{i}", seed * 100 + i, "--prefill", str(prefill),
                                  "--decode", str(decode)))
    else:
        parts.append(simulate(folder, "base", seed * 100, "--prefill", "512", "--decode",
                              "512"))
        for i, (alpha, k) in enumerate(CONFIGS[:groups]):
            parts.append(simulate(folder, f"s{i}", seed * 100 + 1 + i, "--prefill", "512",
                                  "--decode", "512", "--k", str(k), "--alpha", str(alpha)))
    combined = folder / f"{model}_{groups}_{seed}.csv"
    pd.concat([pd.read_csv(p) for p in parts]).to_csv(combined, index=False)
    return read_tidy(combined)


def one_fit(model: str, groups: int, seed: int) -> dict:
    from bayesspec.inference import SamplerSettings
    from bayesspec.bayes.workflow import fit

    with tempfile.TemporaryDirectory() as folder:
        data = dataset(model, groups, seed, Path(folder))
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fit(data, model, settings=SamplerSettings(seed=seed, progress=False))
    verdict = result.diagnostics
    return {"model": model, "groups": groups, "seed": seed,
            "divergences": verdict["divergences"],
            "rhat_decision": verdict["decision"]["rhat_max"],
            "ess_decision": verdict["decision"]["ess_bulk_min"],
            "rhat_all": verdict["rhat_max"], "ess_all": verdict["ess_bulk_min"],
            "worst_other": verdict["other"]["worst"], "status": verdict["status"],
            "seconds": round(time.perf_counter() - started, 1)}


def summarise(rows: list[dict]) -> list[dict]:
    out = []
    for model in ("dense", "speculative"):
        for groups in GROUPS:
            these = [r for r in rows if r["model"] == model and r["groups"] == groups]
            if not these:
                continue
            out.append({"model": model, "groups": groups, "fits": len(these),
                        "zero_divergences": sum(r["divergences"] == 0 for r in these),
                        "rhat_decision_max": max(r["rhat_decision"] for r in these),
                        "rhat_decision_ok": sum(r["rhat_decision"] <= 1.01 for r in these),
                        "rhat_all_max": max(r["rhat_all"] for r in these),
                        "usable": sum(r["status"] != "not converged" for r in these),
                        "seconds_median": float(np.median([r["seconds"] for r in these]))})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="replicates per case (default 5)")
    parser.add_argument("--quick", action="store_true", help="2 seeds")
    parser.add_argument("--models", default="dense,speculative")
    parser.add_argument("--groups", default=",".join(map(str, GROUPS)))
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args()
    seeds = 2 if args.quick else args.seeds
    rows = []
    started = time.perf_counter()
    print(f"{'model':<12} {'groups':>6} {'seed':>4} {'div':>4} {'R-hat dec':>9} "
          f"{'ESS dec':>8} {'R-hat all':>9} {'ESS all':>8}  {'verdict':<20} {'s':>6}",
          file=sys.stdout if not args.json else sys.stderr, flush=True)
    for model in args.models.split(","):
        for groups in map(int, args.groups.split(",")):
            for seed in range(1, seeds + 1):
                row = one_fit(model, groups, seed)
                rows.append(row)
                print(f"{model:<12} {groups:>6} {seed:>4} {row['divergences']:>4} "
                      f"{row['rhat_decision']:>9.4f} {row['ess_decision']:>8.0f} "
                      f"{row['rhat_all']:>9.4f} {row['ess_all']:>8.0f}  {row['status']:<20} "
                      f"{row['seconds']:>6.1f}",
                      file=sys.stdout if not args.json else sys.stderr, flush=True)
    summary = summarise(rows)
    total = len(rows)
    clean = sum(r["divergences"] == 0 for r in rows)
    document = {"fits": rows, "summary": summary, "zero_divergence_share": clean / total,
                "total_s": round(time.perf_counter() - started, 1)}
    if args.json:
        print(json.dumps(document, indent=2, default=float))
        return 0
    print()
    print(f"{'model':<12} {'groups':>6} {'fits':>5} {'0 div':>6} {'R-hat dec<=1.01':>16} "
          f"{'R-hat dec max':>14} {'R-hat all max':>14} {'usable':>7} {'median s':>9}")
    for s in summary:
        print(f"{s['model']:<12} {s['groups']:>6} {s['fits']:>5} {s['zero_divergences']:>6} "
              f"{s['rhat_decision_ok']:>16} {s['rhat_decision_max']:>14.4f} "
              f"{s['rhat_all_max']:>14.4f} {s['usable']:>7} {s['seconds_median']:>9.1f}")
    print(f"fits with 0 divergences: {clean}/{total} ({clean / total:.0%}); "
          f"total {document['total_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
