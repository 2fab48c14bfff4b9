"""Compare the fitted RPS* and k* with what the simulated sweeps show directly.

    bayesspec fit bayesspec/datasets/sim_speculative.csv --model speculative -o spec.nc
    python examples/check_simulated_crossover.py spec.nc

For every (setup, alpha, k), the "direct" crossover is where the simulated SD latency
curve crosses the simulated dense curve (1/latency interpolated linearly in RPS between
neighbouring unsaturated points, over the range both sweeps cover). It is reported with the fitted 90% interval
of RPS*. For k*, the direct best k at a rate is the k with the lowest interpolated
latency among the sweeps that reach that rate; compared where its margin is clear.
"""

import sys

import numpy as np

from bayesspec.data import included
from bayesspec.decisions import crossover, kstar_table, speculative_costs
from bayesspec.fitfile import Fit


def curve(points):
    points = points.sort_values("rps")
    # 1/L is linear in RPS under the law and close to linear in the simulator, so
    # interpolating it between neighbouring measured points bends the curve least.
    return points["rps"].to_numpy(), 1.0 / points["latency_mean_s"].to_numpy()


def direct_crossover(dense, sd):
    (xd, yd), (xs, ys) = curve(dense), curve(sd)
    grid = np.linspace(max(xd.min(), xs.min()), min(xd.max(), xs.max()), 400)
    if len(grid) < 2 or grid[0] >= grid[-1]:
        return None
    gap = np.interp(grid, xd, yd) - np.interp(grid, xs, ys)
    flips = np.flatnonzero(np.sign(gap[:-1]) != np.sign(gap[1:]))
    if len(flips) == 0:
        return None
    i = flips[0]
    return float(grid[i] - gap[i] * (grid[i + 1] - grid[i]) / (gap[i + 1] - gap[i]))


fit = Fit.load(sys.argv[1])
data = included(fit.data)
inside = outside = absent_agree = absent_disagree = 0
for s, setup in fit.setups.iterrows():
    rows = data[(data["verifier"] == setup["verifier"])
                & (data["prefill_tokens"] == setup["prefill_tokens"])
                & (data["decode_tokens"] == setup["decode_tokens"])]
    dense = rows[rows["k"] == 0]
    costs = speculative_costs(fit, {"verifier": setup["verifier"], "drafter": setup["drafter"],
                                    "prefill": int(setup["prefill_tokens"]),
                                    "decode": int(setup["decode_tokens"])})
    print(f"== {setup['setup']}")
    for (alpha, k), sd in rows[rows["k"] > 0].groupby(["alpha", "k"]):
        seen = direct_crossover(dense, sd)
        fitted = crossover(costs, alpha, int(k))
        star = fitted["rps_star"]
        top = min(dense["rps"].max(), sd["rps"].max())
        if seen is None:
            fitted_in_range = star is not None and star["median"] < top \
                and fitted["p_crossover"] > 0.5
            absent_disagree += fitted_in_range
            absent_agree += not fitted_in_range
            continue
        ok = star is not None and star["lo"] <= seen <= star["hi"]
        inside += ok
        outside += not ok
        print(f"alpha {alpha:.1f} k {int(k)}: simulated crossover {seen:7.3f} rps; fitted RPS* "
              f"{star['median'] if star else float('nan'):7.3f} [{star['lo'] if star else float('nan'):.3f}, "
              f"{star['hi'] if star else float('nan'):.3f}] {'ok' if ok else 'MISS'}")
print(f"crossovers seen in range: {inside + outside}; inside the 90% interval: {inside}")
print(f"no crossover seen in range: {absent_agree + absent_disagree}; fit agrees (no RPS* "
      f"below the sweeps' top rate): {absent_agree}")

# k*: at each measured dense rate, the simulated best k among the measured ones.
agree = disagree = 0
for s, setup in fit.setups.iterrows():
    rows = data[(data["verifier"] == setup["verifier"])
                & (data["prefill_tokens"] == setup["prefill_tokens"])
                & (data["decode_tokens"] == setup["decode_tokens"])]
    costs = speculative_costs(fit, {"verifier": setup["verifier"], "drafter": setup["drafter"],
                                    "prefill": int(setup["prefill_tokens"]),
                                    "decode": int(setup["decode_tokens"])})
    dense = rows[rows["k"] == 0]
    rates = np.sort(dense["rps"].to_numpy())
    for alpha in sorted(rows.loc[rows["k"] > 0, "alpha"].unique()):
        sweeps = {0: dense}
        for k, sd in rows[(rows["k"] > 0) & np.isclose(rows["alpha"], alpha)].groupby("k"):
            sweeps[int(k)] = sd
        ks = sorted(sweeps)
        table = kstar_table(costs, [alpha], rates, ks=ks)["table"]
        for rate, row in zip(rates, table):
            latency = {}
            for k, sweep in sweeps.items():
                x, y = curve(sweep)
                if x.min() <= rate <= x.max():
                    latency[k] = 1.0 / np.interp(rate, x, y)
            if len(latency) < len(ks):
                continue   # some sweep does not reach this rate: no direct comparison
            order = sorted(latency, key=latency.get)
            if latency[order[0]] < 0.97 * latency[order[1]]:
                agree += row["k"] == order[0]
                disagree += row["k"] != order[0]
                if row["k"] != order[0]:
                    print(f"k* differs: {setup['setup']} alpha {alpha} rps {rate:.2f}: "
                          f"simulated best k {order[0]}, fitted k* {row['k']} "
                          f"(P best {row['p_best']:.2f})")
print(f"k* where the simulated margin is clear (> 3%): {agree} agree, {disagree} differ")
