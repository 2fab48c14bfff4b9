"""``bayesspec simulate``: synthetic sweeps from the serving simulator.

The main command line registers this verb with :func:`add_arguments` and :func:`run`.
Bad options raise :class:`bayesspec.errors.BadInput` (the main CLI turns it into one
line on stderr and exit status 2). Outputs are written atomically.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from bayesspec.errors import BadInput
from bayesspec.data.write import write_table
from bayesspec.outputs import ProgressLine
from bayesspec.cli.common import add_catalog, catalog_of
from bayesspec.cli.common import parse_list, rates as rate_list

__all__ = ["register", "add_arguments", "run", "acceptance_rates_option",
           "token_persistence_option"]

#: Digits kept in simulated tables (the simulator is not more precise than this).
FLOAT_FORMAT = "%.6g"


def register(verbs) -> None:
    parser = verbs.add_parser("simulate", help="synthetic sweeps from the serving simulator")
    add_arguments(parser)
    parser.set_defaults(handler=run)


def acceptance_rates_option(args) -> tuple[float, ...] | None:
    """Per-position acceptance rates from ``--acceptance-rates`` (None when not given)."""
    if args.acceptance_rates is None:
        return None
    if args.alpha is not None:
        raise BadInput("give --alpha or --acceptance-rates, not both", option="--alpha")
    try:
        return tuple(float(x) for x in args.acceptance_rates.split(",") if x.strip())
    except ValueError:
        raise BadInput(f"cannot read --acceptance-rates {args.acceptance_rates!r}",
                       option="--acceptance-rates") from None


def token_persistence_option(args) -> tuple[float, float] | None:
    """The token process's persistences (p, q) from ``--token-persistence`` (None when
    not given)."""
    text = getattr(args, "token_persistence", None)
    if text is None:
        return None
    for other in ("alpha", "acceptance_rates"):
        if getattr(args, other, None) is not None:
            flag = "--" + other.replace("_", "-")
            raise BadInput(f"give {flag} or --token-persistence, not both", option=flag)
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 2:
        raise BadInput(f"needs two persistences P,Q (e.g. 0.8,0.9), got {text!r}",
                       option="--token-persistence")
    return values


def add_token_persistence(group) -> None:
    """``--token-persistence P,Q`` (simulate and serve)."""
    group.add_argument(
        "--token-persistence", default=None, metavar="P,Q",
        help="draft from a token process instead: each output token is guessable or not, a "
             "two-state Markov chain (P: a guessable token is followed by a guessable one, Q: "
             "an unguessable one by an unguessable one); a cycle accepts the run of "
             "guessable tokens capped at k, so acceptance depends on k (needs --k)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bayesspec simulate``."""
    parser.description = (
        "Synthetic GuideLLM-like sweeps from a simulated vLLM-like server (continuous "
        "batching, chunked prefill, KV-cache limits, speculative decoding, MoE experts).")
    help_text = parser.format_help

    def format_help() -> str:
        # The grids are named only when help is shown: their module imports the
        # simulator (numba), which every other verb would otherwise load for nothing.
        from bayesspec.simulate.grid import BUILTIN_GRIDS

        parser.epilog = ("Examples: bayesspec simulate --verifier Qwen3-8B --gpu H100 --k 3 "
                         "--alpha 0.8 --sweep 9 -o sd.csv;  bayesspec simulate --grid "
                         f"paper-dense -o dense.csv (built-in grids: "
                         f"{', '.join(BUILTIN_GRIDS)})")
        return help_text()

    parser.format_help = format_help
    what = parser.add_argument_group("configuration")
    what.add_argument("--verifier", help="verifier name from the catalog (e.g. Qwen3-8B)")
    what.add_argument("--gpu", default=None, help="GPU name from the catalog (default H100)")
    what.add_argument("--drafter", default=None,
                      help="drafter name (default with --k > 0: the verifier's EAGLE-3 head)")
    what.add_argument("--prefill", type=int, default=None, help="prompt tokens (default 512)")
    what.add_argument("--decode", type=int, default=None, help="output tokens (default 512)")
    what.add_argument("--k", type=int, default=None, help="draft length; 0 = dense (default)")
    what.add_argument("--alpha", type=float, default=None,
                      help="per-token acceptance probability (i.i.d.)")
    what.add_argument("--acceptance-rates", default=None, metavar="R1,..,Rk",
                      help="unconditional per-position acceptance rates instead of --alpha")
    add_token_persistence(what)
    what.add_argument("--length-dist", choices=["fixed", "uniform", "lognormal"],
                      default="fixed", help="prompt/output length distribution")
    what.add_argument("--length-cv", type=float, default=0.0,
                      help="coefficient of variation of the lengths (with --length-dist)")
    load = parser.add_argument_group("load")
    mode = load.add_mutually_exclusive_group()
    mode.add_argument("--sweep", type=int, default=None, metavar="N",
                      help="GuideLLM sweep of N points: synchronous, throughput, N-2 rates "
                           "between (default 9)")
    mode.add_argument("--rps", default=None, metavar="LIST",
                      help="request rates: '1,2,5' or 'start:stop:step'")
    mode.add_argument("--concurrency", default=None, metavar="LIST",
                      help="closed-loop levels: that many clients, each sending when its "
                           "last request finishes (vllm bench serve --max-concurrency); "
                           "'1,2,4,8' or 'start:stop:step'")
    mode.add_argument("--grid", default=None, metavar="CONFIG",
                      help="a grid TOML file or a built-in grid name: a whole dataset")
    load.add_argument("--arrivals", choices=["poisson", "constant"], default=None,
                      help="arrival process of the rate points (default poisson)")
    load.add_argument("--requests", type=int, default=None,
                      help="requests per load point (default 1000)")
    load.add_argument("--seed", type=int, default=None, help="random seed (default 0)")
    server = parser.add_argument_group("server")
    server.add_argument("--max-num-seqs", type=int, default=1024)
    server.add_argument("--max-num-batched-tokens", type=int, default=8192)
    server.add_argument("--kv-capacity", type=int, default=None,
                        help="KV-cache tokens (default: from GPU memory and model sizes)")
    out = parser.add_argument_group("output")
    out.add_argument("-o", "--output", required=True, metavar="DATA.csv",
                     help="tidy rows (.csv or .parquet)")
    out.add_argument("--guidellm-json", default=None, metavar="PATH",
                     help="also write GuideLLM-shaped JSON report(s); with --grid, a folder")
    out.add_argument("--quiet", action="store_true", help="no progress on stderr")
    out.add_argument("--json", action="store_true", help="print one JSON summary on stdout")
    add_catalog(out)


def _check_outputs(args) -> None:
    for name in ("output", "guidellm_json"):
        value = getattr(args, name)
        if value is None:
            continue
        parent = Path(value).parent
        if str(parent) and not parent.exists() and not (name == "guidellm_json" and args.grid):
            raise BadInput("output folder does not exist", file=str(value))
    if Path(args.output).suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise BadInput("output must end in .csv or .parquet", file=args.output)


def write_tidy(path, rows: pd.DataFrame) -> None:
    write_table(path, rows, float_format=FLOAT_FORMAT)


def run(args: argparse.Namespace) -> int:
    """Run ``bayesspec simulate``; returns the exit status (0)."""
    from bayesspec.simulate import (at_concurrency, at_rates, expand_grid, load_grid, run_grid, setup, sweep,
                            write_guidellm_json)

    _check_outputs(args)
    catalog = catalog_of(args)
    progress = ProgressLine("simulate", enabled=not args.quiet)
    if args.grid:
        single = [o for o in ("verifier", "drafter", "prefill", "decode", "k", "alpha",
                              "acceptance_rates", "token_persistence", "sweep", "rps", "concurrency",
                              "gpu")
                  if getattr(args, o, None) is not None]
        if single:
            raise BadInput(f"--grid describes every configuration itself; drop "
                           f"--{single[0].replace('_', '-')}",
                           option=f"--{single[0].replace('_', '-')}")
        grid = dict(load_grid(args.grid))
        for key in ("requests", "seed", "arrivals"):
            if getattr(args, key) is not None:
                grid[key] = getattr(args, key)
                for cfg in grid.get("configs", []):
                    if isinstance(cfg, dict):
                        cfg.pop(key, None)
        expand_grid(grid)       # fail on a bad grid before any work
        rows, results = run_grid(grid, catalog=catalog, progress=progress)
        write_tidy(args.output, rows)
        reports = []
        if args.guidellm_json:
            folder = Path(args.guidellm_json)
            folder.mkdir(parents=True, exist_ok=True)
            for r in results:
                s = r.setup
                name = (f"{s.verifier}_p{s.workload.prefill}_g{s.workload.decode}"
                        + (f"_k{s.spec.k}_a{s.spec.label():g}" if s.spec.k else "") + ".json")
                name = name.replace("_anan", "")
                write_guidellm_json(folder / name, r)
                reports.append(str(folder / name))
        _summary(args, rows, len(results), reports)
        return 0

    if args.verifier is None:
        raise BadInput("required (or --grid)", option="--verifier")
    rates = acceptance_rates_option(args)
    persistence = token_persistence_option(args)
    k = args.k if args.k is not None else (len(rates) if rates else 0)
    if persistence is not None and not k:
        raise BadInput("the token process drafts k tokens a cycle: give --k",
                       option="--token-persistence")
    if args.requests is not None and args.requests < 10:
        raise BadInput(f"must be at least 10, got {args.requests}", option="--requests")
    s = setup(args.verifier, args.gpu or "H100", drafter=args.drafter, k=k, alpha=args.alpha,
              rates=rates, persistence=persistence, prefill=args.prefill or 512, decode=args.decode or 512,
              length_dist=args.length_dist, length_cv=args.length_cv, catalog=catalog,
              max_num_batched_tokens=args.max_num_batched_tokens,
              max_num_seqs=args.max_num_seqs, kv_capacity=args.kv_capacity)
    n = args.requests or 1000
    seed = args.seed if args.seed is not None else 0
    arrivals = args.arrivals or "poisson"
    label = f"{s.verifier} p{s.workload.prefill} g{s.workload.decode}" + \
        (f" k{s.spec.k}" if s.spec.k else "")
    if args.concurrency is not None:
        levels = parse_list(args.concurrency, option="--concurrency")
        if not all(c >= 1 and float(c).is_integer() for c in levels):
            raise BadInput(f"must be whole numbers of clients >= 1, got {args.concurrency!r}",
                           option="--concurrency")
        levels = [int(c) for c in levels]
    progress(0, 1, label)
    if args.concurrency is not None:
        result = at_concurrency(s, levels, n_requests=n, seed=seed)
    elif args.rps is not None:
        result = at_rates(s, rate_list(args.rps, positive=True).tolist(), n_requests=n, seed=seed,
                          arrivals=arrivals)
    else:
        result = sweep(s, args.sweep or 9, n_requests=n, seed=seed, arrivals=arrivals)
    progress(1, 1, label)
    write_tidy(args.output, result.rows)
    reports = []
    if args.guidellm_json:
        write_guidellm_json(args.guidellm_json, result)
        reports.append(str(args.guidellm_json))
    _summary(args, result.rows, 1, reports)
    return 0


def _summary(args, rows: pd.DataFrame, configs: int, reports: list[str]) -> None:
    if not getattr(args, "json", False):
        if not args.quiet:
            sys.stderr.write(f"wrote {len(rows)} rows ({configs} configuration"
                             f"{'s' if configs != 1 else ''}) to {args.output}\n")
        return
    doc = {
        "output": str(args.output),
        "rows": int(len(rows)),
        "configurations": configs,
        "saturated_rows": int(rows["saturated"].sum()),
        "guidellm_reports": reports,
        "points": [
            {"verifier": r.verifier, "drafter": r.drafter, "k": int(r.k),
             "alpha": None if pd.isna(r.alpha) else float(r.alpha),
             "prefill_tokens": int(r.prefill_tokens), "decode_tokens": int(r.decode_tokens),
             "strategy": r.strategy, "rps": float(r.rps), "latency_mean_s": float(r.latency_mean_s),
             "saturated": bool(r.saturated)}
            for r in rows.itertuples()
        ] if configs == 1 else [],
    }
    sys.stdout.write(json.dumps(doc) + "\n")
