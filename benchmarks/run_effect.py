"""Validation: how much a run's mean latency moves from one arrival seed to the next.

One run's requests are not independent. This measures how much a sweep's measured mean
moves between seeds, and how much of that its rates (and the file's other sweeps)
share: the measurement behind ``fit --option run_effect=shared``
(docs/findings/run-effects.md).

    python benchmarks/iteration_run.py replay --set dense --seeds shared:0 -o dense_seed0.csv
    python benchmarks/iteration_run.py replay --set dense --seeds shared:1 -o dense_seed1.csv
    python benchmarks/run_effect.py dense_seed0.csv dense_seed1.csv

Two replays of one Vidur set that differ only in the arrival seed (each sweep replays one
seed at every rate, as Vidur and a fixed-seed GuideLLM sweep do) give at each point the
difference of two runs' log means. More replay pairs (``A B C D ...``: A with B, C with
D) pool their differences. Prints:

1. Its mean square over the variance that two runs would have with independent requests
   (cv^2/n each) and with requests correlated over the N = RPS x L in flight
   (:func:`bayesspec.laws.run_mean_log_sd`), by quarter of concurrency; 1 is calibrated.
2. The correlation of that difference (in units of the correlated sd) between two rates
   of one sweep, by their distance in log RPS: the share of the run effect a sweep's
   rates share (``laws.RUN_EFFECT_SHARE`` is the mean over distances 0.3-2).
3. The same correlation between points of two different sweeps: one seed serves every
   sweep of a Vidur set, so their run effects move together.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from bayesspec.laws import run_mean_log_sd

SWEEP = ["verifier", "gpu", "prefill_tokens", "decode_tokens"]
SHARED_RANGE = (0.3, 2.0)


def paired(first: str, second: str) -> pd.DataFrame:
    a, b = pd.read_csv(first), pd.read_csv(second)
    both = a.merge(b, on=SWEEP + ["rps_target"], suffixes=("_a", "_b"))
    both = both.loc[~both["saturated_a"].astype(bool) & ~both["saturated_b"].astype(bool)].copy()
    iid, correlated = 0.0, 0.0
    for side in ("a", "b"):
        cv = both[f"latency_std_s_{side}"] / both[f"latency_mean_s_{side}"]
        n = both[f"n_requests_{side}"].astype(float)
        in_flight = both[f"rps_{side}"] * both[f"latency_mean_s_{side}"]
        iid = iid + cv**2 / n
        correlated = correlated + run_mean_log_sd(cv, n, in_flight) ** 2
    both["difference"] = np.log(both["latency_mean_s_a"] / both["latency_mean_s_b"])
    both["z_iid"] = both["difference"] / np.sqrt(iid)
    both["z"] = both["difference"] / np.sqrt(correlated)
    both["in_flight"] = both["rps_a"] * both["latency_mean_s_a"]
    return both


def calibration(both: pd.DataFrame, bins: int = 4) -> pd.DataFrame:
    both = both.assign(load=pd.qcut(both["in_flight"], bins))
    return both.groupby("load", observed=True).agg(
        points=("z", "size"), in_flight=("in_flight", "median"),
        ms_iid=("z_iid", lambda z: float(np.mean(z**2))),
        ms_correlated=("z", lambda z: float(np.mean(z**2))))


def rate_pairs(both: pd.DataFrame) -> pd.DataFrame:
    pairs = []
    for _, sweep in both.groupby(SWEEP):
        sweep = sweep.sort_values("rps_target")
        log_rate, z = np.log(sweep["rps_target"].to_numpy(float)), sweep["z"].to_numpy(float)
        for i in range(len(z)):
            for j in range(i + 1, len(z)):
                pairs.append((log_rate[j] - log_rate[i], z[i] * z[j], z[i] ** 2, z[j] ** 2))
    return pd.DataFrame(pairs, columns=["distance", "product", "first", "second"])


def cross_sweep_pairs(both: pd.DataFrame) -> pd.DataFrame:
    """Every pair of points from two different sweeps of one replay pair: the product of
    their standardised differences, and whether the sweeps share the request lengths."""
    keys = both[SWEEP].astype(str).agg("|".join, axis=1).to_numpy()
    lengths = both[["prefill_tokens", "decode_tokens"]].astype(str).agg("|".join, axis=1).to_numpy()
    z = both["z"].to_numpy(float)
    # each point's place in its sweep: log of its rate over the sweep's top rate
    place = np.log(both["rps_target"] / both.groupby(SWEEP)["rps_target"].transform("max"))
    place = place.to_numpy(float)
    first, second = np.triu_indices(len(z), k=1)
    other = keys[first] != keys[second]
    first, second = first[other], second[other]
    return pd.DataFrame({"same_lengths": lengths[first] == lengths[second],
                         "place_distance": np.abs(place[first] - place[second]),
                         "product": z[first] * z[second], "first": z[first] ** 2,
                         "second": z[second] ** 2})


def correlation(pairs: pd.DataFrame) -> float:
    return float(pairs["product"].sum() / np.sqrt(pairs["first"].sum() * pairs["second"].sum()))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first")
    parser.add_argument("second")
    parser.add_argument("more", nargs="*",
                        help="more replays, taken in pairs with the first two (3 with 4, ...)")
    args = parser.parse_args(argv)
    files = [args.first, args.second, *args.more]
    if len(files) % 2:
        parser.error("replays come in pairs: give an even number of files")
    replays = [paired(a, b) for a, b in zip(files[::2], files[1::2])]
    both = pd.concat(replays, ignore_index=True)
    print(f"{len(both)} points in {both.groupby(SWEEP).ngroups} sweeps\n")
    print("mean square of the seed-to-seed difference over its variance, by requests in "
          "flight:")
    print(calibration(both).round(2).to_string())
    print(f"all: independent requests {np.mean(both['z_iid']**2):.1f}, correlated "
          f"{np.mean(both['z']**2):.2f}\n")
    pairs = pd.concat([rate_pairs(r) for r in replays], ignore_index=True)
    edges = [0.0, 0.1, 0.2, 0.3, 0.5, 0.8, 1.2, 2.0, 5.0]
    pairs["distance_bin"] = pd.cut(pairs["distance"], edges)
    table = pairs.groupby("distance_bin", observed=True).apply(
        lambda p: pd.Series({"pairs": len(p), "correlation": correlation(p)}),
        include_groups=False)
    print("correlation between two rates of a sweep, by distance in log RPS:")
    print(table.round(3).to_string())
    lo, hi = SHARED_RANGE
    shared = pairs.loc[(pairs["distance"] > lo) & (pairs["distance"] <= hi)]
    print(f"distances {lo}-{hi}: {len(shared)} pairs, correlation {correlation(shared):.3f}")
    # One seed serves every sweep of a set: do different sweeps share their luck too?
    across = pd.concat([cross_sweep_pairs(r) for r in replays], ignore_index=True)
    print("\ncorrelation between points of two different sweeps (one seed serves all):")
    for label, subset in (("same request lengths", across.loc[across["same_lengths"]]),
                          ("other request lengths", across.loc[~across["same_lengths"]]),
                          ("all", across)):
        if len(subset):
            print(f"  {label}: {len(subset)} pairs, correlation {correlation(subset):.3f}")
    across["distance_bin"] = pd.cut(across["place_distance"], [-0.01, 0.05, 0.2, 0.5, 1.0, 5.0])
    table = across.groupby("distance_bin", observed=True).apply(
        lambda p: pd.Series({"pairs": len(p), "correlation": correlation(p)}),
        include_groups=False)
    print("  by how far apart the two points sit in their sweeps (log of rate over the "
          "sweep's top rate):")
    print(table.round(3).to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
