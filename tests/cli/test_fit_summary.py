"""What `fit` says a fit answers: one line per family of setups, not two per group."""

from __future__ import annotations

from bayesspec.cli.fitting import questions_text

DENSE = {"answers": ["predict", "slo"],
         "cannot": ["speedup, crossover, kstar: no speculative groups"]}


def test_setups_that_answer_alike_share_one_line():
    questions = [{"setup": f"Qwen3-8B p{p} g{g}", **DENSE}
                 for p in (256, 512) for g in (128, 256, 512, 1024, 2048)]
    text = questions_text(questions).splitlines()
    assert text[0] == "questions this fit answers:"
    assert len(text) == 2                         # ten dense setups, one family
    assert text[1].startswith("  10 setups (Qwen3-8B p256 g128, Qwen3-8B p256 g256, "
                              "Qwen3-8B p256 g512 and 7 more): predict; slo; cannot: ")
    assert text[1].count("no speculative groups") == 1


def test_setups_that_answer_differently_get_their_own_lines():
    speculative = {"setup": "Qwen3-8B p512 g512 + EAGLE3", "answers": ["speedup", "kstar"],
                   "cannot": []}
    text = questions_text([{"setup": "Qwen3-8B p256 g256", **DENSE}, speculative,
                           {"setup": "Qwen3-8B p512 g256", **DENSE}]).splitlines()
    assert len(text) == 3
    assert text[1].startswith("  2 setups (Qwen3-8B p256 g256, Qwen3-8B p512 g256): ")
    assert text[2] == "  Qwen3-8B p512 g512 + EAGLE3: speedup; kstar"


def test_a_setup_with_a_missing_length_counts_its_groups():
    """A public table without prompt lengths: its groups still form their setups."""
    import re

    import numpy as np

    from bayesspec.reporting.summary import answerable
    from tests.conftest import synthetic_dense_fit

    fit = synthetic_dense_fit(n_groups=4, draws=50)
    fit.groups["prefill_tokens"] = np.nan
    counts = [int(re.search(r"\((\d+) groups?\)", entry["answers"][0]).group(1))
              for entry in answerable(fit)]
    assert sum(counts) == 4 and all(c > 0 for c in counts)
