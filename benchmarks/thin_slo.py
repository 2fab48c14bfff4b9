"""Validation: does `slo` agree with a thin load test's own pass/fail?

    python -W ignore::UserWarning benchmarks/thin_slo.py --replicates 3 --first-seed 100 \
        --variants default --rates 0.9,6,12,16.5 --json thin.json      # about 5 minutes

A GuideLLM-style run with a time limit per rate measures few requests at low rates: four
rates of ``DURATION_S`` seconds each (``--rates 0.9,6,12,16.5``: 15-297 requests per
point; the default rates give 14-305) (Qwen3-8B on an H100, prefill 1024 / decode 128
tokens, log-normal lengths of cv 0.5, constant arrivals as GuideLLM's sweep sends them).
Each replicate is fitted with the tails model; then, for SLO targets on p99 of end-to-end
latency, TTFT and ITL spread over the measured range, `slo` says at each measured rate
whether the target is met (P >= 0.9). That verdict is compared with

- the run's own measurement (measured p99 <= target), where the measured margin
  |measured - target| / target exceeds 20%, also restricted to where that margin exceeds
  twice the reported p99's own sampling sd (its order statistic among the point's
  requests, with the long run's per-request spread: a p99 of 14 requests scatters by
  20-30%, so a 20% margin there is no clear margin), and
- the truth, the p99 of a long run (``TRUTH_DURATION_S`` seconds per rate), where the
  true margin exceeds 20%.

Prints per variant the fits' convergence, the share of agreeing verdicts in each of the
three comparisons (with the count of disagreements), by metric, and the share of the
p99 curves' 90% intervals that hold the long-run p99 at the measured rates.
``--variants``: ``default``, ``model-spread`` (the per-request spread read off the fitted
curves) and ``no-sampling`` (a reported percentile read as the population's).
``--json`` writes every record.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import pandas as pd

from scipy.special import ndtri

from bayesspec.data import prepare
from bayesspec.decisions import slo_decision
from bayesspec.inference import SamplerSettings
from bayesspec.laws import quantile_sampling_moments
from bayesspec.simulate import setup, timed_rates
from bayesspec.bayes.workflow import fit as fit_model

RATES = (0.8, 6.0, 12.0, 17.0)
DURATION_S = 20.0
TRUTH_DURATION_S = 1500.0
METRICS = {"p99": "latency_p99_s", "ttft_p99": "ttft_p99_s", "itl_p99": "itl_p99_s"}
#: Targets per metric: this many, log-spaced over [0.6 x the lowest, 1.6 x the highest]
#: true value at the measured rates.
TARGETS_PER_METRIC = 8
MARGIN = 0.2
SLO_PROB = 0.9
VARIANTS = {
    "default": {},                              # spread read off the data
    "model-spread": {"spread": "model"},
    "no-sampling": {"sampling_error": False},   # version 1's likelihood
}


def thin_setup():
    return setup("Qwen3-8B", "H100", prefill=1024, decode=128, length_dist="lognormal",
                 length_cv=0.5)


def thin_run(seed: int, *, rates=RATES, duration_s: float = DURATION_S) -> pd.DataFrame:
    """One GuideLLM-style run: the rates for ``duration_s`` seconds each."""
    return prepare(timed_rates(thin_setup(), rates, duration_s, seed=seed).rows)


def truth(rates=RATES, duration_s: float = TRUTH_DURATION_S, seed: int = 999):
    """Long-run p99 per metric at each rate (what production at that rate sees), and the
    per-request log-latency spread there, (log p99 - log p90)/(z99 - z90)."""
    rows = timed_rates(thin_setup(), rates, duration_s, seed=seed).rows
    values = {metric: rows[column].to_numpy(float) for metric, column in METRICS.items()}
    spread = {metric: ((np.log(rows[column]) - np.log(rows[column.replace("p99", "p90")]))
                       / (ndtri(0.99) - ndtri(0.9))).to_numpy(float)
              for metric, column in METRICS.items()}
    return values, spread


def targets_for(true: dict) -> dict[str, np.ndarray]:
    return {metric: np.geomspace(0.6 * values.min(), 1.6 * values.max(), TARGETS_PER_METRIC)
            for metric, values in true.items()}


def verdicts(fit, data: pd.DataFrame, true: dict, targets: dict, spread: dict) -> list[dict]:
    """One record per (metric, target, measured rate): slo's verdict, the measured and
    the true pass/fail with their margins."""
    kept = data.loc[~data["excluded"]]
    rps = kept["rps"].to_numpy(float)
    mean_law = fit.law({}) if fit.model().has_mean(fit) else fit.law({}, metric="p99")
    records = []
    for metric, levels in targets.items():
        law = fit.law({}, metric=metric)
        measured = kept[METRICS[metric]].to_numpy(float)
        at = np.array([int(np.argmin(np.abs(np.asarray(RATES) - r))) for r in rps])
        for target in levels:
            document = slo_decision({metric: law}, mean_law, {metric: float(target)}, rps,
                                    slo_prob=SLO_PROB)
            for j, row in enumerate(document["best_by_rps"]):
                p_meets = next(iter(row["p_meets"].values()))
                records.append({
                    "metric": metric, "target": float(target), "rps": float(rps[j]),
                    "n_requests": int(kept["n_requests"].iloc[j]),
                    "p_meets": p_meets, "slo_meets": p_meets >= SLO_PROB,
                    "measured": float(measured[j]), "true": float(true[metric][at[j]]),
                    "sampling_sd": float(spread[metric][at[j]] * np.sqrt(
                        quantile_sampling_moments(0.99, kept["n_requests"].iloc[j])[1])),
                })
    return records


def coverage(fit, data: pd.DataFrame, true: dict, prob: float = 0.9) -> list[dict]:
    kept = data.loc[~data["excluded"]]
    rps = kept["rps"].to_numpy(float)
    at = np.array([int(np.argmin(np.abs(np.asarray(RATES) - r))) for r in rps])
    out = []
    for metric in METRICS:
        curve = fit.model().metric_curve(fit, 0, metric)
        draws = curve.latency(rps)
        lo, hi = np.quantile(draws, [(1 - prob) / 2, (1 + prob) / 2], axis=0)
        for j in range(len(rps)):
            value = true[metric][at[j]]
            out.append({"metric": metric, "rps": float(rps[j]), "covered": bool(lo[j] <= value <= hi[j]),
                        "median_ratio": float(np.median(draws[:, j]) / value)})
    return out


def summarise(records: pd.DataFrame) -> dict:
    measured_margin = np.abs(records["measured"] - records["target"]) / records["target"]
    true_margin = np.abs(records["true"] - records["target"]) / records["target"]
    clear = records[measured_margin > MARGIN]
    informative = records[(measured_margin > MARGIN) & (
        np.abs(np.log(records["measured"] / records["target"])) > 2 * records["sampling_sd"])]
    clear_true = records[true_margin > MARGIN]
    agree = (clear["slo_meets"] == (clear["measured"] <= clear["target"]))
    agree_informative = (informative["slo_meets"]
                         == (informative["measured"] <= informative["target"]))
    agree_true = (clear_true["slo_meets"] == (clear_true["true"] <= clear_true["target"]))
    return {"measured_clear": int(len(clear)), "agree_measured": float(agree.mean()),
            "disagree_measured": int((~agree).sum()),
            "informative_clear": int(len(informative)),
            "agree_informative": float(agree_informative.mean()),
            "disagree_informative": int((~agree_informative).sum()),
            "true_clear": int(len(clear_true)), "agree_true": float(agree_true.mean()),
            "disagree_true": int((~agree_true).sum())}


def main(argv=None) -> int:
    global RATES  # the rate mapping in verdicts() and coverage() reads it
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replicates", type=int, default=6)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--variants", default="default,no-sampling")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--json", help="write every record to this JSON file")
    parser.add_argument("--rates", default=",".join(f"{r:g}" for r in RATES),
                        help="the load test's rates (0.9,6,12,16.5 gives 15-300 "
                             "requests per point at seeds 0-2 and 100-102)")
    args = parser.parse_args(argv)
    RATES = tuple(float(r) for r in args.rates.split(","))
    started = time.perf_counter()
    true, spread = truth(RATES)
    targets = targets_for(true)
    print("truth (long runs):", {m: np.round(v, 4).tolist() for m, v in true.items()},
          file=sys.stderr, flush=True)
    records, covers, fits = [], [], []
    for seed in range(args.first_seed, args.first_seed + args.replicates):
        data = thin_run(seed, rates=RATES)
        print(f"seed {seed}: requests per point {data['n_requests'].tolist()}",
              file=sys.stderr, flush=True)
        for variant in args.variants.split(","):
            fit = fit_model(data, "tails", config=VARIANTS[variant] or None,
                            settings=SamplerSettings(seed=1, chains=args.chains,
                                                     draws=args.draws, progress=False))
            verdict = fit.diagnostics
            fits.append({"seed": seed, "variant": variant, "converged": verdict["converged"],
                         "text": verdict["text"]})
            for record in verdicts(fit, data, true, targets, spread):
                records.append({"seed": seed, "variant": variant, **record})
            for record in coverage(fit, data, true):
                covers.append({"seed": seed, "variant": variant, **record})
            print(f"seed {seed} {variant}: {verdict['text']} "
                  f"({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
    frame, cover = pd.DataFrame(records), pd.DataFrame(covers)
    print(f"\n{args.replicates} replicates, rates {RATES}, {DURATION_S:g} s each; "
          f"agreement where the margin exceeds {MARGIN:.0%}\n")
    print("| variant | converged | agree with the measurement, margin > 20% | ... and > 2 "
          "sampling sd | agree with the long-run truth, margin > 20% | p99 curves' 90% "
          "intervals cover the truth |")
    print("|---|---|---|---|---|---|")
    for variant, part in frame.groupby("variant", sort=False):
        summary = summarise(part)
        converged = sum(f["converged"] for f in fits if f["variant"] == variant)
        covered = cover.loc[cover["variant"] == variant, "covered"]
        print(f"| {variant} | {converged}/{args.replicates} | "
              f"{summary['agree_measured']:.3f} ({summary['disagree_measured']} of "
              f"{summary['measured_clear']} disagree) | {summary['agree_informative']:.3f} "
              f"({summary['disagree_informative']} of {summary['informative_clear']}) | "
              f"{summary['agree_true']:.3f} ({summary['disagree_true']} of "
              f"{summary['true_clear']}) | {covered.mean():.3f} of {len(covered)} |")
    print()
    for (variant, metric), part in frame.groupby(["variant", "metric"], sort=False):
        summary = summarise(part)
        c = cover[(cover["variant"] == variant) & (cover["metric"] == metric)]
        print(f"{variant:>12} {metric:>9}: agree measured {summary['agree_measured']:.3f} "
              f"of {summary['measured_clear']} ({summary['agree_informative']:.3f} of "
              f"{summary['informative_clear']} informative), truth "
              f"{summary['agree_true']:.3f} of "
              f"{summary['true_clear']}; coverage {c['covered'].mean():.3f}, median/true "
              f"{c['median_ratio'].median():.3f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"records": records, "coverage": covers, "fits": fits}, handle)
    print(f"\n{time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
