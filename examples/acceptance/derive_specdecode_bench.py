"""Derive vLLM-style acceptance counters from SpecDecode-Bench's public acceptance traces.

Source: https://github.com/SpecDecode-Bench/simulator (data/llama3.1-8B/combined_*.jsonl,
"profiled acceptance data for Llama3.1-8B-Instruct on H100", Liu, Yu, Park, Stoica,
Cheung, "Speculative Decoding: Performance or Illusion?", arXiv 2601.11580). Each line
is one request of a dataset (cnn, gsm8k, instructcoder, sharegpt) with, for every
position t of its output, ``acc_eagle.acc_len[t]`` and ``acc_ngram.acc_len[t]``: the
tokens a speculative cycle starting there commits with an unbounded draft (the accepted
drafts plus the verifier's token), profiled for an EAGLE-3 head and an n-gram proposer.

A chain draft of length k accepts min(acc_len - 1, k) of them, so replaying each request
from its first output token (as the repository's own simulator does: a cycle at t
commits min(acc_len[t], k + 1) tokens, the next one starts after them) gives, for every
k, the count of cycles that accepted exactly a drafts, a = 0..k, and from them vLLM's
counters: num_drafts (cycles) and accepted_tokens_posI (cycles with at least I
accepted). Nothing is assumed: the counts are exact replays of the published traces.

Usage: python examples/acceptance/derive_specdecode_bench.py DATA_DIR -o OUT.csv
(DATA_DIR holds the four combined_*.jsonl files of the repository's data/llama3.1-8B).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

DATASETS = ("gsm8k", "sharegpt", "cnn", "instructcoder")
PROPOSERS = {"eagle": ("EAGLE3", "eagle3"), "ngram": ("ngram", "ngram")}


def replay(accepted_lengths: list[int], k: int) -> np.ndarray:
    """Cycles accepting exactly a = 0..k drafts over one request's output."""
    counts = np.zeros(k + 1, dtype=np.int64)
    position = 0
    while position < len(accepted_lengths):
        accepted = min(int(accepted_lengths[position]) - 1, k)
        counts[accepted] += 1
        position += accepted + 1
    return counts


def derive(data_dir: Path, ks=range(1, 11)) -> pd.DataFrame:
    rows = []
    for dataset in DATASETS:
        with open(data_dir / f"combined_{dataset}.jsonl", encoding="utf-8") as stream:
            requests = [json.loads(line) for line in stream]
        for key, (drafter, method) in PROPOSERS.items():
            for k in ks:
                counts = sum(replay(r[f"acc_{key}"]["acc_len"], k) for r in requests)
                at_least = counts[::-1].cumsum()[::-1]
                row = {"source": "SpecDecode-Bench/simulator", "dataset": dataset,
                       "verifier": "Llama-3.1-8B-Instruct", "drafter": drafter,
                       "method": method, "trace_requests": len(requests), "k": k,
                       "num_drafts": int(counts.sum()),
                       "accepted_tokens": int((counts * np.arange(k + 1)).sum())}
                row.update({f"accepted_tokens_pos{i}": int(at_least[i])
                            for i in range(1, k + 1)})
                rows.append(row)
    frame = pd.DataFrame(rows)
    positions = [c for c in frame.columns if c.startswith("accepted_tokens_pos")]
    frame[positions] = frame[positions].astype("Int64")
    return frame


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()
    derive(args.data_dir).to_csv(args.output, index=False)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
