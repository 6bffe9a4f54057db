#!/usr/bin/env bash
# Money under faults (issue 30): the kill -9 window and the budget overshoot.
# One command, rerunnable anywhere; prints Markdown to paste into BENCHMARKS.md.
#
#   bench/faults.sh            release build (PROFILE=debug: the dev build)
#
# 1. kill -9 window: run-batch of 20,000 test cases at concurrency C (fixed)
#    against the local mock (LATENCY_MS, default 5), SIGKILLed KILLS times
#    (default 5) at a random point 0.2-2.2 s after its first request; after each kill, replies the
#    mock served (paid) minus results stored. The promise: at most C.
# 2. budget overshoot: --max-cost B at concurrency C against a mock whose
#    replies are charged $0.0001 each but only one in three is usable (the
#    others `choices: []`, retried); what the mock charged against B. The
#    promise: at most B + C replies ($0.0001 each).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
PROFILE=${PROFILE:-release}
KILLS=${KILLS:-5}
LATENCY_MS=${LATENCY_MS:-5}
OUT=${BENCH_OUT:-$ROOT/bench/out/faults}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
flag=--release
[[ $PROFILE == debug ]] && flag=
# shellcheck disable=SC2086
cargo build $flag --quiet --bin helmbench --example gen_bench --example mock_openrouter \
    --example write_kept
mkdir -p "$OUT/bin"
cp "$TARGET/$PROFILE/helmbench" "$TARGET/$PROFILE/examples/gen_bench" \
    "$TARGET/$PROFILE/examples/mock_openrouter" "$TARGET/$PROFILE/examples/write_kept" "$OUT/bin/"
BIN=$OUT/bin/helmbench
BENCH=$OUT/bench
CASES=$("$OUT/bin/gen_bench" "$BENCH" 20 10 10 10)

MOCK_PID=
start_mock() {
    [[ -n "$MOCK_PID" ]] && kill "$MOCK_PID" 2>/dev/null || true
    "$OUT/bin/mock_openrouter" --latency-ms "$LATENCY_MS" "$@" >"$OUT/mock.log" 2>&1 &
    MOCK_PID=$!
    for _ in $(seq 100); do grep -q listening "$OUT/mock.log" && break; sleep 0.05; done
    MOCK=http://127.0.0.1:$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$OUT/mock.log")
}
trap '[[ -n "$MOCK_PID" ]] && kill $MOCK_PID 2>/dev/null || true' EXIT
served() { curl -fsS "$MOCK/stats" | sed -n 's/.*"requests":\([0-9]*\).*/\1/p'; }
stored() {
    "$BIN" -q --benchmark-dir "$BENCH" --database-url "$1" runs --format json |
        tr -d ' \n' | sed -n 's/.*"test_cases":\([0-9]*\).*/\1/p' | grep . || echo 0
}
run_batch() { # db, args... (exec: the background job is helmbench itself, for kill -9)
    local db=$1
    shift
    OPENROUTER_API_KEY=bench-not-a-key OPENROUTER_BASE_URL=$MOCK exec "$BIN" -q \
        --benchmark-dir "$BENCH" --database-url "$db" run-batch --all-scenarios --yes "$@"
}

echo "#### Money under faults ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(git rev-parse --short HEAD), $PROFILE build, $CASES test cases)"
echo
echo "| kill -9 at concurrency | kills | paid - stored: min | median | max | bound |"
echo "|---|---|---|---|---|---|"
start_mock
for c in 16 64; do
    losses=()
    for k in $(seq "$KILLS"); do
        db=$OUT/kill-$c-$k.db
        rm -f "$db" "$db-wal" "$db-shm"
        curl -fsS -X POST "$MOCK/reset" >/dev/null
        run_batch "$db" --limit 20000 --concurrency "$c" --fixed-concurrency --no-cache >/dev/null 2>&1 &
        pid=$!
        # Once it sends (start-up and seeding take a while), a random point.
        for _ in $(seq 600); do (($(served) > 0)) && break; sleep 0.05; done
        sleep "$(awk -v s="$RANDOM" 'BEGIN { printf "%.2f", 0.2 + (s % 2000) / 1000 }')"
        kill -9 "$pid"
        wait "$pid" 2>/dev/null || true
        sleep 0.3
        # What the killed process kept in its result log counts as stored:
        # written here as `--resume` would write it first.
        "$OUT/bin/write_kept" "$db" 1 >/dev/null
        losses+=($(($(served) - $(stored "$db"))))
    done
    sorted=$(printf '%s\n' "${losses[@]}" | sort -n)
    echo "| $c | $KILLS | $(head -1 <<<"$sorted") | $(sed -n "$(((KILLS + 1) / 2))p" <<<"$sorted") | $(tail -1 <<<"$sorted") | $c |"
done

echo
echo "| --max-cost | concurrency | charged by the mock | over the budget | bound (budget + concurrency x \$0.0001) |"
echo "|---|---|---|---|---|"
start_mock --usable-every 3
for spec in 0.05:4 0.50:8 0.50:64; do
    max=${spec%%:*} c=${spec##*:}
    db=$OUT/budget-$c.db
    rm -f "$db" "$db-wal" "$db-shm"
    curl -fsS -X POST "$MOCK/reset" >/dev/null
    (run_batch "$db" --limit 20000 --concurrency "$c" --no-cache --max-cost "$max") >/dev/null 2>&1 || true
    n=$(served)
    awk -v n="$n" -v max="$max" -v c="$c" 'BEGIN {
        paid = n * 0.0001
        printf "| $%s | %d | $%.4f (%d replies) | $%.4f | $%.4f |\n", max, c, paid, n, paid - max, max + c * 0.0001
    }'
done

# 3. Peak RSS while 16 requests at once each receive an endless (1 GB and
# more) 200 body: each is read up to the size limit (16 MiB) and dropped.
cat >"$OUT/endless.py" <<'PY'
import http.server, socketserver, sys
CHUNK = b"x" * 65536
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        body = (b'{"data":[{"id":"bench/model","pricing":{"prompt":"0.0000001","completion":"0.0000004"},"supported_parameters":["max_tokens","temperature","seed","response_format","structured_outputs"]}]}'
                if self.path.endswith("/models") else
                b'{"data":{"label":"mock","limit":null,"limit_remaining":null,"usage":0}}')
        self.send_response(200); self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200); self.send_header("content-type", "application/json")
        self.send_header("transfer-encoding", "chunked"); self.end_headers()
        try:
            for _ in range(16384):  # 1 GiB
                self.wfile.write(b"10000\r\n" + CHUNK + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
s = S(("127.0.0.1", 0), H)
print("listening on 127.0.0.1:%d" % s.server_address[1], flush=True)
s.serve_forever()
PY
[[ -n "$MOCK_PID" ]] && kill "$MOCK_PID" 2>/dev/null || true
python3 "$OUT/endless.py" >"$OUT/endless.log" 2>&1 &
MOCK_PID=$!
for _ in $(seq 100); do grep -q listening "$OUT/endless.log" && break; sleep 0.05; done
MOCK=http://127.0.0.1:$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$OUT/endless.log")
db=$OUT/endless.db
rm -f "$db" "$db-wal" "$db-shm"
OPENROUTER_API_KEY=bench-not-a-key OPENROUTER_BASE_URL=$MOCK /usr/bin/time -f "%M" -o "$OUT/rss.txt" \
    "$BIN" -q --benchmark-dir "$BENCH" --database-url "$db" run-batch --all-scenarios --yes \
    --limit 64 --concurrency 16 --fixed-concurrency --max-attempts 1 --no-cache >/dev/null 2>&1 || true
echo
echo "| endless bodies, concurrency 16, 16 MiB limit | peak RSS | promise |"
echo "|---|---|---|"
# GNU time writes "Command exited with non-zero status N" first when it did.
echo "| 64 requests, each body 1 GiB | $(tail -1 "$OUT/rss.txt" | awk '{printf "%.0f MiB", $1/1024}') | bodies at most 256 MiB |"
