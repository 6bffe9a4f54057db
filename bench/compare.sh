#!/usr/bin/env bash
# The `compare` benchmark (issue 21): `helmbench compare` over 20 models x
# 110,000 test cases, against the goal of under 10 s and 1 GB on 2 cores.
#
#   bench/compare.sh           20 models of 110,000 results; prints a markdown table
#   bench/compare.sh --smoke   3 models of 36 results (seconds; checks it works)
#
# Environment: REPEATS (default 3) timed runs of each format, best wall time
# kept; BENCH_OUT (default bench/out) for the generated database (reused when
# its shape matches, about 1 GB for the full size); CARGO_TARGET_DIR as usual.
# Needs bash, awk and GNU time (/usr/bin/time).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${BENCH_OUT:-$ROOT/bench/out}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
REPEATS=${REPEATS:-3}
if [[ "${1:-}" == "--smoke" ]]; then
    SHAPE=(3 3 2 2 2)          # 3 models x 3*2*3*2 = 36 test cases
    REPEATS=1
else
    SHAPE=(20 100 10 10 10)    # 20 models x 100*10*(10+1)*10 = 110,000 test cases
fi
[[ -x /usr/bin/time ]] || { echo "bench: GNU time is missing (apt-get install time)" >&2; exit 2; }

echo "bench: building (release)" >&2
cargo build --release --quiet --bin helmbench --example gen_compare_db
mkdir -p "$OUT/bin"
cp "$TARGET/release/helmbench" "$TARGET/release/examples/gen_compare_db" "$OUT/bin/"
BIN=$OUT/bin/helmbench

DIR=$OUT/compare-${SHAPE[0]}x${SHAPE[1]}x${SHAPE[2]}x${SHAPE[3]}x${SHAPE[4]}
if [[ ! -f "$DIR/done" ]]; then
    echo "bench: writing $DIR (one run per model, every test case stored)" >&2
    rm -rf "$DIR"
    mkdir -p "$DIR"
    start=$(date +%s)
    RESULTS=$("$OUT/bin/gen_compare_db" "$DIR" "${SHAPE[@]}")
    echo "$RESULTS" >"$DIR/done"
    echo "bench: $RESULTS results in $(($(date +%s) - start)) s" >&2
fi
RESULTS=$(cat "$DIR/done")
DB_MB=$(du -m "$DIR/compare.db" | awk '{print $1}')

echo "Measured $(date -u +%Y-%m-%dT%H:%MZ) at commit $(git rev-parse --short HEAD)"
echo "on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')),"
echo "load average at start $(cut -d' ' -f1-3 /proc/loadavg); ${SHAPE[0]} runs, $RESULTS results, database $DB_MB MB;"
echo "command: \`bench/compare.sh\` (REPEATS=$REPEATS)."
echo
echo "| format | wall s (best of $REPEATS) | CPU s (user + system) | peak RSS MB |"
echo "| --- | ---: | ---: | ---: |"
for format in table json html; do
    best="" cpu="" rss=""
    for _ in $(seq "$REPEATS"); do
        /usr/bin/time -f "%e %M %U %S" -o "$OUT/time.txt" "$BIN" -q \
            --benchmark-dir "$DIR/bench" --database-url "$DIR/compare.db" \
            compare --format "$format" >"$OUT/compare.$format"
        read -r wall kb user sys <"$OUT/time.txt"
        if [[ -z "$best" ]] || awk "BEGIN{exit !($wall < $best)}"; then
            best=$wall cpu=$(awk "BEGIN{printf \"%.2f\", $user + $sys}")
        fi
        rss=$(awk "BEGIN{m=$kb/1024; r=\"${rss:-0}\"+0; printf \"%.1f\", (m > r ? m : r)}")
    done
    echo "| \`compare --format $format\` | $best | $cpu | $rss |"
done
