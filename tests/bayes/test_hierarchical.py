"""The hierarchical model, leave-n-out checks, PSIS-LOO and model comparison."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from bayesspec import datasets
from bayesspec.bayes.hierarchical import (TERM_NAMES, TREND_TERMS, HierarchicalLatencyModel,
                                          covariates, trend_coefficients)
from bayesspec.cli import main
from bayesspec.data import prepare, read_tidy

# Identities between model forms hold in any PyTensor mode: FAST_COMPILE skips the graph
# optimisation that took about 10 s of CPU per compile of the hierarchical model (all
# four parametrisations: 55 s of CPU in the default mode, 7 s in this one; measured).
CHECK_MODE = "FAST_COMPILE"


@pytest.fixture(scope="module")
def one_verifier_csv(tmp_path_factory):
    frame = pd.read_csv(datasets.path("dense"))
    path = tmp_path_factory.mktemp("hier") / "qwen3_8b.csv"
    frame[frame["verifier"] == "Qwen3-8B"].to_csv(path, index=False)
    return path


def test_trend_coefficients_sum_their_terms():
    rates = np.arange(1, len(TERM_NAMES) + 1, dtype=float)
    values = covariates(8.0, 0.5, 512.0, 256.0)
    out = trend_coefficients(rates, values)
    expected = {}
    for i, (coefficient, _, covariate) in enumerate(TREND_TERMS):
        expected[coefficient] = expected.get(coefficient, 0.0) + rates[i] * values[covariate]
    assert out == pytest.approx(expected)
    # c2v grows with the time-averaged context prefill + decode/2 (docs/laws.md, eq. (3)).
    assert values["context_k"] == pytest.approx((512 + 128) / 1000)


def test_terms_the_data_cannot_separate_are_not_sampled():
    data = read_tidy(datasets.path("dense"))
    one = prepare(data[data["verifier"] == "Qwen3-8B"].drop(columns=["excluded",
                                                                      "exclusion_reason"]))
    model = HierarchicalLatencyModel()
    model.prepare(one)
    free = dict(zip(TERM_NAMES, model.free_shares(model.inputs)))
    # One verifier: size-proportional terms are the same column as the constant ones.
    assert not free["c1v.weights"] and not free["c2v.kv_reads_by_size"]
    assert free["c1p.prefill_compute"]          # prefill varies: separable
    model.prepare(data)
    assert dict(zip(TERM_NAMES, model.free_shares(model.inputs)))["c1v.weights"]


def test_hierarchical_needs_parameter_counts(tmp_path, capsys):
    frame = pd.read_csv(datasets.path("dense")).head(18)
    frame["verifier"] = "my-private-model"
    frame = frame.drop(columns=["verifier_params_b"])
    path = tmp_path / "private.csv"
    frame.to_csv(path, index=False)
    assert main(["fit", str(path), "--model", "hierarchical", "-o",
                 str(tmp_path / "x.nc")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and "verifier_params_b" in errors[0]
    assert not (tmp_path / "x.nc").exists()


def test_check_refuses_models_that_cannot_predict_unfitted_groups(one_verifier_csv, capsys):
    assert main(["check", str(one_verifier_csv), "--model", "dense", "--json"]) == 2
    assert "hierarchical" in capsys.readouterr().err


def test_prior_predictive_admits_the_data(one_verifier_csv, capsys):
    assert main(["check", str(one_verifier_csv), "--prior-predictive", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["physics_priors"] is True
    assert document["inside"]["0.99"] >= 0.99


def test_leave_out_check_predicts_held_out_combinations(one_verifier_csv, tmp_path, capsys):
    plot = tmp_path / "holdout.png"
    code = main(["check", str(one_verifier_csv), "--leave-out", "4", "--folds", "2",
                 "--draws", "200", "--tune", "300", "--chains", "2", "--seed", "2", "--json",
                 "--plot", str(plot)])
    assert code == 0
    document = json.loads(capsys.readouterr().out)
    assert {"leave_out", "folds", "prob", "r2", "coverage", "elpd", "per_fold"} <= set(document)
    assert document["leave_out"] == 4 and document["folds"] == 2
    assert document["points"] == sum(f["points"] for f in document["per_fold"])
    # Held-out cells are predicted from the trends: a broken mask or trend would miss.
    assert document["r2"] > 0.99
    assert 0.6 <= document["coverage"] <= 1.0
    assert document["r2_trends"]["C2"] > 0.99
    assert np.isfinite(document["elpd"])
    assert plot.stat().st_size > 10_000


def test_summary_shows_psis_loo_and_compare_models_ranks(real_fit_path, tmp_path, capsys):
    assert main(["summary", str(real_fit_path), "--loo", "--json"]) == 0
    loo = json.loads(capsys.readouterr().out)["loo"]
    assert loo["points"] > 100 and np.isfinite(loo["elpd_loo"]) and loo["se"] > 0
    other = tmp_path / "same.nc"
    shutil.copy(real_fit_path, other)
    assert main(["compare-models", str(real_fit_path), str(other), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert len(document["models"]) == 2
    assert document["models"][1]["elpd_diff"] == pytest.approx(0.0, abs=1e-6)
    assert "not decisive" in document["verdict"]


@pytest.mark.slow
@pytest.mark.parametrize("leave_out", [1, 2, 4])
def test_leave_n_out_on_the_bundled_dense_data(leave_out):
    """Held-out configurations are predicted: R^2 >= 0.97 and 90% coverage in [0.85, 0.95]."""
    from bayesspec.checks import leave_out_check
    from bayesspec.inference import SamplerSettings

    data = read_tidy(datasets.path("dense"))
    document = leave_out_check(data, leave_out=leave_out, folds=None if leave_out == 1 else 10,
                               seed=1, progress=False,
                               settings=SamplerSettings(draws=800, tune=700, chains=2,
                                                        progress=False))
    assert document["r2"] >= 0.97
    assert 0.85 <= document["coverage"] <= 0.95
    assert sum(f["divergences"] for f in document["per_fold"]) == 0


@pytest.mark.parametrize("c1_form, c2_form, per_cell", [("conditional", "conditional", None),
                                                         ("conditional", "non_centred", None),
                                                         ("non_centred", "conditional", None),
                                                         ("conditional", "conditional", 3)])
def test_conditional_cell_deviations_change_coordinates_not_the_model(one_verifier_csv,
                                                                      c1_form, c2_form,
                                                                      per_cell):
    """The cell deviations are d = mean(rest) + z/sqrt(P(rest)) (C2's after C1's is
    integrated out of a linearised conditional, C1's given C2's): at any point the log
    density differs from the non-centred form's (d = spread * z') by the Jacobian
    sum(log(1/sqrt(P)) - log(spread)) of each conditional deviation alone, and the
    costs are the same; also when the conditional's sums run over a subsample of each
    cell (per_cell 3)."""
    from bayesspec.bayes.hierarchical import shift_subsample

    data = read_tidy(one_verifier_csv)
    model = HierarchicalLatencyModel({"cell_c1_deviations": c1_form,
                                      "cell_c2_deviations": c2_form,
                                      "conditional_points_per_cell": per_cell,
                                      "conditional_subsample_rows": 0})
    inputs = model.prepare(data)
    cell_of_point = inputs.groups["cell_index"].to_numpy(int)[inputs.group_index]
    subsampled = shift_subsample(cell_of_point, cell_of_point.max() + 1, per_cell)
    assert (subsampled is not None) == (per_cell == 3)
    conditional = model.build(data)
    plain = HierarchicalLatencyModel({"cell_c1_deviations": "non_centred",
                                      "cell_c2_deviations": "non_centred"}).build(data)
    assert {v.name for v in conditional.value_vars} == {v.name for v in plain.value_vars}
    rng = np.random.default_rng(4)
    def function(m, names):
        outs = m.replace_rvs_by_values([m[n] for n in names])
        return m.compile_fn(outs, inputs=m.value_vars, on_unused_input="ignore",
                            mode=CHECK_MODE)

    deviation = function(conditional, ["cell_deviation"])
    costs = {m: function(m, ["C1", "C2"]) for m in (conditional, plain)}
    logp = {m: m.compile_logp(mode=CHECK_MODE) for m in (conditional, plain)}
    forms = {"cell_C1_z": (0, c1_form), "cell_C2_z": (1, c2_form)}
    for _ in range(3):
        point = {k: v + 0.3 * rng.normal(size=np.shape(v))
                 for k, v in conditional.initial_point().items()}
        d = deviation(point)[0]
        same = dict(point)
        jacobian = 0.0
        for name, (side, form) in forms.items():
            spread = np.exp(point["cell_sd_log__"][side])
            if form == "conditional":
                # d is linear in z given the rest: its slope is the conditional sd
                # 1/sqrt(P), below the prior's.
                shifted = deviation({**point, name: point[name] + 1.0})[0]
                slope = shifted[side] - d[side]
                assert np.all(slope > 0) and np.all(slope < spread)
                jacobian += np.sum(np.log(slope) - np.log(spread))
            same[name] = d[side] / spread
        assert logp[conditional](point) - logp[plain](same) == pytest.approx(jacobian,
                                                                             abs=1e-6)
        for a, b in zip(costs[conditional](point), costs[plain](same)):
            np.testing.assert_allclose(a, b, rtol=1e-10)
    # Forward draws ignore potentials: the prior comes from the plain form.
    assert not HierarchicalLatencyModel().prior_model(data).potentials


def test_conditional_sums_subsample_only_data_above_the_row_limit(one_verifier_csv):
    """Below conditional_subsample_rows the conditional sums run over every point: the
    default model's density is the all-points model's; above it, the subsample's."""
    data = read_tidy(one_verifier_csv)
    rows = len(HierarchicalLatencyModel().prepare(data).rows)
    forms = {name: HierarchicalLatencyModel({"conditional_points_per_cell": per_cell,
                                             "conditional_subsample_rows": limit}).build(data)
             for name, per_cell, limit in (("default", 3, rows), ("all", None, rows),
                                           ("subsampled", 3, rows - 1))}
    point = forms["all"].initial_point()
    point = {k: v + 0.2 * np.random.default_rng(1).normal(size=np.shape(v))
             for k, v in point.items()}
    logp = {name: float(m.compile_logp(mode=CHECK_MODE)(point)) for name, m in forms.items()}
    assert logp["default"] == pytest.approx(logp["all"], abs=1e-9)
    assert abs(logp["subsampled"] - logp["all"]) > 1e-6


def test_shift_subsample_keeps_small_cells_and_reweights_large_ones():
    from bayesspec.bayes.hierarchical import shift_subsample

    cell_of_point = np.repeat([0, 1, 2], [5, 40, 3])
    assert shift_subsample(cell_of_point, 3, None) is None
    assert shift_subsample(cell_of_point, 3, 40) is None
    index, multiplier = shift_subsample(cell_of_point, 3, 8)
    assert len(np.unique(index)) == len(index) == 5 + 8 + 3
    # Each cell's weights add up to its number of points, so the sums estimate its own.
    totals = np.bincount(cell_of_point[index], weights=multiplier)
    np.testing.assert_allclose(totals, [5, 40, 3])
    chosen = index[cell_of_point[index] == 1]
    assert chosen.min() == 5 and chosen.max() == 44  # spread from first to last


def _c2p_estimates(verifier_sd: float, seeds) -> np.ndarray:
    from bayesspec.bayes.spread_estimate import c2p_spread
    from bayesspec.simulate.synthetic import generate_sweeps, hierarchical_truth

    out = []
    for seed in seeds:
        model = HierarchicalLatencyModel()
        inputs = model.prepare(prepare(generate_sweeps(
            hierarchical_truth(c2p_verifier_sd=verifier_sd, seed=seed), n_rates=9, seed=seed)))
        estimate = c2p_spread(inputs.rows, inputs.groups, inputs.group_index)
        out.append((estimate.spread, estimate.measurement_error, estimate.verifiers))
    return np.array(out)


def test_c2p_spread_estimate_recovers_a_known_verifier_spread():
    none, wide = _c2p_estimates(0.0, range(6)), _c2p_estimates(0.3, range(6))
    assert (none[:, 2] == 7).all() and (wide[:, 2] == 7).all()
    # Zero spread: the moment estimate is zero in most replicates; 0.3: near it.
    assert np.median(none[:, 0]) < 0.03
    assert 0.18 < np.median(wide[:, 0]) < 0.45
    # The measurement error does not depend on the spread between verifiers.
    assert np.median(wide[:, 1]) == pytest.approx(np.median(none[:, 1]), rel=0.5)


def test_auto_centring_follows_how_finely_c2p_is_measured():
    from bayesspec.simulate.synthetic import generate_sweeps, hierarchical_truth

    bundled = prepare(read_tidy(datasets.path("dense")))
    model = HierarchicalLatencyModel()
    # The simulator's c2p is measured to about 1%, a tenth of the prior's spread.
    assert "c2p" in model.centred_system_coefficients(model.prepare(bundled))
    assert model.recorded["c2p_spread_estimate"]["measurement_error"] < 0.08 / 3
    trend_made = prepare(generate_sweeps(hierarchical_truth(), n_rates=9, seed=2))
    model = HierarchicalLatencyModel()
    assert model.centred_system_coefficients(model.prepare(trend_made)) == ("c1v", "c2v")
    assert model.recorded["centred_deviations"] == ["c1v", "c2v"]
    # A rebuilt model keeps the fit's choice; an explicit list overrides the rule.
    restored = HierarchicalLatencyModel().restore({"centred_deviations": ["c1v", "c2p"]})
    assert restored.centred_system_coefficients(restored.prepare(trend_made)) == ("c1v", "c2p")
    chosen = HierarchicalLatencyModel(config={"centred_deviations": ["c2p"]})
    assert chosen.centred_system_coefficients(chosen.prepare(trend_made)) == ("c2p",)
    built = HierarchicalLatencyModel().build(trend_made)
    assert {"log_system_deviation_value", "system_deviation_z"} <= set(built.named_vars)
    assert built["log_system_deviation_value"].type.shape[0] == 2
    with pytest.raises(ValueError, match="centred_deviations"):
        HierarchicalLatencyModel(config={"centred_deviations": ["c9"]})
