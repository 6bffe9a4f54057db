#!/usr/bin/env bash
# The scale harness (issue 31): a database of many results, and what each
# read command costs on it. One command, rerunnable anywhere:
#
#   bench/scale.sh            two models x 110,000 test cases (220,000 results)
#   SCALE=1m bench/scale.sh   ten models x 110,000 (1,100,000 results)
#   bench/scale.sh --smoke    tiny; checks the harness works
#
# Prints a markdown table (paste it into BENCHMARKS.md): the write as a user
# runs it (the defaults: cache on, retries on) and, beside it, the narrower
# `--no-cache --max-attempts 1` write into a second database (what the cache
# costs on the write path), each with wall, results/s, peak RSS and bytes
# written to disk per byte the database keeps (from /proc/self/io of the
# shell, which accumulates what its reaped children wrote: no sampling);
# then each read command on the defaults' database, `report` first as a
# user types it (no --run-id: the latest run of every model).
# Needs GNU time (/usr/bin/time), curl; builds the release binary and the
# mock (examples/mock_openrouter.rs) and the benchmark generator.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${BENCH_OUT:-$ROOT/bench/out}/scale
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
MODELS=(bench/model bench/model-2)
SHAPE=(100 10 10 10) # 100*10*(10+1)*10 = 110,000 test cases
CONCURRENCY=64
if [[ "${SCALE:-}" == 1m ]]; then
    MODELS=(bench/model bench/model-{2..10})
fi
if [[ "${1:-}" == --smoke ]]; then
    SHAPE=(3 2 2 2)
    CONCURRENCY=4
fi
[[ -x /usr/bin/time ]] || { echo "scale: GNU time is missing (apt-get install time)" >&2; exit 2; }

echo "scale: building (release)" >&2
cargo build --release --quiet --bin helmbench --example gen_bench --example mock_openrouter
mkdir -p "$OUT/bin"
cp "$TARGET/release/helmbench" "$TARGET/release/examples/gen_bench" \
    "$TARGET/release/examples/mock_openrouter" "$OUT/bin/"
BIN=$OUT/bin/helmbench
BENCH=$OUT/bench
rm -rf "$BENCH"
CASES=$("$OUT/bin/gen_bench" "$BENCH" "${SHAPE[@]}")
{
    echo "models:"
    for m in "${MODELS[@]}"; do printf '  - id: %s\n    temperature: 0\n' "$m"; done
} >"$BENCH/models.yml"

"$OUT/bin/mock_openrouter" --latency-ms 1 >"$OUT/mock.log" 2>&1 &
MOCK_PID=$!
trap 'kill $MOCK_PID 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q listening "$OUT/mock.log" && break; sleep 0.05; done
PORT=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$OUT/mock.log")
MOCK=http://127.0.0.1:$PORT

DB=$OUT/scale.db
rm -f "$DB" "$DB-wal" "$DB-shm"
export OPENROUTER_API_KEY=bench-not-a-key OPENROUTER_BASE_URL=$MOCK

# Runs "$@" under GNU time in a fresh shell; prints "wall rss_mb written_bytes out_bytes".
measure() {
    local tf=$OUT/time.txt out=$OUT/cmd.out
    local written
    written=$(bash -c '/usr/bin/time -f "%e %M" -o "$0" "${@}" >"'"$out"'"; grep ^write_bytes /proc/$$/io | cut -d" " -f2' "$tf" "$@")
    echo "$(awk '{printf "%.2f %.1f", $1, $2/1024}' "$tf") $written $(stat -c %s "$out")"
}

RESULTS=$((CASES * ${#MODELS[@]}))
kept() { echo $(($(stat -c %s "$1") + $( [[ -f $1-wal ]] && stat -c %s "$1-wal" || echo 0))); }
echo "scale: $RESULTS results ($CASES test cases x ${#MODELS[@]} models)" >&2
# The narrower write first, into a database of its own, then removed: the
# bytes the cache adds are the difference between the two rows.
NARROW=$OUT/scale-no-cache.db
rm -f "$NARROW" "$NARROW-wal" "$NARROW-shm"
read -r N_WALL N_RSS N_WRITTEN _ < <(measure "$BIN" -q --benchmark-dir "$BENCH" --database-url "$NARROW" \
    run-batch --all-scenarios --concurrency "$CONCURRENCY" --no-cache --yes --max-attempts 1)
N_KEPT=$(kept "$NARROW")
rm -f "$NARROW" "$NARROW-wal" "$NARROW-shm"
sync
# As a user runs it: the defaults (cache on, retries on).
read -r WALL RSS WRITTEN _ < <(measure "$BIN" -q --benchmark-dir "$BENCH" --database-url "$DB" \
    run-batch --all-scenarios --concurrency "$CONCURRENCY" --yes)
KEPT=$(kept "$DB")

echo
echo "Measured $(date -u +%Y-%m-%dT%H:%MZ) at commit $(git rev-parse --short HEAD), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load $(cut -d' ' -f1-3 /proc/loadavg); \`bench/scale.sh${SCALE:+ (SCALE=$SCALE)}\`"
echo
echo "| step | wall s | peak RSS MB | output bytes |"
echo "| --- | ---: | ---: | ---: |"
echo "| write $RESULTS results (c=$CONCURRENCY, the defaults: cache on, retries on): $(awk "BEGIN{printf \"%.0f\", $RESULTS/$WALL}") results/s | $WALL | $RSS | |"
echo "| write $RESULTS results (c=$CONCURRENCY, \`--no-cache --max-attempts 1\`): $(awk "BEGIN{printf \"%.0f\", $RESULTS/$N_WALL}") results/s | $N_WALL | $N_RSS | |"
read_row() {
    local label=$1; shift
    read -r W R _ O < <(measure "$BIN" -q --benchmark-dir "$BENCH" --database-url "$DB" "$@")
    echo "| \`$label\` | $W | $R | $O |"
}
read_row "report" report
read_row "report --format json" report --format json
read_row "report --format html" report --format html
read_row "runs" runs
read_row "runs --format json" runs --format json
read_row "costs" costs
read_row "costs --format json" costs --format json
read_row "report --run-id 1" report --run-id 1
read_row "report --run-id 1 --format json" report --run-id 1 --format json
read_row "export --run-id 1 --format csv" export --run-id 1 --format csv
# The same batch again, cache on (issue 31): every model is already
# complete, so nothing is sent or written; the row says what it cost and
# how many bytes the database grew by per result (0 unless that regresses:
# before, a whole new run copied from the cache, about 860 bytes a result).
read -r W R _ O < <(measure "$BIN" -q --benchmark-dir "$BENCH" --database-url "$DB" \
    run-batch --all-scenarios --concurrency "$CONCURRENCY" --yes)
AFTER=$(($(stat -c %s "$DB") + $( [[ -f $DB-wal ]] && stat -c %s "$DB-wal" || echo 0)))
RERUN_SAYS=$(grep -c "already complete" "$OUT/cmd.out" || true)
echo "| \`run-batch\` rerun, cache on: $RERUN_SAYS of ${#MODELS[@]} models already complete, $(( (AFTER - KEPT) / RESULTS )) bytes added per result | $W | $R | $O |"
echo
echo "| database | value |"
echo "| --- | ---: |"
echo "| bytes per result | $((KEPT / RESULTS)) |"
echo "| bytes written per byte kept (the write, the defaults) | $(awk "BEGIN{printf \"%.2f\", $WRITTEN/$KEPT}") |"
echo "| bytes written per byte kept (the write, \`--no-cache --max-attempts 1\`) | $(awk "BEGIN{printf \"%.2f\", $N_WRITTEN/$N_KEPT}") |"
# The view's page latency on the same database.
BIN=$BIN DB=$DB BENCH=$BENCH bench/view.sh
