#!/usr/bin/env bash
# The fuzzing smoke run for CI (well under a minute once built): builds every target, replays the
# committed seeds and regression inputs, then fuzzes each target for a fixed number of executions
# from a fixed seed. Fixed counts and seeds make the run the same on every machine: it passes here
# exactly when it passes in CI, and a failure is a real finding, never bad luck.
#
# Needs only the stable toolchain and crates (libfuzzer-sys builds libFuzzer with the system C++
# compiler); `fuzz/Cargo.lock` pins every version. Exits non-zero on any crash, timeout or memory
# blow-up, leaving the input in a temporary folder it names.
set -euo pipefail
source "$(dirname "$0")/env.sh"

# Executions per target, about 3 seconds each on one shared core (the screens and the full 402
# pipeline cost about a millisecond per input, the small parsers a few microseconds).
declare -A RUNS=(
    [payment_required]=8000
    [settlement_response]=150000
    [operator_file]=300000
    [screen]=3000
    [decode_body]=15000
    [http_response]=3000
    [url]=100000
    [rpc_response]=200000
    [mcp_answer]=20000
    [offer_receipt]=200000
)

# FUZZ_SKIP_BUILD=1: the targets are built already.
[ -n "${FUZZ_SKIP_BUILD:-}" ] || fuzz_build
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=0
passed=0
started=$(date +%s)
for target in "${FUZZ_TARGETS[@]}"; do
    inputs=("$FUZZ_DIR/seeds/$target")
    [ -d "$FUZZ_DIR/regressions/$target" ] && inputs+=("$FUZZ_DIR/regressions/$target")
    mkdir -p "$work/$target/corpus" "$work/$target/artifacts"
    # -runs bounds the work; -max_total_time only guards against a machine far slower than ours.
    if "$FUZZ_BIN_DIR/$target" -seed=1 -runs="${RUNS[$target]}" -max_total_time=30 -max_len=4096 \
        -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$work/$target/artifacts/" \
        "$work/$target/corpus" "${inputs[@]}" >"$work/$target/log" 2>&1; then
        passed=$((passed + 1))
        echo "fuzz smoke: $target: $(sed -n 's/^Done \(.*\)$/\1/p' "$work/$target/log")"
    else
        failed=$((failed + 1))
        tail -n 40 "$work/$target/log"
        echo "fuzz smoke: $target FAILED; its input: $(ls "$work/$target/artifacts/")"
        trap - EXIT
        echo "(kept in $work/$target/artifacts/)"
    fi
done
echo "fuzz smoke: $(( $(date +%s) - started )) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
