"""MCP servers behind the gate, end to end: the official MCP Python SDK
client (`mcp` 2.3.0, both its connect modes: `legacy`, the initialize
handshake with a session, and `auto`, the 2026-07-28 per-request protocol)
against a real MCP server made with the same package (tests/mcp_server.py,
two replicas behind the `mcp_demo` cluster), through real Envoy (its MCP
filter, ext_authz, the Wasm filter, stateful sessions, the credential
injector), authz-service and Redis.

The server counts every tool call that reaches it and answers only the
credential the gateway injects, so "refused without reaching the server"
and "credential injected" are read from the server itself.
"""
from __future__ import annotations

import asyncio
import copy
import base64
import json
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from helpers import admin
from plugin_config import envoy_variant
from test_observability import otlp_server
from stack import ROOT, Stack, free_ports

MCP_KEY = "tg-test-mcp"          # demo/get_weather, demo/search_docs; search_docs 3 a minute
MONEY_KEY = "tg-test-mcp-money"  # get_weather at $0.002 a call, $0.01 a day
TOKEN = "mock-mcp-demo-token"    # config/provider-keys.env: the server's own credential
ACCEPT = "application/json, text/event-stream"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer")


@pytest.fixture(scope="module")
def mcp(request, tmp_path_factory):
    """A private stack whose mcp_demo cluster has two replicas of the test
    server; yields (stack, {replica name: port})."""
    run_dir = tmp_path_factory.mktemp("mcp")
    ports = free_ports()
    replicas = {"a": ports["TG_MCP_DEMO_PORT"], "b": free_port()}
    aggregate_port = free_port()

    def second_replica(doc):
        """Replica b in mcp_demo, and the aggregate endpoint (/mcp): Envoy's
        MCP router on a loopback listener, with the two replicas as two
        servers, `demo` and `docs`, one cluster each (its calls to a server
        keep no stickiness: docs/architecture.md, "MCP servers")."""
        resources = doc["static_resources"]
        clusters = resources["clusters"]
        cluster = next(c for c in clusters if c["name"] == "mcp_demo")
        for name, port in (("mcp_demo_one", replicas["a"]), ("mcp_docs_one", replicas["b"])):
            one = copy.deepcopy(cluster)
            one["name"] = one["load_assignment"]["cluster_name"] = name
            one["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"][
                "socket_address"]["port_value"] = port
            clusters.append(one)
        cluster["load_assignment"]["endpoints"][0]["lb_endpoints"].append(
            {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": replicas["b"]}}}})
        clusters.append(aggregate_cluster(aggregate_port))
        resources["listeners"].append(aggregate_listener(aggregate_port))
        gateway = resources["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
        routes = gateway["route_config"]["virtual_hosts"][0]["routes"]
        demo = next(r for r in routes if r.get("name") == "mcp_demo")
        routes.insert(0, {"name": "mcp_aggregate", "match": {"path": "/mcp"},
                          "route": {"cluster": "mcp_aggregate", "timeout": "0s"},
                          "typed_per_filter_config": {
                              "envoy.filters.http.mcp": demo["typed_per_filter_config"]["envoy.filters.http.mcp"]}})

    config = envoy_variant(run_dir / "envoy-mcp.yaml", envoy=second_replica)
    received: list[dict] = []
    otlp = otlp_server(received)
    stack = Stack(run_dir=run_dir, ports=ports, envoy_config=config, envoy_concurrency=1,
                  authz_args=("--redis-timeout-ms", "100"),
                  otlp_endpoint=f"http://127.0.0.1:{otlp.server_address[1]}")
    stack.spans = received
    failed_before = request.session.testsfailed
    procs = []
    try:
        stack.start()  # refuses ports in use: the replicas start after it
        for name, port in replicas.items():
            log = open(run_dir / f"mcp-{name}.log", "wb")
            procs.append(subprocess.Popen(
                [sys.executable, str(ROOT / "tests" / "mcp_server.py"), "--port", str(port), "--replica", name,
                 "--token", TOKEN], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT))
        for port in replicas.values():
            wait_http(f"http://127.0.0.1:{port}/_stats")
        yield stack, replicas
    finally:
        stack.stop()
        otlp.shutdown()
        otlp.server_close()
        for p in procs:
            p.terminate()
            p.wait(5)
        if request.session.testsfailed > failed_before:
            stack.dump_logs()
            for name in replicas:
                print(f"===== mcp-{name}.log =====\n{(run_dir / f'mcp-{name}.log').read_text()[-3000:]}")


def aggregate_cluster(port: int) -> dict:
    return {"name": "mcp_aggregate", "type": "STATIC", "connect_timeout": "1s",
            "load_assignment": {"cluster_name": "mcp_aggregate", "endpoints": [{"lb_endpoints": [
                {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": port}}}}]}]}}


def aggregate_listener(port: int) -> dict:
    """Every MCP server behind one endpoint: the gateway's /mcp route sends
    here, after ext_authz and the Wasm filter; Envoy's MCP router answers
    initialize and tools/list from every server (tools named
    <server>__<tool>), sends each call to its server, and binds its
    sessions (no store: the session id holds the servers' ids) to the key
    id authz-service set. README, "MCP servers behind the gate", shows the
    same config."""
    servers = [{"name": name, "mcp_cluster": {"cluster": cluster, "path": "/mcp"},
                "header_forwarding": {"forward_all": True,
                                      "disallowed_headers": {"patterns": [{"prefix": "x-tollgate-"}]}}}
               for name, cluster in (("demo", "mcp_demo_one"), ("docs", "mcp_docs_one"))]
    return {"name": "mcp_aggregate", "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
            "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
                         "HttpConnectionManager",
                "stat_prefix": "mcp_aggregate",
                "route_config": {"virtual_hosts": [{"name": "mcp", "domains": ["*"], "routes": [
                    {"match": {"prefix": "/"}, "route": {"cluster": "mcp_demo_one", "timeout": "0s"}}]}]},
                "http_filters": [
                    {"name": "envoy.filters.http.mcp", "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.http.mcp.v3.Mcp",
                        "traffic_mode": "REJECT_NO_MCP"}},
                    {"name": "envoy.filters.http.mcp_router", "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.http.mcp_router.v3.McpRouter",
                        "servers": servers,
                        "session_identity": {"identity": {"header": {"name": "x-tollgate-key-id"}},
                                             "validation": {"mode": "ENFORCE"}}}}]}}]}]}


def url(stack: Stack, server: str = "demo") -> str:
    return f"http://127.0.0.1:{stack.ports['TG_GATEWAY_PORT']}/mcp/{server}"


def stats(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stats", timeout=5) as r:
        return json.load(r)


def calls(replicas: dict, tool: str) -> int:
    return sum(stats(p)["calls"].get(tool, 0) for p in replicas.values())


async def session(stack, key: str, mode: str, work):
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {key}"}, timeout=20)
    async with Client(streamable_http_client(url(stack), http_client=http), mode=mode) as c:
        return await work(c)


def run(stack, key, mode, work):
    return asyncio.run(session(stack, key, mode, work))


def post(stack, body: bytes | str, headers: dict | None = None, server: str = "demo"):
    """A raw POST to the gateway: (status, headers, parsed JSON body)."""
    h = {"content-type": "application/json", "accept": ACCEPT, **(headers or {})}
    data = body.encode() if isinstance(body, str) else body
    req = urllib.request.Request(url(stack, server), data=data, headers=h, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            status, hs, raw = r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        status, hs, raw = e.code, dict(e.headers), e.read()
    try:
        return status, hs, json.loads(raw)
    except ValueError:
        return status, hs, raw.decode(errors="replace")


def initialize(target: str, key: str) -> str:
    """A raw initialize (the 2025-11-25 handshake): the session id the
    client is given."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}})
    req = urllib.request.Request(target, data=body.encode(), method="POST", headers={
        "content-type": "application/json", "accept": ACCEPT, "authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        r.read()
        return r.headers["mcp-session-id"]


def tool_call(name: str, id_=41, args=None) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": id_, "method": "tools/call",
                       "params": {"name": name, "arguments": args or {}}})


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_an_allowed_tool_works_and_the_list_shows_only_allowed_tools(mcp, mode):
    stack, replicas = mcp
    before = calls(replicas, "get_weather")
    refused = {name: stats(p)["unauthorized"] for name, p in replicas.items()}

    async def work(c):
        listed = sorted(t.name for t in (await c.list_tools()).tools)
        result = await c.call_tool("get_weather", {"city": "Paris"})
        return listed, result

    listed, result = run(stack, MCP_KEY, mode, work)
    # The server has three tools; the key may call two of them.
    assert listed == ["get_weather", "search_docs"]
    assert not result.is_error
    assert "Sunny in Paris" in result.content[0].text
    assert calls(replicas, "get_weather") == before + 1
    # The server answers only its own credential, which the gateway adds:
    # the call went through, none was refused, and without it the server
    # refuses (so the check is real).
    assert {name: stats(p)["unauthorized"] for name, p in replicas.items()} == refused
    status, body = post_direct(replicas["a"])
    assert status == 401 and body["error"]["message"] == "missing or wrong server credential"


def post_direct(port: int):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=tool_call("get_weather").encode(),
                                 headers={"content-type": "application/json", "accept": ACCEPT,
                                          "authorization": "Bearer tg-test-mcp"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_a_forbidden_tool_is_a_jsonrpc_error_that_never_reaches_the_server(mcp, mode):
    stack, replicas = mcp

    async def work(c):
        with pytest.raises(MCPError) as err:
            await c.call_tool("delete_repo", {"name": "prod"})
        return err.value

    err = run(stack, MCP_KEY, mode, work)
    assert err.error.code == -31001
    assert 'may not call tool "delete_repo" of MCP server "demo"' in err.error.message
    assert calls(replicas, "delete_repo") == 0
    # On the wire: HTTP 403, the request's own id, the reason in data.code.
    status, headers, body = post(stack, tool_call("delete_repo", id_="req-7"),
                                 {"authorization": f"Bearer {MCP_KEY}"})
    assert status == 403 and headers["content-type"] == "application/json"
    assert body["jsonrpc"] == "2.0" and body["id"] == "req-7"
    assert body["error"]["code"] == -31001 and body["error"]["data"]["code"] == "tool_not_allowed"
    assert calls(replicas, "delete_repo") == 0


def refusals(stack, **labels) -> str:
    """authz-service's /metrics, asserting that the test key's series of
    tollgate_authz_mcp_refusals_total with `labels` counted at least one."""
    with urllib.request.urlopen(f"{stack.authz_http_url}/metrics", timeout=5) as r:
        text = r.read().decode()
    labels = {"tenant": "test-mcp", "key": "mcp-key", **labels}
    series = [line for line in text.splitlines() if line.startswith("tollgate_authz_mcp_refusals_total{")]
    assert any(all(f'{k}="{v}"' in line for k, v in labels.items()) and float(line.split()[-1]) >= 1
               for line in series), series
    return text


def test_calls_per_minute_answer_in_mcps_error_shape(mcp):
    stack, replicas = mcp
    before = calls(replicas, "search_docs")

    async def work(c):
        done = [await c.call_tool("search_docs", {"query": f"q{i}"}) for i in range(3)]
        with pytest.raises(MCPError) as err:
            await c.call_tool("search_docs", {"query": "one too many"})
        return done, err.value

    done, err = run(stack, MCP_KEY, "legacy", work)
    assert [r.is_error for r in done] == [False] * 3
    assert err.error.code == -31002
    assert re.search(r"Rate limit reached for key mcp-key, MCP calls of demo/search_docs on requests per minute: "
                     r"limit 3, remaining 0\. Please try again in \d+", err.error.message), err.error.message
    assert calls(replicas, "search_docs") == before + 3
    status, headers, body = post(stack, tool_call("search_docs", id_=99), {"authorization": f"Bearer {MCP_KEY}"})
    assert status == 429 and int(headers["retry-after"]) >= 1
    assert body["id"] == 99 and body["error"]["code"] == -31002
    assert body["error"]["data"]["code"] == "rate_limit_exceeded" and body["error"]["data"]["retry_after"] >= 1
    assert headers["x-ratelimit-limit-requests"] == "3"
    # Other tools of the key are not held to search_docs' limit.
    assert run(stack, MCP_KEY, "auto", lambda c: c.call_tool("get_weather", {"city": "Oslo"})).is_error is False
    assert calls(replicas, "search_docs") == before + 3
    # A granted call a limit refused is counted under its server and tool.
    refusals(stack, server="demo", tool="search_docs", reason="rate_limit_exceeded")


def test_a_calls_price_is_counted_in_the_money_budget(mcp):
    stack, replicas = mcp
    before = calls(replicas, "get_weather")

    async def work(c):
        ok = []
        with pytest.raises(MCPError) as err:
            for i in range(7):
                ok.append(await c.call_tool("get_weather", {"city": f"c{i}"}))
        return ok, err.value

    ok, err = run(stack, MONEY_KEY, "auto", work)
    # $0.01 a day at $0.002 a call: five calls, or four when the instance
    # still leases a part of the budget too small for a call (the money
    # leases' documented shortfall, docs/architecture.md).
    assert len(ok) in (4, 5) and not any(r.is_error for r in ok)
    assert err.error.code == -31003
    assert "Budget exhausted for key mcp-money-key: $0.01 per day" in err.error.message, err.error.message
    assert "this request may cost up to $0.002" in err.error.message
    assert calls(replicas, "get_weather") == before + len(ok)

    def spent() -> str:
        out = subprocess.run(
            [str(ROOT / "target" / "release" / "tollgate-authz"), "spend", "--policy", str(stack.policy),
             "--redis-url", f"redis://127.0.0.1:{stack.ports['TG_REDIS_PORT']}", "--tenant", "test-mcp-money"],
            capture_output=True, text=True, timeout=20)
        assert out.returncode == 0, out.stderr
        return next(line for line in out.stdout.splitlines() if line.startswith("key mcp-money-key")).split()[4]

    # Money an instance still leases is returned after 1 s idle; then the
    # key's day holds exactly the admitted calls' prices.
    want = f"{0.002 * len(ok):.3f}".rstrip("0")
    deadline = time.monotonic() + 10
    while (got := spent()) != want and time.monotonic() < deadline:
        time.sleep(0.5)
    assert got == want


def test_a_key_made_through_the_admin_api_carries_its_mcp_grants(mcp):
    """A key made with the admin API gets servers, tools and calls limits as
    a policy file's key does; an update that removes them refuses the next
    call; a grant the policy would refuse is a 400 naming it."""
    stack, replicas = mcp
    grants = {"tools": ["demo/get_weather"], "limits": {"demo/get_weather": {"calls_per_minute": 2}}}
    status, made = admin(stack, "POST", "/admin/keys", {"tenant": "test-mcp", "id": "mcp-api", "mcp": grants})
    assert status == 201, made
    assert made["key"]["mcp"] == grants
    key = made["secret"]
    before, docs = calls(replicas, "get_weather"), calls(replicas, "search_docs")

    async def work(c):
        listed = sorted(t.name for t in (await c.list_tools()).tools)
        done = [await c.call_tool("get_weather", {"city": f"c{i}"}) for i in range(2)]
        with pytest.raises(MCPError) as limited:
            await c.call_tool("get_weather", {"city": "one too many"})
        with pytest.raises(MCPError) as forbidden:
            await c.call_tool("search_docs", {"query": "q"})
        return listed, done, limited.value, forbidden.value

    listed, done, limited, forbidden = run(stack, key, "auto", work)
    assert listed == ["get_weather"]
    assert [r.is_error for r in done] == [False, False]
    assert limited.error.code == -31002 and "limit 2, remaining 0" in limited.error.message
    assert forbidden.error.code == -31001
    assert calls(replicas, "get_weather") == before + 2 and calls(replicas, "search_docs") == docs

    status, changed = admin(stack, "PATCH", "/admin/keys/mcp-api", {"mcp": None})
    assert status == 200 and changed["mcp"] is None, changed
    status, _, body = post(stack, tool_call("get_weather", id_=5), {"authorization": f"Bearer {key}"})
    assert status == 403 and body["error"]["data"]["code"] == "tool_not_allowed", body
    assert calls(replicas, "get_weather") == before + 2

    status, refused = admin(stack, "PATCH", "/admin/keys/mcp-api", {"mcp": {"limits": {"a b": {"calls_per_minute": 1}}}})
    assert status == 400 and refused["error"]["code"] == "invalid_key", refused
    assert 'mcp.limits key "a b"' in refused["error"]["message"]


def test_a_session_stays_on_the_replica_that_created_it(mcp):
    stack, replicas = mcp
    seen_before = {name: dict(stats(p)["seen_sessions"]) for name, p in replicas.items()}

    async def work(c):
        for i in range(4):
            await c.call_tool("get_weather", {"city": f"s{i}"})
        return c.session if hasattr(c, "session") else None

    for _ in range(6):
        run(stack, "tg-demo-key", "legacy", work)
    created = {name: set(stats(p)["sessions"]) for name, p in replicas.items()}
    seen = {name: stats(p)["seen_sessions"] for name, p in replicas.items()}
    new = {name: {s: n - seen_before[name].get(s, 0) for s, n in seen[name].items()
                  if n > seen_before[name].get(s, 0)} for name in replicas}
    # Round robin spread the six sessions over both replicas...
    assert all(new[name] for name in replicas), new
    for name in replicas:
        other = "b" if name == "a" else "a"
        for sid, n in new[name].items():
            # ...and every request of a session reached the replica that
            # created it (initialized notification, 4 calls, DELETE at least),
            # never the other one.
            assert sid in created[name] and sid not in created[other]
            assert n >= 5, (sid, n)
            assert sid not in seen[other]


def test_the_client_sees_a_gateway_session_id_the_server_never_gets(mcp):
    stack, replicas = mcp
    client_sid = initialize(url(stack), MCP_KEY)
    server_sids = {name: stats(p)["sessions"] for name, p in replicas.items()}
    # The envelope (Envoy's stateful_session): base64 of the replica's
    # address, then `;UV:` and base64 of the server's own id.
    host, _, inner = client_sid.partition(";UV:")
    replica = base64.b64decode(host).decode()
    sid = base64.b64decode(inner).decode()
    name = next(n for n, p in replicas.items() if replica == f"127.0.0.1:{p}")
    assert sid in server_sids[name] and client_sid not in server_sids[name]


@pytest.mark.parametrize("case", [
    # (body, headers, status, JSON-RPC code, words in the message)
    ('{"jsonrpc":"2.0","id":1,"method":', {}, 400, -32700, "Parse error"),
    ('[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]', {}, 400, -32600, "Invalid MCP request"),
    ('{"foo":1}', {}, 400, -32600, "Invalid MCP request"),
    ('{"jsonrpc":"2.0","id":1,"method":"tools/list"}', {"content-type": "text/plain"}, 400, -32600,
     "content-type application/json"),
    ('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_weather","name":"delete_repo"}}',
     {}, 400, -32600, "Invalid MCP request"),
    ('{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":5}}', {}, 400, -32602, "params.name"),
], ids=["truncated", "batch", "not-jsonrpc", "text-plain", "duplicate-name", "name-not-string"])
def test_bad_input_gets_a_clear_jsonrpc_error(mcp, case):
    stack, replicas = mcp
    body, headers, status, code, words = case
    got, hs, answer = post(stack, body, {"authorization": f"Bearer {MCP_KEY}", **headers})
    assert got == status, answer
    assert hs["content-type"].startswith("application/json")
    assert answer["jsonrpc"] == "2.0" and answer["error"]["code"] == code, answer
    assert words in answer["error"]["message"], answer


def test_a_huge_body_an_unknown_server_and_a_missing_key(mcp):
    stack, replicas = mcp
    huge = tool_call("get_weather", args={"city": "x" * (2 * 1024 * 1024)})
    status, _, body = post(stack, huge, {"authorization": f"Bearer {MCP_KEY}"})
    assert status == 413 and body["error"]["code"] == -32600 and "too large" in body["error"]["message"]
    status, _, body = post(stack, tool_call("x"), {"authorization": f"Bearer {MCP_KEY}"}, server="nope")
    assert status in (403, 404), body
    assert body["jsonrpc"] == "2.0" and body["error"]["code"] in (-31001, -32601)
    # 401 with the challenge MCP's authorization section asks for, in JSON-RPC.
    status, headers, body = post(stack, tool_call("get_weather", id_=3))
    assert status == 401 and headers["www-authenticate"] == 'Bearer realm="tollgate"'
    assert body["id"] == 3 and body["error"]["code"] == -31000
    status, headers, body = post(stack, tool_call("get_weather", id_=4), {"authorization": "Bearer tg-wrong"})
    assert status == 401 and 'error="invalid_token"' in headers["www-authenticate"]
    assert "tg-wrong" not in json.dumps(body)


def test_every_call_is_in_the_access_log_and_the_metrics(mcp):
    stack, replicas = mcp

    def logged():
        """The access log's tool calls: (get_weather done by the test key,
        drop_tables tried: a name only this test calls)."""
        lines = [json.loads(line) for line in stack.log_path("envoy").read_text().splitlines()
                 if line.startswith("{") and '"mcp_method"' in line]
        calls_logged = [x for x in lines if x.get("mcp_method") == "tools/call"]
        ok = [x for x in calls_logged if x.get("mcp_tool") == "get_weather" and x.get("mcp_outcome") == "ok"
              and x.get("tenant") == "test-mcp"]
        return ok, [x for x in calls_logged if x.get("mcp_tool") == "drop_tables"], lines

    ok_before, refused_before, _ = logged()
    run(stack, MCP_KEY, "auto", lambda c: c.call_tool("get_weather", {"city": "Rome"}))
    status, _, _ = post(stack, tool_call("drop_tables", id_=8), {"authorization": f"Bearer {MCP_KEY}"})
    assert status == 403
    deadline = time.monotonic() + 20
    while True:
        # The access log is flushed on a timer: wait for this test's lines.
        ok, refused, lines = logged()
        if len(ok) > len(ok_before) and len(refused) > len(refused_before):
            break
        assert time.monotonic() < deadline, lines[-5:]
        time.sleep(0.5)
    line = ok[-1]
    assert line["key_id"] == "mcp-key" and line["mcp_server"] == "demo" and line["mcp_decision"] == "allowed"
    assert isinstance(line["duration_ms"], int)
    bad = refused[-1]
    assert bad["status"] == 403 and bad["mcp_decision"] == "tool_not_allowed"
    assert bad["mcp_key_id"] == "mcp-key" and bad["mcp_tenant"] == "test-mcp"
    # Metrics by tenant, key, server, tool and outcome.
    with urllib.request.urlopen(f"{stack.admin_url}/stats/prometheus", timeout=5) as r:
        prom = r.read().decode()
    assert re.search(r'tollgate_mcp_calls\{[^}]*tollgate_tenant="test-mcp"[^}]*tollgate_key="mcp-key"'
                     r'[^}]*tollgate_mcp_server="demo"[^}]*tollgate_mcp_tool="get_weather"'
                     r'[^}]*tollgate_mcp_outcome="ok"[^}]*\} [1-9]', prom), \
        [x for x in prom.splitlines() if "mcp" in x][:20]
    # Refused calls never reach the filter's metrics: authz-service counts
    # them, the server and tool the key was refused as `other` (a client's
    # name is never a series).
    authz = refusals(stack, server="other", tool="other", reason="tool_not_allowed")
    assert "drop_tables" not in authz
    prom += authz
    # No credential anywhere: the server's token, the virtual keys.
    text = stack.log_path("envoy").read_text() + prom
    for secret in (TOKEN, MCP_KEY, MONEY_KEY):
        assert secret not in text


def test_a_tool_calls_span_carries_mcp_attributes(mcp):
    stack, replicas = mcp
    run(stack, MCP_KEY, "legacy", lambda c: c.call_tool("get_weather", {"city": "Kyiv"}))
    deadline = time.monotonic() + 20
    while True:
        mine = [s["attributes"] for s in stack.spans if s["attributes"].get("gen_ai.tool.name") == "get_weather"
                and s["attributes"].get("tollgate.tenant") == "test-mcp"]
        if mine or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert mine, stack.spans[-3:]
    a = mine[-1]
    assert a["mcp.method.name"] == "tools/call" and a["gen_ai.operation.name"] == "execute_tool"
    assert a["tollgate.key_id"] == "mcp-key" and a["tollgate.mcp.server"] == "demo"
    assert a.get("tollgate.mcp.outcome") == "ok", a
    assert a["jsonrpc.request.id"] and a["mcp.session.id"] and a["mcp.protocol.version"]


# ---- Claude Code with the gateway as its HTTP MCP server -----------------
# The real CLI (scripts/agent_clis.py), its model requests through the same
# gateway to mock-llm, whose scripted-agent directive makes the model call
# the MCP tool (Claude Code names it mcp__<server name>__<tool>).

@pytest.fixture(scope="module")
def claude():
    import agent_clis
    try:
        return agent_clis.binary("claude")
    except agent_clis.Unavailable as err:
        pytest.skip(str(err))


def claude_with_gateway_mcp(stack, key: str, tmp_path: Path, prompt: str, *tools: str):
    from agent_clis import claude_env, run_claude
    config = {"mcpServers": {"tollgate": {"type": "http", "url": url(stack),
                                          "headers": {"Authorization": f"Bearer {key}"}}}}
    work = tmp_path / "work"
    work.mkdir()
    env = claude_env(stack.base_url.removesuffix("/v1"), key, tmp_path / "home")
    return run_claude(env, work, prompt, "--mcp-config", json.dumps(config), "--strict-mcp-config",
                      "--allowedTools", ",".join(f"mcp__tollgate__{t}" for t in tools))


def model_requests(stack, marker: str) -> list[dict]:
    with urllib.request.urlopen(f"{stack.mock_url}/_mock/stats", timeout=5) as r:
        return [q for q in json.load(r)["recent"] if marker in json.dumps(q["body"])]


def declared_tools(request: dict) -> set[str]:
    return {t.get("name") for t in request["body"].get("tools", [])}


def test_claude_code_completes_a_prompt_with_an_allowed_mcp_tool(mcp, claude, tmp_path):
    from agent_clis import directive, output
    stack, replicas = mcp
    before = calls(replicas, "get_weather")
    marker = f"task-{time.monotonic_ns()}"
    prompt = f"What is the weather in Lima? ({marker}) " + directive(("mcp__tollgate__get_weather", {"city": "Lima"}))
    run = claude_with_gateway_mcp(stack, "tg-demo-key", tmp_path, prompt, "get_weather")
    assert run.returncode == 0, output(run)
    assert "mock agent result:" in run.stdout and "Sunny in Lima" in run.stdout, output(run)
    assert calls(replicas, "get_weather") == before + 1
    # The model was offered the key's tools only: the gateway's filtered list.
    offered = declared_tools(model_requests(stack, marker)[0])
    assert {"mcp__tollgate__get_weather", "mcp__tollgate__search_docs"} <= offered
    assert "mcp__tollgate__delete_repo" not in offered


def test_claude_code_cannot_use_a_forbidden_mcp_tool(mcp, claude, tmp_path):
    from agent_clis import directive, output
    stack, replicas = mcp
    marker = f"task-{time.monotonic_ns()}"
    prompt = f"Delete the repo. ({marker}) " + directive(("mcp__tollgate__delete_repo", {"name": "prod"}))
    run = claude_with_gateway_mcp(stack, "tg-demo-key", tmp_path, prompt, "get_weather", "delete_repo")
    # The gateway's tools/list never offered it, so the model cannot name it
    # (mock-llm refuses a call of an undeclared tool, as the real APIs do).
    assert "deleted prod" not in run.stdout, output(run)
    asked = model_requests(stack, marker)
    assert asked and all("mcp__tollgate__delete_repo" not in declared_tools(q) for q in asked), output(run)
    assert calls(replicas, "delete_repo") == 0


def test_claude_code_gets_the_limit_in_mcps_error_shape(mcp, claude, tmp_path):
    from agent_clis import directive, output
    stack, replicas = mcp
    marker = f"task-{time.monotonic_ns()}"
    # tg-test-mcp: search_docs 3 calls a minute; five calls pass it.
    steps = [("mcp__tollgate__search_docs", {"query": f"q{i}"}) for i in range(5)]
    run = claude_with_gateway_mcp(stack, MCP_KEY, tmp_path, f"Search. ({marker}) " + directive(*steps),
                                  "search_docs")
    assert run.returncode == 0, output(run)
    # The last tool result, quoted by the model's final answer, is the
    # gateway's JSON-RPC error as Claude Code shows it.
    assert "Rate limit reached for key mcp-key, MCP calls of demo/search_docs" in run.stdout, output(run)


# ---- Every MCP server behind one endpoint (/mcp, Envoy's MCP router) -----

def aggregate_url(stack) -> str:
    return f"http://127.0.0.1:{stack.ports['TG_GATEWAY_PORT']}/mcp"


def test_the_aggregate_endpoint_prefixes_filters_and_routes_tools(mcp):
    stack, replicas = mcp
    before = calls(replicas, "get_weather")

    async def work(c):
        listed = sorted(t.name for t in (await c.list_tools()).tools)
        ok = await c.call_tool("demo__get_weather", {"city": "Quito"})
        with pytest.raises(MCPError) as err:
            await c.call_tool("demo__delete_repo", {"name": "prod"})
        return listed, ok, err.value

    async def session(key):
        http = httpx2.AsyncClient(headers={"authorization": f"Bearer {key}"}, timeout=20)
        async with Client(streamable_http_client(aggregate_url(stack), http_client=http), mode="auto") as c:
            return await work(c)

    listed, ok, err = asyncio.run(session(MCP_KEY))
    # Both servers' tools, prefixed; the key's two of demo only.
    assert listed == ["demo__get_weather", "demo__search_docs"]
    assert not ok.is_error and "Sunny in Quito" in ok.content[0].text
    assert err.error.code == -31001 and 'may not call tool "delete_repo" of MCP server "demo"' in err.error.message
    assert calls(replicas, "get_weather") == before + 1
    assert calls(replicas, "delete_repo") == 0


def test_an_aggregate_session_belongs_to_the_key_that_made_it(mcp):
    stack, replicas = mcp
    sid = initialize(aggregate_url(stack), MCP_KEY)
    # No session store: the id holds the servers' own session ids and the
    # key id it was made for.
    decoded = base64.b64decode(sid).decode()
    assert "demo:" in decoded and "docs:" in decoded and base64.b64encode(b"mcp-key").decode() in decoded
    listing = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    status, _, _ = post_to(aggregate_url(stack), listing, {"authorization": "Bearer tg-demo-key",
                                                           "mcp-session-id": sid})
    assert status == 403


def post_to(target: str, body: str, headers: dict):
    req = urllib.request.Request(target, data=body.encode(), method="POST", headers={
        "content-type": "application/json", "accept": ACCEPT, **headers})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()
