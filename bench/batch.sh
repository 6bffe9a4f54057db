#!/usr/bin/env bash
# Batch API (issue 33): peak RSS while reading a completed batch of ITEMS
# results of REPLY_BYTES each (default 50,000 x 4 KB, about 230 MB of
# JSON), and the cost ratio batch/sync of the same benchmark on the mock.
# Prints Markdown to paste into BENCHMARKS.md.
#
#   bench/batch.sh            release build (PROFILE=debug: the dev build)
set -euo pipefail

cd "$(dirname "$0")/.."
PROFILE=${PROFILE:-release}
ITEMS=${ITEMS:-50000}
REPLY_BYTES=${REPLY_BYTES:-4096}
flag=--release
[[ $PROFILE == debug ]] && flag=

echo "## Batch API ($(date -u +%Y-%m-%d), $(nproc) cores, $(uname -m))"
echo
echo "### Reading a completed batch of $ITEMS results of $REPLY_BYTES bytes"
echo
echo '```'
# shellcheck disable=SC2086
cargo run $flag --quiet --example batch_parse -- "$ITEMS" "$REPLY_BYTES"
echo '```'
echo
echo "### Cost ratio batch/sync on the mock"
echo
echo '```'
cargo test --quiet --test it same_verdicts_as_a_synchronous_run_at_half_the_cost -- --nocapture 2>&1 \
    | grep -E '^cost ' || true
echo '```'
