"""The engine's concurrency cap learned from the curve where the data state no limit
(``fit --cap-prior catalog|wide``, bayes.cap_prior)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from bayesspec import laws
from bayesspec.bayes.cap_prior import (CATALOG_LOG_SD, DEFAULT_MAX_NUM_SEQS, WIDE_LOG_SD,
                                       learned_cap_priors)
from bayesspec.data.catalog import default_catalog, kv_cache_tokens_estimate
from bayesspec.data import prepare


def setups(**columns) -> pd.DataFrame:
    return pd.DataFrame({"verifier": ["Qwen3-8B"], "gpu": ["H100"], "drafter": [""],
                         "k": [0], "prefill_tokens": [512], "decode_tokens": [512],
                         **{k: [v] for k, v in columns.items()}})


def test_the_catalog_prior_is_the_kv_cache_over_a_request_or_the_default_batch():
    catalog = default_catalog()
    kv = kv_cache_tokens_estimate(catalog.model("Qwen3-8B"), catalog.gpu("H100"))
    default = np.sqrt(np.prod(DEFAULT_MAX_NUM_SEQS))
    centre, sd, words = learned_cap_priors(setups(), catalog, "catalog")
    expected = min(default, kv / laws.kv_tokens_per_request(512, 512))
    assert np.exp(centre[0]) == pytest.approx(expected)
    assert sd[0] == CATALOG_LOG_SD and "catalog prior" in words[0]
    # long prompts: the KV cache binds well below the default batch
    centre, _, words = learned_cap_priors(setups(prefill_tokens=16000, decode_tokens=2000),
                                          catalog, "catalog")
    assert np.exp(centre[0]) == pytest.approx(kv / 17000) and np.exp(centre[0]) < default
    # weights that do not fit on one GPU (tensor parallelism): the wide prior, and why
    centre, sd, words = learned_cap_priors(setups(verifier="Llama-3.1-70B", gpu="A100"),
                                           catalog, "catalog")
    assert sd[0] == WIDE_LOG_SD and "does not fit on one" in words[0]
    _, sd, words = learned_cap_priors(setups(verifier="no-such-model"), catalog, "catalog")
    assert sd[0] == WIDE_LOG_SD and "no card for no-such-model" in words[0]
    with pytest.raises(ValueError, match="cap prior"):
        learned_cap_priors(setups(), catalog, "none")


def law_sweep(cap=24, c1=3.5, c2=0.04, shares=np.linspace(0.1, 0.95, 10), noise=0.01,
              seed=3) -> pd.DataFrame:
    """Mean latencies of the slot queue (a server that batches at most ``cap``), with
    log-normal measurement noise, and no engine limit in the file."""
    rng = np.random.default_rng(seed)
    rps = np.asarray(shares) * laws.ceiling_rps(c1, c2, cap)
    latency = laws.capped_latency(rps, c1, c2, cap) * np.exp(noise * rng.standard_normal(len(rps)))
    return pd.DataFrame({"verifier": "Qwen3-8B", "gpu": "H100", "prefill_tokens": 512,
                         "decode_tokens": 512, "rps": rps, "latency_mean_s": latency})


def test_a_learned_cap_is_a_parameter_only_where_no_limit_is_stated():
    from bayesspec.bayes import get_model_class

    model = get_model_class("dense")({"cap_prior": "catalog"})
    stated = law_sweep().assign(max_num_seqs=24)
    inputs = model.prepare(prepare(stated))
    assert "cap_learned" not in inputs.groups
    inputs = model.prepare(prepare(law_sweep()))
    assert inputs.groups["cap_learned"].tolist() == [True]
    assert inputs.groups["cap_source"].iloc[0].startswith("learned from the curve")
    pm_model = model.build(prepare(law_sweep()))
    assert "learned_cap_share" in pm_model.named_vars and "learned_cap" in pm_model.named_vars
    # without the option the law is today's: no cap anywhere
    plain = get_model_class("dense")()
    inputs = plain.prepare(prepare(law_sweep()))
    assert "cap_learned" not in inputs.groups
    assert "cap" not in plain.data_arrays(inputs)


def test_fit_learns_the_cap_when_asked_and_says_so(tmp_path, capsys, mock_sampling):
    from bayesspec.bayes import load_fit
    from bayesspec.cli import main

    path = tmp_path / "sweep.csv"
    law_sweep().to_csv(path, index=False)
    out = tmp_path / "fit.nc"
    assert main(["fit", str(path), "-o", str(out), "--draws", "30", "--tune", "30",
                 "--no-loo", "--cap-prior", "catalog"]) in (0, 3)
    said = capsys.readouterr().err
    assert said.count("concurrency cap: not stated; learned") == 1
    fit = load_fit(out)
    curve = fit.group_curve(0)
    assert curve.cap.shape == curve.c2.shape and np.isfinite(curve.cap).all()
    assert np.ptp(curve.cap) > 0                                      # draws, not one
    assert curve.ceiling_binding == "cap"
    assert main(["summary", str(out), "--json"]) in (0, 3)
    entry = json.loads(capsys.readouterr().out)["groups"][0]
    assert entry["cap_source"].startswith("learned from the curve; catalog prior")
    assert entry["cap_interval"]["lo"] < entry["cap"] < entry["cap_interval"]["hi"]
    # a model whose law does not take the cap refuses, in one line naming the flag
    code = main(["fit", str(path), "-o", str(tmp_path / "s.nc"), "--model", "dense-spline",
                 "--cap-prior", "wide", "--no-loo"])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and "--cap-prior" in error and "does not take cap_prior" in error
    assert not (tmp_path / "s.nc").exists()
    # one spelling: the option is the flag, and --option refuses it
    code = main(["fit", str(path), "-o", str(tmp_path / "s.nc"), "--cap-prior", "wide",
                 "--option", "cap_prior=catalog", "--no-loo"])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and "given as --cap-prior" in error
    assert not (tmp_path / "s.nc").exists()


def test_tails_learns_the_cap_for_its_summaries_too(mock_sampling):
    from bayesspec.inference import SamplerSettings
    from bayesspec.bayes.workflow import fit

    sweep = law_sweep()
    sweep["latency_p99_s"] = 2.5 * sweep["latency_mean_s"]
    sweep["n_requests"] = 500
    result = fit(prepare(sweep), "tails", config={"cap_prior": "wide"},
                 settings=SamplerSettings(draws=20, tune=20, chains=2, progress=False))
    curve = result.model().metric_curve(result, 0, "p99")
    assert curve.cap is not None and curve.cap.shape == curve.c2.shape
    # percentiles alone carry no mean law to bend: refused, naming the flag
    from bayesspec.errors import BadInput

    with pytest.raises(BadInput, match="--cap-prior"):
        fit(prepare(sweep.drop(columns=["latency_mean_s"])), "tails",
            config={"cap_prior": "wide"}, settings=SamplerSettings(draws=20, tune=20))


@pytest.mark.slow
def test_the_cap_and_its_ceiling_are_recovered_from_the_bend():
    """Data from the slot queue with a cap of 24 and no limit in the file: the learned
    cap's 90% interval covers 24 and the ceiling's covers the cap's throughput, which
    eq. (1) alone (its pole 1/C2 read as the ceiling) puts above its 90% interval."""
    from bayesspec.inference import SamplerSettings
    from bayesspec.bayes.workflow import fit

    cap, c1, c2 = 24, 3.5, 0.04
    truth = laws.ceiling_rps(c1, c2, cap)
    settings = SamplerSettings(chains=4, seed=11, progress=False)   # the defaults
    data = prepare(law_sweep(cap, c1, c2))
    learned = fit(data, "dense", settings=settings, config={"cap_prior": "catalog"})
    assert learned.diagnostics["converged"], learned.diagnostics["text"]
    caps = learned.draws("learned_cap")[:, 0]
    lo, hi = np.quantile(caps, [0.05, 0.95])
    assert lo <= cap <= hi and hi / lo < 1.5
    lo, hi = np.quantile(learned.group_curve(0).ceiling, [0.05, 0.95])
    assert lo <= truth <= hi and hi / lo < 1.2
    plain = fit(data, "dense", settings=settings)
    assert np.quantile(plain.group_curve(0).ceiling, 0.05) > 1.5 * truth


def test_chains_that_settle_on_different_caps_are_named_with_what_to_do():
    import xarray as xr

    from bayesspec.bayes.cap_prior import chains_disagree

    class Stuck:
        caps = np.full((4, 50, 2), 33.0)
        caps[3, :, 1] = 400.0        # one chain of the second group in the no-cap mode
        posterior = xr.Dataset(
            {"learned_cap": (("chain", "draw", "learned_cap_group"), caps)},
            coords={"learned_cap_group": ["a", "b"]})

    words = chains_disagree(Stuck)
    assert words.startswith("b: ") and "33, 33, 33, 400" in words and "a:" not in words
    assert "--max-num-seqs" in words
    Stuck.caps[3, :, 1] = 36.0
    assert chains_disagree(Stuck) is None
