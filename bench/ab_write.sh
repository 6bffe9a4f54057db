#!/usr/bin/env bash
# A/B of the write: the release binary of another commit against this
# checkout's, run alternately in one sitting on the same mock and the same
# generated benchmark, so a difference is the binaries', not the machine's
# load (timings on shared 2-core machines drift; ratios in one run hold).
#
#   bench/ab_write.sh 736fc2f           two rounds, two models x 55,000 test cases
#   ROUNDS=3 SHAPE="20 10 10 10" bench/ab_write.sh HEAD~5
#
# Builds both release binaries (the other commit in a temporary worktree
# with its own target folder under bench/out/), prints one line per run:
# which binary, round, wall seconds, load.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OLD_REV=${1:?usage: bench/ab_write.sh OLD_COMMIT}
OUT=${BENCH_OUT:-$ROOT/bench/out}/ab
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
read -r -a SHAPE <<<"${SHAPE:-50 10 10 10}"
mkdir -p "$OUT"

cargo build --release --quiet --bin helmbench --example gen_bench --example mock_openrouter
NEW="$OUT/helmbench-new"
cp "$TARGET/release/helmbench" "$NEW"
if [[ ! -d "$OUT/old-src" ]]; then
    git worktree add --detach "$OUT/old-src" "$OLD_REV" >/dev/null
else
    git -C "$OUT/old-src" checkout --quiet --detach "$OLD_REV"
fi
# The dependencies built for this checkout serve the old one too (the same
# Cargo.lock, mostly): only what changed is compiled again.
if [[ ! -d "$OUT/old-target/release" ]]; then
    mkdir -p "$OUT/old-target"
    cp -a "$TARGET/release" "$OUT/old-target/"
fi
(cd "$OUT/old-src" && CARGO_TARGET_DIR="$OUT/old-target" cargo build --release --quiet --bin helmbench)
OLD="$OUT/old-target/release/helmbench"

rm -rf "$OUT/bench"
"$TARGET/release/examples/gen_bench" "$OUT/bench" "${SHAPE[@]}" >/dev/null
printf 'models:\n  - id: bench/model\n    temperature: 0\n  - id: bench/model-2\n    temperature: 0\n' >"$OUT/bench/models.yml"
"$TARGET/release/examples/mock_openrouter" --latency-ms 1 >"$OUT/mock.log" 2>&1 &
MOCK_PID=$!
trap 'kill $MOCK_PID 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q listening "$OUT/mock.log" && break; sleep 0.05; done
PORT=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$OUT/mock.log")
export OPENROUTER_API_KEY=bench-not-a-key OPENROUTER_BASE_URL=http://127.0.0.1:$PORT

echo "A/B of the write: $OLD_REV (old) vs $(git rev-parse --short HEAD) (new), shape ${SHAPE[*]}, two models, c=64"
for round in $(seq "${ROUNDS:-2}"); do
    for which in new old; do
        if [[ $which == new ]]; then BIN=$NEW; else BIN=$OLD; fi
        DB="$OUT/ab.db"
        rm -f "$DB" "$DB"-wal "$DB"-shm "$DB".run-*
        start=$(date +%s.%N)
        "$BIN" -q --benchmark-dir "$OUT/bench" --database-url "$DB" run-batch --all-scenarios \
            --concurrency 64 --no-cache --yes --max-attempts 1 >/dev/null 2>&1
        end=$(date +%s.%N)
        echo "$which round $round: $(echo "$end - $start" | bc) s, load $(cut -d' ' -f1 /proc/loadavg)"
    done
done
