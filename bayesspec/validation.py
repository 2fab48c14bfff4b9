"""Statistical self-checks: does a model recover known truth with calibrated intervals?

Replicate datasets share one design, so the model is compiled once and re-sampled with
new data (``pm.Data`` + nutpie ``with_data``): a replicate costs a sampling run, not a
compilation.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace

import numpy as np
import pandas as pd

from .bayes import get_model_class
from .data import prepare
from .inference import SamplerSettings, compile_model, diagnostics, sample_compiled
from .synthetic import generate_sweeps


def interval_covers(draws: np.ndarray, truth: np.ndarray, prob: float = 0.9) -> np.ndarray:
    """Whether each column's equal-tailed ``prob`` interval contains ``truth``."""
    tail = (1 - prob) / 2
    lo, hi = np.quantile(draws, [tail, 1 - tail], axis=0)
    return (lo <= truth) & (truth <= hi)


def _stacked(tree, name: str) -> np.ndarray:
    values = tree["posterior"][name].stack(sample=("chain", "draw")).transpose("sample", ...)
    return np.asarray(values.values)


def dense_replicate_coverage(truth: pd.DataFrame, *, replicates: int = 20, prob: float = 0.9,
                             settings: SamplerSettings | None = None, seed: int = 0,
                             generator_options: dict | None = None,
                             progress: bool = False) -> pd.DataFrame:
    """Fit the dense model to ``replicates`` noisy sweeps of ``truth`` (columns C1, C2).

    Returns one row per (replicate, group) with ``covers_C1``, ``covers_C2``, the
    interval widths relative to the truth, and the replicate's diagnostics.
    """
    settings = settings or SamplerSettings(draws=500, tune=500, chains=4, progress=False)
    options = generator_options or {}
    model = get_model_class("dense")()
    first = prepare(generate_sweeps(truth, seed=seed, **options))
    compiled = compile_model(model.build(first), replace(settings, progress=False))
    labels = list(model.inputs.groups["label"])
    records = []
    started = time.perf_counter()
    for r in range(replicates):
        data = first if r == 0 else prepare(generate_sweeps(truth, seed=seed + r, **options))
        values = model.data_values(data)
        if list(model.inputs.groups["label"]) != labels:
            raise ValueError("replicates must share one design (same groups)")
        tree = sample_compiled(compiled, replace(settings, seed=seed + 1000 + r,
                                                 progress=False), data=values)
        diag = diagnostics(tree, ["C1", "C2"] + model.posterior_variables())
        for name in ("C1", "C2"):
            draws = _stacked(tree, name)
            true_values = truth[name].to_numpy(float)
            covers = interval_covers(draws, true_values, prob)
            tail = (1 - prob) / 2
            lo, hi = np.quantile(draws, [tail, 1 - tail], axis=0)
            for g in range(len(true_values)):
                records.append({"replicate": r, "group": labels[g], "parameter": name,
                                "covers": bool(covers[g]),
                                "relative_width": float((hi[g] - lo[g]) / true_values[g]),
                                "rhat_max": diag["rhat_max"],
                                "divergences": diag["divergences"]})
        if progress:
            print(f"replicate {r + 1}/{replicates} done ({time.perf_counter() - started:.0f} s)",
                  file=sys.stderr, flush=True)
    return pd.DataFrame(records)
