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


def dispersion_quantile(mean, in_flight, c2, dispersion, probability=0.99):
    """The mean plus z_p standard deviations of C2 K, K a count of mean N whose variance
    is dispersion^2 N (dispersion 1: Poisson)."""
    return mean + c2 * norm.ppf(probability) * dispersion * np.sqrt(in_flight)


def dispersion_check(data: pd.DataFrame, name: str) -> None:
    """The count's dispersion chosen per group on the points below 0.6 of the cap (the
    median of (p99 - mean) / (C2 z sqrt(N)) there), then p99 predicted from each measured
    mean between 0.6 and 0.9 of the cap: the form of p99's excess over the mean, apart
    from the mean's own error."""
    light_errors, held_errors, power_errors, dispersions = [], [], [], []
    for _, group in data.groupby(GROUP):
        group = group.sort_values("rps")
        mean = group["latency_mean_s"].to_numpy(float)
        p99 = group["latency_p99_s"].to_numpy(float)
        in_flight = group["rps"].to_numpy(float) * mean
        cap = float(group["max_num_seqs"].iloc[0])
        light, held = in_flight < 0.6 * cap, (in_flight >= 0.6 * cap) & (in_flight < 0.9 * cap)
        if light.sum() < 3:
            continue
        c2, c1 = np.polyfit(in_flight[light], mean[light], 1)
        observed = (p99 - mean) / (c2 * norm.ppf(0.99) * np.sqrt(in_flight))
        dispersion = float(np.median(observed[light]))
        dispersions.append(dispersion)
        predicted = dispersion_quantile(mean, in_flight, c2, dispersion)
        light_errors.append((p99 / predicted - 1.0)[light])
        held_errors.append((p99 / predicted - 1.0)[held])
        # the tails model's form, the same way: p99 / mean = a (L/C1)^(gamma - 1), C1
        # the line's intercept, a and gamma by least squares in logs below 0.6
        load = np.log(mean / c1)
        slope, level = np.polyfit(load[light], np.log(p99 / mean)[light], 1)
        power = mean * np.exp(level + slope * load)
        power_errors.append((p99 / power - 1.0)[held])
    light_all, held_all = np.concatenate(light_errors), np.concatenate(held_errors)
    power_all = np.concatenate(power_errors)
    print(f"vidur_{name}, dispersion chosen below 0.6 of the cap: {len(dispersions)} groups, "
          f"dispersion median {np.median(dispersions):.2f} (range {min(dispersions):.2f}-"
          f"{max(dispersions):.2f}); median |error| below 0.6: "
          f"{np.median(np.abs(light_all)):.3f}; at 0.6-0.9 of the cap ({held_all.size} "
          f"points): median |error| {np.median(np.abs(held_all)):.3f}, within 5% "
          f"{np.mean(np.abs(held_all) < 0.05):.2f}, within 10% "
          f"{np.mean(np.abs(held_all) < 0.10):.2f}, median signed {np.median(held_all):+.3f}")
    print(f"  the power law in L/C1, the same way: median |error| "
          f"{np.median(np.abs(power_all)):.3f}, within 5% {np.mean(np.abs(power_all) < 0.05):.2f}, "
          f"within 10% {np.mean(np.abs(power_all) < 0.10):.2f}, median signed "
          f"{np.median(power_all):+.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=SETS, default="capped")
    parser.add_argument("--dispersion", action="store_true",
                        help="a count whose variance is a dispersion^2 times Poisson's, "
                             "the dispersion chosen on each group's points below 0.6 of "
                             "the cap (dispersion_check)")
    args = parser.parse_args()
    if args.dispersion:
        dispersion_check(pd.read_csv(f"examples/vidur/vidur_{args.set}.csv"), args.set)
        return
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
