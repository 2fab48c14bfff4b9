"""``bayesspec check``: leave-n-out posterior predictive checks (refit without some
configurations, predict them), the posterior predictive check of a fit's own points and
of rates above those it was fitted on (``--ppc``), or the prior predictive check."""

from __future__ import annotations

from bayesspec.errors import BadInput
from bayesspec.outputs import emit_json, log
from bayesspec.cli.common import (add_catalog, add_common, add_engine_limit_options, add_model_options,
                     add_parallel_options, add_sampler_options, add_saturation_options,
                     check_output_path, check_prob, model_options, parallel_options, read_data,
                     sampler_settings)


def register(verbs) -> None:
    check = verbs.add_parser("check", help="leave-n-out posterior predictive checks: refit "
                                           "without some configurations, predict them")
    check.add_argument("data", help="tidy CSV or Parquet file (with --ppc also a fit file)")
    check.add_argument("--leave-out", type=int, default=1, metavar="N",
                       help="(prefill, decode) combinations held out per fold (default 1: "
                            "each in turn; N > 1: seeded random subsets)")
    check.add_argument("--folds", type=int, default=None,
                       help="folds for N > 1 (default 10; N = 1 uses every combination); "
                            "with --ppc: refit K times, each without every K-th rate of "
                            "every group, and check the left-out points (held-in coverage "
                            "that does not count the fitted points twice)")
    check.add_argument("--leave-out-model", nargs="?", const="", default=None,
                       metavar="V[,V...]",
                       help="hold out whole verifiers instead (each in turn, or the named)")
    check.add_argument("--model", default=None,
                       help="model to fit (default: hierarchical; dense with --ppc)")
    check.add_argument("--prior-predictive", action="store_true",
                       help="instead: share of the data inside prior predictive intervals")
    check.add_argument("--ppc", action="store_true",
                       help="instead: posterior predictive check per group (observed vs "
                            "predicted along utilisation, groups with too many points "
                            "outside their interval flagged); DATA may be a fit file")
    check.add_argument("--hold-out-above", type=float, default=None, metavar="F",
                       help="with --ppc: fit each group's rates up to F (0-1) of its "
                            "highest measured rate only, and predict the higher ones")
    add_model_options(check, "run_effect=shared (with --ppc and a data file: as `fit "
                             "--option`; with --prior-predictive: the priors drawn)")
    check.add_argument("--plot", default=None, metavar="PNG",
                       help="predicted vs observed held-out latency with intervals (with "
                            "--ppc: one panel per group; PNG_2.png ... past 16 groups)")
    add_parallel_options(check)
    add_saturation_options(check)
    add_engine_limit_options(check)
    add_catalog(check)
    add_sampler_options(check)
    add_common(check)
    check.set_defaults(handler=run)


def run(args) -> int:
    check_prob(args)
    if args.plot:
        check_output_path(args.plot)
    settings = sampler_settings(args)
    if args.ppc:
        return run_predictive_check(args, settings)
    if args.decode_profile:
        raise BadInput("with --ppc and a data file: its refits take the decode profile",
                       option="--decode-profile")
    for flag, given in (("--option", args.option), ("--cap-prior", args.cap_prior)):
        if given and not args.prior_predictive:
            raise BadInput("model options are for --ppc's refits of a data file and for "
                           "--prior-predictive", option=flag)
    if args.hold_out_above is not None:
        raise BadInput("needs --ppc", option="--hold-out-above")
    args.model = args.model or "hierarchical"
    config = model_options(args) or None
    data = read_data(args.data, args)
    from bayesspec import checks
    from bayesspec.cli.common import catalog_of

    if args.prior_predictive:
        document = checks.prior_predictive_check(data, model=args.model, config=config,
                                                 seed=args.seed or 0,
                                                 catalog=catalog_of(args))
        if args.json:
            emit_json(document)
        else:
            print(prior_predictive_text(document))
        if args.strict and not document["admits"]:
            log("bayesspec: --strict: exiting with status 3 (the priors exclude the data)")
            return 3
        return 0
    by_verifier = args.leave_out_model is not None
    document = checks.leave_out_check(
        data, model=args.model, leave_out=args.leave_out, folds=args.folds,
        verifiers=[v for v in (args.leave_out_model or "").split(",") if v] or None,
        by_verifier=by_verifier, seed=args.seed or 0, prob=args.prob, settings=settings,
        progress=settings.progress, catalog=catalog_of(args), **parallel_options(args))
    points = document.pop("_points")
    if args.plot:
        from bayesspec.reporting.plots import holdout_plot, save_figure

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


def run_predictive_check(args, settings) -> int:
    """``check --ppc``: on a fit file as it is, or fit DATA (its lower rates only with
    ``--hold-out-above``) and check."""
    from bayesspec import checks
    from bayesspec.inference.fitfile import is_fit_file
    from bayesspec.cli.common import catalog_of, load_fit, strict_exit

    if args.prior_predictive:
        raise BadInput("choose one of --ppc and --prior-predictive", option="--ppc")
    fraction = args.hold_out_above
    if fraction is not None and not 0.0 < fraction < 1.0:
        raise BadInput(f"must be in (0, 1), got {fraction}", option="--hold-out-above")
    if args.folds is not None:
        return run_fold_check(args, settings)
    if is_fit_file(args.data):
        if args.decode_profile:
            raise BadInput("a fit file keeps the profile it was fitted with: give the data "
                           "file to refit with another", option="--decode-profile")
        for flag, given in (("--option", args.option), ("--cap-prior", args.cap_prior)):
            if given:
                raise BadInput("a fit file keeps the options it was fitted with: give the "
                               "data file to refit with others", option=flag)
        if fraction is not None:
            raise BadInput("--hold-out-above refits: give the data file, not a fit file",
                           file=args.data)
        fit = load_fit(args.data)
        document = checks.predictive_check(fit, prob=args.prob, seed=args.seed or 0)
    else:
        data = read_data(args.data, args)
        model = args.model or "dense"
        config = profile_config(args, model)
        if fraction is None:
            from bayesspec.bayes.workflow import fit as fit_model

            fit = fit_model(data, model, settings=settings, config=config,
                            catalog=catalog_of(args))
            document = checks.predictive_check(fit, prob=args.prob, seed=args.seed or 0)
        else:
            fit, document = checks.rate_holdout_check(
                data, model=model, fraction=fraction, prob=args.prob, settings=settings,
                config=config, catalog=catalog_of(args), seed=args.seed or 0)
    points = document.pop("_points")
    summary_points = document.pop("_summary_points", {})
    if args.plot:
        from pathlib import Path

        from bayesspec.reporting.plots import predictive_check_plot, save_figure
        from bayesspec.data.schema import metric_description

        target = Path(args.plot)
        # a fit of percentiles alone has no mean to draw: its summaries are the check
        panels = ([("", points, document["groups"], "mean latency")]
                  if fit.model().has_mean(fit) else [])
        # each summary on its own figures, named after it (ppc_p99.png)
        panels += [(f"_{metric}", table, document["summaries"][metric]["groups"],
                    metric_description(metric))
                   for metric, table in summary_points.items()]
        document["plots"] = []
        for suffix, table, groups, quantity in panels:
            figures = predictive_check_plot(table, groups, prob=args.prob, quantity=quantity)
            stem = f"{target.stem}{suffix}"
            document["plots"] += [save_figure(figure, target.with_name(
                f"{stem}{'' if i == 0 else f'_{i + 1}'}{target.suffix}"))
                for i, figure in enumerate(figures)]
    verdicts = [fit.diagnostics]
    if args.json:
        emit_json(document)
    else:
        print(f"posterior predictive check ({document['model']} model, "
              f"{document['prob']:.0%} intervals): inside {document['inside']}")
        for entry in document["groups"]:
            cells = []
            for name in ("held_in", "held_out"):
                if name in entry:
                    part = entry[name]
                    left_out = (f", {part['coverage_loo']:.0%} left out"
                                if "coverage_loo" in part else "")
                    cells.append(f"{name.replace('_', '-')} {part['coverage']:.0%} of "
                                 f"{part['points']}{left_out} (R^2 {part['r2']:.3f})")
            pattern = " ".join(f"{band} {value:+.1%}" for band, value in
                               entry["residual_by_utilisation"].items())
            counters = entry.get("acceptance_counters")
            if counters:
                p = counters["p_value"]
                spread = f"{p:.2f}" if p >= 0.01 else f"{p:.0e}"
                pattern += (f"; acceptance {counters['accepted_share']:.3f} of drafted "
                            f"tokens over {counters['windows']} windows (their spread: p "
                            f"{spread})")
            mark = f"  MISFIT: {', '.join(entry['misfit'])}" if entry["flagged"] else ""
            print(f"  {entry['group']}: {'; '.join(cells)}; mean residual by load: "
                  f"{pattern}{mark}")
        summaries = document.get("summaries", {})
        if summaries:
            print("latency summaries, each as a new report of its point's request count:")
            for metric, entry in summaries.items():
                flagged = [f"{g['group']} ({', '.join(g['misfit'])})"
                           for g in entry["groups"] if g["flagged"]]
                print(f"  {checks.summary_line(metric, entry['pooled'])}"
                      + (f"; MISFIT: {'; '.join(flagged)}" if flagged else ""))
        print(document["verdict"])
        print(f"convergence: {fit.diagnostics['text']}")
        for path in document.get("plots", []):
            print(f"plot: {path}")
    return strict_exit(args, verdicts)


def prior_predictive_text(document: dict) -> str:
    """``check --prior-predictive``'s lines: the shares inside, the draws that were not
    finite, the verdict."""
    inside = document["inside"]
    lines = [f"prior predictive ({document['model']} model, {document['draws']} draws, "
             f"physics priors {'on' if document['physics_priors'] else 'off'}): observed "
             "points inside " + ", ".join(f"{float(p):.0%} interval {v:.1%}"
                                          for p, v in inside.items())]
    bad = document["non_finite"]
    if bad["draws"]:
        line = (f"  {bad['draws']:,} of {bad['of']:,} draws ({bad['draws'] / bad['of']:.1%}) "
                f"are not finite, at {bad['points']} of {document['points']} points (the draw "
                "puts the point past saturation): the intervals are the finite draws'")
        if bad["points_without_finite"]:
            line += (f"; {bad['points_without_finite']} points have no finite draw and are "
                     "not counted")
        lines.append(line)
    lines.append(document["verdict"])
    return "\n".join(lines)


def profile_config(args, model: str) -> dict | None:
    """The model configuration for ``--decode-profile`` and ``--option`` (None without
    either), checked as ``fit`` checks them."""
    if not (args.option or args.decode_profile or args.cap_prior):
        return None
    args.model = model
    return model_options(args) or None


def run_fold_check(args, settings) -> int:
    """``check --ppc --folds K``: K refits without interleaved rates, left-out coverage."""
    from bayesspec import checks
    from bayesspec.inference.fitfile import is_fit_file
    from bayesspec.cli.common import catalog_of

    if args.hold_out_above is not None:
        raise BadInput("choose one of --folds and --hold-out-above", option="--folds")
    if args.folds < 2:
        raise BadInput(f"needs at least 2, got {args.folds}", option="--folds")
    if is_fit_file(args.data):
        raise BadInput("--folds refits: give the data file, not a fit file", file=args.data)
    data = read_data(args.data, args)
    model = args.model or "dense"
    document = checks.fold_check(data, model=model, folds=args.folds,
                                 prob=args.prob, settings=settings, catalog=catalog_of(args),
                                 config=profile_config(args, model),
                                 seed=args.seed or 0, progress=settings.progress,
                                 **parallel_options(args))
    points = document.pop("_points")
    if args.plot:
        from pathlib import Path

        from bayesspec.reporting.plots import predictive_check_plot, save_figure

        figures = predictive_check_plot(points, checks.group_calibration(points, prob=args.prob),
                                        prob=args.prob)
        target = Path(args.plot)
        document["plots"] = [save_figure(figure, target if i == 0 else
                                         target.with_name(f"{target.stem}_{i + 1}{target.suffix}"))
                             for i, figure in enumerate(figures)]
    unconverged = [f["fold"] for f in document["per_fold"] if f["convergence"] == "not converged"]
    if unconverged:
        document["warning"] = (f"{len(unconverged)} of {args.folds} refits did not converge: "
                               "their intervals, and this coverage, are unreliable (run longer)")
        log(f"WARNING: {document['warning']}")
    if args.json:
        emit_json(document)
    else:
        below = [g for g in document["groups"] if g["coverage"] < 0.7]
        print(f"{args.folds}-fold check ({document['model']} model, {document['prob']:.0%} "
              f"intervals): {document['coverage']:.1%} of {document['points']} left-out "
              f"points inside; {len(below)} of {len(document['groups'])} groups below 70% "
              f"({document['seconds']:.0f} s)")
        for entry in document["groups"]:
            mark = f"  MISFIT: {', '.join(entry['misfit'])}" if entry["flagged"] else ""
            print(f"  {entry['group']}: {entry['coverage']:.0%} of {entry['points']} "
                  f"(R^2 {entry['r2']:.3f}){mark}")
        for path in document.get("plots", []):
            print(f"plot: {path}")
    if args.strict and unconverged:
        log("bayesspec: --strict: exiting with status 3 (a refit did not converge)")
        return 3
    return 0
