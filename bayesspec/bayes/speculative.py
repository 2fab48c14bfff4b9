"""Speculation-aware latency model: six cycle coefficients shared by every (alpha, k).

Groups, as in the dense model, are configurations (verifier, drafter, k, alpha, prefill,
decode, ...) and get ``C1``/``C2`` (dim ``group``). A *setup* is a configuration without
k and alpha: (verifier, drafter, prefill, decode, ...). Per setup:

- dense rows (k = 0) have their own ``C1_dense``, ``C2_dense`` (parameterised exactly as
  in the dense model);
- every SD configuration j shares six positive coefficients through eq. (3):
  ``C1_j = c1p + (g/E_j)(c1v + k_j c1d)``, ``C2_j = c2p + (g/E_j)(c2v + k_j c2d)``,
  with ``E_j = expected_accepted(alpha_j, k_j)`` from :mod:`bayesspec.laws`.

Saturation by construction, as in the dense model: the C2 coefficients are written as a
direction times a scale, ``c2 = (e^rp, 1, e^rd) * u / M``, where M is the largest
``rps_max_j * C2_j`` of the setup's SD configurations at the unscaled direction. C2_j is
linear in the coefficients, so the largest utilisation reached in the data is exactly
``u`` in (0, 1), and no draw puts an observed point past saturation. The C1 side uses the
same split (shares and an overall scale) because the overall scale is what the data pin
down hardest; separating it from the shares gives the sampler round posteriors.

Acceptance: alpha is known where the data give it. Where a configuration has
acceptance counters (``accepted_tokens`` with ``num_drafts`` or ``draft_tokens``) and no
alpha, or when ``latent_alpha="always"``, alpha is a latent variable: with i.i.d.
acceptance the accepted count of one draft is a geometric count truncated at k, so the
sum over N drafts is Normal(N*mu, N*var) with mu = sum_{i<=k} alpha^i and
var = sum_{i<=k} (2i - 1) alpha^i - mu^2 (N is in the thousands; the normal limit is
exact enough). Its uncertainty then flows into every decision.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt

from ..data import EXTRA_GROUP_COLUMNS, group_label
from ..errors import BadInput
from ..laws import effective_costs_expr, expected_accepted, expected_accepted_expr
from .base import COMMON_CONFIG, LatencyModel, ModelInputs
from .priors import latency_likelihood, pooled_normal

SETUP_COLUMNS = ("verifier", "drafter", "prefill_tokens", "decode_tokens")
COEFFICIENTS = ("c1p", "c1v", "c1d", "c2p", "c2v", "c2d")


def setup_columns(groups: pd.DataFrame) -> list[str]:
    return [c for c in SETUP_COLUMNS if c in groups.columns] + \
        [c for c in EXTRA_GROUP_COLUMNS if c in groups.columns]


def _setup_label(row: dict, columns: list[str]) -> str:
    plain = dict(row)
    plain["k"] = 0
    plain["drafter"] = ""
    label = group_label(plain, columns)
    return f"{label} +{row['drafter']}" if row.get("drafter") else label


def _counter_totals(rows: pd.DataFrame, group_index: np.ndarray, groups: pd.DataFrame):
    """Per group: drafts and accepted tokens summed over its rows (NaN when absent)."""
    n_groups = len(groups)
    drafts = np.full(n_groups, np.nan)
    accepted = np.full(n_groups, np.nan)
    if "accepted_tokens" not in rows.columns:
        return drafts, accepted
    acc = pd.to_numeric(rows["accepted_tokens"], errors="coerce").to_numpy(float)
    if "num_drafts" in rows.columns:
        nd = pd.to_numeric(rows["num_drafts"], errors="coerce").to_numpy(float)
    else:
        nd = np.full(len(rows), np.nan)
    if "draft_tokens" in rows.columns:
        dt = pd.to_numeric(rows["draft_tokens"], errors="coerce").to_numpy(float)
        k = rows["k"].to_numpy(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            nd = np.where(np.isnan(nd), dt / np.where(k > 0, k, np.nan), nd)
    for g in range(n_groups):
        members = group_index == g
        ok = members & np.isfinite(acc) & np.isfinite(nd) & (nd > 0)
        if ok.any():
            drafts[g] = nd[ok].sum()
            accepted[g] = acc[ok].sum()
    return drafts, accepted


def curve_utilisation(cfg: dict):
    """logit of the utilisation reached by each curve's highest rate (not pooled: it is
    a property of the test design, see bayesspec.bayes.dense)."""
    return pm.Normal("utilisation_logit", cfg["utilisation_logit_mean"],
                     cfg["utilisation_logit_scale"], dims="curve")


class SpeculativeLatencyModel(LatencyModel):
    name = "speculative"
    version = "1"
    # Measured: at 0.9 about one fit in three had one or two divergences near the top
    # utilisation; at 0.95 none in the replicate runs (benchmarks/README.md).
    target_accept = 0.95
    default_config = {
        **COMMON_CONFIG,
        "share_scale": 2.5,          # prior sd of the log shares between coefficients
        "latent_alpha": "auto",      # auto | always | never
    }

    # ------------------------------------------------------------------ inputs
    def prepare(self, data: pd.DataFrame) -> ModelInputs:
        source = data.attrs.get("source_file")
        inputs = super().prepare(data)
        rows, groups, group_index = inputs.rows, inputs.groups, inputs.group_index

        columns = setup_columns(groups)
        records = groups.to_dict("records")
        # A baseline (verifier, lengths, ...) holds the dense costs; a setup (a baseline
        # with one drafter) holds the six cycle coefficients of that drafter.
        # The drafting method belongs to the drafter, not to the baseline.
        groups["baseline"] = [_setup_label({**r, "drafter": "", "method": ""}, columns)
                              for r in records]
        groups["setup"] = [_setup_label(r, columns) for r in records]
        is_sd = groups["k"].to_numpy(int) > 0
        groups["is_sd"] = is_sd
        setups = groups.loc[is_sd].drop_duplicates("setup")
        setups = setups[["setup", "baseline"] + columns].reset_index(drop=True)
        setup_number = {s: i for i, s in enumerate(setups["setup"])}
        groups["setup_index"] = [setup_number.get(s, -1) if sd else -1
                                 for s, sd in zip(groups["setup"], is_sd)]
        dense_of_baseline = {b: g for g, (b, sd) in enumerate(zip(groups["baseline"], is_sd))
                             if not sd}
        setups["dense_group"] = [dense_of_baseline.get(b, -1) for b in setups["baseline"]]

        if is_sd.any():
            decode = groups.loc[is_sd, "decode_tokens"]
            if decode.isna().any():
                label = groups.loc[is_sd & groups["decode_tokens"].isna(), "label"].iloc[0]
                raise BadInput(f"speculative rows need decode_tokens (group '{label}')",
                               file=source, column="decode_tokens")

        drafts, accepted = _counter_totals(rows, group_index, groups)
        mode = self.config["latent_alpha"]
        if mode not in {"auto", "always", "never"}:
            raise BadInput(f"latent_alpha must be auto, always or never, got {mode!r}")
        has_counters = np.isfinite(drafts) & np.isfinite(accepted)
        alpha = groups["alpha"].to_numpy(float)
        if mode == "never":
            latent = np.zeros(len(groups), dtype=bool)
        elif mode == "always":
            latent = is_sd & has_counters
        else:
            latent = is_sd & has_counters & np.isnan(alpha)
        missing = is_sd & np.isnan(alpha) & ~latent
        if missing.any():
            label = groups.loc[missing, "label"].iloc[0]
            raise BadInput(f"alpha is unknown for speculative group '{label}' and there are "
                           "no acceptance counters (accepted_tokens with num_drafts or "
                           "draft_tokens) to estimate it", file=source, column="alpha")
        groups["alpha_latent"] = latent
        groups["num_drafts_total"] = drafts
        groups["accepted_total"] = accepted

        self.setups = setups
        inputs.extras["setups"] = setups
        return inputs

    # ------------------------------------------------------------------ graph
    def build(self, data: pd.DataFrame) -> pm.Model:
        inputs = self.prepare(data)
        cfg = self.config
        groups = inputs.groups
        setups = inputs.extras["setups"]
        n_groups, n_setups = len(groups), len(setups)
        is_sd = groups["is_sd"].to_numpy(bool)
        sd_idx = np.flatnonzero(is_sd)
        dense_idx = np.flatnonzero(~is_sd)
        setup_index = groups["setup_index"].to_numpy(int)
        latent = groups["alpha_latent"].to_numpy(bool)
        latent_idx = np.flatnonzero(latent)

        coords = {"group": groups["label"].tolist(), "setup": setups["setup"].tolist(),
                  "point": np.arange(len(inputs.rows)),
                  # dense groups first, then SD setups: each has one utilisation
                  "curve": groups["label"].iloc[dense_idx].tolist() + setups["setup"].tolist()}
        if len(sd_idx):
            coords["sd_group"] = groups["label"].iloc[sd_idx].tolist()
        if len(dense_idx):
            coords["dense_group"] = groups["label"].iloc[dense_idx].tolist()
        if len(latent_idx):
            coords["latent_alpha_group"] = groups["label"].iloc[latent_idx].tolist()

        decode = groups["decode_tokens"].astype("Float64").to_numpy(float, na_value=np.nan)
        k = groups["k"].to_numpy(float)
        known_alpha = np.where(np.isnan(groups["alpha"].to_numpy(float)), 0.5,
                               groups["alpha"].to_numpy(float))

        with pm.Model(coords=coords) as model:
            data = self.add_data(inputs)
            rps_max = data["rps_max"]

            c1 = pt.zeros(n_groups)
            c2 = pt.zeros(n_groups)

            utilisation_logit = curve_utilisation(cfg)
            if len(dense_idx):
                c1, c2 = self._dense_part(cfg, groups, dense_idx, n_setups, rps_max,
                                          utilisation_logit[:len(dense_idx)], c1, c2)
            if len(sd_idx):
                alpha = self._alpha(groups, latent_idx, known_alpha)
                c1, c2 = self._speculative_part(cfg, groups, sd_idx, setup_index, n_setups,
                                                decode, k, alpha, rps_max,
                                                utilisation_logit[len(dense_idx):], c1, c2)

            self.likelihood(c1, c2, cfg, data, inputs)
        return model

    def likelihood(self, c1, c2, cfg, data, inputs):
        """The latency likelihood given per-group costs (a hook: an MoE verifier
        replaces eq. (1) by the covered/saturated split of eq. (4))."""
        return latency_likelihood(c1, c2, cfg, data)

    def _dense_part(self, cfg, groups, dense_idx, n_setups, rps_max, utilisation_logit, c1, c2):
        center = float(np.log(np.median(groups["latency_low"].to_numpy()[dense_idx])))
        log_c1 = pooled_normal("log_C1_dense", center, cfg["log_c1_scale"], "dense_group",
                               len(dense_idx), centred=True)
        utilisation = pm.math.sigmoid(utilisation_logit)
        dense_c1 = pt.exp(log_c1)
        dense_c2 = utilisation / rps_max[dense_idx]
        if n_setups:
            # The dense baseline of each SD setup (NaN where the data have none).
            dense_group = self.inputs.extras["setups"]["dense_group"].to_numpy(int)
            position = np.full(len(groups), -1)
            position[dense_idx] = np.arange(len(dense_idx))
            pick = np.where(dense_group >= 0, position[np.maximum(dense_group, 0)], -1)
            has_dense = pick >= 0
            safe = np.maximum(pick, 0)
            pm.Deterministic("C1_dense", pt.where(has_dense, dense_c1[safe], np.nan),
                             dims="setup")
            pm.Deterministic("C2_dense", pt.where(has_dense, dense_c2[safe], np.nan),
                             dims="setup")
        c1 = pt.set_subtensor(c1[dense_idx], dense_c1)
        c2 = pt.set_subtensor(c2[dense_idx], dense_c2)
        return c1, c2

    def _alpha(self, groups, latent_idx, known_alpha):
        alpha = pt.as_tensor_variable(known_alpha)
        if not len(latent_idx):
            return alpha
        latent_alpha = pm.Beta("alpha_latent", 1.0, 1.0, dims="latent_alpha_group")
        drafts = groups["num_drafts_total"].to_numpy(float)[latent_idx]
        accepted = groups["accepted_total"].to_numpy(float)[latent_idx]
        k = groups["k"].to_numpy(int)[latent_idx]
        positions = np.arange(1, int(k.max()) + 1)
        used = (positions[None, :] <= k[:, None]).astype(float)
        powers = latent_alpha[:, None] ** positions[None, :] * used
        mean = powers.sum(axis=1)
        second = (powers * (2 * positions[None, :] - 1)).sum(axis=1)
        variance = pt.maximum(second - mean**2, 1e-12)
        pm.Normal("accepted_count", drafts * mean, pt.sqrt(drafts * variance),
                  observed=accepted, dims="latent_alpha_group")
        return pt.set_subtensor(alpha[latent_idx], latent_alpha)

    def _speculative_part(self, cfg, groups, sd_idx, setup_index, n_setups, decode, k, alpha,
                          rps_max, utilisation_logit, c1, c2):
        setup_of_sd = setup_index[sd_idx]
        decode_sd = decode[sd_idx]
        k_sd = k[sd_idx]
        alpha_sd = alpha[sd_idx]

        # Each setup is normalised at an anchor configuration (its median number of
        # cycles): the data pin the anchor's C1 down to about a percent, and expressing
        # the other coefficients as fractions and ratios at the anchor keeps the weakly
        # identified ones (c1p, c2p, c2d) from bending the posterior into a banana
        # (they trade off linearly against c1v and c2v, which is curved in log space).
        low = groups["latency_low"].to_numpy(float)[sd_idx]
        guess_alpha = groups["alpha"].to_numpy(float)[sd_idx]
        guess_cycles = decode_sd / expected_accepted(
            np.where(np.isnan(guess_alpha), 0.7, guess_alpha), k_sd)
        anchor = np.zeros(n_setups, dtype=int)
        for s in range(n_setups):
            members = np.flatnonzero(setup_of_sd == s)
            order = members[np.argsort(guess_cycles[members], kind="stable")]
            anchor[s] = order[(len(order) - 1) // 2]
        anchor_cycles = decode_sd[anchor] / expected_accepted_expr(
            alpha_sd[anchor], k_sd[anchor], xp=pt)
        anchor_k = k_sd[anchor]
        share = cfg["share_scale"]

        def pooled(name, mean, sd):
            return pooled_normal(name, mean, sd, "setup", n_setups, spread_scale=0.5)

        def logit(p):
            return float(np.log(p / (1 - p)))

        # C1 side: anchor C1, the prefill fraction of it, and c1d/c1v.
        log_anchor_c1 = pm.Normal("log_anchor_C1", np.log(low[anchor]), 0.5, dims="setup")
        prefill_fraction_c1 = pm.math.sigmoid(pooled("logit_prefill_fraction_c1",
                                                     logit(0.02), share))
        log_ratio_c1 = pooled("log_ratio_c1d_c1v", float(np.log(0.1)), share)
        anchor_c1 = pt.exp(log_anchor_c1)
        ratio_c1 = pt.exp(log_ratio_c1)
        c1p = prefill_fraction_c1 * anchor_c1
        c1v = anchor_c1 * (1 - prefill_fraction_c1) / (anchor_cycles * (1 + anchor_k * ratio_c1))
        c1d = ratio_c1 * c1v

        # C2 side: a direction normalised at the anchor (prefill fraction, c2d/c2v), then
        # scaled so that the highest observed utilisation of the setup is u < 1.
        prefill_fraction_c2 = pm.math.sigmoid(pooled("logit_prefill_fraction_c2",
                                                     logit(0.3), share))
        ratio_c2 = pt.exp(pooled("log_ratio_c2d_c2v", float(np.log(0.05)), share))
        utilisation = pm.math.sigmoid(utilisation_logit)
        dir_c2p = prefill_fraction_c2
        dir_c2v = (1 - prefill_fraction_c2) / (anchor_cycles * (1 + anchor_k * ratio_c2))
        dir_c2d = ratio_c2 * dir_c2v
        _, unscaled_c2 = effective_costs_expr(alpha_sd, k_sd, decode_sd, 0.0, 0.0, 0.0,
                                              dir_c2p[setup_of_sd], dir_c2v[setup_of_sd],
                                              dir_c2d[setup_of_sd], xp=pt)
        load = rps_max[sd_idx] * unscaled_c2
        # Largest utilisation per setup via a padded (setup x member) table.
        width = int(np.bincount(setup_of_sd, minlength=n_setups).max())
        table = np.zeros((n_setups, width), dtype=int)
        mask = np.zeros((n_setups, width), dtype=bool)
        for s in range(n_setups):
            members = np.flatnonzero(setup_of_sd == s)
            table[s, :len(members)] = members
            mask[s, :len(members)] = True
        # A smooth maximum (log-sum-exp at sharpness 40 on log-utilisations): it bounds
        # the true maximum from above, so the constraint still holds, and its gradient
        # has no kink for NUTS to trip on when two configurations swap places.
        sharp = 40.0
        log_load = pt.where(mask, pt.log(load[table]), -np.inf)
        largest = pt.exp(pt.logsumexp(sharp * log_load, axis=1) / sharp)
        scale = utilisation / largest
        c2p, c2v, c2d = dir_c2p * scale, dir_c2v * scale, dir_c2d * scale

        coefficients = {"c1p": c1p, "c1v": c1v, "c1d": c1d, "c2p": c2p, "c2v": c2v, "c2d": c2d}
        for name, value in coefficients.items():
            pm.Deterministic(name, value, dims="setup")
        c1_sd, c2_sd = effective_costs_expr(
            alpha_sd, k_sd, decode_sd, c1p[setup_of_sd], c1v[setup_of_sd], c1d[setup_of_sd],
            c2p[setup_of_sd], c2v[setup_of_sd], c2d[setup_of_sd], xp=pt)
        c1 = pt.set_subtensor(c1[sd_idx], c1_sd)
        c2 = pt.set_subtensor(c2[sd_idx], c2_sd)
        return c1, c2

    # ------------------------------------------------------------------ reuse
    def posterior_variables(self) -> list[str]:
        return ["noise_base", "noise_load", "c1p", "c1v", "c1d", "c2p", "c2v", "c2d",
                "C1_dense", "C2_dense", "alpha_latent"]
