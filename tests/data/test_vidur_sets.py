"""The bundled Vidur sets (examples/vidur) read cleanly with their engine caps: vLLM's
``max_num_seqs`` (Vidur's batch_size_cap), ``kv_cache_tokens`` (Vidur's memory planner)
and ``max_num_batched_tokens`` (Vidur's max_tokens_in_batch), one value per configuration.
Provenance: examples/vidur/README.md."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from bayesspec import data as data_mod
from bayesspec.data import read_tidy

VIDUR = Path(__file__).resolve().parents[2] / "examples" / "vidur"
CAP_COLUMNS = ("max_num_seqs", "kv_cache_tokens", "max_num_batched_tokens")
CONFIGURATION = ["verifier", "gpu", "tensor_parallel", "prefill_tokens", "decode_tokens"]
# file -> (rows, configurations, batch caps used)
SETS = {
    "vidur_dense.csv": (275, 25, {128}),
    "vidur_fresh.csv": (176, 16, {128}),
    "vidur_capped.csv": (108, 9, {32, 48}),
}


@pytest.fixture(scope="module", params=sorted(SETS))
def vidur_set(request):
    name = request.param
    return name, read_tidy(VIDUR / name)


def caps(frame: pd.DataFrame) -> pd.DataFrame:
    """The cap columns as integers, whatever dtype read_tidy gave them."""
    out = frame[list(CAP_COLUMNS)].apply(pd.to_numeric, errors="raise")
    assert (out == out.round()).all().all()
    return out.astype("int64")


def test_bundled_vidur_sets_read_with_their_caps(vidur_set):
    name, frame = vidur_set
    rows, configurations, batch_caps = SETS[name]
    assert len(frame) == rows
    assert frame.groupby(CONFIGURATION).ngroups == configurations
    values = caps(frame)
    assert (values > 0).all().all()
    assert set(values["max_num_seqs"]) == batch_caps
    assert set(values["max_num_batched_tokens"]) == {4096}
    per_configuration = values.groupby([frame[c] for c in CONFIGURATION]).nunique()
    assert (per_configuration == 1).all().all(), "a cap differs within one configuration"
    # the KV cache holds a full batch of the longest requests: KV never binds, no preemption
    tokens = frame["prefill_tokens"].astype(int) + frame["decode_tokens"].astype(int)
    assert (values["kv_cache_tokens"] >= values["max_num_seqs"] * tokens).all()


def test_capped_set_reaches_past_its_cap():
    """The capped set's top rates are past the batch cap's throughput: the time-averaged
    number in the system exceeds the cap there, and the run says the queue kept growing."""
    frame = read_tidy(VIDUR / "vidur_capped.csv")
    cap = caps(frame)["max_num_seqs"]
    concurrency = pd.to_numeric(frame["mean_concurrency"])
    for _, rows in frame.groupby(CONFIGURATION):
        past = concurrency[rows.index] > cap[rows.index]
        assert 1 <= past.sum() < len(rows)
        top = rows["rps"].astype(float).idxmax()
        assert bool(past[top]) and bool(rows.loc[top, "saturated"])
        low = rows["rps"].astype(float).idxmin()
        assert concurrency[low] < 0.1 * cap[low]


def test_capped_set_points_past_the_cap_are_set_aside():
    """With the caps in the file, every point whose measured concurrency exceeds its cap is
    left out of the fit (the 95% points of 7 sweeps, besides the 18 saturated ones)."""
    if "max_num_seqs" not in data_mod.KNOWN_COLUMNS:
        pytest.skip("the tidy format does not know the cap column max_num_seqs")
    frame = read_tidy(VIDUR / "vidur_capped.csv")
    past = pd.to_numeric(frame["mean_concurrency"]) > caps(frame)["max_num_seqs"]
    assert frame.loc[past, "excluded"].all()
    assert frame.loc[~past & ~frame["saturated"].astype(bool), "excluded"].sum() == 0
    assert (past & ~frame["saturated"].astype(bool)).sum() == 7


def test_caps_parse_as_integers_once_the_tidy_format_knows_them(vidur_set):
    if "max_num_seqs" not in data_mod.KNOWN_COLUMNS:
        pytest.skip("the tidy format does not know the cap column max_num_seqs")
    _, frame = vidur_set
    for column in ("max_num_seqs", "kv_cache_tokens"):
        assert pd.api.types.is_integer_dtype(frame[column]), (column, frame[column].dtype)
