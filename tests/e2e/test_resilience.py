"""Retries on another key, end to end: real Envoy (its router retries, the
router's per-attempt Wasm filter swaps the key), the mock's seeded per-key
faults, the official openai client with its own retries off.
"""
from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import anthropic
import openai
import yaml

from helpers import HI, assert_openai_error, post
from plugin_config import envoy_variant

ROOT = Path(__file__).resolve().parents[2]


def mock_stats(s) -> dict:
    with urllib.request.urlopen(f"{s.mock_url}/_mock/stats", timeout=5) as resp:
        return json.load(resp)


def envoy_stats(s, pattern: str = "^wasmcustom\\.tollgate") -> dict[str, int]:
    """Envoy's counters and gauges whose names match `pattern` (by default
    the filter's own, named wasmcustom.tollgate...)."""
    with urllib.request.urlopen(f"{s.admin_url}/stats?filter={pattern}", timeout=5) as resp:
        lines = resp.read().decode().splitlines()
    out = {}
    for line in lines:
        name, _, value = line.partition(": ")
        if value.strip().isdigit():
            out[name] = int(value)
    return out


def mock_with_key(tmp_path, provider: str, key: dict) -> Path:
    """config/mock-llm.yaml with one more key on `provider`."""
    doc = yaml.safe_load((ROOT / "config" / "mock-llm.yaml").read_text())
    doc["providers"][provider]["keys"].append(key)
    out = tmp_path / "mock-llm.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def with_keys(tmp_path, provider: str, keys: list[dict], **settings) -> Path:
    def edit(cfg):
        cfg["providers"][provider]["keys"] = keys
        cfg.update(settings)
    return envoy_variant(tmp_path / "envoy-resilience.yaml", plugin=edit)


# 20 % of the calls on this key fail before any byte: 429, 500, 503 and
# connection resets (seeded: the same outcomes every run). Its 429s say
# `retry-after: 0` and the gateway's failure cooldown is 0, so the key is
# never taken out of rotation and every fifth call on it needs a retry.
FLAKY_20 = {"name": "openai-20", "key": "mock-openai-key-20",
            "faults": {"seed": 11, "429": 0.10, "retry_after_s": 0, "500": 0.04, "503": 0.04, "reset": 0.02}}


def test_one_key_failing_20_percent_serves_1000_requests_without_a_failure(make_stack, demo_key, tmp_path):
    keys = [{"id": "openai-20", "value": "mock-openai-key-20", "weight": 1},
            {"id": "openai-1", "value": "mock-openai-key-1", "weight": 1}]
    # Two Envoy workers: the cooldowns must be shared between them.
    s = make_stack(mock_config=mock_with_key(tmp_path, "openai", FLAKY_20),
                   envoy_config=with_keys(tmp_path, "openai", keys, failure_cooldown_seconds=0),
                   envoy_concurrency=2)
    client = openai.OpenAI(base_url=s.base_url, api_key=demo_key, max_retries=0, timeout=30)
    failures = []
    for i in range(1000):
        # One conversation each: every conversation keeps its key, so the
        # keys' weights show over conversations.
        messages = [{"role": "user", "content": f"hello {i}"}]
        try:
            if i % 2:
                stream = client.chat.completions.create(model="openai/gpt-4o-mini", messages=messages, max_tokens=4,
                                                        stream=True, stream_options={"include_usage": True})
                chunks = list(stream)
                assert chunks and chunks[-1].usage is not None, chunks
                assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            else:
                resp = client.chat.completions.create(model="openai/gpt-4o-mini", messages=messages, max_tokens=4)
                assert resp.choices[0].message.content
        except (openai.APIError, AssertionError) as e:
            failures.append((i, repr(e)[:200]))
    by_key = mock_stats(s)["by_key"]
    assert failures == [], failures[:5]
    # About 500 requests started on the flaky key and a fifth of them failed:
    # each was sent again (on openai-1), and no request failed.
    flaky, good = by_key.get("openai-20", 0), by_key.get("openai-1", 0)
    assert flaky >= 300, by_key
    assert flaky + good - 1000 >= 50, by_key


def test_every_key_failing_is_one_openai_error_naming_the_provider(make_stack, demo_key, tmp_path):
    keys = [{"id": "openai-429", "value": "mock-openai-key-429"},
            {"id": "openai-401", "value": "mock-openai-key-401"}]
    s = make_stack(envoy_config=with_keys(tmp_path, "openai", keys))
    # The 429 asks for 30 s: long enough for the second request below.
    auth = {"authorization": f"Bearer {demo_key}", "x-mock-retry-after": "30"}
    status, headers, body = post(f"{s.base_url}/chat/completions", {"model": "openai/gpt-4o-mini", "messages": HI},
                                 auth)
    assert status in (429, 502), (status, body)
    assert_openai_error(body)
    assert "openai" in body["error"]["message"], body
    assert headers["x-tollgate-provider"] == "openai"
    text = json.dumps(body)
    assert "mock-openai-key" not in text
    # Each key tried once: one attempt per key.
    by_key = mock_stats(s)["by_key"]
    assert (by_key.get("openai-429"), by_key.get("openai-401")) == (1, 1), by_key
    # Counted per tenant and per worker.
    stats = envoy_stats(s)
    assert stats["wasmcustom.tollgate.tenant.demo.key.demo-key.provider.openai.model.gpt-4o-mini.retries"] == 1, stats
    assert stats["wasmcustom.tollgate.retries"] == 1, stats
    assert stats["wasmcustom.tollgate.failed_attempts.rate_limited"] == 1, stats
    assert stats["wasmcustom.tollgate.failed_attempts.refused_key"] == 1, stats
    # Both keys cool now: the next request is answered at once, with when to retry.
    status, headers, body = post(f"{s.base_url}/chat/completions", {"model": "openai/gpt-4o-mini", "messages": HI},
                                 auth)
    assert status == 503 and body["error"]["code"] == "no_provider_key_available", body
    assert int(headers["retry-after"]) >= 1


def test_cooldown_follows_retry_after_and_the_key_returns(make_stack, demo_key, tmp_path):
    """A 429 with retry-after: 1 cools the key for 1 s, not key_cooldown_seconds."""
    keys = [{"id": "mistral-429", "value": "mock-mistral-key-429"}]
    s = make_stack(envoy_config=with_keys(tmp_path, "mistral", keys, key_cooldown_seconds=300, max_attempts=1))
    url = f"{s.base_url}/chat/completions"
    auth = {"authorization": f"Bearer {demo_key}", "x-mock-retry-after": "1"}
    body = {"model": "mistral/mistral-small-latest", "messages": HI}
    first, _, _ = post(url, body, auth)
    second, headers, _ = post(url, body, auth)
    assert (first, second) == (429, 503)
    assert headers["retry-after"] == "1"
    time.sleep(1.2)
    third, _, err = post(url, body, auth)
    # The key is back (and refused again by the mock, so 429, not 503).
    assert third == 429, err
    assert mock_stats(s)["by_key"].get("mistral-429") == 2


def test_alias_falls_back_to_its_next_target_while_the_first_cools(make_stack, demo_key, tmp_path):
    """`resilient` → mistral, then openai. Mistral's only key answers 429
    (retry-after 30): the first request fails on it and is served by openai
    within the request; the key cools, so every request after it goes to
    openai at once. openai says so in x-tollgate-provider and in the
    answer's model."""
    def edit(cfg):
        cfg["providers"]["mistral"]["keys"] = [{"id": "mistral-429", "value": "mock-mistral-key-429"}]
        cfg["aliases"]["resilient"] = ["mistral/mistral-small-latest", "openai/gpt-4o-mini"]
    s = make_stack(envoy_config=envoy_variant(tmp_path / "envoy-fallback.yaml", plugin=edit))
    client = openai.OpenAI(base_url=s.base_url, api_key=demo_key, max_retries=0, timeout=20,
                           default_headers={"x-mock-retry-after": "30"})
    for i in range(10):
        raw = client.chat.completions.with_raw_response.create(model="resilient", messages=HI, stream=bool(i % 2))
        assert raw.headers["x-tollgate-provider"] == "openai"
        resp = raw.parse()
        if i % 2:
            models = {c.model for c in resp}
            assert models == {"gpt-4o-mini"}, models
        else:
            assert resp.model == "gpt-4o-mini"
    by_key = mock_stats(s)["by_key"]
    # Two attempts on mistral's key (the only one, tried again), then none.
    assert by_key.get("mistral-429") == 2, by_key
    assert by_key.get("openai-1", 0) + by_key.get("openai-2", 0) == 10, by_key


MISTRAL_503 = {"name": "mistral-503", "key": "mock-mistral-key-503", "faults": {"seed": 1, "503": 1.0}}


def fallback_alias(mistral_keys: list[dict], **settings):
    def edit(cfg):
        cfg["providers"]["mistral"]["keys"] = mistral_keys
        cfg["aliases"]["resilient"] = ["mistral/mistral-small-latest", "openai/gpt-4o-mini"]
        cfg.update(settings)
    return edit


def closed_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def assert_served_by_openai(client, n: int):
    for i in range(n):
        stream = bool(i % 2)
        kwargs = {"stream_options": {"include_usage": True}} if stream else {}
        raw = client.chat.completions.with_raw_response.create(model="resilient", messages=HI, max_tokens=4,
                                                               stream=stream, **kwargs)
        assert raw.status_code == 200
        assert raw.headers["x-tollgate-provider"] == "openai"
        resp = raw.parse()
        if stream:
            chunks = list(resp)
            assert {c.model for c in chunks} == {"gpt-4o-mini"}, chunks
            assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0, chunks[-1]
        else:
            assert resp.model == "gpt-4o-mini"
            assert resp.choices[0].message.content
            assert resp.usage.completion_tokens > 0


def test_a_provider_failing_every_call_is_replaced_by_the_fallback_from_the_first_request(
        make_stack, demo_key, tmp_path):
    """Mistral's only key answers 503 to every call and never cools
    (failure_cooldown_seconds 0): each request fails on mistral (after the
    router's retry) and is then served by openai within the same request,
    streams included."""
    edit = fallback_alias([{"id": "mistral-503", "value": "mock-mistral-key-503"}], failure_cooldown_seconds=0)
    s = make_stack(mock_config=mock_with_key(tmp_path, "mistral", MISTRAL_503),
                   envoy_config=envoy_variant(tmp_path / "envoy-fallback.yaml", plugin=edit))
    vms = wasm_vms(s)
    client = openai.OpenAI(base_url=s.base_url, api_key=demo_key, max_retries=0, timeout=20)
    assert_served_by_openai(client, 6)
    by_key = mock_stats(s)["by_key"]
    # Every request went to mistral first (with its retry), then to openai.
    assert by_key.get("mistral-503", 0) >= 6, by_key
    assert by_key.get("openai-1", 0) + by_key.get("openai-2", 0) == 6, by_key
    stats = envoy_stats(s)
    assert stats["wasmcustom.tollgate.tenant.demo.key.demo-key.provider.openai.model.gpt-4o-mini.fallbacks"] == 6, stats
    # The per-attempt filter shares the route filter's VM: one VM for each
    # of Envoy's threads (main and one worker) plus the base VM they are
    # cloned from (a VM of its own made that 6). The fallback calls left
    # that VM without re-entering it: no VM failed or was made again.
    assert vms["active"] == 3, vms
    assert wasm_vms(s) == vms


def wasm_vms(s) -> dict[str, int]:
    """Envoy's V8 VMs: alive now, and made since start."""
    stats = envoy_stats(s, "^wasm\\.envoy\\.wasm\\.runtime\\.v8\\.")
    return {name.rsplit(".", 1)[1]: value for name, value in stats.items()}


def cluster_counter(s, name: str) -> int:
    with urllib.request.urlopen(f"{s.admin_url}/stats?filter=^{name}$", timeout=5) as resp:
        line = resp.read().decode().strip()
    return int(line.partition(": ")[2] or 0)


def test_a_provider_that_cannot_be_reached_is_replaced_by_the_fallback(make_stack, demo_key, tmp_path):
    """Mistral's cluster points at a closed port: Envoy's own 503 (connect
    failure) is replaced by openai's answer, and every mistral key cools
    (the provider is down, not a key): the next requests go to openai
    without trying mistral."""
    port = closed_port()

    def envoy(doc):
        for c in doc["static_resources"]["clusters"]:
            if c["name"] == "mistral":
                c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"][
                    "socket_address"]["port_value"] = port
    keys = [{"id": "mistral-1", "value": "mock-mistral-key-1"}, {"id": "mistral-2", "value": "mock-mistral-key-2"}]
    cfg = envoy_variant(tmp_path / "envoy-down.yaml", plugin=fallback_alias(keys, failure_cooldown_seconds=60),
                        envoy=envoy)
    s = make_stack(envoy_config=cfg)
    client = openai.OpenAI(base_url=s.base_url, api_key=demo_key, max_retries=0, timeout=20)
    assert_served_by_openai(client, 1)
    failed_connects = cluster_counter(s, "cluster.mistral.upstream_cx_connect_fail")
    assert failed_connects >= 1
    assert_served_by_openai(client, 4)
    assert cluster_counter(s, "cluster.mistral.upstream_cx_connect_fail") == failed_connects
    assert envoy_stats(s)["wasmcustom.tollgate.key_cooldowns.mistral"] == 2


def test_every_target_failing_is_one_openai_error_naming_the_last_provider(make_stack, demo_key, tmp_path):
    """Both targets answer 503 to every call (and never cool): the client
    gets one OpenAI error naming openai, the last target tried; no key
    value appears."""
    openai_503 = {"name": "openai-503", "key": "mock-openai-key-503", "faults": {"seed": 2, "503": 1.0}}
    mock = mock_with_key(tmp_path, "mistral", MISTRAL_503)
    doc = yaml.safe_load(mock.read_text())
    doc["providers"]["openai"]["keys"].append(openai_503)
    mock.write_text(yaml.safe_dump(doc, sort_keys=False))

    def edit(cfg):
        fallback_alias([{"id": "mistral-503", "value": "mock-mistral-key-503"}], failure_cooldown_seconds=0)(cfg)
        cfg["providers"]["openai"]["keys"] = [{"id": "openai-503", "value": "mock-openai-key-503"}]
    s = make_stack(mock_config=mock, envoy_config=envoy_variant(tmp_path / "envoy-all-down.yaml", plugin=edit))
    auth = {"authorization": f"Bearer {demo_key}"}
    for stream in (False, True, False):
        status, headers, body = post(f"{s.base_url}/chat/completions",
                                     {"model": "resilient", "messages": HI, "stream": stream}, auth)
        assert status == 503, (status, body)
        assert_openai_error(body)
        assert body["error"]["message"].startswith("provider openai:"), body
        assert headers["x-tollgate-provider"] == "openai"
        text = json.dumps(body)
        assert "mock-openai-key" not in text and "mock-mistral-key" not in text
    by_key = mock_stats(s)["by_key"]
    # Each request: mistral (with the router's retry), then openai once.
    assert by_key.get("mistral-503", 0) >= 3 and by_key.get("openai-503") == 3, by_key


def test_the_messages_front_door_is_served_by_the_fallback_in_anthropic_shape(make_stack, demo_key, tmp_path):
    """The same provider down, through the Anthropic client on /v1/messages:
    openai's answer comes back as an Anthropic message (whole and streamed)."""
    edit = fallback_alias([{"id": "mistral-503", "value": "mock-mistral-key-503"}], failure_cooldown_seconds=0)
    s = make_stack(mock_config=mock_with_key(tmp_path, "mistral", MISTRAL_503),
                   envoy_config=envoy_variant(tmp_path / "envoy-fallback.yaml", plugin=edit))
    client = anthropic.Anthropic(base_url=s.base_url.removesuffix("/v1"), api_key=demo_key, max_retries=0, timeout=20)
    raw = client.messages.with_raw_response.create(model="resilient", max_tokens=8,
                                                   messages=[{"role": "user", "content": "hi"}])
    assert raw.headers["x-tollgate-provider"] == "openai"
    msg = raw.parse()
    assert msg.model == "gpt-4o-mini"
    assert msg.type == "message" and msg.content[0].text and msg.usage.output_tokens > 0, msg
    with client.messages.stream(model="resilient", max_tokens=8,
                                messages=[{"role": "user", "content": "hi"}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.usage.output_tokens > 0 and final.model == "gpt-4o-mini", final
    assert mock_stats(s)["by_key"].get("mistral-503", 0) >= 2
