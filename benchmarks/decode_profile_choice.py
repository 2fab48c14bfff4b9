"""How the decode-iteration profile enters the law, chosen on one Vidur set, tested on two.

    python benchmarks/decode_profile_choice.py --set dense    # the set the form was chosen on
    python benchmarks/decode_profile_choice.py --set fresh    # tested
    python benchmarks/decode_profile_choice.py --set capped   # tested

For each group (points below its cap), the largest relative residual of a least-squares
line L - shift(N) = C1 + C2 N through the measured (N = RPS x L, L), for three shifts:

- ``eq1``: none (eq. (1), whose C2 N takes the decode iteration as linear in the batch);
- ``mean``: the profile at the mean batch, (decode - 1) (t_d(N + 1) - t_d(1));
- ``poisson``: the profile averaged over the batches a request meets, B = min(1 + K, cap),
  K ~ Poisson(N) (:func:`bayesspec.laws.decode_profile_shift`, the form adopted).

A line through the points is the law's best case with N measured; the fitted model solves
N itself (:func:`bayesspec.laws.profile_concurrency_expr`). Output: one row per group and
the medians; ``--csv`` writes the rows.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from bayesspec.laws import decode_profile_shift
from vidur_sets import SETS, profiled_groups  # the script's folder is on the path


def mean_batch_shift(concurrency, decode, sizes, times, cap):
    batch = np.minimum(np.asarray(concurrency, dtype=float) + 1.0, cap)
    return (decode - 1.0) * (np.interp(batch, sizes, times) - times[0])


def largest_residual(concurrency, latency, shift) -> float:
    design = np.c_[np.ones_like(concurrency), concurrency]
    target = latency - shift
    coefficients, *_ = np.linalg.lstsq(design, target, rcond=None)
    return float(np.max(np.abs(target - design @ coefficients) / latency))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=SETS, default="dense")
    parser.add_argument("--csv", default=None)
    args = parser.parse_args()
    rows = []
    for key, group, sizes, times, cap in profiled_groups(args.set):
        concurrency = (group["rps"] * group["latency_mean_s"]).to_numpy(float)
        below = concurrency < cap
        n, latency = concurrency[below], group["latency_mean_s"].to_numpy(float)[below]
        decode = float(key[4])
        rows.append({"group": f"{key[0]} {key[1]} ({key[3]},{key[4]})",
                     "eq1": largest_residual(n, latency, np.zeros_like(n)),
                     "mean": largest_residual(n, latency,
                                              mean_batch_shift(n, decode, sizes, times, cap)),
                     "poisson": largest_residual(
                         n, latency, decode_profile_shift(n, decode, sizes, times, cap))})
    table = pd.DataFrame(rows)
    shown = table.copy()
    for column in ("eq1", "mean", "poisson"):
        shown[column] = (100 * shown[column]).map("{:.2f}%".format)
    print(f"largest relative residual of a line through L - shift(N), vidur_{args.set}.csv")
    print(shown.to_string(index=False))
    print("median: " + ", ".join(f"{c} {100 * table[c].median():.2f}%"
                                 for c in ("eq1", "mean", "poisson")))
    if args.csv:
        table.to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
