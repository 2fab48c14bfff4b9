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
from bayesspec.bayes import load_fit
from bayesspec.decisions import crossover, kstar_table


def curve(points):
    points = points.sort_values("rps")
    # 1/L is linear in RPS under the law and close to linear in the simulator, so
    # interpolating it between neighbouring measured points bends the curve least.
    return points["rps"].to_numpy(), 1.0 / points["latency_mean_s"].to_numpy()


def direct_crossover(dense, sd):
    (xd, yd), (xs, ys) = curve(dense), curve(sd)
    return crossing(xd, yd, xs, ys)


def crossing(xd, yd, xs, ys):
    grid = np.linspace(max(xd.min(), xs.min()), min(xd.max(), xs.max()), 400)
    if len(grid) < 2 or grid[0] >= grid[-1]:
        return None
    gap = np.interp(grid, xd, yd) - np.interp(grid, xs, ys)
    flips = np.flatnonzero(np.sign(gap[:-1]) != np.sign(gap[1:]))
    if len(flips) == 0:
        return None
    i = flips[0]
    return float(grid[i] - gap[i] * (grid[i + 1] - grid[i]) / (gap[i + 1] - gap[i]))


def predictive_direct_crossover(fit, dense, sd, draws=400, seed=0):
    """Posterior predictive of the direct crossover: re-measure both sweeps at their rates
    with the fitted noise, interpolate the same way; its 90% interval says where the
    statistic computed from noisy sweeps should fall if the fit is right."""
    rng = np.random.default_rng(seed)
    labels = list(fit.groups["label"])
    parts = []
    for sweep in (dense, sd):
        g = labels.index(sweep["group"].iloc[0])
        sweep = sweep.sort_values("rps")
        rps = sweep["rps"].to_numpy()
        se = (sweep["latency_std_s"] / np.sqrt(sweep["n_requests"].astype(float))
              / sweep["latency_mean_s"]).to_numpy(float)
        parts.append((rps, fit.draws("C1", g)[:draws], fit.draws("C2", g)[:draws],
                      np.nan_to_num(se)))
    noise_base = fit.draws("noise_base")[:draws]
    noise_load = fit.draws("noise_load")[:draws]
    stats = []
    for i in range(len(noise_base)):
        curves = []
        for rps, c1, c2, se in parts:
            x = rps * c2[i]
            sigma = np.sqrt(noise_base[i] ** 2 + (noise_load[i] * x / (1 - x)) ** 2 + se**2)
            latency = c1[i] / (1 - x) * np.exp(rng.normal(0.0, sigma))
            curves += [rps, 1.0 / latency]
        value = crossing(*curves)
        if value is not None:
            stats.append(value)
    if len(stats) < 0.5 * len(noise_base):
        return None
    return np.quantile(stats, [0.05, 0.95])


fit = load_fit(sys.argv[1])
data = included(fit.data)
inside = outside = absent_agree = absent_disagree = predictive_inside = 0
for s, setup in fit.setups.iterrows():
    rows = data[(data["verifier"] == setup["verifier"])
                & (data["prefill_tokens"] == setup["prefill_tokens"])
                & (data["decode_tokens"] == setup["decode_tokens"])]
    dense = rows[rows["k"] == 0]
    costs = fit.law({"verifier": setup["verifier"], "drafter": setup["drafter"],
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
        band = predictive_direct_crossover(fit, dense, sd)
        in_band = band is not None and band[0] <= seen <= band[1]
        predictive_inside += in_band
        print(f"alpha {alpha:.1f} k {int(k)}: simulated crossover {seen:7.3f} rps; fitted RPS* "
              f"{star['median'] if star else float('nan'):7.3f} [{star['lo'] if star else float('nan'):.3f}, "
              f"{star['hi'] if star else float('nan'):.3f}] {'ok' if ok else 'MISS'}; predictive "
              f"band of the direct estimate {np.round(band, 3) if band is not None else None} "
              f"{'ok' if in_band else 'MISS'}")
print(f"crossovers seen in range: {inside + outside}; inside the 90% interval: {inside}; "
      f"inside the 90% predictive band of the direct estimate: {predictive_inside}")
print(f"no crossover seen in range: {absent_agree + absent_disagree}; fit agrees (no RPS* "
      f"below the sweeps' top rate): {absent_agree}")

# k*: at each measured dense rate, the simulated best k among the measured ones.
agree = disagree = 0
for s, setup in fit.setups.iterrows():
    rows = data[(data["verifier"] == setup["verifier"])
                & (data["prefill_tokens"] == setup["prefill_tokens"])
                & (data["decode_tokens"] == setup["decode_tokens"])]
    costs = fit.law({"verifier": setup["verifier"], "drafter": setup["drafter"],
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
