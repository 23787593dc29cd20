#!/usr/bin/env bash
# Builds the proxy-wasm filter with the target scripts/bootstrap.sh chose
# (.tools/wasm.env) and copies it to build/tollgate_filter.wasm, the path
# envoy.yaml loads; and the bench's do-nothing filter (filters/null) to
# build/tollgate_null_filter.wasm.
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
cargo build -p tollgate-filter -p tollgate-null-filter --target "$WASM_TARGET" --profile wasm ${WASM_CARGO_FLAGS:-}
mkdir -p build
for name in tollgate_filter tollgate_null_filter; do
  cp "target/$WASM_TARGET/wasm/$name.wasm" "build/$name.wasm"
  echo "build-wasm: build/$name.wasm ($(stat -c %s "build/$name.wasm") bytes, $WASM_TARGET)"
done
