#!/usr/bin/env bash
# Start or stop a LiteLLM proxy on loopback for helmbench's tests.
#
#   start.sh BUILD_DIR PORT     install (if needed) and start; prints the PID on stdout
#   start.sh BUILD_DIR stop     stop the proxy recorded in BUILD_DIR/litellm.pid
#   start.sh BUILD_DIR install  only install the pinned proxy into BUILD_DIR/venv (CI)
#
# Everything it writes goes under BUILD_DIR: venv/, config.yaml, custom_auth.py
# (copied from this script's folder, or from $LITELLM_CONFIG_DIR), litellm.log,
# litellm.pid, litellm.lock. pip runs with --no-cache-dir so nothing lands in ~/.cache.
# The proxy binds 127.0.0.1 only; every model in config.yaml is a mock_response,
# so it makes no outbound call. Messages go to stderr; stdout carries only the PID.
#
# Env knobs: PYTHON (default python3), LITELLM_START_TIMEOUT (default 60 s),
# LITELLM_CONFIG_DIR (default: this script's folder).
set -euo pipefail

LITELLM_PIN='litellm[proxy]==1.108.7'
PRISMA_PIN='prisma==0.15.0'

die() { echo "start.sh: $*" >&2; exit 1; }
log() { echo "start.sh: $*" >&2; }

[ $# -eq 2 ] || die "usage: start.sh BUILD_DIR PORT | start.sh BUILD_DIR stop | start.sh BUILD_DIR install"
mkdir -p "$1"
BUILD=$(cd "$1" && pwd)
ARG=$2
SRC=${LITELLM_CONFIG_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
PIDFILE="$BUILD/litellm.pid"
LOGFILE="$BUILD/litellm.log"
VENV="$BUILD/venv"

# True if PID is alive and is a litellm process (guards against a recycled PID).
is_our_proxy() {
  local pid=$1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q litellm
}

stop_proxy() {
  [ -f "$PIDFILE" ] || { log "no pid file, nothing to stop"; return 0; }
  local pid
  pid=$(cat "$PIDFILE")
  if is_our_proxy "$pid"; then
    # Started with setsid, so PID is also its process group id: end the group.
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
    log "stopped $pid"
  else
    log "pid $pid not running"
  fi
  rm -f "$PIDFILE"
}

# HTTP status of GET /health/liveliness on the port ("000" if nothing answers).
liveliness() {
  local port=$1
  if command -v curl >/dev/null 2>&1; then
    curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$port/health/liveliness" || true
  else
    "$VENV/bin/python" - "$port" <<'PY' 2>/dev/null || echo 000
import sys, urllib.request
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health/liveliness", timeout=2) as r:
        print(r.status)
except Exception as e:
    print(getattr(e, "code", "000"))
PY
  fi
}

if [ "$ARG" = stop ]; then
  stop_proxy
  exit 0
fi

PORT=$ARG
if [ "$PORT" != install ]; then
  [[ "$PORT" =~ ^[0-9]+$ ]] && [ "$PORT" -ge 1 ] && [ "$PORT" -le 65535 ] || die "bad port: $PORT"
fi
[ -f "$SRC/config.yaml" ] && [ -f "$SRC/custom_auth.py" ] || die "config.yaml/custom_auth.py not found in $SRC"

# Serialise concurrent callers on the same build folder (install + start).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$BUILD/litellm.lock"
  flock 9
fi

# --- install (once; redone if the pins change) ---
STAMP="$VENV/.helmbench-pins"
if [ ! -x "$VENV/bin/litellm" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$LITELLM_PIN $PRISMA_PIN" ]; then
  log "installing $LITELLM_PIN $PRISMA_PIN into $VENV (takes ~2 min)"
  rm -rf "$VENV"
  "${PYTHON:-python3}" -m venv "$VENV"
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/pip" install --no-cache-dir --quiet "$LITELLM_PIN" "$PRISMA_PIN" >&2
  echo "$LITELLM_PIN $PRISMA_PIN" > "$STAMP"
fi
if [ "$PORT" = install ]; then
  log "installed in $VENV"
  exit 0
fi

# --- already running? ---
if [ -f "$PIDFILE" ] && is_our_proxy "$(cat "$PIDFILE")"; then
  if [ "$(liveliness "$PORT")" = 200 ]; then
    log "already running"
    cat "$PIDFILE"
    exit 0
  fi
  stop_proxy
fi
rm -f "$PIDFILE"

code=$(liveliness "$PORT")
[ "$code" = 000 ] || die "port $PORT already answers HTTP $code; pick a free port"

if [ "$SRC" != "$BUILD" ]; then
  cp "$SRC/config.yaml" "$SRC/custom_auth.py" "$BUILD/"
fi

# This LiteLLM refuses to start without a master key. custom_auth.py decides every
# request (only sk-test-good passes), so this random key is never accepted either;
# it is kept in the proxy's environment only, never on disk.
MASTER_KEY="sk-master-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"

cd "$BUILD"
env LITELLM_LOCAL_MODEL_COST_MAP=True \
    LITELLM_TELEMETRY_DISABLED=true \
    LITELLM_MASTER_KEY="$MASTER_KEY" \
    PYTHONDONTWRITEBYTECODE=1 \
    NO_PROXY='127.0.0.1,localhost' no_proxy='127.0.0.1,localhost' \
    setsid "$VENV/bin/litellm" --config "$BUILD/config.yaml" --host 127.0.0.1 --port "$PORT" \
    </dev/null >"$LOGFILE" 2>&1 9>&- &
PID=$!
echo "$PID" > "$PIDFILE"

TIMEOUT=${LITELLM_START_TIMEOUT:-60}
START=$SECONDS
while :; do
  if ! kill -0 "$PID" 2>/dev/null; then
    tail -n 40 "$LOGFILE" >&2 || true
    rm -f "$PIDFILE"
    die "proxy exited during start-up (log: $LOGFILE)"
  fi
  [ "$(liveliness "$PORT")" = 200 ] && break
  if [ $((SECONDS - START)) -ge "$TIMEOUT" ]; then
    tail -n 40 "$LOGFILE" >&2 || true
    stop_proxy
    die "proxy not live after ${TIMEOUT}s (log: $LOGFILE)"
  fi
  sleep 0.2
done
log "live on 127.0.0.1:$PORT after $((SECONDS - START))s"
echo "$PID"
