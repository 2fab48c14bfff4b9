"""Prefill batching: why the stall per request in flight falls with the load (issue 34).

    .vidur/venv/bin/python examples/vidur/iteration_profile.py --model ... --table \
        --rates R1,R2,... --json run.json          # one sweep, every iteration logged
    python benchmarks/prefill_batching.py run.json [run2.json ...]

Without chunked prefill, vLLM's scheduler prefills every waiting prompt in one iteration
(up to max_num_batched_tokens / prompt length of them), and a prefill iteration of n
prompts costs t_p(n) = a + b n: a fixed part (weights read, all-reduce, launches) and a
part per prompt. As the arrival rate rises more prompts wait at each iteration boundary,
so the prefill time per prompt, t_p(n)/n averaged over iterations, falls, and with it the
stall that each later arrival puts on a running decode: eq. (1)'s C2.

For each load point of a logged run this prints the measured prompts per prefill
iteration and the measured stall per arrival (the time a request's decode phase spends in
prefill iterations, over the RPS x decode-phase time arrivals prefilled meanwhile), in ms
and relative to one prompt's prefill iteration t_p(1) (eq. (1)'s C2 at light load), and
what the iteration chain predicts: the number waiting at a boundary w is
admitted up to the budget, the next iteration is a prefill of those (t_p from the run's
own prefill table) or, with none waiting, a decode iteration (the measured mean decode
iteration), and w' = w - admitted + Poisson(RPS x its length). Its stationary law gives
prompts per prefill iteration and the prefill time per prompt.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from scipy.stats import poisson


def chain(rps: float, decode_s: float, prefill_s: np.ndarray, budget: int,
          states: int = 120) -> tuple[float, float]:
    """(prompts per prefill iteration, prefill seconds per prompt) of the iteration chain
    at arrival rate ``rps``; ``prefill_s[n-1]`` is one prefill iteration of n prompts."""
    waiting = np.arange(states)
    admitted = np.minimum(waiting, budget)
    length = np.where(admitted > 0, prefill_s[np.maximum(admitted, 1) - 1], decode_s)
    left = waiting - admitted
    transition = np.zeros((states, states))
    for w in range(states):
        arrivals = poisson.pmf(np.arange(states), rps * length[w])
        target = np.minimum(left[w] + np.arange(states), states - 1)
        np.add.at(transition[w], target, arrivals)
    transition /= transition.sum(axis=1, keepdims=True)
    values, vectors = np.linalg.eig(transition.T)
    stationary = np.real(vectors[:, np.argmin(np.abs(values - 1.0))])
    stationary = stationary / stationary.sum()
    prefills = stationary * (admitted > 0)
    per_iteration = float(np.sum(prefills * admitted) / np.sum(prefills))
    per_prompt = float(np.sum(prefills * length) / np.sum(prefills * admitted))
    return per_iteration, per_prompt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="iteration_profile.py --json outputs")
    parser.add_argument("--max-num-batched-tokens", type=int, default=4096)
    args = parser.parse_args()
    for path in args.runs:
        run = json.load(open(path))
        table = run["prefill_table"]
        prefill_s = np.array([row["total_ms"] for row in table]) / 1e3
        prompt = args.max_num_batched_tokens // len(table)
        fixed = 2 * prefill_s[0] - prefill_s[1]
        print(f"{path}: prefill of 1 prompt {1e3 * prefill_s[0]:.1f} ms, of 2 "
              f"{1e3 * prefill_s[1]:.1f} ms (fixed part {100 * fixed / prefill_s[0]:.0f}%), "
              f"at most {len(table)} prompts per iteration (about {prompt} tokens each)")
        print("      N  prompts/iter (measured, chain)  stall per arrival ms (measured, "
              "chain)  / t_p(1) (measured, chain)")
        for point in run["points"]:
            per_iteration, per_prompt = chain(point["rps"], point["decode_iter_ms"] / 1e3,
                                              prefill_s, len(table))
            measured = point["stall_time_s"] / (point["rps"] * point["decode_phase_s"])
            print(f"  {point['little_n']:6.1f}  {point['prefills_per_prefill_iter']:8.2f} "
                  f"{per_iteration:6.2f}            {1e3 * measured:8.1f} "
                  f"{1e3 * per_prompt:6.1f}            {measured / prefill_s[0]:6.3f} "
                  f"{per_prompt / prefill_s[0]:6.3f}")


if __name__ == "__main__":
    main()
