#!/usr/bin/env bash
# Latency of `helmbench view`'s pages on a large database (issue 32: the
# results page of a 200,000-result database answers in under 200 ms).
# Serves the database bench/scale.sh wrote (or DB=... BENCH=... BIN=...),
# waits for the search index the view builds when it starts (its time is
# printed), asks each page 5 times with curl and prints the median and the
# worst. The Run page's first view starts computing `report`'s numbers in
# the background: its answer, and the time until the numbers are there,
# are printed apart from its later views.
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
# A log left by an earlier run would be read before this server truncates
# it; an index left by an earlier database is built again (timed here).
rm -f "$LOG" "$DB-view-search" "$DB-view-search-wal" "$DB-view-search-shm"
"$BIN" -q --benchmark-dir "$BENCH" --database-url "$DB" view --port 0 >"$LOG" 2>&1 &
VIEW_PID=$!
trap 'kill $VIEW_PID 2>/dev/null || true' EXIT
# Up to 60 s: a loaded machine (a CI run beside it) starts it slowly.
for _ in $(seq 1200); do grep -q ' at http' "$LOG" 2>/dev/null && break; sleep 0.05; done
URL=$(sed -n 's/.* at \(http[^ ]*\).*/\1/p' "$LOG" | head -1)
URL=${URL%/}
[[ -n $URL ]] || { echo "view: the server printed no URL:" >&2; cat "$LOG" >&2; exit 1; }

# The search index: built in the background from the start (up to 10 min).
for _ in $(seq 12000); do grep -q 'search index ready' "$LOG" 2>/dev/null && break; sleep 0.05; done
INDEXED=$(sed -n 's/.*search index ready ([0-9]* results, \([0-9.]*\) s.*/\1/p' "$LOG")
[[ -n $INDEXED ]] || { echo "view: the search index was not ready in 10 minutes:" >&2; cat "$LOG" >&2; exit 1; }

# The first test code of run 1 and a result id, for the deeper pages.
PAGE=$(curl -sf "$URL/results?runs=1")
ID=$(grep -o 'data-result="[0-9]*"' <<<"$PAGE" | head -1 | grep -o '[0-9]*')
NEXT=$(grep -o 'rel="next" href="[^"]*"' <<<"$PAGE" | head -1 | sed 's/.*href="//; s/"$//; s/&amp;/\&/g')
CASE=$(curl -sf "$URL/case/$ID")
WORD=$(grep -o '[A-Za-z]\{6,\}' <<<"$CASE" | sed -n 40p)
# A word of the reply (every reply of the mock's run has it: the densest
# search) and a word found nowhere (the sparsest: every row is looked up).
REPLY=$(sed -n 's/.*>Raw reply <small>[^<]*<\/small><\/summary><pre dir="auto"><bdi>\([^<]*\)<.*/\1/p' <<<"$CASE" \
    | grep -o '[a-z]\{6,\}' | grep -v -x -e category -e response | head -1 || true)
REPLY=${REPLY:-crisis}

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
row "results, failed only, two runs" "/results?runs=1,2&status=failed"
row "results, severity 5 to 8" "/results?runs=1&min_sev=5&max_sev=8"
row "results, text search \`$WORD\`" "/results?runs=1&q=$WORD"
row "results, text search \`$REPLY\` (in every reply)" "/results?runs=1&q=$REPLY"
row "results, text search \`zqxjkv\` (nowhere)" "/results?runs=1&q=zqxjkv"
row "results, text search \`$REPLY\`, two runs" "/results?runs=1,2&q=$REPLY"
row "test case page" "/case/$ID?runs=1"
# The Run page: its first view answers at once ("computing"), the numbers
# come in the background; later views read them kept.
FIRST=$(curl -s -o /dev/null -w '%{time_total}' "$URL/runs/1" | awk '{printf "%.0f", $1*1000}')
START=$(date +%s.%N)
until ! curl -sf "$URL/runs/1" | grep -q data-computing; do sleep 0.1; done
COMPUTED=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $START}")
echo "| run page, first view (says \"computing\") | $FIRST | |"
row "run page, kept report (report's numbers)" "/runs/1"
echo
echo "The search index was built in $INDEXED s after the view started ($(du -m "$DB-view-search" | cut -f1) MB beside the database); the run page's numbers were ready $COMPUTED s after its first view."
