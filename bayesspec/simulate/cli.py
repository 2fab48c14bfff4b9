"""``bayesspec simulate``: synthetic sweeps from the serving simulator.

The main command line registers this verb with :func:`add_arguments` and :func:`run`.
Bad options raise :class:`bayesspec.errors.BadInput` (the main CLI turns it into one
line on stderr and exit status 2). Outputs are written atomically.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from bayesspec.errors import BadInput

from .grid import BUILTIN_GRIDS, expand_grid, load_grid, run_grid
from .report import _default_mode, write_atomic, write_guidellm_json
from .sweep import at_rates, parse_rates, setup, sweep

__all__ = ["add_arguments", "run", "TIDY_COLUMNS", "write_tidy"]

#: Column order of the CSV files (CONTRACT.md first, then the simulator's own).
TIDY_COLUMNS = [
    "verifier", "drafter", "k", "alpha", "prefill_tokens", "decode_tokens",
    "rps", "latency_mean_s", "rps_target", "n_requests", "latency_std_s", "latency_p50_s",
    "latency_p95_s", "latency_p99_s", "ttft_mean_s", "itl_mean_s", "mean_concurrency",
    "saturated", "strategy", "gpu", "engine", "engine_version", "method", "num_drafts",
    "draft_tokens", "accepted_tokens", "verifier_params_b", "drafter_params_b",
    "experts_active", "experts_total", "source",
]


def acceptance_rates_option(args) -> tuple[float, ...] | None:
    """Per-position acceptance rates from ``--acceptance-rates`` (None when not given)."""
    if args.acceptance_rates is None:
        return None
    if args.alpha is not None:
        raise BadInput("give --alpha or --acceptance-rates, not both", column="alpha")
    try:
        return tuple(float(x) for x in args.acceptance_rates.split(",") if x.strip())
    except ValueError:
        raise BadInput(f"cannot read --acceptance-rates {args.acceptance_rates!r}",
                       column="acceptance_rates") from None


def _has(parser: argparse.ArgumentParser, option: str) -> bool:
    return option in parser._option_string_actions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bayesspec simulate``."""
    parser.description = (
        "Synthetic GuideLLM-like sweeps from a simulated vLLM-like server (continuous "
        "batching, chunked prefill, KV-cache limits, speculative decoding, MoE experts).")
    parser.epilog = ("Examples: bayesspec simulate --verifier Qwen3-8B --gpu H100 --k 3 "
                     "--alpha 0.8 --sweep 9 -o sd.csv;  bayesspec simulate --grid "
                     f"paper-dense -o dense.csv (built-in grids: {', '.join(BUILTIN_GRIDS)})")
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
    if not _has(parser, "--json"):
        out.add_argument("--json", action="store_true",
                         help="print one JSON summary on stdout")
    if not _has(parser, "--catalog"):
        out.add_argument("--catalog", action="append", default=None, metavar="DIR",
                         help="extra catalog cards (repeatable)")


def _catalog(args):
    dirs = getattr(args, "catalog", None)
    if not dirs:
        return None
    from bayesspec.catalog import load_catalog

    return load_catalog(dirs if isinstance(dirs, (list, tuple)) else [dirs])


def write_tidy(path: str | os.PathLike, rows: pd.DataFrame) -> None:
    """CSV or Parquet by suffix, written through a temporary file and ``os.replace``."""
    path = Path(path)
    ordered = [c for c in TIDY_COLUMNS if c in rows.columns]
    rows = rows[ordered + [c for c in rows.columns if c not in ordered]]
    if path.suffix.lower() in (".parquet", ".pq"):
        directory = path.parent if str(path.parent) else Path(".")
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
        os.close(fd)
        try:
            rows.to_parquet(tmp, index=False)
            _default_mode(tmp)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return
    buffer = io.StringIO()
    rows.to_csv(buffer, index=False, float_format="%.6g", lineterminator="\n")
    write_atomic(path, buffer.getvalue())


class _Progress:
    """A one-line progress bar on stderr (a plain line per item when not a terminal)."""

    def __init__(self, enabled: bool, stream=sys.stderr):
        self.enabled = enabled
        self.stream = stream
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.start = time.monotonic()

    def __call__(self, i: int, total: int, label: str) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.start
        width = 28
        filled = int(width * i / max(total, 1))
        eta = elapsed / i * (total - i) if i else float("nan")
        eta_text = f" eta {eta:4.0f}s" if i and i < total else ""
        line = (f"simulate [{'#' * filled}{'.' * (width - filled)}] {i}/{total} "
                f"{elapsed:5.1f}s{eta_text}  {label}")
        if self.tty:
            self.stream.write("\r" + line[:120].ljust(120) + ("\n" if i >= total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


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


def run(args: argparse.Namespace) -> int:
    """Run ``bayesspec simulate``; returns the exit status (0)."""
    _check_outputs(args)
    catalog = _catalog(args)
    progress = _Progress(not args.quiet)
    if args.grid:
        single = [o for o in ("verifier", "drafter", "prefill", "decode", "k", "alpha",
                              "acceptance_rates", "sweep", "rps", "gpu")
                  if getattr(args, o, None) is not None]
        if single:
            raise BadInput(f"--grid describes every configuration itself; drop "
                           f"--{single[0].replace('_', '-')}", column=single[0])
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
                write_guidellm_json(folder / name, r)
                reports.append(str(folder / name))
        _summary(args, rows, len(results), reports)
        return 0

    if args.verifier is None:
        raise BadInput("--verifier is required (or --grid)", column="verifier")
    rates = acceptance_rates_option(args)
    k = args.k if args.k is not None else (len(rates) if rates else 0)
    if args.requests is not None and args.requests < 10:
        raise BadInput(f"--requests must be at least 10, got {args.requests}", column="requests")
    s = setup(args.verifier, args.gpu or "H100", drafter=args.drafter, k=k, alpha=args.alpha,
              rates=rates, prefill=args.prefill or 512, decode=args.decode or 512,
              length_dist=args.length_dist, length_cv=args.length_cv, catalog=catalog,
              max_num_batched_tokens=args.max_num_batched_tokens,
              max_num_seqs=args.max_num_seqs, kv_capacity=args.kv_capacity)
    n = args.requests or 1000
    seed = args.seed if args.seed is not None else 0
    arrivals = args.arrivals or "poisson"
    label = f"{s.verifier} p{s.workload.prefill} g{s.workload.decode}" + \
        (f" k{s.spec.k}" if s.spec.k else "")
    progress(0, 1, label)
    if args.rps is not None:
        result = at_rates(s, parse_rates(args.rps), n_requests=n, seed=seed, arrivals=arrivals)
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
