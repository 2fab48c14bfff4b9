"""Is a sweep's p99 the mean plus the spread of a Poisson count of stalls? Checked on
the Vidur sets (issue 34, the `tails` target on vidur_capped).

    python benchmarks/stall_count_tail.py --set capped     # and dense, fresh

Without chunked prefill, each later arrival's prefill stalls a running request once, so
its latency is about a base plus C2 times the number of arrivals during its life. If that
number is Poisson (mean N = RPS x L), the p-quantile q solves
q = base + C2 (RPS q + z_p sqrt(RPS q)). Per group, C2 is the slope of a line through L
against N over the points below 60% of the cap, and the base is each point's own L - C2 N
(it carries the decode profile's shift). Printed: measured p99 / predicted - 1 at every
point below 90% of the cap, and its spread over the set."""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from scipy.stats import norm

from vidur_sets import SETS  # the script's folder is on the path

GROUP = ["verifier", "gpu", "prefill_tokens", "decode_tokens"]


def stall_count_quantile(rps, mean, c2, probability=0.99, steps=200):
    """The p-quantile of base + C2 K, K Poisson with mean RPS q (normal approximation),
    base = mean - C2 RPS mean, by fixed-point iteration from the mean."""
    z = norm.ppf(probability)
    base = mean - c2 * rps * mean
    quantile = mean.copy()
    for _ in range(steps):
        quantile = base + c2 * (rps * quantile + z * np.sqrt(rps * quantile))
    return quantile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=SETS, default="capped")
    args = parser.parse_args()
    data = pd.read_csv(f"examples/vidur/vidur_{args.set}.csv")
    errors = []
    for key, group in data.groupby(GROUP):
        group = group.sort_values("rps")
        rps = group["rps"].to_numpy(float)
        mean = group["latency_mean_s"].to_numpy(float)
        in_flight = rps * mean
        cap = float(group["max_num_seqs"].iloc[0])
        light = in_flight < 0.6 * cap
        if light.sum() < 3:
            continue
        c2 = np.polyfit(in_flight[light], mean[light], 1)[0]
        kept = in_flight < 0.9 * cap
        error = (group["latency_p99_s"].to_numpy(float)
                 / stall_count_quantile(rps, mean, c2) - 1.0)[kept]
        errors.append(error)
        print(f"{key[0]:>13s} {key[1]} ({key[2]},{key[3]}): C2 {c2:.4f}, measured/predicted "
              "- 1 by rate: " + " ".join(f"{e:+.2f}" for e in error))
    every = np.abs(np.concatenate(errors))
    print(f"vidur_{args.set}: median |error| {np.median(every):.3f}, 90% within "
          f"{np.quantile(every, 0.9):.3f}, within 5%: {np.mean(every < 0.05):.2f}")


if __name__ == "__main__":
    main()
