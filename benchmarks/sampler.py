"""Sampler harness: default fits' convergence and the hierarchical model's geometry.

    python benchmarks/sampler.py convergence --seeds 5     # about 10 minutes on 2 cores
    python benchmarks/sampler.py convergence --quick --json
    python benchmarks/sampler.py geometry --seeds 1,2,3    # the model's defaults, bundled data
    python benchmarks/sampler.py geometry --scaling-rates 144 --seeds 1    # the 16k-row design
    python benchmarks/sampler.py geometry --chains 2 --draws 1000 --tune 1000 \
        --config centred_deviations=c1v,c2v,c2p --config cell_deviations=centred

``convergence``: divergences and R-hat of `bayesspec fit` at its defaults on simulator
sweeps with 1, 2, 4 and 16 groups, dense and speculative, over several seeds. The data
are what a user makes first: `bayesspec simulate` sweeps (GuideLLM-like: a synchronous
point, 7 Poisson rates, a throughput point) of Qwen3-8B on H100.

- dense, G groups: G (prefill, decode) pairs of plain decoding;
- speculative, G groups: G (alpha, k) configurations of EAGLE-3 drafting plus the dense
  baseline at the same lengths (G = 1 is the one-sweep SD file of the README).

Each fit uses the model's defaults (4 chains, its tune/draws/target_accept) and a new
sampler seed and simulator seed per replicate. Prints per fit: divergences, R-hat max
and bulk-ESS min over the decision quantities (C1, C2, cycle coefficients, noise; what
answers are computed from) and over every variable, the verdict and seconds; then one
summary row per (model, groups).

``geometry``: fits the hierarchical model on the bundled dataset (dense + speculative,
1044 rows; or the synthetic scaling design with ``--scaling-rates``) and prints, per run:
gradient evaluations per draw (tree sizes), the step size, the minimum bulk ESS over
every posterior variable, ESS per gradient evaluation (the measure of a parameterisation
that does not depend on how busy the machine is), R-hat, divergences, sampling seconds
and the slowest scalar parameters. ``--config`` overrides the model's ``default_config``
(comma-separated values become tuples, () the empty one; numbers become ints or floats;
none becomes None), so parameterisations can be compared in one run. ``run.py``'s
scaling case reuses ``geometry`` and ``timed_fit`` from here.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PAIRS = [(p, d) for p in (256, 512, 1024, 2048) for d in (128, 256, 512, 1024)]
CONFIGS = [(a, k) for a in (0.8, 0.6, 0.7, 0.9) for k in (3, 2, 4, 1)]
GROUPS = (1, 2, 4, 16)
BAYESSPEC = Path(sys.executable).with_name("bayesspec")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def simulate(folder: Path, name: str, seed: int, *options: str) -> Path:
    path = folder / f"{name}.csv"
    subprocess.run([str(BAYESSPEC), "simulate", "--verifier", "Qwen3-8B", "--seed",
                    str(seed), "--quiet", "-o", str(path), *options], check=True,
                   capture_output=True, text=True)
    return path


def dataset(model: str, groups: int, seed: int, folder: Path):
    import pandas as pd

    from bayesspec.data import read_tidy

    parts = []
    if model == "dense":
        for i, (prefill, decode) in enumerate(PAIRS[:groups]):
            parts.append(simulate(folder, f"d{i}", seed * 100 + i, "--prefill", str(prefill),
                                  "--decode", str(decode)))
    else:
        parts.append(simulate(folder, "base", seed * 100, "--prefill", "512", "--decode",
                              "512"))
        for i, (alpha, k) in enumerate(CONFIGS[:groups]):
            parts.append(simulate(folder, f"s{i}", seed * 100 + 1 + i, "--prefill", "512",
                                  "--decode", "512", "--k", str(k), "--alpha", str(alpha)))
    combined = folder / f"{model}_{groups}_{seed}.csv"
    pd.concat([pd.read_csv(p) for p in parts]).to_csv(combined, index=False)
    return read_tidy(combined)


def one_fit(model: str, groups: int, seed: int) -> dict:
    from bayesspec.inference import SamplerSettings
    from bayesspec.bayes.workflow import fit

    with tempfile.TemporaryDirectory() as folder:
        data = dataset(model, groups, seed, Path(folder))
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fit(data, model, settings=SamplerSettings(seed=seed, progress=False))
    verdict = result.diagnostics
    return {"model": model, "groups": groups, "seed": seed,
            "divergences": verdict["divergences"],
            "rhat_decision": verdict["decision"]["rhat_max"],
            "ess_decision": verdict["decision"]["ess_bulk_min"],
            "rhat_all": verdict["rhat_max"], "ess_all": verdict["ess_bulk_min"],
            "worst_other": verdict["other"]["worst"], "status": verdict["status"],
            "seconds": round(time.perf_counter() - started, 1)}


def summarise(rows: list[dict]) -> list[dict]:
    out = []
    for model in ("dense", "speculative"):
        for groups in GROUPS:
            these = [r for r in rows if r["model"] == model and r["groups"] == groups]
            if not these:
                continue
            out.append({"model": model, "groups": groups, "fits": len(these),
                        "zero_divergences": sum(r["divergences"] == 0 for r in these),
                        "rhat_decision_max": max(r["rhat_decision"] for r in these),
                        "rhat_decision_ok": sum(r["rhat_decision"] <= 1.01 for r in these),
                        "rhat_all_max": max(r["rhat_all"] for r in these),
                        "usable": sum(r["status"] != "not converged" for r in these),
                        "seconds_median": float(np.median([r["seconds"] for r in these]))})
    return out


def convergence(args) -> int:
    seeds = 2 if args.quick else args.seeds
    rows = []
    started = time.perf_counter()
    print(f"{'model':<12} {'groups':>6} {'seed':>4} {'div':>4} {'R-hat dec':>9} "
          f"{'ESS dec':>8} {'R-hat all':>9} {'ESS all':>8}  {'verdict':<20} {'s':>6}",
          file=sys.stdout if not args.json else sys.stderr, flush=True)
    for model in args.models.split(","):
        for groups in map(int, args.groups.split(",")):
            for seed in range(1, seeds + 1):
                row = one_fit(model, groups, seed)
                rows.append(row)
                print(f"{model:<12} {groups:>6} {seed:>4} {row['divergences']:>4} "
                      f"{row['rhat_decision']:>9.4f} {row['ess_decision']:>8.0f} "
                      f"{row['rhat_all']:>9.4f} {row['ess_all']:>8.0f}  {row['status']:<20} "
                      f"{row['seconds']:>6.1f}",
                      file=sys.stdout if not args.json else sys.stderr, flush=True)
    summary = summarise(rows)
    total = len(rows)
    clean = sum(r["divergences"] == 0 for r in rows)
    document = {"fits": rows, "summary": summary, "zero_divergence_share": clean / total,
                "total_s": round(time.perf_counter() - started, 1)}
    if args.json:
        print(json.dumps(document, indent=2, default=float))
        return 0
    print()
    print(f"{'model':<12} {'groups':>6} {'fits':>5} {'0 div':>6} {'R-hat dec<=1.01':>16} "
          f"{'R-hat dec max':>14} {'R-hat all max':>14} {'usable':>7} {'median s':>9}")
    for s in summary:
        print(f"{s['model']:<12} {s['groups']:>6} {s['fits']:>5} {s['zero_divergences']:>6} "
              f"{s['rhat_decision_ok']:>16} {s['rhat_decision_max']:>14.4f} "
              f"{s['rhat_all_max']:>14.4f} {s['usable']:>7} {s['seconds_median']:>9.1f}")
    print(f"fits with 0 divergences: {clean}/{total} ({clean / total:.0%}); "
          f"total {document['total_s']:.0f} s")
    return 0



def _value(text: str):
    if "," in text:
        return tuple(t for t in text.split(",") if t)
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return {"true": True, "false": False, "none": None, "()": ()}.get(text.lower(), text)


def bundled_data(kinds: str = "dense,speculative"):
    from bayesspec import datasets
    from bayesspec.data import prepare

    return prepare(pd.concat([pd.read_csv(datasets.path(kind)) for kind in kinds.split(",")],
                             ignore_index=True))


def scaling_data(n_rates: int, verifiers: str | None = None):
    """The scaling case's design (7 verifiers x 16 dense cells) at ``n_rates`` per sweep;
    ``verifiers``: a comma-separated subset of its verifiers (or other catalog cards)."""
    from bayesspec.data import prepare
    from bayesspec.simulate.synthetic import generate_sweeps, hierarchical_truth

    truth = hierarchical_truth(*([tuple(verifiers.split(","))] if verifiers else []))
    return prepare(generate_sweeps(truth, n_rates=n_rates, seed=2))


def divergence_locations(tree, top: int = 5) -> list[dict]:
    """Scalars whose divergent draws sit furthest from their posterior mean (in posterior
    sds): where the sampler's step size is too large for the curvature."""
    diverging = tree["sample_stats"]["diverging"].values.ravel().astype(bool)
    if not diverging.any():
        return []
    posterior = tree["posterior"].to_dataset()
    shifts = []
    for name in posterior.data_vars:
        values = posterior[name].values
        flat = values.reshape(values.shape[0] * values.shape[1], -1)
        sd = flat.std(axis=0)
        shift = (flat[diverging].mean(axis=0) - flat.mean(axis=0)) / np.where(sd > 0, sd, 1)
        for i, z in enumerate(shift):
            shifts.append((abs(float(z)), float(z),
                           f"{name}[{i}]" if flat.shape[1] > 1 else name))
    shifts.sort(reverse=True)
    return [{"variable": n, "shift_sd": round(z, 2)} for _, z, n in shifts[:top]]


def geometry(tree, top: int = 8) -> dict:
    import arviz as az

    stats = tree["sample_stats"]
    steps = stats["n_steps"].values
    draws = steps.size
    posterior = tree["posterior"].to_dataset()
    ess = az.ess(posterior, method="bulk")
    rhat = az.rhat(posterior)
    scalars = []
    for name in posterior.data_vars:
        values = np.atleast_1d(ess[name].values).ravel()
        rhats = np.atleast_1d(rhat[name].values).ravel()
        for i, (e, r) in enumerate(zip(values, rhats)):
            if np.isfinite(e):
                scalars.append((float(e), float(r), f"{name}[{i}]" if values.size > 1 else name))
    scalars.sort()
    ess_min = scalars[0][0]
    rhat_max = max(r for _, r, _ in scalars if np.isfinite(r))
    warm = tree.get("warmup_sample_stats")
    warm_steps = int(warm["n_steps"].values.sum()) if warm is not None else 0
    # A sampling retried at a higher target after divergences (inference.sample_compiled)
    # also paid for the first one: its warm-up and draws count against the ESS.
    discarded = int(tree.attrs.get("gradients_before_retry", 0))
    return {"total_draws": int(draws), "gradients_per_draw": float(steps.mean()),
            "gradients_sampling": int(steps.sum()), "gradients_warmup": warm_steps,
            "max_depth_share": float((stats["depth"].values >= 10).mean())
            if "depth" in stats else None,
            "step_size": float(np.median(stats["step_size"].values)),
            "ess_bulk_min": ess_min, "rhat_max": rhat_max,
            "ess_per_gradient": ess_min / float(steps.sum() + discarded),
            "retried": str(tree.attrs.get("retried", "")),
            "gradients_before_retry": discarded,
            "divergences": int(stats["diverging"].values.sum()),
            "divergent_at": divergence_locations(tree),
            "slowest": [{"variable": n, "ess_bulk": round(e, 1), "rhat": round(r, 4)}
                        for e, r, n in scalars[:top]]}


def timed_fit(pm_model, settings):
    """Compile and sample: the posterior tree, compile seconds, sampling seconds."""
    from bayesspec.inference import compile_model, sample_compiled

    started = time.perf_counter()
    compiled = compile_model(pm_model, settings)
    compile_s = time.perf_counter() - started
    started = time.perf_counter()
    tree = sample_compiled(compiled, settings)
    return tree, compile_s, time.perf_counter() - started


def run(data, config: dict, chains: int | None, draws: int | None, tune: int | None,
        seed: int, target_accept: float | None = None, adaptation: str | None = None) -> dict:
    from bayesspec.bayes import HierarchicalLatencyModel
    from bayesspec.inference import SamplerSettings, settings_for

    model = HierarchicalLatencyModel(config=config)
    settings = settings_for(model, SamplerSettings(chains=chains, draws=draws, tune=tune,
                                                   seed=seed, progress=False,
                                                   target_accept=target_accept,
                                                   adaptation=adaptation))
    pm_model = model.build(data)
    tree, compile_s, sample_s = timed_fit(pm_model, settings)
    out = {"config": {k: list(v) if isinstance(v, tuple) else v for k, v in config.items()},
           "target_accept": settings.target_accept, "adaptation": settings.adaptation,
           "chains": settings.chains, "tune": settings.tune, "draws": settings.draws,
           "seed": seed, "free_parameters": int(sum(np.size(v) for v in
                                                   pm_model.initial_point().values())),
           "compile_s": round(compile_s, 1), "sample_s": round(sample_s, 1),
           "centred_deviations": model.recorded.get("centred_deviations"),
           "c2p_spread_estimate": model.recorded.get("c2p_spread_estimate")}
    out.update(geometry(tree))
    return out


def geometry_runs(args) -> int:
    config = {}
    for item in args.config:
        key, _, value = item.partition("=")
        config[key] = _value(value)
    data = (scaling_data(args.scaling_rates, args.scaling_verifiers) if args.scaling_rates
            else bundled_data(args.bundled))
    for seed in (int(s) for s in args.seeds.split(",")):
        result = run(data, config, args.chains, args.draws, args.tune, seed,
                     args.target_accept, args.adaptation)
        if args.json:
            print(json.dumps(result), flush=True)
            continue
        print(f"seed {seed} {result['config']}: {result['chains']} x ({result['tune']} + "
              f"{result['draws']}), target {result['target_accept']}, "
              f"{result['adaptation']}, {result['free_parameters']} free parameters, "
              f"compile {result['compile_s']} s, sample {result['sample_s']} s")
        estimate = result["c2p_spread_estimate"]
        print(f"  centred verifier deviations: {result['centred_deviations']}" + (
            f" (c2p measured to {estimate['measurement_error']:.3f}, spread estimate "
            f"{estimate['spread']:.3f}, {estimate['verifiers']} verifiers)" if estimate else ""))
        print(f"  gradients/draw {result['gradients_per_draw']:.1f} (max depth "
              f"{result['max_depth_share']:.0%}), step {result['step_size']:.3g}, "
              f"ESS min {result['ess_bulk_min']:.0f}, ESS/gradient "
              f"{result['ess_per_gradient']:.2e}, R-hat {result['rhat_max']:.4f}, "
              f"{result['divergences']} divergences")
        if result["retried"]:
            print(f"  retried: {result['retried']} (ESS per gradient counts the "
                  f"{result['gradients_before_retry']} gradients of the first sampling)")
        print("  slowest: " + ", ".join(f"{s['variable']} {s['ess_bulk']:.0f}"
                                        for s in result["slowest"]), flush=True)
        if result["divergent_at"]:
            print("  divergent draws shifted: " + ", ".join(
                f"{d['variable']} {d['shift_sd']:+.1f} sd" for d in result["divergent_at"]),
                flush=True)
    return 0



def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parts = parser.add_subparsers(dest="part", required=True)
    fits = parts.add_parser("convergence", help="do default fits converge?")
    fits.add_argument("--seeds", type=int, default=5, help="replicates per case (default 5)")
    fits.add_argument("--quick", action="store_true", help="2 seeds")
    fits.add_argument("--models", default="dense,speculative")
    fits.add_argument("--groups", default=",".join(map(str, GROUPS)))
    fits.add_argument("--json", action="store_true", help="one JSON document on stdout")
    shape = parts.add_parser("geometry", help="ESS per gradient of the hierarchical model")
    shape.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    shape.add_argument("--chains", type=int)
    shape.add_argument("--draws", type=int)
    shape.add_argument("--tune", type=int)
    shape.add_argument("--target-accept", type=float)
    shape.add_argument("--adaptation", choices=["diag", "low_rank"])
    shape.add_argument("--seeds", default="1")
    shape.add_argument("--json", action="store_true")
    shape.add_argument("--scaling-rates", type=int, metavar="N",
                       help="fit the scaling case's synthetic design (7 verifiers x 16 "
                            "cells) with N rates per sweep instead of the bundled data")
    shape.add_argument("--bundled", default="dense,speculative", metavar="KINDS",
                       help="which bundled datasets to fit (default: dense,speculative)")
    shape.add_argument("--scaling-verifiers", metavar="A,B,...",
                       help="with --scaling-rates: these verifiers instead of the seven")
    args = parser.parse_args(argv)
    return convergence(args) if args.part == "convergence" else geometry_runs(args)


if __name__ == "__main__":
    sys.exit(main())
