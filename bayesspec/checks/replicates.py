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

from bayesspec.bayes import get_model_class
from bayesspec.data import prepare
from bayesspec.inference import (SamplerSettings, compile_model, diagnostics, sample_compiled,
                        settings_for, stacked_draws)
from bayesspec.simulate.synthetic import generate_sweeps


def interval_covers(draws: np.ndarray, truth: np.ndarray, prob: float = 0.9) -> np.ndarray:
    """Whether each column's equal-tailed ``prob`` interval contains ``truth``."""
    tail = (1 - prob) / 2
    lo, hi = np.quantile(draws, [tail, 1 - tail], axis=0)
    return (lo <= truth) & (truth <= hi)


def replicate_coverage(truth: pd.DataFrame, true_values: dict[str, np.ndarray], *,
                       model: str = "dense", replicates: int = 20, prob: float = 0.9,
                       settings: SamplerSettings | None = None, seed: int = 0,
                       generator_options: dict | None = None, config: dict | None = None,
                       progress: bool = False) -> pd.DataFrame:
    """Fit ``model`` to ``replicates`` noisy sweeps generated from ``truth``.

    ``truth`` has one row per configuration (columns C1, C2 and the design columns);
    ``true_values`` maps posterior variable names to their true values (one per entry
    of the variable's last dimension). Returns one row per (replicate, parameter, entry)
    with ``covers``, the interval width relative to the truth, and the diagnostics.
    """
    settings = settings or SamplerSettings(draws=500, tune=500, chains=4, progress=False)
    options = generator_options or {}
    latency_model = get_model_class(model)(config)
    settings = settings_for(latency_model, settings)
    first = prepare(generate_sweeps(truth, seed=seed, **options))
    compiled = compile_model(latency_model.build(first), replace(settings, progress=False))
    labels = list(latency_model.inputs.groups["label"])
    records = []
    started = time.perf_counter()
    tail = (1 - prob) / 2
    for r in range(replicates):
        data = first if r == 0 else prepare(generate_sweeps(truth, seed=seed + r, **options))
        values = latency_model.data_values(data)
        if list(latency_model.inputs.groups["label"]) != labels:
            raise ValueError("replicates must share one design (same groups)")
        tree = sample_compiled(compiled, replace(settings, seed=seed + 1000 + r,
                                                 progress=False), data=values)
        diag = diagnostics(tree, ["C1", "C2"] + latency_model.posterior_variables())
        for name, true in true_values.items():
            draws = stacked_draws(tree, name).reshape(-1, np.size(true))
            true = np.ravel(np.asarray(true, dtype=float))
            covers = interval_covers(draws, true, prob)
            lo, hi = np.quantile(draws, [tail, 1 - tail], axis=0)
            for g in range(true.size):
                records.append({"replicate": r, "parameter": name, "entry": g,
                                "covers": bool(covers[g]),
                                "relative_width": float((hi[g] - lo[g]) / abs(true[g])),
                                "rhat_max": diag["rhat_max"],
                                "divergences": diag["divergences"]})
        if progress:
            print(f"replicate {r + 1}/{replicates} done ({time.perf_counter() - started:.0f} s,"
                  f" divergences {diag['divergences']}, R-hat max {diag['rhat_max']:.3f})",
                  file=sys.stderr, flush=True)
    return pd.DataFrame(records)


def dense_replicate_coverage(truth: pd.DataFrame, **options) -> pd.DataFrame:
    """Coverage of the dense model's C1 and C2 over replicate datasets of ``truth``."""
    return replicate_coverage(truth, {"C1": truth["C1"].to_numpy(float),
                                      "C2": truth["C2"].to_numpy(float)},
                              model="dense", **options)


def fit_same_design(datasets: list, *, model: str = "dense", settings: SamplerSettings | None = None,
                    config: dict | None = None) -> list:
    """Fit several datasets of one design (same groups and row counts), compiling once."""
    from bayesspec.inference.fitfile import Fit

    settings = settings or SamplerSettings(progress=False)
    latency_model = get_model_class(model)(config)
    settings = settings_for(latency_model, settings)
    compiled = compile_model(latency_model.build(datasets[0]), settings)
    fits = []
    for i, data in enumerate(datasets):
        values = latency_model.data_values(data)
        tree = sample_compiled(compiled, replace(settings, seed=(settings.seed or 0) + i),
                               data=values)
        fits.append(Fit.from_sampling(latency_model, data, tree))
    return fits
