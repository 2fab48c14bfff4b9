"""Two engine versions in one model: a version effect on log C1 and log C2 per group
(:class:`VersionEffectModel`) or, for speculative data, on the six cycle coefficients
and the dense baseline (:class:`SpeculativeVersionEffectModel`).

For ``compare DATA --by engine_version``. Each base group (the design without the
version column) has version A's costs, parameterised as in the dense model, and
version B's costs ``C1_B = C1_A * exp(d1)``, ``C2_B = C2_A * exp(d2)``. The effects d1,
d2 are partially pooled across base groups (population mean and spread learned), so a
consistent change is detected with more certainty than any single group shows, and an
odd group is shrunk toward the others.

Saturation by construction for both versions: ``C2_A = u / R`` with R a smooth maximum
of ``rps_max_A`` and ``rps_max_B * exp(d2)`` (bounding the true maximum from above), so
RPS*C2 < 1 at every observed point of either version.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from bayesspec.bayes.lazymodule import lazy_module

pm, pt = lazy_module("pymc"), lazy_module("pytensor.tensor")  # loaded on first use

from bayesspec.data import EXTRA_GROUP_COLUMNS, GROUP_COLUMNS, group_label
from bayesspec.errors import BadInput
from bayesspec.laws import effective_costs_expr, expected_accepted_expr
from bayesspec.prediction import Curve
from bayesspec.uncertainty import ratio_entry, uncertain
from bayesspec.bayes.base import COMMON_CONFIG, LatencyModel, ModelInputs
from bayesspec.bayes.priors import latency_likelihood, pooled_normal
from bayesspec.bayes.speculative import (COEFFICIENTS, SpeculativeLatencyModel, _setup_label,
                          median_cycle_anchors,
                          curve_utilisation, setup_columns)
from bayesspec.bayes.options import model_defaults


class VersionEffectModel(LatencyModel):
    name = "versions"
    version = "3"
    target_accept = 0.95
    # Run effects with a handful of runs leave a mild funnel in their spread.
    retry_target_accept = 0.99
    default_config = model_defaults("versions", COMMON_CONFIG)

    def prepare(self, data: pd.DataFrame) -> ModelInputs:
        by = self.config["by"]
        source = data.attrs.get("source_file")
        levels = _two_levels(data, by)
        inputs = super().prepare(data)
        groups = inputs.groups
        columns = [c for c in GROUP_COLUMNS + EXTRA_GROUP_COLUMNS
                   if c in groups.columns and c not in (by, "run")]
        records = groups.to_dict("records")
        groups["base"] = [group_label({**r, by: ""}, columns) for r in records]
        groups["version_index"] = [levels.index(str(r[by])) for r in records]
        bases = list(dict.fromkeys(groups["base"]))
        groups["base_index"] = [bases.index(b) for b in groups["base"]]
        # A run is one load test of one version; without a run column each version is
        # one run and there is no run effect (the version effect is the whole change).
        runs_given = "run" in groups.columns
        keys = [f"{levels[v]}|{r.get('run', '') if runs_given else ''}"
                for v, r in zip(groups["version_index"], records)]
        runs = list(dict.fromkeys(keys))
        groups["run_index"] = [runs.index(key) for key in keys]
        _members(groups["base"], groups["version_index"], levels, source, by)
        inputs.extras.update({"bases": bases, "levels": levels, "runs": runs,
                              "run_effects": len(runs) > 2})
        return inputs

    def build(self, data: pd.DataFrame) -> pm.Model:
        inputs = self.prepare(data)
        cfg = self.config
        groups = inputs.groups
        bases, levels, runs = (inputs.extras[k] for k in ("bases", "levels", "runs"))
        n_bases = len(bases)
        base = groups["base_index"].to_numpy(int)
        is_b = groups["version_index"].to_numpy(float)
        coords = {"group": groups["label"].tolist(), "point": np.arange(len(inputs.rows)),
                  "base": bases, "version": levels}
        if inputs.extras["run_effects"]:
            coords["run"] = runs
        with pm.Model(coords=coords) as model:
            data = self.add_data(inputs)
            rps_max = data["rps_max"]
            center = float(np.log(np.median(groups["latency_low"])))
            log_c1_a = pooled_normal("log_C1_A", center, cfg["log_c1_scale"], "base",
                                     n_bases, centred=True)
            utilisation = pm.math.sigmoid(pm.Normal(
                "utilisation_logit", cfg["utilisation_logit_mean"],
                cfg["utilisation_logit_scale"], dims="base"))
            # Pooled across base groups from three on; with fewer the spread cannot be
            # learned (a funnel: divergences) and each group gets the population prior.
            effects = {name: version_effect(name, n_bases, "base", cfg)
                       for name in ("C1", "C2")}
            # Each group's log factor on version A's costs: the version effect, plus its
            # run's effect when the data hold repeated runs.
            shift = {name: is_b * effects[name][base] for name in ("C1", "C2")}
            if inputs.extras["run_effects"]:
                run_index = groups["run_index"].to_numpy(int)
                for name in ("C1", "C2"):
                    spread = pm.LogNormal(f"run_{name}_sd", np.log(cfg["run_effect_median"]),
                                          1.0)
                    z = pm.Normal(f"run_{name}_z", 0.0, 1.0, dims="run")
                    run_effect = pm.Deterministic(f"run_effect_{name}", spread * z, dims="run")
                    shift[name] = shift[name] + run_effect[run_index]
            table, mask = _padded([np.flatnonzero(base == b) for b in range(n_bases)])
            reach = _smooth_max((pt.log(rps_max) + shift["C2"])[table], mask)
            c1_a = pt.exp(log_c1_a)
            c2_a = utilisation / reach
            c1 = c1_a[base] * pt.exp(shift["C1"])
            c2 = c2_a[base] * pt.exp(shift["C2"])
            # The versions' own curves (run effects averaged out): what `compare` reads.
            versions = pt.as_tensor_variable(np.arange(2, dtype=float))
            for name, version_a in (("C1", c1_a), ("C2", c2_a)):
                pm.Deterministic(f"{name}_version", version_a[:, None]
                                 * pt.exp(versions[None, :] * effects[name][:, None]),
                                 dims=("base", "version"))
            latency_likelihood(c1, c2, cfg, data)
        return model

    def posterior_variables(self) -> list[str]:
        names = ["noise_base", "noise_load", "log_effect_C1_mean", "log_effect_C1_sd",
                 "log_effect_C2_mean", "log_effect_C2_sd"]
        if self.inputs is None or self.inputs.extras.get("run_effects"):
            names += ["run_C1_sd", "run_C2_sd"]
        return names

    def version_comparison(self, fit, *, rope: float, prob: float) -> dict:
        """CONTRACT ``compare`` from the joint fit: per base group the ratio B/A is
        exp(version effect); ``C1``/``C2`` are the population ratios (the mean effect
        across groups, partially pooled). With repeated runs the run-to-run spread is
        reported too (``runs``): the version effect is what is left beyond it."""
        bases = [str(b) for b in fit.posterior["base"].values]
        parameters = {}
        for name in ("C1", "C2"):
            draws = fit.draws(f"ratio_{name}")
            for j, base in enumerate(bases):
                parameters[f"{name}[{base}]"] = ratio_entry(draws[:, j], rope, prob)
            parameters[name] = ratio_entry(fit.draws(f"ratio_{name}_population"), rope, prob)
        levels = sorted(pd.unique(fit.data[self.config["by"]].astype(str)))
        verdict = (f"{levels[1]} vs {levels[0]}: C1 {parameters['C1']['verdict']}; C2 "
                   f"{parameters['C2']['verdict']} (population effect over {len(bases)} "
                   "groups)")
        document = {"parameters": parameters, "verdict": verdict, "shared_groups": len(bases),
                    "a": levels[0], "b": levels[1], "rope": rope, "prob": prob}
        if "run_C1_sd" in fit.posterior:
            runs = [str(r) for r in fit.posterior["run"].values]
            document["runs"] = {
                "per_version": {level: sum(r.startswith(f"{level}|") for r in runs)
                                for level in levels},
                "C1_sd": uncertain(fit.draws("run_C1_sd"), prob),
                "C2_sd": uncertain(fit.draws("run_C2_sd"), prob)}
            document["verdict"] += (f"; run-to-run spread of C1 "
                                    f"{_percent(document['runs']['C1_sd'])}, of C2 "
                                    f"{_percent(document['runs']['C2_sd'])} (set apart from "
                                    "the version effect)")
        return document

    def version_curves(self, fit) -> list[dict]:
        """Per base group (label, curve A, curve B, A's fitted rows, B's fitted rows):
        the two versions' mean-latency curves, run effects averaged out."""
        groups = fit.groups
        bases = [str(b) for b in fit.posterior["base"].values]
        noise = self.noise(fit)
        data = fit.data
        fitted = data.loc[~data["excluded"].astype(bool)]
        pairs = []
        for j, base in enumerate(bases):
            curves, rows = [], []
            for v in (0, 1):
                labels = groups.loc[(groups["base"] == base)
                                    & (groups["version_index"] == v), "label"]
                members = groups.index[groups["label"].isin(labels)]
                curve = Curve(fit.draws("C1_version")[:, j, v],
                              fit.draws("C2_version")[:, j, v], label=base, noise=noise)
                curve.rps_fitted_max = float(groups.loc[members, "rps_max"].max())
                curves.append(curve)
                rows.append(fitted.loc[fitted["group"].isin(labels)])
            pairs.append((base, curves[0], curves[1], rows[0], rows[1]))
        return pairs


def _percent(u: dict) -> str:
    return f"{u['median']:.1%} [{u['lo']:.1%}, {u['hi']:.1%}]"


# --------------------------------------------------------------------------------------
# Speculative data: a version effect on the six cycle coefficients
# --------------------------------------------------------------------------------------

def version_effect(name: str, size: int, dim: str, cfg: dict):
    """Log effect of version B on ``name`` per entry of ``dim``, partially pooled.

    With three or more entries the effects share a learned mean and spread
    (non-centred); with fewer the spread cannot be learned and each entry gets the
    population prior, the population effect being their mean. Records
    ``log_effect_NAME``, ``ratio_NAME`` (dim) and ``ratio_NAME_population``.
    """
    if size >= 3:
        mean = pm.Normal(f"log_effect_{name}_mean", 0.0, cfg["effect_scale"])
        spread = pm.HalfNormal(f"log_effect_{name}_sd", cfg["effect_spread_scale"])
        z = pm.Normal(f"log_effect_{name}_z", 0.0, 1.0, dims=dim)
        effect = mean + spread * z
    else:
        effect = pm.Normal(f"log_effect_{name}_free", 0.0, cfg["effect_scale"], dims=dim)
        mean = effect.mean()
    effect = pm.Deterministic(f"log_effect_{name}", effect, dims=dim)
    pm.Deterministic(f"ratio_{name}", pt.exp(effect), dims=dim)
    pm.Deterministic(f"ratio_{name}_population", pt.exp(mean))
    return effect


def version_effect_prior_sd(cfg: dict, size: int) -> tuple[float, float]:
    """Prior sd of the population log effect and of one entry's, as
    :func:`version_effect` builds them: with fewer than three entries each has its own
    N(0, scale) and the population is their mean; otherwise a N(0, scale) mean plus a
    HalfNormal(spread) deviation, whose prior second moment is spread^2."""
    scale, spread = float(cfg["effect_scale"]), float(cfg["effect_spread_scale"])
    if size < 3:
        return scale / np.sqrt(size), scale
    return scale, float(np.hypot(scale, spread))


def _smooth_max(log_values, mask, sharp: float = 40.0):
    """Row-wise log-sum-exp maximum (bounds the maximum from above, no kink)."""
    masked = pt.where(mask, log_values, -np.inf)
    return pt.exp(pt.logsumexp(sharp * masked, axis=1) / sharp)


def _padded(members_of: list[np.ndarray]):
    width = max(len(m) for m in members_of)
    table = np.zeros((len(members_of), width), dtype=int)
    mask = np.zeros((len(members_of), width), dtype=bool)
    for row, members in enumerate(members_of):
        table[row, :len(members)] = members
        mask[row, :len(members)] = True
    return table, mask


class SpeculativeVersionEffectModel(SpeculativeLatencyModel):
    """Two engine versions of speculative sweeps: version effects on the six coefficients.

    For ``compare DATA --by engine_version`` when the data have SD rows. A *base setup*
    is a speculative setup without the version. Version A is parameterised exactly as
    :class:`SpeculativeLatencyModel` (anchor C1, shares, C2 direction times a scale);
    version B's coefficients are A's times exp(d) for each of c1p..c2d, and its dense
    baseline's C1, C2 are A's times exp(d) too. The effects are partially pooled across
    base setups (and base baselines). Saturation by construction for both versions: the
    C2 scale of a base setup divides ``u`` by a smooth maximum of ``rps_max * C2`` over
    the configurations of *both* versions (B's direction already includes its effects),
    so RPS*C2 < 1 at every observed point of either version.

    Posterior: ``c1p..c2d``, ``C1_dense``, ``C2_dense`` per version setup (dim
    ``setup``, as in a speculative fit), ``ratio_c1p..ratio_c2d`` (dim ``base_setup``),
    ``ratio_C1_dense``/``ratio_C2_dense`` (dim ``base_baseline``) and each
    ``ratio_NAME_population``. Acceptance (known or latent alpha) is per group, so
    each version keeps its own measured alpha.
    """

    name = "speculative_versions"
    version = "2"
    default_config = model_defaults("speculative_versions", SpeculativeLatencyModel.default_config)

    def prepare(self, data: pd.DataFrame) -> ModelInputs:
        by = self.config["by"]
        source = data.attrs.get("source_file")
        levels = _two_levels(data, by)
        if by not in EXTRA_GROUP_COLUMNS:
            raise BadInput(f"speculative data can be compared by one of "
                           f"{', '.join(EXTRA_GROUP_COLUMNS)}", file=source, column=by)
        inputs = super().prepare(data)
        groups, setups = inputs.groups, inputs.extras["setups"]
        if "run" in groups.columns:
            raise BadInput("repeated runs (a run column) get a run-level effect in the dense "
                           "two-version model only; compare the dense rows, or one run per "
                           "version", file=source, column="run")
        group_cols = [c for c in GROUP_COLUMNS + EXTRA_GROUP_COLUMNS
                      if c in groups.columns and c != by]
        records = groups.to_dict("records")
        groups["base"] = [group_label({**r, by: ""}, group_cols) for r in records]
        groups["version_index"] = [levels.index(str(r[by])) for r in records]
        pairs = _pairs(groups["base"], groups["version_index"], levels, source, by)
        columns = setup_columns(groups)
        setups["base_setup"] = [_setup_label({**r, by: ""}, columns)
                                for r in setups.to_dict("records")]
        setups["version_index"] = [levels.index(str(v)) for v in setups[by]]
        base_setups = list(dict.fromkeys(setups["base_setup"]))
        setups["base_setup_index"] = [base_setups.index(b) for b in setups["base_setup"]]
        is_sd = groups["is_sd"].to_numpy(bool)
        dense = np.flatnonzero(~is_sd)
        base_baselines = list(dict.fromkeys(groups["base"].iloc[dense]))
        groups["base_baseline_index"] = [base_baselines.index(b) if not sd else -1
                                         for b, sd in zip(groups["base"], is_sd)]
        inputs.extras.update({"levels": levels, "pairs": pairs, "base_setups": base_setups,
                              "base_baselines": base_baselines})
        return inputs

    def build(self, data: pd.DataFrame) -> pm.Model:
        inputs = self.prepare(data)
        cfg = self.config
        groups, setups = inputs.groups, inputs.extras["setups"]
        base_setups = inputs.extras["base_setups"]
        base_baselines = inputs.extras["base_baselines"]
        is_sd = groups["is_sd"].to_numpy(bool)
        sd_idx, dense_idx = np.flatnonzero(is_sd), np.flatnonzero(~is_sd)
        latent_idx = np.flatnonzero(groups["alpha_latent"].to_numpy(bool))
        coords = {"group": groups["label"].tolist(), "setup": setups["setup"].tolist(),
                  "point": np.arange(len(inputs.rows)), "base_setup": base_setups,
                  "curve": base_baselines + base_setups}
        if len(dense_idx):
            coords["base_baseline"] = base_baselines
        if len(latent_idx):
            coords["latent_alpha_group"] = groups["label"].iloc[latent_idx].tolist()
        known_alpha = np.where(np.isnan(groups["alpha"].to_numpy(float)), 0.5,
                               groups["alpha"].to_numpy(float))
        with pm.Model(coords=coords) as model:
            values = self.add_data(inputs)
            rps_max = values["rps_max"]
            c1 = pt.zeros(len(groups))
            c2 = pt.zeros(len(groups))
            utilisation = pm.math.sigmoid(curve_utilisation(cfg))
            if len(dense_idx):
                c1, c2 = self._dense_versions(cfg, groups, dense_idx, len(base_baselines),
                                              rps_max, utilisation[:len(base_baselines)],
                                              c1, c2)
            if len(sd_idx):
                alpha = self._alpha(groups, latent_idx, known_alpha)
                c1, c2 = self._speculative_versions(cfg, groups, setups, sd_idx, alpha,
                                                    rps_max,
                                                    utilisation[len(base_baselines):], c1, c2)
            dense_group = setups["dense_group"].to_numpy(int)
            has_dense = dense_group >= 0
            safe = np.maximum(dense_group, 0)
            pm.Deterministic("C1_dense", pt.where(has_dense, c1[safe], np.nan), dims="setup")
            pm.Deterministic("C2_dense", pt.where(has_dense, c2[safe], np.nan), dims="setup")
            self.likelihood(c1, c2, cfg, values, inputs)
        return model

    def _dense_versions(self, cfg, groups, dense_idx, n_bases, rps_max, utilisation, c1, c2):
        index = groups["base_baseline_index"].to_numpy(int)
        version = groups["version_index"].to_numpy(int)
        table = np.full((n_bases, 2), -1)
        for g in dense_idx:
            table[index[g], version[g]] = g
        center = float(np.log(np.median(groups["latency_low"].to_numpy()[dense_idx])))
        log_c1_a = pooled_normal("log_C1_dense_A", center, cfg["log_c1_scale"],
                                 "base_baseline", n_bases, centred=True)
        effect_c1 = version_effect("C1_dense", n_bases, "base_baseline", cfg)
        effect_c2 = version_effect("C2_dense", n_bases, "base_baseline", cfg)
        reach = _smooth_max(pt.stack([pt.log(rps_max[table[:, 0]]),
                                      pt.log(rps_max[table[:, 1]]) + effect_c2], axis=1),
                            np.ones((n_bases, 2), dtype=bool))
        c1_a = pt.exp(log_c1_a)
        c2_a = utilisation / reach
        c1 = pt.set_subtensor(c1[table[:, 0]], c1_a)
        c1 = pt.set_subtensor(c1[table[:, 1]], c1_a * pt.exp(effect_c1))
        c2 = pt.set_subtensor(c2[table[:, 0]], c2_a)
        c2 = pt.set_subtensor(c2[table[:, 1]], c2_a * pt.exp(effect_c2))
        return c1, c2

    def _speculative_versions(self, cfg, groups, setups, sd_idx, alpha, rps_max,
                              utilisation, c1, c2):
        n_bases = len(setups["base_setup"].unique())
        setup_index = groups["setup_index"].to_numpy(int)[sd_idx]
        base = setups["base_setup_index"].to_numpy(int)[setup_index]
        is_b = setups["version_index"].to_numpy(float)[setup_index]   # 0 for A, 1 for B
        decode = groups["decode_tokens"].astype("Float64").to_numpy(float)[sd_idx]
        k = groups["k"].to_numpy(float)[sd_idx]
        alpha_sd = alpha[sd_idx]

        # Anchor of each base setup: version A's configuration with the median number
        # of cycles (as in SpeculativeLatencyModel: shares at the anchor keep the
        # weakly identified coefficients from bending the posterior).
        low = groups["latency_low"].to_numpy(float)[sd_idx]
        anchor = median_cycle_anchors(groups, sd_idx, decode, k,
                                      [np.flatnonzero((base == b) & (is_b == 0))
                                       for b in range(n_bases)])
        anchor_cycles = decode[anchor] / expected_accepted_expr(alpha_sd[anchor], k[anchor],
                                                                 xp=pt)
        anchor_k = k[anchor]
        share = cfg["share_scale"]

        def pooled(name, mean, sd):
            return pooled_normal(name, mean, sd, "base_setup", n_bases, spread_scale=0.5)

        def logit(p):
            return float(np.log(p / (1 - p)))

        log_anchor_c1 = pm.Normal("log_anchor_C1", np.log(low[anchor]), 0.5, dims="base_setup")
        fraction_c1 = pm.math.sigmoid(pooled("logit_prefill_fraction_c1", logit(0.02), share))
        ratio_c1 = pt.exp(pooled("log_ratio_c1d_c1v", float(np.log(0.1)), share))
        anchor_c1 = pt.exp(log_anchor_c1)
        c1v = anchor_c1 * (1 - fraction_c1) / (anchor_cycles * (1 + anchor_k * ratio_c1))
        version_a = {"c1p": fraction_c1 * anchor_c1, "c1v": c1v, "c1d": ratio_c1 * c1v}
        fraction_c2 = pm.math.sigmoid(pooled("logit_prefill_fraction_c2", logit(0.3), share))
        ratio_c2 = pt.exp(pooled("log_ratio_c2d_c2v", float(np.log(0.05)), share))
        dir_c2v = (1 - fraction_c2) / (anchor_cycles * (1 + anchor_k * ratio_c2))
        direction = {"c2p": fraction_c2, "c2v": dir_c2v, "c2d": ratio_c2 * dir_c2v}

        effects = {name: version_effect(name, n_bases, "base_setup", cfg)
                   for name in COEFFICIENTS}

        def per_config(values, name):       # a base-setup vector at each SD configuration
            return values[base] * pt.exp(is_b * effects[name][base])

        _, unscaled = effective_costs_expr(alpha_sd, k, decode, 0.0, 0.0, 0.0,
                                           *(per_config(direction[n], n)
                                             for n in ("c2p", "c2v", "c2d")), xp=pt)
        table, mask = _padded([np.flatnonzero(base == b) for b in range(n_bases)])
        largest = _smooth_max(pt.log(rps_max[sd_idx] * unscaled)[table], mask)
        scale = utilisation / largest
        version_a.update({n: direction[n] * scale for n in ("c2p", "c2v", "c2d")})

        # Per version setup, as a speculative fit has them (dim "setup").
        setup_base = setups["base_setup_index"].to_numpy(int)
        setup_is_b = setups["version_index"].to_numpy(float)
        for name in COEFFICIENTS:
            pm.Deterministic(name, version_a[name][setup_base]
                             * pt.exp(setup_is_b * effects[name][setup_base]), dims="setup")
        c1_sd, c2_sd = effective_costs_expr(alpha_sd, k, decode,
                                            *(per_config(version_a[n], n) for n in COEFFICIENTS),
                                            xp=pt)
        c1 = pt.set_subtensor(c1[sd_idx], c1_sd)
        c2 = pt.set_subtensor(c2[sd_idx], c2_sd)
        return c1, c2

    def version_comparison(self, fit, *, rope: float, prob: float) -> dict:
        """CONTRACT ``compare`` from the joint fit of speculative sweeps.

        ``c1p..c2d``: population ratios of the six cycle coefficients (the mean log effect
        across base setups), then per base setup when there are several. ``C1``/``C2``: the
        dense baseline's population ratio when the data have dense rows, otherwise the
        geometric mean over SD configurations; ``C1_sd``/``C2_sd``: the geometric mean ratio
        of the effective costs over every SD configuration measured in both versions (eq. 3
        at each configuration's own alpha and k). Draws are paired: one joint posterior.
        """
        posterior = fit.posterior
        groups = fit.groups
        levels = sorted(pd.unique(fit.data[self.config["by"]].astype(str)))
        base_setups = [str(b) for b in posterior["base_setup"].values]
        has_dense = "ratio_C1_dense" in posterior
        parameters = {}
        # Effective-cost ratios per SD configuration, paired by the group without version.
        sd = groups["is_sd"].to_numpy(bool)
        version = groups["version_index"].to_numpy(int)
        index_b = {base: g for g, base in enumerate(groups["base"]) if version[g] == 1}
        pairs = [(g, index_b[base]) for g, base in enumerate(groups["base"])
                 if sd[g] and version[g] == 0 and base in index_b]
        headline = {}
        for name in ("C1", "C2"):
            draws = fit.draws(name)
            logs = np.stack([np.log(draws[:, b] / draws[:, a]) for a, b in pairs], axis=1)
            headline[f"{name}_sd"] = np.exp(logs.mean(axis=1))
            headline[name] = (fit.draws(f"ratio_{name}_dense_population") if has_dense
                              else headline[f"{name}_sd"])
        for name in ("C1", "C2", "C1_sd", "C2_sd"):
            parameters[name] = ratio_entry(headline[name], rope, prob)
        config = self.config
        prior_population, prior_setup = version_effect_prior_sd(config, len(base_setups))
        population = {name: fit.draws(f"ratio_{name}_population") for name in COEFFICIENTS}
        for name, draws in population.items():
            parameters[name] = _identified(ratio_entry(draws, rope, prob), draws,
                                           prior_population)
        if len(base_setups) > 1:
            for name in COEFFICIENTS:
                draws = fit.draws(f"ratio_{name}")
                for j, base in enumerate(base_setups):
                    parameters[f"{name}[{base}]"] = _identified(
                        ratio_entry(draws[:, j], rope, prob), draws[:, j], prior_setup)
        tradeoffs = _tradeoffs(population)
        if has_dense:
            base_baselines = [str(b) for b in posterior["base_baseline"].values]
            if len(base_baselines) > 1:
                for name in ("C1", "C2"):
                    draws = fit.draws(f"ratio_{name}_dense")
                    for j, base in enumerate(base_baselines):
                        parameters[f"{name}[{base}]"] = ratio_entry(draws[:, j], rope, prob)
        summary = ("C1", "C2") + COEFFICIENTS
        by_verdict: dict[str, list[str]] = {}
        for name in summary:
            by_verdict.setdefault(parameters[name]["verdict"], []).append(name)
        order = sorted(by_verdict, key=lambda v: (not v.startswith(("higher", "lower")),
                                                  v.startswith("uncertain"),
                                                  v.startswith("not identified"), v))
        flagged = {n for n in COEFFICIENTS
                   if parameters[n]["verdict"].startswith(("higher", "lower"))}
        notes = []
        for tradeoff in tradeoffs:
            a, b = tradeoff["parameters"]
            if {a, b} & flagged:
                notes.append(f"{a} and {b} trade off (correlation {tradeoff['correlation']:+.2f}):"
                             f" read them together with {a[:2].upper()}_sd")
        verdict = (f"{levels[1]} vs {levels[0]}: "
                   + "; ".join(f"{', '.join(by_verdict[v])} {v}" for v in order)
                   + f" (population effects over {len(base_setups)} SD setup(s); C1, C2 of the "
                   + ("dense baseline)" if has_dense else "SD configurations)")
                   + "".join(f"; {note}" for note in notes))
        return {"parameters": parameters, "verdict": verdict, "shared_groups": len(pairs),
                "setups": len(base_setups), "headline": "dense" if has_dense else "sd",
                "tradeoffs": tradeoffs,
                "a": levels[0], "b": levels[1], "rope": rope, "prob": prob}

    def version_curves(self, fit) -> list[dict]:
        """Per configuration measured in both versions (the dense baseline and every SD
        (alpha, k)): (label, curve A, curve B, A's fitted rows, B's fitted rows) from the
        joint posterior."""
        groups = fit.groups
        data = fit.data
        fitted = data.loc[~data["excluded"].astype(bool)]
        by_base: dict[str, dict[int, int]] = {}
        for g, (base, version) in enumerate(zip(groups["base"], groups["version_index"])):
            by_base.setdefault(str(base), {})[int(version)] = g
        pairs = []
        for base, members in by_base.items():
            if set(members) != {0, 1}:
                continue
            a, b = members[0], members[1]
            pairs.append((base, fit.group_curve(a), fit.group_curve(b),
                          fitted.loc[fitted["group"].eq(groups["label"].iloc[a])],
                          fitted.loc[fitted["group"].eq(groups["label"].iloc[b])]))
        return pairs

    def posterior_variables(self) -> list[str]:
        names = ["noise_base", "noise_load"] + [f"ratio_{n}" for n in COEFFICIENTS]
        names += ["alpha_latent"]
        if self.inputs is None or len(self.inputs.extras.get("base_baselines", [])):
            names += ["ratio_C1_dense", "ratio_C2_dense"]
        return names


def _two_levels(data: pd.DataFrame, by: str) -> list[str]:
    source = data.attrs.get("source_file")
    if by not in data.columns:
        raise BadInput("the data have no such column to compare by", file=source, column=by)
    levels = sorted(pd.unique(data[by].astype(str)))
    if len(levels) != 2:
        raise BadInput(f"needs exactly two values to compare, found {len(levels)}: "
                       f"{', '.join(levels[:5])}", file=source, column=by)
    return levels


def _members(bases, versions, levels, source, by) -> None:
    """Every base group measured in both versions (any number of runs each)."""
    seen: dict[str, set] = {}
    for b, v in zip(bases, versions):
        seen.setdefault(b, set()).add(int(v))
    for b, found in seen.items():
        if found != {0, 1}:
            raise BadInput(f"group '{b}' is measured in only one of {levels}; compare "
                           "needs both versions of every group", file=source, column=by)


def _pairs(bases, versions, levels, source, by) -> np.ndarray:
    """(base, 2) table of group indices: every base group in both versions."""
    names = list(dict.fromkeys(bases))
    table = np.full((len(names), 2), -1)
    for g, (b, v) in enumerate(zip(bases, versions)):
        table[names.index(b), v] = g
    if (table < 0).any():
        missing = names[int(np.flatnonzero((table < 0).any(axis=1))[0])]
        raise BadInput(f"group '{missing}' is measured in only one of {levels}; compare "
                       "needs both versions of every group", file=source, column=by)
    return table


# Below this share of the prior variance removed by the data, a version effect's
# posterior is mostly its prior: "uncertain: collect more data" would mislead, since
# more sweeps of the same design do not separate it (c1p at one (prefill, decode) pair).
IDENTIFIED_CONTRACTION = 0.5
# Log effects this anti-correlated are separated by the design only through their sum
# (c2p vs c2v at one decode length): a flag on one alone is half the story.
TRADEOFF_CORRELATION = -0.7


def _identified(entry: dict, ratio: np.ndarray, prior_sd: float) -> dict:
    """Add ``prior_contraction`` (1 - posterior/prior variance of the log effect) and,
    when the data barely moved the prior, say so instead of asking for more data."""
    contraction = 1.0 - float(np.var(np.log(ratio))) / prior_sd ** 2
    entry["prior_contraction"] = contraction
    if contraction < IDENTIFIED_CONTRACTION and entry["verdict"].startswith("uncertain"):
        entry["verdict"] = ("not identified: the posterior is mostly the prior (more "
                            "sweeps of this design will not separate it)")
    return entry


def _tradeoffs(population: dict) -> list[dict]:
    """Pairs of same-side coefficients (c1*, c2*) whose log effects are strongly
    anti-correlated in the posterior."""
    names = list(population)
    logs = np.log(np.stack([population[n] for n in names]))
    with np.errstate(invalid="ignore", divide="ignore"):
        correlation = np.corrcoef(logs)
    found = []
    for i, a in enumerate(names):
        for j in range(i + 1, len(names)):
            b = names[j]
            r = float(correlation[i, j])
            if a[:2] == b[:2] and np.isfinite(r) and r <= TRADEOFF_CORRELATION:
                found.append({"parameters": [a, b], "correlation": r})
    return found
