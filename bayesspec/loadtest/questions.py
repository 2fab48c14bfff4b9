"""Questions: a decision read off the posterior as answers over the joint draws, and the
configurations a load point could measure to settle it.

A *question* is a decision read off the posterior (RPS* of one (alpha, k), the best k at
given rates, goodput under an SLO, the version verdict of two fits, the ceiling of each
configuration). Each answer is *right* in a draw when it lies within a tolerance of the
draw's own value (a rate within +-``within`` of it; a k, or a configuration, whose
speedup or goodput is within ``within`` of the draw's best), so the decision's *expected
loss* is the posterior probability that it is wrong, and it is **settled** when every
answer's expected loss is at most a tolerance (P(right) >= 0.95 by default in
:func:`bayesspec.loadtest.planning.plan`), no answer is read off the law beyond what the
data measured (:class:`Extrapolation`: the rule of the verbs, ``Law.extrapolated``), an
answer that a verb rules on by its own rule (``compare``'s verdict) has a verdict, and
the fits behind it converged. A question also carries the points the fit set aside
(:class:`SetAside`), so that the planner never proposes one of them again.

Everything here takes prediction-contract objects (:class:`~bayesspec.prediction.Law`,
:class:`~bayesspec.prediction.Curve`), never posterior variable names;
:mod:`bayesspec.loadtest.fit_questions` builds these questions from a fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from bayesspec.errors import BadInput

#: A candidate is equivalent to a set-aside point at a rate within this fraction of it...
SET_ASIDE_RATE_MATCH = 0.05
#: ... unless it asks for more than this many times its requests: a longer window may
#: reach the steady state the shorter one missed (a set-aside row's ``n_requests`` counts
#: the requests measured, fewer than those sent, hence the margin over 1).
SET_ASIDE_REQUEST_FACTOR = 2.0


def ceiling_draws(curve) -> np.ndarray:
    """Per draw, the highest sustainable rate of a curve: ``Curve.ceiling`` when the
    curve has one (an engine concurrency cap), else the saturation rate 1/C2."""
    value = getattr(curve, "ceiling", None)
    if value is None:
        with np.errstate(divide="ignore"):
            return 1.0 / np.asarray(curve.saturation_cost, dtype=float)
    return np.asarray(value() if callable(value) else value, dtype=float)


def percentile_spread_factor(metric: str) -> float:
    """How much noisier a measured p-th percentile is than a measured mean of the same
    requests: the order statistic's standard error sqrt(p(1-p)/N)/f(q_p), for a normal
    spread in units of sigma/sqrt(N): sqrt(p(1-p))/phi(z_p) (p99: 3.7, p90: 1.7)."""
    from scipy.stats import norm

    name = metric.rsplit("_", 1)[-1]
    if not (name.startswith("p") and name[1:].isdigit()):
        return 1.0
    p = int(name[1:]) / 100.0
    return float(math.sqrt(p * (1 - p)) / norm.pdf(norm.ppf(p)))


@dataclass(frozen=True)
class SetAside:
    """A load point the fit set aside: its configuration, the rate it was run at (the
    target rate of an open-loop run, else the achieved one), the requests it measured,
    and whether the reason says the rate was past the ceiling."""

    k: int
    alpha: float | None
    rps: float
    requests: float
    past_ceiling: bool
    reason: str = ""
    version: str | None = None

    def covers(self, configuration: "Configuration", rate: float, requests: int) -> bool:
        """Whether a candidate at (configuration, rate, requests) would be set aside for
        the same reason."""
        if int(configuration.k) != self.k or configuration.version != self.version:
            return False
        mine, theirs = configuration.alpha, self.alpha
        if int(self.k) > 0 and mine is not None and theirs is not None \
                and abs(mine - theirs) > 1e-6:
            return False
        if self.past_ceiling and rate >= (1 - SET_ASIDE_RATE_MATCH) * self.rps:
            return True
        return (abs(rate / self.rps - 1) <= SET_ASIDE_RATE_MATCH
                and requests <= SET_ASIDE_REQUEST_FACTOR * self.requests)


# --------------------------------------------------------------------------- answers

@dataclass(frozen=True)
class Extrapolation:
    """Why an answer is read off the fitted law beyond what the data measured (the verbs'
    rule: :meth:`bayesspec.prediction.Law.extrapolated`), and what would make it measured:
    ``needs`` maps a configuration (its index in the question) to the rate it must be
    measured up to."""

    what: str
    reasons: tuple
    needs: dict

    @property
    def why(self) -> str:
        return f"{self.what} is an extrapolation: " + "; ".join(self.reasons)


@dataclass(frozen=True)
class Ruling:
    """The verdict a verb gives on an answer by its own rule (``compare``'s ratio verdict),
    so that the planner's decision is the verb's: ``decided`` is False when the verb
    gives none ("uncertain")."""

    decision: str
    p_right: float
    decided: bool
    rule: str


class _Answer:
    """What every answer carries besides its losses: whether it is an extrapolation and
    a verb's own verdict on it."""

    extrapolation: Extrapolation | None = None
    ruling: Ruling | None = None

    def _marks(self, summary: dict) -> dict:
        summary["extrapolated"] = self.extrapolation is not None
        if self.extrapolation is not None:
            summary["extrapolation"] = self.extrapolation.why
        if self.ruling is not None:
            summary.update(decision=self.ruling.decision, p_right=self.ruling.p_right,
                           decided=self.ruling.decided, rule=self.ruling.rule)
        return summary


class DiscreteAnswer(_Answer):
    """A choice among options (a k, a configuration, a verdict); ``right`` (S, J) says in
    which draws option j is right. The decision is the option most probably right."""

    def __init__(self, name: str, options: list, right: np.ndarray):
        self.name = name
        self.options = list(options)
        self.right = np.asarray(right, dtype=float)

    def losses(self, weights: np.ndarray) -> np.ndarray:
        """P(wrong) of the best option under weights (S, M): (M,)."""
        p = self.right.T @ weights / weights.sum(axis=0)              # (J, M)
        return 1.0 - p.max(axis=0)

    def best(self) -> int:
        """Index of the option most probably right under the posterior."""
        return int(np.argmax(self.right.mean(axis=0)))

    def summary(self) -> dict:
        p = self.right.mean(axis=0)
        best = self.best()
        return self._marks({"answer": self.name, "decision": self.options[best],
                            "p_right": float(p[best]),
                            "options": {str(o): float(v) for o, v in zip(self.options, p)}})


class RateAnswer(_Answer):
    """A rate (RPS*, a ceiling, a goodput) per draw, NaN where it does not exist (no
    crossover). The decision is the weighted median of the finite values, right within
    +-``within`` of it, or 'none' when most draws have none."""

    def __init__(self, name: str, values: np.ndarray, within: float):
        self.name = name
        values = np.asarray(values, dtype=float)
        self.none = np.isnan(values)
        self.order = np.argsort(np.where(self.none, np.inf, values))[: int((~self.none).sum())]
        self.sorted = values[self.order]
        self.within = float(within)
        self.values = values

    def _losses_and_medians(self, weights: np.ndarray):
        total = weights.sum(axis=0)                                    # (M,)
        p_none = (weights * self.none[:, None]).sum(axis=0) / total
        if self.sorted.size == 0:
            return 1.0 - p_none, np.full(weights.shape[1], np.nan)
        cumulative = np.cumsum(weights[self.order], axis=0)            # (F, M)
        finite_total = cumulative[-1]
        half = 0.5 * finite_total
        index = np.argmax(cumulative >= half[None, :], axis=0)
        median = self.sorted[index]
        lo = np.searchsorted(self.sorted, median * (1 - self.within), side="left")
        hi = np.searchsorted(self.sorted, median * (1 + self.within), side="right")
        columns = np.arange(weights.shape[1])
        padded = np.vstack([np.zeros((1, weights.shape[1])), cumulative])
        inside = (padded[hi, columns] - padded[lo, columns]) / total
        return 1.0 - np.maximum(p_none, inside), np.where(p_none > inside, np.nan, median)

    def losses(self, weights: np.ndarray) -> np.ndarray:
        return self._losses_and_medians(weights)[0]

    def summary(self) -> dict:
        loss, median = self._losses_and_medians(np.ones((self.values.size, 1)))
        finite = self.values[~self.none]
        tail = [float(np.quantile(finite, q)) for q in (0.05, 0.95)] if finite.size else [None] * 2
        return self._marks({"answer": self.name,
                            "decision": None if np.isnan(median[0]) else float(median[0]),
                            "p_right": float(1.0 - loss[0]), "within": self.within,
                            "p_none": float(self.none.mean()), "interval_90": tail})

    def decision(self) -> float | None:
        """The decision under the posterior: the median rate, None when most draws have
        none."""
        return self.summary()["decision"]


# --------------------------------------------------------------------------- configurations

@dataclass
class Configuration:
    """What can be measured: one server configuration, the curves a load point at it
    measures (the mean first, then any latency summaries) and the per-request spread of
    each (std/mean, times the percentile factor), on the question's joint draws
    (``index``: this configuration's draw of each joint draw)."""

    k: int
    alpha: float | None
    curves: tuple
    spreads: tuple
    index: np.ndarray
    label: str = ""
    version: str | None = None
    #: The highest unsaturated rate this configuration was fitted on (nan: never).
    rps_fitted_max: float = float("nan")
    #: What a load test of it asks for, where the fit says: ``verifier``, ``drafter``,
    #: ``prefill_tokens``, ``decode_tokens`` (the group's or setup's own).
    workload: dict = field(default_factory=dict)

    def latency(self, curve, rps: float) -> np.ndarray:
        return np.asarray(curve.latency(float(rps)), dtype=float)[self.index]

    def ceiling(self) -> np.ndarray:
        return ceiling_draws(self.curves[0])[self.index]


@dataclass
class Question:
    """A decision: its answers over the joint draws, the configurations a load point can
    measure, and rates worth trying besides each configuration's grid."""

    name: str
    answers: list
    configurations: list
    extra_rates: tuple = ()
    notes: list = field(default_factory=list)
    #: Points the fit set aside (:class:`SetAside`): equivalent candidates are skipped.
    set_aside: list = field(default_factory=list)
    #: Why the posterior behind it cannot be relied on (the convergence verdicts of the
    #: fits that did not converge): such a question is never settled.
    unconverged: list = field(default_factory=list)

    def losses(self, weights: np.ndarray) -> np.ndarray:
        """Per answer and outcome, P(wrong): (A, M)."""
        return np.stack([answer.losses(weights) for answer in self.answers])

    def extrapolations(self) -> list:
        """(answer, :class:`Extrapolation`) of every answer read off the law beyond the
        data."""
        return [(a, a.extrapolation) for a in self.answers if a.extrapolation is not None]

    def with_workload(self, workload: dict) -> "Question":
        """The question with ``workload`` (a setup's: its drafter is SD's alone) filled in
        where a configuration has none of its own."""
        for configuration in self.configurations:
            shared = {key: value for key, value in workload.items()
                      if key != "drafter" or configuration.k > 0}
            configuration.workload = {**shared, **configuration.workload}
        return self


def _draw_index(draws: int, max_draws: int, rng) -> np.ndarray:
    if draws <= max_draws:
        return np.arange(draws)
    return np.sort(rng.choice(draws, max_draws, replace=False))


# --------------------------------------------------------------------------- questions

def _speculative_curve(law, alpha, k):
    return law.dense if int(k) == 0 else law.sd(alpha, int(k))


def law_extrapolation(law, rate, alpha, k: int, configurations: list, rests_on,
                      what: str) -> Extrapolation | None:
    """Whether an answer about SD at (alpha, k) (k = 0: the dense baseline) at ``rate`` is
    the law's extrapolation, by the verbs' rule (:meth:`~bayesspec.prediction.Law.
    extrapolated`: above the highest rate its curves were fitted on, or outside the
    measured alphas and draft lengths); None when it is measured. ``rests_on``: indices of
    the question's configurations the answer reads, each of which a load point up to
    ``rate`` would measure."""
    if rate is None or not np.isfinite(rate) or not hasattr(law, "extrapolated"):
        return None
    if not bool(np.any(law.extrapolated(float(rate), alpha, int(k)))):
        return None
    measured = law.measured(alpha, int(k))
    reasons = list(measured["design_notes"])
    top = measured["rps_fitted_max"]
    if np.isfinite(top) and rate > top:
        reasons.append(f"above {top:.4g} RPS, the highest rate "
                       + ("both its curves were" if int(k) else "it was") + " fitted on")
    needs = {}
    for i in rests_on:
        c = configurations[i]
        compared = c.k in (0, int(k))        # the curves whose fitted rates bound it
        if compared and not c.rps_fitted_max >= rate:
            needs[i] = float(rate)
        elif measured["design_extrapolated"] and (c.k > 0 or getattr(law, "unmeasured_setup",
                                                                      "")):
            # any rate of an unmeasured configuration puts it among the measured ones
            needs[i] = float(rate) if compared else 0.0
    return Extrapolation(what, tuple(reasons), needs)


def crossover_question(law, alpha: float, k: int, *, within: float = 0.05, spread: float,
                       max_draws: int = 2000, seed: int = 0) -> Question:
    """RPS* of SD at (alpha, k) against dense decoding of the same setup. The answer is
    an extrapolation where ``crossover`` calls it one: its median over every draw with a
    crossover above the rates both curves were fitted on, or (alpha, k) unmeasured."""
    law.dense  # a clear error naming how to add a dense baseline
    sd = law.sd(alpha, int(k))
    rng = np.random.default_rng(seed)
    index = _draw_index(sd.draws, max_draws, rng)
    every = np.asarray(law.crossover_draws(alpha, int(k)), dtype=float)
    star = every[index]
    configurations = [
        Configuration(0, None, (law.dense,), (spread,), index, "dense (k = 0)",
                      rps_fitted_max=_fitted_max(law.dense, law)),
        Configuration(int(k), _alpha(alpha), (sd,), (spread,), index,
                      f"k = {int(k)}, alpha {alpha:g}",
                      rps_fitted_max=_fitted_max(sd, law, alpha, int(k)))]
    finite = star[np.isfinite(star)]
    extra = tuple(np.quantile(finite, [0.1, 0.5, 0.9])) if finite.size else ()
    answer = RateAnswer(f"RPS* (alpha {alpha:g}, k {int(k)})", star, within)
    crossing = every[~np.isnan(every)]
    if crossing.size:
        median = float(np.quantile(crossing, 0.5))
        answer.extrapolation = law_extrapolation(
            law, median, alpha, int(k), configurations, (0, 1),
            f"RPS* {median:.4g} (alpha {alpha:g}, k {int(k)})")
    return Question("crossover", [answer], configurations, extra)


def _fitted_max(curve, law=None, alpha=None, k: int = 0) -> float:
    """The highest rate a curve was fitted on, else what its law says was measured for
    that configuration (``Law.measured``)."""
    value = float(getattr(curve, "rps_fitted_max", np.nan))
    if np.isfinite(value) or law is None or not hasattr(law, "measured"):
        return value
    measured = law.measured(alpha, int(k))
    return float(measured["dense_rps_fitted_max" if int(k) == 0 else "sd_rps_fitted_max"])


def _alpha(alpha):
    return None if alpha is None or (isinstance(alpha, float) and math.isnan(alpha)) \
        else float(alpha)


def _best_within(latencies: np.ndarray, within: float) -> np.ndarray:
    """(S, J) latencies -> (S, J) whether option j is within ``within`` of the draw's best
    speed (1/latency); saturated options are right only when every option is."""
    with np.errstate(divide="ignore", invalid="ignore"):
        speed = np.where(np.isfinite(latencies), 1.0 / latencies, 0.0)
    best = speed.max(axis=1, keepdims=True)
    return np.where(best > 0, speed >= (1.0 - within) * best, True)


def kstar_question(law, alpha, rps, ks, *, within: float = 0.01, spread: float,
                   max_draws: int = 2000, seed: int = 0) -> Question:
    """The best k at each rate (k = 0: dense), right when its speedup is within
    ``within`` of the draw's best."""
    rps = np.atleast_1d(np.asarray(rps, dtype=float))
    ks = sorted({int(k) for k in ks})
    if len(ks) < 2:
        raise BadInput("k* compares at least two draft lengths (k = 0 is dense)",
                       argument="ks")
    curves = [_speculative_curve(law, alpha, k) for k in ks]
    rng = np.random.default_rng(seed)
    index = _draw_index(curves[0].draws, max_draws, rng)
    answers = []
    for rate in rps:
        latencies = np.stack([np.asarray(c.latency(float(rate)), float)[index] for c in curves],
                             axis=1)
        answers.append(DiscreteAnswer(f"k* at {rate:g} RPS", ks,
                                      _best_within(latencies, within)))
    configurations = [
        Configuration(k, None if k == 0 else _alpha(alpha), (curve,), (spread,), index,
                      "dense (k = 0)" if k == 0 else f"k = {k}" + (
                          f", alpha {alpha:g}" if _alpha(alpha) is not None else ""),
                      rps_fitted_max=_fitted_max(curve, law, alpha, k))
        for k, curve in zip(ks, curves)]
    for rate, answer in zip(rps, answers):
        answer.extrapolation = _kstar_extrapolation(law, alpha, float(rate),
                                                    ks[answer.best()], ks, configurations)
    return Question("kstar", answers, configurations, tuple(rps))


def _kstar_extrapolation(law, alpha, rate: float, best: int, ks: list,
                         configurations: list) -> Extrapolation | None:
    """``kstar``'s rule for the k chosen at a rate (:meth:`~bayesspec.prediction.Law.
    extrapolated` of that k at that alpha). What would measure it: the chosen k and the
    dense baseline up to the rate; for k = 0 (do not speculate) at an unmeasured alpha,
    SD at that alpha too."""
    dense = [i for i, k in enumerate(ks) if k == 0]
    rests_on = dense + ([ks.index(best)] if best > 0 else
                        [i for i, k in enumerate(ks) if k > 0])
    return law_extrapolation(law, rate, alpha, best, configurations, rests_on,
                             f"k* = {best} at {rate:g} RPS")


def slo_question(mean_law, metric_laws: dict, targets: dict, configurations, *,
                 within: float = 0.05, spread: float, max_draws: int = 2000,
                 seed: int = 0) -> Question:
    """Under an SLO: which configuration has the highest goodput (right within
    ``within`` of the draw's best) and that goodput (within +-``within``).
    ``configurations``: (alpha, k) of the setup (k = 0 dense)."""
    curves_of = []
    for alpha, k in configurations:
        mean = mean_law.curve(alpha, k)
        summaries = [metric_laws[m].curve(alpha, k) for m in targets]
        curves_of.append((alpha, k, mean, summaries))
    rng = np.random.default_rng(seed)
    index = _draw_index(curves_of[0][2].draws, max_draws, rng)
    goodput = np.stack([np.min([np.asarray(c.rate_meeting(targets[m]), float)[index]
                                for c, m in zip(summaries, targets)], axis=0)
                        for _, _, _, summaries in curves_of], axis=1)   # (S, C)
    best = goodput.max(axis=1, keepdims=True)
    right = np.where(best > 0, goodput >= (1.0 - within) * best, True)
    names = ["dense (k = 0)" if k == 0 else f"k = {k}" + ("" if alpha is None else
                                                           f", alpha {alpha:g}")
             for alpha, k, _, _ in curves_of]
    factors = [percentile_spread_factor(m) for m in targets]
    configs = [Configuration(int(k), _alpha(alpha), (mean, *summaries),
                             (spread, *(spread * f for f in factors)), index, name,
                             rps_fitted_max=getattr(mean, "rps_fitted_max", np.nan))
               for (alpha, k, mean, summaries), name in zip(curves_of, names)]
    answers = [DiscreteAnswer("best configuration under the SLO", names, right),
               RateAnswer("goodput of the best configuration (RPS)", best[:, 0], within)]
    chosen = answers[0].best()
    alpha, k, _, summaries = curves_of[chosen]
    answers[1].extrapolation = _goodput_extrapolation(
        mean_law, alpha, k, summaries, answers[1].decision(), chosen, names[chosen])
    # Where each configuration's goodput may lie: a point there measures its summaries at
    # the rate where they cross their targets, which is what the answers turn on.
    finite = [goodput[:, c][np.isfinite(goodput[:, c]) & (goodput[:, c] > 0)]
              for c in range(goodput.shape[1])]
    extra = tuple(float(q) for values in finite if values.size
                  for q in np.quantile(values, [0.1, 0.5, 0.9]))
    return Question("slo", answers, configs, extra,
                    notes=["a load point measures the mean and every targeted summary; "
                           "their errors are taken as independent given a draw (the tails "
                           "model couples them through the run's shared rate error), and a "
                           "percentile's standard error is the order statistic's"])


def _goodput_extrapolation(law, alpha, k, summaries, goodput, index: int,
                           name: str) -> Extrapolation | None:
    """``slo``'s rule: a goodput above the highest rate the configuration's summaries
    were fitted on is the law's extrapolation (as is a setup the data did not measure)."""
    if goodput is None or not np.isfinite(goodput):
        return None
    reasons = list(law.design_notes(alpha, k)) if hasattr(law, "design_notes") else []
    fitted = min((float(getattr(c, "rps_fitted_max", np.nan)) for c in summaries),
                 default=float("nan"))
    if np.isfinite(fitted) and goodput > fitted:
        reasons.append(f"above {fitted:.4g} RPS, the highest rate its summaries were "
                       "fitted on")
    if not reasons:
        return None
    return Extrapolation(f"the goodput {goodput:.4g} RPS of {name}", tuple(reasons),
                         {index: float(goodput)})


def compare_question(curves_a: dict, curves_b: dict, *, rope: float = 0.02, spread: float,
                     max_draws: int = 2000, seed: int = 0, rulings: dict | None = None,
                     workloads: dict | None = None) -> Question:
    """Two fits (e.g. engine versions) of the same configurations: the verdict on C1 and
    on C2 (geometric mean B/A over shared configurations: higher, lower, or equivalent
    within +-``rope``). ``curves_a``/``curves_b``: label -> (k, alpha, Curve);
    ``rulings``: family -> ``compare``'s own :class:`Ruling` on it (the decision shown,
    and settled only when it has a verdict); ``workloads``: label -> what a load test of
    that group asks for."""
    shared = [label for label in curves_a if label in curves_b]
    if not shared:
        raise BadInput("the two fits share no group (compare fits of the same verifier, "
                       "drafter, lengths and (alpha, k))", argument="fits")
    rng = np.random.default_rng(seed)
    draws_a = curves_a[shared[0]][2].draws
    draws_b = curves_b[shared[0]][2].draws
    count = min(max_draws, draws_a, draws_b)
    index_b = _draw_index(draws_b, count, rng)
    # The posteriors are independent: a joint draw pairs a draw of B with one of A.
    index_a = rng.permutation(_draw_index(draws_a, count, rng))
    answers, configs = [], []
    options = ["higher in B", "lower in B", "equivalent"]
    for family, attribute in (("C1", "zero_load"), ("C2", "saturation_cost")):
        logs = [np.log(np.asarray(getattr(curves_b[g][2], attribute), float)[index_b]
                       / np.asarray(getattr(curves_a[g][2], attribute), float)[index_a])
                for g in shared]
        ratio = np.exp(np.mean(logs, axis=0))
        right = np.stack([ratio > 1 + rope, ratio < 1 - rope, np.abs(ratio - 1) <= rope],
                         axis=1)
        answer = DiscreteAnswer(f"{family} B/A verdict (rope +-{rope:.0%})", options, right)
        answer.ruling = (rulings or {}).get(family)
        answers.append(answer)
    for version, curves, index in (("A", curves_a, index_a), ("B", curves_b, index_b)):
        for label in shared:
            k, alpha, curve = curves[label]
            configs.append(Configuration(int(k), _alpha(alpha), (curve,), (spread,), index,
                                         f"{version}: {label}", version=version,
                                         rps_fitted_max=getattr(curve, "rps_fitted_max",
                                                                np.nan),
                                         workload=dict((workloads or {}).get(label, {}))))
    return Question("compare", answers, configs)


def ceiling_question(curves: list, *, within: float = 0.05, spread: float,
                     max_draws: int = 2000, seed: int = 0,
                     workloads: dict | None = None) -> Question:
    """The highest sustainable rate of each configuration, within +-``within``.
    ``curves``: (k, alpha, label, Curve) per configuration; ``workloads``: label -> what
    a load test of it asks for."""
    rng = np.random.default_rng(seed)
    index = _draw_index(curves[0][3].draws, max_draws, rng)
    configs = [Configuration(int(k), _alpha(alpha), (curve,), (spread,), index, label,
                             rps_fitted_max=getattr(curve, "rps_fitted_max", np.nan),
                             workload=dict((workloads or {}).get(label, {})))
               for k, alpha, label, curve in curves]
    answers = [RateAnswer(f"ceiling of {c.label} (RPS)", c.ceiling(), within) for c in configs]
    return Question("ceiling", answers, configs)
