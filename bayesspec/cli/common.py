"""What every verb of the command line shares: option groups, value parsers, reading
data and fits, number formatting, and the convergence verdict printed with every answer."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

from bayesspec.errors import BadInput
from bayesspec.outputs import log

MAX_LIST_VALUES = 100_000


# --------------------------------------------------------------------------- values

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
            if count > MAX_LIST_VALUES:
                raise BadInput(f"too many values (more than {MAX_LIST_VALUES})", option=option)
            values = start + step * np.arange(count)
        else:
            values = np.array([float(p) for p in text.split(",") if p.strip()])
    except ValueError:
        raise BadInput(f"expected comma-separated numbers or start:stop:step, got {text!r}",
                       option=option) from None
    if values.size == 0 or not np.all(np.isfinite(values)):
        raise BadInput(f"expected finite numbers, got {text!r}", option=option)
    return np.round(values, 12)


def rates(text: str, *, option: str = "--rps", positive: bool = False) -> np.ndarray:
    """Request rates: >= 0 (decisions may start at zero load), > 0 with ``positive``."""
    values = parse_list(text, option=option)
    if positive and np.any(values <= 0):
        raise BadInput(f"rates must be positive numbers, got {text!r}", option=option)
    if np.any(values < 0):
        raise BadInput("rates must be >= 0", option=option)
    return values


def check_alpha_k(alpha: float, k: int) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise BadInput(f"must be within [0, 1], got {alpha:g}", option="--alpha")
    if k < 1:
        raise BadInput(f"must be an integer >= 1, got {k}", option="--k")


def check_prob(args) -> None:
    if hasattr(args, "prob") and not 0.0 < args.prob < 1.0:
        raise BadInput(f"must be within (0, 1), got {args.prob}", option="--prob")


def check_output_path(path: str) -> None:
    folder = Path(path).parent
    if str(folder) and not folder.is_dir():
        raise BadInput("output folder does not exist", file=path)


# --------------------------------------------------------------------------- options

def add_common(parser: argparse.ArgumentParser, *, prob: bool = True) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document on stdout and nothing else there")
    if prob:
        parser.add_argument("--prob", type=float, default=0.9,
                            help="probability of the equal-tailed intervals (default 0.9)")


def add_catalog(parser: argparse.ArgumentParser, *, hidden: bool = False) -> None:
    parser.add_argument("--catalog", action="append", default=None, metavar="DIR",
                        help=argparse.SUPPRESS if hidden else
                        "extra folder of model/GPU cards (repeatable)")


def add_group_options(parser: argparse.ArgumentParser, *, design: bool = True) -> None:
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


def group_criteria(args) -> dict:
    return {"verifier": args.verifier, "drafter": args.drafter, "prefill": args.prefill,
            "decode": args.decode, "k": getattr(args, "group_k", None),
            "alpha": getattr(args, "group_alpha", None), "gpu": args.gpu}


def add_sampler_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("sampler (defaults: the model's, measured; see "
                                      "`bayesspec fit --help`)")
    group.add_argument("--draws", type=int, default=None,
                       help="draws per chain (default: the model's, 1000; hierarchical 2000)")
    group.add_argument("--tune", type=int, default=None,
                       help="tuning steps per chain (default: the model's, 1000; "
                            "hierarchical 2000)")
    group.add_argument("--chains", type=int, default=None, help="chains (default 4)")
    group.add_argument("--seed", type=int, default=None, help="random seed")
    group.add_argument("--sampler", choices=("nutpie", "pymc", "numpyro", "blackjax"),
                       default="nutpie",
                       help="NUTS implementation (default nutpie); numpyro and blackjax run "
                            "on JAX (a GPU when there is one) and need the optional extra "
                            "bayesspec[gpu]")
    group.add_argument("--target-accept", type=float, default=None,
                       help="NUTS target acceptance (default: the model's, 0.9 to 0.98; "
                            "the hierarchical model samples again at 0.99 when 0.9 "
                            "diverges); raise it if divergences appear. A target given "
                            "here is used as given, without that second try")
    add_method_options(group)
    group.add_argument("--strict", action="store_true",
                       help="exit with status 3 when the posterior did not converge "
                            "(for scripts and CI)")
    group.add_argument("--quiet", action="store_true", help="no progress output on stderr")


METHOD_CHOICES = ("nuts", "advi", "pathfinder")


def add_method_options(group) -> None:
    """``--method``, ``--approx-steps``, ``--no-fallback`` (fit, check, acceptance, sbc)."""
    group.add_argument("--method", choices=METHOD_CHOICES, default="nuts",
                       help="nuts (default: sample), or advi: mean-field ADVI checked by "
                            "Pareto-smoothed importance resampling; its Pareto k is reported, "
                            "and above 0.7 the fit falls back to NUTS (pathfinder needs "
                            "pymc-extras, which requires pymc < 6.4: not offered)")
    group.add_argument("--approx-steps", type=int, default=None,
                       help="optimisation steps of the approximation (default 2000)")
    group.add_argument("--no-fallback", action="store_true",
                       help="keep the approximation even when its Pareto k is above 0.7 "
                            "(the verdict is then 'not converged')")


def method_settings(args) -> dict:
    """The approximation fields of SamplerSettings from :func:`add_method_options`."""
    if args.method == "pathfinder":
        raise BadInput("pathfinder needs pymc-extras, and every pymc-extras release "
                       "requires pymc < 6.4 (bayesspec needs >= 6.4); use --method advi",
                       option="--method")
    if args.approx_steps is not None and args.approx_steps < 1:
        raise BadInput(f"must be >= 1, got {args.approx_steps}", option="--approx-steps")
    return {"method": args.method, "steps": args.approx_steps,
            "fallback": not args.no_fallback}


def sampler_settings(args):
    """SamplerSettings from the sampler options; what is left unset is resolved later,
    in one place, from the model (:func:`bayesspec.inference.settings_for`)."""
    from bayesspec.inference import SamplerSettings

    for name, low in (("draws", 2), ("tune", 0), ("chains", 1)):
        value = getattr(args, name)
        if value is not None and value < low:
            raise BadInput(f"must be >= {low}, got {value}", option=f"--{name}")
    if args.target_accept is not None and not 0.5 <= args.target_accept < 1.0:
        raise BadInput(f"must be within [0.5, 1), got {args.target_accept}",
                       option="--target-accept")
    if args.sampler in ("numpyro", "blackjax"):
        from bayesspec.inference import jax_missing

        reason = jax_missing(args.sampler)
        if reason:
            raise BadInput(reason.removeprefix(f"--sampler {args.sampler} "),
                           option="--sampler")
    return SamplerSettings(draws=args.draws, tune=args.tune, chains=args.chains,
                           seed=args.seed, progress=not args.quiet, sampler=args.sampler,
                           target_accept=args.target_accept, **method_settings(args))


# --------------------------------------------------------------------------- inputs

def catalog_of(args):
    """The catalog with the user's extra folders (``--catalog``), or None (default)."""
    folders = getattr(args, "catalog", None)
    if not folders:
        return None
    from bayesspec.data.catalog import load_catalog

    return load_catalog(folders if isinstance(folders, (list, tuple)) else [folders])


def add_saturation_options(parser) -> None:
    """How points are set aside as saturated (read by :func:`read_data`)."""
    parser.add_argument("--max-rps", type=float, default=None,
                        help="treat points above this rate as saturated")
    parser.add_argument("--no-saturation-detection", action="store_true",
                        help="set aside only the points the file marks as saturated (not "
                             "those the numbers show: a plateau, or a jump far above the "
                             "law)")
    add_units(parser)


def add_units(parser) -> None:
    """``--units``: the file's rates or latencies are not per second / in seconds."""
    parser.add_argument("--units", default=None, metavar="rpm|ms|rpm,ms",
                        help="the data file's rates are requests per minute (rpm) and/or its "
                             "latencies milliseconds (ms): converted on reading (a file "
                             "whose numbers are impossible for its verifier and GPU in the "
                             "catalog is refused, naming the likely unit)")


def add_engine_limit_options(parser) -> None:
    """The engine's limits on what shares a batch, for files that do not record them
    (read by :func:`read_data`; vLLM's own names)."""
    limits = parser.add_argument_group(
        "engine limits (the concurrency cap: points past it are set aside and the law "
        "kinks at it; a file's own columns of these names take precedence)")
    limits.add_argument("--max-num-seqs", type=int, default=None, metavar="N",
                        help="vLLM's max_num_seqs: requests the batch holds")
    limits.add_argument("--kv-cache-tokens", type=int, default=None, metavar="N",
                        help="KV cache size in tokens (vLLM prints 'GPU KV cache size: N "
                             "tokens' at start-up)")
    limits.add_argument("--max-num-batched-tokens", type=int, default=None, metavar="N",
                        help="vLLM's max_num_batched_tokens: tokens a step processes (with "
                             "speculation each request's verification carries k + 1)")


def engine_limits_of(args) -> dict:
    return {column: getattr(args, column, None)
            for column in ("max_num_seqs", "kv_cache_tokens", "max_num_batched_tokens")
            if getattr(args, column, None) is not None}


def read_data(path: str, args):
    """A tidy table through :func:`bayesspec.data.read_tidy`, saying on stderr which rows
    were set aside as saturated and why."""
    from bayesspec.data import SaturationRule, describe_exclusions, read_tidy

    from bayesspec.data.units import UNITS, parse_units

    rule = SaturationRule(max_rps=getattr(args, "max_rps", None),
                          detect=not getattr(args, "no_saturation_detection", False))
    units = parse_units(getattr(args, "units", None))
    data = read_tidy(path, catalog=catalog_of(args), saturation=rule,
                     engine_limits=engine_limits_of(args), units=units)
    if units:
        log(f"converted on reading: {' and '.join(UNITS[u] for u in units)}, to requests "
            "per second and seconds")
    lines = describe_exclusions(data)
    if lines:
        log(f"warning: {len(lines)} of {len(data)} points set aside (not in the likelihood), "
            "each with why and what to do:")
        for line in lines[:20]:
            log(f"  {line}")
        if len(lines) > 20:
            log(f"  ... and {len(lines) - 20} more")
    return data


def load_fit(path: str):
    from bayesspec.bayes import load_fit as load

    return load(path)


# --------------------------------------------------------------------------- output

def fmt(u: dict, digits: int = 4, *, between=None) -> str:
    """'median [lo, hi]' of an uncertain number; 'not identified ...' when its interval
    is wider than ten times its median (or open), with ``between`` = (lo, hi) rates
    that would pin it down."""
    from bayesspec.uncertainty import identified

    if u is None or u.get("median") is None:
        return "n/a"
    if between is not None and not identified(u):
        lo, hi = between
        where = (f": measure between {g(lo, 3)} and {g(hi, 3)} RPS"
                 if lo is not None and hi is not None and hi > lo else "")
        return f"not identified{where}"
    return f"{g(u['median'], digits)} [{g(u['lo'], digits)}, {g(u['hi'], digits)}]"


def g(value, digits=4) -> str:
    if value is None:
        return "n/a"
    if math.isinf(value):
        return "inf"
    return f"{value:.{digits}g}"


def say_verdict(verdict: dict, *, what: str = "posterior") -> None:
    """The convergence verdict on stderr: a line when something needs saying."""
    if verdict["status"] == "converged":
        return
    prefix = "WARNING" if verdict["status"] == "not converged" else "note"
    log(f"{prefix}: {what}: {verdict['text']}")


def finish(document: dict, verdicts, args, *, what: str = "posterior",
           say: bool = True) -> dict:
    """Add the convergence verdict(s) of the fit(s) behind an answer to its document
    (``convergence``; ``warning`` when the answer is unreliable) and say them on
    stderr (unless ``say`` is False: the verb prints the verdict itself)."""
    verdicts = verdicts if isinstance(verdicts, list) else [verdicts]
    for verdict in verdicts if say else ():
        say_verdict(verdict, what=what)
    document["convergence"] = verdicts[0] if len(verdicts) == 1 else verdicts
    failed = [v["text"] for v in verdicts if v["status"] == "not converged"]
    if failed:
        document["warning"] = "; ".join(failed)
    return document


def strict_exit(args, verdicts) -> int:
    """Exit status: 3 with ``--strict`` when a posterior behind the answer did not
    converge, else 0."""
    verdicts = verdicts if isinstance(verdicts, list) else [verdicts]
    if getattr(args, "strict", False) and any(v["status"] == "not converged"
                                              for v in verdicts):
        log("bayesspec: --strict: exiting with status 3 (posterior did not converge)")
        return 3
    return 0


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


def add_parallel_options(parser) -> None:
    """--workers and --scheduler: independent refits (folds, simulations) in parallel."""
    group = parser.add_argument_group("parallel refits")
    group.add_argument("--workers", type=int, default=1, metavar="N",
                       help="sample the independent refits in N worker processes (default 1: "
                            "here; each worker compiles the model once)")
    group.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help="run them on a Dask cluster instead (tcp://host:8786; needs "
                            "pip install 'bayesspec[distributed]')")


def parallel_options(args) -> dict:
    from bayesspec.inference.parallel import check_workers

    check_workers(args.workers, args.scheduler)
    return {"workers": args.workers, "scheduler": args.scheduler}


def add_model_options(parser, example: str = "run_effect=shared") -> None:
    """The model's configuration: ``--option KEY=VALUE`` (repeatable) and the options
    spelt as flags of their own (``--cap-prior``, ``--decode-profile``: the declarations'
    ``flag`` in bayes.options, where ``--option`` refuses them)."""
    group = parser.add_argument_group(
        "model options (`bayesspec options --model M` lists every option of a model, with "
        "its tier, type, default and meaning)")
    group.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                       help="a model option (repeatable; a value is read as JSON when it "
                            f"parses, else as text), e.g. {example}")
    group.add_argument("--cap-prior", choices=("catalog", "wide"), default=None,
                       help="where the data state no engine limit, learn the concurrency "
                            "cap from where the curve bends: with the catalog's KV capacity "
                            "and vLLM's default max_num_seqs as its prior, or a wide one "
                            "(dense and tails; the sweep must reach the bend to pin it)")
    group.add_argument("--decode-profile", metavar="FILE", default=None,
                       help="the engine's decode-iteration time by batch size (columns "
                            "batch_size, decode_iteration_s, and setup columns such as "
                            "verifier, gpu, prefill_tokens): the groups it names follow "
                            "L = C1 + C2 N + the profile's cost at N requests in flight "
                            "(dense and tails)")


def model_options(args) -> dict:
    """``--option`` and the option flags as the model's configuration, refused (exit 2,
    one line naming the flag) when the model has no such option, takes no other value than
    its default, or the value is not of the option's type. Imports the models (PyMC): call
    it after the cheap checks."""
    import json

    from bayesspec.bayes import get_model_class
    from bayesspec.bayes.options import OPTIONS, flagged

    config = {}
    for item in args.option:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise BadInput(f"expected KEY=VALUE, got {item!r}", option="--option")
        option = OPTIONS.get(key)
        if option is not None and option.flag:
            raise BadInput(f"{key} is given as {option.flag}", option="--option")
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value
        config[key] = tuple(parsed) if isinstance(parsed, list) else parsed
    given = {}
    for option in flagged():
        value = getattr(args, option.flag.lstrip("-").replace("-", "_"), None)
        if value is not None:
            config[option.name] = given[option.name] = value
    if config.get("decode_profile"):
        from bayesspec.data.decode_profile import read_decode_profile

        read_decode_profile(config["decode_profile"])
    try:
        get_model_class(args.model)(config)
    except ValueError as error:
        only_flags = OPTIONS[next(iter(given))].flag if given and not args.option else None
        blamed = next((OPTIONS[name].flag for name in given if name in str(error)),
                      only_flags or "--option")
        raise BadInput(str(error), option=blamed) from None
    return config
