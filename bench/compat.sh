#!/usr/bin/env bash
# Throughput of the OpenAI-compatible path against the OpenRouter path
# (issue 29), on the same local mock in one run, alternating.
#
#   bench/compat.sh            10,000 test cases at concurrency 64, 3 repeats each
#   bench/compat.sh --smoke    tiny sizes (checks the harness works)
#
# Environment: REPEATS (default 3), LATENCY_MS (default 20), CONCURRENCY
# (default 64), BENCH_OUT (default bench/out), CARGO_TARGET_DIR as usual.
# Needs GNU time (/usr/bin/time). Prints a Markdown table; paste it into
# BENCHMARKS.md by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
REPEATS=${REPEATS:-3}
LATENCY_MS=${LATENCY_MS:-20}
CONCURRENCY=${CONCURRENCY:-64}
OUT=${BENCH_OUT:-$ROOT/bench/out}/compat
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
SHAPE=(40 5 4 10) # 40*5*(4+1)*10 = 10,000 test cases
if [[ "${1:-}" == "--smoke" ]]; then
    SHAPE=(3 2 2 2)
    REPEATS=1
    LATENCY_MS=1
fi

echo "compat: building (release)" >&2
cargo build --release --quiet --bin helmbench --example gen_bench --example mock_openrouter
mkdir -p "$OUT/bin"
cp "$TARGET/release/helmbench" "$TARGET/release/examples/gen_bench" \
    "$TARGET/release/examples/mock_openrouter" "$OUT/bin/"
BIN=$OUT/bin/helmbench

BENCH=$OUT/bench
CASES=$("$OUT/bin/gen_bench" "$BENCH" "${SHAPE[@]}")
echo "compat: $CASES test cases" >&2

"$OUT/bin/mock_openrouter" --latency-ms "$LATENCY_MS" >"$OUT/mock.log" 2>&1 &
MOCK_PID=$!
trap 'kill $MOCK_PID 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q listening "$OUT/mock.log" && break; sleep 0.05; done
PORT=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$OUT/mock.log")
[[ -n "$PORT" ]] || { echo "compat: mock did not start" >&2; exit 1; }
MOCK=http://127.0.0.1:$PORT

OPENROUTER_YML=$(cat "$BENCH/models.yml")
# The same model, sent as an OpenAI-compatible server is (no `provider`,
# no /key, structured outputs from models.yml, cost from its price).
COMPAT_YML="marking_model: bench/judge
models:
  - id: bench/model
    temperature: 0
    api: openai-compatible
    structured_outputs: true
    price: {prompt_per_mtok: 1, completion_per_mtok: 2}
  - id: bench/judge
    judge_only: true
    api: openai-compatible
    structured_outputs: true
    price: {prompt_per_mtok: 1, completion_per_mtok: 2}"

one() { # path name -> sets WALL
    local yml=$1 db=$OUT/$2.db
    printf '%s\n' "$yml" >"$BENCH/models.yml"
    rm -f "$db" "$db-wal" "$db-shm"
    sync
    /usr/bin/time -f "%e" -o "$OUT/time.txt" env OPENROUTER_API_KEY=bench-not-a-key \
        OPENROUTER_BASE_URL="$MOCK" "$BIN" -q --benchmark-dir "$BENCH" --database-url "$db" \
        run-batch --all-scenarios --concurrency "$CONCURRENCY" --no-cache --max-attempts 1 --yes >/dev/null
    WALL=$(cat "$OUT/time.txt")
    local stored
    stored=$("$BIN" -q --benchmark-dir "$BENCH" --database-url "$db" runs --format json |
        tr -d ' \n' | sed -n 's/.*"test_cases":\([0-9]*\).*/\1/p')
    [[ "$stored" == "$CASES" ]] || { echo "compat: $2 stored $stored of $CASES" >&2; exit 1; }
}

declare -a OR=() OC=()
for r in $(seq "$REPEATS"); do
    one "$OPENROUTER_YML" openrouter
    OR+=("$WALL")
    one "$COMPAT_YML" compat
    OC+=("$WALL")
    echo "compat: repeat $r: openrouter ${OR[-1]} s, openai-compatible ${OC[-1]} s" >&2
done
printf '%s\n' "$OPENROUTER_YML" >"$BENCH/models.yml"
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
MO=$(median "${OR[@]}")
MC=$(median "${OC[@]}")
echo "#### OpenAI-compatible vs OpenRouter path ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(git rev-parse --short HEAD))"
echo
echo "| path | test cases | concurrency | wall s (median of $REPEATS) | test cases/s |"
echo "|---|---|---|---|---|"
awk -v n="$CASES" -v c="$CONCURRENCY" -v o="$MO" -v m="$MC" 'BEGIN {
    printf "| OpenRouter | %d | %d | %.2f | %.0f |\n", n, c, o, n / o
    printf "| OpenAI-compatible | %d | %d | %.2f | %.0f |\n", n, c, m, n / m
    printf "\nratio (OpenAI-compatible / OpenRouter throughput): %.2f\n", o / m
}'
