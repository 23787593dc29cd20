#!/usr/bin/env bash
# Cost of the Envoy -> authz-service hop: Envoy's ext_authz through
# envoy_grpc over loopback TCP or a Unix domain socket (envoy_grpc_uds) and
# google_grpc (loopback TCP), against Envoy with no ext_authz,
# all answering with a direct response (no upstream), at a fixed rate.
#
#   authz-service/scripts/bench-hop.sh [RPS] [SECONDS]     (default 1000 10)
#   VARIANTS="none envoy_grpc envoy_grpc_uds" authz-service/scripts/bench-hop.sh
#
# Starts its own redis-server, a release tollgate-authz and one Envoy per
# variant on free loopback ports; fortio (.tools/bin/fortio) sends RPS
# requests/s with tg-demo-key. Prints CPU per request of Envoy and of the
# service (utime+stime from /proc) for each variant: compare the variants of
# one run, not the figures alone (the driver shares the machine's cores).
set -euo pipefail
cd "$(dirname "$0")/../.."
RPS=${1:-1000}
SECS=${2:-10}
TARGET=${CARGO_TARGET_DIR:-target}
ENVOY=${ENVOY_BIN:-.venv/bin/envoy}
FORTIO=${FORTIO_BIN:-.tools/bin/fortio}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

cargo build --release -q -p tollgate-authz --bin tollgate-authz
RP=$(free_port); GP=$(free_port); HP=$(free_port)
WORK=$(mktemp -d)
redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >"$WORK/redis.log" 2>&1 &
PIDS=($!)
cleanup() { kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
for _ in $(seq 50); do redis-cli -p "$RP" ping >/dev/null 2>&1 && break; sleep 0.1; done
"$TARGET/release/tollgate-authz" serve --policy config/policy.yaml --grpc-listen "127.0.0.1:$GP" \
  --grpc-uds "$WORK/authz.sock" --http-listen "127.0.0.1:$HP" --redis-url "redis://127.0.0.1:$RP" >"$WORK/authz.log" 2>&1 &
AUTHZ_PID=$!
PIDS+=("$AUTHZ_PID")
for _ in $(seq 50); do curl -sf "127.0.0.1:$HP/healthz" >/dev/null && break; sleep 0.1; done

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

cluster() { # $1 name, $2 endpoint address (YAML): HTTP/2 to authz-service
  cat <<YAML
  - name: $1
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: { http2_protocol_options: {} }
    load_assignment:
      cluster_name: $1
      endpoints: [{ lb_endpoints: [{ endpoint: { address: $2 } }] }]
YAML
}

config() { # $1 variant, $2 listen port, $3 admin port
  local authz=""
  case $1 in
    envoy_grpc) authz="grpc_service: { envoy_grpc: { cluster_name: authz }, timeout: 0.5s }" ;;
    envoy_grpc_uds) authz="grpc_service: { envoy_grpc: { cluster_name: authz_uds }, timeout: 0.5s }" ;;
    google_grpc) authz="grpc_service: { google_grpc: { target_uri: \"127.0.0.1:$GP\", stat_prefix: authz }, timeout: 0.5s }" ;;
  esac
  cat <<YAML
admin: { address: { socket_address: { address: 127.0.0.1, port_value: $3 } } }
static_resources:
  listeners:
  - address: { socket_address: { address: 127.0.0.1, port_value: $2 } }
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: hop
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes: [{ match: { prefix: "/" }, direct_response: { status: 200, body: { inline_string: "ok" } } }]
          http_filters:
$( [ -n "$authz" ] && cat <<F
          - name: envoy.filters.http.ext_authz
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
              transport_api_version: V3
              $authz
              failure_mode_allow: false
              allowed_headers: { patterns: [{ exact: authorization }, { exact: content-length }] }
F
)
          - name: envoy.filters.http.router
            typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }
  clusters:
$(cluster authz "{ socket_address: { address: 127.0.0.1, port_value: $GP } }")
$(cluster authz_uds "{ pipe: { path: \"$WORK/authz.sock\" } }")
YAML
}

for VARIANT in ${VARIANTS:-none envoy_grpc envoy_grpc_uds google_grpc}; do
  LP=$(free_port); AP=$(free_port)
  config "$VARIANT" "$LP" "$AP" >"$WORK/$VARIANT.yaml"
  "$ENVOY" -c "$WORK/$VARIANT.yaml" --concurrency 1 --disable-hot-restart --log-level warn \
    --base-id "$LP" >"$WORK/envoy-$VARIANT.log" 2>&1 &
  EP=$!
  PIDS+=("$EP")
  for _ in $(seq 100); do curl -sf "127.0.0.1:$AP/ready" >/dev/null && break; sleep 0.1; done
  curl -sf -H 'authorization: Bearer tg-demo-key' "127.0.0.1:$LP/" >/dev/null
  E0=$(ticks "$EP"); A0=$(ticks "$AUTHZ_PID")
  OUT=$("$FORTIO" load -qps "$RPS" -t "${SECS}s" -c 16 -H 'authorization: Bearer tg-demo-key' \
        "http://127.0.0.1:$LP/" 2>&1)
  E1=$(ticks "$EP"); A1=$(ticks "$AUTHZ_PID")
  N=$(echo "$OUT" | awk '/^Code 200/ {print $4}')
  OTHER=$(echo "$OUT" | awk '/^Code / && $2 != "200" {s += $4} END {print s + 0}')
  TICK=$(getconf CLK_TCK)
  awk -v v="$VARIANT" -v n="$N" -v o="$OTHER" -v e=$((E1 - E0)) -v a=$((A1 - A0)) -v t="$TICK" 'BEGIN {
    printf "%-12s %6d ok, %d other; CPU per request: envoy %.1f us, authz %.1f us, sum %.1f us\n",
      v, n, o, e / t * 1e6 / n, a / t * 1e6 / n, (e + a) / t * 1e6 / n }'
  kill "$EP"; wait "$EP" 2>/dev/null || true
done
