"""``bayesspec serve``: the simulator as a live OpenAI-compatible server on 127.0.0.1.

The main command line registers this verb with :func:`add_arguments` and :func:`run`.
Bad options raise :class:`bayesspec.errors.BadInput` (one line, exit 2). The server runs
until SIGINT/SIGTERM or ``--max-runtime``; on the way out it prints how far real step
times drifted from simulated ones and, with ``--stats``, writes them as JSON (atomically).
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time
from pathlib import Path

from bayesspec.errors import BadInput
from bayesspec.outputs import write_text_atomic
from bayesspec.cli.common import add_catalog, catalog_of

__all__ = ["register", "add_arguments", "run", "build_setup"]

#: Below this (scaled) batch-1 step time, Python's own per-step work on a small machine
#: is a noticeable share of each step and real step times drift from simulated ones.
MIN_STEP_S = 0.010


def register(verbs) -> None:
    parser = verbs.add_parser("serve", help="OpenAI-compatible HTTP server backed by the "
                                            "simulator in wall-clock time")
    add_arguments(parser)
    parser.set_defaults(handler=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bayesspec serve``."""
    parser.description = (
        "An OpenAI-compatible HTTP server on 127.0.0.1 (/v1/completions, "
        "/v1/chat/completions, streaming or not, /v1/models, /health, /metrics) whose "
        "engine is the serving simulator running in wall-clock time: continuous batching, "
        "chunked prefill, KV-cache limits, speculative decoding at a forced acceptance, "
        "MoE step costs. Latency grows with load because requests really queue.")
    parser.epilog = ("Example: bayesspec serve --verifier Llama-3.1-8B --gpu H100 --k 3 "
                     "--alpha 0.8 --time-scale 4 --port 8000")
    what = parser.add_argument_group("configuration (as for bayesspec simulate)")
    what.add_argument("--verifier", required=True, help="verifier name from the catalog")
    what.add_argument("--gpu", default="H100", help="GPU name from the catalog (default H100)")
    what.add_argument("--drafter", default=None,
                      help="drafter name (default with --k > 0: the verifier's EAGLE-3 head)")
    what.add_argument("--k", type=int, default=0, help="draft length; 0 = dense (default)")
    what.add_argument("--alpha", type=float, default=None,
                      help="forced per-token acceptance probability (i.i.d.)")
    what.add_argument("--acceptance-rates", default=None, metavar="R1,..,Rk",
                      help="forced unconditional per-position acceptance rates")
    from bayesspec.cli.simulate import add_token_persistence

    add_token_persistence(what)
    what.add_argument("--max-num-seqs", type=int, default=1024)
    what.add_argument("--max-num-batched-tokens", type=int, default=8192)
    what.add_argument("--kv-capacity", type=int, default=None,
                      help="KV-cache tokens (default: from GPU memory and model sizes)")
    what.add_argument("--step-jitter", type=float, default=0.02,
                      help="log-normal spread of step times (default 0.02, as simulate)")
    add_catalog(what)
    live = parser.add_argument_group("live server")
    live.add_argument("--port", type=int, default=8000,
                      help="TCP port on 127.0.0.1 (0: any free port; default 8000)")
    live.add_argument("--port-file", default=None, metavar="PATH",
                      help="write the port here once listening (for scripts with --port 0)")
    live.add_argument("--model", default=None,
                      help="served model name (default: the verifier's catalog name)")
    live.add_argument("--time-scale", type=float, default=1.0,
                      help="multiply every simulated step time (default 1); raise it until "
                           "a step lasts tens of milliseconds")
    live.add_argument("--prompt-tokens", type=int, default=None,
                      help="count every prompt as this many tokens (synthetic load tests); "
                           "default: from the text, --bytes-per-token")
    live.add_argument("--bytes-per-token", type=float, default=4.0,
                      help="prompt bytes per token when counting text (default 4)")
    live.add_argument("--default-max-tokens", type=int, default=16,
                      help="output tokens when a request gives no max_tokens (default 16)")
    live.add_argument("--seed", type=int, default=0, help="acceptance and jitter draws")
    live.add_argument("--max-runtime", type=float, default=None, metavar="SECONDS",
                      help="exit after this long (a bound for unattended runs)")
    live.add_argument("--stats", default=None, metavar="PATH",
                      help="write step-time drift statistics as JSON on exit")
    live.add_argument("--quiet", action="store_true", help="no start-up line on stderr")


def build_setup(args):
    """The simulator :class:`~bayesspec.simulate.Setup` the options describe."""
    from bayesspec.simulate.sweep import setup
    from bayesspec.cli.simulate import acceptance_rates_option, token_persistence_option

    rates = acceptance_rates_option(args)
    persistence = token_persistence_option(args)
    k = args.k if args.k else (len(rates) if rates else 0)
    if persistence is not None and not k:
        raise BadInput("the token process drafts k tokens a cycle: give --k",
                       option="--token-persistence")
    return setup(args.verifier, args.gpu, drafter=args.drafter, k=k, alpha=args.alpha,
                 rates=rates, persistence=persistence, catalog=catalog_of(args),
                 max_num_batched_tokens=args.max_num_batched_tokens,
                 max_num_seqs=args.max_num_seqs, kv_capacity=args.kv_capacity,
                 step_jitter=args.step_jitter)


def _check(args) -> None:
    if not (args.time_scale > 0 and math.isfinite(args.time_scale)):
        raise BadInput(f"must be a positive number, got {args.time_scale}",
                       option="--time-scale")
    if not 0 <= args.port <= 65535:
        raise BadInput(f"must be in 0..65535, got {args.port}", option="--port")
    if args.prompt_tokens is not None and args.prompt_tokens < 1:
        raise BadInput("must be at least 1", option="--prompt-tokens")
    if not (args.bytes_per_token > 0 and math.isfinite(args.bytes_per_token)):
        raise BadInput("must be a positive number", option="--bytes-per-token")
    if args.default_max_tokens < 1:
        raise BadInput("must be at least 1", option="--default-max-tokens")
    if args.max_runtime is not None and not args.max_runtime > 0:
        raise BadInput("must be positive", option="--max-runtime")
    for name in ("port_file", "stats"):
        value = getattr(args, name)
        if value is not None and str(Path(value).parent) and not Path(value).parent.is_dir():
            raise BadInput("folder does not exist", file=value)


def batch1_step_s(s) -> float:
    """Simulated time of one decode step of a lone request at the mid context."""
    return float(s.step_model.decode_step_time(1, 512, s.spec.k))


def run(args: argparse.Namespace) -> int:
    """Run ``bayesspec serve`` until a signal or ``--max-runtime``; returns 0."""
    import asyncio  # here, not at the top: every other verb would load it for nothing

    _check(args)
    s = build_setup(args)
    from bayesspec.serve.app import SimulatedServer

    server = SimulatedServer(s, model_name=args.model, port=args.port,
                             time_scale=args.time_scale, seed=args.seed,
                             fixed_prompt_tokens=args.prompt_tokens,
                             bytes_per_token=args.bytes_per_token,
                             default_max_tokens=args.default_max_tokens)
    step = batch1_step_s(s) * args.time_scale
    started = time.monotonic()

    async def main() -> None:
        await server.start()
        if args.port_file:
            write_text_atomic(args.port_file, f"{server.port}\n")
        if not args.quiet:
            spec = f" k={s.spec.k} alpha={s.spec.label():g}" if s.spec.k else " dense"
            if s.spec.persistence is not None:
                spec = (f" k={s.spec.k} token persistence "
                        f"{s.spec.persistence[0]:g},{s.spec.persistence[1]:g}")
            print(f"bayesspec serve: {server.model_name} ({s.step_model.name}{spec}, "
                  f"time scale {args.time_scale:g}, batch-1 step {step * 1e3:.1f} ms) on "
                  f"http://127.0.0.1:{server.port}", file=sys.stderr, flush=True)
            if step < MIN_STEP_S:
                print(f"warning: a batch-1 step lasts {step * 1e3:.1f} ms; Python overhead "
                      f"will distort step times: raise --time-scale (to about "
                      f"{math.ceil(0.02 / max(step / args.time_scale, 1e-9)):g})",
                      file=sys.stderr, flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await asyncio.wait_for(stop.wait(), args.max_runtime)
        except asyncio.TimeoutError:
            print("bayesspec serve: --max-runtime reached", file=sys.stderr, flush=True)
        await server.stop()

    asyncio.run(main())
    stats = server.engine.stats.as_dict()
    stats.update({"wall_s": time.monotonic() - started, "time_scale": args.time_scale,
                  "batch1_step_ms": step * 1e3, "model": server.model_name,
                  "step_model": s.step_model.name, "k": s.spec.k,
                  "alpha": s.spec.label() if s.spec.k and s.spec.persistence is None
                  else None, "token_persistence": s.spec.persistence})
    if args.stats:
        write_text_atomic(args.stats, json.dumps(stats, indent=1) + "\n")
    if not args.quiet:
        print(f"bayesspec serve: {stats['steps']} steps, simulated {stats['simulated_step_s_total']:.1f} s, "
              f"real {stats['real_step_s_total']:.1f} s, drift {100 * stats['drift']:+.2f}%, "
              f"mean |step error| {100 * stats['mean_abs_step_error_rel']:.1f}%, "
              f"lateness p99 {stats['lateness_ms_p99'] or 0:.1f} ms, "
              f"clock resets {stats['clock_resets']}", file=sys.stderr, flush=True)
    return 0
