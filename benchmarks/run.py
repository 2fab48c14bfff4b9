"""Benchmarks: each case timed against its baseline in the same run (ratios, not seconds).

    python benchmarks/run.py [--quick] [--json] [--cases a,b]

Machines here are shared and noisy: compare the ratio column, not absolute seconds, and
read the core count in the machine block. Cases:

- dense_fit_vs_bootstrap: time to 90% intervals of C1 and C2 for 16 groups x 9 rates,
  bayesspec (nutpie, incl. compilation) vs SciPy curve_fit + a case-resampling bootstrap
  per group (the paper's fit plus the usual way to get intervals); plus the coverage of
  both over replicate datasets with known truth.
- speculative_fit: a joint fit of dense + 5 alpha x 5 k x 9 rates (234 rows) incl.
  compilation, vs curve_fit of eq. (3) + bootstrap (point estimates with intervals).
- decisions: k* over 11 alpha x 50 RPS x 10 k with 4000 draws, vectorised vs a Python
  loop over draws.
- simulator: one 9-point sweep of 1000 requests per point (512/512, Qwen3-8B on H100),
  against the 10 s budget of the simulator issue.
- sampler_choice: effective samples per second, nutpie vs PyMC's NUTS, speculative model.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings

import numpy as np

warnings.filterwarnings("ignore")


def machine() -> dict:
    import nutpie
    import pymc

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        usable = os.cpu_count()
    return {"cores": os.cpu_count(), "usable_cores": usable, "python": platform.python_version(),
            "platform": platform.platform(), "numpy": np.__version__, "pymc": pymc.__version__,
            "nutpie": nutpie.__version__, "date": time.strftime("%Y-%m-%d")}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------ baselines

def _law(rps, c1, c2):
    return c1 / (1.0 - rps * c2)


def curve_fit_group(rps, latency):
    """The paper's fit: least squares of L = C1/(1 - RPS*C2) on one sweep."""
    from scipy.optimize import curve_fit

    c1_guess = latency[np.argmin(rps)]
    c2_guess = 0.5 / rps.max()
    bounds = ([1e-9, 1e-12], [np.inf, 0.999999 / rps.max()])
    params, _ = curve_fit(_law, rps, latency, p0=[c1_guess, c2_guess], bounds=bounds,
                          maxfev=2000)
    return params


def bootstrap_intervals(rps, latency, resamples, rng, prob=0.9):
    """Case-resampling bootstrap percentile intervals of (C1, C2)."""
    estimates = []
    n = len(rps)
    for _ in range(resamples):
        pick = rng.integers(0, n, n)
        if len(np.unique(rps[pick])) < 3:
            continue
        try:
            estimates.append(curve_fit_group(rps[pick], latency[pick]))
        except (RuntimeError, ValueError):
            continue
    estimates = np.asarray(estimates)
    tail = (1 - prob) / 2
    return np.quantile(estimates, [tail, 1 - tail], axis=0)   # (2, 2): lo/hi x C1/C2


def bootstrap_all_groups(data, resamples, rng):
    from bayesspec.data import assign_groups, included

    rows = included(data).reset_index(drop=True)
    groups, index = assign_groups(rows)
    intervals = []
    for g in range(len(groups)):
        member = rows.loc[index == g]
        intervals.append(bootstrap_intervals(member["rps"].to_numpy(float),
                                             member["latency_mean_s"].to_numpy(float),
                                             resamples, rng))
    return groups, np.asarray(intervals)    # (G, 2, 2)


# ------------------------------------------------------------------------ cases

def case_dense_fit_vs_bootstrap(quick: bool) -> dict:
    from bayesspec.data import prepare
    from bayesspec.inference import SamplerSettings
    from bayesspec.synthetic import generate_sweeps, placeholder_truth
    from bayesspec.validation import dense_replicate_coverage
    from bayesspec.workflow import fit

    truth = placeholder_truth()
    truth = truth[truth["verifier"] == "Qwen3-8B"].reset_index(drop=True)
    data = prepare(generate_sweeps(truth, seed=1))
    resamples = 1000
    log("dense_fit_vs_bootstrap: bayesspec fit (incl. compilation)...")
    started = time.perf_counter()
    result = fit(data, "dense", settings=SamplerSettings(seed=1, progress=False))
    bayes_s = time.perf_counter() - started
    log(f"  {bayes_s:.1f} s; bootstrap with {resamples} resamples per group...")
    started = time.perf_counter()
    bootstrap_all_groups(data, resamples, np.random.default_rng(0))
    baseline_s = time.perf_counter() - started
    log(f"  {baseline_s:.1f} s")

    replicates = 8 if quick else 20
    coverage_resamples = 200 if quick else 1000
    log(f"  coverage over {replicates} replicates (bootstrap {coverage_resamples} resamples)...")
    bayes_cov = dense_replicate_coverage(truth, replicates=replicates, seed=300)
    boot_hits = []
    rng = np.random.default_rng(1)
    for r in range(replicates):
        replicate = prepare(generate_sweeps(truth, seed=300 + r))
        _, intervals = bootstrap_all_groups(replicate, coverage_resamples, rng)
        for j, name in enumerate(("C1", "C2")):
            true = truth[name].to_numpy()
            boot_hits.append(((intervals[:, 0, j] <= true) & (true <= intervals[:, 1, j])))
    boot_cov = float(np.mean(np.concatenate(boot_hits)))
    return {"name": "dense_fit_vs_bootstrap", "bayes_s": bayes_s, "baseline_s": baseline_s,
            "ratio": baseline_s / bayes_s,
            "bayes_coverage_90": float(bayes_cov["covers"].mean()),
            "bayes_coverage_by_parameter": bayes_cov.groupby("parameter")["covers"].mean().to_dict(),
            "baseline_coverage_90": boot_cov, "replicates": replicates,
            "groups": len(truth), "rows": len(data),
            "bayes_diagnostics": {k: result.diagnostics[k] for k in
                                  ("rhat_max", "ess_bulk_min", "divergences")},
            "note": f"bootstrap timing {resamples} resamples per group; coverage replicates "
                    f"use {coverage_resamples}"}


def case_speculative_fit(quick: bool) -> dict:
    from scipy.optimize import least_squares

    from bayesspec import laws
    from bayesspec.data import included, prepare
    from bayesspec.inference import SamplerSettings
    from bayesspec.synthetic import generate_sweeps, speculative_truth
    from bayesspec.workflow import fit

    data = prepare(generate_sweeps(speculative_truth(), seed=4))
    log(f"speculative_fit: joint fit of {len(data)} rows (incl. compilation)...")
    started = time.perf_counter()
    result = fit(data, "speculative", settings=SamplerSettings(seed=2, progress=False))
    bayes_s = time.perf_counter() - started
    log(f"  {bayes_s:.1f} s; least squares of eq. (3) + bootstrap...")

    rows = included(data)
    sd = rows[rows["k"] > 0]
    rps, lat = sd["rps"].to_numpy(), sd["latency_mean_s"].to_numpy()
    alpha, k = sd["alpha"].to_numpy(), sd["k"].to_numpy(float)

    def residual(log_c, rps, lat, alpha, k):
        c1, c2 = laws.effective_costs(alpha, k, 512, *np.exp(log_c))
        x = np.minimum(rps * c2, 0.999999)
        return np.log(c1 / (1 - x)) - np.log(lat)

    start = np.log([0.01, 7e-3, 2e-3, 0.01, 1e-4, 5e-6])
    resamples = 200 if quick else 1000
    rng = np.random.default_rng(0)
    started = time.perf_counter()
    estimates = []
    for _ in range(resamples):
        pick = rng.integers(0, len(sd), len(sd))
        fit_ls = least_squares(residual, start, args=(rps[pick], lat[pick], alpha[pick], k[pick]))
        estimates.append(np.exp(fit_ls.x))
    baseline_s = (time.perf_counter() - started) * (1000 / resamples)
    return {"name": "speculative_fit", "bayes_s": bayes_s, "baseline_s": baseline_s,
            "ratio": baseline_s / bayes_s, "rows": len(data), "target_s": 60.0,
            "bayes_diagnostics": {k: result.diagnostics[k] for k in
                                  ("rhat_max", "ess_bulk_min", "divergences")},
            "note": f"baseline: 1000-resample bootstrap of least squares on eq. (3)"
                    f"{' (timed on 200, scaled)' if resamples != 1000 else ''}"}


def case_decisions(quick: bool) -> dict:
    from bayesspec.decisions import SpeculativeCosts, kstar_table, _speedup_draws
    from bayesspec.laws import effective_costs
    from bayesspec.synthetic import DENSE_TRUTH_8B, SPECULATIVE_TRUTH_8B

    rng = np.random.default_rng(0)
    draws = 4000
    jitter = lambda value: value * np.exp(rng.normal(0, 0.02, draws))  # noqa: E731
    costs = SpeculativeCosts(
        label="bench", decode_tokens=512.0, c1_dense=jitter(DENSE_TRUTH_8B["C1"]),
        c2_dense=jitter(DENSE_TRUTH_8B["C2"]),
        coefficients={n: jitter(v) for n, v in SPECULATIVE_TRUTH_8B.items()}, per_config={})
    alphas = np.linspace(0.5, 1.0, 11)
    rps = np.linspace(0, 25, 50)
    ks = range(0, 11)
    timings = []
    for _ in range(3):
        started = time.perf_counter()
        table = kstar_table(costs, alphas, rps, ks=ks)
        timings.append(time.perf_counter() - started)
    bayes_s = float(np.median(timings))

    log("decisions: Python loop over draws as the baseline...")
    started = time.perf_counter()
    sd_ks = np.arange(1, 11)
    c = costs.coefficients
    loop_best = np.zeros((draws, len(alphas), len(rps)), dtype=int)
    for s in range(draws):
        for a, alpha in enumerate(alphas):
            c1, c2 = effective_costs(alpha, sd_ks, 512, *(c[n][s] for n in
                                     ("c1p", "c1v", "c1d", "c2p", "c2v", "c2d")))
            speed = _speedup_draws(costs.c1_dense[s], costs.c2_dense[s], c1[:, None],
                                   c2[:, None], rps[None, :])
            speed = np.vstack([np.ones((1, len(rps))), speed])
            loop_best[s, a] = np.argmax(speed, axis=0)
    baseline_s = time.perf_counter() - started
    return {"name": "decisions", "bayes_s": bayes_s, "baseline_s": baseline_s,
            "ratio": baseline_s / bayes_s, "draws": draws, "grid": "11 alpha x 50 RPS x 10 k",
            "rows": len(table["table"]), "target_s": 2.0}


def case_simulator(quick: bool) -> dict:
    from bayesspec.simulate import setup, sweep

    log("simulator: one 9-point sweep of 1000 requests...")
    config = setup("Qwen3-8B", "H100", prefill=512, decode=512)
    sweep(config, 9, n_requests=1000, seed=0)   # warm numba's cache: time the sweep only
    timings = []
    for repeat in range(1 if quick else 3):
        started = time.perf_counter()
        sweep(config, 9, n_requests=1000, seed=repeat)
        timings.append(time.perf_counter() - started)
    bayes_s = float(np.median(timings))
    return {"name": "simulator", "bayes_s": bayes_s, "baseline_s": 10.0,
            "ratio": 10.0 / bayes_s, "note": "baseline is the 10 s budget of the issue"}


def case_sampler_choice(quick: bool) -> dict:
    import arviz as az

    from bayesspec.bayes import SpeculativeLatencyModel
    from bayesspec.data import prepare
    from bayesspec.inference import SamplerSettings, sample_model
    from bayesspec.synthetic import generate_sweeps, speculative_truth

    data = prepare(generate_sweeps(speculative_truth(), seed=4))
    results = {}
    for sampler in ("nutpie", "pymc"):
        log(f"sampler_choice: {sampler}...")
        model_obj = SpeculativeLatencyModel()
        model = model_obj.build(data)
        settings = SamplerSettings(draws=500, tune=500, chains=2, seed=3, progress=False,
                                   sampler=sampler, target_accept=model_obj.target_accept)
        started = time.perf_counter()
        tree = sample_model(model, settings)
        seconds = time.perf_counter() - started
        posterior = tree["posterior"].to_dataset()[["c1v", "c2v", "c2d", "C1", "C2"]]
        ess = az.ess(posterior, method="bulk")
        ess_min = float(min(np.nanmin(ess[v].values) for v in ess.data_vars))
        results[sampler] = {"seconds": seconds, "ess_bulk_min": ess_min,
                            "ess_per_second": ess_min / seconds}
    return {"name": "sampler_choice", "bayes_s": results["nutpie"]["seconds"],
            "baseline_s": results["pymc"]["seconds"],
            "ratio": results["nutpie"]["ess_per_second"] / results["pymc"]["ess_per_second"],
            "detail": results, "note": "ratio: nutpie ESS/s over PyMC NUTS ESS/s (incl. compile)"}


CASES = {"dense_fit_vs_bootstrap": case_dense_fit_vs_bootstrap,
         "speculative_fit": case_speculative_fit, "decisions": case_decisions,
         "simulator": case_simulator, "sampler_choice": case_sampler_choice}
QUICK = ("dense_fit_vs_bootstrap", "speculative_fit", "decisions", "simulator")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the fast subset (< 5 min)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("--cases", help="comma-separated case names")
    args = parser.parse_args()
    names = args.cases.split(",") if args.cases else (QUICK if args.quick else list(CASES))
    started = time.perf_counter()
    cases = []
    for name in names:
        cases.append(CASES[name](args.quick))
    document = {"machine": machine(), "cases": cases,
                "total_s": round(time.perf_counter() - started, 1)}
    if args.json:
        print(json.dumps(document, indent=2, default=float))
        return 0
    print(f"machine: {document['machine']['usable_cores']} usable cores, "
          f"Python {document['machine']['python']}, {document['machine']['date']}")
    print(f"{'case':<26} {'bayesspec s':>12} {'baseline s':>11} {'ratio':>8}  notes")
    for case in cases:
        if "error" in case:
            print(f"{case['name']:<26} error: {case['error']}")
            continue
        extra = {k: v for k, v in case.items()
                 if k not in {"name", "bayes_s", "baseline_s", "ratio"}}
        print(f"{case['name']:<26} {case['bayes_s']:>12.2f} {case['baseline_s']:>11.2f} "
              f"{case['ratio']:>8.2f}  {json.dumps(extra, default=float)[:160]}")
    print(f"total {document['total_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
