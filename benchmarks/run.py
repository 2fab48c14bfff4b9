"""Speed harness: each case timed against its baseline in the same run (ratios, not seconds).

    python benchmarks/run.py --quick            # the fast subset, about 3-4 minutes
    python benchmarks/run.py --cases hierarchical_fit,scaling --json
    BAYESSPEC_SCALING_SIZES=1k,4k,16k python benchmarks/run.py --cases scaling

Machines are shared and noisy: compare the ratio column (``baseline_s / bayes_s``; above 1
means bayesspec is faster), not absolute seconds, and read the core count in the machine
block. Cases:

- dense_fit_vs_bootstrap: time to 90% intervals of C1 and C2 for 16 groups x 9 rates,
  bayesspec (nutpie, incl. compilation) vs SciPy curve_fit + a case-resampling bootstrap
  per group (the paper's fit plus the usual way to get intervals); plus the coverage of
  both over replicate datasets with known truth.
- speculative_fit: a joint fit of dense + 5 alpha x 5 k x 9 rates (234 rows) incl.
  compilation, vs curve_fit of eq. (3) + bootstrap (point estimates with intervals).
- decisions: k* over 11 alpha x 50 RPS x 10 k with 4000 draws, vectorised vs a Python
  loop over draws.
- simulator: one 9-point sweep of 1000 requests per point (512/512, Qwen3-8B on H100),
  against a 10 s budget.
- sampler_choice: effective samples per second, nutpie vs PyMC's NUTS, speculative and
  hierarchical models.
- hierarchical_fit: the whole bundled dataset (dense + speculative, 1044 rows) in one
  hierarchical fit with the CLI defaults, against a 5-minute budget.
- check_leave_out_2: ``check --leave-out 2`` on one verifier's 16 combinations (10 folds
  of one compiled model, the CLI's sampler defaults), against a 5-minute budget.
- parallel_refits: the same SBC refits with 2 worker processes against 1.
- approximate: NUTS vs --method advi (mean-field ADVI + Pareto-smoothed importance
  resampling) on the bundled dense data and the hierarchical model: wall time, ratio to
  NUTS, Pareto k, coverage and overlap of NUTS's C1, C2 by the approximate 90% intervals.
- gpu_sampling: the hierarchical fit with nutpie (CPU) vs numpyro / blackjax (JAX, chains
  vectorised on the GPU), ESS per second; skipped where JAX sees no GPU.
- scaling: the hierarchical fit at the model's defaults at about 1k, 4k, 16k and 64k rows
  (BAYESSPEC_SCALING_SIZES picks a subset): wall, ESS/s, R-hat, divergences, the time
  per gradient, and the slope of log sampling time on log rows.

Prints the machine (usable cores, Python, date), then one line per case: bayesspec
seconds, baseline seconds, their ratio and the case's notes (coverage, R-hat, ESS);
``--json`` prints the same as one document.
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
    from bayesspec.simulate.synthetic import generate_sweeps, placeholder_truth
    from bayesspec.checks.replicates import dense_replicate_coverage
    from bayesspec.bayes.workflow import fit

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
    from bayesspec.simulate.synthetic import generate_sweeps, speculative_truth
    from bayesspec.bayes.workflow import fit

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
    from bayesspec.decisions import kstar_table
    from bayesspec.laws import effective_costs, latency
    from bayesspec.prediction import CoefficientLaw, Curve
    from bayesspec.simulate.synthetic import DENSE_TRUTH_8B, SPECULATIVE_TRUTH_8B

    rng = np.random.default_rng(0)
    draws = 4000
    jitter = lambda value: value * np.exp(rng.normal(0, 0.02, draws))  # noqa: E731
    costs = CoefficientLaw(
        "bench", Curve(jitter(DENSE_TRUTH_8B["C1"]), jitter(DENSE_TRUTH_8B["C2"])),
        {n: jitter(v) for n, v in SPECULATIVE_TRUTH_8B.items()}, 512.0)
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
            with np.errstate(divide="ignore", invalid="ignore"):
                speed = (latency(rps[None, :], costs.c1_dense[s], costs.c2_dense[s])
                         / latency(rps[None, :], c1[:, None], c2[:, None]))
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
            "ratio": 10.0 / bayes_s, "note": "baseline is a 10 s budget"}


def case_sampler_choice(quick: bool) -> dict:
    import arviz as az

    from bayesspec.bayes import SpeculativeLatencyModel
    from bayesspec.data import prepare
    from bayesspec.inference import SamplerSettings, sample_model
    from bayesspec.simulate.synthetic import generate_sweeps, speculative_truth

    from bayesspec import datasets
    from bayesspec.bayes import HierarchicalLatencyModel
    from bayesspec.data import read_tidy
    from bayesspec.inference import settings_for

    dense = read_tidy(datasets.path("dense"))
    designs = {"speculative": (SpeculativeLatencyModel,
                               prepare(generate_sweeps(speculative_truth(), seed=4))),
               "hierarchical": (HierarchicalLatencyModel,
                                dense[dense["verifier"].isin(["Qwen3-1.7B", "Qwen3-8B",
                                                              "Qwen3-14B"])])}
    results = {}
    for model_name, (model_class, data) in designs.items():
        for sampler in ("nutpie", "pymc"):
            log(f"sampler_choice: {model_name} with {sampler}...")
            model_obj = model_class()
            model = model_obj.build(data)
            settings = settings_for(model_obj, SamplerSettings(
                draws=500, tune=500, chains=2, seed=3, progress=False, sampler=sampler))
            started = time.perf_counter()
            tree = sample_model(model, settings)
            seconds = time.perf_counter() - started
            posterior = tree["posterior"].to_dataset()[["C1", "C2"]]
            ess = az.ess(posterior, method="bulk")
            ess_min = float(min(np.nanmin(ess[v].values) for v in ess.data_vars))
            results[f"{model_name}/{sampler}"] = {"seconds": round(seconds, 1),
                                                  "ess_bulk_min": round(ess_min, 1),
                                                  "ess_per_second": ess_min / seconds}
    ratios = {m: results[f"{m}/nutpie"]["ess_per_second"] /
              results[f"{m}/pymc"]["ess_per_second"] for m in designs}
    return {"name": "sampler_choice", "bayes_s": results["speculative/nutpie"]["seconds"],
            "baseline_s": results["speculative/pymc"]["seconds"],
            "ratio": ratios["speculative"], "ratio_hierarchical": ratios["hierarchical"],
            "detail": results,
            "note": "ratio: nutpie ESS/s over PyMC NUTS ESS/s (min bulk ESS of C1, C2; "
                    "incl. compilation)"}


def case_hierarchical_fit(quick: bool) -> dict:
    """The whole bundled dataset (dense + speculative) in one hierarchical fit."""
    import pandas as pd

    from bayesspec import datasets
    from bayesspec.data import prepare
    from bayesspec.inference import SamplerSettings
    from bayesspec.bayes.workflow import fit

    data = prepare(pd.concat([pd.read_csv(datasets.path("dense")),
                              pd.read_csv(datasets.path("speculative"))], ignore_index=True))
    from bayesspec.bayes import HierarchicalLatencyModel

    model = HierarchicalLatencyModel
    log(f"hierarchical_fit: {len(data)} rows, CLI defaults (4 chains x {model.default_tune} "
        f"tune + {model.default_draws} draws)...")
    started = time.perf_counter()
    # chains=4 as the CLI's default (SamplerSettings alone would run 2).
    result = fit(data, "hierarchical", settings=SamplerSettings(seed=1, progress=False, chains=4,
                                                                tune=None, draws=None))
    bayes_s = time.perf_counter() - started
    diag = result.diagnostics
    return {"name": "hierarchical_fit", "bayes_s": bayes_s, "baseline_s": 300.0,
            "ratio": 300.0 / bayes_s, "rows": len(data), "groups": len(result.groups),
            "bayes_diagnostics": {k: diag[k] for k in ("rhat_max", "ess_bulk_min",
                                                       "divergences")},
            "note": "baseline is a 5-minute budget"}


def case_check_leave_out_2(quick: bool) -> dict:
    """check --leave-out 2 on one verifier's 16 combinations (10 folds, compile once)."""
    from bayesspec import datasets
    from bayesspec.checks import leave_out_check
    from bayesspec.data import read_tidy
    from bayesspec.inference import SamplerSettings

    data = read_tidy(datasets.path("dense"))
    one = data[data["verifier"] == "Qwen3-8B"]
    log(f"check_leave_out_2: {len(one)} rows of Qwen3-8B, 10 folds + a reference fit...")
    started = time.perf_counter()
    # The CLI's defaults: 4 chains, the model's tuning, draws and starts.
    document = leave_out_check(one, leave_out=2, folds=10, seed=1, progress=False,
                               settings=SamplerSettings(draws=None, tune=None, chains=4,
                                                        progress=False))
    bayes_s = time.perf_counter() - started
    return {"name": "check_leave_out_2", "bayes_s": bayes_s, "baseline_s": 300.0,
            "ratio": 300.0 / bayes_s, "folds": document["folds"], "r2": document["r2"],
            "coverage": document["coverage"],
            "divergences": sum(f["divergences"] for f in document["per_fold"]),
            "folds_converged": sum(f["converged"] for f in document["per_fold"]),
            "fold_rhat_max": max(f["rhat_max"] for f in document["per_fold"]),
            "fold_ess_bulk_min": min(f["ess_bulk_min"] for f in document["per_fold"]),
            "fold_seconds_median": float(np.median([f["seconds"] for f in
                                                    document["per_fold"]])),
            "note": "baseline is a 5-minute budget"}


def _gradient_seconds(pm_model, repeats: int = 100) -> float:
    """Median time of one log-density + gradient evaluation (the sampler's unit of work),
    compiled by PyTensor's default backend (nutpie uses numba: the same order)."""
    function = pm_model.logp_dlogp_function(ravel_inputs=True)
    function.set_extra_values({})
    point = pm_model.initial_point()
    flat = np.concatenate([np.ravel(point[v.name]) for v in pm_model.value_vars])
    function(flat)
    timings = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(repeats):
            function(flat)
        timings.append((time.perf_counter() - started) / repeats)
    return float(np.median(timings))


def case_scaling(quick: bool) -> dict:
    """Hierarchical fit at the model's defaults vs rows (1k, 4k, 16k, 64k): wall time,
    min bulk ESS per second, R-hat, divergences, and the time-vs-rows slope.

    The rows grow at a fixed set of parameters: 7 verifiers x 16 (prefill, decode) cells
    (``synthetic.hierarchical_truth``) with 9, 36, 144 or 576 rates per sweep, so the
    slope measures the cost of rows, not of a larger model."""
    from bayesspec.bayes import HierarchicalLatencyModel
    from bayesspec.data import prepare
    from bayesspec.inference import SamplerSettings, settings_for
    from bayesspec.simulate.synthetic import generate_sweeps, hierarchical_truth
    from sampler import geometry, timed_fit

    rates = {"1k": 9, "4k": 36, "16k": 144, "64k": 576}
    # BAYESSPEC_SCALING_SIZES=1k,4k,16k: a subset (the 64k point alone takes most of an
    # hour on 2 cores).
    wanted = os.environ.get("BAYESSPEC_SCALING_SIZES", "1k,4k" if quick else ",".join(rates))
    sizes = {label: rates[label] for label in wanted.split(",")}
    points = []
    for label, n_rates in sizes.items():
        data = prepare(generate_sweeps(hierarchical_truth(), n_rates=n_rates, seed=2))
        model_obj = HierarchicalLatencyModel()
        settings = settings_for(model_obj, SamplerSettings(seed=1, progress=False))
        pm_model = model_obj.build(data)
        rows = len(model_obj.inputs.rows)
        log(f"scaling: {label}: {len(data)} rows ({rows} in the likelihood), "
            f"{settings.chains} x ({settings.tune} + {settings.draws})...")
        tree, compile_s, sample_s = timed_fit(pm_model, settings)
        shape = geometry(tree)
        ess, rhat, divergences = shape["ess_bulk_min"], shape["rhat_max"], shape["divergences"]
        steps = (shape["gradients_sampling"] + shape["gradients_warmup"]
                 + shape["gradients_before_retry"])
        gradient_s = _gradient_seconds(pm_model)
        points.append({"size": label, "rows": len(data), "likelihood_rows": rows,
                       "compile_s": round(compile_s, 1), "sample_s": round(sample_s, 1),
                       "wall_s": round(compile_s + sample_s, 1),
                       "ess_bulk_min": round(ess), "ess_per_s": round(ess / sample_s, 1),
                       "rhat_max": round(rhat, 4), "divergences": divergences,
                       "retried": shape["retried"],
                       "gradient_evaluations": steps, "gradient_ms": round(gradient_s * 1e3, 3)})
        log(f"  compile {compile_s:.1f} s, sample {sample_s:.1f} s, min ESS {ess:.0f} "
            f"({ess / sample_s:.1f}/s), R-hat {rhat:.4f}, {divergences} divergences, "
            f"{steps} gradients x {gradient_s * 1e3:.2f} ms"
            + (f"; {shape['retried']}" if shape["retried"] else ""))
    sample = np.array([p["sample_s"] for p in points])
    rows = np.array([p["likelihood_rows"] for p in points], float)
    slope = float(np.polyfit(np.log(rows), np.log(sample), 1)[0])
    return {"name": "scaling", "bayes_s": float(sample[-1]), "baseline_s": float(sample[-2]),
            "ratio": float((sample[-1] / sample[-2]) / (rows[-1] / rows[-2])),
            "slope_log_time_vs_log_rows": slope, "points": points,
            "note": "model defaults; ratio: time growth over row growth between the two "
                    "largest sizes (<= 1: no faster than linear); slope: log sampling time "
                    "against log rows over all sizes"}


def case_parallel_refits(quick: bool) -> dict:
    """SBC of the dense model (independent refits): 1 worker vs 2 worker processes.

    On 2 cores the two workers split the cores nutpie's chains would otherwise use, so
    the gain is the compile/sample overlap and Python overhead, not 2x; on a larger
    machine or a Dask cluster (--scheduler) the same code scales with the workers."""
    from bayesspec.bayes import DenseLatencyModel
    from bayesspec.inference import SamplerSettings
    from bayesspec.checks.sbc import run_sbc

    design = DenseLatencyModel.default_sbc_design()
    simulations = 8 if quick else 24
    settings = SamplerSettings(draws=500, tune=None, chains=2)
    timings = {}
    for workers in (1, 2):
        log(f"parallel_refits: {simulations} SBC simulations, {workers} worker(s)...")
        started = time.perf_counter()
        result = run_sbc(design, "dense", simulations=simulations, settings=settings,
                         seed=3, progress=False, workers=workers)
        timings[workers] = time.perf_counter() - started
        ranks = result.ranks
    return {"name": "parallel_refits", "bayes_s": timings[2], "baseline_s": timings[1],
            "ratio": timings[1] / timings[2], "simulations": simulations,
            "ranked": int(len(ranks)),
            "note": "baseline: the same SBC in one process; ratio > 1: workers faster"}


def _cost_intervals(fit, prob: float = 0.9) -> dict[str, np.ndarray]:
    """Per group, through the prediction contract: (median, lo, hi) of C1 and C2."""
    tail = (1 - prob) / 2
    out = {}
    for name in ("c1", "c2"):
        rows = []
        for g in range(len(fit.groups)):
            draws = getattr(fit.group_curve(g), name)
            rows.append(np.quantile(draws, [0.5, tail, 1 - tail]))
        out[name] = np.array(rows)
    return out


def _against_nuts(reference: dict, approximate: dict) -> dict:
    """How the approximate 90% intervals of C1, C2 (every group) stand to NUTS's: share
    of NUTS medians inside them, interval overlap (intersection over union), width ratio
    and the largest relative error of the median."""
    covered, overlap, width, error = [], [], [], []
    for name in ("c1", "c2"):
        nuts, approx = reference[name], approximate[name]
        covered.append((approx[:, 1] <= nuts[:, 0]) & (nuts[:, 0] <= approx[:, 2]))
        inter = np.clip(np.minimum(nuts[:, 2], approx[:, 2])
                        - np.maximum(nuts[:, 1], approx[:, 1]), 0, None)
        union = np.maximum(nuts[:, 2], approx[:, 2]) - np.minimum(nuts[:, 1], approx[:, 1])
        overlap.append(inter / union)
        width.append((approx[:, 2] - approx[:, 1]) / (nuts[:, 2] - nuts[:, 1]))
        error.append(np.abs(approx[:, 0] / nuts[:, 0] - 1))
    covered, overlap = np.concatenate(covered), np.concatenate(overlap)
    width, error = np.concatenate(width), np.concatenate(error)
    return {"nuts_median_coverage": round(float(covered.mean()), 3),
            "interval_overlap_mean": round(float(overlap.mean()), 3),
            "interval_overlap_min": round(float(overlap.min()), 3),
            "width_ratio_median": round(float(np.median(width)), 3),
            "median_rel_error_max": round(float(error.max()), 4)}


def case_approximate(quick: bool) -> dict:
    """NUTS vs the approximate method (--method advi) on the bundled dense
    data (dense model) and the bundled dense + speculative data (hierarchical model):
    wall time incl. compilation, ratio to NUTS, Pareto k, and how the approximate 90%
    intervals of every group's C1 and C2 stand to NUTS's. The approximations are kept
    whatever their k (no fallback) so that what they give is measured; then the same fit
    with the fallback on (the default), timed: a k above 0.7 costs the approximation's
    time plus the NUTS sampling."""
    import pandas as pd

    from bayesspec import datasets
    from bayesspec.data import prepare, read_tidy
    from bayesspec.inference import SamplerSettings
    from bayesspec.bayes.workflow import fit

    designs = {"dense": ("dense", read_tidy(datasets.path("dense"))),
               "hierarchical": ("hierarchical", prepare(pd.concat(
                   [pd.read_csv(datasets.path("dense")),
                    pd.read_csv(datasets.path("speculative"))], ignore_index=True)))}
    methods = ("advi",)
    detail = {}
    for label, (model, data) in designs.items():
        log(f"approximate: {label} ({len(data)} rows) with NUTS, the model's defaults...")
        started = time.perf_counter()
        nuts = fit(data, model, settings=SamplerSettings(seed=1, progress=False, chains=4))
        nuts_s = time.perf_counter() - started
        reference = _cost_intervals(nuts)
        verdict = nuts.diagnostics
        detail[f"{label}/nuts"] = {"seconds": round(nuts_s, 1), "status": verdict["status"],
                                   "rhat_max": round(verdict["rhat_max"], 3),
                                   "groups": len(nuts.groups)}
        for method in methods:
            log(f"approximate: {label} with {method}...")
            started = time.perf_counter()
            result = fit(data, model, settings=SamplerSettings(
                seed=1, progress=False, chains=4, method=method, fallback=False))
            seconds = time.perf_counter() - started
            attrs = result.tree.attrs
            detail[f"{label}/{method}"] = {
                "seconds": round(seconds, 1), "ratio_to_nuts": round(nuts_s / seconds, 2),
                "approximation_s": attrs.get("approximation_seconds"),
                "pareto_k": float(attrs["pareto_k"]),
                "importance_ess": attrs.get("importance_ess"),
                "steps": attrs.get("approximation_steps"),
                "verdict": result.diagnostics["status"],
                **_against_nuts(reference, _cost_intervals(result))}
            log(f"approximate: {label} with {method}, the NUTS fallback on (the default)...")
            started = time.perf_counter()
            fallen = fit(data, model, settings=SamplerSettings(seed=1, progress=False,
                                                               chains=4, method=method))
            detail[f"{label}/{method}"].update(
                seconds_with_fallback=round(time.perf_counter() - started, 1),
                fell_back=bool(fallen.tree.attrs.get("fallback")))
    first = detail[f"dense/{methods[0]}"]
    return {"name": "approximate", "bayes_s": first["seconds"],
            "baseline_s": detail["dense/nuts"]["seconds"], "ratio": first["ratio_to_nuts"],
            "detail": detail,
            "note": "bayes: dense with advi; baseline: dense with NUTS (both incl. "
                    "compilation); coverage: share of NUTS posterior medians of C1, C2 (all "
                    "groups) inside the approximate 90% interval"}


def case_gpu_sampling(quick: bool) -> dict:
    """The hierarchical model on the bundled dense + speculative data (1044 rows): nutpie
    on the CPU vs PyMC's JAX NUTS (numpyro, blackjax) with the chains vectorised on a GPU;
    ESS per second of C1 and C2, incl. compilation. Skipped where JAX is not installed
    (the optional extra bayesspec[gpu]) or sees no GPU."""
    import arviz as az
    import pandas as pd

    from bayesspec import datasets
    from bayesspec.bayes import HierarchicalLatencyModel
    from bayesspec.data import prepare
    from bayesspec.inference import (SamplerSettings, convergence_verdict, jax_gpu,
                                     jax_missing, sample_model, settings_for)

    reason = jax_missing("numpyro")
    if reason:
        return {"name": "gpu_sampling", "skipped": reason}
    if not jax_gpu():
        return {"name": "gpu_sampling", "skipped": "no GPU (jax.devices() lists none)"}
    data = prepare(pd.concat([pd.read_csv(datasets.path("dense")),
                              pd.read_csv(datasets.path("speculative"))], ignore_index=True))
    detail = {}
    for sampler in ("nutpie", "numpyro", "blackjax"):
        if sampler != "nutpie" and jax_missing(sampler):
            detail[sampler] = {"skipped": jax_missing(sampler)}
            continue
        log(f"gpu_sampling: hierarchical ({len(data)} rows) with {sampler}...")
        model = HierarchicalLatencyModel()
        settings = settings_for(model, SamplerSettings(seed=1, progress=False, chains=4,
                                                       sampler=sampler,
                                                       draws=500 if quick else None,
                                                       tune=500 if quick else None))
        started = time.perf_counter()
        tree = sample_model(model.build(data), settings)
        seconds = time.perf_counter() - started
        ess = az.ess(tree["posterior"].to_dataset()[["C1", "C2"]], method="bulk")
        ess_min = float(min(np.nanmin(ess[v].values) for v in ess.data_vars))
        verdict = convergence_verdict(tree, model.decision_variables())
        detail[sampler] = {"seconds": round(seconds, 1), "ess_bulk_min": round(ess_min, 1),
                           "ess_per_second": ess_min / seconds, "status": verdict["status"],
                           "divergences": verdict["divergences"]}
    best = max((s for s in ("numpyro", "blackjax") if "seconds" in detail[s]),
               key=lambda s: detail[s]["ess_per_second"])
    return {"name": "gpu_sampling", "bayes_s": detail[best]["seconds"],
            "baseline_s": detail["nutpie"]["seconds"],
            "ratio": detail[best]["ess_per_second"] / detail["nutpie"]["ess_per_second"],
            "best_jax_sampler": best, "detail": detail,
            "note": "ratio: ESS/s of the best JAX sampler on the GPU over nutpie's on the "
                    "CPU (min bulk ESS of C1, C2; incl. compilation)"}


CASES = {"dense_fit_vs_bootstrap": case_dense_fit_vs_bootstrap,
         "speculative_fit": case_speculative_fit, "decisions": case_decisions,
         "simulator": case_simulator, "sampler_choice": case_sampler_choice,
         "hierarchical_fit": case_hierarchical_fit, "check_leave_out_2": case_check_leave_out_2,
         "scaling": case_scaling, "parallel_refits": case_parallel_refits,
         "approximate": case_approximate, "gpu_sampling": case_gpu_sampling}
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
        if "skipped" in case:
            print(f"{case['name']:<26} skipped: {case['skipped']}")
            continue
        extra = {k: v for k, v in case.items()
                 if k not in {"name", "bayes_s", "baseline_s", "ratio"}}
        print(f"{case['name']:<26} {case['bayes_s']:>12.2f} {case['baseline_s']:>11.2f} "
              f"{case['ratio']:>8.2f}  {json.dumps(extra, default=float)[:160]}")
    print(f"total {document['total_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
