#!/usr/bin/env bash
# End to end with the real GuideLLM client against `bayesspec serve`:
#   GuideLLM 0.8 sweep -> live simulated server (dense, then SD at a forced alpha, k) with
#   /metrics scraped around every load point -> bayesspec ingest -> fit -> speedup/crossover,
#   and the dense fit compared with the same configuration simulated offline.
#
# Usage: examples/guidellm_e2e.sh [OUT_DIR]        (default .e2e/run)
# Knobs (environment): E2E_SECONDS (per load point, default 30), E2E_SWEEP (points per sweep,
# default 6), E2E_WARMUP (seconds left out at the start of each point, default 5),
# E2E_CONCURRENCY (GuideLLM's max concurrency, default 32), E2E_PYTHON (bayesspec's python,
# default .venv/bin/python), E2E_CACHE (GuideLLM venv and tokenizer, default .e2e).
#
# GuideLLM gets its own Python 3.11 venv (its dependencies pull torch; `pip install
# torch==2.13.0` takes the CPU wheel on these machines). No model hub is needed: a tiny
# byte-level BPE tokenizer is trained on this repository's text. Servers listen on
# 127.0.0.1 only, are started and stopped by PID, and every step has a time bound.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${E2E_CACHE:-$ROOT/.e2e}
OUT=${1:-$CACHE/run}
PY=${E2E_PYTHON:-$ROOT/.venv/bin/python}
SECONDS_PER_POINT=${E2E_SECONDS:-30}
SWEEP=${E2E_SWEEP:-6}
WARMUP=${E2E_WARMUP:-5}
CONCURRENCY=${E2E_CONCURRENCY:-32}
VERIFIER=Qwen3-0.6B
GPU=SLOW-E2E
DRAFTER=EAGLE3-Qwen3-0.6B
PROMPT=128
OUTPUT=32
K=3
ALPHA=0.8
CATALOG=$ROOT/examples/guidellm_e2e/catalog
HELPERS=$ROOT/examples/guidellm_e2e
GVENV=$CACHE/venv311
TOKENIZER=$CACHE/tokenizer

START=$(date +%s)
log() { echo "[e2e $(( $(date +%s) - START ))s] $*" >&2; }
PIDS=()
cleanup() {
    for pid in "${PIDS[@]:-}"; do
        [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    done
}
trap cleanup EXIT

mkdir -p "$CACHE" "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -rf "${OUT:?}"/*

# 1. GuideLLM's venv (cached)
if ! "$GVENV/bin/guidellm" --help >/dev/null 2>&1; then
    log "creating GuideLLM venv in $GVENV (torch + guidellm; a few minutes the first time)"
    rm -rf "$GVENV"
    python3.11 -m venv "$GVENV"
    timeout 900 "$GVENV/bin/pip" install -q torch==2.13.0 2>&1 | grep -v "^WARNING: Location" >&2 || true
    timeout 900 "$GVENV/bin/pip" install -q "guidellm>=0.8,<0.9" tokenizers transformers 2>&1 \
        | grep -v "^WARNING: Location" >&2 || true
    "$GVENV/bin/guidellm" --help >/dev/null
fi
log "guidellm $("$GVENV/bin/pip" show guidellm 2>/dev/null | awk '/^Version/{print $2}')"

# 2. a local tokenizer (cached)
if [ ! -f "$TOKENIZER/tokenizer.json" ]; then
    rm -rf "$TOKENIZER" "$TOKENIZER.tmp"
    "$GVENV/bin/python" "$HELPERS/make_tokenizer.py" "$TOKENIZER" "$ROOT"
fi

# 3. one live sweep per configuration
run_config() {   # name, extra serve flags...
    local name=$1; shift
    local port_file=$OUT/$name.port
    rm -f "$port_file"
    "$PY" -m bayesspec serve --catalog "$CATALOG" --verifier "$VERIFIER" --gpu "$GPU" "$@" \
        --port 0 --port-file "$port_file" --prompt-tokens "$PROMPT" --max-runtime 900 \
        --stats "$OUT/$name.server.json" 2>"$OUT/$name.server.log" &
    local server=$!
    PIDS+=("$server")
    for _ in $(seq 1 100); do [ -s "$port_file" ] && break; sleep 0.2; done
    [ -s "$port_file" ] || { cat "$OUT/$name.server.log" >&2; exit 1; }
    local url=http://127.0.0.1:$(cat "$port_file")
    "$PY" "$HELPERS/scrape.py" "$url/metrics" "$OUT/$name.scrapes" 0.5 &
    local scraper=$!
    PIDS+=("$scraper")
    sleep 1
    log "$name: server $server on $url; GuideLLM sweep of $SWEEP points x ${SECONDS_PER_POINT}s"
    # One worker process: the default (10 spawned workers) spends ~20 s per load point
    # starting up on two cores and competes with the server for them.
    (cd "$OUT" && GUIDELLM__MAX_WORKER_PROCESSES=1 timeout 900 "$GVENV/bin/guidellm" run \
        --backend "kind=openai_http,target=$url,model=$VERIFIER" \
        --profile "kind=sweep,sweep_size=$SWEEP,max_concurrency=$CONCURRENCY,warmup=$WARMUP" \
        --data "kind=synthetic_text,prompt_tokens=$PROMPT,output_tokens=$OUTPUT" \
        --constraint "kind=max_duration,seconds=$SECONDS_PER_POINT" \
        --tokenizer "kind=hf_auto,model=$TOKENIZER" \
        --output "kind=json,path=$OUT/$name.guidellm.json" \
        --disable-console-interactive >"$OUT/$name.guidellm.log" 2>&1) \
        || { tail -20 "$OUT/$name.guidellm.log" >&2; exit 1; }
    sleep 1
    kill "$scraper" 2>/dev/null || true
    kill -TERM "$server" 2>/dev/null || true
    wait "$scraper" 2>/dev/null || true
    wait "$server" || true
    tail -1 "$OUT/$name.server.log" >&2
}

run_config dense
run_config sd --k "$K" --alpha "$ALPHA"
LIVE_DONE=$(date +%s)

# 4. ingest: the real reports, with the SD counters from the scrape pairs
"$PY" -m bayesspec ingest "$OUT/dense.guidellm.json" -o "$OUT/dense.csv" --verifier "$VERIFIER" \
    --k 0 --drafter "" --gpu "$GPU" --engine bayesspec-serve
METRICS=()
while read -r before after; do METRICS+=(--metrics "$before" "$after"); done \
    < <("$PY" "$HELPERS/pair_scrapes.py" "$OUT/sd.guidellm.json" "$OUT/sd.scrapes")
# alpha is not given: the SD rows carry the scraped counters and alpha is estimated.
"$PY" -m bayesspec ingest "$OUT/sd.guidellm.json" -o "$OUT/sd.csv" --verifier "$VERIFIER" \
    --drafter "$DRAFTER" --k "$K" --method eagle3 --gpu "$GPU" --engine bayesspec-serve \
    "${METRICS[@]}"
"$PY" - "$OUT" <<'EOF'
import sys, pandas as pd
out = sys.argv[1]
both = pd.concat([pd.read_csv(f"{out}/dense.csv"), pd.read_csv(f"{out}/sd.csv")],
                 ignore_index=True)
both.to_csv(f"{out}/both.csv", index=False)
EOF

# 5. the same dense configuration simulated offline
"$PY" -m bayesspec simulate --catalog "$CATALOG" --verifier "$VERIFIER" --gpu "$GPU" \
    --prefill "$PROMPT" --decode "$OUTPUT" --sweep "$SWEEP" --arrivals constant \
    --requests 1000 -o "$OUT/offline_dense.csv" --quiet

# 6. fits and decisions
log "fitting"
# One group of five usable points: at the default target acceptance the dense fit showed
# a dozen divergent transitions in 4000 draws; 0.99 removed them.
"$PY" -m bayesspec fit "$OUT/dense.csv" -o "$OUT/dense.nc" --model dense --target-accept 0.99 \
    >/dev/null
"$PY" -m bayesspec fit "$OUT/offline_dense.csv" -o "$OUT/offline_dense.nc" --model dense \
    --target-accept 0.99 >/dev/null
"$PY" -m bayesspec fit "$OUT/both.csv" -o "$OUT/sd.nc" --model speculative --target-accept 0.99 \
    >/dev/null
"$PY" -m bayesspec summary "$OUT/dense.nc" --json >"$OUT/dense.summary.json"
"$PY" -m bayesspec summary "$OUT/offline_dense.nc" --json >"$OUT/offline_dense.summary.json"
"$PY" -m bayesspec summary "$OUT/sd.nc" --json >"$OUT/sd.summary.json"
"$PY" -m bayesspec speedup "$OUT/sd.nc" --alpha "$ALPHA" --k "$K" --rps 0.5:5:0.5 --json \
    >"$OUT/speedup.json"
"$PY" -m bayesspec crossover "$OUT/sd.nc" --alpha "$ALPHA" --k "$K" --json >"$OUT/crossover.json"

END=$(date +%s)
"$PY" "$HELPERS/summarize.py" "$OUT" "$ALPHA" $(( END - START )) $(( LIVE_DONE - START ))
log "done in $(( END - START )) s; results in $OUT"
