#!/usr/bin/env bash
# CPU per call (issue 45): helmbench binaries against the bare client on the
# 20 ms mock at concurrency 64, with a user's defaults (cache on, retries on),
# alternating, one line per run. Build the binaries first, e.g.
#   cargo build --release --bin helmbench --example gen_bench --example mock_openrouter --example bare_client
#   bench/cpu_ab.sh 2200 3 target/release/helmbench [other helmbench binaries]
#   bench/cpu_ab.sh 11000 3 ...   (up to 22,000 calls)
# Environment: EX (folder of gen_bench, mock_openrouter, bare_client; default
# $CARGO_TARGET_DIR/release/examples), BENCH_OUT (default bench/out/cpu).
# The throughput ratio is the bare client's window / helmbench's (the mock's
# first-request-to-last-reply clock); CPU is user + system of the whole
# process, start-up included. A profile of one run:
#   perf record -F 1999 --call-graph dwarf,12000 -o perf.data helmbench ... run-batch ... --concurrency 64
#   perf report -i perf.data --no-children --sort symbol -g none
# (a release build keeps no frame pointers: `-g` alone gives no callers).
set -euo pipefail
N=$1; REPS=$2; shift 2
cd "$(dirname "$0")/.."
# shellcheck source=bench/ab_common.sh
source bench/ab_common.sh
ab_dirs cpu
# 2,200 test cases, or 22,000 when more calls are asked for (each call a
# request of its own for the bare client too).
if (( N > 2200 )); then BENCH=$OUT/bench-22000 SHAPE=(20 10 10 10); else BENCH=$OUT/bench SHAPE=(20 10 10 1); fi
[[ -d $BENCH ]] || "$EX/gen_bench" "$BENCH" "${SHAPE[@]}" >/dev/null
start_mock
for r in $(seq "$REPS"); do
    curl -fsS -X POST "$MOCK/reset" >/dev/null
    echo "rep $r bare: $(timed "$EX/bare_client" "$MOCK" "$BENCH" "$N" 64) $(curl -fsS "$MOCK/stats")"
    for bin in "$@"; do
        db=$OUT/r.db
        rm -f "$db" "$db-wal" "$db-shm" "$db".run-*
        curl -fsS -X POST "$MOCK/reset" >/dev/null
        echo "rep $r $bin: $(OPENROUTER_API_KEY=bench-not-a-key OPENROUTER_BASE_URL=$MOCK timed "$bin" -q \
            --benchmark-dir "$BENCH" --database-url "$db" run-batch --all-scenarios --limit "$N" \
            --concurrency 64) $(curl -fsS "$MOCK/stats")"
    done
done
