"""The concurrency-cap line `fit` prints names the groups each cap belongs to."""

from __future__ import annotations

import pandas as pd

from bayesspec.cli.fitting import concurrency_cap_note, labels_in_short
from bayesspec.data import assign_groups, concurrency_caps, included, prepare
from bayesspec.simulate import setup, sweep


def test_each_cap_is_said_with_its_group():
    """A dense and a speculative sweep of the simulator: the drafter's weights leave the
    speculative group less KV cache, so the two caps differ and each is named."""
    rows = pd.concat([sweep(setup("Qwen3-8B", "H100", k=k, alpha=alpha, prefill=512,
                                  decode=512), 5, n_requests=100, seed=0).rows
                      for k, alpha in ((0, None), (3, 0.8))], ignore_index=True)
    data = prepare(rows)
    note = concurrency_cap_note(data)
    kept = included(data)
    caps, sources = concurrency_caps(kept)
    groups, index = assign_groups(kept)
    said = {}
    for cap, source, label in zip(caps, sources, groups["label"].to_numpy(object)[index]):
        said[label] = f"{cap:.0f} requests ({source}) for {label}"
    assert len(set(said.values())) == 2
    for text in said.values():
        assert text in note


def test_groups_sharing_a_cap_are_said_once_and_one_cap_everywhere_briefly():
    base = {"verifier": "Qwen3-8B", "drafter": "EAGLE3-Qwen3-8B", "prefill_tokens": 512,
            "decode_tokens": 512, "rps": 1.0, "latency_mean_s": 3.0}
    rows = [{**base, "k": k, "alpha": alpha, "max_num_seqs": cap}
            for k, alpha, cap in ((2, 0.7, 64), (3, 0.7, 64), (4, 0.7, 32))]
    note = concurrency_cap_note(prepare(pd.DataFrame(rows)))
    assert ("32 requests (max_num_seqs) for Qwen3-8B +EAGLE3-Qwen3-8B k4 a0.7 p512 g512; "
            "64 requests (max_num_seqs) for Qwen3-8B +EAGLE3-Qwen3-8B a0.7 p512 g512 "
            "(k2, k3)") in note
    same = concurrency_cap_note(prepare(pd.DataFrame([{**r, "max_num_seqs": 64}
                                                      for r in rows])))
    assert "concurrency cap: 64 requests (max_num_seqs) in every group" in same


def test_labels_in_short():
    assert labels_in_short(["a k2 p512", "a k3 p512"]) == "a p512 (k2, k3)"
    assert labels_in_short(["x"]) == "x"
    assert labels_in_short(["x k2", "y k3"]) == "x k2, y k3"
    assert labels_in_short(["a p512", "a +d k3 p512"]) == "a p512, a +d k3 p512"
