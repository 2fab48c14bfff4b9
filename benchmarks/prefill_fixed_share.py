"""The batched prefill's fixed part as a roofline (issue 34): a = t_d(1), or less when one
prompt's prefill is compute-bound?

    python benchmarks/prefill_fixed_share.py --set dense [--csv F.csv] [--powers 1,1.5,2]

A prefill iteration of m prompts reads the weights once (about one decode iteration at
batch 1, t_d(1)) and computes m prompts (b each). The law in the package adds the two,
t_p(m) = a + b m with a = t_d(1), so the stall per arrival falls by a (1 - 1/m) as prompts
batch. But the read and the compute overlap: when one prompt's compute already takes
longer than the read (long prompts), most of the read is hidden, and batching saves
little. Vidur's iteration logs say so: the fixed part is 56% of t_p(1) for Llama-2-70B
H100 (256,256), 34% for A100 (256,256), 8% for A100 (512,512), and 12% for InternLM-20B
A100 (1152,128) (benchmarks/README.md, seventh and ninth sessions), where a = t_d(1)
gives about 56%, 56%, 33% and 18%.

A soft roofline, t_p(m) = (t_d(1)^p + (b m)^p)^(1/p), has the fixed share
a / t_p(1) = (t_d(1) / C2)^p at m = 1 (p = 1: the package's law). Here its linear form is
fitted (a = C2 (t_d(1)/C2)^p, `laws.prefill_fixed_part(power=p)`, the model's option
`prefill_fixed_power`), for each power, by
least squares in log L to the rates up to 60% of each top rate; printed per power, over
the higher rates whose N stays below 0.8 of the cap:
- the median over groups of the largest relative error of the steady law;
- the median signed log(measured / steady law);
- the same two for each rate predicted as a new whole run of its own requests
  (``ProfileCurve.run_latency``, what the Bayesian held-out check compares), the fixed
  part set the same way in it.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from bayesspec.laws import prefill_fixed_part
from bayesspec.prediction import ProfileCurve

from prefill_chain_law import chain_arrays, chain_law, largest_held_out_errors
from vidur_sets import SETS, profiled_groups


def fixed_part(c2, decode_one, power):
    """a = C2 (t_d(1) / C2)^p, at most 0.9 C2 (p = 1: min(t_d(1), 0.9 C2))."""
    return float(prefill_fixed_part(c2, decode_one, power=power))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=SETS, default="dense")
    parser.add_argument("--csv", help="a file with the set's groups (e.g. replay_sets.py's)")
    parser.add_argument("--powers", default="1,1.5,2,3")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    powers = [float(p) for p in args.powers.split(",")]
    rows, signed, run_signed = [], {p: [] for p in powers}, {p: [] for p in powers}
    for key, group, sizes, times, cap in profiled_groups(args.set, args.csv):
        extra, valid, decode_s = chain_arrays(key[4], sizes, times, cap)
        rps = group["rps"].to_numpy(float)
        measured = group["latency_mean_s"].to_numpy(float)
        n_requests = group["n_requests"].to_numpy(float)
        fitted = rps <= 0.6 * rps.max()
        held = ~fitted
        below = held & (rps * measured < 0.8 * cap)
        t1 = float(times[0])
        start = np.log([measured.min(), 0.5 / rps.max()])
        row = {"group": f"{key[0]} {key[1]} ({key[3]},{key[4]})"}
        for power in powers:
            def law(theta, at):
                c1, c2 = np.exp(theta)
                return chain_law(rps[at], c1, c2, cap, extra, valid, decode_s,
                                 fixed_part(c2, t1, power))

            def residual(theta):
                r = np.log(measured[fitted]) - np.log(law(theta, fitted))
                return np.where(np.isfinite(r), r, 10.0)

            theta = least_squares(residual, start, diff_step=1e-4).x
            value = law(theta, np.ones(len(rps), dtype=bool))
            row[f"p={power:g}"] = largest_held_out_errors(measured, value, held, below)[0]
            row[f"share p={power:g}"] = fixed_part(np.exp(theta[1]), t1, power) / np.exp(
                theta[1])
            signed[power].extend(np.log(measured[below] / value[below]))
            if below.any():
                curve = ProfileCurve(np.exp(theta[:1]), np.exp(theta[1:2]),
                                     batch_sizes=sizes, iteration_s=times,
                                     decode_tokens=float(key[4]), cap=cap, law="chain",
                                     prefill_batching=True, prefill_fixed_power=power)
                run = curve.run_latency(rps[below], n_requests[below])[0]
                run_signed[power].extend(np.log(measured[below] / run))
                row[f"run p={power:g}"] = float(np.max(np.abs(measured[below] / run - 1)))
        rows.append(row)
        print(" | ".join(f"{k} {v:.4g}" if isinstance(v, float) else str(v)
                         for k, v in row.items()), flush=True)
    table = pd.DataFrame(rows)
    print(f"\n{args.csv or f'vidur_{args.set}.csv'}: held-out N < 0.8 cap")
    for power in powers:
        print(f"p={power:g}: largest error median {table[f'p={power:g}'].median():.2%}, "
              f"mean {table[f'p={power:g}'].mean():.2%}; signed log(measured/law) median "
              f"{np.median(signed[power]):+.4f}; as whole runs: largest error median "
              f"{table[f'run p={power:g}'].median():.2%}, signed median "
              f"{np.median(run_signed[power]):+.4f}; fixed share median "
              f"{table[f'share p={power:g}'].median():.2f}")


if __name__ == "__main__":
    main()
