"""Validation: is the engine's ceiling recovered when its concurrency cap binds?

The cap is given, dropped, or learned from the curve.

    python benchmarks/cap_recovery.py --replicates 20 --json cap32.json     # about 100 min
    python benchmarks/cap_recovery.py --replicates 5 --laws learned-catalog --json learned32.json
    python benchmarks/cap_recovery.py --verifier Llama-3.1-8B --gpu A100 --prefill 1024 \
        --decode 256 --max-num-seqs 48 --replicates 5 --first-replicate 100 \
        --laws learned-catalog,capped,eq1 --json test48.json

Simulated sweeps (bayesspec's serving simulator, not the law) of one server whose batch
holds at most ``--max-num-seqs`` requests, at rates from light load up to just below the
ceiling; the dense model is fitted with the cap given, and its ceiling (the cap's
throughput, min(1/C2, cap/(C1 + C2 (cap - 1)))) is set against the truth: the simulator's
own throughput with every slot busy, measured by a long throughput run (clients sending
back to back). ``--laws`` picks the fits: ``capped`` (the cap given), ``eq1`` (the cap
dropped: eq. (1) alone, ceiling 1/C2), ``learned-catalog`` / ``learned-wide`` (the cap
learned from the curve, ``fit --cap-prior catalog|wide``, every engine-limit column
dropped).

The simulator's ``saturated`` flag is ignored here (it marks capacity waits, exactly what
the capped law describes); the data layer's own rules set points aside (past the cap,
shortfall of the achieved rate). Prints per replicate and law: whether the 90% interval
covers the true ceiling, the median's error, the convergence verdict, the learned cap
and the points set aside; then one summary row per law.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import pandas as pd

from bayesspec.data import prepare
from bayesspec.inference import SamplerSettings
from bayesspec.simulate import Arrivals, setup, simulate_point
from bayesspec.simulate.sweep import at_rates
from bayesspec.bayes.workflow import fit


def truth_ceiling(s, requests: int, seed: int) -> float:
    """Completions per second with the batch full: a long throughput run."""
    point = simulate_point(s.step_model, s.server, s.workload, Arrivals("throughput"), s.spec,
                           n_requests=requests, seed=np.random.SeedSequence([seed, 99]))
    return float(point.summary["rps"])


def sweep_rows(s, rates, requests: int, seed: int, cap: int) -> pd.DataFrame:
    rows = at_rates(s, rates, n_requests=requests, seed=seed).rows
    rows = rows.drop(columns=["saturated"])
    rows["max_num_seqs"] = cap
    return rows


def ceiling_draws(result) -> np.ndarray:
    return np.ravel(result.group_curve(0).ceiling)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifier", default="Qwen3-8B")
    parser.add_argument("--gpu", default="H100")
    parser.add_argument("--prefill", type=int, default=512)
    parser.add_argument("--decode", type=int, default=512)
    parser.add_argument("--max-num-seqs", type=int, default=32)
    parser.add_argument("--replicates", type=int, default=20)
    parser.add_argument("--rates", type=int, default=10)
    parser.add_argument("--top", type=float, default=0.97,
                        help="highest rate as a share of the true ceiling")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--truth-requests", type=int, default=6000)
    parser.add_argument("--draws", type=int, default=None, help="default: the model's")
    parser.add_argument("--tune", type=int, default=None, help="default: the model's")
    parser.add_argument("--no-uncapped", action="store_true",
                        help="skip the eq. (1) fits without the cap")
    parser.add_argument("--laws", default="capped,eq1",
                        help="comma-separated: capped (cap given), eq1 (max_num_seqs "
                             "dropped), learned-catalog, learned-wide (every limit dropped, "
                             "the cap learned with that prior)")
    parser.add_argument("--first-replicate", type=int, default=0)
    parser.add_argument("--json", help="write the per-replicate table here")
    args = parser.parse_args(argv)
    laws = [name.strip() for name in args.laws.split(",") if name.strip()]
    if args.no_uncapped and "eq1" in laws:
        laws.remove("eq1")

    s = setup(args.verifier, args.gpu, prefill=args.prefill, decode=args.decode,
              max_num_seqs=args.max_num_seqs)
    started = time.perf_counter()
    truth = truth_ceiling(s, args.truth_requests, seed=12345)
    print(f"truth: {args.verifier} on {args.gpu}, {args.prefill}/{args.decode} tokens, "
          f"max_num_seqs {args.max_num_seqs}: full-batch throughput {truth:.4g} RPS "
          f"({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
    rates = np.linspace(0.08, args.top, args.rates) * truth
    settings = SamplerSettings(draws=args.draws, tune=args.tune, chains=4, progress=False)
    records = []
    limits = ["max_num_seqs", "kv_cache_tokens", "max_num_batched_tokens"]
    for r in range(args.first_replicate, args.first_replicate + args.replicates):
        rows = sweep_rows(s, rates, args.requests, seed=r, cap=args.max_num_seqs)
        variants = []
        for name in laws:
            config = None
            if name == "capped":
                frame = rows
            elif name == "eq1":
                frame = rows.drop(columns=["max_num_seqs"])
            elif name.startswith("learned-"):
                frame = rows.drop(columns=[c for c in limits if c in rows.columns])
                config = {"cap_prior": name.split("-", 1)[1]}
            else:
                raise SystemExit(f"unknown law {name!r}")
            variants.append((name, prepare(frame, source=f"replicate {r}"), config))
        for name, frame, config in variants:
            result = fit(frame, "dense", config=config, settings=SamplerSettings(
                **{**settings.__dict__, "seed": 1000 + r}))
            draws = ceiling_draws(result)
            lo, median, hi = np.quantile(draws, [0.05, 0.5, 0.95])
            verdict = result.diagnostics
            learned = (np.quantile(result.draws("learned_cap")[:, 0], [0.05, 0.5, 0.95])
                       if "learned_cap" in result.posterior else [np.nan] * 3)
            records.append({
                "learned_cap_lo": float(learned[0]), "learned_cap_median": float(learned[1]),
                "learned_cap_hi": float(learned[2]),
                "replicate": r, "law": name, "truth": truth, "median": float(median),
                "lo": float(lo), "hi": float(hi), "covers": bool(lo <= truth <= hi),
                "error": float(median / truth - 1), "set_aside": int(frame["excluded"].sum()),
                "top_rate": float(frame.loc[~frame["excluded"], "rps"].max()),
                "converged": bool(verdict["converged"]), "rhat_max": verdict["rhat_max"],
                "divergences": verdict["divergences"]})
            cap_text = ("" if np.isnan(learned[1]) else
                        f" (cap {learned[1]:.0f} [{learned[0]:.0f}, {learned[2]:.0f}])")
            print(f"replicate {r + 1}/{args.replicates} {name}: ceiling {median:.4g} "
                  f"[{lo:.4g}, {hi:.4g}] vs {truth:.4g} -> "
                  f"{'covers' if records[-1]['covers'] else 'MISSES'}{cap_text}; "
                  f"{verdict['status']} ({time.perf_counter() - started:.0f} s)",
                  file=sys.stderr, flush=True)
    table = pd.DataFrame(records)
    summary = table.groupby("law").agg(
        replicates=("covers", "size"), coverage=("covers", "mean"),
        median_error=("error", "median"), worst_error=("error", lambda e: e.abs().max()),
        converged=("converged", "mean"), set_aside_mean=("set_aside", "mean"))
    print(summary.to_string())
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"truth": truth, "arguments": vars(args),
                       "records": records}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
