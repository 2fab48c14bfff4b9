"""The approximate path (``--method advi``): ADVI + Pareto-smoothed importance resampling,
its Pareto k in the tree and the verdict, the NUTS fallback, the CLI."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import xarray as xr

from bayesspec.inference import approximate
from bayesspec.bayes import get_model_class
from bayesspec.cli import main
from bayesspec.data import prepare
from bayesspec.inference import (SamplerSettings, WithPyMCModel, compile_model,
                                 convergence_verdict, sample_compiled, settings_for)
from bayesspec.simulate.synthetic import generate_sweeps, placeholder_truth

SETTINGS = SamplerSettings(draws=300, tune=300, chains=2, seed=3, progress=False,
                           method="advi", steps=1000)


@pytest.fixture(scope="module")
def three_groups():
    truth = placeholder_truth()
    truth = truth[truth["verifier"] == "Qwen3-14B"].reset_index(drop=True).iloc[:3]
    return truth, prepare(generate_sweeps(truth, seed=11))


@pytest.fixture(scope="module")
def compiled(three_groups):
    """One compilation for the library tests (the approximate and the fallback paths)."""
    model = get_model_class("dense")()
    settings = settings_for(model, SETTINGS)
    return model, compile_model(model.build(three_groups[1]), settings), settings


def test_pareto_smoothed_weights_of_exact_and_bad_proposals():
    rng = np.random.default_rng(0)
    weights, k = approximate.pareto_smoothed_weights(np.zeros(2000))
    assert np.allclose(weights, 1 / 2000) and k == 0.0
    # A proposal close to the target: weights near uniform, k small.
    weights, k = approximate.pareto_smoothed_weights(rng.normal(0, 0.05, 2000))
    assert 1 / np.sum(weights**2) > 1800 and k < 0.5
    # Ratios with a heavy right tail (a proposal far too narrow): k well above 0.7.
    _, k_bad = approximate.pareto_smoothed_weights(
        np.log(np.abs(rng.standard_cauchy(2000))))
    assert k_bad > 0.7


def test_advi_recovers_the_truth_and_reports_pareto_k(compiled, three_groups):
    model, compiled_model, settings = compiled
    assert isinstance(compiled_model, WithPyMCModel)
    tree = sample_compiled(compiled_model, replace(settings, fallback=False))
    assert tree.attrs["method"] == "advi"
    k = float(tree.attrs["pareto_k"])
    assert np.isfinite(k) and tree.attrs["proposals"] >= 4000
    posterior = tree["posterior"]
    assert dict(posterior.sizes)["chain"] == 2 and dict(posterior.sizes)["draw"] == 300
    truth = three_groups[0]
    for name in ("C1", "C2"):
        low, high = posterior[name].quantile([0.005, 0.995], dim=("chain", "draw")).values
        assert np.all((low <= truth[name].values) & (truth[name].values <= high)), name
        median = posterior[name].median(dim=("chain", "draw")).values
        assert np.allclose(median, truth[name].values, rtol=0.05), name
    verdict = convergence_verdict(tree, model.decision_variables())
    assert verdict["method"] == "advi" and verdict["pareto_k"] == pytest.approx(k)
    assert f"Pareto k = {k:.2f}" in verdict["text"]
    assert verdict["status"] == ("approximate" if k <= 0.7 else "not converged")


def test_bad_approximation_falls_back_to_nuts_with_a_message(compiled, monkeypatch,
                                                             capsys):
    model, compiled_model, settings = compiled
    # Forced bad: scales started 100 times too narrow and one optimisation step.
    scales = approximate.curvature_scales
    monkeypatch.setattr(approximate, "curvature_scales",
                        lambda *a, **k: scales(*a, **k) / 100)
    tree = sample_compiled(compiled_model, replace(settings, steps=1, progress=True))
    assert "not trusted" in capsys.readouterr().err
    assert tree.attrs["method"] == "nuts" and tree.attrs["approximation"] == "advi"
    assert float(tree.attrs["pareto_k"]) > 0.7 and "NUTS" in tree.attrs["fallback"]
    verdict = convergence_verdict(tree, model.decision_variables())
    assert "sampled with NUTS" in verdict["text"] and np.isfinite(verdict["rhat_max"])
    # Without the fallback the approximation is kept and judged not converged.
    kept = sample_compiled(compiled_model, replace(settings, steps=1, fallback=False))
    assert kept.attrs["method"] == "advi"
    assert convergence_verdict(kept, model.decision_variables())["status"] == "not converged"
    # The approximate tree has the variables and dims of a NUTS one.
    for name, values in tree["posterior"].data_vars.items():
        assert kept["posterior"][name].dims == values.dims, name


def test_verdict_of_an_approximate_tree_without_sampler_stats():
    tree = xr.DataTree.from_dict({"/posterior": xr.Dataset(
        {"C1": (("chain", "draw"), np.ones((1, 10)))})})
    tree.attrs.update(method="advi", pareto_k=0.43, importance_ess=812.0)
    verdict = convergence_verdict(tree, ["C1"])
    assert verdict["status"] == "approximate" and verdict["converged"]
    assert "approximate (advi), Pareto k = 0.43" in verdict["text"]
    tree.attrs["pareto_k"] = 0.93
    assert convergence_verdict(tree, ["C1"])["status"] == "not converged"


def test_cli_fit_method_advi_json(capsys, tmp_path, three_groups):
    data = tmp_path / "sweeps.csv"
    three_groups[1].to_csv(data, index=False)
    out = tmp_path / "fit.nc"
    code = main(["fit", str(data), "-o", str(out), "--method", "advi", "--no-fallback",
                 "--approx-steps", "1000", "--draws", "200", "--chains", "2",
                 "--seed", "3", "--no-loo", "--json", "--quiet"])
    captured = capsys.readouterr()
    assert code == 0
    document = json.loads(captured.out)
    assert document["method"]["asked"] == "advi" and document["method"]["used"] == "advi"
    assert np.isfinite(document["method"]["pareto_k"])
    assert document["convergence"]["method"] == "advi"
    assert "Pareto k" in document["convergence"]["text"]
    saved = json.loads(xr.open_datatree(out, engine="h5netcdf").attrs["sampler_settings"])
    assert saved["method"] == "advi"


def test_cli_refuses_pathfinder(capsys, tmp_path, three_groups):
    data = tmp_path / "sweeps.csv"
    three_groups[1].to_csv(data, index=False)
    code = main(["fit", str(data), "-o", str(tmp_path / "f.nc"), "--method", "pathfinder"])
    assert code == 2
    assert "pymc-extras" in capsys.readouterr().err
