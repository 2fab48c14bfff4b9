"""Where the token process's divergent transitions come from on a short table of
acceptance lengths (three rows: vLLM issue 20780's EAGLE-3 lengths at k = 2, 3, 4):
the fit at target_accept 0.95 under variants of one prior at a time.

    python benchmarks/acceptance_divergences.py [VARIANT ...]

Finding: docs/acceptance.md (a short table of acceptance lengths diverges too).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TABLE = pd.DataFrame({"k": [2, 3, 4], "acceptance_length": [2.36, 2.79, 3.08],
                      "drafter": ["eagle3"] * 3})
VARIANTS = ("model", "deep_tan", "deep_halfnormal", "deep_trunc10", "deep_trunc3",
            "scatter_lognormal", "spread_lognormal", "hinge_softplus")


def fit_variant(variant: str, path: Path) -> list[int]:
    import pymc as pm

    import bayesspec.bayes.acceptance_model as acceptance_model
    from bayesspec.bayes.acceptance_model import TokenAcceptanceModel, counter_windows
    from bayesspec.data import read_counters
    from bayesspec.inference import SamplerSettings

    half_normal, half_cauchy = pm.HalfNormal, pm.HalfCauchy
    reliability = acceptance_model.depth_reliability_expr

    def patched_half_normal(name, *args, **kwargs):
        if variant == "scatter_lognormal" and name == "run_scatter":
            return pm.LogNormal(name, np.log(0.01), 0.7, **kwargs)
        if variant == "spread_lognormal" and name == "persistence_spread":
            return pm.LogNormal(name, np.log(0.5), 1.0, **kwargs)
        return half_normal(name, *args, **kwargs)

    def patched_half_cauchy(name, *args, **kwargs):
        if variant == "deep_tan":   # the same half-Cauchy through its quantile
            import pytensor.tensor as pt
            dims = kwargs.get("dims")
            v = pm.Uniform(name + "_quantile", 0.0, 1.0, dims=dims)
            return pm.Deterministic(name, args[0] * pt.tan(0.5 * np.pi * v), dims=dims)
        if variant == "deep_halfnormal":
            return half_normal(name, *args, **kwargs)
        if variant.startswith("deep_trunc"):
            return pm.Truncated(name, half_cauchy.dist(*args), lower=0.0,
                                upper=float(variant.removeprefix("deep_trunc")), **kwargs)
        return half_cauchy(name, *args, **kwargs)

    def softplus_hinge(decay, deep_decay, measured_depth, max_depth, xp=np,
                       trained_depth=None):
        i = np.arange(max_depth + 1, dtype=float)
        depth = np.asarray(measured_depth, dtype=float)[..., None]
        within = np.minimum(i, depth)
        beyond = np.maximum(i - depth, 0.0)
        trend = within * (within - 1.0) / 2.0 + np.maximum(depth - 1.0, 0.0) * beyond
        gap = np.arange(1, max_depth + 1, dtype=float) - trained_depth[..., None]
        hinge = 0.25 * xp.log1p(xp.exp(gap / 0.25))
        lost = (hinge[..., None, :] * np.tril(np.ones((max_depth + 1, max_depth)), k=-1)
                ).sum(axis=-1)
        return xp.exp(-decay[..., None] * trend - deep_decay[..., None] * lost)

    pm.HalfNormal, pm.HalfCauchy = patched_half_normal, patched_half_cauchy
    if variant == "hinge_softplus":
        acceptance_model.depth_reliability_expr = softplus_hinge
    try:
        windows = counter_windows(read_counters(path))
        model = TokenAcceptanceModel()
        model.windows = windows
        out = []
        for seed in (1, 2):
            settings = SamplerSettings(draws=1000, tune=1000, chains=2, seed=seed,
                                       progress=False, target_accept=0.95)
            tree = (model.fit(windows, ["spread+depth"], settings) if seed == 1
                    else model.refit(["spread+depth"], settings=settings))
            out.append(int(tree["sample_stats"]["diverging"].values.sum()))
        return out
    finally:
        pm.HalfNormal, pm.HalfCauchy = half_normal, half_cauchy
        acceptance_model.depth_reliability_expr = reliability


def main() -> int:
    import tempfile

    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "eagle3_lengths.csv"
        TABLE.to_csv(path, index=False)
        for variant in sys.argv[1:] or VARIANTS:
            print(f"{variant:18s} divergent transitions, seeds 1 and 2: "
                  f"{fit_variant(variant, path)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
