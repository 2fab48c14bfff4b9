"""SBC of the hierarchical model with a sparse verifier (issue 35 item 4).

    nice python benchmarks/moe_sbc.py [--simulations 40] [--draws 200] [--chains 2]
        [--seed 0] [--workers 1] [--blocks 1] [--out DIR]

Design: the bundled ``moe`` data's Qwen3-30B-A3B rows (m = 8 of M = 128) at two
(prefill, decode) pairs dense and at k = 1 and 3 (alpha 0.8) at 512/512: four curves of
nine rates, the covered/saturated split inside the hierarchical model. Its latencies only
set the data-dependent prior constants; every simulation draws its parameters and data
from the prior and refits (:func:`bayesspec.checks.sbc.run_sbc`, what ``bayesspec sbc`` runs).
Prints the per-coefficient rank tests (C1u, C1s, C2u, C2s among them) and the verdict.

``--blocks B`` splits the simulations into B runs at seeds seed, seed + 1, ... and writes
each block's ranks (``ranks_block{b}.csv``) as soon as it finishes, so a run cut short
(a borrowed machine's time limit) keeps its finished blocks; pool them, and blocks of
other runs, with ``benchmarks/sbc_pool.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def design():
    from bayesspec import datasets
    from bayesspec.data import read_tidy

    data = read_tidy(datasets.path("moe"))
    sparse = data["verifier"] == "Qwen3-30B-A3B"
    dense = data["k"] == 0
    speculative = (data["alpha"] == 0.8) & (data["prefill_tokens"] == 512)
    return data.loc[sparse & (dense | speculative)].reset_index(drop=True)


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
    args = parser.parse_args(argv)

    from bayesspec.inference import SamplerSettings
    from bayesspec.checks.sbc import run_sbc

    import numpy as np

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
              "benchmarks/sbc_pool.py")
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
