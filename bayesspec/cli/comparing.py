"""``bayesspec compare``: two versions of a server compared over the load range both
measured: a whole-curve outcome (regressed / improved / no change / inconclusive) a CI
job can gate on, with the cost ratios B/A that say why.

Inputs: two fit files (independent fits), two data files or ``A... --vs B...`` data
files (one joint fit; several files per version are repeated runs and get a run-level
effect), or one data file (or joint fit) with ``--by COLUMN``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bayesspec.errors import BadInput
from bayesspec.outputs import emit_json, log
from bayesspec.cli.common import (add_catalog, add_common, add_sampler_options, add_units,
                     check_output_path, check_prob, finish, fmt, load_fit, read_data,
                     sampler_settings, strict_exit)

#: Exit status of ``--gate`` when the outcome is ``regressed``.
GATE_EXIT = 4
#: Exit status of ``--gate`` when a fit behind the outcome did not converge, with or
#: without ``--strict``: an unconverged posterior's outcome is no pass.
GATE_UNCONVERGED_EXIT = 5

EPILOG = """\
outcome (in --json: "outcome"): regressed | improved | no change | inconclusive, read
from the latency ratio B/A at 8 rates of the load range both versions fitted:
regressed when at some rate P(B slower by more than --rope) >= --level, improved when
faster likewise, no change when inside +-rope with P >= 0.9 at every rate, otherwise
inconclusive (with how many more requests per load point would settle it).

exit status: 0 success (any outcome without --gate); 2 bad input (one line on stderr:
fits of different models, no shared load range, ...); 3 with --strict when a posterior
did not converge; 4 with --gate when the outcome is regressed; 5 with --gate when either
fit did not converge (with or without --strict: the gate fails closed).

examples:
  bayesspec compare baseline.nc candidate.nc --gate -o compare.md
  bayesspec compare a_run1.csv a_run2.csv --vs b_run1.csv b_run2.csv --gate
  bayesspec compare sweeps.csv --by engine_version --json
"""


def register(verbs) -> None:
    compare = verbs.add_parser(
        "compare", help="two versions compared over the load range both measured: "
                        "regressed / improved / no change / inconclusive (--gate for CI)",
        description=__doc__.split("\n\n")[0].replace("``", "'"),
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    compare.add_argument("inputs", nargs="+", metavar="A B",
                         help="fit files A (the reference) and B; or data files A B (one "
                              "joint fit); or with --by one data file or joint fit")
    compare.add_argument("--vs", nargs="+", metavar="B", default=None,
                         help="data files of version B; the positional files are version "
                              "A's. Each file is one run: repeated runs get a run-level "
                              "effect, so run-to-run drift is not read as a version effect")
    compare.add_argument("--by", help="compare the two values of this column (e.g. "
                                      "engine_version) in one joint model with partial pooling")
    compare.add_argument("--save-fit", help="with data files: also save the joint fit here")
    compare.add_argument("--max-rps", type=float, default=None, help=argparse.SUPPRESS)
    add_units(compare)
    add_catalog(compare, hidden=True)
    add_sampler_options(compare)
    decision = compare.add_argument_group("the outcome")
    decision.add_argument("--rope", type=float, default=0.02,
                          help="region of practical equivalence, relative (default 0.02: "
                               "a latency change within +-2%% does not matter)")
    decision.add_argument("--level", type=float, default=0.95,
                          help="posterior probability at which a rate counts as regressed "
                               "or improved (default 0.95)")
    decision.add_argument("--gate", action="store_true",
                          help=f"exit with status {GATE_EXIT} when the outcome is regressed, "
                               f"{GATE_UNCONVERGED_EXIT} when either fit did not converge "
                               "(0 otherwise): for CI")
    compare.add_argument("-o", "--output", metavar="COMPARE.md",
                         help="write the comparison as GitHub-flavoured Markdown (a pull "
                              "request comment or $GITHUB_STEP_SUMMARY)")
    compare.add_argument("--plot", help="write a forest plot of the ratios to this PNG")
    add_common(compare)
    compare.set_defaults(handler=run)


def _is_fit(path: str) -> bool:
    from bayesspec.inference.fitfile import is_fit_file

    return str(path).endswith(".nc") or is_fit_file(path)


def _labelled_runs(paths: list[str], version: str, args, by: str):
    """Data files of one version, each one run (a ``run`` column inside a file keeps its
    runs apart within it), labelled with the version in column ``by``."""
    frames = []
    for i, path in enumerate(paths, start=1):
        frame = read_data(path, args)
        frame[by] = version
        if len(paths) > 1 or "run" in frame.columns:
            inner = frame["run"].astype(str) if "run" in frame.columns else None
            frame["run"] = (f"{version}{i}" if inner is None
                            else f"{version}{i}." + inner)
        frames.append(frame)
    return frames


def _joint_data(paths_a: list[str], paths_b: list[str], args):
    """Version A's and B's data files as one table for a joint two-version fit."""
    import pandas as pd

    by = "engine_version"
    frames = _labelled_runs(paths_a, "A", args, by) + _labelled_runs(paths_b, "B", args, by)
    if any("run" in f.columns for f in frames):
        for frame in frames:
            if "run" not in frame.columns:
                frame["run"] = frame[by]
    data = pd.concat(frames, ignore_index=True)
    data.attrs["source_file"] = " + ".join(paths_a + paths_b)
    return data, by


def _joint_fit(data, by: str, args):
    settings = sampler_settings(args)
    from bayesspec.bayes import versions_model_for
    from bayesspec.bayes.workflow import fit
    from bayesspec.cli.common import catalog_of

    result = fit(data, versions_model_for(data), settings=settings, config={"by": by},
                 catalog=catalog_of(args))
    if args.save_fit:
        result.save(args.save_fit)
    return result


def _versions_fit(path: str, args):
    """A two-version fit: loaded when the input is a fit file, fitted when it is data."""
    if _is_fit(path):
        return load_fit(path)
    return _joint_fit(read_data(path, args), args.by, args)


def _check_options(args) -> None:
    check_prob(args)
    if not 0.5 < args.level < 1.0:
        raise BadInput(f"must be within (0.5, 1), got {args.level}", option="--level")
    for path in (args.plot, args.output, args.save_fit):
        if path:
            check_output_path(path)
    if args.output and Path(args.output).suffix.lower() not in (".md", ".markdown"):
        raise BadInput("writes Markdown: name the file .md", option="--output")


def run(args) -> int:
    from bayesspec.decisions import compare_fits, compare_versions

    _check_options(args)
    inputs = list(args.inputs)
    options = {"rope": args.rope, "prob": args.prob, "level": args.level}
    if args.by:
        if len(inputs) != 1 or args.vs:
            raise BadInput("with --by give one data file (or a two-version fit), not two",
                           option="--by")
        fits = [_versions_fit(inputs[0], args)]
        document = compare_versions(fits[0], **options)
        label_a, label_b = document["a"], document["b"]
    elif args.vs or not all(_is_fit(p) for p in inputs):
        paths_b = list(args.vs or [])
        if not args.vs:
            if len(inputs) != 2:
                raise BadInput("give two files A B (fits or data), or A... --vs B...")
            inputs, paths_b = inputs[:1], inputs[1:]
        fitted = [p for p in inputs + paths_b if _is_fit(p)]
        if fitted:
            raise BadInput("mixes fit files and data files: give two fit files, or data "
                           "files only (one joint fit)", file=fitted[0])
        data, by = _joint_data(inputs, paths_b, args)
        fits = [_joint_fit(data, by, args)]
        document = compare_versions(fits[0], **options)
        label_a, label_b = " + ".join(inputs), " + ".join(paths_b)
        document.update(a=label_a, b=label_b)
    else:
        if len(inputs) != 2:
            raise BadInput("give two fit files A B, or one data file with --by COLUMN")
        if args.save_fit:
            raise BadInput("the fits are given; --save-fit is for data files",
                           option="--save-fit")
        fits = [load_fit(inputs[0]), load_fit(inputs[1])]
        document = compare_fits(*fits, **options)
        label_a, label_b = inputs
        document.update(a=label_a, b=label_b)
        if document["outcome"] == "inconclusive":
            _planner_settle(document, fits, args.rope)
    verdicts = [f.diagnostics for f in fits]
    finish(document, verdicts, args, what="a compared fit" if len(fits) > 1 else "posterior")
    if args.plot:
        from bayesspec.reporting.plots import compare_forest_plot, save_figure

        document["plot"] = save_figure(compare_forest_plot(document, label_a=str(label_a),
                                                            label_b=str(label_b)), args.plot)
    if args.output:
        from bayesspec.reporting.pages import write_compare_markdown

        document["markdown"] = write_compare_markdown(document, args.output,
                                                      command=_command_line(args))
    code = _exit_code(args, document, verdicts,
                      [label_a, label_b] if len(fits) > 1 else ["the joint fit"])
    if args.json:
        emit_json(document)
        return code
    print(compare_text(document, args.prob))
    for key in ("plot", "markdown"):
        if key in document:
            print(f"{key}: {document[key]}")
    return code


def _planner_settle(document: dict, fits, rope: float) -> None:
    """Add the planner's next load points (its `compare` question: the C1/C2 verdict of
    the two fits) to an inconclusive comparison's ``settle``."""
    from bayesspec.loadtest.planning import plan, question_from_fit

    try:
        result = plan(question_from_fit(fits[0], "compare", other=fits[1], rope=rope), top=3)
    except (BadInput, ValueError) as error:
        log(f"note: the planner could not rank next points: {error}")
        return
    entries = [candidate.document() for candidate in result["next"]]
    settle = document["settle"]
    settle["planner"] = {"question": "compare (the C1/C2 verdict)",
                         "settled": result["settled"],
                         "expected_loss": result["expected_loss"], "next": entries}
    if entries:
        first = entries[0]
        text = (f"; the planner's next point for the C1/C2 verdict: {first['requests']} "
                f"requests at {first['rps']:.4g} RPS on {first['configuration']} "
                f"({first['minutes']:.1f} min; `bayesspec plan {document['a']} "
                f"{document['b']} --question compare` for more)")
        settle["text"] += text
        document["outcome_text"] = document["outcome_text"].replace(
            settle["text"][:-len(text)], settle["text"])


def _exit_code(args, document: dict, verdicts, names: list) -> int:
    if args.gate:
        failed = [str(name) for name, verdict in zip(names, verdicts)
                  if verdict["status"] == "not converged"]
        if failed:
            log(f"bayesspec: --gate: exiting with status {GATE_UNCONVERGED_EXIT} ("
                f"{' and '.join(failed)} did not converge: the outcome "
                f"'{document['outcome']}' cannot be relied on; refit before gating)")
            return GATE_UNCONVERGED_EXIT
    code = strict_exit(args, verdicts)
    if args.gate and document["outcome"] == "regressed":
        log(f"bayesspec: --gate: exiting with status {GATE_EXIT} (outcome: regressed)")
        return GATE_EXIT
    return code


def _command_line(args) -> str:
    import shlex
    import sys

    return "bayesspec " + " ".join(shlex.quote(a) for a in sys.argv[1:]) \
        if Path(sys.argv[0]).name in ("bayesspec", "__main__.py") else ""


def compare_text(document: dict, prob: float) -> str:
    rope = document["rope"]
    lines = [f"B = {document['b']} relative to A = {document['a']}; region of practical "
             f"equivalence +-{rope:.0%}; {prob:.0%} intervals",
             "",
             f"outcome: {document['outcome_text']}",
             "",
             "mean latency B/A over the load range both fitted"
             + (" (geometric mean over groups, by place in each group's range)"
                if len(document["curve_groups"]) > 1 else "") + ":",
             f"{'RPS':>18}  {'B/A [interval]':>28}  {'P(worse)':>8}  {'P(better)':>9}  "
             f"{'P(same)':>7}"]
    for entry in document["curve"]:
        where = (f"{entry['rps']:.4g}" if entry.get("rps") is not None
                 else f"{entry['fraction']:.0%} of range")
        lines.append(f"{where:>18}  {fmt(entry['ratio']):>28}  {entry['p_worse']:>8.3f}  "
                     f"{entry['p_better']:>9.3f}  {entry['p_equivalent']:>7.3f}")
    lines += ["", "costs B/A (why):"]
    width = max(len(name) for name in document["parameters"])
    for name, entry in document["parameters"].items():
        lines.append(f"{name:<{width}}  ratio {fmt(entry['ratio']):>28}  P(increase) "
                     f"{entry['p_increase']:.3f}  {entry['verdict']}")
    lines.append(f"verdict on the costs: {document['verdict']}")
    if "warning" in document:
        lines.append(f"WARNING: {document['warning']}")
    return "\n".join(lines)
