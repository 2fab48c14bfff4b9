"""Validation: SBC of the hierarchical model with a sparse verifier.

The covered/saturated split is among the ranked coefficients.

    python -W ignore::UserWarning benchmarks/moe_sbc.py --simulations 36 --draws 300 \
        --chains 2 --blocks 6 --seed 7000 --out sbc7000       # about 30 minutes on 2 cores
    python benchmarks/moe_sbc.py --pool sbc0/ranks.csv sbc7000/ranks_block*.csv \
        --json pooled.json

Design: the bundled ``moe`` data's Qwen3-30B-A3B rows (m = 8 of M = 128) at two
(prefill, decode) pairs dense and at k = 1 and 3 (alpha 0.8) at 512/512: four curves of
nine rates. Its latencies only set the data-dependent prior constants; every simulation
draws its parameters and data from the prior and refits
(:func:`bayesspec.checks.sbc.run_sbc`, what ``bayesspec sbc`` runs).

``--blocks B`` splits the simulations into B runs at seeds seed, seed + 1, ... and writes
each block's ranks (``ranks_block{b}.csv``) as soon as it finishes, so a run cut short
keeps its finished blocks. ``--pool RANKS.csv ...`` tests the ranks of several blocks or
runs together (simulations at different seeds are independent draws from the same
prior): the same tests and family-wise rule as one run.

Prints the per-coefficient rank tests (chi-square and ECDF p-values; C1u, C1s, C2u, C2s
and the shares, and any rejected coefficient), a JSON line of the counts, and
``passed`` or ``NOT passed``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np


def design():
    from bayesspec import datasets
    from bayesspec.data import read_tidy

    data = read_tidy(datasets.path("moe"))
    sparse = data["verifier"] == "Qwen3-30B-A3B"
    dense = data["k"] == 0
    speculative = (data["alpha"] == 0.8) & (data["prefill_tokens"] == 512)
    return data.loc[sparse & (dense | speculative)].reset_index(drop=True)


def read_block(path: Path) -> tuple[list[str], int, np.ndarray]:
    """(names, max rank, ranks) of a ``ranks*.csv`` this script wrote: a header line
    ``# name,name,...  max_rank=L`` and one row of ranks per simulation."""
    header = path.read_text().splitlines()[0]
    match = re.match(r"#\s*(.*)\s+max_rank=(\d+)\s*$", header)
    if not match:
        raise SystemExit(f"{path}: line 1: expected '# names  max_rank=L'")
    names = match.group(1).strip().split(",")
    ranks = np.atleast_2d(np.loadtxt(path, delimiter=",", comments="#", dtype=int))
    if ranks.shape[1] != len(names):
        raise SystemExit(f"{path}: {ranks.shape[1]} rank columns against {len(names)} names")
    return names, int(match.group(2)), ranks


def pool(paths: list[Path], json_path: Path | None, seed: int) -> int:
    """Test the ranks of several blocks together, as ``run_sbc`` tests one block: each
    coefficient's chi-square and ECDF p-values, and the family-wise rule."""
    from bayesspec.checks.ranks import chi_square_pvalues, default_bins, ecdf_band
    from bayesspec.checks.sbc import LEVEL

    blocks = [read_block(path) for path in paths]
    names, max_rank = blocks[0][0], blocks[0][1]
    for path, (other, rank, _) in zip(paths, blocks):
        if other != names or rank != max_rank:
            raise SystemExit(f"{path}: ranks other coefficients or another max_rank than "
                             f"{paths[0]}")
    ranks = np.vstack([block[2] for block in blocks])
    n = len(ranks)
    bins = default_bins(n, max_rank)
    p_values = chi_square_pvalues(ranks, max_rank, bins)
    band = ecdf_band(n, max_rank, seed=seed)
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
        "blocks": [str(path) for path in paths],
        "simulations_per_block": [len(block[2]) for block in blocks],
        "simulations": n, "max_rank": max_rank, "bins": bins, "level": LEVEL,
        "family_wise_rule": f"Bonferroni: rejected_family_wise when p < {LEVEL}/{len(names)}",
        "expected_false_rejections": LEVEL * len(names),
        "smallest_p": min(row["p_value"] for row in rows),
        "rejected": [row["name"] for row in rows if row["rejected"]],
        "rejected_family_wise": [row["name"] for row in rows if row["rejected_family_wise"]],
        "outside_band": [row["name"] for row in rows if row["outside_band"]],
        "coefficients": rows,
    }
    document["passed"] = not document["rejected_family_wise"]
    print(json.dumps({k: document[k] for k in ("simulations_per_block", "simulations",
                                                "smallest_p", "rejected",
                                                "rejected_family_wise", "outside_band")}))
    print("passed" if document["passed"] else "NOT passed")
    if json_path:
        json_path.write_text(json.dumps(document, indent=1))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulations", type=int, default=40)
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1,
                        help="refits in parallel processes (one core each)")
    parser.add_argument("--blocks", type=int, default=1,
                        help="runs at seeds seed, seed+1, ..., each saved when it ends")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--pool", nargs="+", type=Path, metavar="RANKS.csv",
                        help="test these blocks' ranks together instead of sampling")
    parser.add_argument("--json", type=Path, help="with --pool: write the verdict here")
    args = parser.parse_args(argv)
    if args.pool:
        return pool(args.pool, args.json, args.seed)

    from bayesspec.inference import SamplerSettings
    from bayesspec.checks.sbc import run_sbc

    data = design()
    sizes = [len(part) for part in np.array_split(np.arange(args.simulations), args.blocks)]
    for block, size in enumerate(sizes):
        result = run_sbc(data, "hierarchical", simulations=size, seed=args.seed + block,
                         settings=SamplerSettings(draws=args.draws, chains=args.chains),
                         progress=True, workers=args.workers)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            # The ranks themselves, so that blocks run at different seeds can be pooled.
            suffix = "" if args.blocks == 1 else f"_block{block}"
            np.savetxt(args.out / f"ranks{suffix}.csv", np.asarray(result.ranks), fmt="%d",
                       delimiter=",",
                       header=",".join(result.names) + f"  max_rank={result.max_rank}")
            (args.out / f"sbc{suffix}.json").write_text(
                json.dumps(result.document(), indent=1, default=str))
    document = result.document()
    if args.blocks > 1:
        print(f"the tests below are the last block's; pool the {args.blocks} blocks with "
              "--pool")
    for row in document["coefficients"]:
        if any(part in row["name"] for part in ("C1u", "C1s", "C2u", "C2s", "share_")) \
                or row["rejected"]:
            print(f"{row['name']:32s} p={row['p_value']:.3f} p_ecdf={row['p_ecdf']:.3f}"
                  f"{'  REJECTED' if row['rejected'] else ''}")
    print(json.dumps({k: document[k] for k in ("simulations", "simulations_used",
                                                "set_aside_implausible", "failed",
                                                "rejected", "rejected_family_wise")
                      if k in document}, default=str))
    print("passed" if result.passed else "NOT passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
