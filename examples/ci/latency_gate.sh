#!/bin/sh
# A latency gate for CI: load-test the candidate build, fit it, compare it with the
# stored baseline fit over the load range both measured, write the pull-request comment,
# and fail when the candidate regressed (exit 4) or when either fit did not converge
# (exit 5: an unconverged posterior's outcome is no pass).
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
# Exit status: 0 (no regression), 4 (regressed), 5 (a fit did not converge: refit with
# more draws/tuning, e.g. FIT_OPTIONS="--draws 2000 --tune 2000"), 2 (bad input); 3 never
# (--gate answers an unconverged fit with 5, with or without --strict).
set -eu
baseline=$1
out=$2
shift 2
mkdir -p "$out"

bayesspec simulate --verifier Qwen3-8B --prefill 512 --decode 512 --sweep 9 \
    --requests 2000 --seed "${SEED:-1}" --quiet "$@" -o "$out/sweep.csv"
# --strict: status 3 when the posterior did not converge (the fit is saved all the same)
fit_status=0
# shellcheck disable=SC2086
bayesspec fit "$out/sweep.csv" -o "$out/candidate.nc" --seed 1 --quiet --strict \
    ${FIT_OPTIONS:-} || fit_status=$?
if [ "$fit_status" -ne 0 ] && [ "$fit_status" -ne 3 ]; then
    exit "$fit_status"
fi

if [ ! -f "$baseline" ] && [ "$fit_status" -eq 3 ]; then
    # an unconverged fit is no baseline to gate later runs on
    echo "latency gate: FAILED: the fit did not converge; not recorded as the baseline" >&2
    printf '## Latency baseline not recorded\n\nThe fit of this run did not converge, so it is no baseline; refit (more draws or tuning) and run again.\n' \
        > "$out/compare.md"
    status=5
elif [ ! -f "$baseline" ]; then
    cp "$out/candidate.nc" "$baseline"
    printf '## Latency baseline recorded\n\nNo baseline fit yet: this run (`%s`) is now the baseline.\n' \
        "$baseline" > "$out/compare.md"
    status=0
else
    status=0
    bayesspec compare "$baseline" "$out/candidate.nc" --gate -o "$out/compare.md" \
        > "$out/compare.txt" || status=$?
    cat "$out/compare.txt"
    case $status in
        4) echo "latency gate: FAILED: the candidate regressed (see $out/compare.md)" >&2 ;;
        5) echo "latency gate: FAILED: a fit did not converge, so its outcome is no pass;" \
                "refit (FIT_OPTIONS=\"--draws 2000 --tune 2000\") or check the baseline" >&2
           printf '\n**Gate failed: a fit did not converge.** Its outcome cannot be relied on; refit before merging.\n' \
               >> "$out/compare.md" ;;
    esac
fi
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
    cat "$out/compare.md" >> "$GITHUB_STEP_SUMMARY"
fi
exit "$status"
