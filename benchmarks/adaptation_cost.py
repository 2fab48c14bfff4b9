"""What one gradient costs inside nutpie, by mass-matrix adaptation (the hierarchical
model at its defaults on the scaling design).

    .venv/bin/python benchmarks/adaptation_cost.py [--scaling-rates 9] [--draws 300]

Prints, for each adaptation, the sampling seconds per gradient evaluation (one chain on
one core, tuning included), the ratio low-rank / diagonal, and low-rank's own work per
draw beyond that (it updates its mass matrix from the draws and their gradients). The gradient called once from Python is printed for scale (it includes the
Python call's overhead, which the sampler does not pay).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scaling-rates", type=int, default=9)
    parser.add_argument("--draws", type=int, default=300)
    args = parser.parse_args(argv)

    import nutpie
    from geometry import scaling_data
    from bayesspec.bayes import HierarchicalLatencyModel
    from bayesspec.inference import log_density

    pm_model = HierarchicalLatencyModel().build(scaling_data(args.scaling_rates))
    compiled = nutpie.compile_pymc_model(pm_model)
    f = log_density(compiled)
    point = np.asarray(compiled.initial_point_func(1), float)
    for _ in range(20):
        f(point)
    repeats = 1000
    started = time.perf_counter()
    for _ in range(repeats):
        f(point)
    bare = (time.perf_counter() - started) / repeats
    print(f"{point.size} parameters, {args.scaling_rates} rates per sweep: one gradient "
          f"called from Python {bare * 1e3:.3f} ms")
    cost, spent = {}, {}
    for adaptation in ("diag", "low_rank"):
        started = time.perf_counter()
        tree = nutpie.sample(compiled, draws=args.draws, tune=args.draws, chains=1, cores=1,
                             seed=1, progress_bar=False, adaptation=adaptation)
        seconds = time.perf_counter() - started
        gradients = int(tree["sample_stats"]["n_steps"].values.sum() +
                        tree["warmup_sample_stats"]["n_steps"].values.sum())
        cost[adaptation] = seconds / gradients
        spent[adaptation] = (seconds, gradients)
        print(f"{adaptation:>9}: {seconds:.1f} s for {gradients} gradients, "
              f"{cost[adaptation] * 1e3:.3f} ms each", flush=True)
    print(f"low-rank / diagonal, per gradient: x{cost['low_rank'] / cost['diag']:.1f}")
    seconds, gradients = spent["low_rank"]
    extra = (seconds - gradients * cost["diag"]) / (2 * args.draws)
    print(f"low-rank's own work beyond diagonal's per-gradient cost: {extra * 1e3:.1f} ms "
          f"per draw ({gradients / (2 * args.draws):.0f} gradients per draw)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
