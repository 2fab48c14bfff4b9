"""Simulation-based calibration (SBC, Talts et al. 2018) of any registered latency model.

For one design (the rates, groups and known covariates of a tidy table) the model is
built and compiled once. N parameter sets and data sets are drawn from the prior
(``pm.sample_prior_predictive``); each simulated data set is swapped into the compiled
model (nutpie ``with_data``) and sampled, and the rank of each true coefficient among
thinned posterior draws is recorded. If the sampler computes the posterior the model
defines, every rank is uniform on 0..L; a coefficient whose ranks are not is biased
(ranks piled at one end), over-confident (both ends) or under-confident (the middle).

What is held fixed: every ``pm.Data`` other than the observations keeps the design's
values, and so do the constants a model derives from the design's latencies to centre
its priors (the dense ``log_C1_center``, the speculative anchor C1 and anchor
configuration). SBC checks the model with that prior fixed, which is the prior the
simulations come from. Every observed variable is simulated and swapped, the acceptance
counters of a latent-alpha speculative model included; observations passed as numpy
constants rather than ``pm.Data`` are lifted into shared variables once (graph rewrite),
so a model need not be written for SBC to be checked by it.

Tests and the pass rule: each coefficient gets a chi-square test of its ranks in equal
bins (exact bin probabilities) and, as a second view, the simultaneous ECDF test behind
the plot's band (Säilynoja et al. 2022). ``rejected`` is per coefficient at ``level``
(default 1%): with K coefficients about ``level * K`` rejections are expected by chance
alone. The run passes when no coefficient is rejected at the family-wise ``level``
(Bonferroni, p < level/K), which is the issue's "no coefficient rejected at the 1%
level" read as a statement about the whole model; per-coefficient rejections are
reported next to it, never hidden.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

from bayesspec.errors import BadInput
from bayesspec.outputs import log
from bayesspec.checks.ranks import chi_square_pvalues, default_bins, ecdf_band, ranks_of, thin_indices

LEVEL = 0.01
DEFAULT_THIN_TO = 100
# A sweep whose slowest point is 20x its fastest runs at 95% utilisation or more; real
# load tests stop before that (see plausible_sweeps).
MAX_LATENCY_RATIO = 20.0
MAX_DRAW_ROUNDS = 20


# --------------------------------------------------------------------------- designs

def default_design(model: str) -> pd.DataFrame:
    """The built-in design of ``model`` (its class's ``default_sbc_design``)."""
    from bayesspec.bayes import get_model_class

    return get_model_class(model).default_sbc_design()


# --------------------------------------------------------------------------- model

def _shared_source(value):
    """The shared variable an observed value is read from (directly, or through a cast
    PyMC adds when a float ``pm.Data`` feeds a discrete likelihood), else None."""
    from pytensor.compile.sharedvalue import SharedVariable
    from pytensor.graph.basic import Constant
    from pytensor.graph.traversal import ancestors

    if isinstance(value, SharedVariable):
        return value
    sources = [v for v in ancestors([value])
               if v.owner is None and not isinstance(v, Constant)]
    if len(sources) == 1 and isinstance(sources[0], SharedVariable) \
            and np.shape(sources[0].get_value()) == tuple(value.shape.eval()) \
            and np.array_equal(value.eval(), sources[0].get_value()):
        return sources[0]
    return None


def swappable_observations(pm_model):
    """The model with every observation in a shared variable, and rv name -> data name.

    Observations given as ``pm.Data`` are already shared; a constant (a numpy array
    passed as ``observed=``) is lifted into a shared variable named ``observed_<rv>``
    by rewriting the model graph, so that nutpie's ``with_data`` can replace it. An
    observation computed from data in any other way cannot be swapped: BadInput.
    """
    from pytensor.graph.basic import Constant

    values = {rv.name: pm_model.rvs_to_values[rv] for rv in pm_model.observed_RVs}
    if not any(isinstance(v, Constant) for v in values.values()):
        return pm_model, _observation_names(values)

    import pytensor
    from pymc.model.fgraph import ModelObservedRV, fgraph_from_model, model_from_fgraph

    taken = set(pm_model.named_vars)
    fgraph, _ = fgraph_from_model(pm_model, inlined_views=True)
    for node in list(fgraph.apply_nodes):
        if not isinstance(node.op, ModelObservedRV):
            continue
        data = node.inputs[1]
        # pm.Data appear here wrapped (not as shared variables): only constants move.
        if not isinstance(data, Constant):
            continue
        name = f"observed_{node.op.name}"
        if name in taken:
            raise ValueError(f"cannot lift the observations of {node.op.name}: "
                             f"{name} is taken")
        lifted = pytensor.shared(np.asarray(data.data), name=name, shape=data.type.shape)
        fgraph.replace(data, lifted, import_missing=True)
    lifted_model = model_from_fgraph(fgraph, mutate_fgraph=True)
    return lifted_model, _observation_names(
        {rv.name: lifted_model.rvs_to_values[rv] for rv in lifted_model.observed_RVs})


def _observation_names(values: dict) -> dict[str, str]:
    names = {}
    for rv, value in values.items():
        source = _shared_source(value)
        if source is None or not source.name:
            raise BadInput(f"SBC cannot swap the observations of '{rv}': they are neither "
                           "a pm.Data nor a constant")
        names[rv] = source.name
    return names


def _element_labels(dataset, name: str) -> list[str]:
    array = dataset[name]
    dims = [d for d in array.dims if d not in ("chain", "draw")]
    if not dims:
        return [name]
    grids = np.meshgrid(*[np.asarray(array[d].values).astype(str) for d in dims],
                        indexing="ij")
    return [f"{name}[{', '.join(parts)}]" for parts in zip(*(g.ravel() for g in grids))]


def _flat(dataset, name: str) -> np.ndarray:
    """(samples, elements): chain and draw stacked first, other dims flattened."""
    values = np.asarray(dataset[name].values, dtype=float)
    return values.reshape(values.shape[0] * values.shape[1], -1)


def coefficient_table(prior, variables: list[str]):
    """The scalar coefficients to rank: names, variable and flat element of each, their
    prior draws (simulations, coefficients) and the duplicates left out.

    Elements that are not finite in every prior draw (a setup without a dense baseline
    has NaN ``C1_dense`` by construction) or take one value in all of them are dropped;
    an element identical to an earlier one in every draw (``C1_dense`` is the dense
    group's ``C1``) is reported once, since a second test of the same ranks would only
    count one fact twice.
    """
    names, owners, elements, columns, duplicates = [], [], [], [], {}
    for variable in variables:
        if variable not in prior.data_vars:
            continue
        values = _flat(prior, variable)
        for j, (label, column) in enumerate(zip(_element_labels(prior, variable), values.T)):
            if not np.isfinite(column).all():
                continue
            if np.ptp(column) == 0.0:
                # Fixed by construction (C1s of a dense verifier's group is 0): no rank.
                continue
            same = next((names[i] for i, c in enumerate(columns)
                         if np.array_equal(c, column)), None)
            if same is not None:
                duplicates[label] = same
                continue
            names.append(label)
            owners.append(variable)
            elements.append(j)
            columns.append(column)
    if not names:
        raise BadInput("the model has no coefficient to calibrate (C1, C2 or its "
                       "posterior_variables)")
    return names, owners, np.asarray(elements), np.column_stack(columns), duplicates


def plausible_sweeps(log_latency: np.ndarray, group_index: np.ndarray,
                     max_ratio: float | None) -> np.ndarray:
    """Which simulated data sets (rows of ``log_latency``, one column per point) look like
    a load test someone would run: every latency finite and, within every sweep, the
    slowest point at most ``max_ratio`` times the fastest.

    The rule reads the simulated data only, never the parameters, so keeping only the
    data sets it accepts leaves SBC valid: for an accepted data set y the posterior is
    p(theta | y) whether or not the rule was applied, hence ranks stay uniform (the
    prior the ranks are checked against is the prior conditioned on plausible data).
    What it removes are draws whose rates push a fixed design deep into saturation
    (latencies hundreds of times the zero-load value), which no real sweep contains
    and whose posteriors are a different computational problem from the one users meet.
    """
    finite = np.isfinite(log_latency).all(axis=1)
    if max_ratio is None:
        return finite
    spread = np.zeros(len(log_latency))
    safe = np.where(np.isfinite(log_latency), log_latency, 0.0)
    for g in np.unique(group_index):
        member = safe[:, group_index == g]
        spread = np.maximum(spread, member.max(axis=1) - member.min(axis=1))
    return finite & (spread <= np.log(max_ratio))


def _draw_simulations(pm_model, observed, variables, simulations, seed, latency_rv,
                      group_index, max_latency_ratio, progress):
    """``simulations`` prior draws (truth and simulated observations) whose data pass
    :func:`plausible_sweeps`, drawing further rounds as needed, and the number drawn."""
    import pymc as pm

    kept_truth, kept_data, drawn, set_aside = [], {rv: [] for rv in observed}, 0, 0
    for round_number in range(MAX_DRAW_ROUNDS):
        log(f"sbc: drawing {simulations} parameter and data sets from the prior", progress)
        random_seed = seed if round_number == 0 else np.random.default_rng([seed, round_number])
        tree = pm.sample_prior_predictive(draws=simulations, model=pm_model,
                                          random_seed=random_seed)
        names, owners, elements, truth, duplicates = coefficient_table(tree["prior"],
                                                                       variables)
        data = {rv: _flat(tree["prior_predictive"], rv) for rv in observed}
        keep = (plausible_sweeps(data[latency_rv], group_index, max_latency_ratio)
                if latency_rv else np.ones(simulations, dtype=bool))
        drawn += simulations
        set_aside += int((~keep).sum())
        kept_truth.append(truth[keep])
        for rv in observed:
            kept_data[rv].append(data[rv][keep])
        have = sum(len(t) for t in kept_truth)
        if keep.sum() < simulations:
            log(f"sbc: {simulations - keep.sum()} of {simulations} simulated data sets set "
                 f"aside (a sweep spans more than {max_latency_ratio}x in latency)", progress)
        if have >= simulations:
            break
    else:
        raise BadInput(f"only {have} of {drawn} prior draws gave plausible sweeps (slowest "
                       f"point at most {max_latency_ratio}x the fastest); the design's rates "
                       "are far outside what the prior expects (raise --max-latency-ratio or "
                       "lower the rates)", argument="max_latency_ratio")
    truth = np.vstack(kept_truth)[:simulations]
    simulated = {rv: np.vstack(kept_data[rv])[:simulations] for rv in observed}
    return names, owners, elements, truth, duplicates, simulated, (drawn, set_aside)


# --------------------------------------------------------------------------- result

@dataclass
class SBCResult:
    model: str
    config: dict
    names: list[str]             # one per ranked scalar coefficient
    variables: list[str]         # the model variable each name belongs to
    ranks: np.ndarray            # (simulations used, coefficients), 0..max_rank
    max_rank: int
    bins: int
    p_values: np.ndarray         # chi-square, per coefficient
    p_ecdf: np.ndarray           # simultaneous ECDF test, per coefficient
    outside_band: np.ndarray     # ECDF leaves the simultaneous ranks.BAND_PROB band
    per_simulation: pd.DataFrame
    settings: dict
    design: dict
    duplicates: dict = field(default_factory=dict)
    level: float = LEVEL
    simulations: int = 0         # requested
    prior_draws: int = 0         # drawn from the prior to find them
    set_aside: int = 0           # of those, data sets failing plausible_sweeps
    max_latency_ratio: float | None = None
    compile_s: float = 0.0
    wall_time_s: float = 0.0

    @property
    def rejected(self) -> np.ndarray:
        return self.p_values < self.level

    @property
    def rejected_family_wise(self) -> np.ndarray:
        return self.p_values < self.level / len(self.names)

    @property
    def passed(self) -> bool:
        return not self.rejected_family_wise.any()

    def document(self) -> dict:
        sims = self.per_simulation
        sampled = sims[sims["status"] == "ok"]
        return {
            "model": self.model,
            "model_config": self.config,
            "design": self.design,
            "simulations": self.simulations,
            "simulations_used": int(len(self.ranks)),
            "prior_draws": self.prior_draws,
            "set_aside_implausible": self.set_aside,
            "max_latency_ratio": self.max_latency_ratio,
            "plausibility_rule": "simulated data sets with a sweep whose slowest point "
                                 "exceeds max_latency_ratio x its fastest are replaced by "
                                 "further prior draws (a rule on the data only: ranks stay "
                                 "uniform under the prior conditioned on plausible data)",
            "non_finite": sims.loc[sims["status"] == "non-finite", "simulation"].tolist(),
            "failed": sims.loc[sims["status"] == "failed", "simulation"].tolist(),
            "settings": self.settings,
            "max_rank": self.max_rank,
            "bins": self.bins,
            "test": "chi-square of binned ranks, per coefficient; p_ecdf: simultaneous "
                    "ECDF test (second view)",
            "level": self.level,
            "family_wise_rule": f"Bonferroni: rejected_family_wise when p < "
                                f"{self.level}/{len(self.names)}",
            "expected_false_rejections": self.level * len(self.names),
            "coefficients": [
                {"name": name, "variable": variable, "p_value": float(p),
                 "rejected": bool(r), "rejected_family_wise": bool(f), "p_ecdf": float(q),
                 "outside_band": bool(o)}
                for name, variable, p, r, f, q, o in zip(
                    self.names, self.variables, self.p_values, self.rejected,
                    self.rejected_family_wise, self.p_ecdf, self.outside_band)],
            "rejected": [n for n, r in zip(self.names, self.rejected) if r],
            "rejected_family_wise": [n for n, r in zip(self.names, self.rejected_family_wise)
                                     if r],
            "passed": self.passed,
            "duplicates": self.duplicates,
            "diagnostics": {
                "divergent_simulations": int((sampled["divergences"] > 0).sum()),
                "divergences": int(sampled["divergences"].sum()),
                # sampled again at the model's retry target after divergences (the
                # counts above are the second sampling's)
                "retried_simulations": int(sampled["retried"].sum())
                if "retried" in sampled else 0,
                "rhat_over_1.01": int((sampled["rhat_max"] > 1.01).sum()),
                "rhat_max": float(sampled["rhat_max"].max()) if len(sampled) else None,
                "ess_bulk_min": float(sampled["ess_bulk_min"].min()) if len(sampled) else None,
            },
            "compile_s": self.compile_s,
            "wall_time_s": self.wall_time_s,
        }


# --------------------------------------------------------------------------- run

def _sbc_model(model: str, config: dict | None, data: pd.DataFrame):
    """The model SBC refits, its observations swappable (built in each worker)."""
    from bayesspec.bayes import get_model_class

    return swappable_observations(get_model_class(model)(config).build(data))[0]


def run_sbc(data: pd.DataFrame, model: str = "speculative", *, config: dict | None = None,
            simulations: int = 100, settings=None, seed: int = 0,
            thin_to: int = DEFAULT_THIN_TO, bins: int | None = None, level: float = LEVEL,
            variables: list[str] | None = None,
            max_latency_ratio: float | None = MAX_LATENCY_RATIO,
            progress: bool = True, workers: int = 1, scheduler=None) -> SBCResult:
    """SBC of ``model`` on the design ``data`` (a tidy table; its latencies only set the
    data-dependent prior constants and are otherwise replaced by simulations).

    ``variables``: the model variables to rank (default ``C1``, ``C2`` and the model's
    ``posterior_variables()``). ``settings``: a ``SamplerSettings`` (seed ignored: each
    simulation gets ``seed + 1 + i``; tune, target_accept and adaptation left unset take
    the model's defaults, the settings its fits use). ``max_latency_ratio``: simulated
    data sets with a sweep whose slowest point is more than this many times its fastest
    are set aside and replaced by further prior draws (None: keep all); see
    :func:`plausible_sweeps`. ``workers`` > 1 samples the simulations in that many
    processes, ``scheduler`` (address or ``distributed.Client``) on a Dask cluster
    (:mod:`bayesspec.inference.parallel`); ``compile_s`` is then the first worker's.
    """

    from bayesspec.bayes import get_model_class
    from bayesspec.inference import SamplerSettings, diagnostics, settings_for
    from bayesspec.inference.parallel import Recipe, sample_many

    if simulations < 2:
        raise BadInput(f"need at least 2 simulations, got {simulations}",
                       argument="simulations")
    started = time.perf_counter()
    latency_model = get_model_class(model)(config)
    settings = settings or SamplerSettings(draws=500, tune=None, chains=2)
    settings = replace(settings_for(latency_model, settings), progress=False)
    pm_model, observed = swappable_observations(latency_model.build(data))
    variables = variables or ["C1", "C2"] + latency_model.posterior_variables()
    variables = [v for v in dict.fromkeys(variables)
                 if v in pm_model.named_vars and v not in observed]

    latency_rv = "log_latency" if "log_latency" in observed else None
    # The prior draws come from the model's forward form (prior_model: no potentials).
    prior_model, _ = swappable_observations(latency_model.prior_model(data))
    names, owners, elements, truth, duplicates, simulated, (drawn, set_aside) = _draw_simulations(
        prior_model, observed, variables, simulations, seed, latency_rv,
        latency_model.inputs.group_index, max_latency_ratio, progress)
    templates = {rv: np.asarray(_shared_source(pm_model.rvs_to_values[pm_model[rv]])
                                .get_value()) for rv in observed}

    step, keep = thin_indices(settings.draws, settings.chains, thin_to)
    max_rank = settings.chains * len(keep)
    records = {i: {"simulation": i, "status": "ok", "divergences": 0, "retried": False,
                   "rhat_max": np.nan, "ess_bulk_min": np.nan} for i in range(simulations)}
    jobs, job_simulation = [], []
    for i in range(simulations):
        values = {observed[rv]: simulated[rv][i].reshape(templates[rv].shape)
                  .astype(templates[rv].dtype) for rv in observed}
        if not all(np.isfinite(v).all() for v in values.values()):
            # Kept in the report: dropping such draws conditions the prior.
            records[i]["status"] = "non-finite"
            continue
        jobs.append((values, replace(settings, seed=seed + 1 + i)))
        job_simulation.append(i)
    where = (f"on {scheduler}" if scheduler is not None else
             f"in {workers} worker processes" if workers > 1 else "here")
    log(f"sbc: sampling {len(jobs)} simulations {where} (the model compiles once per "
        "worker, numba)", progress)
    recipe = Recipe(f"sbc-{uuid.uuid4().hex}", _sbc_model, (model, config, data))
    ranked = {}
    loop_started = time.perf_counter()
    compile_s = 0.0
    for done, (index, result) in enumerate(sample_many(recipe, jobs, settings,
                                                       workers=workers,
                                                       scheduler=scheduler), start=1):
        i = job_simulation[index]
        record = records[i]
        if isinstance(result, str):   # a sampler failure is a finding, not a crash
            record["status"] = "failed"
            record["error"] = result
        else:
            if done == 1:
                compile_s = (time.perf_counter() - loop_started
                             - result.attrs.get("sampling_seconds", 0.0))
            diag = diagnostics(result, owners)
            record.update(divergences=diag["divergences"], rhat_max=diag["rhat_max"],
                          ess_bulk_min=diag["ess_bulk_min"],
                          retried=bool(result.attrs.get("retried")))
            posterior = result["posterior"].to_dataset().isel(draw=keep)
            flat = {v: _flat(posterior, v) for v in dict.fromkeys(owners)}
            draws = np.column_stack([flat[v][:, j] for v, j in zip(owners, elements)])
            # One generator per simulation: ranks do not depend on the finishing order.
            ranked[i] = ranks_of(draws, truth[i], np.random.default_rng([seed, i]))
        elapsed = time.perf_counter() - loop_started
        eta = elapsed / done * (len(jobs) - done)
        log(f"sbc: simulation {i + 1} ({done}/{len(jobs)}) {record['status']}, "
            f"divergences {record['divergences']}, R-hat max {record['rhat_max']:.3f}; "
            f"elapsed {elapsed:.0f} s, ETA {eta:.0f} s", progress)
    records = [records[i] for i in range(simulations)]
    ranks = [ranked[i] for i in sorted(ranked)]

    import pandas as pd  # not at import: the CLI's parser reads this module's defaults

    per_simulation = pd.DataFrame(records)
    if len(ranks) < 2:
        status = per_simulation["status"].value_counts()
        raise BadInput(f"only {len(ranks)} of {simulations} simulations could be sampled "
                       f"({status.get('non-finite', 0)} with non-finite simulated data, "
                       f"{status.get('failed', 0)} sampler failures)")
    ranks = np.vstack(ranks).astype(int)
    bins = bins or default_bins(len(ranks), max_rank)
    band = ecdf_band(len(ranks), max_rank, seed=seed)
    rows = latency_model.inputs.rows
    return SBCResult(
        model=model, config=latency_model.config, names=names, variables=owners,
        ranks=ranks, max_rank=max_rank, bins=bins,
        p_values=chi_square_pvalues(ranks, max_rank, bins),
        p_ecdf=band.p_values(ranks), outside_band=band.outside(ranks),
        per_simulation=per_simulation,
        settings={"draws": settings.draws, "tune": settings.tune, "chains": settings.chains,
                  "target_accept": settings.target_accept,
                  "adaptation": settings.adaptation, "seed": seed, "thin": step,
                  "sampler": "nutpie"},
        design={"source": data.attrs.get("source_file", "<data>"), "points": len(rows),
                "groups": len(latency_model.inputs.groups)},
        duplicates=duplicates, level=level, simulations=simulations,
        prior_draws=drawn, set_aside=set_aside, max_latency_ratio=max_latency_ratio,
        compile_s=compile_s, wall_time_s=time.perf_counter() - started)
