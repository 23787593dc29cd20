#!/usr/bin/env bash
# Check latency at fixed request rates, against a real Redis, on loopback.
#
#   authz-service/scripts/bench-check.sh [RPS...]        (default: 5000 20000)
#
# Starts its own redis-server and a release tollgate-authz on free loopback
# ports. For each rate it runs two scenarios back to back:
#   baseline  an unknown key: gRPC + header parsing + 401, no Redis call
#   demo      tg-demo-key: 4 buckets (key+tenant × requests+tokens), taken
#             from this instance's leases (a Redis call per lease refill)
#   money     tg-bench-money: the same 4 buckets plus 4 money budgets (key
#             and tenant × day and month), also from leases; only with
#             SCENARIOS="baseline demo money"
# and prints the driver's client-side latency and the service's own Check
# histogram (`tollgate_authz_check_duration_seconds`, difference of two
# scrapes) and Redis calls per check (`tollgate_authz_redis_calls_total` /
# `tollgate_authz_checks_total`). AUTHZ_ARGS adds flags to `tollgate-authz serve` (e.g.
# "--redis-max-in-flight 1024"). DRIVER=rust (default:
# examples/check_load.rs) or DRIVER=ghz
# (go install github.com/bojand/ghz/cmd/ghz@latest). DURATION seconds per
# scenario (default 10). Driver, service and Redis share this machine's
# cores: compare the two scenarios, do not read the figures alone.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -gt 0 ]; then RATES=("$@"); else RATES=(5000 20000); fi
DURATION=${DURATION:-10}
DRIVER=${DRIVER:-rust}
TARGET=${CARGO_TARGET_DIR:-/tmp/tg-target-authz}
GHZ=${GHZ:-$(command -v ghz || echo "$HOME/go/bin/ghz")}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

CARGO_TARGET_DIR=$TARGET cargo build --release -q -p tollgate-authz --bin tollgate-authz --example check_load
RP=$(free_port); GP=$(free_port); HP=$(free_port)
WORK=$(mktemp -d)
redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >"$WORK/redis.log" 2>&1 &
REDIS_PID=$!
AUTHZ_PID=
cleanup() { kill $AUTHZ_PID "$REDIS_PID" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
for _ in $(seq 50); do redis-cli -p "$RP" ping >/dev/null 2>&1 && break; sleep 0.1; done
TOKIO_WORKER_THREADS=${AUTHZ_THREADS:-2} "$TARGET/release/tollgate-authz" serve --policy config/policy.yaml --grpc-listen "127.0.0.1:$GP" \
  --http-listen "127.0.0.1:$HP" --redis-url "redis://127.0.0.1:$RP" ${AUTHZ_ARGS:-} >"$WORK/authz.log" 2>&1 &
AUTHZ_PID=$!
for _ in $(seq 50); do curl -sf "127.0.0.1:$HP/healthz" >/dev/null && break; sleep 0.1; done

# utime+stime of the service, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$AUTHZ_PID/stat"; }
scrape() { curl -s "127.0.0.1:$HP/metrics" | grep -E '^tollgate_authz_(check_duration_seconds_bucket|fail_open_total|checks_total|redis_calls_total)'; }
# Sum of one metric's series in a scrape.
total() { echo "$1" | awk -v m="$2" 'index($1, m) == 1 {s += $2} END {print s + 0}'; }

drive() { # $1 rate, $2 key
  if [ "$DRIVER" = ghz ]; then
    local protoset
    protoset=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/envoy-types-0.7.*/src/generated/types.bin | tail -1)
    "$GHZ" --insecure --protoset "$protoset" --call envoy.service.auth.v3.Authorization.Check \
      -d "{\"attributes\":{\"request\":{\"http\":{\"headers\":{\"authorization\":\"Bearer $2\"}}}}}" \
      --rps "$1" -n "$(($1 * DURATION))" -c 64 --connections 4 "127.0.0.1:$GP" \
      | grep -E 'Requests/sec:|50 % in|90 % in|99 % in|\[(OK|Unavailable|Canceled|DeadlineExceeded|Internal)\]' \
      | tr -s ' \t' ' ' | paste -sd' '
  else
    "$TARGET/release/examples/check_load" "127.0.0.1:$GP" "$1" "$DURATION" "$2" 4
  fi
}

for RPS in "${RATES[@]}"; do
  for SCEN in ${SCENARIOS:-baseline demo}; do
    case $SCEN in demo) KEY=tg-demo-key ;; money) KEY=tg-bench-money ;; *) KEY=tg-unknown-key ;; esac
    BEFORE=$(scrape); CPU0=$(cpu_ticks)
    echo "== $RPS checks/s, ${DURATION}s, $SCEN ($KEY), driver $DRIVER"
    echo "   client: $(drive "$RPS" "$KEY")"
    AFTER=$(scrape); CPU1=$(cpu_ticks)
    DIFF=$(join <(echo "$BEFORE" | grep _bucket | sed -E 's/.*le="([^"]+)"\} /\1 /' | sort) \
                <(echo "$AFTER"  | grep _bucket | sed -E 's/.*le="([^"]+)"\} /\1 /' | sort) \
           | awk '{print $1, $3-$2}' | sort -g)
    P50=$(echo "$DIFF" | awk '$1=="+Inf"{t=$2} {a[NR]=$1; c[NR]=$2} END {for (i=1;i<=NR;i++) if (c[i] >= 0.5*t) {print a[i]; exit}}')
    P99=$(echo "$DIFF" | awk '$1=="+Inf"{t=$2} {a[NR]=$1; c[NR]=$2} END {for (i=1;i<=NR;i++) if (c[i] >= 0.99*t) {print a[i]; exit}}')
    U100=$(echo "$DIFF" | awk '$1=="+Inf"{t=$2} $1=="0.0001"{u=$2} END {printf "%.1f", 100*u/t}')
    TICK=$(getconf CLK_TCK)
    echo "   service CPU: $(awk -v a="$CPU0" -v b="$CPU1" -v t="$TICK" -v n="$((RPS * DURATION))" 'BEGIN {printf "%.1f us per check", (b-a)/t*1e6/n}')"
    echo "   server Check histogram: p50 <= ${P50}s, p99 <= ${P99}s, ${U100}% within 100us; fail-open total $(echo "$AFTER" | awk '/^tollgate_authz_fail_open_total/{print $2}')"
    CALLS=$(( $(total "$AFTER" tollgate_authz_redis_calls_total) - $(total "$BEFORE" tollgate_authz_redis_calls_total) ))
    CHECKS=$(( $(total "$AFTER" tollgate_authz_checks_total) - $(total "$BEFORE" tollgate_authz_checks_total) ))
    echo "   redis calls per check: $(awk -v a="$CALLS" -v b="$CHECKS" 'BEGIN {if (b > 0) printf "%.4f (%d calls, %d checks)", a/b, a, b; else print "n/a"}')"
    if [ "$SCEN" != baseline ]; then
      echo "   redis: $(redis-cli -p "$RP" info commandstats | grep -E '^cmdstat_evalsha' | tr -d '\r'), $(redis-cli -p "$RP" info cpu | grep -E '^used_cpu_(user|sys):' | tr -d '\r' | paste -sd' ')"
    fi
    if [ -n "${SHOW_HIST:-}" ]; then
      echo "$DIFF" | awk '{printf "     le %s: %s\n", $1, $2}'
    fi
  done
done
