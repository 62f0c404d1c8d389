#!/usr/bin/env bash
# The long runs reported in README.md: every target (or those named) for RUNS executions
# (10 million unless RUNS is set), one after another, one job each. Builds once, then runs the
# binaries. Logs go to fuzz/logs/, one line per target to fuzz/logs/summary.tsv: target,
# executions, seconds, cov, ft, corpus (units/size), peak RSS in MB, max_len, exit status, and the
# crash file when there was one. MAX_LEN overrides the per-target input bound.
#   fuzz/long.sh                 # all targets
#   RUNS=1000000 fuzz/long.sh url screen
set -uo pipefail
source "$(dirname "$0")/env.sh"
runs="${RUNS:-10000000}"
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${FUZZ_TARGETS[@]}")
mkdir -p "$FUZZ_DIR/logs"
# FUZZ_SKIP_BUILD=1: the targets are built already.
[ -n "${FUZZ_SKIP_BUILD:-}" ] || fuzz_build || exit 1
for target in "${targets[@]}"; do
    case "$target" in
        # The screens cost about a millisecond per kilobyte instrumented: shorter texts keep the
        # run within hours (every phrase the rules look for fits in 256 bytes); the long-text
        # worst cases are the benchmark's.
        screen) max_len=256 ;;
        # A body may decode to 100 times its size (the ratio cap, past a 64 KiB floor): 1 KiB
        # of input already decodes past the floor to every cap, and costs less per input.
        decode_body) max_len=1024 ;;
        # Read a byte at a time, each input byte costs a round of task switches: 1 KiB holds a
        # head and a body past every cap but the largest.
        http_response) max_len=1024 ;;
        *) max_len=4096 ;;
    esac
    max_len="${MAX_LEN:-$max_len}"
    log="$FUZZ_DIR/logs/$target.log"
    start=$(date +%s)
    FUZZ_SKIP_BUILD=1 "$FUZZ_DIR/run.sh" "$target" -runs="$runs" -max_len="$max_len" >"$log" 2>&1
    status=$?
    seconds=$(( $(date +%s) - start ))
    # The log holds the crashing input's bytes when there is one: read it as text (-a).
    # The last status line (DONE, or the last before a crash).
    done_line=$(grep -aE '^#[0-9]+.*cov: ' "$log" | tail -1)
    execs=$(grep -a '^stat::number_of_executed_units:' "$log" | tail -1 | awk '{print $2}')
    rss=$(grep -a '^stat::peak_rss_mb:' "$log" | tail -1 | awk '{print $2}')
    cov=$(grep -oE 'cov: [0-9]+' <<<"$done_line" | cut -d' ' -f2)
    ft=$(grep -oE 'ft: [0-9]+' <<<"$done_line" | cut -d' ' -f2)
    corp=$(grep -oE 'corp: [0-9]+/[0-9A-Za-z]+' <<<"$done_line" | cut -d' ' -f2)
    crash=$(grep -aoE "Test unit written to [^ ]+" "$log" | tail -1 | awk '{print $5}')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$target" "${execs:-?}" "$seconds" "${cov:-?}" \
        "${ft:-?}" "${corp:-?}" "${rss:-?}" "$max_len" "$status" "${crash:--}" \
        >>"$FUZZ_DIR/logs/summary.tsv"
done
