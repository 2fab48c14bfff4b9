"""Independent refits in worker processes or on Dask give the same answers as in this
process (same seeds, same compiled model per worker), and errors are one line."""

from __future__ import annotations

import numpy as np
import pytest

from bayesspec.bayes import DenseLatencyModel
from bayesspec.cli import main
from bayesspec.errors import BadInput
from bayesspec.inference import SamplerSettings
from bayesspec.checks.sbc import run_sbc

SETTINGS = SamplerSettings(draws=100, tune=100, chains=2)


@pytest.fixture(scope="module")
def design():
    return DenseLatencyModel.default_sbc_design()


@pytest.fixture(scope="module")
def here(design):
    return run_sbc(design, "dense", simulations=4, settings=SETTINGS, seed=1, progress=False)


def same_result(a, b) -> None:
    assert np.array_equal(a.ranks, b.ranks)
    columns = ["simulation", "status", "divergences", "rhat_max"]
    assert a.per_simulation[columns].equals(b.per_simulation[columns])


@pytest.mark.slow
def test_worker_processes_reproduce_the_sequential_run(design, here):
    spread = run_sbc(design, "dense", simulations=4, settings=SETTINGS, seed=1,
                     progress=False, workers=2)
    same_result(here, spread)


def test_a_dask_cluster_reproduces_the_sequential_run(design, here):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        on_dask = run_sbc(design, "dense", simulations=4, settings=SETTINGS, seed=1,
                          progress=False, scheduler=client)
    same_result(here, on_dask)


def test_bad_parallel_options_are_one_line_errors(design, capsys):
    with pytest.raises(BadInput, match="at least 1"):
        run_sbc(design, "dense", simulations=2, settings=SETTINGS, workers=0, progress=False)
    assert main(["sbc", "--model", "dense", "--workers", "0", "--simulations", "2"]) == 2
    assert "--workers" in capsys.readouterr().err


def test_check_takes_the_parallel_options(tmp_path, capsys):
    from bayesspec.simulate.synthetic import generate_sweeps, hierarchical_truth

    source = tmp_path / "sweeps.csv"
    generate_sweeps(hierarchical_truth(verifiers=("Qwen3-8B",), lengths=(512,)),
                    n_rates=5).to_csv(source, index=False)
    assert main(["check", str(source), "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err
