"""One model over many configurations: the cycle coefficients follow scaling trends.

The cycle coefficients of docs/laws.md, eq. (3): c1p, c1v, c2p, c2v grow roughly
linearly with the verifier's parameter count, c1d and c2d with the drafter's; c2p grows
with the prefill length and c2v with the time-averaged context ``prefill + 0.5*decode``.
This model writes each coefficient as a sum of positive terms, each a known covariate
times a population rate (``trend``, one value per term, shared by every configuration),
then lets each verifier (a *system*: verifier plus engine columns) and each (system,
drafter) pair deviate multiplicatively with learned spreads, and each measurement
*cell* (system, prefill, decode) deviate on its C1 and C2 with a learned spread:

    c1p = (a0 + a1*Pv + a2*Pv*p) * exp(d_1p[system] + e_1[cell])
    c1v = (b0 + b1*Pv)           * exp(d_1v[system] + e_1[cell])
    c2p = (c0 + c1*Pv*p)         * exp(d_2p[system] + e_2[cell])
    c2v = (v0*Pv + (v1 + v2*Pv)*(p + g/2)) * exp(d_2v[system] + e_2[cell])
    c1d = (f0 + f1*Pd)           * exp(d_1d[pair] + e_1[cell])
    c2d = (h0 + h1*Pd + h2*Pv)   * exp(d_2d[pair] + e_2[cell])

with Pv, Pd in billions of parameters and p, g in thousands of tokens. The terms are the
roofline's: a per-step or per-request overhead, weight streaming (proportional to
parameters), prefill compute (parameters x prompt tokens), KV-cache reads (context
length, with bytes per token growing mildly with model size) and per-token compute in a
batch (parameters); c2d also carries the verifier's cost of checking one more token.
Dense rows are eq. (3) at k = 0 (E = 1): C1 = c1p + g*c1v, C2 = c2p + g*c2v.

A configuration nobody measured is predicted from the trends plus the spreads: a held-out
cell gets its deviation from the cell spread, a held-out verifier its deviation from the
system spread (``bayesspec check``).

Priors: with the GPU's card in the catalog (physics priors, the default), each rate is
log-normal around its roofline value (weights/bandwidth, 2*params/FLOP/s, KV bytes per
token/bandwidth) with a log-sd of 1 (a factor of 2.7), overheads around a millisecond with
a log-sd of 1.5; without the card, or with ``physics_priors="off"``, every rate gets a
log-sd of 2.5 around an H100-class reference. ``bayesspec check --prior-predictive``
shows that the priors admit the data.

Saturation: the trends do not keep every observed point below saturation by construction
(the dense and speculative models do), so the likelihood caps the utilisation smoothly
just below 1 (:func:`bayesspec.bayes.priors.soft_utilisation_cap`).

Leave-n-out: built with ``holdout_mask=True`` the model has a ``fit_mask`` data array; folds
refit one compiled model with a new mask, and the held-out points are predicted from the
posterior of their (unfitted) groups.

Kept whole: one model class with the trend and deviation blocks only it uses.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from bayesspec.bayes.lazymodule import lazy_module

pm, pt = lazy_module("pymc"), lazy_module("pytensor.tensor")  # loaded on first use

from bayesspec.data import EXTRA_GROUP_COLUMNS
from bayesspec.errors import BadInput
from bayesspec.laws import effective_costs_expr
from bayesspec.laws.trends import (TERM_NAMES, TREND_TERMS, covariates, physics_centres,
                        trend_coefficients)
from bayesspec.bayes import moe_split
from bayesspec.bayes.spread_estimate import c2p_spread
from bayesspec.bayes.base import COMMON_CONFIG, ModelInputs
from bayesspec.bayes.speculative import COEFFICIENTS, SpeculativeLatencyModel
from bayesspec.bayes.options import model_defaults

SYSTEM_COEFFICIENTS = ("c1p", "c1v", "c2p", "c2v")
PAIR_COEFFICIENTS = ("c1d", "c2d")
REFERENCE_GPU = "H100"
# Columns that make two verifiers different systems (the GPU is the same for all rows).
SYSTEM_COLUMNS = ("verifier",) + tuple(c for c in EXTRA_GROUP_COLUMNS
                                       if c not in ("gpu", "method"))


def _spread(name: str, typical: float, rows: int):
    """The spread of verifier (or drafter) deviations: log-normal around ``typical``.

    Informative on purpose. A handful of verifiers cannot tell a spread of 0.3% from
    3%, and a spread that wanders towards zero turns the hierarchy into a funnel
    (measured on the bundled data, whose roofline verifiers follow the trends almost
    exactly: 41 divergences and R-hat up to 2.2 with half-normal or Gamma(2) priors).
    Log-normal(log typical, 0.6) keeps 95% of the prior between typical/3.2 and
    typical*3.2, where real differences between model families live (KV bytes per
    token of Llama-3.1-8B and Qwen3-8B differ by 12%), and the data still move it.
    One spread shared by the coefficients (a verifier's departure from the trends on
    one scale): four verifiers give sixteen deviations to learn it from, instead of
    four per coefficient (R-hat 1.03 on the per-coefficient spreads, measured).
    """
    return pt.repeat(pm.LogNormal(name, float(np.log(typical)), 0.6), rows)


def _member_deviation(name: str, spread, trend_at_typical, dims: tuple[str, str],
                      centred: np.ndarray):
    """Log deviations of each verifier (or verifier-drafter pair) from the trends.

    Rows marked ``centred`` are centred on the *value*: the free variable is the log of
    the member's coefficient at the typical lengths, normal around the trend, and the
    deviation is what is left. That suits coefficients each verifier's cells pin down
    far more tightly than the spread: the per-cycle costs c1v and c2v, which dominate C1
    and C2 (sampling their deviations couples every member to the trend's level and
    shares along a thin ridge: R-hat 1.25 to 2.1 on the bundled dense data), and c2p,
    which every load sweep measures (non-centred, its level and the four verifiers'
    deviations were correlated at -0.6 to -0.83, the slowest direction of the whole fit:
    bulk ESS 297-373 of 8000 draws and R-hat 1.011; centred, ESS 1344-1383 and R-hat
    1.004, measured on the bundled data; where the data measure c2p coarsely the
    centred form is the funnel instead, so version 7 chooses per data set:
    ``centred_system_coefficients``). c1p and the drafter's are weakly informed per
    member and stay non-centred: centred, with a spread free to shrink, they were a
    funnel (41 divergences, all at small spreads).
    """
    members = len(pm.modelcontext(None).coords[dims[1]])
    rows = len(centred)
    if members < 2:
        # One member: its deviation and the trend's level are the same thing.
        return pt.zeros((rows, members))
    log_trend = pt.log(trend_at_typical)
    out = pt.zeros((rows, members))
    if centred.any():
        c = np.flatnonzero(centred)
        value = pm.Normal(f"log_{name}_value", log_trend[c], spread[c][:, None],
                          shape=(len(c), out.shape[1]))
        out = pt.set_subtensor(out[c], value - log_trend[c])
    if (~centred).any():
        n = np.flatnonzero(~centred)
        z = pm.Normal(f"{name}_z", 0.0, 1.0, shape=(len(n), out.shape[1]))
        out = pt.set_subtensor(out[n], spread[n][:, None] * z)
    return pm.Deterministic(name, out, dims=dims)


def _conditional_deviation(spread, mu, sigma, observed, weight, cell_of_point, n_cells):
    """Each cell's log C1 deviation, parameterised around its conditional posterior.

    A cell's C1 deviation d multiplies every C1 of the cell, so it adds d to the log mean
    latency of each of its points: given everything else, the normal likelihood and the
    N(0, spread) prior make d normal with precision P = 1/spread^2 + sum(w) and mean
    sum(w r)/P (w = weight/sigma^2, r = observed - mu). With d = mean + z/sqrt(P) and
    z ~ N(0, 1), the joint density is p(rest) p(y | rest, d integrated out) N(z): z is
    independent of the rest, and the spread's funnel with the cells is gone (the
    non-centred form coupled them; its C1 spread was the stiffest direction of the
    posterior, 10 times any other, and the slowest to mix: benchmarks/sampler.py
    geometry; docs/findings/sampler-geometry.md, "The hierarchical model, from funnels to
    conditional coordinates").
    The potential turns the N(0, 1) prior of z into the model's own density (the prior
    of d and the Jacobian 1/sqrt(P)), so the model is unchanged, only its coordinates:
    exact under any likelihood (with a Student-t one z is merely not quite independent).
    """
    precision_data = pt.inc_subtensor(pt.zeros(n_cells)[cell_of_point], weight / sigma**2)
    weighted = pt.inc_subtensor(pt.zeros(n_cells)[cell_of_point],
                                weight * (observed - mu) / sigma**2)
    return _around_conditional("C1", spread, weighted, 1.0 / spread**2 + precision_data)


def _around_conditional(cost: str, spread, weighted, precision):
    """d = weighted/precision + z/sqrt(precision), z ~ N(0, 1), and the potential that
    turns z's prior into d's N(0, spread) prior with the Jacobian 1/sqrt(precision)."""
    z = pm.Normal(f"cell_{cost}_z", 0.0, 1.0, dims="cell")
    deviation = weighted / precision + z / pt.sqrt(precision)
    pm.Potential(f"cell_{cost}_conditional", pt.sum(
        pm.logp(pm.Normal.dist(0.0, spread), deviation) - 0.5 * pt.log(precision)
        - pm.logp(pm.Normal.dist(0.0, 1.0), z)))
    return deviation


def _conditional_c2_deviation(spread, c1_spread, mu, sigma, amplification, observed, weight,
                              cell_of_point, n_cells):
    """Each cell's log C2 deviation, parameterised around a linearised conditional.

    C2 enters through the pole, so unlike C1's its conditional is not normal; linearised
    at no deviation, log L moves by ``amplification`` x/(1-x) per unit of log C2, and
    with C1's deviation (a shift of every log L of the cell, prior sd ``c1_spread``;
    None when it is not conditional) integrated out the pair is a two-by-two normal
    problem per cell: the C2 deviation has precision P = 1/spread^2 + S_aa - S_1a^2/P_1
    and mean (S_ar - S_1a S_1r/P_1)/P, with S the weighted sums over the cell's points of
    a^2, a, a*r and r, P_1 = 1/c1_spread^2 + S_11. d = mean + z/sqrt(P) is exact whatever
    the linearisation's quality (mean and P do not depend on d; the potential carries
    the prior and the Jacobian): the approximation decides only how independent z is of
    the rest. The non-centred form's cell spread for C2 was the slowest variable of the
    bundled fit and, with many rates per sweep (a cell pinned far below its spread), a
    funnel (docs/findings/sampler-geometry.md, "The hierarchical model, from funnels to
    conditional coordinates", measured 2026-12-03).
    """
    def per_cell(values):
        return pt.inc_subtensor(pt.zeros(n_cells)[cell_of_point], values)

    w = weight / sigma**2
    residual = observed - mu
    s_aa = per_cell(w * amplification**2)
    s_ar = per_cell(w * amplification * residual)
    precision = 1.0 / spread**2 + s_aa
    weighted = s_ar
    if c1_spread is not None:
        s_1a = per_cell(w * amplification)
        c1_precision = 1.0 / c1_spread**2 + per_cell(w)
        precision = precision - s_1a**2 / c1_precision
        weighted = weighted - s_1a * per_cell(w * residual) / c1_precision
    return _around_conditional("C2", spread, weighted, precision)


def shift_subsample(cell_of_point: np.ndarray, n_cells: int, per_cell: int | None):
    """The points the conditional cell deviations are computed from: every point of a
    cell with at most ``per_cell`` of them, else ``per_cell`` spread evenly over the
    cell's points (in data order: across its sweeps and rates), each weighing
    (the cell's points / ``per_cell``). None when that is every point.

    The centre and scale of a conditional deviation may be any function of the other
    parameters: the reparameterisation stays exact (the potential carries the Jacobian),
    only its independence from the rest gets worse. With many rates per sweep a cell's
    sums over a subsample are as good as over all of it, and they are most of the cost
    of a gradient (at 16k rows 2.73 ms with every point, 0.70 ms with 16 per cell:
    docs/findings/sampler-geometry.md, "The hierarchical model, from funnels to
    conditional coordinates", measured 2026-12-03).
    """
    if per_cell is None:
        return None
    per_cell = int(per_cell)
    counts = np.bincount(cell_of_point, minlength=n_cells)
    if counts.max() <= per_cell:
        return None
    index, multiplier = [], []
    for cell in range(n_cells):
        members = np.flatnonzero(cell_of_point == cell)
        if len(members) <= per_cell:
            chosen = members
        else:
            chosen = members[np.unique(np.round(
                np.linspace(0, len(members) - 1, per_cell)).astype(int))]
        index.append(chosen)
        multiplier.append(np.full(len(chosen), len(members) / max(len(chosen), 1)))
    return np.concatenate(index), np.concatenate(multiplier)


def _first_terms() -> list[bool]:
    seen = set()
    out = []
    for coefficient, _, _ in TREND_TERMS:
        out.append(coefficient not in seen)
        seen.add(coefficient)
    return out


class HierarchicalLatencyModel(SpeculativeLatencyModel):
    name = "hierarchical"
    # 2: c2p's verifier deviations centred (the posterior's variables changed shape).
    # 4: cell C1 deviations parameterised around their conditional posterior.
    # 5: cell C2 deviations too, around a linearised conditional.
    # 6: the conditionals' sums over at most 16 points of a cell (the z mean otherwise).
    # 7: c2p's verifier deviations centred only when the data measure c2p finely.
    version = "7"
    # Version 3 needed 0.98 (0.95 with 1000 tuning steps: R-hat 1.012, 2 divergences on
    # the bundled data). Version 4's conditional cell deviations took the funnel away:
    # at 0.9, 0 divergences and R-hat 1.003-1.004 over three seeds with half the
    # gradients per draw (docs/findings/sampler-geometry.md, "The hierarchical model,
    # from funnels to conditional coordinates", measured 2026-12-02). Version 5 (C2's
    # too): ESS per gradient 2.3e-2 against version 3's 2.6e-3 at 0.9, R-hat <= 1.005,
    # 0 divergences over three seeds (2026-12-03); version 6 (sums over a subsample)
    # 2.0e-2, R-hat <= 1.0041, 0 divergences, at a quarter of the gradient cost at 16k rows.
    # Version 7 with diagonal adaptation (below) at one fixed target needed 0.98: at 0.9,
    # one divergence in two of four seeds on the scaling design (1k rows); at 0.95 none
    # there nor on the bundled data, but divergences in 15 of 34 SBC simulations
    # (low-rank at 0.9: 10); at 0.98 none in those 34, at the same cost at 16k rows (31
    # gradients per draw either way) and 35 s against 33 s of sampling on the bundled
    # data (2026-12-03).
    # So version 7 samples at 0.9 (15 gradients per draw, 0 divergences and R-hat <=
    # 1.0032 over three seeds on the bundled data) and again at 0.99 only when 0.9
    # diverges: the data sets that need the smaller step pay for it, the rest do not.
    # Retried at 0.98, 9 of the 100 SBC simulations still diverged; at 0.99 none did.
    target_accept = 0.9
    retry_target_accept = 0.99
    default_tune = 2000
    # Version 1 mixed slowly along the verifier spread and the trend levels (bulk ESS
    # 110-440 of 4 x 1000 draws on the bundled data, R-hat 1.007-1.012 over runs). With
    # version 2 the slowest variable is the cell spread, at bulk ESS 594-736 of 4 x 2000
    # and R-hat 1.002-1.009 over three seeds in 75-78 s: 2000 draws keep that margin.
    default_draws = 2000
    # Version 1 needed low-rank (diagonal: R-hat 1.12, bulk ESS 17 on the bundled dense
    # data, 2 chains x 500; the level/share/deviation directions were correlated). The
    # reparameterisations since took those correlations out, and nutpie's low-rank
    # adaptation costs about 8 ms per draw at 272 parameters, 3.4x the diagonal's cost
    # per gradient at 1k rows. Version 7 with diagonal adaptation: bundled data 29-35 s
    # of sampling against 64 s, 0 divergences; 16k rows 172 s against 292 s (both:
    # docs/findings/sampler-geometry.md, "The hierarchical model, from funnels to
    # conditional coordinates", measured 2026-12-03).
    adaptation = "diag"
    # Chains start near the mode (inference.optimised_starts): measured on the SBC
    # design, nutpie's jittered starts left one chain in a misfitting local mode in 4 of
    # 31 simulations (R-hat 1.83).
    init = "optimised"
    # Held-out configurations get their deviations from the learned spreads.
    predicts_unseen_configurations = True
    takes_holdout_mask = True
    default_config = model_defaults("hierarchical", SpeculativeLatencyModel.default_config)

    def check_config(self) -> None:
        centred = self.config["centred_deviations"]
        if centred != "auto" and (isinstance(centred, str) or not isinstance(
                centred, (list, tuple)) or not set(centred) <= set(SYSTEM_COEFFICIENTS)):
            raise ValueError(f"centred_deviations must be auto or a list of "
                             f"{', '.join(SYSTEM_COEFFICIENTS)}, got {centred!r}")
        for key in ("cell_c1_deviations", "cell_c2_deviations"):
            if self.config[key] not in ("conditional", "non_centred"):
                raise ValueError(f"{key} must be conditional or non_centred, got "
                                 f"{self.config[key]!r}")
        per_cell = self.config["conditional_points_per_cell"]
        if per_cell is not None and (isinstance(per_cell, bool) or not isinstance(
                per_cell, (int, float)) or int(per_cell) != per_cell or per_cell < 2):
            raise ValueError(f"conditional_points_per_cell must be an integer >= 2 or "
                             f"null, got {per_cell!r}")
        above = self.config["conditional_subsample_rows"]
        if isinstance(above, bool) or not isinstance(above, (int, float)) or (
                int(above) != above or above < 0):
            raise ValueError(f"conditional_subsample_rows must be an integer >= 0, got "
                             f"{above!r}")

    # ------------------------------------------------------------------ inputs
    def prepare(self, data: pd.DataFrame) -> ModelInputs:
        source = data.attrs.get("source_file")
        inputs = super().prepare(data)
        rows, groups, group_index = inputs.rows, inputs.groups, inputs.group_index
        for column in ("prefill_tokens", "decode_tokens"):
            missing = groups[column].isna()
            if missing.any():
                raise BadInput(f"the hierarchical model needs {column} for every group "
                               f"(missing for '{groups.loc[missing, 'label'].iloc[0]}')",
                               file=source, column=column)

        gpus = sorted({str(g) for g in rows.get("gpu", pd.Series(dtype=str)).dropna()
                       if str(g)})
        if len(gpus) > 1:
            raise BadInput(f"the hierarchical model fits one GPU at a time; the data hold "
                           f"{', '.join(gpus)} (filter the rows by gpu)", file=source,
                           column="gpu")
        self.gpu = gpus[0] if gpus else ""

        # Parameter counts per group: the column (filled from the catalog by read_tidy).
        def per_group(column: str) -> np.ndarray:
            if column not in rows.columns:
                return np.full(len(groups), np.nan)
            values = pd.to_numeric(rows[column], errors="coerce").to_numpy(float)
            out = np.full(len(groups), np.nan)
            for g in range(len(groups)):
                member = values[group_index == g]
                member = member[np.isfinite(member)]
                if member.size:
                    out[g] = member[0]
            return out

        groups["verifier_b"] = per_group("verifier_params_b")
        groups["drafter_b"] = per_group("drafter_params_b")
        unknown = ~np.isfinite(groups["verifier_b"].to_numpy())
        if unknown.any():
            name = groups.loc[unknown, "verifier"].iloc[0]
            raise BadInput(f"the hierarchical model needs the parameter count of verifier "
                           f"'{name}': add a verifier_params_b column or a catalog card",
                           file=source, column="verifier_params_b")
        unknown = groups["is_sd"].to_numpy(bool) & ~np.isfinite(groups["drafter_b"].to_numpy())
        if unknown.any():
            name = groups.loc[unknown, "drafter"].iloc[0]
            raise BadInput(f"the hierarchical model needs the parameter count of drafter "
                           f"'{name}': add a drafter_params_b column or a catalog card",
                           file=source, column="drafter_params_b")

        system_columns = [c for c in SYSTEM_COLUMNS if c in groups.columns]
        groups["system"] = groups[system_columns].astype(str).agg(" ".join, axis=1)
        groups["cell"] = groups["baseline"]
        systems = groups.drop_duplicates("system")[["system"] + system_columns +
                                                   ["verifier_b"]].reset_index(drop=True)
        cells = groups.drop_duplicates("cell")[["cell", "system", "prefill_tokens",
                                                "decode_tokens"]].reset_index(drop=True)
        system_number = {s: i for i, s in enumerate(systems["system"])}
        cell_number = {c: i for i, c in enumerate(cells["cell"])}
        cells["system_index"] = cells["system"].map(system_number).astype(int)
        groups["cell_index"] = groups["cell"].map(cell_number).astype(int)

        setups = inputs.extras["setups"]
        if len(setups):
            first = groups.loc[groups["is_sd"]].drop_duplicates("setup").set_index("setup")
            setups["cell_index"] = first.loc[setups["setup"], "cell_index"].to_numpy(int)
            setups["system"] = first.loc[setups["setup"], "system"].to_numpy()
            setups["drafter_b"] = first.loc[setups["setup"], "drafter_b"].to_numpy(float)
            setups["pair"] = setups["system"] + " +" + setups["drafter"].astype(str)
            pairs = list(dict.fromkeys(setups["pair"]))
            setups["pair_index"] = setups["pair"].map({p: i for i, p in enumerate(pairs)})
        else:
            pairs = []
        inputs.extras.update(systems=systems, cells=cells, pairs=pairs)
        return inputs

    def data_arrays(self, inputs):
        arrays = super().data_arrays(inputs)
        if self.holdout_mask:
            arrays["fit_mask"] = (np.ones(len(inputs.rows)), "point")
        return arrays

    # ------------------------------------------------------------------ priors
    def prior_centres(self, inputs: ModelInputs) -> tuple[np.ndarray, np.ndarray, bool]:
        """Log-centre and log-sd of every trend rate, and whether physics priors are on.

        The centres come from the model's catalog (the GPU's card and the verifiers'),
        and are recorded: a model rebuilt from a fit file uses the recorded ones, so a
        later change of catalog cannot change the prior of an existing fit."""
        mode = self.config["physics_priors"]
        if "prior_centres" in self.recorded:
            centres = self.recorded["prior_centres"]
            physics = bool(self.recorded["physics_priors"])
        else:
            catalog = self.catalog
            card = catalog.find_gpu(self.gpu) if self.gpu else None
            if mode == "on" and card is None:
                raise BadInput(f"physics priors need the GPU's catalog card; "
                               f"'{self.gpu or '?'}' has none (add a gpu column and a card, "
                               "or use physics_priors=off)", column="gpu")
            physics = mode != "off" and card is not None
            if mode == "auto":
                self.resolve_auto("physics_priors", "on" if physics else "off",
                                  f"the GPU card of '{self.gpu}' is known" if physics
                                  else "no GPU card")
            verifier_cards = [catalog.find_model(v)
                              for v in inputs.extras["systems"]["verifier"].astype(str)]
            centres = physics_centres(card if physics else catalog.gpu(REFERENCE_GPU),
                                      verifier_cards)
            self.recorded.update(prior_centres={k: float(v) for k, v in centres.items()},
                                 physics_priors=physics)
        mean = np.log([centres[name] for name in TERM_NAMES])
        cfg = self.config
        if physics:
            sd = np.array([cfg["overhead_log_sd"] if name.endswith("overhead")
                           else cfg["physics_log_sd"] for name in TERM_NAMES])
        else:
            sd = np.full(len(TERM_NAMES), cfg["vague_log_sd"])
        return mean, sd, physics

    def centred_system_coefficients(self, inputs: ModelInputs) -> tuple[str, ...]:
        """The system coefficients whose verifier deviations are centred (recorded: a
        model rebuilt from a fit file keeps the fit's parameterisation).

        ``auto``: c1v and c2v always (each verifier's cells pin them far more tightly than
        the spread; non-centred they were a ridge, _member_deviation), c2p when
        :func:`spread_estimate.c2p_spread` finds it measured to a third of the typical
        spread, and, when no dense sweep measures it, centred as before version 7."""
        if "centred_deviations" in self.recorded:
            return tuple(self.recorded["centred_deviations"])
        choice = self.config["centred_deviations"]
        if choice == "auto":
            estimate = c2p_spread(inputs.rows, inputs.groups, inputs.group_index)
            centre_c2p = estimate.centre(self.config["system_spread_scale"])
            choice = ("c1v", "c2v") + (("c2p",) if centre_c2p in (True, None) else ())
            self.recorded["c2p_spread_estimate"] = estimate.as_record()
            self.resolve_auto("centred_deviations", list(choice),
                              "c2p measured finely or unmeasured" if "c2p" in choice
                              else "c2p spread widely across verifiers")
        choice = tuple(n for n in SYSTEM_COEFFICIENTS if n in choice)
        self.recorded["centred_deviations"] = list(choice)
        return choice

    # ------------------------------------------------------------------ graph
    def build(self, data: pd.DataFrame) -> pm.Model:
        inputs = self.prepare(data)
        cfg = self.config
        groups, setups = inputs.groups, inputs.extras["setups"]
        systems, cells, pairs = (inputs.extras[k] for k in ("systems", "cells", "pairs"))
        n_groups, n_setups, n_cells = len(groups), len(setups), len(cells)
        latent = groups["alpha_latent"].to_numpy(bool)
        latent_idx = np.flatnonzero(latent)
        is_sd = groups["is_sd"].to_numpy(bool)
        setup_index = groups["setup_index"].to_numpy(int)
        cell_of_group = groups["cell_index"].to_numpy(int)

        coords = {"group": groups["label"].tolist(), "point": np.arange(len(inputs.rows)),
                  "trend_term": list(TERM_NAMES), "system": systems["system"].tolist(),
                  "system_coefficient": list(SYSTEM_COEFFICIENTS),
                  "cell": cells["cell"].tolist(), "cost": ["C1", "C2"],
                  "coefficient": list(COEFFICIENTS),
                  "share_term": [n for n, free in zip(TERM_NAMES, self.free_shares(inputs))
                                 if free]}
        if n_setups:
            coords["setup"] = setups["setup"].tolist()
            coords["pair"] = pairs
            coords["pair_coefficient"] = list(PAIR_COEFFICIENTS)
        if len(latent_idx):
            coords["latent_alpha_group"] = groups["label"].iloc[latent_idx].tolist()

        prior_mean, prior_sd, physics = self.prior_centres(inputs)
        self.physics = physics
        verifier_b = systems["verifier_b"].to_numpy(float)[cells["system_index"].to_numpy(int)]
        prefill = cells["prefill_tokens"].to_numpy(float)
        decode = cells["decode_tokens"].to_numpy(float)
        cell_covariates = covariates(verifier_b, 0.0, prefill, decode)
        system_of_cell = cells["system_index"].to_numpy(int)

        reference = self.reference_covariates(inputs)
        with pm.Model(coords=coords) as model:
            data = self.add_data(inputs)
            rates = self._trend_rates(prior_mean, prior_sd, reference, physics)

            system_sd = _spread("system_sd", cfg["system_spread_scale"], 4)
            typical_prefill, typical_decode = self.typical_lengths(inputs)
            system_trends = trend_coefficients(rates, covariates(
                systems["verifier_b"].to_numpy(float), 0.0, typical_prefill, typical_decode))
            system_dev = _member_deviation(
                "system_deviation", system_sd,
                pt.stack([system_trends[n] for n in SYSTEM_COEFFICIENTS]),
                ("system_coefficient", "system"),
                centred=np.array([n in self.centred_system_coefficients(inputs)
                                  for n in SYSTEM_COEFFICIENTS]))
            split = moe_split.uses_split(inputs)
            conditional = cfg["cell_c1_deviations"] == "conditional" and not split
            c2_conditional = cfg["cell_c2_deviations"] == "conditional" and not split
            cell_sd = pm.HalfNormal("cell_sd", cfg["cell_spread_scale"], dims="cost")
            # Non-centred (when not conditional): when the trends describe the cells well
            # the spread is far smaller than what one cell's data can resolve (measured:
            # 0.02-0.2% on the simulator data), the regime where a centred spread is a
            # funnel.
            c2_cell_dev = (pt.zeros(n_cells) if c2_conditional else
                           cell_sd[1] * pm.Normal("cell_C2_z", 0.0, 1.0, dims="cell"))
            # A C1 deviation conditional on the rest is added after the likelihood, which
            # it needs; until then C1-side values leave it out.
            c1_cell_dev = (pt.zeros(n_cells) if conditional else
                           cell_sd[0] * pm.Normal("cell_C1_z", 0.0, 1.0, dims="cell"))
            cell_dev = (c1_cell_dev, c2_cell_dev)

            trends = trend_coefficients(rates, cell_covariates)
            cell_coefficients = {}
            for i, name in enumerate(SYSTEM_COEFFICIENTS):
                side = 0 if name.startswith("c1") else 1
                cell_coefficients[name] = trends[name] * pt.exp(
                    system_dev[i][system_of_cell] + cell_dev[side])

            zeros = pt.zeros(n_groups)
            coefficient = {n: cell_coefficients[n][cell_of_group]
                           for n in SYSTEM_COEFFICIENTS}
            coefficient["c1d"] = zeros
            coefficient["c2d"] = zeros
            per_setup = {}
            if n_setups:
                setup_cells = setups["cell_index"].to_numpy(int)
                pair_of_setup = setups["pair_index"].to_numpy(int)
                pair_sd = _spread("pair_sd", cfg["system_spread_scale"], 2)
                first_setup = setups.drop_duplicates("pair")
                pair_trends = trend_coefficients(rates, covariates(
                    verifier_b[first_setup["cell_index"].to_numpy(int)],
                    first_setup["drafter_b"].to_numpy(float), typical_prefill,
                    typical_decode))
                pair_dev = _member_deviation(
                    "pair_deviation", pair_sd,
                    pt.stack([pair_trends[n] for n in PAIR_COEFFICIENTS]),
                    ("pair_coefficient", "pair"), centred=np.zeros(2, dtype=bool))
                setup_covariates = covariates(verifier_b[setup_cells],
                                              setups["drafter_b"].to_numpy(float),
                                              prefill[setup_cells], decode[setup_cells])
                setup_trends = trend_coefficients(rates, setup_covariates)
                per_setup = {n: cell_coefficients[n][setup_cells] for n in SYSTEM_COEFFICIENTS}
                for i, name in enumerate(PAIR_COEFFICIENTS):
                    side = 0 if name.startswith("c1") else 1
                    per_setup[name] = setup_trends[name] * pt.exp(
                        pair_dev[i][pair_of_setup] + cell_dev[side][setup_cells])
                sd_idx = np.flatnonzero(is_sd)
                for name in PAIR_COEFFICIENTS:
                    coefficient[name] = pt.set_subtensor(
                        coefficient[name][sd_idx], per_setup[name][setup_index[sd_idx]])

            known_alpha = np.where(np.isnan(groups["alpha"].to_numpy(float)), 0.5,
                                   groups["alpha"].to_numpy(float))
            alpha = self._alpha(groups, latent_idx, known_alpha)
            c1, c2 = effective_costs_expr(
                alpha, groups["k"].to_numpy(float), decode[cell_of_group],
                *(coefficient[n] for n in COEFFICIENTS), xp=pt)
            data["cap_utilisation"] = True
            shift = {}
            shift_points = shift_subsample(
                cell_of_group[inputs.group_index], n_cells,
                cfg["conditional_points_per_cell"]
                if len(inputs.rows) > cfg["conditional_subsample_rows"] else None)
            cell_of_point = cell_of_group[inputs.group_index]
            if shift_points is not None:
                cell_of_point = cell_of_point[shift_points[0]]

            def c1_log_shift(mu, sigma, observed, weight):
                shift["C1"] = _conditional_deviation(cell_sd[0], mu, sigma, observed,
                                                     weight, cell_of_point, n_cells)
                return shift["C1"][cell_of_group]

            def c2_log_shift(mu, sigma, amplification, observed, weight):
                shift["C2"] = _conditional_c2_deviation(
                    cell_sd[1], cell_sd[0] if conditional else None, mu, sigma,
                    amplification, observed, weight, cell_of_point, n_cells)
                return shift["C2"][cell_of_group]

            self.likelihood(c1, c2, cfg, data, inputs,
                            c1_log_shift=c1_log_shift if conditional else None,
                            c2_log_shift=c2_log_shift if c2_conditional else None,
                            shift_points=shift_points)
            c1_cell_dev = shift.get("C1", c1_cell_dev)
            c2_cell_dev = shift.get("C2", c2_cell_dev)
            c1_factor = pt.exp(c1_cell_dev) if conditional else pt.ones(n_cells)
            c2_factor = pt.exp(c2_cell_dev) if c2_conditional else pt.ones(n_cells)
            pm.Deterministic("cell_deviation", pt.stack([c1_cell_dev, c2_cell_dev]),
                             dims=("cost", "cell"))
            for name in SYSTEM_COEFFICIENTS:
                factor = c1_factor if name.startswith("c1") else c2_factor
                pm.Deterministic(f"cell_{name}", cell_coefficients[name] * factor,
                                 dims="cell")
            if n_setups:
                for name in COEFFICIENTS:
                    factor = (c1_factor if name.startswith("c1") else c2_factor)[setup_cells]
                    per_setup[name] = pm.Deterministic(name, per_setup[name] * factor,
                                                       dims="setup")
                g = decode[setup_cells]
                pm.Deterministic("C1_dense", per_setup["c1p"] + g * per_setup["c1v"],
                                 dims="setup")
                pm.Deterministic("C2_dense", per_setup["c2p"] + g * per_setup["c2v"],
                                 dims="setup")
        return model

    def prior_model(self, data: pd.DataFrame) -> pm.Model:
        plain = type(self)({**self.config, "cell_c1_deviations": "non_centred",
                            "cell_c2_deviations": "non_centred"},
                           catalog=self._catalog)
        plain.recorded = dict(self.recorded)
        built = plain.build(data)
        # What build derives (inputs, prior centres, the GPU) is this model's too.
        self.inputs, self.gpu, self.physics = plain.inputs, plain.gpu, plain.physics
        self.recorded.update(plain.recorded)
        return built

    def free_shares(self, inputs: ModelInputs) -> np.ndarray:
        """Which terms get a free share: not the first of its coefficient, and not
        proportional to an earlier term over the data (one verifier in the data: its
        overhead and weight terms are the same column; sampling their split is a ridge
        that only the prior bounds, measured R-hat up to 1.34)."""
        systems, cells, setups = (inputs.extras[k] for k in ("systems", "cells", "setups"))
        verifier_b = systems["verifier_b"].to_numpy(float)[cells["system_index"].to_numpy(int)]
        on_cells = covariates(verifier_b, 0.0, cells["prefill_tokens"].to_numpy(float),
                              cells["decode_tokens"].to_numpy(float))
        if len(setups):
            cell = setups["cell_index"].to_numpy(int)
            on_setups = covariates(verifier_b[cell], setups["drafter_b"].to_numpy(float),
                                   cells["prefill_tokens"].to_numpy(float)[cell],
                                   cells["decode_tokens"].to_numpy(float)[cell])
        free = ~np.array(_first_terms())
        for coefficient in COEFFICIENTS:
            terms = [i for i, (c, _, _) in enumerate(TREND_TERMS) if c == coefficient]
            source = on_cells if coefficient in SYSTEM_COEFFICIENTS else (
                on_setups if len(setups) else None)
            if source is None:
                continue
            columns = []
            for i in terms:
                column = np.broadcast_to(np.asarray(source[TREND_TERMS[i][2]], float),
                                         (len(cells) if coefficient in SYSTEM_COEFFICIENTS
                                          else len(setups),)).astype(float)
                unit = column / np.linalg.norm(column)
                if any(abs(float(unit @ earlier)) > 1 - 1e-9 for earlier in columns):
                    free[i] = False
                columns.append(unit)
        return free

    def typical_lengths(self, inputs: ModelInputs) -> tuple[float, float]:
        cells = inputs.extras["cells"]
        return (float(np.median(cells["prefill_tokens"].astype(float))),
                float(np.median(cells["decode_tokens"].astype(float))))

    def reference_covariates(self, inputs: ModelInputs) -> np.ndarray:
        """Each term's covariate at a typical configuration of the data (medians)."""
        systems, cells, setups = (inputs.extras[k] for k in ("systems", "cells", "setups"))
        verifier_b = systems["verifier_b"].to_numpy(float)[cells["system_index"].to_numpy(int)]
        typical = covariates(float(np.median(verifier_b)),
                             float(np.median(setups["drafter_b"])) if len(setups) else 1.0,
                             *self.typical_lengths(inputs))
        return np.array([float(typical[cov]) for _, _, cov in TREND_TERMS])

    def _trend_rates(self, prior_mean, prior_sd, reference, physics):
        """The trend rates as a level per coefficient and shares between its terms.

        A coefficient's terms trade off against each other and against the verifier
        deviations (an intercept and a slope in parameters explain four verifiers almost
        equally well). Writing each coefficient as its value at the typical configuration
        (``level``, what the data pin down hardest) times shares of its terms removes that
        ridge, as the anchor normalisation does in the speculative model; a chain stuck
        in it was the one failure of the direct form (R-hat 2.2 on the bundled data).
        """
        cfg = self.config
        owner = np.array([COEFFICIENTS.index(c) for c, _, _ in TREND_TERMS])
        first = np.array(_first_terms())
        prior_terms = np.exp(prior_mean) * reference
        prior_level = np.array([prior_terms[owner == i].sum() for i in range(6)])
        # Prior of a level: the log-sd of its terms (overheads are the vaguer ones).
        level_sd = np.array([prior_sd[owner == i].min() for i in range(6)])
        log_level = pm.Normal("log_level", np.log(prior_level), level_sd, dims="coefficient")
        share_sd = cfg["overhead_log_sd"] if physics else cfg["vague_log_sd"]
        log_ratio_prior = np.log(prior_terms) - np.log(prior_terms[
            np.array([np.flatnonzero(owner == o)[0] for o in owner])])
        free = self.free_shares(self.inputs)
        share_logit = pm.Normal("share_logit", log_ratio_prior[free], share_sd,
                                dims="share_term")
        # Terms the data cannot separate from an earlier one keep their prior ratio.
        logits = pt.set_subtensor(pt.as_tensor_variable(
            np.where(first, 0.0, log_ratio_prior))[np.flatnonzero(free)], share_logit)
        weights = pt.exp(logits)
        membership = (owner[None, :] == np.arange(6)[:, None]).astype(float)
        totals = pt.dot(membership, weights)
        shares = weights / totals[owner]
        level = pt.exp(log_level)
        return pm.Deterministic("trend", shares * level[owner] / reference, dims="trend_term")

    @classmethod
    def default_sbc_design(cls) -> pd.DataFrame:
        """Three Qwen3 verifiers (1.7B, 8B, 14B) at prefill/decode 256 and 1024 (12 dense
        cells on the roofline trends, 1% cell deviations) plus the speculative model's
        design, so the trends, both spreads and the drafter terms are all exercised (17
        curves, 7 points each)."""
        from bayesspec.data import prepare
        from bayesspec.simulate.synthetic import generate_sweeps, hierarchical_truth, speculative_truth

        truth = pd.concat([hierarchical_truth(("Qwen3-1.7B", "Qwen3-8B", "Qwen3-14B"),
                                              (256, 1024)),
                           speculative_truth(alphas=(0.6, 0.8), ks=(1, 4))],
                          ignore_index=True)
        return prepare(generate_sweeps(truth, n_rates=8, seed=0), source="<sbc design>")

    def posterior_variables(self) -> list[str]:
        return ["noise_base", "noise_load", "trend", "system_sd", "cell_sd", "pair_sd",
                "c1p", "c1v", "c1d", "c2p", "c2v", "c2d", "C1_dense", "C2_dense",
                "alpha_latent",
                # A sparse verifier's covered/saturated split (eq. (4)), where it has one.
                "C1u", "C1s", "C2u", "C2s", "share_C1s", "share_C2s"]
