#!/usr/bin/env python3
"""Start, watch and stop the Tollgate stack (Redis, mock-llm, authz-service, Envoy).

One implementation for every caller:

    stack.py run            foreground; Ctrl-C stops everything    (make run)
    stack.py up             the same in the background, returns when healthy (make up)
    stack.py down           stop what `up` (or `run`) started       (make down)
    stack.py status         show what `up` started
    stack.py rotate         apply new provider keys: Envoy hot restart (make rotate-keys)

`--providers real` (make run TG_PROVIDERS=real) sends every provider to its
real host over TLS instead of mock-llm: envoy.yaml rendered by
scripts/real_providers.py from deploy/k8s/providers.yaml, keys from the
usual variables (OPENAI_API_KEY, ...) in the environment or
config/provider-keys.env; providers without a key are left out and named.

The e2e tests and the benchmarks import `Stack` and start it on free ports.
Ports come from config/ports.env; envoy.yaml is rendered with the ports moved
when they differ from the defaults (the file itself is never edited).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
DEMO_KEY = "tg-demo-key"
COMPONENTS = ("redis", "mock", "authz", "envoy")
# Ports of config/ports.env that the stack connects to but never listens
# on: the demo MCP server (tests/mcp_server.py) runs there, started by
# whoever wants it, before the stack or after.
UPSTREAM_PORTS = ("TG_MCP_DEMO_PORT",)
PROVIDER_MODES = ("mock", "real")
# Envoy hot restart (make run / make up, for `make rotate-keys`): the old
# Envoy drains its connections over DRAIN_SECONDS (HTTP/1.1 answers get
# `connection: close`, HTTP/2 connections a GOAWAY) and is stopped
# PARENT_SHUTDOWN_SECONDS after the new one started: an answer still
# streaming from it then is cut, so this bounds the longest stream a
# rotation keeps.
DRAIN_SECONDS = 5
PARENT_SHUTDOWN_SECONDS = 120


PROVIDER_KEYS = ROOT / "config" / "provider-keys.env"

# Envoy runs with glibc's own rseq registration off. glibc (2.35 and later)
# registers every thread's rseq area, which leaves none for Envoy's tcmalloc:
# without it tcmalloc has no per-CPU caches and keeps a cache per thread
# instead, and the threads that compile the Wasm module at start (Envoy's main
# thread, V8's worker) hold ~10 MB of freed memory in theirs for good. With
# the tunable, tcmalloc's caches are per CPU, idle ones are drained, and the
# memory goes back to the system (bench/README.md, "The gateway against
# plain Envoy with the same route"). docker-compose.yml and the Kubernetes
# manifests set the same (checked by compose-check and k8s-check).
ENVOY_GLIBC_TUNABLE = "glibc.pthread.rseq=0"


def has_envoy_tunable(tunables: str) -> bool:
    """Whether a GLIBC_TUNABLES value carries ENVOY_GLIBC_TUNABLE (what
    compose-check and k8s-check require of a shipped Envoy)."""
    return ENVOY_GLIBC_TUNABLE in tunables.split(":")


def with_envoy_tunable(tunables: str | None) -> str:
    """GLIBC_TUNABLES for Envoy: the caller's, plus rseq off unless the
    caller already chose a glibc.pthread.rseq value."""
    chosen = [t for t in (tunables or "").split(":") if t]
    if not any(t.split("=", 1)[0] == "glibc.pthread.rseq" for t in chosen):
        chosen.append(ENVOY_GLIBC_TUNABLE)
    return ":".join(chosen)


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines; blank lines and lines starting with # are skipped."""
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip()
    return values


def read_ports(path: Path = ROOT / "config" / "ports.env") -> dict[str, int]:
    """config/ports.env (comments allowed after a value too)."""
    return {k: int(v.split("#", 1)[0]) for k, v in read_env_file(path).items()}


def provider_key_env(path: Path = PROVIDER_KEYS) -> dict[str, str]:
    """The provider secrets for Envoy's environment: the key file, each value
    overridable by a variable of the same name already in the environment."""
    if not path.exists():
        return {}
    return {k: os.environ.get(k, v) for k, v in read_env_file(path).items()}


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (0600), whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


DEFAULT_PORTS = read_ports()


def configured_ports() -> dict[str, int]:
    """The defaults of config/ports.env, each overridable by an environment
    variable of the same name (e.g. TG_GATEWAY_PORT=8081 make run)."""
    return {k: int(os.environ.get(k, v)) for k, v in DEFAULT_PORTS.items()}


def free_ports() -> dict[str, int]:
    """A fresh loopback port for every entry of config/ports.env."""
    socks, ports = [], {}
    for name in DEFAULT_PORTS:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports[name] = s.getsockname()[1]
    for s in socks:
        s.close()
    return ports


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


USAGE_TOKEN_PATH = "/etc/tollgate/usage/token"  # as in envoy.yaml, compose and Kubernetes


def render_envoy_config(src: Path | str, ports: dict[str, int], usage_token: Path | None = None,
                        otlp_endpoint: str | None = None) -> str:
    """envoy.yaml (a path, or the config's text) with every default port
    replaced by the chosen one, the usage token read from `usage_token`, and
    OpenTelemetry tracing added when an OTLP/HTTP endpoint is given."""
    text = src.read_text() if isinstance(src, Path) else src
    mapping = {str(DEFAULT_PORTS[k]): str(v) for k, v in ports.items()}
    text = re.sub(r"(port_value:\s*)(\d+)", lambda m: m.group(1) + mapping.get(m.group(2), m.group(2)), text)
    if usage_token is not None:
        text = text.replace(f"filename: {USAGE_TOKEN_PATH}", f"filename: {usage_token}")
    return with_tracing(text, otlp_endpoint) if otlp_endpoint else text


# Span attributes (OpenTelemetry GenAI semantic conventions) read from the
# filter state the Wasm filter sets (filters/README.md, "Metrics, traces and
# the access log"). Envoy leaves out a tag whose value is empty.
GEN_AI_TAGS = {
    "gen_ai.operation.name": "wasm.tollgate.operation",
    "gen_ai.provider.name": "wasm.tollgate.provider",
    "gen_ai.request.model": "wasm.tollgate.model",
    "gen_ai.usage.input_tokens": "wasm.tollgate.input_tokens",
    "gen_ai.usage.output_tokens": "wasm.tollgate.output_tokens",
    "tollgate.usage.cached_tokens": "wasm.tollgate.cached_tokens",
    "tollgate.tenant": "wasm.tollgate.tenant",
    "tollgate.key_id": "wasm.tollgate.key_id",
}


# MCP routes: the OpenTelemetry semantic conventions for MCP (Development
# status: mcp.method.name, mcp.session.id, mcp.protocol.version,
# jsonrpc.request.id, gen_ai.tool.name; gen_ai.operation.name is
# execute_tool for a tools/call, set by the Wasm filter) from what Envoy's
# MCP filter read and the client's headers, and the gateway's own facts.
MCP_TAGS = {
    "mcp.method.name": "%DYNAMIC_METADATA(envoy.filters.http.mcp:method):64%",
    "gen_ai.tool.name": "%DYNAMIC_METADATA(envoy.filters.http.mcp:params:name):64%",
    "jsonrpc.request.id": "%DYNAMIC_METADATA(envoy.filters.http.mcp:id):64%",
    "mcp.session.id": "%REQ(mcp-session-id):128%",
    "mcp.protocol.version": "%REQ(mcp-protocol-version):32%",
    "tollgate.mcp.server": "%FILTER_STATE(wasm.tollgate.mcp_server:PLAIN)%",
    "tollgate.mcp.outcome": "%FILTER_STATE(wasm.tollgate.mcp_outcome:PLAIN)%",
}


def with_tracing(text: str, endpoint: str) -> str:
    """Envoy config text with the OpenTelemetry tracer on, exporting every
    request's span over OTLP/HTTP to `endpoint` (http://host:port[/path];
    the path defaults to /v1/traces)."""
    import urllib.parse

    import yaml

    url = urllib.parse.urlsplit(endpoint)
    if url.scheme != "http" or not url.hostname or not url.port:
        raise ValueError(f"OTLP endpoint must be http://host:port[/path], got {endpoint!r}")
    cfg = yaml.safe_load(text)
    static = cfg["static_resources"]
    static["clusters"].append({
        "name": "tollgate_otlp", "type": "STRICT_DNS", "connect_timeout": "1s",
        "load_assignment": {"cluster_name": "tollgate_otlp", "endpoints": [{"lb_endpoints": [
            {"endpoint": {"address": {"socket_address": {"address": url.hostname, "port_value": url.port}}}}]}]},
    })
    tracing = {
        "random_sampling": {"value": 100},
        "custom_tags": [{"tag": tag, "value": f"%FILTER_STATE({state}:PLAIN)%"} for tag, state in GEN_AI_TAGS.items()]
        + [{"tag": tag, "value": value} for tag, value in MCP_TAGS.items()],
        "provider": {"name": "envoy.tracers.opentelemetry", "typed_config": {
            "@type": "type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig",
            "service_name": "tollgate",
            "http_service": {
                "http_uri": {"uri": url.geturl() if url.path not in ("", "/") else f"{endpoint.rstrip('/')}/v1/traces",
                             "cluster": "tollgate_otlp", "timeout": "2s"},
            },
        }},
    }
    for listener in static["listeners"]:
        for chain in listener["filter_chains"]:
            for f in chain["filters"]:
                if f["name"] == "envoy.filters.network.http_connection_manager":
                    f["typed_config"]["tracing"] = tracing
                    # Envoy samples by the request id: without one no request is traced.
                    f["typed_config"]["generate_request_id"] = True
    return yaml.safe_dump(cfg, sort_keys=False)


def write_usage_token(path: Path) -> Path:
    """A fresh random token for this run, readable by its owner only: the
    usage token, shared by Envoy (which sends it) and authz-service (which
    requires it), and the admin API's token (authz-service and whoever runs
    `tollgate-authz keys`)."""
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return path


def tool(name: str) -> str:
    """Path of a tool the bootstrap installed, or the one on PATH."""
    for candidate in (ROOT / ".tools" / "bin" / name, ROOT / ".venv" / "bin" / name):
        if candidate.exists():
            return str(candidate)
    found = shutil.which(name)
    if not found:
        raise SystemExit(f"stack: {name} not found; run `make bootstrap`")
    return found


def http_get(url: str, timeout: float = 1.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def redis_ping(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
        s.sendall(b"PING\r\n")
        return s.recv(16).startswith(b"+PONG")


def _die_with_parent():
    """Child side of Popen: get SIGTERM if the harness dies, so nothing is orphaned."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Stack:
    run_dir: Path
    ports: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_PORTS))
    policy: Path = ROOT / "config" / "policy.yaml"
    mock_config: Path = ROOT / "config" / "mock-llm.yaml"
    envoy_config: Path = ROOT / "envoy.yaml"
    envoy_concurrency: int = 2
    components: tuple[str, ...] = COMPONENTS
    detached: bool = False
    # Extra arguments for `tollgate-authz serve`; the tests raise the Redis
    # timeout so a loaded CI machine does not turn into fail-open decisions.
    authz_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    # OTLP/HTTP collector (http://host:port): turns OpenTelemetry tracing on.
    otlp_endpoint: str | None = None
    # Provider secrets passed to Envoy only (config/provider-keys.env).
    provider_keys: Path = PROVIDER_KEYS
    # An external Redis or Redis Cluster for authz-service (`redis://…`,
    # `redis+cluster://h:p,…`); leave "redis" out of `components` then.
    redis_url: str | None = None
    # Ports in `ports` that another stack's parts serve and this one only
    # uses (a second gateway on the first one's Redis and mock): not
    # required to be free at start.
    shared_ports: tuple[str, ...] = ()
    # "mock": envoy.yaml as written, every provider served by mock-llm.
    # "real": the real providers over TLS (scripts/real_providers.py), keys
    # from the environment, `env` and `provider_keys`.
    providers: str = "mock"
    # Tests only: changes the real-provider config before it is written
    # (pointing it at local stand-ins).
    envoy_patch: Callable[[dict], None] | None = None
    # Envoy with a base id and restart epochs, so `rotate_envoy` can hot
    # restart it; otherwise --disable-hot-restart.
    hot_restart: bool = False
    drain_seconds: int = DRAIN_SECONDS
    parent_shutdown_seconds: int = PARENT_SHUTDOWN_SECONDS
    epoch: int = 0
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    # Envoys replaced by a hot restart, draining until they exit by themselves.
    draining: list = field(default_factory=list)
    # Real providers: provider → the variable its key comes from, and
    # provider → why it was left out (set when Envoy's config is rendered).
    live: dict[str, str] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)

    # -- addresses -----------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['TG_GATEWAY_PORT']}/v1"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['TG_ADMIN_PORT']}"

    @property
    def mock_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['TG_MOCK_PORT']}"

    @property
    def usage_token_path(self) -> Path:
        return self.run_dir / "usage-token"

    @property
    def admin_token_path(self) -> Path:
        """The admin API's token for this run (`tollgate-authz keys --admin-token-file`)."""
        return self.run_dir / "admin-token"

    @property
    def authz_admin_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['TG_AUTHZ_ADMIN_PORT']}"

    @property
    def authz_http_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['TG_AUTHZ_HTTP_PORT']}"

    # -- processes -----------------------------------------------------------
    def command(self, name: str) -> list[str]:
        p = self.ports
        if name == "redis":
            # Budgets survive a Redis restart: append-only file, fsync every
            # second (a crash loses at most the last second of bucket writes).
            data = self.run_dir / "redis"
            data.mkdir(parents=True, exist_ok=True)
            return [tool("redis-server"), "--port", str(p["TG_REDIS_PORT"]), "--bind", "127.0.0.1",
                    "--dir", str(data), "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
                    "--daemonize", "no"]
        if name == "mock":
            return [str(ROOT / "target" / "release" / "mock-llm"),
                    "--listen", f"127.0.0.1:{p['TG_MOCK_PORT']}", "--config", str(self.mock_config)]
        if name == "authz":
            return [str(ROOT / "target" / "release" / "tollgate-authz"), "serve",
                    "--policy", str(self.policy),
                    "--grpc-listen", f"127.0.0.1:{p['TG_AUTHZ_GRPC_PORT']}",
                    "--http-listen", f"127.0.0.1:{p['TG_AUTHZ_HTTP_PORT']}",
                    "--redis-url", self.redis_url or f"redis://127.0.0.1:{p['TG_REDIS_PORT']}",
                    "--usage-token-file", str(write_usage_token(self.usage_token_path)),
                    "--admin-listen", f"127.0.0.1:{p['TG_AUTHZ_ADMIN_PORT']}",
                    "--admin-token-file", str(write_usage_token(self.admin_token_path)), *self.authz_args]
        if name == "envoy":
            rendered = self.run_dir / "envoy.yaml"
            write_private(rendered, render_envoy_config(self.envoy_source(), self.ports,
                                                        write_usage_token(self.usage_token_path),
                                                        self.otlp_endpoint))
            return [tool("envoy"), "-c", str(rendered), *self.restart_args(),
                    "--concurrency", str(self.envoy_concurrency), "--log-level", "warn"]
        raise ValueError(name)

    def envoy_env(self) -> dict[str, str]:
        """Envoy's environment: the provider secrets of `provider_keys`, each
        overridden by the same variable in the environment, then `env`, and
        ENVOY_GLIBC_TUNABLE added to GLIBC_TUNABLES."""
        env = {**os.environ, **provider_key_env(self.provider_keys), **self.env}
        env["GLIBC_TUNABLES"] = with_envoy_tunable(env.get("GLIBC_TUNABLES"))
        return env

    def envoy_source(self) -> Path | str:
        """envoy.yaml, or for the real providers its render with the keys of now."""
        if self.providers == "mock":
            return self.envoy_config
        import real_providers
        import yaml

        try:
            config, self.live, self.left_out = real_providers.render_local(
                yaml.safe_load(self.envoy_config.read_text()), real_providers.load_yaml(real_providers.SETTINGS),
                self.envoy_env())
        except real_providers.RenderError as err:
            raise RuntimeError(str(err)) from None
        if self.envoy_patch is not None:
            self.envoy_patch(config)
        return real_providers.dump(config)

    @property
    def base_id_path(self) -> Path:
        return self.run_dir / "envoy-base-id"

    def restart_args(self) -> list[str]:
        if not self.hot_restart:
            return ["--disable-hot-restart"]
        args = ["--restart-epoch", str(self.epoch), "--drain-time-s", str(self.drain_seconds),
                "--parent-shutdown-time-s", str(self.parent_shutdown_seconds)]
        if self.epoch == 0:
            # A base id no other Envoy on the machine uses, kept for the epochs after.
            return [*args, "--use-dynamic-base-id", "--base-id-path", str(self.base_id_path)]
        return [*args, "--base-id", self.base_id_path.read_text().strip()]

    def rotate_envoy(self, timeout: float = 60.0) -> None:
        """Envoy hot restart with the provider keys (and, for the real
        providers, the render) of now. The new Envoy takes over the
        listening sockets and serves every new connection once healthy; the
        old one drains its connections for `drain_seconds`, finishing what
        they carry, and is stopped `parent_shutdown_seconds` after the start."""
        if not self.hot_restart:
            raise RuntimeError("Envoy runs without hot restart (--disable-hot-restart)")
        old = self.procs.get("envoy")
        self.epoch += 1
        try:
            self.start_component("envoy", timeout)
        except BaseException:
            self.epoch -= 1
            if old is not None:
                self.procs["envoy"] = old
            raise
        if old is not None:
            self.draining.append(old)

    def healthy(self, name: str) -> bool:
        p = self.ports
        try:
            if name == "redis":
                return redis_ping(p["TG_REDIS_PORT"])
            if name == "mock":
                return http_get(f"{self.mock_url}/_mock/health")[0] == 200
            if name == "authz":
                return http_get(f"{self.authz_http_url}/healthz")[0] == 200
            if name == "envoy" and self.hot_restart:
                # The admin port is handed over too: the new epoch must answer.
                status, body = http_get(f"{self.admin_url}/server_info")
                info = json.loads(body) if status == 200 else {}
                return info.get("state") == "LIVE" and info.get("command_line_options", {}).get(
                    "restart_epoch") == self.epoch
            if name == "envoy":
                return http_get(f"{self.admin_url}/ready")[0] == 200
        except OSError:
            return False
        raise ValueError(name)

    def log_path(self, name: str) -> Path:
        return self.run_dir / f"{name}.log"

    def start_component(self, name: str, timeout: float = 60.0) -> None:
        cmd = self.command(name)
        if not Path(cmd[0]).exists():
            raise RuntimeError(f"{name}: {cmd[0]} is missing; run `make build`")
        log = open(os.open(self.log_path(name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
        self.procs[name] = proc = subprocess.Popen(
            cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env=self.envoy_env() if name == "envoy" else {**os.environ, **self.env}, start_new_session=True,
            preexec_fn=None if self.detached else _die_with_parent)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.tail(name)}")
            if self.healthy(name):
                return
            time.sleep(0.05)
        raise RuntimeError(f"{name} not healthy after {timeout:.0f}s:\n{self.tail(name)}")

    def stop_component(self, name: str, grace: float = 5.0) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def start(self) -> "Stack":
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir.chmod(0o700)  # logs and rendered configs: the owner's only
        for name in self.components:
            self.log_path(name).unlink(missing_ok=True)
        busy = [f"{k}={v}" for k, v in self.ports.items()
                if k not in UPSTREAM_PORTS and k not in self.shared_ports and port_in_use(v)]
        if busy:
            raise RuntimeError(f"ports already in use: {', '.join(busy)} "
                               "(a detached Tollgate? `make down` stops it)")
        try:
            for name in self.components:
                self.start_component(name)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for name in reversed(COMPONENTS):
            self.stop_component(name)
        for proc in self.draining:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.draining:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.draining.clear()

    def tail(self, name: str, lines: int = 60) -> str:
        path = self.log_path(name)
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def dump_logs(self, out=sys.stderr) -> None:
        for name in self.components:
            print(f"\n===== {name} log ({self.log_path(name)}) =====\n{self.tail(name, 200)}", file=out)

    def dead(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() is not None]


def free_cluster_port() -> int:
    """A loopback port P such that P and P + 10000 (its cluster bus) are free."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 < 65536 and not port_in_use(port) and not port_in_use(port + 10000):
            return port
    raise RuntimeError("no free port pair for a Redis Cluster node")


def redis_cli(port: int, *args: str, timeout: float = 5.0) -> str:
    out = subprocess.run([tool("redis-cli"), "-h", "127.0.0.1", "-p", str(port), *args],
                         capture_output=True, text=True, timeout=timeout)
    return out.stdout


@dataclass
class RedisCluster:
    """A local Redis Cluster on loopback made with redis-cli: `masters`
    masters with `replicas` replicas each, append-only files like the
    single Redis, and a short `node_timeout_ms` so a killed master fails over
    to its replica in about that long."""
    run_dir: Path
    masters: int = 3
    replicas: int = 1
    node_timeout_ms: int = 1000
    procs: dict[int, subprocess.Popen] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """authz-service's --redis-url for this cluster (any node is a seed)."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.procs)

    def start(self) -> "RedisCluster":
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir.chmod(0o700)
        try:
            for _ in range(self.masters * (1 + self.replicas)):
                self.start_node(free_cluster_port())
            out = subprocess.run(
                [tool("redis-cli"), "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.procs),
                 "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                capture_output=True, text=True, timeout=60)
            if out.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed:\n{out.stdout}{out.stderr}")
            self.wait(lambda: all(self.state(p) == "ok" and self.replicas_linked(p) for p in self.procs),
                      30, "cluster never reported ok with every replica linked")
        except BaseException:
            self.stop()
            raise
        return self

    def start_node(self, port: int) -> None:
        data = self.run_dir / str(port)
        data.mkdir(exist_ok=True)
        log = open(os.open(data / "redis.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
        self.procs[port] = proc = subprocess.Popen(
            [tool("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
             "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
             "--cluster-node-timeout", str(self.node_timeout_ms),
             # A replica takes over however long it has been cut off from its
             # master: the test kills masters on purpose.
             "--cluster-replica-validity-factor", "0",
             "--save", "", "--appendonly", "yes", "--appendfsync", "everysec", "--daemonize", "no"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        log.close()
        self.wait(lambda: proc.poll() is None and redis_ping(port), 10, f"redis node {port} did not start")

    @staticmethod
    def wait(cond, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if cond():
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(what)

    def state(self, port: int) -> str:
        """cluster_state as `port` reports it (ok, fail), or "" if it does not answer."""
        m = re.search(r"cluster_state:(\w+)", redis_cli(port, "CLUSTER", "INFO", timeout=2))
        return m.group(1) if m else ""

    def nodes(self, port: int) -> list[dict]:
        """CLUSTER NODES as seen by `port`: port, flags, master id, slots."""
        rows = []
        for line in redis_cli(port, "CLUSTER", "NODES", timeout=2).splitlines():
            f = line.split()
            if len(f) < 8:
                continue
            rows.append({"id": f[0], "port": int(f[1].split("@")[0].rsplit(":", 1)[1]),
                         "flags": set(f[2].split(",")), "master": f[3], "slots": f[8:]})
        return rows

    def replicas_linked(self, port: int) -> bool:
        rows = self.nodes(port)
        return sum("slave" in r["flags"] for r in rows) == self.masters * self.replicas

    def master_of(self, key: str, seen_from: int | None = None) -> int:
        """Port of the master that serves `key`'s slot."""
        seen_from = seen_from or next(iter(self.alive()))
        slot = int(redis_cli(seen_from, "CLUSTER", "KEYSLOT", key).strip())
        for r in self.nodes(seen_from):
            if "master" not in r["flags"] or "fail" in r["flags"]:
                continue
            for rng in r["slots"]:
                lo, _, hi = rng.partition("-")
                if rng[0].isdigit() and int(lo) <= slot <= int(hi or lo):
                    return r["port"]
        raise RuntimeError(f"no live master serves slot {slot}")

    def alive(self) -> list[int]:
        return [p for p, proc in self.procs.items() if proc.poll() is None]

    def kill(self, port: int) -> None:
        """SIGKILL one node: a crash, nothing flushed on the way out."""
        proc = self.procs[port]
        proc.kill()
        proc.wait()

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# -- run, up, down, status, rotate ---------------------------------------------
DEFAULT_RUN_DIR = ROOT / ".run" / "default"
# `make run` and `make up` run one controller process (this script's `run`,
# in the foreground or, for `up`, in the background) that starts every
# component and stays their parent: Envoy with hot restart terminates itself
# when the process that started it exits. `rotate` asks the controller,
# over a Unix socket in the run dir (mode 0700), for a hot restart with the
# key variables of the `rotate` command's environment.
CONTROL_SOCKET = "control.sock"
AWS_AND_AZURE_VARS = ("AZURE_OPENAI_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_REGION", "AWS_DEFAULT_REGION",
                      "AWS_SESSION_TOKEN")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


# <run dir>/pids.json, written by the controller once the stack is healthy:
# the pid of each component, the Envoys still draining after a rotation,
# the controller's pid and the banner. Never a secret.
def read_state(run_dir: Path) -> dict | None:
    path = run_dir / "pids.json"
    try:
        return json.loads(path.read_text()) if path.exists() else None
    except ValueError:
        return None


def write_state(run_dir: Path, stack: Stack, text: str) -> None:
    state = {name: proc.pid for name, proc in stack.procs.items()}
    state["envoy_draining"] = [proc.pid for proc in stack.draining if proc.poll() is None]
    state["controller"] = os.getpid()
    state["epoch"] = stack.epoch
    state["banner"] = text
    tmp = run_dir / "pids.json.tmp"
    write_private(tmp, json.dumps(state, indent=1))
    tmp.replace(run_dir / "pids.json")


def _stop_pid(pid: int, what: str, grace: float = 5.0) -> None:
    if not _alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    for _ in range(int(grace / 0.05)):
        if not _alive(pid):
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
    print(f"stack: stopped {what} (pid {pid})")


def down(run_dir: Path) -> int:
    state = read_state(run_dir)
    if state is None:
        print("stack: nothing to stop")
        return 0
    controller = state.get("controller")
    if controller and _alive(controller):
        # It stops its own processes, Envoy last.
        _stop_pid(controller, "the stack's controller", grace=60)
    for pid in state.get("envoy_draining", []):
        _stop_pid(pid, "a draining envoy")
    for name in reversed(COMPONENTS):
        pid = state.get(name)
        if pid:
            _stop_pid(pid, name)
    (run_dir / "pids.json").unlink(missing_ok=True)
    return 0


def key_variables(provider_keys: Path = PROVIDER_KEYS) -> set[str]:
    """Every variable a provider key (or its endpoint) may come from."""
    import real_providers

    names = set(read_env_file(provider_keys)) if provider_keys.exists() else set()
    for ps in real_providers.load_yaml(real_providers.SETTINGS)["providers"].values():
        names.update(ps.get("key_env") or [])
    return names | set(AWS_AND_AZURE_VARS)


def rotate(run_dir: Path, timeout: float = 120.0) -> int:
    """`make rotate-keys`: ask the running stack's controller for an Envoy
    hot restart with the provider keys of now: config/provider-keys.env read
    again, the key variables set here overriding it."""
    state = read_state(run_dir)
    if state is None or not _alive(state.get("controller", 0)):
        print("stack: no running stack here (`make up` or `make run` starts one)", file=sys.stderr)
        return 1
    env = {k: v for k, v in os.environ.items() if k in key_variables()}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(run_dir / CONTROL_SOCKET))
        sock.sendall(json.dumps({"action": "rotate", "env": env}).encode() + b"\n")
        reply = json.loads(sock.makefile().readline() or '{"ok": false, "message": "no answer"}')
    print(reply["message"], file=sys.stdout if reply["ok"] else sys.stderr)
    return 0 if reply["ok"] else 1


def serve_rotation(stack: Stack, request: dict) -> dict:
    """The controller's side of `rotate`."""
    draining = [p for p in stack.draining if p.poll() is None]
    if draining:
        return {"ok": False, "message": (
            f"stack: the Envoy replaced by the previous rotation (pid {draining[0].pid}) is still finishing its "
            f"requests; it exits at most {stack.parent_shutdown_seconds} s after that rotation: retry then")}
    old_env, old = dict(stack.env), stack.procs["envoy"].pid
    stack.env.update({k: v for k, v in request.get("env", {}).items() if k in key_variables(stack.provider_keys)})
    t0 = time.monotonic()
    try:
        stack.rotate_envoy()
    except RuntimeError as err:
        stack.env = old_env
        return {"ok": False, "message": f"stack: rotation failed; the running Envoy (pid {old}) keeps serving "
                                        f"with the keys it had: {err}"}
    lines = [f"stack: keys applied: Envoy epoch {stack.epoch} (pid {stack.procs['envoy'].pid}) serves every new "
             f"connection (ready in {time.monotonic() - t0:.1f} s); the old one (pid {old}) finishes its "
             f"requests, drains its connections for {stack.drain_seconds} s and exits within "
             f"{stack.parent_shutdown_seconds} s"]
    if stack.providers == "real":
        lines.append(providers_line(stack))
    return {"ok": True, "message": "\n".join(lines)}


def providers_line(stack: Stack) -> str:
    if stack.providers == "mock":
        return "  providers mock-llm serves every provider (`make run TG_PROVIDERS=real` for the real ones)"
    lines = ["  providers " + ", ".join(f"{name} ({var})" for name, var in stack.live.items())
             + " (real, over TLS)"]
    for name, why in stack.left_out.items():
        lines.append(f"  left out {name}: {why}")
    return "\n".join(lines)


def example_model(stack: Stack) -> str:
    if stack.providers == "mock" or "openai" in stack.live:
        return "openai/gpt-4o-mini"
    import yaml

    from plugin_config import plugin_config
    cfg = plugin_config(yaml.safe_load((stack.run_dir / "envoy.yaml").read_text()))
    name = next(iter(stack.live))
    return f"{name}/{next(iter(cfg['providers'][name]['models']))}"


def banner(stack: Stack) -> str:
    return f"""
Tollgate is up.
  gateway   {stack.base_url}   (OpenAI-compatible)
  demo key  {DEMO_KEY}
  admin     {stack.admin_url}/stats/prometheus
  keys API  {stack.authz_admin_url}/admin/keys   (token: {stack.admin_token_path})
  logs      {stack.run_dir}/
{providers_line(stack)}

  curl -s {stack.base_url}/chat/completions -H 'Authorization: Bearer {DEMO_KEY}' \\
    -H 'content-type: application/json' \\
    -d '{{"model":"{example_model(stack)}","messages":[{{"role":"user","content":"hi"}}]}}'
"""


def up(args) -> int:
    """Start the controller in the background; return once the stack is
    healthy (its banner printed) or the controller gave up."""
    args.run_dir.mkdir(parents=True, exist_ok=True)
    args.run_dir.chmod(0o700)
    log_path = args.run_dir / "stack.log"
    log = open(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "ab")
    argv = ["--run-dir", str(args.run_dir), "--concurrency", str(args.concurrency), "--providers", args.providers,
            "--drain-seconds", str(args.drain_seconds), "--parent-shutdown-seconds", str(args.parent_shutdown_seconds)]
    proc = subprocess.Popen([sys.executable, __file__, "run", *argv], stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        state = read_state(args.run_dir)
        if state and state.get("controller") == proc.pid:
            print(state["banner"], flush=True)
            print("Detached: `make down` stops it, `make rotate-keys` applies new provider keys.")
            return 0
        if proc.poll() is not None:
            print(log_path.read_text(errors="replace"), file=sys.stderr)
            return 1
        time.sleep(0.1)
    proc.terminate()
    print(f"stack: not healthy after 300 s; see {log_path}", file=sys.stderr)
    return 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["run", "up", "down", "status", "rotate"])
    parser.add_argument("--concurrency", type=int, default=2, help="Envoy worker threads")
    parser.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR, help="logs, rendered config, pids")
    parser.add_argument("--providers", choices=PROVIDER_MODES, default=os.environ.get("TG_PROVIDERS") or "mock",
                        help="mock: mock-llm serves every provider (default); real: the real providers over TLS")
    parser.add_argument("--drain-seconds", type=int, default=DRAIN_SECONDS,
                        help="a rotation: how long the old Envoy drains its connections")
    parser.add_argument("--parent-shutdown-seconds", type=int, default=PARENT_SHUTDOWN_SECONDS,
                        help="a rotation: when the old Envoy is stopped (cutting what it still streams)")
    args = parser.parse_args()

    if args.action == "down":
        return down(args.run_dir)
    if args.action == "rotate":
        return rotate(args.run_dir)
    if args.action == "status":
        state = read_state(args.run_dir) or {}
        for name in COMPONENTS:
            pid = state.get(name)
            if state and not pid:
                continue  # not part of this stack (mock-llm with the real providers)
            print(f"{name:6} {'running pid ' + str(pid) if pid and _alive(pid) else 'stopped'}")
        return 0

    state = read_state(args.run_dir)
    if state and state.get("controller") and _alive(state["controller"]):
        print(f"stack: a stack already runs from {args.run_dir} (controller pid {state['controller']}); "
              "`make down` stops it", file=sys.stderr)
        return 1
    if state:  # left by a stack that did not stop cleanly
        down(args.run_dir)
    if args.action == "up":
        return up(args)
    return run(args)


def run(args) -> int:
    """The controller: start the stack, watch it, serve rotations, stop it."""
    components = COMPONENTS if args.providers == "mock" else tuple(c for c in COMPONENTS if c != "mock")
    stack = Stack(run_dir=args.run_dir, ports=configured_ports(), envoy_concurrency=args.concurrency,
                  otlp_endpoint=os.environ.get("TOLLGATE_OTLP_ENDPOINT") or None,
                  components=components, providers=args.providers, hot_restart=True,
                  drain_seconds=args.drain_seconds, parent_shutdown_seconds=args.parent_shutdown_seconds)
    try:
        stack.start()
    except RuntimeError as err:
        print(f"stack: {err}", file=sys.stderr)
        return 1
    control_path = args.run_dir / CONTROL_SOCKET
    control_path.unlink(missing_ok=True)
    control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    control.bind(str(control_path))
    control_path.chmod(0o600)
    control.listen(4)
    control.settimeout(0.2)
    text = banner(stack)
    print(text, flush=True)
    write_state(args.run_dir, stack, text)

    stopping = False

    def on_signal(signum, _frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print("Ctrl-C stops it. `make rotate-keys` (another terminal) applies new provider keys.", flush=True)
    status = 0
    try:
        while not stopping:
            dead = stack.dead()
            if dead:
                say(f"stack: {', '.join(dead)} exited; stopping the rest")
                stack.dump_logs()
                status = 1
                break
            if any(proc.poll() is not None for proc in stack.draining):
                stack.draining = [proc for proc in stack.draining if proc.poll() is None]
                write_state(args.run_dir, stack, text)
            try:
                conn, _ = control.accept()
            except (socket.timeout, InterruptedError):
                continue
            with conn:
                conn.settimeout(10)
                try:
                    request = json.loads(conn.makefile().readline())
                    reply = serve_rotation(stack, request) if request.get("action") == "rotate" else \
                        {"ok": False, "message": "stack: unknown request"}
                except (OSError, ValueError) as err:
                    reply = {"ok": False, "message": f"stack: bad request: {err}"}
                say(reply["message"])
                write_state(args.run_dir, stack, text)
                try:
                    conn.sendall(json.dumps(reply).encode() + b"\n")
                except OSError:
                    pass
        say("\nstack: stopping...")
    finally:
        control.close()
        control_path.unlink(missing_ok=True)
        stack.stop()
        (args.run_dir / "pids.json").unlink(missing_ok=True)
    say("stack: stopped")
    return status


def say(msg: str) -> None:
    """Print, surviving a closed stdout (e.g. `make run | tee` after Ctrl-C)."""
    try:
        print(msg, file=sys.stderr, flush=True)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
