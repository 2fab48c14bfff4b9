"""The decode profile in the birth-death chain, against the profile law, by least squares.

The package's profile law solves N = RPS x L(N) once, with each request's batch spread
like a Poisson count about N (``laws.decode_profile_shift``). Eq. (1) itself is the mean
of a birth-death chain: with n requests in flight each would take T(n) = C1 + C2 (n - 1),
the chain leaves n at rate n / T(n), its stationary count is negative binomial and its
mean over RPS is eq. (1) exactly. Put the profile into T, T(n) = C1 + C2 (n - 1) +
(decode - 1)(t_d(min(n, cap)) - t_d(1)), and the chain carries what a single N misses:
when more in flight slows every request (the profile rising), a burst of arrivals makes
itself worse, so the count spreads wider than Poisson and its mean sits above the
self-consistent N. Past the cap only ``cap`` requests are served: the chain leaves at
rate cap / T(cap).

Per group of a Vidur set: each form is fitted by least squares in log L on the rates up
to ``--fraction`` of the top rate (points below the cap), the higher rates predicted; and
once more on every point below the cap, for R^2.

    python benchmarks/profile_chain.py --set fresh     # and dense, capped
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from bayesspec.checks import r_squared
from bayesspec.laws import (profile_chain_extra, profile_chain_latency_expr,
                            profile_segments, queue_wait_scale)

from slot_queue_choice import fitted_costs, law as profile_law  # the script's folder
from vidur_sets import SETS, profiled_groups

FORMS = ("birth-death", "chain", "chain-scaled", "chain-slot")


def chain_latency(rps, c1, c2, decode, sizes, times, cap, n_max=None, wait_scale=1.0):
    """Mean latency at each rate of the chain above (inf where it has no steady state).
    Past the cap the chain's ratio rho = RPS T(cap)/cap is replaced by rho' with
    rho'/(1 - rho') = ``wait_scale`` rho/(1 - rho): the line for a slot then holds
    ``wait_scale`` times the exponential chain's, as the package's slot queue scales its
    wait (``laws.queue_wait_scale``), and the ceiling stays at rho = 1."""
    rps = np.atleast_1d(np.asarray(rps, dtype=float))
    cap = int(cap)
    n_max = n_max or 6 * cap
    n = np.arange(1, n_max + 1, dtype=float)
    batch = np.minimum(n, cap)
    served = np.interp(batch, sizes, times)
    t_one = float(np.interp(1.0, sizes, times))
    time_in_flight = c1 + c2 * (batch - 1.0) + (decode - 1.0) * (served - t_one)
    out = np.empty(rps.shape)
    for i, rate in enumerate(rps):
        if rate * time_in_flight[-1] / cap >= 1.0:
            out[i] = np.inf
            continue
        ratio = rate * time_in_flight / batch
        rho = ratio[cap - 1]
        ratio = np.where(n > cap, wait_scale * rho / (1.0 - rho + wait_scale * rho), ratio)
        log_weight = np.concatenate([[0.0], np.cumsum(np.log(ratio))])
        weight = np.exp(log_weight - log_weight.max())
        count = np.arange(0, n_max + 1, dtype=float)
        out[i] = float(weight @ count / weight.sum()) / rate
    return out


def form_latency(form, rps, c1, c2, group_parts, n_requests):
    decode, sizes, times, pieces, cap, wait_scale = group_parts
    if form == "chain":
        return chain_latency(rps, c1, c2, decode, sizes, times, cap)
    if form == "chain-scaled":
        return chain_latency(rps, c1, c2, decode, sizes, times, cap, wait_scale=wait_scale)
    if form == "chain-slot":
        extra = profile_chain_extra(decode, sizes, times, int(cap))[None, :]
        return profile_chain_latency_expr(
            np.asarray(rps, float)[:, None], np.array([c1]), np.array([c2]),
            np.array([float(cap)]), extra, np.ones_like(extra),
            wait_scale=wait_scale)[:, 0]
    return profile_law(form, rps, c1, c2, pieces, cap, wait_scale, n_requests)


def least_squares_costs(form, rps, measured, group_parts, n_requests):
    if not form.startswith("chain"):
        decode, sizes, times, pieces, cap, wait_scale = group_parts
        return fitted_costs(form, rps, measured, pieces, cap, wait_scale, n_requests)
    from scipy.optimize import least_squares

    def residual(theta):
        value = form_latency(form, rps, *np.exp(theta), group_parts, n_requests)
        return np.where(np.isfinite(value), np.log(measured) - np.log(
            np.where(np.isfinite(value), value, 1.0)), 10.0)

    start = np.log(fitted_costs("birth-death", rps, measured, group_parts[3],
                                group_parts[4], group_parts[5], n_requests))
    return tuple(np.exp(least_squares(residual, start, method="lm").x))


def check_against_the_slot_queue() -> float:
    """With a flat profile the chain is the package's slot queue (its wait at scale 1),
    and without a cap eq. (1): the largest relative difference over a sweep to the cap's
    ceiling."""
    from bayesspec.laws import capped_latency, latency

    sizes, times = np.array([1.0, 512.0]), np.array([0.02, 0.02])
    rates = np.linspace(0.2, 7.6, 25)           # ceiling of the cap: 7.75 RPS
    chain = chain_latency(rates, 2.0, 0.05, 256.0, sizes, times, 32)
    slot_queue = capped_latency(rates, 2.0, 0.05, 32.0, wait_scale=1.0)
    no_cap = chain_latency(rates, 2.0, 0.05, 256.0, sizes, times, 100000)
    return float(max(np.max(np.abs(chain / slot_queue - 1.0)),
                     np.max(np.abs(no_cap / latency(rates, 2.0, 0.05) - 1.0))))


def main() -> None:
    difference = check_against_the_slot_queue()
    print(f"self-check: flat profile, the chain against the slot queue and eq. (1): "
          f"largest relative difference {difference:.1e}")
    if difference > 1e-6:
        raise SystemExit("the chain does not reduce to the slot queue: not run")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=SETS, default="fresh")
    parser.add_argument("--fraction", type=float, default=0.6)
    parser.add_argument("--csv", default=None)
    args = parser.parse_args()
    rows = []
    for key, group, sizes, times, cap in profiled_groups(args.set):
        decode = float(key[4])
        pieces = profile_segments(decode, sizes, times, cap)
        spread = float(group["latency_std_s"].iloc[0] / group["latency_mean_s"].iloc[0])
        parts = (decode, sizes, times, pieces, cap, float(queue_wait_scale(spread)))
        rps = group["rps"].to_numpy(float)
        measured = group["latency_mean_s"].to_numpy(float)
        below = rps * measured < cap
        rps, measured = rps[below], measured[below]
        targets = group["rps_target"].to_numpy(float)[below]
        fitted = targets <= args.fraction * group["rps_target"].max()
        n_requests = float(group["n_requests"].iloc[0])
        row = {"group": f"{key[0]} {key[1]} ({key[3]},{key[4]})",
               "top N/cap": float(rps[-1] * measured[-1] / cap)}
        for form in FORMS:
            costs = least_squares_costs(form, rps[fitted], measured[fitted], parts, n_requests)
            predicted = form_latency(form, rps, *costs, parts, n_requests)
            error = measured[~fitted] / predicted[~fitted] - 1.0
            row[f"{form} held-out max"] = float(np.max(np.abs(error)))
            row[f"{form} held-out top"] = float(error[-1])
            every = least_squares_costs(form, rps, measured, parts, n_requests)
            row[f"{form} r2"] = r_squared(measured, form_latency(form, rps, *every, parts,
                                                                n_requests))
        rows.append(row)
        print(row["group"], ", ".join(f"{k} {v:+.4f}" for k, v in row.items()
                                      if k != "group"), flush=True)
    table = pd.DataFrame(rows)
    print(f"\nvidur_{args.set}.csv, fitted up to {args.fraction} of each top rate")
    for form in FORMS:
        print(f"{form:12s} held-out |error| median of group max "
              f"{100 * table[f'{form} held-out max'].median():.2f}%, mean "
              f"{100 * table[f'{form} held-out max'].mean():.2f}%; groups with every "
              f"held-out point within 3%: {int((table[f'{form} held-out max'] <= 0.03).sum())}"
              f"/{len(table)}; all points R^2 >= 0.98: "
              f"{int((table[f'{form} r2'] >= 0.98).sum())}/{len(table)}")
    if args.csv:
        table.to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
