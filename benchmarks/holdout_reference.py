"""Validation: is the held-out reference of ``check --ppc`` itself right?

The reference is a right model's coverage (``coverage_reference``).

    python benchmarks/holdout_reference.py --replicates 20      # about 3 minutes
    python benchmarks/holdout_reference.py --replicates 8 --groups 8 --draws 400 --json

``check --ppc --hold-out-above`` sets the observed held-out coverage against the
coverage a model exactly right would give (one joint posterior predictive draw taken as
the truth). This checks that reference where the truth is known and the model is right:
each replicate draws fresh sweeps from eq. (1) with the project's generator
(``--groups`` (prefill, decode) pairs of Qwen3-14B, 11 rates each), fits ``dense`` on
each group's rates up to 0.63 of its top rate and predicts the rest. If the reference is
right, the observed coverage falls inside its central 90% range in about 90% of the
replicates, and P(reference <= observed) is roughly uniform (its mean near 0.5).

Prints one line per replicate (observed coverage, the reference's mean and 90% range,
P(as low), convergence) and the summary. The slow test
``tests/checks/test_posterior_predictive.py::test_held_out_reference_is_right_when_the_model_is``
runs ``replicate`` and ``summary`` from here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bayesspec import checks  # noqa: E402
from bayesspec.data import prepare  # noqa: E402
from bayesspec.inference import SamplerSettings  # noqa: E402
from bayesspec.simulate.synthetic import generate_sweeps, placeholder_truth  # noqa: E402


def replicate(seed: int, groups: int, draws: int) -> dict:
    """One replicate: fresh sweeps, a dense fit of their lower rates, the reference."""
    truth = placeholder_truth()
    truth = truth[truth["verifier"] == "Qwen3-14B"].head(groups).reset_index(drop=True)
    data = prepare(generate_sweeps(truth, n_rates=11, seed=seed), source=f"<seed {seed}>")
    settings = SamplerSettings(draws=draws, tune=draws, chains=2, seed=seed, progress=False)
    fit, document = checks.rate_holdout_check(data, model="dense", fraction=0.63,
                                              settings=settings)
    held_out = document["pooled"]["held_out"]
    reference = held_out["reference"]
    low, high = reference["coverage_range"]
    return {"seed": seed, "observed": held_out["coverage"], "points": held_out["points"],
            "reference_mean": reference["coverage_mean"], "range": [low, high],
            "inside_range": bool(low <= held_out["coverage"] <= high),
            "p_as_low": reference["p_as_low"], "p_as_high": reference["p_as_high"],
            "convergence": fit.diagnostics["status"]}


def summary(rows: list[dict]) -> dict:
    converged = [r for r in rows if r["convergence"] != "not converged"]
    return {"replicates": len(rows), "converged": len(converged),
            "inside_range": sum(r["inside_range"] for r in rows),
            "mean_p_as_low": float(np.mean([r["p_as_low"] for r in rows])),
            "mean_observed": float(np.mean([r["observed"] for r in rows])),
            "mean_reference": float(np.mean([r["reference_mean"] for r in rows]))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=20)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    started = time.perf_counter()
    rows = []
    for i in range(args.replicates):
        row = replicate(args.seed + i, args.groups, args.draws)
        rows.append(row)
        if not args.json:
            print(f"seed {row['seed']}: held out {row['observed']:.3f} of {row['points']}; "
                  f"a right model {row['reference_mean']:.3f} ({row['range'][0]:.3f}-"
                  f"{row['range'][1]:.3f}); P(as low) {row['p_as_low']:.2f}; "
                  f"{row['convergence']}", flush=True)
    result = {**summary(rows), "seconds": round(time.perf_counter() - started, 1),
              "rows": rows}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"inside the reference's 90% range in {result['inside_range']} of "
              f"{result['replicates']} replicates (about 90% expected); mean P(as low) "
              f"{result['mean_p_as_low']:.2f} (0.5 expected); mean coverage "
              f"{result['mean_observed']:.3f} observed, {result['mean_reference']:.3f} "
              f"reference; {result['converged']} converged; {result['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
