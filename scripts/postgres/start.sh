#!/usr/bin/env bash
# Start a throwaway PostgreSQL 15 cluster on loopback for helmbench's tests.
#
#   start.sh [--locale LOCALE] DIR
#                    initdb into DIR/data (first time), start it on a free
#                    127.0.0.1 port, write its URL to DIR/url and print it;
#                    the cluster's locale is C unless LOCALE is given (e.g.
#                    en_US.UTF-8, which must be generated: `locale -a`)
#   stop.sh DIR      stop it (scripts/postgres/stop.sh)
#
# The cluster trusts every connection from 127.0.0.1 and listens nowhere
# else (no Unix socket either): it is for tests, never for data anyone keeps.
# Durability is off (fsync, synchronous_commit) for speed, for the same
# reason. When run as root, the server runs as the `postgres` user (initdb
# and postgres refuse root) and DIR is handed to that user.
#
# stdout carries only the URL (postgres://postgres@127.0.0.1:PORT/postgres);
# messages go to stderr. Run again on a running cluster: prints its URL.
#
# Env knobs: PG_BIN (folder with initdb/pg_ctl; default PostgreSQL 15's, or
# PATH), PG_START_TIMEOUT (seconds, default 60).
set -euo pipefail

die() { echo "postgres/start.sh: $*" >&2; exit 1; }
log() { echo "postgres/start.sh: $*" >&2; }

LOCALE=C
if [ "${1:-}" = --locale ]; then
  [ $# -ge 2 ] || die "usage: start.sh [--locale LOCALE] DIR"
  LOCALE=$2
  shift 2
fi
[ $# -eq 1 ] || die "usage: start.sh [--locale LOCALE] DIR"
# A locale the C library cannot load would make initdb fail later with
# less clear words. (`locale` complains when LC_ALL names a locale that is
# not generated; LOCPATH is honoured, as by the server.)
if [ "$LOCALE" != C ] && command -v locale >/dev/null 2>&1 \
  && LC_ALL="$LOCALE" locale 2>&1 >/dev/null | grep -q 'Cannot set'; then
  die "the locale $LOCALE is not generated on this machine (Debian: apt-get install -y locales; uncomment it in /etc/locale.gen; locale-gen)"
fi
mkdir -p "$1"
DIR=$(cd "$1" && pwd)
DATA="$DIR/data"
LOGFILE="$DIR/postgres.log"

if [ -n "${PG_BIN:-}" ]; then
  BIN=$PG_BIN
elif [ -x /usr/lib/postgresql/15/bin/initdb ]; then
  BIN=/usr/lib/postgresql/15/bin
elif command -v initdb >/dev/null 2>&1; then
  BIN=$(dirname "$(command -v initdb)")
else
  die "PostgreSQL is not installed (no initdb in /usr/lib/postgresql/15/bin or on PATH); install it with \`apt-get install -y postgresql\` or set PG_BIN"
fi
[ -x "$BIN/initdb" ] && [ -x "$BIN/pg_ctl" ] || die "no initdb/pg_ctl in $BIN"

# initdb and postgres refuse to run as root: run them as `postgres`.
as_pg() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || die "running as root but there is no \`postgres\` user to run the server as"
  chown postgres "$DIR"
  runuser -u postgres -- test -x "$DIR" \
    || die "the postgres user cannot reach $DIR (a parent folder is closed to others, e.g. mktemp -d's mode 700: chmod 755 it, or pick a folder under an open one)"
fi

# Serialise concurrent callers on the same DIR.
if command -v flock >/dev/null 2>&1; then
  exec 9>>"$DIR/start.lock"
  flock 9
fi

# Already running: say where.
if [ -f "$DATA/postmaster.pid" ] && [ -f "$DIR/url" ] && as_pg "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
  log "already running"
  cat "$DIR/url"
  exit 0
fi

if [ ! -f "$DATA/PG_VERSION" ]; then
  rm -rf "$DATA"
  log "initdb into $DATA (locale $LOCALE)"
  as_pg "$BIN/initdb" -D "$DATA" -U postgres --auth=trust --encoding=UTF8 --locale="$LOCALE" --no-sync >"$DIR/initdb.log" 2>&1 \
    || { cat "$DIR/initdb.log" >&2; die "initdb failed (log: $DIR/initdb.log)"; }
  # Trust on 127.0.0.1 only: no Unix socket, no other address, no replication.
  echo "host all all 127.0.0.1/32 trust" | as_pg tee "$DATA/pg_hba.conf" >/dev/null
  as_pg tee -a "$DATA/postgresql.conf" >/dev/null <<'CONF'
# helmbench test cluster (scripts/postgres/start.sh)
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
CONF
fi

# A free port: the kernel's pick for a socket bound to port 0, tried again
# if someone takes it before the server binds it.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null \
    || echo $((20000 + RANDOM % 40000))
}

TIMEOUT=${PG_START_TIMEOUT:-60}
rm -f "$DIR/url"
for attempt in 1 2 3 4 5; do
  PORT=$(free_port)
  : >"$LOGFILE"
  [ "$(id -u)" = 0 ] && chown postgres "$LOGFILE"
  if as_pg "$BIN/pg_ctl" -D "$DATA" -l "$LOGFILE" -o "-p $PORT" -w -t "$TIMEOUT" start >&2 9>&-; then
    URL="postgres://postgres@127.0.0.1:$PORT/postgres"
    echo "$URL" >"$DIR/url"
    log "running on 127.0.0.1:$PORT (data: $DATA, log: $LOGFILE)"
    echo "$URL"
    exit 0
  fi
  if grep -q 'could not bind' "$LOGFILE" 2>/dev/null; then
    log "port $PORT taken (attempt $attempt), trying another"
    continue
  fi
  tail -n 40 "$LOGFILE" >&2 || true
  die "the server did not start (log: $LOGFILE)"
done
die "no free port after 5 attempts (log: $LOGFILE)"
