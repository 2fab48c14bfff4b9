#!/usr/bin/env python
"""Regenerate the bundled simulator datasets in bayesspec/datasets/.

    .venv/bin/python scripts/make_datasets.py            # all three
    .venv/bin/python scripts/make_datasets.py dense moe  # some of them

Each file is one built-in grid of bayesspec.simulate (see bayesspec/simulate/grid.py),
swept GuideLLM-style with a fixed seed, so the same command gives the same bytes. The
equivalent command line is ``bayesspec simulate --grid paper-dense -o sim_dense.csv``.
Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bayesspec.outputs import ProgressLine, write_table  # noqa: E402
from bayesspec.simulate.grid import expand_grid, load_grid, run_grid  # noqa: E402

#: As ``bayesspec simulate`` writes (the simulator is not more precise than this).
FLOAT_FORMAT = "%.6g"

DATASETS = {
    "dense": ("paper-dense", "sim_dense.csv"),
    "speculative": ("paper-speculative", "sim_speculative.csv"),
    "moe": ("paper-moe", "sim_moe.csv"),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", nargs="*", metavar="NAME",
                        help=f"datasets to make: {', '.join(DATASETS)} (default: all)")
    parser.add_argument("--out", default=str(ROOT / "bayesspec" / "datasets"),
                        help="output folder (default: bayesspec/datasets)")
    args = parser.parse_args(argv)
    unknown = [w for w in args.which if w not in DATASETS]
    if unknown:
        parser.error(f"unknown dataset {unknown[0]!r}; choose from {', '.join(DATASETS)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.which or list(DATASETS):
        grid_name, filename = DATASETS[name]
        grid = load_grid(grid_name)
        n = len(expand_grid(grid))
        sys.stderr.write(f"{filename}: grid {grid_name!r}, {n} sweeps\n")
        start = time.monotonic()
        rows, _ = run_grid(grid, progress=ProgressLine("simulate"))
        write_table(out / filename, rows, float_format=FLOAT_FORMAT)
        size = (out / filename).stat().st_size
        sys.stderr.write(f"{filename}: {len(rows)} rows, {size / 1e3:.0f} kB, "
                         f"{int(rows['saturated'].sum())} saturated, "
                         f"{time.monotonic() - start:.1f} s\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
