"""Leave-one-out by Pareto-smoothed importance sampling (PSIS-LOO): a fit's expected log
predictive density, the comparison of fits of the same data (``az.compare``), and each
fitted point's predictive PIT as if it had been left out.

The in-sample share of points inside an interval asks a curve about points it has
already followed: a model with p effective parameters per n points covers about
P(|Z| < z sqrt((1+h)/(1-h))), h = p/n, even when it is exactly right (0.99 at h = 0.5
for a nominal 0.9), so it cannot show a flexible model's calibration; the left-out share
(``loo_pit``) can. These are the in-sample counterpart of the refit checks of
:mod:`bayesspec.checks.leave_out`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayesspec.errors import BadInput

PARETO_K_LIMIT = 0.7


def loo_summary(fit) -> dict:
    """PSIS-LOO of a fit: ELPD, its SE, p_loo and the Pareto-k warnings."""
    import warnings

    import arviz as az

    from bayesspec.inference import add_log_likelihood

    add_log_likelihood(fit)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loo = az.loo(fit.tree, var_name="log_latency")
    k = np.asarray(loo.pareto_k).ravel()
    bad = int(np.sum(k > PARETO_K_LIMIT))
    out = {"elpd_loo": float(loo.elpd), "se": float(loo.se), "p_loo": float(loo.p),
           "points": int(k.size),
           # NaN when PSIS could not fit a tail (identical draws, e.g. mock sampling)
           "pareto_k_max": float(np.nanmax(k)) if np.isfinite(k).any() else float("nan"),
           "pareto_k_bad": bad}
    if bad:
        out["warning"] = (f"{bad} of {k.size} points have Pareto k > {PARETO_K_LIMIT}: "
                          "PSIS-LOO is unreliable for them (influential points; use "
                          "`bayesspec check` for a refit-based estimate)")
    return out


def _pareto_k(az, tree) -> np.ndarray:
    """PSIS's Pareto k of every point of a fit (empty when PSIS cannot run on it)."""
    try:
        return np.asarray(az.loo(tree, var_name="log_latency").pareto_k, float).ravel()
    except Exception:  # noqa: BLE001 - the comparison stands; only its warning is lost
        return np.array([])


def compare_models(fits: dict) -> dict:
    """az.compare of fits of the same data by PSIS-LOO (names -> Fit)."""
    import warnings

    import arviz as az

    from bayesspec.inference import add_log_likelihood

    sizes = set()
    trees = {}
    for name, fit in fits.items():
        add_log_likelihood(fit)
        sizes.add(int(fit.tree["log_likelihood"]["log_latency"].sizes["point"]))
        trees[name] = fit.tree
    if len(sizes) > 1:
        raise BadInput("compare-models needs fits of the same data points; got "
                       f"{sorted(sizes)} points", argument="fits")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = az.compare(trees, var_name="log_latency")
        # ArviZ 1's table has no warning column: each fit's Pareto k, counted here.
        high_k = {name: _pareto_k(az, tree) for name, tree in trees.items()}
    rows = []
    for name, row in table.iterrows():
        k = high_k[name]
        bad = int(np.sum(k > PARETO_K_LIMIT))
        rows.append({"name": str(name), "rank": int(row["rank"]),
                     "elpd_loo": float(row["elpd"]), "se": float(row["se"]),
                     "elpd_diff": float(row["elpd_diff"]), "dse": float(row["dse"]),
                     "p_loo": float(row["p"]), "weight": float(row["weight"]),
                     "warning": bad > 0, "pareto_k_bad": bad, "points": int(k.size),
                     "pareto_k_max": (float(np.nanmax(k)) if np.isfinite(k).any()
                                      else float("nan"))})
    best, *rest = rows
    verdict = f"{best['name']} is preferred"
    if rest:
        second = rest[0]
        # ArviZ 1 reports the difference of a worse model as negative.
        gap = abs(second["elpd_diff"])
        if second["dse"] > 0:
            ratio = gap / second["dse"]
        else:
            ratio = float("inf") if gap > 0 else 0.0
        verdict += (f" over {second['name']} by {gap:.1f} +- "
                    f"{second['dse']:.1f} elpd" +
                    (" (clear: > 2 SE)" if ratio > 2 else " (within 2 SE: not decisive)"))
    flagged = [row for row in rows if row["warning"]]
    if flagged:
        verdict += ("; but PSIS-LOO is unreliable for " + ", ".join(
            f"{row['pareto_k_bad']} of {row['points']} points of {row['name']}"
            for row in flagged) + f" (Pareto k > {PARETO_K_LIMIT}: influential points), so "
            "the comparison is approximate: compare by refits (`bayesspec check DATA --ppc "
            "--folds 5 --model M`)")
    return {"models": rows, "verdict": verdict}


def _left_out_pit(curve, rps, observed, members, draws) -> dict:
    """``pit_loo`` and ``pareto_k`` of the fitted rows of one group (NaN on held-out rows,
    which the fit never saw: their plain ``pit`` is already out of sample)."""
    from bayesspec.bayes.measurement import measurement_log_se, run_spread

    fitted = ~members["held_out"].to_numpy(bool)
    pit = np.full(len(rps), np.nan)
    k = np.full(len(rps), np.nan)
    if fitted.any():
        # the fit's own likelihood of each point: the steady law, its bounded load term
        # and, where the fit has one, the sweep's run effect
        centre, sigma = curve.measurement(rps, measurement_log_se(members),
                                          measured=np.where(fitted, observed, np.nan),
                                          run_spread=run_spread(members))
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            log_likelihood = curve.noise.log_density(
                np.log(observed)[None, :] - np.log(centre), sigma)
        pit[fitted], k[fitted] = loo_pit(log_likelihood[:, fitted], draws[:, fitted],
                                         observed[fitted])
    return {"pit_loo": pit, "pareto_k": k}


def loo_pit(log_likelihood: np.ndarray, draws: np.ndarray, observed: np.ndarray):
    """Leave-one-out PIT of each observation by Pareto-smoothed importance sampling.

    ``log_likelihood`` (S, R): log density of observation r under posterior draw s;
    ``draws`` (S, R): a predictive draw of a new observation per posterior draw (saturated
    draws ``inf``); ``observed`` (R,). Weighting draw s by 1/p(y_r | s) turns the
    posterior into the posterior without y_r; the PIT is the weighted share of predictive
    draws below y_r. Returns (pit (R,), Pareto k (R,)); above k = 0.7 the weights are
    unreliable for that point (a refit,
    :func:`~bayesspec.checks.leave_out.fold_check`, is then the honest check)."""
    from arviz_stats.base.array import array_stats

    # A draw past its ceiling at a point gives it zero likelihood: an infinite weight
    # without the point. A floor 20 below the point's least finite value keeps the
    # weights finite (a floor at -1e10 would make every other weight underflow to one
    # value, and PSIS fails on a tail of equal values); such a point's Pareto k then says
    # it is unreliable.
    finite = np.isfinite(log_likelihood)
    least = np.min(np.where(finite, log_likelihood, np.inf), axis=0)
    floor = np.where(np.isfinite(least), least - 20.0, -1e3)
    log_likelihood = np.where(finite, log_likelihood, floor[None, :])
    # arviz_stats takes the log-likelihood and returns the log of weights 1/p(y_r | s).
    try:
        log_weights, k = array_stats.psislw(log_likelihood.T, axis=-1)      # (R, S)
    except ValueError:
        # PSIS refuses a tail of equal values (many draws at the floor). Point by point;
        # a point it cannot weight gets no left-out PIT and an infinite k (a refit,
        # fold_check, is the honest check there).
        log_weights = np.full(log_likelihood.T.shape, np.nan)
        k = np.full(log_likelihood.shape[1], np.inf)
        for r in range(log_likelihood.shape[1]):
            try:
                log_weights[r], k[r] = array_stats.psislw(log_likelihood[:, r], axis=-1)
            except ValueError:
                continue
    weights = np.exp(log_weights - log_weights.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    below = np.asarray(draws).T < np.asarray(observed, dtype=float)[:, None]
    return (weights * below).sum(axis=1), np.asarray(k, dtype=float)


def _left_out_coverage(subset: pd.DataFrame, prob: float) -> dict:
    """Share of points whose leave-one-out PIT lies in the central ``prob`` (each point's
    interval as if it had not been fitted) and how many have Pareto k > 0.7."""
    tail = (1.0 - prob) / 2.0
    pit = subset["pit_loo"].to_numpy(float)
    return {"coverage_loo": float(np.mean((tail <= pit) & (pit <= 1.0 - tail))),
            "pareto_k_high": int(np.sum(subset["pareto_k"].to_numpy(float) > 0.7))}
