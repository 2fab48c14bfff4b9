"""The law fitted to one Vidur sweep run with several arrival seeds, seed by seed.

Input: the CSV of ``examples/vidur/seed_spread.py`` (one setup's rates, run with seeds
0..7). Each seed's sweep is fitted by least squares in log L with the package's law (the
decode profile, the slot queue at the set's cap; ``slot_queue_choice.py``'s
``birth-death`` form), on its rates up to ``--fraction`` of the top rate, and its higher
rates are predicted. Printed per seed: the realized rate over the target, the fitted C1
and C2, the error at each held-out rate, and R^2 of a fit on every point below the cap.
The question: is seed 0 (the bundled sweeps' seed) typical, or does its arrival pattern
move the fitted costs?

    python benchmarks/seed_spread_fit.py seeds.csv --set fresh --verifier InternLM-20B \\
        --gpu A100 --prefill 1152 --decode 128
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from bayesspec.checks import r_squared
from bayesspec.laws import profile_segments, queue_wait_scale

from slot_queue_choice import fit_group, fitted_costs, law  # the script's folder
from vidur_sets import profiled_groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seeds_csv")
    parser.add_argument("--set", default="fresh")
    parser.add_argument("--verifier", required=True)
    parser.add_argument("--gpu", required=True)
    parser.add_argument("--prefill", type=int, required=True)
    parser.add_argument("--decode", type=int, required=True)
    parser.add_argument("--fraction", type=float, default=0.6)
    parser.add_argument("--form", default="birth-death")
    args = parser.parse_args()
    for key, group, sizes, times, cap in profiled_groups(args.set):
        if (key[0], key[1], int(key[3]), int(key[4])) == (
                args.verifier, args.gpu, args.prefill, args.decode):
            break
    else:
        raise SystemExit("no such group in the set")
    pieces = profile_segments(float(args.decode), sizes, times, cap)
    spread = float(group["latency_std_s"].iloc[0] / group["latency_mean_s"].iloc[0])
    wait_scale = float(queue_wait_scale(spread))
    runs = pd.read_csv(args.seeds_csv)
    top_target = runs["rps_target"].max()
    rows, held_targets = [], None
    for seed, sweep in runs.groupby("seed"):
        sweep = sweep.sort_values("rps_target")
        rps = sweep["rps"].to_numpy(float)
        measured = sweep["latency_mean_s"].to_numpy(float)
        below_cap = rps * measured < cap
        fitted = (sweep["rps_target"].to_numpy(float) <= args.fraction * top_target) & below_cap
        n_requests = float(sweep["n_requests"].iloc[0])
        _, value_all = fit_group(args.form, rps[below_cap], measured[below_cap], pieces, cap,
                                 wait_scale, n_requests)
        costs = fitted_costs(args.form, rps[fitted], measured[fitted], pieces, cap,
                             wait_scale, n_requests)
        predicted = law(args.form, rps, *costs, pieces, cap, wait_scale, n_requests)
        held = ~fitted & below_cap
        held_targets = sweep["rps_target"].to_numpy(float)[held]
        row = {"seed": int(seed), "rate/target": float(np.median(rps / sweep["rps_target"])),
               "C1": costs[0], "C2": costs[1],
               "R^2 all": r_squared(measured[below_cap], value_all)}
        for target, error in zip(held_targets, measured[held] / predicted[held] - 1.0):
            row[f"err@{target:.2f}"] = error
        rows.append(row)
    table = pd.DataFrame(rows)
    shown = table.copy()
    for column in [c for c in table.columns if c.startswith("err@")]:
        shown[column] = (100 * shown[column]).map("{:+.1f}%".format)
    pd.set_option("display.width", 250)
    print(f"{args.verifier} {args.gpu} ({args.prefill},{args.decode}), {args.form} law, "
          f"fitted up to {args.fraction} of the top rate (error = measured/predicted - 1)")
    print(shown.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    others = table.loc[table["seed"] != 0]
    print(f"C2: seed 0 {table['C2'].iloc[0]:.4f}; other seeds {others['C2'].mean():.4f} "
          f"(sd {others['C2'].std():.4f}, range {others['C2'].min():.4f}-"
          f"{others['C2'].max():.4f})")


if __name__ == "__main__":
    main()
