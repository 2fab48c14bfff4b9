"""Known truth for the sweep's run effect (issue 34): sweeps that replay one arrival
pattern at every rate (``synthetic.generate_shared_run_sweeps``: each point's error its
run's, ``laws.run_mean_log_sd``, two thirds of its variance shared by the sweep and, with
``--common-share`` (the default: all of it), by every sweep of the replicate), fitted
below half of each pole with ``run_effect`` "none" and "shared". Printed per option: fits
converged, the 90% intervals of C1 and C2 that hold the truth, and the held-out points
inside their 90% predictive intervals with the intervals' median width.

    .venv/bin/python benchmarks/run_effect_recovery.py [--replicates 10] [--first-seed 200]
        [--common-share 0.67]
"""

from __future__ import annotations

import argparse

import numpy as np

from bayesspec.checks import misfit
from bayesspec.data import prepare
from bayesspec.inference import SamplerSettings
from bayesspec.laws import RUN_EFFECT_SHARE
from bayesspec.simulate.synthetic import generate_shared_run_sweeps, placeholder_truth
from bayesspec.checks.replicates import fit_same_design

N_RATES = 10


def replicate(seed: int, common_share: float):
    truth = placeholder_truth().iloc[0:48:12].reset_index(drop=True)
    raw = generate_shared_run_sweeps(truth, seed=seed, latency_cv=0.1, n_requests=1000,
                                     top_utilisation=0.85, n_rates=N_RATES,
                                     common_share=common_share)
    data = prepare(raw.drop(columns=["run_effect_true"]))
    utilisation = data["rps"].to_numpy(float) * np.repeat(truth["C2"].to_numpy(float), N_RATES)
    return truth, data.loc[utilisation <= 0.5].reset_index(drop=True), data.loc[utilisation > 0.5]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=200)
    parser.add_argument("--common-share", type=float, default=RUN_EFFECT_SHARE,
                        help="the truth's share of the run variance that every sweep of a "
                             "replicate shares (one seed serving them all); the fits take "
                             "the same")
    args = parser.parse_args(argv)
    sets = [replicate(seed, args.common_share)
            for seed in range(args.first_seed, args.first_seed + args.replicates)]
    print("| run_effect | converged | C1 covered | C2 covered | held-out covered | "
          "held-out median width |\n|---|---|---|---|---|---|")
    for option in ("none", "shared"):
        fits = fit_same_design([low for _, low, _ in sets],
                               config={"run_effect": option,
                                       "run_effect_common_share": args.common_share},
                               settings=SamplerSettings(seed=1, progress=False))
        inside = {"C1": [], "C2": []}
        held, width, converged = [], [], 0
        for fitted, (truth, _, high) in zip(fits, sets):
            converged += bool(fitted.diagnostics["converged"])
            for name in inside:
                lo, hi = np.quantile(fitted.draws(name), [0.05, 0.95], axis=0)
                inside[name].extend((lo <= truth[name]) & (truth[name] <= hi))
            points = misfit.predictive_check(fitted, high)["_points"]
            points = points.loc[points["held_out"]]
            held.extend(points["inside"])
            width.extend((points["hi"] - points["lo"]) / points["predicted"])
        print(f"| {option} | {converged}/{len(fits)} | {np.mean(inside['C1']):.3f} of "
              f"{len(inside['C1'])} | {np.mean(inside['C2']):.3f} | {np.mean(held):.3f} of "
              f"{len(held)} | {np.median(width):.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
