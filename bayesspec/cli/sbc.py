"""``bayesspec sbc``: simulation-based calibration of a registered model
(:mod:`bayesspec.checks.sbc`), with the rank ECDF plot and its tables written to a folder."""

from __future__ import annotations

from pathlib import Path

from bayesspec.errors import BadInput
from bayesspec.outputs import emit_json, json_text, write_text_atomic
from bayesspec.checks.sbc import DEFAULT_THIN_TO, MAX_LATENCY_RATIO
from bayesspec.cli.common import (add_catalog, add_method_options, add_model_options, add_units,
                     add_parallel_options, method_settings, model_options,
                     parallel_options, read_data)


def register(verbs) -> None:
    parser = verbs.add_parser("sbc", help="simulation-based calibration of a model: rank "
                                          "statistics, uniformity tests, ECDF plot")
    add_arguments(parser)
    parser.set_defaults(handler=run)


def add_arguments(parser) -> None:
    parser.add_argument("data", nargs="?",
                        help="tidy CSV or Parquet file giving the design (rates, groups, "
                             "covariates); default: a small built-in design for --model")
    parser.add_argument("--model", default="speculative",
                        help="registered latency model (default speculative)")
    add_model_options(parser, "latent_alpha=always")
    parser.add_argument("--simulations", type=int, default=100,
                        help="data sets drawn from the prior (default 100)")
    parser.add_argument("--draws", type=int, default=500, help="draws per chain (default 500)")
    parser.add_argument("--tune", type=int, default=None,
                        help="tuning steps (default: the model's, as in fit)")
    parser.add_argument("--chains", type=int, default=2, help="chains (default 2)")
    parser.add_argument("--target-accept", type=float, default=None,
                        help="NUTS target acceptance (default: the model's)")
    add_method_options(parser)
    parser.add_argument("--thin-to", type=int, default=DEFAULT_THIN_TO,
                        help=f"posterior draws kept per simulation, so ranks are 0..about "
                             f"this (default {DEFAULT_THIN_TO})")
    parser.add_argument("--bins", type=int, default=None,
                        help="bins of the chi-square test (default: about 10 ranks per bin)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--max-latency-ratio", type=float, default=MAX_LATENCY_RATIO,
                        help="set aside simulated data sets with a sweep whose slowest point "
                             f"is more than this many times its fastest (default "
                             f"{MAX_LATENCY_RATIO:g}; 0: keep all)")
    parser.add_argument("--max-rps", type=float, default=None,
                        help="treat points above this rate as saturated")
    add_units(parser)
    add_catalog(parser)
    add_parallel_options(parser)
    parser.add_argument("--plot", help="write the rank ECDF plot to this PNG")
    parser.add_argument("--out", help="folder for sbc.json, ranks.csv, simulations.csv and "
                                      "(without --plot) sbc_ecdf.png")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document on stdout and nothing else there")
    parser.add_argument("--quiet", action="store_true", help="no progress output on stderr")


def run(args) -> int:
    """``bayesspec sbc``: exit 0 when no coefficient is rejected family-wise, else 1."""
    from bayesspec.inference import SamplerSettings
    from bayesspec.checks.sbc import run_sbc

    for name, low in (("simulations", 2), ("draws", 2), ("tune", 0), ("chains", 1),
                      ("thin_to", 2), ("max_latency_ratio", 0)):
        if getattr(args, name) is not None and getattr(args, name) < low:
            raise BadInput(f"must be >= {low}, got {getattr(args, name)}",
                           option=f"--{name.replace('_', '-')}")
    if 0 < args.max_latency_ratio <= 1:
        raise BadInput(f"must be > 1 (or 0 to keep all), got {args.max_latency_ratio}",
                       option="--max-latency-ratio")
    if args.bins is not None and args.bins < 2:
        raise BadInput(f"must be >= 2, got {args.bins}", option="--bins")
    if args.target_accept is not None and not 0.5 <= args.target_accept < 1.0:
        raise BadInput(f"must be within [0.5, 1), got {args.target_accept}",
                       option="--target-accept")
    out = Path(args.out) if args.out else None
    if out is not None and not out.is_dir():
        raise BadInput("output folder does not exist", file=str(out))
    if args.plot and not Path(args.plot).resolve().parent.is_dir():
        raise BadInput("output folder does not exist", file=args.plot)
    config = model_options(args)
    from bayesspec.bayes import get_model_class

    model_class = get_model_class(args.model)
    data = read_data(args.data, args) if args.data else model_class.default_sbc_design()
    settings = SamplerSettings(draws=args.draws, tune=args.tune, chains=args.chains,
                               target_accept=args.target_accept, progress=False,
                               **method_settings(args))
    result = run_sbc(data, args.model, config=config, simulations=args.simulations,
                     settings=settings, seed=args.seed, thin_to=args.thin_to, bins=args.bins,
                     max_latency_ratio=args.max_latency_ratio or None,
                     progress=not args.quiet, **parallel_options(args))
    document = result.document()
    plot = args.plot or (str(out / "sbc_ecdf.png") if out is not None else None)
    if plot:
        from bayesspec.reporting.plots import sbc_ecdf_plot, save_figure

        document["plot"] = save_figure(sbc_ecdf_plot(result), plot)
    if out is not None:
        import pandas as pd

        ranks = pd.DataFrame(result.ranks, columns=result.names)
        write_text_atomic(out / "ranks.csv", ranks.to_csv(index_label="simulation"))
        write_text_atomic(out / "simulations.csv", result.per_simulation.to_csv(index=False))
        write_text_atomic(out / "sbc.json", json_text(document))
    if args.json:
        emit_json(document)
    else:
        _print_summary(document)
    return 0 if result.passed else 1


def _print_summary(document: dict) -> None:
    diag = document["diagnostics"]
    lines = [f"SBC of the {document['model']} model: {document['simulations_used']} of "
             f"{document['simulations']} simulations sampled, ranks 0..{document['max_rank']}, "
             f"{document['bins']} bins, {document['wall_time_s']:.0f} s"]
    for row in document["coefficients"]:
        flag = " REJECTED" if row["rejected"] else ""
        lines.append(f"  {row['name']:<60} p {row['p_value']:.3f}  p_ecdf "
                     f"{row['p_ecdf']:.3f}{flag}")
    lines.append(f"per coefficient at {document['level']:.0%}: {len(document['rejected'])} "
                 f"rejected ({document['expected_false_rejections']:.2f} expected by chance); "
                 f"family-wise ({document['family_wise_rule']}): "
                 f"{'pass' if document['passed'] else 'FAIL'}")
    lines.append(f"simulations with divergences: {diag['divergent_simulations']} "
                 f"({diag['divergences']} divergent transitions); R-hat > 1.01 in "
                 f"{diag['rhat_over_1.01']}"
                 + (f"; sampled again at a higher target_accept after divergences: "
                    f"{diag['retried_simulations']}" if diag.get("retried_simulations")
                    else ""))
    if document["set_aside_implausible"]:
        lines.append(f"set aside before sampling: {document['set_aside_implausible']} of "
                     f"{document['prior_draws']} prior draws (a sweep spans more than "
                     f"{document['max_latency_ratio']:g}x in latency)")
    if document["non_finite"] or document["failed"]:
        lines.append(f"non-finite simulated data: {len(document['non_finite'])}; sampler "
                     f"failures: {len(document['failed'])}")
    print("\n".join(lines))
