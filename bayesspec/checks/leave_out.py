"""Held-out checks by refits: the model, compiled once with a ``fit_mask`` data array, is
refitted without each fold and asked about the points it was not shown (a fold changes
the mask only, nutpie ``with_data``, so a fold costs one sampling run).

``leave_out_check`` (``bayesspec check DATA --leave-out N``): hold out N of the
(prefill, decode) combinations (every single one for N = 1; seeded random subsets for
N > 1), or whole verifiers (``--leave-out-model``), refit the hierarchical model on the
rest and predict the held-out points (a point marked ``whole_run`` as a new run of its
``n_requests``, as the rate hold-out does; each point's prediction is the predictive
median, its interval and elpd the predictive's). Held-out groups keep their parameters
in the model with no data, so their posterior is exactly the predictive distribution of
an unmeasured configuration: trends plus the learned spreads.

``fold_check``: every group's rates dealt into interleaved folds, each refitted without
its fold and asked about it: the exact, refit-based version of the left-out PIT of
:mod:`bayesspec.checks.loo`.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace

import numpy as np
import pandas as pd

from bayesspec.bayes import MODEL_CLASSES, get_model_class
from bayesspec.bayes.measurement import whole_run_requests
from bayesspec.checks.calibration import group_calibration, r_squared
from bayesspec.checks.posterior_predictive import predictive_points
from bayesspec.errors import BadInput
from bayesspec.inference import SamplerSettings, convergence_verdict, settings_for, stacked_draws
from bayesspec.inference.fitfile import Fit
from bayesspec.inference.parallel import Recipe, sample_many
from bayesspec.inference.sampling import job_failure
from bayesspec.outputs import log


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


def _holdout_model(model: str, config: dict, data: pd.DataFrame, catalog):
    """The model every fold refits (built in each worker from these arguments, with the
    ``fit_mask`` a fold changes)."""
    return get_model_class(model)(config, catalog=catalog, holdout_mask=True).build(data)


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
    latency_model = get_model_class(model)(config, catalog=catalog, holdout_mask=True)
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
                    (model, config, data, catalog))
    where = (f"on {scheduler}" if scheduler is not None else
             f"in {workers} worker processes" if workers > 1 else "here")
    log(f"reference fit on all {len(rows)} points and {len(fold_sets)} folds, {where} "
        "(the model compiles once per worker)...", progress)
    trees = {}
    for index, result in sample_many(recipe, [{"fit_mask": m} for m in masks],
                                     replace(settings, progress=False), workers=workers,
                                     scheduler=scheduler):
        if isinstance(result, str):
            raise job_failure(result, f"sampling fold {index} failed")
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


def interleaved_folds(rps, group_index, folds: int) -> np.ndarray:
    """A fold number per point: each group's points in order of rate go to folds
    g, g+1, ... (mod ``folds``), so a fold takes every ``folds``-th rate of every group
    (never two neighbours, the top and bottom rates spread over folds)."""
    frame = pd.DataFrame({"rps": np.asarray(rps, dtype=float),
                          "group": np.asarray(group_index, dtype=int)})
    rank = frame.groupby("group")["rps"].rank(method="first").to_numpy(int) - 1
    return (rank + frame["group"].to_numpy(int)) % folds


def fold_check(data: pd.DataFrame, *, model: str = "dense", folds: int = 5,
               prob: float = 0.9, settings=None, config: dict | None = None, catalog=None,
               seed: int = 0, workers: int = 1, scheduler=None, progress: bool = False) -> dict:
    """Held-in coverage by refits: every group's rates dealt into ``folds`` interleaved
    folds (:func:`interleaved_folds`); the model, compiled once with a ``fit_mask``, is
    refitted without each fold and its 90% (``prob``) predictive intervals are asked about
    the left-out points. Unlike the in-sample share this does not reward a curve for
    following the points it was fitted to, and unlike PSIS it has no Pareto-k limit.
    Returns pooled and per-group coverage, each fold's convergence, and ``_points``."""
    if folds < 2:
        raise BadInput(f"needs at least 2 folds, got {folds}", argument="folds")
    if not get_model_class(model).takes_holdout_mask:
        raise BadInput(f"the {model} model cannot refit without some of its points "
                       "(no fit mask)", argument="model")
    latency_model = get_model_class(model)(config, catalog=catalog, holdout_mask=True)
    latency_model.build(data)  # first: a build may choose the starts by the data
    settings = settings_for(latency_model, settings)
    inputs = latency_model.inputs
    fold_of_point = interleaved_folds(inputs.rows["rps"], inputs.group_index, folds)
    values = latency_model.data_values(data)
    recipe = Recipe(f"folds-{uuid.uuid4().hex}", _holdout_model, (model, config, data, catalog))
    started = time.perf_counter()
    log(f"{folds} refits, each without every {folds}th rate of every group...", progress)
    jobs = [({**values, "fit_mask": (fold_of_point != f).astype(float)},
             replace(settings, seed=(settings.seed or 0) + f, progress=False))
            for f in range(folds)]
    parts, per_fold = [], []
    for index, tree in sample_many(recipe, jobs, settings, workers=workers,
                                   scheduler=scheduler):
        if isinstance(tree, str):
            raise job_failure(tree, f"sampling fold {index} failed")
        fit = Fit.from_sampling(latency_model, data, tree)
        points = predictive_points(fit, prob=prob, seed=seed + index)
        points["fold"] = interleaved_folds(points["rps"], points["group"].map(
            {label: g for g, label in enumerate(fit.groups["label"])}), folds)
        left_out = points.loc[points["fold"] == index].drop(columns=["pit_loo", "pareto_k"])
        parts.append(left_out.assign(held_out=True))
        per_fold.append({"fold": index, "points": int(len(left_out)),
                         "coverage": float(left_out["inside"].mean()),
                         "convergence": fit.diagnostics["status"]})
        log(f"fold {len(per_fold)}/{folds}: {left_out['inside'].mean():.0%} of "
            f"{len(left_out)} inside, {time.perf_counter() - started:.0f} s", progress)
    points = pd.concat(parts, ignore_index=True)
    groups = [{"group": g["group"], **g["held_out"], "flagged": g["flagged"],
               "misfit": g["misfit"]}
              for g in group_calibration(points, prob=prob)]
    return {"model": model, "prob": prob, "folds": folds, "points": int(len(points)),
            "coverage": float(points["inside"].mean()),
            "groups": groups, "per_fold": sorted(per_fold, key=lambda f: f["fold"]),
            "seconds": round(time.perf_counter() - started, 1), "_points": points}
