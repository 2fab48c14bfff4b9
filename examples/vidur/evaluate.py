"""How well do the latency laws describe sweeps they were not written for?

    .venv/bin/python examples/vidur/evaluate.py [--csv examples/vidur/vidur_dense.csv]
        [--models dense,dense-discrepancy,dense-discrepancy:t,dense-roofline,dense-spline]
        [--fraction 0.63] [--extra-fractions 0.5,0.79] [--folds 5] [--out vidur-out] [--quick]
        [--held-in-only]

For each model: a fit to every point (held-in 90% predictive coverage in sample and left
out one at a time by PSIS, R^2 per group, PSIS-LOO); ``--folds`` refits each without
every K-th rate of every group (held-in coverage by refits, ``checks.fold_check``); and
a fit to each group's rates up to ``--fraction`` of its highest measured rate, predicting
the rest (held-out coverage, set against the coverage the model itself would give if
it were exactly right: ``checks.coverage_reference``), repeated at
``--extra-fractions``. The sweeps run from 5% to 95% of each setup's ceiling, so the
default 0.63 of the top rate is 60% of the ceiling (0.5 and 0.79: 47% and 75%). A model is a registered name or MODEL[:t][+OPTION=VALUE...]
(``:t`` a Student-t error, options of the model's config, e.g.
``dense-spline+knot_spacing=0.1``; ``dense-profile``: dense at its defaults with the sets'
decode-iteration profiles, ``decode_profiles.csv``; ``dense-profile-poisson``: the
defaults before 2026-12-05, the Poisson profile law; ``dense-profile-chain-bounded``:
the defaults before the batched prefill). Prints one table per model and a comparison (with
the median 90% interval width relative to the latency, held in and held out), writes
evaluation.json, each model's held-out points with their intervals
(points_holdout_<model>.csv) and the predictive-check figures of each model's hold-out
fit to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

from bayesspec import checks
from bayesspec.checks import loo_summary
from bayesspec.data import read_tidy
from bayesspec.inference import SamplerSettings
from bayesspec.reporting.plots import predictive_check_plot, save_figure
from bayesspec.bayes.workflow import fit

HERE = Path(__file__).resolve().parent
VARIANTS = {"dense": ("dense", {}), "dense-discrepancy": ("dense-discrepancy", {}),
            "dense-discrepancy:t": ("dense-discrepancy", {"likelihood": "student_t"}),
            "dense-roofline": ("dense-roofline", {}), "dense-spline": ("dense-spline", {}),
            # the engine's decode-iteration time by batch size (decode_profiles.csv), at
            # the defaults: the decode profile inside the slot queue's chain, the noise's
            # load term bounded, waiting prompts batched into one prefill
            "dense-profile": ("dense", {"decode_profile": str(HERE / "decode_profiles.csv")}),
            # the Poisson law (the profile's batch a Poisson count), the load term on the curve
            "dense-profile-poisson": ("dense", {
                "decode_profile": str(HERE / "decode_profiles.csv"), "profile_law": "poisson",
                "noise_load_at": "curve"}),
            # the Poisson law, its noise's load term bounded by each measured L/C1 - 1
            "dense-profile-bounded": ("dense", {
                "decode_profile": str(HERE / "decode_profiles.csv"), "profile_law": "poisson",
                "noise_load_at": "measured"}),
            # the decode profile inside the slot queue's chain, the load term on the curve
            "dense-profile-chain": ("dense", {
                "decode_profile": str(HERE / "decode_profiles.csv"), "profile_law": "chain",
                "noise_load_at": "curve", "prefill_batching": False}),
            # the chain with the noise's load term bounded, without the batched prefill
            "dense-profile-chain-bounded": ("dense", {
                "decode_profile": str(HERE / "decode_profiles.csv"), "profile_law": "chain",
                "noise_load_at": "measured", "prefill_batching": False})}


def variant(name: str) -> tuple[str, dict]:
    """A model and its options: a VARIANTS name or MODEL[:t], then [+OPTION=VALUE...]
    (``t``: Student-t error; values parsed as numbers where they are), e.g.
    ``dense-profile+prefill_fixed_power=2``."""
    if name in VARIANTS:
        return VARIANTS[name]
    model, *options = name.split("+")
    if model in VARIANTS:
        model, config = VARIANTS[model][0], dict(VARIANTS[model][1])
    else:
        model, _, tail = model.partition(":")
        config = {"likelihood": "student_t"} if tail == "t" else {}
    for option in options:
        key, _, value = option.partition("=")
        try:
            config[key] = float(value)
        except ValueError:
            config[key] = value
    return model, config


def reference_summary(check: dict) -> dict:
    """What a model exactly right would give on these held-out points
    (``checks.coverage_reference``), without the per-group tails."""
    reference = check["pooled"]["held_out"].get("reference", {})
    return {k: v for k, v in reference.items() if k != "p_too_many_outside"}


def reference_text(reference: dict) -> str:
    if not reference:
        return ""
    return (f"a right model: {reference['coverage_mean']:.2f} "
            f"({reference['coverage_range'][0]:.2f}-{reference['coverage_range'][1]:.2f}), "
            f"{reference['groups_below_floor_mean']:.1f} groups below 0.7, "
            f"P(85-95% and no group below 0.7) {reference['p_in_band_and_no_group_below_floor']:.3f}; "
            f"P(as high) {reference['p_as_high']:.2f}, P(as low) {reference['p_as_low']:.2f}")


def median_width(points, held_out: bool) -> float | None:
    """Median width of the 90% interval relative to the predictive median."""
    subset = points.loc[points["held_out"] == held_out]
    if subset.empty:
        return None
    return float(((subset["hi"] - subset["lo"]) / subset["predicted"]).median())

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--csv", default=str(HERE / "vidur_dense.csv"))
parser.add_argument("--models", default="dense,dense-discrepancy,dense-discrepancy:t,"
                    "dense-roofline,dense-spline")
parser.add_argument("--fraction", type=float, default=0.63)
parser.add_argument("--extra-fractions", default="",
                    help="more hold-out fractions, comma-separated (e.g. 0.5,0.79)")
parser.add_argument("--folds", type=int, default=5, help="interleaved refits (0: none)")
parser.add_argument("--out", default="vidur-out")
parser.add_argument("--quick", action="store_true", help="2 chains x 300 draws")
parser.add_argument("--held-in-only", action="store_true",
                    help="the fit to every point alone: R^2 and held-in coverage")
args = parser.parse_args()
out = Path(args.out)
out.mkdir(exist_ok=True)
warnings.filterwarnings("ignore")
data = read_tidy(args.csv)
settings = (SamplerSettings(draws=300, tune=400, chains=2, seed=1, progress=False)
            if args.quick else SamplerSettings(seed=1, progress=False))
low, high = checks.split_by_rate(data, args.fraction)
report = {"csv": args.csv, "fraction": args.fraction, "points": int(len(data)),
          "models": {}}
for name in args.models.split(","):
    model, config = variant(name)
    started = time.perf_counter()
    full = fit(data, model, settings=settings, config=config)
    held_in = checks.predictive_check(full)
    if args.held_in_only:
        points_in = held_in.pop("_points")
        r2 = [g["held_in"]["r2"] for g in held_in["groups"]]
        entry = {"held_in": held_in["pooled"]["held_in"]["coverage"],
                 "groups_r2_ge_0.98": sum(r >= 0.98 for r in r2), "groups": len(r2),
                 "width_held_in": median_width(points_in, False),
                 "convergence": full.diagnostics["status"],
                 "seconds": round(time.perf_counter() - started, 1)}
        report["models"][name] = entry
        print(f"== {name} (every point, {entry['seconds']:.0f} s): held-in 90% coverage "
              f"{entry['held_in']:.3f}, median width {entry['width_held_in']:.3f}; R^2 >= "
              f"0.98 in {entry['groups_r2_ge_0.98']} of {len(r2)} groups; "
              f"{entry['convergence']}", flush=True)
        continue
    folds = (checks.fold_check(data, model=model, folds=args.folds, settings=settings,
                               config=config) if args.folds else None)
    extra = {}
    for fraction in [float(f) for f in args.extra_fractions.split(",") if f]:
        lower, higher = checks.split_by_rate(data, fraction)
        other = fit(lower, model, settings=settings, config=config)
        check = checks.predictive_check(other, higher)
        outs = [g["held_out"]["coverage"] for g in check["groups"] if "held_out" in g]
        extra[str(fraction)] = {"held_out": check["pooled"]["held_out"]["coverage"],
                                "points": check["pooled"]["held_out"]["points"],
                                "groups_below_0.7": sum(c < 0.7 for c in outs),
                                "reference": reference_summary(check),
                                "convergence": other.diagnostics["status"]}
    part = fit(low, model, settings=settings, config=config)
    held_out = checks.predictive_check(part, high)
    loo = loo_summary(full)
    points = held_out.pop("_points")
    points_in = held_in.pop("_points")
    stem = name.replace(':', '_').replace('+', '_').replace('=', '').replace('/', '_')
    points.to_csv(out / f"points_holdout_{stem}.csv", index=False)
    figures = predictive_check_plot(points, held_out["groups"])
    plots = [save_figure(f, out / f"ppc_{stem}_{i + 1}.png")
             for i, f in enumerate(figures)]
    groups = []
    for a, b in zip(held_in["groups"], held_out["groups"]):
        groups.append({"group": a["group"], "r2": a["held_in"]["r2"],
                       "held_in": a["held_in"]["coverage"],
                       "held_out": b.get("held_out", {}).get("coverage"),
                       "held_in_folds": (None if folds is None else next(
                           f["coverage"] for f in folds["groups"] if f["group"] == a["group"])),
                       "residual_by_utilisation": a["residual_by_utilisation"],
                       "flagged_held_out": b["flagged"]})
    outs = [g["held_out"] for g in groups if g["held_out"] is not None]
    entry = {"held_in": held_in["pooled"]["held_in"]["coverage"],
             "held_in_loo": held_in["pooled"]["held_in"]["coverage_loo"],
             "pareto_k_high": held_in["pooled"]["held_in"]["pareto_k_high"],
             "held_in_folds": None if folds is None else folds["coverage"],
             "groups_folds_below_0.7": None if folds is None else sum(
                 g["coverage"] < 0.7 for g in folds["groups"]),
             "folds_convergence": None if folds is None else [
                 f["convergence"] for f in folds["per_fold"]],
             "other_fractions": extra,
             "held_out": held_out["pooled"]["held_out"]["coverage"],
             "held_out_reference": reference_summary(held_out),
             "groups_r2_ge_0.98": sum(g["r2"] >= 0.98 for g in groups),
             "groups_held_out_below_0.7": sum(c < 0.7 for c in outs),
             "width_held_in": median_width(points_in, False),
             "width_held_out": median_width(points, True),
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
    if folds is not None:
        print(f"   held in by {args.folds} refits: {folds['coverage']:.3f} "
              f"({entry['groups_folds_below_0.7']} groups below 0.7; refits: "
              f"{', '.join(entry['folds_convergence'])})")
    print(f"   held out above {args.fraction}: {entry['held_out']:.3f}; "
          f"{reference_text(entry['held_out_reference'])}")
    for fraction, e in extra.items():
        print(f"   held out above {fraction} of the top rate: {e['held_out']:.3f} of "
              f"{e['points']} ({e['groups_below_0.7']} groups below 0.7; {e['convergence']}); "
              f"{reference_text(e['reference'])}")
    print(f"   {'group':38s} {'R^2':>7s} {'in':>5s} {'folds':>5s} {'out':>5s}  "
          "residual by load (low/mid/high)")
    for g in groups:
        pattern = " ".join(f"{v:+.3f}" for v in g["residual_by_utilisation"].values())
        held = "  -  " if g["held_out"] is None else f"{g['held_out']:5.2f}"
        cv = "  -  " if g["held_in_folds"] is None else f"{g['held_in_folds']:5.2f}"
        print(f"   {g['group'][:38]:38s} {g['r2']:7.4f} {g['held_in']:5.2f} {cv} {held}  "
              f"{pattern}")

if not args.held_in_only:
    print("\n| model | held-in | held-in (LOO) | held-in (folds) | held-out | groups <70% out "
          "| R^2>=0.98 | width in | width out | elpd_loo |")
for name, e in report["models"].items() if not args.held_in_only else ():
    cv = "-" if e["held_in_folds"] is None else f"{e['held_in_folds']:.3f}"
    print(f"| {name} | {e['held_in']:.3f} | {e['held_in_loo']:.3f} | {cv} | {e['held_out']:.3f} | "
          f"{e['groups_held_out_below_0.7']}/{len(e['groups'])} | {e['groups_r2_ge_0.98']} | "
          f"{e['width_held_in']:.3f} | {e['width_held_out']:.3f} | "
          f"{e['elpd_loo']:.1f} +- {e['elpd_se']:.1f} |")
(out / "evaluation.json").write_text(json.dumps(report, indent=1, default=float))
print(f"\nwrote {out / 'evaluation.json'}")
