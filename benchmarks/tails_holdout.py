"""Validation: the tails model's held-out p99 (and other fitted summaries).

Fit the tails model below a fraction of each group's top rate and predict the reported
p99 (and any other fitted summary) at the higher rates.

    python -W ignore::UserWarning benchmarks/tails_holdout.py examples/vidur/vidur_capped.csv \
        --config '{"decode_profile": "examples/vidur/decode_profiles.csv", "tail_law": "count"}'
    python benchmarks/tails_holdout.py examples/vidur/vidur_dense.csv \
        examples/vidur/vidur_fresh.csv --fraction 0.6 --csv points.csv

For each data file: the tails model is fitted on each group's rates up to ``--fraction``
(0.6) of its highest unsaturated rate (``split_by_rate``, the split of
``check --ppc --hold-out-above``); each held-out point's summary is predicted as a new
load test's report of that point's ``n_requests`` requests (``summary_points``, the
check `check --ppc` makes of a tails fit: the law, the fitted noise and the
order-statistic error; where the file says the point is a whole run from an idle server,
``whole_run``, the load factor is that finite run's, unless ``--steady``), and its 90%
interval is checked; ``--mean`` adds the mean law's own held-out predictions
(``predictive_points``). A fit takes 3-12 minutes per Vidur set on 2 cores.

Prints per file and metric: held-out points, coverage, what a model exactly right would
give on the same points (``coverage_reference``: its mean and 90% range, the chance it
lands in 0.80-0.95, the target band for the p99, and the chance it is as low as
measured), intervals open upwards, median width/value, and the worst median/measured
ratio; ``--csv`` writes the held-out points.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import pandas as pd

from bayesspec.data import read_tidy
from bayesspec.inference import SamplerSettings
from bayesspec import checks
from bayesspec.bayes.workflow import fit as fit_model

#: The target band for the held-out p99 coverage of 90% intervals.
BAND = (0.80, 0.95)


def held_out_points(fit, high: pd.DataFrame, *, prob: float = 0.9, seed: int = 0,
                    finite_runs: bool = True, with_mean: bool = False):
    """The held-out rows of each summary (and with ``with_mean`` of the mean), one row
    per point (metric, group, rps, observed, lo, median, hi, inside, infinite), and per
    metric a right model's coverage of them (``coverage_reference`` in ``BAND``)."""
    frames, reference = [], {}
    tables = {}
    if with_mean and fit.model().has_mean(fit):
        tables["mean"] = checks.predictive_points(fit, high, prob=prob, seed=seed,
                                                  reference=True)
    tables.update(checks.summary_points(fit, high, prob=prob, seed=seed,
                                        whole_runs=finite_runs))
    for metric, (points, inside_by_draw) in tables.items():
        held = points.loc[points["held_out"]]
        frames.append(pd.DataFrame({
            "metric": metric, "group": held["group"], "rps": held["rps"],
            "observed": held["observed"], "lo": held["lo"], "median": held["predicted"],
            "hi": held["hi"], "inside": held["inside"],
            "infinite": ~np.isfinite(held["hi"].to_numpy(float))}))
        if inside_by_draw:
            reference[metric] = checks.coverage_reference(points, inside_by_draw, prob=prob,
                                                          limits=BAND)
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()), reference


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data", nargs="+")
    parser.add_argument("--fraction", type=float, default=0.6)
    parser.add_argument("--config", default="{}", help="tails model options (JSON)")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--csv", help="write the held-out points to this CSV")
    parser.add_argument("--mean", action="store_true",
                        help="also predict each held-out mean latency by the fit's mean law "
                             "(metric 'mean' in the table and the CSV)")
    parser.add_argument("--steady", action="store_true",
                        help="predict every held-out point by the steady law, even where the "
                             "file says it is a whole run from an idle server")
    args = parser.parse_args(argv)
    config = json.loads(args.config) or None
    frames = []
    for path in args.data:
        started = time.perf_counter()
        data = read_tidy(path)
        low, high = checks.split_by_rate(data, args.fraction)
        fit = fit_model(low, "tails", config=config,
                        settings=SamplerSettings(seed=args.seed, chains=args.chains,
                                                 draws=args.draws, progress=False))
        points, reference = held_out_points(fit, high, finite_runs=not args.steady,
                                            with_mean=args.mean)
        points = points.assign(file=path)
        frames.append(points)
        print(f"{path}: {fit.diagnostics['text']} ({time.perf_counter() - started:.0f} s)",
              file=sys.stderr, flush=True)
        print(f"\n{path}, fitted at or below {args.fraction:g} of each top rate "
              f"({len(low)} rows), {len(high)} rows held out")
        print("| metric | held-out points | 90% coverage | a right model's (90% range) | "
              f"P(right model in {BAND[0]:.2f}-{BAND[1]:.2f}) | P(right model as low) | "
              "infinite upper bounds | median width/value | worst median/measured |")
        print("|---|---|---|---|---|---|---|---|---|")
        for metric, part in points.groupby("metric", sort=False):
            finite = part.loc[~part["infinite"]]
            width = ((finite["hi"] - finite["lo"]) / finite["observed"]).median()
            ratio = part["median"] / part["observed"]
            worst = ratio.iloc[int(np.argmax(np.abs(np.log(ratio))))]
            right = reference.get(metric)
            right_text = (f"{right['coverage_mean']:.3f} ({right['coverage_range'][0]:.2f}-"
                          f"{right['coverage_range'][1]:.2f}) | {right['p_in_band']:.2f} | "
                          f"{right['p_as_low']:.2f}" if right else "- | - | -")
            print(f"| {metric} | {len(part)} | {part['inside'].mean():.3f} | {right_text} | "
                  f"{int(part['infinite'].sum())} | {width:.3f} | {worst:.3g} |")
    if args.csv:
        pd.concat(frames).to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
