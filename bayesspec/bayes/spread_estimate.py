"""How far the verifiers' c2p stray from the trend, against how well each is measured:
a quick moment estimate, made before the fit, that chooses how the hierarchical model
parameterises c2p's verifier deviations.

Centring a member's deviation pays when its data pin it down more tightly than the
spread between members (then the centred form has no funnel and the non-centred form a
ridge); where the spread is smaller than what the data can resolve, the non-centred form
does. Measured (docs/findings/sampler-geometry.md, "The hierarchical model, from funnels
to conditional coordinates", 2026-12-03): on the bundled simulator data the verifiers'
c2p do stray from the roofline trend and centred c2p deviations mixed 1.5x better; on
sweeps generated from the trends themselves (spread zero) centred c2p deviations gave 31
divergences at 1k rows and the non-centred ones none.

The estimate needs no model: the law is linear in the reciprocal, 1/L = 1/C1 - RPS C2/C1,
so a weighted line through each dense sweep gives its C2; within a verifier the cells'
C2 = c2p + g c2v is linear in four coefficients (c2p = A + B p, c2v = E + F (p + g/2),
the trend's own covariates), which gives the verifier's c2p at the typical prefill with a
standard error; across verifiers a two-rate trend c0 + c1 Pv p leaves residuals whose
excess variance over the standard errors is the spread.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from bayesspec.laws.trends import covariates


@dataclass(frozen=True)
class SpreadEstimate:
    """c2p's between-verifier log spread against its typical log standard error."""

    spread: float             # moment estimate of the log spread (0 when none is seen)
    measurement_error: float  # root-mean-square log standard error of a verifier's c2p
    verifiers: int            # verifiers that entered the estimate

    def centre(self, prior_scale: float, resolution: float = 3.0) -> bool | None:
        """Centre the deviations when a verifier's c2p is measured ``resolution`` times
        finer than the typical spread (the larger of the estimated one and the prior's
        scale); None when no dense sweep measured any verifier's c2p.

        Why the prior's scale counts: the spread's prior keeps it near that scale unless
        many verifiers say otherwise, and a moment estimate from a handful of verifiers
        is rough. The factor 3 sits between the designs measured: the bundled data's
        c2p is measured to 0.8% (a tenth of the prior's 8%: centred better), the
        trend-generated sweeps' to 5-8% (non-centred better)."""
        if not np.isfinite(self.measurement_error):
            return None
        return self.measurement_error * resolution < max(self.spread, prior_scale)

    def as_record(self) -> dict:
        return {"spread": self.spread, "measurement_error": self.measurement_error,
                "verifiers": self.verifiers}


def _sweep_c2(rps: np.ndarray, latency: np.ndarray) -> tuple[float, float] | None:
    """C2 and its variance from a line through 1/L against RPS, weighted for a constant
    relative noise of L."""
    if len(rps) < 3 or np.ptp(rps) <= 0:
        return None
    y = 1.0 / latency
    w = 1.0 / y**2
    X = np.column_stack([np.ones_like(rps), rps])
    XtW = X.T * w
    gram = XtW @ X
    try:
        inverse = np.linalg.inv(gram)
    except np.linalg.LinAlgError:
        return None
    a, b = inverse @ (XtW @ y)
    if a <= 0 or b >= 0:
        return None
    residual = y - X @ np.array([a, b])
    sigma2 = float(w @ residual**2) / max(len(y) - 2, 1)
    cov = inverse * sigma2
    c2 = -b / a
    grad = np.array([b / a**2, -1.0 / a])
    return float(c2), float(grad @ cov @ grad)


def c2p_spread(rows: pd.DataFrame, groups: pd.DataFrame,
               group_index: np.ndarray) -> SpreadEstimate:
    """The moment estimate from the dense sweeps (k = 0) of prepared model inputs (their
    rows are the included ones already)."""
    from scipy import optimize

    rps_all = rows["rps"].to_numpy(float)
    latency_all = rows["latency_mean_s"].to_numpy(float)
    cells = []
    for g in np.flatnonzero(~groups["is_sd"].to_numpy(bool)):
        member = group_index == g
        fitted = _sweep_c2(rps_all[member], latency_all[member])
        if fitted is None:
            continue
        cells.append({"system": groups["system"].iloc[g],
                      "verifier_b": float(groups["verifier_b"].iloc[g]),
                      "p": float(groups["prefill_tokens"].iloc[g]) / 1000.0,
                      "g": float(groups["decode_tokens"].iloc[g]) / 1000.0,
                      "c2": fitted[0], "var": fitted[1]})
    if not cells:
        return SpreadEstimate(0.0, float("inf"), 0)
    cells = pd.DataFrame(cells)
    typical_p = float(np.median(cells["p"]))
    values, errors, sizes = [], [], []
    for _, own in cells.groupby("system", sort=False):
        lengths = covariates(0.0, 0.0, 1000.0 * own["p"], 1000.0 * own["g"])
        X = np.column_stack([np.ones(len(own)), own["p"], own["g"],
                             own["g"] * lengths["context_k"]])
        if len(own) <= X.shape[1] or np.linalg.matrix_rank(X) < X.shape[1]:
            continue
        w = 1.0 / np.maximum(own["var"].to_numpy(), 1e-300)
        gram = (X.T * w) @ X
        inverse = np.linalg.pinv(gram)
        beta = inverse @ ((X.T * w) @ own["c2"].to_numpy())
        residual = own["c2"].to_numpy() - X @ beta
        # Cells stray from the verifier's own line too (their deviations): scale by the
        # residual variance when it exceeds the sweeps' own errors.
        scale = max(1.0, float(w @ residual**2) / (len(own) - X.shape[1]))
        at = np.array([1.0, typical_p, 0.0, 0.0])
        value = float(at @ beta)
        if value <= 0:
            continue
        values.append(value)
        errors.append(float(np.sqrt(at @ inverse @ at * scale)) / value)
        sizes.append(float(own["verifier_b"].iloc[0]))
    n = len(values)
    if n < 3:
        # Too few verifiers for a spread beside a two-rate trend: the errors alone.
        return SpreadEstimate(0.0, float(np.sqrt(np.mean(np.square(errors))))
                              if errors else float("inf"), n)
    log_value, error, size = np.log(values), np.array(errors), np.array(sizes)

    def residuals(log_rates):
        c0, c1 = np.exp(log_rates)
        return log_value - np.log(c0 + c1 * size * typical_p)

    start = np.log([max(np.min(values) / 2, 1e-12),
                    max(np.median(np.array(values) / (size * typical_p)), 1e-12)])
    fit = optimize.least_squares(residuals, start)
    rss = float(np.sum(fit.fun**2))
    excess = rss / (n - 2) - float(np.mean(error**2))
    return SpreadEstimate(float(np.sqrt(max(excess, 0.0))),
                          float(np.sqrt(np.mean(error**2))), n)
