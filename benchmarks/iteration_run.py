"""A load test simulated iteration by iteration with the law's own parts (issue 34):
does request-level randomness give the fill and drain that Vidur's runs measure, where
the fluid run (`laws.fluid_run_latency`) gets a quarter to half of it at low load?

    python benchmarks/iteration_run.py      # the two vidur_fresh groups with an iteration log

The engine, as Vidur's vLLM scheduler runs it without chunked prefill: each iteration
either prefills every waiting prompt (a + b m seconds for m prompts, at most
max_num_batched_tokens / prompt length of them and room under the cap) or runs one
decode iteration of the whole batch at t_d(B) from the group's decode profile. A request
needs its prefill and decode_tokens - 1 decode iterations. Arrivals are Vidur's own
(`vidur_arrivals`: its generator at the run's target rate and seed 0). Inputs are the
group's measured parts (the prefill iteration's a + b m from the run's own iteration log,
`results_iterations_fresh_*.json`, and its decode profile), nothing fitted.

Printed per rate, Vidur against the replay: the mean latency, the realized rate, the
run's mean over its steady middle (the requests between the first and last 2N, as
`examples/vidur/iteration_profile.py` measures it; also the fluid run's), and the first
and last N requests over the middle (the replay's first N also with seeds 1-7).
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from bayesspec import laws

GROUPS = {
    "internlm": dict(file="benchmarks/results_iterations_fresh_internlm20b_a100_1152_128.json",
                     verifier="InternLM-20B", gpu="A100", prefill=1152, decode=128),
    "llama7b": dict(file="benchmarks/results_iterations_fresh_llama2_7b_h100_128_512.json",
                    verifier="Llama-2-7B", gpu="H100", prefill=128, decode=512),
}


def profile(verifier, gpu, prefill, decode):
    import pandas as pd
    table = pd.read_csv("examples/vidur/decode_profiles.csv")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=7, help="other seeds to compare")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--cap", type=int, default=128)
    args = parser.parse_args()
    for group in GROUPS.values():
        points = json.load(open(group["file"]))["points"]
        sizes, times = profile(group["verifier"], group["gpu"], group["prefill"],
                               group["decode"])
        # the prefill iteration's cost, a + b m for m prompts, from the run's own log
        counts = np.array([p["prefills_per_prefill_iter"] for p in points])
        spans = np.array([p["prefill_iter_ms"] for p in points]) / 1000.0
        slope, fixed = np.polyfit(counts, spans, 1)
        prefill = (fixed, slope)
        max_prompts = 4096 // group["prefill"]
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


if __name__ == "__main__":
    main()
