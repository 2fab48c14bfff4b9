"""``bayesspec report``: one page people share, composed from the decision documents
of one or more fits: self-contained HTML, or GitHub-flavoured Markdown with its figures
beside it."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from bayesspec.errors import BadInput
from bayesspec.outputs import emit_json, log
from bayesspec.cli.common import add_common, check_output_path, check_prob, load_fit, strict_exit
from bayesspec.cli.deciding import SLO_FLAGS

EPILOG = """\
The page, top to bottom: the decision in one paragraph; the key numbers with intervals;
the figures (speedup bands, k* map, SLO bands for a tails fit with targets, the
collapse and the predictive check); what is extrapolated and why; the convergence
verdict (NOT CONVERGED at the top when a fit did not converge) and misfit flags; the
data provenance (files, rows set aside and why); what to measure next when the planner
is installed; the commands that reproduce it.

examples:
  bayesspec report fit.nc -o report.html
  bayesspec report fit.nc tails.nc --ttft-p99 0.08 --itl-p99 0.015 -o report.md
"""


def register(verbs) -> None:
    report = verbs.add_parser(
        "report", help="one page to share: the decision, key numbers, figures, "
                       "extrapolations, convergence, provenance (HTML or Markdown)",
        description=__doc__.replace("``", "'"), epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    report.add_argument("fits", nargs="+", metavar="FIT", help="fit file(s)")
    report.add_argument("-o", "--output", required=True, metavar="REPORT.html|REPORT.md",
                        help="the page: .html (self-contained, figures inline) or .md "
                             "(figures written to REPORT-figures/ beside it)")
    targets = report.add_argument_group("SLO targets in seconds, for a tails fit "
                                        "(optional)")
    for flag, metric in SLO_FLAGS.items():
        targets.add_argument(flag, type=float, dest=f"slo_{metric}", metavar="S")
    targets.add_argument("--target", action="append", default=[], metavar="METRIC=S",
                         help="any fitted summary, e.g. ttft_p95=0.3 (repeatable)")
    targets.add_argument("--slo-prob", type=float, default=0.9,
                         help="probability with which the SLO must hold (default 0.9)")
    report.add_argument("--strict", action="store_true",
                        help="exit with status 3 when a fit did not converge (the page is "
                             "written all the same, NOT CONVERGED at its top)")
    add_common(report)
    report.set_defaults(handler=run)


def _targets(args) -> dict[str, float]:
    targets = {metric: getattr(args, f"slo_{metric}") for metric in SLO_FLAGS.values()
               if getattr(args, f"slo_{metric}") is not None}
    for text in args.target:
        metric, _, value = text.partition("=")
        try:
            targets[metric.strip()] = float(value)
        except ValueError:
            raise BadInput(f"'{text}' is not METRIC=SECONDS", option="--target") from None
    for metric, value in targets.items():
        if not value > 0:
            raise BadInput(f"target for {metric} must be a positive number of seconds",
                           option="--target")
    return targets


def run(args) -> int:
    from bayesspec.reporting.pages import write_report

    check_prob(args)
    check_output_path(args.output)
    if Path(args.output).suffix.lower() not in (".html", ".htm", ".md", ".markdown"):
        raise BadInput("the report is HTML (.html) or Markdown (.md)", option="--output")
    if not 0.5 <= args.slo_prob < 1:
        raise BadInput(f"must be within [0.5, 1), got {args.slo_prob}", option="--slo-prob")
    targets = _targets(args)
    fits = [load_fit(path) for path in args.fits]
    if targets and not any(fit.model().metrics(fit) for fit in fits):
        raise BadInput("SLO targets need a fit of `--model tails` (these fits model mean "
                       "latency only)", option="--target")
    command = "bayesspec report " + " ".join(shlex.quote(a) for a in sys.argv[2:]) \
        if len(sys.argv) > 1 and sys.argv[1] == "report" else ""
    result = write_report(fits, list(args.fits), args.output, prob=args.prob,
                          slo_targets=targets or None, slo_prob=args.slo_prob,
                          command=command)
    verdicts = [fit.diagnostics for fit in fits]
    for name in result["not_converged"]:
        log(f"WARNING: {name}: NOT CONVERGED (said at the top of the page)")
    if args.json:
        emit_json(result)
        return strict_exit(args, verdicts)
    for line in result["decision"]:
        print(line)
    print(f"report: {result['output']}"
          + (f" (+ {len(result['figures'])} figures beside it)" if result["figures"] else ""))
    return strict_exit(args, verdicts)
