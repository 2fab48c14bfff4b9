"""Tail and per-phase latency: percentiles of end-to-end latency, TTFT and ITL, fitted
jointly with the mean law.

Serving SLOs are set on p90/p99 of TTFT and of inter-token latency, not on the mean.
Per fitted group (a configuration: dense, or SD at one (alpha, k)) the mean latency
follows eq. (1), L = C1/(1 - x), x = RPS*C2, exactly as in the dense model. Each
latency summary m the data report (``latency_p99_s``, ``ttft_p90_s``, ``itl_p99_s``, ...)
follows

    q_m(RPS) = A_m (1 - x)^(-gamma_m)        (:func:`bayesspec.laws.percentile_latency_expr`)

with the *same* x: every summary diverges at the saturation rate 1/C2 of the mean (the
queue is unstable there), each with its own zero-load value A_m = C1 exp(offset_m) and
its own pace gamma_m (1: grows like the mean; > 1: a waiting-time tail; < 1: dominated by
a load-free part such as prompt processing or the spread of output lengths). Offsets
and log-exponents are partially pooled per metric across groups; each metric has its own
log-normal noise (plus its own sampling error growing near saturation); a load
point's rate error is shared by its mean and all its summaries (one run) and is
marginalised in closed form (:func:`shared_error_logp`).

Answers: ``metric_curve(fit, g, metric)`` (a :class:`~bayesspec.prediction.MetricCurve`)
and ``law(fit, selection, metric=...)``, so that ``speedup``/``crossover --metric`` and
``slo`` use the same decision code as the mean.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt

from ..errors import BadInput
from ..laws import latency_expr, load_amplification_expr, percentile_latency_expr
from ..prediction import MetricCurve, Noise
from ..schema import METRIC_COLUMNS, metric_description
from .dense import DenseLatencyModel
from .priors import latency_likelihood

#: Where a metric's zero-load value sits relative to C1 before the data speak: TTFT and
#: ITL are about one step, C1 is about decode_tokens steps.
PER_STEP_PREFIXES = ("ttft", "itl")
#: The decode length assumed for that centre when the data do not give one.
FALLBACK_DECODE_TOKENS = 256


def _observed(rows: pd.DataFrame, column: str) -> np.ndarray:
    if column not in rows.columns:
        return np.zeros(len(rows), dtype=bool)
    values = pd.to_numeric(rows[column], errors="coerce").to_numpy(float)
    return np.isfinite(values) & (values > 0)


def shared_error_logp(residual, slope, own, spread, point, weight, n_points: int):
    """Log density of residuals r_j = slope_j * e_p + n_j, n_j ~ Normal(0, own_j)
    independent, e_p ~ Normal(0, spread_p) shared by the observations j of point p
    (p = ``point[j]``), with e marginalised: per point a Normal with covariance
    diag(own) + spread * slope slope^T, evaluated by the Sherman-Morrison and
    determinant-lemma identities. ``weight`` (0/1 per observation) leaves held-out
    observations out."""
    scaled = weight * slope / own
    cross = pt.inc_subtensor(pt.zeros(n_points)[point], scaled * residual)
    energy = pt.inc_subtensor(pt.zeros(n_points)[point], scaled * slope)
    quadratic = pt.sum(weight * residual**2 / own) - pt.sum(spread * cross**2
                                                            / (1.0 + spread * energy))
    log_det = pt.sum(weight * pt.log(own)) + pt.sum(pt.log1p(spread * energy))
    count = pt.sum(weight * pt.ones_like(residual))
    return -0.5 * (quadratic + log_det + count * np.log(2 * np.pi))


class TailLatencyModel(DenseLatencyModel):
    name = "tails"
    version = "1"
    default_config = {
        **DenseLatencyModel.default_config,
        "offset_scale": 2.0,         # prior sd of log A around log C1 + the metric's centre
        "exponent_log_scale": 0.5,   # prior sd of log(gamma) around 0
        "tail_noise_median": 0.03,
        "rate_error_median": 0.01,   # a point's relative error in the rate its run felt   # a percentile of ~1000 requests scatters more than a mean
    }

    # ------------------------------------------------------------------ data
    def prepare(self, data: pd.DataFrame):
        inputs = super().prepare(data)
        rows, groups = inputs.rows, inputs.groups
        metrics = [m for m, column in METRIC_COLUMNS.items() if _observed(rows, column).any()]
        if not metrics:
            raise BadInput("the tails model needs at least one latency percentile, TTFT or "
                           "ITL column (e.g. latency_p99_s, ttft_p99_s, itl_p99_s); these "
                           "data have none", argument="model")
        points, metric_index, values = [], [], []
        for m, metric in enumerate(metrics):
            column = METRIC_COLUMNS[metric]
            seen = _observed(rows, column)
            points.append(np.flatnonzero(seen))
            metric_index.append(np.full(int(seen.sum()), m))
            values.append(pd.to_numeric(rows[column], errors="coerce").to_numpy(float)[seen])
            groups[f"observed_{metric}"] = np.bincount(inputs.group_index[seen],
                                                       minlength=len(groups))
        decode = (pd.to_numeric(groups["decode_tokens"], errors="coerce").to_numpy(float)
                  if "decode_tokens" in groups.columns else np.full(len(groups), np.nan))
        decode = np.where(np.isfinite(decode) & (decode > 0), decode, FALLBACK_DECODE_TOKENS)
        centre = np.array([[-np.log(decode[g]) if metric.startswith(PER_STEP_PREFIXES) else 0.0
                            for g in range(len(groups))] for metric in metrics])
        inputs.extras.update(metrics=metrics, tail_point=np.concatenate(points),
                             tail_metric=np.concatenate(metric_index),
                             tail_values=np.concatenate(values), offset_centre=centre)
        return inputs

    def empty_model(self, data: pd.DataFrame):
        inputs, model = super().empty_model(data)
        model.add_coord("metric", inputs.extras["metrics"])
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
        })
        return arrays

    # ------------------------------------------------------------------ model
    def build(self, data: pd.DataFrame) -> pm.Model:
        inputs, model = self.empty_model(data)
        cfg = self.config
        n_groups = len(inputs.groups)
        with model:
            data = self.add_data(inputs)
            log_c1, utilisation = self.group_costs(data, n_groups)
            c1, c2 = pt.exp(log_c1), utilisation / data["rps_max"]
            latency_likelihood(c1, c2, cfg, data)
            log_scale, log_exponent = self._tail_parameters(
                log_c1, data["offset_centre"], n_groups)
            scale = pm.Deterministic("tail_scale", pt.exp(log_scale), dims=("metric", "group"))
            exponent = pm.Deterministic("tail_exponent", pt.exp(log_exponent),
                                        dims=("metric", "group"))
            noise = pm.LogNormal("tail_noise", np.log(cfg["tail_noise_median"]),
                                 cfg["noise_log_sd"], dims="metric")
            noise_tail_load = pm.LogNormal("tail_noise_load", np.log(cfg["noise_load_median"]),
                                           cfg["noise_log_sd"])
            point, metric = data["tail_point"], data["tail_metric"]
            group = data["group_index"][point]
            rps = data["rps"][point]
            gamma = exponent[metric, group]
            log_q = pt.log(percentile_latency_expr(rps, scale[metric, group], c2[group], gamma,
                                                   xp=pt))
            # The rate error a run felt is one and the same for its mean and for all its
            # summaries (the mean's likelihood carries it as noise_load * x/(1-x)):
            # counted as independent noise per summary it would be counted once per
            # column and make C2 overconfident (measured on data generated from the law:
            # 75% coverage of 90% intervals of C2 with two summaries). The summaries'
            # likelihood is therefore their law given the mean's residual: linear in the
            # shared error, Gaussian, marginalised in closed form (no latent per point).
            # Their own sampling error also grows near saturation (tail_noise_load).
            g_mean = data["group_index"]
            slope_mean = load_amplification_expr(data["rps"], c2[g_mean])
            residual_mean = data["observed_log_latency"] - pt.log(
                latency_expr(data["rps"], c1[g_mean], c2[g_mean]))
            rate_error = model["noise_load"]
            own_mean = model["noise_base"] ** 2 + data["log_se"] ** 2
            total_mean = own_mean + (rate_error * slope_mean) ** 2
            shift = rate_error**2 * slope_mean * residual_mean / total_mean  # E[error | mean]
            spread = rate_error**2 * own_mean / total_mean                   # Var[error | mean]
            slope = gamma * slope_mean[point]
            own = noise[metric] ** 2 + (gamma * noise_tail_load * slope_mean[point]) ** 2
            residual = data["observed_log_tail"] - log_q - slope * shift[point]
            weight = (data["fit_mask"][point] > 0) if "fit_mask" in data else 1.0
            pm.Potential("log_tail", shared_error_logp(residual, slope, own, spread, point,
                                                       weight, len(inputs.rows)))
        return model

    def _tail_parameters(self, log_c1, centre, n_groups: int):
        """Per (metric, group): log A (the zero-load value) around log C1 plus the
        metric's centre, and log gamma around 0 (gamma = 1: the summary grows like the
        mean).

        Not pooled across groups: every measured (metric, group) has a whole sweep that
        pins A and gamma down, and the groups of one metric agree closely (the ITL of
        every configuration is about C1/decode_tokens), which makes a learned spread a
        funnel (measured: hundreds of divergences at 4 groups, centred or not). The
        coordinate is log A itself, not its offset from log C1: an offset coordinate
        would be correlated with C1 in every metric at once."""
        cfg = self.config
        log_scale = pm.Normal("tail_log_scale", log_c1[None, :] + centre, cfg["offset_scale"],
                              dims=("metric", "group"))
        log_exponent = pm.Normal("tail_exponent_log", 0.0, cfg["exponent_log_scale"],
                                 dims=("metric", "group"))
        return log_scale, log_exponent

    def posterior_variables(self) -> list[str]:
        return super().posterior_variables() + ["tail_noise"]

    # ------------------------------------------------------------------ prediction contract
    def decision_variables(self) -> list[str]:
        return super().decision_variables() + ["tail_scale", "tail_exponent", "tail_noise"]

    def metrics(self, fit) -> list[str]:
        return [str(m) for m in fit.posterior["tail_scale"].coords["metric"].values]

    def metric_curve(self, fit, group: int, metric: str) -> MetricCurve:
        self.check_metric(fit, metric)
        row = fit.groups.iloc[group]
        label = str(row["label"])
        if int(row.get(f"observed_{metric}", 0)) < 2:
            raise BadInput(f"group '{label}' has fewer than two measured points of "
                           f"{metric_description(metric)} ({METRIC_COLUMNS[metric]}); its law "
                           "would be the prior's", argument="metric")

        def pick(name):
            values = fit.posterior[name].sel(metric=metric).isel(group=group)
            return np.asarray(values.stack(sample=("chain", "draw")).values, dtype=float)

        exponent = pick("tail_exponent")
        noise_scale = fit.posterior["tail_noise"].sel(metric=metric)
        noise = Noise(np.asarray(noise_scale.stack(sample=("chain", "draw")).values, float),
                      exponent * fit.draws("noise_load"))
        return MetricCurve(pick("tail_scale"), fit.draws("C2", group), exponent,
                           metric=metric, label=f"{label} {metric}", group=label,
                           noise=noise)

    def comparable_parameters(self, fit) -> dict[str, dict[str, np.ndarray]]:
        families = super().comparable_parameters(fit)
        labels = fit.groups["label"].tolist()
        for metric in self.metrics(fit):
            observed = fit.groups.get(f"observed_{metric}")
            keep = [g for g in range(len(labels)) if observed is None or observed.iloc[g] >= 2]
            families[f"{metric} exponent"] = {
                labels[g]: self.metric_curve(fit, g, metric).exponent for g in keep}
        return families
