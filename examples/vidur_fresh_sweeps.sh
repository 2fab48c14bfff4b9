#!/usr/bin/env bash
# Fresh Vidur validation set: examples/vidur/vidur_fresh.csv (+ vidur_fresh_ceilings.csv).
# Setups and (prefill, decode) pairs that examples/vidur/vidur_dense.csv does NOT use, so a
# model chosen on vidur_dense.csv can be tested on data it was not chosen on.  Same
# simulator, profiles, scheduler and load design as vidur_dense.csv (11 rates from 5% to
# 95% of each ceiling, 1000 requests per point, seed 0).  See examples/vidur/README.md,
# section "Fresh set (vidur_fresh.csv)".
#
# Usage: examples/vidur_fresh_sweeps.sh      (VIDUR_FRESH=1 to discard earlier raw results)
# Every knob of examples/vidur_sweeps.sh can still be overridden from the environment.
#
# All four setups hold 128 requests of the longest pair in KV cache (vLLM preemption, which
# crashes vidur 0.0.26, can never trigger).  This is why Llama-2-7B runs on TP2 and
# Qwen-72B on TP8, and why the longest pair is 1152x128 rather than 1536x128 (Qwen-72B on
# H100 TP8 has room for 182k tokens, 128 x 1664 = 213k).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

export VIDUR_SETUPS=${VIDUR_SETUPS:-"meta-llama/Llama-3-8B@a100@1,meta-llama/Llama-2-7b-hf@h100@2,internlm/internlm-20b@a100@4,Qwen/Qwen-72B@h100@8"}
export VIDUR_PAIRS=${VIDUR_PAIRS:-"128x512,384x384,768x256,1152x128"}
export VIDUR_TAG=${VIDUR_TAG:-fresh}
export VIDUR_OUT=${VIDUR_OUT:-$ROOT/examples/vidur/vidur_fresh.csv}
export VIDUR_CEIL_OUT=${VIDUR_CEIL_OUT:-$ROOT/examples/vidur/vidur_fresh_ceilings.csv}
export VIDUR_THREADS=${VIDUR_THREADS:-1}

exec "$ROOT/examples/vidur_sweeps.sh" "$@"
