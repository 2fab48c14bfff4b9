"""A new load test is a finite run from an empty server: its fill, its drain, and the
queue it has time to build near and past the ceiling, so that held-out points and a new
load test's interval are finite at every rate."""

from __future__ import annotations

from collections import deque

import numpy as np
import pandas as pd
import pytest

from bayesspec import laws
from bayesspec.prediction import Curve, MetricCurve, Noise, ProfileCurve


def simulated_run(rps, n, c1, c2, cap, rng):
    """Mean latency of one run of ``n`` Poisson arrivals through the mechanics the fluid
    describes, request by request: requests of one length (C1 of the engine's time each),
    every request in the batch advancing together, FIFO admission while the batch has
    fewer than ``cap``, and each admission's prefill stalling the batch for C2."""
    arrivals = np.cumsum(rng.exponential(1.0 / rps, n))
    remaining, admitted_at = [], []
    waiting = deque()
    latencies = []
    now, stall_until, next_arrival = 0.0, 0.0, 0

    def admit(arrived_at):
        nonlocal stall_until
        remaining.append(1.0)
        admitted_at.append(arrived_at)
        stall_until = max(now, stall_until) + c2

    while next_arrival < n or remaining or waiting:
        arrival_time = arrivals[next_arrival] if next_arrival < n else np.inf
        decoding_from = max(now, stall_until)
        done_time = (decoding_from + min(remaining) * c1) if remaining else np.inf
        later = min(arrival_time, done_time)
        if remaining and later > decoding_from:
            progress = (later - decoding_from) / c1
            remaining = [r - progress for r in remaining]
        now = later
        if arrival_time <= done_time:
            next_arrival += 1
            if len(remaining) < cap:
                admit(arrival_time)
            else:
                waiting.append(arrival_time)
        else:
            keep = [i for i, r in enumerate(remaining) if r > 1e-12]
            latencies += [now - admitted_at[i] for i, r in enumerate(remaining) if r <= 1e-12]
            remaining = [remaining[i] for i in keep]
            admitted_at = [admitted_at[i] for i in keep]
            while waiting and len(remaining) < cap:
                admit(waiting.popleft())
    return float(np.mean(latencies))


def test_a_long_run_is_the_steady_state():
    """The fluid's steady state is the law's: eq. (1), the slot queue's fluid part below
    the cap, and the decode profile's self-consistent N."""
    c1, c2 = 10.0, 0.03
    for rps in (1.0, 10.0, 25.0):
        assert laws.fluid_run_latency(rps, 1e7, c1, c2) == pytest.approx(
            laws.latency(rps, c1, c2), rel=2e-4)
    sizes, times = np.array([1.0, 32.0, 64.0, 128.0]), np.array([0.020, 0.024, 0.031, 0.045])
    curve = ProfileCurve(np.array([8.0]), np.array([0.02]), batch_sizes=sizes,
                         iteration_s=times, decode_tokens=256, cap=128)
    for rps in (2.0, 6.0, 7.0):         # up to N of about 100, below the cap of 128
        steady = laws.latency(rps, curve._fluid_parts(np.array([rps]))[4], 0.02)
        run = laws.fluid_run_latency(rps, 1e7, 8.0, 0.02, 128, curve.pieces, steady=steady)
        assert float(np.ravel(run)[0]) == pytest.approx(float(np.ravel(steady)[0]), rel=2e-4)


@pytest.mark.parametrize("cap", [None, 128])
def test_a_long_run_of_a_curve_is_its_steady_law(cap):
    """:meth:`Curve.run_latency` closes on the curve's own law (the profile's shift and,
    with a cap, the slot queue's stochastic wait) as the run grows."""
    sizes, times = np.array([1.0, 32.0, 64.0, 128.0]), np.array([0.020, 0.024, 0.031, 0.045])
    curve = ProfileCurve(np.array([8.0, 8.5]), np.array([0.02, 0.021]), batch_sizes=sizes,
                         iteration_s=times, decode_tokens=256, cap=cap)
    rates = np.array([1.0, 4.0, 6.5])
    np.testing.assert_allclose(curve.run_latency(rates, 1e7), curve.latency(rates), rtol=1e-3)
    short = curve.run_latency(rates, 1000)
    assert np.all(short < curve.latency(rates)) and np.all(short > 0.9 * curve.latency(rates))
    plain = Curve(np.array([8.0, 8.5]), np.array([0.02, 0.021]), cap=cap)
    np.testing.assert_allclose(plain.run_latency(rates, 1e7), plain.latency(rates), rtol=1e-3)


def test_a_run_sits_below_the_steady_state_by_its_fill_and_drain():
    """The deficit against the steady state is the fill's and the drain's, the same for
    any longer run: the mean closes on the steady state as 1/n."""
    c1, c2, rps = 10.0, 0.03, 10.0
    steady = laws.latency(rps, c1, c2)
    deficits = [n * (steady - laws.fluid_run_latency(rps, n, c1, c2)) for n in (2000, 8000)]
    assert deficits[0] > 0
    assert deficits[1] == pytest.approx(deficits[0], rel=0.02)


def test_a_run_is_finite_at_every_rate_and_rises_with_it():
    c1, c2, cap = 10.0, 0.03, 128
    ceiling = laws.ceiling_rps(c1, c2, cap)
    rates = ceiling * np.linspace(0.2, 3.0, 40)
    run = laws.fluid_run_latency(rates, 1000, c1, c2, cap)
    assert np.all(np.isfinite(run))
    assert np.all(np.diff(run) > 0)
    assert np.all(run <= laws.capped_latency(rates, c1, c2, cap) * (1 + 1e-9))
    # more requests past the ceiling: a longer queue
    past = laws.fluid_run_latency(1.2 * ceiling, np.array([500, 1000, 2000, 4000]), c1, c2, cap)
    assert np.all(np.diff(past) > 0)


def test_past_the_ceiling_the_queue_grows_at_the_excess_rate():
    """Requests arrive at RPS and leave at the full batch's throughput mu: request i waits
    about i (1/mu - 1/RPS), so the run's mean grows linearly with n, at half that. The
    fluid's mu is its own mechanics' (prefills stalling a full batch one admission at a
    time), within 10% of the law's cap throughput; the simulated runs of the test below
    check it request by request."""
    c1, c2, cap = 10.0, 0.03, 128
    ceiling = laws.ceiling_rps(c1, c2, cap)
    rps = 1.5 * ceiling
    runs = laws.fluid_run_latency(rps, np.array([4000.0, 8000.0, 16000.0]), c1, c2, cap)
    slopes = np.diff(runs) / np.array([4000.0, 8000.0])
    assert slopes[1] == pytest.approx(slopes[0], rel=0.03)
    assert slopes[1] == pytest.approx(0.5 * (1 / ceiling - 1 / rps), rel=0.10)


def test_the_steps_are_fine_enough():
    c1, c2, cap = 10.0, 0.03, 128
    rates = laws.ceiling_rps(c1, c2, cap) * np.array([0.3, 0.8, 0.97, 1.0, 1.1, 2.0])
    coarse = laws.fluid_run_latency(rates, 1000, c1, c2, cap)
    fine = laws.fluid_run_latency(rates, 1000, c1, c2, cap, steps=4 * laws.FLUID_RUN_STEPS)
    np.testing.assert_allclose(coarse, fine, rtol=0.01)


@pytest.mark.parametrize("share, cap", [(0.5, np.inf), (0.85, np.inf), (0.9, 64),
                                        (1.3, 64)])
def test_the_fluid_run_is_the_mean_of_simulated_runs(share, cap):
    """Request-by-request runs (Poisson arrivals, one length) average to the fluid run,
    below, near and past the ceiling: within 4% where the fluid's ceiling is reached
    (the slot wait of random arrivals is not in the fluid: :func:`slot_wait_in_run`)."""
    c1, c2, n = 2.0, 0.01, 600
    rps = share * laws.ceiling_rps(c1, c2, cap)
    rng = np.random.default_rng(7)
    runs = [simulated_run(rps, n, c1, c2, cap, rng) for _ in range(6)]
    fluid = float(laws.fluid_run_latency(rps, n, c1, c2, cap))
    steady = float(laws.capped_latency(rps, c1, c2, cap))
    spread = np.std(runs) / np.sqrt(len(runs))
    assert abs(np.mean(runs) - fluid) < max(0.04 * fluid, 3 * spread)
    if np.isfinite(steady) and share < 0.9:
        # the finite run sits below the steady state, and the simulation agrees
        assert fluid < steady and np.mean(runs) < steady + 3 * spread


def test_the_slot_wait_a_run_builds():
    rps, n = 9.0, 1000
    small = laws.slot_wait_in_run(0.01, rps, n)
    assert small == pytest.approx(0.01, rel=0.01)
    waits = laws.slot_wait_in_run(np.array([0.1, 1.0, 10.0, 100.0, np.inf]), rps, n)
    assert np.all(np.diff(waits) > 0)
    critical = (4 / 3) * np.sqrt(n / np.pi) / rps
    assert waits[-1] == pytest.approx(critical)
    assert laws.slot_wait_in_run(0.0, rps, n) == 0.0


def _noise(draws):
    return Noise(base=np.full(draws, 0.02), load=np.full(draws, 0.01))


def test_a_new_load_test_is_finite_where_the_steady_law_is_not():
    rng = np.random.default_rng(0)
    draws = 200
    c1 = rng.normal(10.0, 0.2, draws)
    c2 = rng.normal(0.03, 0.001, draws)
    curve = Curve(c1, c2, cap=128, noise=_noise(draws))
    ceiling = np.median(curve.ceiling)
    rates = np.array([0.5, 0.98, 1.05]) * ceiling
    steady = curve.predictive(rates, np.random.default_rng(1))
    run = curve.predictive(rates, np.random.default_rng(1), run_requests=1000)
    assert np.mean(np.isinf(steady[:, 2])) > 0.9
    assert np.all(np.isfinite(run))
    assert np.median(run[:, 0]) == pytest.approx(np.median(steady[:, 0]), rel=0.02)
    # without a request count the prediction is the steady law's, draw for draw
    np.testing.assert_array_equal(curve.predictive(rates, np.random.default_rng(1)), steady)
    # a summary of a new load test: finite too
    summary = MetricCurve(1.2 * c1, c2, np.full(draws, 1.5), metric="p99", mean_c1=c1,
                          cap=128, noise=_noise(draws))
    p99 = summary.predictive(rates, np.random.default_rng(2), n_requests=1000,
                             run_requests=1000)
    assert np.all(np.isfinite(p99))
    assert np.mean(np.isinf(summary.predictive(rates, np.random.default_rng(2))[:, 2])) > 0.9


def _whole_run_sweep(whole_run: bool | None):
    from bayesspec.laws import capped_latency

    rng = np.random.default_rng(3)
    rps = np.linspace(0.5, 7.5, 8)
    mean = capped_latency(rps, 10.0, 0.03, 128) * np.exp(0.01 * rng.standard_normal(8))
    frame = {"verifier": "Llama-2-70B", "gpu": "A100", "prefill_tokens": 256,
             "decode_tokens": 256, "rps": rps, "latency_mean_s": mean, "n_requests": 1000,
             "latency_std_s": 0.05 * mean, "max_num_seqs": 128}
    if whole_run is not None:
        frame["whole_run"] = whole_run
    return pd.DataFrame(frame)


def test_predict_answers_for_a_new_whole_run(tmp_path, capsys, mock_sampling):
    """``predict --requests`` on whole runs: a new load test of that many requests, finite
    past the ceiling; on windowed points a request count for the mean is refused."""
    import json

    from bayesspec.cli import main

    for whole, name in ((True, "whole"), (None, "window")):
        data, out = tmp_path / f"{name}.csv", tmp_path / f"{name}.nc"
        _whole_run_sweep(whole).to_csv(data, index=False)
        assert main(["fit", str(data), "-o", str(out), "--draws", "50", "--tune", "50",
                     "--chains", "2", "--no-loo"]) == 0
        capsys.readouterr()
        command = ["predict", str(out), "--rps", "2,400", "--requests", "1000", "--json"]
        if whole:
            assert main(command) == 0
            answer = json.loads(capsys.readouterr().out)
            assert answer["whole_run"] and answer["n_requests"] == 1000
            far = answer["points"][1]
            assert far["p_saturated"] > 0.9
            # a run past the ceiling has a finite mean: the steady law's is none
            assert far["predictive_s"]["median"] is not None
            assert far["latency_s"]["median"] is None
            assert main(command[:-3] + ["--json"]) == 0     # the data's own count
            assert json.loads(capsys.readouterr().out)["n_requests"] == 1000
        else:
            assert main(command) == 2
            err = capsys.readouterr().err
            assert "--requests" in err and "whole_run" in err
            assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("whole", [True, False])
def test_held_out_whole_runs_are_predicted_as_runs(whole):
    """``checks.predictive_points``: a held-out point the file marks ``whole_run`` is a new
    run of its own request count, finite near the ceiling where the steady law's upper
    bound is not; a point without the mark keeps the steady law's interval."""
    from bayesspec.data import assign_groups, prepare, row_group_labels
    from bayesspec.checks.posterior_predictive import predictive_points

    rng = np.random.default_rng(4)
    draws = 400
    c1, c2 = rng.normal(10.0, 0.1, draws), rng.normal(0.03, 0.0015, draws)
    ceiling = float(np.median(laws.ceiling_rps(c1, c2, 128)))
    rows = _whole_run_sweep(whole if whole else None)
    near = rows.iloc[[-1]].assign(rps=0.99 * ceiling, latency_mean_s=13.5)
    data = prepare(pd.concat([rows, near], ignore_index=True))
    groups, _ = assign_groups(data)
    data["group"] = row_group_labels(data, groups)

    class Fitted:
        def __init__(self):
            self.data, self.groups = data.iloc[:5], groups

        def group_curve(self, g, admit_unmeasured=True):
            return Curve(c1, c2, cap=128, noise=_noise(draws))

    points = predictive_points(Fitted(), data.iloc[5:])
    held = points.loc[points["held_out"]]
    top = held.loc[held["rps"].idxmax()]
    steady = np.median(Curve(c1, c2, cap=128).latency(np.array([top["rps"]])))
    if whole:
        assert np.isfinite(held["hi"]).all() and top["predicted"] < steady
    else:
        assert not np.isfinite(top["hi"])
    fitted = points.loc[~points["held_out"]]
    assert np.isfinite(fitted["hi"]).all()


def test_a_whole_runs_density_is_the_runs():
    """``log_predictive_density(..., run_requests=)`` (the leave-out check's elpd): near
    and past the ceiling a run's measured mean is likely under the run and unlikely or
    impossible under the steady law; away from it the two agree."""
    rng = np.random.default_rng(7)
    draws = 300
    c1, c2 = rng.normal(10.0, 0.1, draws), rng.normal(0.03, 0.001, draws)
    curve = Curve(c1, c2, cap=128, noise=_noise(draws))
    ceiling = float(np.median(curve.ceiling))
    rates = np.array([0.3, 1.02]) * ceiling
    run = np.median(curve.run_latency(rates, 1000), axis=0)
    steady = curve.log_predictive_density(rates, run)
    as_run = curve.log_predictive_density(rates, run, run_requests=1000)
    assert np.isfinite(as_run).all()
    assert as_run[1] > steady[1] + 2.0
    assert as_run[0] == pytest.approx(steady[0], abs=0.2)
