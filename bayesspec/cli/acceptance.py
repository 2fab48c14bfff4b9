"""``bayesspec acceptance``: acceptance as a token process from vLLM's per-position
counters, its totals or published acceptance lengths, and the acceptance length of any k
(measured or not) with intervals."""

from __future__ import annotations

from bayesspec.outputs import emit_json, log
from bayesspec.cli.common import (add_common, add_sampler_options, check_output_path, check_prob, fmt,
                     sampler_settings, strict_exit)

STRUCTURE_CHOICES = ("auto", "iid", "chain", "chain+depth", "spread", "spread+depth",
                     "free", "position")


def register(verbs) -> None:
    parser = verbs.add_parser(
        "acceptance", help="acceptance as a token process (where cycles start depends on k) "
                           "and the acceptance length of any k, from per-position counters")
    parser.add_argument("data", help="CSV or Parquet with k and, per window, "
                                     "num_drafts with accepted_tokens_pos1..k or the totals "
                                     "accepted_tokens (or draft_tokens), or a reported "
                                     "acceptance_length (a tidy file or counters alone; "
                                     "`bayesspec ingest --metrics` writes them)")
    parser.add_argument("--k-max", type=int, default=8,
                        help="answer E(k) for k = 1..K (default 8)")
    parser.add_argument("--structure", choices=STRUCTURE_CHOICES, default="auto",
                        help="auto (default): the token process, its structure chosen by "
                             "held-out k where a setup has two or more k, else by the "
                             "drafter's kind (spread for n-gram, spread+depth for a trained "
                             "drafter), free per-position rates where it does not reproduce "
                             "the measured counters; free: those rates (no k dependence); "
                             "position: the previous per-position decay, for comparison")
    parser.add_argument("--plot", default=None, metavar="PNG",
                        help="per-position rates at the measured k and E(k) with intervals")
    add_sampler_options(parser)
    add_common(parser)
    parser.set_defaults(handler=run)


def run(args) -> int:
    from bayesspec.bayes.acceptance import acceptance_report
    from bayesspec.data import read_counters
    from bayesspec.errors import BadInput

    check_prob(args)
    if args.plot:
        check_output_path(args.plot)
    if not 1 <= args.k_max <= 32:
        raise BadInput(f"must be within 1..32, got {args.k_max}", option="--k-max")
    settings = sampler_settings(args)
    # Every window's counters count, saturated load points too (acceptance does not
    # depend on load), so no saturation rule and no list of points set aside.
    counters = read_counters(args.data)
    report = acceptance_report(counters, k_max=args.k_max, prob=args.prob, settings=settings,
                               structure=args.structure,
                               progress=lambda text: log(text, settings.progress))
    if args.plot:
        from bayesspec.reporting.plots import acceptance_plot, save_figure

        report["plot"] = save_figure(acceptance_plot(report), args.plot)
    if args.json:
        emit_json(report)
    else:
        _print(report, args)
    return strict_exit(args, [{"status": report["convergence"]}])


def _distinct_digits(u: dict, least: int = 3, most: int = 6) -> int:
    """Significant digits at which an interval's ends print apart from its median (a
    narrow interval written as 1.84 [1.84, 1.84] would read as no uncertainty at all)."""
    for digits in range(least, most + 1):
        shown = {f"{u[key]:.{digits}g}" for key in ("lo", "median", "hi")}
        if len(shown) == 3 or u["lo"] == u["hi"]:
            return digits
    return most


def _print(report: dict, args) -> None:
    for setup in report["setups"]:
        measured = ", ".join(map(str, setup["k_measured"]))
        print(f"{setup['setup']}: {setup['windows']} window(s) at k = {measured}")
        print(f"  structure {setup['structure']} (chosen by {setup['chosen_by']})"
              + "".join(f"; {name} {fmt(value, 3)}" for name, value in
                        setup.get("parameters", {}).items()))
        if setup.get("held_out_k"):
            best = max(setup["held_out_k"].values())
            print("  held-out k log density: " + ", ".join(
                f"{name} {score - best:+.1f}" for name, score in
                sorted(setup["held_out_k"].items(), key=lambda item: -item[1])))
        for entry in setup["at_measured_k"]:
            if not entry["measured"]:
                continue                 # totals alone at this k: in the E(k) table
            print(f"  k = {entry['k']}: position  measured   fitted P(A >= i)"
                  "          alpha_i (conditional)")
            for i, (rate, alpha) in enumerate(zip(entry["rates"], entry["alpha_position"])):
                print(f"           {i + 1:8d}  {entry['measured'][i]:8.4f}   "
                      f"{fmt(rate, 4):24s}  {fmt(alpha, 4)}")
        share = setup["reproduced"]
        print(f"  measured counters reproduced: {share['inside']} of {share['positions']} "
              f"position rates and totals inside their {report['prob']:.0%} predictive "
              "intervals")
        measured = {entry["k"]: entry.get("acceptance_length_measured", [])
                    for entry in setup["at_measured_k"] if not entry["measured"]}
        with_runs = any("new_run" in e for e in setup["acceptance_length"])
        print("   k   E(k) tokens per cycle" + ("          a new run's" if with_runs else ""))
        for e in setup["acceptance_length"]:
            mark = "measured" if e["measured"] else "not measured*"
            if measured.get(e["k"]):
                mark += " " + ", ".join(f"{v:.4g}" for v in measured[e["k"]])
            run = f"{fmt(e['new_run'], _distinct_digits(e['new_run'])):28s} " if with_runs else ""
            print(f"  {e['k']:2d}   {fmt(e, _distinct_digits(e)):28s} {run}{mark}")
        bases = sorted({e["basis"] for e in setup["acceptance_length"] if not e["measured"]})
        if bases:
            print("  *: " + "; ".join(bases) + ": the model's extrapolation, not a "
                  "measurement; measure the k you will run")
    print(f"convergence: {report['convergence_text']}")
    if args.plot:
        print(f"plot: {args.plot}")
