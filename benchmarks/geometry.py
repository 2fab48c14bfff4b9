"""Speed harness for the sampler: where does the hierarchical model spend its gradients?

    python benchmarks/geometry.py --seeds 1,2,3          # the model's defaults, bundled data
    python benchmarks/geometry.py --scaling-rates 144 --seeds 1     # the 16k-row design
    python benchmarks/geometry.py --chains 2 --draws 1000 --tune 1000 \
        --config centred_deviations=c1v,c2v,c2p --config cell_deviations=centred

Fits the hierarchical model on the bundled dataset (dense + speculative, 1044 rows; or
the synthetic scaling design with ``--scaling-rates``) and prints, per run: gradient
evaluations per draw (tree sizes), the step size, the minimum bulk ESS over every
posterior variable, ESS per gradient evaluation (the measure of a parameterisation that
does not depend on how busy the machine is), R-hat, divergences, sampling seconds and
the slowest scalar parameters.

``--config`` overrides the model's ``default_config`` (comma-separated values become
tuples, () the empty one; numbers become ints or floats; none becomes None), so
parameterisations can be compared in one run. ``run.py``'s scaling case reuses
``geometry`` and ``timed_fit`` from here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--chains", type=int)
    parser.add_argument("--draws", type=int)
    parser.add_argument("--tune", type=int)
    parser.add_argument("--target-accept", type=float)
    parser.add_argument("--adaptation", choices=["diag", "low_rank"])
    parser.add_argument("--seeds", default="1")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--scaling-rates", type=int, metavar="N",
                        help="fit the scaling case's synthetic design (7 verifiers x 16 "
                             "cells) with N rates per sweep instead of the bundled data")
    parser.add_argument("--bundled", default="dense,speculative", metavar="KINDS",
                        help="which bundled datasets to fit (default: dense,speculative)")
    parser.add_argument("--scaling-verifiers", metavar="A,B,...",
                        help="with --scaling-rates: these verifiers instead of the seven")
    args = parser.parse_args(argv)
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


if __name__ == "__main__":
    raise SystemExit(main())
