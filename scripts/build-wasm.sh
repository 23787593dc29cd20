#!/usr/bin/env bash
# Builds the proxy-wasm filter with the target scripts/bootstrap.sh chose
# (.tools/wasm.env) and copies it to build/tollgate_filter.wasm, the path
# envoy.yaml loads.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[[ -f .tools/wasm.env ]] || scripts/bootstrap.sh
# shellcheck disable=SC1091
source .tools/wasm.env
export PATH="$HOME/.cargo/bin:$PATH"
if [[ -n "${WASM_CARGO_ENV:-}" ]]; then
  eval "export $WASM_CARGO_ENV"
fi
# shellcheck disable=SC2086
cargo build -p tollgate-filter --target "$WASM_TARGET" --profile wasm ${WASM_CARGO_FLAGS:-}
mkdir -p build
cp "target/$WASM_TARGET/wasm/tollgate_filter.wasm" build/tollgate_filter.wasm
echo "build-wasm: build/tollgate_filter.wasm ($(stat -c %s build/tollgate_filter.wasm) bytes, $WASM_TARGET)"
