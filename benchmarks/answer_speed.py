#!/usr/bin/env python
"""Speed harness: what a user waits for in a new process, against baselines.

    python benchmarks/answer_speed.py verbs --repeat 5
    python benchmarks/answer_speed.py verbs --repeat 5 --workdir /tmp/walk --baseline-commit REV
    python benchmarks/answer_speed.py first-fit --repeat 2
    python benchmarks/answer_speed.py first-fit --repeat 3 --baseline-commit REV --json

``verbs``: the answering verbs' wall time on a saved fit. Makes the README walkthrough's
fits once (``simulate --grid examples/walkthrough.toml``, ``fit --model speculative --seed
1``; ``examples/slo.toml`` and ``--model tails`` for ``slo``), timing the first fit of a
new process with its compile; then runs each answering verb of the walkthrough as a user
does, a new ``python -m bayesspec`` process each time, ``--repeat`` times, round robin
(so load from other programs spreads over all of them). ``--workdir`` keeps (and reuses)
those fits. Baselines, timed in the same rounds: ``python -c pass`` (the interpreter) and
``python -c "import numpy"``; with ``--baseline-commit REV`` also the same verbs run by
the package as it was at REV (``git archive``, same fit files): the old path. Prints per
verb the median and minimum wall seconds, CPU seconds, and the ratios ``verb /
baseline`` (and ``old / new`` with a baseline commit). The target is every answering
verb in <= 1.5 s on an idle 2-core machine. ``--plot`` options are left out: drawing a
figure needs matplotlib by its nature.

The verbs run as an installed package does, from compiled bytecode: each command runs
once untimed first, with ``PYTHONPYCACHEPREFIX`` a folder of the workdir (so neither the
checkout nor the environment is written to), and ``PYTHONDONTWRITEBYTECODE`` dropped
where the calling environment sets it. ``--no-bytecode`` times them compiling every
module from source each run instead (about 0.2 s more for bayesspec's own modules).

``verbs --in-process``: each verb's own work without the interpreter's start and its
imports: in one process per verb (and per package), the verb runs once untimed (its
imports), then ``--repeat`` times; the CPU seconds (``time.process_time``) of those runs,
median and minimum, with ``old / new`` as above. CPU time is what a busy machine
disturbs least.

``first-fit``: how much of a new process's first fit the on-disk compile caches save.
Runs the walkthrough's fit (``bayesspec fit sweeps.csv --model speculative -o fit.nc
--seed 1``), each time in a new process, and reads the ``compiled in X s`` line it
prints:

- ``cold``: an empty PyTensor compile directory (``PYTENSOR_FLAGS=base_compiledir=...``),
  i.e. a fresh machine; once (it fills that directory);
- ``warm``: the same directory again, ``--repeat`` times: PyTensor's numba cache of the
  model's graph and the cached nutpie callbacks are on disk;
- with ``--baseline-commit REV``, ``warm @ REV``: the package as it was at REV, on the
  same warm directory.

Prints per kind the compile seconds, the fit's wall seconds and the process's CPU
seconds (medians of the warm runs).

Compare ratios within one run, not seconds across runs: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

VERBS = {
    "predict": ["predict", "fit.nc", "--rps", "2:20:2", "--k", "0"],
    "speedup": ["speedup", "fit.nc", "--alpha", "0.8", "--k", "3", "--rps", "0:20:2"],
    "crossover": ["crossover", "fit.nc", "--alpha", "0.8", "--k", "3"],
    "kstar": ["kstar", "fit.nc", "--alpha", "0.6:0.9:0.1", "--rps", "0:20:4"],
    "kstar --vllm": ["kstar", "fit.nc", "--alpha", "0.8", "--rps", "0.5:20:0.5", "--vllm"],
    "summary": ["summary", "fit.nc"],
    "slo": ["slo", "tails.nc", "--ttft-p99", "0.08", "--itl-p99", "0.015"],
}
BASELINES = {"python -c pass": ["-c", "pass"], "import numpy": ["-c", "import numpy"]}


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


#: How the timed verbs find their bytecode: "prefix" a folder of the workdir where it is
#: kept, or "source": compiled from source every run (``--no-bytecode``); neither set
#: (the fits): the calling environment's way.
BYTECODE: dict = {"prefix": None, "source": False}


def timed(command: list[str], cwd: Path, pythonpath: Path) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one run of ``command``: on a busy
    machine the CPU time is what the run would take on an idle one, near enough."""
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    if BYTECODE["prefix"] is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(BYTECODE["prefix"])
    elif BYTECODE["source"]:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 3):
        raise SystemExit(f"failed ({done.returncode}): {' '.join(command)}\n"
                         f"{done.stderr[-2000:]}")
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def bayesspec(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "bayesspec", *arguments]


def make_fits(folder: Path, with_slo: bool) -> dict:
    """The walkthrough's fit files (made once per workdir); the seconds each step took."""
    steps = [("simulate walkthrough", ["simulate", "--grid", str(ROOT / "examples" /
                                                                "walkthrough.toml"),
                                       "-o", "sweeps.csv"], "sweeps.csv"),
             ("first fit (speculative, incl. compile)",
              ["fit", "sweeps.csv", "--model", "speculative", "-o", "fit.nc", "--seed", "1"],
              "fit.nc")]
    if with_slo:
        steps += [("simulate slo", ["simulate", "--grid", str(ROOT / "examples" / "slo.toml"),
                                    "-o", "slo.csv"], "slo.csv"),
                  ("fit tails (incl. compile)",
                   ["fit", "slo.csv", "--model", "tails", "-o", "tails.nc", "--seed", "1"],
                   "tails.nc")]
    seconds = {}
    for label, arguments, output in steps:
        if (folder / output).exists():
            continue
        print(f"making {output}: bayesspec {' '.join(arguments)}", file=sys.stderr)
        seconds[label] = round(timed(bayesspec(*arguments), folder, ROOT)[0], 2)
    return seconds


def old_package(commit: str, into: Path) -> Path:
    """The package as it was at ``commit``, unpacked under ``into``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "bayesspec",
                              "models"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def timed_first_fit(folder: Path, pythonpath: Path, compiledir: Path, model: str) -> dict:
    """One fit in a new process on the compile directory ``compiledir``: its compile,
    wall and CPU seconds."""
    env = dict(os.environ, PYTHONPATH=str(pythonpath),
               PYTENSOR_FLAGS=f"base_compiledir={compiledir}")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "bayesspec", "fit", "sweeps.csv", "--model",
                           model, "-o", "fit.nc", "--seed", "1"], cwd=folder, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 3):
        raise SystemExit(f"fit failed ({done.returncode}):\n{done.stderr[-2000:]}")
    compiled = [float(m) for m in re.findall(r"compiled in ([\d.]+) s", done.stderr)]
    return {"compile_s": sum(compiled), "wall_s": wall,
            "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}


#: One verb run ``repeat`` times in this process after an untimed first run: the CPU
#: seconds of each (printed as JSON).
IN_PROCESS = """
import contextlib, io, json, sys, time
from bayesspec.cli import main
arguments, repeat = json.loads(sys.argv[1]), int(sys.argv[2])
def run():
    sys.argv = ["bayesspec", *arguments]
    with contextlib.redirect_stdout(io.StringIO()):
        main()
run()
seconds = []
for _ in range(repeat):
    started = time.process_time()
    run()
    seconds.append(time.process_time() - started)
print(json.dumps(seconds))
"""


def in_process(args, chosen: list[str], folder: Path) -> int:
    packages = {"new": ROOT}
    if args.baseline_commit:
        packages["old"] = old_package(args.baseline_commit,
                                      Path(tempfile.mkdtemp(prefix="old-")))
    load_before = load_average()
    rows = []
    for name in chosen:
        row = {"verb": name, "command": "bayesspec " + " ".join(VERBS[name])}
        for label, pythonpath in packages.items():
            done = subprocess.run([sys.executable, "-c", IN_PROCESS, json.dumps(VERBS[name]),
                                   str(args.repeat)], cwd=folder, capture_output=True,
                                  text=True, env=dict(os.environ, PYTHONPATH=str(pythonpath)))
            if done.returncode != 0:
                raise SystemExit(f"failed: {name} ({label})\n{done.stderr[-2000:]}")
            seconds = json.loads(done.stdout.strip().splitlines()[-1])
            row[f"{label}_cpu_median_s"] = round(statistics.median(seconds), 3)
            row[f"{label}_cpu_min_s"] = round(min(seconds), 3)
        if "old_cpu_median_s" in row:
            row["old_over_new"] = round(row["old_cpu_median_s"] / row["new_cpu_median_s"], 2)
        rows.append(row)
    document = {"repeat": args.repeat, "in_process": True, "load_average_before": load_before,
                "load_average_after": load_average(), "baseline_commit": args.baseline_commit,
                "verbs": rows, "workdir": str(folder)}
    if args.json:
        print(json.dumps(document, indent=2))
        return 0
    print(f"each verb's own CPU seconds after its imports, {args.repeat} runs in one process; "
          f"load average before {load_before}, after {document['load_average_after']}")
    header = f"  {'verb':<14} {'median s':>9} {'min s':>7}"
    if args.baseline_commit:
        header += f" {'old s':>7} {'old min':>8} {'old/new':>8}"
    print(header)
    for row in rows:
        line = f"  {row['verb']:<14} {row['new_cpu_median_s']:9.3f} {row['new_cpu_min_s']:7.3f}"
        if "old_over_new" in row:
            line += (f" {row['old_cpu_median_s']:7.3f} {row['old_cpu_min_s']:8.3f} "
                     f"{row['old_over_new']:8.2f}")
        print(line)
    return 0


def verbs(args, parser) -> int:
    chosen = [v.strip() for v in args.verbs.split(",") if v.strip()]
    unknown = sorted(set(chosen) - set(VERBS))
    if unknown:
        parser.error(f"unknown verbs: {', '.join(unknown)}")
    folder = Path(args.workdir or tempfile.mkdtemp(prefix="answer-speed-"))
    folder.mkdir(parents=True, exist_ok=True)
    load_before = load_average()
    made = make_fits(folder, with_slo="slo" in chosen)
    if args.in_process:
        return in_process(args, chosen, folder)

    commands = {name: (bayesspec(*VERBS[name]), ROOT) for name in chosen}
    commands.update({name: ([sys.executable, *arguments], ROOT)
                     for name, arguments in BASELINES.items()})
    if args.baseline_commit:
        old_root = old_package(args.baseline_commit, Path(tempfile.mkdtemp(prefix="old-")))
        commands.update({f"{name} @ {args.baseline_commit}": (bayesspec(*VERBS[name]), old_root)
                         for name in chosen})
    BYTECODE["source"] = args.no_bytecode
    if not args.no_bytecode:
        BYTECODE["prefix"] = folder / "pycache"
        for command, pythonpath in commands.values():   # compiles what it imports
            timed(command, folder, pythonpath)
    seconds = {name: [] for name in commands}
    cpu = {name: [] for name in commands}
    for round_number in range(args.repeat):
        for name, (command, pythonpath) in commands.items():
            wall, used = timed(command, folder, pythonpath)
            seconds[name].append(wall)
            cpu[name].append(used)
        print(f"round {round_number + 1}/{args.repeat} done", file=sys.stderr)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    median_cpu = {name: statistics.median(values) for name, values in cpu.items()}

    rows = []
    for name in chosen:
        row = {"verb": name, "command": "bayesspec " + " ".join(VERBS[name]),
               "median_s": round(median[name], 3), "min_s": round(min(seconds[name]), 3),
               "cpu_s": round(median_cpu[name], 3),
               "per_python": round(median[name] / median["python -c pass"], 2),
               "per_numpy_import": round(median[name] / median["import numpy"], 2)}
        old = f"{name} @ {args.baseline_commit}"
        if old in median:
            row["old_median_s"] = round(median[old], 3)
            row["old_cpu_s"] = round(median_cpu[old], 3)
            row["old_over_new"] = round(median[old] / median[name], 2)
        rows.append(row)
    document = {"repeat": args.repeat, "load_average_before": load_before,
                "load_average_after": load_average(), "fit_files_made_s": made,
                "baselines_median_s": {n: round(median[n], 3) for n in BASELINES},
                "baselines_cpu_s": {n: round(median_cpu[n], 3) for n in BASELINES},
                "baseline_commit": args.baseline_commit, "bytecode": not args.no_bytecode,
                "verbs": rows, "workdir": str(folder)}
    if args.json:
        print(json.dumps(document, indent=2))
        return 0
    for label, value in made.items():
        print(f"{label}: {value:.1f} s")
    print(f"load average before {load_before}, after {document['load_average_after']}; "
          f"median of {args.repeat} runs each, "
          + ("compiling from source each run" if args.no_bytecode else "from bytecode"))
    for name in BASELINES:
        print(f"  baseline {name:<24} {median[name]:6.2f} s wall, {median_cpu[name]:5.2f} s CPU")
    header = (f"  {'verb':<14} {'median s':>9} {'min s':>7} {'CPU s':>6} {'/python':>8} "
              f"{'/numpy':>7}")
    if args.baseline_commit:
        header += f" {'old s':>7} {'old CPU':>8} {'old/new':>8}"
    print(header)
    for row in rows:
        line = (f"  {row['verb']:<14} {row['median_s']:9.2f} {row['min_s']:7.2f} "
                f"{row['cpu_s']:6.2f} {row['per_python']:8.1f} {row['per_numpy_import']:7.1f}")
        if "old_median_s" in row:
            line += (f" {row['old_median_s']:7.2f} {row['old_cpu_s']:8.2f} "
                     f"{row['old_over_new']:8.2f}")
        print(line)
    return 0



def first_fit(args) -> int:
    folder = Path(tempfile.mkdtemp(prefix="compile-cache-"))
    compiledir = folder / "pytensor"
    subprocess.run([sys.executable, "-m", "bayesspec", "simulate", "--grid",
                    str(ROOT / "examples" / "walkthrough.toml"), "-o", "sweeps.csv"],
                   cwd=folder, env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True,
                   capture_output=True)
    load_before = load_average()
    runs = {"cold": [timed_first_fit(folder, ROOT, compiledir, args.model)]}
    kinds = {"warm": ROOT}
    if args.baseline_commit:
        kinds[f"warm @ {args.baseline_commit}"] = old_package(
            args.baseline_commit, Path(tempfile.mkdtemp(prefix="old-")))
    for kind in kinds:
        runs[kind] = []
    for round_number in range(args.repeat):  # round robin: shared load spreads over all
        for kind, pythonpath in kinds.items():
            runs[kind].append(timed_first_fit(folder, pythonpath, compiledir, args.model))
        print(f"round {round_number + 1}/{args.repeat} done", file=sys.stderr)
    summary = {kind: {key: round(statistics.median(r[key] for r in values), 2)
                      for key in ("compile_s", "wall_s", "cpu_s")}
               for kind, values in runs.items()}
    document = {"model": args.model, "repeat": args.repeat,
                "load_average_before": load_before, "load_average_after": load_average(),
                "median": summary, "runs": runs}
    if args.json:
        print(json.dumps(document, indent=2))
        return 0
    print(f"`bayesspec fit sweeps.csv --model {args.model}` (walkthrough), new process each; "
          f"load average before {load_before}, after {document['load_average_after']}")
    print(f"  {'kind':<24} {'compile s':>10} {'fit wall s':>11} {'cpu s':>7}")
    for kind, row in summary.items():
        print(f"  {kind:<24} {row['compile_s']:10.1f} {row['wall_s']:11.1f} "
              f"{row['cpu_s']:7.1f}")
    return 0



def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parts = parser.add_subparsers(dest="part", required=True)
    answers = parts.add_parser("verbs", help="the answering verbs on a saved fit")
    answers.add_argument("--repeat", type=int, default=5, help="runs of each command")
    answers.add_argument("--workdir", default=None,
                         help="folder for the fit files (kept; reused when present)")
    answers.add_argument("--baseline-commit", default=None, metavar="REV",
                         help="also time the verbs as the package was at this git revision")
    answers.add_argument("--verbs", default=",".join(VERBS),
                         help="comma-separated subset of: " + ", ".join(VERBS))
    answers.add_argument("--no-bytecode", action="store_true",
                         help="compile every module from source each run (no bytecode)")
    answers.add_argument("--in-process", action="store_true",
                         help="each verb's own CPU time after its imports, in one process")
    answers.add_argument("--json", action="store_true")
    first = parts.add_parser("first-fit", help="a new process's first fit, cold against "
                             "warm compile caches")
    first.add_argument("--repeat", type=int, default=3, help="warm runs of each kind")
    first.add_argument("--model", default="speculative")
    first.add_argument("--baseline-commit", default=None, metavar="REV")
    first.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.part == "verbs":
        return verbs(args, answers)
    return first_fit(args)


if __name__ == "__main__":
    sys.exit(main())
