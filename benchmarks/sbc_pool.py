#!/usr/bin/env python
"""Pool SBC rank blocks run at different seeds (e.g. on a borrowed machine, in pieces) and
test the pooled ranks as `bayesspec.checks.sbc.run_sbc` tests one block.

    .venv/bin/python benchmarks/sbc_pool.py RANKS.csv RANKS.csv ... [--json OUT.json]

Each file is a ``ranks.csv`` written by ``benchmarks/moe_sbc.py --out``: a header line
``# name,name,...  max_rank=L`` and one row of ranks per simulation. Blocks must rank the
same coefficients against the same L; simulations from different seeds are independent
draws from the same prior, so their ranks pool. Prints each coefficient's chi-square and
ECDF p-values (the same tests and family-wise rule as a single run) and the verdict.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bayesspec.checks.ranks import chi_square_pvalues, default_bins, ecdf_band  # noqa: E402
from bayesspec.checks.sbc import LEVEL  # noqa: E402


def read_block(path: Path) -> tuple[list[str], int, np.ndarray]:
    header = path.read_text().splitlines()[0]
    match = re.match(r"#\s*(.*)\s+max_rank=(\d+)\s*$", header)
    if not match:
        raise SystemExit(f"{path}: line 1: expected '# names  max_rank=L'")
    names = match.group(1).strip().split(",")
    ranks = np.atleast_2d(np.loadtxt(path, delimiter=",", comments="#", dtype=int))
    if ranks.shape[1] != len(names):
        raise SystemExit(f"{path}: {ranks.shape[1]} rank columns against {len(names)} names")
    return names, int(match.group(2)), ranks


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("blocks", nargs="+", type=Path)
    parser.add_argument("--json", type=Path, help="write the pooled verdict here")
    parser.add_argument("--seed", type=int, default=0, help="seed of the ECDF band's null")
    args = parser.parse_args(argv)

    blocks = [read_block(path) for path in args.blocks]
    names, max_rank = blocks[0][0], blocks[0][1]
    for path, (other, rank, _) in zip(args.blocks, blocks):
        if other != names or rank != max_rank:
            raise SystemExit(f"{path}: ranks other coefficients or another max_rank than "
                             f"{args.blocks[0]}")
    ranks = np.vstack([block[2] for block in blocks])
    n = len(ranks)
    bins = default_bins(n, max_rank)
    p_values = chi_square_pvalues(ranks, max_rank, bins)
    band = ecdf_band(n, max_rank, seed=args.seed)
    p_ecdf, outside = band.p_values(ranks), band.outside(ranks)
    family = LEVEL / len(names)
    rows = [{"name": name, "p_value": float(p), "p_ecdf": float(q), "outside_band": bool(o),
             "rejected": bool(p < LEVEL), "rejected_family_wise": bool(p < family)}
            for name, p, q, o in zip(names, p_values, p_ecdf, outside)]
    for row in rows:
        print(f"{row['name']:72s} p={row['p_value']:.3f} p_ecdf={row['p_ecdf']:.3f}"
              f"{'  REJECTED' if row['rejected'] else ''}"
              f"{'  outside band' if row['outside_band'] else ''}")
    document = {
        "blocks": [str(p) for p in args.blocks],
        "simulations_per_block": [len(b[2]) for b in blocks],
        "simulations": n, "max_rank": max_rank, "bins": bins, "level": LEVEL,
        "family_wise_rule": f"Bonferroni: rejected_family_wise when p < {LEVEL}/{len(names)}",
        "expected_false_rejections": LEVEL * len(names),
        "smallest_p": min(r["p_value"] for r in rows),
        "rejected": [r["name"] for r in rows if r["rejected"]],
        "rejected_family_wise": [r["name"] for r in rows if r["rejected_family_wise"]],
        "outside_band": [r["name"] for r in rows if r["outside_band"]],
        "coefficients": rows,
    }
    document["passed"] = not document["rejected_family_wise"]
    print(json.dumps({k: document[k] for k in ("simulations_per_block", "simulations",
                                                "smallest_p", "rejected",
                                                "rejected_family_wise", "outside_band")}))
    print("passed" if document["passed"] else "NOT passed")
    if args.json:
        args.json.write_text(json.dumps(document, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
