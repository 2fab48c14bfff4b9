"""Ceilings that admit what was not measured (docs/ceilings.md).

A fitted law's ceiling (eq. (1)'s pole 1/C2, or the engine cap's throughput) is read off
a straight line through the measured points. Past the highest fitted rate nothing in the
data says the line holds: a compute roof past its knee, KV-cache preemption, a CUDA-graph
or token-budget edge each make a request's marginal cost grow with the batch, and each
brings the ceiling down (never up) from the law's. The data cannot exclude such a limit
anywhere between the batch the top fitted point held and the largest batch the engine
can hold; so the answered ceiling spans that range instead of a tight interval around the
extrapolated pole.

Per posterior draw, an unmeasured limit acts as a cap of N_lim requests, drawn uniformly
between N_top, the batch whose full throughput is the top fitted rate, and the largest
batch (the engine's cap where known, else the catalog's KV cache over a request's
footprint, else vLLM's largest default ``max_num_seqs``). Its throughput
N/(C1 + C2 (N - 1)) (at most the law's own ceiling) is the draw's ceiling. The same
uniform fraction serves every curve of a fit at a given draw (the fractions come from
one fixed seed), so comparisons between configurations do not gain noise the data never
had.

Below the top fitted rate the curve is the law's, exactly (the fit's evidence is
untouched). Above it the law's unmeasured stretch is compressed to end at the admitted
limit: the latency at rate r is the law's at top + (r - top) (law ceiling - top) /
(limit - top), so the load factor keeps rising from where the data left it and diverges
at the limit (for eq. (1) this is a steeper marginal cost past a knee at the top point).
A new measurement past the top point is then informative about the limit, which is how
``plan --question ceiling`` finds the point that settles it.
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd

from bayesspec.laws import load_elasticity_expr
from bayesspec.laws._numeric import _gathered
from bayesspec.prediction.curves import Curve, _lift

__all__ = ["LARGEST_DEFAULT_BATCH", "UNMEASURED_LIMIT_SEED", "unmeasured_fractions",
           "admitted_limit", "admit_unmeasured_limit", "is_admitting", "law_ceiling",
           "catalog_largest_batch", "answering_curve", "answering_metric_curve",
           "answering_law"]

#: The largest batch an engine holds where neither its cap nor the catalog says: vLLM V1's
#: default ``max_num_seqs`` on large GPUs.
LARGEST_DEFAULT_BATCH = 1024.0
#: One fixed seed for the fractions, so that every curve of a fit (and every answer from
#: it) reads the same fraction at the same draw.
UNMEASURED_LIMIT_SEED = 20261211


def unmeasured_fractions(draws: int) -> np.ndarray:
    """(draws,) uniform fractions in (0, 1): where, between the batch the data reached
    and the largest one, each draw's unmeasured limit sits."""
    return np.random.default_rng(UNMEASURED_LIMIT_SEED).uniform(size=int(draws))


def law_ceiling(curve) -> np.ndarray:
    """The fitted law's own ceiling of ``curve`` (its admitted one's upper end)."""
    return np.asarray(getattr(curve, "law_ceiling", curve.ceiling), dtype=float)


def _batch_at(rate, c1, c2):
    """The batch whose full throughput N/(C1 + C2 (N - 1)) is ``rate`` (at least 1;
    ``inf`` at or past 1/C2)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        batch = rate * (c1 - c2) / (1.0 - rate * c2)
    return np.where(rate * c2 < 1.0, np.maximum(batch, 1.0), np.inf)


def admitted_limit(curve, top, largest_batch=np.nan, *, floor=np.nan,
                   bound=np.nan) -> np.ndarray:
    """Per draw (the shape of the curve's cost arrays), the highest rate the server may
    sustain given what was measured up to ``top`` (scalar, or one per k): the throughput
    of a batch of N_lim requests, N_lim uniform between the batch whose full throughput
    is the highest rate the server was seen to sustain (``top``, or ``floor`` where a
    throughput run completed more) and the largest batch (the curve's cap where it has
    one, else ``largest_batch``, else :data:`LARGEST_DEFAULT_BATCH`; at most the batch
    whose throughput is ``bound``, a rate the server was seen not to sustain), and at
    most the law's ceiling. The law's ceiling where ``top`` is unknown or not below
    it."""
    law = law_ceiling(curve)
    c1 = np.broadcast_to(np.asarray(curve.zero_load, dtype=float), law.shape)
    c2 = np.broadcast_to(np.asarray(curve.saturation_cost, dtype=float), law.shape)
    top = np.broadcast_to(np.asarray(top, dtype=float), law.shape)
    seen = np.fmax(top, np.broadcast_to(np.asarray(floor, dtype=float), law.shape))
    fallback = float(largest_batch) if np.isfinite(largest_batch) and largest_batch >= 1 \
        else LARGEST_DEFAULT_BATCH
    cap = getattr(curve, "cap", None)
    largest = (np.full(law.shape, fallback) if cap is None
               else np.where(np.isfinite(cap), cap, fallback))
    bound = np.broadcast_to(np.asarray(bound, dtype=float), law.shape)
    # A law with a batch's own throughput (the compute roof's) reads it; eq. (1)'s is
    # batch / (C1 + C2 (batch - 1)).
    throughput = getattr(curve, "batch_throughput", None)
    if throughput is None:
        def batch_at(rate):
            return _batch_at(rate, c1, c2)

        def throughput(batch):
            return batch / (c1 + c2 * (batch - 1.0))
    else:
        def batch_at(rate):
            return curve.batch_reaching(rate)
    largest = np.where(np.isfinite(bound) & (bound > seen),
                       np.fmin(largest, batch_at(bound)), largest)
    fraction = unmeasured_fractions(law.shape[0]).reshape((-1,) + (1,) * (law.ndim - 1))
    reached = batch_at(np.minimum(seen, law))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        batch = reached + fraction * np.maximum(largest - reached, 0.0)
        limit = np.minimum(law, throughput(batch))
    usable = np.isfinite(top) & (top > 0) & np.isfinite(limit) & (law > top) & (top * c2 < 1)
    return np.where(usable, np.clip(limit, np.minimum(seen, law), law), law)


def is_admitting(curve) -> bool:
    """Whether ``curve`` answers with an admitted (unmeasured) limit."""
    return getattr(curve, "law_ceiling", None) is not None


_CLASSES: dict[type, type] = {}


def _admitting_class(base: type) -> type:
    if base in _CLASSES:
        return _CLASSES[base]

    class Admitting(base):
        """A curve whose ceiling admits an unmeasured limit above its top fitted rate."""

        law_ceiling: np.ndarray | None = None
        _limit: np.ndarray
        _top: np.ndarray

        @property
        def ceiling(self) -> np.ndarray:
            return self._limit

        @property
        def ceiling_binding(self) -> str:
            return base.ceiling_binding.fget(self)

        @property
        def has_fluid_run(self) -> bool:
            return False

        def _stretched(self, rps: np.ndarray):
            top, limit, law = (_lift(v, rps) for v in (self._top, self._limit,
                                                        self.law_ceiling))
            with np.errstate(divide="ignore", invalid="ignore"):
                scale = np.where(limit < law, (law - top) / (limit - top), 1.0)
                stretched = np.where(rps <= top, rps, top + (rps - top) * scale)
            return np.where(rps >= limit, np.inf, stretched)

        def latency(self, rps) -> np.ndarray:
            rps = np.asarray(rps, dtype=float)
            stretched = self._stretched(rps)
            past = ~np.isfinite(stretched)
            safe = np.where(past, 0.0, stretched)
            if base is Curve:
                value = _plain_latency(self, safe, rps)
            elif rps.ndim == 0:
                value = base.latency(self, safe[:, None])[:, 0]
            else:
                value = base.latency(self, safe)
            return np.where(past, np.inf, value)

        def amplification(self, rps, curve: np.ndarray) -> np.ndarray:
            rps = np.asarray(rps, dtype=float)
            own = base.amplification(self, rps, curve)
            if not np.any(rps > np.min(self._top)):
                return own
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                beyond = load_elasticity_expr(self.latency, rps)
            beyond = np.where(np.isnan(beyond), np.inf, beyond)
            return np.where(rps > _lift(self._top, rps), np.broadcast_to(beyond, np.shape(own)),
                            own)

        def utilisation(self, rps, curve: np.ndarray) -> np.ndarray:
            return np.asarray(rps, dtype=float) / np.median(self.ceiling)

    Admitting.__name__ = Admitting.__qualname__ = f"Admitting{base.__name__}"
    _CLASSES[base] = Admitting
    return Admitting


def _plain_latency(curve, rates: np.ndarray, rps: np.ndarray) -> np.ndarray:
    """Eq. (1) (or its slot queue) at ``rates`` already aligned with the draws the way
    ``rps`` asks (any cost-array shape)."""
    from bayesspec.laws import capped_latency, latency

    c1, c2 = _lift(curve.c1, rps), _lift(curve.c2, rps)
    if curve.cap is None:
        return latency(rates, c1, c2)
    return capped_latency(rates, c1, c2, _lift(curve.cap, rps), wait_scale=curve.wait_scale)


def admit_unmeasured_limit(curve, top, limit=None, *, largest_batch=np.nan):
    """A copy of ``curve`` whose ceiling is the admitted limit (``limit`` draws, or
    :func:`admitted_limit` of the curve itself) above ``top``, its highest fitted rate
    (scalar or one per k), and whose latency above ``top`` ends there. ``curve`` itself
    where ``top`` is unknown, where the curve already admits one, or where its cost arrays
    hold several k at once for a law other than eq. (1) (those answer with the law's
    ceiling)."""
    if curve is None or is_admitting(curve):
        return curve
    top_array = np.asarray(top, dtype=float)
    if not np.all(np.isfinite(top_array)) or not np.all(top_array > 0):
        return curve
    law = np.asarray(curve.ceiling, dtype=float)
    if law.ndim != 1 and type(curve) is not Curve:
        return curve
    if limit is None:
        limit = admitted_limit(curve, top_array, largest_batch)
    limit = np.broadcast_to(np.asarray(limit, dtype=float), law.shape)
    admitted = copy.copy(curve)
    if type(curve) is Curve:
        return _as_cap(admitted, law, top_array, limit)
    admitted.__class__ = _admitting_class(type(curve))
    admitted.law_ceiling = law
    admitted._top = np.broadcast_to(top_array, law.shape)
    admitted._limit = np.minimum(np.where(np.isfinite(limit), limit, law), law)
    return admitted


class AdmittedCapCurve(Curve):
    """Eq. (1) (or its slot queue) whose unmeasured limit acts as what it is: a cap of
    N_lim requests per draw, the smaller of it and the engine's own. Below the limit's
    knee the latency is the law's; it bends only near the admitted ceiling, so a server
    that follows the law past the top fitted rate stays inside the answer."""

    law_ceiling: np.ndarray | None = None
    _top: np.ndarray
    _law_binding: str = "1/C2"
    _own_cap: np.ndarray | None = None

    @property
    def ceiling_binding(self) -> str:
        return self._law_binding

    @property
    def has_fluid_run(self) -> bool:
        return True

    @property
    def engine_cap(self) -> np.ndarray | None:
        """The engine's own cap (None where unknown), not the admitted one."""
        return self._own_cap

    def _fitted(self) -> Curve:
        law = copy.copy(self)
        law.__class__, law.cap = Curve, self._own_cap
        return law

    def _lifted(self, rps: np.ndarray):
        own = np.broadcast_to(np.inf if self._own_cap is None else self._own_cap,
                              np.shape(self.c2))
        return (_lift(self.c1, rps), _lift(self.c2, rps), _lift(own, rps),
                _lift(self.cap, rps), _lift(self._top, rps))

    def latency(self, rps) -> np.ndarray:
        """The fitted law up to the top fitted rate (the data's evidence is untouched);
        above it the law times the admitted cap's queueing factor, counted from the top
        (1 there, so the curve is continuous; it grows only near the admitted limit)."""
        from bayesspec.laws import capped_latency

        rps = np.asarray(rps, dtype=float)
        if self.cap is None:
            return self._fitted().latency(rps)
        c1, c2, own, cap, top = self._lifted(rps)
        scale = self.wait_scale
        fitted = capped_latency(rps, c1, c2, own, wait_scale=scale)
        shape = np.broadcast_shapes(np.shape(fitted), np.shape(rps), np.shape(top))
        value = fitted     # a new array of the law's: written in place above the top
        if not isinstance(value, np.ndarray) or value.shape != shape:
            value = np.array(np.broadcast_to(fitted, shape), dtype=float)
        above_top = np.broadcast_to(~(rps <= top), shape)
        if not above_top.any():
            return value
        # the admitted cap's queue only where it is read: above the top fitted rate
        where = np.nonzero(above_top) if above_top.ndim else above_top
        at = [_gathered(np.asarray(v, dtype=float), where)
              for v in (rps, c1, c2, cap, scale, _lift(self._queueing_at_top(), rps))]
        fitted_above = value[where]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            queueing = capped_latency(*at[:4], wait_scale=at[4]) / fitted_above
            above = fitted_above * queueing / at[5]
        value[where] = np.where(np.isnan(above), np.inf, above)
        return value

    def _queueing_at_top(self) -> np.ndarray:
        """The admitted cap's queueing factor at the top fitted rate (per draw, the cost
        arrays' shape), once per curve: every latency above the top divides by it."""
        cached = self.__dict__.get("_at_top")
        if cached is None:
            from bayesspec.laws import capped_latency

            c1, c2 = (np.broadcast_to(np.asarray(v, dtype=float), np.shape(self.c2))
                      for v in (self.c1, self.c2))
            own = np.broadcast_to(np.inf if self._own_cap is None else self._own_cap,
                                  np.shape(self.c2))
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                cached = (capped_latency(self._top, c1, c2, self.cap, wait_scale=self.wait_scale)
                          / capped_latency(self._top, c1, c2, own, wait_scale=self.wait_scale))
            self.__dict__["_at_top"] = cached
        return cached

    def amplification(self, rps, curve: np.ndarray) -> np.ndarray:
        rps = np.asarray(rps, dtype=float)
        fitted = self._fitted().amplification(rps, curve)
        if self.cap is None:
            return fitted
        capped = Curve.amplification(self, rps, curve)
        return np.where(rps > _lift(self._top, rps), capped, fitted)


def _as_cap(curve, law, top, limit):
    """``curve`` (a plain :class:`Curve` copy) capped at the batch whose full throughput is
    ``limit`` per draw, where that is below the law's ceiling."""
    binding = curve.ceiling_binding
    c1 = np.broadcast_to(np.asarray(curve.c1, dtype=float), law.shape)
    c2 = np.broadcast_to(np.asarray(curve.c2, dtype=float), law.shape)
    limit = np.minimum(np.where(np.isfinite(limit), limit, law), law)
    batch = np.where(limit < law, _batch_at(limit, c1, c2), np.inf)
    own = np.full(law.shape, np.inf) if curve.cap is None else np.asarray(curve.cap, float)
    cap = np.fmin(own, batch)
    curve.__class__ = AdmittedCapCurve
    curve._own_cap = curve.cap
    curve.cap = None if not np.any(np.isfinite(cap)) else cap
    curve.law_ceiling = law
    curve._top = np.broadcast_to(top, law.shape)
    curve._law_binding = binding
    return curve


# --------------------------------------------------------------------------- a fit's answers

def catalog_largest_batch(verifier, gpu, drafter, prefill, decode, k=0,
                          catalog=None) -> float:
    """The largest batch the catalog's cards allow: the KV cache that fits next to the
    verifier's (and drafter's) weights on the GPU, over a running request's footprint
    with its k lookahead slots (:func:`bayesspec.laws.kv_tokens_per_request`); nan where
    a card is missing or the weights do not fit on one GPU."""
    from bayesspec.data.catalog import default_catalog, kv_cache_tokens_estimate
    from bayesspec.laws import kv_tokens_per_request

    if not verifier or not gpu:
        return float("nan")
    catalog = default_catalog() if catalog is None else catalog
    verifier_card, gpu_card = catalog.find_model(str(verifier)), catalog.find_gpu(str(gpu))
    if verifier_card is None or gpu_card is None:
        return float("nan")
    drafter_card = catalog.find_model(str(drafter)) if drafter and int(k) > 0 else None
    tokens = kv_cache_tokens_estimate(verifier_card, gpu_card, drafter_card)
    footprint = float(kv_tokens_per_request(prefill, decode, k))
    if tokens is None or not np.isfinite(footprint) or footprint <= 0:
        return float("nan")
    return float(tokens) / footprint


class _LargestBatch:
    """The largest batch of a fit's configurations where the engine's cap is unknown,
    from the catalog (loaded only when asked: most fits know their cap)."""

    def __init__(self, fit):
        self.fit = fit
        self._cache: dict = {}

    def _setup(self, rows) -> dict:
        data = self.fit.data
        values = {}
        for column in ("verifier", "drafter", "prefill_tokens", "decode_tokens"):
            values[column] = rows[column].iloc[0] if column in rows.columns else None
        labels = set(rows["label"].astype(str))
        gpu = None
        if "gpu" in data.columns and "group" in data.columns:
            seen = data.loc[data["group"].astype(str).isin(labels), "gpu"].dropna()
            gpu = str(seen.iloc[0]) if len(seen) else None
        values["gpu"] = gpu
        return values

    def __call__(self, rows, k) -> float:
        if rows is None or not len(rows):
            return float("nan")
        k = int(k)
        key = (tuple(rows["label"].astype(str)), k)
        if key not in self._cache:
            setup = self._setup(rows)
            try:
                self._cache[key] = catalog_largest_batch(
                    setup["verifier"], setup["gpu"], setup["drafter"],
                    float(setup["prefill_tokens"]), float(setup["decode_tokens"]), k)
            except (TypeError, ValueError):
                self._cache[key] = float("nan")
        return self._cache[key]


def _fit_memo(fit, name: str, source) -> dict:
    """A memo kept on ``fit`` (or any object) while it is about ``source`` (every law of
    a fit shares it), or a new one where the object takes no attributes."""
    kept = getattr(fit, name, None)
    if kept is None or kept[0] is not source:
        kept = (source, {})
        try:
            setattr(fit, name, kept)
        except AttributeError:
            pass
    return kept[1]


def _largest(fit):
    batch = getattr(fit, "_largest_batch", None)
    if batch is None:
        batch = _LargestBatch(fit)
        try:
            fit._largest_batch = batch
        except AttributeError:
            pass
    return batch


#: Words in a set-aside point's reason saying its rate was past what the configuration
#: sustains (the data layer's saturation reasons): a bound on the ceiling from above.
PAST_CEILING_WORDS = ("ceiling", "stopped rising", "of target", "preempt")


def seen_rates(data, labels) -> tuple[float, float]:
    """(the highest rate a throughput run of these groups completed, the lowest target
    rate of an open-loop point of theirs set aside as past the ceiling), nan where none:
    what the data say of the ceiling beyond the fitted points."""
    if data is None or "group" not in data.columns or "excluded" not in data.columns:
        return float("nan"), float("nan")
    rows = data[data["group"].astype(str).isin({str(v) for v in labels})
                & data["excluded"].astype(bool)]
    if not len(rows):
        return float("nan"), float("nan")
    strategy = (rows["strategy"].astype(str).str.lower() if "strategy" in rows.columns
                else rows["rps"].map(lambda _: ""))
    rates = pd.to_numeric(rows["rps"], errors="coerce")
    throughput = rates[strategy.eq("throughput")]
    floor = float(throughput.max()) if throughput.notna().any() else float("nan")
    reason = (rows["exclusion_reason"].astype(str).str.lower()
              if "exclusion_reason" in rows.columns else strategy.map(lambda _: ""))
    past = ~strategy.isin(["throughput", "synchronous", "concurrent"]) & reason.map(
        lambda text: any(word in text for word in PAST_CEILING_WORDS))
    target = (pd.to_numeric(rows["rps_target"], errors="coerce")
              if "rps_target" in rows.columns else rates * np.nan)
    target = target.where(target > 0, rates)[past]
    bound = float(target.min()) if target.notna().any() else float("nan")
    return floor, bound


def answering_curve(fit, group: int, curve):
    """``curve`` of fitted group ``group`` as answers read it: its ceiling admits an
    unmeasured limit above the group's highest fitted rate."""
    top = float(getattr(curve, "rps_fitted_max", np.nan))
    if not np.isfinite(top) or is_admitting(curve):
        return curve
    cap = getattr(curve, "cap", None)
    largest = np.nan
    if cap is None or not np.all(np.isfinite(cap)):
        rows = fit.groups.iloc[[group]]
        largest = _largest(fit)(rows, int(rows["k"].iloc[0]) if "k" in rows.columns else 0)
    floor, bound = seen_rates(fit.data, [fit.groups["label"].iloc[group]])
    return admit_unmeasured_limit(curve, top, admitted_limit(curve, top, largest, floor=floor,
                                                             bound=bound))


def answering_metric_curve(fit, group: int, curve, mean_curve):
    """A latency summary's curve whose ceiling is its mean law's admitted one."""
    mean = answering_curve(fit, group, mean_curve)
    if not is_admitting(mean):
        return curve
    return admit_unmeasured_limit(curve, mean._top, mean.ceiling)


_LAW_CLASSES: dict[type, type] = {}


def _admitting_law_class(base: type) -> type:
    if base in _LAW_CLASSES:
        return _LAW_CLASSES[base]

    class AdmittingLaw(base):
        """A law whose curves' ceilings admit an unmeasured limit above what was
        measured of each configuration."""

        _mean_law = None
        _largest = None
        _setup_rows = None
        _data = None
        _seen_by_label = None

        @property
        def dense(self):
            curve = base.dense.fget(self)
            cached = self.__dict__.get("_admitted_dense")
            if cached is not None and cached[0] is curve:
                return cached[1]
            top = self.configuration_fitted_max(None, 0)
            mean = curve if self._mean_law is None else self._mean_law.dense
            floor, bound = self._seen_of([curve.label])
            admitted = admit_unmeasured_limit(curve, top, admitted_limit(
                mean, top, self._largest_of(0, mean), floor=floor, bound=bound))
            self.__dict__["_admitted_dense"] = (curve, admitted)
            return admitted

        def sd(self, alpha, k):
            curve = base.sd(self, alpha, k)
            ks = np.asarray(k)
            if ks.ndim:
                top = np.array([self.configuration_fitted_max(alpha, int(v)) for v in
                                ks.ravel()], dtype=float).reshape((1,) + ks.shape)
            else:
                top = self.configuration_fitted_max(alpha, int(k))
            if not np.all(np.isfinite(top)):
                return curve
            mean = curve if self._mean_law is None else self._mean_law.sd(alpha, k)
            largest = self._largest_of(int(np.max(ks)), mean)
            seen = [self._seen_of(self._labels_of(alpha, int(v)))
                    for v in np.atleast_1d(ks).ravel()]
            floor, bound = (np.array(v, dtype=float).reshape(np.shape(top)) for v in zip(*seen))
            return admit_unmeasured_limit(curve, top, admitted_limit(
                mean, top, largest, floor=floor, bound=bound))

        def _cache(self, name: str, source) -> dict:
            """A memo of this law's (answers ask for the same configurations' curves
            many times over), kept only while it is about ``source``."""
            return _fit_memo(self, name, source)

        def _seen_of(self, labels) -> tuple[float, float]:
            """:func:`seen_rates` of the groups ``labels``, from each group's alone
            (the highest floor and the lowest bound of theirs)."""
            cache = (self._seen_by_label if self._seen_by_label is not None
                     else self._cache("_seen_memo", self._data))
            floors, bounds = [], []
            for label in (str(v) for v in labels):
                if label not in cache:
                    cache[label] = seen_rates(self._data, [label])
                floor, bound = cache[label]
                floors += [] if np.isnan(floor) else [floor]
                bounds += [] if np.isnan(bound) else [bound]
            return (max(floors) if floors else float("nan"),
                    min(bounds) if bounds else float("nan"))

        def _labels_of(self, alpha, k: int) -> list[str]:
            cache = self._cache("_labels_by_configuration", self._setup_rows)
            key = (None if alpha is None else float(alpha), int(k))
            if key not in cache:
                cache[key] = self._find_labels(alpha, k)
            return list(cache[key])

        def _find_labels(self, alpha, k: int) -> list[str]:
            rows = self._setup_rows
            if rows is None or "alpha" not in rows.columns:
                return []
            columns = self._cache("_setup_columns", rows)
            if not columns:
                columns.update(
                    alpha=pd.to_numeric(rows["alpha"], errors="coerce").to_numpy(float),
                    k=rows["k"].to_numpy(int),
                    label=np.array(rows["label"].astype(str).tolist(), dtype=object))
            alphas = columns["alpha"]
            same = columns["k"] == int(k)
            if alpha is not None and np.isfinite(float(alpha)):
                same &= np.isnan(alphas) | (np.abs(alphas - float(alpha)) < 1e-9)
            return columns["label"][same].tolist()

        def _largest_of(self, k: int, curve) -> float:
            cap = getattr(curve, "cap", None)
            if self._largest is None or (cap is not None and np.all(np.isfinite(cap))):
                return float("nan")
            rows = self._setup_rows
            if rows is None:
                return float("nan")
            chosen = rows[rows["k"].to_numpy(int) > 0] if k > 0 else rows[
                rows["k"].to_numpy(int) == 0]
            return self._largest(chosen if len(chosen) else rows, k)

    AdmittingLaw.__name__ = AdmittingLaw.__qualname__ = f"Admitting{base.__name__}"
    _LAW_CLASSES[base] = AdmittingLaw
    return AdmittingLaw


def answering_law(fit, law, mean_law=None):
    """A copy of ``law`` (one setup of ``fit``) whose dense and SD curves admit an
    unmeasured limit above what was measured of each configuration; ``mean_law``: the
    setup's mean law where ``law`` is a latency summary's (the limit is the mean's)."""
    if isinstance(law, tuple(_LAW_CLASSES.values())):
        return law
    admitted = copy.copy(law)
    admitted.__class__ = _admitting_law_class(type(law))
    admitted._last_speedups = None
    admitted._mean_law = mean_law
    admitted._largest = _largest(fit)
    groups = fit.groups
    rows = groups
    if law.has_dense and "setup" in groups.columns:
        same = groups["label"].astype(str) == str(law._dense.label)
        if same.any():
            rows = groups[groups["setup"] == groups.loc[same, "setup"].iloc[0]]
    admitted._setup_rows = rows
    admitted._data = fit.data
    admitted._seen_by_label = _fit_memo(fit, "_seen_by_label", admitted._data)
    return admitted
