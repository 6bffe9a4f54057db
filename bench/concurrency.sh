#!/usr/bin/env bash
# Several models at once and adaptive concurrency (issue 19), at a realistic
# latency. One command, rerunnable anywhere:
#
#   bench/concurrency.sh           prints a Markdown table to paste into BENCHMARKS.md
#   bench/concurrency.sh --smoke   tiny sizes (seconds; checks the harness works)
#
# Environment: LATENCY_MS (default 100), CASES (test cases per model, default
# 1000), LIMITED_CASES (default 2000), BENCH_OUT (default bench/out).
#
#   A. 5 models x CASES test cases, --concurrency 16, against a mock answering
#      after LATENCY_MS: wall clock against the ideal CASES x latency / 16
#      (every model at once), and one model alone for reference.
#   B. One model, LIMITED_CASES test cases, a mock that answers 429
#      (Retry-After 1) above 40 requests in flight: fixed --concurrency 40
#      (the best a user could guess), adaptive --concurrency 128, and fixed
#      --concurrency 128 for comparison. Rate = results / the mock's window
#      (first request to last reply); extra = 429s / requests served.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
LATENCY_MS=${LATENCY_MS:-100}
CASES=${CASES:-1000}
LIMITED_CASES=${LIMITED_CASES:-2000}
if [[ "${1:-}" == "--smoke" ]]; then
    LATENCY_MS=5 CASES=40 LIMITED_CASES=80
fi
OUT=${BENCH_OUT:-$ROOT/bench/out}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}

echo "bench: building (release)" >&2
cargo build --release --quiet --bin helmbench --example gen_bench --example mock_openrouter
mkdir -p "$OUT/bin"
cp "$TARGET/release/helmbench" "$TARGET/release/examples/gen_bench" \
    "$TARGET/release/examples/mock_openrouter" "$OUT/bin/"
BIN=$OUT/bin/helmbench
BENCH=$OUT/bench-concurrency
TOTAL=$("$OUT/bin/gen_bench" "$BENCH" 10 10 10 10)
echo "bench: generated $TOTAL test cases in $BENCH" >&2

MOCK=
MOCK_PID=
start_mock() { # start_mock ARGS...: (re)starts the mock, sets MOCK
    [[ -n "$MOCK_PID" ]] && kill "$MOCK_PID" 2>/dev/null || true
    local log=$OUT/mock-concurrency.log
    "$OUT/bin/mock_openrouter" --threads 2 "$@" >"$log" 2>&1 &
    MOCK_PID=$!
    for _ in $(seq 100); do grep -q listening "$log" && break; sleep 0.05; done
    MOCK=http://$(sed -n 's/.*\(127\.0\.0\.1:[0-9]*\).*/\1/p' "$log")
}
trap '[[ -n "$MOCK_PID" ]] && kill $MOCK_PID 2>/dev/null || true' EXIT
json_field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1"; }

# batch NAME LIMIT ARGS...: one run-batch into a fresh database; sets WALL,
# WINDOW, SERVED, REJECTED.
batch() {
    local name=$1 limit=$2
    shift 2
    local db=$OUT/concurrency-$name.db
    rm -f "$db" "$db-wal" "$db-shm"
    curl -fsS -X POST "$MOCK/reset" >/dev/null
    local t0 t1
    t0=$(date +%s.%N)
    OPENROUTER_API_KEY=bench-not-a-key OPENROUTER_BASE_URL=$MOCK "$BIN" -q --benchmark-dir "$BENCH" \
        --database-url "$db" run-batch --all-scenarios --limit "$limit" --no-cache \
        --max-attempts 50 "$@" >/dev/null
    t1=$(date +%s.%N)
    WALL=$(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }")
    local s
    s=$(curl -fsS "$MOCK/stats")
    WINDOW=$(json_field "$s" window_s)
    SERVED=$(json_field "$s" requests)
    REJECTED=$(json_field "$s" rejected)
}

echo "### Several models at once, adaptive concurrency ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(git rev-parse --short HEAD))"
echo
echo "command: \`bench/concurrency.sh\` (LATENCY_MS=$LATENCY_MS, CASES=$CASES, LIMITED_CASES=$LIMITED_CASES)"
echo
start_mock --latency-ms "$LATENCY_MS"
IDEAL=$(awk "BEGIN { printf \"%.2f\", $CASES * $LATENCY_MS / 1000 / 16 }")
echo "| run | test cases | wall s | ideal s | wall / ideal |"
echo "|---|---|---|---|---|"
batch one "$CASES" --models a/m1 --concurrency 16
echo "| 1 model, --concurrency 16 | $SERVED | $WALL | $IDEAL | $(awk "BEGIN { printf \"%.2f\", $WALL / $IDEAL }") |"
batch five "$CASES" --models a/m1,b/m2,c/m3,d/m4,e/m5 --concurrency 16
echo "| 5 models at once, --concurrency 16 each | $SERVED | $WALL | $IDEAL | $(awk "BEGIN { printf \"%.2f\", $WALL / $IDEAL }") |"
echo

start_mock --latency-ms "$LATENCY_MS" --rate-limit 40
echo "| 429 above 40 in flight | wall s | results/s (mock window) | vs fixed 40 | 429s | extra requests |"
echo "|---|---|---|---|---|---|"
BASE=
for run in "fixed-40:--concurrency 40 --fixed-concurrency" "adaptive-128:--concurrency 128" "fixed-128:--concurrency 128 --fixed-concurrency"; do
    name=${run%%:*}
    # shellcheck disable=SC2086
    batch "$name" "$LIMITED_CASES" --models a/m1 ${run#*:}
    RATE=$(awk "BEGIN { printf \"%.1f\", $SERVED / $WINDOW }")
    [[ -z "$BASE" ]] && BASE=$RATE
    echo "| \`${run#*:}\` | $WALL | $RATE | $(awk "BEGIN { printf \"%.0f %%\", 100 * $RATE / $BASE }") | $REJECTED | $(awk "BEGIN { printf \"%.1f %%\", 100 * $REJECTED / $SERVED }") |"
done
