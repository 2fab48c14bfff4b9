#!/usr/bin/env python
"""Wall time of every README walkthrough command, run in order as pasted.

    .venv/bin/python benchmarks/walkthrough_time.py [--workdir DIR]

The commands are the ones ``tests/test_readme.py`` extracts from the README's "Using it"
section; they run in a fresh folder that sees the repository's ``examples/`` and
``tests/``, with this Python's ``bin`` first on PATH. Prints one line per command and the
total; stops at the first failure with its stderr.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def walkthrough() -> list[str]:
    spec = importlib.util.spec_from_file_location("test_readme", ROOT / "tests" / "test_readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.WALKTHROUGH


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args(argv)
    folder = args.workdir or Path(tempfile.mkdtemp(prefix="walkthrough-"))
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("examples", "tests"):
        if not (folder / name).exists():
            (folder / name).symlink_to(ROOT / name)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}"
                                f"{os.environ.get('PATH', '')}")
    started = time.perf_counter()
    for command in walkthrough():
        begun = time.perf_counter()
        done = subprocess.run(command, shell=True, cwd=folder, env=env, capture_output=True,
                              text=True)
        print(f"{time.perf_counter() - begun:7.1f} s rc={done.returncode} {command}",
              flush=True)
        if done.returncode:
            print(done.stderr[-1500:])
            return 1
    print(f"total {time.perf_counter() - started:.0f} s in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
