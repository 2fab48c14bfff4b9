"""Speed harness: what the engine cap's slot queue costs the README's `tails` fit.

The gradient with and without it, and (``--fits``) one first pass of each way to fit at
0.9.

    bayesspec simulate --grid examples/slo.toml -o slo.csv
    python -W ignore benchmarks/slot_queue_cost.py slo.csv            # gradients, 1 min
    python -W ignore benchmarks/slot_queue_cost.py slo.csv --fits     # + three fits, 8 min

Three ways to fit the same rows:
- "in the likelihood": the slot queue wherever the cap could move the points at twice
  their load (the rule when nothing checks the draws);
- "checked on the draws": what `fit` does, the cap left out where the fitted points stay
  below where it moves the latency, and the draws checked afterwards
  (``LatencyModel.cap_reach_share``), reweighted or refitted when the cap reaches them;
- "cap unknown": max_num_seqs and kv_cache_tokens dropped, eq. (1) alone.
The gradient is timed on PyTensor's C backend (``compile_dlogp``) at the model's initial
point; the fits run nutpie (numba) as `fit` does, one first pass at target_accept 0.9
(no retry), seed 1, chains started as the model chooses.

Prints seconds per gradient and their ratio; per fit its seconds (compilation included),
divergences, mean leapfrog steps per draw, and C2's and the p99's exponent's posterior
medians and 90% intervals, so that the posteriors can be compared.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bayesspec.bayes import get_model_class
from bayesspec.data import read_tidy
from bayesspec.inference import SamplerSettings

CAP_COLUMNS = ["max_num_seqs", "kv_cache_tokens"]


def gradient_seconds(data, repeats: int = 200) -> float:
    pm_model = get_model_class("tails")(None).build(data)   # the unchecked rule
    gradient = pm_model.compile_dlogp()
    point = pm_model.initial_point()
    gradient(point)
    started = time.perf_counter()
    for _ in range(repeats):
        gradient(point)
    return (time.perf_counter() - started) / repeats


def interval(values) -> str:
    low, mid, high = np.quantile(values, [0.05, 0.5, 0.95])
    return f"{mid:.5g} [{low:.5g}, {high:.5g}]"


def first_pass(data, checked: bool) -> dict:
    model = get_model_class("tails")(None)
    model.checks_cap_on_draws = checked
    fit = model.fit(data, SamplerSettings(seed=1, target_accept=0.9))
    stats = fit.tree["sample_stats"]
    groups = range(len(fit.groups))
    return {"seconds": float(fit.tree.attrs["fit_seconds"]),
            "caps in the likelihood": int(fit.groups["cap_in_likelihood"].sum()),
            "share of draws the cap would move": fit.tree.attrs.get("cap_reach_share"),
            "what fit did": fit.tree.attrs.get("cap_check"),
            "importance weights (effective share, largest in even shares)": (
                fit.tree.attrs.get("cap_importance_ess_share"),
                fit.tree.attrs.get("cap_importance_max_weight")),
            "divergences": int(stats["diverging"].values.sum()),
            "steps per draw": round(float(stats["n_steps"].values.mean()), 1),
            "C2": [interval(fit.draws("C2", g)) for g in groups],
            "p99 exponent": [interval(np.asarray(fit.posterior["tail_exponent"].sel(
                metric="p99").isel(group=g).values).ravel()) for g in groups],
            "verdict": fit.diagnostics["text"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", help="the README's SLO sweeps (bayesspec simulate --grid "
                        "examples/slo.toml)")
    parser.add_argument("--fits", action="store_true", help="also one first pass of each")
    args = parser.parse_args()
    with_cap = read_tidy(args.csv)
    without = with_cap.drop(columns=[c for c in CAP_COLUMNS if c in with_cap.columns])
    timed = {"with the cap": gradient_seconds(with_cap), "without": gradient_seconds(without)}
    for label, seconds in timed.items():
        print(f"gradient {label}: {1000 * seconds:.3f} ms")
    print(f"ratio with / without: {timed['with the cap'] / timed['without']:.2f}")
    if args.fits:
        for label, data, checked in (("in the likelihood", with_cap, False),
                                     ("checked on the draws", with_cap, True),
                                     ("cap unknown", without, True)):
            print(f"first pass, {label}:")
            for key, value in first_pass(data, checked).items():
                print(f"  {key}: {value}")


if __name__ == "__main__":
    main()
