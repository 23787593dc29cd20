#!/usr/bin/env bash
# Installs the peer gateways `make bench-peers` runs beside Tollgate, each at
# a pinned version, into .tools/peers/ (git-ignored, bench-only), idempotently:
# a peer already there at its version is skipped.
#
#   bench/install_peers.sh           install what is missing
#   bench/install_peers.sh --check   print what is there, install nothing
#
#   .tools/peers/litellm/   a venv with litellm[proxy] (the newest whose proxy
#                           extra resolves from the registry here)
#   .tools/peers/portkey/   npm prefix with @portkey-ai/gateway and
#                           @hono/node-server pinned to 1.13.x (newer versions
#                           fail every streamed answer with `TypeError: immutable`)
#
# Not installed, and why (bench/REPORT-peers.md says the same):
#   Envoy AI Gateway's `aigw`: the Go module proxy here refuses its module; the
#     lane runs an `aigw` already on PATH (or .tools/peers/aigw/aigw) if any,
#     with this machine's Envoy (bench/peers.py, `aigw_data_home`).
#   Bifrost: its Go module is refused and its npm wrapper downloads the binary
#     at run time. agentgateway: on no package registry.
# A failed install of one peer does not stop the others: the lane reports the
# peer as not installed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS="$ROOT/.tools/peers"
LITELLM_VERSION="1.108.7"
PORTKEY_VERSION="1.15.2"
HONO_NODE_SERVER_VERSION="1.13.8"
PRISMA_VERSION="0.15.0"
CHECK_ONLY=0
[[ "${1:-}" == "--check" ]] && CHECK_ONLY=1

say() { printf '\033[1mpeers:\033[0m %s\n' "$*"; }
mkdir -p "$PEERS"

# --- LiteLLM proxy, in its own venv ----------------------------------------
litellm_version() {
  "$PEERS/litellm/bin/python" -c 'import importlib.metadata as m; print(m.version("litellm"))' 2>/dev/null
}
if [[ "$(litellm_version)" == "$LITELLM_VERSION" && -x "$PEERS/litellm/bin/litellm" \
      && -f "$PEERS/litellm/.proxy-$LITELLM_VERSION" ]]; then
  say "litellm: $LITELLM_VERSION"
elif [[ $CHECK_ONLY == 1 ]]; then
  say "litellm: missing"
else
  say "litellm: pip install litellm[proxy]==$LITELLM_VERSION into $PEERS/litellm (a few minutes)"
  rm -rf "$PEERS/litellm"
  if python3 -m venv "$PEERS/litellm" &&
     "$PEERS/litellm/bin/python" -m pip install -q --disable-pip-version-check \
       "litellm[proxy]==$LITELLM_VERSION"; then
    touch "$PEERS/litellm/.proxy-$LITELLM_VERSION"
    say "litellm: $(litellm_version)"
  else
    say "litellm: install failed (the lane reports it as not installed)"
    rm -rf "$PEERS/litellm"
  fi
fi

# --- LiteLLM's database layer (part 2: virtual keys) -------------------------
# The `prisma` client the proxy's `extra_proxy` extra names (its newest, the
# one that extra resolves to), in LiteLLM's venv, and Postgres from Debian.
# Prisma's engines are not installed here: prisma-client-py downloads them
# from binaries.prisma.sh at first use, or takes them from
# PRISMA_QUERY_ENGINE_BINARY / PRISMA_SCHEMA_ENGINE_BINARY or from
# .tools/peers/prisma/{query,schema}-engine (bench/peers.py, `litellm_keys_missing`).
if [[ -x "$PEERS/litellm/bin/python" ]]; then
  if "$PEERS/litellm/bin/python" -c 'import importlib.metadata as m; assert m.version("prisma") == "'"$PRISMA_VERSION"'"' 2>/dev/null; then
    say "litellm: prisma $PRISMA_VERSION"
  elif [[ $CHECK_ONLY == 1 ]]; then
    say "litellm: prisma missing"
  else
    say "litellm: pip install prisma==$PRISMA_VERSION (LiteLLM's database client)"
    "$PEERS/litellm/bin/python" -m pip install -q --disable-pip-version-check "prisma==$PRISMA_VERSION" ||
      say "litellm: prisma install failed (the lane reports litellm-keys as not measured)"
  fi
fi
if compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null; then
  say "postgres: $(ls -d /usr/lib/postgresql/*/ | tail -1)"
elif [[ $CHECK_ONLY == 1 ]]; then
  say "postgres: missing"
elif command -v apt-get >/dev/null; then
  SUDO=""; [[ $(id -u) == 0 ]] || SUDO=sudo
  say "postgres: apt-get install postgresql (LiteLLM's database)"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null ||
    say "postgres: install failed (the lane reports litellm-keys as not measured)"
else
  say "postgres: apt-get not found (the lane reports litellm-keys as not measured)"
fi

# --- Portkey gateway (npm) ---------------------------------------------------
portkey_versions() {  # "<gateway version> <@hono/node-server version>" as installed, or ""
  node -p "['@portkey-ai/gateway', '@hono/node-server'].map(p =>
    require('$PEERS/portkey/node_modules/' + p + '/package.json').version).join(' ')" 2>/dev/null
}
install_portkey() {
  local want="$PORTKEY_VERSION $HONO_NODE_SERVER_VERSION"
  [[ "$(portkey_versions)" == "$want" ]] && { say "portkey: gateway and @hono/node-server $want"; return; }
  [[ $CHECK_ONLY == 1 ]] && { say "portkey: missing"; return; }
  command -v npm >/dev/null || { say "portkey: npm not found, skipped (the lane reports it as not installed)"; return; }
  say "portkey: npm install @portkey-ai/gateway@$PORTKEY_VERSION, @hono/node-server@$HONO_NODE_SERVER_VERSION"
  rm -rf "$PEERS/portkey"
  mkdir -p "$PEERS/portkey"
  # `overrides` holds the gateway's own dependency on @hono/node-server to 1.13.x.
  cat > "$PEERS/portkey/package.json" <<EOF
{"name": "tollgate-bench-portkey", "private": true,
 "dependencies": {"@portkey-ai/gateway": "$PORTKEY_VERSION", "@hono/node-server": "$HONO_NODE_SERVER_VERSION"},
 "overrides": {"@hono/node-server": "$HONO_NODE_SERVER_VERSION"}}
EOF
  npm install --no-audit --no-fund --prefix "$PEERS/portkey" >/dev/null ||
    { say "portkey: npm install failed (the lane reports it as not installed)"; rm -rf "$PEERS/portkey"; }
}
install_portkey

# --- Envoy AI Gateway: only where already installed ----------------------------
if command -v aigw >/dev/null || [[ -x "$PEERS/aigw/aigw" ]]; then
  say "aigw: found ($(command -v aigw || echo "$PEERS/aigw/aigw"))"
else
  say "aigw: not installed (the Go module proxy here refuses its module)"
fi
exit 0
