"""MoE correction on the bundled simulator data: low-load R^2, PSIS-LOO of the variants.

    python examples/moe_low_load.py [--quick] [--out DIR] [--skip-speculative]

Fits to bayesspec/datasets/sim_moe.csv:

- the dense law (``--model dense``: one C1, C2 per sweep, eq. 1);
- the MoE-aware law (``--model moe``, eq. 4) in its variants: T = RPS*L (paper) or
  1 + RPS*L (``moe_token_offset``), k or k + 1 tokens per verification (``moe_verify_tokens``);
- the speculative model (eq. 3 across (alpha, k)) with and without the MoE split of its
  costs (``moe_split``).

Reports R^2 of the posterior-mean latency on the low-load half of each sweep (points at
or below the sweep's median unsaturated rate), pooled per verifier as in the paper, fit
times and diagnostics, and compares every fit by PSIS-LOO (az.compare: all fits share the
same observations). Writes the low-load zoom and phi-vs-RPS figures and moe_report.json.
"""

import argparse
import json
import time
from pathlib import Path

import arviz as az

from bayesspec import datasets
from bayesspec.checks import r_squared
from bayesspec.data import included, read_tidy
from bayesspec.inference import SamplerSettings, add_log_likelihood
from bayesspec.reporting.plots import expert_coverage_plot, moe_low_load_plot, save_figure
from bayesspec.bayes.workflow import fit

parser = argparse.ArgumentParser()
parser.add_argument("--quick", action="store_true")
parser.add_argument("--out", default="moe-out")
parser.add_argument("--skip-speculative", action="store_true")
args = parser.parse_args()
out = Path(args.out)
out.mkdir(exist_ok=True)
data = read_tidy(datasets.path("moe"))
draws = 300 if args.quick else 1000
settings = SamplerSettings(draws=draws, tune=draws, chains=4, seed=3, progress=False)


def low_load_r2(result):
    rows = included(result.data)
    per_verifier = {}
    for verifier, part in rows.groupby("verifier"):
        observed, predicted = [], []
        for label, sweep in part.groupby("group"):
            g = list(result.groups["label"]).index(label)
            low = sweep[sweep["rps"] <= sweep["rps"].median()]
            mean = result.group_curve(g).latency(low["rps"].to_numpy()).mean(axis=0)
            observed += list(low["latency_mean_s"])
            predicted += list(mean)
        per_verifier[verifier] = round(r_squared(observed, predicted), 4)
    return per_verifier


fits_to_run = {
    "dense law": ("dense", {}),
    "moe: T = RPS*L, k+1": ("moe", {"moe_token_offset": 0.0, "moe_verify_tokens": "k+1"}),
    "moe: T = 1 + RPS*L, k+1": ("moe", {"moe_token_offset": 1.0,
                                        "moe_verify_tokens": "k+1"}),
}
if not args.skip_speculative:
    fits_to_run["speculative + MoE split"] = ("speculative", {})
    fits_to_run["speculative, no MoE split"] = ("speculative", {"moe_split": "never"})
fits_to_run["moe: T = RPS*L, k (paper)"] = ("moe", {"moe_token_offset": 0.0,
                                                             "moe_verify_tokens": "k"})

report = {}
fits = {}
started = time.perf_counter()
for name, (model, config) in fits_to_run.items():
    result = fit(data, model, settings=settings, config=config)
    fits[name] = add_log_likelihood(result)
    report[name] = {"model": model, "config": config,
                    "low_load_r2": low_load_r2(result),
                    "fit_seconds": result.tree.attrs["fit_seconds"],
                    "diagnostics": {k: result.diagnostics[k] for k in
                                    ("rhat_max", "ess_bulk_min", "divergences")}}
    print(name, report[name], flush=True)
    # written after every fit: a long run that is cut short still leaves its figures
    if len(fits) > 1:
        comparison = az.compare({n: f.tree for n, f in fits.items()})
        report["loo_compare"] = comparison.reset_index().to_dict("records")
    (out / "moe_report.json").write_text(json.dumps(report, indent=2, default=str))
    result.save(out / (name.replace(" ", "_").replace(":", "").replace(",", "")
                       .replace("*", "x").replace("=", "").replace("(", "").replace(")", "")
                       .replace("+", "plus") + ".nc"))

comparison = az.compare({name: f.tree for name, f in fits.items()})
print(comparison.to_string())
report["loo_compare"] = comparison.reset_index().to_dict("records")
report["seconds"] = time.perf_counter() - started
(out / "moe_report.json").write_text(json.dumps(report, indent=2, default=str))

best_moe = max((n for n in fits if n.startswith("moe")),
               key=lambda n: comparison.loc[n, "elpd"])
save_figure(moe_low_load_plot(fits["dense law"], fits[best_moe]), out / "moe_low_load.png")
save_figure(expert_coverage_plot(fits[best_moe]), out / "expert_coverage.png")
