"""``predict --concurrency`` and ``kstar --concurrency``: answers on the axis a closed-loop
sweep is measured on (``vllm bench serve --max-concurrency N``, GuideLLM's ``concurrent``
profile). The verbs themselves live in :mod:`bayesspec.cli.deciding`; this module gives
them the load axis (``--rps`` or ``--concurrency``) and the concurrency answers."""

from __future__ import annotations

import numpy as np

from bayesspec.errors import BadInput
from bayesspec.outputs import emit_json
from bayesspec.cli.common import (check_prob, finish, fmt, group_criteria, load_fit,
                                  parse_list, strict_exit)

__all__ = ["add_load_axis", "on_load_axis", "kstar_on_axis", "predict", "answer_kstar",
           "levels_of"]

EXTRAPOLATED = "*"
RPS_HELP = "LIST of rates: 1,2,5 or start:stop:step"
CONCURRENCY_HELP = ("instead of --rps: LIST of concurrency levels, whole numbers of requests "
                    "kept in flight by a closed loop of clients (vllm bench serve "
                    "--max-concurrency N, GuideLLM's concurrent profile): the answer per "
                    "level with the throughput it gives, N / latency")


def add_load_axis(parser) -> None:
    """``--rps LIST`` or ``--concurrency LIST``: one of the two is required."""
    axis = parser.add_mutually_exclusive_group(required=True)
    axis.add_argument("--rps", help=RPS_HELP)
    axis.add_argument("--concurrency", metavar="LIST", help=CONCURRENCY_HELP)


def levels_of(args) -> np.ndarray:
    """``--concurrency`` as whole numbers of clients >= 1, or a one-line error naming it."""
    from bayesspec.decisions.concurrency import check_levels

    return check_levels(parse_list(args.concurrency, option="--concurrency"))


def on_load_axis(rate_handler, concurrency_handler=None):
    """The verb's handler: ``rate_handler`` for ``--rps``; for ``--concurrency``, the
    levels are checked first (and the options that only have a rate axis refused), then
    ``concurrency_handler`` answers, or, without one, ``rate_handler`` runs with the
    levels in place of the rates and :func:`kstar_on_axis` picks the table."""
    def handle(args) -> int:
        if args.concurrency is None:
            return rate_handler(args)
        levels_of(args)
        for flag in ("plot", "vllm", "metric", "requests"):
            value = getattr(args, flag, None)
            if value and not (flag == "metric" and value == "mean"):
                raise BadInput(_rate_only(flag), option="--" + flag)
        if concurrency_handler is not None:
            return concurrency_handler(args)
        args.rps = args.concurrency
        return rate_handler(args)
    return handle


def _rate_only(flag: str) -> str:
    return {"plot": "the figure is over rates; with --concurrency, see the fit's report "
                    "(`bayesspec report`), whose figures have concurrency on the axis for "
                    "a closed-loop sweep",
            "vllm": "the schedule is by batch size already (batch size = RPS x latency): "
                    "give it --rps",
            "metric": "answers on the concurrency axis are of the mean latency (the law "
                      "L = C1 + C2 N); give --rps for a latency summary",
            "requests": "a new measurement's request count is an answer on the rate axis; "
                        "give --rps"}[flag]


def kstar_on_axis(args, rate_table, fit):
    """The k* table for the verb's axis: ``rate_table`` (rates), or the table per
    concurrency level, its extrapolation marks at the highest fitted levels of ``fit``."""
    if getattr(args, "concurrency", None) is None:
        return rate_table
    from functools import partial

    from bayesspec.decisions.concurrency import fitted_levels, kstar_at_concurrency

    return partial(kstar_at_concurrency, fitted=fitted_levels(fit, group_criteria(args)))


def predict(args) -> int:
    """``predict --concurrency``: per level the mean latency and the throughput N / L."""
    from bayesspec.decisions.concurrency import predict_concurrency

    check_prob(args)
    levels = levels_of(args)
    fit = load_fit(args.fit)
    group = fit.select_group(**group_criteria(args))
    document = finish(predict_concurrency(fit, group, levels, prob=args.prob),
                      fit.diagnostics, args)
    if args.json:
        emit_json(document)
        return strict_exit(args, fit.diagnostics)
    print(f"group: {document['group']}   ({args.prob:.0%} intervals; a closed loop of N "
          "clients: L = C1 + C2 N, throughput N / L)")
    print(f"{'N':>6}  {'mean latency s [interval]':>34}  {'throughput RPS [interval]':>34}"
          f"  {'P(past cap)':>11}")
    for point in document["points"]:
        print(f"{point['concurrency']:>5d}{_mark(point)}  {fmt(point['latency_s']):>34}  "
              f"{fmt(point['rps']):>34}  {point['p_past_cap']:>11.3f}")
    binding = ("the engine's concurrency cap" if document["ceiling_binding"] == "cap"
               else "eq. (1)'s pole 1/C2; the engine's cap is unknown")
    print(f"ceiling (highest sustainable rate): {fmt(document['ceiling_rps'])} RPS, set by "
          f"{binding}")
    if any(point["extrapolated"] for point in document["points"]):
        top = document["concurrency_fitted_max"]
        print(f"{EXTRAPOLATED}: " + (f"above the highest fitted concurrency ({top:g})"
                                     if top is not None else
                                     "the level's throughput lies above the highest fitted "
                                     f"rate ({document['rps_fitted_max']:.4g} RPS)")
              + ": read off the fitted law")
    return strict_exit(args, fit.diagnostics)


def answer_kstar(document: dict, args, verdicts) -> int:
    """A k* document as JSON (either axis), or ``kstar --concurrency``'s table as text."""
    if args.json:
        emit_json(document)
        return strict_exit(args, verdicts)
    if document.get("acceptance"):
        print(f"acceptance: E(k) from the per-position counters of "
              f"{document['acceptance']['setup']} in {document['acceptance']['file']}")
    print(f"setup: {document['setup']}   objective: {document['objective']}   k = 0 means "
          "'do not speculate'; at N requests in flight, speedup = L_dense / L_k = the "
          "throughput ratio")
    print(f"{'alpha':>6} {'N':>6} {'k*':>5} {'P(best)':>8} {'speedup [interval]':>28} "
          f"{'latency s [interval]':>30} {'throughput RPS':>10}")
    for row in document["table"]:
        k = f">={row['k']}" if row["at_max_k"] else str(row["k"])
        alpha = "meas." if np.isnan(row["alpha"]) else f"{row['alpha']:.3g}"
        print(f"{alpha:>6} {row['concurrency']:>5d}{_mark(row)} {k:>5} {row['p_best']:>8.2f} "
              f"{fmt(row['speedup']):>28} {fmt(row['latency_s']):>30} "
              f"{row['rps']['median']:>10.4g}")
    if any(row["at_max_k"] for row in document["table"]):
        print(f">={args.kmax}: the best k is the largest searched; raise --kmax to look further")
    marked = [row for row in document["table"] if row["extrapolated"]]
    levels = sorted({row["concurrency_fitted_max"] for row in marked
                     if row["concurrency_fitted_max"] is not None})
    rates = sorted({row["rps_fitted_max"] for row in marked
                    if row["concurrency_fitted_max"] is None
                    and row["rps_fitted_max"] is not None})
    notes = sorted({note for row in document["table"] for note in row["design_notes"]})
    if levels:
        print(f"{EXTRAPOLATED}: above the highest fitted concurrency of the chosen k and the "
              f"dense baseline ({', '.join(f'{v:g}' for v in levels)}): read off the fitted "
              "law")
    if rates:
        print(f"{EXTRAPOLATED}: the throughput compared lies above the highest fitted rate of "
              f"the chosen k and the dense baseline ({', '.join(f'{t:.4g}' for t in rates)} "
              "RPS): read off the fitted law")
    if notes:
        print(f"{EXTRAPOLATED} also marks rows outside the measured design: " + "; ".join(notes))
    return strict_exit(args, verdicts)


def _mark(row: dict) -> str:
    return EXTRAPOLATED if row.get("extrapolated") else " "
