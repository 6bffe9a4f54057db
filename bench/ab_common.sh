# Sourced by bench/cpu_ab.sh and bench/five_ab.sh, from the repository:
# ab_dirs NAME sets OUT (BENCH_OUT, default bench/out/NAME, made) and EX
# (the release examples' folder, unless set);
# start_mock [ARGS...] starts the 20 ms mock (stopped on exit) and sets MOCK;
# timed CMD... runs CMD and prints its wall, CPU (user + system) and peak RSS.
ab_dirs() {
    OUT=${BENCH_OUT:-$PWD/bench/out/$1}
    EX=${EX:-${CARGO_TARGET_DIR:-$PWD/target}/release/examples}
    mkdir -p "$OUT"
}
start_mock() {
    "$EX/mock_openrouter" --latency-ms 20 "$@" >"$OUT/mock.log" 2>&1 &
    MOCK_PID=$!
    trap 'kill $MOCK_PID 2>/dev/null || true' EXIT
    for _ in $(seq 100); do grep -q listening "$OUT/mock.log" && break; sleep 0.05; done
    MOCK=http://127.0.0.1:$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$OUT/mock.log")
}
timed() {
    /usr/bin/time -f "%e %U %S %M" -o "$OUT/t.txt" "$@" >/dev/null
    awk '{printf "wall %.2f cpu %.2f rss %.0fMB", $1, $2+$3, $4/1024}' "$OUT/t.txt"
}
