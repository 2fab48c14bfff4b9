#!/usr/bin/env python
"""Speed harness: what the engine cap's slot queue costs.

The slot queue is the engine's concurrency cap (docs/laws.md, "The concurrency cap").
Two parts, each against its baseline in the same run:

    bayesspec simulate --grid examples/slo.toml -o slo.csv
    python benchmarks/queue_cost.py forms
    python benchmarks/queue_cost.py forms --data slo.csv --evaluations 2000
    python -W ignore benchmarks/queue_cost.py tails slo.csv            # gradients, 1 min
    python -W ignore benchmarks/queue_cost.py tails slo.csv --fits     # + three fits, 8 min

``forms``: the queue's partial sums from one regularised incomplete beta (as
`bayesspec.laws` has them) against two incomplete betas (the earlier form, kept here as
the baseline), and the largest relative gap between the two forms over a wide random
design. NumPy: one evaluation over ``--elements`` (draws x rates x draft lengths: `kstar
--vllm` on the README walkthrough's fit evaluates 337k such elements near the cap). With
``--data`` (a tidy file whose tails fit carries the cap, e.g. the walkthrough's
``slo.csv``): one log density + gradient of the ``tails`` model in numba, the backend
nutpie samples with, ``--evaluations`` times at the initial point. Prints seconds for
each form and their ratio (new / baseline), per part, and the largest relative
difference between the two forms.

``tails``: the README's `tails` fit with and without the queue: its gradient, and
(``--fits``) one first pass of each of three ways to fit the same rows:
- "in the likelihood": the slot queue wherever the cap could move the points at twice
  their load (the rule when nothing checks the draws);
- "checked on the draws": what `fit` does, the cap left out where the fitted points stay
  below where it moves the latency, and the draws checked afterwards
  (``LatencyModel.cap_reach_share``), reweighted or refitted when the cap reaches them;
- "cap unknown": max_num_seqs and kv_cache_tokens dropped, eq. (1) alone.
The gradient is timed on PyTensor's C backend (``compile_dlogp``) at the model's initial
point; the fits run nutpie (numba) as `fit` does, one first pass at target_accept 0.9
(no retry), seed 1, chains started as the model chooses. Prints seconds per gradient and
their ratio; per fit its seconds (compilation included), divergences, mean leapfrog
steps per draw, and C2's and the p99's exponent's posterior medians and 90% intervals,
so that the posteriors can be compared.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bayesspec import laws  # noqa: E402
from bayesspec.bayes import get_model_class  # noqa: E402
from bayesspec.data import read_tidy  # noqa: E402
from bayesspec.inference import SamplerSettings  # noqa: E402

CAP_COLUMNS = ["max_num_seqs", "kv_cache_tokens"]


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


def numba_gradient_seconds(data_path: Path, evaluations: int, queue) -> float:
    """Seconds per tails log density + gradient in numba with ``queue`` as the slot
    queue."""
    from bayesspec.bayes import priors, tails

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


def c_gradient_seconds(data, repeats: int = 200) -> float:
    """Seconds per tails gradient on PyTensor's C backend, the cap by the unchecked rule."""
    pm_model = get_model_class("tails")(None).build(data)   # the unchecked rule
    gradient = pm_model.compile_dlogp()
    point = pm_model.initial_point()
    gradient(point)
    started = time.perf_counter()
    for _ in range(repeats):
        gradient(point)
    return (time.perf_counter() - started) / repeats


def interval(values) -> str:
    low, mid, high = np.quantile(values, [0.05, 0.5, 0.95])
    return f"{mid:.5g} [{low:.5g}, {high:.5g}]"


def first_pass(data, checked: bool) -> dict:
    model = get_model_class("tails")(None)
    model.checks_cap_on_draws = checked
    fit = model.fit(data, SamplerSettings(seed=1, target_accept=0.9))
    stats = fit.tree["sample_stats"]
    groups = range(len(fit.groups))
    return {"seconds": float(fit.tree.attrs["fit_seconds"]),
            "caps in the likelihood": int(fit.groups["cap_in_likelihood"].sum()),
            "share of draws the cap would move": fit.tree.attrs.get("cap_reach_share"),
            "what fit did": fit.tree.attrs.get("cap_check"),
            "importance weights (effective share, largest in even shares)": (
                fit.tree.attrs.get("cap_importance_ess_share"),
                fit.tree.attrs.get("cap_importance_max_weight")),
            "divergences": int(stats["diverging"].values.sum()),
            "steps per draw": round(float(stats["n_steps"].values.mean()), 1),
            "C2": [interval(fit.draws("C2", g)) for g in groups],
            "p99 exponent": [interval(np.asarray(fit.posterior["tail_exponent"].sel(
                metric="p99").isel(group=g).values).ravel()) for g in groups],
            "verdict": fit.diagnostics["text"]}


def forms(args) -> None:

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
        new = numba_gradient_seconds(args.data, args.evaluations, laws.slot_queue_latency_expr)
        old = numba_gradient_seconds(args.data, args.evaluations, two_beta_queue)
        print(f"tails logp + gradient (numba), {args.data.name}: one beta {1e3 * new:.3f} ms, "
              f"two betas (baseline) {1e3 * old:.3f} ms, ratio {new / old:.2f}")



def tails_fit(args) -> None:
    with_cap = read_tidy(args.csv)
    without = with_cap.drop(columns=[c for c in CAP_COLUMNS if c in with_cap.columns])
    timed = {"with the cap": c_gradient_seconds(with_cap), "without": c_gradient_seconds(without)}
    for label, seconds in timed.items():
        print(f"gradient {label}: {1000 * seconds:.3f} ms")
    print(f"ratio with / without: {timed['with the cap'] / timed['without']:.2f}")
    if args.fits:
        for label, data, checked in (("in the likelihood", with_cap, False),
                                     ("checked on the draws", with_cap, True),
                                     ("cap unknown", without, True)):
            print(f"first pass, {label}:")
            for key, value in first_pass(data, checked).items():
                print(f"  {key}: {value}")



def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parts = parser.add_subparsers(dest="part", required=True)
    one = parts.add_parser("forms", help="one incomplete beta against two")
    one.add_argument("--elements", type=int, default=337_000)
    one.add_argument("--data", type=Path)
    one.add_argument("--evaluations", type=int, default=2000)
    fit = parts.add_parser("tails", help="the tails fit with and without the queue")
    fit.add_argument("csv", help="the README's SLO sweeps (bayesspec simulate --grid "
                     "examples/slo.toml)")
    fit.add_argument("--fits", action="store_true", help="also one first pass of each")
    args = parser.parse_args(argv)
    (forms if args.part == "forms" else tails_fit)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
