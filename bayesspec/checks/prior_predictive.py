"""The prior predictive check: do the priors admit the data (the share of observed points
inside the prior predictive intervals)?

A prior draw can put a point past its ceiling (eq. (1)'s pole or the engine's cap): its
latency there is not a finite number. Such draws are counted and said, and the intervals
are those of the finite draws; a point without one finite draw has no interval and is
not counted either way (never "outside").
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayesspec.bayes import get_model_class

#: The central prior predictive intervals a point is checked against.
PRIOR_LEVELS = (0.5, 0.9, 0.99)


def prior_predictive_check(data: pd.DataFrame, *, model: str = "hierarchical",
                           config: dict | None = None, draws: int = 500,
                           seed: int = 0, catalog=None) -> dict:
    """Share of observed log latencies inside the 50/90/99% prior predictive intervals
    of the finite draws (:func:`interval_shares`), with how many draws were not finite,
    and a verdict whose advice fits ``model`` (:func:`prior_verdict`)."""
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
    shares = interval_shares(simulated, observed)
    physics = bool(getattr(latency_model, "physics", False))
    return {"model": model, "draws": draws, "points": int(observed.size),
            "physics_priors": physics, **shares,
            **prior_verdict(shares["inside"]["0.99"], shares["judged_points"], model=model,
                            physics=physics, config=latency_model.config)}


def interval_shares(simulated: np.ndarray, observed: np.ndarray,
                    levels=PRIOR_LEVELS) -> dict:
    """The share of ``observed`` (n,) inside the central intervals of the finite draws of
    ``simulated`` (S, n) at each level (``inside``, keyed "0.5", ...), over the points
    that have a finite draw (``judged_points``), and the draws that were not finite
    (``non_finite``: ``draws`` of ``of``, at ``points`` points; ``points_without_finite``
    points have none and no interval)."""
    simulated = np.asarray(simulated, dtype=float)
    observed = np.asarray(observed, dtype=float)
    finite = np.isfinite(simulated)
    judged = finite.any(axis=0) & np.isfinite(observed)
    values = np.where(finite, simulated, np.nan)[:, judged]
    inside = {}
    for prob in levels:
        tail = (1.0 - prob) / 2.0
        if judged.any():
            lo, hi = np.nanquantile(values, [tail, 1.0 - tail], axis=0)
            point = observed[judged]
            inside[str(prob)] = float(np.mean((lo <= point) & (point <= hi)))
        else:
            inside[str(prob)] = float("nan")
    bad = ~finite
    return {"inside": inside, "judged_points": int(judged.sum()),
            "non_finite": {"draws": int(bad.sum()), "of": int(bad.size),
                           "points": int(bad.any(axis=0).sum()),
                           "points_without_finite": int((~finite.any(axis=0)).sum())}}


#: The priors admit the data when at least this share of the points lies inside their
#: 99% prior predictive interval.
PRIOR_ADMITS = 0.95


def prior_verdict(inside_99: float, points: int, *, model: str | None = None,
                  physics: bool = False, config: dict | None = None) -> dict:
    """``admits`` and a ``verdict`` line from the share of points inside the 99% prior
    predictive interval; when the priors exclude the data, the advice is for the
    ``model`` the check ran (never to switch to the model it is)."""
    if not np.isfinite(inside_99) or points == 0:
        return {"admits": False,
                "verdict": "NO PRIOR INTERVAL: no point has a finite prior draw (every "
                           "draw puts every point past saturation): check the units "
                           "(--units rpm|ms)"}
    if inside_99 >= PRIOR_ADMITS:
        return {"admits": True,
                "verdict": f"the priors admit the data: {inside_99:.0%} of the {points} "
                           "points lie inside the 99% prior predictive interval"}
    return {"admits": False,
            "verdict": f"PRIORS EXCLUDE THE DATA: only {inside_99:.0%} of the {points} points "
                       "lie inside the 99% prior predictive interval (at least "
                       f"{PRIOR_ADMITS:.0%} should): check the units (--units rpm|ms), "
                       + _prior_advice(model, physics, config or {})}


def _prior_advice(model: str | None, physics: bool, config: dict) -> str:
    """What else to try when the priors of ``model`` exclude the data."""
    from bayesspec.bayes import DenseLatencyModel, HierarchicalLatencyModel

    model_class = get_model_class(model) if model else None
    if model_class is not None and issubclass(model_class, HierarchicalLatencyModel):
        if physics:
            return ("the verifier and GPU names (the catalog centres the priors), or try "
                    "without the roofline priors (--option physics_priors=off) or with "
                    "each configuration's own C1, C2 (--model dense)")
        return "or try each configuration's own C1, C2 (--model dense)"
    if model_class is not None and issubclass(model_class, DenseLatencyModel):
        default = float(DenseLatencyModel.default_config["log_c1_scale"])
        scale = float(config.get("log_c1_scale", default))
        wider = (f"log_c1_scale={2 * scale:g}, now {scale:g}" if scale >= default else
                 f"log_c1_scale={default:g}, the default, now {scale:g}")
        return ("and that each group's rows are one configuration: this model's priors are "
                "centred on the file's own lowest-rate latencies, so data outside them "
                f"point at the data rather than the priors (a wider C1 prior: --option {wider})")
    if model_class is not None:
        return ("or try each configuration's own C1, C2 (--model dense), whose priors are "
                "centred on the data: if they admit it, this model's shared structure is "
                "what excludes it")
    return "and the verifier and GPU names (the catalog centres the priors)"
