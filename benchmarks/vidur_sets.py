"""The Vidur validation sets with their decode-iteration profiles, group by group.

A helper of ``replay_sets.py`` and ``iteration_run.py``; not run on its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent / "examples" / "vidur"
KEYS = ["verifier", "gpu", "tensor_parallel", "prefill_tokens", "decode_tokens"]
SETS = ("dense", "fresh", "capped")


def profiled_groups(set_name: str, path=None):
    """Per load-sweep group of ``vidur_<set_name>.csv`` (or of ``path``, a file with the
    set's groups, e.g. a replayed copy): (its key, its rows by rate, the profile's batch
    sizes and seconds per decode iteration, its max_num_seqs)."""
    data = pd.read_csv(path or ROOT / f"vidur_{set_name}.csv")
    profiles = pd.read_csv(ROOT / "decode_profiles.csv")
    profiles = profiles[profiles["set"] == set_name]
    for key, group in data.groupby(KEYS, sort=False):
        profile = profiles.loc[(profiles[KEYS] == pd.Series(key, index=KEYS)).all(axis=1)]
        yield (key, group.sort_values("rps"), profile["batch_size"].to_numpy(float),
               profile["decode_iteration_s"].to_numpy(float),
               float(group["max_num_seqs"].iloc[0]))
