"""The pointwise log-likelihood of a fit, for PSIS-LOO and model comparison."""

from __future__ import annotations

import xarray as xr

def add_log_likelihood(fit):
    """Add the pointwise log-likelihood group to a Fit (for PSIS-LOO and az.compare)."""
    import pymc as pm

    if "log_likelihood" not in fit.tree.children:
        integrated = fit.model().integrated_log_likelihood(fit)
        if integrated is not None:
            fit.tree["log_likelihood"] = xr.DataTree(integrated)
    if "log_likelihood" not in fit.tree.children:
        pm_model = fit.model().build(fit.data)
        pointwise = pm.compute_log_likelihood(fit.tree, model=pm_model,
                                              var_names=["log_latency"],
                                              extend_inferencedata=False, progressbar=False)
        fit.tree["log_likelihood"] = xr.DataTree(pointwise)
    return fit
