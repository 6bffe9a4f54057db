#!/usr/bin/env bash
# The viewer's text search on a 200,000-result PostgreSQL store (issue 45:
# under 200 ms, median of five, a word in every reply and a word in none).
# Writes a store of 2 runs x 100,000 results straight into a fresh
# database on the server at PG_URL (migrated by `helmbench migrate`, then
# filled by SQL: every reply says "crisis line", every prompt "exams", one
# result in ten has a judgement), starts `helmbench view` on it and asks
# each search page 5 times with curl.
#
#   PG_URL=postgres://postgres@127.0.0.1:PORT/postgres bench/view_pg.sh
#   BIN=target/release/helmbench (default); RESULTS=200000 (default)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/helmbench}
PG_URL=${PG_URL:?set PG_URL to a PostgreSQL server (scripts/postgres/start.sh DIR prints one)}
PER_RUN=$(( ${RESULTS:-200000} / 2 ))
DB=helmbench_view_pg_bench
BASE=${PG_URL%/*}
[[ -x $BIN ]] || { echo "view_pg: no binary at $BIN (cargo build --release, or BIN=...)" >&2; exit 2; }
psql "$PG_URL" -qc "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
"$BIN" -q --database-url "$BASE/$DB" migrate
START=$(date +%s.%N)
psql "$BASE/$DB" -q -v ON_ERROR_STOP=1 <<SQL
INSERT INTO benchmark (content_hash, root) VALUES ('h', '/b');
INSERT INTO pillar (code, name) VALUES ('P1', 'p1'), ('P2', 'p2');
INSERT INTO behaviour (pillar_id, code, name)
  SELECT 1 + (i-1)/5, 'P' || (1 + (i-1)/5) || '-B' || (1 + (i-1)%5), 'b' FROM generate_series(1,10) i;
INSERT INTO scenario (behaviour_id, code, content_hash, evaluation, prompt)
  SELECT b.id, b.code || '-S' || s, 'h', '{}', 'p' FROM behaviour b, generate_series(1,10) s;
INSERT INTO condition (full_code, code, content_hash, prompt) VALUES ('C1','C1','h','c');
INSERT INTO perturbation (scenario_id, full_code, code, content_hash, prompt)
  SELECT s.id, s.code || '-PT' || p, 'PT' || p, 'h', 'x' FROM scenario s, generate_series(1, $PER_RUN / 100) p;
INSERT INTO llm (model_id) VALUES ('test/a'), ('test/b');
INSERT INTO evaluation_run (benchmark_id, llm_id, status, settings, tool_version)
  VALUES (1,1,'completed','{}','t'), (1,2,'completed','{}','t');
INSERT INTO prompt_text (hash, text)
  SELECT 'ph' || p.id, 'You are a support assistant. Triage the message and answer with care. The user writes: I have been feeling low lately, message number '
         || p.id || ' about exams, friends, sleep and work, and asks what to do next. ' || repeat('Context sentence about the conversation so far. ', 20)
    FROM perturbation p;
INSERT INTO result (run_id, test_code, scenario_id, condition_id, perturbation_id, prompt_hash, request_hash,
                    base_severity, difficulty, passed, response)
  SELECT r.id, s.code || '-C1-' || p.code, s.id, 1, p.id, 'ph' || p.id, md5(r.id || '-' || p.id), p.id % 10, 0, (p.id % 3 <> 0)::int,
         '{"category":"HANDOFF","response":"I am sorry you are going through this. Please reach out to a crisis line or someone you trust; talking helps. Reply '
         || p.id || ' of run ' || r.id || '."}'
    FROM evaluation_run r, perturbation p JOIN scenario s ON s.id = p.scenario_id;
INSERT INTO judgement (result_id, criterion, judge_model, justification)
  SELECT id, 'CR1', 'judge/m', 'The reply points to help and does not claim to be a therapist.' FROM result WHERE id % 10 = 0;
ANALYZE;
SQL
FILLED=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $START}")
LOG=$(mktemp)
"$BIN" -q --database-url "$BASE/$DB" view --port 0 >"$LOG" 2>&1 &
VIEW_PID=$!
trap 'kill $VIEW_PID 2>/dev/null || true; rm -f "$LOG"' EXIT
for _ in $(seq 1200); do grep -q ' at http' "$LOG" 2>/dev/null && break; sleep 0.05; done
URL=$(sed -n 's/.* at \(http[^ ]*\).*/\1/p' "$LOG" | head -1)
URL=${URL%/}
[[ -n $URL ]] || { echo "view_pg: the server printed no URL:" >&2; cat "$LOG" >&2; exit 1; }
timed() {
    for _ in 1 2 3 4 5; do
        curl -s -o /dev/null -w '%{time_total}\n' "$URL$1"
    done | sort -n | awk '{t[NR]=$1*1000} END {printf "%.0f %.0f\n", t[3], t[5]}'
}
RESULTS=$(psql "$BASE/$DB" -Atc 'SELECT COUNT(*) FROM result')
echo
echo "Measured $(date -u +%Y-%m-%dT%H:%MZ) at commit $(git rev-parse --short HEAD), $(nproc) cores, $RESULTS results on PostgreSQL $(psql "$BASE/$DB" -Atc 'SHOW server_version'), $BIN; \`bench/view_pg.sh\` (store filled in $FILLED s)"
echo
echo "| page | median ms | worst of 5 ms |"
echo "| --- | ---: | ---: |"
row() { read -r M W < <(timed "$2"); echo "| $1 | $M | $W |"; }
row "results, first page, run 1" "/results?runs=1"
row "results, text search \`crisis\` (in every reply)" "/results?runs=1&q=crisis"
row "results, text search \`zqxjkv\` (nowhere)" "/results?runs=1&q=zqxjkv"
row "results, text search \`crisis line\` (a phrase in every reply)" "/results?runs=1&q=crisis+line"
row "results, text search \`reply 5000\` (one reply)" "/results?runs=1&q=reply+5000"
row "results, text search \`therapist\` (one judgement in ten)" "/results?runs=1&q=therapist"
row "results, text search \`exams\` (in every prompt)" "/results?runs=1&q=exams"
row "results, text search \`crisis\`, two runs" "/results?runs=1,2&q=crisis"
# The view's connections first: a database in use cannot be dropped.
kill $VIEW_PID 2>/dev/null || true
wait $VIEW_PID 2>/dev/null || true
psql "$PG_URL" -qc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true
