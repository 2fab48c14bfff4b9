"""Many independent samplings of one model: in this process, in worker processes, or on
a Dask cluster.

Leave-n-out folds and SBC simulations refit one model with new ``pm.Data`` values. A
:class:`Recipe` says how to build that model (a picklable function and its arguments),
so every worker builds and compiles it once and then samples job after job with nutpie's
``with_data``. Worker processes get their own PyTensor compile directory (PyTensor's
compilation cache is not safe to share between concurrent compilations). Dask is an
optional extra (``pip install 'bayesspec[distributed]'``): ``scheduler`` is the address
of a running cluster (``tcp://host:8786``), or a ``distributed.Client``.

Results come back as they finish: ``(index, tree)`` or ``(index, error text)``, so the
caller can report progress and record a sampler failure as a finding.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, replace
from typing import Callable, Iterator

# Compiled models of this process, by recipe key (a worker keeps its compiled model
# between jobs; the parent process too, for workers = 1).
_COMPILED: dict = {}


@dataclass(frozen=True)
class Recipe:
    """How to build the model every job refits: ``build(*arguments)`` returns a
    ``pm.Model``; ``key`` names it in a worker's cache (same key, same model)."""

    key: str
    build: Callable
    arguments: tuple = ()


def _compiled(recipe: Recipe, settings):
    from bayesspec.inference import compile_model

    if recipe.key not in _COMPILED:
        _COMPILED.clear()    # one model per worker at a time: compiled models are large
        _COMPILED[recipe.key] = compile_model(recipe.build(*recipe.arguments),
                                              replace(settings, progress=False))
    return _COMPILED[recipe.key]


def run_job(recipe: Recipe, data: dict, settings):
    """One sampling (in whichever process runs it): the tree, or the error as text."""
    import time

    from bayesspec.inference import sample_compiled

    try:
        compiled = _compiled(recipe, settings)
        started = time.perf_counter()
        tree = sample_compiled(compiled, replace(settings, progress=False), data=data)
        tree.attrs["sampling_seconds"] = round(time.perf_counter() - started, 3)
        return tree
    except Exception as error:  # noqa: BLE001 - the caller records it
        return f"{type(error).__name__}: {error}"[:300]


def _worker_start(parent: str) -> None:
    """A worker's own PyTensor compile directory, set before PyTensor is imported."""
    folder = tempfile.mkdtemp(prefix=f"pytensor-{os.getpid()}-", dir=parent)
    flags = os.environ.get("PYTENSOR_FLAGS", "")
    os.environ["PYTENSOR_FLAGS"] = ",".join(f for f in (flags, f"compiledir={folder}") if f)


def check_workers(workers: int, scheduler) -> None:
    from bayesspec.errors import BadInput

    if workers < 1:
        raise BadInput(f"must be at least 1, got {workers}", argument="workers")
    if scheduler is not None:
        try:
            import distributed  # noqa: F401
        except ImportError:
            raise BadInput("a Dask scheduler needs the optional extra: pip install "
                           "'bayesspec[distributed]' (dask.distributed)",
                           argument="scheduler") from None


def sample_many(recipe: Recipe, jobs: list[dict], settings, *, workers: int = 1,
                scheduler=None) -> Iterator[tuple[int, object]]:
    """Sample ``recipe``'s model once per job (``pm.Data`` values; settings per job when
    a job is a ``(data, settings)`` pair) and yield ``(index, tree or error text)`` as
    each finishes. ``workers`` = 1 and no scheduler: here, in order, one compilation."""
    check_workers(workers, scheduler)
    jobs = [job if isinstance(job, tuple) else (job, settings) for job in jobs]
    if workers > 1 and scheduler is None:
        from bayesspec.inference import usable_cores

        # Workers share the machine's cores: nutpie's chain threads are divided among them.
        share = max(1, usable_cores() // workers)
        jobs = [(data, replace(s, cores=max(1, min(s.cores or 1, share)))) for data, s in jobs]
    if scheduler is not None:
        yield from _on_dask(recipe, jobs, scheduler)
    elif workers == 1 or len(jobs) == 1:
        for index, (data, job_settings) in enumerate(jobs):
            yield index, run_job(recipe, data, job_settings)
    else:
        yield from _in_processes(recipe, jobs, workers)


def _in_processes(recipe: Recipe, jobs, workers: int):
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with tempfile.TemporaryDirectory(prefix="bayesspec-workers-") as parent, \
            ProcessPoolExecutor(max_workers=min(workers, len(jobs)),
                                mp_context=multiprocessing.get_context("spawn"),
                                initializer=_worker_start, initargs=(parent,)) as pool:
        futures = {pool.submit(run_job, recipe, data, job_settings): index
                   for index, (data, job_settings) in enumerate(jobs)}
        for future in as_completed(futures):
            yield futures[future], future.result()


def _on_dask(recipe: Recipe, jobs, scheduler):
    from distributed import Client, as_completed

    client = scheduler if isinstance(scheduler, Client) else Client(scheduler)
    try:
        futures = [client.submit(run_job, recipe, data, job_settings, pure=False)
                   for data, job_settings in jobs]
        index_of = {future.key: i for i, future in enumerate(futures)}
        for future in as_completed(futures):
            yield index_of[future.key], future.result()
    finally:
        if client is not scheduler:
            client.close()
