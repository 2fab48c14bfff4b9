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


def test_summary_names_the_groups_of_each_cap():
    from bayesspec.reporting.summary import summary_text

    cell = {"median": 1.0, "lo": 0.9, "hi": 1.1}
    groups = [{"label": label, "C1": cell, "C2": cell, "saturation_rps": cell,
               "rps_fitted_max": 10.0, "rps_measured_max": 12.0, "ceiling_binding": "cap",
               "cap": cap, "cap_source": "kv_cache_tokens"}
              for label, cap in (("m p512", 464), ("m +d k2 p512", 445), ("m +d k3 p512", 445))]
    document = {"model": "speculative", "groups": groups, "n_rows": 30, "n_excluded": 0,
                "prob": 0.9, "coefficients": {}, "summaries": [],
                "diagnostics": {"rhat_max": 1.0, "ess_bulk_min": 1000, "divergences": 0},
                "convergence": {"method": "nuts", "converged": True, "status": "converged",
                                "text": "converged", "rhat_max": 1.0, "ess_bulk_min": 1000,
                                "divergences": 0}}
    line = next(l for l in summary_text(document).splitlines() if l.startswith("c:"))
    assert "445 requests from kv_cache_tokens for m +d p512 (k2, k3)" in line
    assert "464 requests from kv_cache_tokens for m p512" in line
