"""Sparse (MoE) verifiers inside the speculative model: eq. (4) on top of eq. (3).

The speculative model gives every group its costs C1, C2 (eq. 3 for SD groups, the dense
baseline's own for k = 0). For a sparse verifier those are read as the *fully covered*
costs (every expert touched, the high-load limit) and split with learned saturating
shares, as in :mod:`bayesspec.bayes.moe`:

    C1u = (1 - s1) C1, C1s = s1 C1, C2u = (1 - s2) C2, C2s = s2 C2,
    L = (C1u + phi*C1s) / (1 - RPS*(C2u + phi*C2s)),  phi = 1 - (1 - m/M)^T,
    T = offset + RPS*L*tokens  (tokens 1 when dense, k or k + 1 per verification)

solved self-consistently in the graph by :func:`bayesspec.laws.moe_latency_expr` (the
numpy :func:`bayesspec.laws.moe_latency` gives the same L for decisions).

Shares are per *curve*: one pair per dense baseline and one per SD setup (shared by all
its (alpha, k)). Why not per group: the share is a property of what the verifier streams
(its experts) relative to what it does not (attention, KV cache, the dense drafter), which
an (alpha, k) hardly changes, and per-group shares would cost two more weakly identified
parameters for every configuration. Why not per baseline: the drafter's cost is dense,
so SD rows have a smaller expert share than the dense rows of the same baseline.

Recorded: ``C1u``, ``C1s``, ``C2u``, ``C2s`` (dims group); ``share_C1s``, ``share_C2s``
(dims setup: the SD setup's shares) and ``share_C1s_dense``, ``share_C2s_dense`` (dims
setup: its dense baseline's, NaN without one); ``C1`` is the zero-load latency
C1u + phi(offset)*C1s, ``C2`` the fully covered C2 (1/C2 is the saturation rate);
``c1p..c2d`` and ``C1_dense``, ``C2_dense`` stay the fully covered costs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from bayesspec.bayes.lazymodule import lazy_module

pm, pt = lazy_module("pymc"), lazy_module("pytensor.tensor")  # loaded on first use

from bayesspec.errors import BadInput
from bayesspec.laws import expert_coverage_expr, moe_latency_expr
from bayesspec.bayes.moe import MoELatencyModel, tokens_per_request
from bayesspec.bayes.priors import latency_likelihood, soft_utilisation_cap



def _group_experts(rows: pd.DataFrame, group_index: np.ndarray, n_groups: int):
    """Expert counts (m, M) per group from its first row, NaN where unknown."""
    values = []
    for column in ("experts_active", "experts_total"):
        if column in rows.columns:
            column_values = pd.to_numeric(rows[column], errors="coerce").astype(float)
            column_values = column_values.to_numpy(float, na_value=np.nan)
        else:
            column_values = np.full(len(rows), np.nan)
        per_group = np.full(n_groups, np.nan)
        for g in range(n_groups):
            per_group[g] = column_values[np.flatnonzero(group_index == g)[0]]
        values.append(per_group)
    return values


def annotate(inputs, setups: pd.DataFrame, config: dict, source=None) -> None:
    """Mark sparse-verifier groups and setups (``moe_split``), with m, M and tokens."""
    mode = config["moe_split"]
    groups = inputs.groups
    m, M = _group_experts(inputs.rows, inputs.group_index, len(groups))
    # m = M touches every expert at any load: nothing to split
    sparse = np.isfinite(m) & np.isfinite(M) & (m > 0) & (m < M)
    if mode == "never":
        sparse[:] = False
    groups["moe_split"] = sparse
    groups["experts_active"] = np.where(sparse, m, np.nan)
    groups["experts_total"] = np.where(sparse, M, np.nan)
    groups["tokens_per_request"] = tokens_per_request(groups["k"].to_numpy(),
                                                      config["moe_verify_tokens"])
    if len(setups):
        first = {s: g for g, s in reversed(list(enumerate(groups["setup"])))}
        pick = np.array([first[s] for s in setups["setup"]])
        setups["moe_split"] = sparse[pick]
        setups["experts_active"] = groups["experts_active"].to_numpy()[pick]
        setups["experts_total"] = groups["experts_total"].to_numpy()[pick]


def uses_split(inputs) -> bool:
    return "moe_split" in inputs.groups.columns and bool(inputs.groups["moe_split"].any())


def split_likelihood(c1, c2, cfg: dict, data: dict, inputs):
    """Eq. (4) with the speculative model's C1, C2 as the fully covered costs."""
    groups = inputs.groups
    setups = inputs.extras["setups"]
    n_groups, n_setups = len(groups), len(setups)
    is_sd = groups["is_sd"].to_numpy(bool)
    sparse = groups["moe_split"].to_numpy(bool)
    dense_idx = np.flatnonzero(~is_sd)
    # Curves as in the speculative model's "curve" coordinate: dense groups, then setups.
    position = np.full(n_groups, -1)
    position[dense_idx] = np.arange(len(dense_idx))
    curve = np.where(is_sd, len(dense_idx) + groups["setup_index"].to_numpy(int), position)
    n_curves = len(dense_idx) + n_setups
    curve_labels = groups["label"].iloc[dense_idx].tolist() + setups["setup"].tolist()
    split_curves = np.unique(curve[sparse])

    model = pm.modelcontext(None)
    model.add_coord("moe_curve", [curve_labels[c] for c in split_curves])
    scale = cfg["moe_share_logit_scale"]

    def shares(name):
        logit = pm.Normal(f"logit_{name}", 0.0, scale, dims="moe_curve")
        return pt.set_subtensor(pt.zeros(n_curves)[split_curves], pm.math.sigmoid(logit))

    share_c1, share_c2 = shares("share_C1s"), shares("share_C2s")
    if n_setups:
        sd_curves = len(dense_idx) + np.arange(n_setups)
        dense_group = setups["dense_group"].to_numpy(int)
        has_dense = dense_group >= 0
        dense_curve = position[np.maximum(dense_group, 0)]
        for name, share in (("share_C1s", share_c1), ("share_C2s", share_c2)):
            pm.Deterministic(name, share[sd_curves], dims="setup")
            pm.Deterministic(f"{name}_dense", pt.where(has_dense, share[dense_curve], np.nan),
                             dims="setup")
    s1, s2 = share_c1[curve], share_c2[curve]
    c1u = pm.Deterministic("C1u", c1 * (1 - s1), dims="group")
    c1s = pm.Deterministic("C1s", c1 * s1, dims="group")
    c2u = pm.Deterministic("C2u", c2 * (1 - s2), dims="group")
    c2s = pm.Deterministic("C2s", c2 * s2, dims="group")

    # Groups of dense verifiers (no split) get m = 0: phi = 0, eq. (1) exactly.
    m = pt.as_tensor_variable(np.where(sparse, groups["experts_active"].to_numpy(float), 0.0))
    M = pt.as_tensor_variable(np.where(sparse, groups["experts_total"].to_numpy(float), 1.0))
    tpr = pt.as_tensor_variable(groups["tokens_per_request"].to_numpy(float))
    offset = float(cfg["moe_token_offset"])
    g, rps = data["group_index"], data["rps"]
    c2u_point, c2s_point = c2u[g], c2s[g]
    if data.get("cap_utilisation", False):
        # Models whose C2 comes from trends (hierarchical) can put a point past the fully
        # covered saturation rate, where eq. (4) has no fixed point (the solve gives a
        # negative or NaN latency: a NaN log-density at a third of the prior draws of the
        # bundled MoE data). Capping the fully covered C2 and scaling both parts by the
        # same factor keeps every phi's C2 below the pole; the cap is applied here, once,
        # so the likelihood's noise term sees the same C2 as the mean.
        full = c2u_point + c2s_point
        scale = soft_utilisation_cap(rps, full) / full
        c2u_point, c2s_point = c2u_point * scale, c2s_point * scale
        data = {**data, "cap_utilisation": False}
    mean_latency = moe_latency_expr(rps, c1u[g], c1s[g], c2u_point, c2s_point, m[g], M[g],
                                    tpr[g], token_offset=offset, xp=pt)
    phi = expert_coverage_expr(offset + rps * mean_latency * tpr[g], m[g], M[g], xp=pt)
    zero_load_c1 = c1u + expert_coverage_expr(offset, m, M, xp=pt) * c1s
    return latency_likelihood(zero_load_c1, c2, cfg, data, mean_latency=mean_latency,
                              c2_point=c2u_point + phi * c2s_point)
