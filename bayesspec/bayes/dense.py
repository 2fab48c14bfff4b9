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

from bayesspec.laws import RUN_EFFECT_SHARE
from bayesspec.bayes.base import COMMON_CONFIG, LatencyModel
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
    #: Whether the law takes the decode-iteration profile (``decode_profile``).
    takes_decode_profile = True
    default_config = {
        **COMMON_CONFIG,
        "holdout_mask": False,    # build with a fit_mask (refits without some points)
        # Where the data state no concurrency cap: "none" (eq. (1) alone, its pole read as
        # the ceiling), or learn it from the curve's bend with a "catalog" or "wide" prior
        # (bayes.cap_prior; `fit --cap-prior`).
        "cap_prior": "none",
        # A decode-iteration profile file (bayesspec.data.decode_profile; `fit --decode-profile`):
        # the groups it names follow L = C1 + C2 N + the profile's shift at N.
        "decode_profile": "",
        # With a decode profile and a stated cap: "poisson", the law's single
        # self-consistent N with each batch spread like a Poisson count about it, or
        # "chain", the profile inside the slot queue's birth-death chain
        # (laws.profile_chain_latency_expr; docs/findings/decode-profile-law.md, "The
        # profile inside the birth-death chain", measured 2026-12-05).
        # "auto": the model's ``profile_law_with_profile`` where a profile is given.
        "profile_law": "auto",
        # "auto": "measured" where the profile's law is the chain, else "curve". The two
        # were chosen together: the chain's R^2 misses on the set it was chosen on were
        # top points near the cap that the bound pins (docs/findings/decode-profile-law.md,
        # "The profile inside the birth-death chain", measured 2026-12-05).
        "noise_load_at": "auto",
        # With the decode profile's chain: whether waiting prompts share one prefill
        # iteration (vLLM's scheduler without chunked prefill, Vidur's), so that the stall
        # per arrival falls with the rate (laws.batched_prefill_stall_expr). "auto": yes
        # with the chain. Measured on the Vidur sets: docs/findings/decode-profile-law.md,
        # "Batched prefill" (measured 2026-12-05).
        "prefill_batching": "auto",
        # The batched prefill's fixed part, a = C2 (t_d(1)/C2)^p
        # (laws.prefill_fixed_part): 1 is a = t_d(1); above 1 the weights read overlaps
        # the prompts' compute (a soft roofline). docs/findings/decode-profile-law.md,
        # "Batched prefill" (measured 2026-12-06).
        "prefill_fixed_power": 1.0,
        # "shared": the sweep replays one arrival pattern at every rate (Vidur; GuideLLM
        # and `vllm bench serve` with a fixed seed), so each point's sampling error as one
        # run (laws.run_mean_log_sd: its requests share the batch) is in part shared by
        # the sweep's rates: a run effect per group, that share of its variance
        # (``run_effect_share``), the rest the point's own. "none": each mean's standard
        # error is cv/sqrt(n), its requests independent. benchmarks/run_effect.py.
        "run_effect": "none",
        "run_effect_share": RUN_EFFECT_SHARE,
        # Of ``run_effect_share``, the part every sweep of the file shares (one seed
        # serves them all); 0: each sweep's run effect is its own; "all": all of it.
        "run_effect_common_share": "all",
        # The point's own part of its run error (1 - ``run_effect_share``) as a process
        # along the sweep's log RPS (laws.run_process_factor) with this correlation
        # length, a latent per point; 0: independent between rates; "learned": a
        # parameter (prior median laws.RUN_OWN_LENGTH). Of that part,
        # ``run_own_nugget`` stays independent. A rate next to fitted ones is then
        # predicted from their errors (Curve.measurement).
        "run_own_length": 0.0,
        "run_own_nugget": 0.0,
        # The mean law (bayes.profile_inputs.MEAN_LAWS): "auto" puts the compute roof from
        # the verifier's, drafter's and GPU's cards on eq. (1) where they exist and no
        # decode profile or cap is stated (laws.roofline.roof_excess_expr;
        # docs/findings/compute-roof.md). Only the dense law itself takes it.
        "mean_law": "auto",
    }
    #: Whether the model's curves carry the sweep's run effect (``run_effect``); the
    #: discrepancy, spline, two-regime and tails laws do not.
    takes_run_effect = True
    #: The decode profile's law by default: the chain, measured better than the Poisson
    #: law on R^2 in all three Vidur sets and held out in two (equal on the third).
    profile_law_with_profile = "chain"
    #: Whether the model's law takes the engine's cap (the slot queue), so that it can
    #: learn one (``cap_prior``); the discrepancy and two-regime laws do not.
    learns_cap = True

    def check_config(self) -> None:
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
        from bayesspec.bayes.cap_prior import CAP_PRIORS

        how = self.config["cap_prior"]
        if how not in CAP_PRIORS:
            raise ValueError(f"cap_prior must be one of {', '.join(CAP_PRIORS)}, got {how!r}")
        if how != "none" and not self.learns_cap:
            raise ValueError(f"the {self.name} model's law does not take the engine's cap, "
                             "so it cannot learn one: use --model dense or tails")
        if self.config["profile_law"] not in ("poisson", "chain"):
            raise ValueError("profile_law must be 'poisson', 'chain' or 'auto', got "
                             f"{self.config['profile_law']!r}")
        if not isinstance(self.config["prefill_batching"], bool):
            raise ValueError("prefill_batching must be true, false or 'auto', got "
                             f"{self.config['prefill_batching']!r}")
        if self.config["run_effect"] not in ("none", "shared"):
            raise ValueError("run_effect must be 'none' or 'shared', got "
                             f"{self.config['run_effect']!r}")
        if self.config["run_effect"] != "none" and not self.takes_run_effect:
            raise ValueError(f"the {self.name} model does not take the sweep's run effect: "
                             "use --model dense")
        share = self.config["run_effect_share"]
        if (isinstance(share, bool) or not isinstance(share, (int, float))
                or not 0.0 <= share < 1.0):
            raise ValueError(f"run_effect_share must be a number in [0, 1), got {share!r}")
        common = self.config["run_effect_common_share"]
        if common == "all":
            common = self.config["run_effect_common_share"] = share
        if (isinstance(common, bool) or not isinstance(common, (int, float))
                or not 0.0 <= common <= share):
            raise ValueError("run_effect_common_share must be a number in [0, "
                             f"run_effect_share], got {common!r}")
        length, nugget = self.config["run_own_length"], self.config["run_own_nugget"]
        if length != "learned" and (isinstance(length, bool)
                                    or not isinstance(length, (int, float))
                                    or not np.isfinite(length) or length < 0.0):
            raise ValueError("run_own_length must be a number >= 0 or 'learned', got "
                             f"{length!r}")
        if (length == "learned" or length > 0) and self.config["run_effect"] != "shared":
            raise ValueError("run_own_length is a part of the run effect: give "
                             "run_effect=shared with it")
        if (isinstance(nugget, bool) or not isinstance(nugget, (int, float))
                or not 0.0 <= nugget <= 1.0):
            raise ValueError(f"run_own_nugget must be a number in [0, 1], got {nugget!r}")
        if length == "learned" or length > 0:
            # a latent per point that a smooth run error shares with the law's C2: at
            # 4 x 1000 draws C2's bulk ESS was 301-320 on replays of vidur_capped, and
            # R-hat 1.011-1.014 at 1000 tuning steps (docs/findings/run-effects.md, "A
            # run's mean varies like that of n/(1 + 2N) requests", measured 2026-12-06)
            self.default_tune = max(self.default_tune, 2000)
            self.default_draws = max(self.default_draws, 2000)
        power = self.config["prefill_fixed_power"]
        if (isinstance(power, bool) or not isinstance(power, (int, float))
                or not np.isfinite(power) or power < 1.0):
            raise ValueError(f"prefill_fixed_power must be a number >= 1, got {power!r}")
        if self.config["prefill_batching"] and self.config["profile_law"] != "chain":
            raise ValueError("prefill_batching is a part of the decode profile's chain: "
                             "give --decode-profile with profile_law chain, or "
                             "prefill_batching=false")
        if self.config["profile_law"] == "chain" and not self.config["decode_profile"]:
            raise ValueError("profile_law chain puts the decode profile in the chain: give "
                             "--decode-profile too")
        if self.config["decode_profile"]:
            # the laws of the discrepancy, spline and two-regime subclasses do not take it
            if not self.takes_decode_profile:
                raise ValueError(f"the {self.name} model's law does not take a decode "
                                 "profile: use --model dense or tails")
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
        if cfg["profile_law"] == "auto":
            cfg["profile_law"] = (self.profile_law_with_profile if cfg["decode_profile"]
                                  else "poisson")
        if cfg["prefill_batching"] == "auto":
            cfg["prefill_batching"] = cfg["profile_law"] == "chain"
        if cfg["noise_load_at"] == "auto":
            cfg["noise_load_at"] = "measured" if cfg["profile_law"] == "chain" else "curve"

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
        if self.config["holdout_mask"]:
            # 1 = in the likelihood: one compiled model refits without any points
            # (checks.leave_out.fold_check) by changing the mask only.
            arrays["fit_mask"] = (np.ones(len(inputs.rows)), "point")
        return arrays

    def posterior_variables(self) -> list[str]:
        return ["noise_base", "noise_load", "log_C1_mean", "log_C1_sd"]
