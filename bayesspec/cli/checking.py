"""``bayesspec check``: leave-n-out posterior predictive checks (refit without some
configurations, predict them), or the prior predictive check."""

from __future__ import annotations

from ..outputs import emit_json, log
from .common import (add_catalog, add_common, add_parallel_options, add_sampler_options,
                     add_saturation_options, check_output_path, check_prob, parallel_options,
                     read_data, sampler_settings)


def register(verbs) -> None:
    check = verbs.add_parser("check", help="leave-n-out posterior predictive checks: refit "
                                           "without some configurations, predict them")
    check.add_argument("data", help="tidy CSV or Parquet file")
    check.add_argument("--leave-out", type=int, default=1, metavar="N",
                       help="(prefill, decode) combinations held out per fold (default 1: "
                            "each in turn; N > 1: seeded random subsets)")
    check.add_argument("--folds", type=int, default=None,
                       help="folds for N > 1 (default 10; N = 1 uses every combination)")
    check.add_argument("--leave-out-model", nargs="?", const="", default=None,
                       metavar="V[,V...]",
                       help="hold out whole verifiers instead (each in turn, or the named)")
    check.add_argument("--model", default="hierarchical", help="model (hierarchical)")
    check.add_argument("--prior-predictive", action="store_true",
                       help="instead: share of the data inside prior predictive intervals")
    check.add_argument("--plot", default=None, metavar="PNG",
                       help="predicted vs observed held-out latency with intervals")
    add_parallel_options(check)
    add_saturation_options(check)
    add_catalog(check)
    add_sampler_options(check)
    add_common(check)
    check.set_defaults(handler=run)


def run(args) -> int:
    check_prob(args)
    if args.plot:
        check_output_path(args.plot)
    settings = sampler_settings(args)
    data = read_data(args.data, args)
    from .. import checks
    from .common import catalog_of

    if args.prior_predictive:
        document = checks.prior_predictive_check(data, model=args.model, seed=args.seed or 0,
                                                 catalog=catalog_of(args))
        if args.json:
            emit_json(document)
        else:
            inside = document["inside"]
            print(f"prior predictive ({document['draws']} draws, physics priors "
                  f"{'on' if document['physics_priors'] else 'off'}): observed points inside "
                  + ", ".join(f"{float(p):.0%} interval {v:.1%}" for p, v in inside.items()))
        return 0
    by_verifier = args.leave_out_model is not None
    document = checks.leave_out_check(
        data, model=args.model, leave_out=args.leave_out, folds=args.folds,
        verifiers=[v for v in (args.leave_out_model or "").split(",") if v] or None,
        by_verifier=by_verifier, seed=args.seed or 0, prob=args.prob, settings=settings,
        progress=settings.progress, catalog=catalog_of(args), **parallel_options(args))
    points = document.pop("_points")
    if args.plot:
        from ..plots import holdout_plot, save_figure

        document["plot"] = save_figure(holdout_plot(points, prob=args.prob,
                                                    title=f"leave-{document['leave_out']}-out"),
                                       args.plot)
    if document.get("warning"):
        log(f"WARNING: {document['warning']}")
    if args.json:
        emit_json(document)
    else:
        trends = ", ".join(f"{k} {v:.4f}" for k, v in document["r2_trends"].items())
        print(f"leave-{document['leave_out']}-out, {document['folds']} folds, "
              f"{document['points']} held-out points: R^2 {document['r2']:.4f}, "
              f"{document['prob']:.0%} coverage {document['coverage']:.3f}, elpd "
              f"{document['elpd']:.1f}; held-out vs full-fit R^2: {trends} "
              f"({document['seconds']:.0f} s)")
        print(f"convergence: {document['convergence_summary']}")
        if args.plot:
            print(f"plot: {args.plot}")
    unconverged = any(f["convergence"] == "not converged" for f in document["per_fold"])
    if args.strict and unconverged:
        log("bayesspec: --strict: exiting with status 3 (a fold did not converge)")
        return 3
    return 0
