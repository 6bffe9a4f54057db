#!/usr/bin/env bash
# The helmbench performance harness (issue 8). One command, rerunnable anywhere:
#
#   bench/run.sh            full run; writes the figures into BENCHMARKS.md
#   bench/run.sh --smoke    tiny sizes, prints only (seconds; checks the harness works)
#
# Environment: REPEATS (default 3) repeats of each batch measurement, the
# bare client and helmbench alternating; LATENCY_MS (default 20);
# BENCH_OUT (default bench/out) for the generated benchmark and databases;
# CARGO_TARGET_DIR as usual. Needs bash, awk, GNU time (/usr/bin/time;
# `apt-get install time`); hyperfine and sqlite3 are used when present.
#
# What it measures (see BENCHMARKS.md for how to read the figures):
#   1. dry-run of a 110,000-test-case synthetic benchmark: wall time, peak RSS
#   2. run-batch against a local mock OpenRouter (fixed latency) at several
#      concurrencies, every result stored, against a bare reqwest client
#      sending the same requests to the same mock in the same run
#   3. start-up time of `list` and `prompts P1-B1-S1-C1-PT1` (bundled benchmark)
#   4. database size per 10,000 results and peak RSS against result count
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
SMOKE=0
[[ "${1:-}" == "--smoke" ]] && SMOKE=1

REPEATS=${REPEATS:-3}
LATENCY_MS=${LATENCY_MS:-20}
OUT=${BENCH_OUT:-$ROOT/bench/out}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
if [[ $SMOKE == 1 ]]; then
    SHAPE=(3 2 2 2)          # 3*2*3*2 = 36 test cases
    BATCH=(1:20 4:36 16:36 16:36:narrow)
    RSS_SIZES=(10 36 72)
    REPEATS=1
    LATENCY_MS=1
    STARTUP_RUNS=3
    SELECTION="--scenario P1-B1-S1 --scenario P1-B1-S2-C1"
else
    SHAPE=(100 10 10 10)     # 100*10*(10+1)*10 = 110,000 test cases
    BATCH=(1:2000 16:20000 64:20000 256:20000 64:20000:narrow 256:20000:narrow)
    RSS_SIZES=(5000 20000 110000 330000)   # 330,000 = every test case x --repeats 3
    STARTUP_RUNS=30
    SELECTION="--scenario P1 --scenario P2-B1-S3-C4"
fi

if [[ ! -x /usr/bin/time ]]; then
    echo "bench: GNU time is missing (/usr/bin/time); install it (apt-get install time)" >&2
    exit 2
fi

echo "bench: building (release)" >&2
cargo build --release --quiet --bin helmbench --example gen_bench --example mock_openrouter --example bare_client
# Copies, so a concurrent build into a shared target dir cannot swap them mid-run.
mkdir -p "$OUT/bin"
cp "$TARGET/release/helmbench" "$TARGET/release/examples/gen_bench" \
    "$TARGET/release/examples/mock_openrouter" "$TARGET/release/examples/bare_client" "$OUT/bin/"
BIN=$OUT/bin/helmbench
EX=$OUT/bin

mkdir -p "$OUT"
BENCH=$OUT/bench-${SHAPE[0]}x${SHAPE[1]}x${SHAPE[2]}x${SHAPE[3]}
CASES=$("$EX/gen_bench" "$BENCH" "${SHAPE[@]}")
echo "bench: generated $CASES test cases in $BENCH" >&2

MOCK_LOG=$OUT/mock.log
"$EX/mock_openrouter" --latency-ms "$LATENCY_MS" >"$MOCK_LOG" 2>&1 &
MOCK_PID=$!
trap 'kill $MOCK_PID 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q listening "$MOCK_LOG" && break; sleep 0.05; done
PORT=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$MOCK_LOG")
[[ -n "$PORT" ]] || { echo "bench: mock did not start: $(cat "$MOCK_LOG")" >&2; exit 1; }
MOCK=http://127.0.0.1:$PORT

# JSON field of a flat object: json_field '{"a":1}' a -> 1
json_field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1"; }
mock_reset() { curl -fsS -X POST "$MOCK/reset" >/dev/null; }
mock_stats() { curl -fsS "$MOCK/stats"; }
calc() { awk "BEGIN { printf \"$1\", $2 }"; }
# Runs a command under GNU time; sets WALL (s), RSS (MB) and CPU (user + system s).
timed() {
    local tf=$OUT/time.txt
    /usr/bin/time -f "%e %M %U %S" -o "$tf" "$@"
    WALL=$(awk '{print $1}' "$tf")
    RSS=$(awk '{printf "%.1f", $2/1024}' "$tf")
    CPU=$(awk '{printf "%.2f", $3 + $4}' "$tf")
}
db_bytes() {
    local db=$1
    if command -v sqlite3 >/dev/null; then
        sqlite3 "$db" 'PRAGMA wal_checkpoint(TRUNCATE);' >/dev/null
    fi
    local total=0 f
    for f in "$db" "$db-wal"; do
        [[ -f "$f" ]] && total=$((total + $(stat -c %s "$f")))
    done
    echo "$total"
}

# One helmbench run-batch of N test cases at concurrency C into a fresh database,
# as a user runs it (the defaults: cache on, retries on) unless the third
# argument is `narrow` (`--no-cache --max-attempts 1`, the rows kept beside
# them: what the cache and the retries cost).
# Sets WALL, RSS, WINDOW (mock's first-request-to-last-reply seconds), SERVED, STORED.
helmbench_batch() {
    local n=$1 c=$2 db=$OUT/run-$1-$2.db narrow= limit=$1 repeats=1
    [[ "${3:-}" == narrow ]] && narrow="--no-cache --max-attempts 1"
    # More results than test cases: every test case, repeated.
    if ((n > CASES)); then limit=$CASES repeats=$((n / CASES)); fi
    rm -f "$db" "$db-wal" "$db-shm"
    sync # the previous run's writes must not land on this one's clock
    mock_reset
    # shellcheck disable=SC2086
    OPENROUTER_API_KEY=bench-not-a-key OPENROUTER_BASE_URL=$MOCK timed "$BIN" -q \
        --benchmark-dir "$BENCH" --database-url "$db" run-batch --all-scenarios \
        --limit "$limit" --repeats "$repeats" --concurrency "$c" $narrow >/dev/null
    local s
    s=$(mock_stats)
    WINDOW=$(json_field "$s" window_s)
    SERVED=$(json_field "$s" requests)
    STORED=$("$BIN" -q --benchmark-dir "$BENCH" --database-url "$db" runs --format json |
        tr -d ' \n' | sed -n 's/.*"test_cases":\([0-9]*\).*/\1/p')
    if [[ "$STORED" != "$n" || "$SERVED" != "$n" ]]; then
        echo "bench: helmbench stored $STORED and the mock served $SERVED of $n" >&2
        exit 1
    fi
    DB=$db
}

bare_batch() {
    local n=$1 c=$2 out
    sync
    mock_reset
    # Not `out=$(timed ...)`: a command substitution is a subshell, and the
    # CPU figure `timed` sets would not come back from it.
    timed "$EX/bare_client" "$MOCK" "$BENCH" "$n" "$c" >"$OUT/bare.out"
    out=$(cat "$OUT/bare.out")
    BARE_CPU=$CPU
    local s
    s=$(mock_stats)
    BARE_WINDOW=$(json_field "$s" window_s)
    if [[ "$(json_field "$out" errors)" != 0 || "$(json_field "$s" requests)" != "$n" ]]; then
        echo "bench: bare client failed: $out" >&2
        exit 1
    fi
}

MD=$OUT/figures.md
{
    echo "Measured $(date -u +%Y-%m-%dT%H:%MZ) at commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- . ':!BENCHMARKS.md' 2>/dev/null || echo ' (uncommitted changes)')"
    echo "on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')),"
    echo "$(awk '/MemTotal/ {printf "%.1f GB", $2/1048576}' /proc/meminfo) RAM, load average at start $(cut -d' ' -f1-3 /proc/loadavg);"
    echo "command: \`bench/run.sh$([[ $SMOKE == 1 ]] && echo ' --smoke')\` (REPEATS=$REPEATS, LATENCY_MS=$LATENCY_MS)."
    echo
} >"$MD"

# 1. Dry-run ------------------------------------------------------------------
echo "bench: 1. dry-run" >&2
{
    echo "### 1. Dry-run of $CASES test cases"
    echo
    echo "| selection | wall s (best of 3) | peak RSS MB |"
    echo "| --- | ---: | ---: |"
} >>"$MD"
for sel in "--all-scenarios" "$SELECTION"; do
    best=999999 best_rss=0
    for _ in 1 2 3; do
        # shellcheck disable=SC2086
        timed env -u OPENROUTER_API_KEY "$BIN" -q --benchmark-dir "$BENCH" run-batch $sel --dry-run >/dev/null
        if awk "BEGIN {exit !($WALL < $best)}"; then best=$WALL best_rss=$RSS; fi
    done
    echo "| \`$sel\` | $best | $best_rss |" >>"$MD"
    echo "bench:   $sel: ${best}s ${best_rss}MB" >&2
done
echo >>"$MD"

# 2. run-batch against the mock ------------------------------------------------
echo "bench: 2. run-batch vs bare client" >&2
{
    echo "### 2. run-batch against the mock (${LATENCY_MS} ms per reply), every result stored"
    echo
    echo "The defaults a user runs with (cache on, retries on, on a fresh database) except the rows"
    echo "marked \"narrow\" (\`--no-cache --max-attempts 1\`)."
    echo "Rates are requests / the mock's window (first request in to last reply out), the same"
    echo "clock for both clients. Ideal = concurrency / latency. Each row: median of $REPEATS runs;"
    echo "the bare client and helmbench alternate, so each ratio compares runs seconds apart."
    echo "CPU µs/request: the whole process's user + system time (start-up included) / requests;"
    echo "when the clients and the mock together need more than the machine's cores, this, not"
    echo "the latency, sets the rate."
    echo
    echo "| concurrency | test cases | ideal req/s | bare req/s | helmbench req/s | helmbench / ideal | helmbench / bare | CPU µs/request bare, helmbench | helmbench wall s (start-up + tail) | peak RSS MB |"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
} >>"$MD"
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
for spec in "${BATCH[@]}"; do
    IFS=: read -r c n mode <<<"$spec"
    reps=$REPEATS
    [[ $c == 1 && $SMOKE == 0 ]] && reps=1
    bare_rates=() hb_rates=() ratios=() walls=() rsss=() overheads=() bare_cpus=() hb_cpus=()
    for _ in $(seq "$reps"); do
        bare_batch "$n" "$c"
        helmbench_batch "$n" "$c" "$mode"
        rm -f "$DB" "$DB-wal" "$DB-shm"
        b=$(calc "%.1f" "$n / $BARE_WINDOW")
        h=$(calc "%.1f" "$n / $WINDOW")
        bare_rates+=("$b") hb_rates+=("$h") walls+=("$WALL") rsss+=("$RSS")
        ratios+=("$(calc "%.4f" "$h / $b")")
        overheads+=("$(calc "%.2f" "$WALL - $WINDOW")")
        bare_cpus+=("$(calc "%.0f" "$BARE_CPU * 1000000 / $n")")
        hb_cpus+=("$(calc "%.0f" "$CPU * 1000000 / $n")")
        echo "bench:   c=$c n=$n bare ${b}/s ${BARE_CPU}s cpu, helmbench ${h}/s ${CPU}s cpu wall ${WALL}s rss ${RSS}MB" >&2
    done
    mb=$(printf '%s\n' "${bare_rates[@]}" | median)
    mh=$(printf '%s\n' "${hb_rates[@]}" | median)
    mr=$(printf '%s\n' "${ratios[@]}" | median)
    mw=$(printf '%s\n' "${walls[@]}" | median)
    mo=$(printf '%s\n' "${overheads[@]}" | median)
    mrss=$(printf '%s\n' "${rsss[@]}" | median)
    mbc=$(printf '%s\n' "${bare_cpus[@]}" | median)
    mhc=$(printf '%s\n' "${hb_cpus[@]}" | median)
    ideal=$(calc "%.0f" "$c * 1000 / $LATENCY_MS")
    label=$c
    [[ "$mode" == narrow ]] && label="$c, narrow"
    echo "| $label | $n | $ideal | $mb | $mh | $(calc "%.1f %%" "100 * $mh / $ideal") | $(calc "%.1f %%" "100 * $mr") | $mbc, $mhc | $mw ($mo) | $mrss |" >>"$MD"
done
echo >>"$MD"

# 3. Start-up ------------------------------------------------------------------
echo "bench: 3. start-up" >&2
{
    echo "### 3. Start-up on the bundled benchmark"
    echo
    echo "| command | mean ms | min ms |"
    echo "| --- | ---: | ---: |"
} >>"$MD"
for cmd in "list" "prompts P1-B1-S1-C1-PT1"; do
    full="$BIN --benchmark-dir $ROOT/benchmark $cmd"
    if command -v hyperfine >/dev/null; then
        hyperfine -N --warmup 3 --runs "$STARTUP_RUNS" --export-json "$OUT/hf.json" "$full" >/dev/null 2>&1
        mean=$(tr -d ' \n' <"$OUT/hf.json" | sed -n 's/.*"mean":\([^,]*\).*/\1/p')
        min=$(tr -d ' \n' <"$OUT/hf.json" | sed -n 's/.*"min":\([^,]*\).*/\1/p')
        mean=$(calc "%.1f" "$mean * 1000") min=$(calc "%.1f" "$min * 1000")
    else
        total=0 min=999999
        for _ in $(seq "$STARTUP_RUNS"); do
            t0=$(date +%s%N)
            # shellcheck disable=SC2086
            $full >/dev/null
            t=$((($(date +%s%N) - t0) / 1000))
            total=$((total + t))
            ((t < min)) && min=$t
        done
        mean=$(calc "%.1f" "$total / $STARTUP_RUNS / 1000") min=$(calc "%.1f" "$min / 1000")
    fi
    echo "| \`helmbench $cmd\` | $mean | $min |" >>"$MD"
    echo "bench:   $cmd: mean ${mean}ms min ${min}ms" >&2
done
echo >>"$MD"

# 4. Database size and memory against result count -------------------------------
echo "bench: 4. database size and RSS" >&2
{
    echo "### 4. Database size and peak RSS against the number of results (concurrency 64)"
    echo
    echo "More results than the $CASES test cases means every test case with \`--repeats\`."
    echo
    echo "| results | database MB (checkpointed) | MB per 10,000 results | peak RSS MB |"
    echo "| ---: | ---: | ---: | ---: |"
} >>"$MD"
for n in "${RSS_SIZES[@]}"; do
    helmbench_batch "$n" 64
    bytes=$(db_bytes "$DB")
    rm -f "$DB" "$DB-wal" "$DB-shm"
    echo "| $n | $(calc "%.1f" "$bytes / 1048576") | $(calc "%.1f" "$bytes / 1048576 * 10000 / $n") | $RSS |" >>"$MD"
    echo "bench:   $n results: $bytes bytes, rss ${RSS}MB" >&2
done

echo
cat "$MD"

if [[ $SMOKE == 0 ]]; then
    # Replace the generated section of BENCHMARKS.md, keeping the notes around it.
    DOC=$ROOT/BENCHMARKS.md
    begin='<!-- bench:begin (written by bench/run.sh) -->'
    end='<!-- bench:end -->'
    if [[ -f "$DOC" ]] && grep -qF "$begin" "$DOC"; then
        awk -v b="$begin" -v e="$end" -v f="$MD" '
            $0 == b { print; while ((getline l < f) > 0) print l; skip = 1; next }
            $0 == e { skip = 0 }
            !skip { print }' "$DOC" >"$DOC.tmp" && mv "$DOC.tmp" "$DOC"
    else
        { echo "# Benchmarks"; echo; echo "$begin"; cat "$MD"; echo "$end"; } >>"$DOC"
    fi
    echo "bench: figures written to BENCHMARKS.md" >&2
fi
