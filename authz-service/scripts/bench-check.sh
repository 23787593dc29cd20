#!/usr/bin/env bash
# Check latency under a fixed request rate, against a real Redis, on loopback.
#
#   authz-service/scripts/bench-check.sh [RPS...]        (default: 5000 20000)
#
# Starts its own redis-server and a release tollgate-authz on free loopback
# ports, drives Check with ghz (go install github.com/bojand/ghz/cmd/ghz@latest)
# for DURATION seconds per rate (default 10), prints ghz's client-side
# latency and the service's own Check histogram, then stops everything.
# Every process shares this machine's cores: read figures as relative.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -gt 0 ]; then RATES=("$@"); else RATES=(5000 20000); fi
DURATION=${DURATION:-10}
TARGET=${CARGO_TARGET_DIR:-/tmp/tg-target-authz}
GHZ=${GHZ:-$(command -v ghz || echo "$HOME/go/bin/ghz")}
PROTOSET=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/envoy-types-0.7.*/src/generated/types.bin | tail -1)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

CARGO_TARGET_DIR=$TARGET cargo build --release -q -p tollgate-authz
RP=$(free_port); GP=$(free_port); HP=$(free_port)
WORK=$(mktemp -d)
redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >"$WORK/redis.log" 2>&1 &
REDIS_PID=$!
cleanup() { kill "$AUTHZ_PID" "$REDIS_PID" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
for _ in $(seq 50); do redis-cli -p "$RP" ping >/dev/null 2>&1 && break; sleep 0.1; done
"$TARGET/release/tollgate-authz" serve --policy config/policy.yaml --grpc-listen "127.0.0.1:$GP" \
  --http-listen "127.0.0.1:$HP" --redis-url "redis://127.0.0.1:$RP" >"$WORK/authz.log" 2>&1 &
AUTHZ_PID=$!
for _ in $(seq 50); do curl -sf "127.0.0.1:$HP/healthz" >/dev/null && break; sleep 0.1; done

hist() { curl -s "127.0.0.1:$HP/metrics" | grep -E '^tollgate_authz_(check_duration_seconds_(bucket|count)|fail_open_total|decisions_total)'; }
quantile() { # $1 = q, reads "le count" lines (cumulative) from stdin, total in $2
  awk -v q="$1" -v total="$2" '{ if (!done && $2 >= q*total) { print $1; done=1 } }'; }

for RPS in "${RATES[@]}"; do
  N=$((RPS * DURATION))
  BEFORE=$(hist)
  echo "== $RPS checks/s for ${DURATION}s ($N requests), key ${KEY:-tg-demo-key} (tg-demo-key: 4 buckets: key+tenant, requests+tokens)"
  "$GHZ" --insecure --protoset "$PROTOSET" --call envoy.service.auth.v3.Authorization.Check \
    -d "{\"attributes\":{\"request\":{\"http\":{\"headers\":{\"authorization\":\"Bearer ${KEY:-tg-demo-key}\"}}}}}" \
    --rps "$RPS" -n "$N" -c 64 --connections 4 --skipFirst 1000 "127.0.0.1:$GP" \
    | grep -E 'Count:|Total:|Requests/sec:|Average:|Fastest:|Slowest:|10 %|50 %|90 %|99 %|Status code|OK|Unavailable|Error' || true
  AFTER=$(hist)
  # Server-side Check histogram for this run only (difference of two scrapes).
  DIFF=$(join <(echo "$BEFORE" | grep _bucket | sed -E 's/.*le="([^"]+)"\} /\1 /' | sort) \
              <(echo "$AFTER"  | grep _bucket | sed -E 's/.*le="([^"]+)"\} /\1 /' | sort) \
         | awk '{print $1, $3-$2}' | sort -g)
  TOTAL=$(echo "$DIFF" | awk '$1=="+Inf"{print $2}')
  echo "   server-side Check: $TOTAL checks; p50 <= $(echo "$DIFF" | quantile 0.5 "$TOTAL") s, p99 <= $(echo "$DIFF" | quantile 0.99 "$TOTAL") s (histogram bucket bounds)"
  [ -n "${SHOW_HIST:-}" ] && echo "$DIFF" | awk '{printf "     le %s: %s\n", $1, $2}'
  echo "   fail-open so far: $(echo "$AFTER" | awk '/^tollgate_authz_fail_open_total/{print $2}')"
done
