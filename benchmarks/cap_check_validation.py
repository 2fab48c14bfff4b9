"""`fit`'s check of a cap left out of the sampled likelihood, on sweeps it was not chosen
on (issue 34): is the posterior the one with the cap in the likelihood, and how long
does each take?

    bayesspec simulate --grid examples/slo.toml --seed 7 --max-num-seqs 320 -o near.csv
    bayesspec simulate --grid examples/slo.toml --seed 8 --max-num-seqs 600 -o far.csv
    python -W ignore benchmarks/cap_check_validation.py near.csv far.csv

The check's tolerances and weights were chosen on the README's SLO sweeps
(``bayesspec simulate --grid examples/slo.toml``: seed 0, the KV cap of 445-464); these
use other arrival seeds and other caps. Per file and model (dense, tails), one fit with
the cap's slot queue in the likelihood wherever twice the top point's load would reach
it (the rule without the check, ``checks_cap_on_draws`` off) and one as `fit` does now,
both at target_accept 0.9 without a retry, seed 1. Printed per pair: seconds,
divergences, what `fit` did (``cap_check``), and for C1, C2 (and the summaries' own C2
and exponents in `tails`) the largest shift of a posterior median between the two fits
in units of the first fit's 90% interval, and the range of the ratio of their widths.
"""

from __future__ import annotations

import argparse

import numpy as np

from bayesspec.bayes import get_model_class
from bayesspec.data import read_tidy
from bayesspec.inference import SamplerSettings

COMPARED = ("C1", "C2", "tail_C2", "tail_exponent")


def one_fit(data, model_name: str, checked: bool):
    model = get_model_class(model_name)(None)
    model.checks_cap_on_draws = checked
    return model.fit(data, SamplerSettings(seed=1, target_accept=0.9, progress=False))


def compare(reference, other) -> dict:
    shifts, ratios = [], []
    for name in COMPARED:
        if name not in reference.posterior or name not in other.posterior:
            continue
        ref = reference.posterior[name].stack(sample=("chain", "draw"))
        new = other.posterior[name].stack(sample=("chain", "draw"))
        ref_q = np.quantile(ref.values, [0.05, 0.5, 0.95], axis=-1)
        new_q = np.quantile(new.values, [0.05, 0.5, 0.95], axis=-1)
        width = ref_q[2] - ref_q[0]
        shifts.append(np.max(np.abs(new_q[1] - ref_q[1]) / width))
        ratios.append((new_q[2] - new_q[0]) / width)
    ratios = np.concatenate([np.ravel(r) for r in ratios])
    return {"largest median shift (in 90% widths)": round(float(np.max(shifts)), 3),
            "width ratios": (round(float(ratios.min()), 3), round(float(ratios.max()), 3))}


def describe(fit) -> dict:
    attrs = fit.tree.attrs
    return {"seconds": attrs.get("fit_seconds"),
            "divergences": int(fit.tree["sample_stats"]["diverging"].values.sum()),
            "caps in the likelihood": int(fit.groups["cap_in_likelihood"].sum()),
            "check": attrs.get("cap_check"), "share": attrs.get("cap_reach_share"),
            "effective share": attrs.get("cap_importance_ess_share")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="+")
    parser.add_argument("--models", default="dense,tails")
    args = parser.parse_args()
    for path in args.csv:
        data = read_tidy(path)
        rows = data[~data["excluded"]]
        in_flight = (rows["rps"] * rows["latency_mean_s"]).max()
        print(f"{path}: top point {in_flight:.0f} requests in flight")
        for model_name in args.models.split(","):
            reference = one_fit(data, model_name, checked=False)
            checked = one_fit(data, model_name, checked=True)
            print(f"  {model_name}, cap in the likelihood: {describe(reference)}")
            print(f"  {model_name}, checked on the draws: {describe(checked)}")
            print(f"  {model_name}, posterior against the first: {compare(reference, checked)}")


if __name__ == "__main__":
    main()
