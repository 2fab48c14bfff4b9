"""The JAX samplers (``--sampler numpyro|blackjax``, optional extra ``bayesspec[gpu]``):
refused with the install line when JAX is missing, never needed by the default install,
and (where numpyro is installed) a fit whose tree the verdict reads."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from bayesspec import inference
from bayesspec.cli import main


def test_the_default_install_never_imports_jax():
    code = ("import sys, bayesspec.cli, bayesspec.inference, bayesspec.bayes.workflow; "
            "sys.exit('jax' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_a_jax_sampler_without_jax_is_refused_with_the_install_line(monkeypatch, capsys,
                                                                   tmp_path):
    monkeypatch.setattr(inference, "jax_missing",
                        lambda sampler: f"--sampler {sampler} needs jax, an optional "
                                        "extra: pip install 'bayesspec[gpu]'")
    data = tmp_path / "sweeps.csv"
    data.write_text("verifier,rps,latency_mean_s\nQwen3-8B,1,1.0\n")
    code = main(["fit", str(data), "-o", str(tmp_path / "f.nc"), "--sampler", "numpyro"])
    assert code == 2
    assert "bayesspec[gpu]" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore::bayesspec.errors.ConvergenceWarning")
def test_numpyro_fit_gives_a_tree_the_verdict_reads():
    pytest.importorskip("numpyro")
    from bayesspec.data import prepare
    from bayesspec.simulate.synthetic import generate_sweeps, placeholder_truth
    from bayesspec.bayes.workflow import fit

    truth = placeholder_truth().iloc[:2]
    data = prepare(generate_sweeps(truth, seed=5))
    result = fit(data, "dense", settings=inference.SamplerSettings(
        draws=200, tune=200, chains=2, seed=1, progress=False, sampler="numpyro"))
    verdict = result.diagnostics
    assert np.isfinite(verdict["rhat_max"]) and verdict["divergences"] >= 0
    c1 = result.group_curve(0).c1
    assert c1.shape == (400,) and np.median(c1) == pytest.approx(truth["C1"].iloc[0],
                                                                 rel=0.1)
