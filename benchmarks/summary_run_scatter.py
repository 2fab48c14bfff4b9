"""How much a reported p99 moves from one arrival seed to the next (issue 34, tails):
the measurement behind the tails model's ``summary_run`` option.

Replays of one Vidur set that differ only in the arrival seed (``replay_sets.py --seeds
shared:S``), taken in pairs (A with B, C with D, ...), give at each point the difference
of two runs' log p99. Printed, by quarter of the requests in flight N = RPS x L:

1. its mean square over the variance two runs would have if a p99 were the order
   statistic of n independent requests, s^2 var(p, n) each (s the point's per-request
   log spread, (log p99 - log p50)/z_0.99), and over that variance times 1 + 2N (the
   requests that share a batch counted once, as ``laws.run_mean_log_sd`` does for the
   mean); 1 is calibrated;
2. the same over the mean's own run variance cv^2 (1 + 2N)/n: how much more a p99 moves
   than the mean;
3. the correlation of the standardised difference between two points of one pair of
   replays, within one sweep by distance in log RPS and across sweeps: the share of a
   p99's run error that the file's seed shares (``laws.RUN_EFFECT_SHARE`` for the mean).

    .venv/bin/python benchmarks/summary_run_scatter.py /tmp/capped_seed0.csv ... /tmp/capped_seed5.csv
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from scipy.special import ndtri

from bayesspec.laws import quantile_sampling_moments

SWEEP = ["verifier", "gpu", "prefill_tokens", "decode_tokens"]
DISTANCES = ((0.0, 0.2), (0.2, 0.5), (0.5, 1.0), (1.0, 5.0))


def paired(first: str, second: str) -> pd.DataFrame:
    a, b = pd.read_csv(first), pd.read_csv(second)
    both = a.merge(b, on=SWEEP + ["rps_target"], suffixes=("_a", "_b"))
    both = both.loc[~both["saturated_a"].astype(bool) & ~both["saturated_b"].astype(bool)].copy()
    independent, correlated, mean_run = 0.0, 0.0, 0.0
    for side in ("a", "b"):
        spread = (np.log(both[f"latency_p99_s_{side}"]) - np.log(both[f"latency_p50_s_{side}"])) \
            / ndtri(0.99)
        count = both[f"n_requests_{side}"].to_numpy(float)
        variance = quantile_sampling_moments(0.99, count)[1]
        in_flight = both[f"rps_{side}"] * both[f"latency_mean_s_{side}"]
        independent = independent + spread**2 * variance
        correlated = correlated + spread**2 * variance * (1.0 + 2.0 * in_flight)
        cv = both[f"latency_std_s_{side}"] / both[f"latency_mean_s_{side}"]
        mean_run = mean_run + cv**2 * (1.0 + 2.0 * in_flight) / count
    both["difference"] = np.log(both["latency_p99_s_a"] / both["latency_p99_s_b"])
    both["independent"], both["correlated"], both["mean_run"] = independent, correlated, mean_run
    both["z"] = both["difference"] / np.sqrt(correlated)
    both["in_flight"] = both["rps_a"] * both["latency_mean_s_a"]
    both["sweep"] = both[SWEEP].astype(str).agg("|".join, axis=1)
    both["log_rps"] = np.log(both["rps_a"])
    return both


def _correlation(pairs: np.ndarray) -> float:
    """E[z_i z_j]/E[z^2]: the seed's shared effect is the signal, so means stay in."""
    return float(np.mean(pairs[:, 0] * pairs[:, 1])
                 / np.mean(np.concatenate([pairs[:, 0], pairs[:, 1]]) ** 2))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("replays", nargs="+", help="replay CSVs, taken in pairs")
    args = parser.parse_args(argv)
    if len(args.replays) < 2 or len(args.replays) % 2:
        parser.error("give the replays in pairs")
    frames = [paired(a, b) for a, b in zip(args.replays[::2], args.replays[1::2])]
    data = pd.concat(frames, ignore_index=True)
    data["quarter"] = pd.qcut(data["in_flight"], 4, labels=False)
    print("| in flight (median) | points | / independent order statistic | / x (1 + 2N) "
          "| / the mean's run variance | rms difference |")
    print("|---|---|---|---|---|---|")
    rows = [(f"{g['in_flight'].median():.1f}", g) for _, g in data.groupby("quarter")]
    rows.append(("all", data))
    for name, g in rows:
        square = np.mean(g["difference"] ** 2)
        print(f"| {name} | {len(g)} | {square / np.mean(g['independent']):.1f} | "
              f"{square / np.mean(g['correlated']):.2f} | {square / np.mean(g['mean_run']):.1f} | "
              f"{np.sqrt(square):.3f} |")
    within = {bounds: [] for bounds in DISTANCES}
    across = []
    for frame in frames:
        z, sweep, log_rps = (frame[c].to_numpy() for c in ("z", "sweep", "log_rps"))
        for i in range(len(frame)):
            for j in range(i + 1, len(frame)):
                if sweep[i] != sweep[j]:
                    across.append((z[i], z[j]))
                    continue
                distance = abs(log_rps[i] - log_rps[j])
                for low, high in DISTANCES:
                    if low <= distance < high:
                        within[(low, high)].append((z[i], z[j]))
    print("\n| pair of points | pairs | correlation |")
    print("|---|---|---|")
    for (low, high), pairs in within.items():
        print(f"| one sweep, {low}-{high} apart in log RPS | {len(pairs)} | "
              f"{_correlation(np.array(pairs)):.3f} |")
    print(f"| two different sweeps | {len(across)} | {_correlation(np.array(across)):.3f} |")


if __name__ == "__main__":
    main()
