#!/usr/bin/env bash
# Fuzz one target: builds the targets, then runs libFuzzer on a working corpus (fuzz/corpus/TARGET,
# not committed) that starts from the committed seeds. Extra arguments go to libFuzzer, e.g.
#   fuzz/run.sh payment_required -runs=10000000
#   fuzz/run.sh screen -max_total_time=600 -max_len=65536
# A crash is written to fuzz/artifacts/TARGET/. Reproduce it with
#   fuzz/target/<host triple>/release/TARGET fuzz/artifacts/TARGET/crash-...
set -euo pipefail
source "$(dirname "$0")/env.sh"
target="${1:?usage: fuzz/run.sh TARGET [libFuzzer options]; targets: ${FUZZ_TARGETS[*]}}"
shift
fuzz_build --bin "$target"
mkdir -p "$FUZZ_DIR/corpus/$target" "$FUZZ_DIR/artifacts/$target"
exec "$FUZZ_BIN_DIR/$target" -artifact_prefix="$FUZZ_DIR/artifacts/$target/" \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "$@" \
    "$FUZZ_DIR/corpus/$target" "$FUZZ_DIR/seeds/$target"
