#!/usr/bin/env python
"""Validation: which points are set aside, and is detection without flag columns right?

    python benchmarks/set_aside.py --seeds 12       # about 40 s

1. The README walkthrough's sweeps (examples/walkthrough.toml, 400 requests per point):
   points the simulator marks, by reason, and the law's residual on the kept points.
2. Detection from the numbers alone, with known truth: law-generated sweeps
   (``synthetic.generate_sweeps``, 48 groups per seed, throughput run dropped) with one
   point planted per group at 3x the true law between two measured rates at 50-75% of
   the ceiling: planted points caught, and points of the law set aside (false positives).
3. The walkthrough's throughput runs found from the numbers alone (no saturated,
   strategy, rps_target or saturation_reason columns), with and without the engine's
   cap columns the simulator writes.

Prints one block per part: counts by reason, the largest residual of the kept points,
planted points caught of planted, law points set aside of all, throughput runs found.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import curve_fit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bayesspec import laws  # noqa: E402
from bayesspec.data import prepare  # noqa: E402
from bayesspec.simulate.grid import load_grid, run_grid  # noqa: E402
from bayesspec.simulate.synthetic import generate_sweeps, placeholder_truth  # noqa: E402

FLAGS = ["saturated", "strategy", "rps_target", "saturation_reason"]


def walkthrough() -> pd.DataFrame:
    rows, _ = run_grid(load_grid(str(ROOT / "examples" / "walkthrough.toml")))
    print(f"walkthrough: {len(rows)} points, {int(rows['saturated'].sum())} marked by the "
          "simulator:", dict(collections.Counter(rows.loc[rows["saturated"],
                                                          "saturation_reason"])))
    worst = 0.0
    for _, group in rows.groupby(["k", "alpha"], dropna=False):
        kept = group[~group["saturated"]]
        x, y = kept["rps"].to_numpy(float), kept["latency_mean_s"].to_numpy(float)
        (c1, c2), _ = curve_fit(laws.latency, x, y, p0=[y.min(), 0.5 / x.max()],
                                bounds=([0, 0], [np.inf, 0.9999 / x.max()]))
        worst = max(worst, float(np.max(np.abs(y / laws.latency(x, c1, c2) - 1))))
    print(f"  kept points: largest residual against eq. (1) fitted per sweep {worst:.1%}")
    return rows


def planted(seeds: int) -> None:
    truth = placeholder_truth()
    keys = ["verifier", "prefill_tokens", "decode_tokens"]
    caught = planted_n = false = law_points = 0
    for seed in range(seeds):
        rows = generate_sweeps(truth, seed=seed)
        rows = rows[rows["strategy"] != "throughput"].reset_index(drop=True)
        rng = np.random.default_rng(seed)
        extra = []
        for key, group in rows.groupby(keys):
            c1, c2 = truth.set_index(keys).loc[key, ["C1", "C2"]]
            rates = np.sort(group["rps"].to_numpy())
            i = int(rng.integers(4, 6))
            rate = 0.5 * (rates[i] + rates[i + 1])
            point = group.iloc[0].copy()
            point["rps"], point["latency_mean_s"] = rate, 3.0 * laws.latency(rate, c1, c2)
            extra.append(point)
        table = pd.concat([rows, pd.DataFrame(extra)], ignore_index=True)
        mask = np.r_[np.zeros(len(rows), bool), np.ones(len(extra), bool)]
        excluded = prepare(table.drop(columns=[c for c in FLAGS if c in table]))[
            "excluded"].to_numpy()
        caught += int(excluded[mask].sum())
        planted_n += int(mask.sum())
        false += int(excluded[~mask].sum())
        law_points += int((~mask).sum())
    print(f"planted at 3x the true law ({seeds} seeds): caught {caught}/{planted_n}; "
          f"points of the law set aside {false}/{law_points}")


CAPS = ["max_num_seqs", "kv_cache_tokens", "max_num_batched_tokens"]


def throughput_without_flags(rows: pd.DataFrame) -> None:
    throughput = rows["strategy"].eq("throughput").to_numpy()
    for what, drop in (("with the engine's cap columns", FLAGS),
                       ("without them either", FLAGS + CAPS)):
        data = prepare(rows.drop(columns=[c for c in drop if c in rows]))
        excluded = data["excluded"].to_numpy()
        print(f"walkthrough without flag columns, {what}: throughput runs found "
              f"{int(excluded[throughput].sum())}/{int(throughput.sum())}, other points set "
              f"aside {int(excluded[~throughput].sum())}/{int((~throughput).sum())}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=12)
    args = parser.parse_args()
    rows = walkthrough()
    planted(args.seeds)
    throughput_without_flags(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
