"""Sparse mixture-of-experts verifiers: the covered/saturated split of eq. (4).

Per group (configuration) the costs split into an uncovered part and an increment that
grows with expert coverage phi(T) = 1 - (1 - m/M)^T:

    L = (C1u + phi*C1s) / (1 - RPS*(C2u + phi*C2s)),   T = offset + RPS*L*tokens

where ``tokens`` is 1 for plain decoding and, for an SD verifier, k (the paper) or k + 1
(every verification also carries the verifier's own token). phi depends on L, so the
likelihood uses the self-consistent L solved inside the graph
(:func:`bayesspec.laws.moe_latency_expr`, the same equation as
:func:`bayesspec.laws.moe_latency` used for predictions), never the observed L.

Parameterisation: totals and shares. ``C2u + C2s = u / rps_max`` with u in (0, 1), so
the fully covered (highest-cost) law is still below saturation at every observed point;
``C1s/(C1u + C1s)`` and ``C2s/(C2u + C2s)`` are shares in (0, 1).

Reported per group: ``C1`` = the zero-load latency (C1u + phi(offset)*C1s) and
``C2`` = C2u + C2s (1/C2 is the saturation rate, where every expert is touched).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from bayesspec.bayes.lazymodule import lazy_module

pm, pt = lazy_module("pymc"), lazy_module("pytensor.tensor")  # loaded on first use

from bayesspec.data import included
from bayesspec.errors import BadInput
from bayesspec.laws import (expert_coverage_expr,
                    moe_latency_expr, verification_tokens)
from bayesspec.prediction import MoECurve
from bayesspec.bayes.base import COMMON_CONFIG, LatencyModel, ModelInputs
from bayesspec.bayes.options import model_defaults
from bayesspec.bayes.priors import latency_likelihood, pooled_normal


def tokens_per_request(k: np.ndarray, verify_tokens: str) -> np.ndarray:
    """Routed tokens per request per step: 1 when dense, k or k + 1 per verification."""
    try:
        return np.asarray(verification_tokens(k, verify_tokens), dtype=float)
    except ValueError as error:
        raise BadInput(str(error)) from None


def pooled_log_c1u(center: float, scale: float, n_groups: int):
    """log C1u per group, pooled by a centred Normal(mean, sd) from three groups on.

    Centred at any number of groups, unlike ``pooled_normal`` (non-centred below
    eight): the lowest rates of each sweep pin log C1u to a few per cent, and the
    non-centred form then turns every z = (log C1u - mean)/sd into a thin curved ridge
    in (mean, sd, z). Measured (moe v2, equation-generated replicates): every divergence
    started there, with |d logp| ~ 7000-9500 along mean and log sd against < 150 along the
    shares and utilisations, mean 0.6-1.1 away from its posterior and sd past its 95%
    quantile. The centred form's own funnel (sd -> 0) is shut by the same data: the
    groups' C1u differ by far more than they are uncertain.
    """
    if n_groups < 3:
        return pooled_normal("log_C1u", center, scale, "group", n_groups)
    mean = pm.Normal("log_C1u_mean", center, scale)
    spread = pm.HalfNormal("log_C1u_sd", scale)
    return pm.Normal("log_C1u", mean, spread, dims="group")


class MoELatencyModel(LatencyModel):
    name = "moe"
    # 5: eq. (4) solved for its least root by bracketing (laws.moe_latency_expr; 4's
    # fixed-point start missed it by up to 61% where coverage rises steeply);
    # 4/3: log C1u pooled in the centred form at any group count (2: non-centred below
    # eight groups, whose ridge gave the divergences; 2 made C1u the pooled quantity and
    # C1s = C1u*exp(z); 1 pooled the total C1, split by a share)
    version = "5"
    own_mean_law = True
    target_accept = 0.95
    # 2000 tuning steps and 2000 draws (hierarchical's): at 1000/1000, 1 of 20 held-out
    # validation fits (seed 112, coverage at mid-sweep 0.25: a weakly identified saturated
    # share) ended at R-hat 1.014; 2000 tuning steps fixed it (R-hat 1.006) but on 10 more
    # seeds one ended at bulk ESS 317 < 400 (seed 122, mid-sweep coverage 0.27): a split
    # this weakly identified mixes slowly, so more draws (docs/findings/moe-and-cap.md,
    # "Validation at the defaults, on seeds no choice saw", measured 2026-12-04)
    default_tune = 2000
    default_draws = 2000
    # Chains start at the best of optimised starts (inference.optimised_starts): seed 136
    # (16 groups, coverage near full from the lowest rates) had a chain stuck in a local
    # mode from a jittered start at either sampler budget (R-hat 1.59-1.60, low-load R^2
    # -103); started optimised it converged (R-hat 1.002, bulk ESS 4,406) in 110 s
    init = "optimised"
    # Variants compared by PSIS-LOO (docs/findings/moe-and-cap.md, "The covered/saturated
    # split fits sparse verifiers at low load"): moe_token_offset 0 (the paper's T = RPS*L)
    # fits no better than 1 on the bundled simulator data, elpd difference -0.3 +- 1.3
    # (examples/moe_low_load.py --quick, 2026-12-01), so the simpler law stays; k + 1
    # verified tokens beat k by 200 +- 29 elpd there (the pass routes k + 1 tokens).
    default_config = model_defaults("moe", COMMON_CONFIG)

    def prepare(self, data: pd.DataFrame) -> ModelInputs:
        rows = included(data)
        for column in ("experts_active", "experts_total"):
            if column not in rows.columns or rows[column].isna().any():
                raise BadInput("the moe model needs expert counts for every row (from the "
                               "data or the verifier's catalog card)",
                               file=data.attrs.get("source_file"), column=column)
        inputs = super().prepare(data)
        groups, group_index, rows = inputs.groups, inputs.group_index, inputs.rows
        first = [int(np.flatnonzero(group_index == g)[0]) for g in range(len(groups))]
        groups["experts_active"] = rows["experts_active"].to_numpy(float)[first]
        groups["experts_total"] = rows["experts_total"].to_numpy(float)[first]
        groups["tokens_per_request"] = tokens_per_request(groups["k"].to_numpy(),
                                                          self.config["moe_verify_tokens"])
        return inputs

    def build(self, data: pd.DataFrame) -> pm.Model:
        inputs, model = self.empty_model(data)
        cfg = self.config
        groups = inputs.groups
        n_groups = len(groups)
        with model:
            data = self.add_data(inputs)
            rps_data, rps_max = data["rps"], data["rps_max"]
            center = float(np.log(np.median(groups["latency_low"])))
            # C1u (the zero-load latency, which the lowest rates pin down) is the pooled
            # quantity and C1s = C1u*exp(z): with the total C1 pooled instead, the pinned
            # C1u = total*(1 - share) made a curved ridge between total and share.
            # z ~ Normal(0, scale) is the same prior on C1s/C1u = share/(1 - share).
            log_c1u = pooled_log_c1u(center, cfg["log_c1_scale"], n_groups)
            share_scale = cfg["moe_share_logit_scale"]
            log_ratio_c1 = pm.Normal("logit_share_C1s", 0.0, share_scale, dims="group")
            share_c2 = pm.math.sigmoid(pm.Normal("logit_share_C2s", 0.0, share_scale,
                                                 dims="group"))
            utilisation = pm.math.sigmoid(pm.Normal(
                "utilisation_logit", cfg["utilisation_logit_mean"],
                cfg["utilisation_logit_scale"], dims="group"))
            c2_total = utilisation / rps_max
            c1u = pm.Deterministic("C1u", pt.exp(log_c1u), dims="group")
            c1s = pm.Deterministic("C1s", pt.exp(log_c1u + log_ratio_c1), dims="group")
            c2u = pm.Deterministic("C2u", c2_total * (1 - share_c2), dims="group")
            c2s = pm.Deterministic("C2s", c2_total * share_c2, dims="group")

            m = pt.as_tensor_variable(groups["experts_active"].to_numpy(float))
            M = pt.as_tensor_variable(groups["experts_total"].to_numpy(float))
            tpr = pt.as_tensor_variable(groups["tokens_per_request"].to_numpy(float))
            offset = float(cfg["moe_token_offset"])
            g = data["group_index"]
            # The least root of eq. (4) by bracketing, whatever the draw (equal to the
            # numpy solve to 1e-9 on 100k random inputs, steep coverage included, with the
            # implicit gradient: tests/bayes/test_moe.py); independent of the data, so the prior
            # and the warm-up see the true law too.
            mean_latency = moe_latency_expr(rps_data, c1u[g], c1s[g], c2u[g], c2s[g], m[g],
                                            M[g], tpr[g], token_offset=offset, xp=pt,
                                            bisection_steps=cfg["bisection_steps"],
                                            newton_steps=cfg["newton_steps"])
            phi = expert_coverage_expr(offset + rps_data * mean_latency * tpr[g], m[g], M[g],
                                       xp=pt)
            c2_effective = c2u[g] + phi * c2s[g]
            zero_load_c1 = c1u + expert_coverage_expr(offset, m, M, xp=pt) * c1s
            latency_likelihood(zero_load_c1, c2_total, cfg, data, mean_latency=mean_latency,
                               c2_point=c2_effective)
        return model

    def posterior_variables(self) -> list[str]:
        return ["noise_base", "noise_load", "C1u", "C1s", "C2u", "C2s", "log_C1u_mean",
                "log_C1u_sd"]

    # ------------------------------------------------------------------ prediction contract
    def decision_variables(self) -> list[str]:
        return super().decision_variables() + ["C1u", "C1s", "C2u", "C2s"]

    def group_curve(self, fit, group: int) -> MoECurve:
        """A group's eq. (4) curve from its split costs."""
        row = fit.groups.iloc[group]
        m, M = float(row["experts_active"]), float(row["experts_total"])
        if not np.isfinite(m + M):  # no experts: phi = 0, eq. (1) exactly
            m, M = 0.0, 1.0
        return MoECurve(*(fit.draws(n, group) for n in ("C1u", "C1s", "C2u", "C2s")),
                        m=m, M=M, tokens=float(row["tokens_per_request"]),
                        offset=float(self.config["moe_token_offset"]), label=str(row["label"]),
                        noise=self.noise(fit))

    @classmethod
    def default_sbc_design(cls) -> pd.DataFrame:
        """The first two groups of the bundled ``sim_moe`` dataset."""
        from bayesspec import datasets
        from bayesspec.data import read_tidy

        data = read_tidy(datasets.path("moe"))
        keys = data[["verifier", "drafter", "k", "prefill_tokens", "decode_tokens"]]
        keys = keys.astype(str).agg("|".join, axis=1)
        return data.loc[keys.isin(keys.unique()[:2])].reset_index(drop=True)
