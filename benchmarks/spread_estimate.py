"""The moment estimate that chooses c2p's parameterisation, on data with a known spread.

    .venv/bin/python benchmarks/spread_estimate.py [--seeds 8]

For each true spread of the verifiers' c2p (log-normal, ``hierarchical_truth``'s
``c2p_verifier_sd``; 7 verifiers x 16 cells x 9 rates), over replicates: the estimated
spread (median and range), the replicates' own sample spread, the measurement error and
how often the rule centres c2p's deviations. Then the bundled data's estimate.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def estimate(data):
    from bayesspec.bayes import HierarchicalLatencyModel
    from bayesspec.bayes.spread_estimate import c2p_spread

    inputs = HierarchicalLatencyModel().prepare(data)
    return c2p_spread(inputs.rows, inputs.groups, inputs.group_index)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--spreads", default="0,0.05,0.1,0.2,0.4")
    args = parser.parse_args(argv)

    from bayesspec.bayes import HierarchicalLatencyModel
    from bayesspec.data import prepare
    from bayesspec.simulate.synthetic import generate_sweeps, hierarchical_truth
    from geometry import bundled_data

    prior_scale = HierarchicalLatencyModel.default_config["system_spread_scale"]
    print("| true spread | sample spread (mean) | estimate: median (min-max) | "
          "measurement error (mean) | centred |")
    print("|---|---|---|---|---|")
    for spread in (float(s) for s in args.spreads.split(",")):
        rows = []
        for seed in range(args.seeds):
            truth = hierarchical_truth(c2p_verifier_sd=spread, seed=seed)
            found = estimate(prepare(generate_sweeps(truth, n_rates=9, seed=seed)))
            drawn = np.array(list(truth.attrs["c2p_verifier_deviation"].values()))
            rows.append((found.spread, found.measurement_error, drawn.std(ddof=1),
                         bool(found.centre(prior_scale))))
        values = np.array(rows, float)
        print(f"| {spread:g} | {values[:, 2].mean():.3f} | {np.median(values[:, 0]):.3f} "
              f"({values[:, 0].min():.3f}-{values[:, 0].max():.3f}) | "
              f"{values[:, 1].mean():.3f} | {int(values[:, 3].sum())} of {args.seeds} |")
    for kinds in ("dense,speculative", "dense"):
        found = estimate(bundled_data(kinds))
        print(f"bundled {kinds}: spread {found.spread:.4f}, measurement error "
              f"{found.measurement_error:.4f}, {found.verifiers} verifiers, centred: "
              f"{found.centre(prior_scale)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
