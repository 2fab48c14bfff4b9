"""Why the covered/saturated split of eq. (4) did not converge: the failing design profiled.

    python benchmarks/moe_ridge.py [--seed 0] [--fit FIT.nc] [--json]

Data: ``moe_data.issue_design`` (independent of bayesspec's MoE code: brentq per point,
Gamma request latencies, 1.5% run noise, 600 requests; Qwen3-30B-A3B, m = 8 of M = 128,
4 (prefill, decode) pairs x 9 rates from 1% to 88% of saturation, coverage rising from
about 0 to 1 across each sweep).

Per group it prints
- the posterior sd the data allow along each eigendirection of the Fisher information in
  (log C1u, log C1s, log C2u, log C2s), and the weakest direction: the ridge;
- the profile of the negative log-likelihood along that ridge (C1s on a grid, the other
  three costs optimised, exact least-root solve): one valley or several modes;
- how often the moe model version 4's in-graph solve (4 fixed-point steps from the
  phi = 0 latency, then 6 bracketed Newton steps) misses the least fixed point along the
  ridge, and by how much.
With ``--fit`` (a version-4 ``moe`` fit of the same data): per chain, where on the ridge
it sat, and how often the version-4 solve was wrong at its draws.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

sys.path.insert(0, str(Path(__file__).resolve().parent))
import moe_data  # noqa: E402

from bayesspec import laws  # noqa: E402

NAMES = ("C1u", "C1s", "C2u", "C2s")


def version4_solve(rps, c1u, c1s, c2u, c2s, m, M, tokens=1.0):
    """The moe model version 4's in-graph solve, kept here to show where it failed."""
    log_keep = np.log1p(-m / M)

    def coverage(latency):
        return -np.expm1(rps * latency * tokens * log_keep)

    def rhs(latency):
        phi = coverage(latency)
        return (c1u + phi * c1s) / (1.0 - rps * (c2u + phi * c2s))

    lowest = rhs(0.0 * rps)
    full_free = 1.0 - rps * (c2u + c2s)
    highest = np.where(full_free > 0, (c1u + c1s) / np.where(full_free > 0, full_free, 1.0),
                       np.inf)
    latency = c1u / (1.0 - rps * c2u)
    for _ in range(4):
        latency = rhs(latency)
    for _ in range(6):
        phi = coverage(latency)
        dphi = -(1.0 - phi) * log_keep * rps * tokens
        c1, c2 = c1u + phi * c1s, c2u + phi * c2s
        free = 1.0 - rps * c2
        slope = (dphi * c1s * free + c1 * rps * dphi * c2s) / free**2
        latency = latency - (latency - c1 / free) / (1.0 - slope)
        latency = np.minimum(np.maximum(latency, lowest), highest)
    return latency


def group_data(data, row):
    sweep = data[(data["prefill_tokens"] == row["prefill_tokens"])
                 & (data["decode_tokens"] == row["decode_tokens"])]
    rps = sweep["rps"].to_numpy(float)
    mean = sweep["latency_mean_s"].to_numpy(float)
    se = sweep["latency_std_s"].to_numpy(float) / np.sqrt(sweep["n_requests"].to_numpy(float))
    return rps, np.log(mean), np.sqrt(0.015**2 + (se / mean) ** 2)


def negative_log_likelihood(costs, rps, observed, sd, m, M):
    latency = laws.moe_latency(rps, *costs, m, M, 1.0)
    if not np.all(np.isfinite(latency)):
        return 1e12
    return 0.5 * float(np.sum(((observed - np.log(latency)) / sd) ** 2))


def fisher_directions(costs, rps, sd, m, M):
    x0 = np.log(costs)

    def predicted(x):
        return np.log(laws.moe_latency(rps, *np.exp(x), m, M, 1.0))

    jacobian = np.zeros((len(rps), 4))
    for i in range(4):
        e = np.zeros(4)
        e[i] = 1e-6
        jacobian[:, i] = (predicted(x0 + e) - predicted(x0 - e)) / 2e-6
    weighted = jacobian / sd[:, None]
    values, vectors = np.linalg.eigh(weighted.T @ weighted)
    return 1.0 / np.sqrt(values), vectors[:, 0]


def ridge_profile(costs, rps, observed, sd, m, M, factors):
    """NLL along C1s = truth x factor, the other three costs optimised (in logs)."""
    rows = []
    start = np.log(np.asarray(costs)[[0, 2, 3]])
    for factor in factors:
        c1s = costs[1] * factor

        def objective(x, c1s=c1s):
            c1u, c2u, c2s = np.exp(x)
            return negative_log_likelihood((c1u, c1s, c2u, c2s), rps, observed, sd, m, M)

        best = min((minimize(objective, s, method="Nelder-Mead",
                             options={"xatol": 1e-8, "fatol": 1e-8, "maxiter": 6000})
                    for s in (start, start + [0, -0.5, 0.5], start + [0, 0.3, -0.3])),
                   key=lambda r: r.fun)
        c1u, c2u, c2s = np.exp(best.x)
        point = (c1u, c1s, c2u, c2s)
        exact = laws.moe_latency(rps, *point, m, M, 1.0)
        old = version4_solve(rps, *point, m, M)
        rows.append({"C1s_factor": factor, "nll": best.fun, "C1u": c1u, "C1s": c1s,
                     "C2u": c2u, "C2s": c2s,
                     "C2_low": c2u + -np.log1p(-m / M) * c1s,
                     "version4_error": float(np.max(np.abs(old / exact - 1.0)))})
        start = best.x
    return rows


def chains_on_the_ridge(path, truth, data):
    from bayesspec.bayes import load_fit

    fit = load_fit(path)
    posterior = fit.tree["posterior"]
    depth = fit.tree["sample_stats"]["depth"].mean("draw").values \
        if "depth" in fit.tree["sample_stats"] else None
    out = {"diagnostics": {k: fit.diagnostics[k] for k in ("rhat_max", "ess_bulk_min",
                                                           "divergences")},
           "mean_tree_depth": None if depth is None else depth.tolist(), "groups": []}
    labels = list(fit.groups["label"])
    for g, (_, row) in enumerate(truth.iterrows()):
        rps = fit.data.loc[fit.data["group"] == labels[g], "rps"].to_numpy(float)
        chains = []
        for c in range(posterior.sizes["chain"]):
            draws = [posterior[n].isel(chain=c, group=g).values[:, None] for n in NAMES]
            exact = laws.moe_latency(rps[None, :], *draws, row["experts_active"],
                                     row["experts_total"], 1.0)
            old = version4_solve(rps[None, :], *draws, row["experts_active"],
                                 row["experts_total"])
            error = np.abs(old / exact - 1.0).max(axis=1)
            chains.append({**{n: float(np.median(d)) for n, d in zip(NAMES, draws)},
                           "version4_wrong_share": float(np.mean(error > 1e-6)),
                           "version4_error_max": float(error.max())})
        out["groups"].append({"truth": {n: float(row[n]) for n in NAMES}, "chains": chains})
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fit", help="a version-4 moe fit of the same data")
    parser.add_argument("--write-data", help="write the design's CSV here")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    truth, data = moe_data.issue_design(args.seed)
    if args.write_data:
        data.to_csv(args.write_data, index=False)
    factors = [0.3, 0.5, 0.7, 0.85, 1.0, 1.2, 1.5, 2.0, 3.0]
    report = {"seed": args.seed, "groups": []}
    for g, (_, row) in enumerate(truth.iterrows()):
        m, M = float(row["experts_active"]), float(row["experts_total"])
        costs = np.array([row[n] for n in NAMES], float)
        rps, observed, sd = group_data(data, row)
        widths, weakest = fisher_directions(costs, rps, sd, m, M)
        profile = ridge_profile(costs, rps, observed, sd, m, M, factors)
        low = min(p["nll"] for p in profile)
        report["groups"].append({
            "label": f"p{row['prefill_tokens']} g{row['decode_tokens']}",
            "phi_along_sweep": np.round(-np.expm1(np.log1p(-m / M) * rps * moe_data.true_latency(
                row, rps)), 3).tolist(),
            "fisher_sd": widths.tolist(), "weakest_direction": weakest.tolist(),
            "profile": profile})
        if not args.json:
            print(f"group {g} p{row['prefill_tokens']} g{row['decode_tokens']}: posterior sd "
                  f"along Fisher eigendirections {np.round(widths, 4)}; weakest (log C1u, "
                  f"C1s, C2u, C2s) {np.round(weakest, 2)}")
            print("   C1s/truth   dNLL    C1u      C2u       C2s      C2u+beta*C1s  "
                  "version-4 solve error")
            for p in profile:
                print(f"   {p['C1s_factor']:6.2f} {p['nll'] - low:7.2f} {p['C1u']:.4f} "
                      f"{p['C2u']:.6f} {p['C2s']:.6f} {p['C2_low']:.6f}  "
                      f"{p['version4_error']:.2e}")
    if args.fit:
        report["fit"] = chains_on_the_ridge(args.fit, truth, data)
        if not args.json:
            fit_report = report["fit"]
            print("fit:", fit_report["diagnostics"], "mean tree depth per chain",
                  fit_report["mean_tree_depth"])
            for g, group in enumerate(fit_report["groups"]):
                print(f"group {g} truth", {k: round(v, 5) for k, v in group["truth"].items()})
                for c, chain in enumerate(group["chains"]):
                    print(f"   chain {c}", {k: round(v, 5) for k, v in chain.items()})
    if args.json:
        print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
