#!/usr/bin/env bash
# The long runs reported in README.md: every target (or those named) for RUNS executions
# (10 million unless RUNS is set), one after another, one job each. Builds once, then runs the
# binaries. Logs go to fuzz/logs/, one line per target to fuzz/logs/summary.tsv: target,
# executions, seconds, cov, ft, corpus (units/size), peak RSS in MB, max_len, exit status, and the
# crash file when there was one, the number of jobs, and whether comparisons were traced. MAX_LEN overrides the per-target input bound. JOBS=N runs N
# libFuzzer jobs at once on one shared corpus, RUNS/N executions each (the executions reported are
# their sum); their logs go to fuzz/logs/TARGET.jobs/fuzz-K.log.
#   fuzz/long.sh                 # all targets
#   RUNS=1000000 fuzz/long.sh url screen
#   JOBS=2 fuzz/long.sh payment_required
set -uo pipefail
source "$(dirname "$0")/env.sh"
runs="${RUNS:-10000000}"
jobs="${JOBS:-1}"
case "$jobs" in ''|*[!0-9]*|0) echo "JOBS must be a whole number of at least 1" >&2; exit 2 ;; esac
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
    start=$(date +%s)
    if [ "$jobs" -eq 1 ]; then
        log="$FUZZ_DIR/logs/$target.log"
        logs=("$log")
        FUZZ_SKIP_BUILD=1 "$FUZZ_DIR/run.sh" "$target" -runs="$runs" -max_len="$max_len" >"$log" 2>&1
        status=$?
    else
        # libFuzzer writes each job's log as fuzz-K.log in the working directory.
        dir="$FUZZ_DIR/logs/$target.jobs"
        rm -rf "$dir" && mkdir -p "$dir"
        (cd "$dir" && FUZZ_SKIP_BUILD=1 "$FUZZ_DIR/run.sh" "$target" -runs=$(( runs / jobs )) \
            -max_len="$max_len" -jobs="$jobs" -workers="$jobs" >parent.log 2>&1)
        status=$?
        logs=("$dir"/fuzz-*.log)
    fi
    seconds=$(( $(date +%s) - start ))
    # The logs hold the crashing input's bytes when there is one: read them as text (-a).
    # Executions are summed over the jobs; coverage, features and peak RSS are the largest of
    # any job (the jobs share the corpus, so they see each other's finds).
    execs=0 rss=0 cov=0 ft=0 corp="" crash=""
    for log in "${logs[@]}"; do
        # The last status line (DONE, or the last before a crash).
        done_line=$(grep -aE '^#[0-9]+.*cov: ' "$log" | tail -1)
        e=$(grep -a '^stat::number_of_executed_units:' "$log" | tail -1 | awk '{print $2}')
        # A job stopped before its final statistics: its last status line's count.
        [ -n "$e" ] || e=$(grep -oE '^#[0-9]+' <<<"$done_line" | tr -d '#')
        r=$(grep -a '^stat::peak_rss_mb:' "$log" | tail -1 | awk '{print $2}')
        c=$(grep -oE 'cov: [0-9]+' <<<"$done_line" | cut -d' ' -f2)
        f=$(grep -oE 'ft: [0-9]+' <<<"$done_line" | cut -d' ' -f2)
        execs=$(( execs + ${e:-0} ))
        [ "${r:-0}" -gt "$rss" ] && rss=$r
        [ "${c:-0}" -gt "$cov" ] && cov=$c
        [ "${f:-0}" -gt "$ft" ] && ft=$f
        p=$(grep -oE 'corp: [0-9]+/[0-9A-Za-z]+' <<<"$done_line" | cut -d' ' -f2)
        [ -n "$p" ] && corp=$p
        k=$(grep -aoE "Test unit written to [^ ]+" "$log" | tail -1 | awk '{print $5}')
        [ -n "$k" ] && crash=$k
    done
    cmp=trace-compares
    [ "${FUZZ_TRACE_COMPARES:-1}" = 0 ] && cmp=no-trace-compares
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$target" "${execs:-?}" "$seconds" "${cov:-?}" \
        "${ft:-?}" "${corp:-?}" "${rss:-?}" "$max_len" "$status" "${crash:--}" "$jobs" "$cmp" \
        >>"$FUZZ_DIR/logs/summary.tsv"
done
