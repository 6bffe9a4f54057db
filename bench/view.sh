#!/usr/bin/env bash
# Latency of `helmbench view`'s pages on a large database (issue 32: the
# results page of a 200,000-result database answers in under 200 ms).
# Serves the database bench/scale.sh wrote (or DB=... BENCH=... BIN=...),
# asks each page 5 times with curl and prints the median and the worst.
#
#   bench/scale.sh             writes the database, then runs this
#   bench/view.sh              again, on the database already written
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${BENCH_OUT:-$(pwd)/bench/out}/scale
BIN=${BIN:-$OUT/bin/helmbench}
DB=${DB:-$OUT/scale.db}
BENCH=${BENCH:-$OUT/bench}
[[ -f $DB ]] || { echo "view: no database at $DB (run bench/scale.sh first)" >&2; exit 2; }
command -v curl >/dev/null || { echo "view: curl is missing" >&2; exit 2; }

LOG=$OUT/view.log
# A log left by an earlier run would be read before this server truncates it.
rm -f "$LOG"
"$BIN" -q --benchmark-dir "$BENCH" --database-url "$DB" view --port 0 >"$LOG" 2>&1 &
VIEW_PID=$!
trap 'kill $VIEW_PID 2>/dev/null || true' EXIT
# Up to 60 s: a loaded machine (a CI run beside it) starts it slowly.
for _ in $(seq 1200); do grep -q ' at http' "$LOG" 2>/dev/null && break; sleep 0.05; done
URL=$(sed -n 's/.* at \(http[^ ]*\).*/\1/p' "$LOG" | head -1)
URL=${URL%/}
[[ -n $URL ]] || { echo "view: the server printed no URL:" >&2; cat "$LOG" >&2; exit 1; }

# The first test code of run 1 and a result id, for the deeper pages.
PAGE=$(curl -sf "$URL/results?runs=1")
ID=$(grep -o 'data-result="[0-9]*"' <<<"$PAGE" | head -1 | grep -o '[0-9]*')
NEXT=$(grep -o 'rel="next" href="[^"]*"' <<<"$PAGE" | head -1 | sed 's/.*href="//; s/"$//; s/&amp;/\&/g')
WORD=$(curl -sf "$URL/case/$ID" | grep -o '[A-Za-z]\{6,\}' | sed -n 40p)

# "median worst" of 5 requests, in ms.
timed() {
    for _ in 1 2 3 4 5; do
        curl -s -o /dev/null -w '%{time_total}\n' "$URL$1"
    done | sort -n | awk '{t[NR]=$1*1000} END {printf "%.0f %.0f\n", t[3], t[5]}'
}
RESULTS=$(sqlite3 "$DB" 'SELECT COUNT(*) FROM result' 2>/dev/null || echo "?")
echo
echo "Measured $(date -u +%Y-%m-%dT%H:%MZ) at commit $(git rev-parse --short HEAD), $(nproc) cores, $RESULTS results; \`bench/view.sh\`"
echo
echo "| page | median ms | worst of 5 ms |"
echo "| --- | ---: | ---: |"
row() { read -r M W < <(timed "$2"); echo "| $1 | $M | $W |"; }
row "runs list \`/\`" "/"
row "results, first page, run 1" "/results?runs=1"
row "results, next page" "$NEXT"
row "results, two runs side by side" "/results?runs=1,2"
row "results, failed only" "/results?runs=1&status=failed"
row "results, unlabelled" "/results?runs=1&status=unlabelled"
row "results, one behaviour" "/results?runs=1&behaviour=P1-B1"
row "results, text search \`$WORD\`" "/results?runs=1&q=$WORD"
row "test case page" "/case/$ID?runs=1"
row "run page (report's numbers)" "/runs/1"
