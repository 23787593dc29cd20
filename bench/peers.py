#!/usr/bin/env python3
"""Tollgate beside the gateways users would pick instead, in one run.

    peers.py full     every gateway: fixed rates, stepped maximum, Bifrost replica (make bench-peers)
    peers.py smoke    every gateway briefly, at a low rate (tests/test_bench_peers.py)

Each gateway runs as its docs recommend for production (one model, one
upstream key, logging at its production level, no telemetry, workers for 2
cores) in front of a fresh mock-llm, and gets the same OpenAI chat request,
non-streaming (`chat`) and streaming (`stream`), with the same fortio load:

    direct          fortio → mock-llm                                the latency baseline
    envoy           plain Envoy router, 2 workers                     the CPU baseline
    floor           Envoy + do-nothing Wasm filter + ext_authz → authz-null, 2 workers
                                                                      what the architecture costs before Tollgate's work
    tollgate        the whole gateway (Envoy 2 workers + authz-service + Redis), demo key
    litellm         LiteLLM proxy, gunicorn with 2 Uvicorn workers
    portkey         Portkey's open-source gateway (one Node process)
    aigw            Envoy AI Gateway standalone (`aigw run`), where installed
    tollgate-keys   Tollgate with a key that has rate limits and a money budget (part 2)
    litellm-keys    LiteLLM with its Postgres database and a virtual key with the same (part 2)

Gateway CPU per request is the user+system CPU of every process of that
gateway, each read with its whole process tree from /proc (Tollgate: Envoy,
authz-service and Redis; LiteLLM: gunicorn and its workers, and Postgres
with keys), over the requests served; peak RSS likewise, summed over the
trees. The peers live in .tools/peers/ (bench/install_peers.sh, pinned
versions); a peer that is not installed is reported as such with the
reason. Results go to bench/results/<time>-peers/ (summary.json, raw/,
REPORT-peers.md, peers.png).
Every load targets 127.0.0.1, is bounded in time, and every process started
is stopped at the end, also on failure.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

import bench as B
from stack import DEMO_KEY, Stack, _die_with_parent, free_ports, http_get, tool

PEERS_DIR = B.ROOT / ".tools" / "peers"
MOCK_KEY = "mock-openai-key-1"          # the one upstream key every gateway uses
BENCH_MONEY_KEY = "tg-bench-money"      # config/policy.yaml: demo's limits plus money budgets
MODES = ("chat", "stream")
ENVOY_WORKERS = 2                       # as `make run`; LiteLLM gets 2 workers too
LITELLM_WORKERS = 2

# Said in the report for every run: what cannot be measured here, and why.
CANNOT_INSTALL = {
    "bifrost": "its Go module is refused by the Go module proxy here, and its npm wrapper "
               "(@maximhq/bifrost) downloads the binary at run time from outside the package registries",
    "agentgateway": "published on no package registry this machine reaches (release binaries and "
                    "container images only)",
}
NO_VIRTUAL_KEYS = {
    "portkey": "Portkey's open-source gateway has no virtual keys, rate limits or budgets of its own: "
               "its `x-portkey-virtual-key` is resolved by Portkey's hosted control plane",
    "aigw": "Envoy AI Gateway's token rate limits are Envoy Gateway's global rate limiting, which needs "
            "Envoy's rate-limit service and its Redis deployed beside it, and its quota policy a rate-limit "
            "service that `aigw run` addresses by its Kubernetes name (envoy-ai-gateway-ratelimit."
            "envoy-gateway-system); `aigw run` alone starts neither",
}


@dataclass
class Plan:
    rates: list[float]
    seconds: float
    conns: int
    steps: list[float]
    step_seconds: float
    warmup_seconds: float
    replica_rates: list[float] = field(default_factory=list)
    replica_seconds: float = 0
    replica_sizes: tuple[int, ...] = ()
    # A fresh start of the gateway for each mode (the smoke starts each once).
    fresh_per_mode: bool = True
    # Each fixed rate runs at least this many requests (longer than `seconds`
    # at low rates), so that its p99 is not one of its two or three slowest
    # requests.
    min_requests: int = 0

    def rate_seconds(self, qps: float) -> float:
        return max(self.seconds, self.min_requests / qps)


PLANS = {
    "smoke": Plan(rates=[20], seconds=2, conns=2, steps=[], step_seconds=0, warmup_seconds=0, fresh_per_mode=False),
    # 25 requests/s is held by every gateway here (LiteLLM streams about 30 at
    # most on this machine), 100 and 400 by the faster ones; the steps and
    # the replica start low enough to find LiteLLM's ceiling.
    "full": Plan(rates=[25, 100, 400], seconds=10, conns=32, min_requests=1000,
                 steps=[25, 50, 100, 200, 400, 800, 1600, 3200, 6400, 12800], step_seconds=6, warmup_seconds=3,
                 replica_rates=[50, 500, 1000, 2500, 5000], replica_seconds=15, replica_sizes=(1370, 10320)),
}


# -- the gateways -------------------------------------------------------------
@dataclass
class Gateway:
    name: str
    what: str
    part: int                      # 1: as recommended for production; 2: with virtual keys
    procs: tuple[str, ...]         # its processes (each measured with its tree)
    model: str = "gpt-4o-mini"


GATEWAYS = [
    Gateway("direct", "fortio → mock-llm, no gateway", 1, ()),
    Gateway("envoy", f"plain Envoy 1.40 router, {ENVOY_WORKERS} workers", 1, ("envoy",)),
    # bench.py's `floor`: Tollgate's Envoy with a Wasm filter that does
    # nothing and ext_authz against an allow-everything service, no Redis.
    Gateway("floor", f"the floor: Envoy ({ENVOY_WORKERS} workers) + a do-nothing Wasm filter + ext_authz → "
            "authz-null (allows everything; no Redis)", 1, ("envoy", "authz")),
    Gateway("tollgate", f"Tollgate: Envoy ({ENVOY_WORKERS} workers) + Wasm filter + ext_authz → authz-service "
            "+ Redis, demo virtual key", 1, B.GATEWAY_PROCS, model="openai/gpt-4o-mini"),
    Gateway("litellm", f"LiteLLM proxy, gunicorn with {LITELLM_WORKERS} Uvicorn workers, master key", 1,
            ("litellm",)),
    Gateway("portkey", "Portkey gateway, one Node process, provider and key in headers", 1, ("portkey",)),
    Gateway("aigw", "Envoy AI Gateway standalone (`aigw run`): Envoy Gateway's control plane and the AI "
            "Gateway's ext_proc in one Go process, Envoy (a worker per core) as its child", 1, ("aigw",)),
    Gateway("tollgate-keys", "Tollgate, virtual key with rate limits and a money budget (tg-bench-money)", 2,
            B.GATEWAY_PROCS, model="openai/gpt-4o-mini"),
    Gateway("litellm-keys", f"LiteLLM proxy ({LITELLM_WORKERS} workers) with its Postgres database, a virtual "
            "key with rate limits and a budget", 2, ("litellm", "postgres")),
]


def litellm_bin() -> Path | None:
    path = PEERS_DIR / "litellm" / "bin" / "litellm"
    return path if path.exists() else None


def portkey_server() -> Path | None:
    path = PEERS_DIR / "portkey" / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"
    return path if path.exists() and shutil.which("node") else None


def aigw_bin() -> str | None:
    local = PEERS_DIR / "aigw" / "aigw"
    return str(local) if local.exists() else shutil.which("aigw")


def installed_versions() -> dict[str, str | None]:
    """What .tools/peers holds (the pins are in bench/install_peers.sh), and
    the `aigw` found."""
    versions: dict[str, str | None] = {"litellm": None, "portkey": None, "hono_node_server": None, "aigw": None}
    if aigw_bin():
        out = subprocess.run([aigw_bin(), "version"], capture_output=True, text=True, timeout=60)
        versions["aigw"] = out.stdout.strip().rpartition(": ")[2] or None
    engine = prisma_env().get("PRISMA_QUERY_ENGINE_BINARY")
    if engine:
        out = subprocess.run([engine, "--version"], capture_output=True, text=True, timeout=60)
        versions["prisma_engines"] = f"{out.stdout.strip()} ({engine})"
    if litellm_bin():
        out = subprocess.run([str(PEERS_DIR / "litellm" / "bin" / "python"), "-c",
                              "import importlib.metadata as m; print(m.version('litellm'))"],
                             capture_output=True, text=True, timeout=60)
        versions["litellm"] = out.stdout.strip() or None
    for key, pkg in (("portkey", "@portkey-ai/gateway"), ("hono_node_server", "@hono/node-server")):
        manifest = PEERS_DIR / "portkey" / "node_modules" / pkg / "package.json"
        if manifest.exists():
            versions[key] = json.loads(manifest.read_text())["version"]
    return versions


def not_installed() -> dict[str, str]:
    """Peer → why it is not measured in this run (not installed here)."""
    missing = {}
    if not litellm_bin():
        missing["litellm"] = "not installed: `make peers-install` puts litellm[proxy] 1.108.7 in .tools/peers/litellm"
    if not portkey_server():
        missing["portkey"] = ("not installed: `make peers-install` puts @portkey-ai/gateway 1.15.2 in "
                              ".tools/peers/portkey (needs node and npm)")
    if not aigw_bin():
        missing["aigw"] = ("not installed: the Go module proxy here refuses github.com/envoyproxy/ai-gateway; "
                           "`go install` it on a machine that can reach it (v1.1.0) and put `aigw` on PATH")
    missing.update(CANNOT_INSTALL)
    return missing


def not_measured_with_keys() -> dict[str, str]:
    """Peer → why it has no part-2 run here."""
    why = dict(NO_VIRTUAL_KEYS)
    reason = litellm_keys_missing() if litellm_bin() else "LiteLLM is not installed"
    if reason:
        why["litellm"] = reason
    return why


def connections(plan: Plan, qps: float) -> int:
    """fortio connections at a fixed rate or step: the plan's, fewer at low
    rates so each connection sends at least 4 requests a second (fortio
    paces each connection on its own and drops a connection's unfinished
    last interval, which at 32 connections and 25 requests/s is a fifth of
    the load)."""
    return max(2, min(plan.conns, int(qps // 4)))


def payload(model: str, stream: bool) -> str:
    body = dict(B.CHAT_OPENAI, model=model)
    if stream:
        body["stream"] = True
    return json.dumps(body)


def mock_config(run_dir: Path, latency_ms: int, answer_bytes: int) -> Path:
    """config/mock-llm.yaml, with every answer delayed and padded (the
    Bifrost replica) when asked: the same for every gateway, no header to forward."""
    doc = yaml.safe_load((B.ROOT / "config" / "mock-llm.yaml").read_text())
    doc["behavior"]["latency"] = {"dist": "fixed", "mean_ms": latency_ms, "sd_ms": 0}
    doc["behavior"]["response_bytes"] = answer_bytes
    run_dir.mkdir(parents=True, exist_ok=True)
    out = run_dir / "mock-llm.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


@dataclass
class Running:
    """A started gateway: where to send the request, with which headers, and
    the processes to measure."""
    url: str
    headers: dict[str, str]
    pids: dict[str, int]
    stack: Stack
    peer: subprocess.Popen | None = None
    log: Path | None = None
    startup_s: float = 0.0
    database: subprocess.Popen | None = None
    scratch: list[Path] = field(default_factory=list)

    def stop(self) -> None:
        if self.peer is not None and self.peer.poll() is None:
            # Its own process group (start_new_session): the workers go with it.
            os.killpg(self.peer.pid, signal.SIGTERM)
            try:
                self.peer.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.peer.pid, signal.SIGKILL)
                self.peer.wait()
        if self.peer is not None:
            try:  # workers a killed parent left behind, in the group we made
                os.killpg(self.peer.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.database is not None:
            stop_postgres(self.database)
        for path in self.scratch:
            shutil.rmtree(path, ignore_errors=True)
        self.stack.stop()

    def tail(self, lines: int = 60) -> str:
        if self.log is None or not self.log.exists():
            return "(no log)"
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def start(gw: Gateway, work: Path, tag: str, latency_ms: int = 0, answer_bytes: int = 0) -> Running:
    """The gateway and a fresh mock-llm (answers delayed and padded as asked)
    on free loopback ports; configs and logs in work/stacks/<tag>/."""
    t0 = time.monotonic()
    known = {sc.name: sc for sc in B.scenarios(MOCK_KEY)}
    if gw.name in ("tollgate", "tollgate-keys"):
        key = DEMO_KEY if gw.name == "tollgate" else BENCH_MONEY_KEY
        sc = replace(known["full"], name=tag, model=gw.model, headers={"authorization": f"Bearer {key}"})
    elif gw.name in ("envoy", "floor"):
        sc = replace(known[gw.name], name=tag)
    else:  # the mock alone; a peer is started in front of it below
        sc = replace(known["direct"], name=tag)
    run_dir = work / "stacks" / tag
    stack = B.start_stack(sc, work, mock_config=mock_config(run_dir, latency_ms, answer_bytes),
                          envoy_concurrency=ENVOY_WORKERS)
    pids = {n: p.pid for n, p in stack.procs.items()}
    if gw.name == "direct":
        return Running(f"{stack.mock_url}/v1/chat/completions", sc.headers, pids, stack,
                       startup_s=time.monotonic() - t0)
    if sc.envoy is not None:
        return Running(f"{stack.base_url}/chat/completions", sc.headers, pids, stack, startup_s=time.monotonic() - t0)
    database = None
    try:
        ports = free_ports()
        if gw.name == "litellm-keys":
            database = start_postgres(run_dir, ports["TG_REDIS_PORT"])
            pids["postgres"] = database.pid
        peer = peer_command(gw.name, ports, stack.mock_url, run_dir)
        log = run_dir / f"{gw.name}.log"
        since = log.stat().st_size if log.exists() else 0  # the log is appended to
        with open(log, "ab") as out:
            proc = subprocess.Popen(peer.argv, cwd=log.parent, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env=peer.env, start_new_session=True,
                                    preexec_fn=_die_with_parent)
        running = Running(f"http://127.0.0.1:{peer.port}/v1/chat/completions", peer.headers,
                          {**pids, gw.procs[0]: proc.pid}, stack, proc, log, database=database,
                          scratch=peer.scratch)
    except BaseException:
        if database is not None:
            stop_postgres(database)
        stack.stop()
        raise
    try:
        deadline = time.monotonic() + 300  # LiteLLM imports for a minute on a busy machine
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{gw.name} exited with {proc.returncode}:\n{running.tail()}")
            if peer.ready(log, since):
                break
            time.sleep(0.25)
        else:
            raise RuntimeError(f"{gw.name} not healthy after 300 s:\n{running.tail()}")
        if gw.name == "litellm-keys":
            running.headers = {"authorization": f"Bearer {litellm_key(peer)}"}
    except BaseException:
        running.stop()
        raise
    running.startup_s = time.monotonic() - t0
    return running


@dataclass
class PeerCommand:
    """How to start a peer and tell that it is ready: its health URL answers
    200, or (where it has none that waits for its proxy) its log says so."""
    argv: list[str]
    env: dict[str, str]
    headers: dict[str, str]
    port: int                      # where the chat requests go
    health_url: str = ""
    ready_line: str = ""
    scratch: list[Path] = field(default_factory=list)  # removed when it stops

    def ready(self, log: Path, since: int) -> bool:
        if self.ready_line:
            with open(log, "rb") as f:
                f.seek(since)
                return self.ready_line.encode() in f.read()
        try:
            return http_get(self.health_url, timeout=2)[0] == 200
        except OSError:
            return False


# `aigw run` without a config file listens on this port (its autoconfig).
AIGW_PORT = 1975


def aigw_data_home(run_dir: Path) -> tuple[Path, str]:
    """An AIGW_DATA_HOME where func-e finds this machine's Envoy under its
    own version (so `aigw run` downloads nothing), and that version."""
    envoy = Path(tool("envoy")).resolve()
    out = subprocess.run([str(envoy), "--version"], capture_output=True, text=True, timeout=60).stdout
    version = re.search(r"/(\d+\.\d+\.\d+)/", out).group(1)  # "…version: <sha>/1.40.0/Clean/…"
    home = run_dir / "aigw" / "data"
    target = home / "envoy-versions" / version / "bin" / "envoy"
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        target.symlink_to(envoy)
    return home, version


# -- LiteLLM's database (part 2) ----------------------------------------------
PRISMA_DIR = PEERS_DIR / "prisma"


def postgres_bindir() -> Path | None:
    """Debian's Postgres (bench/install_peers.sh), the newest there."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parts[-3]))
    return found[-1].parent if found else None


def prisma_env() -> dict[str, str]:
    """Where prisma-client-py finds Prisma's engines and keeps its caches:
    the engines named by PRISMA_*_ENGINE_BINARY, else those in
    .tools/peers/prisma/ if there, else none (it downloads them)."""
    env = {"PRISMA_HOME_DIR": str(PRISMA_DIR / "home"), "PRISMA_ENGINES_CHECKSUM_IGNORE_MISSING": "1"}
    for kind in ("query", "schema"):
        var = f"PRISMA_{kind.upper()}_ENGINE_BINARY"
        local = PRISMA_DIR / f"{kind}-engine"
        if os.environ.get(var):
            env[var] = os.environ[var]
        elif local.exists():
            env[var] = str(local)
    return env


def litellm_database_env(pg_port: int) -> dict[str, str]:
    venv_bin = str(PEERS_DIR / "litellm" / "bin")
    return {**prisma_env(), "DATABASE_URL": f"postgresql://postgres@127.0.0.1:{pg_port}/litellm",
            "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}"}


def litellm_keys_missing() -> str | None:
    """Why LiteLLM cannot run with keys here, or None. Generates the
    prisma client from LiteLLM's schema (as LiteLLM's image does at build
    time), which also proves that Prisma's engines can be had."""
    prisma = PEERS_DIR / "litellm" / "bin" / "prisma"
    if not litellm_bin() or not prisma.exists():
        return "not installed: `make peers-install` puts prisma-client-py into LiteLLM's venv"
    if postgres_bindir() is None:
        return "not installed: Postgres (`make peers-install` installs Debian's postgresql)"
    schema = next((PEERS_DIR / "litellm").glob("lib/python3*/site-packages/litellm/proxy/schema.prisma"))
    env = {**os.environ, **litellm_database_env(5432)}
    out = subprocess.run([str(prisma), "generate", f"--schema={schema}"], capture_output=True, text=True,
                         timeout=600, env=env, cwd=schema.parent)
    if out.returncode != 0:
        last = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()][-1:]
        return ("LiteLLM's virtual keys need its Postgres database, reached through prisma-client-py, whose "
                "CLI downloads Prisma's query and schema engines at first run from binaries.prisma.sh, which "
                f"is not a package registry (`prisma generate`: {last[0][:200] if last else out.returncode!r}); "
                "set PRISMA_QUERY_ENGINE_BINARY and PRISMA_SCHEMA_ENGINE_BINARY, or put them in "
                ".tools/peers/prisma/, where they cannot be downloaded")
    return None


def start_postgres(log_dir: Path, port: int) -> subprocess.Popen:
    """A fresh Postgres cluster on loopback (Debian's defaults, trust for the
    local user), with LiteLLM's database created. Its data lives in a
    directory of its own (as root, it runs as the `postgres` user, which may
    not enter the run's directories), removed by `stop_postgres`."""
    bindir = postgres_bindir()
    data = Path(tempfile.mkdtemp(prefix="tollgate-bench-pg-"))
    user = {} if os.getuid() else {"user": "postgres"}  # postgres refuses to run as root
    if user:
        shutil.chown(data, "postgres")
    try:
        subprocess.run([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync"],
                       check=True, capture_output=True, timeout=120, **user)
    except BaseException:
        shutil.rmtree(data, ignore_errors=True)
        raise
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / "postgres.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(data),
                                 "-c", "listen_addresses=127.0.0.1"], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent,
                                **user)
    proc.data_dir = data
    deadline = time.monotonic() + 60
    while subprocess.run([str(bindir / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)],
                         capture_output=True).returncode != 0:
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_postgres(proc)
            raise RuntimeError(f"postgres did not start: {log.read_text()[-2000:]}")
        time.sleep(0.2)
    subprocess.run([str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "litellm"],
                   check=True, capture_output=True, timeout=60)
    return proc


def stop_postgres(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)  # fast shutdown
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    shutil.rmtree(proc.data_dir, ignore_errors=True)


# The key each litellm-keys load uses: the limits of config/policy.yaml's
# tg-bench-money (never reached), a budget that resets every 30 days.
LITELLM_KEY = {"models": ["gpt-4o-mini"], "rpm_limit": 1_000_000, "tpm_limit": 10_000_000_000,
               "max_budget": 9_000_000, "budget_duration": "30d"}


def litellm_key(peer: PeerCommand) -> str:
    """A virtual key made with the master key (POST /key/generate)."""
    req = urllib.request.Request(f"http://127.0.0.1:{peer.port}/key/generate", data=json.dumps(LITELLM_KEY).encode(),
                                 headers={**peer.headers, "content-type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())["key"]


def peer_command(name: str, ports: dict[str, int], mock_url: str, run_dir: Path) -> PeerCommand:
    """argv, environment, request headers and readiness of a peer, each as
    its docs recommend for production, on free ports where it takes them."""
    port = ports["TG_GATEWAY_PORT"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LITELLM", "PORTKEY", "AIGW", "OPENAI"))}
    if name in ("litellm", "litellm-keys"):
        # docs.litellm.ai/docs/proxy/prod: a master key, no debug logs (LITELLM_LOG=ERROR,
        # set_verbose off, JSON logs); /docs/proxy/server_tuning: several workers in one
        # container under gunicorn; one per core here. The model cost map from the
        # package (no fetch at start), telemetry off.
        config = {
            "model_list": [{"model_name": "gpt-4o-mini", "litellm_params": {
                "model": "openai/gpt-4o-mini", "api_base": f"{mock_url}/v1",
                "api_key": "os.environ/BENCH_UPSTREAM_KEY"}}],
            "general_settings": {"master_key": "os.environ/LITELLM_MASTER_KEY"},
            "litellm_settings": {"set_verbose": False, "json_logs": True, "request_timeout": 600},
        }
        path = run_dir / "litellm.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        master = "sk-tollgate-bench-master"
        env.update({"BENCH_UPSTREAM_KEY": MOCK_KEY, "LITELLM_MASTER_KEY": master, "LITELLM_LOG": "ERROR",
                    "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY_DISABLED": "true",
                    "JSON_LOGS": "True"})
        argv = [str(litellm_bin()), "--config", str(path), "--host", "127.0.0.1", "--port", str(port),
                "--num_workers", str(LITELLM_WORKERS), "--run_gunicorn"]
        if name == "litellm-keys":
            # docs.litellm.ai/docs/proxy/virtual_keys: DATABASE_URL (Postgres); the proxy applies
            # its migrations at start with the prisma CLI from its venv.
            env.update(litellm_database_env(ports["TG_REDIS_PORT"]))
        return PeerCommand(argv, env, {"authorization": f"Bearer {master}"}, port,
                           health_url=f"http://127.0.0.1:{port}/health/liveliness")
    if name == "portkey":
        # NODE_ENV=production and --headless: no log console, no in-memory log stream.
        # The open-source gateway takes the provider, its host and key from headers.
        env.update({"NODE_ENV": "production"})
        argv = ["node", str(portkey_server()), "--headless", f"--port={port}"]
        headers = {"x-portkey-provider": "openai", "x-portkey-custom-host": f"{mock_url}/v1",
                   "authorization": f"Bearer {MOCK_KEY}"}
        return PeerCommand(argv, env, headers, port, health_url=f"http://127.0.0.1:{port}/")
    if name == "aigw":
        # aigw.envoyproxy.io/docs/cli/aigwrun: with no config file, `aigw run` configures one
        # OpenAI-compatible backend from OPENAI_BASE_URL and OPENAI_API_KEY (logging at
        # `error`, its access log on stdout, no OpenTelemetry exporter unless asked). Its
        # Envoy is this machine's, found by func-e under ENVOY_VERSION. Its directories
        # are the run's; its admin server takes a free port, its listener is fixed.
        data, version = aigw_data_home(run_dir)
        env.update({"OPENAI_API_KEY": MOCK_KEY, "OPENAI_BASE_URL": f"{mock_url}/v1", "ENVOY_VERSION": version,
                    "AIGW_DATA_HOME": str(data), "AIGW_CONFIG_HOME": str(run_dir / "aigw" / "config"),
                    "AIGW_STATE_HOME": str(run_dir / "aigw" / "state"),
                    # Its sockets live here: a short path (a Unix socket's is at most 107 bytes).
                    "AIGW_RUNTIME_DIR": tempfile.mkdtemp(prefix="tollgate-aigw-")})
        argv = [aigw_bin(), "run", f"--admin-port={ports['TG_ADMIN_PORT']}"]
        # Printed once its Envoy's admin says ready.
        return PeerCommand(argv, env, {}, AIGW_PORT, ready_line=f"listening on http://localhost:{AIGW_PORT}",
                           scratch=[Path(env["AIGW_RUNTIME_DIR"])])
    raise ValueError(name)


# -- the loads ----------------------------------------------------------------
def load(running: Running, gw: Gateway, body: str, qps: float, seconds: float, conns: int, out: Path,
         offset_ms: float = 0) -> dict:
    r = B.measure(running.pids, running.url, body, running.headers, qps, seconds, conns, out, offset_ms,
                  tree=True, gateway_procs=gw.procs)
    r["raw"] = str(out.relative_to(out.parent.parent))
    r["gateway_peak_rss_mb"] = round(sum(r["peak_rss_mb"].get(n, 0) for n in gw.procs), 1)
    return r


def run_gateway(gw: Gateway, plan: Plan, out: Path) -> dict[str, dict]:
    """Each mode: fixed rates, then stepped rates up to the first not held;
    on a fresh start of the gateway per mode (`plan.fresh_per_mode`), or on
    one start for both (the smoke)."""
    results, running = {}, None
    try:
        for mode in MODES:
            if running is None or plan.fresh_per_mode:
                if running is not None:
                    running.stop()
                running = start(gw, out, f"{gw.name}-{mode}")
            results[mode] = run_mode(running, gw, mode, plan, out)
    except BaseException:
        if running is not None:
            print(f"===== {gw.name} log =====\n{running.tail()}", file=sys.stderr)
            running.stack.dump_logs()
        raise
    finally:
        if running is not None:
            running.stop()
    return results


def tree_pss_mb(pid: int) -> float:
    """Proportional set size of a process tree, MB: each page shared by n
    processes counts 1/n in each, so forked workers' shared pages count once
    (the RSS sum counts them once per process)."""
    kb = 0
    for p in B.process_tree(pid):
        try:
            rollup = Path(f"/proc/{p}/smaps_rollup").read_text()
        except OSError:
            continue
        kb += next((int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:")), 0)
    return round(kb / 1024, 1)


def run_mode(running: Running, gw: Gateway, mode: str, plan: Plan, out: Path) -> dict:
    name = f"{gw.name}-{mode}"
    body = payload(gw.model, mode == "stream")
    result = {"gateway": gw.name, "mode": mode, "part": gw.part, "what": gw.what, "processes": list(gw.procs),
              "startup_s": round(running.startup_s, 1), "rates": {}, "steps": {}, "max_throughput": None,
              "idle_rss_mb": round(sum(B.tree_rss_bytes(running.pids[n]) for n in gw.procs) / 2**20, 1),
              "idle_pss_mb": round(sum(tree_pss_mb(running.pids[n]) for n in gw.procs), 1)}
    if plan.warmup_seconds:
        B.fortio(running.url, body, running.headers, min(plan.rates), connections(plan, min(plan.rates)),
                 plan.warmup_seconds, out / "raw" / f"{name}-warmup.json")
    for qps in plan.rates:
        seconds = plan.rate_seconds(qps)
        r = load(running, gw, body, qps, seconds, connections(plan, qps), out / "raw" / f"{name}-{qps:g}.json")
        r["seconds"] = seconds
        result["rates"][f"{qps:g}"] = r
        print(f"  {name} {qps:>6g} rps: {r['actual_qps']:>8} served, success {r['success_rate']:.2%}, "
              f"p50 {r['latency_us']['50']:.0f} µs, p99 {r['latency_us']['99']:.0f} µs, "
              f"gateway CPU {r['gateway_cpu_us_per_request']} µs/req, RSS {r['gateway_peak_rss_mb']} MB",
              flush=True)

    def step(qps: float) -> dict:
        r = load(running, gw, body, qps, plan.step_seconds, connections(plan, qps),
                 out / "raw" / f"{name}-step-{qps:g}.json")
        r["held"] = B.held(r, qps, plan.step_seconds)
        print(f"  {name} step {qps:>6g} rps: {'held' if r['held'] else 'not held'} ({r['actual_qps']} served, "
              f"success {r['success_rate']:.2%}, p99 {r['latency_us']['99'] / 1000:.1f} ms)", flush=True)
        return r

    result["steps"] = B.step_up(plan.steps, step, f"{name} step")
    result["max_throughput"] = max((r["actual_qps"] for r in result["steps"].values() if r["held"]), default=None)
    loads = [*result["rates"].values(), *(st for st in result["steps"].values() if "error" not in st)]
    result["peak_rss_mb"] = max((x["gateway_peak_rss_mb"] for x in loads), default=None)
    result["pss_after_mb"] = round(sum(tree_pss_mb(running.pids[n]) for n in gw.procs), 1)
    return result


REPLICA_LATENCY_MS = B.BIFROST_LATENCY_MS


def replica(gw: Gateway, plan: Plan, out: Path) -> dict:
    """bench.py's Bifrost replica shape: answers after 1.5 s, 1.37 KB and
    10.32 KB, stepped rates up to 5,000 requests/s (stop at the first not
    held), one fresh start of the gateway per answer size."""
    results = {}
    for label, size in B.BIFROST_SIZES:
        if size not in plan.replica_sizes:
            continue
        name = f"replica-{gw.name}-{size}"
        running = start(gw, out, name, REPLICA_LATENCY_MS, size)
        body = payload(gw.model, False)

        def one(qps: float) -> dict:
            conns = int(qps * REPLICA_LATENCY_MS / 1000 * 1.3) + 16  # Little's law, plus headroom
            r = load(running, gw, body, qps, plan.replica_seconds, conns, out / "raw" / f"{name}-{qps:g}.json",
                     offset_ms=REPLICA_LATENCY_MS)
            r.update(held=B.replica_held(r, qps, plan.replica_seconds, conns), connections=conns,
                     added_ms={p: round(r["latency_us"][p] / 1000 - REPLICA_LATENCY_MS, 2) for p in ("50", "99")})
            print(f"  {name} {qps:>6g} rps: {'held' if r['held'] else 'not held'}, {r['actual_qps']} served, "
                  f"success {r['success_rate']:.2%}, +p50 {r['added_ms']['50']} ms, +p99 {r['added_ms']['99']} ms, "
                  f"gateway CPU {r['gateway_cpu_us_per_request']} µs/req, RSS {r['gateway_peak_rss_mb']} MB",
                  flush=True)
            return r

        try:
            steps = B.step_up(plan.replica_rates, one, name)
        except BaseException:
            print(f"===== {gw.name} log =====\n{running.tail()}", file=sys.stderr)
            raise
        finally:
            running.stop()
        results[label] = {"steps": steps, "highest_rate_held": B.highest_held(steps)}
    return results


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plan", choices=sorted(PLANS))
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    parser.add_argument("--only", default="", help="comma-separated gateway names")
    args = parser.parse_args()
    plan = PLANS[args.plan]
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or B.ROOT / "bench" / "results" / f"{stamp}-peers"
    (out / "raw").mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()

    missing = not_installed()
    no_keys = not_measured_with_keys()
    chosen = [gw for gw in GATEWAYS if (not args.only or gw.name in args.only.split(","))
              and gw.name not in missing and not (gw.name == "litellm-keys" and "litellm" in no_keys)]
    summary = {"plan": args.plan, "started": stamp, "machine": B.machine(), "plan_settings": plan.__dict__,
               "load_average_start": loadavg(), "nice": os.nice(0), "versions": installed_versions(),
               "workers": {"envoy": ENVOY_WORKERS, "litellm": LITELLM_WORKERS, "portkey": 1,
                           "aigw": os.cpu_count()},
               "not_installed": missing, "no_virtual_keys": no_keys, "scenarios": {}, "replica": {}}
    print(f"peers: load average {summary['load_average_start']}; not measured: {', '.join(missing) or 'none'}",
          flush=True)
    def save() -> None:  # after each gateway: a run that fails later keeps what it measured
        (out / "summary.json").write_text(json.dumps(summary, indent=2))

    for gw in chosen:
        print(f"peers: {gw.name}: {gw.what}", flush=True)
        for mode, result in run_gateway(gw, plan, out).items():
            summary["scenarios"][f"{gw.name}-{mode}"] = result
        save()
    if plan.replica_rates:
        for gw in chosen:
            if gw.part == 1 and gw.name != "direct":
                print(f"peers: Bifrost replica: {gw.name}", flush=True)
                summary["replica"][gw.name] = replica(gw, plan, out)
                save()
    summary["load_average_end"] = loadavg()
    summary["seconds"] = round(time.monotonic() - t0)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    from peers_report import write_report  # noqa: E402  (matplotlib is slow to import)
    write_report(summary, out)
    failed = [f"{n} at {q} rps: success {r['success_rate']:.2%} {r['ret_codes']}"
              for n, sc in summary["scenarios"].items() for q, r in sc["rates"].items() if r["success_rate"] < 1]
    print(f"peers: results in {out} ({summary['seconds']} s)")
    if failed:
        print("peers: success below 100% at a fixed rate (the figure is reported, not comparable):\n  "
              + "\n  ".join(failed), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
