"""What every PyMC latency model of bayesspec provides: the contract :class:`LatencyModel`.

A model turns a validated tidy table (``bayesspec.data``) into a ``pymc.Model`` whose
posterior holds, for every fitted group, the per-request costs ``C1`` and ``C2`` (dims
``group``). Its name and version are written into every fit file so that a file is never
read by a model that would interpret it differently. The module is kept whole because
the contract is one class (inputs, fitting with the cap check on the draws, saving and
loading, and the prediction contract every fit answers); its free helpers live in
:mod:`~bayesspec.bayes.caps`, :mod:`~bayesspec.bayes.measurement` and
:mod:`~bayesspec.bayes.profile_inputs`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from bayesspec.bayes.cap_prior import LEARNED_CAP, LEARNED_CAP_DIM
from bayesspec.bayes.caps import (CAP_IMPORTANCE_MAX_WEIGHT, CAP_IMPORTANCE_MIN_ESS_SHARE,
                                  CAP_REACH_TOLERANCE, cap_departure, cap_reaches_the_data,
                                  fitted_cap, group_caps, importance_summary,
                                  log_density_at_draws)
from bayesspec.bayes.measurement import measured_run_log_sd, measurement_log_se, run_spread
from bayesspec.bayes.options import OPTIONS, resolved_options, upgrade_stored
from bayesspec.bayes.options import check_config as check_options
from bayesspec.bayes.profile_inputs import decode_profile_inputs, profile_chain_arrays
from bayesspec.data import (ENGINE_LIMIT_COLUMNS, assign_groups, group_label, has_mean_latency,
                            included)
from bayesspec.errors import BadInput, FitFileError
from bayesspec.inference.fitfile import Fit, read_tree
from bayesspec.laws import run_process_layout
from bayesspec.prediction import ConfigurationLaw, Curve, Noise, ProfileCurve, RunProcess

# Helpers that live in their own modules, still importable from here (deprecated: import
# them from bayes.caps, bayes.measurement and bayes.profile_inputs).
from bayesspec.bayes.caps import CAP_REACH_HEADROOM, CAP_REACH_SUMMARY_TOLERANCE  # noqa: F401
from bayesspec.bayes.caps import engine_limits  # noqa: F401
from bayesspec.bayes.measurement import whole_run_requests  # noqa: F401


@dataclass
class ModelInputs:
    """The arrays a model is built from, kept so that predictions use the same groups."""

    rows: pd.DataFrame            # the rows entering the likelihood
    groups: pd.DataFrame          # one row per group, with a ``label`` column
    group_index: np.ndarray       # group of each likelihood row
    extras: dict = field(default_factory=dict)


def group_scales(rows: pd.DataFrame, group_index: np.ndarray, n_groups: int):
    """Per group: the highest observed rate and the latency at the lowest rate."""
    rps = rows["rps"].to_numpy(float)
    latency = rows["latency_mean_s"].to_numpy(float)
    rps_max = np.zeros(n_groups)
    latency_low = np.zeros(n_groups)
    for g in range(n_groups):
        members = np.flatnonzero(group_index == g)
        rps_max[g] = rps[members].max()
        latency_low[g] = latency[members[np.argmin(rps[members])]]
    return rps_max, latency_low


# The options every latency model's configuration holds (each model adds its own:
# bayes.options declares them all). ``noise_load_at`` "measured" bounds the likelihood's
# rate-error amplification by each point's measured L/C1 - 1: on the curve alone a draw
# escapes a sweep's top point by putting its ceiling just above it, which inflates that
# point's noise (docs/findings/decode-profile-law.md, "The Bayesian fit lost R^2 to its
# noise term, not to the law", measured 2026-12-05); laws with a mean of their own (MoE,
# discrepancies) ignore it.
COMMON_CONFIG = {name: OPTIONS[name].default_for("speculative")
                 for name in ("noise_base_median", "noise_load_median", "noise_log_sd",
                              "noise_load_at", "log_c1_scale", "utilisation_logit_mean",
                              "utilisation_logit_scale")}


class LatencyModel:
    """Base class: subclasses set ``name``/``version`` and implement ``build``."""

    name: str = "base"
    version: str = "0"
    default_config: dict = {}
    # NUTS target acceptance: 0.9 rather than 0.8 because the steep top-load points of a
    # sweep otherwise give a rare divergence; models with more curvature raise it.
    target_accept: float = 0.9
    # A higher target to sample again at when the model's own gives divergent transitions
    # (inference.sample_compiled); None: no second try. A smaller step reaches the steep
    # top of a sweep (near eq. (1)'s pole or the engine's ceiling) that the first did not;
    # most fits never need it, and a retried fit says so in its verdict.
    retry_target_accept: float | None = 0.99
    # nutpie mass-matrix adaptation ("diag" or "low_rank"), chosen by measurement.
    adaptation: str = "diag"
    # Chain starts ("jitter" or "optimised", see inference.optimised_starts).
    init: str = "jitter"
    # Options whose default changed: the value a fit file that does not record the option
    # was made with (read back by ``from_tree``).
    legacy_defaults: dict = {"profile_law": "poisson", "noise_load_at": "curve",
                             "prefill_batching": False, "mean_law": "eq1"}
    # Tuning steps and draws per chain when the user does not say (``--tune``, ``--draws``).
    default_tune: int = 1000
    default_draws: int = 1000
    # Parameters of one group's curve (C1, C2): a group needs this many rates plus two to
    # pin them down and see the noise (inference.design_advice).
    curve_parameters: int = 2
    # Models whose likelihood reads eq. (1)'s C1 and C2 per group may let ``fit`` leave a
    # stated cap out where the fitted points stay below where it moves the latency, and
    # check the posterior draws afterwards (:meth:`cap_reach_share`).
    checks_cap_on_draws: bool = False
    # True only while ``fit`` builds with that check to follow; every other build (folds,
    # refits on new data, plans) keeps the cap wherever twice the load would reach it.
    cap_checked_on_draws: bool = False

    #: Whether the model builds with a ``fit_mask`` (``holdout_mask``: refits without
    #: some points, the leave-n-out folds).
    takes_holdout_mask = False

    def __init__(self, config: dict | None = None, *, catalog=None, holdout_mask=False,
                 stored: bool = False):
        """``config``: options over the model's defaults, checked against their
        declarations (bayes.options; ValueError in one line). ``holdout_mask``: build
        with a ``fit_mask`` data array. ``stored``: a configuration read back from a fit
        file (values checked, options the model keeps at a resolved value accepted)."""
        # What each "auto" option became, with why (``resolve_auto``); set before the
        # configuration is checked, which resolves those that depend on it alone.
        self.resolved: dict = {}
        self.config = check_options(self.name, self.default_config, config, stored=stored)
        if holdout_mask and not self.takes_holdout_mask:
            raise ValueError(f"the {self.name} model does not refit without some points")
        self.holdout_mask = bool(holdout_mask)
        self.check_config()
        if self.config.get("noise_load_at") == "auto":
            self.config["noise_load_at"] = "curve"
        self.inputs: ModelInputs | None = None
        self._catalog = catalog
        self.fitted: Fit | None = None
        # What a build derived from outside the data and the config (e.g. prior centres
        # from catalog cards): stored in the fit file, and used instead of re-deriving it
        # when a fit's model is rebuilt (``restore``), so a rebuilt model is the fitted one.
        self.recorded: dict = {}

    def resolve_auto(self, name: str, value, why: str):
        """Record that the "auto" option ``name`` became ``value`` for ``why`` (a few
        words); ``fit`` prints it once and the fit file stores it. Returns ``value``."""
        self.resolved[name] = {"value": value, "why": why}
        return value

    @property
    def catalog(self):
        """The catalog of model and GPU cards this model reads (the default one unless
        given)."""
        if self._catalog is None:
            from bayesspec.data.catalog import default_catalog

            self._catalog = default_catalog()
        return self._catalog

    def restore(self, recorded: dict) -> "LatencyModel":
        """Use what a fitted build recorded (see ``recorded``)."""
        self.recorded = dict(recorded)
        return self

    @property
    def identity(self) -> str:
        """A short hash of the model's name, version and configuration."""
        blob = json.dumps({"name": self.name, "version": self.version, "config": self.config},
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    #: Whether the model needs measured mean latencies (every model but ``tails``, which
    #: also fits a file of percentiles alone).
    needs_mean_latency = True

    def prepare(self, data: pd.DataFrame) -> ModelInputs:
        """The likelihood rows, the groups with their scales, and each row's group."""
        if self.needs_mean_latency and not has_mean_latency(data):
            raise BadInput(f"the data have latency percentiles but no mean latency "
                           f"(latency_mean_s), which the {self.name} model fits; fit them "
                           "with --model tails", file=data.attrs.get("source_file"))
        rows = included(data).reset_index(drop=True)
        if rows.empty:
            raise BadInput("every row is saturated or excluded; nothing left to fit",
                           file=data.attrs.get("source_file"))
        groups, group_index = assign_groups(rows)
        rps_max, latency_low = group_scales(rows, group_index, len(groups))
        groups["rps_max"] = rps_max
        groups["latency_low"] = latency_low
        groups["n_points"] = np.bincount(group_index, minlength=len(groups))
        groups["cap"], groups["cap_source"], groups["wait_scale"] = group_caps(
            rows, group_index, len(groups))
        caps, waits = groups["cap"].to_numpy(float), groups["wait_scale"].to_numpy(float)
        groups["cap_in_likelihood"] = cap_reaches_the_data(rows, group_index, caps, waits)
        if self.cap_checked_on_draws and not self.config.get("decode_profile"):
            # ``fit`` checks the draws afterwards, so a cap that the fitted points
            # themselves do not reach may stay out of the likelihood (its special functions
            # cost several times eq. (1)'s gradient); the draws say whether it could.
            at_points = cap_reaches_the_data(rows, group_index, caps, waits, headroom=0.0,
                                             slope="top")
            groups["cap_left_out_on_trust"] = (groups["cap_in_likelihood"].to_numpy(bool)
                                               & ~at_points)
            groups["cap_in_likelihood"] = at_points
        how = self.config.get("cap_prior", "none")
        learned = ~np.isfinite(groups["cap"].to_numpy(float)) if how != "none" else None
        if learned is not None and learned.any():
            from bayesspec.bayes.cap_prior import learned_cap_priors

            first = [int(np.flatnonzero(group_index == g)[0]) for g in np.flatnonzero(learned)]
            setups = rows.iloc[first].reset_index(drop=True)
            centre, sd, words = learned_cap_priors(setups, self.catalog, how)
            groups["cap_learned"] = learned
            groups["cap_prior_log_centre"] = np.nan
            groups["cap_prior_log_sd"] = np.nan
            groups.loc[learned, "cap_prior_log_centre"] = centre
            groups.loc[learned, "cap_prior_log_sd"] = sd
            sources = np.array(groups["cap_source"].astype(object).to_numpy(), dtype=object)
            sources[learned] = words
            groups["cap_source"] = sources
            groups.loc[learned, "cap_in_likelihood"] = True
        for column in ENGINE_LIMIT_COLUMNS:
            if column in rows.columns:
                values = pd.to_numeric(rows[column], errors="coerce").to_numpy(float)
                groups[column] = [values[np.flatnonzero(group_index == g)[0]]
                                  for g in range(len(groups))]
        extras = {"log_se": measurement_log_se(rows), "run_sd": measured_run_log_sd(rows)}
        if self.config.get("run_effect", "none") == "shared" and not np.any(extras["run_sd"] > 0):
            missing = [c for c in ("latency_std_s", "n_requests") if c not in rows.columns]
            raise BadInput("run_effect shared reads each point's run from its spread and "
                           "request count, and no row has both"
                           + (f" (no column {', '.join(missing)})" if missing else ""),
                           file=data.attrs.get("source_file"),
                           column=None if missing else "latency_std_s")
        if self.config.get("decode_profile"):
            extras.update(decode_profile_inputs(self.config["decode_profile"], rows, groups,
                                                group_index))
        if "mean_law" in self.config:
            from bayesspec.bayes.profile_inputs import roof_inputs

            extras["mean_law_note"] = roof_inputs(
                rows, groups, group_index, self.catalog, self.config["mean_law"],
                cycles_known=self.roof_cycles_known)
            self.recorded["mean_law_note"] = extras["mean_law_note"]
            if (groups["mean_law"] == "roof").any():
                # Past the roof's ceiling the law has no root and its latency stays far
                # above any measurement, a plateau: a chain jittered into the factors'
                # tails stayed there for a whole run (compute factor 7, bend 2; 1 chain of
                # 2 on the roof study's seed 0, docs/findings/compute-roof.md). Start at
                # the mode.
                self.init = "optimised"
        self.inputs = ModelInputs(rows=rows, groups=groups, group_index=group_index,
                                  extras=extras)
        return self.inputs

    #: Whether a group's engine steps per request are known from the table (acceptance
    #: given), for the compute roof; False where the model learns E(k) in the graph.
    roof_cycles_known = True

    def empty_model(self, data: pd.DataFrame):
        """(inputs, an empty ``pm.Model`` with the ``group`` and ``point`` coords) for
        ``build``: open it, ``add_data(inputs)``, add the priors and the likelihood."""
        import pymc as pm

        inputs = self.prepare(data)
        coords = {"group": inputs.groups["label"].tolist(),
                  "point": np.arange(len(inputs.rows))}
        if "cap_learned" in inputs.groups:
            coords[LEARNED_CAP_DIM] = inputs.groups["label"][
                inputs.groups["cap_learned"].to_numpy(bool)].tolist()
        return inputs, pm.Model(coords=coords)

    def data_arrays(self, inputs: ModelInputs) -> dict[str, tuple[np.ndarray, str | None]]:
        """Every ``pm.Data`` of the model: name -> (values, dim)."""
        arrays = {
            "group_index": (inputs.group_index, "point"),
            "rps": (inputs.rows["rps"].to_numpy(float), "point"),
            # with the sweep's run effect, each point's error is its run's (run_sd), of
            # which cv/sqrt(n) is a part
            **({"run_sd": (inputs.extras["run_sd"], "point")}
               if self.config.get("run_effect", "none") == "shared"
               else {"log_se": (inputs.extras["log_se"], "point")}),
            "rps_max": (inputs.groups["rps_max"].to_numpy(float), "group"),
            "observed_log_latency": (np.log(inputs.rows["latency_mean_s"].to_numpy(float)),
                                     "point"),
        }
        caps = inputs.groups["cap"].to_numpy(float) if "cap" in inputs.groups else None
        if caps is not None and "cap_in_likelihood" in inputs.groups:
            caps = np.where(inputs.groups["cap_in_likelihood"].to_numpy(bool), caps, np.inf)
        learned = (inputs.groups["cap_learned"].to_numpy(bool)
                   if "cap_learned" in inputs.groups else None)
        if learned is not None:
            # A learned cap enters the likelihood wherever it is learned (add_data puts
            # the parameter in place of this placeholder).
            caps = np.where(learned, 1.0, caps)
            arrays["cap_prior_log_centre"] = (
                inputs.groups["cap_prior_log_centre"].to_numpy(float)[learned], LEARNED_CAP_DIM)
            arrays["cap_prior_log_sd"] = (
                inputs.groups["cap_prior_log_sd"].to_numpy(float)[learned], LEARNED_CAP_DIM)
        if "profile_shift" in inputs.extras:
            arrays["profile_shift"] = (inputs.extras["profile_shift"], "point")
            if self.config.get("profile_law", "poisson") == "chain":
                arrays.update(profile_chain_arrays(inputs))
                # The chain runs over n = 1..cap whatever the data reach: its groups take
                # their cap even where the slot queue alone would be eq. (1) (without it
                # the graph's one-slot stand-in made the chain a queue of one).
                in_chain = arrays["has_chain"][0] > 0
                caps = np.where(in_chain, inputs.groups["cap"].to_numpy(float), caps)
            for name in ("profile_knots", "profile_values", "profile_slopes"):
                arrays[name] = (inputs.extras[name], None)
        if "mean_law" in inputs.groups and (inputs.groups["mean_law"] == "roof").any():
            from bayesspec.bayes.profile_inputs import roof_arrays

            arrays.update(roof_arrays(inputs.groups))
        if caps is not None and np.isfinite(caps).any():
            # Without a cap that reaches the data the graph stays eq. (1)'s (no special
            # functions to compile); decisions still read the cap from the groups.
            has_cap = np.isfinite(caps)
            arrays["cap"] = (np.where(has_cap, caps, 1.0), "group")
            arrays["has_cap"] = (has_cap.astype(float), "group")
            arrays["wait_scale"] = (inputs.groups["wait_scale"].to_numpy(float), "group")
        return arrays

    def add_data(self, inputs: ModelInputs) -> dict:
        """Register :meth:`data_arrays` in the current ``pm.Model`` and return them."""
        import pymc as pm

        data = {name: pm.Data(name, values, dims=dim)
                for name, (values, dim) in self.data_arrays(inputs).items()}
        length = self.config.get("run_own_length", 0.0) or 0.0
        if length and self.config.get("run_effect", "none") == "shared":
            # constants (a fold refit changes the mask only, never the rates)
            data["run_own_layout"] = run_process_layout(
                np.log(inputs.rows["rps"].to_numpy(float)), inputs.group_index)
        return data

    def learn_caps(self, data: dict, c1, c2) -> None:
        """Put the learned caps (where the data state none and the model was asked to
        learn them, ``cap_prior``) in ``data["cap"]``, given each group's C1 and C2
        tensors, in the current ``pm.Model``.

        Parameterised by s = K/cap in (0, 1), K = rps_max (C1 - C2)/(1 - rps_max C2)
        the cap whose throughput is the group's top rate: s is the top rate's share of
        the way from eq. (1)'s pole to the cap's ceiling, (w - u)/(1 - u) with
        w = rps_max/ceiling and u = rps_max C2. Every fitted point stays below the
        ceiling (as u < 1 keeps it below the pole), and the bend the data see (w) moves
        apart from the slope below it (u): in log cap the two made a curved ridge with C2
        (R-hat 1.016, bulk ESS 347 on a clean slot-queue sweep). The cap's prior
        (bayes.cap_prior) is on log cap = log K - log s, a potential on s (declared
        uniform so that plumbing tests can draw it forward; ``prior_model`` refuses)."""
        if "cap_prior_log_centre" not in data:
            return
        import pymc as pm
        import pytensor.tensor as pt

        where = np.flatnonzero(self.inputs.groups["cap_learned"].to_numpy(bool))
        rps_max = data["rps_max"][where]
        c1, c2 = c1[where], c2[where]
        share = pm.Uniform("learned_cap_share", 0.0, 1.0, dims=LEARNED_CAP_DIM)
        # (C1 > C2 in any real sweep: a request's zero-load time against one more
        # request's cost; the floor only keeps prior draws finite)
        least = rps_max * pt.maximum(c1 - c2, 1e-6 * c1) / (1.0 - rps_max * c2)
        log_cap = pt.log(least) - pt.log(share)
        # the prior on log cap in s: density N(log cap) |d log cap / ds| = N(log cap)/s
        pm.Potential("learned_cap_prior", pt.sum(
            pm.logp(pm.Normal.dist(data["cap_prior_log_centre"], data["cap_prior_log_sd"]),
                    log_cap) - pt.log(share)))
        cap = pm.Deterministic(LEARNED_CAP, pt.exp(log_cap), dims=LEARNED_CAP_DIM)
        data["cap"] = pt.set_subtensor(data["cap"][where], cap)

    def data_values(self, data: pd.DataFrame) -> dict[str, np.ndarray]:
        """Values of every ``pm.Data`` of the model for new data of the same shape.

        Lets a compiled model be re-sampled on replicate or held-out data without
        recompiling (``bayesspec.inference.sample_compiled``).
        """
        inputs = self.prepare(data)
        return {name: values for name, (values, _) in self.data_arrays(inputs).items()}

    def check_config(self) -> None:
        """Raise ValueError for an option value the model cannot take (at construction,
        so the command line refuses it before any data are read or models built)."""

    def build(self, data: pd.DataFrame):  # pragma: no cover - abstract
        raise NotImplementedError

    def prior_model(self, data: pd.DataFrame):
        """A PyMC model whose forward draws (``pm.sample_prior_predictive``) are this
        model's prior and prior predictive. Forward sampling ignores potentials, so a
        model that reparameterises with one (the hierarchical model's cell deviations)
        builds a form without it; the rest build themselves."""
        if self.config.get("cap_prior", "none") != "none":
            raise BadInput("a learned cap's prior is a potential, which forward sampling "
                           "ignores: state the cap (max_num_seqs / kv_cache_tokens) for "
                           "prior draws", option="--cap-prior")
        return self.build(data)

    # ------------------------------------------------------------------ fit, save, load
    def fit(self, data: pd.DataFrame, settings=None) -> Fit:
        """Build on validated tidy ``data``, sample the posterior (settings left unset:
        the model's measured defaults) and return the :class:`~bayesspec.inference.fitfile.Fit`
        (also kept as ``self.fitted``). Warns (``ConvergenceWarning``) when the decision
        quantities did not converge."""
        import dataclasses
        import time
        import warnings

        from bayesspec.errors import ConvergenceWarning
        from bayesspec.inference import sample_model, settings_for

        started = time.perf_counter()
        asked = settings
        self.cap_checked_on_draws = self.checks_cap_on_draws
        try:
            pm_model = self.build(data)  # first: a build may choose the starts by the data
            settings = settings_for(self, asked)
            tree = sample_model(pm_model, settings)
            result = Fit.from_sampling(self, data, tree, settings=dataclasses.asdict(settings))
            result = self._settle_left_out_caps(result, data, pm_model, tree, settings, asked)
        finally:
            self.cap_checked_on_draws = False
        result.tree.attrs["fit_seconds"] = round(time.perf_counter() - started, 3)
        verdict = result.diagnostics
        if not verdict["converged"]:
            warnings.warn(verdict["text"], ConvergenceWarning, stacklevel=2)
        self.fitted = result
        return result

    def _settle_left_out_caps(self, result: Fit, data, pm_model, tree, settings, asked) -> Fit:
        """``fit``'s check of the caps its build left out (:meth:`cap_reach_share`): kept
        out when no draw reaches them; else the draws reweighed by the model with the caps
        (:meth:`cap_importance`) when the weights are sound; else sampled again with them.
        What happened is in the tree's attrs (``cap_check``, ``cap_reach_share``, the
        weights' ``cap_importance_*``)."""
        import dataclasses

        from bayesspec.inference import resample_within_chains, sample_model, settings_for
        from bayesspec.outputs import log

        share = self.cap_reach_share(result)
        if share is None:
            return result
        check, weighed = "left out", None
        if share > 0:
            log_ratio, capped_inputs = self.cap_importance(result, data, pm_model)
            weighed = importance_summary(log_ratio)
            if weighed is not None and (weighed["ess_share"] >= CAP_IMPORTANCE_MIN_ESS_SHARE
                                        and weighed["max_weight"] <= CAP_IMPORTANCE_MAX_WEIGHT):
                check = "reweighted"
                self.inputs = capped_inputs
                result = Fit.from_sampling(self, data, resample_within_chains(tree, log_ratio),
                                           settings=dataclasses.asdict(settings))
            else:
                check = "refitted"
                said = ("" if weighed is None else
                        f" (importance weights: effective share {weighed['ess_share']:.2f}, "
                        f"largest {weighed['max_weight']:.1f} times an even share)")
                log(f"note: the engine's cap would move the fitted points in {share:.1%} of "
                    f"the draws{said}; fitting again with its slot queue in the likelihood",
                    settings.progress)
                self.cap_checked_on_draws = False
                pm_model = self.build(data)
                settings = settings_for(self, asked)
                result = Fit.from_sampling(self, data, sample_model(pm_model, settings),
                                           settings=dataclasses.asdict(settings))
        result.tree.attrs["cap_check"] = check
        result.tree.attrs["cap_reach_share"] = round(float(share), 6)
        if weighed is not None:
            result.tree.attrs["cap_importance_ess_share"] = round(weighed["ess_share"], 4)
            result.tree.attrs["cap_importance_max_weight"] = round(weighed["max_weight"], 3)
        return result

    def cap_reach_share(self, fit: Fit) -> float | None:
        """The share of the posterior draws in which a cap that ``fit`` left out of the
        likelihood on the fitted points' evidence (groups' ``cap_left_out_on_trust``)
        would move a fitted point beyond its tolerance (:meth:`cap_departures`); None when
        no cap was left out so."""
        groups = fit.groups
        if ("cap_left_out_on_trust" not in groups
                or not groups["cap_left_out_on_trust"].to_numpy(bool).any()):
            return None
        rows = included(fit.data)
        beyond = None
        for g in np.flatnonzero(groups["cap_left_out_on_trust"].to_numpy(bool)):
            rps = rows.loc[rows["group"] == groups["label"].iloc[g], "rps"].to_numpy(float)
            for departure, tolerance in self.cap_departures(fit, int(g), rps):
                over = departure > tolerance
                beyond = over if beyond is None else beyond | over
        return None if beyond is None else float(np.mean(beyond))

    def cap_importance(self, fit: Fit, data: pd.DataFrame, free_model):
        """Per draw of ``fit`` (sampled from ``free_model``, a cap left out) the log density
        of the same model with every stated cap in its likelihood over ``free_model``'s
        (None when the draws cannot be evaluated), and that model's inputs."""
        kept = self.inputs, self.init, self.cap_checked_on_draws
        self.cap_checked_on_draws = False
        try:
            capped_model = self.build(data)
            capped_inputs = self.inputs
        finally:
            self.inputs, self.init, self.cap_checked_on_draws = kept
        try:
            log_ratio = (log_density_at_draws(capped_model, fit)
                         - log_density_at_draws(free_model, fit))
        except Exception:  # a transform this check cannot invert: no evidence either way
            return None, capped_inputs
        return log_ratio, capped_inputs

    def cap_departures(self, fit: Fit, group: int, rps) -> list[tuple[np.ndarray, float]]:
        """For each law the likelihood reads in ``group``: per draw how far the group's cap
        would move it at the fitted rates ``rps`` (:func:`cap_departure`), and how far it
        may. Here eq. (1)'s mean."""
        row = fit.groups.iloc[group]
        departure = cap_departure(rps, fit.draws("C1", group), fit.draws("C2", group),
                                  float(row["cap"]), float(row["wait_scale"]))
        return [(departure, CAP_REACH_TOLERANCE)]

    def save(self, path) -> str:
        """Save the last fit (``self.fitted``) to a fit file."""
        if getattr(self, "fitted", None) is None:
            raise BadInput(f"the {self.name} model has not been fitted; nothing to save")
        self.fitted.save(path)
        return str(path)

    @classmethod
    def from_tree(cls, tree, path=None) -> Fit:
        """A fit file's tree read back as a fit of this model (version checked)."""
        attrs = tree.attrs
        name = attrs.get("bayesspec_model")
        where = str(path) if path is not None else None
        if name != cls.name:
            raise FitFileError(f"made by model '{name}', not '{cls.name}'", file=where)
        if str(attrs.get("bayesspec_model_version")) != cls.version:
            raise FitFileError(
                f"made by {name} model version {attrs.get('bayesspec_model_version')}, this "
                f"bayesspec has version {cls.version}; refit the data", file=where)
        stored = upgrade_stored(cls.name, json.loads(attrs.get("model_config", "{}")), where)
        model = cls({**{key: value for key, value in cls.legacy_defaults.items()
                        if key in cls.default_config}, **stored}, stored=True)
        model.resolved = resolved_options(tree)
        model.restore(json.loads(attrs.get("model_record", "{}")))
        fit = Fit(tree, model, where)
        model.fitted = fit
        return fit

    @classmethod
    def load(cls, path) -> "LatencyModel":
        """The model of a saved fit, with the fit as ``fitted`` (``model.predict`` then
        answers from it)."""
        return cls.from_tree(read_tree(path), path).model()

    def predict(self, rps, *, fit: Fit | None = None, **selection) -> np.ndarray:
        """Mean-latency draws (samples, rates) of the fitted group ``selection`` names
        (group options; may be empty when the fit has one group), from ``fit`` or the
        last fit."""
        fit = fit or getattr(self, "fitted", None)
        if fit is None:
            raise BadInput(f"the {self.name} model has not been fitted; nothing to predict")
        return self.group_curve(fit, fit.select_group(**selection)).latency(
            np.atleast_1d(np.asarray(rps, dtype=float)))

    def posterior_variables(self) -> list[str]:
        """Variables worth reporting in ``summary`` besides the per-group costs."""
        return []

    # ------------------------------------------------------------------ prediction contract
    # What a fit of this model answers (bayesspec.prediction). Decisions, reports, plots,
    # checks and SBC use these methods only, never the posterior's variable names.

    #: Whether the model predicts configurations it was not fitted on (``bayesspec
    #: check`` holds some out and predicts them).
    predicts_unseen_configurations = False

    def decision_variables(self) -> list[str]:
        """Posterior variables the answers are computed from: their convergence is what
        the verdict judges (the rest, pooling hyperparameters and the like, are reported
        but cannot make an answer wrong on their own)."""
        return ["C1", "C2", "saturation_rps", "noise_base", "noise_load", LEARNED_CAP,
                "roof_memory_factor", "roof_compute_factor", "roof_bend"]

    def noise(self, fit) -> Noise:
        """The fitted measurement model of a mean latency."""
        return Noise(fit.draws("noise_base"), fit.draws("noise_load"),
                     bounded_in_fit=self.noise_load_bounded(fit))

    #: Whether the model's mean latency is a law of its own (passed to
    #: ``latency_likelihood`` as ``mean_latency``), whose noise keeps the curve's load
    #: term whatever ``noise_load_at`` says.
    own_mean_law: bool = False

    def noise_load_bounded(self, fit) -> bool:
        """Whether this fit's likelihood bounded its noise's load term by each measured
        latency's L/C1 - 1 (``noise_load_at`` "measured" on an eq. (1) law)."""
        return self.config.get("noise_load_at") == "measured" and not self.own_mean_law

    def group_curve(self, fit, group: int) -> Curve:
        """One fitted group's mean-latency curve (eq. 1 from its C1, C2)."""
        label = str(fit.groups["label"].iloc[group])
        profile = fit.decode_profile(group)
        roof = self.roof_curve(fit, group, fit.draws("C1", group), fit.draws("C2", group),
                               label)
        if roof is not None:
            curve = roof
        elif profile is not None:
            cap = fitted_cap(fit.groups, group, fit)
            curve = ProfileCurve(fit.draws("C1", group), fit.draws("C2", group),
                                 batch_sizes=profile[0], iteration_s=profile[1],
                                 decode_tokens=float(fit.groups["decode_tokens"].iloc[group]),
                                 label=label, noise=self.noise(fit),
                                 law=(self.config.get("profile_law", "poisson")
                                      if cap else "poisson"),
                                 prefill_batching=self.config.get("prefill_batching") is True,
                                 prefill_fixed_power=float(
                                     self.config.get("prefill_fixed_power", 1.0)),
                                 **cap)
        else:
            curve = Curve(fit.draws("C1", group), fit.draws("C2", group), label=label,
                          noise=self.noise(fit), **fitted_cap(fit.groups, group, fit))
        curve.rps_fitted_max = float(fit.groups["rps_max"].iloc[group])
        return self.with_run_effect(fit, group, curve)

    def roof_curve(self, fit, group: int, c1, c2, label: str, *, cycles=None,
                   noise: Noise | None = None):
        """The compute roof's curve of fitted group ``group`` at costs ``c1``, ``c2``
        (:class:`~bayesspec.prediction.RoofCurve`), None where the group follows eq. (1).
        ``cycles``: a request's engine steps (draws), where the table does not give them."""
        groups = fit.groups
        if ("mean_law" not in groups or groups["mean_law"].iloc[group] != "roof"
                or "roof_memory_factor" not in fit.posterior):
            return None
        from bayesspec.laws.roofline import ROOF_CARD_FIELDS
        from bayesspec.prediction import RoofCurve

        row = groups.iloc[group]
        # fits made before the prompts entered the step have no prompt fields: without
        # them the step is the decode tokens' alone, the law those fits were made with
        cards = {name: float(row.get(name, 0.0)) for name in ROOF_CARD_FIELDS}
        return RoofCurve(c1, c2, cards=cards,
                         memory_factor=fit.draws("roof_memory_factor"),
                         compute_factor=fit.draws("roof_compute_factor"),
                         bend=fit.draws("roof_bend"), k=float(row.get("k", 0) or 0),
                         cycles=float(row["roof_cycles"]) if cycles is None else cycles,
                         label=label, noise=self.noise(fit) if noise is None else noise,
                         **fitted_cap(groups, group, fit))

    def integrated_log_likelihood(self, fit):
        """Pointwise log-likelihood (an ``xr.Dataset`` of ``log_latency`` over chain, draw,
        point) for PSIS-LOO where the graph's own is conditional on a parameter per point,
        else None (``inference.add_log_likelihood`` then reads the graph's).

        With the points' own run errors as a process (``run_own_length``), each point's
        density with its own value integrated out given its neighbours'
        (``Curve.measurement`` of a fitted point): LOO on the graph's would leave out the
        point but keep its parameter."""
        if "run_own" not in fit.posterior:
            return None
        import xarray as xr

        rows = included(fit.data).reset_index(drop=True)
        posterior = fit.posterior
        chains, draws = posterior.sizes["chain"], posterior.sizes["draw"]
        pointwise = np.full((chains * draws, len(rows)), np.nan)
        for g, label in enumerate(fit.groups["label"]):
            where = np.flatnonzero(rows["group"].to_numpy(str) == str(label))
            if not where.size:
                continue
            members = rows.iloc[where]
            observed = members["latency_mean_s"].to_numpy(float)
            curve = self.group_curve(fit, g)
            centre, sigma = curve.measurement(members["rps"].to_numpy(float),
                                              measurement_log_se(members), measured=observed,
                                              run_spread=run_spread(members))
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                pointwise[:, where] = curve.noise.log_density(
                    np.log(observed)[None, :] - np.log(centre), sigma)
        pointwise = np.where(np.isfinite(pointwise), pointwise, -1e10)
        return xr.Dataset({"log_latency": (("chain", "draw", "point"),
                                           pointwise.reshape(chains, draws, -1))},
                          coords={"chain": posterior["chain"], "draw": posterior["draw"],
                                  "point": np.arange(len(rows))})

    def with_run_effect(self, fit, group: int, curve: Curve) -> Curve:
        """``curve`` with the fitted sweep's run effect (``run_effect`` "shared"), which
        a measurement of that sweep shares (:meth:`Curve.measurement`)."""
        if self.config.get("run_effect", "none") == "shared":
            curve.run_effect = fit.draws("run_effect", group)
            curve.run_share = float(self.config["run_effect_share"])
            if "run_own" in fit.posterior:
                rows = included(fit.data).reset_index(drop=True)
                if len(rows) != fit.posterior.sizes["point"]:
                    raise ValueError("the fit's points do not match its data's rows")
                where = np.flatnonzero(rows["group"].to_numpy(str)
                                       == str(fit.groups["label"].iloc[group]))
                curve.run_own = RunProcess(
                    log_rps=np.log(rows["rps"].to_numpy(float)[where]),
                    values=fit.draws("run_own")[:, where],
                    length=(fit.draws("run_own_length")
                            if self.config["run_own_length"] == "learned"
                            else float(self.config["run_own_length"])),
                    nugget=float(self.config["run_own_nugget"]))
        return curve

    def metrics(self, fit) -> list[str]:
        """Latency summaries besides the mean this fit answers (``metric_curve``)."""
        return []

    def has_mean(self, fit) -> bool:
        """Whether this fit answers mean latency (a tails fit of percentiles alone does
        not)."""
        return True

    def check_metric(self, fit, metric: str | None) -> str | None:
        """``metric`` normalised (None for the mean); a clear error when the fit has no
        law for it."""
        if metric is None or metric == MEAN_METRIC:
            return None
        known = self.metrics(fit)
        if metric not in known:
            if not known:
                raise BadInput(
                    f"this {self.name} fit models mean latency only; for --metric {metric} "
                    "fit the data with `--model tails` (it needs percentile columns such as "
                    "latency_p99_s, ttft_p99_s, itl_p99_s)", argument="metric")
            raise BadInput(f"this fit has no law for metric '{metric}'; it answers: "
                           f"{', '.join([MEAN_METRIC, *known])}", argument="metric")
        return metric

    def metric_curve(self, fit, group: int, metric: str) -> Curve:
        """One fitted group's curve of a latency summary (a percentile, TTFT, ITL)."""
        self.check_metric(fit, metric)
        return self.group_curve(fit, group)

    def law(self, fit, selection: dict, *, metric: str | None = None):
        """The :class:`~bayesspec.prediction.Law` of the setup ``selection`` names (group
        options: verifier, drafter, prefill, decode, gpu; k and alpha are ignored), for
        mean latency or, with ``metric``, for a latency summary the fit models.

        Per configuration: the dense baseline is the setup's k = 0 group and SD is known
        only at the (alpha, k) the fit has groups for (models with cycle coefficients
        answer any)."""
        metric = self.check_metric(fit, metric)
        if metric is None:
            curve_of = self.group_curve
        else:
            def curve_of(fit, group):
                return self.metric_curve(fit, group, metric)
        groups = fit.groups
        columns = [c for c in BASELINE_COLUMNS if c in groups.columns]
        keys = groups[columns].astype(str).agg("|".join, axis=1).to_numpy()
        first = np.unique(keys, return_index=True)[1]
        table = groups.iloc[np.sort(first)][columns].reset_index(drop=True)
        table["label"] = [group_label({**r, "drafter": "", "k": 0}, columns)
                          for r in table.to_dict("records")]
        options = {k: v for k, v in selection.items() if k not in {"k", "alpha", "drafter"}}
        chosen = fit.select_group(_table=table, **options)
        same = keys == keys[np.sort(first)[chosen]]
        k = groups["k"].to_numpy(int)
        drafters = groups["drafter"].astype(str).str.strip()
        if selection.get("drafter") is not None:
            same &= drafters.str.lower().eq(str(selection["drafter"]).strip().lower()).to_numpy()
        elif drafters[same & (k > 0)].nunique() > 1:
            raise BadInput(f"setup '{table['label'].iloc[chosen]}' has several drafters ("
                           f"{', '.join(sorted(drafters[same & (k > 0)].unique()))}); choose "
                           "one", argument="drafter")
        dense = np.flatnonzero(same & (k == 0))
        alphas = pd.to_numeric(groups["alpha"], errors="coerce").to_numpy(float)
        # A configuration measured without a set alpha (acceptance from counters) is known
        # by its k alone (alpha None).
        configurations = {(None if np.isnan(alphas[g]) else round(float(alphas[g]), 9),
                           int(k[g])): curve_of(fit, int(g))
                          for g in np.flatnonzero(same & (k > 0))}
        label = (str(groups["label"].iloc[dense[0]]) if len(dense)
                 else str(table["label"].iloc[chosen]))
        return ConfigurationLaw(label, curve_of(fit, int(dense[0])) if len(dense) else None,
                                configurations, dense_hint=dense_hint(table.iloc[chosen]))

    def comparable_parameters(self, fit) -> dict[str, dict[str, np.ndarray]]:
        """What two fits of this model can be compared on: family -> {entry: draws}
        (``bayesspec compare A B``)."""
        labels = fit.groups["label"].tolist()
        return {name: {label: fit.draws(name, g) for g, label in enumerate(labels)}
                for name in ("C1", "C2")}

    def version_comparison(self, fit, *, rope: float, prob: float) -> dict:
        """``compare --by``: only models of two versions in one fit answer."""
        raise BadInput("this fit is not a two-version fit; use compare A.nc B.nc or "
                       "compare DATA --by COLUMN")

    def version_curves(self, fit) -> list[dict]:
        """``compare --by``: per group measured in both versions, (label, curve A,
        curve B, A's fitted rows, B's fitted rows); only models of two versions in one
        fit answer."""
        raise BadInput("this fit is not a two-version fit; use compare A.nc B.nc or "
                       "compare DATA --by COLUMN")

    @classmethod
    def default_sbc_design(cls) -> pd.DataFrame:
        """A small design for ``bayesspec sbc`` without data: Qwen3-8B on H100 at
        (prefill, decode) 256/256, 512/512 and 1024/1024 (three groups, so the pooled prior
        of log C1 is exercised), 8 rates each, from the law itself."""
        from bayesspec.data import prepare
        from bayesspec.simulate.synthetic import generate_sweeps, placeholder_truth

        truth = placeholder_truth()
        pairs = {(256, 256), (512, 512), (1024, 1024)}
        keep = truth["verifier"].eq("Qwen3-8B").to_numpy() & np.array(
            [(p, g) in pairs for p, g in zip(truth["prefill_tokens"], truth["decode_tokens"])])
        return prepare(generate_sweeps(truth.loc[keep], n_rates=8, seed=0),
                       source="<sbc design>")


#: The metric name of mean end-to-end latency (the law every model fits).
MEAN_METRIC = "mean"

#: Columns that make a setup's baseline (the dense configuration SD is compared with).
BASELINE_COLUMNS = ("verifier", "prefill_tokens", "decode_tokens", "gpu", "engine",
                    "engine_version")


def dense_hint(row) -> str:
    """`bayesspec simulate` options that would produce a setup's dense baseline."""
    parts = [f"--verifier {row['verifier']}"]
    for column, flag in (("prefill_tokens", "--prefill"), ("decode_tokens", "--decode"),
                         ("gpu", "--gpu")):
        value = row.get(column) if hasattr(row, "get") else None
        if value is not None and not pd.isna(value) and str(value):
            parts.append(f"{flag} {int(value) if column != 'gpu' else value}")
    return " ".join(parts)
