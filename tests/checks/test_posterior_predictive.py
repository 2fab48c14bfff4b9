"""Misfit: the posterior predictive check per group, the rate hold-out, and the model
that admits misfit (second-order law, group noise, Student-t)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytensor.tensor as pt
import pytest
from scipy import stats

from bayesspec import checks, laws
from bayesspec.checks.calibration import _binomial_tail
from bayesspec.cli import main
from bayesspec.data import prepare
from bayesspec.errors import BadInput
from bayesspec.inference import SamplerSettings
from bayesspec.prediction import CurvedCurve, Noise
from bayesspec.simulate.synthetic import generate_sweeps, placeholder_truth
from bayesspec.bayes.workflow import fit


# ------------------------------------------------------------------------- the law

def test_curved_law_is_eq1_at_zero_bend_and_one_definition_serves_numpy_and_pytensor():
    rng = np.random.default_rng(0)
    rps, c1, c2 = rng.uniform(0, 10, 50), rng.uniform(0.5, 5, 50), rng.uniform(0.01, 0.09, 50)
    bend = rng.uniform(-0.5, 2, 50)
    assert np.allclose(laws.curved_latency(rps, c1, c2, 0.0), laws.latency(rps, c1, c2))
    symbolic = laws.curved_latency_expr(pt.as_tensor(rps), pt.as_tensor(c1), pt.as_tensor(c2),
                                        pt.as_tensor(bend)).eval()
    assert np.allclose(symbolic, laws.curved_latency(rps, c1, c2, bend))
    assert np.isinf(laws.curved_latency(20.0, 1.0, 0.05, 0.3))
    # bend > 0: above eq. (1) at every load, equal at zero load
    assert laws.curved_latency(0.0, 2.0, 0.05, 1.0) == pytest.approx(2.0)
    assert laws.curved_latency(10.0, 2.0, 0.05, 1.0) > laws.latency(10.0, 2.0, 0.05)


def test_student_t_noise_density_and_draws():
    nu = np.array([3.0, 30.0])
    noise = Noise(np.array([0.02, 0.02]), np.array([0.01, 0.01]), nu)
    residual = np.array([[0.05, -0.01], [0.05, -0.01]])
    sigma = np.full_like(residual, 0.02)
    expected = stats.t.logpdf(residual, df=nu[:, None], scale=0.02)
    assert np.allclose(noise.log_density(residual, sigma), expected)
    normal = Noise(np.array([0.02]), np.array([0.01]))
    assert np.allclose(normal.log_density(residual[:1], sigma[:1]),
                       stats.norm.logpdf(residual[:1], scale=0.02))
    heavy = Noise(np.full(20000, 0.02), np.zeros(20000), np.full(20000, 2.5))
    draws = heavy.draw(np.ones((20000, 1)), np.full((20000, 1), 0.02),
                       np.random.default_rng(1))
    # heavier tails than the normal of the same scale
    assert np.mean(np.abs(np.log(draws)) > 3 * 0.02) > 0.03


# ------------------------------------------------------------------------- checks

def test_binomial_tail():
    assert _binomial_tail(0, 10, 0.1) == pytest.approx(1.0)
    assert _binomial_tail(4, 11, 0.1) == pytest.approx(stats.binom.sf(3, 11, 0.1))


def test_split_by_rate_keeps_each_groups_lower_rates(dense_fit_factory):
    data = dense_fit_factory(n_groups=3).data
    low, high = checks.split_by_rate(data, 0.6)
    assert not low["excluded"].any() and not high["excluded"].any()
    for label, part in data.loc[~data["excluded"]].groupby("group"):
        top = part["rps"].max()
        assert (low.loc[low["group"] == label, "rps"] <= 0.6 * top).all()
        assert (high.loc[high["group"] == label, "rps"] > 0.6 * top).all()
    assert len(low) + len(high) == int((~data["excluded"]).sum())
    with pytest.raises(BadInput):
        checks.split_by_rate(data, 1.5)


def test_predictive_check_passes_a_right_law_and_flags_a_misfit_group(dense_fit_factory):
    fit_ = dense_fit_factory(n_groups=4, seed=2)
    document = checks.predictive_check(fit_, prob=0.9)
    assert document["pooled"]["held_in"]["coverage"] >= 0.8
    assert document["flagged"] == []
    # the same sweeps, one group 25% slower at every point above light load: flagged
    data = fit_.data.loc[~fit_.data["excluded"]].copy()
    first = data["group"].iloc[0]
    bent = data.loc[data["group"] == first].copy()
    bent["latency_mean_s"] *= 1.0 + 0.25 * bent["rps"] / bent["rps"].max()
    document = checks.predictive_check(fit_, bent.drop(columns=["group"]), prob=0.9)
    assert document["flagged"] == [first]
    entry = next(g for g in document["groups"] if g["group"] == first)
    assert entry["held_out"]["coverage"] < 0.5
    assert entry["residual_by_utilisation"]["high"] > 0.1
    points = document["_points"]
    assert {"utilisation", "pit", "log_residual", "held_out"} <= set(points.columns)


# ------------------------------------------------------------------------- the model

@pytest.fixture(scope="module")
def bent_sweeps():
    """Six groups whose true law bends (C1 (1 + bend x)/(1 - x)) by different amounts."""
    truth = placeholder_truth()
    truth = truth[truth["verifier"] == "Qwen3-8B"].head(6).reset_index(drop=True)
    truth["bend"] = [0.0, 0.3, 0.8, 1.5, 0.0, 1.0]
    return truth, prepare(generate_sweeps(truth, n_rates=11, seed=5), source="<bent>")


@pytest.fixture(scope="module")
def bent_fits(bent_sweeps):
    _, data = bent_sweeps
    settings = SamplerSettings(draws=400, tune=600, chains=2, seed=4, progress=False)
    low, high = checks.split_by_rate(data, 0.6)
    return {name: (fit(low, name, settings=settings), high)
            for name in ("dense", "dense-discrepancy")}


def test_discrepancy_model_recovers_the_bend_and_covers_held_out_rates(bent_sweeps, bent_fits):
    truth, _ = bent_sweeps
    flexible, high = bent_fits["dense-discrepancy"]
    assert flexible.diagnostics["divergences"] <= 2, flexible.diagnostics["text"]
    bend = flexible.draws("bend")
    lo, hi = np.quantile(bend, [0.02, 0.98], axis=0)
    inside = (lo <= truth["bend"].to_numpy()) & (truth["bend"].to_numpy() <= hi)
    assert inside.mean() >= 5 / 6, (lo, hi)
    held_out = {name: checks.predictive_check(f, h)["pooled"]["held_out"]["coverage"]
                for name, (f, h) in bent_fits.items()}
    # The law that cannot bend misses most of the steep high-load points it was not
    # shown (seed 5: 50%); the model that can bend covers more of them, though not all
    # (measured over seeds 5-7: 68-82% of 22 points; the bend trades with C2 when only
    # the lower 60% of the rates are seen).
    assert held_out["dense-discrepancy"] >= 0.65, held_out
    assert held_out["dense-discrepancy"] >= held_out["dense"] + 0.1, held_out


def test_discrepancy_fit_answers_decisions_and_round_trips(bent_fits, tmp_path):
    from bayesspec.bayes import load_fit

    flexible, _ = bent_fits["dense-discrepancy"]
    curve = flexible.group_curve(0)
    assert isinstance(curve, CurvedCurve)
    path = tmp_path / "flex.nc"
    flexible.save(path)
    again = load_fit(path)
    assert np.allclose(again.group_curve(0).latency([1.0, 5.0]), curve.latency([1.0, 5.0]))
    assert "bend" in again.model().comparable_parameters(again)


# ------------------------------------------------------------------------- the verb

def test_check_ppc_on_data_and_on_a_fit_file(tmp_path, capsys, mock_sampling, real_fit_path):
    truth = placeholder_truth()
    data = generate_sweeps(truth[truth["verifier"] == "Qwen3-8B"].head(3), seed=1)
    source = tmp_path / "sweeps.csv"
    data.to_csv(source, index=False)
    plot = tmp_path / "ppc.png"
    assert main(["check", str(source), "--ppc", "--hold-out-above", "0.6", "--draws", "50",
                 "--quiet", "--json", "--plot", str(plot)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["model"] == "dense" and document["fraction"] == 0.6
    assert set(document["pooled"]) == {"held_in", "held_out"}
    reference = document["pooled"]["held_out"]["reference"]
    assert {"coverage_mean", "coverage_range", "p_as_low", "p_as_high",
            "groups_below_floor_mean"} <= set(reference)
    assert len(document["groups"]) == 3 and plot.exists()
    assert main(["check", str(source), "--ppc", "--hold-out-above", "0.6", "--draws", "50",
                 "--quiet"]) == 0
    assert "held-out" in (out := capsys.readouterr().out) and "a model exactly right" in out
    assert main(["check", str(real_fit_path), "--ppc"]) == 0
    out = capsys.readouterr().out
    assert "posterior predictive check (dense model" in out and "held-in" in out


@pytest.mark.parametrize("extra, needle", [
    (["--hold-out-above", "0.6"], "--ppc"),
    (["--ppc", "--hold-out-above", "1.2"], "(0, 1)"),
    (["--ppc", "--prior-predictive"], "one of"),
])
def test_check_ppc_refuses_bad_options(tmp_path, capsys, extra, needle):
    truth = placeholder_truth()
    source = tmp_path / "sweeps.csv"
    generate_sweeps(truth.head(1), seed=1).to_csv(source, index=False)
    assert main(["check", str(source), *extra]) == 2
    assert needle in capsys.readouterr().err


# ------------------------------------------------------------------------- two regimes

def test_two_regime_law_is_the_larger_branch_and_nests_eq1():
    rps = np.linspace(0, 2.8, 30)
    both = laws.two_regime_latency(rps, 21.5, 0.01, 16.8, 0.2, 200.0)
    larger = np.maximum(laws.latency(rps, 21.5, 0.01), laws.latency(rps, 16.8, 0.2))
    assert np.allclose(both, larger, rtol=0.01)
    # a compute branch far below the memory one: eq. (1) of the memory branch
    assert np.allclose(laws.two_regime_latency(rps, 2.0, 0.05, 1e-6, 0.1),
                       laws.latency(rps, 2.0, 0.05))
    assert np.isinf(laws.two_regime_latency(12.0, 2.0, 0.05, 1.0, 0.1))
    symbolic = laws.two_regime_latency_expr(pt.as_tensor(rps), 21.5, 0.01, 16.8, 0.2).eval()
    assert np.allclose(symbolic, laws.two_regime_latency(rps, 21.5, 0.01, 16.8, 0.2))


def test_two_regime_model_follows_a_kinked_sweep(tmp_path):
    """Sweeps flat while memory-bound, then rising (the shape of the Vidur 70B sweeps):
    the two-regime model fits them where eq. (1) leaves a pattern."""
    from bayesspec.bayes import load_fit

    rng = np.random.default_rng(3)
    rows = []
    for decode, scale in ((256, 1.0), (512, 2.0), (1024, 4.0)):
        rps = np.linspace(0.05, 0.95, 11) * (1 / (0.2 * scale))
        true = laws.two_regime_latency(rps, 10.0 * scale, 0.01 * scale, 7.0 * scale,
                                       0.2 * scale)
        for r, t in zip(rps, true):
            rows.append({"verifier": "Llama-2-70B", "drafter": "", "k": 0,
                         "prefill_tokens": 512, "decode_tokens": decode, "rps": r,
                         "latency_mean_s": t * np.exp(rng.normal(0, 0.005)),
                         "strategy": "poisson", "saturated": False})
    data = prepare(pd.DataFrame(rows), source="<kinked>")
    settings = SamplerSettings(draws=300, tune=500, chains=2, seed=1, progress=False)
    fits = {name: fit(data, name, settings=settings)
            for name in ("dense", "dense-roofline")}
    r2 = {name: min(g["held_in"]["r2"] for g in checks.predictive_check(f)["groups"])
          for name, f in fits.items()}
    assert r2["dense-roofline"] > 0.995, r2
    assert r2["dense-roofline"] > r2["dense"], r2
    path = tmp_path / "roof.nc"
    fits["dense-roofline"].save(path)
    again = load_fit(path)
    assert np.allclose(again.group_curve(1).latency([0.5, 2.0]),
                       fits["dense-roofline"].group_curve(1).latency([0.5, 2.0]))


@pytest.mark.slow
def test_real_profile_sweeps_dense_law_calibrated_held_in_and_flagged_beyond():
    """The Vidur sweeps (examples/vidur): the dense law's 90% intervals cover 85-97% of the
    points it was fitted on (measured 0.924 at the defaults), and fitted on rates up to
    60% of the ceiling it misses the kink of the 70B models on A100 above it: the rate
    hold-out check must say so (measured: 10 of those 10 groups flagged)."""
    from pathlib import Path

    from bayesspec.data import read_tidy

    path = Path(__file__).resolve().parents[2] / "examples" / "vidur" / "vidur_dense.csv"
    data = read_tidy(path)
    settings = SamplerSettings(draws=500, tune=700, chains=2, seed=1, progress=False)
    held_in = checks.predictive_check(fit(data, "dense", settings=settings))
    assert 0.85 <= held_in["pooled"]["held_in"]["coverage"] <= 0.97
    _, document = checks.rate_holdout_check(data, model="dense", fraction=0.63,
                                            settings=settings)
    kinked = {g["group"] for g in document["groups"]
              if "gpu=A100" in g["group"] and "70B" in g["group"]}
    assert len(kinked) == 10
    assert kinked <= set(document["flagged"]), sorted(kinked - set(document["flagged"]))


def test_rate_holdout_names_groups_it_could_not_fit(tmp_path, mock_sampling):
    truth = placeholder_truth()
    data = generate_sweeps(truth[truth["verifier"] == "Qwen3-8B"].head(2), seed=1)
    lonely = data.iloc[[3]].assign(prefill_tokens=4096)   # a one-point sweep
    frame = prepare(pd.concat([data, lonely], ignore_index=True), source="<x>")
    settings = SamplerSettings(draws=20, tune=20, chains=2, seed=1, progress=False)
    _, document = checks.rate_holdout_check(frame, fraction=0.6, settings=settings)
    assert document["unfitted_groups"] == ["Qwen3-8B p4096 g256"]
    assert "not checked" in document["verdict"]


# ------------------------------------------------------------------------- left out

def test_loo_pit_matches_the_exact_leave_one_out_predictive():
    """Normal mean, known unit noise, flat prior: the posterior without y_i is
    N(mean of the others, 1/(n-1)), so the exact leave-one-out PIT is known."""
    rng = np.random.default_rng(3)
    n, draws = 8, 20000
    y = rng.normal(0.0, 1.0, n)
    y[0] = 2.5                                      # one surprising point
    mu = rng.normal(y.mean(), 1 / np.sqrt(n), draws)
    log_likelihood = stats.norm.logpdf(y[None, :], loc=mu[:, None])
    predictive = mu[:, None] + rng.standard_normal((draws, n))
    pit, k = checks.loo_pit(log_likelihood, predictive, y)
    others = (y.sum() - y) / (n - 1)
    exact = stats.norm.cdf((y - others) / np.sqrt(1 + 1 / (n - 1)))
    assert np.allclose(pit, exact, atol=0.02), (pit, exact)
    assert np.all(k < 0.7)
    in_sample = np.mean(predictive < y[None, :], axis=0)
    # the surprising point looks less surprising in sample: the fit has moved towards it
    assert stats.norm.ppf(pit[0]) - stats.norm.ppf(in_sample[0]) > 0.2


def test_interleaved_folds_spread_every_groups_rates():
    rps = np.array([5.0, 1.0, 3.0, 2.0, 4.0, 10.0, 30.0, 20.0])
    group = np.array([0, 0, 0, 0, 0, 1, 1, 1])
    folds = checks.interleaved_folds(rps, group, 3)
    assert folds.tolist() == [1, 0, 2, 1, 0, 1, 0, 2]   # ranks 4,0,2,1,3 / 0,2,1 (+1)
    assert set(folds) == {0, 1, 2}


def test_predictive_check_reports_left_out_coverage(dense_fit_factory):
    document = checks.predictive_check(dense_fit_factory(n_groups=4, seed=2), prob=0.9)
    held_in = document["pooled"]["held_in"]
    assert 0.0 <= held_in["coverage_loo"] <= 1.0 and held_in["pareto_k_high"] >= 0
    assert "left out one at a time" in document["inside"]
    assert all("coverage_loo" in g["held_in"] for g in document["groups"])
    points = document["_points"]
    assert points["pit_loo"].between(0, 1).all()


def test_check_ppc_folds_refits_without_interleaved_rates(tmp_path, capsys):
    truth = placeholder_truth()
    data = generate_sweeps(truth[truth["verifier"] == "Qwen3-8B"].head(2), n_rates=6, seed=1)
    source = tmp_path / "sweeps.csv"
    data.to_csv(source, index=False)
    plot = tmp_path / "folds.png"
    assert main(["check", str(source), "--ppc", "--folds", "3", "--draws", "60", "--tune",
                 "60", "--chains", "1", "--quiet", "--json", "--plot", str(plot)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["folds"] == 3 and len(document["per_fold"]) == 3
    # every fitted point left out exactly once
    fitted = int((~prepare(data)["excluded"]).sum())
    assert document["points"] == fitted == sum(f["points"] for f in document["per_fold"])
    assert len(document["groups"]) == 2 and plot.exists()
    assert 0.0 <= document["coverage"] <= 1.0


@pytest.mark.parametrize("extra, needle", [
    (["--ppc", "--folds", "1"], "at least 2"),
    (["--ppc", "--folds", "3", "--hold-out-above", "0.5"], "one of"),
])
def test_check_ppc_folds_refuses_bad_options(tmp_path, capsys, extra, needle):
    truth = placeholder_truth()
    source = tmp_path / "sweeps.csv"
    generate_sweeps(truth.head(1), seed=1).to_csv(source, index=False)
    assert main(["check", str(source), *extra]) == 2
    assert needle in capsys.readouterr().err


# ------------------------------------------------------------------------- held-out reference

def _reference_case(shared: bool, groups: int = 25, points: int = 4, draws: int = 20000,
                    seed: int = 0):
    """Points table and inside-by-draw of ``groups`` groups whose predictive draws are
    independent across a group's points, or one value shared by all of them (the error
    of one extrapolated curve); observed = one more draw of the same kind."""
    rng = np.random.default_rng(seed)
    rows, inside_by_draw = [], {}
    for g in range(groups):
        size = (draws + 1, 1) if shared else (draws + 1, points)
        values = np.broadcast_to(rng.normal(size=size), (draws + 1, points))
        predictive, observed = values[:-1], values[-1]
        lo, hi = checks.draw_quantiles(predictive, [0.05, 0.95])
        inside_by_draw[f"g{g}"] = checks.inside_if_truth(predictive, lo, hi)
        rows.append(pd.DataFrame({"group": f"g{g}", "held_out": True,
                                  "inside": (lo <= observed) & (observed <= hi)}))
    return pd.concat(rows, ignore_index=True), inside_by_draw


def test_coverage_reference_is_binomial_for_independent_points():
    points, inside = _reference_case(shared=False)
    reference = checks.coverage_reference(points, inside)
    assert reference["coverage_mean"] == pytest.approx(0.9, abs=0.003)
    assert reference["coverage_sd"] == pytest.approx(np.sqrt(0.09 / 100), rel=0.1)
    # a group of 4 has 2 or more outside with the binomial probability 0.0523
    two_or_more = 1 - stats.binom.cdf(1, 4, 0.1)
    assert reference["groups_below_floor_mean"] == pytest.approx(25 * two_or_more, rel=0.1)
    assert reference["p_no_group_below_floor"] == pytest.approx((1 - two_or_more) ** 25,
                                                               abs=0.02)
    assert reference["observed"] == pytest.approx(points["inside"].mean())


def test_coverage_reference_keeps_one_curves_points_together():
    points, inside = _reference_case(shared=True)
    reference = checks.coverage_reference(points, inside)
    assert reference["coverage_mean"] == pytest.approx(0.9, abs=0.003)
    # 25 groups, not 100 points: the sd of the pooled coverage is twice the binomial's
    assert reference["coverage_sd"] == pytest.approx(np.sqrt(0.09 / 25), rel=0.1)
    assert reference["groups_below_floor_mean"] == pytest.approx(2.5, rel=0.1)
    # a group whose 4 points are all outside is a 1-in-10 event here, not 1 in 10,000
    tails = [reference["p_too_many_outside"][g] for g, part in points.groupby("group")
             if not part["inside"].any()]
    assert tails and all(t == pytest.approx(0.1, abs=0.01) for t in tails)
    assert _binomial_tail(4, 4, 0.1) == pytest.approx(1e-4)


def test_predictive_check_compares_held_out_coverage_with_the_models_own(dense_fit_factory):
    fit_ = dense_fit_factory(n_groups=4, seed=2)
    data = fit_.data.loc[~fit_.data["excluded"]].drop(columns=["group"])
    # held-out rows from the true law: what a right model expects
    document = checks.predictive_check(fit_, data, prob=0.9)
    reference = document["pooled"]["held_out"]["reference"]
    assert reference["coverage_mean"] == pytest.approx(0.9, abs=0.02)
    assert reference["coverage_range"][0] < 0.9 < reference["coverage_range"][1]
    assert reference["p_as_low"] > checks.FLAG_LEVEL
    assert "too narrow" not in document["verdict"]
    assert all(g["held_out"]["tail_from"] == "model" for g in document["groups"])
    assert all(g["held_in"]["tail_from"] == "binomial" for g in document["groups"])
    assert "a model exactly right" in document["inside"]
    # every group 25% slower above light load: too narrow, said in the verdict
    slower = data.copy()
    slower["latency_mean_s"] *= 1.0 + 0.25 * slower["rps"] / slower["rps"].max()
    document = checks.predictive_check(fit_, slower, prob=0.9)
    assert document["pooled"]["held_out"]["reference"]["p_as_low"] < checks.FLAG_LEVEL
    assert "too narrow above the fitted rates" in document["verdict"]


def test_predictive_check_takes_every_draw_of_a_long_posterior(dense_fit_factory):
    """2 chains x 2500 draws: more than the 4000 the check once capped its draws at, which
    left the curve's parameters and its thinned predictions of different lengths."""
    fit_ = dense_fit_factory(n_groups=2, draws=2500, seed=3)
    data = fit_.data.loc[~fit_.data["excluded"]].drop(columns=["group"])
    document = checks.predictive_check(fit_, data)
    assert document["pooled"]["held_out"]["points"] == len(data)
    assert document["pooled"]["held_in"]["coverage"] >= 0.8


@pytest.mark.slow
def test_held_out_reference_is_right_when_the_model_is():
    """Sweeps from eq. (1), dense fitted on their lower rates (benchmarks/
    holdout_reference.py): the observed held-out coverage falls inside the reference's
    central 90% range in about 90% of replicates. 8 replicates: 5 or more inside fails a
    right reference with probability 0.005 (binomial)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "holdout_reference.py"
    spec = importlib.util.spec_from_file_location("holdout_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = [module.replicate(seed, groups=8, draws=400) for seed in range(8)]
    result = module.summary(rows)
    print(result)
    assert result["inside_range"] >= 5, rows
    assert result["mean_reference"] == pytest.approx(0.9, abs=0.02)


# --------------------------------------------------------------- verdicts that agree

def _points(group: str, observed, predicted, *, held_out=False, inside=True, utilisation=None):
    observed = np.asarray(observed, float)
    predicted = np.asarray(predicted, float)
    n = len(observed)
    return pd.DataFrame({
        "group": group, "rps": np.arange(1.0, n + 1), "observed": observed,
        "predicted": predicted, "lo": predicted * 0.5, "hi": predicted * 2.0,
        "inside": np.broadcast_to(inside, n), "held_out": held_out,
        "utilisation": (np.linspace(0.1, 0.9, n) if utilisation is None else utilisation),
        "log_residual": np.log(observed) - np.log(predicted)})


def test_a_group_with_negative_r2_or_a_large_high_load_residual_is_misfit():
    """Every point inside its (wide) interval, so no binomial tail flags it: the walkthrough
    case (R^2 -4.9, high-load residual -61%) must still be MISFIT, with its reasons."""
    fine = _points("fine", [1.0, 1.2, 1.5, 2.0, 3.0], [1.0, 1.2, 1.5, 2.0, 3.0])
    bad = _points("bad", [1.0, 1.2, 1.5, 2.0, 9.0], [1.0, 1.2, 1.6, 4.0, 16.5])
    groups = checks.group_calibration(pd.concat([fine, bad], ignore_index=True))
    flags = {g["group"]: g for g in groups}
    assert not flags["fine"]["flagged"] and flags["fine"]["misfit"] == []
    assert flags["bad"]["flagged"]
    assert any(reason.startswith("held-in R^2 -") for reason in flags["bad"]["misfit"])
    assert any(reason.startswith("high-load residual -") for reason in flags["bad"]["misfit"])
    verdict = checks.check_verdict(groups, None, 0.9)
    assert verdict.startswith("MISFIT in 1 of 2 groups: bad (")
    assert "no group" not in verdict.lower()


def test_held_out_verdicts_never_contradict_and_flag_groups_with_few_inside():
    """Pooled held-out coverage too low for the model: the verdict says so without also
    saying that no group misfits, and a group with 20% of its held-out points inside is
    flagged even when its own tail (the model's) would let it pass."""
    held_in = _points("g1", [1.0, 1.1, 1.2], [1.0, 1.1, 1.2])
    poor = _points("g1", [2.0, 2.2, 2.4, 2.6, 2.8], [2.0, 2.2, 2.4, 2.6, 2.8], held_out=True,
                   inside=[True, False, False, False, False])
    other = pd.concat([_points("g2", [1.0, 1.1, 1.2], [1.0, 1.1, 1.2]),
                       _points("g2", [2.0, 2.2, 2.4], [2.0, 2.2, 2.4], held_out=True)])
    points = pd.concat([held_in, poor, other], ignore_index=True)
    reference = {"observed": 0.5, "coverage_mean": 0.9, "coverage_range": [0.8, 0.97],
                 "p_as_low": 0.001, "p_as_high": 0.999,
                 "p_too_many_outside": {"g1": 0.03, "g2": 1.0}}
    groups = checks.group_calibration(points, reference=reference)
    flags = {g["group"]: g for g in groups}
    assert flags["g1"]["flagged"] and "20% of 5 held-out points inside" in flags["g1"]["misfit"]
    assert not flags["g2"]["flagged"]
    verdict = checks.check_verdict(groups, reference, 0.9)
    assert "MISFIT in 1 of 2 groups: g1" in verdict and "too narrow" in verdict
    assert "no group" not in verdict.lower()
    # no group below the floor: the pooled sentence stands alone, without "no group misfits"
    fair = checks.group_calibration(pd.concat([held_in, other], ignore_index=True),
                                    reference={**reference, "p_too_many_outside": {"g2": 1.0}})
    verdict = checks.check_verdict(fair, reference, 0.9)
    assert verdict.startswith("No group misfits on its own points, but pooled: Held out:")
    assert checks.check_verdict(fair, None, 0.9).startswith("no group misfits")


def test_loo_pit_survives_draws_that_give_a_point_zero_likelihood():
    """A draw past its ceiling at a point (latency inf, log-likelihood -inf) must not
    break PSIS: its weight is large but finite, and the point's Pareto k says so."""
    from bayesspec.checks.loo import loo_pit

    rng = np.random.default_rng(0)
    draws = rng.normal(0.0, 1.0, (4000, 3))
    log_likelihood = -0.5 * (draws - 0.2) ** 2
    log_likelihood[:7, 2] = -np.inf
    draws[:7, 2] = np.inf
    pit, k = loo_pit(log_likelihood, draws, np.array([0.2, 0.2, 0.2]))
    assert np.all(np.isfinite(pit)) and np.all((pit >= 0) & (pit <= 1))
    assert k[2] > k[0] and k[2] > 0.7


def test_loo_pit_names_a_point_psis_cannot_weight():
    from bayesspec.checks.loo import loo_pit

    rng = np.random.default_rng(1)
    draws = rng.normal(0.0, 1.0, (1000, 2))
    log_likelihood = -0.5 * draws ** 2
    log_likelihood[:600, 1] = -np.inf       # most draws: zero likelihood at point 1
    pit, k = loo_pit(log_likelihood, draws, np.array([0.0, 0.0]))
    assert np.isfinite(pit[0]) and np.isfinite(k[0])
    assert np.isnan(pit[1]) and np.isinf(k[1])
