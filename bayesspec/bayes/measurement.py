"""The error of each measured mean latency as the file states it: the per-request spread
and request count, the standard error of the log mean they give, the sampling sd of a run
whose requests share the batch, and the request count of a measurement that is a whole
run from an idle server.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayesspec.laws import run_mean_log_sd


def measurement_log_se(rows: pd.DataFrame) -> np.ndarray:
    """Standard error of log(mean latency) from the per-request spread, its requests
    independent (cv/sqrt(n)), 0 when unknown."""
    cv, count = run_spread(rows)
    with np.errstate(invalid="ignore", divide="ignore"):
        se = cv / np.sqrt(count)
    return np.where(np.isfinite(se), se, 0.0)


def run_spread(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per row, what sets the sampling error of its measured mean as one run
    (:func:`bayesspec.laws.run_mean_log_sd`): the per-request spread cv (sd/mean) and the
    request count; NaN where the file does not say."""
    if not {"latency_std_s", "n_requests"} <= set(rows.columns):
        return np.full(len(rows), np.nan), np.full(len(rows), np.nan)
    std = pd.to_numeric(rows["latency_std_s"], errors="coerce").to_numpy(float)
    count = pd.to_numeric(rows["n_requests"], errors="coerce").to_numpy(float)
    return std / rows["latency_mean_s"].to_numpy(float), count


def measured_run_log_sd(rows: pd.DataFrame) -> np.ndarray:
    """Per row, the sampling sd of its log mean latency as one run whose requests share
    the batch (:func:`bayesspec.laws.run_mean_log_sd` at the measured N = RPS x L), 0
    where the file does not give the spread and the count."""
    cv, count = run_spread(rows)
    in_flight = rows["rps"].to_numpy(float) * rows["latency_mean_s"].to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        sd = run_mean_log_sd(cv, count, in_flight)
    return np.where(np.isfinite(sd), sd, 0.0)


def whole_run_requests(rows: pd.DataFrame) -> np.ndarray:
    """Per row, the request count of a measurement that is a whole run from an idle
    server (``whole_run`` true: GuideLLM, ``vllm bench serve``, Vidur), NaN for one from a
    window in a run's steady middle (the simulator's) or where the file does not say.
    A new such measurement is predicted as a finite run
    (:meth:`bayesspec.prediction.Curve.run_latency`)."""
    if not {"whole_run", "n_requests"} <= set(rows.columns):
        return np.full(len(rows), np.nan)
    count = pd.to_numeric(rows["n_requests"], errors="coerce").to_numpy(float)
    whole = rows["whole_run"].fillna(False).astype(bool).to_numpy()
    return np.where(whole, count, np.nan)
