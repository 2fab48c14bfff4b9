"""Which wait for a batch slot the decode-profile law takes, chosen on one Vidur set,
tested on two.

    python benchmarks/slot_queue_choice.py --set dense    # the set the form was chosen on
    python benchmarks/slot_queue_choice.py --set fresh    # tested
    python benchmarks/slot_queue_choice.py --set capped   # tested

For each group (its points below the cap, as a fit keeps them), C1 and C2 of the law
L = wait(S), S = C1 + C2 N + shift(N) (the decode profile's shift at the self-consistent
N, :func:`bayesspec.laws.profile_concurrency_expr`) are fitted by least squares in log L,
with four waits for a slot:

- ``none``: no cap (eq. (1) with the profile);
- ``birth-death``: the slot queue of the capped law (:func:`bayesspec.laws.capped_latency`,
  eq. (1)'s negative-binomial number in the system), with the group's wait scale
  (:func:`bayesspec.laws.queue_wait_scale` of its lightest point's spread);
- ``erlang``: Erlang's wait at a Poisson number in flight (``erlang_slot_latency`` below:
  with the profile, C2 N is the stall by later arrivals' prefills, which come whatever
  is in flight, so the system is M/G/infinity below the cap and M/M/c's wait applies at
  it), the same wait scale;
- ``erlang-1``: the same with wait scale 1 (the Markov queue's wait);
- ``birth-death-run``: the birth-death queue read as a whole run of the group's
  ``n_requests`` (:func:`bayesspec.laws.run_slot_queue_latency_expr`'s form: the share of
  the slot wait the run builds, no fill and drain), as the likelihood reads such points;
- ``birth-death-fluid``: the same with the fluid run's fill and drain
  (:func:`bayesspec.laws.fluid_run_latency`), as a new load test is predicted.

Printed per group: the largest relative residual and the mean residual of the group's
top third of rates (measured minus law, relative; negative = the law too high), R^2,
and the medians over groups and the count of groups with R^2 >= 0.98. A least-squares fit is the law's best case; the Bayesian fit and its
held-out checks are in examples/vidur/evaluate.py. The Erlang form was tried in the fit
and not adopted (benchmarks/README.md, "2026-12-04 (night) ... the wait for a slot").
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from scipy.optimize import least_squares
from scipy.special import gammaincc, gammaln

from bayesspec.checks import r_squared
from bayesspec.laws import (capped_latency, fluid_run_latency, latency,
                            profile_concurrency_expr, profile_segments, queue_wait_scale,
                            slot_wait_in_run)
from vidur_sets import SETS, profiled_groups  # the script's folder is on the path

FORMS = ("none", "birth-death", "erlang", "erlang-1", "birth-death-run", "birth-death-fluid")


def erlang_slot_latency(rps, c1, c2, cap, wait_scale):
    """S (1 + wait_scale C(cap, A)/(cap - A)), S = C1/(1 - RPS C2) the time in the batch,
    A = RPS S the requests holding slots (Poisson below the cap), C Erlang's probability
    of waiting: P_c t / (Q(cap, A) + P_c t), P_c = A^cap e^-A / cap!, t = cap/(cap - A),
    Q the regularised upper incomplete gamma. ``inf`` where A reaches the cap."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        in_batch = latency(rps, c1, c2)
        load = rps * in_batch
        tail = np.exp(cap * np.log(load) - load - gammaln(cap + 1.0)) * cap / (cap - load)
        wait = tail / (gammaincc(cap, load) + tail) / (cap - load)
        value = in_batch * (1.0 + wait_scale * wait)
    return np.where(np.isfinite(in_batch) & (load < cap), value, np.inf)


def law(form: str, rps, c1, c2, pieces, cap, wait_scale, n_requests=1000):
    n, shift, found = profile_concurrency_expr(rps[:, None], np.full((len(rps), 1), c1),
                                               np.full((len(rps), 1), c2), *pieces)
    at = c1 + np.where(found, shift, 0.0)
    if form == "none":
        value = latency(rps, at, c2)
    elif form == "birth-death":
        value = capped_latency(rps, at, c2, cap, wait_scale=wait_scale)
    elif form.startswith("birth-death-"):
        # a whole run of n_requests: the slot queue's wait it has time to build
        with np.errstate(invalid="ignore", over="ignore"):
            fluid_steady = latency(rps, at, c2)
            steady = capped_latency(rps, at, c2, cap, wait_scale=wait_scale)
            wait = np.where(np.isfinite(steady), np.maximum(steady - fluid_steady, 0.0),
                            np.inf)
        base = (fluid_steady if form == "birth-death-run" else
                fluid_run_latency(rps, n_requests, c1, c2, cap, pieces, steady=fluid_steady))
        value = base + slot_wait_in_run(wait, rps, n_requests, wait_scale)
    else:
        value = erlang_slot_latency(rps, at, c2, cap,
                                    1.0 if form == "erlang-1" else wait_scale)
    return np.where(found, value, np.inf)


def fitted_costs(form, rps, measured, pieces, cap, wait_scale, n_requests=1000):
    """(C1, C2) of the group's least-squares fit in log L."""
    def residual(theta):
        value = law(form, rps, np.exp(theta[0]), np.exp(theta[1]), pieces, cap, wait_scale,
                    n_requests)
        return np.where(np.isfinite(value), np.log(measured) - np.log(
            np.where(np.isfinite(value), value, 1.0)), 10.0)

    # start from a line through the light half, C2 a little under its slope
    c1 = float(measured.min())
    c2 = max(float(np.median((1.0 - c1 / measured[1:]) / rps[1:])), 1e-6) * 0.8
    return tuple(np.exp(least_squares(residual, np.log([c1, c2]), method="lm").x))


def fit_group(form, rps, measured, pieces, cap, wait_scale, n_requests=1000):
    costs = fitted_costs(form, rps, measured, pieces, cap, wait_scale, n_requests)
    value = law(form, rps, *costs, pieces, cap, wait_scale, n_requests)
    return measured / value - 1.0, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=SETS, default="dense")
    parser.add_argument("--csv", default=None)
    args = parser.parse_args()
    rows = []
    for key, group, sizes, times, cap in profiled_groups(args.set):
        pieces = profile_segments(float(key[4]), sizes, times, cap)
        rps = group["rps"].to_numpy(float)
        measured = group["latency_mean_s"].to_numpy(float)
        below = rps * measured < cap
        rps, measured = rps[below], measured[below]
        spread = float(group["latency_std_s"].iloc[0] / group["latency_mean_s"].iloc[0])
        wait_scale = float(queue_wait_scale(spread))
        row = {"group": f"{key[0]} {key[1]} ({key[3]},{key[4]})", "points": len(rps),
               "top_n_over_cap": float(rps[-1] * measured[-1] / cap)}
        top = slice(len(rps) - max(1, len(rps) // 3), None)
        n_requests = float(group["n_requests"].iloc[0])
        for form in FORMS:
            error, value = fit_group(form, rps, measured, pieces, cap, wait_scale, n_requests)
            row[f"{form} r2"] = r_squared(measured, value)
            row[f"{form} max"] = float(np.max(np.abs(error)))
            row[f"{form} top"] = float(np.mean(error[top]))
        rows.append(row)
    table = pd.DataFrame(rows)
    shown = table.copy()
    for column in [c for c in table.columns[3:] if not c.endswith(" r2")]:
        shown[column] = (100 * shown[column]).map("{:+.2f}%".format)
    shown["top_n_over_cap"] = shown["top_n_over_cap"].map("{:.2f}".format)
    pd.set_option("display.width", 250)
    print(f"least-squares fit of the profile law per group, vidur_{args.set}.csv "
          "(residual = measured/law - 1)")
    print(shown.to_string(index=False))
    print("median of |largest residual|: " + ", ".join(
        f"{form} {100 * table[f'{form} max'].median():.2f}%" for form in FORMS))
    print("groups with R^2 >= 0.98: " + ", ".join(
        f"{form} {int((table[f'{form} r2'] >= 0.98).sum())}/{len(table)}" for form in FORMS))
    print("median of top-third mean residual: " + ", ".join(
        f"{form} {100 * table[f'{form} top'].median():+.2f}%" for form in FORMS))
    if args.csv:
        table.to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
