"""Where does a Vidur sweep's latency come from?  Per-iteration diagnostics (vidur 0.0.26).

Two views of one setup (model, GPU, TP) and (prefill, decode) pair:

* ``--table``: the trained execution-time predictor queried directly.  A decode iteration
  of B requests at the pair's mean context, B = 1..cap, split into its parts (linear
  layers, decode attention, all-reduce, the rest), and a prefill iteration of n prompts.
* ``--fracs``: simulated load points (the same seed, rates and request count as the sweep)
  with every iteration logged.  Each request's latency is split into the wait before its
  prefill starts, its prefill iteration, its own decode iterations, and the prefill
  iterations of later arrivals that stall its decode phase.  Also printed: the run's fill
  and drain, the mean latency of its first and last N = RPS x L requests against the
  steady middle (``--requests 4000`` for a steady middle long enough to trust).

Usage (the A100 70B case of examples/vidur/README.md, "Where the A100 70B sweeps kink"):
  .vidur/venv/bin/python examples/vidur/iteration_profile.py \
      --model meta-llama/Llama-2-70b-hf --device a100 --tp 4 --prefill 256 --decode 256 \
      --table --rates $(awk -F, '$1=="Llama-2-70B" && $19=="A100" && $5==256 && $6==256 \
      {printf "%s%s", s, $9; s=","}' examples/vidur/vidur_dense.csv)
Output: text tables on stdout; ``--json PATH`` also writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run_point as rp  # noqa: E402  (imports vidur)

from vidur.entities.batch import Batch  # noqa: E402
from vidur.scheduler.replica_scheduler.vllm_replica_scheduler import (  # noqa: E402
    VLLMReplicaScheduler,
)

_BATCH_LOG: list = []
_orig_on_batch_end = VLLMReplicaScheduler.on_batch_end


def _logging_on_batch_end(self, batch):
    prefill = sum(1 for q in batch.num_q_tokens if q != 1)
    _BATCH_LOG.append((batch.scheduled_at, batch.completed_at, batch.size, prefill,
                       batch.total_num_q_tokens))
    return _orig_on_batch_end(self, batch)


VLLMReplicaScheduler.on_batch_end = _logging_on_batch_end


def predictor_for(model, device, tp, root, threads, batch_cap, max_tokens_in_batch):
    """Train (or load from Vidur's cache) the setup's predictor by running one request."""
    rp.run_point(model, device, tp, 16, 2, 1, qps=1.0, root=root, threads=threads,
                 batch_cap=batch_cap, max_tokens_in_batch=max_tokens_in_batch)
    (pred,) = [v for k, v in rp._PRED_CACHE.items() if k[3] == model and k[4] == device
               and k[6] == tp]
    return pred


PARTS = {
    "linear": ("attention_layer_pre_proj_execution_time",
               "attention_layer_post_proj_execution_time",
               "mlp_layer_up_proj_execution_time", "mlp_layer_down_proj_execution_time",
               "mlp_layer_act_execution_time"),
    "attn": ("attention_decode_execution_time", "attention_prefill_execution_time",
             "attention_kv_cache_save_execution_time", "attention_rope_execution_time"),
    "allreduce": ("tensor_parallel_communication_time",),
    "other": ("attn_norm_time", "mlp_norm_time", "add_time"),
}


def iteration_ms(pred, q_tokens, kv_tokens):
    """Predicted iteration time (ms) and its parts for one batch."""
    b = Batch(0, [None] * len(q_tokens), list(q_tokens), list(kv_tokens))
    et = pred.get_execution_time(b, 0)
    layers = et.num_layers
    parts = {k: layers * sum(getattr(et, a) for a in attrs) for k, attrs in PARTS.items()}
    return et.total_time * 1e3, parts


def table(pred, prefill, decode, cap, max_tokens_in_batch):
    kv = prefill + decode // 2
    rows = []
    for b in range(1, cap + 1):
        t, parts = iteration_ms(pred, [1] * b, [kv] * b)
        rows.append(dict(batch=b, total_ms=t, **{f"{k}_ms": v for k, v in parts.items()}))
    prefill_rows = []
    for n in range(1, max_tokens_in_batch // prefill + 1):
        t, parts = iteration_ms(pred, [prefill] * n, [prefill] * n)
        prefill_rows.append(dict(prompts=n, total_ms=t, per_prompt_ms=t / n,
                                 **{f"{k}_ms": v for k, v in parts.items()}))
    return rows, prefill_rows


def simulate(model, device, tp, prefill, decode, n, rate, root, threads, batch_cap,
             max_tokens_in_batch, seed=0):
    """One load point with every iteration logged; returns its latency decomposition."""
    _BATCH_LOG.clear()
    captured = {}
    orig_summarize = rp.summarize

    def keep(requests, *a, **k):
        captured["requests"] = requests
        return orig_summarize(requests, *a, **k)

    rp.summarize = keep
    try:
        res = rp.run_point(model, device, tp, prefill, decode, n, rps_target=rate, seed=seed,
                           root=root, threads=threads, batch_cap=batch_cap,
                           max_tokens_in_batch=max_tokens_in_batch)
    finally:
        rp.summarize = orig_summarize
    reqs = [r for r in captured["requests"] if r.completed]
    log = np.array(sorted(_BATCH_LOG), dtype=float)
    start, end, size, n_prefill = log[:, 0], log[:, 1], log[:, 2], log[:, 3]
    dur = end - start
    is_pf = n_prefill > 0
    # per request: the iterations between its first token and its completion
    arrived = np.array([r.arrived_at for r in reqs])
    sched = np.array([r.scheduled_at for r in reqs])
    first = np.array([r.prefill_completed_at for r in reqs])
    done = np.array([r.completed_at for r in reqs])
    cum_dec = np.concatenate([[0.0], np.cumsum(np.where(is_pf, 0.0, dur))])
    cum_pf = np.concatenate([[0.0], np.cumsum(np.where(is_pf, dur, 0.0))])
    cnt_pf = np.concatenate([[0], np.cumsum(is_pf)])
    cnt_dec = np.concatenate([[0], np.cumsum(~is_pf)])
    i0 = np.searchsorted(start, first, side="left")   # first iteration after the prefill
    i1 = np.searchsorted(end, done, side="right")      # up to the one that completes it
    dec_time = cum_dec[i1] - cum_dec[i0]
    stall_time = cum_pf[i1] - cum_pf[i0]
    n_stalls = cnt_pf[i1] - cnt_pf[i0]
    n_dec = cnt_dec[i1] - cnt_dec[i0]
    span = end[-1] - start[0]
    # time-average number in the system and in the running batch over the arrival window
    t_lo, t_hi = arrived.min(), arrived.max()
    grid_t = np.sort(np.concatenate([arrived, done]))
    in_sys = (np.searchsorted(np.sort(arrived), grid_t, side="right")
              - np.searchsorted(np.sort(done), grid_t, side="right"))
    seg = np.diff(np.clip(grid_t, t_lo, t_hi))
    conc = float(np.sum(in_sys[:-1] * seg) / (t_hi - t_lo))
    # the run's fill and drain: the first and last N = rps x L requests (by arrival)
    # against the requests between the first and last 2N (the steady state)
    order = np.argsort(arrived)
    lat_by_arrival = (done - arrived)[order]
    in_flight = max(1, int(res["rps"] * res["latency_mean_s"]))
    steady = (lat_by_arrival[2 * in_flight:-2 * in_flight]
              if len(lat_by_arrival) > 4 * in_flight else lat_by_arrival)
    dec_sizes = size[~is_pf]
    return dict(
        rate=rate, rps=res["rps"], latency_mean_s=res["latency_mean_s"],
        little_n=res["rps"] * res["latency_mean_s"], time_avg_n=conc,
        wait_before_prefill_s=float(np.mean(sched - arrived)),
        own_prefill_s=float(np.mean(first - sched)),
        decode_phase_s=float(np.mean(done - first)),
        own_decode_iters=float(np.mean(n_dec)),
        decode_iter_time_s=float(np.mean(dec_time)),
        decode_iter_ms=float(1e3 * np.sum(dec_time) / np.sum(n_dec)),
        stalls_per_request=float(np.mean(n_stalls)),
        stall_time_s=float(np.mean(stall_time)),
        stall_ms=float(1e3 * np.sum(stall_time) / max(1, np.sum(n_stalls))),
        prefills_per_prefill_iter=float(np.sum(n_prefill) / max(1, np.sum(is_pf))),
        prefill_iter_ms=float(1e3 * np.mean(dur[is_pf])) if is_pf.any() else 0.0,
        prefill_time_share=float(np.sum(dur[is_pf]) / span),
        decode_batch_req_weighted=float(np.sum(dec_sizes ** 2) / np.sum(dec_sizes)),
        decode_batch_time_weighted=float(np.sum(dec_sizes * dur[~is_pf]) / np.sum(dur[~is_pf])),
        sim_wall_s=res["sim_wall_s"],
        first_n_latency_s=float(lat_by_arrival[:in_flight].mean()),
        last_n_latency_s=float(lat_by_arrival[-in_flight:].mean()),
        steady_latency_s=float(steady.mean()),
        run_over_steady=float(lat_by_arrival.mean() / steady.mean()),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="a100")
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument("--prefill", type=int, default=256)
    ap.add_argument("--decode", type=int, default=256)
    ap.add_argument("--batch-cap", type=int, default=128)
    ap.add_argument("--max-tokens-in-batch", type=int, default=4096)
    ap.add_argument("--ceiling", type=float, help="req/s; --fracs are fractions of it")
    ap.add_argument("--fracs", default="", help="comma list of fractions of --ceiling")
    ap.add_argument("--rates", default="",
                    help="comma list of target rates (req/s), e.g. a sweep's rps_target")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--table-rows", default="1,2,4,8,12,16,20,24,28,32,40,48,56,64,72,80,96,112,128")
    ap.add_argument("--root", default=rp.DEFAULT_ROOT)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    a = ap.parse_args()
    out = {}
    if a.table:
        pred = predictor_for(a.model, a.device, a.tp, a.root, a.threads, a.batch_cap,
                             a.max_tokens_in_batch)
        dec, pf = table(pred, a.prefill, a.decode, a.batch_cap, a.max_tokens_in_batch)
        out["decode_table"], out["prefill_table"] = dec, pf
        show = {int(x) for x in a.table_rows.split(",")}
        print(f"decode iteration, all requests at context {a.prefill + a.decode // 2} (ms)")
        print("   B   total  linear   attn  allreduce  other   per-request")
        for r in dec:
            if r["batch"] in show:
                print(f"{r['batch']:4d} {r['total_ms']:7.2f} {r['linear_ms']:7.2f} "
                      f"{r['attn_ms']:6.2f} {r['allreduce_ms']:9.2f} {r['other_ms']:6.2f} "
                      f"{r['total_ms'] / r['batch']:10.3f}")
        print(f"prefill iteration, n prompts of {a.prefill} tokens (ms)")
        print("   n   total  per-prompt  linear   attn  allreduce")
        for r in pf:
            print(f"{r['prompts']:4d} {r['total_ms']:7.2f} {r['per_prompt_ms']:10.2f} "
                  f"{r['linear_ms']:7.2f} {r['attn_ms']:6.2f} {r['allreduce_ms']:9.2f}")
    targets = [(float(x), round(float(x) * a.ceiling, 6)) for x in a.fracs.split(",") if x]
    targets += [(float("nan"), float(x)) for x in a.rates.split(",") if x]
    if targets:
        pts = []
        print("frac   rps    L(s)  N=rps*L  N_time  wait_pf  own_pf  dec_iters  dec_ms  "
              "B_dec  stalls  stall_ms  pf/iter  stall_s  dec_s  pf_share")
        for fr, rate in targets:
            p = simulate(a.model, a.device, a.tp, a.prefill, a.decode, a.requests,
                         rate, a.root, a.threads, a.batch_cap, a.max_tokens_in_batch)
            p["frac"] = fr
            pts.append(p)
            print(f"{fr:4.2f} {p['rps']:6.3f} {p['latency_mean_s']:6.2f} {p['little_n']:7.1f} "
                  f"{p['time_avg_n']:7.1f} {p['wait_before_prefill_s']:7.3f} "
                  f"{p['own_prefill_s']:7.3f} {p['own_decode_iters']:9.1f} "
                  f"{p['decode_iter_ms']:7.2f} {p['decode_batch_req_weighted']:6.1f} "
                  f"{p['stalls_per_request']:7.1f} {p['stall_ms']:8.2f} "
                  f"{p['prefills_per_prefill_iter']:7.2f} {p['stall_time_s']:7.2f} "
                  f"{p['decode_iter_time_s']:6.2f} {p['prefill_time_share']:8.3f}", flush=True)
        print("fill and drain: mean latency of the first N and last N requests by arrival, "
              "of those between the first and last 2N, and the run's mean over the latter")
        for p in pts:
            print(f"  rps {p['rps']:6.3f} N {p['little_n']:6.1f}: first N "
                  f"{p['first_n_latency_s']:7.2f}  last N {p['last_n_latency_s']:7.2f}  "
                  f"steady {p['steady_latency_s']:7.2f}  run/steady {p['run_over_steady']:.4f}")
        out["points"] = pts
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
