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
from ..lazymodule import lazy_module

pm, pt = lazy_module("pymc"), lazy_module("pytensor.tensor")  # loaded on first use
import xarray as xr

from ..errors import BadInput
from ..laws import latency_expr, load_amplification_expr, percentile_latency_expr
from ..prediction import MetricCurve, Noise
from ..schema import METRIC_COLUMNS, metric_description
from .dense import DenseLatencyModel
from .priors import latency_likelihood, soft_utilisation_cap

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


class TailLatencyModel(DenseLatencyModel):
    name = "tails"
    version = "1"
    default_config = {
        **DenseLatencyModel.default_config,
        "offset_scale": 2.0,         # prior sd of log A around log C1 + the metric's centre
        "exponent_log_scale": 0.5,   # prior sd of log(gamma) around 0
        "tail_noise_median": 0.03,   # a percentile of ~1000 requests scatters more than a mean
        # Summaries fitted when the data have them: the tails SLOs are set on. Medians and
        # means of fixed-length requests are near-copies of the mean latency that add
        # nothing to it but a second opinion on its noise (measured: bimodal noise
        # scales on the README walkthrough with all 14); name them here to fit them.
        "metrics": ("p90", "p99", "ttft_p90", "ttft_p99", "itl_p90", "itl_p99"),
        # True: the mean's noise_base is also a run effect shared with the summaries (the
        # fuller model of one run; bimodal noise scales on the fixed-length README sweeps,
        # where the mean law and the summaries disagree on curvature), so off by default.
        "shared_run_effect": False,
        # False: every summary grows exactly like the mean (gamma = 1), the candidate a
        # free exponent is compared with (benchmarks/slo_truth.py).
        "free_exponent": True,
        # Log-sd of a summary's saturation cost around the mean's C2 (0: the same C2).
        "saturation_spread": 0.1,
    }

    # ------------------------------------------------------------------ data
    def prepare(self, data: pd.DataFrame):
        inputs = super().prepare(data)
        rows, groups = inputs.rows, inputs.groups
        unknown = set(self.config["metrics"]) - set(METRIC_COLUMNS)
        if unknown:
            raise BadInput(f"unknown metric(s) {sorted(unknown)}; known: "
                           f"{', '.join(METRIC_COLUMNS)}", argument="metrics")
        metrics = [m for m in METRIC_COLUMNS if m in self.config["metrics"]
                   and _observed(rows, METRIC_COLUMNS[m]).any()]
        if not metrics:
            raise BadInput("the tails model needs at least one latency percentile, TTFT or "
                           "ITL column among "
                           f"{', '.join(METRIC_COLUMNS[m] for m in self.config['metrics'])};"
                           " these data have none", argument="model")
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
            if cfg["saturation_spread"] > 0:
                # Each summary's own saturation cost, near the mean's: within the data A
                # and gamma absorb a small shift, beyond them it widens the prediction.
                shift = cfg["saturation_spread"] * pm.Normal(
                    "tail_saturation_z", 0.0, 1.0, dims=("metric", "group"))
                c2_tail = pm.Deterministic("tail_C2", c2[None, :] * pt.exp(shift),
                                           dims=("metric", "group"))
                c2_summary = soft_utilisation_cap(rps, c2_tail[metric, group])
            else:
                c2_summary = c2[group]
            log_q = pt.log(percentile_latency_expr(rps, scale[metric, group], c2_summary, gamma,
                                                   xp=pt))
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
            # its own is tail_noise, and its sampling error near saturation,
            # tail_noise_load.
            g_mean = data["group_index"]
            slope_mean = load_amplification_expr(data["rps"], c2[g_mean])
            residual_mean = data["observed_log_latency"] - pt.log(
                latency_expr(data["rps"], c1[g_mean], c2[g_mean]))
            run_sd = model["noise_base"] if cfg["shared_run_effect"] else 0.0
            (shift_rate, shift_run), covariance = shared_run_errors(
                residual_mean, slope_mean, run_sd, model["noise_load"], data["log_se"] ** 2)
            slope = gamma * slope_mean[point]
            own = noise[metric] ** 2 + (gamma * noise_tail_load * slope_mean[point]) ** 2
            residual = (data["observed_log_tail"] - log_q - slope * shift_rate[point]
                        - shift_run[point])
            weight = (data["fit_mask"][point] > 0) if "fit_mask" in data else 1.0
            by_point = shared_errors_logp(residual, (slope, pt.ones_like(slope)), own,
                                          covariance, point, weight, len(inputs.rows),
                                          per_point=True)
            pm.Potential("log_tail", pt.sum(by_point))
            # Kept per load point for PSIS-LOO over the summaries (with the mean's
            # pointwise log-likelihood it is the joint density of each point).
            pm.Deterministic("log_tail_point", by_point, dims="point")
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
        if not cfg["free_exponent"]:
            return log_scale, pt.zeros_like(log_scale)
        log_exponent = pm.Normal("tail_exponent_log", 0.0, cfg["exponent_log_scale"],
                                 dims=("metric", "group"))
        return log_scale, log_exponent

    def posterior_variables(self) -> list[str]:
        return super().posterior_variables() + ["tail_noise"]

    # ------------------------------------------------------------------ prediction contract
    def decision_variables(self) -> list[str]:
        return super().decision_variables() + ["tail_scale", "tail_exponent", "tail_noise"]

    def joint_loo(self, fit):
        """PSIS-LOO over load points of the mean and its summaries together (each point's
        log p(mean) + log p(summaries | mean)): what compares two tails models fitted to
        the same data. (``compare-models`` compares on the mean alone, which any model
        has.)"""
        import arviz as az

        from ..inference import add_log_likelihood

        add_log_likelihood(fit)
        joint = fit.tree["log_likelihood"]["log_latency"] + fit.posterior["log_tail_point"]
        tree = xr.DataTree.from_dict({"posterior": fit.posterior,
                                      "log_likelihood": xr.Dataset({"joint": joint})})
        return az.loo(tree, var_name="joint")

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
        c2 = pick("tail_C2") if "tail_C2" in fit.posterior else fit.draws("C2", group)
        curve = MetricCurve(pick("tail_scale"), c2, exponent,
                            metric=metric, label=f"{label} {metric}", group=label,
                            noise=noise)
        curve.rps_fitted_max = float(row["rps_max"])
        return curve

    def comparable_parameters(self, fit) -> dict[str, dict[str, np.ndarray]]:
        families = super().comparable_parameters(fit)
        labels = fit.groups["label"].tolist()
        for metric in self.metrics(fit):
            observed = fit.groups.get(f"observed_{metric}")
            keep = [g for g in range(len(labels)) if observed is None or observed.iloc[g] >= 2]
            families[f"{metric} exponent"] = {
                labels[g]: self.metric_curve(fit, g, metric).exponent for g in keep}
        return families
