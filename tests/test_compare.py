"""compare: a 10% increase of C2 between engine versions is flagged, C1 is not."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bayesspec.cli import main
from bayesspec.data import prepare
from bayesspec.decisions import compare_fits, compare_versions
from bayesspec.prediction import COEFFICIENT_NAMES
from bayesspec.errors import BadInput
from bayesspec.inference import SamplerSettings
from bayesspec.synthetic import generate_sweeps
from bayesspec.validation import fit_same_design


@pytest.fixture(scope="session")
def version_fits(truth_16):
    newer = truth_16.copy()
    newer["C2"] = newer["C2"] * 1.10
    datasets = [prepare(generate_sweeps(truth_16, seed=31)),
                prepare(generate_sweeps(newer, seed=32)),
                prepare(generate_sweeps(truth_16, seed=33))]
    settings = SamplerSettings(draws=500, tune=500, chains=4, seed=7, progress=False)
    return fit_same_design(datasets, model="dense", settings=settings)


def per_group(document, name):
    return {k: v for k, v in document["parameters"].items() if k.startswith(f"{name}[")}


def test_ten_percent_c2_increase_is_flagged_and_c1_is_not(version_fits):
    old, new, _ = version_fits
    document = compare_fits(old, new)
    c2 = per_group(document, "C2")
    c1 = per_group(document, "C1")
    assert len(c2) == 16
    assert np.mean([e["p_increase"] >= 0.95 for e in c2.values()]) >= 0.8
    assert np.mean([e["p_increase"] >= 0.95 for e in c1.values()]) <= 0.2
    assert document["parameters"]["C2"]["ratio"]["lo"] > 1.05
    assert "higher in B" in document["parameters"]["C2"]["verdict"]


def test_two_runs_of_the_same_engine_show_no_difference(version_fits):
    old, _, same = version_fits
    document = compare_fits(old, same)
    for name in ("C1", "C2"):
        entries = per_group(document, name).values()
        no_difference = [e["p_practically_higher"] < 0.95 and e["p_practically_lower"] < 0.95
                         for e in entries]
        assert np.mean(no_difference) >= 0.8


def test_compare_verb_json_and_plot(capsys, version_fits, tmp_path):
    old, new, _ = version_fits
    a, b, plot = tmp_path / "a.nc", tmp_path / "b.nc", tmp_path / "forest.png"
    old.save(a)
    new.save(b)
    assert main(["compare", str(a), str(b), "--json", "--plot", str(plot)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {"parameters", "verdict"} <= set(document)
    assert {"ratio", "p_increase"} <= set(document["parameters"]["C1"])
    assert plot.stat().st_size > 10_000
    assert main(["compare", str(a), str(b), "--rope", "2"]) == 2


@pytest.fixture(scope="session")
def two_version_data(truth_16, tmp_path_factory):
    import pandas as pd

    truth = truth_16.iloc[::2].reset_index(drop=True)          # 8 groups
    newer = truth.copy()
    newer["C2"] = newer["C2"] * 1.10
    old = generate_sweeps(truth, seed=41)
    old["engine_version"] = "0.13.0"
    new = generate_sweeps(newer, seed=42)
    new["engine_version"] = "0.14.0"
    path = tmp_path_factory.mktemp("versions") / "two_versions.csv"
    pd.concat([old, new], ignore_index=True).to_csv(path, index=False)
    return path


def test_joint_version_model_flags_c2_not_c1(capsys, two_version_data, tmp_path):
    fit_path = tmp_path / "versions.nc"
    assert main(["compare", str(two_version_data), "--by", "engine_version", "--json",
                 "--draws", "1000", "--tune", "1000", "--seed", "3", "--quiet",
                 "--save-fit", str(fit_path)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert "warning" not in document
    assert document["a"] == "0.13.0" and document["b"] == "0.14.0"
    c2, c1 = document["parameters"]["C2"], document["parameters"]["C1"]
    assert c2["p_increase"] >= 0.95 and c2["ratio"]["lo"] < 1.10 < c2["ratio"]["hi"]
    assert c1["p_practically_higher"] < 0.95 and c1["p_practically_lower"] < 0.95
    assert np.mean([e["p_increase"] >= 0.95 for e in per_group(document, "C2").values()]) >= 0.75
    # the saved joint fit answers the same question without refitting
    assert main(["compare", str(fit_path), "--by", "engine_version", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["parameters"]["C2"]["ratio"] == c2["ratio"]


def test_compare_by_needs_exactly_two_values(capsys, tmp_path, truth_16):
    data = generate_sweeps(truth_16.iloc[:2], seed=1)
    data["engine_version"] = "only"
    path = tmp_path / "one.csv"
    data.to_csv(path, index=False)
    assert main(["compare", str(path), "--by", "engine_version"]) == 2
    assert "exactly two values" in capsys.readouterr().err
    assert main(["compare", str(path), "--by", "gpu_model"]) == 2
    assert "gpu_model" in capsys.readouterr().err


# --------------------------------------------------------------------------------------
# Speculative data: version effects on the six cycle coefficients
# --------------------------------------------------------------------------------------

SD_ALPHAS, SD_KS = (0.5, 0.7, 0.9), (1, 2, 4, 8)


def sd_two_versions(seed, c2v_factor=1.10, labels=("0.13.0", "0.14.0")):
    import pandas as pd

    from bayesspec.synthetic import SPECULATIVE_TRUTH_8B, speculative_truth

    newer = dict(SPECULATIVE_TRUTH_8B)
    newer["c2v"] *= c2v_factor
    old = generate_sweeps(speculative_truth(alphas=SD_ALPHAS, ks=SD_KS), seed=seed)
    new = generate_sweeps(speculative_truth(newer, alphas=SD_ALPHAS, ks=SD_KS),
                          seed=seed + 1)
    old["engine_version"], new["engine_version"] = labels
    return pd.concat([old, new], ignore_index=True)


def test_sd_compare_by_version_picks_the_speculative_variant(capsys, tmp_path):
    """Plumbing (prior draws stand in for the posterior): the model, the JSON, the plot."""
    from pymc.testing import mock_sample

    from bayesspec.bayes import SpeculativeVersionEffectModel
    from bayesspec.fitfile import Fit

    data = prepare(sd_two_versions(5))
    model_obj = SpeculativeVersionEffectModel()
    model = model_obj.build(data)
    for name in ("c1p", "c2v", "ratio_c2v", "ratio_c2v_population", "C1_dense",
                 "ratio_C2_dense_population"):
        assert name in model.named_vars
    assert model.named_vars["c2v"].eval().shape == (2,)          # per version setup
    with model:
        tree = mock_sample(draws=20, chains=2, random_seed=1)
    fit_path, plot = tmp_path / "sd_versions.nc", tmp_path / "forest.png"
    Fit.from_sampling(model_obj, data, tree).save(fit_path)
    assert main(["compare", str(fit_path), "--by", "engine_version", "--json",
                 "--plot", str(plot)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {"C1", "C2", "C1_sd", "C2_sd", "c1p", "c1v", "c1d", "c2p", "c2v", "c2d"} <= \
        set(document["parameters"])
    assert {"ratio", "p_increase", "verdict"} <= set(document["parameters"]["c2v"])
    assert document["a"] == "0.13.0" and document["headline"] == "dense"
    assert "prior_contraction" in document["parameters"]["c1p"]
    assert isinstance(document["tradeoffs"], list)
    assert plot.stat().st_size > 10_000
    # a version present in only one of the two versions is refused
    one_sided = data.loc[~((data["engine_version"] == "0.14.0") & (data["k"] == 8))]
    with pytest.raises(BadInput, match="only one of"):
        SpeculativeVersionEffectModel().build(one_sided)


def test_sd_verdict_names_unidentified_and_traded_off_effects():
    from bayesspec.bayes.versions import _identified, _tradeoffs
    from bayesspec.uncertainty import ratio_entry as _ratio_entry

    rng = np.random.default_rng(0)
    prior_like = np.exp(rng.normal(0.0, 0.19, 4000))        # prior sd 0.2
    entry = _identified(_ratio_entry(prior_like, 0.02, 0.9), prior_like, 0.2)
    assert entry["verdict"].startswith("not identified") and entry["prior_contraction"] < 0.2
    narrow = np.exp(rng.normal(0.0, 0.05, 4000))
    entry = _identified(_ratio_entry(narrow, 0.02, 0.9), narrow, 0.2)
    assert entry["verdict"].startswith("uncertain") and entry["prior_contraction"] > 0.9
    # a flag is the posterior's to make, however wide
    shifted = np.exp(rng.normal(0.5, 0.15, 4000))
    entry = _identified(_ratio_entry(shifted, 0.02, 0.9), shifted, 0.2)
    assert entry["verdict"].startswith("higher in B")
    # c2p and c2v anti-correlated (separated only through their sum), c1v independent
    common = rng.normal(0.0, 0.05, 4000)
    draws = {"c1p": np.exp(rng.normal(0, 0.2, 4000)), "c1v": np.exp(common),
             "c1d": np.exp(rng.normal(0, 0.01, 4000)), "c2p": np.exp(-3 * common),
             "c2v": np.exp(common + rng.normal(0, 0.01, 4000)),
             "c2d": np.exp(rng.normal(0, 0.1, 4000))}
    found = _tradeoffs(draws)
    assert [t["parameters"] for t in found] == [["c2p", "c2v"]]
    assert found[0]["correlation"] < -0.9


@pytest.fixture(scope="session")
def sd_c2v_raised_fit():
    """A two-version SD fit with c2v raised 10% in version B."""
    settings = SamplerSettings(draws=500, tune=500, chains=4, seed=11, progress=False)
    changed = prepare(sd_two_versions(61))
    return fit_same_design([changed], model="speculative_versions", settings=settings)[0]


@pytest.mark.slow
def test_sd_version_effect_on_c2v_is_flagged_and_others_are_not(sd_c2v_raised_fit):
    changed = sd_c2v_raised_fit
    diag = changed.diagnostics
    assert diag["divergences"] == 0 and diag["rhat_max"] <= 1.01
    document = compare_versions(changed)
    for name, entry in document["parameters"].items():
        print(f"{name:6s} {entry['ratio']['median']:.4f} [{entry['ratio']['lo']:.4f}, "
              f"{entry['ratio']['hi']:.4f}] P(inc) {entry['p_increase']:.3f} {entry['verdict']}")
    c2v = document["parameters"]["c2v"]
    assert c2v["p_increase"] >= 0.95
    assert c2v["ratio"]["lo"] <= 1.10 <= c2v["ratio"]["hi"]
    assert "higher in B" in c2v["verdict"]
    for name in ("c1p", "c1v", "c1d", "c2p", "c2d", "C1", "C1_sd"):
        entry = document["parameters"][name]
        assert entry["p_practically_higher"] < 0.95 and entry["p_practically_lower"] < 0.95, name
    assert document["parameters"]["C2_sd"]["p_increase"] >= 0.95


SAME_ENGINE_SEEDS = tuple(range(63, 95, 2))      # 16 pairs
WELL_MEASURED = ("C1", "C2", "C1_sd", "C2_sd", "c1v", "c1d")


@pytest.fixture(scope="session")
def sd_same_engine_replicates():
    """Same-engine pairs over seeds: one pair is one draw of the false-flag rate."""
    settings = SamplerSettings(draws=500, tune=500, chains=2, seed=11, progress=False)
    datasets = [prepare(sd_two_versions(seed, c2v_factor=1.0, labels=("run1", "run2")))
                for seed in SAME_ENGINE_SEEDS]
    return fit_same_design(datasets, model="speculative_versions", settings=settings)


def _flagged(entry):
    return entry["p_practically_higher"] >= 0.95 or entry["p_practically_lower"] >= 0.95


@pytest.mark.slow
def test_sd_same_engine_replicates_show_no_difference(sd_same_engine_replicates):
    """Issue 7: two runs of the same engine show no difference in at least 80% of cases.

    Measured (16 pairs): 14 flag nothing; 63 and 81 flag c2p and c2v together (traded
    off, C2_sd equivalent; seed 63: c2p 0.88 [0.80, 0.97], c2v 1.056 [1.025, 1.089],
    C2_sd 1.008 [0.998, 1.018], and fitted alone its second run's c2v is 3.6 posterior
    sd from the truth, a tail draw). Over 68 pairs the six well-measured ratios never
    flagged; c2v was flagged in 2, c2p in 3, c2d in 2.
    """
    documents = []
    for fit in sd_same_engine_replicates:
        assert fit.diagnostics["divergences"] == 0
        assert fit.diagnostics["rhat_max"] <= 1.05
        documents.append(compare_versions(fit))
    names = ("C1", "C2", "C1_sd", "C2_sd") + COEFFICIENT_NAMES
    flagged = [[n for n in names if _flagged(d["parameters"][n])] for d in documents]
    print(dict(zip(SAME_ENGINE_SEEDS, flagged)))
    assert np.mean([not f for f in flagged]) >= 0.8
    assert not {n for f in flagged for n in f} & set(WELL_MEASURED)
    assert all("equivalent" in d["parameters"]["C1_sd"]["verdict"] for d in documents)
    # calibration, not just silence: the 90% intervals of the identified ratios cover
    # the true 1 about 90% of the time (over-confident intervals would fail this)
    covered = [d["parameters"][n]["ratio"]["lo"] <= 1.0 <= d["parameters"][n]["ratio"]["hi"]
               for d in documents for n in ("C1_sd", "C2_sd", "c1v", "c1d", "c2p", "c2v")]
    assert np.mean(covered) >= 0.75
    # a flag on one of a traded-off pair is reported with its partner
    for d, f in zip(documents, flagged):
        if {"c2p", "c2v"} & set(f) and any(t["parameters"] == ["c2p", "c2v"]
                                            for t in d["tradeoffs"]):
            assert "c2p and c2v trade off" in d["verdict"]
