"""Command line: ``bayesspec VERB ...`` (CONTRACT.md, "Command line").

Conventions every verb follows: ``--json`` prints one JSON document on stdout and nothing
else there (progress and warnings go to stderr); bad input exits 2 with one line on
stderr; files are written atomically; ``--strict`` (on verbs that answer from a
posterior) exits 3 when that posterior did not converge.

Every verb lives in a module of this package with ``register(verbs)``: it adds its
parser and sets its handler. Nothing outside this package imports it.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from bayesspec.errors import BadInput, ConvergenceWarning
from bayesspec.cli.common import parse_list  # noqa: F401  (part of the package's interface)

PROG = "bayesspec"
# The verb modules, in the order of `bayesspec --help`.
VERB_MODULES = ("demo", "fitting", "options", "checking", "deciding", "acceptance", "comparing",
                "reporting", "sbc", "simulate", "ingest", "serve", "planning", "tuning")

# Library arguments whose flag is not "--" + the name with dashes.
ARGUMENT_FLAGS = {"verifiers": "--leave-out-model", "fits": "FIT", "rates": "--acceptance-rates",
                  "targets": "--target", "warmup_s": "--warmup-s", "n_requests": "--requests",
                  "prefill_tokens": "--prefill", "decode_tokens": "--decode"}


def flag_of(argument: str) -> str:
    """The command-line flag that sets a library argument (for error messages)."""
    return ARGUMENT_FLAGS.get(argument, "--" + argument.replace("_", "-"))


class _VersionAction(argparse.Action):
    """``--version``: looks the version up only when asked (importlib.metadata is slow to
    import, and every verb builds this parser)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="show the program's version and exit"):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from bayesspec import __version__

        print(f"{parser.prog} {__version__}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    from importlib import import_module

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Bayesian latency laws for speculative decoding: fit load-test sweeps, "
                    "get speedup, crossover RPS and best draft length with credible intervals.")
    parser.add_argument("--version", action=_VersionAction)
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    for name in VERB_MODULES:
        import_module(f".{name}", __package__).register(verbs)
    return parser


def verbs() -> list[str]:
    """Every verb of the command line (for help and documentation tests)."""
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(action.choices)


# Verbs that answer from a saved fit: numpy over its draws, nothing more.
ANSWERING_VERBS = frozenset({"predict", "speedup", "crossover", "kstar", "slo", "summary"})


def _dask_hidden() -> None:
    """Show dask as not installed for the rest of this process. xarray imports dask (and
    dask.array imports scipy.fftpack) on its first indexing whenever dask is installed:
    a third of an answering verb's time where the test extras are installed, for numpy
    arrays that never need it. Only for this process's own command line: a caller of
    :func:`main` inside a larger program keeps its dask."""
    if "dask" not in sys.modules:
        sys.modules["dask"] = None  # importlib.util.find_spec then says: not installed


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if argv is None and args.verb in ANSWERING_VERBS:
        _dask_hidden()
    try:
        with warnings.catch_warnings():
            # Library chatter would break the one-line error and clean stdout contracts.
            warnings.filterwarnings("ignore", category=FutureWarning)
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            # Every verb says the convergence verdict itself, once, with its advice.
            warnings.filterwarnings("ignore", category=ConvergenceWarning)
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
