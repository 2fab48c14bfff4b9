"""Dense (no speculative decoding) Poisson load sweeps with Vidur 0.0.26 -> bayesspec tidy CSV.

For every setup (model, GPU, TP) and (prefill, decode) pair:
  1. ceiling run: VIDUR_CEIL_REQUESTS requests arriving at ~1000 req/s (a burst);
     ceiling = completions/s over the middle 80% of completions (steady-state
     saturated throughput of the vLLM scheduler at batch_size_cap=128).
  2. VIDUR_N_RATES Poisson arrival rates, evenly spaced from VIDUR_FRAC_LO to
     VIDUR_FRAC_HI of that ceiling, plus any VIDUR_EXTRA_FRACS (e.g. past the ceiling),
     VIDUR_REQUESTS requests each.
A setup is model@gpu@tp, optionally @cap: the scheduler's batch_size_cap (vLLM's
max_num_seqs) for that setup, default VIDUR_BATCH_CAP (128).  The per-iteration token
budget is VIDUR_MAX_TOKENS_IN_BATCH (4096, vLLM's max_num_batched_tokens).  The tidy CSV
carries both and the KV capacity of the replica (kv_cache_tokens, from Vidur's memory
planner) in every row.
Raw per-point results are appended to .vidur/runs/<tag>.jsonl (resumable); the
CSV is rebuilt from them at the end.  See examples/vidur/README.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

SHORT = {
    "meta-llama/Llama-2-70b-hf": ("Llama-2-70B", 69.0),
    "codellama/CodeLlama-34b-Instruct-hf": ("CodeLlama-34B", 33.7),
    "meta-llama/Llama-3-70B": ("Llama-3-70B", 70.6),
    "meta-llama/Llama-2-7b-hf": ("Llama-2-7B", 6.7),
    # fresh set (vidur_fresh.csv)
    "meta-llama/Llama-3-8B": ("Llama-3-8B", 8.0),
    "internlm/internlm-20b": ("InternLM-20B", 20.1),
    "Qwen/Qwen-72B": ("Qwen-72B", 72.3),
}

DEFAULT_SETUPS = (
    "meta-llama/Llama-2-70b-hf@a100@4,"
    "codellama/CodeLlama-34b-Instruct-hf@a100@2,"
    "meta-llama/Llama-3-70B@a100@4,"
    "meta-llama/Llama-2-70b-hf@h100@4,"
    "codellama/CodeLlama-34b-Instruct-hf@h100@2"
)
# Not in the defaults: memory-bound setups such as meta-llama/Llama-2-70b-hf@a100@2.
# They trigger vLLM-style preemption (request restart), and vidur 0.0.26's
# Request.restart() does not reset the per-stage token counters, so the first
# restart trips `assert self._num_stage_processed_tokens <= self.total_tokens`.
DEFAULT_PAIRS = "256x256,512x128,512x512,1024x256,2048x512"

COLUMNS = [
    "verifier", "drafter", "k", "alpha", "prefill_tokens", "decode_tokens", "rps",
    "latency_mean_s", "rps_target", "n_requests", "whole_run", "latency_std_s", "latency_p50_s",
    "latency_p95_s", "latency_p99_s", "ttft_mean_s", "mean_concurrency", "saturated",
    "strategy", "gpu", "engine", "engine_version", "verifier_params_b", "source",
    "tensor_parallel", "max_num_seqs", "kv_cache_tokens", "max_num_batched_tokens",
]
# mean_concurrency: "little" = rps x latency_mean_s (the bundled vidur_dense.csv and
# vidur_fresh.csv); "measured" = the time-average number of requests in the system over
# the arrival window, from Vidur's per-request arrival and completion times.
CONCURRENCY_KINDS = ("little", "measured")


def env(name, default):
    return os.environ.get(name, default)


def parse_setups(s, default_cap=128):
    out = []
    for item in s.split(","):
        item = item.strip()
        if item:
            m, d, tp, *cap = item.split("@")
            out.append((m, d, int(tp), int(cap[0]) if cap else default_cap))
    return out


def parse_pairs(s):
    return [tuple(int(x) for x in p.split("x")) for p in s.split(",") if p.strip()]


def is_saturated(r) -> bool:
    """True only if the run clearly failed to keep up with its arrivals: completions
    inside the arrival window fell below 90% of the arrival rate AND latency kept
    growing (mean of the last quarter of arrivals > 1.3x the second quarter)."""
    return bool(r["completion_rate_in_window"] < 0.9 * r["rps"]
                and r["latency_drift_ratio"] > 1.3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=env("VIDUR_OUT", os.path.join(HERE, "vidur_dense.csv")))
    ap.add_argument("--ceilings-out", default=env("VIDUR_CEIL_OUT", os.path.join(HERE, "vidur_ceilings.csv")))
    ap.add_argument("--root", default=env("VIDUR_ROOT", os.path.abspath(os.path.join(HERE, "../../.vidur"))))
    ap.add_argument("--setups", default=env("VIDUR_SETUPS", DEFAULT_SETUPS))
    ap.add_argument("--pairs", default=env("VIDUR_PAIRS", DEFAULT_PAIRS))
    ap.add_argument("--requests", type=int, default=int(env("VIDUR_REQUESTS", "1000")))
    ap.add_argument("--ceil-requests", type=int, default=int(env("VIDUR_CEIL_REQUESTS", "1000")))
    ap.add_argument("--n-rates", type=int, default=int(env("VIDUR_N_RATES", "11")))
    ap.add_argument("--frac-lo", type=float, default=float(env("VIDUR_FRAC_LO", "0.05")))
    ap.add_argument("--frac-hi", type=float, default=float(env("VIDUR_FRAC_HI", "0.95")))
    ap.add_argument("--extra-fracs", default=env("VIDUR_EXTRA_FRACS", ""),
                    help="comma list of further fractions of the ceiling, e.g. 1.05,1.2")
    ap.add_argument("--batch-cap", type=int, default=int(env("VIDUR_BATCH_CAP", "128")),
                    help="batch_size_cap of setups that do not give their own @cap")
    ap.add_argument("--max-tokens-in-batch", type=int,
                    default=int(env("VIDUR_MAX_TOKENS_IN_BATCH", "4096")))
    ap.add_argument("--concurrency", choices=CONCURRENCY_KINDS,
                    default=env("VIDUR_CONCURRENCY", "little"))
    ap.add_argument("--seed", type=int, default=int(env("VIDUR_SEED", "0")))
    ap.add_argument("--predictor", default=env("VIDUR_PREDICTOR", "random_forest"))
    ap.add_argument("--threads", type=int, default=int(env("VIDUR_THREADS", "2")))
    ap.add_argument("--budget-s", type=float, default=float(env("VIDUR_BUDGET_S", "3600")),
                    help="stop starting new points after this many seconds")
    ap.add_argument("--tag", default=env("VIDUR_TAG", "dense"))
    a = ap.parse_args()

    import run_point as rp  # imports vidur

    rp.install_offline_hub(a.root)
    manifest = rp._MANIFEST
    setups = parse_setups(a.setups, a.batch_cap)
    pairs = parse_pairs(a.pairs)
    fracs = np.linspace(a.frac_lo, a.frac_hi, a.n_rates)
    if a.extra_fracs:
        fracs = np.concatenate([fracs, [float(x) for x in a.extra_fracs.split(",")]])

    runs_dir = os.path.join(a.root, "runs")
    os.makedirs(runs_dir, exist_ok=True)
    raw_path = os.path.join(runs_dir, f"{a.tag}.jsonl")
    done = {}
    if os.path.exists(raw_path):
        for line in open(raw_path):
            r = json.loads(line)
            done[r["key"]] = r

    common = dict(seed=a.seed, root=a.root, predictor=a.predictor, threads=a.threads)
    t_start = time.time()
    stopped = False

    def point(kind, model, dev, tp, cap, p, d, n, rate, frac=None):
        key = f"{kind}|{model}|{dev}|{tp}|{p}|{d}|{n}|{rate:.6g}|{a.seed}|{a.predictor}"
        if (cap, a.max_tokens_in_batch) != (128, 4096):  # keys of the first sets unchanged
            key += f"|cap{cap}|mtb{a.max_tokens_in_batch}"
        if key in done:
            return done[key]
        res = rp.run_point(model, dev, tp, p, d, n, rps_target=rate, batch_cap=cap,
                           max_tokens_in_batch=a.max_tokens_in_batch, **common)
        res.update(key=key, kind=kind, model=model, device=dev, tp=tp, prefill=p,
                   decode=d, frac=frac, seed=a.seed, predictor=a.predictor)
        with open(raw_path, "a") as f:
            f.write(json.dumps(res, default=float) + "\n")
        done[key] = res
        return res

    ceilings = []
    rows = []
    for model, dev, tp, cap in setups:
        for p, d in pairs:
            if time.time() - t_start > a.budget_s:
                stopped = True
                break
            c = point("ceiling", model, dev, tp, cap, p, d, a.ceil_requests, 1000.0)
            ceil = c["completion_throughput_rps"]
            ceiling = dict(verifier=SHORT[model][0], model=model, gpu=dev.upper(),
                           tensor_parallel=tp, prefill_tokens=p, decode_tokens=d,
                           ceiling_rps=round(ceil, 5),
                           ceiling_output_tok_s=round(ceil * d, 2),
                           ceil_requests=a.ceil_requests)
            if cap != 128:  # the capped set: the cap and the burst's time-average batch
                ceiling.update(max_num_seqs=cap,
                               burst_mean_in_batch=round(c["mean_in_batch_window_completions"], 3))
            ceilings.append(ceiling)
            print(f"[{time.time()-t_start:7.1f}s] {SHORT[model][0]} {dev} tp{tp} cap{cap} ({p},{d}) "
                  f"ceiling={ceil:.4f} req/s", flush=True)
            for fr in fracs:
                if time.time() - t_start > a.budget_s:
                    stopped = True
                    break
                rate = float(fr * ceil)
                r = point("rate", model, dev, tp, cap, p, d, a.requests, round(rate, 6),
                          float(fr))
                rows.append(r)
                print(f"    frac={fr:.2f} target={rate:.4f} rps={r['rps']:.4f} "
                      f"lat={r['latency_mean_s']:.3f}s ttft={r['ttft_mean_s']:.3f}s "
                      f"N={r['rps'] * r['latency_mean_s']:.1f} "
                      f"N_time={r.get('mean_in_system_window', float('nan')):.1f} "
                      f"restarts={r['num_restarts']} sat={is_saturated(r)} "
                      f"[{r['sim_wall_s']:.1f}s]", flush=True)
        if stopped:
            break

    # ---- tidy CSV -----------------------------------------------------------
    from importlib.metadata import version
    vver = version("vidur")
    out_rows = []
    for r in rows:
        short, params = SHORT[r["model"]]
        out_rows.append({
            "verifier": short, "drafter": "", "k": 0, "alpha": "",
            "prefill_tokens": r["prefill"], "decode_tokens": r["decode"],
            "rps": round(r["rps"], 6), "latency_mean_s": round(r["latency_mean_s"], 6),
            "rps_target": round(r["rps_target"], 6), "n_requests": r["n_requests"],
            "whole_run": True,       # the mean is over every request of the run
            "latency_std_s": round(r["latency_std_s"], 6),
            "latency_p50_s": round(r["latency_p50_s"], 6),
            "latency_p95_s": round(r["latency_p95_s"], 6),
            "latency_p99_s": round(r["latency_p99_s"], 6),
            "ttft_mean_s": round(r["ttft_mean_s"], 6),
            "mean_concurrency": round(r["rps"] * r["latency_mean_s"], 6)
            if a.concurrency == "little" else round(r["mean_in_system_window"], 6),
            "saturated": is_saturated(r), "strategy": "poisson",
            "gpu": r["device"].upper(), "engine": "vidur", "engine_version": vver,
            "verifier_params_b": params,
            "source": f"vidur {vver} tp{r['tp']} seed={r['seed']}",
            "tensor_parallel": r["tp"],
            "max_num_seqs": r.get("batch_size_cap", 128),
            "kv_cache_tokens": rp.kv_cache_tokens(r["model"], r["device"], r["tp"]),
            "max_num_batched_tokens": r.get("max_tokens_in_batch", 4096),
        })
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(out_rows)
    with open(a.ceilings_out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(ceilings[0].keys()) if ceilings else ["verifier"])
        w.writeheader()
        w.writerows(ceilings)
    print(f"wrote {len(out_rows)} rows -> {a.out}; {len(ceilings)} ceilings -> {a.ceilings_out}; "
          f"elapsed {time.time()-t_start:.1f}s{' (BUDGET HIT: incomplete)' if stopped else ''}",
          flush=True)


if __name__ == "__main__":
    main()
