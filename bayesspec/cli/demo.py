"""``bayesspec demo``: the main job end to end on the bundled dataset."""

from __future__ import annotations


def register(verbs) -> None:
    parser = verbs.add_parser("demo", help="the main job end to end on the bundled dataset")
    parser.add_argument("--out", default="demo-out", help="output folder (default demo-out)")
    parser.add_argument("--quick", action="store_true", help="fewer draws and one page of group figures (a smoke run)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(handler=run)


def run(args) -> int:
    from bayesspec.cli.demo_job import run_demo

    return run_demo(out=args.out, quick=args.quick, as_json=args.json, seed=args.seed)
