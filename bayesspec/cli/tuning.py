"""``bayesspec tune``: the closed loop against live endpoints (one per configuration, or a
launch template), resumable from its points file."""

from __future__ import annotations

import numpy as np

from bayesspec.errors import BadInput
from bayesspec.outputs import emit_json, log
from bayesspec.cli.common import parse_list, rates


def register(verbs) -> None:
    tune = verbs.add_parser(
        "tune", help="closed loop: measure the planned load points on live endpoints, refit, "
                     "plan again, until the decision is settled or the budget is spent")
    tune.add_argument("--endpoint", action="append", default=[], metavar="k=K=URL",
                      help="a live OpenAI-compatible server of draft length K (0: dense), "
                           "e.g. --endpoint k=0=http://127.0.0.1:8000 (repeatable)")
    tune.add_argument("--launch", metavar="TEMPLATE",
                      help="instead of --endpoint: a command that starts the server, with "
                           "{k}, {port} (and {alpha}) filled in, restarted for each k of --ks")
    tune.add_argument("--port", type=int, default=8000, help="port for --launch (default 8000)")
    tune.add_argument("-o", "--points", required=True, metavar="POINTS.csv",
                      help="tidy file every load point is appended to as it lands; an "
                           "existing one is resumed")
    tune.add_argument("--fit-out", metavar="FIT.nc", help="save the last fit here")
    tune.add_argument("--question", default="kstar", choices=("kstar", "crossover", "ceiling"),
                      help="the decision to settle (default kstar)")
    tune.add_argument("--alpha", type=float,
                      help="the servers' acceptance rate, when forced or known (a label of "
                           "the SD rows)")
    tune.add_argument("--k", type=int, help="crossover: the SD draft length")
    tune.add_argument("--ks", help="with --launch: LIST of draft lengths to compare")
    tune.add_argument("--rps", help="kstar: LIST of rates at which to choose k")
    tune.add_argument("--budget-minutes", type=float, default=30.0,
                      help="load-test minutes to spend at most (default 30)")
    tune.add_argument("--tolerance", type=float, default=0.05,
                      help="settled when every answer's P(wrong) <= this (default 0.05)")
    tune.add_argument("--within", type=float, default=None,
                      help="what counts as right (see `plan --help`)")
    tune.add_argument("--requests", default="100,300,1000",
                      help="LIST of request counts per planned point (default 100,300,1000)")
    tune.add_argument("--seed-requests", type=int, default=100,
                      help="requests per seed point (default 100)")
    tune.add_argument("--burst-requests", type=int, default=200,
                      help="requests of the burst that finds each ceiling (default 200)")
    tune.add_argument("--warmup-s", type=float, default=5.0,
                      help="seconds each point costs besides its requests (default 5)")
    tune.add_argument("--prompt-tokens", type=int, default=128)
    tune.add_argument("--output-tokens", type=int, default=64)
    tune.add_argument("--verifier", default="model", help="verifier name for the rows")
    tune.add_argument("--drafter", default="drafter", help="drafter name for the SD rows")
    tune.add_argument("--served-model", default=None, help="model name sent in requests")
    tune.add_argument("--request-timeout", type=float, default=60.0,
                      help="seconds one request may take (default 60)")
    tune.add_argument("--driver", choices=("auto", "builtin", "guidellm"), default="auto",
                      help="load generator: GuideLLM when importable (auto), or the built-in "
                           "asyncio client")
    tune.add_argument("--draws", type=int, default=500, help="draws per chain of each refit")
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--max-points", type=int, default=200,
                      help="planned points at most (default 200)")
    tune.add_argument("--quiet", action="store_true", help="no progress on stderr")
    tune.add_argument("--json", action="store_true",
                      help="print one JSON document on stdout and nothing else there")
    tune.set_defaults(handler=run_tune)


def _settings(args):
    from bayesspec.loadtest.tune import TuneSettings

    for name, low in (("budget_minutes", 0.0), ("request_timeout", 0.0)):
        if not getattr(args, name) > low:
            raise BadInput(f"must be > {low:g}", option="--" + name.replace("_", "-"))
    for name in ("seed_requests", "burst_requests", "prompt_tokens", "output_tokens",
                 "draws"):
        if getattr(args, name) < 2:
            raise BadInput("must be >= 2", option="--" + name.replace("_", "-"))
    if args.alpha is not None and not 0 <= args.alpha <= 1:
        raise BadInput(f"must be within [0, 1], got {args.alpha:g}", option="--alpha")
    if not 0 < args.tolerance < 1:
        raise BadInput(f"must be within (0, 1), got {args.tolerance}", option="--tolerance")
    requests = parse_list(args.requests, option="--requests")
    if np.any(requests < 2) or np.any(requests != np.round(requests)):
        raise BadInput("request counts must be integers >= 2", option="--requests")
    if args.question == "kstar" and args.rps is None:
        raise BadInput("k* needs the rates to choose at", option="--rps")
    if args.question == "crossover" and args.k is None:
        raise BadInput("crossover needs the SD draft length --k", option="--k")
    return TuneSettings(
        question=args.question, alpha=args.alpha, k=args.k,
        rps=tuple(rates(args.rps, positive=True)) if args.rps else (),
        within=args.within, tolerance=args.tolerance, budget_minutes=args.budget_minutes,
        requests=tuple(int(v) for v in requests), seed_requests=args.seed_requests,
        burst_requests=args.burst_requests, warmup_s=args.warmup_s,
        prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens,
        verifier=args.verifier, drafter=args.drafter, model_name=args.served_model,
        timeout_s=args.request_timeout, draws=args.draws, seed=args.seed,
        max_points=args.max_points)


def _driver(choice: str):
    from bayesspec.loadtest.loadgen import run_builtin

    if choice == "builtin":
        return run_builtin
    from bayesspec.loadtest.planning import guidellm_version

    version = guidellm_version()
    if version is None:
        if choice == "guidellm":
            raise BadInput("GuideLLM is not importable here (pip install guidellm), or use "
                           "--driver builtin", option="--driver")
        return run_builtin
    import tempfile

    from bayesspec.loadtest.loadgen import run_guidellm

    folder = tempfile.mkdtemp(prefix="bayesspec-tune-")
    return lambda endpoint, spec: run_guidellm(endpoint, spec, folder, version)


def run_tune(args) -> int:
    from bayesspec.loadtest.loadgen import Unreachable
    from bayesspec.loadtest.tune import Launcher, endpoints_from_options, tune

    settings = _settings(args)
    if bool(args.endpoint) == bool(args.launch):
        raise BadInput("give --endpoint k=K=URL for each configuration, or --launch "
                       "TEMPLATE with --ks", option="--endpoint")
    launcher = None
    if args.endpoint:
        endpoints = endpoints_from_options(args.endpoint, args.alpha)
        ks = sorted(endpoints)

        def endpoint_of(k):
            return endpoints[k]
    else:
        if args.ks is None:
            raise BadInput("--launch needs the draft lengths to compare", option="--ks")
        values = parse_list(args.ks, option="--ks")
        if np.any(values < 0) or np.any(values != np.round(values)):
            raise BadInput("draft lengths must be integers >= 0", option="--ks")
        ks = sorted({int(v) for v in values})
        if "{k}" not in args.launch:
            raise BadInput("the template must contain {k}", option="--launch")
        launcher = Launcher(args.launch, args.port, alpha=args.alpha)
        endpoint_of = launcher.endpoint
    if len(ks) < 2 and args.question != "ceiling":
        raise BadInput("compare at least two configurations (e.g. k=0 and k=3)",
                       option="--endpoint")
    if args.question == "crossover" and (0 not in ks or args.k not in ks):
        raise BadInput(f"crossover needs endpoints for k = 0 and k = {args.k}",
                       option="--endpoint")
    driver = _driver(args.driver)
    try:
        result = tune(ks, args.points, settings, endpoint_of=endpoint_of, driver=driver,
                      progress=not args.quiet, fit_path=args.fit_out)
    except Unreachable as error:
        raise BadInput(f"{error}; the {_count(args.points)} points measured so far are saved "
                       f"in {args.points} (rerun to resume)", option="--endpoint") from None
    finally:
        if launcher is not None:
            launcher.stop()
    document = {"settled": result.settled, "reason": result.reason,
                "question": args.question, "points": len(result.rows),
                "points_run": result.points_run,
                "load_minutes": float(result.rows["load_seconds"].fillna(0).sum() / 60.0),
                "answers": result.plan.get("answers", []),
                "expected_loss": result.plan.get("expected_loss"),
                "points_file": args.points, "fit": args.fit_out}
    if args.json:
        emit_json(document)
        return 0
    verdict = "SETTLED" if result.settled else f"not settled ({result.reason})"
    print(f"{verdict} after {document['points']} load points, "
          f"{document['load_minutes']:.2f} load-test minutes ({document['points_run']} this run)")
    for answer in document["answers"]:
        print(f"  {answer['answer']}: {answer['decision']} (P right {answer['p_right']:.3f})")
    print(f"points: {args.points}" + (f"; fit: {args.fit_out}" if args.fit_out else ""))
    return 0


def _count(path) -> int:
    from pathlib import Path

    import pandas as pd

    try:
        return len(pd.read_csv(path)) if Path(path).exists() else 0
    except (OSError, ValueError):
        return 0


__all__ = ["register", "run_tune", "log"]
