#!/usr/bin/env bash
# Stop the test cluster scripts/postgres/start.sh started in DIR (fast
# shutdown: open connections are ended). DIR itself is left for the caller
# to remove. Nothing running there: says so and succeeds.
set -euo pipefail

die() { echo "postgres/stop.sh: $*" >&2; exit 1; }
log() { echo "postgres/stop.sh: $*" >&2; }

[ $# -eq 1 ] || die "usage: stop.sh DIR"
[ -d "$1" ] || { log "no folder $1, nothing to stop"; exit 0; }
DIR=$(cd "$1" && pwd)
DATA="$DIR/data"
if [ -n "${PG_BIN:-}" ]; then
  BIN=$PG_BIN
elif [ -x /usr/lib/postgresql/15/bin/pg_ctl ]; then
  BIN=/usr/lib/postgresql/15/bin
else
  BIN=$(dirname "$(command -v pg_ctl || die "no pg_ctl on PATH; set PG_BIN")")
fi

as_pg() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

if [ ! -f "$DATA/postmaster.pid" ]; then
  log "not running ($DATA)"
  rm -f "$DIR/url"
  exit 0
fi
as_pg "$BIN/pg_ctl" -D "$DATA" -m fast -w -t 60 stop >&2
rm -f "$DIR/url"
log "stopped ($DATA)"
