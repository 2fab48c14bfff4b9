"""Run one Vidur (0.0.26) simulation point offline and return request-level metrics.

* ``snapshot_download`` (the symbol vidur's sklearn predictor imported from
  huggingface_hub) is replaced by a resolver over the manifest written by
  ``stage_profiles.py``.  Any other repo id -- in particular vidur's
  "precomputed predictions" repos (``_load_predictions_from_hf``) -- raises, so
  vidur always trains its own predictor from the staged profiles (cached on disk
  under ``--cache-dir``).
* The trained predictor object is memoised in-process per (model, device, TP),
  so a sweep pays the training/loading cost once per setup.

CLI (single point):
  .vidur/venv/bin/python examples/vidur/run_point.py --model meta-llama/Llama-2-70b-hf \
      --device a100 --tp 4 --prefill 512 --decode 128 --qps 1.0 --num-requests 400
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
DEFAULT_ROOT = os.path.join(REPO, ".vidur")
sys.path.insert(0, HERE)

import stage_profiles  # noqa: E402

import vidur.execution_time_predictor.sklearn_execution_time_predictor as _skl  # noqa: E402
from vidur.config import (  # noqa: E402
    CacheConfig,
    ClusterConfig,
    FixedRequestLengthGeneratorConfig,
    LinearRegressionExecutionTimePredictorConfig,
    MetricsConfig,
    PoissonRequestIntervalGeneratorConfig,
    RandomForrestExecutionTimePredictorConfig,
    ReplicaConfig,
    RoundRobinGlobalSchedulerConfig,
    SimulationConfig,
    SyntheticRequestGeneratorConfig,
    VllmSchedulerConfig,
)
from vidur.entities.base_entity import BaseEntity  # noqa: E402
from vidur.events.base_event import BaseEvent  # noqa: E402
from vidur.execution_time_predictor import ExecutionTimePredictorRegistry  # noqa: E402
from vidur.simulator import Simulator  # noqa: E402
from vidur.utils.random import set_seeds  # noqa: E402

_MANIFEST: dict = {}


def _offline_snapshot_download(repo_id, repo_type=None, cache_dir=None, **kw):
    if repo_id in _MANIFEST:
        return _MANIFEST[repo_id]
    raise RuntimeError(
        f"offline: refusing to fetch {repo_id!r} (only staged profiling datasets are served)"
    )


def install_offline_hub(root: str = DEFAULT_ROOT) -> dict:
    path = os.path.join(root, "profiles", "manifest.json")
    _MANIFEST.clear()
    _MANIFEST.update(json.load(open(path)))
    _skl.snapshot_download = _offline_snapshot_download
    return _MANIFEST


# ---- memoise the execution-time predictor per setup ----------------------------
_PRED_CACHE: dict = {}
_orig_get = ExecutionTimePredictorRegistry.get.__func__


def _memo_get(cls, key, *args, **kwargs):
    pc = kwargs.get("predictor_config")
    rc = kwargs.get("replica_config")
    cc = kwargs.get("cache_config")
    k = (key, pc.model_profiling_dataset, pc.network_profiling_dataset, rc.model_name,
         rc.device, rc.network_device, rc.tensor_parallel_size, rc.num_pipeline_stages,
         cc.block_size, repr(sorted(vars(pc).items())))
    if k not in _PRED_CACHE:
        _PRED_CACHE[k] = _orig_get(cls, key, *args, **kwargs)
    return _PRED_CACHE[k]


ExecutionTimePredictorRegistry.get = classmethod(_memo_get)

def _reset_entity_ids() -> None:
    """vidur numbers entities with class-level counters; the round-robin global
    scheduler assumes replica ids start at 0.  Reset them so that every in-process
    run starts exactly like a fresh process."""
    stack = [BaseEntity, BaseEvent]
    while stack:
        c = stack.pop()
        stack.extend(c.__subclasses__())
        c._id = -1


POISSON_TRUNC = 1.0 - math.exp(-3.0)  # vidur caps inter-arrival gaps at 3/qps


def predictor_cache_dir(root: str) -> str:
    """Where Vidur keeps trained predictors.  Its random forests have no random_state, so a
    trained model depends on the global RNG at training time (set_seeds, the training
    order, and the thread count: with more than one thread the cross-validation fits run in
    worker processes and do not draw from it); the cache, keyed by dataset and TP only,
    keeps the first one trained.  A set that gets its own cache (VIDUR_PREDICTOR_CACHE)
    does not depend on what other sets trained before it."""
    return os.environ.get("VIDUR_PREDICTOR_CACHE") or os.path.join(root, "cache")


def predictor_config(model: str, device: str, kind: str, cache_dir: str, threads: int):
    common = dict(
        model_profiling_dataset=stage_profiles.dataset_id("compute", device, model),
        network_profiling_dataset=stage_profiles.dataset_id("network", device),
        cache_dir=cache_dir,
        prediction_max_tokens_per_request=4096,
        prediction_max_batch_size=128,
        prediction_max_prefill_chunk_size=4096,
        num_training_job_threads=threads,
        k_fold_cv_splits=int(os.environ.get("VIDUR_CV_SPLITS", "3")),
    )
    if kind == "random_forest":
        return RandomForrestExecutionTimePredictorConfig(
            num_estimators=[int(os.environ.get("VIDUR_RF_TREES", "100"))],
            max_depth=[int(os.environ.get("VIDUR_RF_DEPTH", "32"))],
            min_samples_split=[2],
            **common,
        )
    if kind == "linear_regression":
        return LinearRegressionExecutionTimePredictorConfig(**common)
    raise ValueError(kind)


def run_point(model: str, device: str, tp: int, prefill: int, decode: int,
              num_requests: int, qps: float | None = None, rps_target: float | None = None,
              seed: int = 0, root: str = DEFAULT_ROOT, predictor: str = "random_forest",
              threads: int = 2, time_limit_s: float = 0, max_tokens: int = 4096,
              batch_cap: int = 128, max_tokens_in_batch: int = 4096) -> dict:
    """Simulate one point.  Give either vidur's ``qps`` parameter or ``rps_target``
    (desired mean arrival rate; converted to qps = rps_target*(1-e^-3) to undo vidur's
    truncation of exponential gaps at 3/qps).  ``batch_cap`` and ``max_tokens_in_batch``
    are the vLLM scheduler's ``batch_size_cap`` (vLLM's max_num_seqs) and its per-iteration
    token budget (vLLM's max_num_batched_tokens)."""
    if not _MANIFEST:
        install_offline_hub(root)
    if qps is None:
        qps = rps_target * POISSON_TRUNC
    out_dir = os.path.join(root, "out")
    cfg = SimulationConfig(
        seed=seed,
        log_level="error",
        time_limit=time_limit_s,
        cluster_config=ClusterConfig(
            num_replicas=1,
            replica_config=ReplicaConfig(
                model_name=model,
                num_pipeline_stages=1,
                tensor_parallel_size=tp,
                device=device,
                network_device=stage_profiles.NETWORK_SKU[device],
            ),
            cache_config=CacheConfig(block_size=16),
            global_scheduler_config=RoundRobinGlobalSchedulerConfig(),
            replica_scheduler_config=VllmSchedulerConfig(
                batch_size_cap=batch_cap, max_tokens_in_batch=max_tokens_in_batch),
        ),
        request_generator_config=SyntheticRequestGeneratorConfig(
            seed=seed,
            length_generator_config=FixedRequestLengthGeneratorConfig(
                seed=seed, prefill_tokens=prefill, decode_tokens=decode, max_tokens=max_tokens),
            interval_generator_config=PoissonRequestIntervalGeneratorConfig(seed=seed, qps=qps),
            num_requests=num_requests,
        ),
        execution_time_predictor_config=predictor_config(
            model, device, predictor, predictor_cache_dir(root), threads),
        metrics_config=MetricsConfig(
            write_metrics=False, enable_chrome_trace=False, store_plots=False,
            output_dir=out_dir),
    )
    _reset_entity_ids()
    set_seeds(seed)
    t0 = time.time()
    sim = Simulator(cfg)
    t_init = time.time() - t0
    requests = [ev._request for _, ev in sim._event_queue]
    sim.run()
    wall = time.time() - t0
    res = summarize(requests, num_requests, qps, rps_target, wall, t_init)
    # the KV capacity the scheduler allocates from (vLLM's "GPU KV cache size: N tokens")
    cache = cfg.cluster_config.cache_config
    res.update(kv_cache_tokens=int(cache.num_blocks * cache.block_size),
               batch_size_cap=batch_cap, max_tokens_in_batch=max_tokens_in_batch)
    assert res["kv_cache_tokens"] == kv_cache_tokens(model, device, tp, max_tokens=max_tokens)
    return res


def kv_cache_tokens(model: str, device: str, tp: int, block_size: int = 16,
                    max_tokens: int = 4096) -> int:
    """KV-cache capacity in tokens of one replica, as vidur 0.0.26's vLLM scheduler sizes
    it: its MemoryPlanner gives the tokens that fit in total_memory_gb x (1 - 0.1 margin)
    minus the fp16 weights per GPU; the scheduler keeps whole requests of ``max_tokens``
    (the request generator's maximum), i.e. num_blocks = (max_tokens // block_size) x
    (planner tokens // max_tokens), and allocates from num_blocks x block_size tokens."""
    from vidur.utils.memory_planner import MemoryPlanner
    replica = ReplicaConfig(model_name=model, num_pipeline_stages=1, tensor_parallel_size=tp,
                            device=device, network_device=stage_profiles.NETWORK_SKU[device])
    planner_tokens = MemoryPlanner(replica, CacheConfig(block_size=block_size)
                                   ).get_max_kv_cache_size_in_tokens()
    num_blocks = (max_tokens // block_size) * (int(planner_tokens) // max_tokens)
    return num_blocks * block_size


def summarize(requests, num_requests, qps, rps_target, wall, t_init) -> dict:
    done = [r for r in requests if r.completed]
    arr = np.array(sorted(r.arrived_at for r in requests))
    order = np.argsort([r.arrived_at for r in done])
    done = [done[i] for i in order]
    e2e = np.array([r.completed_at - r.arrived_at for r in done])
    ttft = np.array([r.prefill_completed_at - r.arrived_at for r in done])
    comp = np.sort([r.completed_at for r in done])
    span = arr[-1] - arr[0] if len(arr) > 1 else float("nan")
    rps = (len(arr) - 1) / span if span > 0 else float("nan")
    # completions per second over the middle 80% of completions (steady-state throughput)
    n = len(comp)
    i10, i90 = int(0.1 * n), int(0.9 * n) - 1
    thr = (i90 - i10) / (comp[i90] - comp[i10]) if n > 10 and comp[i90] > comp[i10] else float("nan")
    # completions inside the arrival window, and latency drift (last vs 2nd quartile by arrival)
    in_window = float(np.sum(comp <= arr[-1])) / span if span > 0 else float("nan")
    q = max(1, n // 4)
    drift = float(e2e[-q:].mean() / e2e[q:2 * q].mean()) if n >= 8 else float("nan")
    # time-average number in system over [first arrival, last completion]
    horizon = comp[-1] - arr[0] if n else float("nan")
    mean_conc_measured = float(e2e.sum() / horizon) if n else float("nan")
    # time averages over the arrival window [first arrival, last arrival], where the load
    # is on: requests in the system (arrived, not completed) and requests holding a batch
    # slot (first scheduled, not completed: vLLM keeps them allocated until they finish)
    arrived_at = np.array([r.arrived_at for r in done])
    slot_from = np.array([r.scheduled_at for r in done])
    completed_at = np.array([r.completed_at for r in done])

    def window_average(t_in, t_out, lo=arr[0], hi=arr[-1]):
        if not hi > lo or not n:
            return float("nan")
        overlap = np.clip(np.minimum(t_out, hi) - np.maximum(t_in, lo), 0, None)
        return float(overlap.sum() / (hi - lo))
    return dict(
        n_requests=len(requests),
        n_completed=n,
        qps_param=qps,
        rps_target=rps_target if rps_target is not None else qps / POISSON_TRUNC,
        rps=rps,
        latency_mean_s=float(e2e.mean()),
        latency_std_s=float(e2e.std(ddof=1)) if n > 1 else float("nan"),
        latency_p50_s=float(np.percentile(e2e, 50)),
        latency_p95_s=float(np.percentile(e2e, 95)),
        latency_p99_s=float(np.percentile(e2e, 99)),
        ttft_mean_s=float(ttft.mean()),
        completion_throughput_rps=thr,
        completion_rate_in_window=in_window,
        latency_drift_ratio=drift,
        mean_concurrency_measured=mean_conc_measured,
        mean_in_system_window=window_average(arrived_at, completed_at),
        mean_in_batch_window=window_average(slot_from, completed_at),
        # over the middle 80% of completions (the window of completion_throughput_rps)
        mean_in_batch_window_completions=(window_average(slot_from, completed_at,
                                                         comp[i10], comp[i90])
                                          if n > 10 else float("nan")),
        num_restarts=int(sum(r.num_restarts for r in requests)),
        sim_wall_s=wall,
        init_wall_s=t_init,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="a100")
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--decode", type=int, default=128)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--qps", type=float)
    g.add_argument("--rps-target", type=float)
    ap.add_argument("--num-requests", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--root", default=DEFAULT_ROOT)
    ap.add_argument("--predictor", default="random_forest",
                    choices=["random_forest", "linear_regression"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-cap", type=int, default=128)
    ap.add_argument("--max-tokens-in-batch", type=int, default=4096)
    a = ap.parse_args()
    res = run_point(a.model, a.device, a.tp, a.prefill, a.decode, a.num_requests,
                    qps=a.qps, rps_target=a.rps_target, seed=a.seed, root=a.root,
                    predictor=a.predictor, threads=a.threads, batch_cap=a.batch_cap,
                    max_tokens_in_batch=a.max_tokens_in_batch)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
