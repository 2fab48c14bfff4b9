"""MoE covered/saturated split: the in-graph solver is the numpy law, the model builds."""

from __future__ import annotations

import json

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

from bayesspec import datasets, laws
from bayesspec.bayes import MoELatencyModel
from bayesspec.data import read_tidy
from bayesspec.errors import BadInput


def random_inputs(n, seed):
    rng = np.random.default_rng(seed)
    rps = rng.uniform(0, 20, n)
    c1u, c1s = rng.uniform(0.5, 5, n), rng.uniform(0, 3, n)
    c2u, c2s = rng.uniform(0.001, 0.05, n), rng.uniform(0, 0.05, n)
    m = np.where(rng.random(n) < 0.5, 4.0, 8.0)
    M = np.where(m == 4, 32.0, 128.0)
    tokens = rng.choice([1.0, 2.0, 4.0], n)
    keep = rps * (c2u + c2s) < 0.95
    return [a[keep] for a in (rps, c1u, c1s, c2u, c2s, m, M, tokens)], rng


def test_graph_solver_agrees_with_numpy_solver():
    """PyTensor Newton solve (from a perturbed start) = numpy bracketed solve, to 1e-6."""
    args, rng = random_inputs(20_000, 1)
    exact = laws.moe_latency(*args)
    start = exact * np.exp(rng.normal(0.0, 0.1, exact.shape))
    symbols = [pt.dvector() for _ in args]
    start_symbol = pt.dvector()
    graph = laws.moe_latency_expr(*symbols, start=start_symbol, xp=pt, newton_steps=5)
    solved = graph.eval({**dict(zip(symbols, args)), start_symbol: start})
    assert np.max(np.abs(solved / exact - 1)) < 1e-6


def test_graph_solver_from_the_phi_zero_start_reaches_the_least_fixed_point():
    args, _ = random_inputs(5_000, 2)
    exact = laws.moe_latency(*args)
    with np.errstate(all="ignore"):
        solved = laws.moe_latency_expr(*args, iterations=4, newton_steps=6)  # the model's
    assert np.max(np.abs(solved / exact - 1)) < 1e-6


def test_moe_model_builds_on_the_bundled_data_and_prior_admits_it():
    data = read_tidy(datasets.path("moe"))
    model_obj = MoELatencyModel()
    model = model_obj.build(data)
    groups = model_obj.inputs.groups
    assert set(groups["experts_total"]) == {32.0, 128.0}
    assert (groups.loc[groups["k"] > 0, "tokens_per_request"]
            == groups.loc[groups["k"] > 0, "k"] + 1).all()
    with model:
        prior = pm.sample_prior_predictive(draws=200, random_seed=1)
    simulated = prior["prior_predictive"]["log_latency"].values.reshape(200, -1)
    observed = np.log(model_obj.inputs.rows["latency_mean_s"].to_numpy())
    # a prior draw at u -> 1 can leave the law's domain (NaN); rare, and never near data
    assert np.isnan(simulated).mean() < 0.01
    inside = (np.nanquantile(simulated, 0.01, axis=0) <= observed) & \
        (observed <= np.nanquantile(simulated, 0.99, axis=0))
    assert inside.mean() > 0.95
    assert np.isfinite(model.point_logps()["log_latency"])


def test_moe_model_needs_expert_counts():
    data = read_tidy(datasets.path("dense"))
    data = data[data["verifier"] == "Qwen3-8B"]
    with pytest.raises(BadInput, match="expert counts"):
        MoELatencyModel().build(data)


def moe_truth():
    """Known split costs for two MoE verifiers, dense and k = 1, 3 (k + 1 tokens)."""
    import pandas as pd

    rows = []
    for verifier, m, M, scale in (("gpt-oss-20b", 4, 32, 1.0), ("Qwen3-30B-A3B", 8, 128, 1.6)):
        for k in (0, 1, 3):
            rows.append({"verifier": verifier, "drafter": "" if k == 0 else "head", "k": k,
                         "alpha": np.nan if k == 0 else 0.8, "prefill_tokens": 512,
                         "decode_tokens": 512, "experts_active": m, "experts_total": M,
                         "tokens_per_request": float(k + 1),
                         "C1u": 0.9 * scale * (1 - 0.15 * k), "C1s": 0.5 * scale,
                         "C2u": 0.012 * scale * (1 + 0.2 * k), "C2s": 0.02 * scale})
    return pd.DataFrame(rows)


@pytest.mark.slow
@pytest.mark.xfail(reason="issue 6 open: measured 2026-11-30, coverage C1u 0.98, C1s 0.89, "
                          "C2u 0.97, C2s 0.97 and a few replicates with divergences",
                   strict=False)
def test_split_costs_are_recovered_with_calibrated_intervals():
    """20 replicates of equation-generated MoE sweeps: 90% intervals cover C1u, C1s,
    C2u, C2s in 80-97% of the 120 (replicate, group) cases, with no divergences."""
    from bayesspec.inference import SamplerSettings
    from bayesspec.validation import replicate_coverage

    truth = moe_truth()
    true = {name: truth[name].to_numpy() for name in ("C1u", "C1s", "C2u", "C2s")}
    result = replicate_coverage(truth, true, model="moe", replicates=20, seed=40,
                                settings=SamplerSettings(draws=500, tune=500, chains=4,
                                                         progress=False))
    coverage = result.groupby("parameter")["covers"].mean()
    print(coverage.to_dict())
    assert ((coverage >= 0.80) & (coverage <= 0.97)).all(), coverage.to_dict()
    assert (result["divergences"] == 0).all()


def test_decisions_refuse_moe_fits_instead_of_answering_with_the_dense_law(tmp_path, capsys):
    from pymc.testing import mock_sample

    from bayesspec.cli import main
    from bayesspec.fitfile import Fit

    data = read_tidy(datasets.path("moe"))
    model_obj = MoELatencyModel()
    with model_obj.build(data):
        tree = mock_sample(draws=10, chains=2, random_seed=1)
    path = tmp_path / "moe.nc"
    Fit.from_sampling(model_obj, data, tree).save(path)
    code = main(["speedup", str(path), "--alpha", "0.8", "--k", "1", "--rps", "1",
                 "--verifier", "gpt-oss-20b", "--prefill", "512", "--decode", "512"])
    assert code == 2 and "not available for MoE fits" in capsys.readouterr().err
    assert main(["predict", str(path), "--rps", "1,2", "--verifier", "gpt-oss-20b",
                 "--prefill", "512", "--decode", "512", "--k", "0", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert len(document["points"]) == 2
