"""How far one shared arrival seed moves a whole sweep's held-out residual (issue 34): is
the Vidur sets' held-out under-prediction the law's, or seed 0's?

    python benchmarks/shared_seed_spread.py vidur-seeds          # Vidur's own seeds 0-7
    python benchmarks/shared_seed_spread.py replay --set dense --seeds 12 [--groups 25]

Every rate of a bundled Vidur sweep, in every group, uses arrival seed 0 scaled to the
rate. A held-out check on such a set is one draw of the arrival pattern, not 125
independent ones: if seed 0's pattern happens to load the top of a sweep more than the
average pattern does, every group's held-out points sit above any law's prediction
together, and pooled coverage says little about the intervals.

Each sweep is fitted as the Bayesian held-out check is, but by least squares in log L:
the chain law with the batched prefill (the dense model's defaults with a decode profile
and a cap) on the rates up to 60% of the top rate, and each higher rate whose N stays
below 0.8 of the cap predicted as a new whole run of its own requests
(``ProfileCurve.run_latency``). Printed per seed: the median log(measured / predicted)
over the held-out points, the share above the prediction.

- ``vidur-seeds``: Vidur's own runs of the InternLM-20B A100 (1152,128) sweep with seeds
  0-7 (``results_seed_spread_internlm_1152_128.csv``; seed 0 is the bundled sweep).
- ``replay``: every group of a set, replayed by ``iteration_run.simulate_run`` (each
  group's decode profile and its prefill a + b m fitted to the group's measured means,
  as ``replay_sets.py`` does) with one seed shared by every rate of every group, for
  seeds 0..S-1, and with a seed per row for comparison.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from bayesspec.prediction import ProfileCurve
from iteration_run import simulate_run, vidur_arrivals
from prefill_chain_law import chain_arrays, chain_law
from run_replay import fit_group_prefill, prompt_budget
from vidur_sets import profiled_groups

HERE = Path(__file__).resolve().parent


def held_out_run_residuals(key, rows, sizes, times, cap, fraction=0.6, near_cap=0.8):
    """log(measured / predicted whole run) at the rows above ``fraction`` of the top rate
    whose N stays below ``near_cap`` of the cap, the batched chain fitted below it."""
    decode = float(key[4])
    extra, valid, decode_s = chain_arrays(decode, sizes, times, cap)
    rps = rows["rps"].to_numpy(float)
    measured = rows["latency_mean_s"].to_numpy(float)
    n = rows["n_requests"].to_numpy(float)
    fit = rps <= fraction * rps.max()
    held = ~fit & (rps * measured < near_cap * cap)

    def law(theta, at):
        c1, c2 = np.exp(theta)
        return chain_law(rps[at], c1, c2, cap, extra, valid, decode_s,
                         min(times[0], 0.9 * c2))

    theta = least_squares(lambda t: np.log(measured[fit]) - np.log(law(t, fit)),
                          np.log([measured.min(), 0.5 / rps.max()]), diff_step=1e-4).x
    c1, c2 = np.exp(theta)
    curve = ProfileCurve(np.array([c1]), np.array([c2]), batch_sizes=sizes,
                         iteration_s=times, decode_tokens=decode, cap=cap, law="chain",
                         prefill_batching=True)
    if not held.any():
        return np.zeros(0)
    return np.log(measured[held] / curve.run_latency(rps[held], n[held])[0])


def summary(label, residuals):
    r = np.asarray(residuals)
    return (f"{label:>24}: held-out points {r.size:3d}, median log(measured/predicted) "
            f"{np.median(r):+.4f}, share above {np.mean(r > 0):.2f}")


def vidur_seeds(args) -> None:
    runs = pd.read_csv(HERE / "results_seed_spread_internlm_1152_128.csv")
    target = ("InternLM-20B", "A100", 4, 1152, 128)
    for key, _, sizes, times, cap in profiled_groups("fresh"):
        if tuple(key) == target:
            break
    else:
        raise SystemExit("InternLM-20B A100 (1152,128) is not in vidur_fresh")
    medians = []
    for seed, rows in runs.groupby("seed"):
        rows = rows.sort_values("rps")
        r = held_out_run_residuals(key, rows, sizes, times, cap)
        medians.append(np.median(r))
        print(summary(f"Vidur seed {seed}", r) + "   per point "
              + " ".join(f"{v:+.3f}" for v in r), flush=True)
    medians = np.array(medians)
    print(f"seed medians: mean {medians.mean():+.4f}, sd {medians.std(ddof=1):.4f}; "
          f"seed 0 ranks {int(np.sum(medians < medians[0])) + 1} of {medians.size}")


def replay(args) -> None:
    groups = []
    for index, (key, rows, sizes, times, cap) in enumerate(profiled_groups(args.set)):
        if index >= args.groups:
            break
        started = time.time()
        prefill, _ = fit_group_prefill(rows, float(key[4]), sizes, times, cap)
        prompts = prompt_budget(rows.iloc[0])
        groups.append((key, rows, sizes, times, cap, prefill, prompts))
        print(f"{' '.join(map(str, key))}: prefill a {1e3 * prefill[0]:.2f} ms, "
              f"b {1e3 * prefill[1]:.2f} ms ({time.time() - started:.0f} s)", flush=True)

    def replayed(seed_of):
        residuals = []
        for g, (key, rows, sizes, times, cap, prefill, prompts) in enumerate(groups):
            new = rows.copy()
            for j, (index, row) in enumerate(rows.iterrows()):
                n = int(row["n_requests"])
                arrivals = vidur_arrivals(row["rps_target"], n, seed_of(g, j))
                latency = simulate_run(row["rps_target"], n, int(key[4]), prefill,
                                       sizes, times, int(cap), None, prompts,
                                       arrivals=arrivals)
                new.loc[index, "rps"] = (n - 1) / (arrivals[-1] - arrivals[0])
                new.loc[index, "latency_mean_s"] = latency.mean()
            new = new.sort_values("rps")
            residuals.extend(held_out_run_residuals(key, new, sizes, times, cap))
        return np.array(residuals)

    measured = np.concatenate([held_out_run_residuals(key, rows, sizes, times, cap)
                               for key, rows, sizes, times, cap, *_ in groups])
    print(summary(f"Vidur's measured {args.set}", measured), flush=True)
    shared = []
    for seed in range(args.seeds):
        started = time.time()
        r = replayed(lambda g, j, s=seed: s)
        shared.append(np.median(r))
        print(summary(f"shared seed {seed}", r) + f" ({time.time() - started:.0f} s)",
              flush=True)
    independent = []
    for round_ in range(args.independent):
        r = replayed(lambda g, j, k=round_: 100000 * (k + 1) + 1000 * (g + 1) + j)
        independent.append(np.median(r))
        print(summary(f"a seed per row, round {round_}", r), flush=True)
    shared = np.array(shared)
    print(f"shared seeds: median residual mean {shared.mean():+.4f}, sd "
          f"{shared.std(ddof=1):.4f}, range {shared.min():+.4f} to {shared.max():+.4f}; "
          f"seed 0 ranks {int(np.sum(shared < shared[0])) + 1} of {shared.size}")
    if independent:
        independent = np.array(independent)
        print(f"a seed per row: median residual mean {independent.mean():+.4f}, range "
              f"{independent.min():+.4f} to {independent.max():+.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", choices=("vidur-seeds", "replay"))
    parser.add_argument("--set", default="dense", choices=("dense", "fresh", "capped"))
    parser.add_argument("--seeds", type=int, default=12, help="shared seeds 0..S-1")
    parser.add_argument("--independent", type=int, default=2,
                        help="rounds with a seed per row")
    parser.add_argument("--groups", type=int, default=1000, help="the set's first groups")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    (vidur_seeds if args.source == "vidur-seeds" else replay)(args)


if __name__ == "__main__":
    main()
