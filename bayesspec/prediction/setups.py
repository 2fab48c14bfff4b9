"""What a fit answers about one setup (a verifier at given lengths, with a drafter when
there is one): :class:`Law`, the dense baseline and speculative decoding at the (alpha, k)
it can answer: any, from six cycle coefficients (:class:`CoefficientLaw`, eq. (3), split by
eq. (4) for a sparse verifier, :class:`MoESplit`), or the fitted ones
(:class:`ConfigurationLaw`); what the data measured for each answer; and the speedup and
crossover draws. A speedup is 0 where only SD is saturated, ``inf`` where only the dense
baseline is, 1 where both are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bayesspec.errors import BadInput
from bayesspec.laws import (concurrency_cap, costs_for_acceptance_length, crossover_rps,
                            effective_costs, expected_accepted, verification_tokens)
from bayesspec.prediction.curves import BISECTION_RTOL, Curve, MoECurve
from bayesspec.prediction.noise import Noise

__all__ = ["COEFFICIENT_NAMES", "first_crossing", "MeasuredConfiguration", "Law",
           "MoESplit", "CoefficientLaw", "ConfigurationLaw"]


#: The six cycle coefficients of eq. (3), in the order
#: :func:`bayesspec.laws.effective_costs` takes them.
COEFFICIENT_NAMES = ("c1p", "c1v", "c1d", "c2p", "c2v", "c2d")


def _ratio_of_latencies(l_dense, l_sd) -> np.ndarray:
    """L_dense/L_sd; 1 where both are saturated."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = l_dense / l_sd
    both = np.isinf(l_dense) & np.isinf(l_sd)
    return np.where(both, 1.0, ratio)


def sign_change_cells(sd_latency, dense_latency, ceiling: np.ndarray, grid: int) -> dict:
    """The scan of :func:`first_crossing`: the sign of log(L_sd/L_dense) on a grid of
    fractions of each draw's ceiling, and per draw the first grid cell where it changes:
    ``start`` (the sign at rate 0), ``has`` (a change below the ceiling), the cell's ends
    ``lo``, ``hi`` and the gap there, ``gap_lo``, ``gap_hi``."""
    fractions = np.append(np.arange(grid) / grid, 1.0 - 1e-9)
    rates = ceiling[:, None] * fractions[None, :]                      # (S, G)
    with np.errstate(divide="ignore", invalid="ignore"):
        gap = np.log(sd_latency(rates)) - np.log(dense_latency(rates))
    start = np.sign(gap[:, 0])
    changed = (np.sign(gap) != start[:, None]) & (start[:, None] != 0) & ~np.isnan(gap)
    first = np.argmax(changed, axis=1)
    draws = np.arange(len(ceiling))
    before = np.maximum(first - 1, 0)
    return {"start": start, "has": changed.any(axis=1), "lo": rates[draws, before],
            "hi": rates[draws, first], "gap_lo": gap[draws, before],
            "gap_hi": gap[draws, first]}


def first_crossing(sd_latency, dense_latency, ceiling: np.ndarray, *, grid: int = 48,
                   steps: int = 44) -> np.ndarray:
    """Lowest rate where L_sd = L_dense below ``ceiling`` (per draw), else nan.

    The latency functions take rates of shape (S, G), row s for draw s. Laws without a
    closed form (eq. 4): the sign of log(L_sd/L_dense) is scanned on a grid of fractions
    of each draw's ceiling (the lower saturation rate) and the first change is refined by
    bisection, all draws at once. Eq. (4) can bend the curves into more than one
    crossing; the first is the one a deployment meets when load rises.

    The bisection's answer is the one it always gave, found with fewer evaluations of
    the curves (the cost of a ``crossover``): each draw's crossing is first bracketed
    within about 1e-12 of itself by regula falsi (the Illinois variant, a handful of
    evaluations), and the bisection then evaluates only the midpoints inside that
    bracket; a midpoint below it has the sign of the bracket's lower end, one above it
    that of its upper end (one crossing inside a grid cell, as the scan assumes).
    """
    scan = sign_change_cells(sd_latency, dense_latency, ceiling, grid)
    start, has, lo, hi = scan["start"], scan["has"], scan["lo"], scan["hi"]

    def gap_at(rate, where):
        """log(L_sd/L_dense) at one rate per draw, for the draws ``where`` (0 elsewhere:
        the cheapest point of a curve)."""
        at = np.where(where, rate, 0.0)[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            return (np.log(sd_latency(at)) - np.log(dense_latency(at)))[:, 0]

    below, above = _crossing_bracket(gap_at, lo, hi, scan["gap_lo"], scan["gap_hi"], start,
                                     has)
    for _ in range(steps):
        if np.all(~has | (hi - lo <= BISECTION_RTOL * hi)):
            break
        mid = 0.5 * (lo + hi)
        same = mid <= below
        unknown = has & (mid > below) & (mid < above)
        if unknown.any():
            same = np.where(unknown, np.sign(gap_at(mid, unknown)) == start, same)
        lo = np.where(same, mid, lo)
        hi = np.where(same, hi, mid)
    return np.where(has, 0.5 * (lo + hi), np.nan)


#: How close the regula falsi bracket of a crossing gets (relative to the rate) before
#: the bisection takes over.
_BRACKET_RTOL = 1e-12


def _crossing_bracket(gap_at, lo, hi, gap_lo, gap_hi, start, has, *, iterations: int = 16):
    """(below, above) per draw: rates where the gap was evaluated to have the sign
    ``start`` (below) and not (above), the crossing between them, as close as
    ``iterations`` steps of regula falsi bring them (they stop at :data:`_BRACKET_RTOL`
    apart); (-inf, inf) for draws whose grid cell is not the sign change the bisection
    assumes (their bisection evaluates every midpoint)."""
    a, b = lo.astype(float), hi.astype(float)
    fa, fb = gap_lo.astype(float), gap_hi.astype(float)
    # a draw is searched where its grid cell's ends are what the bisection assumes
    open_ = has & (np.sign(fa) == start) & (np.sign(fb) != start) & (a < b)
    last_side = np.zeros(len(a))
    for _ in range(iterations):
        open_ &= b - a > _BRACKET_RTOL * b
        if not open_.any():
            break
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            secant = b - fb * (b - a) / (fb - fa)
        usable = np.isfinite(fa) & np.isfinite(fb) & (secant > a) & (secant < b)
        x = np.where(usable, secant, 0.5 * (a + b))
        fx = gap_at(x, open_)
        lower = open_ & (np.sign(fx) == start)
        upper = open_ & ~lower
        # Illinois: an end kept twice in a row has its value halved, so the secant
        # moves it next time
        fb = np.where(lower & (last_side == 1), 0.5 * fb, fb)
        fa = np.where(upper & (last_side == -1), 0.5 * fa, fa)
        a, fa = np.where(lower, x, a), np.where(lower, fx, fa)
        b, fb = np.where(upper, x, b), np.where(upper, fx, fb)
        last_side = np.where(lower, 1, np.where(upper, -1, last_side))
    found = has & (np.sign(fa) == start) & (np.sign(fb) != start) & (a < b)
    return np.where(found, a, -np.inf), np.where(found, b, np.inf)


@dataclass(frozen=True)
class MeasuredConfiguration:
    """An SD configuration the fit saw: its acceptance (None when it was latent, from
    counters), draft length and highest fitted (unsaturated) rate."""

    alpha: float | None
    k: int
    rps_fitted_max: float


class Law:
    """One setup's latency laws: the dense baseline and SD at the (alpha, k) it answers.

    Subclasses say how SD curves come about (:meth:`sd`). What the data measured is per
    configuration (:meth:`measured`): an answer about SD at (alpha, k) against the dense
    baseline rests on both curves, so it is measured up to the lower of their highest
    fitted rates, and only inside the measured alphas and draft lengths; anything else
    is the law's extrapolation and is marked so (:meth:`extrapolated`, the one rule every
    output marks extrapolations with).

    Two words, one meaning each wherever they are printed: the *highest fitted* rate is
    the highest rate that entered the fit (the extrapolation boundary, what
    ``rps_fitted_max`` holds); the *highest measured* rate is the highest rate in the
    data file, points set aside included (a throughput run, a saturated point).
    """

    #: True when any (alpha, k) can be answered (six coefficients), False when only the
    #: fitted configurations can.
    answers_any_configuration = False

    def __init__(self, label: str, dense: Curve | None, *,
                 measured_configurations=(), dense_hint: str = "", unmeasured_setup: str = ""):
        self.label = label
        self._dense = dense
        self.measured_configurations = tuple(measured_configurations)
        self.dense_hint = dense_hint
        #: Why the setup itself (its lengths) was never measured, "" when it was: the
        #: hierarchical model predicts such setups from its trends.
        self.unmeasured_setup = unmeasured_setup
        # The last speedup_draws answer: `kstar --vllm` asks for the same (S, K, R) draws
        # twice (the table, then the schedule), and each is the costliest step of a verb.
        self._last_speedups: tuple | None = None

    # ---------------------------------------------------------------- what was measured
    def _sd_fitted_max(self, alpha, k: int) -> float:
        configurations = self.measured_configurations
        exact = [c.rps_fitted_max for c in configurations if c.k == k and (
            c.alpha is None or alpha is None or np.isnan(alpha)
            or abs(c.alpha - float(alpha)) < 1e-9)]
        if exact:
            return float(max(exact))
        # Between measured configurations: measured only as far as all its neighbours were.
        same_k = [c.rps_fitted_max for c in configurations if c.k == k]
        pool = same_k or [c.rps_fitted_max for c in configurations]
        return float(min(pool)) if pool else float("nan")

    @property
    def measured_ks(self) -> list[int]:
        """The draft lengths the data measured (k > 0), ascending."""
        return sorted({c.k for c in self.measured_configurations})

    @property
    def measured_alphas(self) -> list[float]:
        """The acceptance rates the data set (latent ones, from counters, are not), ascending."""
        return sorted({c.alpha for c in self.measured_configurations if c.alpha is not None})

    #: Where the data set no alpha but measured acceptance (counters): the i.i.d. alpha
    #: range it amounts to, (lo, hi) over the posterior, so that an alpha asked outside
    #: it is marked as the law's extrapolation too (None: unknown, or alphas were set).
    alpha_span: tuple[float, float] | None = None

    def _alpha_range(self) -> list[float]:
        alphas = self.measured_alphas
        if not alphas and self.alpha_span is not None:
            alphas = [float(self.alpha_span[0]), float(self.alpha_span[1])]
        return alphas

    def design_notes(self, alpha, k) -> list[str]:
        """Why (alpha, k) lies outside what the data measured ([] when inside).

        k = 0 with an alpha is the choice not to speculate at that acceptance: it rests
        on SD's law there, so an alpha outside the measured ones makes it the law's
        extrapolation too (k = 0 without an alpha is the dense baseline alone)."""
        notes = []
        if self.unmeasured_setup:
            notes.append(self.unmeasured_setup)
        if not self.measured_configurations:
            return notes
        ks, alphas = self.measured_ks, self._alpha_range()
        k = int(k)
        if k > 0 and (k < ks[0] or k > ks[-1]):
            notes.append(f"k {k} is outside the measured draft lengths "
                         f"({ks[0]}" + (f"-{ks[-1]})" if ks[-1] != ks[0] else ")"))
        elif k > 0 and k not in ks:
            notes.append(f"k {k} was not measured (measured: {', '.join(map(str, ks))})")
        if alpha is not None and not np.isnan(alpha) and alphas:
            if alpha < alphas[0] - 1e-9 or alpha > alphas[-1] + 1e-9:
                span = (f"{alphas[0]:.3g}-{alphas[-1]:.3g}" if alphas[-1] != alphas[0]
                        else f"{alphas[0]:g}")
                notes.append(f"alpha {float(alpha):g} is outside the measured acceptance "
                             f"({span})")
        return notes

    def configuration_fitted_max(self, alpha=None, k=0) -> float:
        """The highest fitted rate of one configuration's own curve (k = 0: the dense
        baseline), nan when the fit does not say: the boundary of an answer about that
        configuration alone (its goodput, its latency)."""
        if int(k) == 0:
            return (float(self._dense.rps_fitted_max) if self._dense is not None
                    else float("nan"))
        return self._sd_fitted_max(alpha, int(k))

    def measured(self, alpha=None, k=0) -> dict:
        """What the data measured for an answer about SD at (alpha, k) (k = 0: the dense
        baseline alone): ``rps_fitted_max``, the highest rate both curves were fitted up
        to (rates above it are extrapolated); the two curves' own; and ``design_notes``,
        why the configuration itself lies outside the measured alphas and draft lengths
        (``design_extrapolated`` when there are any)."""
        dense_max = self.configuration_fitted_max(None, 0)
        sd_max = float("nan") if int(k) == 0 else self.configuration_fitted_max(alpha, k)
        both = [v for v in (dense_max, sd_max if int(k) else np.nan) if np.isfinite(v)]
        notes = self.design_notes(alpha, k)
        ks, alphas = self.measured_ks, self._alpha_range()
        return {"rps_fitted_max": float(min(both)) if both else float("nan"),
                "dense_rps_fitted_max": dense_max,
                "sd_rps_fitted_max": sd_max,
                "k_measured": ks,
                "alpha_measured": [alphas[0], alphas[-1]] if alphas else None,
                "design_extrapolated": bool(notes), "design_notes": notes}

    def extrapolated(self, rps, alpha=None, k=0) -> np.ndarray:
        """Per rate, whether an answer about (alpha, k) there is the law's extrapolation:
        above the highest fitted rate of the curves it compares, or outside the measured
        design."""
        measured = self.measured(alpha, k)
        rps = np.asarray(rps, dtype=float)
        top = measured["rps_fitted_max"]
        beyond = rps > top if np.isfinite(top) else np.zeros(rps.shape, bool)
        return beyond | measured["design_extrapolated"]

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
        key = (None if alpha is None else float(alpha), np.asarray(k).tolist(), rps.shape,
               rps.tobytes())
        if self._last_speedups is not None and self._last_speedups[0] == key:
            return self._last_speedups[1]
        l_sd = self.sd(alpha, k).latency(rps)
        l_dense = self.dense.latency(rps)
        if l_sd.ndim == 3:
            l_dense = l_dense[:, None, :]
        ratio = _ratio_of_latencies(l_dense, l_sd)
        ratio.flags.writeable = False       # shared by every caller of the memo
        self._last_speedups = (key, ratio)
        return ratio

    def crossover_draws(self, alpha: float, k: int) -> np.ndarray:
        """RPS* per draw (nan without a crossover below both ceilings)."""
        sd, dense = self.sd(alpha, int(k)), self.dense
        if type(sd) is Curve and type(dense) is Curve and sd.cap is None and dense.cap is None:
            return crossover_rps(dense.c1, dense.c2, sd.c1, sd.c2)
        return first_crossing(sd.latency, dense.latency,
                              np.minimum(dense.ceiling, sd.ceiling))


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
                 engine_limits: dict | None = None, roof: dict | None = None, **options):
        super().__init__(label, dense, **options)
        #: The compute roof SD runs under at any k (the cards' bounds and the learned
        #: factors' draws, :class:`~bayesspec.prediction.RoofCurve`); None: eq. (1).
        self.roof = roof
        #: The engine's limits SD runs under (``max_num_seqs``, ``kv_cache_tokens``,
        #: ``max_num_batched_tokens`` and the lengths ``prefill``, ``decode``: the
        #: arguments of :func:`bayesspec.laws.concurrency_cap`); the cap of any k follows.
        self.engine_limits = dict(engine_limits or {})
        self.coefficients = {n: np.asarray(coefficients[n], dtype=float)
                             for n in COEFFICIENT_NAMES}
        self.decode_tokens = float(decode_tokens)
        self.moe = moe
        self.noise = noise
        #: (S, K + 1) draws of E(k), k = 0..K, from acceptance by position; None: eq. (3)'s
        #: i.i.d. E(alpha, k).
        self.acceptance_lengths: np.ndarray | None = None

    def with_acceptance_lengths(self, lengths: np.ndarray, *, seed: int = 0,
                                measured_ks=None) -> "CoefficientLaw":
        """The same law answering SD from measured acceptance by position: E(k) draws
        (S_a, K + 1) instead of E(alpha, k); alpha is then ignored. The two posteriors are
        independent, so draws are paired at random (resampled to this law's draws).
        ``measured_ks``: the draft lengths the counters measured; E(k) at any other k is
        the acceptance model's, and answers there are marked so (:meth:`design_notes`)."""
        import copy

        lengths = np.asarray(lengths, dtype=float)
        draws = next(iter(self.coefficients.values())).shape[0]
        pick = np.random.default_rng(seed).integers(0, lengths.shape[0], draws)
        law = copy.copy(self)
        law._last_speedups = None
        law.acceptance_lengths = lengths[pick]
        law.acceptance_measured_ks = (None if measured_ks is None
                                      else sorted({int(k) for k in measured_ks}))
        law.label = f"{self.label} (acceptance by position)"
        return law

    #: The draft lengths at which acceptance by position was counted (None: not given).
    acceptance_measured_ks: list[int] | None = None

    def design_notes(self, alpha, k) -> list[str]:
        notes = super().design_notes(alpha, k)
        counted = self.acceptance_measured_ks
        if counted and int(k) > 0 and int(k) not in counted:
            notes.append(f"the counters measured acceptance at k {', '.join(map(str, counted))}"
                         f", not at k {int(k)}")
        return notes

    def cap_at(self, k) -> np.ndarray | None:
        """The engine's concurrency cap at draft length(s) ``k`` (None when unknown): the
        step's token budget binds harder the more tokens each verification carries."""
        if not self.engine_limits:
            return None
        limits = self.engine_limits
        cap = concurrency_cap(limits.get("max_num_seqs", np.nan),
                              limits.get("kv_cache_tokens", np.nan),
                              limits.get("max_num_batched_tokens", np.nan),
                              limits.get("prefill", np.nan), limits.get("decode", np.nan),
                              np.asarray(k, dtype=float))
        cap = np.asarray(cap, dtype=float)
        if not np.isfinite(cap).all():
            return None
        return cap.reshape((1,) + cap.shape)

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
        if self.moe is None and self.roof is not None:
            from bayesspec.prediction.profile import RoofCurve

            with np.errstate(divide="ignore", invalid="ignore"):
                length = (expected_accepted(alpha, k) * np.ones_like(c1)
                          if self.acceptance_lengths is None else length)
            return RoofCurve(c1, c2, **self.roof, k=k, cycles=self.decode_tokens / length,
                             label=label, noise=self.noise, cap=self.cap_at(k),
                             wait_scale=self.engine_limits.get("wait_scale", 1.0))
        if self.moe is None:
            return Curve(c1, c2, label=label, noise=self.noise, cap=self.cap_at(k),
                         wait_scale=self.engine_limits.get("wait_scale", 1.0))
        s1, s2 = (share.reshape(shape) for share in self.moe.sd_shares)
        return MoECurve(c1 * (1 - s1), c1 * s1, c2 * (1 - s2), c2 * s2, m=self.moe.m,
                        M=self.moe.M, tokens=verification_tokens(k, self.moe.verify_tokens),
                        offset=self.moe.offset, label=label, noise=self.noise)


class ConfigurationLaw(Law):
    """SD only at the fitted (alpha, k): one fitted curve each (per-configuration fits)."""

    def __init__(self, label: str, dense: Curve | None,
                 configurations: dict[tuple[float, int], Curve], **options):
        options.setdefault("measured_configurations", [
            MeasuredConfiguration(alpha, k, float(curve.rps_fitted_max))
            for (alpha, k), curve in configurations.items()])
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
