#!/usr/bin/env bash
# Dense (no speculative decoding) Poisson load sweeps simulated with Microsoft's Vidur
# (vidur==0.0.26, vLLM scheduler, one replica) -> bayesspec tidy CSV
# examples/vidur/vidur_dense.csv (+ examples/vidur/vidur_ceilings.csv).  Opt-in; not part
# of the test suite.  Provenance and caveats: examples/vidur/README.md.
#
# Usage: examples/vidur_sweeps.sh
# Knobs (environment):
#   VIDUR_CACHE          cache dir: venv, staged profiles, trained predictors, raw runs (default .vidur)
#   VIDUR_SETUPS         comma list of model@gpu@tp[@cap] (default: five setups, see run_sweep.py)
#   VIDUR_BATCH_CAP      vLLM scheduler batch_size_cap (max_num_seqs) of setups without @cap (default 128)
#   VIDUR_MAX_TOKENS_IN_BATCH  tokens per iteration (max_num_batched_tokens) (default 4096)
#   VIDUR_PAIRS          comma list of PREFILLxDECODE (default 256x256,512x128,512x512,1024x256,2048x512)
#   VIDUR_REQUESTS       requests per load point (default 1000)
#   VIDUR_CEIL_REQUESTS  requests in the burst run that measures the ceiling (default 1000)
#   VIDUR_N_RATES        arrival rates per (setup, pair) (default 11)
#   VIDUR_FRAC_LO/HI     rates span this fraction of the ceiling (default 0.05 .. 0.95)
#   VIDUR_EXTRA_FRACS    further fractions of the ceiling, comma list (default none), e.g. 1.05,1.2
#   VIDUR_CONCURRENCY    mean_concurrency column: little (rps x latency, default) | measured
#                        (time-average in the system over the arrival window)
#   VIDUR_SEED           seed of arrivals (default 0)
#   VIDUR_PREDICTOR      random_forest (default) | linear_regression
#   VIDUR_RF_TREES, VIDUR_RF_DEPTH, VIDUR_CV_SPLITS   reduced RF grid (default 100, 32, 3)
#   VIDUR_THREADS        sklearn training threads (default 2)
#   VIDUR_PREDICTOR_CACHE  trained-predictor cache dir (default $VIDUR_CACHE/cache)
#   VIDUR_BUDGET_S       stop starting new points after this many seconds (default 3000)
#   VIDUR_TIMEOUT_S      hard wall-clock limit for the whole sweep (default 3600)
#   VIDUR_OUT, VIDUR_CEIL_OUT   output CSV paths
#   VIDUR_TAG            name of the resumable raw-results file .vidur/runs/<tag>.jsonl (default dense)
#   VIDUR_FRESH=1        discard previous raw results of this tag before running
#   VIDUR_MIRROR         git dir of a github.com/microsoft/vidur clone (profiles source)
#                        (default /work/.mirror/microsoft+vidur/repo)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${VIDUR_CACHE:-$ROOT/.vidur}
VENV=$CACHE/venv
PY=$VENV/bin/python
export VIDUR_ROOT=$CACHE
export VIDUR_REQUESTS=${VIDUR_REQUESTS:-1000}
export VIDUR_CEIL_REQUESTS=${VIDUR_CEIL_REQUESTS:-1000}
export VIDUR_BUDGET_S=${VIDUR_BUDGET_S:-3000}
TIMEOUT_S=${VIDUR_TIMEOUT_S:-3600}
TAG=${VIDUR_TAG:-dense}
START=$(date +%s)
log() { echo "[vidur $(( $(date +%s) - START ))s] $*" >&2; }

mkdir -p "$CACHE"
[ -f "$CACHE/.gitignore" ] || printf '*\n' > "$CACHE/.gitignore"

# 1. Python 3.11 venv with vidur 0.0.26 (cached)
if ! "$PY" -c "import vidur, importlib.metadata as m; assert m.version('vidur') == '0.0.26'" 2>/dev/null; then
    log "creating $VENV (python3.11 + vidur==0.0.26)"
    rm -rf "$VENV"
    python3.11 -m venv "$VENV"
    timeout 1200 "$VENV/bin/pip" install -q vidur==0.0.26
fi

# 2. stage the real Vidur profiles (+ roofline attention stand-in) for the default setups
SETUPS=${VIDUR_SETUPS:-}
STAGE_ARGS=()
if [ -n "$SETUPS" ]; then
    IFS=',' read -ra ITEMS <<< "$SETUPS"
    for it in "${ITEMS[@]}"; do
        IFS=@ read -r m dev _ <<< "$it"; STAGE_ARGS+=(--setup "$m@$dev")   # model@gpu
    done
else
    for m in meta-llama/Llama-2-70b-hf@a100 codellama/CodeLlama-34b-Instruct-hf@a100 \
             meta-llama/Llama-3-70B@a100 meta-llama/Llama-2-70b-hf@h100 \
             codellama/CodeLlama-34b-Instruct-hf@h100; do
        STAGE_ARGS+=(--setup "$m")
    done
fi
log "staging profiles into $CACHE/profiles"
"$PY" "$ROOT/examples/vidur/stage_profiles.py" --root "$CACHE/profiles" "${STAGE_ARGS[@]}" >/dev/null

# 3. run all points (resumable, time-bounded)
if [ "${VIDUR_FRESH:-0}" = 1 ]; then rm -f "$CACHE/runs/$TAG.jsonl"; fi
mkdir -p "$CACHE/runs"
log "running sweeps (requests/point=$VIDUR_REQUESTS, budget ${VIDUR_BUDGET_S}s, hard limit ${TIMEOUT_S}s)"
timeout "$TIMEOUT_S" "$PY" "$ROOT/examples/vidur/run_sweep.py" 2> "$CACHE/runs/$TAG.stderr.log" \
    | tee "$CACHE/runs/$TAG.log"
log "done in $(( $(date +%s) - START ))s"
