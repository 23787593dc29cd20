"""The whole gateway, end to end, through the official openai client.

Real Envoy with the built Wasm filter, real authz-service and Redis, and
mock-llm as the providers, all on free loopback ports (see tests/conftest.py).
"""
from __future__ import annotations

import re
import time
import urllib.request

import openai
import pytest

from helpers import HI, assert_openai_error, post


@pytest.fixture(scope="module")
def client(stack, demo_key):
    return openai.OpenAI(base_url=stack.base_url, api_key=demo_key, max_retries=0, timeout=20)


def test_chat_completion_through_gateway(client):
    resp = client.chat.completions.create(model="openai/gpt-4o-mini", messages=HI)
    assert resp.object == "chat.completion"
    assert resp.choices[0].message.role == "assistant"
    assert resp.choices[0].message.content
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage.prompt_tokens > 0 and resp.usage.completion_tokens > 0
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


def test_response_names_the_provider_and_carries_rate_limit_headers(client):
    raw = client.chat.completions.with_raw_response.create(model="openai/gpt-4o-mini", messages=HI)
    assert raw.headers["x-tollgate-provider"] == "openai"
    for name in ("x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests",
                 "x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"):
        assert raw.headers.get(name), name


def test_rate_limit_remaining_never_exceeds_the_limit(client):
    # The authz service answers from a lease while Redis refills behind it:
    # the level it sees (Redis's plus the unused lease) passes the capacity,
    # and was once sent as remaining-tokens 10,000,004,130 of 10,000,000,000.
    seen = []
    for _ in range(12):
        h = client.chat.completions.with_raw_response.create(model="openai/gpt-4o-mini", messages=HI).headers
        for kind in ("requests", "tokens"):
            limit, remaining = int(h[f"x-ratelimit-limit-{kind}"]), int(h[f"x-ratelimit-remaining-{kind}"])
            seen.append((kind, remaining, limit))
        time.sleep(0.25)
    assert all(0 <= r <= lim for _, r, lim in seen), seen


def test_anthropic_model_is_translated_both_ways(client):
    resp = client.chat.completions.create(
        model="anthropic/claude-sonnet-4-5",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}])
    assert resp.object == "chat.completion"
    assert resp.choices[0].message.content
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


def test_streaming_ends_with_usage_when_asked(client):
    stream = client.chat.completions.create(model="openai/gpt-4o-mini", messages=HI, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_missing_key_is_401_openai_error(stack):
    status, _, body = post(f"{stack.base_url}/chat/completions", {"model": "openai/gpt-4o-mini", "messages": HI})
    assert status == 401
    assert_openai_error(body)


def test_unknown_key_is_rejected_by_the_official_client(stack):
    bad = openai.OpenAI(base_url=stack.base_url, api_key="tg-not-a-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as exc:
        bad.chat.completions.create(model="openai/gpt-4o-mini", messages=HI)
    assert exc.value.status_code == 401
    assert "tg-not-a-key" not in str(exc.value.body)


def test_unknown_model_is_404_model_not_found(client):
    with pytest.raises(openai.NotFoundError) as exc:
        client.chat.completions.create(model="openai/no-such-model", messages=HI)
    assert exc.value.code == "model_not_found"


def test_virtual_key_never_reaches_the_provider(stack, client, demo_key):
    client.chat.completions.create(model="openai/gpt-4o-mini", messages=HI)
    with urllib.request.urlopen(f"{stack.mock_url}/_mock/stats", timeout=5) as resp:
        stats = resp.read().decode()
    assert demo_key not in stats
    assert "x-tollgate-tenant" not in stats.lower()


def test_prometheus_stats_are_served(stack, client):
    client.chat.completions.create(model="openai/gpt-4o-mini", messages=HI)
    with urllib.request.urlopen(f"{stack.admin_url}/stats/prometheus", timeout=5) as resp:
        text = resp.read().decode()
    assert "envoy_cluster_upstream_rq_total" in text
    assert 'envoy_cluster_name="openai"' in text
    # The filter's own metrics, labelled by the stats_tags in envoy.yaml.
    assert re.search(r'tollgate_requests\{[^}]*tollgate_provider="openai"[^}]*\}', text)


def test_envoy_allocates_with_per_cpu_caches(stack):
    """scripts/stack.py starts Envoy with glibc's rseq registration off, so
    tcmalloc takes rseq and caches per CPU, draining idle caches back to the
    system; with glibc holding rseq it keeps a cache per thread instead and
    this reads 0."""
    with urllib.request.urlopen(f"{stack.admin_url}/memory/tcmalloc", timeout=5) as resp:
        text = resp.read().decode()
    m = re.search(r"^MALLOC:\s+(\d+)\s+\(.*\)\s+per-CPU slab bytes used$", text, re.M)
    assert m, text[:2000]
    assert int(m.group(1)) > 0, "tcmalloc has no per-CPU caches: is GLIBC_TUNABLES=glibc.pthread.rseq=0 set?"
