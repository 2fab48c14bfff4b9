"""The fill and drain taken out of the fitted points, in two stages (issue 34), tried and
not adopted: does C2 come out higher, and do the held-out rates come closer, when each
fitted whole-run mean is read as the steady state it would have been?

    python benchmarks/whole_run_debias.py --set fresh     # the set the question came from
    python benchmarks/whole_run_debias.py --set fresh --fraction 1   # every point: R^2
    python benchmarks/whole_run_debias.py --set fresh --fraction 1 --fill-drain-only

Stage one fits dense with the decode profile on each group's rates up to 60% of its top
rate (the split of ``check --ppc --hold-out-above 0.6``). Each fitted mean is then
divided by the fluid run's ratio to the steady state (``Curve.run_latency`` over
``Curve.latency``) at that group's posterior-median costs, and stage two refits. Printed:
the ratios, both fits' convergence, the held-out check of stage two (held-out points
predicted as whole runs, as ``check`` does), and C2 of the groups named with ``--show``.
With ``--fraction 1`` every point is fitted, and each group's R^2 is printed instead:
stage one's posterior medians against the measured means, stage two's times the ratio.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from bayesspec.checks import misfit
from bayesspec.checks import r_squared
from bayesspec.data import read_tidy, row_group_labels
from bayesspec.inference import SamplerSettings
from bayesspec.prediction import ProfileCurve
from bayesspec.bayes.workflow import fit

from vidur_sets import SETS  # the script's folder is on the path


def median_curve(curve: ProfileCurve, with_cap: bool = True) -> ProfileCurve:
    cap = None if curve.cap is None or not with_cap else float(np.ravel(curve.cap)[0])
    return ProfileCurve(np.array([np.median(curve.c1)]), np.array([np.median(curve.c2)]),
                        batch_sizes=curve.batch_sizes, iteration_s=curve.iteration_s,
                        decode_tokens=curve.decode_tokens, cap=cap)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=SETS, default="fresh")
    parser.add_argument("--show", default="Llama-2-7B p128 g512,InternLM-20B p1152")
    parser.add_argument("--fill-drain-only", action="store_true",
                        help="the ratio of the run without the cap: its fill and drain "
                             "alone, not the short queue a run builds near the ceiling")
    parser.add_argument("--fraction", type=float, default=0.6,
                        help="fit each group's rates up to this share of its top rate "
                             "(1: every point, and R^2 per group)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    data = read_tidy(f"examples/vidur/vidur_{args.set}.csv")
    low, high = ((data, data.iloc[:0]) if args.fraction >= 1
                 else misfit.split_by_rate(data, args.fraction))
    settings = SamplerSettings(seed=1, progress=False)
    # the law these figures were measured with (the defaults before 2026-12-05's fifth session)
    config = {"decode_profile": "examples/vidur/decode_profiles.csv", "profile_law": "poisson",
              "noise_load_at": "curve"}
    first = fit(low, "dense", settings=settings, config=config)
    print("stage one:", first.diagnostics["text"])
    labels = np.asarray(row_group_labels(low, first.groups))
    ratio = np.ones(len(low))
    for g, label in enumerate(first.groups["label"]):
        rows = np.flatnonzero(labels == label)
        curve = first.group_curve(g)
        if not len(rows) or not isinstance(curve, ProfileCurve):
            continue
        middle = median_curve(curve, with_cap=not args.fill_drain_only)
        rps = low["rps"].to_numpy(float)[rows]
        count = low["n_requests"].to_numpy(float)[rows]
        ratio[rows] = (middle.run_latency(rps, count) / middle.latency(rps))[0]
    print(f"run / steady at the fitted points: {ratio.min():.4f} .. {ratio.max():.4f} "
          f"(median {np.median(ratio):.4f})")
    steady = low.copy()
    steady["latency_mean_s"] = low["latency_mean_s"] / ratio
    second = fit(steady, "dense", settings=settings, config=config)
    print("stage two:", second.diagnostics["text"])
    if args.fraction >= 1:
        r_squared_table(first, second, low, ratio)
        return
    for name, result in (("stage one", first), ("stage two", second)):
        points = misfit.predictive_check(result, high)["_points"]
        held = points.loc[points["held_out"]]
        below = int((held.groupby("group")["inside"].mean() < 0.7).sum())
        print(f"{name}: held-out coverage {held['inside'].mean():.3f}, groups below 0.7 "
              f"{below}, above/below their intervals {int((held.observed > held.hi).sum())}"
              f"/{int((held.observed < held.lo).sum())}")
        for shown in args.show.split(","):
            for g, label in enumerate(result.groups["label"]):
                if label.startswith(shown):
                    c2 = np.quantile(result.group_curve(g).c2, [0.05, 0.5, 0.95])
                    print(f"  {label}: C2 {c2[1]:.5f} ({c2[0]:.5f}-{c2[2]:.5f})")


def r_squared_table(first, second, rows, ratio) -> None:
    """Each group's R^2 on the measured means: stage one's posterior-median curve, and
    stage two's times the run's ratio (both fits on every point)."""
    measured = rows["latency_mean_s"].to_numpy(float)
    labels = np.asarray(row_group_labels(rows, first.groups))
    counts = [0, 0]
    for g, label in enumerate(first.groups["label"]):
        at = np.flatnonzero(labels == label)
        rps = rows["rps"].to_numpy(float)[at]
        values = []
        for stage, result in enumerate((first, second)):
            predicted = np.median(result.group_curve(g).latency(rps), axis=0)
            predicted = predicted * (ratio[at] if stage else 1.0)
            observed = measured[at]
            values.append(r_squared(observed, predicted))
            counts[stage] += values[-1] >= 0.98
        print(f"  {label:40s} R^2 {values[0]:.4f} -> {values[1]:.4f}")
    print(f"groups with R^2 >= 0.98: stage one {counts[0]}, stage two {counts[1]} "
          f"of {len(first.groups)}")


if __name__ == "__main__":
    main()
