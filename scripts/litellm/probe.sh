#!/usr/bin/env bash
# Probe a running helmbench LiteLLM proxy on loopback; writes probes/<name>.txt
# Each file: the request line + body sent, then the raw response (status, headers, body).
set -u
PORT=${1:?port}
OUT=${2:-probes}
BASE="http://127.0.0.1:$PORT"
mkdir -p "$OUT"
GOOD="sk-test-good"

probe() { # name method path key body
  local name=$1 method=$2 path=$3 key=$4 body=${5:-}
  local f="$OUT/$name.txt"
  {
    echo ">>> $method $path  key=${key:-<none>}"
    [ -n "$body" ] && echo ">>> body: $body"
    echo
  } > "$f"
  local args=(-sS -i -X "$method" --max-time 30 "$BASE$path")
  [ -n "$key" ] && args+=(-H "Authorization: Bearer $key")
  [ -n "$body" ] && args+=(-H "Content-Type: application/json" --data "$body")
  curl "${args[@]}" >> "$f" 2>&1
  echo >> "$f"
  printf '%-40s %s\n' "$name" "$(sed -n '/^HTTP\//{p;q}' "$f" | tr -d '\r')"
}

RF='"response_format":{"type":"json_schema","json_schema":{"name":"response","strict":true,"schema":{"type":"object","properties":{"category":{"type":"string"}},"required":["category"],"additionalProperties":false}}}'
body() { # model [extra]
  local extra=${2:-}
  echo "{\"model\":\"$1\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],$RF,\"seed\":1,\"temperature\":0,\"max_tokens\":100,\"user\":\"abc\"${extra:+,$extra}}"
}
OR='"provider":{"require_parameters":true},"reasoning":{"effort":"low"},"usage":{"include":true}'

probe liveliness GET /health/liveliness ""
probe models_v1_good GET /v1/models "$GOOD"
probe models_good GET /models "$GOOD"
probe models_v1_nokey GET /v1/models ""
probe models_v1_badkey GET /v1/models "sk-test-bad"

probe chat_nokey POST /v1/chat/completions "" "$(body json-ok)"
probe chat_badkey POST /v1/chat/completions "sk-test-bad" "$(body json-ok)"
for m in json-ok full-response rate-limited server-error; do
  probe "chat_$m" POST /v1/chat/completions "$GOOD" "$(body $m)"
done
probe chat_json-ok_noslash_v1 POST /chat/completions "$GOOD" "$(body json-ok)"
probe chat_json-ok_openrouter_fields POST /v1/chat/completions "$GOOD" "$(body json-ok "$OR")"
probe chat_full-response_openrouter_fields POST /v1/chat/completions "$GOOD" "$(body full-response "$OR")"
probe chat_json-ok_provider_only POST /v1/chat/completions "$GOOD" "$(body json-ok '"provider":{"require_parameters":true}')"
probe chat_json-ok_reasoning_only POST /v1/chat/completions "$GOOD" "$(body json-ok '"reasoning":{"effort":"low"}')"
probe chat_json-ok_usage_include_only POST /v1/chat/completions "$GOOD" "$(body json-ok '"usage":{"include":true}')"
probe chat_json-ok_reasoning_effort POST /v1/chat/completions "$GOOD" "$(body json-ok '"reasoning_effort":"low"')"
probe chat_unknown_model POST /v1/chat/completions "$GOOD" "$(body no-such-model)"
probe chat_rate-limited_again POST /v1/chat/completions "$GOOD" "$(body rate-limited)"
probe chat_server-error_again POST /v1/chat/completions "$GOOD" "$(body server-error)"
probe chat_json-ok_after_errors POST /v1/chat/completions "$GOOD" "$(body json-ok)"
probe chat_malformed_json POST /v1/chat/completions "$GOOD" '{"model":"json-ok",'
probe chat_missing_messages POST /v1/chat/completions "$GOOD" '{"model":"json-ok"}'
probe chat_json-ok_stream POST /v1/chat/completions "$GOOD" "$(body json-ok '"stream":true,"stream_options":{"include_usage":true}')"
probe chat_rate-limited_stream POST /v1/chat/completions "$GOOD" "$(body rate-limited '"stream":true')"
