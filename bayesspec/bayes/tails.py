"""Tail and per-phase latency: percentiles of end-to-end latency, TTFT and ITL, fitted
jointly with the mean law (or alone, from a file of percentiles without a mean).

Serving SLOs are set on p90/p99 of TTFT and of inter-token latency, not on the mean.
Per fitted group (a configuration: dense, or SD at one (alpha, k)) the mean latency
follows eq. (1), L = C1 F, F = L/C1 = 1/(1 - RPS*C2) its load factor, exactly as in the
dense model. Each latency summary m (``latency_p99_s``, ``ttft_p90_s``, ``itl_p99_s``,
``latency_p50_s``, ...) follows

    q_m(RPS) = A_m F^gamma_m                  (:func:`bayesspec.laws.percentile_latency_expr`)

with the mean's load factor (its own saturation cost near the mean's): every summary
diverges where the mean does (the queue is unstable there), each with its own zero-load
value A_m and its own pace gamma_m (1: grows like the mean; > 1: a waiting-time tail;
< 1: dominated by a load-free part such as prompt processing or the spread of output
lengths). A law of the mean with another pole (an engine's concurrency cap) carries the
summaries with it through F. With the engine's decode profile the mean is
L = (C1 + shift) F, and q_m = A_m P F^gamma_m with P = (C1 + shift)/C1: the profile's
stretch slows every request alike, so it scales each summary linearly; only the queue's
factor carries the exponent.

With ``tail_law`` "count", the end-to-end latency percentiles (p50, p90, p99, ...) are
read off the mean law itself instead: a request's latency is its own work C1 plus what
the load adds (the stalls of later arrivals' prefills, the slot wait, the profile's
stretch), and that part spreads with how many arrive in its life and how crowded the
batch is then. Its variance is (s0 C1)^2 + d^2 C2 (L - C1) L/C1 (the birth-death
chain's over-dispersed count), and q_m is the quantile of a log-normal of mean L and
that variance (:func:`bayesspec.laws.count_spread_quantile_expr`), with a zero-load
spread s0 and a dispersion d per (summary, group) in place of A and gamma. Its excess
over the mean grows like sqrt(N): p99/mean rises and then flattens, where the power law
carries the early rise on. TTFT and ITL keep the power law.

q_m is the summary of the whole request population at that rate. What a load test
reports is the summary of its n requests (``n_requests``): the sample p-quantile, an
order statistic, which for few requests sits below q_m and scatters widely (a p99 of 13
requests is about their maximum, on average the 92nd percentile). With the per-request
log-latency locally log-normal of spread s around q_m, the reported value is
log q_m + s (W - z_p), W = Phi^-1(U), U ~ Beta(r, n + 1 - r)
(:func:`bayesspec.laws.quantile_sampling_moments`); its mean and variance enter the
likelihood (a bias and a variance per observation). s, the local slope of log latency in
the normal quantile, is read off the data by default (the ``spread`` option, ``data``:
between the lowest and highest percentile each point reports, each at the normal score
its order statistic sits at, pooled per group: :func:`data_spread`), or off the model's
own curves (``model``: (log q_p - log q_p')/(z_p - z_p') between two fitted percentiles
of the same quantity at the point's rate).

Each metric has its own log-normal noise besides (what the law does not capture, plus
its sampling error near saturation); a load point's rate error is shared by its mean and
all its summaries (one run) and is marginalised in closed form
(:func:`shared_errors_logp`).

Answers: ``metric_curve(fit, g, metric)`` (a :class:`~bayesspec.prediction.MetricCurve`)
and ``law(fit, selection, metric=...)``, so that ``speedup``/``crossover --metric``,
``predict --metric`` and ``slo`` use the same decision code as the mean.

Kept whole: one model class with the likelihood blocks only it uses.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from bayesspec.bayes.lazymodule import lazy_module

pm, pt = lazy_module("pymc"), lazy_module("pytensor.tensor")  # loaded on first use
import xarray as xr

from bayesspec.data import has_mean_latency, reference_latency
from bayesspec.data.columns import PERCENTILE_RULE_COLUMN
from bayesspec.errors import BadInput
from bayesspec.inference.fitfile import stacked_samples
from bayesspec.laws import (batch_count_loads,
                    batch_count_quantile_expr, count_spread_quantile_expr, latency_expr,
                    load_amplification_expr, load_elasticity_expr, load_factor_expr,
                    percentile_latency_expr, quantile_sampling_moments, sampled_quantile_error_expr,
                    slot_queue_latency_expr)
from bayesspec.prediction import MetricCurve, Noise, SummarySampling
from bayesspec.data.schema import METRIC_COLUMNS, metric_description, metric_family, metric_quantile
from bayesspec.bayes.dense import DenseLatencyModel, profile_starts
from bayesspec.bayes.caps import CAP_REACH_SUMMARY_TOLERANCE, cap_departure, fitted_cap
from bayesspec.bayes.priors import (CAP_MARGIN, latency_likelihood, profiled_point_c1,
                     soft_utilisation_cap)
from bayesspec.bayes.options import model_defaults

#: Where a metric's zero-load value sits relative to C1 before the data speak: TTFT and
#: ITL are about one step, C1 is about decode_tokens steps.
PER_STEP_PREFIXES = ("ttft", "itl")
#: The decode length assumed for that centre when the data do not give one.
FALLBACK_DECODE_TOKENS = 256
#: Per-request log-latency spread assumed where neither the model's curves nor the data
#: give one (a summary fitted alone, with no other percentile of its quantity and no
#: latency_std_s): 0.25 is the order of the simulator's TTFT and end-to-end spreads with
#: log-normal lengths of cv 0.5.
FALLBACK_SPREAD = 0.25
#: Bounds of a spread read off the model's curves (curves that cross in a draw would
#: give a negative one).
SPREAD_BOUNDS = (0.005, 2.0)


def count_law_metrics(metrics, tail_law: str, has_mean: bool) -> list[int]:
    """Indices of the summaries that follow the count law: the end-to-end latency
    percentiles, when ``tail_law`` is "count" and the mean latency is fitted."""
    if tail_law != "count" or not has_mean:
        return []
    return [m for m, metric in enumerate(metrics)
            if metric_family(metric) == "latency" and np.isfinite(metric_quantile(metric))]


def _observed(rows: pd.DataFrame, column: str) -> np.ndarray:
    if column not in rows.columns:
        return np.zeros(len(rows), dtype=bool)
    values = pd.to_numeric(rows[column], errors="coerce").to_numpy(float)
    return np.isfinite(values) & (values > 0)


def _point_sum(values, point, n_points: int):
    return pt.inc_subtensor(pt.zeros(n_points)[point], values)


def shared_errors_logp(residual, loadings, own, covariance, point, weight, n_points: int,
                       *, per_point: bool = False):
    """Log density of residuals r_j = v_j . e_p + n_j, where n_j ~ Normal(0, own_j) are
    independent and e_p ~ Normal(0, C_p) is a 2-vector shared by the observations j of
    point p = ``point[j]``; e is marginalised: per point a Normal with covariance
    diag(own) + V C V^T, evaluated with the Woodbury and determinant identities in the
    form C (I + G C)^-1, which needs no inverse of C (C may be singular).

    ``loadings``: (v_j1, v_j2); ``covariance``: (C11, C12, C22) per point; ``weight``
    (0/1 per observation) leaves held-out observations out. ``per_point``: the log
    density of each point's observations (n_points,) instead of their sum."""
    v1, v2 = loadings
    c11, c12, c22 = covariance
    scaled = weight / own
    g11 = _point_sum(scaled * v1 * v1, point, n_points)
    g12 = _point_sum(scaled * v1 * v2, point, n_points)
    g22 = _point_sum(scaled * v2 * v2, point, n_points)
    b1 = _point_sum(scaled * v1 * residual, point, n_points)
    b2 = _point_sum(scaled * v2 * residual, point, n_points)
    k11, k12 = 1.0 + g11 * c11 + g12 * c12, g11 * c12 + g12 * c22
    k21, k22 = g12 * c11 + g22 * c12, 1.0 + g12 * c12 + g22 * c22
    det = k11 * k22 - k12 * k21
    y1, y2 = (k22 * b1 - k12 * b2) / det, (k11 * b2 - k21 * b1) / det
    correction = b1 * (c11 * y1 + c12 * y2) + b2 * (c12 * y1 + c22 * y2)
    if per_point:
        quadratic = _point_sum(scaled * residual**2, point, n_points) - correction
        log_det = _point_sum(weight * pt.log(own), point, n_points) + pt.log(det)
        count = _point_sum(weight * pt.ones_like(residual), point, n_points)
        return -0.5 * (quadratic + log_det + count * np.log(2 * np.pi))
    quadratic = pt.sum(scaled * residual**2) - pt.sum(correction)
    log_det = pt.sum(weight * pt.log(own)) + pt.sum(pt.log(det))
    count = pt.sum(weight * pt.ones_like(residual))
    return -0.5 * (quadratic + log_det + count * np.log(2 * np.pi))


def shared_run_errors(residual_mean, slope_mean, run_sd, rate_sd, own_variance_mean):
    """The two errors a load point's run shares between its mean and its summaries (a
    run effect u with slope 1, a relative rate error with slope x/(1-x) times gamma),
    given the mean's residual r0 = slope*rate + u + n0, n0 ~ Normal(0, own_variance_mean):
    their conditional mean (m_rate, m_run) and covariance (C11, C12, C22), Gaussian
    conditioning of the prior diag(rate_sd^2, run_sd^2)."""
    prior_rate, prior_run = rate_sd**2, run_sd**2
    total = prior_rate * slope_mean**2 + prior_run + own_variance_mean
    toward_rate, toward_run = prior_rate * slope_mean / total, prior_run / total
    mean = (toward_rate * residual_mean, toward_run * residual_mean)
    covariance = (prior_rate - prior_rate * slope_mean * toward_rate,
                  -prior_rate * slope_mean * toward_run,
                  prior_run - prior_run * toward_run)
    return mean, covariance


def spread_pairs(metrics: list[str]) -> list[tuple[int, int] | None]:
    """Per fitted metric, the two fitted percentiles of the same quantity (indices into
    ``metrics``, higher quantile first) whose curves give its per-request spread: for a
    percentile its next lower one (a thin sample's percentile sits below its level, where
    that slope applies), else its next higher; for a mean the two lowest; None when the
    quantity has fewer than two fitted percentiles."""
    pairs = []
    for metric in metrics:
        same = sorted((metric_quantile(m), i) for i, m in enumerate(metrics)
                      if metric_family(m) == metric_family(metric)
                      and np.isfinite(metric_quantile(m)))
        if len(same) < 2:
            pairs.append(None)
            continue
        levels = [q for q, _ in same]
        quantile = metric_quantile(metric)
        if not np.isfinite(quantile):
            position = 1
        else:
            position = max(levels.index(quantile), 1)
        pairs.append((same[position][1], same[position - 1][1]))
    return pairs


def data_spread(rows: pd.DataFrame, group_index: np.ndarray, family: str,
                rule: str = "linear") -> np.ndarray:
    """Per row, the per-request log-latency spread of ``family`` (latency, ttft, itl)
    read off the point's own summaries: between the lowest and the highest percentile it
    reports, each at the normal quantile its order statistic sits at on average
    (:func:`~bayesspec.laws.quantile_sampling_moments`: a thin sample's spread is not
    read as narrow), or, for end-to-end latency with only a mean, from latency_std_s (a
    log-normal's). Pooled per group (the median of its points: one thin point's spread
    scatters by tens of percent); :data:`FALLBACK_SPREAD` where a group has none."""
    from scipy.special import ndtri

    columns = [(metric_quantile(m), c) for m, c in METRIC_COLUMNS.items()
               if metric_family(m) == family and np.isfinite(metric_quantile(m))
               and c in rows.columns]
    count = (pd.to_numeric(rows["n_requests"], errors="coerce").to_numpy(float)
             if "n_requests" in rows.columns else np.full(len(rows), np.nan))
    spread = np.full(len(rows), np.nan)
    if len(columns) >= 2:
        values = np.column_stack([pd.to_numeric(rows[c], errors="coerce").to_numpy(float)
                                  for _, c in columns])
        levels = np.array([q for q, _ in columns])
        for i in range(len(rows)):
            seen = np.flatnonzero(np.isfinite(values[i]) & (values[i] > 0))
            if len(seen) < 2:
                continue
            lo, hi = seen[0], seen[-1]
            shift = quantile_sampling_moments(levels[[hi, lo]], count[i], rule)[0]
            distance = (ndtri(levels[hi]) + shift[0]) - (ndtri(levels[lo]) + shift[1])
            if distance > 0.1:
                spread[i] = np.log(values[i, hi] / values[i, lo]) / distance
    if family == "latency" and {"latency_std_s", "latency_mean_s"} <= set(rows.columns):
        cv = (pd.to_numeric(rows["latency_std_s"], errors="coerce").to_numpy(float)
              / pd.to_numeric(rows["latency_mean_s"], errors="coerce").to_numpy(float))
        spread = np.where(np.isnan(spread) & (cv > 0), np.sqrt(np.log1p(cv**2)), spread)
    pooled = np.full(len(rows), FALLBACK_SPREAD)
    for g in np.unique(group_index):
        members = group_index == g
        known = spread[members][np.isfinite(spread[members]) & (spread[members] > 0)]
        if known.size:
            pooled[members] = float(np.median(known))
    return np.clip(pooled, *SPREAD_BOUNDS)


def _summary_draws(fit, name: str, group: int, metric: str, dim: str = "metric") -> np.ndarray:
    """(S,) draws of a per-(metric, group) posterior variable, chains stacked first."""
    values = fit.posterior[name].sel({dim: metric}).isel(group=group)
    return np.asarray(stacked_samples(values), dtype=float)


def _count_draws(fit, group: int, metric: str) -> dict | None:
    """The count law's draws of a summary (``MetricCurve``'s ``count``), or None where
    the summary follows the power law."""
    if "tail_spread" not in fit.posterior or metric not in set(
            fit.posterior["tail_spread"].coords["count_metric"].values):
        return None
    from scipy.special import ndtri

    return {name: _summary_draws(fit, f"tail_{name}", group, metric, dim="count_metric")
            for name in ("spread", "dispersion")} | {"z": float(ndtri(metric_quantile(metric)))}


def _summary_c2(fit, group: int, metric: str) -> np.ndarray:
    """A summary's own saturation cost (the mean's C2 without ``saturation_spread``)."""
    if "tail_C2" in fit.posterior:
        return _summary_draws(fit, "tail_C2", group, metric)
    return fit.draws("C2", group)


class TailLatencyModel(DenseLatencyModel):
    name = "tails"
    version = "3"
    needs_mean_latency = False
    default_config = model_defaults("tails", DenseLatencyModel.default_config)

    #: tails reads its load factor from the Poisson law (the chain has no single N)
    profile_law_with_profile = "poisson"

    # ------------------------------------------------------------------ data
    def prepare(self, data: pd.DataFrame):
        has_mean = has_mean_latency(data)
        if not has_mean:
            # The group scales (rps_max, the latency at the lowest rate) are read off a
            # stand-in; nothing of it enters the likelihood.
            data = data.assign(latency_mean_s=reference_latency(data))
        inputs = super().prepare(data)
        rows, groups = inputs.rows, inputs.groups
        if not has_mean and self.config.get("decode_profile"):
            raise BadInput("the decode profile enters the mean law, and these data have "
                           "percentiles only (no latency_mean_s): drop --decode-profile",
                           option="--decode-profile", file=data.attrs.get("source_file"))
        if not has_mean and "cap_learned" in groups:
            raise BadInput("learning the concurrency cap needs mean latencies (the bend of "
                           "the mean law); these data have percentiles only: state the cap "
                           "(--max-num-seqs / --kv-cache-tokens)", option="--cap-prior",
                           file=data.attrs.get("source_file"))
        if not has_mean and self.config["tail_law"] == "count":
            raise BadInput("tail_law count reads each percentile off the mean law, and these "
                           "data have percentiles only (no latency_mean_s): drop the option",
                           option="--option", file=data.attrs.get("source_file"))
        wanted = list(self.config["metrics"])
        if not has_mean:
            wanted += [m for m in ("p50", "ttft_p50", "itl_p50") if m not in wanted]
        unknown = set(wanted) - set(METRIC_COLUMNS)
        if unknown:
            raise BadInput(f"unknown metric(s) {sorted(unknown)}; known: "
                           f"{', '.join(METRIC_COLUMNS)}", argument="metrics")
        metrics = [m for m in METRIC_COLUMNS if m in wanted
                   and _observed(rows, METRIC_COLUMNS[m]).any()]
        if not metrics:
            raise BadInput("the tails model needs at least one latency percentile, TTFT or "
                           "ITL column among "
                           f"{', '.join(METRIC_COLUMNS[m] for m in wanted)};"
                           " these data have none", argument="model")
        count = (pd.to_numeric(rows["n_requests"], errors="coerce").to_numpy(float)
                 if "n_requests" in rows.columns else np.full(len(rows), np.nan))
        if not self.config["sampling_error"]:
            count = np.full(len(rows), np.nan)
        rule = self.config["quantile_rule"] = self._quantile_rule(rows, data)
        spreads = {family: data_spread(rows, inputs.group_index, family, rule)
                   for family in {metric_family(m) for m in metrics}}
        for family, values in spreads.items():
            first = np.unique(inputs.group_index, return_index=True)[1]
            groups[f"spread_{family}"] = values[first]
        points, metric_index, values, shift, variance, spread = [], [], [], [], [], []
        for m, metric in enumerate(metrics):
            column = METRIC_COLUMNS[metric]
            seen = _observed(rows, column)
            points.append(np.flatnonzero(seen))
            metric_index.append(np.full(int(seen.sum()), m))
            values.append(pd.to_numeric(rows[column], errors="coerce").to_numpy(float)[seen])
            moments = quantile_sampling_moments(metric_quantile(metric), count[seen], rule)
            shift.append(np.broadcast_to(moments[0], (int(seen.sum()),)))
            variance.append(np.broadcast_to(moments[1], (int(seen.sum()),)))
            spread.append(spreads[metric_family(metric)][seen])
            groups[f"observed_{metric}"] = np.bincount(inputs.group_index[seen],
                                                       minlength=len(groups))
        groups["observed_mean"] = (np.bincount(inputs.group_index, minlength=len(groups))
                                   if has_mean else 0)
        decode = (pd.to_numeric(groups["decode_tokens"], errors="coerce").to_numpy(float)
                  if "decode_tokens" in groups.columns else np.full(len(groups), np.nan))
        decode = np.where(np.isfinite(decode) & (decode > 0), decode, FALLBACK_DECODE_TOKENS)
        if has_mean:
            # Around log C1: TTFT and ITL are about one step, C1 about decode_tokens steps.
            centre = np.array([[-np.log(decode[g]) if metric.startswith(PER_STEP_PREFIXES)
                                else 0.0 for g in range(len(groups))] for metric in metrics])
        else:
            centre = self._data_centres(rows, inputs.group_index, len(groups), metrics)
        pairs = spread_pairs(metrics) if self.config["spread"] == "model" else [None] * len(
            metrics)
        inputs.extras.update(
            metrics=metrics, has_mean=has_mean, tail_point=np.concatenate(points),
            tail_metric=np.concatenate(metric_index), tail_values=np.concatenate(values),
            offset_centre=centre, sampling_shift=np.concatenate(shift),
            sampling_variance=np.concatenate(variance), data_spread=np.concatenate(spread),
            spread_pairs=pairs,
            count_metrics=count_law_metrics(metrics, self.config["tail_law"], has_mean))
        if not has_mean:
            inputs.extras["log_se"] = np.zeros(len(rows))
        return inputs

    def _quantile_rule(self, rows: pd.DataFrame, data: pd.DataFrame) -> str:
        """The percentile rule the fit reads its summaries with: the option when set, else
        the rows' ``percentile_rule`` (one rule per fit: a report's percentiles share one)."""
        if self.config["quantile_rule"] != "auto":
            return self.config["quantile_rule"]
        if PERCENTILE_RULE_COLUMN not in rows.columns:
            return self.resolve_auto("quantile_rule", "linear", "no percentile_rule column")
        stated = rows[PERCENTILE_RULE_COLUMN].dropna().astype(str).str.strip()
        rules = sorted(set(stated[stated != ""]))
        if len(rules) > 1:
            raise BadInput(f"the rows' percentiles were computed by different rules "
                           f"({', '.join(rules)}); fit each source on its own or state one "
                           "with --option quantile_rule=...", column=PERCENTILE_RULE_COLUMN,
                           file=data.attrs.get("source_file"))
        rule = rules[0] if rules else "linear"
        return self.resolve_auto("quantile_rule", rule, f"the rows' {PERCENTILE_RULE_COLUMN}"
                                 if rules else "the rows' percentile_rule is blank")

    @staticmethod
    def _data_centres(rows, group_index, n_groups: int, metrics: list[str]) -> np.ndarray:
        """Without a mean (no C1 to centre on): per (metric, group) the log of the
        summary at the group's lowest rate that has it (the metric's median over groups
        for a group without it). A prior of log-sd ``offset_scale`` around it."""
        rps = rows["rps"].to_numpy(float)
        centre = np.full((len(metrics), n_groups), np.nan)
        for m, metric in enumerate(metrics):
            values = pd.to_numeric(rows[METRIC_COLUMNS[metric]], errors="coerce").to_numpy(float)
            seen = np.isfinite(values) & (values > 0)
            for g in range(n_groups):
                members = np.flatnonzero(seen & (group_index == g))
                if members.size:
                    centre[m, g] = np.log(values[members[np.argmin(rps[members])]])
            centre[m] = np.where(np.isnan(centre[m]), np.nanmedian(centre[m]), centre[m])
        return centre

    def empty_model(self, data: pd.DataFrame):
        inputs, model = super().empty_model(data)
        model.add_coord("metric", inputs.extras["metrics"])
        counted = inputs.extras["count_metrics"]
        if counted:
            model.add_coord("count_metric", [inputs.extras["metrics"][m] for m in counted])
        model.add_coord("tail_observation", np.arange(len(inputs.extras["tail_point"])))
        return inputs, model

    def data_arrays(self, inputs):
        arrays = super().data_arrays(inputs)
        extras = inputs.extras
        arrays.update({
            "tail_point": (extras["tail_point"], "tail_observation"),
            "tail_metric": (extras["tail_metric"], "tail_observation"),
            "observed_log_tail": (np.log(extras["tail_values"]), "tail_observation"),
            "offset_centre": (extras["offset_centre"], None),
            "sampling_shift": (extras["sampling_shift"], "tail_observation"),
            "sampling_variance": (extras["sampling_variance"], "tail_observation"),
            "data_spread": (extras["data_spread"], "tail_observation"),
        })
        if not extras["has_mean"]:
            # The stand-in latency is not data: no mean likelihood reads it.
            del arrays["observed_log_latency"], arrays["log_C1_center"]
        return arrays

    # ------------------------------------------------------------------ model
    def build(self, data: pd.DataFrame) -> pm.Model:
        inputs, model = self.empty_model(data)
        cfg = self.config
        n_groups = len(inputs.groups)
        has_mean = inputs.extras["has_mean"]
        with model:
            data = self.add_data(inputs)
            if has_mean:
                log_c1, utilisation = self.group_costs(data, n_groups)
                c1, c2 = pt.exp(log_c1), utilisation / data["rps_max"]
                self.learn_caps(data, c1, c2)
                latency_likelihood(c1, c2, cfg, data)
                centre = log_c1[None, :] + data["offset_centre"]
            else:
                # No mean latency measured: no C1 (its zero-load value), only the
                # saturation cost every summary shares, and the rate error of a run.
                utilisation = pm.math.sigmoid(pm.Normal(
                    "utilisation_logit", cfg["utilisation_logit_mean"],
                    cfg["utilisation_logit_scale"], dims="group"))
                c2 = pm.Deterministic("C2", utilisation / data["rps_max"], dims="group")
                pm.Deterministic("saturation_rps", 1.0 / c2, dims="group")
                pm.LogNormal("noise_load", np.log(cfg["noise_load_median"]),
                             cfg["noise_log_sd"])
                centre = data["offset_centre"]
            log_scale, log_exponent = self._tail_parameters(centre)
            counted = inputs.extras["count_metrics"]
            if counted:
                spread0, dispersion, count_z = self._count_parameters(inputs.extras)
                # The count law's summary at zero load, the law's own value there (its
                # exponent is 1: a rate error moves it as the mean). These summaries'
                # tail_log_scale and tail_exponent_log are left to their priors.
                log_scale = pt.set_subtensor(log_scale[counted], pt.log(
                    count_spread_quantile_expr(c1[None, :], c1[None, :], c2[None, :],
                                               spread0, dispersion, count_z[:, None],
                                               xp=pt)))
                log_exponent = pt.set_subtensor(log_exponent[counted], 0.0)
            scale = pm.Deterministic("tail_scale", pt.exp(log_scale), dims=("metric", "group"))
            exponent = pm.Deterministic("tail_exponent", pt.exp(log_exponent),
                                        dims=("metric", "group"))
            noise = pm.LogNormal("tail_noise", np.log(cfg["tail_noise_median"]),
                                 cfg["noise_log_sd"], dims="metric")
            noise_tail_load = pm.LogNormal("tail_noise_load", np.log(cfg["noise_load_median"]),
                                           cfg["noise_log_sd"])
            point, metric = data["tail_point"], data["tail_metric"]
            group = data["group_index"][point]
            if cfg["saturation_spread"] > 0:
                # Each summary's own saturation cost, near the mean's: within the data A
                # and gamma absorb a small shift, beyond them it widens the prediction.
                shift = cfg["saturation_spread"] * pm.Normal(
                    "tail_saturation_z", 0.0, 1.0, dims=("metric", "group"))
                c2_tail = pm.Deterministic("tail_C2", c2[None, :] * pt.exp(shift),
                                           dims=("metric", "group"))
            else:
                c2_tail = pt.broadcast_to(c2[None, :], (len(inputs.extras["metrics"]),
                                                        n_groups))

            # Every fitted summary's law at every point (metric, point): the observations
            # read their own, the spread reads two of the same quantity.
            every_rps = data["rps"][None, :]
            every_group = data["group_index"]
            c2_summary = soft_utilisation_cap(every_rps, c2_tail[:, every_group])
            capped = has_mean and "cap" in data
            if capped:
                # With the slot queue in the law, a jittered chain can stay in a far mode
                # for the whole run: the README's SLO sweeps, freshly compiled, ended one
                # first pass at R-hat 1.53 (C2, bulk ESS 7) and one retry at 0.99 the same
                # way; started at the mode the same fit converged
                # (docs/findings/sampler-geometry.md, "Other sampler findings", measured
                # 2026-12-05). As dense does with a learned cap.
                self.init = "optimised"
            # With the engine's decode profile the mean law's zero-load latency at a point
            # is C1 plus the profile's shift (as in the mean's likelihood). That stretch
            # slows every request alike, so it scales each summary as it scales the mean;
            # the exponent is the queue's alone (MetricCurve.stretch_and_queue). Carried
            # by the exponent too, it over-predicted the held-out p99s of the A100 70B
            # sweeps, where the profile steps, by 20% (docs/findings/tail-laws.md, "Held-out
            # p99 on Vidur's sets", measured 2026-12-05).
            profiled = has_mean and "profile_knots" in data
            point_c1 = (profiled_point_c1(c1[every_group], c2[every_group], data)
                        if has_mean else None)
            stretch = (point_c1[None, :] / c1[every_group][None, :] if profiled else 1.0)
            queue_factor = eq1_factor = load_factor_expr(every_rps, c2_summary)
            if capped:
                # The slot queue's factor with the engine's cap in the groups that have
                # one, at each summary's own C2.
                at_cap = data["has_cap"][every_group][None, :] > 0
                queue_factor = pt.where(at_cap, slot_queue_latency_expr(
                    every_rps, point_c1[None, :], c2_summary,
                    data["cap"][every_group][None, :],
                    xp=pt, wait_scale=data["wait_scale"][every_group][None, :],
                    soft_margin=CAP_MARGIN) / point_c1[None, :], queue_factor)
            log_q_all = pt.log(percentile_latency_expr(
                queue_factor, scale[:, every_group] * stretch, exponent[:, every_group],
                xp=pt))
            if counted:
                # The end-to-end percentiles off the mean law itself (at the summary's
                # C2), spread by all the load adds to a request's own work C1: the
                # stalls, the slot wait and the profile's stretch too, which varies with
                # the batch each request meets (docs/findings/tail-laws.md, "Held-out p99
                # on Vidur's sets": the count law, measured 2026-12-06).
                own_work = c1[every_group][None, :]
                if cfg["count_dispersion"] == "batch":
                    stall_load, slot_wait = batch_count_loads(
                        own_work, stretch, queue_factor[counted], eq1_factor[counted],
                        xp=pt)
                    counted_q = batch_count_quantile_expr(
                        point_c1[None, :] * queue_factor[counted], own_work,
                        c2_summary[counted], spread0[:, every_group],
                        dispersion[:, every_group], count_z[:, None], stall_load,
                        slot_wait, xp=pt)
                else:
                    counted_q = count_spread_quantile_expr(
                        point_c1[None, :] * queue_factor[counted], own_work,
                        c2_summary[counted],
                        spread0[:, every_group], dispersion[:, every_group],
                        count_z[:, None], xp=pt)
                log_q_all = pt.set_subtensor(log_q_all[counted], pt.log(counted_q))

            # kept for checks of the graph against MetricCurve (not a model variable)
            model.summary_log_law = log_q_all
            gamma = exponent[metric, group]
            log_q = log_q_all[metric, point]
            bias, sampling_variance = sampled_quantile_error_expr(
                self._spread(inputs.extras, data, metric, point, log_q_all),
                data["sampling_shift"], data["sampling_variance"])
            # A load point is one run: its mean and all its summaries share the run's
            # errors, the rate it actually felt (the mean's noise_load * x/(1-x)) and a
            # run effect (the mean's noise_base: a slow stretch moves every summary).
            # Counted as independent noise per summary they would be counted once per
            # column and make C2 overconfident (measured on data generated from the law:
            # 75% coverage of 90% intervals of C2 with two summaries), and near-copies of
            # the mean (p50 of fixed-length requests) would fight it for its noise
            # (bimodal noise scales on the README walkthrough). The summaries'
            # likelihood is their law given the mean's residual, the shared errors
            # marginalised in closed form (no latent per point); what a summary adds of
            # its own is its sampling error as an order statistic, tail_noise, and its
            # sampling error near saturation, tail_noise_load.
            g_mean = data["group_index"]
            slope_mean = load_amplification_expr(data["rps"], c2[g_mean])
            n_points = len(inputs.rows)
            if capped:
                with_cap = data["has_cap"][g_mean] > 0

                def mean_latency(at):
                    return pt.where(with_cap, slot_queue_latency_expr(
                        at, point_c1, c2[g_mean], data["cap"][g_mean], xp=pt,
                        wait_scale=data["wait_scale"][g_mean], soft_margin=CAP_MARGIN),
                        latency_expr(at, point_c1, c2[g_mean]))

                # How a rate error moves the mean (and, times gamma, a summary).
                slope_mean = pt.where(with_cap, load_elasticity_expr(
                    mean_latency, data["rps"], xp=pt), slope_mean)
            elif has_mean:
                def mean_latency(at):
                    return latency_expr(at, point_c1, c2[g_mean])
            if has_mean:
                residual_mean = data["observed_log_latency"] - pt.log(
                    mean_latency(data["rps"]))
                run_sd = model["noise_base"] if cfg["base_noise_shared_with_summaries"] else 0.0
                (shift_rate, shift_run), covariance = shared_run_errors(
                    residual_mean, slope_mean, run_sd, model["noise_load"],
                    data["log_se"] ** 2)
            else:
                # Nothing to condition on: the rate error's prior, shared by the summaries.
                shift_rate = shift_run = pt.zeros(n_points)
                covariance = (pt.ones(n_points) * model["noise_load"] ** 2,
                              pt.zeros(n_points), pt.zeros(n_points))
            slope = gamma * slope_mean[point]
            own = (noise[metric] ** 2 + (gamma * noise_tail_load * slope_mean[point]) ** 2
                   + sampling_variance)
            residual = (data["observed_log_tail"] - log_q - bias - slope * shift_rate[point]
                        - shift_run[point])
            weight = (data["fit_mask"][point] > 0) if "fit_mask" in data else 1.0
            by_point = shared_errors_logp(residual, (slope, pt.ones_like(slope)), own,
                                          covariance, point, weight, n_points,
                                          per_point=True)
            pm.Potential("log_tail", pt.sum(by_point))
            # Kept per load point for PSIS-LOO over the summaries (with the mean's
            # pointwise log-likelihood it is the joint density of each point).
            pm.Deterministic("log_tail_point", by_point, dims="point")
        if has_mean and cfg["decode_profile"]:
            model.chain_starts = profile_starts(inputs)  # as dense's
        return model

    @staticmethod
    def _spread(extras: dict, data, metric, point, log_q_all):
        """Per tail observation, the per-request log-latency spread s around its
        summary: from the fitted curves of two percentiles of the same quantity at the
        point's rate where the metric has such a pair (``spread_pairs``), from the data
        otherwise."""
        pairs = extras["spread_pairs"]
        if not any(pairs):
            return data["data_spread"]
        from scipy.special import ndtri

        metrics = extras["metrics"]
        upper = np.array([p[0] if p else i for i, p in enumerate(pairs)])
        lower = np.array([p[1] if p else i for i, p in enumerate(pairs)])
        levels = np.array([metric_quantile(m) for m in metrics])
        distance = np.where(upper != lower, ndtri(levels[upper]) - ndtri(levels[lower]), 1.0)
        paired = np.array([p is not None for p in pairs])
        from_curves = ((log_q_all[pt.as_tensor(upper)[metric], point]
                        - log_q_all[pt.as_tensor(lower)[metric], point])
                       / pt.as_tensor(distance)[metric])
        return pt.where(pt.as_tensor(paired)[metric], pt.clip(from_curves, *SPREAD_BOUNDS),
                        data["data_spread"])

    def _tail_parameters(self, centre):
        """Per (metric, group): log A (the zero-load value) around ``centre`` (log C1
        plus the metric's centre, or the data's value without a mean), and log gamma
        around 0 (gamma = 1: the summary grows like the mean).

        Not pooled across groups: every measured (metric, group) has a whole sweep that
        pins A and gamma down, and the groups of one metric agree closely (the ITL of
        every configuration is about C1/decode_tokens), which makes a learned spread a
        funnel (measured: hundreds of divergences at 4 groups, centred or not). The
        coordinate is log A itself, not its offset from log C1: an offset coordinate
        would be correlated with C1 in every metric at once."""
        cfg = self.config
        log_scale = pm.Normal("tail_log_scale", centre, cfg["offset_scale"],
                              dims=("metric", "group"))
        if not cfg["free_exponent"]:
            return log_scale, pt.zeros_like(log_scale)
        log_exponent = pm.Normal("tail_exponent_log", 0.0, cfg["exponent_log_scale"],
                                 dims=("metric", "group"))
        return log_scale, log_exponent

    def _count_parameters(self, extras: dict):
        """The count law's zero-load spread and dispersion per (count metric, group), and
        each count metric's normal score."""
        from scipy.special import ndtri

        cfg = self.config
        spread0 = pm.LogNormal("tail_spread", np.log(cfg["count_spread_median"]),
                               cfg["count_spread_log_sd"], dims=("count_metric", "group"))
        dispersion = pm.LogNormal("tail_dispersion", 0.0, cfg["count_dispersion_log_sd"],
                                  dims=("count_metric", "group"))
        levels = np.array([metric_quantile(extras["metrics"][m])
                           for m in extras["count_metrics"]])
        return spread0, dispersion, pt.as_tensor(ndtri(levels))

    def posterior_variables(self) -> list[str]:
        return super().posterior_variables() + ["tail_noise"]

    # ------------------------------------------------------------------ prediction contract
    def decision_variables(self) -> list[str]:
        return super().decision_variables() + ["tail_scale", "tail_exponent", "tail_noise",
                                               "tail_spread", "tail_dispersion"]

    def joint_loo(self, fit):
        """PSIS-LOO over load points of the mean and its summaries together (each point's
        log p(mean) + log p(summaries | mean); the summaries alone without a mean): what
        compares two tails models fitted to the same data. (``compare-models`` compares
        on the mean alone, which any other model has.)"""
        import arviz as az

        from bayesspec.inference import add_log_likelihood

        joint = fit.posterior["log_tail_point"]
        if self.has_mean(fit):
            add_log_likelihood(fit)
            joint = fit.tree["log_likelihood"]["log_latency"] + joint
        tree = xr.DataTree.from_dict({"posterior": fit.posterior,
                                      "log_likelihood": xr.Dataset({"joint": joint})})
        return az.loo(tree, var_name="joint")

    def metrics(self, fit) -> list[str]:
        return [str(m) for m in fit.posterior["tail_scale"].coords["metric"].values]

    def has_mean(self, fit) -> bool:
        """Whether the fitted data measured mean latency (a file of percentiles alone
        did not: then only the summaries have laws)."""
        return "C1" in fit.posterior

    def cap_departures(self, fit, group: int, rps) -> list[tuple[np.ndarray, float]]:
        """The mean's, and each summary's: its queue factor at its own saturation cost,
        to the power of its exponent (the likelihood's law of it without a profile)."""
        if not self.has_mean(fit):
            return []
        found = super().cap_departures(fit, group, rps)
        row = fit.groups.iloc[group]
        c1 = fit.draws("C1", group)
        for metric in self.metrics(fit):
            found.append((cap_departure(rps, c1, _summary_c2(fit, group, metric),
                                        float(row["cap"]), float(row["wait_scale"]),
                                        _summary_draws(fit, "tail_exponent", group, metric)),
                          CAP_REACH_SUMMARY_TOLERANCE))
        return found

    def group_curve(self, fit, group: int):
        if not self.has_mean(fit):
            raise BadInput("this tails fit has no mean latency (its data had percentiles "
                           f"only); ask for a summary it fitted: --metric "
                           f"{' | '.join(self.metrics(fit))}", argument="metric")
        return super().group_curve(fit, group)

    def _raw_curve(self, fit, group: int, metric: str) -> MetricCurve:
        """The law of ``metric`` in ``group`` from its draws, without sampling model."""
        row = fit.groups.iloc[group]
        label = str(row["label"])

        exponent = _summary_draws(fit, "tail_exponent", group, metric)
        noise_scale = fit.posterior["tail_noise"].sel(metric=metric)
        # A new summary's rate error (the run's, shared with the mean) and its own
        # sampling error near saturation both grow with gamma * x/(1-x).
        rate_error = np.sqrt(fit.draws("noise_load") ** 2 + fit.draws("tail_noise_load") ** 2)
        noise = Noise(np.asarray(noise_scale.stack(sample=("chain", "draw")).values, float),
                      exponent * rate_error)
        c2 = _summary_c2(fit, group, metric)
        # With the engine's cap the summaries follow the slot queue's load factor, which
        # needs the mean's C1 (a fit of percentiles alone has none: eq. (1)'s).
        cap = fitted_cap(fit.groups, group, fit) if self.has_mean(fit) else {}
        # With the decode profile, the mean law it shapes carries the summaries too.
        decode_profile = fit.decode_profile(group) if self.has_mean(fit) else None
        profile = (None if decode_profile is None else {
            "batch_sizes": decode_profile[0], "iteration_s": decode_profile[1],
            "decode_tokens": float(row["decode_tokens"])})
        count = _count_draws(fit, group, metric)
        if count is not None:
            count["batch"] = self.config["count_dispersion"] == "batch"
        curve = MetricCurve(_summary_draws(fit, "tail_scale", group, metric), c2, exponent,
                            metric=metric, label=f"{label} {metric}", group=label,
                            noise=noise,
                            mean_c1=(fit.draws("C1", group) if cap or profile or count
                                     else None),
                            profile=profile, count=count, **cap)
        curve.rps_fitted_max = float(row["rps_max"])
        return curve

    def metric_curve(self, fit, group: int, metric: str) -> MetricCurve:
        self.check_metric(fit, metric)
        row = fit.groups.iloc[group]
        label = str(row["label"])
        if int(row.get(f"observed_{metric}", 0)) < 2:
            raise BadInput(f"group '{label}' has fewer than two measured points of "
                           f"{metric_description(metric)} ({METRIC_COLUMNS[metric]}); its law "
                           "would be the prior's", argument="metric")
        curve = self._raw_curve(fit, group, metric)
        curve.sampling = SummarySampling(metric_quantile(metric),
                                         self._spread_of(fit, group, metric),
                                         self.config["quantile_rule"])
        return curve

    def _spread_of(self, fit, group: int, metric: str):
        """``spread(rps)`` of :class:`~bayesspec.prediction.SummarySampling`, as the
        likelihood has it (:meth:`_spread`)."""
        from scipy.special import ndtri

        metrics = self.metrics(fit)
        pair = (spread_pairs(metrics)[metrics.index(metric)]
                if self.config["spread"] == "model" else None)
        if pair is None:
            column = f"spread_{metric_family(metric)}"
            value = (float(fit.groups[column].iloc[group]) if column in fit.groups.columns
                     else FALLBACK_SPREAD)
            return lambda rps: np.full(np.shape(rps), value)
        upper, lower = (self._raw_curve(fit, group, metrics[i]) for i in pair)
        distance = ndtri(metric_quantile(metrics[pair[0]])) - ndtri(metric_quantile(
            metrics[pair[1]]))

        def spread(rps):
            with np.errstate(invalid="ignore", divide="ignore"):
                slope = (np.log(upper.latency(rps)) - np.log(lower.latency(rps))) / distance
            return np.clip(np.nan_to_num(slope, nan=SPREAD_BOUNDS[1]), *SPREAD_BOUNDS)
        return spread

    def comparable_parameters(self, fit) -> dict[str, dict[str, np.ndarray]]:
        families = super().comparable_parameters(fit)
        labels = fit.groups["label"].tolist()
        for metric in self.metrics(fit):
            observed = fit.groups.get(f"observed_{metric}")
            keep = [g for g in range(len(labels)) if observed is None or observed.iloc[g] >= 2]
            curves = {labels[g]: self.metric_curve(fit, g, metric) for g in keep}
            if any(curve.count is not None for curve in curves.values()):
                families[f"{metric} dispersion"] = {
                    label: curve.count["dispersion"] for label, curve in curves.items()}
            else:
                families[f"{metric} exponent"] = {
                    label: curve.exponent for label, curve in curves.items()}
        return families
