"""The prediction contract: what a fitted model answers, as numpy objects over draws.

Every model class (:mod:`bayesspec.bayes`) turns a fit into these objects; decisions,
reports, plots and checks use only them, never the posterior's variable names:

- :class:`Curve`: one mean-latency curve L(RPS), eq. (1) from draws of (C1, C2), or
  :class:`MoECurve`, eq. (4) from the covered/saturated split. ``model.group_curve(fit, g)``
  gives one fitted group's curve.
- :class:`Law`: one *setup* (a verifier at given lengths, with a drafter when there is
  one): the dense baseline (k = 0) and speculative decoding at the (alpha, k) the model
  can answer: any, from six cycle coefficients (:class:`CoefficientLaw`, eq. 3), or the
  fitted ones (:class:`ConfigurationLaw`). ``model.law(fit, selection)`` gives it.
- :class:`Noise`: the measurement model of a mean latency (for predictive draws).

Shapes (S = posterior draws, K = draft lengths, R = rates): a curve's cost arrays are (S,)
or, for several k at once, (S, K); ``latency(rps)`` is (S[, K]) for a scalar rate,
(S[, K], R) for rates (R,), and (S, G) for rates (S, G) (row s at draw s, arrays (S,)).
Saturation is ``inf`` latency; a speedup is 0 where only SD is saturated, ``inf`` where
only the dense baseline is, 1 where both are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import BadInput
from .laws import (costs_for_acceptance_length, crossover_rps, curved_latency,
                   effective_costs, expert_coverage, latency, load_amplification_expr,
                   moe_latency, percentile_latency, quantile_sampling_moments,
                   rate_meeting_target, sampled_quantile_error_expr, two_regime_latency,
                   verification_tokens)

COEFFICIENT_NAMES = ("c1p", "c1v", "c1d", "c2p", "c2v", "c2d")

__all__ = ["Noise", "Curve", "MoECurve", "MetricCurve", "SummarySampling", "Law",
           "CoefficientLaw", "ConfigurationLaw", "MoESplit", "COEFFICIENT_NAMES"]


def _lift(values, rps: np.ndarray):
    """Cost arrays aligned with the rates (see the module's shapes)."""
    values = np.asarray(values, dtype=float)
    if rps.ndim == 0:
        return values
    if rps.ndim == 1:
        return values[..., None]
    return values.reshape(values.shape[0], *([1] * (rps.ndim - 1)))


# --------------------------------------------------------------------------- noise

@dataclass
class Noise:
    """A measured mean latency: log L_obs = log L + e, e ~ Normal(0, sigma),
    sigma^2 = base^2 + (load * x/(1 - x))^2 + se^2, x = RPS*C2 at the point (the
    likelihood of :func:`bayesspec.bayes.priors.latency_likelihood`); se is the
    standard error of the measured mean (0 when unknown)."""

    base: np.ndarray     # (S,)
    load: np.ndarray     # (S,)
    #: Student-t degrees of freedom (S,) when the model's error is Student-t, else None.
    nu: np.ndarray | None = None

    def _nu(self, ndim: int) -> np.ndarray:
        return np.asarray(self.nu, dtype=float).reshape((-1,) + (1,) * (ndim - 1))

    def sigma(self, rps, point_c2, log_se=0.0) -> np.ndarray:
        rps = np.asarray(rps, dtype=float)
        point_c2 = np.asarray(point_c2, dtype=float)
        shape = (-1,) + (1,) * (point_c2.ndim - 1)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            utilisation = rps * point_c2
            amplification = np.where(utilisation < 1, load_amplification_expr(rps, point_c2),
                                     np.inf)
            return np.sqrt(self.base.reshape(shape) ** 2
                           + (self.load.reshape(shape) * amplification) ** 2
                           + np.asarray(log_se, dtype=float) ** 2)

    def draw(self, curve: np.ndarray, sigma: np.ndarray, rng: np.random.Generator):
        """A new measurement of each curve draw (inf stays inf)."""
        with np.errstate(invalid="ignore", over="ignore"):
            if self.nu is None:
                standard = rng.standard_normal(curve.shape)
            else:
                standard = rng.standard_t(np.broadcast_to(self._nu(curve.ndim), curve.shape))
            return np.where(np.isfinite(curve), curve * np.exp(standard * sigma), np.inf)

    def log_density(self, log_residual: np.ndarray, sigma: np.ndarray) -> np.ndarray:
        """Log density of log L_obs - log L under the error (per draw and point)."""
        z = log_residual / sigma
        if self.nu is None:
            return -0.5 * z**2 - np.log(sigma) - 0.5 * np.log(2 * np.pi)
        from scipy.special import gammaln

        nu = self._nu(np.ndim(z))
        return (gammaln((nu + 1) / 2) - gammaln(nu / 2) - 0.5 * np.log(nu * np.pi)
                - np.log(sigma) - (nu + 1) / 2 * np.log1p(z**2 / nu))


# --------------------------------------------------------------------------- curves

class Curve:
    """Draws of one mean-latency law L(RPS) = C1/(1 - RPS*C2) (eq. 1)."""

    law_name = "eq. (1)"
    #: The highest unsaturated rate the curve was fitted on (nan when unknown): answers
    #: above it are the law's extrapolation.
    rps_fitted_max = float("nan")

    def __init__(self, c1, c2, *, label: str = "", noise: Noise | None = None):
        self.c1 = np.asarray(c1, dtype=float)
        self.c2 = np.asarray(c2, dtype=float)
        self.label = label
        self.noise = noise

    @property
    def draws(self) -> int:
        return self.c2.shape[0]

    @property
    def zero_load(self) -> np.ndarray:
        """Latency at RPS -> 0 (what C1R compares)."""
        return self.c1

    @property
    def saturation_cost(self) -> np.ndarray:
        """C2 at full load: 1/C2 is the saturation rate (what C2R compares)."""
        return self.c2

    def latency(self, rps) -> np.ndarray:
        rps = np.asarray(rps, dtype=float)
        return latency(rps, _lift(self.c1, rps), _lift(self.c2, rps))

    def rate_meeting(self, target: float, *, steps: int = 48) -> np.ndarray:
        """Per draw (S,), the highest rate at which this curve stays within ``target``
        seconds (0 when zero load already misses it). Latency rises with load up to
        saturation, so the rate is found by bisection below 1/C2, all draws at once;
        eq. (1) and :class:`MetricCurve` answer in closed form."""
        if type(self) is Curve:
            return rate_meeting_target(target, self.c1, self.c2, 1.0)
        ceiling = 1.0 / self.saturation_cost
        lo, hi = np.zeros_like(ceiling), ceiling * (1.0 - 1e-9)
        for _ in range(steps):
            mid = 0.5 * (lo + hi)
            with np.errstate(invalid="ignore", over="ignore"):
                within = self.latency(mid[:, None])[:, 0] <= target
            lo, hi = np.where(within, mid, lo), np.where(within, hi, mid)
        return np.where(self.latency(np.zeros((ceiling.size, 1)))[:, 0] > target, 0.0, lo)

    def point_c2(self, rps, curve: np.ndarray) -> np.ndarray:
        """The C2 a point at ``rps`` feels (its utilisation is RPS times it)."""
        rps = np.asarray(rps, dtype=float)
        return np.broadcast_to(_lift(self.c2, rps), np.shape(curve))

    def predictive(self, rps, rng: np.random.Generator, log_se=0.0) -> np.ndarray:
        """Draws of a new measured mean latency at ``rps`` (curve and noise)."""
        if self.noise is None:
            raise ValueError(f"curve '{self.label}' has no noise model")
        curve = self.latency(rps)
        sigma = self.noise.sigma(rps, self.point_c2(rps, curve), log_se)
        return self.noise.draw(curve, sigma, rng)

    def log_predictive_density(self, rps, observed, log_se=0.0) -> np.ndarray:
        """Log pointwise predictive density of observed mean latencies (R,) at rates
        (R,): log mean over draws of the error density of log obs around log L
        (saturated draws count as 0)."""
        rps = np.asarray(rps, dtype=float)
        curve = self.latency(rps)
        sigma = self.noise.sigma(rps, self.point_c2(rps, curve), log_se)
        with np.errstate(invalid="ignore", divide="ignore"):
            logp = self.noise.log_density(
                np.log(np.asarray(observed, dtype=float)) - np.log(curve), sigma)
        logp = np.where(np.isfinite(logp), logp, -np.inf)
        top = np.max(logp, axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return top + np.log(np.mean(np.exp(logp - top[None, :]), axis=0))


class CurvedCurve(Curve):
    """Draws of the second-order law L = C1 (1 + bend*x)/(1 - x), x = RPS*C2
    (:func:`bayesspec.laws.curved_latency`); eq. (1) when bend = 0."""

    law_name = "second-order eq. (1)"

    def __init__(self, c1, c2, bend, *, label: str = "", noise: Noise | None = None):
        super().__init__(c1, c2, label=label, noise=noise)
        self.bend = np.asarray(bend, dtype=float)

    def latency(self, rps) -> np.ndarray:
        rps = np.asarray(rps, dtype=float)
        return curved_latency(rps, _lift(self.c1, rps), _lift(self.c2, rps),
                              _lift(self.bend, rps))


class TwoRegimeCurve(Curve):
    """Draws of the two-regime roofline law (:func:`bayesspec.laws.two_regime_latency`):
    the larger of a memory-bound law (C1m, C2m) and a compute-bound one (C1c, C2c).
    ``c1``/``c2`` are the zero-load latency and the C2 of the saturating branch."""

    law_name = "two-regime eq. (1)"

    def __init__(self, c1m, c2m, c1c, c2c, *, sharpness: float, label: str = "",
                 noise: Noise | None = None):
        c1m, c2m = np.asarray(c1m, dtype=float), np.asarray(c2m, dtype=float)
        c1c, c2c = np.asarray(c1c, dtype=float), np.asarray(c2c, dtype=float)
        zero_load = two_regime_latency(0.0, c1m, c2m, c1c, c2c, sharpness)
        super().__init__(zero_load, np.maximum(c2m, c2c), label=label, noise=noise)
        self.parts = (c1m, c2m, c1c, c2c)
        self.sharpness = float(sharpness)

    def latency(self, rps) -> np.ndarray:
        rps = np.asarray(rps, dtype=float)
        return two_regime_latency(rps, *(_lift(p, rps) for p in self.parts), self.sharpness)


@dataclass
class SummarySampling:
    """How a summary reported by a load test of n requests scatters around the law's
    value for the whole population (:func:`bayesspec.laws.quantile_sampling_moments`):
    the summary's quantile level (NaN: a mean), the rule its percentiles were computed
    by, and ``spread(rps)``: draws (S[, R]) of the per-request log-latency spread at the
    rates."""

    quantile: float
    spread: object
    rule: str = "linear"

    def error(self, rps, n_requests) -> tuple[np.ndarray, np.ndarray]:
        """(bias, variance) of the reported log summary at ``rps`` with ``n_requests``
        requests (scalars or arrays like ``rps``)."""
        shift, variance = quantile_sampling_moments(self.quantile, n_requests, self.rule)
        return sampled_quantile_error_expr(self.spread(rps), np.asarray(shift),
                                           np.asarray(variance))


class MetricCurve(Curve):
    """Draws of one latency summary under load (a percentile of end-to-end latency, of
    TTFT or of ITL): q = A (1 - RPS*C2)^(-gamma)
    (:func:`bayesspec.laws.percentile_latency`), C2 shared with the group's mean law
    (near it). ``c1`` is A, the summary at zero load. The curve is the summary of the
    whole request population; ``sampling`` says how one load test's reported value
    scatters around it (:meth:`predictive` with ``n_requests``)."""

    law_name = "eq. (1) tail"

    def __init__(self, scale, c2, exponent, *, metric: str, label: str = "", group: str = "",
                 noise: Noise | None = None, sampling: SummarySampling | None = None):
        super().__init__(scale, c2, label=label, noise=noise)
        self.exponent = np.asarray(exponent, dtype=float)
        self.metric = metric
        #: The fitted group's label (its rows in ``fit.data`` carry it as ``group``).
        self.group = group
        self.sampling = sampling

    def predictive(self, rps, rng: np.random.Generator, log_se=0.0,
                   n_requests=None) -> np.ndarray:
        """Draws of a new reported summary at ``rps``: of a load test of ``n_requests``
        requests per rate (its order-statistic bias and scatter), or without one the
        law's value with the fitted noise alone."""
        if self.noise is None:
            raise ValueError(f"curve '{self.label}' has no noise model")
        rps = np.asarray(rps, dtype=float)
        curve = self.latency(rps)
        sigma = self.noise.sigma(rps, self.point_c2(rps, curve), log_se)
        if n_requests is not None and self.sampling is not None:
            bias, variance = self.sampling.error(rps, n_requests)
            with np.errstate(invalid="ignore", over="ignore"):
                curve = curve * np.exp(bias)
            sigma = np.sqrt(sigma**2 + variance)
        return self.noise.draw(curve, sigma, rng)

    def latency(self, rps) -> np.ndarray:
        rps = np.asarray(rps, dtype=float)
        return percentile_latency(rps, _lift(self.c1, rps), _lift(self.c2, rps),
                                  _lift(self.exponent, rps))

    def rate_meeting(self, target: float) -> np.ndarray:
        """Per draw (S,), the highest rate at which this summary stays within ``target``
        (0 when zero load already misses it)."""
        return rate_meeting_target(target, self.c1, self.c2, self.exponent)


class MoECurve(Curve):
    """Draws of eq. (4): L = (C1u + phi C1s)/(1 - RPS (C2u + phi C2s)), phi the expert
    coverage at T = offset + RPS*L*tokens, solved for its least fixed point."""

    law_name = "eq. (4)"

    def __init__(self, c1u, c1s, c2u, c2s, *, m: float, M: float, tokens=1.0,
                 offset: float = 0.0, label: str = "", noise: Noise | None = None):
        self.parts = tuple(np.asarray(p, dtype=float) for p in (c1u, c1s, c2u, c2s))
        self.m, self.M = float(m), float(M)
        self.tokens = np.asarray(tokens, dtype=float)
        self.offset = float(offset)
        start = expert_coverage(self.offset, self.m, self.M)
        super().__init__(self.parts[0] + start * self.parts[1],
                         self.parts[2] + self.parts[3], label=label, noise=noise)

    def latency(self, rps) -> np.ndarray:
        rps = np.asarray(rps, dtype=float)
        tokens = self.tokens if rps.ndim == 0 else (
            self.tokens[..., None] if rps.ndim == 1 else self.tokens)
        return moe_latency(rps, *(_lift(p, rps) for p in self.parts), self.m, self.M,
                           tokens, token_offset=self.offset)

    def point_c2(self, rps, curve: np.ndarray) -> np.ndarray:
        rps = np.asarray(rps, dtype=float)
        tokens = self.tokens if rps.ndim == 0 else (
            self.tokens[..., None] if rps.ndim == 1 else self.tokens)
        with np.errstate(invalid="ignore", over="ignore"):
            routed = np.where(np.isfinite(curve), self.offset + rps * curve * tokens, np.inf)
        phi = expert_coverage(routed, self.m, self.M)
        return _lift(self.parts[2], rps) + phi * _lift(self.parts[3], rps)


# --------------------------------------------------------------------------- laws

def _ratio_of_latencies(l_dense, l_sd) -> np.ndarray:
    """L_dense/L_sd; 1 where both are saturated."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = l_dense / l_sd
    both = np.isinf(l_dense) & np.isinf(l_sd)
    return np.where(both, 1.0, ratio)


def first_crossing(sd_latency, dense_latency, ceiling: np.ndarray, *, grid: int = 48,
                   steps: int = 44) -> np.ndarray:
    """Lowest rate where L_sd = L_dense below ``ceiling`` (per draw), else nan.

    The latency functions take rates of shape (S, G), row s for draw s. Laws without a
    closed form (eq. 4): the sign of log(L_sd/L_dense) is scanned on a grid of fractions
    of each draw's ceiling (the lower saturation rate) and the first change is refined by
    bisection, all draws at once. Eq. (4) can bend the curves into more than one
    crossing; the first is the one a deployment meets when load rises.
    """
    fractions = np.append(np.arange(grid) / grid, 1.0 - 1e-9)
    rates = ceiling[:, None] * fractions[None, :]                      # (S, G)
    with np.errstate(divide="ignore", invalid="ignore"):
        gap = np.log(sd_latency(rates)) - np.log(dense_latency(rates))
    start = np.sign(gap[:, 0])
    changed = (np.sign(gap) != start[:, None]) & (start[:, None] != 0) & ~np.isnan(gap)
    has = changed.any(axis=1)
    first = np.argmax(changed, axis=1)
    draws = np.arange(len(ceiling))
    lo = rates[draws, np.maximum(first - 1, 0)]
    hi = rates[draws, first]
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            sign = np.sign(np.log(sd_latency(mid[:, None]))
                           - np.log(dense_latency(mid[:, None])))[:, 0]
        same = sign == start
        lo = np.where(same, mid, lo)
        hi = np.where(same, hi, mid)
    return np.where(has, 0.5 * (lo + hi), np.nan)


class Law:
    """One setup's latency laws: the dense baseline and SD at the (alpha, k) it answers.

    Subclasses say how SD curves come about (:meth:`sd`). ``rps_measured_max`` is the
    highest rate the data reached for this setup (saturated points included), so answers
    beyond it can be marked as extrapolations.
    """

    #: True when any (alpha, k) can be answered (six coefficients), False when only the
    #: fitted configurations can.
    answers_any_configuration = False

    def __init__(self, label: str, dense: Curve | None, *, rps_measured_max: float = np.nan,
                 dense_hint: str = ""):
        self.label = label
        self._dense = dense
        self.rps_measured_max = float(rps_measured_max)
        self.dense_hint = dense_hint

    # ---------------------------------------------------------------- curves
    @property
    def dense(self) -> Curve:
        """The dense baseline; a clear error when the fit has none for this setup."""
        if self._dense is None:
            raise BadInput(
                f"the fit has no dense baseline (k = 0 rows) for '{self.label}': speedup, "
                "crossover and k* compare SD with plain decoding of the same verifier and "
                "lengths. Add dense rows to the data (a load test without speculation, or "
                f"`bayesspec simulate {self.dense_hint or '--verifier V --prefill P --decode G'}"
                " -o dense.csv`), put them in one file with the SD rows and refit")
        return self._dense

    @property
    def has_dense(self) -> bool:
        return self._dense is not None

    @property
    def c1_dense(self) -> np.ndarray:
        """The dense baseline's zero-load latency draws (S,)."""
        return self.dense.zero_load

    @property
    def c2_dense(self) -> np.ndarray:
        """The dense baseline's saturation cost draws (S,): 1/C2 is its saturation rate."""
        return self.dense.saturation_cost

    def dense_latency(self, rps) -> np.ndarray:
        return self.dense.latency(rps)

    @property
    def law_name(self) -> str:
        """'eq. (1)' or 'eq. (4)' (MoE): the law latencies follow."""
        return self.dense.law_name if self.has_dense else Curve.law_name

    def sd(self, alpha: float, k) -> Curve:  # pragma: no cover - abstract
        """SD curve(s) at acceptance ``alpha``: k an int gives arrays (S,), a vector (S, K)."""
        raise NotImplementedError

    def curve(self, alpha: float | None, k: int) -> Curve:
        """The curve of one configuration (k = 0: the dense baseline)."""
        return self.dense if int(k) == 0 else self.sd(alpha, int(k))

    def latency(self, rps, alpha: float | None = None, k=0) -> np.ndarray:
        """Mean-latency draws at ``rps`` for one configuration (k = 0: dense)."""
        return self.curve(alpha, k).latency(rps)

    # ---------------------------------------------------------------- decisions
    def costs(self, alpha: float, k):
        """(C1, C2) of SD: zero-load latency and saturation cost, (S[, K])."""
        curve = self.sd(alpha, k)
        return curve.zero_load, curve.saturation_cost

    def speedup_draws(self, alpha: float, k, rps) -> np.ndarray:
        """L_dense/L_sd, shape (S, R) for an int k, (S, K, R) for a vector of k."""
        rps = np.asarray(rps, dtype=float)
        l_sd = self.sd(alpha, k).latency(rps)
        l_dense = self.dense.latency(rps)
        if l_sd.ndim == 3:
            l_dense = l_dense[:, None, :]
        return _ratio_of_latencies(l_dense, l_sd)

    def crossover_draws(self, alpha: float, k: int) -> np.ndarray:
        """RPS* per draw (nan without a crossover below both saturation rates)."""
        sd, dense = self.sd(alpha, int(k)), self.dense
        if type(sd) is Curve and type(dense) is Curve:
            return crossover_rps(dense.c1, dense.c2, sd.c1, sd.c2)
        return first_crossing(sd.latency, dense.latency,
                              np.minimum(1.0 / dense.saturation_cost, 1.0 / sd.saturation_cost))


@dataclass
class MoESplit:
    """How a six-coefficient law splits its (fully covered) costs for a sparse verifier:
    learned shares of the saturating part (eq. 4 on top of eq. 3)."""

    m: float
    M: float
    offset: float
    verify_tokens: str                               # tokens per verification: "k" or "k+1"
    sd_shares: tuple[np.ndarray, np.ndarray]         # (share of C1, share of C2), (S,)


class CoefficientLaw(Law):
    """SD at any (alpha, k) from six cycle coefficients (eq. 3), split by eq. (4) for a
    sparse verifier (``moe``)."""

    answers_any_configuration = True

    def __init__(self, label: str, dense: Curve | None, coefficients: dict[str, np.ndarray],
                 decode_tokens: float, *, moe: MoESplit | None = None, noise: Noise | None = None,
                 **options):
        super().__init__(label, dense, **options)
        self.coefficients = {n: np.asarray(coefficients[n], dtype=float)
                             for n in COEFFICIENT_NAMES}
        self.decode_tokens = float(decode_tokens)
        self.moe = moe
        self.noise = noise
        #: (S, K + 1) draws of E(k), k = 0..K, from acceptance by position; None: eq. (3)'s
        #: i.i.d. E(alpha, k).
        self.acceptance_lengths: np.ndarray | None = None

    def with_acceptance_lengths(self, lengths: np.ndarray, *, seed: int = 0) -> "CoefficientLaw":
        """The same law answering SD from measured acceptance by position: E(k) draws
        (S_a, K + 1) instead of E(alpha, k); alpha is then ignored. The two posteriors are
        independent, so draws are paired at random (resampled to this law's draws)."""
        import copy

        lengths = np.asarray(lengths, dtype=float)
        draws = next(iter(self.coefficients.values())).shape[0]
        pick = np.random.default_rng(seed).integers(0, lengths.shape[0], draws)
        law = copy.copy(self)
        law.acceptance_lengths = lengths[pick]
        law.label = f"{self.label} (acceptance by position)"
        return law

    def sd(self, alpha: float, k) -> Curve:
        alpha = np.asarray(alpha, dtype=float)
        k = np.asarray(k, dtype=float)
        shape = (-1,) + (1,) * k.ndim
        coefficients = [self.coefficients[n].reshape(shape) for n in COEFFICIENT_NAMES]
        if self.acceptance_lengths is None:
            c1, c2 = effective_costs(alpha, k, self.decode_tokens, *coefficients)
            label = f"{self.label} alpha {float(alpha):g} k {k.tolist()}"
        else:
            top = self.acceptance_lengths.shape[1] - 1
            if np.any(k > top):
                raise BadInput(f"acceptance by position answers k up to {top}, not "
                               f"{int(np.max(k))}", argument="kmax")
            length = self.acceptance_lengths[:, k.astype(int)].reshape(
                (-1,) + np.shape(k))
            with np.errstate(divide="ignore", invalid="ignore"):
                c1, c2 = costs_for_acceptance_length(length, k, self.decode_tokens,
                                                     *coefficients)
            label = f"{self.label} k {k.tolist()}"
        if self.moe is None:
            return Curve(c1, c2, label=label, noise=self.noise)
        s1, s2 = (share.reshape(shape) for share in self.moe.sd_shares)
        return MoECurve(c1 * (1 - s1), c1 * s1, c2 * (1 - s2), c2 * s2, m=self.moe.m,
                        M=self.moe.M, tokens=verification_tokens(k, self.moe.verify_tokens),
                        offset=self.moe.offset, label=label, noise=self.noise)


class ConfigurationLaw(Law):
    """SD only at the fitted (alpha, k): one fitted curve each (per-configuration fits)."""

    def __init__(self, label: str, dense: Curve | None,
                 configurations: dict[tuple[float, int], Curve], **options):
        super().__init__(label, dense, **options)
        self.configurations = configurations

    def sd(self, alpha: float, k) -> Curve:
        if np.ndim(k):
            raise BadInput("this fit answers only the (alpha, k) it has groups for, one at a "
                           "time; fit the speculative model to compare draft lengths")
        key = (None if alpha is None or np.isnan(alpha) else round(float(alpha), 9), int(k))
        if key not in self.configurations and (None, int(k)) in self.configurations:
            key = (None, int(k))   # measured at k without a set alpha: the k decides
        if key not in self.configurations:
            known = ", ".join(f"k {kk}" if a is None else f"alpha {a:g} k {kk}" for a, kk in
                              sorted(self.configurations,
                                     key=lambda c: (c[1], -1.0 if c[0] is None else c[0])))
            raise BadInput(f"this fit has no group at alpha {float(alpha):g}, k {int(k)} for "
                           f"{self.label}; fit the speculative model to query any (alpha, k)"
                           f" (fitted: {known or 'none'})")
        return self.configurations[key]
