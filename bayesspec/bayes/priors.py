"""Prior building blocks shared by the latency models."""

from __future__ import annotations

import pymc as pm


def pooled_normal(name: str, mean: float, scale: float, dim: str, size: int, *,
                  spread_scale: float | None = None, centred: bool = False):
    """A vector of group values partially pooled across ``size`` groups.

    With fewer than three groups the spread between groups cannot be learned and a
    mean-plus-spread form is a funnel (the classic source of divergences), so the groups
    then get independent priors with the population prior's location and scale.
    Centred for quantities each group's data pin down well; non-centred otherwise.
    """
    if size < 3:
        return pm.Normal(name, mean, scale, dims=dim)
    mu = pm.Normal(f"{name}_mean", mean, scale)
    tau = pm.HalfNormal(f"{name}_sd", spread_scale if spread_scale is not None else scale)
    if centred:
        return pm.Normal(name, mu, tau, dims=dim)
    z = pm.Normal(f"{name}_z", 0.0, 1.0, dims=dim)
    return mu + tau * z
