"""Validation: a Vidur set replayed with other arrivals.

The validation sets behind the finding that the Vidur sets' held-out shortfall is their
shared arrival seed, not the law (docs/findings/run-effects.md).

What it measures: each group's truth is `iteration_run.py`'s replay (the group's decode
profile, the prefill iteration's a + b m fitted by least squares to all of the group's
measured means with the runs' own arrivals). Every row is then replayed at its target
rate with the arrivals of ``--seeds``: ``independent`` (a seed of its own per row, as
separate load tests have) or ``shared:S`` (seed S at every rate, scaled to it, as the
Vidur sets and a GuideLLM sweep with a fixed seed have). The new file keeps the
original's columns, with the replayed run's realized rate, mean, spread, percentiles
and TTFT. The dense fit's held-out check then runs on it:

    python benchmarks/replay_sets.py --set fresh --seeds independent -o fresh_indep.csv
    python benchmarks/replay_sets.py --set fresh --seeds shared:1 -o fresh_seed1.csv
    python examples/vidur/evaluate.py --csv fresh_indep.csv --models dense-profile \
        --fraction 0.6 --folds 0 --out DIR

What it prints: per group the fitted prefill iteration (a, b in ms), the fit's rms log
residual and its seconds; then the file written (about 3-5 minutes per set on 2 cores).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pandas as pd

from iteration_run import (fit_group_prefill, prompt_budget, simulate_run,  # this folder
                           vidur_arrivals)
from vidur_sets import ROOT, SETS, profiled_groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=SETS, default="fresh")
    parser.add_argument("--seeds", default="independent",
                        help="independent | shared:S")
    parser.add_argument("--seed-base", type=int, default=1000,
                        help="independent: row j of group g takes seed base (g + 1) + j")
    parser.add_argument("-o", "--out", required=True)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    shared = None if args.seeds == "independent" else int(args.seeds.split(":")[1])
    data = pd.read_csv(ROOT / f"vidur_{args.set}.csv")
    out = []
    for index, (key, group, sizes, times, cap) in enumerate(profiled_groups(args.set)):
        started = time.time()
        decode = float(key[4])
        prefill, solution = fit_group_prefill(group, decode, sizes, times, cap)
        rms = float(np.sqrt(np.mean(solution.fun ** 2)))
        for position, (row_index, row) in enumerate(group.iterrows()):
            seed = shared if shared is not None else args.seed_base * (index + 1) + position
            n = int(row["n_requests"])
            arrivals = vidur_arrivals(row["rps_target"], n, seed)
            latency, ttft = simulate_run(
                row["rps_target"], n, int(decode), prefill, sizes, times, int(cap), None,
                prompt_budget(row),
                arrivals=arrivals, with_ttft=True)
            new = row.copy()
            rps = (n - 1) / (arrivals[-1] - arrivals[0])
            new["rps"] = rps
            new["latency_mean_s"] = latency.mean()
            new["latency_std_s"] = latency.std(ddof=1)
            new["latency_p50_s"], new["latency_p95_s"], new["latency_p99_s"] = np.percentile(
                latency, [50, 95, 99])
            new["ttft_mean_s"] = ttft.mean()
            new["mean_concurrency"] = rps * latency.mean()
            new["source"] = f"{row['source']} replayed seed={seed}"
            out.append(new)
        print(f"{' '.join(map(str, key))}: prefill a {1000 * prefill[0]:.2f} ms, "
              f"b {1000 * prefill[1]:.2f} ms, fit rms {rms:.2e}, {time.time() - started:.0f} s",
              flush=True)
    frame = pd.DataFrame(out)[data.columns]
    frame.to_csv(args.out, index=False)
    print(f"wrote {len(frame)} rows to {args.out}")


if __name__ == "__main__":
    main()
