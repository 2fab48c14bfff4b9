"""Measure next: which load point would settle a decision soonest, and whether it is
settled already.

A *question* is a decision read off the posterior (RPS* of one (alpha, k), the best k at
given rates, goodput under an SLO, the version verdict of two fits, the ceiling of each
configuration). Each answer is *right* in a draw when it lies within a tolerance of the
draw's own value (a rate within +-``within`` of it; a k, or a configuration, whose
speedup or goodput is within ``within`` of the draw's best), so the decision's *expected
loss* is the posterior probability that it is wrong, and it is **settled** when every
answer's expected loss is at most ``tolerance`` (P(right) >= 0.95 by default).

A candidate load point is a configuration (k, alpha), a rate and a request count; it
costs ``requests / rate`` seconds of the server, plus the drain of the last request (one
latency), plus the warm-up the queue needs to fill from empty (``warmup_relaxations``
relaxation times L^2/C1 at the posterior median: a few latencies at light load, many
near saturation), plus a fixed ``warmup_s`` per point. Its *value* is the expected
reduction of the summed expected loss if it were measured, by pre-posterior analysis
with no refit: draw ``outcomes`` measurements from the posterior predictive (a posterior
draw, then the fitted noise with the standard error N requests give:
``se = spread / sqrt(N)``, as ``latency_std_s`` and ``n_requests`` enter the likelihood),
reweight every posterior draw by the likelihood of each simulated measurement
(importance weights), and recompute the loss. A measurement past a draw's saturation is
set aside by the fit, so a simulated saturated outcome leaves the weights as they are.
Candidates are ranked by value per minute. A candidate equivalent to a point the fit set
aside (:func:`set_aside_points`: same configuration, a rate within
:data:`SET_ASIDE_RATE_MATCH` and at most :data:`SET_ASIDE_REQUEST_FACTOR` times its
requests, or any higher rate when the point was past the ceiling) is not proposed: it
would be set aside again. When a measurement would say more than the
draws can show, the weights collapse onto a few draws; the candidate's effective sample
size (``ess``) says so (``collapsed`` below :data:`ESS_COLLAPSED`).

Everything here takes prediction-contract objects (:class:`~bayesspec.prediction.Law`,
:class:`~bayesspec.prediction.Curve`, :class:`~bayesspec.prediction.Noise`), never
posterior variable names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from bayesspec.errors import BadInput
from bayesspec.laws import measured_load_amplification, run_mean_log_sd
from bayesspec.prediction import Noise

__all__ = ["Configuration", "Candidate", "DiscreteAnswer", "RateAnswer", "Question",
           "crossover_question", "kstar_question", "slo_question", "compare_question",
           "ceiling_question", "plan", "ceiling_draws", "measurement_spread",
           "percentile_spread_factor", "command_lines", "DEFAULT_REQUESTS",
           "RATE_FRACTIONS", "ESS_COLLAPSED", "required_columns", "SetAside",
           "set_aside_points", "point_minutes", "steady_requests", "planned_log_se",
           "planned_lengths"]

#: Request counts considered per candidate rate.
DEFAULT_REQUESTS = (100, 300, 1000)
#: At each rate the fewest requests that give a steady window, rounded up to a multiple
#: of this, is a candidate count too (between the smallest and the largest asked for).
REQUEST_STEP = 50
#: Candidate rates per configuration, as fractions of its ceiling's posterior median.
RATE_FRACTIONS = (0.1, 0.25, 0.4, 0.55, 0.7, 0.8, 0.88, 0.94)
#: Below this effective sample size the importance weights of a simulated outcome rest on
#: too few draws for its loss to be more than indicative.
ESS_COLLAPSED = 20.0
#: A load point's measured window must span at least this many request lifetimes: the
#: simulator sets a point aside below 5 (its steady-state rule; shorter runs measure the
#: queue filling up), and with 5 here 300-request points at 60% of SD's ceiling were
#: set aside every time (plan_benchmark.py), so the margin.
STEADY_LIFETIMES = 8.0
#: The per-request spread of latency (std/mean) assumed when the data do not carry
#: ``latency_std_s``.
DEFAULT_SPREAD = 0.3
#: Warm-up before a point's window, in relaxation times of the queue: linearising
#: dN/dt = rate - N/L(N) with L(N) = C1 + N*C2 gives a time constant L^2/C1 for the
#: number in the system to settle after the load starts from an empty server (C1 at light
#: load, growing as 1/(1-x)^2 towards saturation). Three time constants leave 5% of the
#: initial gap (the simulator's own warm-up rule, simulate/engine.py).
WARMUP_RELAXATIONS = 3.0
#: A candidate is equivalent to a set-aside point at a rate within this fraction of it...
SET_ASIDE_RATE_MATCH = 0.05
#: ... unless it asks for more than this many times its requests: a longer window may
#: reach the steady state the shorter one missed (a set-aside row's ``n_requests`` counts
#: the requests measured, fewer than those sent, hence the margin over 1).
SET_ASIDE_REQUEST_FACTOR = 2.0
#: Words in an exclusion reason saying the rate itself was past what the configuration
#: sustains (data.py's reasons): then every higher rate is past it too.
PAST_CEILING_WORDS = ("ceiling", "stopped rising", "of target", "preempt")


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


def measurement_spread(data, columns: tuple[str, str] = ("latency_std_s", "latency_mean_s")
                       ) -> tuple[float, bool]:
    """(the median per-request spread std/mean over the rows that have it, whether it was
    measured): the standard error of a new point's log mean is this over sqrt(N)."""
    std, mean = columns
    if data is None or std not in data.columns or mean not in data.columns:
        return DEFAULT_SPREAD, False
    ratio = (data[std].astype(float) / data[mean].astype(float)).to_numpy()
    ratio = ratio[np.isfinite(ratio) & (ratio > 0)]
    if ratio.size == 0:
        return DEFAULT_SPREAD, False
    return float(np.median(ratio)), True


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


def set_aside_points(data, version: str | None = None) -> list[SetAside]:
    """The open-loop points a fit's data set aside (``excluded`` with its
    ``exclusion_reason``). Synchronous and throughput runs are not rates a plan
    proposes, so they are left out."""
    if data is None or "excluded" not in data.columns:
        return []
    rows = data[data["excluded"].astype(bool)]
    if "strategy" in rows.columns:
        strategy = rows["strategy"].astype(str).str.lower()
        rows = rows[~strategy.isin(["synchronous", "throughput", "concurrent"])]
    out = []
    for _, row in rows.iterrows():
        target = float(row["rps_target"]) if "rps_target" in row.index else float("nan")
        rate = target if np.isfinite(target) and target > 0 else float(row["rps"])
        if not (np.isfinite(rate) and rate > 0):
            continue
        requests = float(row["n_requests"]) if "n_requests" in row.index \
            and np.isfinite(float(row["n_requests"])) else float("inf")
        reason = str(row.get("exclusion_reason", ""))
        k = int(row["k"]) if "k" in row.index else 0
        alpha = float(row["alpha"]) if "alpha" in row.index else float("nan")
        out.append(SetAside(k, None if not np.isfinite(alpha) or k == 0 else alpha, rate,
                            requests, any(w in reason.lower() for w in PAST_CEILING_WORDS),
                            reason, version))
    return out


# --------------------------------------------------------------------------- answers

class DiscreteAnswer:
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

    def summary(self) -> dict:
        p = self.right.mean(axis=0)
        best = int(np.argmax(p))
        return {"answer": self.name, "decision": self.options[best], "p_right": float(p[best]),
                "options": {str(o): float(v) for o, v in zip(self.options, p)}}


class RateAnswer:
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
        return {"answer": self.name, "decision": None if np.isnan(median[0]) else float(median[0]),
                "p_right": float(1.0 - loss[0]), "within": self.within,
                "p_none": float(self.none.mean()), "interval_90": tail}


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

    def latency(self, curve, rps: float) -> np.ndarray:
        return np.asarray(curve.latency(float(rps)), dtype=float)[self.index]

    def ceiling(self) -> np.ndarray:
        return ceiling_draws(self.curves[0])[self.index]


@dataclass
class Candidate:
    configuration: Configuration
    rps: float
    requests: int
    minutes: float
    value: float = 0.0
    ess: float = float("nan")
    p_saturated: float = 0.0

    @property
    def value_per_minute(self) -> float:
        return self.value / self.minutes

    def document(self) -> dict:
        c = self.configuration
        entry = {"k": c.k, "alpha": c.alpha, "rps": round(self.rps, 4),
                 "requests": int(self.requests), "minutes": round(self.minutes, 3),
                 "value": self.value, "value_per_minute": self.value_per_minute,
                 "ess": self.ess, "collapsed": bool(self.ess < ESS_COLLAPSED),
                 "p_saturated": self.p_saturated,
                 "above_fitted": bool(np.isfinite(c.rps_fitted_max)
                                      and self.rps > c.rps_fitted_max),
                 "configuration": c.label}
        if c.version is not None:
            entry["fit"] = c.version
        return entry


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

    def losses(self, weights: np.ndarray) -> np.ndarray:
        """Per answer and outcome, P(wrong): (A, M)."""
        return np.stack([answer.losses(weights) for answer in self.answers])


def _draw_index(draws: int, max_draws: int, rng) -> np.ndarray:
    if draws <= max_draws:
        return np.arange(draws)
    return np.sort(rng.choice(draws, max_draws, replace=False))


# --------------------------------------------------------------------------- questions

def _speculative_curve(law, alpha, k):
    return law.dense if int(k) == 0 else law.sd(alpha, int(k))


def crossover_question(law, alpha: float, k: int, *, within: float = 0.05, spread: float,
                       max_draws: int = 2000, seed: int = 0) -> Question:
    """RPS* of SD at (alpha, k) against dense decoding of the same setup."""
    law.dense  # a clear error naming how to add a dense baseline
    sd = law.sd(alpha, int(k))
    rng = np.random.default_rng(seed)
    index = _draw_index(sd.draws, max_draws, rng)
    star = np.asarray(law.crossover_draws(alpha, int(k)), dtype=float)[index]
    configurations = [
        Configuration(0, None, (law.dense,), (spread,), index, "dense (k = 0)",
                      rps_fitted_max=_fitted_max(law.dense, law)),
        Configuration(int(k), _alpha(alpha), (sd,), (spread,), index,
                      f"k = {int(k)}, alpha {alpha:g}",
                      rps_fitted_max=_fitted_max(sd, law, alpha, int(k)))]
    finite = star[np.isfinite(star)]
    extra = tuple(np.quantile(finite, [0.1, 0.5, 0.9])) if finite.size else ()
    return Question("crossover", [RateAnswer(f"RPS* (alpha {alpha:g}, k {int(k)})", star,
                                             within)], configurations, extra)


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
    return Question("kstar", answers, configurations, tuple(rps))


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
                           "percentile's standard error is the order statistic's (times "
                           "sqrt(1 + 2N), N in flight, where the fit reads a run's requests "
                           "as sharing their batches: summary_run)"])


def compare_question(curves_a: dict, curves_b: dict, *, rope: float = 0.02, spread: float,
                     max_draws: int = 2000, seed: int = 0) -> Question:
    """Two fits (e.g. engine versions) of the same configurations: the verdict on C1 and
    on C2 (geometric mean B/A over shared configurations: higher, lower, or equivalent
    within +-``rope``). ``curves_a``/``curves_b``: label -> (k, alpha, Curve)."""
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
        answers.append(DiscreteAnswer(f"{family} B/A verdict (rope +-{rope:.0%})", options,
                                      right))
    for version, curves, index in (("A", curves_a, index_a), ("B", curves_b, index_b)):
        for label in shared:
            k, alpha, curve = curves[label]
            configs.append(Configuration(int(k), _alpha(alpha), (curve,), (spread,), index,
                                         f"{version}: {label}", version=version,
                                         rps_fitted_max=getattr(curve, "rps_fitted_max",
                                                                np.nan)))
    return Question("compare", answers, configs)


def ceiling_question(curves: list, *, within: float = 0.05, spread: float,
                     max_draws: int = 2000, seed: int = 0) -> Question:
    """The highest sustainable rate of each configuration, within +-``within``.
    ``curves``: (k, alpha, label, Curve) per configuration."""
    rng = np.random.default_rng(seed)
    index = _draw_index(curves[0][3].draws, max_draws, rng)
    configs = [Configuration(int(k), _alpha(alpha), (curve,), (spread,), index, label,
                             rps_fitted_max=getattr(curve, "rps_fitted_max", np.nan))
               for k, alpha, label, curve in curves]
    answers = [RateAnswer(f"ceiling of {c.label} (RPS)", c.ceiling(), within) for c in configs]
    return Question("ceiling", answers, configs)


# --------------------------------------------------------------------------- pre-posterior

def _noise_at(noise: Noise, index: np.ndarray) -> Noise:
    return Noise(np.asarray(noise.base)[index], np.asarray(noise.load)[index],
                 None if noise.nu is None else np.asarray(noise.nu)[index],
                 bounded_in_fit=noise.bounded_in_fit)


def _full_noise_sigma(curve, rps: float, latency_full: np.ndarray, log_se: float):
    point_c2 = curve.point_c2(float(rps), latency_full)
    return curve.noise.sigma(float(rps), point_c2, log_se)


def planned_log_se(curve, spread: float, rps: float, requests: int,
                   latency: np.ndarray) -> np.ndarray | float:
    """The standard error of a planned run's log mean latency: ``spread``/sqrt(requests)
    with independent requests; where the fit reads each mean as one run (its curves carry
    the sweep's ``run_effect``), the run's, whose requests share the batch with the
    N = RPS x L in flight (:func:`bayesspec.laws.run_mean_log_sd` at each draw's
    ``latency``; a new run's arrivals are its own, so all of it). A summary of a fit that
    reads its percentiles as one run's (the tails model's ``summary_run``): the error
    that fit gives a new run's report (``SummarySampling.error`` with ``new_run``: the
    order statistic of the draw's own per-request spread, times 1 + 2N in variance, N the
    draw's requests in flight), not ``spread``'s rough order statistic."""
    sampling = getattr(curve, "sampling", None)
    if getattr(sampling, "in_flight", None) is not None:
        with np.errstate(invalid="ignore", over="ignore"):
            _, variance = sampling.error(np.asarray(float(rps)), float(requests),
                                         new_run=True)
            se = np.sqrt(np.asarray(variance, dtype=float))
        return np.where(np.isfinite(se), se, np.inf)
    if getattr(curve, "run_effect", None) is None:
        return spread / math.sqrt(requests)
    with np.errstate(invalid="ignore", over="ignore"):
        se = run_mean_log_sd(spread, float(requests), float(rps) * np.asarray(latency, float))
    return np.where(np.isfinite(se), se, np.inf)


def _measured(configuration: Configuration, curve, spread: float, rps: float, requests: int):
    """(latency, sigma, noise, log_se) of a new measurement of ``curve`` on the joint
    draws, and the curve's latency on all of its own draws."""
    if curve.noise is None:
        raise BadInput(f"curve '{curve.label}' has no noise model: cannot simulate a "
                       "measurement of it", argument="fit")
    full = np.asarray(curve.latency(float(rps)), dtype=float)
    log_se = planned_log_se(curve, spread, rps, requests, full)
    sigma = np.asarray(_full_noise_sigma(curve, rps, full, log_se),
                       dtype=float)[configuration.index]
    log_se = np.asarray(log_se, dtype=float)
    log_se = log_se[configuration.index] if log_se.ndim else log_se
    return (full[configuration.index], sigma, _noise_at(curve.noise, configuration.index),
            log_se, full)


def observation_log_weights(configuration: Configuration, rps: float, requests: int,
                            observed_log: np.ndarray) -> np.ndarray:
    """Log likelihood (S, M) of measured log latencies ``observed_log`` (one row per
    measured curve of the configuration, M columns) under every joint draw: the
    importance weights that turn the posterior into the posterior with that point."""
    observed_log = np.atleast_2d(np.asarray(observed_log, dtype=float))
    log_w = np.zeros((configuration.index.size, observed_log.shape[1]))
    for row, (curve, spread) in enumerate(zip(configuration.curves, configuration.spreads)):
        latency, sigma, noise, log_se, full = _measured(configuration, curve, spread, rps,
                                                        requests)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            if noise.bounded_in_fit:
                # as the refit's likelihood will read it: the curve's load term, at most
                # the measured latency's
                at = configuration.index
                own = np.asarray(curve.amplification(float(rps), full), float)[at]
                zero_load = np.asarray(curve.zero_load_at(float(rps)), dtype=float)[at]
                sigma = noise.sigma(rps, log_se=(log_se[:, None] if np.ndim(log_se)
                                                 else log_se),
                                    amplification=np.fmin(own[:, None],
                                                          measured_load_amplification(
                                        np.exp(observed_log[row])[None, :],
                                        zero_load[:, None])))
            else:
                sigma = sigma[:, None]
            residual = observed_log[row][None, :] - np.log(latency)[:, None]
            logp = noise.log_density(residual, sigma)
        log_w += np.where(np.isfinite(logp), logp, -np.inf)
    return log_w


def _normalised(log_w: np.ndarray) -> np.ndarray:
    top = log_w.max(axis=0)
    with np.errstate(invalid="ignore", over="ignore"):
        weights = np.exp(log_w - top[None, :])
    return np.nan_to_num(weights, nan=0.0)


def outcome_weights(configuration: Configuration, rps: float, requests: int,
                    rng: np.random.Generator, outcomes: int) -> tuple[np.ndarray, np.ndarray]:
    """Importance weights (S, M) of the joint draws after each of ``outcomes`` simulated
    measurements at (configuration, rps, requests), and which outcomes were saturated
    (those leave the weights as they are: the fit sets such a point aside)."""
    draws = configuration.index.size
    truth = rng.integers(0, draws, outcomes)
    observed = np.zeros((len(configuration.curves), outcomes))
    saturated = np.zeros(outcomes, dtype=bool)
    for row, (curve, spread) in enumerate(zip(configuration.curves, configuration.spreads)):
        latency, sigma, noise, _, _ = _measured(configuration, curve, spread, rps, requests)
        at_truth = latency[truth]
        saturated |= ~np.isfinite(at_truth)
        standard = (rng.standard_normal(outcomes) if noise.nu is None
                    else rng.standard_t(noise.nu[truth]))
        with np.errstate(invalid="ignore", divide="ignore"):
            observed[row] = np.log(at_truth) + sigma[truth] * standard
    log_w = observation_log_weights(configuration, rps, requests,
                                    np.where(np.isfinite(observed), observed, 0.0))
    log_w[:, saturated] = 0.0
    return _normalised(log_w), saturated


def effective_sample_size(weights: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return weights.sum(axis=0) ** 2 / (weights ** 2).sum(axis=0)


def candidate_rates(question: Question, configuration: Configuration,
                    fractions=RATE_FRACTIONS) -> np.ndarray:
    """Fractions of the configuration's median ceiling plus the question's own rates
    that lie below it."""
    ceiling = configuration.ceiling()
    median = float(np.median(ceiling[np.isfinite(ceiling)])) if np.isfinite(ceiling).any() \
        else float("nan")
    rates = [f * median for f in fractions] if np.isfinite(median) else []
    rates += [r for r in question.extra_rates
              if r > 0 and (not np.isfinite(median) or r < median)]
    rates = np.unique(np.round([r for r in rates if r > 0], 4))
    return rates


def point_minutes(rps: float, requests: int, warmup_s: float, latency: float = 0.0,
                  zero_load: float | None = None,
                  relaxations: float = WARMUP_RELAXATIONS) -> float:
    """Load-test minutes of one point: ``requests / rate``, the drain of the last request
    (``latency``), the queue's warm-up (``relaxations`` x latency^2 / zero-load latency)
    and a fixed ``warmup_s``."""
    seconds = requests / rps + warmup_s
    if np.isfinite(latency) and latency > 0:
        seconds += latency
        if zero_load is not None and np.isfinite(zero_load) and zero_load > 0:
            seconds += relaxations * latency * latency / zero_load
    return seconds / 60.0


def steady_requests(rate: float, slow_latency: float) -> float:
    """The fewest requests whose measured window (requests / rate less a tenth at each
    end) holds :data:`STEADY_LIFETIMES` lifetimes of a request of ``slow_latency``."""
    return STEADY_LIFETIMES * slow_latency * rate / 0.8


def evaluate(question: Question, candidate: Candidate, *, outcomes: int = 48,
             seed: int = 0, now: float | None = None) -> Candidate:
    """The candidate with its value (expected reduction of the summed expected loss),
    its median effective sample size and its probability of a saturated outcome."""
    rng = np.random.default_rng(seed)
    weights, saturated = outcome_weights(candidate.configuration, candidate.rps,
                                         candidate.requests, rng, outcomes)
    if now is None:
        now = question.losses(np.ones((weights.shape[0], 1))).sum()
    after = question.losses(weights).sum(axis=0)                           # (M,)
    ess = effective_sample_size(weights[:, ~saturated]) if (~saturated).any() else [np.nan]
    return replace(candidate, value=float(max(now - after.mean(), 0.0)),
                   ess=float(np.median(ess)), p_saturated=float(saturated.mean()))


def plan(question: Question, *, requests=DEFAULT_REQUESTS, warmup_s: float = 5.0,
         warmup_relaxations: float = WARMUP_RELAXATIONS, tolerance: float = 0.05,
         top: int = 5, outcomes: int = 48, seed: int = 0, rates: dict | None = None,
         progress=None) -> dict:
    """Rank candidate load points by expected loss reduction per minute.

    Returns the document's core: ``question``, ``settled`` (every answer's P(wrong) at
    most ``tolerance``), ``expected_loss`` (the largest P(wrong)), ``answers``, ``next``
    (the top candidates, none when settled), ``candidates`` (how many were scored) and
    ``skipped_set_aside`` (candidates not scored because the fit set aside an equivalent
    point). ``rates``: configuration index -> rates, instead of :func:`candidate_rates`.
    """
    if not 0 < tolerance < 1:
        raise BadInput(f"must be within (0, 1), got {tolerance}", argument="tolerance")
    requests = [int(n) for n in requests]
    if not requests or min(requests) < 1:
        raise BadInput("request counts must be positive integers", argument="requests")
    if warmup_s < 0:
        raise BadInput(f"must be >= 0, got {warmup_s}", argument="warmup_s")
    if warmup_relaxations < 0:
        raise BadInput(f"must be >= 0, got {warmup_relaxations}",
                       argument="warmup_relaxations")
    now = question.losses(np.ones((question.configurations[0].index.size, 1)))[:, 0]
    document = {"question": question.name, "settled": bool(now.max() <= tolerance),
                "expected_loss": float(now.max()), "tolerance": tolerance,
                "answers": [a.summary() for a in question.answers], "next": [],
                "candidates": 0, "skipped_set_aside": 0, "notes": list(question.notes)}
    if document["settled"]:
        return document
    candidates, skipped = [], 0
    for c, configuration in enumerate(question.configurations):
        grid = (rates or {}).get(c)
        grid = candidate_rates(question, configuration) if grid is None else grid
        curve = configuration.curves[0]
        zero_load = float(np.median(np.asarray(curve.zero_load, float)[configuration.index]))
        for rate in grid:
            with np.errstate(invalid="ignore"):
                at_rate = configuration.latency(curve, rate)
                slow = float(np.quantile(at_rate, 0.9))
                typical = float(np.median(at_rate))
            # A point must run long enough to reach steady state: its measured window
            # holds several lifetimes of a request, at the slow end of what the posterior
            # expects. The fewest such requests (rounded up to REQUEST_STEP) is a count of
            # its own, so a point is not longer than it needs to be.
            fewest = steady_requests(rate, slow)
            counts = [n for n in requests if n >= fewest]
            if np.isfinite(fewest) and min(requests) < fewest <= max(requests):
                counts.append(min(max(requests),
                                  int(REQUEST_STEP * math.ceil(fewest / REQUEST_STEP))))
            for n in sorted(set(counts)):
                if any(point.covers(configuration, float(rate), n)
                       for point in question.set_aside):
                    skipped += 1
                    continue
                candidates.append(Candidate(configuration, float(rate), n,
                                            point_minutes(float(rate), n, warmup_s, typical,
                                                          zero_load, warmup_relaxations)))
    scored = []
    for i, candidate in enumerate(candidates):
        # Common random numbers: every candidate sees the same outcome draws' seeds.
        scored.append(evaluate(question, candidate, outcomes=outcomes, seed=seed,
                               now=float(now.sum())))
        if progress is not None:
            progress(i + 1, len(candidates))
    scored.sort(key=lambda c: c.value_per_minute, reverse=True)
    document["candidates"] = len(scored)
    document["skipped_set_aside"] = skipped
    if skipped:
        document["notes"].append(
            f"{skipped} candidate points were not scored: the fit set aside an equivalent "
            "point (same configuration, a rate within "
            f"{SET_ASIDE_RATE_MATCH:.0%} and at most {SET_ASIDE_REQUEST_FACTOR:g}x its "
            "requests, or above a rate past the ceiling)")
    document["next"] = [c for c in scored[:top] if c.value > 0] or scored[:1]
    return document


# --------------------------------------------------------------------------- commands

#: Columns a new load point must carry to join a fit (beyond the design columns).
def required_columns(question: str, metrics=()) -> list[str]:
    columns = ["verifier", "drafter", "k", "alpha", "prefill_tokens", "decode_tokens", "rps",
               "rps_target", "latency_mean_s", "latency_std_s", "n_requests"]
    from bayesspec.data.schema import METRIC_COLUMNS

    for metric in metrics:
        column = METRIC_COLUMNS.get(metric)
        if column and column not in columns:
            columns.append(column)
    return columns


def guidellm_version() -> str | None:
    """The installed GuideLLM's version, or None when it is not importable."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return None
    try:
        import importlib.util

        if importlib.util.find_spec("guidellm") is None:
            return None
        return version("guidellm")
    except (PackageNotFoundError, ValueError):
        return None


def _older_guidellm(version: str | None) -> bool:
    if version is None:
        return False
    try:
        major, minor = (int(p) for p in version.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) < (0, 7)


def planned_lengths(data, prefill: int | None = None,
                    decode: int | None = None) -> tuple[int, int]:
    """The prompt and output lengths of the planned load tests: the chosen group's where
    given (a fit of several groups has no one length: the median over all of them would
    measure none of them), else the fitted data's median (512 without the column)."""
    def tokens(chosen, column):
        if chosen is not None:
            return int(chosen)
        values = data[column].dropna() if column in data.columns else []
        return int(np.median(values)) if len(values) else 512
    return tokens(prefill, "prefill_tokens"), tokens(decode, "decode_tokens")


def command_lines(entry: dict, *, target: str, model: str, prefill: int, decode: int,
                  version: str | None = None) -> dict:
    """Ready-to-run load-test commands for one planned point: GuideLLM (the installed
    version's syntax, else the current release's: 0.7 and newer) at a constant rate of
    R with N requests, and ``vllm bench serve`` (``--request-rate R --num-prompts N``)."""
    rate, n, k = entry["rps"], entry["requests"], entry["k"]
    alpha = entry.get("alpha")
    stem = f"point-k{k}-r{rate:g}-n{n}"
    if _older_guidellm(version):
        guidellm = (f"guidellm benchmark --target {target} --model {model} --profile constant "
                    f"--rate {rate:g} --max-requests {n} --data "
                    f"\"prompt_tokens={prefill},output_tokens={decode}\" --output-path "
                    f"{stem}.json")
    else:
        guidellm = (f"guidellm run --backend kind=openai_http,target={target},model={model} "
                    f"--profile kind=constant,rate={rate:g} --data kind=synthetic_text,"
                    f"prompt_tokens={prefill},output_tokens={decode} --constraint "
                    f"kind=max_requests,count={n} --output kind=json,path={stem}.json")
    metadata = f"k={k}" + ("" if alpha is None else f" alpha={alpha:g}")
    vllm = (f"vllm bench serve --backend openai --base-url {target} --model {model} "
            f"--dataset-name random --random-input-len {prefill} --random-output-len {decode} "
            f"--request-rate {rate:g} --num-prompts {n} --percentile-metrics "
            f"ttft,tpot,itl,e2el --save-result --result-filename {stem}.vllm.json "
            f"--metadata {metadata}")
    design = f"--k {k}" + ("" if alpha is None else f" --alpha {alpha:g}")
    ingest = f"bayesspec ingest {stem}.json {design} -o {stem}.csv"
    return {"guidellm": guidellm, "vllm": vllm, "ingest": ingest,
            "guidellm_syntax": version or "current release (0.7+)"}


# --------------------------------------------------------------------------- from a fit

QUESTIONS = ("crossover", "kstar", "slo", "compare", "ceiling")
#: What counts as right, by default: a rate within +-5%; a k within 1% of the best
#: speedup; a configuration within 5% of the best goodput.
DEFAULT_WITHIN = {"crossover": 0.05, "kstar": 0.01, "slo": 0.05, "ceiling": 0.05,
                  "compare": 0.02}


def _has_speculative_groups(fit) -> bool:
    return bool((fit.groups["k"].astype(int) > 0).any()) if "k" in fit.groups else False


def _fitted_configurations(fit, law) -> list[tuple]:
    """(alpha, k) of the setup's fitted groups, dense first."""
    keys = sorted(getattr(law, "configurations", {}),
                  key=lambda key: (key[1], -1.0 if key[0] is None else key[0]))
    if not keys and law.answers_any_configuration:
        groups = fit.groups
        keys = sorted({(None if np.isnan(a) else round(float(a), 9), int(k))
                       for a, k in zip(groups["alpha"].astype(float), groups["k"].astype(int))
                       if k > 0}, key=lambda key: (key[1], -1.0 if key[0] is None else key[0]))
    return ([(None, 0)] if law.has_dense else []) + list(keys)


def question_from_fit(fit, question: str, **options) -> Question:
    """The :class:`Question` ``question`` asks of a fit (``other``: the second fit of
    ``compare``), knowing which of the fit's points were set aside. A question the fit
    cannot answer is refused naming what to fit."""
    built = _question_from_fit(fit, question, **options)
    if question == "compare":
        built.set_aside = (set_aside_points(fit.data, "A")
                           + set_aside_points(options.get("other").data, "B"))
    else:
        built.set_aside = set_aside_points(fit.data)
    return built


def _question_from_fit(fit, question: str, *, selection: dict | None = None,
                       alpha: float | None = None, k: int | None = None, rps=None,
                       ks=None, kmax: int = 8, targets: dict | None = None, other=None,
                       within: float | None = None, rope: float = 0.02,
                       max_draws: int = 2000, seed: int = 0) -> Question:
    from bayesspec.data import included

    if question not in QUESTIONS:
        raise BadInput(f"unknown question {question!r}; one of {', '.join(QUESTIONS)}",
                       argument="question")
    selection = dict(selection or {})
    within = DEFAULT_WITHIN[question] if within is None else float(within)
    if not 0 < within < 1:
        raise BadInput(f"must be within (0, 1), got {within}", argument="within")
    spread, _ = measurement_spread(included(fit.data))
    options = {"spread": spread, "max_draws": max_draws, "seed": seed}
    if question == "crossover":
        if alpha is None or k is None or int(k) < 1:
            raise BadInput("crossover needs --alpha A and --k K (K >= 1)", argument="k")
        if not _has_speculative_groups(fit):
            raise BadInput(f"this fit has only dense (k = 0) groups: RPS* needs speculative "
                           f"rows too; fit a sweep at k = {int(k)}, alpha {alpha:g} with the "
                           "dense one (`bayesspec simulate --k K --alpha A` or your load test "
                           "of that configuration)", argument="fit")
        law = fit.law(selection)
        return crossover_question(law, float(alpha), int(k), within=within, **options)
    if question == "kstar":
        if rps is None:
            raise BadInput("k* needs the rates to choose at (--rps R1,R2)", argument="rps")
        law = fit.law(selection)
        if ks is None:
            if law.answers_any_configuration:
                if alpha is None:
                    raise BadInput("k* from six cycle coefficients needs --alpha",
                                   argument="alpha")
                ks = range(0, int(kmax) + 1)
            else:
                fitted = [kk for a, kk in _fitted_configurations(fit, law)
                          if kk == 0 or alpha is None or a is None or abs(a - alpha) < 1e-9]
                ks = fitted
        if not law.has_dense and 0 in set(ks):
            law.dense  # names how to add the baseline
        if len(set(ks)) < 2:
            raise BadInput("this fit has fewer than two configurations to choose among at "
                           "that alpha; fit sweeps of at least two draft lengths (k = 0 is "
                           "dense)", argument="ks")
        return kstar_question(law, alpha, rps, ks, within=within, **options)
    if question == "slo":
        known = fit.model().metrics(fit)
        if not known:
            raise BadInput(f"this {fit.model_name} fit models mean latency only: an SLO "
                           "question needs a fit of `--model tails` on data with percentile "
                           "columns (latency_p99_s, ttft_p99_s, itl_p99_s, ...)",
                           argument="fit")
        if not targets:
            raise BadInput("give at least one SLO target, e.g. --ttft-p99 0.5",
                           argument="targets")
        missing = [m for m in targets if m not in known]
        if missing:
            raise BadInput(f"this fit has no law for {', '.join(missing)}; it answers "
                           f"{', '.join(known)}", argument="targets")
        mean_law = fit.law(selection)
        laws = {m: fit.law(selection, metric=m) for m in targets}
        return slo_question(mean_law, laws, targets, _fitted_configurations(fit, mean_law),
                            within=within, **options)
    if question == "compare":
        if other is None:
            raise BadInput("compare needs two fits: bayesspec plan A.nc B.nc --question "
                           "compare", argument="fits")
        return compare_question(_group_curves(fit), _group_curves(other), rope=rope,
                                **options)
    curves = [(kk, a, label, curve) for label, (kk, a, curve) in _group_curves(fit).items()
              if k is None or kk == int(k)]
    if not curves:
        raise BadInput(f"the fit has no group at k = {k}", argument="k")
    return ceiling_question(curves, within=within, **options)


def _group_curves(fit) -> dict:
    """label -> (k, alpha, Curve) of every fitted group."""
    groups = fit.groups
    out = {}
    for g in range(len(groups)):
        alpha = float(groups["alpha"].iloc[g]) if "alpha" in groups else float("nan")
        out[str(groups["label"].iloc[g])] = (
            int(groups["k"].iloc[g]) if "k" in groups else 0,
            None if np.isnan(alpha) else alpha, fit.group_curve(g))
    return out
