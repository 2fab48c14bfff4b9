"""Decode-iteration profiles t_d(B) of the three Vidur validation sets -> decode_profiles.csv.

For every load-sweep group (verifier, gpu, tensor_parallel, prefill_tokens, decode_tokens) of
``vidur_dense.csv``, ``vidur_fresh.csv`` and ``vidur_capped.csv``, the time of ONE decode
iteration of B requests, B = 1..max_num_seqs, each request at the pair's mean context
(prefill + decode // 2 KV tokens), as Vidur 0.0.26's trained execution-time predictor gives
it.  This is ``iteration_profile.table()``'s ``total_ms`` (/ 1000): the engine's
per-iteration decode time vs batch size, the stand-in for what a user measures on a real
engine (vLLM's ``benchmark_latency`` at a few batch sizes, or its per-iteration timings).

Usage (needs the venv of examples/vidur_sweeps.sh; profiles not yet staged under
.vidur/profiles are staged from the Vidur mirror, VIDUR_MIRROR; see README.md, section
"Decode-iteration profiles"):
  .vidur/venv/bin/python examples/vidur/decode_profiles.py                 # all three sets
  .vidur/venv/bin/python examples/vidur/decode_profiles.py --sets capped --verify
Output: examples/vidur/decode_profiles.csv with the columns
  verifier,gpu,tensor_parallel,prefill_tokens,decode_tokens,batch_size,decode_iteration_s,set

Provenance and fidelity.  Vidur's random forests have no random_state, so a trained
predictor depends on the global RNG when it is trained, on the thread count, and on which
models its cache already holds (the all-reduce model is cached per network profile and TP
and so is shared between setups of one set).  This script therefore trains each set's
predictors the way the set's sweep did: the set's own thread count (dense 2, fresh 1,
capped 1), the reduced RF grid of run_point.py (VIDUR_RF_*/VIDUR_CV_SPLITS left at their
defaults), a predictor cache of its own per set (``<root>/cache-decode-<set>``, start it
empty: ``--clear-cache``), and the setups in the order the sweep ran them (the order of the
CSV).  Each predictor is trained by ``iteration_profile.predictor_for`` (one tiny request
with seed 0, like the sweep's first point of the setup).  ``--verify`` then reruns one load
point per setup with the same predictor (the top rate of the setup's pair with the fewest
decode tokens) and compares ``latency_mean_s`` with the set's CSV row.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import sys
import time
from collections import OrderedDict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import iteration_profile as ip  # noqa: E402  (imports run_point, vidur)
import run_point as rp  # noqa: E402
import stage_profiles  # noqa: E402
from run_sweep import SHORT  # noqa: E402

SETS = OrderedDict(
    dense=("vidur_dense.csv", 2),
    fresh=("vidur_fresh.csv", 1),
    capped=("vidur_capped.csv", 1),
)
MODEL_OF = {short: model for model, (short, _) in SHORT.items()}
COLUMNS = ["verifier", "gpu", "tensor_parallel", "prefill_tokens", "decode_tokens",
           "batch_size", "decode_iteration_s", "set"]
GROUP = ("verifier", "gpu", "tensor_parallel", "prefill_tokens", "decode_tokens")


def read_groups(path):
    """The set's groups in CSV (= sweep) order, each with its rows."""
    groups = OrderedDict()
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            groups.setdefault(tuple(r[c] for c in GROUP), []).append(r)
    return groups


def setup_of(rows):
    r = rows[0]
    caps = {(x["max_num_seqs"], x["max_num_batched_tokens"]) for x in rows}
    assert len(caps) == 1, caps
    return (MODEL_OF[r["verifier"]], r["gpu"].lower(), int(r["tensor_parallel"]),
            int(r["max_num_seqs"]), int(r["max_num_batched_tokens"]))


def ensure_staged(root, setups):
    """Stage the profiles of any setup whose datasets are not in the manifest yet (needs the
    Vidur mirror, VIDUR_MIRROR); staged data is deterministic and left as it is."""
    path = os.path.join(root, "profiles", "manifest.json")
    have = json.load(open(path)) if os.path.exists(path) else {}
    missing = sorted({(m, d) for m, d, *_ in setups
                      if stage_profiles.dataset_id("compute", d, m) not in have
                      or stage_profiles.dataset_id("network", d) not in have})
    if missing:
        print(f"staging profiles of {missing} from {stage_profiles.MIRROR}", flush=True)
        stage_profiles.stage(os.path.join(root, "profiles"), missing)


def verify_point(setup, groups, threads, root):
    """Rerun the top-rate point of the setup's pair with the fewest decode tokens."""
    model, dev, tp, cap, mtb = setup
    cand = [(int(k[4]), k) for k, rows in groups.items() if setup_of(rows) == setup]
    _, key = min(cand)
    row = max(groups[key], key=lambda r: float(r["rps_target"]))
    ip._BATCH_LOG.clear()
    t0 = time.time()
    res = rp.run_point(model, dev, tp, int(key[3]), int(key[4]), int(row["n_requests"]),
                       rps_target=float(row["rps_target"]), seed=0, root=root,
                       threads=threads, batch_cap=cap, max_tokens_in_batch=mtb)
    ip._BATCH_LOG.clear()
    want, got = float(row["latency_mean_s"]), round(res["latency_mean_s"], 6)
    return dict(pair=f"({key[3]},{key[4]})", rps_target=float(row["rps_target"]),
                csv=want, rerun=got, rel=(got - want) / want, wall_s=time.time() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=",".join(SETS), help="comma list of dense,fresh,capped")
    ap.add_argument("--out", default=os.path.join(HERE, "decode_profiles.csv"))
    ap.add_argument("--threads", default="",
                    help="training threads: N for every set, or set=N,... "
                         f"(default {','.join(f'{s}={t}' for s, (_, t) in SETS.items())})")
    ap.add_argument("--root", default=rp.DEFAULT_ROOT,
                    help="Vidur cache dir with profiles/manifest.json (default .vidur)")
    ap.add_argument("--cache-prefix", default=None,
                    help="predictor cache of set S: <prefix><S> (default <root>/cache-decode-)")
    ap.add_argument("--clear-cache", action="store_true",
                    help="empty each set's predictor cache first (train from scratch)")
    ap.add_argument("--verify", action="store_true",
                    help="rerun one sweep point per setup and compare latency_mean_s")
    a = ap.parse_args()

    threads = {s: t for s, (_, t) in SETS.items()}
    if a.threads and "=" not in a.threads:
        threads = {s: int(a.threads) for s in SETS}
    elif a.threads:
        for item in a.threads.split(","):
            s, n = item.split("=")
            threads[s.strip()] = int(n)
    prefix = a.cache_prefix or os.path.join(a.root, "cache-decode-")
    sets = [s.strip() for s in a.sets.split(",") if s.strip()]
    all_groups = {s: read_groups(os.path.join(HERE, SETS[s][0])) for s in sets}
    ensure_staged(a.root, [setup_of(rows) for g in all_groups.values() for rows in g.values()])
    rp.install_offline_hub(a.root)

    out_rows, checks = [], []
    t_all = time.time()
    for s in sets:
        groups = all_groups[s]
        cache = prefix + s
        if a.clear_cache and os.path.isdir(cache):
            shutil.rmtree(cache)
        os.environ["VIDUR_PREDICTOR_CACHE"] = cache  # read by run_point at each call
        setups = list(OrderedDict.fromkeys(setup_of(rows) for rows in groups.values()))
        t_set = time.time()
        for setup in setups:
            model, dev, tp, cap, mtb = setup
            t0 = time.time()
            pred = ip.predictor_for(model, dev, tp, a.root, threads[s], cap, mtb)
            t_train = time.time() - t0
            n_groups = 0
            for key, rows in groups.items():
                if setup_of(rows) != setup:
                    continue
                n_groups += 1
                dec, _ = ip.table(pred, int(key[3]), int(key[4]), cap, mtb)
                for r in dec:
                    out_rows.append(dict(zip(GROUP, key), batch_size=r["batch"],
                                         decode_iteration_s=f"{r['total_ms'] / 1e3:.6g}",
                                         set=s))
            print(f"[{s}] {model} {dev} tp{tp} cap{cap}: {n_groups} groups, predictor "
                  f"{t_train:.1f}s, threads={threads[s]}, cache={cache}", flush=True)
            if a.verify:
                c = verify_point(setup, groups, threads[s], a.root)
                c.update(set=s, setup=f"{SHORT[model][0]} {dev.upper()} TP{tp}")
                checks.append(c)
                print(f"    verify {c['pair']} rps_target={c['rps_target']}: latency_mean_s "
                      f"csv={c['csv']:.6f} rerun={c['rerun']:.6f} rel={c['rel']:+.2e} "
                      f"[{c['wall_s']:.1f}s]", flush=True)
        print(f"[{s}] {len(groups)} groups, {time.time() - t_set:.1f}s", flush=True)

    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(out_rows)
    print(f"wrote {len(out_rows)} rows -> {a.out}; elapsed {time.time() - t_all:.1f}s",
          flush=True)
    if checks:
        bad = [c for c in checks if abs(c["rel"]) > 1e-3]
        print(f"verify: {len(checks) - len(bad)}/{len(checks)} setups within 0.1%"
              + "".join(f"\n  NOT REPRODUCED: {c['set']} {c['setup']} {c['pair']} "
                        f"rel={c['rel']:+.3e}" for c in bad), flush=True)


if __name__ == "__main__":
    main()
