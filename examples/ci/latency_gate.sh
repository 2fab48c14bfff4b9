#!/bin/sh
# A latency gate for CI: load-test the candidate build, fit it, compare it with the
# stored baseline fit over the load range both measured, write the pull-request comment,
# and fail (exit 4) when the candidate regressed.
#
#   sh examples/ci/latency_gate.sh BASELINE.nc OUT_DIR [bayesspec simulate options]
#
# Here `bayesspec simulate` stands in for the real load test; against a live server run
# GuideLLM (or `vllm bench serve`) instead and turn its report into tidy rows:
#   guidellm benchmark --target "$URL" --model "$MODEL" --profile sweep --rate 9 \
#       --data "prompt_tokens=512,output_tokens=512" --output-path "$OUT/guidellm.json"
#   bayesspec ingest "$OUT/guidellm.json" -o "$OUT/sweep.csv"
#
# Without BASELINE.nc yet, this run becomes the baseline (commit it, or keep it as a
# build artifact). Environment: SEED (load-test seed, default 1), FIT_OPTIONS (extra
# `bayesspec fit` options), GITHUB_STEP_SUMMARY (the comment is appended there too).
# Exit status: 0 (no regression), 4 (regressed), 2 (bad input), 3 never (no --strict).
set -eu
baseline=$1
out=$2
shift 2
mkdir -p "$out"

bayesspec simulate --verifier Qwen3-8B --prefill 512 --decode 512 --sweep 9 \
    --requests 2000 --seed "${SEED:-1}" --quiet "$@" -o "$out/sweep.csv"
# shellcheck disable=SC2086
bayesspec fit "$out/sweep.csv" -o "$out/candidate.nc" --seed 1 --quiet ${FIT_OPTIONS:-}

if [ ! -f "$baseline" ]; then
    cp "$out/candidate.nc" "$baseline"
    printf '## Latency baseline recorded\n\nNo baseline fit yet: this run (`%s`) is now the baseline.\n' \
        "$baseline" > "$out/compare.md"
    status=0
else
    status=0
    bayesspec compare "$baseline" "$out/candidate.nc" --gate -o "$out/compare.md" \
        > "$out/compare.txt" || status=$?
    cat "$out/compare.txt"
fi
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
    cat "$out/compare.md" >> "$GITHUB_STEP_SUMMARY"
fi
exit "$status"
