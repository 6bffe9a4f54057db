#!/usr/bin/env bash
# The team store (issue 34): wall time of one batch against the mock with
# 1, 2 and 4 processes on one PostgreSQL run (the first `run-batch`, the
# others `run-batch --join 1`), and the same batch with one process on
# SQLite and on PostgreSQL. Prints Markdown to paste into BENCHMARKS.md.
#
#   bench/team.sh            debug build (the ratios are what matter;
#                            PROFILE=release: the release build)
#
# Environment: CASES (default 2000), LATENCY_MS (mock, default 20),
# CONCURRENCY (per process, default 8), PG_URL (a server to use; default:
# a throwaway cluster under BENCH_OUT started with scripts/postgres/start.sh
# and stopped at the end), BENCH_OUT (default bench/out).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
PROFILE=${PROFILE:-debug}
CASES=${CASES:-2000}
LATENCY_MS=${LATENCY_MS:-20}
CONCURRENCY=${CONCURRENCY:-8}
OUT=${BENCH_OUT:-$ROOT/bench/out}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
flag=--release
[[ $PROFILE == debug ]] && flag=

echo "bench: building ($PROFILE)" >&2
# shellcheck disable=SC2086
cargo build $flag --quiet --bin helmbench --example gen_bench --example mock_openrouter
mkdir -p "$OUT/bin"
cp "$TARGET/$PROFILE/helmbench" "$TARGET/$PROFILE/examples/gen_bench" \
    "$TARGET/$PROFILE/examples/mock_openrouter" "$OUT/bin/"
BIN=$OUT/bin/helmbench
BENCH=$OUT/bench-team
"$OUT/bin/gen_bench" "$BENCH" 10 10 10 10 >/dev/null

PG_DIR=
if [[ -z "${PG_URL:-}" ]]; then
    PG_DIR=$OUT/pg-team
    PG_URL=$(scripts/postgres/start.sh "$PG_DIR" 2>/dev/null)
fi
MOCK_PID=
cleanup() {
    [[ -n "$MOCK_PID" ]] && kill "$MOCK_PID" 2>/dev/null || true
    [[ -n "$PG_DIR" ]] && scripts/postgres/stop.sh "$PG_DIR" >/dev/null 2>&1 || true
}
trap cleanup EXIT
log=$OUT/mock-team.log
"$OUT/bin/mock_openrouter" --latency-ms "$LATENCY_MS" >"$log" 2>&1 &
MOCK_PID=$!
for _ in $(seq 100); do grep -q listening "$log" && break; sleep 0.05; done
MOCK=http://$(sed -n 's/.*\(127\.0\.0\.1:[0-9]*\).*/\1/p' "$log")

helm() { # helm DB ARGS...
    local db=$1
    shift
    OPENROUTER_API_KEY=bench-not-a-key OPENROUTER_BASE_URL=$MOCK "$BIN" -q --benchmark-dir "$BENCH" \
        --database-url "$db" run-batch --progress-every 0 --concurrency "$CONCURRENCY" "$@" >/dev/null
}

# fresh_pg NAME: a new, empty database on the server; prints its URL.
fresh_pg() {
    psql -q "$PG_URL" -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1" >/dev/null 2>&1
    echo "${PG_URL%/*}/$1"
}

# team N: the batch with N processes on one PostgreSQL run; sets WALL.
team() {
    local n=$1 db pids=() t0 t1
    db=$(fresh_pg "helmbench_team_$n")
    t0=$(date +%s.%N)
    helm "$db" --all-scenarios --limit "$CASES" --no-cache --yes &
    pids+=($!)
    # The joiners start once the run hands out leases.
    until [[ $(psql -tA "$db" -c "SELECT count(*) FROM run_lease" 2>/dev/null || echo 0) -gt 0 ]]; do
        sleep 0.02
    done
    for _ in $(seq 2 "$n"); do
        helm "$db" --join 1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    t1=$(date +%s.%N)
    WALL=$(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }")
    local stored
    stored=$(psql -tA "$db" -c "SELECT count(DISTINCT (test_code, repeat_index)) || '/' || count(*) FROM result")
    echo "bench: $n process(es): ${WALL}s, stored (unique/rows) $stored" >&2
}

# sqlite: the batch with one process on a SQLite file; sets WALL.
sqlite() {
    local db=$OUT/team.db t0 t1
    rm -f "$db" "$db-wal" "$db-shm"
    t0=$(date +%s.%N)
    helm "$db" --all-scenarios --limit "$CASES" --no-cache --yes
    t1=$(date +%s.%N)
    WALL=$(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }")
}

team 1; ONE=$WALL
team 2; TWO=$WALL
team 4; FOUR=$WALL
sqlite; LITE=$WALL

echo "#### Team store ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(git rev-parse --short HEAD), $PROFILE build)"
echo
echo "command: \`bench/team.sh\` (CASES=$CASES, LATENCY_MS=$LATENCY_MS, CONCURRENCY=$CONCURRENCY per process; PostgreSQL $(psql -tA "$PG_URL" -c 'SHOW server_version'))"
echo
echo "| processes on one run (PostgreSQL) | wall s | ratio to one |"
echo "|---|---|---|"
for row in "1 $ONE" "2 $TWO" "4 $FOUR"; do
    set -- $row
    echo "| $1 | $2 | $(awk "BEGIN { printf \"%.2f\", $2 / $ONE }") |"
done
echo
echo "| one process | wall s |"
echo "|---|---|"
echo "| SQLite | $LITE |"
echo "| PostgreSQL | $ONE |"
