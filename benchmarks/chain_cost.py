"""What one log-density + gradient evaluation of the dense model with the decode profile
costs, with the package's profile law and with the profile in the birth-death chain
(``profile_law`` chain), and in the chain with the batched prefill's stall
(``prefill_batching``, the default with the chain since 2026-12-05's eighth session), in numba (the backend nutpie runs) and PyTensor's C backend, and
the ratio to the first law listed, in one run.

    .venv/bin/python benchmarks/chain_cost.py --set capped      # and fresh, dense

The model is the Vidur hold-out check's (each group's rates up to 60% of its top rate),
evaluated at its chains' starting point.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gradient_cost import backend_costs  # noqa: E402 - the script's folder

HERE = Path(__file__).resolve().parents[1] / "examples" / "vidur"
LAWS = ("poisson", "chain", "chain-batched")


def cost(data, law: str) -> dict:
    from bayesspec.bayes.dense import DenseLatencyModel

    model = DenseLatencyModel({"decode_profile": str(HERE / "decode_profiles.csv"),
                               "profile_law": law.split("-")[0], "noise_load_at": "curve",
                               "prefill_batching": law.endswith("-batched")})
    pm_model = model.build(data)
    point = pm_model.initial_point()
    point.update(pm_model.chain_starts)
    return backend_costs(pm_model, point)


def main(argv=None) -> int:
    from bayesspec.checks import misfit
    from bayesspec.data import read_tidy

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=("capped", "fresh", "dense"), default="capped")
    parser.add_argument("--fraction", type=float, default=0.6)
    args = parser.parse_args(argv)
    data = read_tidy(str(HERE / f"vidur_{args.set}.csv"))
    fitted, _ = misfit.split_by_rate(data, args.fraction)
    baseline = None
    for law in LAWS:
        row = {"set": args.set, "rows": len(fitted), "law": law, **cost(fitted, law)}
        baseline = baseline or row
        for backend in ("c_ms", "numba_ms"):
            row[f"{backend[:-3]}_vs_first"] = round(row[backend] / baseline[backend], 2)
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
