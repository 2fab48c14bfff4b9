"""Acceptance counters decide whether a fitted group is one configuration: windows that
disagree beyond any sampling error are refused on reading, named by rows and by the
column that would tell them apart; real sweeps of one configuration pass; a fit that
pools them anyway is flagged by the posterior predictive check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bayesspec import checks, datasets
from bayesspec.cli import main
from bayesspec.data import prepare, read_tidy
from bayesspec.data.groups import (POOLED_ACCEPTANCE_P, acceptance_spread, assign_groups,
                                   check_one_acceptance_per_group, row_ranges,
                                   window_tokens)
from bayesspec.errors import BadInput
from bayesspec.simulate import setup, sweep
from bayesspec.simulate.synthetic import add_position_counters, generate_sweeps, speculative_truth

REQUESTS = 400      # the README walkthrough's requests per point
WALKTHROUGH = Path(__file__).resolve().parents[2] / "examples" / "walkthrough.toml"


def simulated(alpha: float, seed: int = 0, k: int = 3) -> pd.DataFrame:
    """One simulated GuideLLM-style sweep of Qwen3-8B with its EAGLE-3 head (counters
    included), as `bayesspec simulate` writes it."""
    return sweep(setup("Qwen3-8B", "H100", k=k, alpha=alpha, prefill=512, decode=512), 9,
                 n_requests=REQUESTS, seed=seed).rows


@pytest.fixture(scope="module")
def sweeps():
    return {0.7: simulated(0.7), 0.8: simulated(0.8), "0.8 again": simulated(0.8, seed=5)}


def blank_alpha(*parts: pd.DataFrame) -> pd.DataFrame:
    """Sweeps in one file with the alpha column left blank (counters kept)."""
    frame = pd.concat(parts, ignore_index=True)
    frame["alpha"] = np.nan
    return frame


def spreads(data: pd.DataFrame) -> dict:
    groups, index = assign_groups(data)
    return acceptance_spread(data, groups["label"].to_numpy(object)[index])


# ------------------------------------------------------------------ refused: two configurations

def test_sweeps_at_two_acceptances_with_alpha_blank_are_refused_by_rows(sweeps):
    merged = blank_alpha(sweeps[0.7], sweeps[0.8])
    with pytest.raises(BadInput) as error:
        prepare(merged, source="sweeps.csv")
    message = str(error.value)
    assert error.value.column == "alpha" and error.value.row == 10
    # the rows of each sweep and their shares of drafted tokens accepted: the simulator's
    # i.i.d. acceptance gives (a + a^2 + a^3)/3, 0.51 at 0.7 and 0.65 at 0.8
    assert "rows 1-9 and 10-18 accept 0.51 and 0.65 of their drafted tokens" in message
    assert "set `alpha` per sweep" in message
    assert len(message.splitlines()) == 1


def test_the_spread_is_far_beyond_the_threshold_not_at_its_edge(sweeps):
    """The bound lets every request accept all or nothing, yet two sweeps of 400 requests
    per point at alpha 0.7 and 0.8 sit many orders of magnitude past it."""
    spread, = spreads(prepare_unchecked(blank_alpha(sweeps[0.7], sweeps[0.8]))).values()
    assert spread.p_value < POOLED_ACCEPTANCE_P * 1e-10
    assert not spread.pooled_ok
    assert spread.split == (tuple(range(1, 10)), tuple(range(10, 19)))


def prepare_unchecked(frame: pd.DataFrame) -> pd.DataFrame:
    """The sweeps prepared one at a time and stacked: a table the reader would refuse."""
    parts = [prepare(part.reset_index(drop=True)) for _, part in
             frame.groupby((frame.index // 9), sort=True)]
    return pd.concat(parts, ignore_index=True)


def test_fit_refuses_the_file_in_one_line_and_writes_nothing(sweeps, tmp_path, capsys):
    path = tmp_path / "sweeps.csv"
    blank_alpha(sweeps[0.7], sweeps[0.8]).to_csv(path, index=False)
    assert main(["fit", str(path), "--model", "speculative", "-o",
                 str(tmp_path / "fit.nc")]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and "row 10, column 'alpha'" in errors[0]
    assert "Traceback" not in err
    assert not (tmp_path / "fit.nc").exists()


def test_a_column_that_tells_the_sweeps_apart_is_named(sweeps):
    frame = blank_alpha(sweeps[0.7], sweeps[0.8])
    frame["dataset"] = ["sharegpt"] * 9 + ["humaneval"] * 9
    with pytest.raises(BadInput, match="they differ in 'dataset'"):
        prepare(frame)


def test_a_given_alpha_that_the_counters_contradict_is_refused_too(sweeps):
    frame = blank_alpha(sweeps[0.7], sweeps[0.8])
    frame["alpha"] = 0.75
    with pytest.raises(BadInput, match="labelled alpha 0.75: correct `alpha` per sweep"):
        prepare(frame)


def test_without_request_counts_the_decode_length_counts_them(sweeps):
    """No n_requests: every cycle commits its accepted tokens plus one, so a window's
    requests are (drafts + accepted) / (decode - 1); still refused, and close to the
    simulator's own counts."""
    frame = blank_alpha(sweeps[0.7], sweeps[0.8]).drop(columns=["n_requests"])
    _, _, requests = window_tokens(frame)
    measured = pd.concat([sweeps[0.7], sweeps[0.8]])["n_requests"].to_numpy(float)
    # the measured window's edges cut requests in two, so counts differ by a few
    assert np.allclose(requests, measured, rtol=0.05)
    with pytest.raises(BadInput, match="rows 1-9 and 10-18"):
        prepare(frame)


# ------------------------------------------------------------------ passed: one configuration

def test_two_runs_of_one_configuration_pool(sweeps):
    """Run-to-run scatter of one configuration (two seeds, alpha blank) is no reason."""
    frame = blank_alpha(sweeps[0.8], sweeps["0.8 again"])
    data = prepare(frame)
    spread, = spreads(data).values()
    assert spread.pooled_ok and spread.p_value > 0.01 and spread.windows == 18


@pytest.mark.parametrize("source", ["readme_grid", "bundled"])
def test_the_readme_sweeps_and_the_bundled_ones_pass(source, tmp_path):
    """The README's grid (examples/walkthrough.toml) and the bundled speculative sweeps."""
    if source == "readme_grid":
        path = tmp_path / "sweeps.csv"
        assert main(["simulate", "--grid", str(WALKTHROUGH), "-o", str(path), "--quiet"]) == 0
    else:
        path = datasets.path("speculative")
    data = read_tidy(path)
    found = spreads(data)
    groups, index = assign_groups(data)
    speculative = set(groups["label"].to_numpy(object)[index[data["k"].to_numpy() > 0]])
    assert set(found) == speculative          # every SD group judged ...
    assert all(s.pooled_ok and s.p_value > 0.01 for s in found.values())   # ... and passed


def test_overdispersed_windows_of_one_alpha_pass():
    """Prompt-to-prompt variation (each window's rates drawn from a Beta about alpha,
    concentration 300 as the acceptance model's tests use) stays inside the bound."""
    truth = speculative_truth(alphas=(0.6, 0.8), ks=(2, 5))
    for seed in range(5):
        table = add_position_counters(generate_sweeps(truth, seed=8), seed=seed,
                                      concentration=300.0, drop_alpha=False)
        check_one_acceptance_per_group(table)
        found = spreads(table)
        assert len(found) == 4 and all(s.pooled_ok for s in found.values())


def test_rows_are_said_as_ranges():
    assert row_ranges([9, 3, 4, 5]) == "3-5, 9"
    assert row_ranges([7]) == "7"


# ------------------------------------------------------------------ the check of a fit

def pooled_fit(data: pd.DataFrame):
    """A dense fit of ``data`` built without the reader (a fit of a table the reader
    would refuse, or one made before it did), with prior draws for a posterior."""
    from pymc.testing import mock_sample

    from bayesspec.bayes import DenseLatencyModel
    from bayesspec.inference.fitfile import Fit

    model = DenseLatencyModel()
    pm_model = model.build(data)
    tree = mock_sample(model=pm_model, draws=40, chains=2, random_seed=1,
                       sample_stats={"diverging": lambda size: np.zeros(size, bool)})
    return Fit.from_sampling(model, data, tree)


def test_the_predictive_check_flags_a_fit_that_pools_two_acceptances(sweeps):
    merged = prepare_unchecked(blank_alpha(sweeps[0.7], sweeps[0.8]))
    document = checks.predictive_check(pooled_fit(merged), prob=0.9)
    entry, = [g for g in document["groups"] if "acceptance_counters" in g]
    assert entry["flagged"]
    assert any(reason.startswith("acceptance counters disagree: rows 1-9 and 10-18")
               for reason in entry["misfit"])
    assert entry["acceptance_counters"]["one_configuration"] is False
    assert entry["group"] in document["flagged"]
    assert document["verdict"].startswith("NOT ONE CONFIGURATION: 1 group pools sweeps")


def test_the_predictive_check_reports_the_counters_of_one_configuration(sweeps):
    one = prepare(blank_alpha(sweeps[0.8], sweeps["0.8 again"]))
    document = checks.predictive_check(pooled_fit(one), prob=0.9)
    entry, = [g for g in document["groups"] if "acceptance_counters" in g]
    counters = entry["acceptance_counters"]
    assert counters["one_configuration"] is True and counters["windows"] == 18
    assert counters["accepted_share"] == pytest.approx(0.651, abs=0.005)
    assert not any(reason.startswith("acceptance") for reason in entry["misfit"])
    assert "NOT ONE CONFIGURATION" not in document["verdict"]
