"""Acceptance from totals: vLLM's Prometheus totals and published acceptance-length tables
as counter windows, a run-to-run term per window, deep positions the data do not reach
left to the prior (intervals that widen past the measured k), bad totals refused, and
the depth-limited drafter the validation scores against."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from bayesspec.bayes.acceptance import (STRUCTURES, TokenAcceptanceModel, chain_parameters,
                                        counter_windows, totals_log_likelihood)
from bayesspec.cli import main
from bayesspec.data import counters_of, read_counters
from bayesspec.laws import (accepted_moments_of_pmf_expr, depth_reliability_expr,
                            token_regimes_acceptance_expr)
from bayesspec.simulate.drafters import DepthLimitedDrafter, depth_limited_counters

TABLE = """verifier,drafter,k,acceptance_length
Llama-3.1-8B-Instruct,EAGLE-1,2,2.10
Llama-3.1-8B-Instruct,EAGLE-1,3,2.29
Llama-3.1-8B-Instruct,EAGLE-1,4,2.39
Llama-3.1-8B-Instruct,EAGLE-3,2,2.36
Llama-3.1-8B-Instruct,EAGLE-3,3,2.79
Llama-3.1-8B-Instruct,EAGLE-3,4,3.08
"""
DRAFTER = DepthLimitedDrafter(0.85, 0.5, trained_depth=3, loss=1.0, error=0.05)


def write(tmp_path, frame, name="counters.csv"):
    path = tmp_path / name
    if isinstance(frame, str):
        path.write_text(frame)
    else:
        frame.to_csv(path, index=False)
    return path


def totals() -> pd.DataFrame:
    """vLLM's totals over one window per k (ingest --metrics writes these columns)."""
    return depth_limited_counters(DRAFTER, [1, 2, 3, 4], drafts_per_window=2000, seed=3)


# ----------------------------------------------------------------------------- files

def test_a_published_table_is_read_as_one_window_per_k(tmp_path):
    counters = read_counters(write(tmp_path, TABLE))
    windows = counter_windows(counters)
    assert windows["setups"] == ["Llama-3.1-8B-Instruct + EAGLE-1",
                                 "Llama-3.1-8B-Instruct + EAGLE-3"]
    assert not windows["has_positions"].any() and windows["counts"].sum() == 0
    assert windows["accepted_mean"] == pytest.approx([1.10, 1.29, 1.39, 1.36, 1.79, 2.08])
    # "2.10" reads as 2.1: the table's precision is its finest digit's
    assert np.all(windows["resolution"] == 0.01)
    assert np.all(windows["inv_drafts"] == 0.0)          # no draft counts: unknown


def test_prometheus_totals_are_windows_with_their_draft_counts(tmp_path):
    frame = totals()
    windows = counter_windows(read_counters(write(tmp_path, frame)))
    assert windows["accepted_mean"] == pytest.approx(frame["accepted_tokens"]
                                                     / frame["num_drafts"])
    assert np.all(windows["resolution"] == 0.0)
    assert windows["inv_drafts"] == pytest.approx(1.0 / frame["num_drafts"])
    # draft tokens alone give the drafts (every draft of a fixed-k server has k tokens)
    alone = read_counters(write(tmp_path, frame.drop(columns="num_drafts"), "alone.csv"))
    assert list(alone["num_drafts"]) == list(frame["num_drafts"])


def test_totals_beside_position_counts_must_agree(tmp_path):
    frame = depth_limited_counters(DRAFTER, [2, 3], drafts_per_window=500, seed=1,
                                   positions=True)
    windows = counter_windows(read_counters(write(tmp_path, frame)))
    assert windows["has_positions"].all()
    assert windows["accepted_mean"] == pytest.approx(frame["accepted_tokens"]
                                                     / frame["num_drafts"])


@pytest.mark.parametrize("change, column, words", [
    (lambda f: f.assign(accepted_tokens=f["draft_tokens"] + 1), "accepted_tokens",
     "only"),
    (lambda f: f.drop(columns="draft_tokens").assign(accepted_tokens=f["k"] * f["num_drafts"] + 1),
     "accepted_tokens", "k x num_drafts"),
    (lambda f: f.assign(num_drafts=0), "num_drafts", "no drafts"),
    (lambda f: f.assign(draft_tokens=f["draft_tokens"] + 1).drop(columns="num_drafts"),
     "draft_tokens", "multiple of k"),
    (lambda f: f.assign(acceptance_length=f["k"] + 1.5), "acceptance_length", "k + 1"),
    (lambda f: f.assign(acceptance_length=1.0), "acceptance_length", "the counts give"),
])
def test_bad_totals_exit_2_with_one_line(tmp_path, capsys, change, column, words):
    path = write(tmp_path, change(totals()))
    assert main(["acceptance", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert column in err and str(path) in err and words in err, err


def test_a_window_of_no_drafts_is_refused_by_the_speculative_fit_too():
    from bayesspec.bayes.speculative import _counter_totals
    from bayesspec.errors import BadInput

    rows = pd.DataFrame({"k": [0, 3, 3], "num_drafts": [np.nan, 100, 0],
                         "accepted_tokens": [np.nan, 120, 0]})
    with pytest.raises(BadInput, match="no drafts") as error:
        _counter_totals(rows, np.array([0, 1, 1]), 2)
    assert error.value.row == 3 and error.value.column == "num_drafts"
    above = pd.DataFrame({"k": [3], "num_drafts": [100], "draft_tokens": [300],
                          "accepted_tokens": [301]})
    with pytest.raises(BadInput, match="draft_tokens"):
        _counter_totals(above, np.array([0]), 1)


# ----------------------------------------------------------------------------- the law

def test_the_totals_likelihood_is_one_definition_for_numpy_and_pytensor():
    import pytensor.tensor as pt

    pmf = DRAFTER.accepted_pmf([4])[0][None, :]
    args = (np.array([1.3]), np.array([1 / 2000]), np.array([0.01]), np.array([0.02]))
    numpy_value = totals_log_likelihood(pmf, *args)
    graph_value = totals_log_likelihood(pt.as_tensor(pmf), *map(pt.as_tensor, args),
                                        xp=pt).eval()
    assert graph_value == pytest.approx(numpy_value)
    mean, variance = accepted_moments_of_pmf_expr(pmf)
    a = np.arange(5)
    assert mean == pytest.approx((pmf * a).sum())
    assert variance == pytest.approx((pmf * a**2).sum() - mean**2)
    # a run effect of 10% makes a 10%-off window ordinary, without it it is not
    far = (mean * 1.1, *args[1:3])
    assert (totals_log_likelihood(pmf, *far, np.array([0.1]))
            - totals_log_likelihood(pmf, *far, np.array([0.001]))) > 5


def test_deep_positions_widen_e_k_past_the_measured_depth_and_nowhere_else():
    """Past the measured depth D = 4 the depth loss is the prior's: E(k <= 4) is the same
    for every draw of it, E(k > 4) spreads more with every k (a plateau among the
    draws, and a head that keeps its trend); a copying proposer has no depth."""
    deep = np.random.default_rng(0).gamma(0.5, 0.4, size=400)
    n = len(deep)
    parts = chain_parameters(np.full(n, 1.2), np.full(n, 0.6), np.full(n, 0.0),
                             np.full(n, 0.03),
                             {k: np.float64(v) for k, v in STRUCTURES["spread+depth"].items()},
                             8, deep_decay=deep, measured_depth=4)
    lengths = 1.0 + (token_regimes_acceptance_expr(*parts) * np.arange(9)).sum(axis=-1)
    spread = lengths.max(axis=0) - lengths.min(axis=0)
    assert np.all(spread[:4] < 1e-12)
    assert np.all(np.diff(spread[3:]) > 0)
    assert lengths[:, -1].min() < lengths[:, 4].max()    # some draws plateau by k = 5
    copying = chain_parameters(np.full(n, 1.2), np.full(n, 0.6), np.full(n, 0.0),
                               np.full(n, 0.03),
                               {k: np.float64(v) for k, v in STRUCTURES["spread"].items()},
                               8, deep_decay=deep, measured_depth=4)
    assert np.ptp(copying[-1], axis=0).max() == 0.0
    reached = depth_reliability_expr(np.array([0.0]), np.array([1.0]), np.array([2.0]), 4)
    assert reached[0] == pytest.approx(np.exp(-np.array([0, 0, 0, 1, 3])))


def test_a_cliff_inside_the_measured_depths_is_expressible():
    """A head that loses its guesses past depth 2 (a cliff) measured at k = 1..4: with the
    trained depth T a parameter, the token process reproduces E(1..4) to counting
    precision; with the loss starting only past the deepest measured depth (T = D = 4)
    and the measured decay within three of its prior scales, it is 0.05 or more off,
    far outside the interval of 4000 drafts."""
    from scipy.optimize import least_squares

    cliff = DepthLimitedDrafter(0.8, 0.5, trained_depth=2, loss=4.0, error=0.05)
    truth = cliff.acceptance_length(range(1, 5))
    switches = {k: np.float64(v) for k, v in STRUCTURES["spread+depth"].items()}
    decay_bound = 3.0 * TokenAcceptanceModel().priors["depth_decay"]

    def misfit(trained_depth_free: bool) -> float:
        def residual(theta):
            x, spread, q, decay, deep, trained = (np.array([v]) for v in theta)
            parts = chain_parameters(x, spread, q, decay, switches, 4, deep_decay=deep,
                                     measured_depth=np.array([4.0]),
                                     trained_depth=trained if trained_depth_free else None)
            lengths = 1.0 + (token_regimes_acceptance_expr(*parts) * np.arange(5)).sum(-1)
            return lengths[0] - truth

        starts = [[x, 0.3, 0.0, 0.02, 1.0, t] for x in (0.0, 1.0, 2.0) for t in (1.5, 2.5, 3.5)]
        return min(np.abs(least_squares(residual, start,
                                        bounds=([-6, 0, -6, 0, 0, 1],
                                                [6, 3, 6, decay_bound, 20, 4])).fun).max()
                   for start in starts)

    assert misfit(True) < 1e-3
    assert misfit(False) > 0.05


def test_past_the_measured_depths_the_prior_keeps_the_level_or_ends_the_head():
    """Past the deepest measured position D = 4 a trained depth T = 7 keeps the measured
    level to depth 7; a head that ends at D (the prior's share of heads trained to
    exactly the measured depth) drafts nothing past it, so E(k) stays on E(4). Neither
    changes a count of k <= D: the data cannot tell them apart."""
    from bayesspec.bayes.acceptance_model import ENDS_AT_MEASURED_PROBABILITY

    switches = {k: np.float64(v) for k, v in STRUCTURES["spread+depth"].items()}
    theta = dict(logit_persistence=np.array([1.5]), spread=np.array([0.3]),
                 logit_stay_unguessable=np.array([0.0]), decay=np.array([0.01]))

    def table(trained, ends):
        parts = chain_parameters(theta["logit_persistence"], theta["spread"],
                                 theta["logit_stay_unguessable"], theta["decay"], switches, 10,
                                 deep_decay=np.array([1.0]), measured_depth=np.array([4.0]),
                                 trained_depth=np.array([trained]),
                                 ends_at_measured=np.array([ends]))
        return token_regimes_acceptance_expr(*parts)[0]

    keeps = table(7.0, 0.99)
    ends = table(7.0, 0.5 * ENDS_AT_MEASURED_PROBABILITY)
    lengths = {name: 1.0 + (t * np.arange(11)).sum(-1) for name, t in
               (("keeps", keeps), ("ends", ends))}
    np.testing.assert_allclose(keeps[:4], ends[:4])             # P(A | k) for k = 1..4
    assert lengths["ends"][9] == pytest.approx(lengths["ends"][3], abs=1e-9)
    assert lengths["keeps"][6] > lengths["keeps"][3] + 0.1       # gains to depth 7
    # the loss starts past T = 7: the same to depth 7 as a head trained to 20, less after
    deeper = 1.0 + (table(20.0, 0.99) * np.arange(11)).sum(-1)
    assert lengths["keeps"][6] == pytest.approx(deeper[6], abs=1e-12)
    assert lengths["keeps"][9] < deeper[9] - 0.05
    # a trained depth inside the measured depths is measured, never replaced by the end
    inside = table(2.5, 0.5 * ENDS_AT_MEASURED_PROBABILITY)
    np.testing.assert_allclose(inside, table(2.5, 0.99))


def test_the_depth_limited_drafter_walks_its_own_law():
    rng = np.random.default_rng(4)
    for k in (2, 6):
        walked = 1.0 + DRAFTER.cycles(rng, 32, 400, k).mean()
        assert walked == pytest.approx(DRAFTER.acceptance_length([k])[0], abs=0.03)
    lengths = DRAFTER.acceptance_length(range(1, 9))
    assert np.all(np.diff(lengths) > 0) and lengths[-1] - lengths[-2] < 0.01   # plateau


# ----------------------------------------------------------------------------- plumbing

@pytest.fixture
def mock_acceptance_sampling(monkeypatch):
    """The token model's compiled sampling replaced by prior draws (JSON shapes only)."""
    from pymc.testing import mock_sample

    from bayesspec import inference

    monkeypatch.setattr(inference, "compile_model", lambda model, settings: model)

    def prior_draws(model, settings, data=None):
        return mock_sample(model=model, draws=min(settings.draws, 100), chains=2,
                           random_seed=settings.seed,
                           sample_stats={"diverging": lambda size: np.zeros(size, bool)})

    monkeypatch.setattr(inference, "sample_compiled", prior_draws)


def test_the_verb_answers_a_table_with_a_new_run_interval(tmp_path, capsys,
                                                          mock_acceptance_sampling):
    path = write(tmp_path, TABLE)
    assert main(["acceptance", str(path), "--k-max", "7", "--json", "--draws", "100"]) == 0
    document = json.loads(capsys.readouterr().out)
    setup = document["setups"][0]
    assert setup["structure"] == "spread+depth" and "totals alone" in setup["chosen_by"]
    assert setup["k_measured"] == [2, 3, 4]
    assert {"run_scatter", "deep_decay", "trained_depth"} <= set(setup["parameters"])
    entries = {e["k"]: e for e in setup["acceptance_length"]}
    assert entries[3]["measured"] and entries[6]["extrapolated"]
    assert set(entries[6]["new_run"]) >= {"lo", "median", "hi"}
    check = setup["measured_check"][0]
    assert check["acceptance_length"]["measured"] == pytest.approx(2.10)
    assert setup["at_measured_k"][0]["acceptance_length_measured"] == pytest.approx([2.10])
    assert main(["acceptance", str(path), "--k-max", "7", "--draws", "100"]) == 0
    assert "not measured" in capsys.readouterr().out
    assert main(["acceptance", str(path), "--structure", "free"]) == 2
    assert "per-position counters" in capsys.readouterr().err


def test_totals_enter_the_speculative_fit_through_the_same_token_process():
    """acceptance_law=token on a sweep whose SD rows carry totals alone: the windows are
    totals windows of the same likelihood, with the run term and the deep positions."""
    from bayesspec.bayes.speculative import SpeculativeLatencyModel
    from bayesspec.data import prepare
    from bayesspec.simulate.synthetic import generate_sweeps, speculative_truth

    truth = speculative_truth(alphas=(0.7,), ks=(2, 4))
    out = generate_sweeps(truth.assign(drafter=np.where(truth["k"] > 0, "EAGLE3", "")),
                          seed=3)
    sd = out["k"] > 0
    for k in (2, 4):
        window = depth_limited_counters(DRAFTER, [k], drafts_per_window=1000, seed=k).iloc[0]
        rows = sd & (out["k"] == k)
        out.loc[rows, "num_drafts"] = window["num_drafts"]
        out.loc[rows, "accepted_tokens"] = window["accepted_tokens"]
    out.loc[sd, "alpha"] = np.nan
    model = SpeculativeLatencyModel(config={"acceptance_law": "token"})
    pm_model = model.build(prepare(out))
    names = {v.name for v in pm_model.free_RVs}
    assert {"acceptance_run_scatter", "acceptance_deep_decay",
            "acceptance_trained_depth"} <= names
    windows = model.inputs.extras["acceptance_token"]
    assert not windows["has_positions"].any()
    assert windows["measured_depth"].max() == 4
    point = pm_model.initial_point()
    logp = pm_model.compile_logp()(point)
    assert np.isfinite(logp)


# ----------------------------------------------------------------------------- a real fit

def fitted_intervals_of_totals(frame):
    """The token-process fit of a drafter's totals and the 90% intervals of E(0..8)."""
    from bayesspec.inference import SamplerSettings

    model = TokenAcceptanceModel()
    windows = counter_windows(counters_of(frame))
    model.windows = windows
    model.fit(windows, None, SamplerSettings(draws=500, tune=500, chains=2, seed=3,
                                             progress=False))
    lo, hi = np.quantile(model.acceptance_length_draws(0, 8), [0.05, 0.95], axis=0)
    return model, lo, hi


@pytest.mark.slow
def test_a_depth_limited_drafter_from_totals_at_k_1_to_4():
    """Totals of a simulated depth-limited head at k = 1..4 (one run each): E(1..4)
    covered, E(k) intervals wider at every k past 4, and the truth past the trained
    depth inside them."""
    frame = depth_limited_counters(DRAFTER, [1, 2, 3, 4], seed=11)
    _, lo, hi = fitted_intervals_of_totals(frame)
    truth = DRAFTER.acceptance_length(range(1, 9))
    assert np.all((lo[1:] <= truth) & (truth <= hi[1:])), (lo, hi, truth)
    width = hi - lo
    assert np.all(np.diff(width[4:]) > 0), width


@pytest.mark.slow
def test_a_cliff_at_depth_2_from_totals_at_k_1_to_4():
    """A head that falls off a cliff past depth 2, totals at k = 1..4: the fit places its
    trained depth inside the measured depths (its 90% interval holds 2, from above 1.5
    and below D = 4: the prior alone would put most of its mass past 4), E(3) and E(4),
    already on the plateau, lie inside their 90% intervals, and the plateau past 4 too."""
    cliff = DepthLimitedDrafter(0.8, 0.5, trained_depth=2, loss=4.0, error=0.05)
    frame = depth_limited_counters(cliff, [1, 2, 3, 4], seed=7)
    model, lo, hi = fitted_intervals_of_totals(frame)
    truth = cliff.acceptance_length(range(1, 9))
    assert np.all((lo[3:] <= truth[2:]) & (truth[2:] <= hi[3:])), (lo, hi, truth)
    trained = np.quantile(model._draws("trained_depth", 0), [0.05, 0.95])
    assert 1.5 < trained[0] < 2.0 < trained[1] < 4.0, trained
