"""Validation: the compute roof and the engine's cap in one law, against eq. (1)+(3) and
the roof alone, where the roof binds.

    python benchmarks/roof_validation.py --seeds 0 --json /tmp/roof.json      # choose
    python benchmarks/roof_validation.py --seeds 1 2 --json /tmp/roof_test.json  # test
    python benchmarks/roof_validation.py --ceiling-only --laws roofcap --seeds 3 4 ...

Truth: the simulator's overlapping roofline (``simulate.stepmodel.OVERLAPPING_ROOFLINE``),
Qwen3-8B with its EAGLE-3 head on one H100, 512/256 tokens, alpha 0.8, k in
{0, 1, 3, 5, 7}, every k at one grid of Poisson rates up to past its collapse (400
requests a point); k = 7 turns compute-bound at about 44 requests in flight. Each
configuration is fitted (``speculative``) on its rates up to half of its top unsaturated
rate; the higher unsaturated rates are held out. Laws, on the same splits:

- ``eq1``: eq. (1)+(3) with the engine's cap stated (the slot queue);
- ``roof``: the compute roof from the cards, the cap columns dropped (the roof alone);
- ``roofcap``: the roof and the stated cap in one law (``mean_law`` auto with the
  simulator's ``max_num_seqs`` and ``kv_cache_tokens``).

Per seed and law:

- held-out coverage of the 90% new-measurement intervals, pooled, with ``check --ppc``'s
  reference (a right model's coverage; ``p_as_low`` = P(reference <= observed), a
  coverage in its 5% lower tail fails);
- k* at each held-out rate of the grid where two or more k are unsaturated: the k with
  the lowest posterior median latency, right, or its measured latency within 2% of the
  best measured one;
- the ceiling: per k, whether the 90% interval of the fitted law's own ceiling
  (``Curve.ceiling``, draws) covers the simulator's plateau, the throughput of its
  throughput run (512 client streams back to back, 2048 requests: the batch held full);
- the fit's wall time and convergence.

Chosen on seed 0 (the join power, the factors' prior and the bend's scale were set before
it and not changed after); tested on seeds 1 and 2. Figures: docs/findings/compute-roof.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

KS = (0, 1, 3, 5, 7)
RATES = (0.4, 3.0, 6.0, 9.0, 12.0, 15.0, 18.0, 21.0, 24.0, 27.0, 30.0, 33.0, 36.0, 40.0, 44.0, 48.0)


def _setup(k: int):
    from bayesspec.simulate import setup
    from bayesspec.simulate.stepmodel import OVERLAPPING_ROOFLINE

    return setup("Qwen3-8B", "H100", k=k, alpha=0.8 if k else None, prefill=512,
                 decode=256, roofline_params=OVERLAPPING_ROOFLINE)


def simulated(seed: int, requests: int = 400, *, caps: bool = True) -> pd.DataFrame:
    """Every k at every rate of the grid, the simulator's overlapping roofline; without
    ``caps``, as a load test that does not report the engine's settings."""
    from bayesspec.simulate import at_rates

    rows = pd.concat([at_rates(_setup(k), RATES, n_requests=requests, seed=seed).rows
                      for k in KS], ignore_index=True)
    if caps:
        return rows
    return rows.drop(columns=["max_num_seqs", "kv_cache_tokens", "max_concurrency"],
                     errors="ignore")


def plateaus(seed: int) -> dict[int, float]:
    """Per k, the simulator's throughput with its batch held full (the ceiling's truth)."""
    from bayesspec.simulate.engine import THROUGHPUT_STREAMS, Arrivals, simulate_point

    out = {}
    for k in KS:
        s = _setup(k)
        point = simulate_point(s.step_model, s.server, s.workload, Arrivals("throughput"),
                               s.spec, n_requests=4 * THROUGHPUT_STREAMS,
                               seed=np.random.SeedSequence([seed, 99, k]))
        out[k] = float(point.summary["rps"])
    return out


def ceiling_score(fit, truth: dict[int, float]) -> dict:
    """Per k, the fitted law's ceiling (median, 90% interval) against the plateau."""
    law = fit.law({})
    rows = []
    for k, plateau in truth.items():
        curve = law.dense if k == 0 else law.sd(0.8, k)
        ceiling = np.asarray(curve.ceiling, dtype=float).ravel()
        low, mid, high = (float(v) for v in np.quantile(ceiling, [0.05, 0.5, 0.95]))
        rows.append({"k": int(k), "plateau": plateau, "median": mid, "low": low,
                     "high": high, "covered": bool(low <= plateau <= high)})
    return {"covered_share": float(np.mean([r["covered"] for r in rows])), "per_k": rows}


def kstar_score(fit, data: pd.DataFrame, held: pd.DataFrame) -> dict:
    """k* at the held-out rates against the simulator's measured latencies."""
    law = fit.law({})
    unsat = data.loc[~data["saturated"].astype(bool)]
    outcomes = []
    for rate in sorted(held["rps_target"].dropna().unique()):
        here = unsat.loc[np.isclose(unsat["rps_target"], rate)]
        if here["k"].nunique() < 2:
            continue
        measured = dict(zip(here["k"].astype(int), here["latency_mean_s"].astype(float)))
        medians = {}
        for k in measured:
            draws = law.latency(float(rate), alpha=0.8 if k else None, k=int(k))
            medians[k] = float(np.median(draws))
        chosen = min(medians, key=medians.get)
        best = min(measured.values())
        outcomes.append({"rps": float(rate), "chosen": int(chosen),
                         "best": int(min(measured, key=measured.get)),
                         "within_2pct": bool(measured[chosen] <= 1.02 * best)})
    share = float(np.mean([o["within_2pct"] for o in outcomes])) if outcomes else None
    return {"share_right_or_within_2pct": share, "rates": outcomes}


#: The study's laws: the ``mean_law`` each fits with, and whether its data state the cap.
LAWS = {"eq1": ("eq1", True), "roof": ("auto", False), "roofcap": ("auto", True)}


def one(seed: int, law: str, draws: int, tune: int) -> dict:
    from bayesspec.checks.rate_holdout import rate_holdout_check, split_by_rate
    from bayesspec.data import prepare
    from bayesspec.inference import SamplerSettings

    mean_law, caps = LAWS[law]
    data = prepare(simulated(seed, caps=caps), source=f"<roof sweep seed {seed}>")
    settings = SamplerSettings(draws=draws, tune=tune, chains=2, seed=seed, progress=False)
    start = time.time()
    fit, document = rate_holdout_check(data, model="speculative", fraction=0.5,
                                       settings=settings, config={"mean_law": mean_law},
                                       seed=seed)
    seconds = time.time() - start
    held = document["pooled"]["held_out"]
    _, high = split_by_rate(data, 0.5)
    reference = held.get("reference", {})
    return {"seed": seed, "mean_law": law,
            "note": fit.model().inputs.extras.get("mean_law_note")
            if fit.model().inputs is not None else None,
            "held_out_points": held.get("points"), "coverage": held.get("coverage"),
            "reference_mean": reference.get("coverage_mean"),
            "reference_range": reference.get("coverage_range"),
            "p_as_low": reference.get("p_as_low"),
            "kstar": kstar_score(fit, data, high),
            "ceiling": ceiling_score(fit, plateaus(seed)),
            "fit_seconds": round(seconds, 1),
            "converged": fit.diagnostics.get("converged"),
            "verdict": fit.diagnostics.get("verdict")}


def ceiling_only(seed: int, law: str, draws: int, tune: int) -> dict:
    """One replicate of the ceiling's coverage: the same split and fit, no predictive
    check (the fit is the cost; the check's reference adds to it)."""
    from bayesspec.bayes.workflow import fit as fit_model
    from bayesspec.checks.rate_holdout import split_by_rate
    from bayesspec.data import prepare
    from bayesspec.inference import SamplerSettings

    mean_law, caps = LAWS[law]
    data = prepare(simulated(seed, caps=caps), source=f"<roof sweep seed {seed}>")
    low, _ = split_by_rate(data, 0.5)
    settings = SamplerSettings(draws=draws, tune=tune, chains=2, seed=seed, progress=False)
    start = time.time()
    fit = fit_model(low, "speculative", settings=settings, config={"mean_law": mean_law})
    return {"seed": seed, "mean_law": law, "ceiling": ceiling_score(fit, plateaus(seed)),
            "fit_seconds": round(time.time() - start, 1),
            "converged": fit.diagnostics.get("converged")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--laws", nargs="+", default=list(LAWS), choices=list(LAWS))
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--tune", type=int, default=500)
    parser.add_argument("--json", default=None)
    parser.add_argument("--ceiling-only", action="store_true",
                        help="replicates of the ceiling's coverage alone (no predictive check)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    results = []
    if args.ceiling_only:
        for seed in args.seeds:
            for law in args.laws:
                result = ceiling_only(seed, law, args.draws, args.tune)
                results.append(result)
                print(f"seed {seed} {law:7s} ceiling covers the plateau at "
                      f"{result['ceiling']['covered_share']} of k; "
                      + "; ".join(f"k {r['k']} {r['plateau']:.1f} in [{r['low']:.1f}, "
                                  f"{r['high']:.1f}]" for r in result["ceiling"]["per_k"])
                      + f"; {result['fit_seconds']} s", flush=True)
                if args.json:
                    Path(args.json).write_text(json.dumps(results, indent=1, default=str))
        return 0
    for seed in args.seeds:
        for law in args.laws:
            result = one(seed, law, args.draws, args.tune)
            results.append(result)
            k = result["kstar"]["share_right_or_within_2pct"]
            print(f"seed {seed} {law:7s} held-out coverage {result['coverage']} "
                  f"(reference {result['reference_mean']}, range {result['reference_range']},"
                  f" P(as low) {result['p_as_low']}); k* right or within 2%: {k}; "
                  f"ceiling covers the plateau at {result['ceiling']['covered_share']} of k; "
                  f"{result['fit_seconds']} s; converged {result['converged']}", flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
