"""Validation: in-sample against left-out coverage when the model is the truth.

How much of a model's 90% predictive coverage is the model, and how much is counting the
fitted points twice?

    python benchmarks/insample_calibration.py --replicates 2     # dense-spline on vidur_dense
    python benchmarks/insample_calibration.py --model dense \
        --csv examples/vidur/vidur_fresh.csv --replicates 4 --json

Known truth that is exactly the model: fit ``--model`` to the real-profile sweeps once,
take ``--replicates`` posterior draws (spread over the chains) as true curves and noise
scales, simulate a measured mean at every rate of the design from each, and refit each
replicate (one compilation). Prints per replicate three coverages of the 90%
predictive intervals of the fitted points:

- in sample: the share of fitted points inside their interval (what a
  posterior predictive check shows);
- left out one at a time (PSIS-LOO PIT; and how many points have Pareto k > 0.7);
- the true curve's share inside the 90% interval of the fitted curve (not a predictive
  question; for reference),

and p_loo / points, the effective parameters per point. When the model is the truth,
the left-out share is near 0.9 whatever the model's flexibility, and the in-sample share
is near P(|Z| < 1.645 sqrt((1 + h)/(1 - h))), h = p_loo / points: above 0.95 for any model
with more than about one effective parameter per five points. So an in-sample share
above 0.95 does not say that a flexible model is miscalibrated; the left-out share (or
``check --ppc --folds K``, refits without interleaved folds) does. The slow test
``tests/bayes/test_spline_discrepancy.py`` uses ``replicate_frames`` from here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.stats import norm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bayesspec import checks  # noqa: E402
from bayesspec.bayes.base import measurement_log_se  # noqa: E402
from bayesspec.data import SaturationRule, included, prepare, read_tidy  # noqa: E402
from bayesspec.inference import SamplerSettings  # noqa: E402
from bayesspec.checks.replicates import fit_same_design  # noqa: E402
from bayesspec.bayes.workflow import fit  # noqa: E402


def leverage_bound(h: float, prob: float = 0.9) -> float:
    """In-sample coverage of a right model whose fitted values have leverage h: the
    residual has variance (1 - h) sigma^2, the predictive interval (1 + h) sigma^2."""
    z = norm.ppf(0.5 + prob / 2) * np.sqrt((1 + h) / (1 - h))
    return float(2 * norm.cdf(z) - 1)


def replicate_frames(reference, draws: list[int], seed: int) -> list:
    """One design frame per posterior draw: each fitted point's mean latency replaced by
    a new measurement from that draw's curve and noise (the model as the truth)."""
    rng = np.random.default_rng(seed)
    rows = included(reference.data).drop(columns=["excluded", "exclusion_reason"])
    frames = []
    for d in draws:
        frame = rows.copy()
        for g, label in enumerate(reference.groups["label"]):
            members = frame.index[frame["group"] == label]
            curve = reference.group_curve(g)
            rps = frame.loc[members, "rps"].to_numpy(float)
            latency = curve.latency(rps)
            sigma = curve.noise.sigma(rps, curve.point_c2(rps, latency),
                                      measurement_log_se(frame.loc[members]))
            frame.loc[members, "latency_mean_s"] = (
                latency[d] * np.exp(sigma[d] * rng.standard_normal(len(members))))
        frames.append(prepare(frame.drop(columns=["group"]), source="<replicate>",
                              saturation=SaturationRule(detect=False)))
    return frames, rows


def true_curve_coverage(result, truth_fit, d: int, prob: float = 0.9) -> float:
    inside = []
    tail = (1 - prob) / 2
    for g, label in enumerate(result.groups["label"]):
        rps = result.data.loc[result.data["group"] == label, "rps"].to_numpy(float)
        fitted = result.group_curve(g).latency(rps)
        lo, hi = checks.draw_quantiles(fitted, [tail, 1 - tail])
        truth = truth_fit.group_curve(g).latency(rps)[d]
        inside.extend((lo <= truth) & (truth <= hi))
    return float(np.mean(inside))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="dense-spline")
    parser.add_argument("--csv", default=str(ROOT / "examples/vidur/vidur_dense.csv"))
    parser.add_argument("--replicates", type=int, default=4)
    parser.add_argument("--draws", type=int, default=500, help="draws (and tuning) per chain")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    settings = SamplerSettings(draws=args.draws, tune=args.draws, chains=args.chains,
                               seed=args.seed, progress=False)
    started = time.perf_counter()
    reference = fit(read_tidy(args.csv), args.model, settings=settings)
    total = reference.posterior.sizes["chain"] * reference.posterior.sizes["draw"]
    draws = list(np.linspace(0, total - 1, args.replicates + 2).astype(int)[1:-1])
    frames, _ = replicate_frames(reference, draws, args.seed)
    print(f"reference fit of {args.model}: {reference.diagnostics['text'][:90]} "
          f"({time.perf_counter() - started:.0f} s); refitting {len(frames)} replicates "
          "generated from its posterior draws...", file=sys.stderr)
    fits = fit_same_design(frames, model=args.model, settings=settings)
    records = []
    for d, result in zip(draws, fits):
        check = checks.predictive_check(result)
        held_in = check["pooled"]["held_in"]
        loo = checks.loo_summary(result)
        h = loo["p_loo"] / loo["points"]
        records.append({"draw": int(d), "in_sample": held_in["coverage"],
                        "left_out_psis": held_in["coverage_loo"],
                        "pareto_k_high": held_in["pareto_k_high"],
                        "true_curve_in_interval": true_curve_coverage(result, reference, d),
                        "p_loo_per_point": h, "leverage_bound": leverage_bound(h),
                        "convergence": result.diagnostics["status"]})
    summary = {"model": args.model, "csv": args.csv, "points": int(len(frames[0])),
               "settings": f"{args.chains} chains x ({args.draws} + {args.draws})",
               "replicates": records,
               "mean": {k: float(np.mean([r[k] for r in records]))
                        for k in ("in_sample", "left_out_psis", "true_curve_in_interval",
                                  "p_loo_per_point", "leverage_bound")},
               "seconds": round(time.perf_counter() - started, 1)}
    if args.json:
        print(json.dumps(summary, indent=1))
        return
    print(f"{args.model} on {summary['points']} points of {Path(args.csv).name}, "
          f"{summary['settings']}, {summary['seconds']:.0f} s")
    print("| draw | in sample | left out (PSIS) | k > 0.7 | true curve in 90% CI | "
          "p_loo/point | leverage bound | convergence |")
    print("|---|---|---|---|---|---|---|---|")
    for r in records + [{"draw": "mean", **summary["mean"], "pareto_k_high": "",
                         "convergence": ""}]:
        print(f"| {r['draw']} | {r['in_sample']:.3f} | {r['left_out_psis']:.3f} | "
              f"{r['pareto_k_high']} | {r['true_curve_in_interval']:.3f} | "
              f"{r['p_loo_per_point']:.2f} | {r['leverage_bound']:.3f} | "
              f"{r['convergence']} |")


if __name__ == "__main__":
    main()
