"""How well do the latency laws describe sweeps they were not written for?

    .venv/bin/python examples/vidur/evaluate.py [--csv examples/vidur/vidur_dense.csv]
        [--models dense,dense-discrepancy,dense-discrepancy:t,dense-roofline]
        [--fraction 0.63] [--out vidur-out] [--quick]

For each model: a fit to every point (held-in 90% predictive coverage, R^2 per group,
PSIS-LOO) and a fit to each group's rates up to ``--fraction`` of its highest measured
rate, predicting the rest (held-out coverage). The sweeps run from 5% to 95% of each
setup's ceiling, so the default 0.63 of the top rate is 60% of the ceiling. Prints one
table per model and a comparison, writes evaluation.json and the predictive-check
figures of each model's hold-out fit to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

from bayesspec import misfit
from bayesspec.checks import loo_summary
from bayesspec.data import read_tidy
from bayesspec.inference import SamplerSettings
from bayesspec.plots import predictive_check_plot, save_figure
from bayesspec.workflow import fit

HERE = Path(__file__).resolve().parent
VARIANTS = {"dense": ("dense", {}), "dense-discrepancy": ("dense-discrepancy", {}),
            "dense-discrepancy:t": ("dense-discrepancy", {"likelihood": "student_t"}),
            "dense-roofline": ("dense-roofline", {})}

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--csv", default=str(HERE / "vidur_dense.csv"))
parser.add_argument("--models", default=",".join(VARIANTS))
parser.add_argument("--fraction", type=float, default=0.63)
parser.add_argument("--out", default="vidur-out")
parser.add_argument("--quick", action="store_true", help="2 chains x 300 draws")
args = parser.parse_args()
out = Path(args.out)
out.mkdir(exist_ok=True)
warnings.filterwarnings("ignore")
data = read_tidy(args.csv)
settings = (SamplerSettings(draws=300, tune=400, chains=2, seed=1, progress=False)
            if args.quick else SamplerSettings(seed=1, progress=False))
low, high = misfit.split_by_rate(data, args.fraction)
report = {"csv": args.csv, "fraction": args.fraction, "points": int(len(data)),
          "models": {}}
for name in args.models.split(","):
    model, config = VARIANTS[name]
    started = time.perf_counter()
    full = fit(data, model, settings=settings, config=config)
    held_in = misfit.predictive_check(full)
    part = fit(low, model, settings=settings, config=config)
    held_out = misfit.predictive_check(part, high)
    loo = loo_summary(full)
    points = held_out.pop("_points")
    held_in.pop("_points")
    figures = predictive_check_plot(points, held_out["groups"])
    plots = [save_figure(f, out / f"ppc_{name.replace(':', '_')}_{i + 1}.png")
             for i, f in enumerate(figures)]
    groups = []
    for a, b in zip(held_in["groups"], held_out["groups"]):
        groups.append({"group": a["group"], "r2": a["held_in"]["r2"],
                       "held_in": a["held_in"]["coverage"],
                       "held_out": b.get("held_out", {}).get("coverage"),
                       "residual_by_utilisation": a["residual_by_utilisation"],
                       "flagged_held_out": b["flagged"]})
    outs = [g["held_out"] for g in groups if g["held_out"] is not None]
    entry = {"held_in": held_in["pooled"]["held_in"]["coverage"],
             "held_out": held_out["pooled"]["held_out"]["coverage"],
             "groups_r2_ge_0.98": sum(g["r2"] >= 0.98 for g in groups),
             "groups_held_out_below_0.7": sum(c < 0.7 for c in outs),
             "elpd_loo": loo["elpd_loo"], "elpd_se": loo["se"],
             "pareto_k_bad": loo["pareto_k_bad"],
             "convergence": [full.diagnostics["text"], part.diagnostics["text"]],
             "seconds": round(time.perf_counter() - started, 1), "groups": groups,
             "plots": plots}
    report["models"][name] = entry
    print(f"\n== {name} ({entry['seconds']:.0f} s): held-in 90% coverage {entry['held_in']:.3f}, "
          f"held-out {entry['held_out']:.3f}; R^2 >= 0.98 in {entry['groups_r2_ge_0.98']} of "
          f"{len(groups)} groups; elpd_loo {loo['elpd_loo']:.1f} +- {loo['se']:.1f}")
    print(f"   convergence: {entry['convergence'][0][:100]}")
    print(f"   {'group':38s} {'R^2':>7s} {'in':>5s} {'out':>5s}  residual by load (low/mid/high)")
    for g in groups:
        pattern = " ".join(f"{v:+.3f}" for v in g["residual_by_utilisation"].values())
        held = "  -  " if g["held_out"] is None else f"{g['held_out']:5.2f}"
        print(f"   {g['group'][:38]:38s} {g['r2']:7.4f} {g['held_in']:5.2f} {held}  {pattern}")

print("\nmodel                  held-in  held-out  groups<70% out  R^2>=0.98  elpd_loo")
for name, e in report["models"].items():
    print(f"{name:22s} {e['held_in']:7.3f}  {e['held_out']:8.3f}  {e['groups_held_out_below_0.7']:14d}"
          f"  {e['groups_r2_ge_0.98']:9d}  {e['elpd_loo']:.1f} +- {e['elpd_se']:.1f}")
(out / "evaluation.json").write_text(json.dumps(report, indent=1, default=float))
print(f"\nwrote {out / 'evaluation.json'}")
