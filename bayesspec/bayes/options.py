"""Every model option, declared once: name, tier, type, default, one line of description.

A model's configuration is read from these declarations and nowhere else: its defaults
(:func:`model_defaults`), the check of every value (:func:`check_config`), the refusal of
a misspelt name with its near miss, and the listing of ``bayesspec options`` and
``docs/options.md`` (:func:`markdown`). A model class keeps only the rules that tie two
options together (``check_config`` in the class).

Tiers:

- ``user``: what a serving engineer sets (a decode profile, a cap, the run effect, the
  acceptance law, the metrics, ...);
- ``priors``: hyperparameters, for those who know why;
- ``experimental``: law variants kept for comparison, not the measured default;
- ``sampler``: how the posterior is sampled (parameterisation, numerical steps); the
  model, and so the answers, are the same whatever they are.

To add an option: append an :class:`Option` to ``OPTIONS`` with the models that take it.
An option keeps one meaning across the models that take it. A model whose class inherits
another's code keeps the parent's options in its configuration at their defaults; setting
one of them to anything else is refused in one line (:func:`check_config`).

The module is kept whole because the declarations are one table, read by the models,
the command line and the page alike.

"auto": a model records what an "auto" option became for the data in hand
(:meth:`~bayesspec.bayes.base.LatencyModel.resolve_auto`); ``fit`` prints it once and the fit
file stores it (``resolved_options``, read back by :func:`resolved_options`).
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from bayesspec.bayes.acceptance import STRUCTURES
from bayesspec.bayes.cap_prior import CAP_PRIORS
from bayesspec.data.schema import METRIC_COLUMNS
from bayesspec.laws import QUANTILE_RULES, RUN_EFFECT_SHARE
from bayesspec.laws.moe_search import MOE_BISECTION_STEPS, MOE_NEWTON_STEPS

TIERS = {
    "user": "what a serving engineer sets",
    "priors": "hyperparameters of the priors, for those who know why",
    "experimental": "law variants kept for comparison, not the measured defaults",
    "sampler": "how the posterior is sampled; the model and its answers are the same",
}

# ---------------------------------------------------------------------------- types


class Kind:
    """A value type: ``check`` returns the value (normalised) or raises ValueError."""

    def accepts(self, value) -> bool:
        raise NotImplementedError

    def normalise(self, value):
        return value

    def describe(self) -> str:
        raise NotImplementedError

    def check(self, name: str, value):
        if not self.accepts(value):
            raise ValueError(f"{name} must be {self.describe()}, got {json.dumps(value, default=str)}")
        return self.normalise(value)


def _literal(value) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


@dataclass(frozen=True)
class Choice(Kind):
    """One of the values listed (compared with their type: true is not 1)."""

    values: tuple

    def __init__(self, *values):
        object.__setattr__(self, "values", tuple(values))

    def accepts(self, value) -> bool:
        return any(type(value) is type(v) and value == v for v in self.values)

    def describe(self) -> str:
        return " | ".join(_literal(v) for v in self.values)


def _is_number(value) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


@dataclass(frozen=True)
class Number(Kind):
    """A finite number, optionally bounded (``open`` bounds exclude the bound)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def accepts(self, value) -> bool:
        if not _is_number(value):
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return not (self.high is not None
                    and (value > self.high or (self.high_open and value == self.high)))

    def normalise(self, value):
        return float(value)

    def describe(self) -> str:
        if self.low is not None and self.high is not None:
            return (f"a number in {'(' if self.low_open else '['}{self.low:g}, "
                    f"{self.high:g}{')' if self.high_open else ']'}")
        if self.low is not None:
            return f"a number {'>' if self.low_open else '>='} {self.low:g}"
        if self.high is not None:
            return f"a number {'<' if self.high_open else '<='} {self.high:g}"
        return "a number"


@dataclass(frozen=True)
class Integer(Kind):
    """A whole number at least ``low``."""

    low: int = 0

    def accepts(self, value) -> bool:
        return _is_number(value) and int(value) == value and value >= self.low

    def normalise(self, value):
        return int(value)

    def describe(self) -> str:
        return f"an integer >= {self.low}"


@dataclass(frozen=True)
class Text(Kind):
    """Text (a file path or a column name)."""

    what: str = "text"

    def accepts(self, value) -> bool:
        return isinstance(value, str)

    def describe(self) -> str:
        return self.what


@dataclass(frozen=True)
class Subset(Kind):
    """A list of distinct values among ``values`` (kept as a tuple)."""

    values: tuple

    def __init__(self, *values):
        object.__setattr__(self, "values", tuple(values))

    def accepts(self, value) -> bool:
        return (isinstance(value, (list, tuple)) and len(value) > 0
                and all(isinstance(v, str) and v in self.values for v in value)
                and len(set(value)) == len(value))

    def normalise(self, value):
        return tuple(value)

    def describe(self) -> str:
        return f"a list of {', '.join(self.values)}"


@dataclass(frozen=True)
class Either(Kind):
    """Any of several kinds (e.g. "auto" or a number)."""

    kinds: tuple

    def __init__(self, *kinds):
        object.__setattr__(self, "kinds", tuple(kinds))

    def accepts(self, value) -> bool:
        return any(k.accepts(value) for k in self.kinds)

    def normalise(self, value):
        return next(k for k in self.kinds if k.accepts(value)).normalise(value)

    def describe(self) -> str:
        return " or ".join(k.describe() for k in self.kinds)


POSITIVE = Number(low=0.0, low_open=True)
NON_NEGATIVE = Number(low=0.0)
ANY_NUMBER = Number()
FLAG = Choice(True, False)

# ---------------------------------------------------------------------------- models

#: eq. (1) per group and the laws built on its code (they share its configuration).
DENSE = ("dense", "dense-discrepancy", "dense-roofline", "dense-spline", "tails")
#: Laws of their own on top of the dense model's code.
OWN_LAWS = ("dense-discrepancy", "dense-roofline", "dense-spline")
#: Eq. (3)'s six cycle coefficients.
SPECULATIVE = ("speculative", "speculative_versions", "hierarchical")
VERSIONS = ("versions", "speculative_versions")
EVERY = DENSE + SPECULATIVE + ("moe", "versions")
#: The models whose law takes the engine's cap, and so a decode profile and the run effect.
SLOT_QUEUE = ("dense", "tails")

#: The hierarchical model's verifier coefficients (bayes.hierarchical.SYSTEM_COEFFICIENTS).
SYSTEM_COEFFICIENTS = ("c1p", "c1v", "c2p", "c2v")


@dataclass(frozen=True)
class Option:
    name: str
    tier: str
    kind: Kind
    default: Any
    description: str
    models: tuple
    #: Per-model defaults where a model's differs from ``default``.
    defaults: dict = field(default_factory=dict)
    #: The command line's spelling when the option is a flag of its own (``--cap-prior``):
    #: then ``--option NAME=...`` is refused in favour of the flag.
    flag: str | None = None

    def default_for(self, model: str):
        return self.defaults.get(model, self.default)


OPTIONS_LIST = [
    # ------------------------------------------------------------------ user
    Option("decode_profile", "user", Text("a decode-profile file (CSV)"), "",
           "the engine's decode-iteration time by batch size: the groups it names follow "
           "L = C1 + C2 N + the profile's shift at N", SLOT_QUEUE, flag="--decode-profile"),
    Option("cap_prior", "user", Choice(*CAP_PRIORS), "none",
           "where the data state no concurrency cap: none (eq. (1)'s pole is the ceiling), "
           "or learn it from the curve's bend with the catalog's or a wide prior",
           SLOT_QUEUE, flag="--cap-prior"),
    Option("run_effect", "user", Choice("none", "shared"), "none",
           "shared: the sweep replays one arrival pattern at every rate (fixed seed), so its "
           "points share part of their sampling error; none: each point's own", ("dense",)),
    Option("acceptance_law", "user", Choice("auto", "iid", "token"), "auto",
           "iid: eq. (3)'s alpha; token: E(k) from the token process fitted to the "
           "per-position counters; auto: token where every SD group has per-position "
           "counters and each setup one acceptance, else iid", SPECULATIVE),
    Option("moe_split", "user", Choice("auto", "never"), "auto",
           "eq. (4) on top of eq. (3) for sparse verifiers; auto: where the verifier has "
           "expert counts", SPECULATIVE),
    # Medians and means of fixed-length requests are near-copies of the mean latency that
    # add nothing but a second opinion on its noise (bimodal noise scales on the README
    # walkthrough with all 14), so the defaults are the tails SLOs are set on.
    Option("metrics", "user", Subset(*METRIC_COLUMNS),
           ("p90", "p99", "ttft_p90", "ttft_p99", "itl_p90", "itl_p99"),
           "the latency summaries fitted where the data have them (medians are added when "
           "there is no mean latency)", ("tails",)),
    Option("tail_law", "user", Choice("power", "count"), "power",
           "law of the end-to-end percentiles: power, q = A F^gamma; count, the quantile of a "
           "request whose stalls spread with the load it meets", ("tails",)),
    Option("quantile_rule", "user", Choice("auto", *QUANTILE_RULES), "auto",
           "how the load tester computed its percentiles: linear (numpy, vllm bench), "
           "inverted_cdf (GuideLLM); auto: the rows' percentile_rule (ingest writes it), "
           "else linear", ("tails",)),
    Option("physics_priors", "user", Choice("auto", "on", "off"), "auto",
           "roofline-centred priors of the scaling trends; auto: on when the GPU card is known",
           ("hierarchical",)),
    Option("by", "user", Text("a column name"), "engine_version",
           "the column whose two values are compared", VERSIONS),
    # ------------------------------------------------------------------ priors
    # Log-normal noise priors, medians 2% with a log-sd of 0.75 (95% prior interval 0.5% to
    # 9%): a wider one let one-sweep fits reach a noise-free funnel.
    Option("noise_base_median", "priors", POSITIVE, 0.02,
           "prior median of the load-independent log-noise of a mean latency", EVERY),
    Option("noise_load_median", "priors", POSITIVE, 0.02,
           "prior median of the relative error in the rate (the noise's load term)", EVERY),
    Option("noise_log_sd", "priors", POSITIVE, 0.75, "log-sd of both noise priors", EVERY),
    Option("log_c1_scale", "priors", POSITIVE, 2.0, "prior scale of log C1 across groups", EVERY),
    # dense-spline 0 (median 0.5, not 0.73): a sweep bending at its top is explained by the
    # discrepancy or by the pole, and with the pole assumed near the rise is extrapolated
    # steeply (Vidur hold-out fits, 2 chains x 300: 14% of the higher points below their
    # interval at 0.73, 10% at 0.5).
    Option("utilisation_logit_mean", "priors", ANY_NUMBER, 1.0,
           "prior mean of the logit of the utilisation a sweep's top rate reaches", EVERY,
           defaults={"dense-spline": 0.0}),
    Option("utilisation_logit_scale", "priors", POSITIVE, 1.5,
           "prior sd of that logit", EVERY),
    Option("run_effect_share", "priors", Number(0.0, 1.0, high_open=True), RUN_EFFECT_SHARE,
           "with run_effect shared: the share of a point's run variance the sweep shares",
           ("dense",)),
    Option("run_effect_common_share", "priors", Either(Choice("all"), NON_NEGATIVE), "all",
           "of run_effect_share, the part every sweep of the file shares (0: each sweep its "
           "own; all: all of it)", ("dense",)),
    Option("share_scale", "priors", POSITIVE, 1.5,
           "prior sd of the log shares between the cycle coefficients", SPECULATIVE),
    # kappa ~ 1100: a window-to-window sd of alpha of about 0.013 at alpha 0.8
    Option("acceptance_log_concentration_mean", "priors", ANY_NUMBER, 7.0,
           "prior mean of log kappa, the window-to-window concentration of alpha", SPECULATIVE),
    Option("acceptance_log_concentration_scale", "priors", POSITIVE, 2.5,
           "prior sd of log kappa", SPECULATIVE),
    Option("moe_share_logit_scale", "priors", POSITIVE, 1.5,
           "prior sd of the logit of eq. (4)'s covered share", SPECULATIVE + ("moe",)),
    Option("share_logit_scale", "priors", POSITIVE, 1.5,
           "prior sd of the logits of the compute-bound law's shares of C1 and C2",
           ("dense-roofline",)),
    Option("sharpness", "priors", POSITIVE, 12.0,
           "sharpness of the soft maximum between the two regimes", ("dense-roofline",)),
    Option("bend_scale", "priors", NON_NEGATIVE, 0.5,
           "HalfNormal scale of the spread of log(1 + bend), the second-order term "
           "(0: none)", ("dense-discrepancy", "dense-spline"), defaults={"dense-spline": 0.0}),
    Option("group_noise_scale", "priors", NON_NEGATIVE, 0.5,
           "log-sd of a group's noise factor (0: one noise for all groups)", OWN_LAWS,
           defaults={"dense-spline": 1.0, "dense-roofline": 0.0}),
    # 0.2, not 0.1: at 0.1 C2 and the first weights trade along a ridge (Vidur sweeps,
    # 4 chains x 1000: R-hat 1.03, 13-115 divergences; at 0.2 none).
    Option("knot_spacing", "priors", POSITIVE, 0.2,
           "RPS/RPS_max between slope changes of the discrepancy", ("dense-spline",)),
    Option("knot_max", "priors", POSITIVE, 2.0,
           "last knot (RPS/RPS_max): the discrepancy extrapolates to here", ("dense-spline",)),
    Option("amplitude_scale", "priors", POSITIVE, 2.0,
           "HalfNormal scale of the pooled discrepancy amplitude", ("dense-spline",)),
    Option("amplitude_spread", "priors", POSITIVE, 1.0,
           "HalfNormal scale of the groups' log-sd around it", ("dense-spline",)),
    Option("effect_scale", "priors", POSITIVE, 0.2,
           "prior sd of the population log effect of the second version", VERSIONS),
    Option("effect_spread_scale", "priors", POSITIVE, 0.1,
           "prior scale of that effect's spread across groups", VERSIONS),
    # Log-normal with log-sd 1 (95% between 0.14% and 7%): some drift between load tests
    # of one build is the rule; a half-normal spread reaching zero is a funnel with a
    # handful of runs (divergences at target 0.99).
    Option("run_effect_median", "priors", POSITIVE, 0.01,
           "prior median of the run-to-run spread of log C1 and log C2 (with a run column)",
           ("versions",)),
    Option("physics_log_sd", "priors", POSITIVE, 1.0, "prior log-sd of a roofline rate",
           ("hierarchical",)),
    Option("overhead_log_sd", "priors", POSITIVE, 1.5, "prior log-sd of an overhead term",
           ("hierarchical",)),
    Option("vague_log_sd", "priors", POSITIVE, 2.5,
           "prior log-sd of every rate without physics priors", ("hierarchical",)),
    Option("system_spread_scale", "priors", POSITIVE, 0.08,
           "prior scale of the spread of verifier deviations", ("hierarchical",)),
    Option("cell_spread_scale", "priors", POSITIVE, 0.1,
           "prior scale of the spread of cell deviations", ("hierarchical",)),
    Option("offset_scale", "priors", POSITIVE, 2.0,
           "prior sd of a summary's log A around log C1 plus its centre", ("tails",)),
    Option("exponent_log_scale", "priors", POSITIVE, 0.5,
           "prior sd of log gamma, a summary's growth exponent, around 0", ("tails",)),
    Option("tail_noise_median", "priors", POSITIVE, 0.03,
           "prior median of what the law leaves over of a summary, its sampling apart",
           ("tails",)),
    Option("saturation_spread", "priors", NON_NEGATIVE, 0.1,
           "log-sd of a summary's saturation cost around the mean's C2 (0: the same C2)",
           ("tails",)),
    Option("count_spread_median", "priors", POSITIVE, 0.05,
           "count law: prior median of a request's relative latency spread at zero load",
           ("tails",)),
    Option("count_spread_log_sd", "priors", POSITIVE, 1.5, "count law: its prior log-sd",
           ("tails",)),
    Option("count_dispersion_log_sd", "priors", POSITIVE, 0.75,
           "count law: prior log-sd of the stall time's dispersion (1: the chain's own)",
           ("tails",)),
    # ------------------------------------------------------------------ experimental
    Option("noise_load_at", "experimental", Choice("auto", "measured", "curve"), "auto",
           "the likelihood's rate-error amplification: the law's elasticity (curve) or at "
           "most each point's measured L/C1 - 1 (measured); auto: measured with the profile "
           "chain, else curve", SLOT_QUEUE + SPECULATIVE + ("versions",),
           defaults={m: "curve" for m in SPECULATIVE + ("moe", "versions")}),
    Option("profile_law", "experimental", Choice("auto", "poisson", "chain"), "auto",
           "with a decode profile: poisson, the law's own N; chain, the profile inside the "
           "slot queue's birth-death chain; auto: chain with a profile (tails: poisson)",
           ("dense",)),
    Option("prefill_batching", "experimental", Choice(True, False, "auto"), "auto",
           "with the profile chain: waiting prompts share one prefill iteration; auto: yes "
           "with the chain", ("dense",)),
    Option("prefill_fixed_power", "experimental", Number(low=1.0), 1.0,
           "batched prefill's fixed part a = C2 (t_d(1)/C2)^p: 1 is a = t_d(1)", ("dense",)),
    Option("run_own_length", "experimental", Either(Choice("learned"), NON_NEGATIVE), 0.0,
           "with run_effect shared: the point's own run error as a process along log RPS "
           "with this correlation length (0: independent between rates)", ("dense",)),
    Option("run_own_nugget", "experimental", Number(0.0, 1.0), 0.0,
           "of that process, the part that stays independent between rates", ("dense",)),
    Option("likelihood", "experimental", Choice("normal", "student_t"), "normal",
           "the log-latency likelihood of the misfit-admitting laws", OWN_LAWS),
    Option("latent_alpha", "experimental", Choice("auto", "always", "never"), "auto",
           "alpha learned from the acceptance counters; auto: where a group has counters",
           SPECULATIVE),
    Option("acceptance", "experimental", Choice("auto", "totals", "per_position"), "auto",
           "which counters a window contributes; auto: per position when all k are there",
           SPECULATIVE),
    Option("mean_law", "experimental", Choice("eq1", "auto", "roofline"), "eq1",
           "roofline: the compute roof from the verifier's, drafter's and GPU's cards added "
           "to eq. (1)/(3), with a stated engine cap as its slot queue (auto: where "
           "speculative groups have cards and no decode profile is stated); on held-out "
           "simulated roof sweeps 0.64 coverage against eq. (1)+(3)'s 0.20, short of 0.80 "
           "(docs/findings/compute-roof.md)",
           ("dense", "speculative")),
    Option("acceptance_dispersion", "experimental", Choice("learned", "none"), "learned",
           "window-to-window spread of alpha (a Beta-Binomial); none: plain Binomial counts",
           SPECULATIVE),
    Option("acceptance_structure", "experimental", Choice("auto", *STRUCTURES), "auto",
           "with acceptance_law token: the token process's structure; auto: by drafter kind",
           SPECULATIVE),
    Option("acceptance_k_max", "experimental", Integer(1), 16,
           "with acceptance_law token: E(k) kept per draw for k = 0 to this", SPECULATIVE),
    # 0 by default: offset 1 fits no better on the bundled simulator data (elpd -0.3 +-
    # 1.3), and k + 1 verified tokens beat k by 200 +- 29 elpd (examples/moe_low_load.py,
    # 2026-12-01; docs/findings/moe-and-cap.md).
    Option("moe_token_offset", "experimental", NON_NEGATIVE, 0.0,
           "eq. (4)'s tokens T = offset + RPS L tokens (0: the paper's T = RPS L)",
           SPECULATIVE + ("moe",)),
    Option("moe_verify_tokens", "experimental", Choice("k+1", "k"), "k+1",
           "tokens per verification pass in eq. (4): k + 1 (measured) or k (the paper)",
           SPECULATIVE + ("moe",)),
    # gamma = 1 is the candidate a free exponent is compared with (benchmarks/slo_truth.py)
    Option("free_exponent", "experimental", FLAG, True,
           "false: every summary grows exactly like the mean (gamma = 1)", ("tails",)),
    # off by default: bimodal noise scales on the fixed-length README sweeps, where the
    # mean law and the summaries disagree on curvature
    Option("base_noise_shared_with_summaries", "experimental", FLAG, False,
           "the mean's load-independent noise also a run error shared by the summaries of "
           "the point", ("tails",)),
    Option("sampling_error", "experimental", FLAG, True,
           "a reported percentile of n requests is an order statistic (false: read as the "
           "population's)", ("tails",)),
    # "data" agrees with the long-run truth more often on thin simulated runs (0.984 against
    # 0.970; benchmarks/thin_slo.py) and samples twice as fast; "model" can widen the
    # spread to excuse a curve's misfit (0.59 where the truth has 0.35).
    Option("spread", "experimental", Choice("data", "model"), "data",
           "where the per-request log-latency spread comes from: the points' own percentiles "
           "or the fitted curves of two percentiles", ("tails",)),
    Option("count_dispersion", "experimental", Choice("chain", "batch"), "chain",
           "count law's variance: the birth-death chain's, or Poisson stalls below the cap "
           "plus the slot wait past it", ("tails",)),
    # ------------------------------------------------------------------ sampler
    Option("centred_deviations", "sampler",
           Either(Choice("auto"), Subset(*SYSTEM_COEFFICIENTS)), "auto",
           "which verifier deviations are centred; auto: c1v and c2v, and c2p where the data "
           "measure it finely", ("hierarchical",)),
    Option("cell_c1_deviations", "sampler", Choice("conditional", "non_centred"),
           "conditional", "how a cell's C1 deviation is parameterised", ("hierarchical",)),
    Option("cell_c2_deviations", "sampler", Choice("conditional", "non_centred"),
           "conditional", "how a cell's C2 deviation is parameterised", ("hierarchical",)),
    # The subsample pays where the sums are most of a gradient's cost (16k rows: 0.70 ms
    # against 2.73 ms; 4k: 0.40 against 0.59); at 1k rows all points cost 8% more per
    # gradient and 16 points misrepresent a cell with 26 sweeps (bundled data: ESS per
    # gradient 1.22e-2 with the subsample, 1.8e-2 to 2.1e-2 without, at target 0.9;
    # docs/findings/sampler-geometry.md, "The hierarchical model, from funnels to
    # conditional coordinates", measured 2026-12-03). non_centred cell deviations were
    # the hierarchical model's versions 3 and 4.
    Option("conditional_points_per_cell", "sampler", Either(Choice(None), Integer(2)), 16,
           "the conditional deviations' per-cell sums run over at most this many points "
           "(null: all)", ("hierarchical",)),
    Option("conditional_subsample_rows", "sampler", Integer(0), 2048,
           "... in data with more rows than this", ("hierarchical",)),
    Option("bisection_steps", "sampler", Integer(1), MOE_BISECTION_STEPS,
           "bisection steps of eq. (4)'s root search", ("moe",)),
    Option("newton_steps", "sampler", Integer(0), MOE_NEWTON_STEPS,
           "Newton steps after them", ("moe",)),
]

OPTIONS: dict[str, Option] = {option.name: option for option in OPTIONS_LIST}

#: Options no model takes any more: name -> (the value every fit file made with it is
#: read as, why it went). A fit file that stored another value is refused.
REMOVED = {
    "holdout_mask": (False, "internal: the leave-n-out folds build with it themselves"),
    "summary_run": ("none", "tried on the p99 and not adopted "
                            "(docs/findings/tail-laws.md)"),
    "count_stretch": ("signed", "tried on the p99 and not adopted "
                                "(docs/findings/tail-laws.md)"),
}
#: Options renamed so that one name means one thing in every model: old -> new.
RENAMED = {
    "token_offset": "moe_token_offset",
    "verify_tokens": "moe_verify_tokens",
}
#: Renamed in one model only (its old name means something else elsewhere).
RENAMED_IN = {"moe": {"share_logit_scale": "moe_share_logit_scale"},
              # not the dense model's run_effect (a sweep's replayed arrivals)
              "tails": {"shared_run_effect": "base_noise_shared_with_summaries"}}


def takes(model: str) -> list[str]:
    """The options ``model`` takes, in declaration order."""
    return [o.name for o in OPTIONS_LIST if model in o.models]


def model_defaults(model: str, inherited: dict | None = None) -> dict:
    """A model's configuration at its defaults: the options it takes, after those of the
    class whose code it inherits (``inherited``), which it keeps at their defaults."""
    own = {name: OPTIONS[name].default_for(model) for name in takes(model)}
    return {**(inherited or {}), **own}


def _near_miss(name: str, candidates) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def unknown_option_message(model: str, name: str) -> str:
    """One line on an option ``model`` does not take: renamed, removed, another model's,
    or a misspelling with its near miss."""
    new = RENAMED_IN.get(model, {}).get(name) or RENAMED.get(name)
    if new:
        return f"option {name} is now called {new}"
    if name in REMOVED:
        return f"option {name} was removed: {REMOVED[name][1]}"
    option = OPTIONS.get(name)
    if option is not None:
        return (f"the {model} model does not take {name} (an option of "
                f"{', '.join(option.models)})")
    return (f"unknown {model} model option {name}"
            f"{_near_miss(name, takes(model)) or _near_miss(name, OPTIONS)} "
            f"(`bayesspec options --model {model}` lists them)")


def check_config(model: str, defaults: dict, given: dict | None, *,
                 stored: bool = False) -> dict:
    """``given`` checked against the declarations and laid over ``defaults``: ValueError
    (one line) for an unknown or misspelt name, a value outside the option's type, or a
    value other than the default of an option the model keeps but does not take (unless
    ``stored``: read back from a fit file, where such an option holds what its "auto"
    became)."""
    taken = set(takes(model))
    config = dict(defaults)
    for name, value in (given or {}).items():
        if name not in defaults:
            raise ValueError(unknown_option_message(model, name))
        option = OPTIONS[name]
        value = option.kind.check(name, list(value) if isinstance(value, tuple) else value)
        if name not in taken and value != defaults[name] and not stored:
            raise ValueError(f"the {model} model does not take {name} (an option of "
                             f"{', '.join(option.models)})")
        config[name] = value
    return config


def upgrade_stored(model: str, stored: dict, where=None) -> dict:
    """A fit file's stored configuration in today's names: renamed options renamed,
    removed ones dropped where they hold the value every fit made without them had."""
    from bayesspec.errors import FitFileError

    upgraded = {}
    for name, value in stored.items():
        name = RENAMED_IN.get(model, {}).get(name) or RENAMED.get(name, name)
        if name in REMOVED:
            if value != REMOVED[name][0]:
                raise FitFileError(f"made with option {name}={value}, which this bayesspec "
                                   f"no longer has ({REMOVED[name][1]}); refit the data",
                                   file=where)
            continue
        upgraded[name] = value
    return upgraded


def command_line(model: str, config: dict, resolved: dict) -> list[str]:
    """The ``fit`` words that give ``config`` to ``model``: each option that differs from
    its default and is not what an "auto" became, under its one spelling (its flag, or
    ``--option NAME=JSON``)."""
    import shlex

    words = []
    for name in takes(model):
        option, value = OPTIONS[name], config.get(name)
        default = option.default_for(model)
        if name not in config or value == default or name in resolved:
            continue
        if isinstance(value, (list, tuple)) and tuple(value) == tuple(default or ()):
            continue
        text = value if option.flag and isinstance(value, str) else json.dumps(value)
        words += ([option.flag, shlex.quote(text)] if option.flag
                  else ["--option", shlex.quote(f"{name}={text}")])
    return words


def flagged() -> list[Option]:
    """Options with a command-line flag of their own."""
    return [o for o in OPTIONS_LIST if o.flag]


# ---------------------------------------------------------------------------- "auto"


def resolved_options(tree_or_fit) -> dict:
    """What each "auto" option became in a fit (its file's ``resolved_options``)."""
    tree = getattr(tree_or_fit, "tree", tree_or_fit)
    return json.loads(tree.attrs.get("resolved_options", "{}"))


def resolved_line(resolved: dict) -> str | None:
    """The one line ``fit`` prints: ``auto options: name = value (why); ...``."""
    if not resolved:
        return None
    parts = [f"{name} = {_literal(entry['value'])} ({entry['why']})"
             for name, entry in resolved.items()]
    return "auto options: " + "; ".join(parts)


# ---------------------------------------------------------------------------- listing


def describe(option: Option, model: str | None = None) -> dict:
    """An option as ``bayesspec options --json`` lists it."""
    default = option.default_for(model) if model else option.default
    document = {"name": option.name, "tier": option.tier, "type": option.kind.describe(),
                "default": list(default) if isinstance(default, tuple) else default,
                "description": option.description, "models": list(option.models)}
    if not model and option.defaults:
        document["model_defaults"] = {m: list(v) if isinstance(v, tuple) else v
                                      for m, v in option.defaults.items()}
    if option.flag:
        document["flag"] = option.flag
    return document


def listing(model: str | None = None) -> list[dict]:
    """Every option (or those ``model`` takes), by tier."""
    chosen = [o for o in OPTIONS_LIST if model is None or model in o.models]
    order = list(TIERS)
    return [describe(o, model) for o in sorted(chosen, key=lambda o: order.index(o.tier))]


def _default_text(document: dict) -> str:
    default = document["default"]
    text = ",".join(default) if isinstance(default, list) else _literal(default)
    text = text if text != "" else '""'
    extra = document.get("model_defaults")
    if extra:
        text += " (" + ", ".join(f"{m}: {_literal(v)}" for m, v in extra.items()) + ")"
    return text


def markdown() -> str:
    """``docs/options.md``, generated from the declarations (a test keeps it current)."""
    lines = ["# Model options", "",
             "Generated from `bayesspec/bayes/options.py` by `bayesspec options --markdown`; "
             "do not edit by hand.", "",
             "Give an option to `fit`, `check` or `sbc` as `--option NAME=VALUE` (a value "
             "is read as JSON when it parses, else as text), or with its own flag where it "
             "has one. `bayesspec options --model M` lists the options of one model with "
             "its defaults. Sampler settings proper (draws, tuning, chains, target "
             "acceptance) are flags of `fit` (`bayesspec fit --help`).", ""]
    for tier, meaning in TIERS.items():
        rows = [d for d in listing() if d["tier"] == tier]
        lines += [f"## {tier}: {meaning}", "",
                  "| option | type | default | models | description |",
                  "|---|---|---|---|---|"]
        for d in rows:
            name = f"`{d['name']}`" + (f" (`{d['flag']}`)" if "flag" in d else "")
            models = "all" if set(d["models"]) == set(EVERY) else ", ".join(d["models"])
            lines.append(f"| {name} | {d['type'].replace('|', '/')} | "
                         f"{_default_text(d).replace('|', '/')} | {models} | "
                         f"{d['description']} |")
        lines.append("")
    lines += ["## Removed or renamed", ""]
    lines += [f"- `{old}`: now `{new}`" for old, new in RENAMED.items()]
    lines += [f"- `{old}` ({model}): now `{new}`" for model, names in RENAMED_IN.items()
              for old, new in names.items()]
    lines += [f"- `{name}`: removed; {why}" for name, (_, why) in REMOVED.items()]
    return "\n".join(lines) + "\n"
