"""``bayesspec plan`` (where to put the next load test, and whether one is needed) and
``bayesspec tune`` (the closed loop that runs them against live endpoints)."""

from __future__ import annotations

import numpy as np

from bayesspec.errors import BadInput
from bayesspec.outputs import emit_json
from bayesspec.cli.common import (add_common, add_group_options, finish, group_criteria, load_fit,
                     parse_list, rates, strict_exit)
from bayesspec.cli.deciding import SLO_FLAGS, _slo_targets

QUESTION_HELP = ("crossover (RPS* of --alpha/--k), kstar (best k at --rps), slo (goodput "
                 "under the SLO targets; a tails fit), compare (two fits: the version "
                 "verdict), ceiling (each configuration's highest sustainable rate)")


def add_plan_options(parser, *, question_required: bool = True) -> None:
    """Options shared by ``plan`` and ``tune``: the question and the cost of a point."""
    parser.add_argument("--question", required=question_required,
                        choices=("crossover", "kstar", "slo", "compare", "ceiling"),
                        help=QUESTION_HELP)
    parser.add_argument("--alpha", type=float, help="acceptance rate (crossover, kstar)")
    parser.add_argument("--k", type=int, help="draft length (crossover; ceiling: only this k)")
    parser.add_argument("--rps", help="kstar: LIST of rates at which to choose k")
    parser.add_argument("--ks", help="kstar: LIST of draft lengths to choose among (default: "
                                     "the fitted ones and 0; 0..--kmax with six coefficients)")
    parser.add_argument("--kmax", type=int, default=8,
                        help="kstar with six cycle coefficients: largest k (default 8)")
    targets = parser.add_argument_group("SLO targets in seconds (--question slo)")
    for flag, metric in SLO_FLAGS.items():
        targets.add_argument(flag, type=float, dest=f"slo_{metric}", metavar="S",
                             help=f"{metric} at most S seconds")
    targets.add_argument("--target", action="append", default=[], metavar="METRIC=S",
                         help="any fitted summary, e.g. ttft_p95=0.3 (repeatable)")
    parser.add_argument("--rope", type=float, default=0.02,
                        help="compare: equivalence region +-ROPE (default 0.02)")
    parser.add_argument("--within", type=float, default=None,
                        help="what counts as right: a rate within +-W (default 0.05), a k "
                             "within W of the best speedup (default 0.01)")
    parser.add_argument("--tolerance", type=float, default=0.05,
                        help="settled when every answer's P(wrong) is at most this "
                             "(default 0.05: P(right) >= 0.95)")
    parser.add_argument("--requests", default="100,300,1000",
                        help="LIST of request counts per candidate point (default 100,300,1000)")
    parser.add_argument("--warmup-s", type=float, default=5.0,
                        help="fixed seconds each point costs besides requests/rate, the "
                             "queue's warm-up and the last request's drain (default 5)")
    parser.add_argument("--warmup-relaxations", type=float, default=3.0,
                        help="the queue's warm-up before a point's window, in relaxation "
                             "times L^2/C1 (a few latencies at light load, more near "
                             "saturation; default 3)")
    parser.add_argument("--outcomes", type=int, default=48,
                        help="simulated measurements per candidate (default 48)")
    parser.add_argument("--max-draws", type=int, default=2000,
                        help="posterior draws used (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulated outcomes")


def register(verbs) -> None:
    plan = verbs.add_parser(
        "plan", help="the next load points that would settle a decision soonest, per "
                     "GPU-minute, or that it is settled")
    plan.add_argument("fits", nargs="+", metavar="FIT",
                      help="fit file (two for --question compare: A B)")
    add_plan_options(plan)
    plan.add_argument("--top", type=int, default=5, help="points to propose (default 5)")
    plan.add_argument("--target-url", default="http://localhost:8000",
                      help="server URL for the printed commands (default http://localhost:8000)")
    plan.add_argument("--served-model", default=None,
                      help="model name for the printed commands (default: the verifier)")
    add_group_options(plan, design=False)
    plan.add_argument("--strict", action="store_true",
                      help="exit with status 3 when the posterior did not converge")
    add_common(plan)
    plan.set_defaults(handler=run_plan)


def check_plan_options(args) -> None:
    if not 0 < args.tolerance < 1:
        raise BadInput(f"must be within (0, 1), got {args.tolerance}", option="--tolerance")
    if args.within is not None and not 0 < args.within < 1:
        raise BadInput(f"must be within (0, 1), got {args.within}", option="--within")
    if args.warmup_s < 0:
        raise BadInput(f"must be >= 0, got {args.warmup_s}", option="--warmup-s")
    if args.warmup_relaxations < 0:
        raise BadInput(f"must be >= 0, got {args.warmup_relaxations}",
                       option="--warmup-relaxations")
    if args.outcomes < 4:
        raise BadInput(f"must be >= 4, got {args.outcomes}", option="--outcomes")
    if args.max_draws < 50:
        raise BadInput(f"must be >= 50, got {args.max_draws}", option="--max-draws")
    if args.alpha is not None and not 0 <= args.alpha <= 1:
        raise BadInput(f"must be within [0, 1], got {args.alpha:g}", option="--alpha")
    if not 0 <= args.rope < 1:
        raise BadInput(f"must be within [0, 1), got {args.rope}", option="--rope")


def request_counts(text: str) -> list[int]:
    values = parse_list(text, option="--requests")
    if np.any(values < 1) or np.any(values != np.round(values)):
        raise BadInput(f"request counts must be positive integers, got {text!r}",
                       option="--requests")
    return sorted({int(v) for v in values})


def slo_targets(args) -> dict | None:
    if args.question != "slo":
        return None
    return _slo_targets(args)


def build_question(args, fit, other=None):
    """The planning question the options ask of ``fit``."""
    from bayesspec.loadtest.planning import question_from_fit

    ks = None
    if args.ks is not None:
        values = parse_list(args.ks, option="--ks")
        if np.any(values < 0) or np.any(values != np.round(values)):
            raise BadInput("draft lengths must be integers >= 0", option="--ks")
        ks = [int(v) for v in values]
    return question_from_fit(
        fit, args.question, selection=group_criteria(args), alpha=args.alpha, k=args.k,
        rps=rates(args.rps, positive=True) if args.rps is not None else None, ks=ks,
        kmax=args.kmax, targets=slo_targets(args), other=other, within=args.within,
        rope=args.rope, max_draws=args.max_draws, seed=args.seed)


def plan_document(args, fits) -> dict:
    """The ``plan`` JSON document (docs/CONTRACT.md) for loaded fits."""
    from bayesspec.loadtest.planning import (command_lines, guidellm_version, plan, planned_lengths,
                            required_columns)

    question = build_question(args, fits[0], fits[1] if len(fits) > 1 else None)
    result = plan(question, requests=request_counts(args.requests), warmup_s=args.warmup_s,
                  warmup_relaxations=args.warmup_relaxations, tolerance=args.tolerance, top=args.top, outcomes=args.outcomes,
                  seed=args.seed)
    entries = [c.document() for c in result["next"]]
    data = fits[0].data
    # Each point's commands carry its own configuration (verifier, lengths, k); the data's
    # stand in only where the fit does not say.
    verifier = (getattr(args, "verifier", None)
                or (str(data["verifier"].iloc[0]) if "verifier" in data else "model"))
    prefill, decode = planned_lengths(data, getattr(args, "prefill", None),
                                      getattr(args, "decode", None))
    version = guidellm_version()
    commands = [command_lines({"verifier": verifier, **e}, target=args.target_url,
                              model=args.served_model, prefill=prefill, decode=decode,
                              version=version)
                for e in entries]
    document = {"question": result["question"], "settled": result["settled"],
                "unsettled": result["unsettled"], "converged": result["converged"],
                "expected_loss": result["expected_loss"], "tolerance": result["tolerance"],
                "answers": result["answers"], "next": entries, "commands": commands,
                "columns": required_columns(args.question, list(slo_targets(args) or {})),
                "candidates": result["candidates"],
                "skipped_set_aside": result["skipped_set_aside"], "notes": result["notes"]}
    return document


def run_plan(args) -> int:
    check_plan_options(args)
    if args.top < 1:
        raise BadInput(f"must be >= 1, got {args.top}", option="--top")
    if args.question == "compare" and len(args.fits) != 2:
        raise BadInput("compare needs two fits: bayesspec plan A.nc B.nc --question compare",
                       option="FIT")
    if args.question != "compare" and len(args.fits) != 1:
        raise BadInput(f"--question {args.question} reads one fit, got {len(args.fits)}",
                       option="FIT")
    request_counts(args.requests)
    slo_targets(args)
    fits = [load_fit(path) for path in args.fits]
    document = plan_document(args, fits)
    document = finish(document, [f.diagnostics for f in fits], args)
    if args.json:
        emit_json(document)
        return strict_exit(args, [f.diagnostics for f in fits])
    print(plan_text(document))
    return strict_exit(args, [f.diagnostics for f in fits])


def answer_line(answer: dict) -> str:
    mark = " (extrapolated)" if answer.get("extrapolated") else ""
    if "rule" in answer:
        # the verb's own verdict, so that `plan` and that verb say the same
        p = answer["p_right"]
        how = (f"P {p:.3f}" if answer["decided"] else
               f"the likeliest verdict has P {p:.3f}, short of a verdict")
        return f"{answer['answer']}: {answer['decision']} ({how}; as `{answer['rule']}` rules)"
    if "within" in answer:
        decision = ("none" if answer["decision"] is None else f"{answer['decision']:.4g}")
        lo, hi = answer["interval_90"]
        span = "" if lo is None else f" (90% of draws {lo:.4g}-{hi:.4g})"
        return (f"{answer['answer']}: {decision}{mark}{span}; P(within "
                f"+-{answer['within']:.0%}) {answer['p_right']:.3f}")
    return (f"{answer['answer']}: {answer['decision']}{mark} (P right "
            f"{answer['p_right']:.3f})")


def plan_text(document: dict) -> str:
    lines = [f"question: {document['question']}"]
    lines += [f"  {answer_line(a)}" for a in document["answers"]]
    if document["settled"]:
        lines.append(f"SETTLED: every answer is right with P >= {1 - document['tolerance']:g} "
                     f"(expected loss {document['expected_loss']:.3f}); no more load points "
                     "are needed")
        return "\n".join(lines)
    lines.append("not settled: " + "; ".join(document["unsettled"]))
    if not document["next"]:
        lines += [f"note: {note}" for note in document.get("notes", [])]
        return "\n".join(lines)
    lines.append("")
    lines.append(f"next load points ({document['candidates']} scored; value = expected "
                 "reduction of the summed P(wrong)):")
    lines.append(f"{'#':>2} {'configuration':<24} {'RPS':>9} {'requests':>8} {'minutes':>8} "
                 f"{'value':>7} {'per min':>8} {'ESS':>6}")
    for i, (entry, commands) in enumerate(zip(document["next"], document["commands"]), 1):
        name = entry["configuration"] + (f" [{entry['fit']}]" if "fit" in entry else "")
        mark = "*" if entry["above_fitted"] else " "
        ess = f"{entry['ess']:.0f}" + ("!" if entry["collapsed"] else "")
        lines.append(f"{i:>2} {name:<24} {entry['rps']:>8.4g}{mark} {entry['requests']:>8} "
                     f"{entry['minutes']:>8.2f} {entry['value']:>7.3f} "
                     f"{entry['value_per_minute']:>8.4f} {ess:>6}")
    lines.append("*: above the highest rate fitted for that configuration; !: the importance "
                 "weights collapsed (ESS < 20): the value is indicative")
    if any(entry["lifts_extrapolation"] for entry in document["next"]):
        lines.append("first the points that measure up to an extrapolated answer: it stays "
                     "an extrapolation until one is measured, whatever its P(wrong)")
    lines.append("")
    point = document["next"][0]
    workload = ", ".join(f"{key.split('_')[0]} {point[key]}" for key in
                         ("verifier", "prefill_tokens", "decode_tokens") if key in point)
    lines.append("commands for point 1 (" + (f"{workload}; " if workload else "")
                 + "GuideLLM " + document["commands"][0]["guidellm_syntax"]
                 + "; vllm bench serve):")
    first = document["commands"][0]
    lines += [f"  {first['guidellm']}", f"  {first['vllm']}", f"  then: {first['ingest']}"]
    lines.append("the new rows must carry: " + ", ".join(document["columns"])
                 + "; append them to the fitted data and refit")
    for note in document.get("notes", []):
        lines.append(f"note: {note}")
    return "\n".join(lines)


__all__ = ["register", "run_plan", "plan_document", "plan_text", "add_plan_options"]
