"""Envoy's own error replies reach clients as OpenAI-format JSON.

Each test starts a private stack and breaks one thing: a provider that is
down, a provider slower than the route timeout, a full queue, authz-service
down, a body that is too large.
"""
from __future__ import annotations

import concurrent.futures
import json
import re
import socket
import threading
import time
import urllib.request

import openai
import pytest

from helpers import HI, assert_openai_error, post

CHAT = {"model": "openai/gpt-4o-mini", "messages": HI}


def auth(demo_key: str) -> dict:
    return {"authorization": f"Bearer {demo_key}"}


def variant(tmp_path, **subs) -> "Path":
    """envoy.yaml with regex substitutions applied, written to tmp_path."""
    from stack import ROOT
    text = (ROOT / "envoy.yaml").read_text()
    for pattern, repl in subs.values():
        text, n = re.subn(pattern, repl, text)
        assert n, f"pattern {pattern!r} not found in envoy.yaml"
    out = tmp_path / "envoy-variant.yaml"
    out.write_text(text)
    return out


class TimeoutProbes:
    """Connections that wait for Envoy's own timeouts (about 10 s each), opened
    to the shared stack when this module starts so that the waits run beside
    its other tests; each test then reads its probe's outcome."""

    def __init__(self, port: int):
        self.port, self.outcomes, self.threads = port, {}, {}
        for name, send in (("silent", b""),  # sends nothing at all
                           ("unfinished", b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")):  # headers never end
            self.threads[name] = threading.Thread(target=self._probe, args=(name, send), daemon=True)
            self.threads[name].start()

    def _probe(self, name: str, send: bytes) -> None:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=30) as sock:
                started = time.monotonic()
                if send:
                    sock.sendall(send)
                raw = b""
                while chunk := sock.recv(4096):
                    raw += chunk
                self.outcomes[name] = (raw, time.monotonic() - started)
        except OSError as err:
            self.outcomes[name] = err

    def result(self, name: str) -> tuple[bytes, float]:
        self.threads[name].join(40)
        outcome = self.outcomes.get(name)
        assert isinstance(outcome, tuple), outcome  # the socket's own timeout (30 s) did not fire
        return outcome


@pytest.fixture(scope="module", autouse=True)
def timeout_probes(stack):
    return TimeoutProbes(stack.ports["TG_GATEWAY_PORT"])


def test_provider_down_is_502_upstream_unavailable(make_stack, demo_key):
    s = make_stack()
    s.stop_component("mock")
    status, _, body = post(f"{s.base_url}/chat/completions", CHAT, auth(demo_key))
    assert status == 502, body
    assert_openai_error(body, "upstream_unavailable")
    # Envoy's transport detail stays in the logs.
    message = body["error"]["message"].lower()
    for internal in ("reset", "connect error", "transport failure", "delayed connect"):
        assert internal not in message, body


def test_slow_provider_is_504_upstream_timeout(make_stack, demo_key, tmp_path):
    cfg = variant(tmp_path, t=(r"timeout: 600s", "timeout: 0.5s"))
    s = make_stack(envoy_config=cfg)
    status, _, body = post(f"{s.base_url}/chat/completions", CHAT,
                           {**auth(demo_key), "x-mock-latency-ms": "3000"})
    assert status == 504, body
    assert_openai_error(body, "upstream_timeout")


def test_full_queue_is_503_gateway_overloaded(make_stack, demo_key, tmp_path):
    cfg = variant(tmp_path,
                  c=(r"max_connections: 10000", "max_connections: 1"),
                  p=(r"max_pending_requests: 10000", "max_pending_requests: 1"),
                  r=(r"max_requests: 10000", "max_requests: 1"))
    s = make_stack(envoy_config=cfg)
    headers = {**auth(demo_key), "x-mock-latency-ms": "1500"}
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda _: post(f"{s.base_url}/chat/completions", CHAT, headers), range(6)))
    statuses = sorted(r[0] for r in results)
    assert 200 in statuses, statuses
    overloaded = [r for r in results if r[0] == 503]
    assert overloaded, statuses
    for _, headers, body in overloaded:
        assert_openai_error(body, "gateway_overloaded")
        assert headers["retry-after"] == "1", dict(headers)


def test_authz_down_is_503_and_nothing_passes(make_stack, demo_key):
    s = make_stack()
    s.stop_component("authz")
    status, headers, body = post(f"{s.base_url}/chat/completions", CHAT, auth(demo_key))
    assert status == 503, body
    assert_openai_error(body, "authz_unavailable")
    assert headers["retry-after"] == "1", dict(headers)


@pytest.mark.parametrize("mib", [9, 17], ids=["over-filter-limit", "over-envoy-buffer"])
def test_body_over_the_limit_is_413(stack, demo_key, mib):
    client = openai.OpenAI(base_url=stack.base_url, api_key=demo_key, max_retries=0, timeout=30)
    with pytest.raises(openai.APIStatusError) as exc:
        client.chat.completions.create(model="openai/gpt-4o-mini",
                                       messages=[{"role": "user", "content": "x" * (mib << 20)}])
    assert exc.value.status_code == 413
    assert_openai_error({"error": exc.value.body}, "request_too_large")  # the client unwraps "error"


@pytest.mark.parametrize("path", ["/", "/v2/chat", "/healthz"])
def test_unknown_path_is_404_openai_error(stack, demo_key, path):
    url = stack.base_url.removesuffix("/v1") + path
    status, _, body = post(url, CHAT, auth(demo_key))
    assert status == 404, body
    assert_openai_error(body)


def test_headers_too_large_is_431_openai_error(stack, demo_key):
    status, headers, body = post(f"{stack.base_url}/chat/completions", CHAT,
                                 {**auth(demo_key), "x-large": "a" * 70_000})
    assert status == 431, body
    assert headers["content-type"] == "application/json"
    assert_openai_error(body, "request_headers_too_large")
    assert "aaaa" not in body["error"]["message"]


def test_connection_that_sends_nothing_is_closed(timeout_probes):
    first, waited = timeout_probes.result("silent")
    assert first == b""  # closed by Envoy, not by our timeout
    assert 5 < waited < 30, waited


def test_connections_past_the_limit_are_refused(make_stack, demo_key, tmp_path):
    cfg = variant(tmp_path, m=(r"max_active_downstream_connections: 20000",
                               "max_active_downstream_connections: 3"))
    s = make_stack(envoy_config=cfg)
    port = s.ports["TG_GATEWAY_PORT"]
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3)]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as extra:
            try:
                refused = extra.recv(1) == b""
            except ConnectionResetError:
                refused = True
        assert refused
        for sock in held[1:]:
            sock.close()
        held = held[:1]
        deadline = time.monotonic() + 10
        status, body = None, None
        while status != 200 and time.monotonic() < deadline:  # a freed slot serves again
            try:
                status, _, body = post(f"{s.base_url}/chat/completions", CHAT, auth(demo_key))
            except OSError as err:  # refused while Envoy still counts the closed ones
                body = err
                time.sleep(0.2)
        assert status == 200, body
    finally:
        for sock in held:
            sock.close()
    with urllib.request.urlopen(f"{s.admin_url}/stats?filter=downstream_global_cx_overflow", timeout=5) as r:
        stats = r.read().decode()
    assert re.search(r"127\.0\.0\.1_\d+\.downstream_global_cx_overflow: [1-9]", stats), stats


def test_headers_not_finished_in_time_is_408_openai_error(timeout_probes):
    raw, _ = timeout_probes.result("unfinished")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), raw
    assert b"content-type: application/json" in head.lower(), raw
    assert_openai_error(json.loads(body), "request_timeout")
