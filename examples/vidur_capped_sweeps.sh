#!/usr/bin/env bash
# Capped Vidur validation set: examples/vidur/vidur_capped.csv (+ vidur_capped_ceilings.csv).
# The vLLM scheduler's batch cap (max_num_seqs) BINDS: 48 or 32 requests per batch, on
# setups and (prefill, decode) pairs that neither vidur_dense.csv nor vidur_fresh.csv use.
# Rates run from 5% of the cap's burst throughput to 120% of it, so the top points are
# past the ceiling (a queue that grows for the whole run).  mean_concurrency is the
# time-average number of requests in the system over the arrival window, from Vidur's own
# per-request times (not rps x latency).  See examples/vidur/README.md, section "Capped
# set (vidur_capped.csv)".
#
# Usage: examples/vidur_capped_sweeps.sh      (VIDUR_FRESH=1 to discard earlier raw results)
# Every knob of examples/vidur_sweeps.sh can still be overridden from the environment.
#
# KV never binds (vidur 0.0.26 crashes once the vLLM scheduler preempts): each setup holds
# its cap times the longest request (1376 tokens) many times over (examples/vidur/README.md).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${VIDUR_CACHE:-$ROOT/.vidur}

export VIDUR_SETUPS=${VIDUR_SETUPS:-"meta-llama/Llama-2-7b-hf@a100@1@48,internlm/internlm-20b@h100@2@32,Qwen/Qwen-72B@a100@8@48"}
export VIDUR_PAIRS=${VIDUR_PAIRS:-"320x320,640x192,1280x96"}
export VIDUR_N_RATES=${VIDUR_N_RATES:-10}
export VIDUR_FRAC_LO=${VIDUR_FRAC_LO:-0.05}
export VIDUR_FRAC_HI=${VIDUR_FRAC_HI:-0.95}
export VIDUR_EXTRA_FRACS=${VIDUR_EXTRA_FRACS:-"1.05,1.2"}
export VIDUR_CONCURRENCY=${VIDUR_CONCURRENCY:-measured}
export VIDUR_TAG=${VIDUR_TAG:-capped}
export VIDUR_OUT=${VIDUR_OUT:-$ROOT/examples/vidur/vidur_capped.csv}
export VIDUR_CEIL_OUT=${VIDUR_CEIL_OUT:-$ROOT/examples/vidur/vidur_capped_ceilings.csv}
export VIDUR_THREADS=${VIDUR_THREADS:-1}
# its own predictor cache: what the first two sets trained does not change this one
export VIDUR_PREDICTOR_CACHE=${VIDUR_PREDICTOR_CACHE:-$CACHE/cache-capped}

exec "$ROOT/examples/vidur_sweeps.sh" "$@"
