"""How many load-test minutes until a decision is right with P >= 0.95? (issue 36)

The serving simulator is the server: Qwen3-8B on an H100 at 512 prompt / 256 output
tokens, dense (k = 0) and EAGLE-3 at k = 4, alpha 0.7 (true RPS* about 15 RPS, ceilings
about 37 and 29 RPS). Truth comes from the simulator
itself: long runs (``--truth-requests`` requests, default 20,000) at a fine grid of
rates give each configuration's true mean-latency curve; the true RPS* is where the two
curves cross (1/latency interpolated linearly in the rate, as
examples/check_simulated_crossover.py does) and the true k* at a rate is the faster
configuration there (rates chosen with a clear margin).

Decisions: ``crossover`` (RPS* of k = 4 within +-5%) and ``kstar`` (the faster of k = 0
and k = 4 at 0.8 x RPS* and 1.2 x RPS*, capped below SD's ceiling). Three ways to
measure, side by side on the same replicate (same seeds):

- **grid**: a full GuideLLM-style sweep at every configuration (a synchronous point, a
  throughput point, 7 constant rates between; ``--grid-requests`` each), fitted once;
- **random**: a seed design per configuration (synchronous point, a throughput probe, two
  constant rates at 30% and 60% of the probe) then random next points (configuration,
  rate in 5-95% of the probe, 100/300/1000 requests), refitting after each, until the
  decision is settled or the grid's minutes are spent;
- **plan**: the same seed design, then `bayesspec plan`'s top point each time.

A point costs requests / achieved rate + ``--warmup-s`` (30 s) of the server, the same
rule for every method. A method *reaches* the decision when it is settled (every answer
right with posterior P >= 0.95) and the settled answer equals the truth (RPS* within 5%
of the true one; the chosen k the truly faster one). Fits: the dense model per
configuration (eq. 1 each), compiled once and refitted with new data (nutpie
``with_data``), 2 chains x 500 draws after 500 tuning steps.

    nice python benchmarks/plan_benchmark.py --replicates 20 --out plan_benchmark.csv

Prints progress on stderr, one line per finished (replicate, decision, method) and the
summary table at the end (also ``--out``).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

import numpy as np
import pandas as pd

from bayesspec.bayes import get_model_class
from bayesspec.data import prepare
from bayesspec.fitfile import Fit
from bayesspec.inference import SamplerSettings, compile_model, sample_compiled, settings_for
from bayesspec.planning import plan, question_from_fit
from bayesspec.simulate import at_rates, setup, sweep

SD_K, SD_ALPHA = 4, 0.7
CONFIGS = {0: None, SD_K: SD_ALPHA}
PREFILL, DECODE = 512, 256
WITHIN = 0.05
TOLERANCE = 0.05


def sd_k() -> int:
    return max(CONFIGS)


def make_setup(k: int):
    return setup("Qwen3-8B", "H100", k=k, alpha=CONFIGS[k], prefill=PREFILL, decode=DECODE)


def minutes_of(rows: pd.DataFrame, warmup_s: float) -> float:
    """requests / achieved rate + warm-up, summed over points."""
    return float(((rows["n_requests"] / rows["rps"]) + warmup_s).sum() / 60.0)


# ----------------------------------------------------------------------------- truth

def truth(requests: int) -> dict:
    """True curves (rate -> mean latency, unsaturated long runs), RPS*, k* rates."""
    curves = {}
    for k in CONFIGS:
        probe = sweep(make_setup(k), 3, n_requests=2000, seed=999).rows
        ceiling = float(probe["rps"].iloc[-1])
        rates = np.linspace(0.04, 0.97, 32) * ceiling
        rows = at_rates(make_setup(k), rates, n_requests=requests, seed=777,
                        arrivals="constant").rows
        rows = rows[~rows["saturated"].astype(bool)].sort_values("rps")
        curves[k] = (rows["rps"].to_numpy(float), rows["latency_mean_s"].to_numpy(float),
                     ceiling)
    (xd, yd, _), (xs, ys, sd_ceiling) = curves[0], curves[sd_k()]
    grid = np.linspace(max(xd.min(), xs.min()), min(xd.max(), xs.max()), 2000)
    gap = np.interp(grid, xd, 1 / yd) - np.interp(grid, xs, 1 / ys)
    flips = np.flatnonzero(np.sign(gap[:-1]) != np.sign(gap[1:]))
    if not flips.size:
        raise SystemExit("no crossover in the simulator's truth: choose another setup")
    i = flips[0]
    star = float(grid[i] - gap[i] * (grid[i + 1] - grid[i]) / (gap[i + 1] - gap[i]))
    rates = [round(0.8 * star, 3), round(min(1.2 * star, 0.85 * sd_ceiling), 3)]
    best = {}
    for rate in rates:
        dense, sd = np.interp(rate, xd, yd), np.interp(rate, xs, ys)
        best[rate] = sd_k() if sd < dense else 0
        margin = abs(dense / sd - 1)
        if margin < 0.03:
            print(f"warning: k* at {rate} has a margin of only {margin:.1%}", file=sys.stderr)
    return {"curves": curves, "rps_star": star, "kstar_rates": rates, "kstar": best}


# ----------------------------------------------------------------------------- fitting

class Refitter:
    """The dense model compiled once, refitted on each new data set."""

    def __init__(self, first: pd.DataFrame, draws: int, seed: int):
        self.model = get_model_class("dense")()
        self.settings = settings_for(self.model, SamplerSettings(
            draws=draws, tune=draws, chains=2, seed=seed, progress=False))
        self.compiled = compile_model(self.model.build(prepare(first)), self.settings)
        self.calls = 0

    def __call__(self, rows: pd.DataFrame) -> Fit:
        data = prepare(rows.reset_index(drop=True))
        self.calls += 1
        settings = replace(self.settings, seed=(self.settings.seed or 0) + self.calls)
        tree = sample_compiled(self.compiled, settings, data=self.model.data_values(data))
        return Fit.from_sampling(self.model, data, tree)


def question_of(fit: Fit, decision: str, known: dict):
    if decision == "crossover":
        return question_from_fit(fit, "crossover", alpha=CONFIGS[sd_k()], k=sd_k(),
                                 within=WITHIN, max_draws=1000)
    return question_from_fit(fit, "kstar", alpha=CONFIGS[sd_k()], rps=known["kstar_rates"],
                             ks=[0, sd_k()], max_draws=1000)


def verdict(fit: Fit, decision: str, known: dict) -> tuple[bool, bool, float]:
    """(settled, right, expected loss) of the decision from a fit."""
    result = plan(question_of(fit, decision, known), tolerance=TOLERANCE, top=1,
                  requests=(100,), outcomes=4)
    answers = result["answers"]
    if decision == "crossover":
        value = answers[0]["decision"]
        right = value is not None and abs(value / known["rps_star"] - 1) <= WITHIN
    else:
        right = all(a["decision"] == known["kstar"][rate]
                    for a, rate in zip(answers, known["kstar_rates"]))
    return result["settled"], bool(right), result["expected_loss"]


# ----------------------------------------------------------------------------- methods

def point(k: int, rate: float, requests: int, seed: int) -> pd.DataFrame:
    return at_rates(make_setup(k), [rate], n_requests=requests, seed=seed,
                    arrivals="constant").rows


def seed_design(replicate: int) -> tuple[pd.DataFrame, dict]:
    """Per configuration: a synchronous point, a throughput probe (set aside as
    saturated), constant rates at 30% and 60% of the probe."""
    frames, probes = [], {}
    for k in CONFIGS:
        rows = sweep(make_setup(k), 3, n_requests=100, seed=replicate * 1000 + 1,
                     throughput_requests=200).rows
        sync, thr = rows.iloc[[0]], rows.iloc[[-1]]
        probes[k] = float(thr["rps"].iloc[0])
        extra = at_rates(make_setup(k), [0.3 * probes[k], 0.6 * probes[k]], n_requests=300,
                         seed=replicate * 1000 + 2, arrivals="constant").rows
        frames += [sync, thr, extra]
    return pd.concat(frames, ignore_index=True), probes


def sequential(method: str, decision: str, replicate: int, refit: Refitter, known: dict,
               cap_minutes: float, warmup_s: float, max_steps: int) -> dict:
    rows, probes = seed_design(replicate)
    rng = np.random.default_rng(replicate * 7919 + (0 if method == "random" else 1))
    steps = 0
    while True:
        fit = refit(rows)
        spent = minutes_of(rows, warmup_s)
        question = question_of(fit, decision, known)
        # Random next points only ask whether the decision is settled: no candidates.
        skip = None if method == "plan" else {i: [] for i in range(len(question.configurations))}
        result = plan(question, tolerance=TOLERANCE, warmup_s=warmup_s, top=1, outcomes=32,
                      requests=(100, 300, 1000), seed=replicate, rates=skip)
        if result["settled"] or spent >= cap_minutes or steps >= max_steps:
            settled, right, loss = verdict(fit, decision, known)
            return {"minutes": spent, "settled": settled, "right": right,
                    "reached": settled and right, "points": len(rows), "steps": steps,
                    "expected_loss": loss}
        if method == "plan":
            best = result["next"][0]
            k, rate, n = best.configuration.k, best.rps, best.requests
        else:
            k = int(rng.choice(list(CONFIGS)))
            rate = float(rng.uniform(0.05, 0.95) * probes[k])
            n = int(rng.choice([100, 300, 1000]))
        steps += 1
        rows = pd.concat([rows, point(k, rate, n, replicate * 1000 + 10 + steps)],
                         ignore_index=True)


def grid(decision: str, replicate: int, refit: Refitter, known: dict, requests: int,
         warmup_s: float) -> dict:
    rows = pd.concat([sweep(make_setup(k), 9, n_requests=requests, seed=replicate * 1000 + 5,
                            arrivals="constant").rows for k in CONFIGS], ignore_index=True)
    settled, right, loss = verdict(refit(rows), decision, known)
    return {"minutes": minutes_of(rows, warmup_s), "settled": settled, "right": right,
            "reached": settled and right, "points": len(rows), "steps": 0,
            "expected_loss": loss}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=20)
    parser.add_argument("--decisions", default="crossover,kstar")
    parser.add_argument("--truth-requests", type=int, default=20000)
    parser.add_argument("--grid-requests", type=int, default=300)
    parser.add_argument("--warmup-s", type=float, default=30.0)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--max-steps", type=int, default=40)
    parser.add_argument("--out", default="plan_benchmark.csv")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    known = truth(args.truth_requests)
    print(f"truth: RPS* {known['rps_star']:.3f}; k* {known['kstar']} "
          f"({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
    first, _ = seed_design(0)
    refit = Refitter(first, args.draws, seed=1)
    records = []
    for r in range(args.replicates):
        for decision in args.decisions.split(","):
            full = grid(decision, r, refit, known, args.grid_requests, args.warmup_s)
            results = {"grid": full}
            for method in ("random", "plan"):
                results[method] = sequential(method, decision, r, refit, known,
                                             cap_minutes=full["minutes"],
                                             warmup_s=args.warmup_s,
                                             max_steps=args.max_steps)
            for method, result in results.items():
                records.append({"replicate": r, "decision": decision, "method": method,
                                **result})
            print(f"[{r + 1}/{args.replicates}] {decision}: " + "; ".join(
                f"{m} {v['minutes']:.1f} min {'reached' if v['reached'] else 'NOT reached'}"
                f" ({v['points']} points)" for m, v in results.items())
                + f"  [{time.perf_counter() - started:.0f} s]", file=sys.stderr, flush=True)
            pd.DataFrame(records).to_csv(args.out, index=False)
    table = summarise(pd.DataFrame(records))
    print(table.to_string(index=False))
    print(f"\ntruth: RPS* {known['rps_star']:.3f} RPS; k* {known['kstar']}; "
          f"{args.replicates} replicates; {time.perf_counter() - started:.0f} s")
    return 0


def summarise(records: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (decision, method), part in records.groupby(["decision", "method"], sort=False):
        grid_minutes = records[(records["decision"] == decision)
                               & (records["method"] == "grid")].set_index("replicate")["minutes"]
        ratio = part.set_index("replicate")["minutes"] / grid_minutes
        rows.append({"decision": decision, "method": method, "replicates": len(part),
                     "reached": f"{part['reached'].mean():.0%}",
                     "settled": f"{part['settled'].mean():.0%}",
                     "wrong when settled": int((part["settled"] & ~part["right"]).sum()),
                     "median minutes": round(float(part["minutes"].median()), 1),
                     "median share of grid": round(float(ratio.median()), 2),
                     "median points": int(part["points"].median())})
    return pd.DataFrame(rows)


if __name__ == "__main__":
    sys.exit(main())
