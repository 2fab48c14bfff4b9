#!/usr/bin/env python
"""Speed harness: what the slot queue costs, one incomplete beta against two.

The slot queue is the engine's concurrency cap (docs/laws.md, "The concurrency cap").
Its partial sums from one regularised incomplete beta (as `bayesspec.laws` has them) are
timed against two incomplete betas (the earlier form, kept here as the baseline) in one
run, and the largest relative gap between the two forms is measured over a wide random
design.

    python benchmarks/queue_cost.py
    bayesspec simulate --grid examples/slo.toml -o slo.csv
    python benchmarks/queue_cost.py --data slo.csv --evaluations 2000

NumPy: one evaluation over ``--elements`` (draws x rates x draft lengths: `kstar --vllm`
on the README walkthrough's fit evaluates 337k such elements near the cap). With
``--data`` (a tidy file whose tails fit carries the cap, e.g. the walkthrough's
``slo.csv``): one log density + gradient of the ``tails`` model in numba, the backend
nutpie samples with, ``--evaluations`` times at the initial point.

Prints seconds for each form and their ratio (new / baseline), per part, and the largest
relative difference between the two forms.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bayesspec import laws  # noqa: E402


def two_beta_queue(rps, c1, c2, cap, xp=np, *, wait_scale=1.0, soft_margin=None):
    """The baseline: P(N <= cap) and E[N; N <= cap] each from its own incomplete beta."""
    betainc, gammaln = laws._special(xp)
    utilisation = rps * c2
    free = 1.0 - utilisation
    shape = c1 / c2
    rho = rps / laws.cap_throughput_expr(c1, c2, cap)
    if soft_margin is not None:
        edge = 1.0 - soft_margin
        excess = xp.maximum(rho - edge, 0.0)
        rho = xp.where(rho < edge, rho, 1.0 - soft_margin / (1.0 + excess / soft_margin))
    log_at_cap = (gammaln(shape + cap) - gammaln(shape) - gammaln(cap + 1.0)
                  + shape * xp.log(free) + cap * xp.log(utilisation))
    at_cap = xp.exp(log_at_cap)
    below = betainc(shape, cap + 1.0, free)
    mean_below = c1 / free * betainc(shape + 1.0, cap, free)
    waiting = rho / (1.0 - rho)
    per_rate = (c1 + c2 * (cap - 1.0)) / cap
    tail_mean = at_cap * per_rate / (1.0 - rho) * (cap + wait_scale / (1.0 - rho))
    return (mean_below + tail_mean) / (below + at_cap * waiting)


def design(n: int, seed: int = 1):
    """C1 0.01-30 s, r = C1/C2 0.3-1000, cap 1-1000, rates 0.1%-99.99% of the ceiling."""
    rng = np.random.default_rng(seed)
    c1 = 10 ** rng.uniform(-2, 1.5, n)
    c2 = c1 / 10 ** rng.uniform(-0.5, 3, n)
    cap = 10 ** rng.uniform(0, 3, n)
    rps = laws.ceiling_rps(c1, c2, cap) * rng.uniform(0.001, 0.9999, n)
    return rps, c1, c2, cap


def best_of(function, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def gradient_seconds(data_path: Path, evaluations: int, queue) -> float:
    import pymc as pm

    from bayesspec.bayes import get_model_class
    from bayesspec.bayes import priors, tails
    from bayesspec.data import read_tidy

    tails.slot_queue_latency_expr = priors.slot_queue_latency_expr = queue
    try:
        model = get_model_class("tails")().build(read_tidy(data_path))
        function = model.logp_dlogp_function(ravel_inputs=True, mode="NUMBA")
        function.set_extra_values({})
        start = model.initial_point()
        point = np.concatenate([np.ravel(start[v.name]) for v in function._grad_vars])
        function(point)
        return best_of(lambda: [function(point) for _ in range(evaluations)], 3) / evaluations
    finally:
        tails.slot_queue_latency_expr = priors.slot_queue_latency_expr = \
            laws.slot_queue_latency_expr


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=337_000)
    parser.add_argument("--data", type=Path)
    parser.add_argument("--evaluations", type=int, default=2000)
    args = parser.parse_args(argv)

    values = design(args.elements)
    one = laws.slot_queue_latency_expr(*values)
    two = two_beta_queue(*values)
    print(f"largest relative gap between the forms: {np.max(np.abs(one / two - 1)):.2e} "
          f"({args.elements} elements, all finite: {bool(np.isfinite(one).all())})")
    new = best_of(lambda: laws.slot_queue_latency_expr(*values), 5)
    old = best_of(lambda: two_beta_queue(*values), 5)
    print(f"numpy, {args.elements} elements: one beta {new:.3f} s, two betas (baseline) "
          f"{old:.3f} s, ratio {new / old:.2f}")
    if args.data:
        new = gradient_seconds(args.data, args.evaluations, laws.slot_queue_latency_expr)
        old = gradient_seconds(args.data, args.evaluations, two_beta_queue)
        print(f"tails logp + gradient (numba), {args.data.name}: one beta {1e3 * new:.3f} ms, "
              f"two betas (baseline) {1e3 * old:.3f} ms, ratio {new / old:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
