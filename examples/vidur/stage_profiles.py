"""Stage Vidur profiling data as local "datasets" that vidur 0.0.26 can read offline.

vidur 0.0.26 obtains its profiling data with ``huggingface_hub.snapshot_download``.
This machine has no Hub access, so this script lays the data out on disk in the
layout the predictor expects (see
``vidur/execution_time_predictor/sklearn_execution_time_predictor.py::_get_input_files``)
and writes a manifest mapping a local dataset id -> directory.  ``run_point.py``
patches ``snapshot_download`` to resolve those ids from the manifest.

Compute dataset dir:  config.json {"model", "device_sku"}, mlp.csv.xz, attention.csv.xz
Network dataset dir:  config.json {"sku"}, all_reduce.csv.xz, send_recv.csv.xz

Provenance
----------
* mlp.csv (per-op times of attn_pre_proj / attn_post_proj / mlp_up_proj /
  mlp_act / mlp_down_proj / rope / norms / add vs num_tokens and TP size) and
  network all_reduce.csv / send_recv.csv are REAL measurements copied verbatim
  from Vidur's GitHub repository (data/profiling/...) at the mirror commit.
* attention.csv is NOT in that snapshot (the files are Git-LFS objects that were
  not mirrored).  We synthesise it from a roofline of the paged attention kernel
  on the target GPU (see ``attention_rows``).  This is a stand-in.
"""

from __future__ import annotations

import argparse
import io
import json
import lzma
import math
import os
import subprocess
import sys
from itertools import product

import numpy as np
import pandas as pd

MIRROR = os.environ.get("VIDUR_MIRROR", "/work/.mirror/microsoft+vidur/repo")
MIRROR_REV = os.environ.get("VIDUR_MIRROR_REV", "HEAD")

# vidur model name -> (profile dir name in vidur repo, n_embd, n_q, n_kv)
MODELS = {
    "meta-llama/Llama-2-70b-hf": ("meta-llama/Llama-2-70b-hf", 8192, 64, 8),
    "codellama/CodeLlama-34b-Instruct-hf": ("codellama/CodeLlama-34b-Instruct-hf", 8192, 64, 8),
    "meta-llama/Llama-3-70B": ("meta-llama/Meta-Llama-3-70B", 8192, 64, 8),
    "meta-llama/Llama-2-7b-hf": ("meta-llama/Llama-2-7b-hf", 4096, 32, 32),
    # fresh set (vidur_fresh.csv); profiles exist for a100 only for Meta-Llama-3-8B
    "meta-llama/Llama-3-8B": ("meta-llama/Meta-Llama-3-8B", 4096, 32, 8),
    "internlm/internlm-20b": ("internlm/internlm-20b", 5120, 40, 40),
    "Qwen/Qwen-72B": ("Qwen/Qwen-72B", 8192, 64, 64),
}

# Roofline constants of the attention stand-in (per GPU).
GPUS = {
    # HBM bandwidth B/s, dense bf16/fp16 tensor FLOP/s
    "a100": dict(hbm_bw=2.0e12, peak_flops=312e12),  # A100 SXM 80GB
    "h100": dict(hbm_bw=3.35e12, peak_flops=989e12),  # H100 SXM 80GB
}
# NVSwitch (DGX) nodes: SXM parts, matching the roofline constants above.
NETWORK_SKU = {"a100": "a100_dgx", "h100": "h100_dgx"}

# Efficiencies / overheads of the stand-in (documented in README.md).
DECODE_BW_EFF = float(os.environ.get("VIDUR_ATTN_DECODE_BW_EFF", "0.8"))
PREFILL_FLOP_EFF = float(os.environ.get("VIDUR_ATTN_PREFILL_FLOP_EFF", "0.5"))
KV_SAVE_BW_EFF = float(os.environ.get("VIDUR_ATTN_KVSAVE_BW_EFF", "0.5"))
DECODE_OVERHEAD_MS = float(os.environ.get("VIDUR_ATTN_DECODE_OVERHEAD_MS", "0.02"))
PREFILL_OVERHEAD_MS = float(os.environ.get("VIDUR_ATTN_PREFILL_OVERHEAD_MS", "0.02"))
KV_SAVE_OVERHEAD_MS = float(os.environ.get("VIDUR_ATTN_KVSAVE_OVERHEAD_MS", "0.005"))
ROOFLINE_VERSION = "roofline-v1"

BLOCK_SIZE = 16
MAX_SEQ = 4096  # vidur prediction grid: kv 0..4096 step 256, chunk 32..4096 step 32
BYTES = 2  # fp16/bf16


_DEFAULT_KNOBS = (0.8, 0.5, 0.5, 0.02, 0.02, 0.005)


def roofline_tag() -> str:
    """ROOFLINE_VERSION, plus a hash of the knobs when they differ from the defaults, so
    that staged data and vidur's predictor cache (keyed by dataset id) never go stale."""
    knobs = (DECODE_BW_EFF, PREFILL_FLOP_EFF, KV_SAVE_BW_EFF, DECODE_OVERHEAD_MS,
             PREFILL_OVERHEAD_MS, KV_SAVE_OVERHEAD_MS)
    if knobs == _DEFAULT_KNOBS:
        return ROOFLINE_VERSION
    import hashlib
    return f"{ROOFLINE_VERSION}-{hashlib.md5(repr(knobs).encode()).hexdigest()[:8]}"


def dataset_id(kind: str, device: str, model: str | None = None) -> str:
    if kind == "compute":
        return f"local/vidur-compute-{device}-{model.replace('/', '--')}-{roofline_tag()}"
    return f"local/vidur-network-{NETWORK_SKU[device]}"


def git_show(path: str) -> bytes:
    return subprocess.run(
        ["git", "-C", MIRROR, "show", f"{MIRROR_REV}:{path}"],
        check=True,
        capture_output=True,
    ).stdout


def mirror_commit() -> str:
    return (
        subprocess.run(
            ["git", "-C", MIRROR, "rev-parse", MIRROR_REV], check=True, capture_output=True
        )
        .stdout.decode()
        .strip()
    )


def write_xz(data: bytes, path: str) -> None:
    with lzma.open(path, "wb", preset=1) as f:
        f.write(data)


def attention_rows(device: str, n_embd: int, n_q: int, n_kv: int, tp: int) -> pd.DataFrame:
    """Roofline stand-in for the paged-attention kernel times (ms, per layer, per GPU).

    decode (batch b, context L):   t = b*L*2*kvh*d*2B / (BW*eff_bw) + overhead
    prefill (chunk c, prior ctx k): t = 4*d*qh*(c*k + c*(c+1)/2) / (peak*eff_flop) + overhead
    kv_cache_save (n new tokens):   t = n*2*kvh*d*2B*2 (read+write) / (BW*eff) + overhead
    where qh, kvh are heads per tensor-parallel worker and d the head dim.
    """
    g = GPUS[device]
    d = n_embd // n_q
    qh = n_q // tp
    kvh = math.ceil(n_kv / tp)
    kv_bytes_per_token = 2 * kvh * d * BYTES  # K and V
    bw_dec = g["hbm_bw"] * DECODE_BW_EFF
    bw_save = g["hbm_bw"] * KV_SAVE_BW_EFF
    flops = g["peak_flops"] * PREFILL_FLOP_EFF

    def kv_save_ms(n):
        return 1e3 * n * kv_bytes_per_token * 2 / bw_save + KV_SAVE_OVERHEAD_MS

    rows = []
    kv_sizes = list(range(0, MAX_SEQ + 1, 256))
    # decode rows: every batch size vidur can query (1..128) x kv grid
    for b, L in product(range(1, 129), kv_sizes):
        t = 1e3 * b * L * kv_bytes_per_token / bw_dec + DECODE_OVERHEAD_MS
        rows.append(
            dict(batch_size=b, kv_cache_size=L, prefill_chunk_size=0, is_prefill=False,
                 **{"time_stats.attn_decode.median": t,
                    "time_stats.attn_prefill.median": np.nan,
                    "time_stats.attn_kv_cache_save.median": kv_save_ms(b)})
        )
    # prefill rows: every chunk size vidur can query (32..4096 step 32) x kv grid
    for c, k in product(range(32, MAX_SEQ + 1, 32), kv_sizes):
        fl = 4.0 * d * qh * (c * k + c * (c + 1) / 2.0)
        t = 1e3 * fl / flops + PREFILL_OVERHEAD_MS
        rows.append(
            dict(batch_size=1, kv_cache_size=k, prefill_chunk_size=c, is_prefill=True,
                 **{"time_stats.attn_decode.median": np.nan,
                    "time_stats.attn_prefill.median": t,
                    "time_stats.attn_kv_cache_save.median": kv_save_ms(c)})
        )
    df = pd.DataFrame(rows)
    df["n_embd"] = n_embd
    df["n_q_head"] = n_q
    df["n_kv_head"] = n_kv
    df["block_size"] = BLOCK_SIZE
    df["num_tensor_parallel_workers"] = tp
    df["max_model_len"] = MAX_SEQ
    df["attention_backend"] = f"ROOFLINE_STANDIN({roofline_tag()})"
    return df


def stage(root: str, setups: list[tuple[str, str]]) -> dict:
    manifest_path = os.path.join(root, "manifest.json")
    manifest = {}
    if os.path.exists(manifest_path):
        manifest = json.load(open(manifest_path))
    commit = mirror_commit()
    for model, device in setups:
        prof_name, n_embd, n_q, n_kv = MODELS[model]
        cid = dataset_id("compute", device, model)
        cdir = os.path.join(root, "compute", device, model.replace("/", "--") + "-" + roofline_tag())
        os.makedirs(cdir, exist_ok=True)
        if not os.path.exists(os.path.join(cdir, "attention.csv.xz")):
            write_xz(git_show(f"data/profiling/compute/{device}/{prof_name}/mlp.csv"),
                     os.path.join(cdir, "mlp.csv.xz"))
            att = pd.concat([attention_rows(device, n_embd, n_q, n_kv, tp) for tp in (1, 2, 4, 8)])
            buf = io.StringIO()
            att.to_csv(buf, index=False)
            write_xz(buf.getvalue().encode(), os.path.join(cdir, "attention.csv.xz"))
            json.dump(
                {"model": model, "device_sku": device,
                 "mlp_source": f"github.com/microsoft/vidur@{commit}:data/profiling/compute/{device}/{prof_name}/mlp.csv",
                 "attention_source": f"{roofline_tag()} stand-in (stage_profiles.py)",
                 "roofline": dict(GPUS[device], decode_bw_eff=DECODE_BW_EFF,
                                  prefill_flop_eff=PREFILL_FLOP_EFF, kv_save_bw_eff=KV_SAVE_BW_EFF,
                                  decode_overhead_ms=DECODE_OVERHEAD_MS,
                                  prefill_overhead_ms=PREFILL_OVERHEAD_MS,
                                  kv_save_overhead_ms=KV_SAVE_OVERHEAD_MS)},
                open(os.path.join(cdir, "config.json"), "w"), indent=2)
        manifest[cid] = cdir

        sku = NETWORK_SKU[device]
        nid = dataset_id("network", device)
        ndir = os.path.join(root, "network", sku)
        os.makedirs(ndir, exist_ok=True)
        if not os.path.exists(os.path.join(ndir, "send_recv.csv.xz")):
            for f in ("all_reduce", "send_recv"):
                write_xz(git_show(f"data/profiling/network/{sku}/{f}.csv"),
                         os.path.join(ndir, f"{f}.csv.xz"))
            json.dump({"sku": sku,
                       "source": f"github.com/microsoft/vidur@{commit}:data/profiling/network/{sku}/"},
                      open(os.path.join(ndir, "config.json"), "w"), indent=2)
        manifest[nid] = ndir
    manifest["_mirror_commit"] = commit
    json.dump(manifest, open(manifest_path, "w"), indent=2)
    return manifest


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "../../.vidur/profiles"))
    ap.add_argument("--setup", action="append", default=None,
                    help="model@device, e.g. meta-llama/Llama-2-70b-hf@a100 (repeatable)")
    a = ap.parse_args()
    setups = [tuple(s.split("@")) for s in (a.setup or [
        "meta-llama/Llama-2-70b-hf@a100", "codellama/CodeLlama-34b-Instruct-hf@a100",
        "meta-llama/Llama-3-70B@a100", "meta-llama/Llama-2-70b-hf@h100"])]
    m = stage(os.path.abspath(a.root), setups)
    print(json.dumps(m, indent=2))


if __name__ == "__main__":
    sys.exit(main())
