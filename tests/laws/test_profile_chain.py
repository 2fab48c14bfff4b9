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

from tests.data.test_decode_profile import SIZES, TIMES, profile_frame


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
    with pytest.raises(ValueError, match="tails model does not take profile_law"):
        get_model_class("tails")({"profile_law": "chain", "decode_profile": "x.csv"})


def test_the_chain_and_the_bound_are_the_dense_profiles_defaults_and_old_fits_keep_theirs(
        tmp_path, mock_sampling):
    """"auto" resolves at construction, so a fit file records the law it was fitted with;
    a fit file made before the options existed reads back with the old defaults."""
    import json

    from bayesspec.bayes import DenseLatencyModel, get_model_class, load_fit
    from bayesspec.data import prepare
    from bayesspec.inference import SamplerSettings
    from bayesspec.bayes.workflow import fit

    def resolved(model):
        return (model.config["profile_law"], model.config["noise_load_at"],
                model.config["prefill_batching"])

    assert resolved(DenseLatencyModel({"decode_profile": "p.csv"})) == ("chain", "measured",
                                                                       True)
    assert resolved(DenseLatencyModel()) == ("poisson", "curve", False)
    assert resolved(get_model_class("tails")({"decode_profile": "p.csv"})) == (
        "poisson", "curve", False)
    # what the user names is kept
    named = DenseLatencyModel({"decode_profile": "p.csv", "profile_law": "poisson"})
    assert resolved(named) == ("poisson", "curve", False)
    named = DenseLatencyModel({"decode_profile": "p.csv", "noise_load_at": "curve"})
    assert resolved(named) == ("chain", "curve", True)
    named = DenseLatencyModel({"decode_profile": "p.csv", "prefill_batching": False})
    assert resolved(named) == ("chain", "measured", False)
    with pytest.raises(ValueError, match="prefill_batching"):
        DenseLatencyModel({"decode_profile": "p.csv", "profile_law": "poisson",
                           "prefill_batching": True})
    with pytest.raises(ValueError, match="prefill_batching"):
        DenseLatencyModel({"decode_profile": "p.csv", "prefill_batching": "yes"})
    with pytest.raises(ValueError, match="prefill_batching"):
        DenseLatencyModel({"decode_profile": "p.csv", "prefill_batching": 1})
    # "auto" means the same everywhere: the bound with the profile's chain, else the curve
    assert get_model_class("speculative")({"noise_load_at": "auto"}).config[
        "noise_load_at"] == "curve"
    with pytest.raises(ValueError, match="noise_load_at"):
        get_model_class("speculative")({"noise_load_at": "bounded"})

    path = tmp_path / "profile.csv"
    profile_frame().to_csv(path, index=False)
    truth = ProfileCurve(np.array([10.4]), np.array([0.063]), batch_sizes=SIZES,
                         iteration_s=TIMES, decode_tokens=256, cap=48, law="chain",
                         prefill_batching=True)
    rps = np.linspace(0.05, 0.9, 6) * truth.ceiling[0]
    data = prepare(pd.DataFrame({"verifier": "Llama-2-70B", "gpu": "A100",
                                 "prefill_tokens": 256, "decode_tokens": 256, "rps": rps,
                                 "latency_mean_s": truth.latency(rps)[0],
                                 "max_num_seqs": 48}))
    result = fit(data, "dense", settings=SamplerSettings(draws=20, tune=20, chains=2,
                                                         seed=1, progress=False),
                 config={"decode_profile": str(path)})
    result.save(tmp_path / "new.nc")
    new = load_fit(tmp_path / "new.nc").group_curve(0)
    assert new.law == "chain" and new.prefill_batching and new.prefill_fixed_power == 1.0
    roofline = fit(data, "dense", settings=SamplerSettings(draws=20, tune=20, chains=2,
                                                           seed=1, progress=False),
                   config={"decode_profile": str(path), "prefill_fixed_power": 2.0})
    roofline.save(tmp_path / "roofline.nc")
    assert load_fit(tmp_path / "roofline.nc").group_curve(0).prefill_fixed_power == 2.0
    # an older file: the options absent from its stored configuration
    stored = json.loads(result.tree.attrs["model_config"])
    del stored["prefill_batching"]
    result.tree.attrs["model_config"] = json.dumps(stored)
    result.save(tmp_path / "unbatched.nc")
    unbatched = load_fit(tmp_path / "unbatched.nc").group_curve(0)
    assert unbatched.law == "chain" and not unbatched.prefill_batching
    for key in ("profile_law", "noise_load_at"):
        del stored[key]
    result.tree.attrs["model_config"] = json.dumps(stored)
    result.save(tmp_path / "old.nc")
    restored = load_fit(tmp_path / "old.nc")
    assert resolved(restored.model())[:2] == ("poisson", "curve")
    assert restored.group_curve(0).law == "poisson"


@pytest.mark.slow
def test_a_chain_fit_recovers_the_costs_of_a_chain_sweep(tmp_path):
    """One group's sweep drawn from the chain law with the batched prefill (cap 48, the
    profile's fast band and tile step inside the swept range): the fit with the chain law
    and the batched prefill (the defaults) converges and
    its 90% intervals hold C1 and C2; its curve is within 1% of the truth's at every rate."""
    from bayesspec.data import prepare
    from bayesspec.inference import SamplerSettings
    from bayesspec.bayes.workflow import fit

    path = tmp_path / "profile.csv"
    profile_frame().to_csv(path, index=False)
    truth = ProfileCurve(np.array([10.4]), np.array([0.063]), batch_sizes=SIZES,
                         iteration_s=TIMES, decode_tokens=256, cap=48, law="chain",
                         prefill_batching=True)
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
    assert result.model_config["prefill_batching"] is True
    assert result.diagnostics["converged"], result.diagnostics["text"]
    for name, value in (("C1", 10.4), ("C2", 0.063)):
        lo, hi = np.quantile(result.draws(name, 0), [0.05, 0.95])
        assert lo <= value <= hi, (name, lo, value, hi)
    curve = result.group_curve(0)
    assert curve.law == "chain" and curve.prefill_batching
    median = np.median(curve.latency(rps), axis=0)
    np.testing.assert_allclose(median, truth.latency(rps)[0], rtol=0.01)


@pytest.mark.parametrize("batched, power", [(False, 1.0), (True, 1.0), (True, 2.0)])
def test_the_chain_fits_chains_start_at_each_groups_own_chain_costs(tmp_path, batched,
                                                                    power):
    """The starts of a chain fit are each group's least-squares costs under the chain law
    (``dense.chain_law_starts``), not the profile law's: on two groups drawn from the
    chain with different costs, within 2% of each truth; with the batched prefill too,
    its fixed part at either power."""
    from bayesspec.bayes.dense import DenseLatencyModel, chain_law_starts
    from bayesspec.data import prepare

    path = tmp_path / "profile.csv"
    profile_frame().to_csv(path, index=False)
    rng = np.random.default_rng(5)
    frames, truths = [], []
    for prefill, c1, c2 in ((256, 10.4, 0.063), (512, 6.0, 0.11)):
        truth = ProfileCurve(np.array([c1]), np.array([c2]), batch_sizes=SIZES,
                             iteration_s=TIMES, decode_tokens=256, cap=48, law="chain",
                             prefill_batching=batched, prefill_fixed_power=power)
        rps = np.linspace(0.05, 0.6, 8) * truth.ceiling[0]
        mean = truth.latency(rps)[0] * np.exp(0.003 * rng.standard_normal(rps.size))
        frames.append(pd.DataFrame({"verifier": "Llama-2-70B", "gpu": "A100",
                                    "prefill_tokens": prefill, "decode_tokens": 256,
                                    "rps": rps, "latency_mean_s": mean, "max_num_seqs": 48}))
        truths.append((c1, c2, rps.max()))
    model = DenseLatencyModel({"decode_profile": str(path), "profile_law": "chain",
                               "prefill_batching": batched, "prefill_fixed_power": power})
    inputs = model.prepare(prepare(pd.concat(frames, ignore_index=True)))
    starts = chain_law_starts(inputs, batched, power)
    for g, label in enumerate(inputs.groups["label"]):
        c1, c2, rps_max = truths[0] if "p256" in label else truths[1]
        utilisation = 1.0 / (1.0 + np.exp(-starts["utilisation_logit"][g]))
        assert np.exp(starts["log_C1"][g]) == pytest.approx(c1, rel=0.02), label
        assert utilisation / rps_max == pytest.approx(c2, rel=0.02), label


@pytest.mark.parametrize("power", [1.0, 2.0])
def test_the_chain_takes_its_cap_where_the_slot_queue_alone_would_not_reach_the_data(
        tmp_path, power):
    """A chain group whose points sit far below its cap (the slot queue alone would be
    eq. (1) there, so that cap stays out of the likelihood), fitted beside one that
    reaches its cap, still runs its chain over n = 1..cap: the graph's mean latency
    equals the numpy chain's at the same costs in both groups. Before, the graph's
    one-slot stand-in made it a queue of one: the log density at the vidur_capped
    hold-out fit's starts was -352 thousand, its posterior a far mode. A third group,
    without a profile, keeps the slot queue beside them. The batched prefill's fixed part
    at the model's power is the curve's too."""
    from bayesspec.bayes.dense import DenseLatencyModel
    from bayesspec.data import prepare

    path = tmp_path / "profile.csv"
    profile_frame(verifier="Llama-2-70B").to_csv(path, index=False)
    frames, curves = [], []
    for prefill, cap, top in ((256, 256, 0.2), (512, 48, 0.9)):
        truth = ProfileCurve(np.array([10.4]), np.array([0.063]), batch_sizes=SIZES,
                             iteration_s=TIMES, decode_tokens=256, cap=cap, law="chain",
                             prefill_batching=True,   # the model's default with the chain
                             prefill_fixed_power=power)
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
    model = DenseLatencyModel({"decode_profile": str(path), "profile_law": "chain",
                               "prefill_fixed_power": power})
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


def _batched_args(cap=48, prefill_share=None):
    extra = laws.profile_chain_extra(256, SIZES, TIMES, cap)
    decode_s = laws._profile_time(np.arange(1.0, cap + 1.0), SIZES, TIMES)
    c2 = np.array([0.063])
    fixed = laws.prefill_fixed_part(c2, decode_s[0])
    return (np.array([10.4]), c2, np.array([float(cap)]), extra[None, :],
            np.ones((1, cap))), {"prefill_fixed": fixed, "decode_s": decode_s[None, :]}


@pytest.mark.parametrize("soft_margin", [None, 1e-3])
def test_the_batched_prefills_chain_elasticity_and_graph_match_numpys_slope(soft_margin):
    """With the batched prefill the weights carry the rate inside T(k) too: the closed-form
    elasticity still equals a central difference of log L in log RPS, and the graph
    computes the same latency and slope as NumPy."""
    import pytensor.tensor as pt

    args, batched = _batched_args()
    rates = np.array([0.0, 0.01, 0.5, 1.5, 2.5, 3.3, 3.5, 3.6]
                     + ([3.9, 4.3] if soft_margin else []))

    def latency_at(r):
        return laws.profile_chain_latency_expr(r[:, None], *args, wait_scale=0.5,
                                               soft_margin=soft_margin, **batched)[:, 0]

    value, slope = laws.profile_chain_latency_expr(
        rates[:, None], *args, wait_scale=0.5, soft_margin=soft_margin, elasticity=True,
        **batched)
    finite = np.isfinite(value[:, 0])
    difference = laws.load_elasticity_expr(latency_at, rates, step=1e-6)
    difference[0] = 0.0
    np.testing.assert_allclose(slope[finite, 0], difference[finite], rtol=1e-5, atol=1e-8)
    symbolic_value, symbolic_slope = laws.profile_chain_latency_expr(
        pt.as_tensor(rates[:, None]), *(pt.as_tensor(a) for a in args), xp=pt,
        wait_scale=0.5, soft_margin=soft_margin, elasticity=True,
        prefill_fixed=pt.as_tensor(batched["prefill_fixed"]),
        decode_s=pt.as_tensor(batched["decode_s"]))
    np.testing.assert_allclose(symbolic_value.eval()[finite, 0], value[finite, 0], rtol=1e-10)
    np.testing.assert_allclose(symbolic_slope.eval()[finite, 0], slope[finite, 0], rtol=1e-10)


def test_the_batched_prefill_changes_nothing_at_light_load_and_lowers_the_top():
    """The batched prefill's chain is the plain chain's at light load (one prompt per
    prefill) and below it near the ceiling, whose rate it raises; with no fixed part it is
    the plain chain at every rate."""
    args, batched = _batched_args()
    plain_curve = ProfileCurve(np.array([10.4]), np.array([0.063]), batch_sizes=SIZES,
                               iteration_s=TIMES, decode_tokens=256, cap=48, law="chain")
    curve = ProfileCurve(np.array([10.4]), np.array([0.063]), batch_sizes=SIZES,
                         iteration_s=TIMES, decode_tokens=256, cap=48, law="chain",
                         prefill_batching=True)
    light = np.array([0.002, 0.01])
    np.testing.assert_allclose(curve.latency(light), plain_curve.latency(light), rtol=1e-3)
    top = 0.95 * plain_curve.ceiling
    assert curve.latency(top)[0, 0] < 0.97 * plain_curve.latency(top)[0, 0]
    assert curve.ceiling[0] > plain_curve.ceiling[0]
    # the ceiling is where the line for a slot stops clearing
    assert np.isfinite(curve.latency(np.array([0.999 * curve.ceiling[0]]))[0, 0])
    assert np.isinf(curve.latency(np.array([1.001 * curve.ceiling[0]]))[0, 0])
    rates = np.linspace(0.1, 3.4, 7)
    none = {**batched, "prefill_fixed": np.zeros(1)}
    np.testing.assert_allclose(
        laws.profile_chain_latency_expr(rates[:, None], *args, **none)[:, 0],
        laws.profile_chain_latency_expr(rates[:, None], *args)[:, 0], rtol=1e-12)


@pytest.mark.parametrize("decode_s, prefill_s, load", [(0.03, 0.08, 0.2), (0.015, 0.2, 0.5),
                                                       (0.06, 0.03, 0.4)])
def test_prompts_per_prefill_in_closed_form_match_a_simulated_engine(decode_s, prefill_s,
                                                                     load):
    """An engine that, at each iteration boundary, prefills every waiting prompt in one
    iteration of a + b m seconds (a = prefill_s/2 here) and otherwise runs a decode
    iteration, fed by Poisson arrivals: its mean prompts per prefill iteration is the
    closed form's within 3% (the closed form treats every prefill as t_p(1) long)."""
    rate = load / prefill_s
    fixed = 0.5 * prefill_s
    rng = np.random.default_rng(11)
    waiting, prompts, prefills = 0, 0, 0
    for _ in range(60_000):
        if waiting:
            prompts, prefills = prompts + waiting, prefills + 1
            length = fixed + (prefill_s - fixed) * waiting
            waiting = 0
        else:
            length = decode_s
        waiting += rng.poisson(rate * length)
    expected, _ = laws.prompts_per_prefill_expr(rate, decode_s, prefill_s)
    assert prompts / prefills == pytest.approx(float(expected), rel=0.03)
    # and the stall per arrival falls from C2 towards C2 - a with the load
    stall = [float(laws.batched_prefill_stall_expr(r, prefill_s, fixed, decode_s)[0])
             for r in (1e-6, rate, 20.0 * rate)]
    assert stall[0] == pytest.approx(prefill_s, rel=1e-5)
    assert prefill_s > stall[1] > stall[2] > prefill_s - fixed


def test_a_whole_runs_prediction_takes_the_batched_stall():
    """A new load test's mean (``run_latency``, the fluid run) takes the batched prefill's
    stall at its rate, not C2: it matches the unbatched curve's at light load, sits below
    it where prompts batch, and a very long run reaches the batched chain's steady state
    (with C2 there, the held-out check of vidur_dense replayed over-predicted by 2-4%)."""
    kwargs = dict(batch_sizes=SIZES, iteration_s=TIMES, decode_tokens=256, cap=48,
                  law="chain")
    plain = ProfileCurve(np.array([10.4]), np.array([0.063]), **kwargs)
    batched = ProfileCurve(np.array([10.4]), np.array([0.063]), prefill_batching=True,
                           **kwargs)
    light = np.array([0.01])
    assert batched.run_latency(light, 1000)[0, 0] == pytest.approx(
        plain.run_latency(light, 1000)[0, 0], rel=1e-3)
    busy = np.array([0.8 * plain.ceiling[0]])
    assert batched.run_latency(busy, 1000)[0, 0] < 0.995 * plain.run_latency(busy, 1000)[0, 0]
    _, stall, *_ = batched._fluid_parts(busy)
    assert float(np.ravel(stall)[0]) < 0.063
    assert batched.run_latency(busy, 10**6)[0, 0] == pytest.approx(
        batched.latency(busy)[0, 0], rel=0.01)


def test_the_prefill_fixed_part_as_a_soft_roofline():
    """Power 1 is a = t_d(1) (at most 0.9 C2); power p gives the fixed share
    (t_d(1)/C2)^p, in NumPy and in the graph alike, so a long prompt (C2 well above
    t_d(1)) batches with little saving while a prompt as short as a decode iteration keeps
    the 0.9 share."""
    import pytensor.tensor as pt

    decode_one = 0.04
    c2 = np.array([0.0445, 0.08, 0.4])
    np.testing.assert_allclose(laws.prefill_fixed_part(c2, decode_one),
                               np.minimum(decode_one, 0.9 * c2))
    np.testing.assert_allclose(laws.prefill_fixed_part(c2, decode_one, power=1.0),
                               laws.prefill_fixed_part(c2, decode_one))
    squared = laws.prefill_fixed_part(c2, decode_one, power=2.0)
    np.testing.assert_allclose(squared, np.minimum(decode_one**2 / c2, 0.9 * c2))
    assert squared[2] / c2[2] == pytest.approx(0.01)
    symbolic = laws.prefill_fixed_part(pt.as_tensor(c2), decode_one, xp=pt, power=2.0)
    np.testing.assert_allclose(symbolic.eval(), squared, rtol=1e-12)


def test_a_larger_fixed_power_saves_less_near_the_top_and_is_a_checked_option():
    """With less of the prefill paid once, batching lowers the top less: the curve sits
    between the unbatched chain and the batched one at power 1, equal to both at light
    load. The option is a number >= 1; anything else is refused in one line."""
    from bayesspec.bayes import DenseLatencyModel

    kwargs = dict(batch_sizes=SIZES, iteration_s=TIMES, decode_tokens=256, cap=48,
                  law="chain")
    c1, c2 = np.array([10.4]), np.array([0.063])
    plain = ProfileCurve(c1, c2, **kwargs)
    linear = ProfileCurve(c1, c2, prefill_batching=True, **kwargs)
    roofline = ProfileCurve(c1, c2, prefill_batching=True, prefill_fixed_power=2.0,
                            **kwargs)
    light = np.array([0.005])
    np.testing.assert_allclose(roofline.latency(light), plain.latency(light), rtol=1e-3)
    top = 0.95 * plain.ceiling
    assert (linear.latency(top)[0, 0] < roofline.latency(top)[0, 0]
            < plain.latency(top)[0, 0])
    assert linear.ceiling[0] > roofline.ceiling[0] > plain.ceiling[0]
    assert DenseLatencyModel({"decode_profile": "p.csv"}).config["prefill_fixed_power"] == 1
    for bad in (0.5, "two", True, float("nan")):
        with pytest.raises(ValueError, match="prefill_fixed_power"):
            DenseLatencyModel({"decode_profile": "p.csv", "prefill_fixed_power": bad})
