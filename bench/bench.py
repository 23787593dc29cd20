#!/usr/bin/env python3
"""Tollgate benchmarks: fortio against the real stack and its baselines, in one run.

    bench.py smoke    every scenario briefly (under a minute; run by `make test`)
    bench.py quick    fixed rates + max throughput (a few minutes; `make bench`)
    bench.py full     longer, plus the Bifrost replica (`make bench-full`)

Scenarios (each on a fresh stack, all in one session so they compare fairly):
    direct       fortio → mock-llm                                  no proxy at all
    envoy        fortio → Envoy, plain router → mock-llm            the proxy baseline
    envoy-nolog  envoy without the access log
    envoy-h1     envoy with HTTP/1.1 to the provider (envoy.yaml: HTTP/2)
    wasm         Envoy + Wasm filter (OpenAI→Anthropic, key choice)
    wasm-noattempt  wasm without the router's per-attempt Wasm filter
    wasm-null    Envoy + null Wasm filter that waits for the body   wasm's floor
    wasm-pass    Envoy + null Wasm filter that does nothing at all
    authz        Envoy + ext_authz with Redis buckets, no Wasm
    authz-null   Envoy + ext_authz against authz-null (allows all)  authz's floor
    full         the whole gateway (OpenAI→Anthropic), non-streaming
    full-capped  full with a key under concurrency caps it never reaches (a
                 Redis call per Check, a report sent at once per request)
    full-stream  the whole gateway, streaming
    responses    the whole gateway, Responses API front door, translated to
                 Anthropic through chat (POST /v1/responses), non-streaming
    responses-openai
                 the whole gateway, Responses API passed through to OpenAI
    messages     Anthropic Messages in → Anthropic passthrough (bare model name)
    messages-openai  Anthropic Messages in → OpenAI, translated both ways
    full-429     the whole gateway, 10 % of requests meet a 429 on their first
                 key and are retried on another (the cost of a retry)
    floor        Envoy + authz-null + null Wasm (waits for the body) full's floor
    envoy-512k, full-512k, full-512k-anthropic, messages-512k, floor-512k
                 512 KB request bodies at a low fixed rate: plain Envoy, the
                 gateway passing OpenAI through, the gateway translating,
                 Anthropic Messages passed through (a coding agent's turn)
    envoy-h1-512k, wasm-pass-512k, wasm-null-512k
                 the 512 KB floor by parts: HTTP/1.1 to the provider, a Wasm
                 filter in the chain, the body buffered and read into the VM

Overhead is defined end to end: a scenario's latency percentile minus the
baseline's percentile under the same offered load in the same run. Gateway
cost is CPU per request: user+system CPU seconds (from /proc) that Envoy,
authz-service and Redis spent during the run, divided by requests served.
Every load targets 127.0.0.1 and is bounded in time; every process is
stopped at the end, also on failure. A run below 100% success fails loudly.
"""
from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import os
import platform
import re
import resource
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from plugin_config import plugin_config, set_plugin_config  # noqa: E402
from stack import DEMO_KEY, Stack, free_ports, tool  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
GATEWAY_PROCS = ("envoy", "authz", "redis")
PERCENTILES = (50, 90, 99, 99.9)


# Envoy workers in the scenarios: one leaves the second core to fortio, the
# mock and the rest of the stack.
BENCH_ENVOY_CONCURRENCY = int(os.environ.get("BENCH_ENVOY_CONCURRENCY", "1"))


class BenchFailure(RuntimeError):
    pass


# -- Envoy configurations for the baselines, derived from envoy.yaml ----------
def load_envoy() -> dict:
    return yaml.safe_load((ROOT / "envoy.yaml").read_text())


def _hcm(cfg: dict) -> dict:
    return cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]


def _route(cfg: dict) -> dict:
    """The route every model request takes (envoy.yaml's providers route,
    after the MCP routes)."""
    return next(r for r in _hcm(cfg)["route_config"]["virtual_hosts"][0]["routes"]
                if "cluster_header" in r.get("route", {}))


def without_filters(cfg: dict, *names: str) -> dict:
    cfg = copy.deepcopy(cfg)
    hcm = _hcm(cfg)
    hcm["http_filters"] = [f for f in hcm["http_filters"] if f["name"] not in names]
    return cfg


def without_attempt_filter(cfg: dict) -> dict:
    """The router without its per-attempt Wasm filter (which swaps provider
    keys on retries: nothing to swap without Tollgate's)."""
    cfg = copy.deepcopy(cfg)
    router = next(f for f in _hcm(cfg)["http_filters"] if f["name"] == "envoy.filters.http.router")
    router["typed_config"].pop("upstream_http_filters", None)
    return cfg


def without_retry_policy(cfg: dict) -> dict:
    """The route without its retry_policy (a diagnosis, not a product
    setting: what Envoy holds per request when it need not keep the body
    for a retry)."""
    cfg = copy.deepcopy(cfg)
    _route(cfg)["route"].pop("retry_policy", None)
    return cfg


def fixed_route_to_mock(cfg: dict, mock_key: str) -> dict:
    """Without the Wasm filter nothing picks a cluster or a provider key: route
    straight to the openai cluster and add the mock's key, as a plain proxy would."""
    cfg = without_attempt_filter(cfg)
    route = _route(cfg)
    route["route"].pop("cluster_header")
    route["route"]["cluster"] = "openai"
    route["request_headers_to_add"] = [{"header": {"key": "authorization", "value": f"Bearer {mock_key}"},
                                        "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}]
    return cfg


def without_clusters(cfg: dict, *names: str) -> dict:
    cfg = copy.deepcopy(cfg)
    cfg["static_resources"]["clusters"] = [c for c in cfg["static_resources"]["clusters"] if c["name"] not in names]
    return cfg


def without_access_log(cfg: dict) -> dict:
    cfg = copy.deepcopy(cfg)
    _hcm(cfg).pop("access_log", None)
    return cfg


NULL_WASM = "build/tollgate_null_filter.wasm"


def with_null_wasm(cfg: dict, mode: str) -> dict:
    """The same Wasm filter entry (VM, `allow_on_headers_stop_iteration`,
    failure policy) with filters/null's module in place of Tollgate's.
    mode: `read_body` (pause, buffer the request body, read it once) or `pass`."""
    cfg = copy.deepcopy(cfg)
    wasm = next(f for f in _hcm(cfg)["http_filters"] if f["name"] == "envoy.filters.http.wasm")
    conf = wasm["typed_config"]["config"]
    conf["vm_config"]["code"] = {"local": {"filename": NULL_WASM}}
    conf["configuration"] = {"@type": "type.googleapis.com/google.protobuf.StringValue", "value": mode}
    return cfg


PROVIDER_CLUSTERS = ("openai", "anthropic", "mistral", "azure", "gemini", "bedrock")


def provider_protocol(cfg: dict, protocol: str) -> dict:
    """The provider clusters speaking `h1` (HTTP/1.1) or `h2` (HTTP/2 with
    prior knowledge, as mock-llm accepts), every other setting kept."""
    cfg = copy.deepcopy(cfg)
    for c in cfg["static_resources"]["clusters"]:
        if c["name"] not in PROVIDER_CLUSTERS:
            continue
        opts = copy.deepcopy(c["typed_extension_protocol_options"])  # YAML anchors share one dict
        http = opts["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
        old = http.get("explicit_http_config", {})
        http["explicit_http_config"] = (
            {"http2_protocol_options": old.get("http2_protocol_options", {})} if protocol == "h2"
            else {"http_protocol_options": old.get("http_protocol_options", {})})
        c["typed_extension_protocol_options"] = opts
    return cfg


# -- scenarios ---------------------------------------------------------------
CHAT_OPENAI = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Say hello to the benchmark."}]}
# The same turn as a Responses API client (Codex, the SDK's responses.create) sends it.
RESPONSES = {"model": "gpt-4o-mini", "instructions": "Be brief.", "store": False,
             "input": [{"role": "user", "content": [{"type": "input_text", "text": "Say hello to the benchmark."}]}]}
LARGE_BODY_BYTES = 512 * 1024
# A coding agent's turn: source text with newlines and quotes to escape.
_FILLER = 'fn main() {\n    println!("hello, {}", name); // the benchmark\'s filler line\n}\n'


@dataclass
class Scenario:
    name: str
    what: str
    components: tuple[str, ...]
    envoy: dict | None          # None: fortio talks to the mock directly
    model: str
    stream: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    # The scenarios its CPU per request is compared with: the plain Envoy at
    # the same body size, and what the same design costs with null parts.
    baseline: str = "envoy"
    floor: str | None = None
    # authz-null instead of tollgate-authz behind ext_authz.
    authz_null: bool = False
    # Request body padded to this size (bytes, JSON included), sent at the
    # plan's large-body rate instead of its rates and steps.
    body_bytes: int = 0
    # The gateway's API path under /v1 (the mock's own for `direct`):
    # chat/completions, responses (OpenAI Responses) or messages (Anthropic).
    api: str = "chat/completions"
    # Extra mock-llm keys by provider (config/mock-llm.yaml plus these).
    mock_keys: dict[str, list[dict]] = field(default_factory=dict)

    def payload(self) -> str:
        if self.api == "responses":
            return json.dumps(dict(RESPONSES, model=self.model, stream=self.stream))
        body = dict(CHAT_OPENAI, model=self.model)
        if self.api == "messages":
            body["max_tokens"] = 256
        if self.stream:
            body["stream"] = True
        if self.body_bytes:
            body["messages"] = [{"role": "user", "content": ""}]
            room = self.body_bytes - len(json.dumps(body))
            text = _FILLER * (room // (len(json.dumps(_FILLER)) - 2))
            body["messages"][0]["content"] = text + "x" * (room - (len(json.dumps(text)) - 2))
        return json.dumps(body)


# One of two Anthropic keys answers 20 % of its calls with a 429 saying
# `retry-after: 0` (so it never cools): 10 % of the requests are retried once,
# on the other key, and every request succeeds.
RETRY_KEYS = [{"id": "bench-429", "value": "mock-anthropic-key-bench-429"},
              {"id": "anthropic-2", "value_env": "TG_KEY_ANTHROPIC_2"}]
# config/policy.yaml's demo limits plus max_concurrent_requests on the key
# and its tenant, never reached.
CAPPED_KEY = "tg-bench-capped"
RETRY_MOCK_KEY = {"name": "bench-429", "key": "mock-anthropic-key-bench-429",
                  "faults": {"seed": 3, "429": 0.2, "retry_after_s": 0}}


def with_provider_keys(cfg: dict, provider: str, keys: list[dict]) -> dict:
    cfg = copy.deepcopy(cfg)
    plugin = plugin_config(cfg)
    plugin["providers"][provider]["keys"] = keys
    set_plugin_config(cfg, plugin)
    return cfg


def scenarios(mock_key: str) -> list[Scenario]:
    base = load_envoy()
    auth = {"authorization": f"Bearer {DEMO_KEY}"}
    anthropic_auth = {"x-api-key": DEMO_KEY, "anthropic-version": "2023-06-01"}
    plain = without_clusters(fixed_route_to_mock(without_filters(base, "envoy.filters.http.ext_authz",
                                                                 "envoy.filters.http.wasm"), mock_key),
                             "tollgate_authz", "tollgate_authz_http")
    # What ext_authz would have set for the demo key.
    authz_set = {"x-tollgate-tenant": "demo", "x-tollgate-key-id": "demo-key", "x-tollgate-models": "*"}
    # The floors keep every filter setting of the real scenario; only the
    # work is gone. Without Tollgate's filter nothing picks a cluster or a
    # provider key, so they route to the mock as `envoy` does.
    null_route = fixed_route_to_mock(base, mock_key)
    no_authz = ("envoy.filters.http.ext_authz",)
    no_wasm = ("envoy.filters.http.wasm",)
    wasm_only = without_clusters(without_filters(null_route, *no_authz), "tollgate_authz", "tollgate_authz_http")
    gateway = ("redis", "mock", "authz", "envoy")
    null_gateway = ("mock", "authz", "envoy")
    return [
        Scenario("direct", "fortio → mock-llm (OpenAI API), no Envoy", ("mock",), None, "gpt-4o-mini",
                 headers={"authorization": f"Bearer {mock_key}"}),
        Scenario("envoy", "Envoy plain router → mock-llm", ("mock", "envoy"), plain, "gpt-4o-mini"),
        Scenario("envoy-nolog", "Envoy plain router → mock-llm, no access log", ("mock", "envoy"),
                 without_access_log(plain), "gpt-4o-mini"),
        Scenario("envoy-h1", "Envoy plain router → mock-llm over HTTP/1.1", ("mock", "envoy"),
                 provider_protocol(plain, "h1"), "gpt-4o-mini"),
        Scenario("wasm", "Envoy + Wasm filter, OpenAI→Anthropic translation and key choice",
                 gateway, without_filters(base, *no_authz), "anthropic/claude-sonnet-4-5",
                 headers=authz_set, floor="wasm-null"),
        Scenario("wasm-noattempt", "wasm without the router's per-attempt Wasm filter",
                 gateway, without_attempt_filter(without_filters(base, *no_authz)), "anthropic/claude-sonnet-4-5",
                 headers=authz_set, floor="wasm-null"),
        Scenario("wasm-null", "Envoy + null Wasm filter: pauses, buffers the body and reads it once, no work",
                 ("mock", "envoy"), with_null_wasm(wasm_only, "read_body"), "gpt-4o-mini", headers=authz_set),
        Scenario("wasm-pass", "Envoy + null Wasm filter that returns Continue from every callback",
                 ("mock", "envoy"), with_null_wasm(wasm_only, "pass"), "gpt-4o-mini", headers=authz_set),
        Scenario("authz", "Envoy + ext_authz (virtual key, Redis buckets), no Wasm", gateway,
                 fixed_route_to_mock(without_filters(base, *no_wasm), mock_key), "gpt-4o-mini", headers=auth,
                 floor="authz-null"),
        Scenario("authz-null", "Envoy + ext_authz against authz-null (allows all at once, no Redis), no Wasm",
                 null_gateway, fixed_route_to_mock(without_filters(base, *no_wasm), mock_key), "gpt-4o-mini",
                 headers=auth, authz_null=True),
        Scenario("full", "whole gateway, OpenAI→Anthropic, non-streaming", gateway,
                 base, "anthropic/claude-sonnet-4-5", headers=auth, floor="floor"),
        Scenario("full-capped", "full with a key under concurrency caps it never reaches (a slot taken in "
                 "Redis per Check, released by a report sent at once)", gateway, base,
                 "anthropic/claude-sonnet-4-5", headers={"authorization": f"Bearer {CAPPED_KEY}"}, floor="full"),
        Scenario("full-stream", "whole gateway, OpenAI→Anthropic, streaming", gateway,
                 base, "anthropic/claude-sonnet-4-5", stream=True, headers=auth, floor="floor"),
        Scenario("responses", "whole gateway, Responses API (/v1/responses) → Anthropic through chat, "
                 "non-streaming", gateway, base, "anthropic/claude-sonnet-4-5", headers=auth, floor="floor",
                 api="responses"),
        Scenario("responses-openai", "whole gateway, Responses API passed through to OpenAI, non-streaming",
                 gateway, base, "openai/gpt-4o-mini", headers=auth, floor="floor", api="responses"),
        Scenario("messages", "whole gateway, Anthropic Messages in → Anthropic passthrough (bare model name)",
                 gateway, base, "claude-sonnet-4-5", headers=anthropic_auth, floor="floor", api="messages"),
        Scenario("messages-openai", "whole gateway, Anthropic Messages in → OpenAI (translated both ways)",
                 gateway, base, "openai/gpt-4o-mini", headers=anthropic_auth, floor="floor", api="messages"),
        Scenario("full-429", "whole gateway, OpenAI→Anthropic, 10 % of requests retried once after a 429",
                 gateway, with_provider_keys(base, "anthropic", RETRY_KEYS), "anthropic/claude-sonnet-4-5",
                 headers=auth, floor="full", mock_keys={"anthropic": [RETRY_MOCK_KEY]}),
        Scenario("floor", "Envoy + ext_authz against authz-null + null Wasm filter (waits for the body)",
                 null_gateway, with_null_wasm(null_route, "read_body"), "gpt-4o-mini", headers=auth,
                 authz_null=True),
        Scenario("envoy-512k", "Envoy plain router → mock-llm, 512 KB request", ("mock", "envoy"), plain,
                 "gpt-4o-mini", baseline="envoy-512k", body_bytes=LARGE_BODY_BYTES),
        Scenario("full-512k", "whole gateway, OpenAI passthrough, 512 KB request", gateway, base,
                 "openai/gpt-4o-mini", headers=auth, baseline="envoy-512k", body_bytes=LARGE_BODY_BYTES),
        Scenario("full-512k-anthropic", "whole gateway, OpenAI→Anthropic, 512 KB request", gateway, base,
                 "anthropic/claude-sonnet-4-5", headers=auth, baseline="envoy-512k", body_bytes=LARGE_BODY_BYTES),
        Scenario("messages-512k", "whole gateway, Anthropic Messages in → Anthropic passthrough, 512 KB request",
                 gateway, base, "claude-sonnet-4-5", headers=anthropic_auth, baseline="envoy-512k",
                 api="messages", body_bytes=LARGE_BODY_BYTES),
        Scenario("floor-512k", "floor (null ext_authz + null Wasm reading the body), 512 KB request",
                 null_gateway, with_null_wasm(null_route, "read_body"), "gpt-4o-mini", headers=auth,
                 authz_null=True, baseline="envoy-512k", body_bytes=LARGE_BODY_BYTES),
        # The floor by parts at 512 KB: the upstream protocol, a Wasm filter
        # in the chain, the body buffered and read into the VM (without the
        # ext_authz hop).
        Scenario("envoy-h1-512k", "Envoy plain router → mock-llm over HTTP/1.1, 512 KB request",
                 ("mock", "envoy"), provider_protocol(plain, "h1"), "gpt-4o-mini", baseline="envoy-512k",
                 body_bytes=LARGE_BODY_BYTES),
        Scenario("wasm-pass-512k", "Envoy + null Wasm filter that returns Continue, 512 KB request",
                 ("mock", "envoy"), with_null_wasm(wasm_only, "pass"), "gpt-4o-mini", headers=authz_set,
                 baseline="envoy-512k", body_bytes=LARGE_BODY_BYTES),
        Scenario("wasm-null-512k", "Envoy + null Wasm filter that buffers the body and reads it, 512 KB request",
                 ("mock", "envoy"), with_null_wasm(wasm_only, "read_body"), "gpt-4o-mini", headers=authz_set,
                 baseline="envoy-512k", body_bytes=LARGE_BODY_BYTES),
    ]


# -- measurement -------------------------------------------------------------
def _stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name (field 3 onwards)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def process_tree(pid: int) -> list[int]:
    """`pid` and every process descended from it (workers, helpers)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                children.setdefault(int(_stat(int(entry.name))[1]), []).append(int(entry.name))
            except (OSError, IndexError, ValueError):
                pass  # exited while we looked
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    return tree


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process tree: each process's user+system time plus
    that of its children already reaped (cutime, cstime), so a worker that
    exits during a load is still counted, by its parent."""
    total = 0
    for p in process_tree(pid):
        try:
            f = _stat(p)
        except OSError:
            continue
        total += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
    return total / CLK_TCK


def tree_rss_bytes(pid: int) -> int:
    """RSS summed over a process tree (pages shared between its processes,
    as forked workers share their parent's, count once per process)."""
    total = 0
    for p in process_tree(pid):
        try:
            total += rss_bytes(p)
        except OSError:
            pass
    return total


class RssSampler(threading.Thread):
    """Peak RSS of each process (or, with `measure=tree_rss_bytes`, each
    process tree), sampled every 100 ms while a load runs."""

    def __init__(self, pids: dict[str, int], measure=rss_bytes):
        super().__init__(daemon=True)
        self.pids, self.peak, self.measure = pids, {n: 0 for n in pids}, measure
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            for name, pid in self.pids.items():
                try:
                    self.peak[name] = max(self.peak[name], self.measure(pid))
                except OSError:
                    pass
            self.done.wait(0.1)

    def stop(self) -> dict[str, int]:
        self.done.set()
        self.join()
        return self.peak


def fortio(url: str, payload: str, headers: dict[str, str], qps: float, conns: int, seconds: float,
           out: Path, offset_ms: float = 0) -> dict:
    """One fortio load. -uniform spreads the clients over the interval (without
    it all `conns` clients fire in the same instant and the burst queues behind
    itself). -r sets 10 µs histogram buckets (fortio's default of 1 ms puts
    every sub-millisecond answer in one bucket and interpolates its
    percentiles); the buckets reach 1 s above `offset_ms`, which is subtracted
    before bucketing so a known provider delay keeps the same precision."""
    # A file, not -payload: one argument is limited to 128 KiB by Linux.
    payload_file = out.with_suffix(".payload")
    payload_file.write_text(payload)
    cmd = [tool("fortio"), "load", "-quiet", "-uniform", "-r", "0.00001", "-offset", f"{offset_ms:g}ms",
           "-qps", str(qps), "-c", str(conns), "-t", f"{seconds}s",
           "-p", ",".join(str(p) for p in PERCENTILES), "-timeout", "30s", "-json", str(out),
           "-payload-file", str(payload_file), "-H", "content-type: application/json"]
    for k, v in headers.items():
        cmd += ["-H", f"{k}: {v}"]
    cmd.append(url)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
    finally:
        payload_file.unlink(missing_ok=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if run.returncode != 0 or not out.exists():
        raise BenchFailure(f"fortio failed ({run.returncode}): {run.stderr[-2000:]}")
    raw = json.loads(out.read_text())
    # The load generator's own CPU: near the machine's cores, it is the limit.
    raw["tollgate_fortio_cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return raw


def summarize(raw: dict, cpu: dict[str, float], rss: dict[str, int], gateway_procs=GATEWAY_PROCS) -> dict:
    hist = raw["DurationHistogram"]
    ok = raw["RetCodes"].get("200", 0)
    total = hist["Count"]
    served = total + raw.get("NumThreads", 0)  # fortio's warm-up calls also hit the stack
    pct = {str(p["Percentile"]): p["Value"] * 1e6 for p in hist["Percentiles"]}  # µs
    cpu_us = {n: s * 1e6 / served for n, s in cpu.items()}
    gateway = sum(v for n, v in cpu_us.items() if n in gateway_procs)
    return {
        "requested_qps": raw["RequestedQPS"], "actual_qps": round(raw["ActualQPS"], 1),
        "requests": total, "ok": ok, "success_rate": ok / total if total else 0.0,
        "ret_codes": raw["RetCodes"], "latency_us": pct, "avg_us": hist["Avg"] * 1e6,
        "cpu_us_per_request": {n: round(v, 1) for n, v in cpu_us.items()},
        "gateway_cpu_us_per_request": round(gateway, 1),
        "peak_rss_mb": {n: round(b / 2**20, 1) for n, b in rss.items()},
        "fortio_cpu_cores": round(raw.get("tollgate_fortio_cpu_s", 0) / (raw["ActualDuration"] / 1e9), 2),
    }


def held(r: dict, qps: float, seconds: float) -> bool:
    """A rate is held when every request succeeded and at least 95% of the
    offered requests were sent. (fortio's ActualQPS also counts the time to
    drain the last requests, which understates the rate of slow answers.)"""
    return r["success_rate"] == 1.0 and r["requests"] >= 0.95 * qps * seconds


def replica_held(r: dict, qps: float, seconds: float, conns: int) -> bool:
    """A replica rate is held when every request succeeded and at least 95 %
    of what fortio could send were sent. Each connection paces itself and
    leaves its last interval unsent when the time is up: with the replica's
    rate × 1.95 + 16 connections that is up to 13 % of 15 s at any rate,
    so `held`'s 95 % of the offered load could never be met."""
    return r["success_rate"] == 1.0 and r["requests"] >= 0.95 * (qps * seconds - conns)


@dataclass
class Plan:
    rates: list[float]
    seconds: float
    conns: int
    max_steps: list[float]
    step_seconds: float
    p99_bound_ms: float
    # The 512 KB scenarios: one low fixed rate, plan.seconds long, no steps.
    large_body_rate: float = 25
    # Bifrost replica: offered rates stepped up (stop at the first not held),
    # once per provider protocol (`h1`, `h2`; `config` = envoy.yaml as is).
    bifrost_rates: list[float] = field(default_factory=list)
    bifrost_seconds: float = 60
    bifrost_protocols: tuple[str, ...] = ("config",)
    # Answer sizes in bytes to run (empty: every size of BIFROST_SIZES).
    bifrost_sizes: tuple[int, ...] = ()


PLANS = {
    "smoke": Plan(rates=[100], seconds=1, conns=4, max_steps=[], step_seconds=0, p99_bound_ms=1000,
                  large_body_rate=20),
    "quick": Plan(rates=[500, 1000, 2000], seconds=8, conns=32, max_steps=[1000, 2000, 3000, 4000, 6000],
                  step_seconds=5, p99_bound_ms=50),
    "full": Plan(rates=[500, 1000, 2000], seconds=30, conns=64,
                 max_steps=[1000, 2000, 3000, 4000, 5000, 6000, 8000, 10000, 12000], step_seconds=15,
                 p99_bound_ms=50, bifrost_rates=[1000, 2000, 3000, 5000], bifrost_seconds=60),
    # The fixed rates of `quick` without the max-throughput steps: the CPU per
    # request ratios (wasm × wasm-null, full × floor) in about half the time,
    # for A/B runs of one change.
    "cpu": Plan(rates=[500, 1000, 2000], seconds=8, conns=32, max_steps=[], step_seconds=0, p99_bound_ms=50),
    # The Bifrost replica alone, short, with HTTP/1.1 and HTTP/2 to the
    # provider: what the provider clusters' protocol costs in memory and CPU.
    "replica": Plan(rates=[], seconds=0, conns=0, max_steps=[], step_seconds=0, p99_bound_ms=0,
                    bifrost_rates=[1000, 3000], bifrost_seconds=30, bifrost_protocols=("h1", "h2")),
}


def measure(pids: dict[str, int], url: str, payload: str, headers: dict[str, str], qps: float, seconds: float,
            conns: int, out: Path, offset_ms: float = 0, tree: bool = False,
            gateway_procs: tuple[str, ...] = GATEWAY_PROCS) -> dict:
    """One fortio load with the CPU and peak RSS of the named processes
    (with `tree`, of each one's whole process tree) over it."""
    cpu_of, rss_of = (tree_cpu_seconds, tree_rss_bytes) if tree else (cpu_seconds, rss_bytes)
    before = {n: cpu_of(pid) for n, pid in pids.items()}
    sampler = RssSampler(pids, rss_of)
    sampler.start()
    try:
        raw = fortio(url, payload, headers, qps, conns, seconds, out, offset_ms)
    finally:
        rss = sampler.stop()
    cpu = {n: cpu_of(pid) - before[n] for n, pid in pids.items()}
    return summarize(raw, cpu, rss, gateway_procs)


def run_load(stack: Stack, sc: Scenario, qps: float, seconds: float, conns: int, out: Path,
             offset_ms: float = 0) -> dict:
    url = (f"{stack.mock_url}/v1/chat/completions" if sc.envoy is None
           else f"{stack.base_url}/{sc.api}")
    counters = authz_counters(stack)
    r = measure({n: p.pid for n, p in stack.procs.items()}, url, sc.payload(), sc.headers, qps, seconds, conns,
                out, offset_ms)
    after = authz_counters(stack)
    delta = {k: after[k] - counters[k] for k in counters if k in after}
    if "fail_open" in delta:
        # Checks admitted without a Redis answer (its in-flight limit or
        # deadline): budgets were not enforced for these.
        r["authz_fail_open"] = int(delta["fail_open"])
    if delta.get("checks") and "redis_calls" in delta:
        # Round trips to Redis per decision, all operations together.
        r["redis_calls_per_check"] = round(delta["redis_calls"] / delta["checks"], 3)
    return r


AUTHZ_COUNTERS = {"fail_open": "tollgate_authz_fail_open_total", "redis_calls": "tollgate_authz_redis_calls_total",
                  "checks": "tollgate_authz_checks_total"}


def authz_counters(stack: Stack) -> dict[str, float]:
    """The authz service's counters, each summed over its labels; a counter
    the service does not export (or authz-null, which exports none) is left
    out, and so is its column's figure."""
    if "authz" not in stack.procs:
        return {}
    with urllib.request.urlopen(f"{stack.authz_http_url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    found = {}
    for key, metric in AUTHZ_COUNTERS.items():
        values = re.findall(rf"^{metric}(?:{{[^}}]*}})? (\S+)$", text, re.M)
        if values:
            found[key] = sum(float(v) for v in values)
    return found


class BenchStack(Stack):
    """The stack, with authz-null in place of tollgate-authz when asked."""

    def __init__(self, *args, authz_null: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.authz_null = authz_null

    def command(self, name: str) -> list[str]:
        if name == "authz" and self.authz_null:
            p = self.ports
            return [str(ROOT / "target" / "release" / "authz-null"),
                    "--grpc-listen", f"127.0.0.1:{p['TG_AUTHZ_GRPC_PORT']}",
                    "--http-listen", f"127.0.0.1:{p['TG_AUTHZ_HTTP_PORT']}"]
        return super().command(name)


def mock_config_with(keys: dict[str, list[dict]], run_dir: Path) -> Path | None:
    """config/mock-llm.yaml with more keys, or None when there are none."""
    if not keys:
        return None
    doc = yaml.safe_load((ROOT / "config" / "mock-llm.yaml").read_text())
    for provider, extra in keys.items():
        doc["providers"][provider]["keys"].extend(extra)
    run_dir.mkdir(parents=True, exist_ok=True)
    out = run_dir / "mock-llm.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def start_stack(sc: Scenario, workdir: Path, mock_config: Path | None = None,
                envoy_concurrency: int = BENCH_ENVOY_CONCURRENCY) -> Stack:
    run_dir = workdir / "stacks" / sc.name
    run_dir.mkdir(parents=True, exist_ok=True)
    kwargs = {}
    if sc.envoy is not None:
        cfg = run_dir / "envoy-scenario.yaml"
        cfg.write_text(yaml.safe_dump(sc.envoy, sort_keys=False))
        kwargs["envoy_config"] = cfg
    if mock_config is not None:
        kwargs["mock_config"] = mock_config
    return BenchStack(run_dir=run_dir, ports=free_ports(), components=sc.components,
                      envoy_concurrency=envoy_concurrency, authz_null=sc.authz_null, **kwargs).start()


# -- Bifrost replica ----------------------------------------------------------
BIFROST_LATENCY_MS = 1500
# The replica compares with a gateway using every core, so Envoy runs with
# as many workers as `make run` starts (2), not the one worker of the
# scenarios above that leave a core to fortio.
BIFROST_ENVOY_CONCURRENCY = int(os.environ.get("BENCH_BIFROST_ENVOY_CONCURRENCY", "2"))
BIFROST_SIZES = (("1.37 KB", 1370), ("10.32 KB", 10320))


def in_flight_memory(r: dict, idle_rss: dict[str, int], peak_active: int) -> dict:
    """Memory per in-flight request, by process: peak RSS during the load
    minus the RSS of the idle stack before the first load, divided by the
    requests in flight when the peak was set. That is the most Envoy had
    active (`peak_active`, sampled): fortio's warm-up sends one request per
    connection at once, so for the first 1.5 s there are `conns` requests in
    flight, about 1.3 × the steady state's (Little's law: served rate × mean
    latency, `in_flight`)."""
    in_flight = r["actual_qps"] * r["avg_us"] / 1e6
    at_peak = max(peak_active, in_flight)
    kb = {n: round((r["peak_rss_mb"][n] * 2**20 - idle_rss[n]) / 1024 / at_peak, 1)
          for n in r["peak_rss_mb"] if n in idle_rss and at_peak}
    return {"in_flight": round(in_flight), "peak_in_flight": round(at_peak), "kb_per_in_flight": kb}


def bifrost(plan: Plan, out: Path, full: Scenario, protocol: str) -> dict:
    """The whole gateway in front of a provider answering in 1.5 s, with
    1.37 KB and 10.32 KB answers, at stepped rates up to 5,000 requests/s for
    plan.bifrost_seconds each. A rate is held with 100% success and ≥ 95% of
    it served; the steps stop at the first rate not held. `protocol` sets the
    provider clusters' HTTP version (`config`: as envoy.yaml has it).
    `full` may be another scenario (`bench.py replica --scenario`): the same
    load through that scenario's Envoy config, components and headers, to
    attribute the gateway's memory per in-flight request to its parts."""
    results = {}
    envoy = full.envoy if protocol == "config" else provider_protocol(full.envoy, protocol)
    # Tollgate's filter routes `provider/model`; without it the request goes
    # to the mock as it is, which knows only its own model names.
    model = "openai/gpt-4o-mini" if "/" in full.model else full.model
    prefix = "bifrost" if full.name == "full" else f"bifrost-{full.name}"
    sizes = [(lb, sz) for lb, sz in BIFROST_SIZES if not plan.bifrost_sizes or sz in plan.bifrost_sizes]
    for label, size in sizes:
        sc = Scenario(f"{prefix}-{protocol}-{size}", f"Bifrost replica, {label} answers", full.components, envoy,
                      model, headers={**full.headers, "x-mock-latency-ms": str(BIFROST_LATENCY_MS),
                                      "x-mock-response-bytes": str(size)}, authz_null=full.authz_null)
        stack = start_stack(sc, out, envoy_concurrency=BIFROST_ENVOY_CONCURRENCY)
        idle_rss = {n: rss_bytes(p.pid) for n, p in stack.procs.items()}
        def one(qps: float) -> dict:
            # Little's law: qps × 1.5 s in flight, plus headroom.
            conns = int(qps * BIFROST_LATENCY_MS / 1000 * 1.3) + 16
            heap = EnvoyHeapSampler(stack.admin_url)
            heap.start()
            try:
                r = run_load(stack, sc, qps, plan.bifrost_seconds, conns,
                             out / "raw" / f"{sc.name}-{qps:g}.json", offset_ms=BIFROST_LATENCY_MS)
            finally:
                heap.stop()
            r["connections"] = conns
            r["envoy_heap_mb"] = heap.peak
            r["wasm_linear_mb"] = wasm_linear_memory_mb(stack.procs["envoy"].pid)
            r["gateway_peak_rss_mb"] = round(sum(r["peak_rss_mb"].get(n, 0) for n in GATEWAY_PROCS), 1)
            r["added_ms"] = {p: round(r["latency_us"][p] / 1000 - BIFROST_LATENCY_MS, 2) for p in ("50", "99")}
            r.update(in_flight_memory(r, idle_rss, heap.peak_active))
            r["upstream"] = upstream_connections(stack)
            r["held"] = replica_held(r, qps, plan.bifrost_seconds, conns)
            print(f"  {label} {qps:>6g} rps: {'held' if r['held'] else 'NOT held'}, {r['actual_qps']} served, "
                  f"success {r['success_rate']:.2%}, +p50 {r['added_ms']['50']} ms, +p99 {r['added_ms']['99']} ms, "
                  f"gateway RSS {r['gateway_peak_rss_mb']} MB, {r['in_flight']} in flight "
                  f"({r['peak_in_flight']} at the peak), "
                  f"KB per in-flight {r['kb_per_in_flight']}, upstream {r['upstream']}, "
                  f"fail-open {r.get('authz_fail_open')}, fortio {r['fortio_cpu_cores']} cores, "
                  f"Envoy heap at its peak {r['envoy_heap_mb']}, Wasm linear memory {r['wasm_linear_mb']} MB",
                  flush=True)
            return r

        try:
            steps = step_up(plan.bifrost_rates, one, label)
        except BaseException:
            stack.dump_logs()
            raise
        finally:
            stack.stop()
        results[label] = {"steps": steps, "highest_rate_held": highest_held(steps)}
    return results


def step_up(rates: list[float], one, label: str = "") -> dict[str, dict]:
    """Offered rates in turn, up to the first not held: `one(qps)` runs a
    load and returns its result with `held` set. When fortio gives up (a
    connection's first request failed) the rate is beyond this machine: it
    is recorded as not held, with fortio's last words."""
    steps = {}
    for qps in rates:
        try:
            r = one(qps)
        except BenchFailure as e:
            steps[f"{qps:g}"] = {"held": False, "error": str(e).splitlines()[-1]}
            print(f"  {label} {qps:>6g} rps: NOT held, {steps[f'{qps:g}']['error']}", flush=True)
            break
        steps[f"{qps:g}"] = r
        if not r["held"]:
            break
    return steps


def highest_held(steps: dict[str, dict]) -> float | None:
    rates = [float(q) for q, r in steps.items() if r["held"]]
    return max(rates) if rates else None


class EnvoyHeapSampler(threading.Thread):
    """Envoy's allocator (admin `/memory`, tcmalloc's figures) every 0.5 s
    while a load runs, kept at the sample with the most live allocations
    (`allocated`), with the largest heap seen (`peak_heap_size`): whether
    Envoy's RSS at its peak is live allocations or memory the allocator
    holds freed (`pageheap_free`, the thread caches). MB. Also the most
    requests Envoy had active in its listeners' connection managers
    (`peak_active`, the `http.*.downstream_rq_active` gauges, the admin
    listener's left out)."""

    FIELDS = ("allocated", "heap_size", "pageheap_free", "pageheap_unmapped", "total_thread_cache",
              "total_physical_bytes")

    def __init__(self, admin_url: str):
        super().__init__(daemon=True)
        self.url, self.peak, self.peak_active = f"{admin_url}/memory", {}, 0
        self.stats_url = f"{admin_url}/stats?format=json&filter=downstream_rq_active$"
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=2) as resp:
                    doc = json.loads(resp.read())
                mb = {k: round(int(doc.get(k, 0)) / 2**20, 1) for k in self.FIELDS}
                heap = max(mb["heap_size"], self.peak.get("peak_heap_size", 0))
                if mb["allocated"] >= self.peak.get("allocated", 0):
                    self.peak = mb
                self.peak["peak_heap_size"] = heap
                with urllib.request.urlopen(self.stats_url, timeout=2) as resp:
                    stats = json.loads(resp.read()).get("stats", [])
                active = sum(int(st.get("value", 0)) for st in stats
                             if st.get("name", "").startswith("http.") and not st["name"].startswith("http.admin."))
                self.peak_active = max(self.peak_active, active)
            except (OSError, ValueError):
                pass
            self.done.wait(0.5)

    def stop(self) -> dict:
        self.done.set()
        self.join()
        return self.peak


def wasm_linear_memory_mb(pid: int) -> float:
    """Resident MB of the Wasm VMs' linear memories in Envoy. V8 reserves
    each one as an inaccessible mapping of several GiB (the memory's room to
    grow plus guard regions) and opens its pages in place as the memory
    grows, so a linear memory is the read-write mapping that ends where such
    a reservation starts. It never shrinks: read after a load, it is that
    load's high-water mark."""
    total_kb, prev, cur = 0, None, None
    try:
        lines = Path(f"/proc/{pid}/smaps").read_text().splitlines()
    except OSError:
        return 0.0
    for line in lines:
        head = line.split()
        if head and "-" in head[0] and not head[0].endswith(":"):
            start, end = (int(a, 16) for a in head[0].split("-"))
            prev, cur = cur, {"start": start, "end": end, "perms": head[1], "rss": 0}
            if (prev and prev["perms"].startswith("rw") and prev["end"] == start
                    and head[1] == "---p" and end - start >= 4 * 2**30):
                total_kb += prev["rss"]
        elif head and head[0] == "Rss:" and cur is not None:
            cur["rss"] = int(head[1])
    return round(total_kb / 1024, 1)


def upstream_connections(stack: Stack) -> dict:
    """Connections opened and requests sent to the provider clusters so far
    (Envoy's cluster stats): requests per connection shows how many requests
    share one upstream connection."""
    query = urllib.parse.quote(r"^cluster\.[a-z]+\.upstream_(cx|rq)_total$")
    with urllib.request.urlopen(f"{stack.admin_url}/stats?filter={query}", timeout=5) as resp:
        text = resp.read().decode()
    totals = {"cx": 0, "rq": 0}
    for cluster, kind, value in re.findall(r"^cluster\.([a-z]+)\.upstream_(cx|rq)_total: (\d+)$", text, re.M):
        if cluster in PROVIDER_CLUSTERS:
            totals[kind] += int(value)
    return totals


def machine() -> dict:
    mem = next(l for l in Path("/proc/meminfo").read_text().splitlines() if l.startswith("MemTotal"))
    envoy_v = subprocess.run([tool("envoy"), "--version"], capture_output=True, text=True).stdout.strip()
    envoy_version = re.search(r"/(\d+\.\d+\.\d+)/", envoy_v)
    fortio_v = subprocess.run([tool("fortio"), "version"], capture_output=True, text=True).stdout.strip()
    return {"cores": os.cpu_count(), "memory": f"{int(mem.split()[1]) // 1024 ** 2} GiB",
            "kernel": platform.release(), "python": platform.python_version(),
            "envoy": envoy_version.group(1) if envoy_version else envoy_v,
            "fortio": fortio_v, "cpu": _cpu_model()}


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plan", choices=sorted(PLANS))
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    parser.add_argument("--only", default="", help="comma-separated scenario names")
    # The Bifrost replica through another scenario's Envoy config and parts
    # (envoy, wasm-null, authz-null, floor, wasm...): what each part of the
    # gateway holds per in-flight request. The rest override the plan's.
    parser.add_argument("--scenario", default="full", help="the Bifrost replica's scenario (default: full)")
    parser.add_argument("--rates", default="", help="the Bifrost replica's rates, comma-separated")
    parser.add_argument("--seconds", type=float, default=0, help="the Bifrost replica's seconds per rate")
    parser.add_argument("--protocols", default="", help="the Bifrost replica's provider protocols: h1,h2,config")
    parser.add_argument("--answer-bytes", default="", help="the Bifrost replica's answer sizes: 1370,10320")
    parser.add_argument("--no-retry", action="store_true",
                        help="the Bifrost replica without the route's retry_policy (a diagnosis)")
    args = parser.parse_args()
    plan = copy.copy(PLANS[args.plan])
    if args.rates:
        plan.bifrost_rates = [float(q) for q in args.rates.split(",")]
    if args.seconds:
        plan.bifrost_seconds = args.seconds
    if args.protocols:
        plan.bifrost_protocols = tuple(args.protocols.split(","))
    if args.answer_bytes:
        plan.bifrost_sizes = tuple(int(b) for b in args.answer_bytes.split(","))
    replica = next((sc for sc in scenarios("mock-openai-key-1") if sc.name == args.scenario), None)
    if replica is None or replica.envoy is None:
        parser.error(f"--scenario {args.scenario}: not a scenario with Envoy")
    if args.no_retry:
        replica = replace(replica, name=f"{replica.name}-noretry",
                          what=f"{replica.what}, without the route's retry_policy",
                          envoy=without_retry_policy(replica.envoy))
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or ROOT / "bench" / "results" / f"{stamp}-{args.plan}"
    (out / "raw").mkdir(parents=True, exist_ok=True)

    chosen = [s for s in scenarios("mock-openai-key-1") if not args.only or s.name in args.only.split(",")]
    if not plan.rates:
        chosen = []
    summary = {"plan": args.plan, "started": stamp, "machine": machine(),
               "plan_settings": plan.__dict__, "scenarios": {},
               "envoy_workers": {"scenarios": BENCH_ENVOY_CONCURRENCY, "bifrost": BIFROST_ENVOY_CONCURRENCY}}
    failures = []
    for sc in chosen:
        print(f"bench: {sc.name}: {sc.what}", flush=True)
        stack = start_stack(sc, out, mock_config=mock_config_with(sc.mock_keys, out / "stacks" / sc.name))
        try:
            result = {"what": sc.what, "rates": {}, "steps": {}, "max_throughput": None,
                      "baseline": sc.baseline, "floor": sc.floor, "body_bytes": sc.body_bytes or None}
            for qps in ([plan.large_body_rate] if sc.body_bytes else plan.rates):
                r = run_load(stack, sc, qps, plan.seconds, plan.conns, out / "raw" / f"{sc.name}-{qps:g}.json")
                result["rates"][f"{qps:g}"] = r
                print(f"  {qps:>6g} rps: {r['actual_qps']:>8} served, success {r['success_rate']:.2%}, "
                      f"p50 {r['latency_us']['50']:.0f} µs, p99 {r['latency_us']['99']:.0f} µs, "
                      f"gateway CPU {r['gateway_cpu_us_per_request']} µs/req", flush=True)
                if r["success_rate"] < 1.0:
                    failures.append(f"{sc.name} at {qps:g} rps: success {r['success_rate']:.2%} {r['ret_codes']}")
            best = None
            for qps in ([] if sc.body_bytes else plan.max_steps):
                r = run_load(stack, sc, qps, plan.step_seconds, plan.conns,
                             out / "raw" / f"{sc.name}-step-{qps:g}.json")
                passed = held(r, qps, plan.step_seconds) and r["latency_us"]["99"] <= plan.p99_bound_ms * 1000
                result["steps"][f"{qps:g}"] = {"actual_qps": r["actual_qps"], "p99_us": r["latency_us"]["99"],
                                               "success_rate": r["success_rate"], "passed": passed}
                print(f"  step {qps:>6g} rps: {'pass' if passed else 'fail'} ({r['actual_qps']} served, "
                      f"p99 {r['latency_us']['99'] / 1000:.1f} ms)", flush=True)
                if not passed:
                    break
                best = r["actual_qps"]
            result["max_throughput"] = best
            summary["scenarios"][sc.name] = result
        except BaseException:
            stack.dump_logs()
            raise
        finally:
            stack.stop()

    if plan.bifrost_rates:
        full = replica
        summary["bifrost"] = {}
        summary["bifrost_scenario"] = full.name
        for protocol in plan.bifrost_protocols:
            print(f"bench: bifrost replica: {full.name}, provider latency 1.5 s, provider protocol {protocol}",
                  flush=True)
            for label, b in bifrost(plan, out, full, protocol).items():
                label = label if full.name == "full" else f"{full.name}, {label}"
                summary["bifrost"][label if protocol == "config" else f"{label}, {protocol}"] = b
        # The steps look for this machine's ceiling, so a higher rate not held is a
        # finding. The run fails if the lowest rate is not held, or if the
        # gateway refused a request (4xx: a budget or a config the bench got wrong).
        for label, b in summary["bifrost"].items():
            for i, (q, r) in enumerate(b["steps"].items()):
                refused = {c: n for c, n in r.get("ret_codes", {}).items() if c.startswith("4")}
                if refused or (i == 0 and not r["held"]):
                    failures.append(f"bifrost {label} at {q} rps: not held {refused or r.get('error') or ''}")

    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    from report import write_report  # noqa: E402  (matplotlib is slow to import)
    write_report(summary, out)
    print(f"bench: results in {out}")
    if failures:
        print("bench: FAILED — success below 100% where 100% is expected:\n  " + "\n  ".join(failures),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
