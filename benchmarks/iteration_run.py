"""Validation: a load test replayed iteration by iteration with the law's own parts.

The engine, its check against Vidur's own iteration logs (``log``), and the Vidur sets
replayed with other arrivals (``replay``): the finding that the Vidur sets' held-out
shortfall is their shared arrival seed, not the law (docs/findings/run-effects.md).

The engine, as Vidur's vLLM scheduler runs without chunked prefill: each iteration either
prefills every waiting prompt (a + b m seconds for m prompts, at most
max_num_batched_tokens / prompt length of them and room under the cap) or runs one decode
iteration of the whole batch at t_d(B) from the group's decode profile. A request needs
its prefill and decode_tokens - 1 decode iterations. Arrivals are Vidur 0.0.26's own
(``vidur_arrivals``). ``fit_group_prefill`` fits a and b to a group's measured means by
least squares, with each run's own arrivals (the truth ``replay`` replays).

``log``: whether request-level randomness in a finite run reproduces what Vidur's runs
measure (mean latency, realized rate, the run's mean over its steady middle, the first
and last N requests over that middle), with nothing fitted. The fluid run
(``laws.fluid_run_latency``) is printed beside it for comparison. First write Vidur's
iteration log of a group at its sweep's rates (needs the Vidur environment of
``examples/vidur/README.md``), then replay it:

    R=$(awk -F, '$1=="InternLM-20B" && $5==1152 {printf "%s%s", s, $9; s=","}' \
        examples/vidur/vidur_fresh.csv)
    VIDUR_PREDICTOR_CACHE=.vidur/cache-decode-fresh .vidur/venv/bin/python \
        examples/vidur/iteration_profile.py --model internlm/internlm-20b --device a100 \
        --tp 4 --prefill 1152 --decode 128 --threads 2 --rates $R --json internlm.json
    python benchmarks/iteration_run.py log internlm.json --verifier InternLM-20B \
        --gpu A100 --prefill 1152 --decode 128

It prints, per logged rate, Vidur against the replay: N in flight, the mean latency, the
realized rate, run / steady middle (also the fluid run's), first N / middle (also the
mean over ``--seeds`` other arrival seeds) and last N / middle. The prefill iteration's
a + b m comes from the log's own prefill iterations.

``replay``: each group's truth is the engine with the group's decode profile and the
prefill iteration's a + b m fitted to all of the group's measured means with the runs'
own arrivals. Every row is then replayed at its target rate with the arrivals of
``--seeds``: ``independent`` (a seed of its own per row, as separate load tests have) or
``shared:S`` (seed S at every rate, scaled to it, as the Vidur sets and a GuideLLM sweep
with a fixed seed have). The new file keeps the original's columns, with the replayed
run's realized rate, mean, spread, percentiles and TTFT. The dense fit's held-out check
then runs on it:

    python benchmarks/iteration_run.py replay --set fresh --seeds independent \
        -o fresh_indep.csv
    python benchmarks/iteration_run.py replay --set fresh --seeds shared:1 -o fresh_seed1.csv
    python examples/vidur/evaluate.py --csv fresh_indep.csv --models dense-profile \
        --fraction 0.6 --folds 0 --out DIR

It prints per group the fitted prefill iteration (a, b in ms), the fit's rms log residual
and its seconds; then the file written (about 3-5 minutes per set on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import re
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from bayesspec import laws

VIDUR = Path(__file__).resolve().parents[1] / "examples" / "vidur"
KEYS = ["verifier", "gpu", "tensor_parallel", "prefill_tokens", "decode_tokens"]
SETS = ("dense", "fresh", "capped")


def profiled_groups(set_name: str):
    """Per load-sweep group of ``vidur_<set_name>.csv``: (its key, its rows by rate, the
    profile's batch sizes and seconds per decode iteration, its max_num_seqs)."""
    data = pd.read_csv(VIDUR / f"vidur_{set_name}.csv")
    profiles = pd.read_csv(VIDUR / "decode_profiles.csv")
    profiles = profiles[profiles["set"] == set_name]
    for key, group in data.groupby(KEYS, sort=False):
        profile = profiles.loc[(profiles[KEYS] == pd.Series(key, index=KEYS)).all(axis=1)]
        yield (key, group.sort_values("rps"), profile["batch_size"].to_numpy(float),
               profile["decode_iteration_s"].to_numpy(float),
               float(group["max_num_seqs"].iloc[0]))


def profile(verifier, gpu, prefill, decode):
    table = pd.read_csv(VIDUR / "decode_profiles.csv")
    rows = table[(table.verifier == verifier) & (table.gpu == gpu)
                 & (table.prefill_tokens == prefill) & (table.decode_tokens == decode)]
    rows = rows.sort_values("batch_size")
    return rows.batch_size.to_numpy(float), rows.decode_iteration_s.to_numpy(float)


def vidur_arrivals(rate, n, seed):
    """Vidur 0.0.26's arrival times for a target mean rate ``rate``, as
    `examples/vidur/run_point.py` asks for them: exponential gaps at qps = rate (1 - e^-3),
    cut at three of its mean gaps, drawn from Python's ``random`` seeded with the run's
    seed."""
    import math
    import random
    qps = rate * (1.0 - math.exp(-3.0))
    random.seed(seed)
    gaps = [min(-math.log(1.0 - random.random()) / qps, 3.0 / qps) for _ in range(n)]
    return np.cumsum(gaps)


def simulate_run(rate, n, decode, prefill, sizes, times, cap, rng, max_prompts=1 << 30,
                 arrivals=None, with_ttft=False):
    """Latencies by arrival order of one run of ``n`` arrivals at ``rate`` (Poisson from
    ``rng`` unless ``arrivals`` gives their times);
    ``prefill`` (a, b): a prefill iteration of m prompts takes a + b m seconds. With
    ``with_ttft``, (latencies, times to first token)."""
    if arrivals is None:
        arrivals = np.cumsum(rng.exponential(1.0 / rate, n))
    table = laws._profile_time(np.arange(0, cap + 2, dtype=float), sizes, times)
    left = np.zeros(n, dtype=np.int64)        # decode iterations still needed
    done = np.full(n, np.nan)
    first = np.full(n, np.nan)
    now = 0.0
    arrived = 0        # arrivals up to now
    admitted = 0       # prompts prefilled (first come first served)
    running = np.zeros(0, dtype=np.int64)     # indices in decode
    while admitted < n or running.size:
        arrived = int(np.searchsorted(arrivals, now, side="right"))
        waiting = arrived - admitted
        room = cap - running.size
        if waiting > 0 and room > 0:
            take = min(waiting, room, max_prompts)
            now += prefill[0] + prefill[1] * take
            new = np.arange(admitted, admitted + take)
            admitted += take
            left[new] = decode - 1
            first[new] = now
            if decode > 1:
                running = np.concatenate([running, new])
            else:
                done[new] = now
            continue
        if not running.size:
            now = arrivals[arrived]
            continue
        # decode iterations until the next arrival is waiting or a request is done
        step = table[running.size]
        steps = int(left[running].min())
        if arrived < n:
            steps = min(steps, max(1, int(np.ceil((arrivals[arrived] - now) / step))))
        now += step * steps
        left[running] -= steps
        finished = left[running] == 0
        done[running[finished]] = now
        running = running[~finished]
    if with_ttft:
        return done - arrivals, first - arrivals
    return done - arrivals


def prompt_budget(row) -> int:
    """The most prompts one prefill iteration takes: max_num_batched_tokens over the
    prompt's tokens, at least one."""
    return max(int(row["max_num_batched_tokens"]) // int(row["prefill_tokens"]), 1)


def replay(rows, decode, prefill, sizes, times, cap):
    """Each row's run mean by the replay, with the row's own arrivals (its target rate
    and the seed its ``source`` names)."""
    means = []
    for _, row in rows.iterrows():
        seed = int(re.search(r"seed=(\d+)", row["source"]).group(1))
        arrivals = vidur_arrivals(row["rps_target"], int(row["n_requests"]), seed)
        latency = simulate_run(row["rps_target"], int(row["n_requests"]), int(decode), prefill,
                               sizes, times, int(cap), None, prompt_budget(row),
                               arrivals=arrivals)
        means.append(latency.mean())
    return np.array(means)


def fit_prefill(rows, decode, sizes, times, cap, start):
    """The prefill iteration's (a, b) that bring the replay of ``rows`` (their own
    arrivals) closest to their measured means in log, from ``start`` (log a, log b);
    returns (a, b) and the least-squares solution."""
    measured = rows["latency_mean_s"].to_numpy(float)

    def residual(theta):
        return np.log(measured) - np.log(replay(rows, decode, tuple(np.exp(theta)),
                                                sizes, times, cap))

    solution = least_squares(residual, start, diff_step=0.02, max_nfev=40,
                             bounds=(np.log([1e-5, 1e-5]), np.log([10.0, 10.0])))
    return tuple(np.exp(solution.x)), solution


def fit_group_prefill(rows, decode, sizes, times, cap):
    """:func:`fit_prefill` on all of a group's ``rows``, started from a stall of half the
    top rate's mean gap, its fixed part at most t_d(1)."""
    c2 = 0.5 / rows["rps"].max()
    return fit_prefill(rows, decode, sizes, times, cap,
                       np.log([min(times[0], 0.5 * c2), max(0.5 * c2, 1e-4)]))


def run_over_middle(latency, in_flight):
    """The run's mean over its steady middle (the requests between the first and last
    2N, as `examples/vidur/iteration_profile.py` measures it), and that middle's mean."""
    cut = int(2 * in_flight)
    middle = latency[cut:-cut] if 2 * cut < latency.size else latency
    return latency.mean() / middle.mean(), middle.mean()


def summary(latency, arrivals):
    """(mean, run / middle, first N / middle, last N / middle, realized rate)."""
    rate = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
    in_flight = int(round(rate * latency.mean()))
    ratio, middle = run_over_middle(latency, in_flight)
    return (latency.mean(), ratio, latency[:in_flight].mean() / middle,
            latency[-in_flight:].mean() / middle, rate)


def check_log(args) -> None:
    group = dict(verifier=args.verifier, gpu=args.gpu, prefill=args.prefill,
                 decode=args.decode)
    points = json.loads(Path(args.log).read_text())["points"]
    sizes, times = profile(group["verifier"], group["gpu"], group["prefill"],
                           group["decode"])
    # the prefill iteration's cost, a + b m for m prompts, from the run's own log
    counts = np.array([p["prefills_per_prefill_iter"] for p in points])
    spans = np.array([p["prefill_iter_ms"] for p in points]) / 1000.0
    slope, fixed = np.polyfit(counts, spans, 1)
    prefill = (fixed, slope)
    max_prompts = max(args.max_num_batched_tokens // group["prefill"], 1)
    print(f"\n{group['verifier']} {group['gpu']} ({group['prefill']},{group['decode']}): "
          f"prefill iteration {1000 * fixed:.2f} + {1000 * slope:.2f} m ms")
    print("     N | mean (s) Vidur / replay | rps Vidur / replay | run/middle Vidur / "
          "replay / fluid | first N/middle Vidur / replay / other seeds | "
          "last N/middle Vidur / replay")
    for point in points:
        rate = point["rate"]

        def replayed(seed):
            arrivals = vidur_arrivals(rate, args.requests, seed)
            latency = simulate_run(rate, args.requests, group["decode"], prefill, sizes,
                                   times, args.cap, None, max_prompts, arrivals=arrivals)
            return summary(latency, arrivals)

        own = replayed(0)
        others = np.array([replayed(seed) for seed in range(1, 1 + args.seeds)])
        c1 = fixed + slope + (group["decode"] - 1) * times[0]
        c2 = fixed + slope
        pieces = laws.profile_segments(group["decode"], sizes, times, args.cap)
        knots, values, slopes = pieces
        n_star, _, _ = laws.profile_concurrency_expr(
            np.array([[own[4]]]), np.array([[c1]]), np.array([[c2]]), knots[None],
            values[None], slopes[None])
        law_steady = float(np.ravel(n_star)[0]) / own[4]
        fluid = laws.fluid_run_latency(own[4], args.requests, c1, c2, args.cap, pieces,
                                       steady=law_steady) / law_steady
        middle = point["steady_latency_s"]
        print(f"{point['little_n']:6.1f} | {point['latency_mean_s']:7.3f} / {own[0]:7.3f} | "
              f"{point['rps']:6.3f} / {own[4]:6.3f} | {point['run_over_steady']:.4f} / "
              f"{own[1]:.4f} / {fluid:.4f} | {point['first_n_latency_s'] / middle:.3f} / "
              f"{own[2]:.3f} / {others[:, 2].mean():.3f} | "
              f"{point['last_n_latency_s'] / middle:.3f} / {own[3]:.3f}", flush=True)



def replay_set(args) -> None:
    warnings.filterwarnings("ignore")
    shared = None if args.seeds == "independent" else int(args.seeds.split(":")[1])
    data = pd.read_csv(VIDUR / f"vidur_{args.set}.csv")
    out = []
    for index, (key, group, sizes, times, cap) in enumerate(profiled_groups(args.set)):
        started = time.time()
        decode = float(key[4])
        prefill, solution = fit_group_prefill(group, decode, sizes, times, cap)
        rms = float(np.sqrt(np.mean(solution.fun ** 2)))
        for position, (row_index, row) in enumerate(group.iterrows()):
            seed = shared if shared is not None else args.seed_base * (index + 1) + position
            n = int(row["n_requests"])
            arrivals = vidur_arrivals(row["rps_target"], n, seed)
            latency, ttft = simulate_run(
                row["rps_target"], n, int(decode), prefill, sizes, times, int(cap), None,
                prompt_budget(row),
                arrivals=arrivals, with_ttft=True)
            new = row.copy()
            rps = (n - 1) / (arrivals[-1] - arrivals[0])
            new["rps"] = rps
            new["latency_mean_s"] = latency.mean()
            new["latency_std_s"] = latency.std(ddof=1)
            new["latency_p50_s"], new["latency_p95_s"], new["latency_p99_s"] = np.percentile(
                latency, [50, 95, 99])
            new["ttft_mean_s"] = ttft.mean()
            new["mean_concurrency"] = rps * latency.mean()
            new["source"] = f"{row['source']} replayed seed={seed}"
            out.append(new)
        print(f"{' '.join(map(str, key))}: prefill a {1000 * prefill[0]:.2f} ms, "
              f"b {1000 * prefill[1]:.2f} ms, fit rms {rms:.2e}, {time.time() - started:.0f} s",
              flush=True)
    frame = pd.DataFrame(out)[data.columns]
    frame.to_csv(args.out, index=False)
    print(f"wrote {len(frame)} rows to {args.out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parts = parser.add_subparsers(dest="part", required=True)
    log = parts.add_parser("log", help="the replay against one group's Vidur iteration log")
    log.add_argument("log", help="iteration_profile.py --json output of one group")
    log.add_argument("--verifier", required=True)
    log.add_argument("--gpu", required=True)
    log.add_argument("--prefill", type=int, required=True)
    log.add_argument("--decode", type=int, required=True)
    log.add_argument("--seeds", type=int, default=7, help="other seeds to compare")
    log.add_argument("--requests", type=int, default=1000)
    log.add_argument("--cap", type=int, default=128)
    log.add_argument("--max-num-batched-tokens", type=int, default=4096)
    replay = parts.add_parser("replay", help="a Vidur set replayed with other arrivals")
    replay.add_argument("--set", choices=SETS, default="fresh")
    replay.add_argument("--seeds", default="independent", help="independent | shared:S")
    replay.add_argument("--seed-base", type=int, default=1000,
                        help="independent: row j of group g takes seed base (g + 1) + j")
    replay.add_argument("-o", "--out", required=True)
    args = parser.parse_args()
    (check_log if args.part == "log" else replay_set)(args)


if __name__ == "__main__":
    main()
