#!/usr/bin/env bash
# Opens a `helmbench report --format html` page in Debian's headless Chromium
# and fails when the browser reports an error, tries to fetch anything, or
# renders fewer charts or tables than the file holds.
#
#   scripts/check-html-report.sh report.html [screenshot.png]
#
# Installs the `chromium` package with apt-get when it is missing (needs root).
# The screenshot (default: report.html.png) is left for a person to look at.
set -euo pipefail

usage() { echo "usage: $0 REPORT.html [SCREENSHOT.png]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
file=$1
[[ -f $file && -s $file ]] || { echo "error: $file is not a non-empty file" >&2; exit 2; }
file=$(realpath "$file")
shot=${2:-$file.png}

browser=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $browser ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "error: chromium is not installed (apt-get install chromium, as root)" >&2
    exit 1
  fi
  echo "installing chromium…" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  browser=$(command -v chromium)
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The page must not reach out: no scripts, no external resources.
if grep -Eqi '<script|<link|<img|<iframe|@import|url\(| (src|href)=' "$file"; then
  echo "error: $file references scripts or external resources:" >&2
  grep -Eoi '<script[^>]*>|<link[^>]*>|<img[^>]*>|<iframe[^>]*>|@import[^;]*|url\([^)]*\)| (src|href)="[^"]*"' "$file" | head -5 >&2
  exit 1
fi

# Every network request is made to fail (nothing leaves the machine), and the
# net log below shows whether the page tried one.
flags=(
  --headless --no-sandbox --disable-gpu --disable-quic --no-first-run
  --disable-background-networking --disable-component-update --disable-sync
  --disable-default-apps --disable-extensions --mute-audio
  --proxy-server=127.0.0.1:9 --host-resolver-rules='MAP * ~NOTFOUND'
  --enable-logging=stderr --v=0
)

run_browser() { # name, extra flags...
  local name=$1; shift
  if ! timeout 120 "$browser" "${flags[@]}" --user-data-dir="$(mktemp -d -p "$work")" "$@" \
      "file://$file" >"$work/$name.out" 2>"$work/$name.err"; then
    echo "error: chromium failed ($name):" >&2
    tail -20 "$work/$name.err" >&2
    exit 1
  fi
}

run_browser dom --dump-dom --log-net-log="$work/net.json"
run_browser shot --window-size=1280,3000 --hide-scrollbars --screenshot="$shot"

# Console messages, failed loads and network errors the page caused.
# (Chromium's own start-up noise about D-Bus, GPU or crash reporting is not the page's.)
problems=$(cat "$work/dom.err" "$work/shot.err" \
  | grep -E 'CONSOLE|Failed to load resource|net::ERR_|Uncaught|Refused to' || true)
if [[ -n $problems ]]; then
  echo "error: the browser reported problems with $file:" >&2
  echo "$problems" | head -20 >&2
  exit 1
fi

# Requests the page itself made (the browser's own update and account pings,
# blocked above, are not the page's; the page's carry its file:// origin).
fetched=$(grep '"initiator":"file://"' "$work/net.json" | grep -o '"url":"[^"]*"' | sort -u || true)
if [[ -n $fetched ]]; then
  echo "error: $file made the browser fetch:" >&2
  echo "$fetched" | head -10 >&2
  exit 1
fi

count() { grep -o "$1" "$2" | wc -l; }
dom="$work/dom.out"
[[ -s $dom ]] || { echo "error: the browser produced no DOM" >&2; exit 1; }
for tag in '<svg' '<table'; do
  in_file=$(count "$tag" "$file")
  in_dom=$(count "$tag" "$dom")
  if [[ $in_file -ne $in_dom ]]; then
    echo "error: $file holds $in_file $tag elements but the browser parsed $in_dom" >&2
    exit 1
  fi
done
charts=$(count 'data-chart=' "$dom")
tables=$(count 'data-table=' "$dom")
if [[ $charts -lt 1 || $(count 'data-table="scores"' "$dom") -ne 1 ]]; then
  echo "error: no charts or no scores table in the rendered page" >&2
  exit 1
fi
[[ -s $shot ]] || { echo "error: no screenshot was written" >&2; exit 1; }
echo "ok: $file rendered without errors ($charts charts, $tables tables); screenshot: $shot"
