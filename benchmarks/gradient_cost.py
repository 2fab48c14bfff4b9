"""What one log-density + gradient evaluation of the hierarchical model costs, per
parameterisation, in PyTensor's C backend and in numba (the one nutpie runs), and the
ratio to the first configuration listed, in one run (issue 18).

    .venv/bin/python benchmarks/gradient_cost.py --scaling-rates 144   # 16k rows
    .venv/bin/python benchmarks/gradient_cost.py                       # bundled data

Configurations (``--configs``, comma-separated): defaults (the model's own),
all-points (conditional sums over every point of a cell), non-centred-c2 (version 4),
non-centred (version 3: neither cell deviation conditional).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONFIGS = {
    "defaults": {},
    "all-points": {"conditional_points_per_cell": None},
    "non-centred-c2": {"cell_c2_deviations": "non_centred"},
    "non-centred": {"cell_c1_deviations": "non_centred", "cell_c2_deviations": "non_centred"},
}


def seconds_per_call(function, flat: np.ndarray, calls: int = 50, repeats: int = 5) -> float:
    function(flat)
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(calls):
            function(flat)
        timings.append((time.perf_counter() - started) / calls)
    return float(np.median(timings))


def cost(data, config: dict) -> dict:
    from bayesspec.bayes import HierarchicalLatencyModel

    pm_model = HierarchicalLatencyModel(config).build(data)
    return backend_costs(pm_model, pm_model.initial_point())


def backend_costs(pm_model, point: dict) -> dict:
    """Milliseconds per log-density + gradient call at ``point``, in PyTensor's C
    backend (``c_ms``) and in numba (``numba_ms``)."""
    flat = np.concatenate([np.ravel(point[v.name]) for v in pm_model.value_vars])
    out = {}
    for backend, mode in (("c_ms", None), ("numba_ms", "NUMBA")):
        function = pm_model.logp_dlogp_function(ravel_inputs=True, mode=mode)
        function.set_extra_values({})
        out[backend] = round(seconds_per_call(function, flat) * 1e3, 3)
    return out


def main(argv=None) -> int:
    from geometry import bundled_data, scaling_data

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scaling-rates", type=int, metavar="N",
                        help="the scaling case's design at N rates per sweep (144: 16k rows)")
    parser.add_argument("--configs", default="defaults,all-points,non-centred-c2,non-centred")
    args = parser.parse_args(argv)
    data = scaling_data(args.scaling_rates) if args.scaling_rates else bundled_data()
    names = [n for n in args.configs.split(",") if n]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        parser.error(f"unknown configuration(s) {unknown}; have {', '.join(CONFIGS)}")
    baseline = None
    for name in names:
        row = {"rows": len(data), "config": name, **cost(data, CONFIGS[name])}
        baseline = baseline or row
        row["numba_vs_first"] = round(row["numba_ms"] / baseline["numba_ms"], 2)
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
