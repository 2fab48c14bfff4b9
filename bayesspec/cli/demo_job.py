"""``bayesspec demo``: the main job end to end on the bundled simulated datasets.

1. Dense sweeps (4 verifiers x 16 prefill/decode pairs): fit the latency law with partial
   pooling, check convergence, write the collapse plot and per-group fits.
2. Speculative sweeps (Qwen3-8B + EAGLE-3, 5 alpha x 5 k + dense, two length pairs): fit
   the six cycle coefficients, then print a deployment summary a person can act on (best
   k at a given acceptance and load, the risk of the batch-1 favourite, where SD stops
   paying), with the speedup bands, C1R/C2R, k* map and the joint-vs-separate check.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from bayesspec import datasets
from bayesspec.data import read_tidy
from bayesspec.errors import BadInput
from bayesspec.inference import SamplerSettings
from bayesspec.outputs import emit_json, json_text, write_text_atomic

DEMO_ALPHAS = (0.6, 0.8)
DEMO_LOAD_FRACTIONS = (0.2, 0.6)   # of the dense saturation rate


def _say(message: str, as_json: bool) -> None:
    print(message, file=sys.stderr if as_json else sys.stdout, flush=True)


def _fmt(u: dict) -> str:
    return f"{u['median']:.3g} [{u['lo']:.3g}, {u['hi']:.3g}]"


def run_demo(*, out: str = "demo-out", quick: bool = False, as_json: bool = False,
             seed: int = 2026) -> int:
    from bayesspec.reporting.plots import collapse_plot, group_fit_plots, save_figure
    from bayesspec.reporting.summary import summary_document, summary_text
    from bayesspec.bayes.workflow import fit

    started = time.perf_counter()
    out_dir = Path(out)
    if out_dir.exists() and not out_dir.is_dir():
        raise BadInput("exists and is not a folder", file=str(out_dir))
    out_dir.mkdir(parents=True, exist_ok=True)
    draws = 300 if quick else 1000
    settings = SamplerSettings(draws=draws, tune=draws, chains=4, seed=seed, progress=True)
    report: dict = {"figures": []}

    # ---------------------------------------------------------------- dense
    source = datasets.path("dense")
    data = read_tidy(source)
    _say(f"[1/2] dense sweeps {source.name}: {len(data)} load points, "
         f"{data['verifier'].nunique()} verifiers, {int(data['excluded'].sum())} saturated "
         "points excluded", as_json)
    dense = fit(data, "dense", settings=settings)
    dense.save(out_dir / "dense_fit.nc")
    dense_doc = summary_document(dense)
    if not dense.diagnostics["converged"]:
        dense_doc["warning"] = dense.diagnostics["text"]
    write_text_atomic(out_dir / "dense_summary.json", json_text(dense_doc))
    report["figures"].append(save_figure(collapse_plot(dense), out_dir / "collapse.png"))
    # a smoke run draws the first page of group panels; the full run every group's
    for i, figure in enumerate(group_fit_plots(dense, pages=1 if quick else None), start=1):
        report["figures"].append(save_figure(figure, out_dir / f"dense_group_fits_{i}.png"))
    report["dense"] = {"fit": str(out_dir / "dense_fit.nc"), "groups": len(dense.groups),
                       "diagnostics": dense_doc["diagnostics"],
                       **({"warning": dense_doc["warning"]} if "warning" in dense_doc else {})}
    if not as_json:
        print()
        print(summary_text(dense_doc))
        print()

    # ---------------------------------------------------------------- speculative
    spec_source = datasets.path("speculative")
    spec_data = read_tidy(spec_source)
    _say(f"[2/2] speculative sweeps {spec_source.name}: {len(spec_data)} load points, "
         f"{int((spec_data['k'] > 0).sum())} with speculation", as_json)
    spec = fit(spec_data, "speculative", settings=settings)
    spec.save(out_dir / "speculative_fit.nc")
    deployment = deployment_summary(spec)
    report["speculative"] = {"fit": str(out_dir / "speculative_fit.nc"),
                             "groups": len(spec.groups), "setups": len(spec.setups),
                             "diagnostics": deployment["diagnostics"],
                             "decisions": deployment["decisions"]}
    if deployment.get("warning"):
        report["speculative"]["warning"] = deployment["warning"]
    report["figures"] += speculative_figures(spec, spec_data, out_dir, settings,
                                             joint_check=not quick,
                                             decisions=deployment["decisions"])
    write_text_atomic(out_dir / "deployment.json", json_text(deployment))

    elapsed = time.perf_counter() - started
    report["seconds"] = round(elapsed, 1)
    if as_json:
        emit_json(report)
        return 0
    print()
    for line in deployment["lines"]:
        print(line)
    print()
    print(f"wrote 2 fit files, dense_summary.json, deployment.json and "
          f"{len(report['figures'])} figures to {out_dir}/ in {elapsed:.0f} s")
    print(f"next: bayesspec kstar {out_dir / 'speculative_fit.nc'} --alpha 0.5:0.9:0.1 "
          f"--rps 0:20:2 --prefill 512 --decode 512")
    return 0


def _setup_options(setup) -> dict:
    return {"verifier": setup["verifier"], "drafter": setup["drafter"],
            "prefill": int(setup["prefill_tokens"]), "decode": int(setup["decode_tokens"])}


def deployment_summary(spec) -> dict:
    """What to run, per setup, at two acceptance rates and two loads."""
    from bayesspec.decisions import crossover, kstar_table, speedup_curve

    diag = spec.diagnostics
    lines = ["Deployment summary (90% intervals; k = 0 means 'do not speculate'):"]
    warning = None
    if not diag["converged"]:
        warning = diag["text"]
        lines.insert(0, f"WARNING: {warning}. Do not act on the numbers below.")
    elif diag["status"] != "converged":
        lines.insert(0, f"note: {diag['text']}")
    decisions = []
    for _, setup in spec.setups.iterrows():
        costs = spec.law(_setup_options(setup))
        saturation = float(np.median(costs.dense.ceiling))
        lines.append(f"{setup['setup']} (dense saturates at {saturation:.3g} RPS):")
        for alpha in DEMO_ALPHAS:
            for fraction in DEMO_LOAD_FRACTIONS:
                rate = round(fraction * saturation, 2)
                row = kstar_table(costs, [alpha], [rate])["table"][0]
                entry = {"setup": setup["setup"], "alpha": alpha, "rps": rate, **row}
                text = (f"  alpha {alpha:g}, RPS {rate:g}: run k = {row['k']} "
                        f"(P best {row['p_best']:.2f}")
                if row["k"] > 0:
                    text += f", speedup {_fmt(row['speedup'])})"
                    star = crossover(costs, alpha, row["k"])
                    entry["crossover"] = star
                    if star["rps_star"] is not None and star["p_sd_faster_below"] >= 0.5:
                        text += (f"; SD with k = {row['k']} stops paying above RPS* "
                                 f"{_fmt(star['rps_star'])}")
                    elif star["rps_star"] is None:
                        text += "; no crossover below saturation"
                else:
                    text += "; no k beats plain decoding here)"
                batch1 = row["k_batch1"]
                if batch1 != row["k"]:
                    curve = speedup_curve(costs, alpha, batch1, [rate])["points"][0]
                    entry["batch1"] = {"k": batch1, **curve}
                    text += (f"; the batch-1 favourite k = {batch1} gives "
                             f"{_fmt(curve['speedup'])} (P slower than dense "
                             f"{curve['p_slower']:.2f})")
                lines.append(text)
                decisions.append(entry)
    return {"lines": lines, "decisions": decisions,
            "diagnostics": {k: diag[k] for k in ("rhat_max", "ess_bulk_min", "divergences")},
            **({"warning": warning} if warning else {})}


def figure_ks(decisions: list[dict], setup: str, alpha: float, middle: int,
              base=(1, 2, 4, 6, 8)) -> tuple[list[int], int | None]:
    """The draft lengths the speedup figure at ``alpha`` draws and the one it marks as
    recommended: every k the deployment summary recommends for ``setup`` at that alpha
    is drawn, and the one at its highest load is marked (the figure is read next to the
    summary, so they must agree); without such decisions, k* at half the saturation
    rate (``middle``). 0 means "do not speculate"."""
    chosen = [int(d["k"]) for d in sorted(decisions, key=lambda d: d["rps"])
              if d.get("setup") == setup and abs(float(d["alpha"]) - alpha) < 1e-9]
    recommended = chosen[-1] if chosen else middle
    ks = sorted(set(base) | {k for k in chosen + [middle] if k > 0})
    return ks, recommended


def speculative_figures(spec, spec_data, out_dir: Path, settings, *, joint_check: bool,
                        decisions: list[dict] | None = None):
    from bayesspec.decisions import kstar_table
    from bayesspec.reporting.plots import (cost_ratio_plot, joint_vs_per_config_plot, kstar_map_plot,
                        save_figure, speedup_bands_plot)
    from bayesspec.bayes.workflow import fit

    figures = []
    setup = spec.setups.iloc[0]
    costs = spec.law(_setup_options(setup))
    saturation = float(np.median(costs.dense.ceiling))
    table = kstar_table(costs, np.round(np.arange(0.5, 1.0001, 0.05), 2),
                        np.linspace(0, 0.95 * saturation, 40))
    middle = kstar_table(costs, [0.8], [0.5 * saturation])["table"][0]["k"]
    ks, recommended = figure_ks(decisions or [], setup["setup"], 0.8, middle)
    figures.append(save_figure(speedup_bands_plot(costs, 0.8, ks, rps_max=saturation,
                                                  recommended_k=recommended,
                                                  rps_measured_max=costs.measured(
                                                      0.8, recommended or 3)["rps_fitted_max"]),
                               out_dir / "speedup_alpha0.8.png"))
    figures.append(save_figure(cost_ratio_plot(costs, (0.5, 0.6, 0.7, 0.8, 0.9), range(1, 11)),
                               out_dir / "cost_ratios.png"))
    figures.append(save_figure(kstar_map_plot(table), out_dir / "kstar_map.png"))
    if joint_check:
        separate = fit(spec_data, "dense", settings=settings)
        joint = {label: (spec.draws("C1", g), spec.draws("C2", g))
                 for g, label in enumerate(spec.groups["label"]) if spec.groups["k"].iloc[g] > 0}
        free = {label: (separate.draws("C1", g), separate.draws("C2", g))
                for g, label in enumerate(separate.groups["label"])}
        figures.append(save_figure(joint_vs_per_config_plot(joint, free),
                                   out_dir / "joint_vs_separate.png"))
    return figures
