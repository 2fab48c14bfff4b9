"""The mean latency of a server under load, and what speculative decoding does to it.

Eq. (1), L = C1/(1 - RPS*C2), with its second-order and two-regime (roofline) variants;
the load factor L/C1 and the elasticity d log L / d log RPS that the noise model reads;
eq. (2)'s speedup and crossover rate; eq. (3)'s effective costs from the six cycle
coefficients (docs/laws.md, eqs. (1) to (3)). The ``*_expr`` functions are the bare
algebra; the others are the public numpy functions, ``inf`` at or past saturation and
``nan`` where there is no crossover.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from bayesspec.laws._numeric import _as_float
from bayesspec.laws.acceptance import expected_accepted, expected_accepted_expr

__all__ = ["latency_expr", "curved_latency_expr", "two_regime_latency_expr",
           "load_factor_expr", "load_amplification_expr", "measured_load_amplification",
           "load_elasticity_expr", "effective_costs_expr", "costs_for_acceptance_length",
           "latency", "curved_latency", "two_regime_latency", "effective_costs", "speedup",
           "crossover_rps"]


def latency_expr(rps, c1, c2):
    """Eq. (1): L = C1 / (1 - RPS*C2); no saturation handling (the caller constrains it)."""
    return c1 / (1.0 - rps * c2)


def curved_latency_expr(rps, c1, c2, bend):
    """The second-order law L = C1 (1 + bend*x)/(1 - x), x = RPS*C2: the batch-1 latency
    C1 is reached only at zero load, and the cost of a step grows with the batch by more
    (bend > 0) or less (-1 < bend < 0) than eq. (1) says. bend = 0 is eq. (1)."""
    utilisation = rps * c2
    return c1 * (1.0 + bend * utilisation) / (1.0 - utilisation)


def two_regime_latency_expr(rps, c1m, c2m, c1c, c2c, sharpness=12.0):
    """The roofline's two regimes, each a law of eq. (1): a step costs the larger of its
    memory time (C1m + C2m*B: weights, KV reads) and its compute time (C1c + C2c*B), so
    with B = RPS*L (Little) the mean latency is the larger of the two laws' latencies,
    max(C1m/(1 - RPS*C2m), C1c/(1 - RPS*C2c)) (the least L with L >= C1_r + C2_r*RPS*L
    for both r). The max is smoothed as a p-norm of sharpness p (at the crossover the
    p-norm is 2^(1/p) above either: 6% at p = 12), which also matches a step's gradual
    change of regime. One law when either branch never leads."""
    memory = c1m / (1.0 - rps * c2m)
    compute = c1c / (1.0 - rps * c2c)
    top = memory + compute  # scale out before the power: latencies^12 overflow nothing
    return top * ((memory / top) ** sharpness + (compute / top) ** sharpness) ** (1.0 / sharpness)


def load_factor_expr(rps, c2):
    """L/C1 of eq. (1): 1/(1 - RPS*C2), how much load lengthens a request (1 at zero
    load, diverging at the saturation rate). The load factor of any mean law L(RPS) is
    L(RPS)/C1; a latency summary grows as a power of it
    (:func:`~bayesspec.laws.percentile_latency_expr`)."""
    return 1.0 / (1.0 - rps * c2)


def load_amplification_expr(rps, c2):
    """x/(1-x) with x = RPS*C2: how a relative error in RPS is amplified in log L."""
    utilisation = rps * c2
    return utilisation / (1.0 - utilisation)


def measured_load_amplification(latency, c1, xp: ModuleType = np):
    """x/(1-x) read off a measured mean latency: eq. (1) gives L/C1 = 1/(1-x), so
    x/(1-x) = L/C1 - 1 (floored at 0 for a point measured below its zero-load latency).
    ``c1`` is the point's zero-load latency (with the decode profile, C1 plus its shift)."""
    return xp.maximum(latency / c1 - 1.0, 0.0)


def load_elasticity_expr(latency_of, rps, step: float = 1e-4, xp: ModuleType = np):
    """d log L / d log RPS of a latency law ``latency_of(rps)`` by a central difference
    in log RPS: how a relative error in the measured rate moves log L. For eq. (1) it is
    x/(1-x) (:func:`load_amplification_expr`); laws without a closed form (the capped
    law) use this. First derivatives only, so the model's gradient needs no second
    derivative of the law's special functions."""
    up = xp.log(latency_of(rps * np.exp(step)))
    down = xp.log(latency_of(rps * np.exp(-step)))
    return (up - down) / (2.0 * step)


def effective_costs_expr(alpha, k, decode_tokens, c1p, c1v, c1d, c2p, c2v, c2d,
                         xp: ModuleType = np):
    """Eq. (3): per-request costs of speculative decoding from six cycle coefficients."""
    return costs_for_acceptance_length(expected_accepted_expr(alpha, k, xp=xp), k,
                                       decode_tokens, c1p, c1v, c1d, c2p, c2v, c2d)


def costs_for_acceptance_length(length, k, decode_tokens, c1p, c1v, c1d, c2p, c2v, c2d):
    """Eq. (3) given the tokens committed per cycle E directly (i.i.d. acceptance gives
    E = expected_accepted(alpha, k); acceptance by position gives
    :func:`~bayesspec.laws.expected_accepted_positions_expr`): g/E cycles of a
    verification and k drafts."""
    cycles = decode_tokens / length
    c1_eff = c1p + cycles * (c1v + k * c1d)
    c2_eff = c2p + cycles * (c2v + k * c2d)
    return c1_eff, c2_eff


def latency(rps, c1, c2):
    """Mean latency C1/(1 - rps*C2); ``inf`` where rps*C2 >= 1 (at or past saturation)."""
    rps, c1, c2 = _as_float(rps, c1, c2)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = latency_expr(rps, c1, c2)
    return np.where(rps * c2 >= 1.0, np.inf, value)[()]


def curved_latency(rps, c1, c2, bend):
    """:func:`curved_latency_expr` with ``inf`` at or past saturation (rps*C2 >= 1)."""
    rps, c1, c2, bend = _as_float(rps, c1, c2, bend)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = curved_latency_expr(rps, c1, c2, bend)
    return np.where(rps * c2 >= 1.0, np.inf, value)[()]


def two_regime_latency(rps, c1m, c2m, c1c, c2c, sharpness=12.0):
    """:func:`two_regime_latency_expr` with ``inf`` at or past either branch's
    saturation."""
    rps, c1m, c2m, c1c, c2c, sharpness = _as_float(rps, c1m, c2m, c1c, c2c, sharpness)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        value = two_regime_latency_expr(rps, c1m, c2m, c1c, c2c, sharpness)
    return np.where(rps * np.maximum(c2m, c2c) >= 1.0, np.inf, value)[()]


def effective_costs(alpha, k, decode_tokens, c1p, c1v, c1d, c2p, c2v, c2d):
    """(C1_eff, C2_eff) of eq. (3) for acceptance ``alpha``, draft length ``k``."""
    arrays = _as_float(alpha, k, decode_tokens, c1p, c1v, c1d, c2p, c2v, c2d)
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha, k = arrays[:2]
        c1_eff, c2_eff = costs_for_acceptance_length(expected_accepted(alpha, k), k,
                                                     *arrays[2:])
    return c1_eff[()], c2_eff[()]


def speedup(rps, c1_dense, c2_dense, c1_sd, c2_sd):
    """L_dense / L_sd at ``rps`` (eq. 2).

    Past the SD saturation rate the speedup is 0 (SD latency is infinite); past the
    dense saturation rate it is ``inf``; past both it is ``nan``.
    """
    l_dense = latency(rps, c1_dense, c2_dense)
    l_sd = latency(rps, c1_sd, c2_sd)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.asarray(l_dense / l_sd, dtype=float)
    return ratio[()]


def crossover_rps(c1_dense, c2_dense, c1_sd, c2_sd):
    """RPS* at which speedup = 1, or ``nan`` when there is none below saturation.

    r* = (C1R - 1)/(C1R - C2R) with r = RPS*C2_dense; the crossover is real only where
    0 < r* < 1 (below dense saturation) and r*C2R < 1 (below SD saturation).
    """
    c1_dense, c2_dense, c1_sd, c2_sd = _as_float(c1_dense, c2_dense, c1_sd, c2_sd)
    with np.errstate(divide="ignore", invalid="ignore"):
        c1_ratio = c1_sd / c1_dense
        c2_ratio = c2_sd / c2_dense
        r_star = (c1_ratio - 1.0) / (c1_ratio - c2_ratio)
        valid = (r_star > 0.0) & (r_star < 1.0) & (r_star * c2_ratio < 1.0) & (c1_ratio != c2_ratio)
        value = r_star / c2_dense
    return np.where(valid, value, np.nan)[()]
