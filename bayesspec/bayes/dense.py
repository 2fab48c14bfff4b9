"""Dense latency law L = C1/(1 - RPS*C2), one (C1, C2) per group, partially pooled.

Parameterisation (why it looks like this):

- ``C2`` is written as ``u / rps_max`` with ``u`` in (0, 1) through a logistic link, where
  ``rps_max`` is the highest unsaturated rate observed in the group. Every observed point
  then satisfies RPS*C2 < 1 by construction, so the sampler never meets the pole of the
  law (that is where divergences come from). ``u`` is the utilisation reached by the
  group's highest rate, with a weak logit-normal prior per group.
- ``log C1`` is pooled across groups with a learned spread (wide hyperpriors centred on
  the median latency at the groups' lowest rates). Anchoring each C1 to its own lowest
  observed latency instead would tie it to that one noisy point and make it overconfident.
- The error is multiplicative (normal on log L). Its scale grows with load: a relative
  error ``e`` in the measured rate moves log L by ``e * x/(1-x)``, x = RPS*C2, and finite
  runs near saturation have large queueing variance; a constant relative noise would be
  overconfident about C2 there. With ``noise_load_at`` "measured" the factor is at most
  the measured latency's L/C1 - 1, so that no draw widens a top point's noise by putting
  its ceiling just above it. When ``latency_std_s`` and ``n_requests`` are given, the
  standard error of each mean is added in quadrature.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from bayesspec.bayes.lazymodule import lazy_module

pm, pt = lazy_module("pymc"), lazy_module("pytensor.tensor")  # loaded on first use

from bayesspec.bayes.base import COMMON_CONFIG, LatencyModel
from bayesspec.bayes.options import model_defaults
from bayesspec.bayes.priors import latency_likelihood, pooled_normal


def profile_starts(inputs) -> dict[str, np.ndarray]:
    """Per group, where a decode-profile fit's chains start (``log_C1`` and
    ``utilisation_logit``, as :func:`bayesspec.inference.compile_model` takes them): C1
    from the line L - shift(N) = C1 + C2 N through the lightest and the highest point, u
    from eq. (1) with the shift at the highest.

    Why: the profile law's N jumps between branches where the profile folds, so one
    group of a pooled fit started at the prior's centre (every group at the same C1 and
    u) can climb to a far mode that holds its top rates at the ceiling, while R-hat sees
    nothing (every chain starts near the same climbed point). Seen on the Vidur sets: a
    vidur_fresh hold-out fit predicted 30.7 s against 11.2 s measured at one group's top
    fitted rate, and 2 of 4 vidur_dense fits with a trial slot wait did the same
    (docs/findings/decode-profile-law.md, "The kink far below the cap is the decode
    iteration's profile", measured 2026-12-04)."""
    rows, groups = inputs.rows, inputs.groups
    rps = rows["rps"].to_numpy(float)
    latency = rows["latency_mean_s"].to_numpy(float)
    shift = inputs.extras.get("profile_shift", np.zeros(len(rows)))
    shift = np.where(np.isfinite(shift), shift, 0.0)
    log_c1 = np.zeros(len(groups))
    logit_u = np.zeros(len(groups))
    for g in range(len(groups)):
        members = np.flatnonzero(inputs.group_index == g)
        low, high = members[np.argmin(rps[members])], members[np.argmax(rps[members])]
        base_low = max(latency[low] - shift[low], 0.5 * latency[low])
        base_high = max(latency[high] - shift[high], base_low)
        n_low, n_high = rps[low] * latency[low], rps[high] * latency[high]
        slope = (base_high - base_low) / (n_high - n_low) if n_high > n_low else 0.0
        c1 = max(base_low - slope * n_low, 0.5 * base_low)
        # eq. (1) with the profile: N = RPS (C1 + shift)/(1 - RPS C2) at the top rate
        utilisation = 1.0 - (c1 + shift[high]) / latency[high]
        utilisation = float(np.clip(utilisation, 0.05, 0.9))
        log_c1[g] = np.log(c1)
        logit_u[g] = np.log(utilisation / (1.0 - utilisation))
    return {"log_C1": log_c1, "utilisation_logit": logit_u}


def chain_law_starts(inputs, prefill_batching: bool = False,
                     prefill_fixed_power: float = 1.0) -> dict[str, np.ndarray]:
    """:func:`profile_starts`, then for each group whose profile is in the birth-death
    chain (``profile_law`` "chain"), the least-squares fit in log L of that chain's law
    (:func:`bayesspec.laws.profile_chain_latency_expr`) from there.

    Why: the profile law's starts solve for a self-consistent N, and the chain's mean
    sits above that N where the profile rises, so they put C2 a few percent off the
    chain's (3% on the test's sweep). The optimiser climbs from here; a start of the
    law being fitted keeps it off another law's basin. ``prefill_batching``: the law's
    stall per arrival is the batched prefill's, as the model's, its fixed part by
    ``prefill_fixed_power`` (:func:`bayesspec.laws.prefill_fixed_part`)."""
    from scipy.optimize import least_squares

    from bayesspec.laws import prefill_fixed_part, profile_chain_latency_expr
    from bayesspec.bayes.profile_inputs import profile_chain_arrays
    from bayesspec.bayes.priors import CAP_MARGIN

    starts = profile_starts(inputs)
    arrays = profile_chain_arrays(inputs)
    extra, valid = arrays["chain_extra"][0], arrays["chain_valid"][0]
    decode_s, decode_one = arrays["chain_decode_s"][0], arrays["chain_decode_one"][0]
    has_chain = arrays["has_chain"][0] > 0
    rows, groups = inputs.rows, inputs.groups
    rps = rows["rps"].to_numpy(float)
    log_latency = np.log(rows["latency_mean_s"].to_numpy(float))
    for g in np.flatnonzero(has_chain):
        members = np.flatnonzero(inputs.group_index == g)
        rps_max = float(rps[members].max())
        cap = float(groups["cap"].iloc[g])
        wait = float(groups["wait_scale"].iloc[g]) if "wait_scale" in groups else 1.0

        def residual(theta):
            c1, u = np.exp(theta[0]), 1.0 / (1.0 + np.exp(-theta[1]))
            c2 = np.full(len(members), u / rps_max)
            batched = {}
            if prefill_batching:
                batched = {"prefill_fixed": prefill_fixed_part(
                               c2, decode_one[g], power=prefill_fixed_power),
                           "decode_s": decode_s[g][None, :]}
            value = profile_chain_latency_expr(
                rps[members], np.full(len(members), c1), c2,
                np.full(len(members), cap), extra[g][None, :], valid[g][None, :],
                wait_scale=wait, soft_margin=CAP_MARGIN, **batched)
            return np.log(value) - log_latency[members]

        start = np.array([starts["log_C1"][g], starts["utilisation_logit"][g]])
        best = least_squares(residual, start, method="trf",
                             bounds=([-np.inf, -8.0], [np.inf, 8.0]))
        if best.success and np.all(np.isfinite(best.x)):
            starts["log_C1"][g], starts["utilisation_logit"][g] = best.x
    return starts


class DenseLatencyModel(LatencyModel):
    # eq. (1)'s C1 and C2 per group: a cap the fitted points do not reach may stay out of
    # the likelihood, checked on the draws (LatencyModel.cap_reach_share)
    checks_cap_on_draws = True
    name = "dense"
    version = "2"
    # The options' measurements: "profile_law" chain was measured better than the Poisson
    # law on R^2 in all three Vidur sets and held out in two, with ``noise_load_at``
    # "measured" chosen with it (the chain's misses were top points near the cap that the
    # bound pins) and batched prefill (docs/findings/decode-profile-law.md, "The profile
    # inside the birth-death chain" and "Batched prefill", measured 2026-12-05/06);
    # "run_effect" shared: benchmarks/run_effect.py.
    default_config = model_defaults("dense", COMMON_CONFIG)
    takes_holdout_mask = True
    #: The decode profile's law by default: the chain, measured better than the Poisson
    #: law on R^2 in all three Vidur sets and held out in two (equal on the third).
    profile_law_with_profile = "chain"

    def check_config(self) -> None:
        """The rules that tie options together (each value is checked by its
        declaration, bayes.options)."""
        self.resolve_profile_defaults()
        from bayesspec.bayes.profile_inputs import MEAN_LAWS

        if self.config["mean_law"] not in MEAN_LAWS:
            raise ValueError(f"mean_law must be one of {', '.join(MEAN_LAWS)}, got "
                             f"{self.config['mean_law']!r}")
        if type(self).build is not DenseLatencyModel.build:
            # the discrepancy, spline, two-regime and tails laws have likelihoods of their
            # own: eq. (1) under them, as before
            if self.config["mean_law"] == "roofline":
                raise ValueError(f"the {self.name} model's law does not take the compute "
                                 "roof: use --model dense or speculative")
            self.config["mean_law"] = "eq1"
        if self.config["cap_prior"] != "none" and self.config["mean_law"] == "auto":
            self.config["mean_law"] = "eq1"   # a learned cap is the slot queue's law
        super().check_config()
        cfg = self.config
        how = cfg["cap_prior"]
        share = cfg["run_effect_share"]
        if cfg["run_effect_common_share"] != "all" and cfg["run_effect_common_share"] > share:
            raise ValueError("run_effect_common_share must be at most run_effect_share "
                             f"({share:g}), got {cfg['run_effect_common_share']:g}")
        length = cfg["run_own_length"]
        if (length == "learned" or length > 0) and cfg["run_effect"] != "shared":
            raise ValueError("run_own_length is a part of the run effect: give "
                             "run_effect=shared with it")
        if length == "learned" or length > 0:
            # a latent per point that a smooth run error shares with the law's C2: at
            # 4 x 1000 draws C2's bulk ESS was 301-320 on replays of vidur_capped, and
            # R-hat 1.011-1.014 at 1000 tuning steps (docs/findings/run-effects.md, "A
            # run's mean varies like that of n/(1 + 2N) requests", measured 2026-12-06)
            self.default_tune = max(self.default_tune, 2000)
            self.default_draws = max(self.default_draws, 2000)
        if cfg["prefill_batching"] and cfg["profile_law"] != "chain":
            raise ValueError("prefill_batching is a part of the decode profile's chain: "
                             "give --decode-profile with profile_law chain, or "
                             "prefill_batching=false")
        if cfg["profile_law"] == "chain" and not cfg["decode_profile"]:
            raise ValueError("profile_law chain puts the decode profile in the chain: give "
                             "--decode-profile too")
        if cfg["decode_profile"]:
            if how != "none":
                raise ValueError("a decode profile needs the engine's cap stated, not "
                                 "learned: drop --cap-prior, or give --max-num-seqs")
            # The law's N jumps between branches where the profile folds, and a jittered
            # start can settle in a far mode that puts the top fitted rates at the cap's
            # ceiling (1 chain of 2 on the vidur_dense hold-out, C2 4x the others'):
            # start at the mode.
            self.init = "optimised"
        if how != "none":
            # A cap far above the data is a plateau of the likelihood (eq. (1) whatever
            # its value) and the bend pins it sharply: a jittered start on the plateau
            # stays there for the whole run (1 chain of 4 in a trial); start at the mode.
            self.init = "optimised"
            # and tune longer: on slot-queue sweeps of a cap of 24, 2 of 4 fits at 1000
            # tuning steps ended at R-hat 1.012-1.048; 3 of 3 at 2000 converged
            # (R-hat <= 1.004; docs/findings/moe-and-cap.md, "The cap learned from the
            # curve", measured 2026-12-04)
            self.default_tune = 2000

    def resolve_profile_defaults(self) -> None:
        """Replace "auto" in ``profile_law`` and ``noise_load_at`` by what they mean for
        this configuration, so that a fit file records the law it was fitted with."""
        cfg = self.config
        profile = bool(cfg["decode_profile"])
        # without a profile the first two are inert: said only with one
        say = self.resolve_auto if profile else (lambda name, value, why: value)
        if cfg["profile_law"] == "auto":
            cfg["profile_law"] = say("profile_law",
                                     self.profile_law_with_profile if profile else "poisson",
                                     f"the {self.name} model's law with a decode profile")
        if cfg["prefill_batching"] == "auto":
            cfg["prefill_batching"] = say("prefill_batching", cfg["profile_law"] == "chain",
                                          f"profile_law {cfg['profile_law']}")
        if cfg["noise_load_at"] == "auto":
            chain = cfg["profile_law"] == "chain"
            cfg["noise_load_at"] = self.resolve_auto(
                "noise_load_at", "measured" if chain else "curve",
                "the decode profile's chain" if chain else "no decode-profile chain")

    def build(self, data: pd.DataFrame) -> pm.Model:
        inputs, model = self.empty_model(data)
        with model:
            data = self.add_data(inputs)
            log_c1, utilisation = self.group_costs(data, len(inputs.groups))
            c1, c2 = pt.exp(log_c1), utilisation / data["rps_max"]
            self.learn_caps(data, c1, c2)
            if "has_roof" in data:
                from bayesspec.bayes.profile_inputs import roof_mean_law

                mean, felt = roof_mean_law(c1, c2, data)
                latency_likelihood(c1, c2, self.config, data, mean_latency=mean,
                                   c2_point=felt)
            else:
                latency_likelihood(c1, c2, self.config, data)
        if self.config["decode_profile"]:
            # read by inference.compile_model (an initval on the variables would do, but
            # PyMC's model transforms, e.g. the log-likelihood for LOO, refuse those)
            model.chain_starts = (chain_law_starts(
                                      inputs, self.config["prefill_batching"] is True,
                                      float(self.config["prefill_fixed_power"]))
                                  if self.config["profile_law"] == "chain"
                                  else profile_starts(inputs))
        return model

    def group_costs(self, data: dict, n_groups: int, name: str = "log_C1"):
        """Per group: log C1 (pooled) and the utilisation u in (0, 1) reached by the
        group's highest rate (C2 = u/rps_max), in the current model."""
        cfg = self.config
        # Centred: every group's data pin C1 down and C1 differs a lot between groups,
        # the case where the centred form samples better than the non-centred one.
        log_c1 = pooled_normal(name, data["log_C1_center"], cfg["log_c1_scale"], "group",
                               n_groups, centred=True)
        # Not pooled: how close a sweep came to its ceiling is a property of the test
        # design, not of the system, and pooling it is a funnel one way or the other
        # (non-centred when every sweep pins u down, centred when they all agree).
        utilisation = pm.math.sigmoid(pm.Normal(
            "utilisation_logit", cfg["utilisation_logit_mean"],
            cfg["utilisation_logit_scale"], dims="group"))
        return log_c1, utilisation

    def data_arrays(self, inputs):
        arrays = super().data_arrays(inputs)
        arrays["log_C1_center"] = (
            np.asarray(float(np.log(np.median(inputs.groups["latency_low"])))), None)
        if self.holdout_mask:
            # 1 = in the likelihood: one compiled model refits without any points
            # (checks.leave_out.fold_check) by changing the mask only.
            arrays["fit_mask"] = (np.ones(len(inputs.rows)), "point")
        return arrays

    def posterior_variables(self) -> list[str]:
        return ["noise_base", "noise_load", "log_C1_mean", "log_C1_sd"]
