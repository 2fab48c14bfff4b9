"""The decode profile inside the slot queue's birth-death chain (``profile_law`` "chain"):
the slot queue and eq. (1) when the profile is flat, one formula in NumPy and PyTensor,
the curve's ceiling where the chain has no steady state, and a fit that recovers the costs
of data drawn from it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bayesspec import laws
from bayesspec.prediction import Curve, ProfileCurve

from test_decode_profile import SIZES, TIMES, profile_frame


def chain(rps, c1, c2, cap, extra, wait_scale=1.0, xp=np, soft_margin=None):
    rps = np.asarray(rps, dtype=float)[:, None]
    return laws.profile_chain_latency_expr(
        rps, np.array([c1]), np.array([c2]), np.array([float(cap)]), extra[None, :],
        np.ones((1, extra.size)), xp=xp, wait_scale=wait_scale,
        soft_margin=soft_margin)[:, 0]


@pytest.mark.parametrize("wait_scale", [1.0, 0.5])
def test_a_flat_profile_gives_the_slot_queue_and_eq1(wait_scale):
    cap, c1, c2 = 32, 2.0, 0.05
    ceiling = float(laws.cap_throughput_expr(c1, c2, cap))
    rates = np.linspace(0.01, 0.995, 30) * ceiling
    flat = np.zeros(cap)
    np.testing.assert_allclose(chain(rates, c1, c2, cap, flat, wait_scale),
                               laws.capped_latency(rates, c1, c2, cap, wait_scale=wait_scale),
                               rtol=1e-9)
    far = np.zeros(2000)   # a cap no rate below 1/C2 reaches: eq. (1)
    rates = np.linspace(0.01, 0.9, 10) / c2
    np.testing.assert_allclose(chain(rates, c1, c2, 2000, far), laws.latency(rates, c1, c2),
                               rtol=1e-9)


def test_the_graph_and_numpy_compute_the_same_chain():
    import pytensor.tensor as pt

    extra = laws.profile_chain_extra(256, SIZES, TIMES, 48)
    rates = np.array([0.5, 2.0, 3.5])
    symbolic = laws.profile_chain_latency_expr(
        pt.as_tensor(rates[:, None]), pt.as_tensor(np.array([10.4])),
        pt.as_tensor(np.array([0.063])), pt.as_tensor(np.array([48.0])),
        pt.as_tensor(extra[None, :]), pt.as_tensor(np.ones((1, 48))), xp=pt,
        wait_scale=0.5, soft_margin=1e-3).eval()[:, 0]
    np.testing.assert_allclose(symbolic, chain(rates, 10.4, 0.063, 48, extra, 0.5),
                               rtol=1e-10)


@pytest.mark.parametrize("soft_margin", [None, 1e-3])
def test_the_chains_closed_form_elasticity_is_its_slope_in_log_rate(soft_margin):
    """d log L / d log RPS of the chain in closed form equals a central difference, from
    idle through the profile's dip (a negative slope) to the ceiling, and past it on the
    soft margin; the graph computes the same."""
    import pytensor.tensor as pt

    extra = laws.profile_chain_extra(256, SIZES, TIMES, 48)
    rates = np.array([0.0, 0.01, 0.5, 1.5, 2.5, 3.3, 3.5, 3.54]
                     + ([3.6, 4.0] if soft_margin else []))
    args = (np.array([10.4]), np.array([0.063]), np.array([48.0]), extra[None, :],
            np.ones((1, 48)))

    def latency_at(r):
        return laws.profile_chain_latency_expr(r[:, None], *args, wait_scale=0.5,
                                               soft_margin=soft_margin)[:, 0]

    _, slope = laws.profile_chain_latency_expr(rates[:, None], *args, wait_scale=0.5,
                                               soft_margin=soft_margin, elasticity=True)
    difference = laws.load_elasticity_expr(latency_at, rates, step=1e-6)
    difference[0] = 0.0                  # at idle the slope is zero
    np.testing.assert_allclose(slope[:, 0], difference, rtol=1e-5, atol=1e-8)
    assert slope[3, 0] < 0 < slope[-1, 0]
    _, symbolic = laws.profile_chain_latency_expr(
        pt.as_tensor(rates[:, None]), *(pt.as_tensor(a) for a in args), xp=pt,
        wait_scale=0.5, soft_margin=soft_margin, elasticity=True)
    np.testing.assert_allclose(symbolic.eval()[:, 0], slope[:, 0], rtol=1e-10)


def test_the_chain_curve_ends_where_the_line_for_a_slot_never_clears():
    """The ceiling of the chain law is the full batch's throughput, cap / T(cap), with
    T(cap) = C1 + C2 (cap - 1) + the profile's seconds at a batch of cap."""
    curve = ProfileCurve(np.array([10.4]), np.array([0.063]), batch_sizes=SIZES,
                         iteration_s=TIMES, decode_tokens=256, cap=48, law="chain")
    extra = laws.profile_chain_extra(256, SIZES, TIMES, 48)
    expected = 48 / (10.4 + 0.063 * 47 + extra[-1])
    assert curve.ceiling[0] == pytest.approx(expected, rel=1e-6)
    rates = np.array([0.2, 0.6, 0.95]) * expected
    np.testing.assert_allclose(curve.latency(rates)[0],
                               chain(rates, 10.4, 0.063, 48, extra, 1.0), rtol=1e-12)
    assert np.isinf(curve.latency(np.array([1.01 * expected]))[0, 0])
    with pytest.raises(ValueError, match="cap"):
        ProfileCurve(np.array([10.4]), np.array([0.063]), batch_sizes=SIZES,
                     iteration_s=TIMES, decode_tokens=256, law="chain")


def test_the_chain_is_an_option_of_the_dense_models_profile_only():
    from bayesspec.bayes import DenseLatencyModel, get_model_class

    with pytest.raises(ValueError, match="profile_law"):
        DenseLatencyModel({"profile_law": "binomial"})
    with pytest.raises(ValueError, match="--decode-profile"):
        DenseLatencyModel({"profile_law": "chain"})
    with pytest.raises(ValueError, match="dense model"):
        get_model_class("tails")({"profile_law": "chain", "decode_profile": "x.csv"})


def test_the_chain_and_the_bound_are_the_dense_profiles_defaults_and_old_fits_keep_theirs(
        tmp_path, mock_sampling):
    """"auto" resolves at construction, so a fit file records the law it was fitted with;
    a fit file made before the options existed reads back with the old defaults."""
    import json

    from bayesspec.bayes import DenseLatencyModel, get_model_class, load_fit
    from bayesspec.data import prepare
    from bayesspec.inference import SamplerSettings
    from bayesspec.workflow import fit

    def resolved(model):
        return model.config["profile_law"], model.config["noise_load_at"]

    assert resolved(DenseLatencyModel({"decode_profile": "p.csv"})) == ("chain", "measured")
    assert resolved(DenseLatencyModel()) == ("poisson", "curve")
    assert resolved(get_model_class("tails")({"decode_profile": "p.csv"})) == ("poisson",
                                                                               "curve")
    # what the user names is kept
    named = DenseLatencyModel({"decode_profile": "p.csv", "profile_law": "poisson"})
    assert resolved(named) == ("poisson", "curve")
    named = DenseLatencyModel({"decode_profile": "p.csv", "noise_load_at": "curve"})
    assert resolved(named) == ("chain", "curve")
    with pytest.raises(ValueError, match="noise_load_at"):
        get_model_class("speculative")({"noise_load_at": "auto"})

    path = tmp_path / "profile.csv"
    profile_frame().to_csv(path, index=False)
    truth = ProfileCurve(np.array([10.4]), np.array([0.063]), batch_sizes=SIZES,
                         iteration_s=TIMES, decode_tokens=256, cap=48, law="chain")
    rps = np.linspace(0.05, 0.9, 6) * truth.ceiling[0]
    data = prepare(pd.DataFrame({"verifier": "Llama-2-70B", "gpu": "A100",
                                 "prefill_tokens": 256, "decode_tokens": 256, "rps": rps,
                                 "latency_mean_s": truth.latency(rps)[0],
                                 "max_num_seqs": 48}))
    result = fit(data, "dense", settings=SamplerSettings(draws=20, tune=20, chains=2,
                                                         seed=1, progress=False),
                 config={"decode_profile": str(path)})
    result.save(tmp_path / "new.nc")
    assert load_fit(tmp_path / "new.nc").group_curve(0).law == "chain"
    # an older file: the two options absent from its stored configuration
    stored = json.loads(result.tree.attrs["model_config"])
    for key in ("profile_law", "noise_load_at"):
        del stored[key]
    result.tree.attrs["model_config"] = json.dumps(stored)
    result.save(tmp_path / "old.nc")
    restored = load_fit(tmp_path / "old.nc")
    assert resolved(restored.model()) == ("poisson", "curve")
    assert restored.group_curve(0).law == "poisson"


@pytest.mark.long
def test_a_chain_fit_recovers_the_costs_of_a_chain_sweep(tmp_path):
    """One group's sweep drawn from the chain law (cap 48, the profile's fast band and tile
    step inside the swept range): the fit with the chain law converges at the defaults and
    its 90% intervals hold C1 and C2; its curve is within 1% of the truth's at every rate."""
    from bayesspec.data import prepare
    from bayesspec.inference import SamplerSettings
    from bayesspec.workflow import fit

    path = tmp_path / "profile.csv"
    profile_frame().to_csv(path, index=False)
    truth = ProfileCurve(np.array([10.4]), np.array([0.063]), batch_sizes=SIZES,
                         iteration_s=TIMES, decode_tokens=256, cap=48, law="chain")
    rng = np.random.default_rng(3)
    rps = np.linspace(0.05, 0.93, 11) * truth.ceiling[0]
    mean = truth.latency(rps)[0] * np.exp(0.005 * rng.standard_normal(rps.size))
    data = prepare(pd.DataFrame({"verifier": "Llama-2-70B", "gpu": "A100",
                                 "prefill_tokens": 256, "decode_tokens": 256, "rps": rps,
                                 "latency_mean_s": mean, "max_num_seqs": 48}))
    # at the defaults: a profile with a stated cap is fitted by the chain, with the bound
    result = fit(data, "dense", settings=SamplerSettings(seed=2, progress=False),
                 config={"decode_profile": str(path)})
    assert result.model_config["profile_law"] == "chain"
    assert result.model_config["noise_load_at"] == "measured"
    assert result.diagnostics["converged"], result.diagnostics["text"]
    for name, value in (("C1", 10.4), ("C2", 0.063)):
        lo, hi = np.quantile(result.draws(name, 0), [0.05, 0.95])
        assert lo <= value <= hi, (name, lo, value, hi)
    curve = result.group_curve(0)
    assert curve.law == "chain"
    median = np.median(curve.latency(rps), axis=0)
    np.testing.assert_allclose(median, truth.latency(rps)[0], rtol=0.01)


def test_the_chain_fits_chains_start_at_each_groups_own_chain_costs(tmp_path):
    """The starts of a chain fit are each group's least-squares costs under the chain law
    (``dense.chain_law_starts``), not the profile law's: on two groups drawn from the
    chain with different costs, within 2% of each truth."""
    from bayesspec.bayes.dense import DenseLatencyModel, chain_law_starts
    from bayesspec.data import prepare

    path = tmp_path / "profile.csv"
    profile_frame().to_csv(path, index=False)
    rng = np.random.default_rng(5)
    frames, truths = [], []
    for prefill, c1, c2 in ((256, 10.4, 0.063), (512, 6.0, 0.11)):
        truth = ProfileCurve(np.array([c1]), np.array([c2]), batch_sizes=SIZES,
                             iteration_s=TIMES, decode_tokens=256, cap=48, law="chain")
        rps = np.linspace(0.05, 0.6, 8) * truth.ceiling[0]
        mean = truth.latency(rps)[0] * np.exp(0.003 * rng.standard_normal(rps.size))
        frames.append(pd.DataFrame({"verifier": "Llama-2-70B", "gpu": "A100",
                                    "prefill_tokens": prefill, "decode_tokens": 256,
                                    "rps": rps, "latency_mean_s": mean, "max_num_seqs": 48}))
        truths.append((c1, c2, rps.max()))
    model = DenseLatencyModel({"decode_profile": str(path), "profile_law": "chain"})
    inputs = model.prepare(prepare(pd.concat(frames, ignore_index=True)))
    starts = chain_law_starts(inputs)
    for g, label in enumerate(inputs.groups["label"]):
        c1, c2, rps_max = truths[0] if "p256" in label else truths[1]
        utilisation = 1.0 / (1.0 + np.exp(-starts["utilisation_logit"][g]))
        assert np.exp(starts["log_C1"][g]) == pytest.approx(c1, rel=0.02), label
        assert utilisation / rps_max == pytest.approx(c2, rel=0.02), label


def test_the_chain_takes_its_cap_where_the_slot_queue_alone_would_not_reach_the_data(tmp_path):
    """A chain group whose points sit far below its cap (the slot queue alone would be
    eq. (1) there, so that cap stays out of the likelihood), fitted beside one that
    reaches its cap, still runs its chain over n = 1..cap: the graph's mean latency
    equals the numpy chain's at the same costs in both groups. Before, the graph's
    one-slot stand-in made it a queue of one: the log density at the vidur_capped
    hold-out fit's starts was -352 thousand, its posterior a far mode. A third group,
    without a profile, keeps the slot queue beside them."""
    from bayesspec.bayes.dense import DenseLatencyModel
    from bayesspec.data import prepare

    path = tmp_path / "profile.csv"
    profile_frame(verifier="Llama-2-70B").to_csv(path, index=False)
    frames, curves = [], []
    for prefill, cap, top in ((256, 256, 0.2), (512, 48, 0.9)):
        truth = ProfileCurve(np.array([10.4]), np.array([0.063]), batch_sizes=SIZES,
                             iteration_s=TIMES, decode_tokens=256, cap=cap, law="chain")
        rps = np.linspace(0.02, top, 5) * truth.ceiling[0]
        frames.append(pd.DataFrame({"verifier": "Llama-2-70B", "gpu": "A100",
                                    "prefill_tokens": prefill, "decode_tokens": 256,
                                    "rps": rps, "latency_mean_s": truth.latency(rps)[0],
                                    "max_num_seqs": cap}))
        curves.append(truth)
    slot_queue = Curve(np.array([10.4]), np.array([0.063]), cap=8.0)
    rps = np.linspace(0.05, 0.9, 5) * slot_queue.ceiling[0]
    frames.append(pd.DataFrame({"verifier": "Llama-2-7B", "gpu": "A100",
                                "prefill_tokens": 256, "decode_tokens": 256, "rps": rps,
                                "latency_mean_s": slot_queue.latency(rps)[0],
                                "max_num_seqs": 8}))
    curves.append(slot_queue)
    data = prepare(pd.concat(frames, ignore_index=True))
    model = DenseLatencyModel({"decode_profile": str(path), "profile_law": "chain"})
    inputs = model.prepare(data)
    labels = list(inputs.groups["label"])
    order = [next(i for i, label in enumerate(labels) if label.startswith(start))
             for start in ("Llama-2-70B p256 ", "Llama-2-70B p512 ", "Llama-2-7B ")]
    assert list(inputs.groups["cap_in_likelihood"].iloc[order]) == [False, True, True]
    pm_model = model.build(data)
    observed = pm_model.observed_RVs[0]
    (mean_log,) = pm_model.replace_rvs_by_values([observed.owner.inputs[-2]])
    at = pm_model.compile_fn(mean_log, inputs=pm_model.value_vars, on_unused_input="ignore")
    point = pm_model.initial_point()
    point["log_C1"] = np.log(np.full(3, 10.4))
    rps = inputs.rows["rps"].to_numpy(float)
    rps_max = np.array([rps[inputs.group_index == g].max() for g in range(3)])
    utilisation = 0.063 * rps_max
    point["utilisation_logit"] = np.log(utilisation / (1.0 - utilisation))
    mean = np.exp(at(point))
    for curve, g in zip(curves, order):
        members = inputs.group_index == g
        np.testing.assert_allclose(mean[members], curve.latency(rps[members])[0], rtol=1e-9)
