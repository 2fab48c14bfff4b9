"""Command line: ``bayesspec VERB ...`` (CONTRACT.md, "Command line").

Conventions every verb follows: ``--json`` prints one JSON document on stdout and nothing
else there (progress and warnings go to stderr); bad input exits 2 with one line on
stderr; files are written atomically.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import warnings
from pathlib import Path

import numpy as np

from . import __version__
from .errors import BadInput, ConvergenceWarning

PROG = "bayesspec"


# --------------------------------------------------------------------------- helpers

def parse_list(text: str, *, option: str = "--rps") -> np.ndarray:
    """'1,2,5' or 'start:stop:step' (stop included when it falls on the grid)."""
    text = str(text).strip()
    try:
        if ":" in text:
            parts = [float(p) for p in text.split(":")]
            if len(parts) != 3 or parts[2] <= 0 or parts[1] < parts[0]:
                raise ValueError
            start, stop, step = parts
            count = int(math.floor((stop - start) / step + 1e-9)) + 1
            if count > 100_000:
                raise BadInput("too many values (more than 100000)", option=option)
            values = start + step * np.arange(count)
        else:
            values = np.array([float(p) for p in text.split(",") if p.strip()])
    except ValueError:
        raise BadInput(f"expected comma-separated numbers or start:stop:step, got {text!r}",
                       option=option) from None
    if values.size == 0 or not np.all(np.isfinite(values)):
        raise BadInput(f"expected finite numbers, got {text!r}", option=option)
    return values


def _clean(value):
    """JSON-safe: numpy scalars to Python, inf/nan to null."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, np.bool_):
        return bool(value)
    if value is None or isinstance(value, (str, int, bool)):
        return value
    try:
        import pandas as pd

        if value is pd.NA:
            return None
    except ImportError:  # pragma: no cover
        pass
    return str(value)


def emit_json(document: dict) -> None:
    sys.stdout.write(json.dumps(_clean(document), indent=2, allow_nan=False) + "\n")


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    import tempfile

    path = Path(path)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _fmt(u: dict, digits: int = 4) -> str:
    if u.get("median") is None:
        return "n/a"
    return (f"{_g(u['median'], digits)} [{_g(u['lo'], digits)}, {_g(u['hi'], digits)}]")


def _g(value, digits=4) -> str:
    if value is None:
        return "n/a"
    if math.isinf(value):
        return "inf"
    return f"{value:.{digits}g}"


def _add_group_options(parser: argparse.ArgumentParser, *, design: bool = True) -> None:
    group = parser.add_argument_group("group options (needed when the fit holds several groups)")
    group.add_argument("--verifier")
    group.add_argument("--drafter")
    group.add_argument("--prefill", type=int)
    group.add_argument("--decode", type=int)
    if design:
        group.add_argument("--k", type=int, dest="group_k", help="draft length of the group")
        group.add_argument("--alpha", type=float, dest="group_alpha",
                           help="acceptance of the group")
    group.add_argument("--gpu")


def _group_criteria(args) -> dict:
    return {"verifier": args.verifier, "drafter": args.drafter, "prefill": args.prefill,
            "decode": args.decode, "k": getattr(args, "group_k", None),
            "alpha": getattr(args, "group_alpha", None), "gpu": args.gpu}


def _check_alpha_k(alpha: float, k: int) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise BadInput(f"must be within [0, 1], got {alpha:g}", option="--alpha")
    if k < 1:
        raise BadInput(f"must be an integer >= 1, got {k}", option="--k")


def _rates(text: str) -> np.ndarray:
    rps = parse_list(text)
    if np.any(rps < 0):
        raise BadInput("rates must be >= 0", option="--rps")
    return rps


def _finish(document: dict, fit, args) -> dict:
    warning = _convergence_warning(fit.diagnostics)
    if warning:
        document["warning"] = warning
    return document


def _add_common(parser: argparse.ArgumentParser, *, prob: bool = True) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document on stdout and nothing else there")
    if prob:
        parser.add_argument("--prob", type=float, default=0.9,
                            help="probability of the equal-tailed intervals (default 0.9)")


def _check_prob(args) -> None:
    if hasattr(args, "prob") and not 0.0 < args.prob < 1.0:
        raise BadInput(f"must be within (0, 1), got {args.prob}", option="--prob")


def _add_sampler_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("sampler")
    group.add_argument("--draws", type=int, default=None,
                       help="draws per chain (default: the model's, 1000; hierarchical 2000)")
    group.add_argument("--tune", type=int, default=None,
                       help="tuning steps per chain (default: the model's, 1000; "
                            "hierarchical 2000)")
    group.add_argument("--chains", type=int, default=4, help="chains (default 4)")
    group.add_argument("--seed", type=int, default=None, help="random seed")
    group.add_argument("--sampler", choices=("nutpie", "pymc"), default="nutpie",
                       help="NUTS implementation (default nutpie)")
    group.add_argument("--target-accept", type=float, default=None,
                       help="NUTS target acceptance (default: the model's, 0.9 or 0.95); "
                            "raise it if divergences appear")
    group.add_argument("--quiet", action="store_true", help="no progress output on stderr")


def _settings(args):
    from .inference import SamplerSettings

    for name in ("draws", "tune", "chains"):
        value = getattr(args, name)
        if value is not None and value < (2 if name == "draws" else 1 if name == "chains" else 0):
            raise BadInput(f"must be a positive number, got {value}", option=f"--{name}")
    if args.target_accept is not None and not 0.5 <= args.target_accept < 1.0:
        raise BadInput(f"must be within [0.5, 1), got {args.target_accept}",
                       option="--target-accept")
    # tune and draws left as None take the fitted model's defaults (inference.settings_for).
    return SamplerSettings(draws=args.draws, tune=args.tune, chains=args.chains,
                           seed=args.seed, progress=not args.quiet, sampler=args.sampler,
                           target_accept=args.target_accept)


def _read_data(path: str, args):
    from .data import SaturationRule, read_tidy

    catalog = None
    if getattr(args, "catalog", None):
        from .catalog import load_catalog

        catalog = load_catalog(args.catalog)
    rule = SaturationRule(max_rps=getattr(args, "max_rps", None))
    data = read_tidy(path, catalog=catalog, saturation=rule)
    excluded = int(data["excluded"].sum())
    if excluded:
        reasons = data.loc[data["excluded"], "exclusion_reason"].value_counts()
        detail = ", ".join(f"{n} {reason}" for reason, n in reasons.items())
        print(f"warning: {excluded} of {len(data)} points excluded from the likelihood as "
              f"saturated ({detail})", file=sys.stderr)
    return data


def _check_output_path(path: str) -> None:
    folder = Path(path).parent
    if str(folder) and not folder.is_dir():
        raise BadInput("output folder does not exist", file=path)


# --------------------------------------------------------------------------- verbs

def cmd_fit(args) -> int:
    _check_output_path(args.output)
    settings = _settings(args)
    data = _read_data(args.data, args)
    # Imported after the data are read: loading PyMC takes seconds, a bad file should not.
    from .workflow import fit

    result = fit(data, args.model, settings=settings)
    diag = result.diagnostics
    if not args.no_loo:
        _store_loo(result)
    result.save(args.output)
    warning = _convergence_warning(diag)
    if args.json:
        emit_json({"fit": args.output, "model": args.model, "groups": len(result.groups),
                   "rows": len(data), "excluded": int(data["excluded"].sum()),
                   "fit_seconds": result.tree.attrs.get("fit_seconds"),
                   "diagnostics": _diag_json(diag), **({"warning": warning} if warning else {})})
    else:
        print(f"fitted {args.model} model to {len(data)} rows in {len(result.groups)} groups "
              f"in {result.tree.attrs.get('fit_seconds', 0):.1f} s -> {args.output}")
        print(_diag_line(diag))
    return 0


def _store_loo(result) -> None:
    """PSIS-LOO at fit time, kept in the fit file's attrs (not the pointwise matrix)."""
    from .checks import loo_summary

    try:
        loo = loo_summary(result)
    except Exception as error:  # noqa: BLE001 - LOO is a report, never a reason to fail
        loo = {"error": f"PSIS-LOO failed: {error}"}
    if "log_likelihood" in result.tree.children:
        del result.tree["log_likelihood"]
    result.tree.attrs["loo"] = json.dumps(loo)
    if loo.get("warning"):
        print(f"warning: {loo['warning']}", file=sys.stderr)


def _diag_json(diag: dict) -> dict:
    return {"rhat_max": diag["rhat_max"], "ess_bulk_min": diag["ess_bulk_min"],
            "divergences": diag["divergences"]}


def _diag_line(diag: dict) -> str:
    status = "OK" if diag["converged"] else "NOT CONVERGED: " + "; ".join(diag["problems"])
    return (f"diagnostics: R-hat max {_g(diag['rhat_max'])}, bulk ESS min "
            f"{diag['ess_bulk_min']:.0f}, divergences {diag['divergences']} -> {status}")


def _convergence_warning(diag: dict) -> str | None:
    from .inference import warn_if_unconverged

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        text = warn_if_unconverged(diag)
    if text:
        print(f"WARNING: {text}", file=sys.stderr)
    return text


def _load_fit(path: str):
    from .fitfile import Fit

    return Fit.load(path)


def cmd_summary(args) -> int:
    from .reports import summary_document, summary_text

    _check_prob(args)
    fit = _load_fit(args.fit)
    document = summary_document(fit, prob=args.prob)
    warning = _convergence_warning(fit.diagnostics)
    if "loo" in fit.tree.attrs:
        document["loo"] = json.loads(fit.tree.attrs["loo"])
    elif args.loo:
        from .checks import loo_summary

        document["loo"] = loo_summary(fit)
    if document.get("loo", {}).get("warning"):
        print(f"warning: {document['loo']['warning']}", file=sys.stderr)
    if warning:
        document["warning"] = warning
    if args.json:
        emit_json(document)
    else:
        print(summary_text(fit, document))
        loo = document.get("loo")
        if loo and "elpd_loo" in loo:
            print(f"PSIS-LOO: elpd {loo['elpd_loo']:.1f} +- {loo['se']:.1f}, p_loo "
                  f"{loo['p_loo']:.1f}, Pareto k max {loo['pareto_k_max']:.2f} "
                  f"({loo['pareto_k_bad']} of {loo['points']} points > 0.7)")
    return 0


def cmd_predict(args) -> int:
    from .decisions import predict_group

    _check_prob(args)
    rps = _rates(args.rps)
    fit = _load_fit(args.fit)
    group = fit.select_group(**_group_criteria(args))
    document = _finish(predict_group(fit, group, rps, prob=args.prob), fit, args)
    if args.json:
        emit_json(document)
        return 0
    print(f"group: {document['group']}   ({args.prob:.0%} intervals)")
    print(f"{'RPS':>10}  {'mean latency s [interval]':>34}  {'new measurement s':>34}  "
          f"{'P(saturated)':>12}")
    for point in document["points"]:
        print(f"{point['rps']:>10.4g}  {_fmt(point['latency_s']):>34}  "
              f"{_fmt(point['predictive_s']):>34}  {point['p_saturated']:>12.3f}")
    return 0


def cmd_speedup(args) -> int:
    from .decisions import speculative_costs, speedup_curve

    _check_prob(args)
    _check_alpha_k(args.alpha, args.k)
    rps = _rates(args.rps)
    fit = _load_fit(args.fit)
    costs = speculative_costs(fit, _group_criteria(args))
    document = _finish(speedup_curve(costs, args.alpha, args.k, rps, prob=args.prob), fit, args)
    if args.plot:
        from .plots import save_figure, speedup_bands_plot

        _check_output_path(args.plot)
        ks = sorted({args.k, 1, 2, 4, 8}) if costs.coefficients is not None else [args.k]
        save_figure(speedup_bands_plot(costs, args.alpha, ks,
                                       rps_max=float(rps.max()), prob=args.prob), args.plot)
        document["plot"] = args.plot
    if args.json:
        emit_json(document)
        return 0
    print(f"setup: {document['setup']}   alpha {args.alpha:g}, k {args.k}   "
          f"({args.prob:.0%} intervals)")
    print(f"C1R (zero-load cost ratio) {_fmt(document['C1R'])}   C2R (load cost ratio) "
          f"{_fmt(document['C2R'])}")
    print(f"{'RPS':>10}  {'speedup [interval]':>30}  {'P(SD slower)':>12}")
    for point in document["points"]:
        print(f"{point['rps']:>10.4g}  {_fmt(point['speedup']):>30}  {point['p_slower']:>12.3f}")
    if args.plot:
        print(f"plot: {args.plot}")
    return 0


def cmd_crossover(args) -> int:
    from .decisions import crossover, speculative_costs

    _check_prob(args)
    _check_alpha_k(args.alpha, args.k)
    fit = _load_fit(args.fit)
    costs = speculative_costs(fit, _group_criteria(args))
    document = _finish(crossover(costs, args.alpha, args.k, prob=args.prob), fit, args)
    if args.json:
        emit_json(document)
        return 0
    print(f"setup: {document['setup']}   alpha {args.alpha:g}, k {args.k}")
    if document["rps_star"] is None:
        print(f"no crossover below saturation in any draw (P = {document['p_crossover']:.3f}): "
              f"the sign of the gain does not change with load")
    else:
        direction = ("SD is faster below RPS* and slower above it"
                     if document["p_sd_faster_below"] >= 0.5 else
                     "SD is slower below RPS* and faster above it")
        print(f"RPS* = {_fmt(document['rps_star'])} in {document['p_crossover']:.1%} of "
              f"draws; {direction}")
    print(f"SD saturation RPS {_fmt(document['saturation_rps'])}; dense saturation RPS "
          f"{_fmt(document['dense_saturation_rps'])}")
    print(f"C1R {_fmt(document['C1R'])}   C2R {_fmt(document['C2R'])}")
    return 0


def cmd_kstar(args) -> int:
    from .decisions import kstar_table, speculative_costs

    _check_prob(args)
    alphas = parse_list(args.alpha, option="--alpha")
    if np.any((alphas < 0) | (alphas > 1)):
        raise BadInput("values must be within [0, 1]", option="--alpha")
    rps = _rates(args.rps)
    if not 1 <= args.kmax <= 64:
        raise BadInput(f"must be within 1..64, got {args.kmax}", option="--kmax")
    fit = _load_fit(args.fit)
    costs = speculative_costs(fit, _group_criteria(args))
    document = kstar_table(costs, alphas, rps, ks=range(0, args.kmax + 1),
                           objective=args.objective, prob=args.prob)
    document = _finish(document, fit, args)
    if args.plot:
        from .plots import kstar_map_plot, save_figure

        _check_output_path(args.plot)
        save_figure(kstar_map_plot(document), args.plot)
        document["plot"] = args.plot
    if args.json:
        emit_json(document)
        return 0
    print(f"setup: {document['setup']}   objective: {args.objective}   k = 0 means "
          f"'do not speculate'")
    print(f"{'alpha':>6} {'RPS':>9} {'k*':>4} {'P(best)':>8} {'speedup [interval]':>28} "
          f"{'batch-1 k':>9} {'loss vs batch-1 k':>17}")
    for row in document["table"]:
        print(f"{row['alpha']:>6.3g} {row['rps']:>9.4g} {row['k']:>4} {row['p_best']:>8.2f} "
              f"{_fmt(row['speedup']):>28} {row['k_batch1']:>9} {row['loss_vs_batch1']:>17.3f}")
    return 0


def cmd_compare(args) -> int:
    from .decisions import compare_fits, compare_versions

    _check_prob(args)
    if args.by:
        if args.b is not None:
            raise BadInput("with --by give one data file (or a two-version fit), not two",
                           option="--by")
        fits = [_versions_fit(args)]
        document = compare_versions(fits[0], rope=args.rope, prob=args.prob)
    else:
        if args.b is None:
            raise BadInput("give two fit files A B, or one data file with --by COLUMN")
        fits = [_load_fit(args.a), _load_fit(args.b)]
        document = compare_fits(*fits, rope=args.rope, prob=args.prob)
    warnings_found = [w for w in (_convergence_warning(f.diagnostics) for f in fits) if w]
    if warnings_found:
        document["warning"] = "; ".join(warnings_found)
    if args.plot:
        from .plots import compare_forest_plot, save_figure

        _check_output_path(args.plot)
        save_figure(compare_forest_plot(document), args.plot)
        document["plot"] = args.plot
    if args.json:
        emit_json(document)
        return 0
    label_a, label_b = (document["a"], document["b"]) if args.by else (args.a, args.b)
    print(f"B = {label_b} relative to A = {label_a}; region of practical equivalence "
          f"+-{args.rope:.0%}; {args.prob:.0%} intervals")
    width = max(len(name) for name in document["parameters"])
    for name, entry in document["parameters"].items():
        print(f"{name:<{width}}  ratio {_fmt(entry['ratio']):>28}  P(increase) "
              f"{entry['p_increase']:.3f}  {entry['verdict']}")
    print(f"verdict: {document['verdict']}")
    return 0


def _versions_fit(args):
    """A two-version fit: loaded when A is a fit file, fitted when it is data (the
    speculative variant when the data have SD rows)."""
    if str(args.a).endswith(".nc"):
        return _load_fit(args.a)
    settings = _settings(args)
    data = _read_data(args.a, args)
    from .workflow import fit

    # Speculative rows get version effects on the six cycle coefficients as well.
    included = data.loc[~data["excluded"]] if "excluded" in data.columns else data
    model = "speculative_versions" if (included["k"] > 0).any() else "versions"
    result = fit(data, model, settings=settings, config={"by": args.by})
    if args.save_fit:
        result.save(args.save_fit)
    return result


def cmd_check(args) -> int:
    _check_prob(args)
    if args.plot:
        _check_output_path(args.plot)
    settings = _settings(args)
    data = _read_data(args.data, args)
    from . import checks

    if args.prior_predictive:
        document = checks.prior_predictive_check(data, model=args.model,
                                                 seed=args.seed or 0)
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
        progress=settings.progress)
    points = document.pop("_points")
    if args.plot:
        from .plots import holdout_plot, save_figure

        save_figure(holdout_plot(points, prob=args.prob,
                                 title=f"leave-{document['leave_out']}-out"), args.plot)
    if document.get("warning"):
        print(f"warning: {document['warning']}", file=sys.stderr)
    if args.json:
        emit_json(document)
    else:
        trends = ", ".join(f"{k} {v:.4f}" for k, v in document["r2_trends"].items())
        print(f"leave-{document['leave_out']}-out, {document['folds']} folds, "
              f"{document['points']} held-out points: R^2 {document['r2']:.4f}, "
              f"{document['prob']:.0%} coverage {document['coverage']:.3f}, elpd "
              f"{document['elpd']:.1f}; held-out vs full-fit R^2: {trends} "
              f"({document['seconds']:.0f} s)")
    return 0


def cmd_compare_models(args) -> int:
    from .checks import compare_models

    names = [os.path.basename(p) for p in args.fits]
    if len(set(names)) != len(names):
        names = list(args.fits)
    fits = {name: _load_fit(path) for name, path in zip(names, args.fits)}
    document = compare_models(fits)
    if args.json:
        emit_json(document)
    else:
        print(f"{'model':<30} {'elpd_loo':>10} {'se':>7} {'diff':>8} {'dse':>7} "
              f"{'p_loo':>7} {'weight':>7}")
        for row in document["models"]:
            print(f"{row['name']:<30} {row['elpd_loo']:>10.1f} {row['se']:>7.1f} "
                  f"{row['elpd_diff']:>8.1f} {row['dse']:>7.1f} {row['p_loo']:>7.1f} "
                  f"{row['weight']:>7.2f}" + ("  (Pareto k warning)" if row["warning"] else ""))
        print(document["verdict"])
    return 0


def cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(out=args.out, quick=args.quick, as_json=args.json, seed=args.seed)


# --------------------------------------------------------------------------- parser

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Bayesian latency laws for speculative decoding: fit load-test sweeps, "
                    "get speedup, crossover RPS and best draft length with credible intervals.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True

    demo = verbs.add_parser("demo", help="the main job end to end on the bundled dataset")
    demo.add_argument("--out", default="demo-out", help="output folder (default demo-out)")
    demo.add_argument("--quick", action="store_true", help="fewer draws (a smoke run)")
    demo.add_argument("--seed", type=int, default=2026)
    demo.add_argument("--json", action="store_true")
    demo.set_defaults(handler=cmd_demo)

    fit = verbs.add_parser("fit", help="sample the posterior of a latency model")
    fit.add_argument("data", help="tidy CSV or Parquet file")
    fit.add_argument("-o", "--output", required=True, help="fit file to write (NetCDF)")
    fit.add_argument("--model", default="dense",
                     help="dense (one C1, C2 per group), speculative (six cycle "
                          "coefficients shared by every alpha and k), moe (covered/"
                          "saturated split), or hierarchical (the coefficients on scaling "
                          "trends across verifiers, drafters and lengths)")
    fit.add_argument("--max-rps", type=float, default=None,
                     help="treat points above this rate as saturated")
    fit.add_argument("--catalog", action="append", default=None,
                     help="extra folder of model/GPU cards (repeatable)")
    fit.add_argument("--no-loo", action="store_true",
                     help="skip PSIS-LOO after sampling (saves a few seconds)")
    _add_sampler_options(fit)
    _add_common(fit, prob=False)
    fit.set_defaults(handler=cmd_fit)

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
    check.add_argument("--max-rps", type=float, default=None,
                       help="treat points above this rate as saturated")
    check.add_argument("--catalog", action="append", default=None,
                       help="extra folder of model/GPU cards (repeatable)")
    _add_sampler_options(check)
    _add_common(check)
    check.set_defaults(handler=cmd_check)

    compare_models = verbs.add_parser(
        "compare-models", help="PSIS-LOO comparison of fits of the same data (az.compare)")
    compare_models.add_argument("fits", nargs="+", metavar="FIT", help="fit files")
    _add_common(compare_models, prob=False)
    compare_models.set_defaults(handler=cmd_compare_models)

    summary = verbs.add_parser("summary", help="coefficients with intervals, diagnostics")
    summary.add_argument("fit", help="fit file")
    summary.add_argument("--loo", action="store_true",
                         help="compute PSIS-LOO if the fit file does not hold it")
    _add_common(summary)
    summary.set_defaults(handler=cmd_summary)

    predict = verbs.add_parser("predict", help="mean latency with intervals at given rates")
    predict.add_argument("fit", help="fit file")
    predict.add_argument("--rps", required=True, help="LIST: 1,2,5 or start:stop:step")
    _add_group_options(predict)
    _add_common(predict)
    predict.set_defaults(handler=cmd_predict)

    speedup = verbs.add_parser("speedup", help="speedup curve of SD vs dense with intervals")
    speedup.add_argument("fit", help="fit file")
    speedup.add_argument("--alpha", type=float, required=True, help="acceptance rate")
    speedup.add_argument("--k", type=int, required=True, help="draft length")
    speedup.add_argument("--rps", required=True, help="LIST: 1,2,5 or start:stop:step")
    speedup.add_argument("--plot", help="write speedup bands for several k to this PNG")
    _add_group_options(speedup, design=False)
    _add_common(speedup)
    speedup.set_defaults(handler=cmd_speedup)

    cross = verbs.add_parser("crossover", help="RPS* above which SD stops paying")
    cross.add_argument("fit", help="fit file")
    cross.add_argument("--alpha", type=float, required=True, help="acceptance rate")
    cross.add_argument("--k", type=int, required=True, help="draft length")
    _add_group_options(cross, design=False)
    _add_common(cross)
    cross.set_defaults(handler=cmd_crossover)

    kstar = verbs.add_parser("kstar", help="best draft length per (alpha, RPS)")
    kstar.add_argument("fit", help="fit file")
    kstar.add_argument("--alpha", required=True, help="LIST of acceptance rates")
    kstar.add_argument("--rps", required=True, help="LIST of rates")
    kstar.add_argument("--kmax", type=int, default=10, help="largest k considered (default 10)")
    kstar.add_argument("--objective", choices=("mean", "q10"), default="mean",
                       help="maximise expected speedup (mean) or its 10%% quantile (q10)")
    kstar.add_argument("--plot", help="write the k* map to this PNG")
    _add_group_options(kstar, design=False)
    _add_common(kstar)
    kstar.set_defaults(handler=cmd_kstar)

    compare = verbs.add_parser("compare", help="two fits (e.g. engine versions) compared: "
                                               "ratios B/A with probabilities")
    compare.add_argument("a", help="fit file A (the reference), or with --by a data file")
    compare.add_argument("b", nargs="?", help="fit file B")
    compare.add_argument("--by", help="compare the two values of this column (e.g. "
                                      "engine_version) in one joint model with partial pooling")
    compare.add_argument("--save-fit", help="with --by: also save the joint fit here")
    compare.add_argument("--max-rps", type=float, default=None, help=argparse.SUPPRESS)
    compare.add_argument("--catalog", action="append", default=None, help=argparse.SUPPRESS)
    _add_sampler_options(compare)
    compare.add_argument("--rope", type=float, default=0.02,
                         help="region of practical equivalence, relative (default 0.02)")
    compare.add_argument("--plot", help="write a forest plot of the ratios to this PNG")
    _add_common(compare)
    compare.set_defaults(handler=cmd_compare)

    # Verbs whose options and handler live with their subpackage.
    from importlib import import_module

    for verb, module_name, help_text in (
            ("sbc", "sbc", "simulation-based calibration of a model: rank statistics, "
                           "uniformity tests, ECDF plot"),
            ("simulate", "simulate.cli", "synthetic sweeps from the serving simulator"),
            ("ingest", "ingest.cli", "GuideLLM / vllm bench / metrics files to tidy rows"),
            ("serve", "serve.cli", "OpenAI-compatible HTTP server backed by the simulator "
                                   "in wall-clock time")):
        module = import_module(f".{module_name}", __package__)
        sub = verbs.add_parser(verb, help=help_text)
        module.add_arguments(sub)
        sub.set_defaults(handler=module.run)
    return parser


# Library arguments whose flag is not "--" + the name with dashes.
ARGUMENT_FLAGS = {"verifiers": "--leave-out-model", "fits": "FIT", "prefill": "--prefill",
                  "decode": "--decode", "k": "--k", "alpha": "--alpha"}


def flag_of(argument: str) -> str:
    """The command-line flag that sets a library argument (for error messages)."""
    return ARGUMENT_FLAGS.get(argument, "--" + argument.replace("_", "-"))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with warnings.catch_warnings():
            # Library chatter would break the one-line error and clean stdout contracts.
            warnings.filterwarnings("ignore", category=FutureWarning)
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            return int(args.handler(args) or 0)
    except BadInput as error:
        print(f"{PROG}: error: {error.text(flag_of)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and closed early
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
