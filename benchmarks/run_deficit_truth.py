"""Where the held-out whole-run prediction goes wrong, against a known truth (issue 34):
the steady law, or the run's fill and drain?

    python benchmarks/run_deficit_truth.py --set dense --groups 0,3,6,9,12,15,18,21 \
        --seeds 16 --long 10 --long-seeds 4

The truth is each group's replay (`iteration_run.simulate_run`: the group's decode
profile, its prefill iteration a + b m fitted to the group's measured means, as
`replay_sets.py` builds it), with Poisson arrivals. At each rate:
- the truth's expected run: the mean over ``--seeds`` runs of the group's n_requests;
- the truth's steady state: the mean of the middle (all but the first and last 3N + 50
  requests) of ``--long-seeds`` runs ``--long`` times as long.
The law (the batched chain, the dense model's default with a profile and a cap) is
fitted by least squares in log L to the truth's expected runs up to 60% of the top rate,
as the held-out check fits, and each rate is predicted as a steady state and as a whole
run (`ProfileCurve.run_latency`). Printed per point and as medians over the fitted and
the held-out points (N below 0.8 of the cap):
- true run / true steady against the fluid run / the law's steady (the run's deficit);
- true steady / the law's steady (the steady law's error);
- true run / the law's run (what the held-out check sees, without arrival noise).
The standard errors of the truth's run and steady means are printed beside them.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
from scipy.optimize import least_squares

from bayesspec.prediction import ProfileCurve
from iteration_run import simulate_run
from prefill_chain_law import chain_arrays, chain_law
from run_replay import fit_group_prefill, prompt_budget
from vidur_sets import SETS, profiled_groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=SETS, default="dense")
    parser.add_argument("--groups", default="0,3,6,9,12,15,18,21",
                        help="the set's groups by position")
    parser.add_argument("--seeds", type=int, default=16, help="runs per rate")
    parser.add_argument("--long", type=int, default=10, help="long run / n_requests")
    parser.add_argument("--long-seeds", type=int, default=4)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    chosen = {int(g) for g in args.groups.split(",")}
    rows = []
    for position, (key, group, sizes, times, cap) in enumerate(profiled_groups(args.set)):
        if position not in chosen:
            continue
        decode = float(key[4])
        prefill, _ = fit_group_prefill(group, decode, sizes, times, cap)
        cap_n = int(cap)
        extra, valid, decode_s = chain_arrays(decode, sizes, times, cap)
        rps = group["rps_target"].to_numpy(float)
        measured = group["latency_mean_s"].to_numpy(float)
        n = group["n_requests"].to_numpy(int)
        prompts = prompt_budget(group.iloc[0])
        fitted = rps <= 0.6 * rps.max()
        held = ~fitted & (rps * measured < 0.8 * cap)

        def replay(rate, count, seed):
            return simulate_run(rate, count, int(decode), prefill, sizes, times, cap_n,
                                np.random.default_rng(seed), prompts)

        run_mean = np.full(len(rps), np.nan)
        run_se = np.full(len(rps), np.nan)
        for j in np.flatnonzero(fitted | held):
            means = [replay(rps[j], n[j], 10000 * position + 100 * j + s).mean()
                     for s in range(args.seeds)]
            run_mean[j] = np.mean(means)
            run_se[j] = np.std(means, ddof=1) / np.sqrt(args.seeds) / run_mean[j]

        def law(theta):
            c1, c2_ = np.exp(theta)
            return chain_law(rps[fitted], c1, c2_, cap, extra, valid, decode_s,
                             min(times[0], 0.9 * c2_))

        theta = least_squares(lambda t: np.log(run_mean[fitted]) - np.log(law(t)),
                              np.log([measured.min(), 0.5 / rps.max()]), diff_step=1e-4).x
        curve = ProfileCurve(np.exp(theta[:1]), np.exp(theta[1:]), batch_sizes=sizes,
                             iteration_s=times, decode_tokens=decode, cap=cap, law="chain",
                             prefill_batching=True)
        for j in list(np.flatnonzero(fitted)[::3]) + list(np.flatnonzero(held)):
            middles = []
            for s in range(args.long_seeds):
                latency = replay(rps[j], args.long * n[j], 7777 + 100 * j + s)
                cut = int(3 * rps[j] * latency.mean()) + 50
                middles.append(latency[cut:-cut].mean())
            steady = np.mean(middles)
            steady_se = np.std(middles, ddof=1) / np.sqrt(args.long_seeds) / steady
            law_steady = curve.latency(rps[j:j + 1])[0, 0]
            law_run = curve.run_latency(rps[j:j + 1], n[j:j + 1])[0, 0]
            row = (bool(fitted[j]), rps[j] * run_mean[j] / cap,
                   np.log(run_mean[j] / steady), np.log(law_run / law_steady),
                   np.log(steady / law_steady), np.log(run_mean[j] / law_run),
                   run_se[j], steady_se)
            rows.append(row)
            print(f"{' '.join(map(str, key))} {'fitted' if row[0] else 'held out'} "
                  f"N/cap {row[1]:.2f}: run/steady true {row[2]:+.4f} fluid {row[3]:+.4f}; "
                  f"true steady/law {row[4]:+.4f}; true run/law run {row[5]:+.4f} "
                  f"(se {row[6]:.4f}, {row[7]:.4f})", flush=True)
    table = np.array(rows, dtype=float)
    for name, select in (("fitted", table[:, 0] == 1), ("held out", table[:, 0] == 0)):
        part = table[select]
        medians = np.median(part[:, 2:6], axis=0)
        print(f"{name} ({len(part)} points), medians: run/steady true {medians[0]:+.4f} "
              f"fluid {medians[1]:+.4f}; true steady/law {medians[2]:+.4f}; "
              f"true run/law run {medians[3]:+.4f}")


if __name__ == "__main__":
    main()
