"""Prefill batching inside the decode profile's birth-death chain, by least squares
(issue 34): the law the Bayesian dense model fits by default (`profile_law` "chain"),
with and without the batched prefill's stall, on the Vidur sets and their replays.

    python benchmarks/prefill_chain_law.py --set dense                # Vidur's own set
    python benchmarks/prefill_chain_law.py --set dense --csv F.csv    # a replayed copy

Three laws, each fitted in log L to the rates up to 60% of each top rate:
- "chain": `laws.profile_chain_latency_expr`, the default's law;
- "batched t_d(1)": the same with the stall per arrival of a batched prefill
  (`laws.batched_prefill_stall_expr`), its fixed part a = t_d(1) (at most 0.9 C2);
- "batched a": a fitted too, log a with a Normal(log t_d(1), 0.5) penalty (the prior the
  model would give it).
The figure is each group's largest relative error at the higher rates whose measured N
stays below 0.8 of the cap, and at all of them.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from bayesspec.laws import _profile_time, profile_chain_extra, profile_chain_latency_expr

from vidur_sets import SETS, profiled_groups

PRIOR_SD = 0.5


def largest_held_out_errors(measured, value, held, below) -> tuple[float, float]:
    """The largest relative error at the held-out rates whose N stays below 0.8 of the
    cap (NaN where none does) and at all of them; a non-finite prediction counts as
    infinitely wrong."""
    with np.errstate(invalid="ignore", divide="ignore"):
        relative = np.abs(measured / value - 1.0)
    relative = np.where(np.isfinite(relative), relative, np.inf)
    return (float(relative[below].max()) if below.any() else np.nan,
            float(relative[held].max()))


def chain_arrays(decode, sizes, times, cap):
    """The chain's per-state arrays for a group with ``decode`` tokens, its profile and
    its cap: (extra(n), the valid states, t_d(n)) for n = 1..cap."""
    cap_n = int(cap)
    return (profile_chain_extra(float(decode), sizes, times, cap_n), np.ones(cap_n),
            _profile_time(np.arange(1.0, cap_n + 1.0), sizes, times))


def chain_law(rps, c1, c2, cap, extra, valid, decode_s, fixed=None):
    ones = np.ones(len(rps))
    kwargs = {}
    if fixed is not None:
        kwargs = {"prefill_fixed": fixed * ones, "decode_s": decode_s[None, :]}
    with np.errstate(all="ignore"):
        return profile_chain_latency_expr(rps, c1 * ones, c2 * ones, cap * ones,
                                          extra[None, :], valid[None, :], **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=SETS, default="dense")
    parser.add_argument("--csv", help="a file with the set's groups (e.g. replay_sets.py's)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    rows = []
    for key, group, sizes, times, cap in profiled_groups(args.set, args.csv):
        extra, valid, decode_s = chain_arrays(key[4], sizes, times, cap)
        rps = group["rps"].to_numpy(float)
        measured = group["latency_mean_s"].to_numpy(float)
        fitted = rps <= 0.6 * rps.max()
        held = ~fitted
        below = held & (rps * measured < 0.8 * cap)
        t1 = float(times[0])
        start = np.log([measured.min(), 0.5 / rps.max()])

        def plain(theta, at):
            return chain_law(rps[at], *np.exp(theta[:2]), cap, extra, valid, decode_s)

        def pinned(theta, at):
            c1, c2 = np.exp(theta[:2])
            return chain_law(rps[at], c1, c2, cap, extra, valid, decode_s,
                             min(t1, 0.9 * c2))

        def free(theta, at):
            c1, c2 = np.exp(theta[:2])
            fixed = min(np.exp(theta[2]), 0.95 * c2)
            return chain_law(rps[at], c1, c2, cap, extra, valid, decode_s, fixed)

        errors = {}
        for name, form, extra_start in (("chain", plain, []), ("batched t_d(1)", pinned, []),
                                        ("batched a", free, [np.log(t1)])):
            theta0 = np.concatenate([start, extra_start])

            def residual(theta):
                value = form(theta, fitted)
                r = np.log(measured[fitted]) - np.log(value)
                r = np.where(np.isfinite(r), r, 10.0)
                if len(theta) > 2:
                    # the prior as a penalty, on the scale of a 1% error per point
                    r = np.append(r, 0.01 * (theta[2] - np.log(t1)) / PRIOR_SD)
                return r

            theta = least_squares(residual, theta0, diff_step=1e-4).x
            value = form(theta, np.ones(len(rps), dtype=bool))
            errors[f"{name} N<0.8cap"], errors[f"{name} all"] = largest_held_out_errors(
                measured, value, held, below)
            if len(theta) > 2:
                errors["a/t_d(1)"] = float(min(np.exp(theta[2]), 0.95 * np.exp(theta[1])) / t1)
        rows.append({"group": f"{key[0]} {key[1]} ({key[3]},{key[4]})", **errors})
        print(" | ".join(f"{k} {v:.4g}" if isinstance(v, float) else str(v)
                         for k, v in rows[-1].items()), flush=True)
    table = pd.DataFrame(rows)
    print(f"\nlargest relative error above 60% of each top rate, "
          f"{args.csv or f'vidur_{args.set}.csv'}")
    for column in ("N<0.8cap", "all"):
        print(f"{column}: " + ", ".join(
            f"{name} median {table[f'{name} {column}'].median():.2%} mean "
            f"{table[f'{name} {column}'].replace(np.inf, np.nan).mean():.2%}"
            for name in ("chain", "batched t_d(1)", "batched a")))
    print(f"fitted a / t_d(1): median {table['a/t_d(1)'].median():.3g}, "
          f"range {table['a/t_d(1)'].min():.3g}-{table['a/t_d(1)'].max():.3g}")


if __name__ == "__main__":
    main()
