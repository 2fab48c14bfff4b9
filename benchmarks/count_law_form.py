"""Which form carries a sweep's p99 past its fitted rates, given the measured mean? The
`tails` power law against the count law (issue 34, the `tails` target on vidur_capped).

    python benchmarks/count_law_form.py capped dense fresh      # the Vidur sets
    python benchmarks/count_law_form.py /tmp/dense_seed1.csv     # any tidy CSV

Per group (verifier, gpu, prefill, decode): the points below the engine's cap (N = RPS x
mean < max_num_seqs) are split as `tails_holdout.py` splits them, the rates up to 0.6 of
the top one fitted. C1 and C2 are the intercept and slope of the mean against N there.
Each form is fitted to the fitted points' p99 by least squares in logs, then each
held-out p99 is predicted from its own measured mean. That checks the form of p99's
excess over the mean, apart from the mean law's own error.

- power: p99 = mean a (mean/C1)^b (the `tails` default, q = A F^gamma, with F = L/C1);
- count, Poisson: p99 the 0.99 quantile of a log-normal of mean L and variance
  (s0 C1)^2 + d^2 C2 (L - C1) (a Poisson count of stalls);
- count (the package's `tail_law=count`, `laws.count_spread_quantile_expr`): the same,
  with the variance times L/C1, the birth-death chain's over-dispersed count.
- batch (`tail_law=count` with `count_dispersion=batch`,
  `laws.batch_count_quantile_expr`): the Poisson count's variance for the stalls up to
  eq. (1)'s mean C1/(1 - RPS C2), plus the square of the rest of the measured mean, the
  exponential wait for a slot.
- exponent fitted: the batch form's stall variance times (1 + S/C1)^b, b in (0, 2)
  fitted per group with s0 and d (0 the Poisson count, 1 the chain, 2 a branching
  count). With `--fraction 0.8` the fitted rates reach further, where b shows.

Printed per set and form: held-out points, median |error|, share within 5% and 10%,
median signed error (measured/predicted - 1) and the worst.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from scipy.optimize import least_squares
from scipy.special import ndtri

from bayesspec.laws import (batch_count_loads, batch_count_quantile_expr,
                            count_spread_quantile_expr, log_normal_quantile_expr)

GROUP = ["verifier", "gpu", "prefill_tokens", "decode_tokens"]
Z99 = float(ndtri(0.99))


def _count_form(mean, c1, c2, over_dispersed: bool):
    """p99 as a function of log (s0, d), at the points' measured means. The Poisson count
    is the package's law with C2 scaled by C1/L, which takes its load factor out."""
    cost = c2 if over_dispersed else c2 * c1 / mean

    def p99(log_parameters):
        spread, dispersion = np.exp(log_parameters)
        return count_spread_quantile_expr(mean, c1, cost, spread, dispersion, Z99)
    return p99


def group_errors(group: pd.DataFrame, fraction: float) -> dict[str, np.ndarray] | None:
    group = group.sort_values("rps")
    rps = group["rps"].to_numpy(float)
    mean = group["latency_mean_s"].to_numpy(float)
    p99 = group["latency_p99_s"].to_numpy(float)
    cap = float(group["max_num_seqs"].iloc[0])
    in_flight = rps * mean
    below = in_flight < cap
    if not below.any():
        return None
    fitted = below & (rps <= fraction * rps[below].max())
    held = below & ~fitted
    if fitted.sum() < 3 or not held.any():
        return None
    c2, c1 = np.polyfit(in_flight[fitted], mean[fitted], 1)
    c2 = max(c2, 1e-9)
    errors = {}
    slope, level = np.polyfit(np.log(mean / c1)[fitted], np.log(p99 / mean)[fitted], 1)
    errors["power"] = (p99 / (mean * np.exp(level + slope * np.log(mean / c1))) - 1.0)[held]
    for name, over in (("count, Poisson", False), ("count", True)):
        form = _count_form(mean, c1, c2, over)
        solved = least_squares(lambda x: np.log(form(x)[fitted]) - np.log(p99[fitted]),
                               [np.log(0.05), 0.0])
        errors[name] = (p99 / form(solved.x) - 1.0)[held]
    # batch: a Poisson count of stalls up to eq. (1)'s mean at the fitted C1, C2, and
    # the rest of the measured mean an exponential wait for a slot
    with np.errstate(divide="ignore"):
        eq1 = np.where(rps * c2 < 1.0, c1 / (1.0 - rps * c2), np.inf)
    stall_load, slot_wait = batch_count_loads(c1, 1.0, mean / c1, eq1 / c1, magnitude=False)

    def batch(log_parameters):
        spread, dispersion = np.exp(log_parameters)
        return batch_count_quantile_expr(mean, c1, c2, spread, dispersion, Z99,
                                         stall_load, slot_wait)
    solved = least_squares(lambda x: np.log(batch(x)[fitted]) - np.log(p99[fitted]),
                           [np.log(0.05), 0.0])
    errors["batch"] = (p99 / batch(solved.x) - 1.0)[held]

    # exponent fitted: the stalls' variance times F^b, b in (0, 2) fitted per group with
    # s0 and d (0 the Poisson count, 1 the chain, 2 a branching count)
    def exponent_form(parameters):
        spread, dispersion = np.exp(parameters[:2])
        exponent = 2.0 / (1.0 + np.exp(-parameters[2]))
        variance = ((spread * c1) ** 2
                    + dispersion ** 2 * c2 * stall_load * (1.0 + stall_load / c1) ** exponent)
        return log_normal_quantile_expr(mean, variance, Z99)
    solved = least_squares(lambda x: np.log(exponent_form(x)[fitted]) - np.log(p99[fitted]),
                           [np.log(0.05), 0.0, 0.0])
    errors["exponent fitted"] = (p99 / exponent_form(solved.x) - 1.0)[held]
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="+",
                        help="capped, dense, fresh (examples/vidur/vidur_SET.csv) or a CSV")
    parser.add_argument("--fraction", type=float, default=0.6)
    args = parser.parse_args()
    print("| set | form | held-out p99 points | median abs error | within 5% | within 10% "
          "| median signed | worst |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.sets:
        path = name if name.endswith(".csv") else f"examples/vidur/vidur_{name}.csv"
        data = pd.read_csv(path)
        found: dict[str, list[np.ndarray]] = {}
        for _, group in data.groupby(GROUP):
            errors = group_errors(group, args.fraction)
            for form, values in (errors or {}).items():
                found.setdefault(form, []).append(values)
        for form, parts in found.items():
            every = np.concatenate(parts)
            worst = every[np.argmax(np.abs(every))]
            print(f"| {name} | {form} | {every.size} | {np.median(np.abs(every)):.3f} | "
                  f"{np.mean(np.abs(every) < 0.05):.2f} | {np.mean(np.abs(every) < 0.10):.2f} | "
                  f"{np.median(every):+.3f} | {worst:+.2f} |")


if __name__ == "__main__":
    main()
