"""Metrics per tenant and key, the JSON access log and OpenTelemetry traces,
end to end: real Envoy with the built Wasm filter, authz-service, Redis and
mock-llm, the official openai client, and a small OTLP/HTTP receiver.
"""
from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest

from helpers import HI

ROUTE = {"tollgate_tenant": "demo", "tollgate_key": "demo-key",
         "tollgate_provider": "openai", "tollgate_model": "gpt-4o-mini"}
# Every credential of the default stack: the demo virtual key and the
# provider keys of envoy.yaml (the mock accepts exactly these).
SECRETS = ("tg-demo-key", "mock-openai-key-1", "mock-openai-key-2", "mock-anthropic-key-1",
           "mock-anthropic-key-2", "mock-mistral-key-1", "mock-azure-key-1", "mock-gemini-key-1",
           "mock-bedrock-secret-1")


@pytest.fixture(scope="module")
def client(stack, demo_key):
    return openai.OpenAI(base_url=stack.base_url, api_key=demo_key, max_retries=0, timeout=20)


def prometheus(stack) -> list[tuple[str, dict[str, str], float]]:
    with urllib.request.urlopen(f"{stack.admin_url}/stats/prometheus", timeout=5) as resp:
        text = resp.read().decode()
    samples = []
    for line in text.splitlines():
        m = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)", line)
        if m:
            labels = dict(re.findall(r'([a-zA-Z_]+)="([^"]*)"', m.group(2) or ""))
            samples.append((m.group(1), labels, float(m.group(3))))
    return samples


def value(samples, name: str, **labels) -> float | None:
    """The sample `name` whose labels include `labels`, or None."""
    for n, ls, v in samples:
        if n == name and all(ls.get(k) == want for k, want in labels.items()):
            return v
    return None


def test_metrics_are_labelled_by_tenant_key_provider_and_model(stack, client):
    before = prometheus(stack)
    resp = client.chat.completions.create(model="openai/gpt-4o-mini", messages=HI)
    chunks = list(client.chat.completions.create(model="openai/gpt-4o-mini", messages=HI, stream=True,
                                                 stream_options={"include_usage": True}))
    usage = [c.usage for c in chunks if c.usage][-1]
    def grew(name):
        return (value(after, name, **ROUTE) or 0) - (value(before, name, **ROUTE) or 0)

    # Counters show at once; histograms after Envoy's stats flush (5 s).
    deadline = time.monotonic() + 20
    while True:
        after = prometheus(stack)
        if grew("tollgate_requests") >= 2 and grew("tollgate_tokens_per_second_count") >= 2:
            break
        assert time.monotonic() < deadline, "the metrics did not grow"
        time.sleep(0.5)
    assert grew("tollgate_requests") == 2
    assert grew("tollgate_prompt_tokens") == resp.usage.prompt_tokens + usage.prompt_tokens
    assert grew("tollgate_completion_tokens") == resp.usage.completion_tokens + usage.completion_tokens
    assert value(after, "tollgate_cached_tokens", **ROUTE) is not None
    # Histograms: time to first token (the stream), tokens per second, upstream latency.
    assert grew("tollgate_ttft_ms_count") == 1
    assert grew("tollgate_tokens_per_second_count") == 2
    assert grew("tollgate_upstream_latency_ms_count") == 2
    # Label values are policy and config names only.
    for name, labels, _ in after:
        if name.startswith("tollgate_") and "tollgate_tenant" in labels:
            assert set(labels) >= {"tollgate_key", "tollgate_provider", "tollgate_model"}, (name, labels)


def access_log(stack) -> list[dict]:
    lines = []
    for line in stack.log_path("envoy").read_text(errors="replace").splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


def test_access_log_has_one_json_line_per_request_without_secrets(stack, client, demo_key):
    time.sleep(1.5)  # Envoy flushes its access log every second: earlier tests' lines are in
    seen = len(access_log(stack))  # only lines after these belong to this test's requests
    marker = f"obs-{time.monotonic_ns()}"
    resp = client.chat.completions.create(model="openai/gpt-4o-mini", messages=[{"role": "user", "content": marker}],
                                          user=marker)
    list(client.chat.completions.create(model="anthropic/claude-haiku-4-5", messages=HI, stream=True))
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=stack.base_url, api_key="tg-not-a-key", max_retries=0).models.list()
    deadline = time.monotonic() + 10
    while True:
        log = access_log(stack)[seen:]
        chats = [e for e in log if e["path"] == "/v1/chat/completions" and e["provider"] == "openai"]
        streams = [e for e in log if e["provider"] == "anthropic" and e["operation"] == "chat"]
        denied = [e for e in log if e["status"] == 401]
        if chats and streams and denied:
            break
        assert time.monotonic() < deadline, log[-5:]
        time.sleep(0.3)
    e = chats[-1]
    assert e["status"] == 200 and e["method"] == "POST"
    assert (e["tenant"], e["key_id"], e["model"], e["operation"]) == ("demo", "demo-key", "gpt-4o-mini", "chat")
    assert (e["input_tokens"], e["output_tokens"]) == (str(resp.usage.prompt_tokens), str(resp.usage.completion_tokens))
    assert e["upstream_attempts"] == 1 and e["upstream_cluster"] == "openai"
    assert isinstance(e["duration_ms"], int)
    s = streams[-1]
    assert s["status"] == 200 and s["model"] == "claude-haiku-4-5" and int(s["output_tokens"]) > 0
    # A denial by authz-service: no tenant, no model, still one line.
    assert denied[-1]["tenant"] is None and denied[-1]["provider"] is None
    text = stack.log_path("envoy").read_text(errors="replace")
    for secret in (*SECRETS, demo_key, "tg-not-a-key"):
        assert secret not in text, secret


# -- traces ------------------------------------------------------------------

def fields(buf: bytes):
    """Protobuf wire format: (field number, value) pairs; length-delimited
    values as bytes, varints and fixed values as ints."""
    i = 0

    def varint():
        nonlocal i
        shift = result = 0
        while True:
            b = buf[i]
            i += 1
            result |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return result

    while i < len(buf):
        key = varint()
        num, wire = key >> 3, key & 7
        if wire == 0:
            yield num, varint()
        elif wire == 1:
            yield num, int.from_bytes(buf[i:i + 8], "little")
            i += 8
        elif wire == 2:
            n = varint()
            yield num, buf[i:i + n]
            i += n
        elif wire == 5:
            yield num, int.from_bytes(buf[i:i + 4], "little")
            i += 4
        else:
            raise ValueError(f"wire type {wire}")


def spans(export: bytes) -> list[dict]:
    """Spans of an OTLP ExportTraceServiceRequest: name and string/int attributes."""
    out = []
    for num, rs in fields(export):  # resource_spans
        if num != 1:
            continue
        for num2, ss in fields(rs):  # scope_spans
            if num2 != 2:
                continue
            for num3, span in fields(ss):  # spans
                if num3 != 2:
                    continue
                s = {"attributes": {}}
                for f, v in fields(span):
                    if f == 5:
                        s["name"] = v.decode()
                    elif f == 9:  # KeyValue
                        kv = dict(fields(v))
                        any_value = dict(fields(kv.get(2, b"")))
                        val = any_value.get(1)
                        s["attributes"][kv[1].decode()] = val.decode() if isinstance(val, bytes) else any_value.get(3)
                out.append(s)
    return out


def otlp_server(received: list) -> ThreadingHTTPServer:
    """An OTLP/HTTP receiver on loopback, serving in a thread, that adds
    the spans of every export to `received`."""
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            if self.headers.get("transfer-encoding", "").lower() == "chunked":  # Envoy's exporter
                body = b""
                while size := int(self.rfile.readline().split(b";")[0], 16):
                    body += self.rfile.read(size)
                    self.rfile.readline()
                self.rfile.readline()
            else:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
            if self.path == "/v1/traces":
                received.extend(spans(body))
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def otlp_receiver():
    received: list[dict] = []
    server = otlp_server(received)
    yield f"http://127.0.0.1:{server.server_address[1]}", received
    server.shutdown()
    server.server_close()


def test_spans_carry_gen_ai_attributes(make_stack, otlp_receiver, demo_key):
    endpoint, received = otlp_receiver
    stack = make_stack(otlp_endpoint=endpoint)
    client = openai.OpenAI(base_url=stack.base_url, api_key=demo_key, max_retries=0, timeout=20)
    resp = client.chat.completions.create(model="openai/gpt-4o-mini", messages=HI)
    chunks = list(client.chat.completions.create(model="smart", messages=HI, stream=True,
                                                 stream_options={"include_usage": True}))
    usage = [c.usage for c in chunks if c.usage][-1]
    # Envoy exports spans in batches, at least every 5 s.
    deadline = time.monotonic() + 20
    while len([s for s in received if "gen_ai.request.model" in s["attributes"]]) < 2:
        assert time.monotonic() < deadline, received
        time.sleep(0.5)
    by_model = {s["attributes"]["gen_ai.request.model"]: s["attributes"] for s in received
                if "gen_ai.request.model" in s["attributes"]}
    chat = by_model["gpt-4o-mini"]
    assert chat["gen_ai.operation.name"] == "chat"
    assert chat["gen_ai.provider.name"] == "openai"
    assert chat["gen_ai.usage.input_tokens"] == str(resp.usage.prompt_tokens)
    assert chat["gen_ai.usage.output_tokens"] == str(resp.usage.completion_tokens)
    assert (chat["tollgate.tenant"], chat["tollgate.key_id"]) == ("demo", "demo-key")
    stream = by_model["claude-sonnet-4-5"]
    assert stream["gen_ai.provider.name"] == "anthropic"
    assert stream["gen_ai.usage.input_tokens"] == str(usage.prompt_tokens)
    assert stream["gen_ai.usage.output_tokens"] == str(usage.completion_tokens)
    flat = json.dumps(received)
    for secret in SECRETS:
        assert secret not in flat
