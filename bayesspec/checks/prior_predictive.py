"""The prior predictive check: do the physics-informed priors admit the data (the share
of observed points inside the prior predictive intervals)?"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayesspec.bayes import get_model_class


def prior_predictive_check(data: pd.DataFrame, *, model: str = "hierarchical",
                           config: dict | None = None, draws: int = 500,
                           seed: int = 0, catalog=None) -> dict:
    """Share of observed log latencies inside the 50/90/99% prior predictive intervals."""
    import logging

    import pymc as pm

    latency_model = get_model_class(model)(config, catalog=catalog)
    pm_model = latency_model.prior_model(data)
    # PyMC logs its own "Sampling: [...]" line at INFO; the verdict below says what counts.
    pymc_log = logging.getLogger("pymc")
    level = pymc_log.level
    pymc_log.setLevel(logging.WARNING)
    try:
        with pm_model:
            prior = pm.sample_prior_predictive(draws=draws, random_seed=seed,
                                               var_names=["log_latency"])
    finally:
        pymc_log.setLevel(level)
    simulated = prior["prior_predictive"]["log_latency"].stack(
        sample=("chain", "draw")).transpose("sample", ...).values
    observed = np.log(latency_model.inputs.rows["latency_mean_s"].to_numpy(float))
    shares = {}
    for prob in (0.5, 0.9, 0.99):
        tail = (1 - prob) / 2
        lo, hi = np.quantile(simulated, [tail, 1 - tail], axis=0)
        shares[str(prob)] = float(np.mean((lo <= observed) & (observed <= hi)))
    return {"model": model, "draws": draws, "points": int(observed.size),
            "physics_priors": bool(getattr(latency_model, "physics", False)),
            "inside": shares, **prior_verdict(shares["0.99"], int(observed.size))}


#: The priors admit the data when at least this share of the points lies inside their
#: 99% prior predictive interval.
PRIOR_ADMITS = 0.95


def prior_verdict(inside_99: float, points: int) -> dict:
    """``admits`` and a ``verdict`` line from the share of points inside the 99% prior
    predictive interval."""
    if inside_99 >= PRIOR_ADMITS:
        return {"admits": True,
                "verdict": f"the priors admit the data: {inside_99:.0%} of the {points} "
                           "points lie inside the 99% prior predictive interval"}
    return {"admits": False,
            "verdict": f"PRIORS EXCLUDE THE DATA: only {inside_99:.0%} of the {points} points "
                       "lie inside the 99% prior predictive interval (at least "
                       f"{PRIOR_ADMITS:.0%} should): check the units (--units rpm|ms), the "
                       "verifier and GPU names (the catalog centres the priors), or fit a "
                       "model with wider priors (--model dense)"}
