# Sourced by run.sh and smoke.sh: how the fuzz targets are built. No nightly feature is used, so the
# stable toolchain builds them (see README.md, "Why libFuzzer on stable").
#
# The flags are the ones cargo-fuzz passes for libFuzzer without a sanitizer: SanitizerCoverage
# with 8-bit counters, the PC table and comparison tracing (what libFuzzer's feedback reads), stack
# depth, `--cfg fuzzing`, and debug assertions with overflow checks on (an overflow is a finding).
# `--target` keeps the flags off build scripts and proc macros, which run on the host uninstrumented.

FUZZ_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
FUZZ_TRIPLE="$(rustc -vV | sed -n 's/^host: //p')"
FUZZ_BIN_DIR="$FUZZ_DIR/target/$FUZZ_TRIPLE/release"
FUZZ_TARGETS=(payment_required settlement_response operator_file screen decode_body http_response url rpc_response mcp_answer offer_receipt)
# FUZZ_TRACE_COMPARES=0 builds without comparison tracing, into a target folder of its own
# (target-notc/): libFuzzer then learns from edge counters alone. It is for a target whose time
# goes into a library's inner loops (payment_required: the screens' regex engines), where every
# comparison calls back into libFuzzer; README.md says which run used it.
FUZZ_TRACE_COMPARES_FLAG="-Cllvm-args=-sanitizer-coverage-trace-compares"
if [ "${FUZZ_TRACE_COMPARES:-1}" = 0 ]; then
    FUZZ_TRACE_COMPARES_FLAG=""
    export CARGO_TARGET_DIR="$FUZZ_DIR/target-notc"
    FUZZ_BIN_DIR="$FUZZ_DIR/target-notc/$FUZZ_TRIPLE/release"
fi
export RUSTFLAGS="-Cpasses=sancov-module \
-Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
-Cllvm-args=-sanitizer-coverage-pc-table \
$FUZZ_TRACE_COMPARES_FLAG \
-Cllvm-args=-sanitizer-coverage-stack-depth \
--cfg fuzzing -Cdebug-assertions -Coverflow-checks"
# Not mold, though CI installs it for the main build: it keeps the coverage counters of every
# function the linker drops (no garbage collection of the __sancov sections), so libFuzzer scanned
# 1,092,820 counters after each input instead of 9,366, and the smoke's small parsers ran about 10x
# slower (operator_file: 300,000 runs in 33 s instead of 2.9 s).

# Keep freed memory in the process: glibc otherwise returns every large block (a deflate
# compressor's tables, a decoded body) to the kernel after each input and faults it in again on
# the next, which spent about half of decode_body's time in the kernel. No behaviour changes.
export GLIBC_TUNABLES="glibc.malloc.mmap_threshold=67108864:glibc.malloc.trim_threshold=268435456"

fuzz_build() {
    (cd "$FUZZ_DIR" && cargo build --locked --release --target "$FUZZ_TRIPLE" "$@")
}
