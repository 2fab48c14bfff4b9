"""``bayesspec ingest FILE... -o DATA.csv``: load-test files to tidy rows.

The main command line registers this verb with :func:`add_arguments` and :func:`run`.
Bad input raises :class:`bayesspec.errors.BadInput` (one line on stderr, exit 2, nothing
written); the output is written through a temporary file and ``os.replace``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bayesspec.errors import BadInput
from bayesspec.data.write import write_table

__all__ = ["register", "add_arguments", "run"]

_NUMERIC_FLAGS = {"k": ("--k", int), "alpha": ("--alpha", float),
                  "prefill": ("--prefill", int), "decode": ("--decode", int),
                  "max_num_seqs": ("--max-num-seqs", int),
                  "kv_cache_tokens": ("--kv-cache-tokens", int),
                  "max_num_batched_tokens": ("--max-num-batched-tokens", int)}


def register(verbs) -> None:
    parser = verbs.add_parser("ingest", help="GuideLLM / vllm bench / metrics files to tidy "
                                             "rows")
    add_arguments(parser)
    parser.set_defaults(handler=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bayesspec ingest``."""
    parser.description = (
        "Read GuideLLM reports (JSON/YAML, schema v1 and v2), vllm bench serve results "
        "(JSON/JSONL) and vLLM /metrics scrapes into tidy rows, checked and fit-ready.")
    parser.epilog = (
        "Design values the files do not record come from the flags below or a sidecar "
        "(FILE.meta.toml / FILE.meta.json next to FILE, or --sidecar): keys verifier, "
        "drafter, k, alpha, prefill_tokens, decode_tokens, gpu, engine, engine_version, "
        "method, max_num_seqs, kv_cache_tokens, max_num_batched_tokens, and [[metrics]] "
        "entries {before, after[, point][, file]} pairing "
        "Prometheus scrapes with load points. A value that contradicts the file is an error.")
    parser.add_argument("files", nargs="+", metavar="FILE", help="load-test result files")
    parser.add_argument("-o", "--output", required=True, metavar="DATA.csv",
                        help="tidy rows to write (.csv or .parquet)")
    design = parser.add_argument_group("design values the files do not hold")
    design.add_argument("--verifier", help="verifier (served) model name")
    design.add_argument("--drafter", help="drafter name ('' = dense)")
    design.add_argument("--k", metavar="K", help="draft length (0 = dense)")
    design.add_argument("--alpha", metavar="A", help="per-token acceptance (when forced)")
    design.add_argument("--prefill", metavar="N", help="prompt tokens per request")
    design.add_argument("--decode", metavar="N", help="output tokens per request")
    design.add_argument("--gpu", help="GPU name")
    design.add_argument("--engine", help="serving engine (e.g. vllm)")
    design.add_argument("--engine-version", help="serving engine version")
    design.add_argument("--method", help="drafting method (eagle3, draft_model, ngram, ...)")
    design.add_argument("--max-num-seqs", metavar="N",
                        help="the engine's max_num_seqs (requests its batch holds)")
    design.add_argument("--kv-cache-tokens", metavar="N",
                        help="the engine's KV cache in tokens (vLLM's start-up log: 'GPU KV "
                             "cache size: N tokens')")
    design.add_argument("--max-num-batched-tokens", metavar="N",
                        help="the engine's max_num_batched_tokens (tokens per step)")
    design.add_argument("--server-log", metavar="LOG",
                        help="the vLLM server's start-up log: its KV cache size ('GPU KV "
                             "cache size: N tokens'), max_num_seqs and "
                             "max_num_batched_tokens, for every FILE")
    design.add_argument("--sidecar", metavar="PATH",
                        help="a sidecar (TOML or JSON) for every FILE")
    design.add_argument("--metrics", nargs=2, action="append", metavar=("BEFORE", "AFTER"),
                        help="Prometheus scrapes taken before and after a load point; repeat "
                             "once per load point of all FILEs, in order")
    parser.add_argument("--quiet", action="store_true", help="no summary line")
    parser.add_argument("--json", action="store_true", help="print one JSON summary on stdout")


def _flags(args) -> dict:
    flags = {}
    for name in ("verifier", "drafter", "gpu", "engine", "engine_version", "method"):
        flags[name] = getattr(args, name, None)
    for name, (option, kind) in _NUMERIC_FLAGS.items():
        text = getattr(args, name, None)
        if text is None:
            continue
        try:
            value = kind(str(text).strip())
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            raise BadInput(f"expected {what}, got {text!r}", option=option) from None
        flags[{"prefill": "prefill_tokens", "decode": "decode_tokens"}.get(name, name)] = value
    return flags


def _check_output(path: str, inputs: list[str]) -> None:
    out = Path(path)
    if out.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise BadInput("output must end in .csv or .parquet", file=path)
    if str(out.parent) and not out.parent.is_dir():
        raise BadInput("output folder does not exist", file=path)
    if out.exists() and any(out.resolve() == Path(p).resolve() for p in inputs
                            if Path(p).exists()):
        raise BadInput("output would overwrite an input file", file=path)


def run(args: argparse.Namespace) -> int:
    """Run ``bayesspec ingest``; returns the exit status (0)."""
    from bayesspec.ingest.core import ingest_files

    _check_output(args.output, args.files)
    flags = _flags(args)
    if getattr(args, "server_log", None):
        from bayesspec.ingest.server_log import engine_limits_from_log

        for name, value in engine_limits_from_log(args.server_log).items():
            given = flags.get(name)
            if given is not None and int(given) != value:
                raise BadInput(f"{args.server_log} says {name} {value}, the flag says "
                               f"{given}", option="--" + name.replace("_", "-"))
            flags[name] = value
    result = ingest_files(args.files, flags=flags, sidecar=args.sidecar,
                          metrics=[tuple(pair) for pair in args.metrics or []])
    rows = result.rows
    write_table(args.output, rows)
    saturated = int(rows["saturated"].sum()) if "saturated" in rows.columns else 0
    reconstructed = int(rows["latency_reconstructed"].sum()) \
        if "latency_reconstructed" in rows.columns else 0
    from bayesspec.data import GROUP_COLUMNS

    groups = int(rows[list(GROUP_COLUMNS)].astype(str).drop_duplicates().shape[0])
    if getattr(args, "json", False):
        document = {"output": str(args.output), "rows": int(len(rows)), "groups": groups,
                    "saturated_rows": saturated, "latency_reconstructed_rows": reconstructed,
                    "columns": [str(c) for c in rows.columns], "files": result.files}
        sys.stdout.write(json.dumps(document) + "\n")
    elif not args.quiet:
        kinds = ", ".join(f"{Path(f['file']).name} ({f['kind']}, {f['rows']})"
                          for f in result.files)
        print(f"wrote {len(rows)} rows in {groups} group{'s' if groups != 1 else ''} to "
              f"{args.output} from {kinds}")
        if reconstructed:
            print(f"note: {reconstructed} rows have latency reconstructed from TTFT and TPOT "
                  f"(no e2el in the file)", file=sys.stderr)
    return 0
