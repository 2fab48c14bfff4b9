"""Validation: load-test minutes until a decision is right with P >= 0.95.

`plan` against a full sweep grid and random next points.

    nice python benchmarks/plan_benchmark.py --replicates 20 --first-replicate 200 \
        --decisions crossover,kstar --out mean.csv                  # about 70 minutes
    nice python benchmarks/plan_benchmark.py --replicates 10 --first-replicate 200 \
        --decisions slo --random-cap-factor 1 --out slo.csv
    python benchmarks/plan_benchmark.py --summarise mean.csv slo.csv

The serving simulator is the server; truth comes from its own long runs. Three
decisions (``--decisions``):

- ``crossover``: RPS* of EAGLE-3 at k = 4, alpha 0.7 against dense decoding, within
  +-5% (Qwen3-8B on an H100, 512 prompt / 256 output tokens, constant arrivals; true RPS*
  about 14.9 RPS, ceilings about 37 and 29 RPS);
- ``kstar``: the faster of k = 0 and k = 4 (same setup) at two rates near where the best
  k switches, 0.85 x and 1.15 x the true RPS* (speedups 1.05 and 0.93: the answer
  turns on a few percent, which a cheap seed design does not settle);
- ``slo``: the configuration with the highest goodput under an SLO (TTFT p90 <= 75 ms
  and ITL p90 <= 15 ms, ``--slo-targets``) and that goodput within +-5% (true: k = 3 at
  14.5 RPS, set by its TTFT; dense 12.2 RPS, set by its ITL): dense and k = 3 at alpha
  0.8, 512/512 tokens with log-normal lengths (cv 0.5) as in examples/slo.toml, but
  constant arrivals (as every point here: GuideLLM's sweep), fitted with the tails
  model. True goodputs: where each summary of
  20,000-request runs crosses its target (``slo_truth.py``'s rule), per
  configuration the lower of the two.

Truth for the mean-latency decisions: 20,000-request runs at 32 rates per configuration
(``--truth-requests``); RPS* where 1/latency of the two curves cross (linear
interpolation), k* the faster configuration at each rate.

Three ways to measure, side by side on the same replicate (same seeds):

- **grid**: a full GuideLLM-style sweep per configuration (a synchronous point, a
  throughput point, 7 constant rates between; ``--grid-requests`` each), fitted once;
- **random**: the seed design, then random next points (configuration, a rate uniform in
  5-95% of the seed's throughput probe, a request count drawn from the candidates and
  raised to the fewest that give the point a steady window at the fit's slow latency, the
  rule `plan` uses), refitting after each, until settled or the grid's minutes are spent;
- **plan**: the same seed design, then `plan`'s top point each time (its set-aside
  points known to it).

The seed design per configuration is the start of a GuideLLM sweep: a throughput probe
(``--probe-requests``, set aside by the fit), a synchronous point (``--sync-requests``)
and one constant rate at half the probe, long enough for a steady window at 1.5x the
synchronous latency (when the simulator sets it aside, once more at 0.7x the rate with
twice the requests). For the SLO the low point is a constant rate at a fifth of the
probe instead of the synchronous run (at zero load TTFT is the prefill alone, while any
load makes a new request wait for decode steps: a synchronous TTFT misleads the TTFT
law's exponent) and the loaded one is at 0.8x the probe (a 200-request burst reads about
half the ceiling of these long requests). Two unsaturated points are the fewest that place eq. (1)'s C2:
from the synchronous point alone the posterior ceiling is the prior's.

Cost of a point, the same rule for every method: the simulated wall time of the run (from
the first request sent, the warm-up requests the simulator puts in front near
saturation included, to the last completion) plus ``--overhead-s`` (5 s) per point. A
method *reaches* the decision when it is settled (every answer right with posterior P >=
0.95) and the settled answer equals the truth. Fits: the dense model (eq. 1 per
configuration) for crossover and k*, the tails model for the SLO, each compiled once and
refitted with new data, 2 chains x ``--draws`` draws after as many tuning steps.

Decisions or replicates split across invocations (``--decisions``, ``--first-replicate``)
are summarised together with ``--summarise A.csv B.csv``. ``--random-cap-factor 1`` stops
random points at `plan`'s minutes in the same replicate (a censored comparison: whether
random needs more minutes than `plan`, not how many).

Prints progress on stderr, one line per finished (replicate, decision), and at the end
the summary table per decision and method: replicates, share reached, wrong when
settled, median and largest minutes and share of the grid's, seed minutes, points, and
how often `plan` was faster than random (the records also in ``--out``).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from bayesspec.bayes import get_model_class
from bayesspec.data import prepare
from bayesspec.inference.fitfile import Fit
from bayesspec.inference import SamplerSettings, compile_model, sample_compiled, settings_for
from bayesspec.loadtest.planning import plan, question_from_fit, steady_requests
from bayesspec.simulate import at_rates, setup
from bayesspec.simulate.engine import Arrivals, simulate_point
from bayesspec.simulate.sweep import _point_seed, _row

TOLERANCE = 0.05
WITHIN = 0.05
RANDOM_RANGE = (0.05, 0.95)


# ----------------------------------------------------------------------------- decisions

@dataclass
class Decision:
    name: str
    configs: dict                 # k -> alpha (None: dense)
    decode: int
    length_dist: str
    arrivals: str
    model: str
    requests: tuple               # request counts a next point may have
    targets: dict | None = None   # SLO targets, seconds
    low_point: str = "synchronous"  # the seed's low point: synchronous or constant
    mid_fraction: float = 0.5       # the seed's loaded point, a fraction of the probe

    def setup(self, k: int):
        return setup("Qwen3-8B", "H100", k=k, alpha=self.configs[k], prefill=512,
                     decode=self.decode, length_dist=self.length_dist,
                     length_cv=0.5 if self.length_dist != "fixed" else 0.0)

    @property
    def sd_k(self) -> int:
        return max(self.configs)


MEAN = dict(configs={0: None, 4: 0.7}, decode=256, length_dist="fixed", arrivals="constant",
            model="dense", requests=(100, 200, 300, 500, 700, 1000, 1500))
DECISIONS = {
    "crossover": Decision("crossover", **MEAN),
    "kstar": Decision("kstar", **MEAN),
    "slo": Decision("slo", configs={0: None, 3: 0.8}, decode=512, length_dist="lognormal",
                    arrivals="constant", model="tails",
                    requests=(100, 200, 300, 500, 700, 1000, 1500, 2000),
                    targets={"ttft_p90": 0.075, "itl_p90": 0.015}, low_point="constant",
                    mid_fraction=0.8),
}
KSTAR_FACTORS = (0.85, 1.15)


# ----------------------------------------------------------------------------- running points

def run_point(decision: Decision, k: int, strategy: str, rate: float | None, requests: int,
              seed: int, overhead_s: float) -> pd.DataFrame:
    """One simulated load point as a tidy row, with its cost ``load_seconds``: the run's
    wall time (first request sent to last completion) plus the fixed overhead."""
    s = decision.setup(k)
    arrivals = Arrivals(strategy, None if rate is None else float(rate))
    point = simulate_point(s.step_model, s.server, s.workload, arrivals, s.spec,
                           n_requests=int(requests), seed=_point_seed(s, seed, 0))
    row = _row(s, point, seed)
    row["load_seconds"] = float(np.nanmax(point.finish) - np.nanmin(point.arrival)) + overhead_s
    return pd.DataFrame([row])


def set_aside(row: pd.DataFrame) -> bool:
    """Whether the fit will set this one-row point aside (the simulator's flag, or an
    achieved rate short of the target)."""
    return bool(row["saturated"].iloc[0]) or bool(
        (row["rps"] < 0.9 * row["rps_target"]).fillna(False).iloc[0])


def minutes_of(rows: pd.DataFrame) -> float:
    return float(rows["load_seconds"].sum() / 60.0)


def seed_design(decision: Decision, replicate: int, args) -> tuple[pd.DataFrame, dict]:
    """Per configuration: a throughput probe, a low point (synchronous, or for the SLO a
    constant rate at a fifth of the probe), and a constant rate at half the probe with a
    steady window at 1.5x the low point's latency."""
    frames, probes = [], {}
    for k in decision.configs:
        base = replicate * 1000 + 17 * k
        probe = run_point(decision, k, "throughput", None, args.probe_requests, base + 1,
                          args.overhead_s)
        probes[k] = float(probe["rps"].iloc[0])
        frames.append(probe)
        if decision.low_point == "synchronous":
            low = run_point(decision, k, "synchronous", None, args.sync_requests, base + 2,
                            args.overhead_s)
            frames.append(low)
        else:
            low = steady_point(decision, k, 0.2 * probes[k], None, base + 2, args, frames)
        slow = 1.5 * float(low["latency_mean_s"].iloc[0])
        steady_point(decision, k, decision.mid_fraction * probes[k], slow, base + 5, args,
                     frames)
    return pd.concat(frames, ignore_index=True), probes


def steady_point(decision: Decision, k: int, rate: float, slow: float | None, seed: int,
                 args, frames: list) -> pd.DataFrame:
    """A constant-rate point with a steady window at latency ``slow`` (None: 100
    requests); when the simulator sets it aside, once more at 0.7x the rate with twice
    the requests, at most three times. Every run is appended to ``frames``."""
    for attempt in range(3):
        wanted = 100.0 if slow is None else steady_requests(rate, slow)
        n = int(50 * math.ceil(max(100.0, (2 ** attempt) * wanted) / 50))
        row = run_point(decision, k, decision.arrivals, rate, n, seed + attempt,
                        args.overhead_s)
        frames.append(row)
        if not set_aside(row):
            break
        rate *= 0.7
    return row


def grid_rows(decision: Decision, replicate: int, args) -> pd.DataFrame:
    """GuideLLM's sweep profile per configuration: synchronous, throughput, then 7 rates
    evenly spaced between the two measured rates, ``--grid-requests`` each."""
    frames = []
    for k in decision.configs:
        base = replicate * 1000 + 500 + 17 * k
        sync = run_point(decision, k, "synchronous", None, args.grid_requests, base,
                         args.overhead_s)
        thr = run_point(decision, k, "throughput", None, max(args.grid_requests, 200),
                        base + 1, args.overhead_s)
        low, high = float(sync["rps"].iloc[0]), float(thr["rps"].iloc[0])
        frames += [sync, thr]
        for i, rate in enumerate(np.linspace(low, high, 9)[1:-1]):
            frames.append(run_point(decision, k, decision.arrivals, rate, args.grid_requests,
                                    base + 2 + i, args.overhead_s))
    return pd.concat(frames, ignore_index=True)


# ----------------------------------------------------------------------------- truth

def mean_truth(decision: Decision, requests: int) -> dict:
    curves = {}
    for k in decision.configs:
        probe = run_point(decision, k, "throughput", None, 2000, 999, 0.0)
        ceiling = float(probe["rps"].iloc[0])
        rates = np.linspace(0.04, 0.97, 32) * ceiling
        rows = at_rates(decision.setup(k), rates, n_requests=requests, seed=777,
                        arrivals="constant").rows
        rows = rows[~rows["saturated"].astype(bool)].sort_values("rps")
        curves[k] = (rows["rps"].to_numpy(float), rows["latency_mean_s"].to_numpy(float))
    (xd, yd), (xs, ys) = curves[0], curves[decision.sd_k]
    grid = np.linspace(max(xd.min(), xs.min()), min(xd.max(), xs.max()), 4000)
    gap = np.interp(grid, xd, 1 / yd) - np.interp(grid, xs, 1 / ys)
    flips = np.flatnonzero(np.sign(gap[:-1]) != np.sign(gap[1:]))
    if not flips.size:
        raise SystemExit("no crossover in the simulator's truth: choose another setup")
    i = flips[0]
    star = float(grid[i] - gap[i] * (grid[i + 1] - grid[i]) / (gap[i + 1] - gap[i]))
    rates = [round(f * star, 3) for f in KSTAR_FACTORS]
    best, margins = {}, {}
    for rate in rates:
        dense, sd = np.interp(rate, xd, yd), np.interp(rate, xs, ys)
        best[rate] = decision.sd_k if sd < dense else 0
        margins[rate] = float(dense / sd)
    return {"rps_star": star, "kstar_rates": rates, "kstar": best, "speedups": margins}


def slo_truth(decision: Decision, requests: int) -> dict:
    """Per configuration and target, the rate where the long-run summary crosses it
    (linear interpolation on a 0.25-RPS grid); goodput = the lower per configuration."""
    rates = np.arange(3.0, 19.01, 0.25)
    goodput, crossings = {}, {}
    for k in decision.configs:
        rows = at_rates(decision.setup(k), rates, n_requests=requests, seed=12345,
                        arrivals=decision.arrivals).rows.sort_values("rps_target")
        values = []
        for metric, target in decision.targets.items():
            series = rows[metric + "_s"].to_numpy(float)
            above = np.flatnonzero(series > target)
            if above.size == 0:       # meets the target up to the highest rate run
                crossings[(k, metric)] = float("inf")
                continue
            if above[0] == 0:
                raise SystemExit(f"truth: k={k} {metric} misses {target} at every rate")
            j = above[0]
            r0, r1 = rows["rps_target"].iloc[j - 1], rows["rps_target"].iloc[j]
            v0, v1 = series[j - 1], series[j]
            crossings[(k, metric)] = float(r0 + (target - v0) * (r1 - r0) / (v1 - v0))
            values.append(crossings[(k, metric)])
        goodput[k] = min(values) if values else float("inf")
        if not np.isfinite(goodput[k]):
            raise SystemExit(f"truth: k={k} meets every target at every rate run")
    best = max(goodput, key=goodput.get)
    return {"goodput": goodput, "best": best, "crossings": crossings}


# ----------------------------------------------------------------------------- fitting

class Refitter:
    """A model compiled once, refitted on each new data set (nutpie ``with_data``).

    The tails model bakes the number of load points into its graph, so its data are
    padded to a multiple of :data:`PAD` included points with copies of one point that a
    ``fit_mask`` of 0 keeps out of every likelihood term: one compile per multiple."""

    PAD = 8

    def __init__(self, model: str, first: pd.DataFrame, draws: int, seed: int):
        self.padded = model == "tails"
        self.model = get_model_class(model)(holdout_mask=self.padded)
        self.settings = settings_for(self.model, SamplerSettings(
            draws=draws, tune=draws, chains=2, seed=seed, progress=False))
        self.compiled: dict = {}
        self.calls = 0
        self._compiled_for(prepare(_fit_rows(first)))

    def _pad(self, data: pd.DataFrame) -> tuple[pd.DataFrame, int]:
        included = int((~data["excluded"].astype(bool)).sum())
        copies = -included % self.PAD
        if not copies:
            return data, 0
        first = data.index[~data["excluded"].astype(bool)][0]
        extra = pd.concat([data.loc[[first]]] * copies, ignore_index=True)
        return pd.concat([data, extra], ignore_index=True), copies

    def _compiled_for(self, data: pd.DataFrame):
        copies = 0
        if self.padded:
            data, copies = self._pad(data)
        values = self.model.data_values(data)
        if copies:
            mask = np.ones_like(values["fit_mask"])
            mask[-copies:] = 0.0      # the copies are the last included rows
            values["fit_mask"] = mask
        key = (tuple(sorted((name, np.shape(v)) for name, v in values.items()))
               if self.padded else None)
        if key not in self.compiled:
            self.compiled[key] = compile_model(self.model.build(data), self.settings)
        return self.compiled[key], values, data

    def __call__(self, rows: pd.DataFrame) -> Fit:
        data = prepare(_fit_rows(rows))
        self.calls += 1
        settings = replace(self.settings, seed=(self.settings.seed or 0) + self.calls)
        compiled, values, data = self._compiled_for(data)
        tree = sample_compiled(compiled, settings, data=values)
        return Fit.from_sampling(self.model, data, tree)


def _fit_rows(rows: pd.DataFrame) -> pd.DataFrame:
    return rows.drop(columns=["load_seconds"], errors="ignore").reset_index(drop=True)


def question_of(fit: Fit, decision: Decision, known: dict):
    if decision.name == "crossover":
        return question_from_fit(fit, "crossover", alpha=decision.configs[decision.sd_k],
                                 k=decision.sd_k, within=WITHIN, max_draws=1000)
    if decision.name == "kstar":
        return question_from_fit(fit, "kstar", alpha=decision.configs[decision.sd_k],
                                 rps=known["kstar_rates"], ks=list(decision.configs),
                                 max_draws=1000)
    return question_from_fit(fit, "slo", targets=decision.targets, within=WITHIN,
                             max_draws=1000)


def is_right(decision: Decision, answers: list, known: dict) -> bool:
    if decision.name == "crossover":
        value = answers[0]["decision"]
        return value is not None and abs(value / known["rps_star"] - 1) <= WITHIN
    if decision.name == "kstar":
        return all(a["decision"] == known["kstar"][rate]
                   for a, rate in zip(answers, known["kstar_rates"]))
    goodput = known["goodput"]
    best = goodput[known["best"]]
    chosen = answers[0]["decision"]
    k = 0 if chosen.startswith("dense") else int(chosen.split("=")[1].split(",")[0])
    value = answers[1]["decision"]
    return (goodput[k] >= (1 - WITHIN) * best and value is not None
            and abs(value / best - 1) <= WITHIN)


# ----------------------------------------------------------------------------- methods

def sequential(method: str, decision: Decision, replicate: int, refit: Refitter, known: dict,
               cap_minutes: float, args) -> dict:
    rows, probes = seed_design(decision, replicate, args)
    seed_minutes = minutes_of(rows)
    rng = np.random.default_rng(replicate * 7919 + (0 if method == "random" else 1))
    steps, repeated = 0, 0
    proposed: set = set()
    while True:
        fit = refit(rows)
        spent = minutes_of(rows)
        question = question_of(fit, decision, known)
        # Random next points only ask whether the decision is settled: no candidates.
        skip = None if method == "plan" else {i: [] for i in range(len(question.configurations))}
        result = plan(question, tolerance=TOLERANCE, warmup_s=args.overhead_s, top=1,
                      outcomes=args.outcomes, requests=decision.requests, seed=replicate,
                      rates=skip)
        if result["settled"] or spent >= cap_minutes or steps >= args.max_steps:
            return {"minutes": spent, "seed_minutes": seed_minutes,
                    "settled": result["settled"],
                    "right": is_right(decision, result["answers"], known),
                    "reached": result["settled"] and is_right(decision, result["answers"],
                                                              known),
                    "points": len(rows), "steps": steps, "repeated": repeated,
                    "set_aside": int(fit.data["excluded"].sum()),
                    "expected_loss": result["expected_loss"]}
        if method == "plan":
            best = result["next"][0]
            k, rate, n = best.configuration.k, best.rps, best.requests
        else:
            k = int(rng.choice(list(decision.configs)))
            rate = float(rng.uniform(*RANDOM_RANGE) * probes[k])
            configuration = next(c for c in question.configurations if c.k == k)
            slow = float(np.nanquantile(configuration.latency(configuration.curves[0], rate),
                                        0.9))
            enough = [c for c in decision.requests if c >= steady_requests(rate, slow)]
            n = int(max(rng.choice(decision.requests), min(enough or [max(decision.requests)])))
        key = (k, round(rate, 2), n)
        repeated += key in proposed
        proposed.add(key)
        steps += 1
        rows = pd.concat([rows, run_point(decision, k, decision.arrivals, rate, n,
                                          replicate * 1000 + 100 + steps, args.overhead_s)],
                         ignore_index=True)


def grid(decision: Decision, replicate: int, refit: Refitter, known: dict, args) -> dict:
    rows = grid_rows(decision, replicate, args)
    fit = refit(rows)
    question = question_of(fit, decision, known)
    result = plan(question, tolerance=TOLERANCE, top=1, requests=(100,), outcomes=4,
                  rates={i: [] for i in range(len(question.configurations))})
    right = is_right(decision, result["answers"], known)
    return {"minutes": minutes_of(rows), "seed_minutes": 0.0, "settled": result["settled"],
            "right": right, "reached": result["settled"] and right, "points": len(rows),
            "steps": 0, "repeated": 0, "set_aside": int(fit.data["excluded"].sum()),
            "expected_loss": result["expected_loss"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=20)
    parser.add_argument("--first-replicate", type=int, default=0)
    parser.add_argument("--decisions", default="crossover,kstar,slo")
    parser.add_argument("--methods", default="grid,random,plan")
    parser.add_argument("--truth-requests", type=int, default=20000)
    parser.add_argument("--grid-requests", type=int, default=300)
    parser.add_argument("--probe-requests", type=int, default=200)
    parser.add_argument("--sync-requests", type=int, default=10)
    parser.add_argument("--overhead-s", type=float, default=5.0)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--max-steps", type=int, default=40)
    parser.add_argument("--outcomes", type=int, default=48,
                        help="simulated measurements per candidate (plan's default 48)")
    parser.add_argument("--slo-targets", default=None, metavar="METRIC=S,...",
                        help="the SLO decision's targets (default ttft_p90=0.075,"
                             "itl_p90=0.015)")
    parser.add_argument("--random-cap-factor", type=float, default=None, metavar="F",
                        help="stop random next points at F x plan's minutes in the same "
                             "replicate (default: at the grid's minutes). A censored "
                             "comparison for costly fits: random not reached by then needs "
                             "more minutes than plan")
    parser.add_argument("--out", default="plan_benchmark.csv")
    parser.add_argument("--summarise", nargs="+", metavar="CSV", default=None,
                        help="only print the table of records already written by --out "
                             "(several runs' files together, e.g. replicates split across "
                             "invocations)")
    args = parser.parse_args(argv)
    if args.summarise:
        records = pd.concat([pd.read_csv(path) for path in args.summarise], ignore_index=True)
        print(summarise(records).to_string(index=False))
        return 0
    if args.slo_targets:
        DECISIONS["slo"].targets = {name: float(value) for name, value in
                                    (item.split("=") for item in args.slo_targets.split(","))}
    started = time.perf_counter()
    methods = args.methods.split(",")
    records = []
    for name in args.decisions.split(","):
        decision = DECISIONS[name]
        known = (slo_truth(decision, args.truth_requests) if name == "slo"
                 else mean_truth(decision, args.truth_requests))
        print(f"truth for {name}: {describe(known)} "
              f"({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
        first, _ = seed_design(decision, 0, args)
        refit = Refitter(decision.model, first, args.draws, seed=1)
        for r in range(args.first_replicate, args.first_replicate + args.replicates):
            results = {}
            if "grid" in methods:
                results["grid"] = grid(decision, r, refit, known, args)
                cap = results["grid"]["minutes"]
            else:
                cap = minutes_of(grid_rows(decision, r, args))
            caps = {"plan": cap, "random": cap}
            for method in ("plan", "random"):
                if method in methods:
                    if (method == "random" and args.random_cap_factor is not None
                            and "plan" in results):
                        caps["random"] = min(cap, args.random_cap_factor
                                             * results["plan"]["minutes"])
                    results[method] = sequential(method, decision, r, refit, known,
                                                 caps[method], args)
            for method, result in results.items():
                records.append({"replicate": r, "decision": name, "method": method,
                                "grid_minutes": cap, "cap_minutes": caps.get(method, cap),
                                **result})
            print(f"[{r + 1 - args.first_replicate}/{args.replicates}] {name}: " + "; ".join(
                f"{m} {v['minutes']:.1f} min {'reached' if v['reached'] else 'NOT reached'}"
                f" ({v['points']} points)" for m, v in results.items())
                + f"  [{time.perf_counter() - started:.0f} s]", file=sys.stderr, flush=True)
            pd.DataFrame(records).to_csv(args.out, index=False)
    table = summarise(pd.DataFrame(records))
    print(table.to_string(index=False))
    print(f"\n{args.replicates} replicates; {time.perf_counter() - started:.0f} s")
    return 0


def describe(known: dict) -> str:
    if "rps_star" in known:
        return (f"RPS* {known['rps_star']:.3f}; k* {known['kstar']} "
                f"(speedups {', '.join(f'{v:.3f}' for v in known['speedups'].values())})")
    return (f"goodput {', '.join(f'k={k}: {v:.3f}' for k, v in known['goodput'].items())}; "
            f"crossings {', '.join(f'k={k} {m}: {v:.3f}' for (k, m), v in known['crossings'].items())}")


def summarise(records: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (decision, method), part in records.groupby(["decision", "method"], sort=False):
        ratio = part["minutes"] / part["grid_minutes"]
        rows.append({"decision": decision, "method": method, "replicates": len(part),
                     "reached": f"{part['reached'].mean():.0%}",
                     "settled": f"{part['settled'].mean():.0%}",
                     "wrong when settled": int((part["settled"] & ~part["right"]).sum()),
                     "median minutes": round(float(part["minutes"].median()), 1),
                     "median share of grid": round(float(ratio.median()), 2),
                     "max share of grid": round(float(ratio.max()), 2),
                     "median seed minutes": round(float(part["seed_minutes"].median()), 1),
                     "median points": int(part["points"].median()),
                     "repeated points": int(part["repeated"].sum()),
                     "plan faster": _plan_faster(records, decision, part)})
    return pd.DataFrame(rows)


def _plan_faster(records: pd.DataFrame, decision: str, part: pd.DataFrame) -> str:
    """For the plan rows: in how many replicates plan reached the decision in fewer
    minutes than random next points (random not reached within its cap counts as more:
    the cap is never below plan's minutes)."""
    if part["method"].iloc[0] != "plan":
        return ""
    random = records[(records["decision"] == decision) & (records["method"] == "random")]
    if random.empty:
        return ""
    both = part.merge(random, on="replicate", suffixes=("", "_random"))
    faster = both["reached"] & (~both["reached_random"]
                                | (both["minutes"] < both["minutes_random"]))
    return f"{int(faster.sum())}/{len(both)}"


if __name__ == "__main__":
    sys.exit(main())
