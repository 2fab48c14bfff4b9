"""Measure next: which load point would settle a decision soonest, and whether it is
settled already (the pre-posterior planner).

A question (:mod:`bayesspec.loadtest.questions`) is settled when every answer's expected
loss (the posterior probability that it is wrong) is at most ``tolerance``. A candidate
load point is a configuration (k, alpha), a rate and a request count; it
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
Candidates are ranked by value per minute. A question is settled only when, besides,
no answer is an extrapolation (:class:`~bayesspec.loadtest.questions.Extrapolation`, the
verbs' rule), every answer a verb rules on has its verdict, and the fits behind it
converged; while an answer is an extrapolation, the points that measure a configuration
it rests on up to the rate it needs come first (``lifts_extrapolation``). A candidate
equivalent to a point the fit set
aside (:class:`~bayesspec.loadtest.questions.SetAside`: same configuration, a rate within
:data:`SET_ASIDE_RATE_MATCH` and at most :data:`SET_ASIDE_REQUEST_FACTOR` times its
requests, or any higher rate when the point was past the ceiling) is not proposed: it
would be set aside again. When a measurement would say more than the
draws can show, the weights collapse onto a few draws; the candidate's effective sample
size (``ess``) says so (``collapsed`` below :data:`ESS_COLLAPSED`).

Everything here takes prediction-contract objects (:class:`~bayesspec.prediction.Law`,
:class:`~bayesspec.prediction.Curve`, :class:`~bayesspec.prediction.Noise`), never
posterior variable names. The planner's one import: the question builders
(:mod:`~bayesspec.loadtest.questions`, :mod:`~bayesspec.loadtest.fit_questions`) and the
load-test command lines (:mod:`~bayesspec.loadtest.commands`) are importable from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from bayesspec.errors import BadInput
from bayesspec.laws import measured_load_amplification, run_mean_log_sd
from bayesspec.loadtest.commands import (command_lines, guidellm_version, planned_lengths,
                                         required_columns)
from bayesspec.loadtest.fit_questions import (measurement_spread, question_from_fit,
                                              set_aside_points)
from bayesspec.loadtest.questions import (SET_ASIDE_RATE_MATCH, SET_ASIDE_REQUEST_FACTOR,
                                          Configuration, DiscreteAnswer, Extrapolation,
                                          Question, Ruling,
                                          RateAnswer, SetAside, ceiling_draws,
                                          ceiling_question, compare_question,
                                          crossover_question, kstar_question,
                                          percentile_spread_factor, slo_question)
from bayesspec.prediction import Noise

__all__ = ["Configuration", "Candidate", "DiscreteAnswer", "RateAnswer", "Question",
           "crossover_question", "kstar_question", "slo_question", "compare_question",
           "ceiling_question", "plan", "ceiling_draws", "measurement_spread",
           "percentile_spread_factor", "command_lines", "DEFAULT_REQUESTS",
           "RATE_FRACTIONS", "ESS_COLLAPSED", "required_columns", "SetAside",
           "set_aside_points", "point_minutes", "steady_requests", "planned_log_se",
           "planned_lengths", "question_from_fit",
           "guidellm_version", "Candidate", "observation_log_weights",
           "outcome_weights", "unsettled_reasons", "Extrapolation", "Ruling"]

#: For the ceiling question, candidate rates at these quantiles of each configuration's
#: ceiling draws besides the fractions of its median.
CEILING_QUANTILES = (0.1, 0.25, 0.5, 0.75)
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
#: set aside every time (benchmarks/plan_benchmark.py), so the margin.
STEADY_LIFETIMES = 8.0
#: Warm-up before a point's window, in relaxation times of the queue: linearising
#: dN/dt = rate - N/L(N) with L(N) = C1 + N*C2 gives a time constant L^2/C1 for the
#: number in the system to settle after the load starts from an empty server (C1 at light
#: load, growing as 1/(1-x)^2 towards saturation). Three time constants leave 5% of the
#: initial gap (the simulator's own warm-up rule, simulate/engine.py).
WARMUP_RELAXATIONS = 3.0


@dataclass
class Candidate:
    """A load point to propose: a configuration, a rate and a request count with its
    load-test minutes and, once scored by :func:`evaluate`, its value, the median
    effective sample size of its outcomes and the chance that one is saturated."""

    configuration: Configuration
    rps: float
    requests: int
    minutes: float
    value: float = 0.0
    ess: float = float("nan")
    p_saturated: float = 0.0
    #: It measures a configuration an extrapolated answer rests on up to the rate the
    #: answer needs: without such a point the answer stays an extrapolation.
    lifts_extrapolation: bool = False

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
                 "lifts_extrapolation": self.lifts_extrapolation,
                 "configuration": c.label, **c.workload}
        if c.version is not None:
            entry["fit"] = c.version
        return entry


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
    ``latency``; a new run's arrivals are its own, so all of it)."""
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
                    fractions=RATE_FRACTIONS, needed=()) -> np.ndarray:
    """Fractions of the configuration's median ceiling plus the question's own rates
    and the rates an extrapolated answer ``needed`` it measured up to (rounded up), those
    that lie below it."""
    ceiling = configuration.ceiling()
    median = float(np.median(ceiling[np.isfinite(ceiling)])) if np.isfinite(ceiling).any() \
        else float("nan")
    rates = [f * median for f in fractions] if np.isfinite(median) else []
    if question.name == "ceiling" and np.isfinite(ceiling).any():
        # inside the span the ceiling may lie in: a point there that holds (or saturates)
        # cuts it, which points below the span never do
        rates += [float(q) for q in np.quantile(ceiling[np.isfinite(ceiling)],
                                                CEILING_QUANTILES)]
    rates += [r for r in question.extra_rates
              if r > 0 and (not np.isfinite(median) or r < median)]
    rates = list(np.round([r for r in rates if r > 0], 4))
    rates += [math.ceil(r * 1e4) / 1e4 for r in needed
              if r > 0 and (not np.isfinite(median) or r < median)]
    return np.unique(rates)


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
    most ``tolerance``, none an extrapolation, every verdict a verb rules on reached, the
    fits converged), ``unsettled`` (why not, one sentence per reason), ``converged``,
    ``expected_loss`` (the largest P(wrong)), ``answers``, ``next`` (the top candidates:
    none when settled, nor when only a refit can settle it), ``candidates`` (how many
    were scored) and ``skipped_set_aside`` (candidates not scored because the fit set
    aside an equivalent point). ``rates``: configuration index -> rates, instead of
    :func:`candidate_rates`.
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
    # An answer a verb rules on is as sure as that verb says (its own draws and rule); the
    # planner's draws of it serve the value of new points.
    stated = np.array([1.0 - a.ruling.p_right if a.ruling is not None else loss
                       for a, loss in zip(question.answers, now)])
    unsettled = unsettled_reasons(question, float(stated.max()), tolerance)
    document = {"question": question.name, "settled": not unsettled,
                "unsettled": unsettled, "converged": not question.unconverged,
                "expected_loss": float(stated.max()), "tolerance": tolerance,
                "answers": [a.summary() for a in question.answers], "next": [],
                "candidates": 0, "skipped_set_aside": 0, "notes": list(question.notes)}
    if document["settled"]:
        return document
    if question.unconverged and len(unsettled) == 1:
        # Only a refit can settle it: no load point changes an unconverged posterior.
        document["notes"].append("refit until the posterior converges (see the "
                                 "convergence verdict), then plan again")
        return document
    needed: dict[int, list] = {}
    for _, extrapolation in question.extrapolations():
        for index, rate in extrapolation.needs.items():
            needed.setdefault(index, []).append(float(rate))
    candidates, skipped = [], 0
    for c, configuration in enumerate(question.configurations):
        grid = (rates or {}).get(c)
        grid = (candidate_rates(question, configuration, needed=needed.get(c, ()))
                if grid is None else grid)
        curve = configuration.curves[0]
        zero_load = float(np.median(np.asarray(curve.zero_load, float)[configuration.index]))
        for rate in grid:
            with np.errstate(invalid="ignore"):
                at_rate = np.asarray(configuration.latency(curve, rate), dtype=float)
                # a point runs as long as the draws in which it holds need (where it
                # saturates, the run says so whatever its length)
                holds = at_rate[np.isfinite(at_rate)]
                if not holds.size:
                    continue
                slow = float(np.quantile(at_rate, 0.9))
                typical = float(np.median(at_rate))
                if not np.isfinite(slow) or not np.isfinite(typical):
                    slow = float(np.quantile(holds, 0.9))
                    typical = float(np.median(holds))
            # A point must run long enough to reach steady state: its measured window
            # holds several lifetimes of a request, at the slow end of what the posterior
            # expects. The fewest such requests (rounded up to REQUEST_STEP) is a count of
            # its own, so a point is not longer than it needs to be.
            fewest = steady_requests(rate, slow)
            counts = [n for n in requests if n >= fewest]
            if np.isfinite(fewest) and min(requests) < fewest <= max(requests):
                counts.append(min(max(requests),
                                  int(REQUEST_STEP * math.ceil(fewest / REQUEST_STEP))))
            elif question.name == "ceiling" and np.isfinite(fewest) and fewest > max(requests):
                # near the ceiling a steady window needs more requests than any count
                # asked for: the ceiling is settled there or nowhere, so at its own count
                counts.append(int(REQUEST_STEP * math.ceil(fewest / REQUEST_STEP)))
            for n in sorted(set(counts)):
                if any(point.covers(configuration, float(rate), n)
                       for point in question.set_aside):
                    skipped += 1
                    continue
                candidates.append(Candidate(configuration, float(rate), n,
                                            point_minutes(float(rate), n, warmup_s, typical,
                                                          zero_load, warmup_relaxations),
                                            lifts_extrapolation=bool(
                                                c in needed and rate >= min(needed[c]))))
    scored = []
    for i, candidate in enumerate(candidates):
        # Common random numbers: every candidate sees the same outcome draws' seeds.
        scored.append(evaluate(question, candidate, outcomes=outcomes, seed=seed,
                               now=float(now.sum())))
        if progress is not None:
            progress(i + 1, len(candidates))
    # An extrapolated answer stays one whatever its P(wrong) until a point measures up to
    # it: such points first, and the shorter first where values tie (at zero, when the
    # answer is already sure but not measured).
    scored.sort(key=lambda c: (c.lifts_extrapolation, c.value_per_minute, -c.minutes),
                reverse=True)
    scored = _each_configuration_first(scored)
    document["candidates"] = len(scored)
    document["skipped_set_aside"] = skipped
    if skipped:
        document["notes"].append(
            f"{skipped} candidate points were not scored: the fit set aside an equivalent "
            "point (same configuration, a rate within "
            f"{SET_ASIDE_RATE_MATCH:.0%} and at most {SET_ASIDE_REQUEST_FACTOR:g}x its "
            "requests, or above a rate past the ceiling)")
    document["next"] = ([c for c in scored[:top] if c.value > 0 or c.lifts_extrapolation]
                        or scored[:1])
    return document


def _each_configuration_first(ranked: list) -> list:
    """The ranking with the best point lifting an extrapolation on each configuration
    first: an answer that rests on two curves stays an extrapolation until both are
    measured up to it."""
    firsts, seen = [], set()
    for i, candidate in enumerate(ranked):
        if candidate.lifts_extrapolation and id(candidate.configuration) not in seen:
            seen.add(id(candidate.configuration))
            firsts.append(i)
    chosen = set(firsts)
    return [ranked[i] for i in firsts] + [c for i, c in enumerate(ranked) if i not in chosen]


def unsettled_reasons(question: Question, expected_loss: float,
                      tolerance: float) -> list[str]:
    """Why a question is not settled, one sentence per reason ([] when it is): the fits
    did not converge, an answer is an extrapolation, a verb gives no verdict on an
    answer, or the least certain answer is wrong with P above ``tolerance``."""
    reasons = []
    if question.unconverged:
        reasons.append("the fit did not converge" if question.name != "compare" else
                       "one of the two fits did not converge"
                       if len(question.unconverged) == 1 else "neither fit converged")
    reasons += [extrapolation.why for _, extrapolation in question.extrapolations()]
    reasons += [f"{a.ruling.rule} gives no verdict on {a.name.split(' (')[0]}: "
                f"{a.ruling.decision} (the likeliest has P {a.ruling.p_right:.3f})"
                for a in question.answers if a.ruling is not None and not a.ruling.decided]
    if expected_loss > tolerance + 1e-12:       # P(right) 0.95 is 1 - 0.05 in floats too
        reasons.append(f"expected loss {expected_loss:.3f} (P(wrong) of the least certain "
                       f"answer; settled at <= {tolerance:g})")
    return reasons
