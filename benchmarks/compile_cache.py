#!/usr/bin/env python
"""Speed harness: how much of a new process's first fit the on-disk compile caches save.

    python benchmarks/compile_cache.py --repeat 2
    python benchmarks/compile_cache.py --repeat 3 --baseline-commit REV --json

Runs the README walkthrough's fit (``bayesspec fit sweeps.csv --model speculative -o
fit.nc --seed 1`` on ``simulate --grid examples/walkthrough.toml``), each time in a new
process, and reads the ``compiled in X s`` line it prints:

- ``cold``: an empty PyTensor compile directory (``PYTENSOR_FLAGS=base_compiledir=...``),
  i.e. a fresh machine; once (it fills that directory);
- ``warm``: the same directory again, ``--repeat`` times: PyTensor's numba cache of the
  model's graph and the cached nutpie callbacks are on disk;
- with ``--baseline-commit REV``, ``warm @ REV``: the package as it was at REV, on the
  same warm directory.

Prints per kind the compile seconds, the fit's wall seconds and the process's CPU
seconds (medians of the warm runs). Compare within one run: the machine may be shared.
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


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def run_fit(folder: Path, pythonpath: Path, compiledir: Path, model: str) -> dict:
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


def old_package(commit: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "bayesspec",
                              "models"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="warm runs of each kind")
    parser.add_argument("--model", default="speculative")
    parser.add_argument("--baseline-commit", default=None, metavar="REV")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    folder = Path(tempfile.mkdtemp(prefix="compile-cache-"))
    compiledir = folder / "pytensor"
    subprocess.run([sys.executable, "-m", "bayesspec", "simulate", "--grid",
                    str(ROOT / "examples" / "walkthrough.toml"), "-o", "sweeps.csv"],
                   cwd=folder, env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True,
                   capture_output=True)
    load_before = load_average()
    runs = {"cold": [run_fit(folder, ROOT, compiledir, args.model)]}
    kinds = {"warm": ROOT}
    if args.baseline_commit:
        kinds[f"warm @ {args.baseline_commit}"] = old_package(
            args.baseline_commit, Path(tempfile.mkdtemp(prefix="old-")))
    for kind in kinds:
        runs[kind] = []
    for round_number in range(args.repeat):  # round robin: shared load spreads over all
        for kind, pythonpath in kinds.items():
            runs[kind].append(run_fit(folder, pythonpath, compiledir, args.model))
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


if __name__ == "__main__":
    sys.exit(main())
