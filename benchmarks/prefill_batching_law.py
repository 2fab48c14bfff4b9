"""Prefill batching in the steady law, by least squares (issue 34): does the stall per
arrival falling with the load take away the steady law's over-prediction at the top of
the Vidur sweeps, with the prefill's fixed part set from the decode profile?

    python benchmarks/prefill_batching_law.py --set dense    # chosen on
    python benchmarks/prefill_batching_law.py --set fresh    # tested
    python benchmarks/prefill_batching_law.py --set capped   # tested
    python benchmarks/prefill_batching_law.py --set dense --csv dense_indep.csv  # replayed
    python benchmarks/prefill_batching_law.py --set dense --closed-form  # m in closed form
    python benchmarks/prefill_batching_law.py --check-closed-form   # closed form vs chain

Without chunked prefill a prefill iteration of m waiting prompts costs a + b m, so the
stall each arrival puts on the batch is (a + b m)/m averaged over prefill iterations: it
falls as more prompts wait at an iteration boundary (`prefill_batching.chain`, the
iteration chain that matched Vidur's logs). Here a is one decode iteration at batch 1,
t_d(1) from the group's profile (the weights read once), capped at 0.9 C2, and
b = C2 - a, so the law keeps its two parameters C1 and C2 (the stall of one prompt
alone). Each rate's N solves N = RPS L(N) with the stall at that N (the chain's decode
iteration is t_d(N)). Both laws are fitted to the rates up to 60% of each top rate; the
figure is each group's largest relative error at the higher rates whose N stays below
0.8 of the cap (as `benchmarks/finite_run.py` reports it), and at all of them.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from bayesspec.laws import (_profile_time, latency, profile_concurrency_expr, profile_segments,
                            prompts_per_prefill_expr)

from prefill_batching import chain  # the script's folder is on the path
from prefill_chain_law import largest_held_out_errors
from slot_queue_choice import law
from vidur_sets import SETS, profiled_groups


def prompts_per_prefill(rate, decode_s, prefill_s):
    """The package's closed form of the chain's prompts per prefill iteration
    (:func:`bayesspec.laws.prompts_per_prefill_expr`, first written here)."""
    return prompts_per_prefill_expr(rate, decode_s, prefill_s)[0]


def check_closed_form() -> None:
    """The closed form's stall per arrival against the chain's over a grid."""
    gaps = []
    for one in (0.008, 0.03, 0.08, 0.2, 0.4):                 # t_p(1), s
        for share in (0.1, 0.35, 0.6, 0.9):                   # fixed part of t_p(1)
            for decode_s in (0.008, 0.015, 0.03, 0.06):
                for load in (0.05, 0.2, 0.4, 0.6):            # RPS t_p(1)
                    rate, fixed, budget = load / one, share * one, 16
                    table = fixed + (one - fixed) * np.arange(1, budget + 1)
                    _, exact = chain(rate, decode_s, table, budget, states=60)
                    m = min(prompts_per_prefill(rate, decode_s, one), budget)
                    gaps.append(abs((fixed + (one - fixed) * m) / m / exact - 1.0))
    print(f"closed form against the chain, stall per arrival over {len(gaps)} points: "
          f"largest {max(gaps):.2%}, median {np.median(gaps):.2%}")


def batched_law(rps, c1, c2, pieces, sizes, times, budget, iterations=8,
                closed_form=False):
    """Mean latency with the stall per arrival from the iteration chain at each rate
    (``closed_form``: from :func:`prompts_per_prefill`)."""
    fixed = min(times[0], 0.9 * c2)
    table = fixed + (c2 - fixed) * np.arange(1, budget + 1)
    out = np.empty(len(rps))
    for i, rate in enumerate(rps):
        stall = c2
        for _ in range(iterations):
            n, shift, found = profile_concurrency_expr(
                np.array([[rate]]), np.array([[c1]]), np.array([[stall]]), *pieces)
            n = float(np.ravel(n)[0]) if bool(np.ravel(found)[0]) else float(sizes[-1])
            decode_s = float(_profile_time(max(n, 1.0), sizes, times))
            if closed_form:
                m = min(prompts_per_prefill(rate, decode_s, c2), budget)
                per_prompt = (fixed + (c2 - fixed) * m) / m
            else:
                _, per_prompt = chain(rate, decode_s, table, budget, states=60)
            if abs(per_prompt - stall) < 1e-6 * c2:
                break
            stall = per_prompt
        n, shift, found = profile_concurrency_expr(
            np.array([[rate]]), np.array([[c1]]), np.array([[stall]]), *pieces)
        out[i] = float(np.ravel(latency(rate, c1 + np.where(found, shift, 0.0), stall))[0])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=SETS, default="dense")
    parser.add_argument("--csv", help="a file with the set's groups (e.g. replay_sets.py's)")
    parser.add_argument("--closed-form", action="store_true",
                        help="prompts per prefill iteration by prompts_per_prefill, not "
                             "the chain")
    parser.add_argument("--check-closed-form", action="store_true",
                        help="only compare the closed form with the chain over a grid")
    args = parser.parse_args()
    if args.check_closed_form:
        check_closed_form()
        return
    warnings.filterwarnings("ignore")
    rows = []
    for key, group, sizes, times, cap in profiled_groups(args.set, args.csv):
        pieces = profile_segments(float(key[4]), sizes, times, cap)
        budget = max(int(group["max_num_batched_tokens"].iloc[0]) // int(key[3]), 1)
        rps = group["rps"].to_numpy(float)
        measured = group["latency_mean_s"].to_numpy(float)
        fitted = rps <= 0.6 * rps.max()
        held = ~fitted
        below = held & (rps * measured < 0.8 * cap)
        start = np.log([measured.min(), 0.5 / rps.max()])

        def plain(theta, at):
            return law("none", rps[at], *np.exp(theta), pieces, cap, 1.0)

        def batched(theta, at):
            c1, c2 = np.exp(theta)
            return batched_law(rps[at], c1, c2, pieces, sizes, times, budget,
                               closed_form=args.closed_form)

        errors = {}
        for name, form in (("steady", plain), ("batched", batched)):
            theta = least_squares(lambda t: np.log(measured[fitted]) - np.log(form(t, fitted)),
                                  start, diff_step=1e-3).x
            value = form(theta, np.ones(len(rps), dtype=bool))
            errors[f"{name} N<0.8cap"], errors[f"{name} all"] = largest_held_out_errors(
                measured, value, held, below)
            errors[f"{name} C2 ms"] = 1000 * float(np.exp(theta[1]))
        rows.append({"group": f"{key[0]} {key[1]} ({key[3]},{key[4]})",
                     "t_d(1) ms": 1000 * times[0], **errors})
        print(" | ".join(f"{k} {v:.4g}" if isinstance(v, float) else str(v)
                         for k, v in rows[-1].items()), flush=True)
    table = pd.DataFrame(rows)
    print(f"\nlargest relative error above 60% of each top rate, vidur_{args.set}.csv")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    for column in ("N<0.8cap", "all"):
        print(f"{column}: median steady {table[f'steady {column}'].median():.2%}, batched "
              f"{table[f'batched {column}'].median():.2%}; mean steady "
              f"{table[f'steady {column}'].replace(np.inf, np.nan).mean():.2%}, batched "
              f"{table[f'batched {column}'].replace(np.inf, np.nan).mean():.2%}")


if __name__ == "__main__":
    main()
