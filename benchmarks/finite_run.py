"""A load test's fill and drain under the decode-profile law (issue 34), tried and not
adopted: how far a finite run's mean latency sits below the steady state, and whether
correcting for it helps the law extrapolate.

    python benchmarks/finite_run.py --set dense     # the set it was tried on
    python benchmarks/finite_run.py --set fresh     # tested
    python benchmarks/finite_run.py --set capped    # tested

A run of n requests starts from an empty server and stops sending at its last request:
its first requests meet a batch that is still filling, its last ones a batch that drains
and no later arrivals to stall them, so the run's mean is below the steady-state latency
the laws describe. ``run_ratio`` computes that ratio with a fluid model of the run under
the profile law's own parts (evenly spaced arrivals; each request stalled C2 per later
arrival in its life, its decode iterations at the profile's time for the requests beside
it, averaged over its life; the steady state is the middle of a run long enough to reach
it). Checked against Vidur 4000-request runs (examples/vidur/iteration_profile.py
--requests 4000 prints the run's mean over its steady middle; benchmarks/README.md).

For each group the script fits C1 and C2 of the profile law (no cap wait) by least
squares to the rates up to 60% of the top rate, with and without the run ratio at each
point's own n_requests (iterated three times from the plain fit), and prints the largest
relative error of the higher rates whose N stays below 0.8 of the cap.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from bayesspec.laws import latency_expr, profile_segments

from slot_queue_choice import law  # the script's folder is on the path
from vidur_sets import SETS, profiled_groups


def fluid_run(rps, count, c1, c2, pieces, start, grid=16, iterations=200):
    """Each request's latency in a run of ``count`` evenly spaced arrivals from empty."""
    knots, values, slopes = pieces
    arrive = np.arange(count) / rps
    latency = np.full(count, float(start))
    position = (np.arange(grid) + 0.5) / grid

    def shift(beside):
        return np.where(beside > knots[-1], values[-1] + slopes[-1] * (beside - knots[-1]),
                        np.interp(beside, knots, values))

    for _ in range(iterations):
        ends = np.sort(arrive + latency)
        moments = arrive[:, None] + latency[:, None] * position[None, :]
        in_flight = (np.searchsorted(arrive, moments, side="right")
                     - np.searchsorted(ends, moments, side="right"))
        beside = np.maximum(in_flight - 1.0, 0.0).mean(axis=1)
        later = np.minimum(rps * latency, count - 1.0 - np.arange(count))
        new = c1 + c2 * later + shift(beside)
        if np.max(np.abs(new - latency)) < 1e-7 * np.max(new):
            return new
        latency = 0.5 * (latency + new)
    return latency


def run_ratio(rps, n_requests, c1, c2, pieces):
    """Mean latency of a run of ``n_requests`` over the steady state's."""
    if not (np.isfinite(n_requests) and n_requests >= 2 and rps > 0 and rps * c2 < 1):
        return 1.0
    steady_n = rps * float(latency_expr(rps, c1, c2))
    settle = int(np.ceil(3.0 * steady_n)) + 20
    long_run = 2 * settle + 1
    reference = fluid_run(rps, long_run, c1, c2, pieces, steady_n / rps)
    steady = float(reference[settle])
    if n_requests >= long_run:
        return (steady - float(np.sum(steady - reference)) / n_requests) / steady
    return float(np.mean(fluid_run(rps, int(n_requests), c1, c2, pieces, steady))) / steady


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=SETS, default="dense")
    args = parser.parse_args()
    rows = []
    for key, group, sizes, times, cap in profiled_groups(args.set):
        pieces = profile_segments(float(key[4]), sizes, times, cap)
        rps = group["rps"].to_numpy(float)
        measured = group["latency_mean_s"].to_numpy(float)
        n_requests = group["n_requests"].to_numpy(float)
        fitted = rps <= 0.6 * rps.max()
        tested = ~fitted & (rps * measured < 0.8 * cap)

        def fit(ratio):
            def residual(theta):
                value = law("none", rps[fitted], *np.exp(theta), pieces, cap, 1.0)
                return np.log(measured[fitted]) - np.log(value * ratio[fitted])
            return np.exp(least_squares(residual, np.log([measured.min(),
                                                          0.5 / rps.max()])).x)

        ratio = np.ones(len(rps))
        plain = fit(ratio)
        costs = plain
        for _ in range(3):
            ratio = np.array([run_ratio(r, n, *costs, pieces) for r, n in zip(rps, n_requests)])
            costs = fit(ratio)
        errors = {}
        for name, (c1, c2), r in (("steady", plain, np.ones(len(rps))),
                                  ("finite run", costs, ratio)):
            value = law("none", rps, c1, c2, pieces, cap, 1.0) * r
            errors[name] = float(np.max(np.abs(measured[tested] / value[tested] - 1.0)))
        rows.append({"group": f"{key[0]} {key[1]} ({key[3]},{key[4]})",
                     "lowest ratio": float(ratio[tested].min()), **errors})
    table = pd.DataFrame(rows)
    shown = table.copy()
    for column in ("steady", "finite run"):
        shown[column] = (100 * shown[column]).map("{:.2f}%".format)
    shown["lowest ratio"] = shown["lowest ratio"].map("{:.3f}".format)
    print(f"largest error above 60% of the top rate (N < 0.8 cap), vidur_{args.set}.csv")
    print(shown.to_string(index=False))
    print("median: " + ", ".join(f"{c} {100 * table[c].median():.2f}%"
                                 for c in ("steady", "finite run"))
          + "; mean: " + ", ".join(f"{c} {100 * table[c].mean():.2f}%"
                                  for c in ("steady", "finite run")))


if __name__ == "__main__":
    main()
