"""How over-dispersed is the load a request meets? The count law's dispersion exponent
read off each group's reported p99 (issue 34, the `tails` target; the fifteenth session).

    python benchmarks/count_dispersion_exponent.py examples/vidur/vidur_capped.csv \\
        examples/vidur/vidur_fresh.csv examples/vidur/vidur_dense.csv

Per group (verifier, gpu, prefill, decode), at the points below 0.8 of the engine's cap
(N = RPS x mean < 0.8 max_num_seqs) whose load L - C1 is at least 0.15 C1 (below, the
decode profile's dips make the ratio noise): the variance a log-normal of the measured
mean needs to reach the measured p99, less the lowest rate's (the request's own spread),
divided by the load L - C1. C1 is the zero-load latency of eq. (1) fitted to the three
lowest rates (1/L linear in RPS), F = L/C1. The printed exponent b is the slope of that
per-load variance against F on log scales:

- b = 0: a Poisson count of stalls (`tails --option count_dispersion=batch`);
- b = 1: eq. (1)'s birth-death chain (the count law's default, `chain`);
- b = 2: a branching count (each stall lengthens the life in which more arrive).
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from scipy.optimize import brentq
from scipy.special import ndtri

GROUP = ["verifier", "gpu", "prefill_tokens", "decode_tokens"]
Z99 = float(ndtri(0.99))


def log_sd_for_ratio(ratio: float) -> float:
    """The log-sd s of a log-normal whose p99/mean is ``ratio``."""
    return brentq(lambda s: np.exp(Z99 * s - s * s / 2) - ratio, 1e-6, 1.0)


def group_exponent(group: pd.DataFrame) -> dict | None:
    group = group.sort_values("rps")
    rps = group["rps"].to_numpy(float)
    mean = group["latency_mean_s"].to_numpy(float)
    ratio = group["latency_p99_s"].to_numpy(float) / mean
    cap = float(group["max_num_seqs"].iloc[0])
    slope, intercept = np.polyfit(rps[:3], 1.0 / mean[:3], 1)
    c1 = 1.0 / intercept
    log_sd = np.array([log_sd_for_ratio(max(r, 1.0001)) for r in ratio])
    variance = mean ** 2 * np.expm1(log_sd ** 2)
    load_variance = np.maximum(variance - variance[0], 1e-9)
    load = mean - c1
    factor = mean / c1
    used = (rps * mean < 0.8 * cap) & (load > 0.15 * c1)
    if used.sum() < 3:
        return None
    exponent = np.polyfit(np.log(factor[used]), np.log(load_variance[used] / load[used]), 1)[0]
    return {"points": int(used.sum()), "in_flight": (rps * mean)[used],
            "factor": factor[used], "exponent": exponent, "cap": cap}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    print("| file | group | cap | points | in flight | F | exponent b |")
    print("|---|---|---|---|---|---|---|")
    for path in args.files:
        for key, group in pd.read_csv(path).groupby(GROUP):
            found = group_exponent(group)
            if found is None:
                continue
            print(f"| {path.rsplit('/', 1)[-1]} | {key[0]} {key[1]} ({key[2]}, {key[3]}) | "
                  f"{found['cap']:.0f} | {found['points']} | "
                  f"{found['in_flight'].min():.0f}-{found['in_flight'].max():.0f} | "
                  f"{found['factor'].min():.2f}-{found['factor'].max():.2f} | "
                  f"{found['exponent']:+.2f} |")


if __name__ == "__main__":
    main()
