"""``bayesspec acceptance``: acceptance by draft position from vLLM's per-position
counters, and the acceptance length of any k (measured or not) with intervals."""

from __future__ import annotations

from ..data import read_tidy
from ..outputs import emit_json
from .common import (add_common, add_sampler_options, check_output_path, check_prob, fmt,
                     sampler_settings, strict_exit)


def register(verbs) -> None:
    parser = verbs.add_parser(
        "acceptance", help="acceptance by draft position (decay vs i.i.d., PSIS-LOO) and "
                           "the acceptance length of any k, from per-position counters")
    parser.add_argument("data", help="tidy CSV or Parquet file with num_drafts and "
                                     "accepted_tokens_pos1..k (`bayesspec ingest --metrics`)")
    parser.add_argument("--k-max", type=int, default=8,
                        help="answer E(k) for k = 1..K (default 8)")
    parser.add_argument("--plot", default=None, metavar="PNG",
                        help="alpha_i per position and E(k) with intervals")
    add_sampler_options(parser)
    add_common(parser)
    parser.set_defaults(handler=run)


def run(args) -> int:
    from ..bayes.acceptance import acceptance_report
    from ..errors import BadInput

    check_prob(args)
    if args.plot:
        check_output_path(args.plot)
    if not 1 <= args.k_max <= 32:
        raise BadInput(f"must be within 1..32, got {args.k_max}", option="--k-max")
    settings = sampler_settings(args)
    # Every window's counters count, saturated load points too (acceptance does not
    # depend on load), so no saturation rule and no list of points set aside.
    data = read_tidy(args.data)
    report = acceptance_report(data, k_max=args.k_max, prob=args.prob, settings=settings)
    if args.plot:
        from ..plots import acceptance_plot, save_figure

        report["plot"] = save_figure(acceptance_plot(report), args.plot)
    if args.json:
        emit_json(report)
    else:
        loo = report["loo"]
        print(f"acceptance by position: decay vs i.i.d. elpd_loo "
              f"{report['elpd_difference']:+.1f} +- {report['elpd_difference_se']:.1f} -> "
              + ("the decay is supported: use E(k) below, not eq. (3)'s i.i.d. alpha"
                 if report["decay_supported"] else
                 "no clear decay: the i.i.d. alpha of eq. (3) is adequate")
              + f" (decay {loo['decay']['elpd_loo']:.1f}, i.i.d. {loo['iid']['elpd_loo']:.1f})")
        for setup in report["setups"]:
            print(f"{setup['setup']} (k measured: {', '.join(map(str, setup['k_measured']))};"
                  f" decay b {fmt(setup['decay'], 3)} in logit alpha_i = a + b log i)")
            print("   k   alpha_k (conditional)      E(k) tokens per cycle")
            for a, e in zip(setup["alpha_position"], setup["acceptance_length"]):
                mark = "measured" if e["measured"] else ("extrapolated" if e["extrapolated"]
                                                         else "")
                print(f"  {e['k']:2d}   {fmt(a, 3):24s}   {fmt(e, 3):24s} {mark}")
        print(f"convergence: {report['convergence_text']}")
        if args.plot:
            print(f"plot: {args.plot}")
    return strict_exit(args, [{"status": report["convergence"]}])
