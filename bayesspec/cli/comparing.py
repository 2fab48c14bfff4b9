"""``bayesspec compare``: two fits (e.g. engine versions) as ratios B/A with
probabilities, or one joint fit of two versions (``--by``)."""

from __future__ import annotations

import argparse

from ..errors import BadInput
from ..outputs import emit_json
from .common import (add_catalog, add_common, add_sampler_options, add_units,
                     check_output_path, check_prob, finish, fmt, load_fit, read_data,
                     sampler_settings, strict_exit)


def register(verbs) -> None:
    compare = verbs.add_parser("compare", help="two fits (e.g. engine versions) compared: "
                                               "ratios B/A with probabilities")
    compare.add_argument("a", help="fit file A (the reference), or with --by a data file")
    compare.add_argument("b", nargs="?", help="fit file B")
    compare.add_argument("--by", help="compare the two values of this column (e.g. "
                                      "engine_version) in one joint model with partial pooling")
    compare.add_argument("--save-fit", help="with --by: also save the joint fit here")
    compare.add_argument("--max-rps", type=float, default=None, help=argparse.SUPPRESS)
    add_units(compare)
    add_catalog(compare, hidden=True)
    add_sampler_options(compare)
    compare.add_argument("--rope", type=float, default=0.02,
                         help="region of practical equivalence, relative (default 0.02)")
    compare.add_argument("--plot", help="write a forest plot of the ratios to this PNG")
    add_common(compare)
    compare.set_defaults(handler=run)


def _versions_fit(args):
    """A two-version fit: loaded when A is a fit file, fitted when it is data (version
    effects on the cycle coefficients when the data have SD rows)."""
    if str(args.a).endswith(".nc"):
        return load_fit(args.a)
    settings = sampler_settings(args)
    data = read_data(args.a, args)
    from ..bayes import versions_model_for
    from ..workflow import fit
    from .common import catalog_of

    result = fit(data, versions_model_for(data), settings=settings, config={"by": args.by},
                 catalog=catalog_of(args))
    if args.save_fit:
        check_output_path(args.save_fit)
        result.save(args.save_fit)
    return result


def run(args) -> int:
    from ..decisions import compare_fits, compare_versions

    check_prob(args)
    if args.plot:
        check_output_path(args.plot)
    if args.by:
        if args.b is not None:
            raise BadInput("with --by give one data file (or a two-version fit), not two",
                           option="--by")
        fits = [_versions_fit(args)]
        document = compare_versions(fits[0], rope=args.rope, prob=args.prob)
        label_a, label_b = document["a"], document["b"]
    else:
        if args.b is None:
            raise BadInput("give two fit files A B, or one data file with --by COLUMN")
        fits = [load_fit(args.a), load_fit(args.b)]
        document = compare_fits(*fits, rope=args.rope, prob=args.prob)
        label_a, label_b = args.a, args.b
        document.update(a=label_a, b=label_b)
    verdicts = [f.diagnostics for f in fits]
    finish(document, verdicts, args, what="a compared fit" if len(fits) > 1 else "posterior")
    if args.plot:
        from ..plots import compare_forest_plot, save_figure

        document["plot"] = save_figure(compare_forest_plot(document, label_a=str(label_a),
                                                            label_b=str(label_b)), args.plot)
    if args.json:
        emit_json(document)
        return strict_exit(args, verdicts)
    print(f"B = {label_b} relative to A = {label_a}; region of practical equivalence "
          f"+-{args.rope:.0%}; {args.prob:.0%} intervals")
    width = max(len(name) for name in document["parameters"])
    for name, entry in document["parameters"].items():
        print(f"{name:<{width}}  ratio {fmt(entry['ratio']):>28}  P(increase) "
              f"{entry['p_increase']:.3f}  {entry['verdict']}")
    print(f"verdict: {document['verdict']}")
    if "warning" in document:
        print(f"WARNING: {document['warning']}")
    if args.plot:
        print(f"plot: {args.plot}")
    return strict_exit(args, verdicts)
