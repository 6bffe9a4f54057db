#!/usr/bin/env bash
# Five models at once against one (issue 45): helmbench binaries on the 20 ms
# mock at --concurrency 64 (each model), with a user's defaults (cache on,
# retries on, the completed runs' analyses kept at the end), N test cases a
# model, alternating binaries, one line per run. Build first, e.g.
#   cargo build --release --bin helmbench --example gen_bench --example mock_openrouter
#   bench/five_ab.sh 22000 3 target/release/helmbench [other helmbench binaries]
# Environment: EX (folder of gen_bench and mock_openrouter; default
# $CARGO_TARGET_DIR/release/examples), BENCH_OUT (default bench/out/five).
# Each line: the models, wall s, CPU s (user + system of the whole process,
# start-up included), peak RSS, and the mock's window (first request to
# last reply), whose ratio leaves out start-up and the end of the run.
set -euo pipefail
N=$1; REPS=$2; shift 2
cd "$(dirname "$0")/.."
# shellcheck source=bench/ab_common.sh
source bench/ab_common.sh
ab_dirs five
BENCH=$OUT/bench
if [[ ! -d $BENCH ]]; then
    "$EX/gen_bench" "$BENCH" 20 10 10 10 >/dev/null # 22,000 test cases
    { echo "models:"; for i in "" -2 -3 -4 -5; do printf '  - id: bench/model%s\n    temperature: 0\n' "$i"; done; } >"$BENCH/models.yml"
fi
start_mock --threads 2
for r in $(seq "$REPS"); do
    for bin in "$@"; do
        for models in bench/model bench/model,bench/model-2,bench/model-3,bench/model-4,bench/model-5; do
            db=$OUT/r.db
            rm -f "$db" "$db-wal" "$db-shm" "$db".run-*
            curl -fsS -X POST "$MOCK/reset" >/dev/null
            echo "rep $r $bin $(tr -cd , <<<"$models" | wc -c | awk '{print $1 + 1}') model(s): $(OPENROUTER_API_KEY=bench-not-a-key OPENROUTER_BASE_URL=$MOCK timed "$bin" -q \
                --benchmark-dir "$BENCH" --database-url "$db" run-batch --all-scenarios --limit "$N" \
                --concurrency 64 --models "$models" --yes) $(curl -fsS "$MOCK/stats")"
        done
    done
done
