"""The Vidur sets' held-out rates by a replay of each run, iteration by iteration, with the
law's own parts (issue 34): is what the steady-state law misses above 60% of each top rate
the runs themselves (their arrivals, fill and drain, prefill batching)?

    python benchmarks/run_replay.py --set fresh      # and dense, capped
    python benchmarks/run_replay.py --set fresh --groups 3 --new-runs 4   # a quick look

Per group, two fits to the rates up to 60% of the top rate, each by least squares on the
log of the mean latency, and the largest relative error at the higher rates:
- **steady law**: C1, C2 of the decode-profile law (no slot wait), as
  `benchmarks/finite_run.py` fits it;
- **replay**: the prefill iteration's cost a + b m for m prompts (two parameters, nothing
  else free) in `iteration_run.simulate_run`, fed each run's own arrival times (Vidur's
  generator at the row's `rps_target` and seed). A request's own work is its prefill and
  decode_tokens - 1 decode iterations at the group's decode profile; the engine prefills
  every waiting prompt (up to max_num_batched_tokens and max_num_seqs) before the next
  decode iteration, as Vidur's vLLM scheduler does without chunked prefill.

Then a **new run** at each held-out rate: the replay's mean over ``--new-runs`` other
arrival seeds, each run's arrivals scaled to the measured run's realized rate (the `rps`
the tidy row holds), and their sd (the run-to-run scatter a user's next load test at that
rate has). Printed:
the error of the measured run against that mean, in units of the scatter.
"""

from __future__ import annotations

import argparse
import re
import time
import warnings

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from bayesspec.laws import profile_segments

from iteration_run import simulate_run, vidur_arrivals  # the script's folder is on the path
from slot_queue_choice import law
from vidur_sets import SETS, profiled_groups


def prompt_budget(row) -> int:
    """The most prompts one prefill iteration takes: max_num_batched_tokens over the
    prompt's tokens, at least one."""
    return max(int(row["max_num_batched_tokens"]) // int(row["prefill_tokens"]), 1)


def replay(rows, decode, prefill, sizes, times, cap, seed_offset=None):
    """Each row's run mean by the replay (its own seed, or seed_offset + its seed)."""
    means = []
    for _, row in rows.iterrows():
        seed = int(re.search(r"seed=(\d+)", row["source"]).group(1))
        if seed_offset is not None:
            seed += seed_offset
        arrivals = vidur_arrivals(row["rps_target"], int(row["n_requests"]), seed)
        if seed_offset is not None:
            # a new run at the measured run's realized rate (the rate the tidy row holds)
            realized = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
            arrivals = arrivals * realized / row["rps"]
        latency = simulate_run(row["rps_target"], int(row["n_requests"]), int(decode), prefill,
                               sizes, times, int(cap), None,
                               prompt_budget(row),
                               arrivals=arrivals)
        means.append(latency.mean())
    return np.array(means)


def fit_prefill(rows, decode, sizes, times, cap, start):
    """The prefill iteration's (a, b) that bring the replay of ``rows`` (their own
    arrivals) closest to their measured means in log, from ``start`` (log a, log b);
    returns (a, b) and the least-squares solution."""
    measured = rows["latency_mean_s"].to_numpy(float)

    def residual(theta):
        return np.log(measured) - np.log(replay(rows, decode, tuple(np.exp(theta)),
                                                sizes, times, cap))

    solution = least_squares(residual, start, diff_step=0.02, max_nfev=40,
                             bounds=(np.log([1e-5, 1e-5]), np.log([10.0, 10.0])))
    return tuple(np.exp(solution.x)), solution


def fit_group_prefill(rows, decode, sizes, times, cap):
    """:func:`fit_prefill` on all of a group's ``rows``, started from a stall of half
    the top rate's mean gap, its fixed part at most t_d(1): each group's truth in
    ``replay_sets.py`` and the scripts that replay a whole set."""
    c2 = 0.5 / rows["rps"].max()
    return fit_prefill(rows, decode, sizes, times, cap,
                       np.log([min(times[0], 0.5 * c2), max(0.5 * c2, 1e-4)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=SETS, default="fresh")
    parser.add_argument("--fraction", type=float, default=0.6)
    parser.add_argument("--new-runs", type=int, default=8)
    parser.add_argument("--groups", type=int, default=0, help="only the first G groups")
    parser.add_argument("--csv", help="write the per-point table here")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    rows, points = [], []
    for index, (key, group, sizes, times, cap) in enumerate(profiled_groups(args.set)):
        if args.groups and index >= args.groups:
            break
        started = time.time()
        decode = float(key[4])
        pieces = profile_segments(decode, sizes, times, cap)
        rps = group["rps"].to_numpy(float)
        measured = group["latency_mean_s"].to_numpy(float)
        fitted = rps <= args.fraction * rps.max()
        held = ~fitted

        def steady_residual(theta):
            value = law("none", rps[fitted], *np.exp(theta), pieces, cap, 1.0)
            return np.log(measured[fitted]) - np.log(value)

        c1, c2 = np.exp(least_squares(steady_residual,
                                      np.log([measured.min(), 0.5 / rps.max()])).x)
        steady = law("none", rps, c1, c2, pieces, cap, 1.0)

        # the replay's own work per request is its prefill and decode - 1 iterations at
        # t_d(1) and up; start from the steady fit's stall with the fixed part at t_d(1)
        start = np.log([min(times[0], 0.5 * c2), max(c2 - min(times[0], 0.5 * c2), 1e-4)])
        prefill, solution = fit_prefill(group[fitted], decode, sizes, times, cap, start)
        own = replay(group, decode, prefill, sizes, times, cap)
        new = np.array([replay(group[held], decode, prefill, sizes, times, cap,
                               seed_offset=1 + s) for s in range(args.new_runs)])
        new_mean, new_sd = new.mean(axis=0), new.std(axis=0, ddof=1)
        in_flight = rps * measured
        label = f"{key[0]} {key[1]} ({key[3]},{key[4]})"
        for i in np.flatnonzero(held):
            j = int(np.sum(held[:i]))
            points.append({"group": label, "rps": rps[i], "N": in_flight[i],
                           "measured": measured[i], "steady": steady[i], "replay": own[i],
                           "new_run_mean": new_mean[j], "new_run_sd": new_sd[j]})
        error = lambda value: float(np.max(np.abs(measured[held] / value[held] - 1.0)))
        z = (measured[held] - new_mean) / new_sd
        rows.append({"group": label, "prefill a (ms)": 1000 * prefill[0],
                     "b (ms)": 1000 * prefill[1], "C2 steady (ms)": 1000 * c2,
                     "steady": error(steady), "replay": error(own),
                     "fit rms replay": float(np.sqrt(np.mean(solution.fun ** 2))),
                     "new-run sd/mean": float(np.median(new_sd / new_mean)),
                     "max |z| new run": float(np.max(np.abs(z))),
                     "s": time.time() - started})
        print(" | ".join(f"{k} {v:.4g}" if isinstance(v, float) else str(v)
                         for k, v in rows[-1].items()), flush=True)
    table = pd.DataFrame(rows)
    print(f"\nlargest relative error above {args.fraction:.0%} of each top rate, "
          f"vidur_{args.set}.csv")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print("median: steady {:.2%}, replay {:.2%}; mean: steady {:.2%}, replay {:.2%}".format(
        table["steady"].median(), table["replay"].median(), table["steady"].mean(),
        table["replay"].mean()))
    frame = pd.DataFrame(points)
    inside = np.abs(frame["measured"] - frame["new_run_mean"]) <= 1.645 * frame["new_run_sd"]
    print(f"measured held-out runs within the new runs' mean +- 1.645 sd: {inside.mean():.3f} "
          f"of {len(frame)}")
    if args.csv:
        frame.to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
