#!/usr/bin/env bash
# Fuzz one target: builds the targets, then runs libFuzzer on a working corpus (fuzz/corpus/TARGET,
# not committed) that starts from the committed seeds and regression inputs. Extra arguments go to
# libFuzzer, e.g.
#   fuzz/run.sh payment_required -runs=10000000
#   fuzz/run.sh screen -max_total_time=600 -max_len=65536
# A crash is written to fuzz/artifacts/TARGET/. Reproduce it with
#   fuzz/target/<host triple>/release/TARGET fuzz/artifacts/TARGET/crash-...
set -euo pipefail
source "$(dirname "$0")/env.sh"
target="${1:?usage: fuzz/run.sh TARGET [libFuzzer options]; targets: ${FUZZ_TARGETS[*]}}"
shift
# FUZZ_SKIP_BUILD=1: the caller built the targets already (long.sh).
[ -n "${FUZZ_SKIP_BUILD:-}" ] || fuzz_build --bin "$target"
mkdir -p "$FUZZ_DIR/corpus/$target" "$FUZZ_DIR/artifacts/$target"
inputs=("$FUZZ_DIR/seeds/$target")
[ -d "$FUZZ_DIR/regressions/$target" ] && inputs+=("$FUZZ_DIR/regressions/$target")
exec "$FUZZ_BIN_DIR/$target" -artifact_prefix="$FUZZ_DIR/artifacts/$target/" \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "$@" \
    "$FUZZ_DIR/corpus/$target" "${inputs[@]}"
