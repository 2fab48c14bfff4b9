"""Held-out tails: fit the tails model below a fraction of each group's top rate and
predict the reported p99 (and any other fitted summary) at the higher rates (issue 34).

For each data file: the tails model is fitted on each group's rates up to ``--fraction``
(0.6) of its highest unsaturated rate (``misfit.split_by_rate``, the split of
``check --ppc --hold-out-above``); each held-out point's summary is predicted as a new
load test's report of that point's ``n_requests`` requests (``MetricCurve.predictive``:
the law, the fitted noise and the order-statistic error; where the file says the point is
a whole run from an idle server, ``whole_run``, the load factor is that finite run's,
unless ``--steady``), and its 90% interval is checked; ``--mean`` adds the mean law's
own held-out predictions. Printed per file and metric: held-out points, coverage, intervals with an
infinite upper bound, median width/value, and the worst median/measured ratio.

    .venv/bin/python benchmarks/tails_holdout.py examples/vidur/vidur_dense.csv \\
        examples/vidur/vidur_fresh.csv [--fraction 0.6] [--config '{"sampling_error": false}']
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import pandas as pd

from bayesspec.bayes.base import whole_run_requests
from bayesspec.data import read_tidy, row_group_labels
from bayesspec.inference import SamplerSettings
from bayesspec.misfit import split_by_rate
from bayesspec.schema import METRIC_COLUMNS
from bayesspec.workflow import fit as fit_model


def held_out_points(fit, high: pd.DataFrame, *, prob: float = 0.9, seed: int = 0,
                    finite_runs: bool = True, with_mean: bool = False):
    model = fit.model()
    labels = row_group_labels(high, fit.groups)
    index = {label: g for g, label in enumerate(fit.groups["label"])}
    rng = np.random.default_rng(seed)
    rows = []
    runs = whole_run_requests(high) if finite_runs else np.full(len(high), np.nan)
    if with_mean and model.has_mean(fit):
        # the mean law's own held-out predictions: what every summary is built on
        for (_, row), label, run in zip(high.iterrows(), labels, runs):
            value = float(pd.to_numeric(row.get("latency_mean_s"), errors="coerce"))
            if not label or not np.isfinite(value) or value <= 0:
                continue
            draws = model.group_curve(fit, index[label]).predictive(
                np.array([float(row["rps"])]), rng, run_requests=run)[:, 0]
            lo, median, hi = np.quantile(draws, [(1 - prob) / 2, 0.5, (1 + prob) / 2])
            rows.append({"metric": "mean", "group": label, "rps": float(row["rps"]),
                         "observed": value, "lo": lo, "median": median, "hi": hi,
                         "inside": bool(lo <= value <= hi),
                         "infinite": bool(~np.isfinite(hi))})
    for metric in model.metrics(fit):
        column = METRIC_COLUMNS[metric]
        for (_, row), label, run in zip(high.iterrows(), labels, runs):
            value = float(pd.to_numeric(row.get(column), errors="coerce"))
            if not label or not np.isfinite(value) or value <= 0:
                continue
            g = index[label]
            if int(fit.groups[f"observed_{metric}"].iloc[g]) < 2:
                continue
            curve = model.metric_curve(fit, g, metric)
            n = float(pd.to_numeric(row.get("n_requests"), errors="coerce"))
            draws = curve.predictive(np.array([float(row["rps"])]), rng,
                                     n_requests=n if np.isfinite(n) else None,
                                     run_requests=run)[:, 0]
            lo, median, hi = np.quantile(draws, [(1 - prob) / 2, 0.5, (1 + prob) / 2])
            rows.append({"metric": metric, "group": label, "rps": float(row["rps"]),
                         "observed": value, "lo": lo, "median": median, "hi": hi,
                         "inside": bool(lo <= value <= hi), "infinite": bool(~np.isfinite(hi))})
    return pd.DataFrame(rows)


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
        low, high = split_by_rate(data, args.fraction)
        fit = fit_model(low, "tails", config=config,
                        settings=SamplerSettings(seed=args.seed, chains=args.chains,
                                                 draws=args.draws, progress=False))
        points = held_out_points(fit, high, finite_runs=not args.steady,
                                 with_mean=args.mean).assign(file=path)
        frames.append(points)
        print(f"{path}: {fit.diagnostics['text']} ({time.perf_counter() - started:.0f} s)",
              file=sys.stderr, flush=True)
        print(f"\n{path}, fitted at or below {args.fraction:g} of each top rate "
              f"({len(low)} rows), {len(high)} rows held out")
        print("| metric | held-out points | 90% coverage | infinite upper bounds | "
              "median width/value | worst median/measured |")
        print("|---|---|---|---|---|---|")
        for metric, part in points.groupby("metric", sort=False):
            finite = part.loc[~part["infinite"]]
            width = ((finite["hi"] - finite["lo"]) / finite["observed"]).median()
            ratio = part["median"] / part["observed"]
            worst = ratio.iloc[int(np.argmax(np.abs(np.log(ratio))))]
            print(f"| {metric} | {len(part)} | {part['inside'].mean():.3f} | "
                  f"{int(part['infinite'].sum())} | {width:.3f} | {worst:.3g} |")
    if args.csv:
        pd.concat(frames).to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
