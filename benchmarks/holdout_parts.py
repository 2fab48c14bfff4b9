"""The held-out check of one set, and what each held-out point's predictive sd is made of
(issue 34): the dense fit at the defaults with the Vidur decode profiles, to each group's
rates below ``--fraction`` of its top rate, then ``misfit.predictive_check`` on the rates
above (as ``examples/vidur/evaluate.py --fraction`` does, without the fit to every
point). Printed: held-out coverage, groups below 0.7, median width, the noise scales'
posterior medians, and per held-out point the sd of the law alone, of the law with the
run effect, the point's own run error, the noise, their total and the residual over it
(z).

    .venv/bin/python benchmarks/holdout_parts.py --csv /tmp/capped_seed1.csv \
        --opt run_effect=shared
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from bayesspec.checks import misfit
from bayesspec.data import included, read_tidy, row_group_labels
from bayesspec.inference import SamplerSettings
from bayesspec.bayes.workflow import fit
from bayesspec.bayes.base import run_spread
from bayesspec.laws import run_mean_log_sd

VIDUR_PROFILES = Path(__file__).resolve().parents[1] / "examples" / "vidur" / "decode_profiles.csv"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", required=True)
    parser.add_argument("--opt", action="append", default=[],
                        help="a dense model option, OPTION=VALUE (repeatable)")
    parser.add_argument("--fraction", type=float, default=0.6)
    parser.add_argument("--quick", action="store_true", help="2 chains x 300 draws")
    parser.add_argument("--tune", type=int, default=None,
                        help="tuning steps per chain (default: the model's)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    config = {"decode_profile": str(VIDUR_PROFILES)}
    for option in args.opt:
        key, _, value = option.partition("=")
        try:
            config[key] = float(value)
        except ValueError:
            config[key] = value
    data = read_tidy(args.csv)
    low, high = misfit.split_by_rate(data, args.fraction)
    settings = (SamplerSettings(draws=300, tune=400, chains=2, seed=1, progress=False)
                if args.quick else SamplerSettings(seed=1, progress=False, tune=args.tune))
    started = time.perf_counter()
    part = fit(low, "dense", settings=settings, config=config)
    check = misfit.predictive_check(part, high)
    points = check.pop("_points")
    held = points.loc[points["held_out"]]
    groups = [g["held_out"]["coverage"] for g in check["groups"] if "held_out" in g]
    width = ((held["hi"] - held["lo"]) / held["predicted"]).median()
    noise = {name: round(float(np.median(part.draws(name))), 4)
             for name in ("noise_base", "noise_load", "run_own_length")
             if name in part.posterior}
    print(f"{args.csv} {args.opt}: held-out {check['pooled']['held_out']['coverage']:.3f} of "
          f"{len(held)}, groups below 0.7 {sum(c < 0.7 for c in groups)}/{len(groups)}, "
          f"width {width:.3f}, held-in {check['pooled']['held_in']['coverage']:.3f}; {noise}; "
          f"{part.diagnostics['text']}; {time.perf_counter() - started:.0f} s")
    table = parts_table(part, high)
    print(table.round(4).to_string())
    medians = table[["law_sd", "law+run_sd", "own_sd", "noise_sd", "total"]].median()
    print("median parts:", medians.round(4).to_dict(),
          f"mean z {table['z'].mean():.3f}, mean z^2 {(table['z'] ** 2).mean():.3f}")
    return 0


def parts_table(part, high: pd.DataFrame) -> pd.DataFrame:
    """Per held-out point, the log sd of each part of its predictive and its z."""
    rows = included(high).copy()
    rows["group"] = row_group_labels(rows, part.groups)
    out = []
    for g, label in enumerate(part.groups["label"]):
        members = rows.loc[rows["group"] == label]
        if members.empty:
            continue
        curve = part.group_curve(g)
        rps = members["rps"].to_numpy(float)
        law = curve.latency(rps)
        noise = curve.noise_sigma(rps, law, 0.0)
        cv, count = run_spread(members)
        run_sd = run_mean_log_sd(np.asarray(cv)[None], np.asarray(count)[None], rps * law)
        effect = (curve.run_effect if curve.run_effect is not None
                  else np.zeros(law.shape[0]))
        share = curve.run_share if curve.run_effect is not None else 0.0
        own_mean, own_variance = np.zeros((1, len(rps))), np.ones((1, len(rps)))
        if getattr(curve, "run_own", None) is not None:
            # the point's own part, conditioned on the fitted neighbours' (run_own_length)
            own_mean, own_variance = curve.run_own.at(rps)
        moved = np.log(law) + run_sd * (effect[:, None] + np.sqrt(1 - share) * own_mean)
        residual = np.log(members["latency_mean_s"].to_numpy(float)) - np.nanmedian(moved, axis=0)
        out.append(pd.DataFrame({
            "group": label[:30], "rps": rps, "law_sd": np.nanstd(np.log(law), axis=0),
            "law+run_sd": np.nanstd(moved, axis=0),
            "own_sd": np.sqrt((1 - share) * np.median(own_variance, axis=0))
            * np.nanmedian(run_sd, axis=0),
            "noise_sd": np.nanmedian(noise, axis=0), "resid": residual}))
    table = pd.concat(out, ignore_index=True)
    table["total"] = np.sqrt(table["law+run_sd"] ** 2 + table["own_sd"] ** 2
                             + table["noise_sd"] ** 2)
    table["z"] = table["resid"] / table["total"]
    return table


if __name__ == "__main__":
    raise SystemExit(main())
