"""Building blocks shared by the latency models: pooled priors and the likelihood."""

from __future__ import annotations

import numpy as np
from bayesspec.bayes.lazymodule import lazy_module

pm, pt = lazy_module("pymc"), lazy_module("pytensor.tensor")  # loaded on first use

from bayesspec.laws import (latency_expr, load_amplification_expr, load_elasticity_expr,
                    measured_load_amplification, prefill_fixed_part,
                    profile_chain_latency_expr, profile_concurrency_expr,
                    run_process_factor_expr, slot_queue_latency_expr, RUN_OWN_LENGTH)

#: How far below 1 the slot queue's rho is softly capped in a model (as x is by
#: :func:`soft_utilisation_cap`).
CAP_MARGIN = 1e-3


def pooled_normal(name: str, mean: float, scale: float, dim: str, size: int, *,
                  spread_scale: float | None = None, centred: bool = False):
    """A vector of group values partially pooled across ``size`` groups.

    With fewer than three groups the spread between groups cannot be learned and a
    mean-plus-spread form is a funnel (the classic source of divergences), so the groups
    then get independent priors with the population prior's location and scale.
    Centred for quantities each group's data pin down well (any number of groups);
    non-centred otherwise.
    """
    if size < 3:
        return pm.Normal(name, mean, scale, dims=dim)
    mu = pm.Normal(f"{name}_mean", mean, scale)
    tau = pm.HalfNormal(f"{name}_sd", spread_scale if spread_scale is not None else scale)
    # ``centred`` is for values every group's own data pin down (a group's C1 to a
    # percent): then the group values do not follow tau towards zero and the centred
    # form has no funnel however few the groups, while the non-centred one couples each
    # z to tau and mixes slowly (measured: benchmarks/sampler.py convergence, 4 groups).
    if centred:
        return pm.Normal(name, mu, tau, dims=dim)
    z = pm.Normal(f"{name}_z", 0.0, 1.0, dims=dim)
    return mu + tau * z


def soft_utilisation_cap(rps, c2, margin: float = 1e-3):
    """The per-point C2 with RPS*C2 smoothly capped below 1.

    Models whose C2 comes from trends (the hierarchical model) cannot keep every observed
    point below saturation by construction. Past ``1 - margin`` the remaining headroom
    ``1 - x`` is replaced by ``margin / (1 + (x - 1 + margin)/margin)``: continuous with a
    continuous slope, positive however far past the pole a draw goes (an exponential
    form underflows to zero there, and prior draws then give infinite latencies), so
    such a draw gets a finite, steeply worse likelihood instead of a non-finite one
    (which NUTS reports as a divergence). Below the cap the law is untouched.
    """
    utilisation = rps * c2
    edge = 1.0 - margin
    excess = pt.maximum(utilisation - edge, 0.0)
    capped = pt.where(utilisation < edge, utilisation,
                      1.0 - margin / (1.0 + excess / margin))
    return capped / rps


def profiled_point_c1(point_c1, point_c2, data: dict):
    """Each point's zero-load latency as its requests feel it: C1 plus the engine's
    decode-profile shift (bayesspec.data.decode_profile) where ``data`` holds one, else C1.
    The shift is the one at the self-consistent N of eq. (1) with the profile (one of the
    profile's linear pieces holds it), so that the fit's law is the one its answers use;
    the measured N's shift only where a draw has no root (past its ceiling)."""
    if "profile_knots" not in data:
        return point_c1
    group_index = data["group_index"]
    _, shift, found = profile_concurrency_expr(
        data["rps"][:, None], point_c1[:, None], point_c2[:, None],
        data["profile_knots"][group_index], data["profile_values"][group_index],
        data["profile_slopes"][group_index], xp=pt)
    return point_c1 + pt.where(found, shift, data["profile_shift"])


def _every_capped_group_in_chain(data: dict) -> bool:
    """Whether every group with a cap in the likelihood runs the decode profile's chain
    (read from the model's data when it is built; the groups do not change with it)."""
    has_cap = np.asarray(data["has_cap"].get_value()) > 0
    in_chain = np.asarray(data["has_chain"].get_value()) > 0
    return bool(np.all(in_chain[has_cap]))


def latency_likelihood(c1, c2, cfg: dict, data: dict, *, mean_latency=None, c2_point=None,
                       cap_utilisation: bool = False, group_load_noise: bool = False,
                       c1_log_shift=None, c2_log_shift=None, shift_points=None):
    """Record C1, C2 and the saturation rate per group, and add the latency likelihood.

    log L ~ Normal(log(C1/(1 - RPS*C2)), sigma) with
    sigma^2 = noise_base^2 + (noise_load * x/(1-x))^2 + se^2, x = RPS*C2: a relative
    error in the rate is amplified by x/(1-x) near saturation, where finite runs are also
    noisiest; se is the standard error of each measured mean (0 when unknown).
    A model whose mean latency is not eq. (1) (MoE) passes ``mean_latency`` and the
    effective per-point ``c2_point`` instead. ``data`` holds the model's ``pm.Data``
    (``LatencyModel.add_data``). When ``data`` holds a ``fit_mask`` (1 = fit, 0 = held
    out), the points with mask 0 leave the likelihood (a ``pm.Potential`` replaces the
    observed variable): leave-n-out folds then refit one compiled model by changing the
    mask only. ``group_load_noise``: the group noise factor (``group_noise_scale``)
    scales the load term too, and both per-group scales are recorded (``noise_base_group``,
    ``noise_load_group``) even when the factor is 1. ``c1_log_shift(mu, sigma, observed,
    weight)``: a hook that returns a log factor per group for ``c1``, built from the
    per-point log mean latency without it, the noise sd, the observations and the
    likelihood weight of each point (the fit mask, or 1); the hierarchical model uses it
    to reparameterise its cell deviations around their conditional posterior.
    ``c2_log_shift(mu, sigma, amplification, observed, weight)``: the same for a log
    factor of ``c2``, given everything at the unshifted ``c2`` (``amplification`` is
    d log L / d log C2 there); it is applied before ``c1_log_shift``.
    When ``data`` holds ``cap`` and ``has_cap`` (per group: the engine's concurrency cap,
    :func:`bayesspec.laws.concurrency_cap`), eq. (1)'s mean latency becomes the slot
    queue's (:func:`bayesspec.laws.slot_queue_latency_expr`) in the groups that have one,
    and the load term of the noise its elasticity; the hooks below still see eq. (1) (they
    only centre a reparameterisation, which stays exact).
    ``cfg["noise_load_at"]`` "measured" (an option of eq. (1)'s models) reads the load
    term's amplification as the lesser of the curve's and the measured latency's,
    L/C1 - 1 (:func:`bayesspec.laws.measured_load_amplification`); a law passed as
    ``mean_latency`` keeps the curve's.
    ``shift_points``: None (the hooks see every point) or ``(index, multiplier)``, numpy
    arrays: the hooks see only the points ``index``, with their weights times
    ``multiplier``; the hierarchical model passes a fixed subsample of each cell so its
    per-cell sums cost the same however many rates a sweep has.
    """
    group_index, rps = data["group_index"], data["rps"]
    own_law = mean_latency is not None
    # Log-normal, not half-normal: a prior with mass at zero lets the posterior reach a
    # noise-free neck where the few low-load points (whose only error is their tiny
    # standard error) make the likelihood razor sharp: a funnel, and the divergences of
    # one-sweep fits. Real measured means always scatter by some tenths of a percent.
    noise_base = pm.LogNormal("noise_base", np.log(cfg["noise_base_median"]),
                              cfg["noise_log_sd"])
    noise_load = pm.LogNormal("noise_load", np.log(cfg["noise_load_median"]),
                              cfg["noise_log_sd"])
    # A model can also ask for the cap through ``data`` (it passes through model hooks,
    # e.g. the MoE split, that do not know about it).
    capped = cap_utilisation or data.get("cap_utilisation", False)
    given_c2_point = c2_point is not None

    def per_point(c2, select=None):
        if given_c2_point:
            point = c2_point
        else:
            point = c2[group_index if select is None else select(group_index)]
        at = rps if select is None else select(rps)
        return soft_utilisation_cap(at, point) if capped else point

    if cfg.get("group_noise_scale") or group_load_noise:
        # Misfit differs between groups (one sweep bends away from the law, the next does
        # not): each group's base noise is the shared one times a log-normal factor of a
        # fixed spread (a learned spread would be a funnel with few points per group).
        factor = (pt.exp(cfg["group_noise_scale"]
                         * pm.Normal("noise_group_z", 0.0, 1.0, dims="group"))
                  if cfg.get("group_noise_scale") else pt.ones_like(c2))
        noise_base = pm.Deterministic("noise_base_group", noise_base * factor,
                                      dims="group")[group_index]
        if group_load_noise:
            noise_load = pm.Deterministic("noise_load_group", noise_load * factor,
                                          dims="group")[group_index]

    run_shift = None
    if "run_sd" in data:
        # One arrival pattern replayed at every rate: each point's sampling error as one
        # run (laws.run_mean_log_sd) is ``run_effect_share`` of its variance a sweep-wide
        # effect (non-centred, in units of that sd), the rest the point's own, in place of
        # cv/sqrt(n) (benchmarks/run_effect.py).
        # Of that shared part, ``run_effect_common_share`` is one draw for every sweep of
        # the file: one seed serves them all (Vidur, a fixed-seed GuideLLM campaign), and
        # its bursts load every sweep alike.
        share = float(cfg["run_effect_share"])
        common = cfg.get("run_effect_common_share", 0.0)
        common = share if common == "all" else min(float(common), share)
        effect = 0.0
        if common > 0:
            effect = np.sqrt(common) * pm.Normal("run_effect_common_z", 0.0, 1.0)
        if share - common > 0:
            effect = effect + np.sqrt(share - common) * pm.Normal("run_effect_z", 0.0, 1.0,
                                                                  dims="group")
        run_effect = pm.Deterministic("run_effect", effect * pt.ones_like(c2), dims="group")
        run_shift = data["run_sd"] * run_effect[group_index]
        own_error = np.sqrt(1.0 - share) * data["run_sd"]
        if "run_own_layout" in data:
            # the point's own part as a process along the sweep's rates
            # (laws.run_process_factor), less its independent nugget
            nugget = float(cfg.get("run_own_nugget", 0.0))
            layout = data["run_own_layout"]
            if cfg["run_own_length"] == "learned":
                length = pm.LogNormal("run_own_length", np.log(RUN_OWN_LENGTH), 1.0)
                factor = run_process_factor_expr(layout["distance"], layout["lower"],
                                                 layout["gap"], length, xp=pt)
            else:
                factor = run_process_factor_expr(layout["distance"], layout["lower"],
                                                 layout["gap"], float(cfg["run_own_length"]))
            process = pm.Deterministic(
                "run_own", pt.dot(factor, pm.Normal("run_own_z", 0.0, 1.0, dims="point")),
                dims="point")
            run_shift = run_shift + np.sqrt((1.0 - share) * (1.0 - nugget)) * (
                data["run_sd"] * process)
            own_error = np.sqrt((1.0 - share) * nugget) * data["run_sd"]
    else:
        own_error = data["log_se"]

    def noise_sd(amplification, select=None):
        def at(values):  # noise scales are scalars, or per point with group noise
            return values if select is None or values.ndim == 0 else select(values)
        return pt.sqrt(at(noise_base)**2 + (at(noise_load) * amplification) ** 2
                       + at(own_error) ** 2)

    weight = (data["fit_mask"] if "fit_mask" in data
              else pt.ones_like(data["observed_log_latency"]))
    if shift_points is None:
        def select(values):
            return values
        shift_weight = weight
    else:
        shift_index, multiplier = shift_points

        def select(values):
            return values[shift_index]
        shift_weight = select(weight) * multiplier
    if c2_log_shift is not None:
        if mean_latency is not None or given_c2_point:
            raise ValueError("c2_log_shift needs eq. (1)'s mean latency")
        unshifted = per_point(c2, select)
        amplification = load_amplification_expr(select(rps), unshifted)
        c2 = c2 * pt.exp(c2_log_shift(
            pt.log(latency_expr(select(rps), c1[select(group_index)], unshifted)),
            noise_sd(amplification, select), amplification,
            select(data["observed_log_latency"]), shift_weight))
    c2 = pm.Deterministic("C2", c2, dims="group")
    pm.Deterministic("saturation_rps", 1.0 / c2, dims="group")
    c2_point = per_point(c2)
    amplification = load_amplification_expr(rps, c2_point)
    sigma = noise_sd(amplification)
    if c1_log_shift is not None:
        if mean_latency is not None:
            raise ValueError("c1_log_shift needs eq. (1)'s mean latency")
        if shift_points is None:
            at_c2, at_sigma = c2_point, sigma
        else:
            at_c2 = per_point(c2, select)
            at_sigma = noise_sd(load_amplification_expr(select(rps), at_c2), select)
        c1 = c1 * pt.exp(c1_log_shift(
            pt.log(latency_expr(select(rps), c1[select(group_index)], at_c2)), at_sigma,
            select(data["observed_log_latency"]), shift_weight))
    c1 = pm.Deterministic("C1", c1, dims="group")
    point_c1 = profiled_point_c1(c1[group_index], c2_point, data)
    if mean_latency is None and "cap" in data:
        # The engine's concurrency cap (groups without one get eq. (1) exactly): the
        # latency and its sensitivity to the rate follow the slot queue.
        point_cap = data["cap"][group_index]
        has_cap = data["has_cap"][group_index] > 0
        point_wait = data["wait_scale"][group_index]

        def slot_queue(at):
            return pt.where(has_cap,
                            slot_queue_latency_expr(at, point_c1, c2_point, point_cap, xp=pt,
                                                    wait_scale=point_wait,
                                                    soft_margin=CAP_MARGIN),
                            latency_expr(at, point_c1, c2_point))

        in_chain = None
        if "chain_extra" in data:
            # the decode profile inside the slot queue's chain (profile_law "chain"):
            # the groups' own C1, the profile's seconds at each n in flight; its
            # elasticity in closed form (one pass over the chain instead of three)
            batched = {}
            if cfg.get("prefill_batching") is True:
                # waiting prompts share one prefill iteration: the stall per arrival
                # falls with the rate (laws.batched_prefill_stall_expr)
                batched = {"prefill_fixed": prefill_fixed_part(
                               c2_point, data["chain_decode_one"][group_index], xp=pt,
                               power=float(cfg.get("prefill_fixed_power", 1.0))),
                           "decode_s": data["chain_decode_s"][group_index]}
            chain, chain_elasticity = profile_chain_latency_expr(
                rps, c1[group_index], c2_point, point_cap,
                data["chain_extra"][group_index], data["chain_valid"][group_index], xp=pt,
                wait_scale=point_wait, soft_margin=CAP_MARGIN, elasticity=True, **batched)
            in_chain = data["has_chain"][group_index] > 0
        if in_chain is not None and _every_capped_group_in_chain(data):
            # no group needs the slot queue alone: leave its special functions out
            mean_latency = pt.where(has_cap, chain, latency_expr(rps, point_c1, c2_point))
            elasticity = chain_elasticity
        else:
            mean_latency = slot_queue(rps)
            elasticity = load_elasticity_expr(slot_queue, rps, xp=pt)
            if in_chain is not None:
                mean_latency = pt.where(in_chain, chain, mean_latency)
                elasticity = pt.where(in_chain, chain_elasticity, elasticity)
        amplification = pt.where(has_cap, elasticity, amplification)
        sigma = noise_sd(amplification)
    if mean_latency is None:
        mean_latency = latency_expr(rps, point_c1, c2_point)
    if not own_law and cfg.get("noise_load_at", "curve") == "measured":
        # The rate error's amplification, at most what the measured latency shows: on the
        # curve alone, a draw that puts its ceiling just above a group's top rate
        # inflates that point's noise and so escapes it (the top of a sweep near the cap
        # stopped constraining the fit); at the measurement alone, a C1 near zero
        # inflates every point's (a far mode). The lesser of the two allows neither.
        # docs/findings/decode-profile-law.md, "The Bayesian fit lost R^2 to its noise
        # term, not to the law" (measured 2026-12-05).
        sigma = noise_sd(pt.minimum(amplification, measured_load_amplification(
            pt.exp(data["observed_log_latency"]), point_c1, xp=pt)))
    student_t = cfg.get("likelihood", "normal") == "student_t"
    if student_t:
        # nu - 1 ~ Gamma(2, 0.1): mean 21, 5% below 4.6; heavy tails only if the data ask.
        nu = pm.Deterministic("nu", 1.0 + pm.Gamma("nu_minus_one", 2.0, 0.1))
    mu = pt.log(mean_latency)
    if run_shift is not None:
        mu = mu + run_shift
    if "fit_mask" in data:
        error = (pm.StudentT.dist(nu=nu, mu=mu, sigma=sigma) if student_t
                 else pm.Normal.dist(mu, sigma))
        pointwise = pm.logp(error, data["observed_log_latency"])
        return pm.Potential("log_latency_fitted",
                            pt.sum(pt.where(data["fit_mask"] > 0, pointwise, 0.0)))
    if student_t:
        return pm.StudentT("log_latency", nu=nu, mu=mu, sigma=sigma,
                           observed=data["observed_log_latency"], dims="point")
    return pm.Normal("log_latency", mu, sigma, observed=data["observed_log_latency"],
                     dims="point")
