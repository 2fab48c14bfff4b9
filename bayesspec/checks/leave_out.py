"""Posterior predictive checks that a fitted model predicts what it was not shown.

``leave_out_check`` (``bayesspec check DATA --leave-out N``): hold out N of the
(prefill, decode) combinations (every single one for N = 1; seeded random subsets for
N > 1), or whole verifiers (``--leave-out-model``), refit the hierarchical model on the
rest and predict the held-out points (a point marked ``whole_run`` as a new run of its
``n_requests``, as the rate hold-out does; each point's prediction is the predictive
median, its interval and elpd the predictive's). The model is compiled once with a
``fit_mask`` data array; a fold changes the mask only (nutpie ``with_data``), so a fold
costs one sampling run. Held-out groups keep their parameters in the model with no data,
so their posterior is exactly the predictive distribution of an unmeasured
configuration: trends plus the learned spreads.

``prior_predictive_check``: the share of observed points inside the prior predictive
intervals (do the physics-informed priors admit the data?).

PSIS-LOO helpers (``loo_summary``, ``compare_models``) live here too: they are the
in-sample counterpart of the leave-n-out check.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace

import numpy as np
import pandas as pd

from bayesspec.bayes import MODEL_CLASSES, get_model_class
from bayesspec.bayes.base import whole_run_requests
from bayesspec.errors import BadInput
from bayesspec.inference import SamplerSettings, convergence_verdict, settings_for, stacked_draws
from bayesspec.inference.fitfile import Fit
from bayesspec.outputs import log
from bayesspec.inference.parallel import Recipe, sample_many

PARETO_K_LIMIT = 0.7


def combination_folds(cells: pd.DataFrame, leave_out: int, folds: int | None,
                      seed: int) -> list[list[tuple[int, int]]]:
    """Held-out (prefill, decode) combinations per fold."""
    combos = sorted({(int(p), int(g)) for p, g in zip(cells["prefill_tokens"],
                                                      cells["decode_tokens"])})
    if leave_out < 1:
        raise BadInput(f"must be >= 1, got {leave_out}", argument="leave_out")
    if leave_out >= len(combos):
        raise BadInput(f"{leave_out} leaves nothing to fit: the data hold "
                       f"{len(combos)} (prefill, decode) combinations", argument="leave_out")
    if leave_out == 1 and folds is None:
        return [[c] for c in combos]
    from math import comb

    rng = np.random.default_rng(seed)
    # Distinct subsets: a repeated fold adds time, not information.
    count = min(folds or 10, comb(len(combos), leave_out))
    chosen: list[tuple[int, ...]] = []
    while len(chosen) < count:
        subset = tuple(sorted(rng.choice(len(combos), leave_out, replace=False)))
        if subset not in chosen:
            chosen.append(subset)
    return [[combos[i] for i in subset] for subset in chosen]


def r_squared(observed: np.ndarray, predicted: np.ndarray) -> float:
    observed, predicted = np.asarray(observed, float), np.asarray(predicted, float)
    ok = np.isfinite(observed) & np.isfinite(predicted)
    if ok.sum() < 2:
        return float("nan")
    residual = np.sum((observed[ok] - predicted[ok]) ** 2)
    total = np.sum((observed[ok] - observed[ok].mean()) ** 2)
    return float(1.0 - residual / total) if total > 0 else float("nan")


def _holdout_model(model: str, config: dict, data: pd.DataFrame, catalog):
    """The model every fold refits (built in each worker from these arguments)."""
    return get_model_class(model)(config, catalog=catalog).build(data)


def leave_out_check(data: pd.DataFrame, *, model: str = "hierarchical", leave_out: int = 1,
                    folds: int | None = None, verifiers: list[str] | None = None,
                    by_verifier: bool = False, seed: int = 0, prob: float = 0.9,
                    settings: SamplerSettings | None = None, config: dict | None = None,
                    progress: bool = True, catalog=None, workers: int = 1,
                    scheduler=None) -> dict:
    """The CONTRACT ``check`` document (plus per-point predictions under ``_points``).

    ``settings`` left unset take the model's defaults (as ``bayesspec fit`` does).
    ``workers`` > 1 samples the folds in that many processes, ``scheduler`` (an address
    or a ``distributed.Client``) on a Dask cluster (:mod:`bayesspec.inference.parallel`)."""
    if not get_model_class(model).predicts_unseen_configurations:
        able = [name for name, cls in MODEL_CLASSES.items()
                if cls.predicts_unseen_configurations]
        raise BadInput(f"check needs a model that predicts configurations it was not fitted "
                       f"on ({', '.join(able)}), got '{model}'", argument="model")
    latency_model = get_model_class(model)({**(config or {}), "holdout_mask": True},
                                           catalog=catalog)
    settings = settings_for(latency_model, settings)
    latency_model.build(data)   # the parent needs the inputs (rows, groups, cells)
    inputs = latency_model.inputs
    rows, groups = inputs.rows, inputs.groups
    cells = inputs.extras["cells"]
    group_of_point = inputs.group_index
    cell_of_point = groups["cell_index"].to_numpy(int)[group_of_point]

    if by_verifier:
        systems = inputs.extras["systems"]
        names = verifiers or list(systems["verifier"].astype(str))
        known = {v.lower(): i for i, v in enumerate(systems["verifier"].astype(str))}
        fold_sets = []
        for name in names:
            if name.lower() not in known:
                raise BadInput(f"no verifier '{name}' in the data; have "
                               f"{', '.join(systems['verifier'].astype(str))}",
                               argument="verifiers")
            fold_sets.append(("verifier", name, np.flatnonzero(
                cells["system_index"].to_numpy(int) == known[name.lower()])))
        if len(systems) < 2:
            raise BadInput("holding out verifiers needs data with at least two",
                           argument="verifiers")
    else:
        fold_sets = []
        for combos in combination_folds(cells, leave_out, folds, seed):
            held = np.flatnonzero([(int(p), int(g)) in combos for p, g in
                                   zip(cells["prefill_tokens"], cells["decode_tokens"])])
            fold_sets.append(("combinations", [list(c) for c in combos], held))

    started = time.perf_counter()
    rps = rows["rps"].to_numpy(float)
    observed = rows["latency_mean_s"].to_numpy(float)
    log_se = inputs.extras["log_se"]
    run_requests = whole_run_requests(rows)
    rng = np.random.default_rng(seed)
    decision = latency_model.decision_variables()

    fold_sets = [f for f in fold_sets if np.isin(cell_of_point, f[2]).any()]
    masks = [np.ones(len(rows))] + [(~np.isin(cell_of_point, held)).astype(float)
                                    for _, _, held in fold_sets]
    recipe = Recipe(f"check-{uuid.uuid4().hex}", _holdout_model,
                    (model, {**(config or {}), "holdout_mask": True}, data, catalog))
    where = (f"on {scheduler}" if scheduler is not None else
             f"in {workers} worker processes" if workers > 1 else "here")
    log(f"reference fit on all {len(rows)} points and {len(fold_sets)} folds, {where} "
        "(the model compiles once per worker)...", progress)
    trees = {}
    for index, result in sample_many(recipe, [{"fit_mask": m} for m in masks],
                                     replace(settings, progress=False), workers=workers,
                                     scheduler=scheduler):
        if isinstance(result, str):
            raise RuntimeError(f"sampling fold {index} failed: {result}")
        trees[index] = result
        log(f"sampled {len(trees)}/{len(masks)} fits, "
            f"{time.perf_counter() - started:.0f} s elapsed", progress and index > 0)
    full_tree = trees[0]
    full_c1 = stacked_draws(full_tree, "C1").mean(axis=0)
    full_c2 = stacked_draws(full_tree, "C2").mean(axis=0)
    full_cell = {n: stacked_draws(full_tree, f"cell_{n}").mean(axis=0)
                 for n in ("c2p", "c2v")}

    tail = (1 - prob) / 2
    point_records, per_fold, trend_pairs = [], [], []
    for number, (kind, what, held_cells) in enumerate(fold_sets):
        held_points = np.isin(cell_of_point, held_cells)
        fold_started = time.perf_counter()
        tree = trees[number + 1]
        verdict = convergence_verdict(tree, decision)
        fold = Fit.from_sampling(latency_model, data, tree)
        index = np.flatnonzero(held_points)
        held_groups = np.unique(group_of_point[index])
        fold_records = []
        for g in held_groups:
            members = index[group_of_point[index] == g]
            curve = latency_model.group_curve(fold, int(g))
            mean = curve.latency(rps[members])
            # a held-out point that is a whole run from an idle server is predicted as a
            # new run of its own request count (finite near the ceiling), as the rate
            # hold-out does; its point prediction is the predictive median, never a mean
            # that draws next to a pole would dominate
            runs = run_requests[members]
            predictive = curve.predictive(rps[members], rng, log_se[members],
                                          run_requests=runs)
            lpd = curve.log_predictive_density(rps[members], observed[members],
                                               log_se[members], run_requests=runs)
            with np.errstate(invalid="ignore"):
                predicted = np.median(predictive, axis=0)
                lo, hi = np.nanquantile(predictive, [tail, 1 - tail], axis=0)
            for j, i in enumerate(members):
                fold_records.append({
                    "fold": number, "group": str(groups["label"].iloc[g]),
                    "rps": float(rps[i]), "observed_s": float(observed[i]),
                    "predicted_s": float(predicted[j]), "lo": float(lo[j]),
                    "hi": float(hi[j]),
                    "inside": bool(lo[j] <= observed[i] <= hi[j]), "lpd": float(lpd[j]),
                    "p_saturated": float(np.mean(~np.isfinite(mean[:, j])))})
        c1_fold = stacked_draws(tree, "C1").mean(axis=0)
        c2_fold = stacked_draws(tree, "C2").mean(axis=0)
        cell_fold = {n: stacked_draws(tree, f"cell_{n}").mean(axis=0) for n in ("c2p", "c2v")}
        for g in held_groups:
            trend_pairs.append(("C1", full_c1[g], c1_fold[g]))
            trend_pairs.append(("C2", full_c2[g], c2_fold[g]))
        for c in held_cells:
            for n in ("c2p", "c2v"):
                trend_pairs.append((n, full_cell[n][c], cell_fold[n][c]))
        point_records += fold_records
        fold_points = pd.DataFrame(fold_records)
        inside = fold_points["inside"].to_numpy(bool)
        per_fold.append({
            "held_out": what, "kind": kind, "points": int(len(fold_points)),
            "r2": r_squared(fold_points["observed_s"], fold_points["predicted_s"]),
            "coverage": float(inside.mean()), "elpd": float(fold_points["lpd"].sum()),
            "rhat_max": verdict["rhat_max"], "ess_bulk_min": verdict["ess_bulk_min"],
            "divergences": verdict["divergences"], "converged": verdict["converged"],
            "convergence": verdict["status"], "convergence_text": verdict["text"],
            "seconds": round(tree.attrs.get("sampling_seconds", 0.0)
                             + time.perf_counter() - fold_started, 2)})
        log(f"fold {len(per_fold)}/{len(fold_sets)}: held out {what}: coverage "
            f"{inside.mean():.2f}, R^2 {per_fold[-1]['r2']:.4f}, {verdict['status']}, "
            f"{time.perf_counter() - started:.0f} s elapsed", progress)

    points = pd.DataFrame(point_records)
    trends = pd.DataFrame(trend_pairs, columns=["quantity", "full_fit", "held_out_fit"])
    trend_r2 = {q: r_squared(t["full_fit"], t["held_out_fit"])
                for q, t in trends.groupby("quantity", sort=False)}
    unconverged = [f for f in per_fold if f["convergence"] == "not converged"]
    slow = [f for f in per_fold if f["convergence"] == "decisions converged"]
    document = {
        "leave_out": leave_out if not by_verifier else "verifier",
        "folds": len(per_fold), "prob": prob,
        "r2": r_squared(points["observed_s"], points["predicted_s"]),
        "coverage": float(points["inside"].mean()),
        "elpd": float(points["lpd"].sum()),
        "r2_trends": trend_r2,
        "points": int(len(points)),
        "model": model, "seconds": round(time.perf_counter() - started, 1),
        "per_fold": per_fold,
    }
    if unconverged:
        document["warning"] = (f"{len(unconverged)} of {len(per_fold)} folds did not converge "
                               "(see per_fold): their predictions are unreliable; "
                               + unconverged[0]["convergence_text"].split("What to do: ")[-1])
    document["convergence_summary"] = (
        f"{len(per_fold) - len(unconverged)} of {len(per_fold)} folds usable"
        + (f" ({len(slow)} with a slowly mixing pooling parameter, harmless for the "
           "predictions)" if slow else "")
        + (f"; {len(unconverged)} did not converge" if unconverged else ""))
    document["_points"] = points
    return document


def prior_predictive_check(data: pd.DataFrame, *, model: str = "hierarchical",
                           config: dict | None = None, draws: int = 500,
                           seed: int = 0, catalog=None) -> dict:
    """Share of observed log latencies inside the 50/90/99% prior predictive intervals."""
    import logging

    import pymc as pm

    latency_model = get_model_class(model)(config, catalog=catalog)
    pm_model = latency_model.prior_model(data)
    # PyMC logs its own "Sampling: [...]" line at INFO; the verdict below says what counts.
    pymc_log = logging.getLogger("pymc")
    level = pymc_log.level
    pymc_log.setLevel(logging.WARNING)
    try:
        with pm_model:
            prior = pm.sample_prior_predictive(draws=draws, random_seed=seed,
                                               var_names=["log_latency"])
    finally:
        pymc_log.setLevel(level)
    simulated = prior["prior_predictive"]["log_latency"].stack(
        sample=("chain", "draw")).transpose("sample", ...).values
    observed = np.log(latency_model.inputs.rows["latency_mean_s"].to_numpy(float))
    shares = {}
    for prob in (0.5, 0.9, 0.99):
        tail = (1 - prob) / 2
        lo, hi = np.quantile(simulated, [tail, 1 - tail], axis=0)
        shares[str(prob)] = float(np.mean((lo <= observed) & (observed <= hi)))
    return {"model": model, "draws": draws, "points": int(observed.size),
            "physics_priors": bool(getattr(latency_model, "physics", False)),
            "inside": shares, **prior_verdict(shares["0.99"], int(observed.size))}


#: The priors admit the data when at least this share of the points lies inside their
#: 99% prior predictive interval.
PRIOR_ADMITS = 0.95


def prior_verdict(inside_99: float, points: int) -> dict:
    """``admits`` and a ``verdict`` line from the share of points inside the 99% prior
    predictive interval."""
    if inside_99 >= PRIOR_ADMITS:
        return {"admits": True,
                "verdict": f"the priors admit the data: {inside_99:.0%} of the {points} "
                           "points lie inside the 99% prior predictive interval"}
    return {"admits": False,
            "verdict": f"PRIORS EXCLUDE THE DATA: only {inside_99:.0%} of the {points} points "
                       "lie inside the 99% prior predictive interval (at least "
                       f"{PRIOR_ADMITS:.0%} should): check the units (--units rpm|ms), the "
                       "verifier and GPU names (the catalog centres the priors), or fit a "
                       "model with wider priors (--model dense)"}


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
