"""Budgets end to end: virtual keys with limits, through the whole gateway.

Keys (config/policy.yaml): tg-test-rpm5 allows 5 requests per minute,
tg-test-tpm 100 tokens per minute. Each test starts a private stack so its
buckets start full.
"""
from __future__ import annotations

import http.client
import json
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from helpers import HI, assert_openai_error, post
from helpers import authz_metric as metric

REQUEST_HEADERS = ("x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests")


def chat(stack, key: str, model: str = "openai/gpt-4o-mini", **extra_headers):
    return post(f"{stack.base_url}/chat/completions", {"model": model, "messages": HI},
                {"authorization": f"Bearer {key}", **extra_headers})


def test_rpm_limit_of_5_admits_5_and_denies_the_6th(make_stack):
    s = make_stack()
    remaining = []
    for _ in range(5):
        status, headers, body = chat(s, "tg-test-rpm5")
        assert status == 200, body
        assert headers["x-ratelimit-limit-requests"] == "5"
        remaining.append(int(headers["x-ratelimit-remaining-requests"]))
    assert remaining == [4, 3, 2, 1, 0]

    status, headers, body = chat(s, "tg-test-rpm5")
    assert status == 429, body
    assert_openai_error(body, "rate_limit_exceeded")
    assert "request" in body["error"]["message"].lower()
    assert int(headers["retry-after"]) >= 1
    for name in REQUEST_HEADERS:  # this key has no token limit, so no token headers
        assert headers.get(name), name
    assert headers["x-ratelimit-remaining-requests"] == "0"
    # Another key of another tenant is not affected.
    assert chat(s, "tg-demo-key")[0] == 200


def test_the_official_client_sees_a_rate_limit_error(make_stack):
    s = make_stack()
    client = openai.OpenAI(base_url=s.base_url, api_key="tg-test-rpm5", max_retries=0)
    for _ in range(5):
        client.chat.completions.create(model="openai/gpt-4o-mini", messages=HI)
    with pytest.raises(openai.RateLimitError) as exc:
        client.chat.completions.create(model="openai/gpt-4o-mini", messages=HI)
    assert exc.value.code == "rate_limit_exceeded"


def test_streamed_usage_debits_the_token_budget(make_stack):
    s = make_stack()
    client = openai.OpenAI(base_url=s.base_url, api_key="tg-test-tpm", max_retries=0)
    # One streamed Anthropic answer of ~2 KB is ~500 tokens: far over the
    # 100-token budget, which admits while positive and is debited after.
    stream = client.chat.completions.create(
        model="anthropic/claude-sonnet-4-5", messages=HI, stream=True,
        stream_options={"include_usage": True}, extra_headers={"x-mock-response-bytes": "2000"})
    usage = [c.usage for c in stream if c.usage][-1]
    assert usage.completion_tokens >= 400
    deadline = time.monotonic() + 5  # the debit is posted after the stream ends
    while metric(s, "tollgate_authz_usage_tokens_total") < usage.total_tokens and time.monotonic() < deadline:
        time.sleep(0.05)
    status, headers, body = chat(s, "tg-test-tpm")
    assert status == 429, body
    assert_openai_error(body, "rate_limit_exceeded")
    assert "token" in body["error"]["message"].lower()
    assert int(headers["x-ratelimit-remaining-tokens"]) <= 0


def test_redis_down_fails_open_then_limits_return(make_stack):
    s = make_stack()
    assert chat(s, "tg-test-rpm5")[0] == 200
    s.stop_component("redis")
    # Fail-open (the default policy): the gateway keeps serving, counted.
    for _ in range(8):
        status, _, body = chat(s, "tg-test-rpm5")
        assert status == 200, body
    assert metric(s, "tollgate_authz_fail_open_total") >= 8
    # Redis back (empty: buckets start full): limits are enforced again.
    s.start_component("redis")
    deadline = time.monotonic() + 10
    statuses = []
    while time.monotonic() < deadline:
        statuses.append(chat(s, "tg-test-rpm5")[0])
        if statuses[-1] == 429:
            break
        time.sleep(0.1)
    assert statuses[-1] == 429, statuses


def test_an_exhausted_key_stays_exhausted_across_a_redis_restart(make_stack):
    """Redis keeps the buckets in its append-only file: a restart hands no
    tenant a fresh budget, and while Redis is down the authz service keeps
    refusing the key it saw exhausted instead of failing open."""
    s = make_stack()
    for _ in range(5):
        assert chat(s, "tg-test-rpm5")[0] == 200
    assert chat(s, "tg-test-rpm5")[0] == 429
    s.stop_component("redis")
    statuses = [chat(s, "tg-test-rpm5")[0] for _ in range(3)]
    s.start_component("redis")
    deadline = time.monotonic() + 2  # well inside the 12 s one unit takes to refill
    while time.monotonic() < deadline:
        statuses.append(chat(s, "tg-test-rpm5")[0])
        time.sleep(0.1)
    assert set(statuses) == {429}, statuses
    assert metric(s, "tollgate_authz_fail_open_total") == 0


RESERVING_POLICY = """version: 1
defaults: {{reserve_completion_tokens: 1000}}
tenants:
  r: {{}}
keys:
  - id: r-key
    tenant: r
    sha256: {sha}
    limits: {{tokens_per_day: 100000}}
"""


def reserving_stack(make_stack, tmp_path):
    import hashlib
    policy = tmp_path / "policy.yaml"
    policy.write_text(RESERVING_POLICY.format(sha=hashlib.sha256(b"tg-reserve").hexdigest()))
    return make_stack(policy=policy)


def remaining_tokens(headers) -> int:
    return int(headers["x-ratelimit-remaining-tokens"])


def wait_settled(s, tokens: float):
    deadline = time.monotonic() + 5  # the filter posts usage every 100 ms
    while metric(s, "tollgate_authz_usage_tokens_total") < tokens and time.monotonic() < deadline:
        time.sleep(0.05)
    assert metric(s, "tollgate_authz_usage_tokens_total") >= tokens


def test_a_reservation_is_refunded_after_a_short_answer(make_stack, tmp_path):
    """The Check reserves the prompt's estimate plus 1,000 tokens for the
    answer (x-ratelimit-remaining-tokens shows it); the usage report echoes
    the reservation and the unused part comes back."""
    s = reserving_stack(make_stack, tmp_path)
    status, headers, body = chat(s, "tg-reserve")
    assert status == 200, body
    first = 100000 - remaining_tokens(headers)
    assert 1000 < first < 1100, first  # 1,000 + a ~100-byte body / 4
    used = body["usage"]["total_tokens"]
    assert used < first
    wait_settled(s, used)
    status, headers, _ = chat(s, "tg-reserve")
    assert status == 200
    # Only the real usage stays charged, plus this request's reservation
    # (a day's budget refills about 1 token a second).
    assert 0 <= remaining_tokens(headers) - (100000 - used - first) <= 5


def test_a_stream_the_client_drops_is_not_free(make_stack, tmp_path):
    """A stream abandoned after its first chunk: the reservation is settled
    by the filter's report at stream end, or kept when there is none; never
    refunded as if nothing was produced."""
    s = reserving_stack(make_stack, tmp_path)
    host, port = s.base_url.split("//")[1].split("/")[0].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("POST", "/v1/chat/completions", json.dumps(
        {"model": "anthropic/claude-sonnet-4-5", "messages": HI, "stream": True}),
        {"authorization": "Bearer tg-reserve", "content-type": "application/json",
         "x-mock-response-bytes": "20000"})
    resp = conn.getresponse()
    assert resp.status == 200
    reserved = 100000 - remaining_tokens(resp.headers)
    assert resp.read(64)  # the first bytes of the stream, then hang up
    conn.sock.close()
    conn.close()
    time.sleep(1)  # stream end, usage flush, settlement
    status, headers, _ = chat(s, "tg-reserve")
    assert status == 200
    second = 100000 - remaining_tokens(headers)
    # The dropped stream still costs something.
    assert second > 1100, (reserved, second)


def test_usage_of_concurrent_answers_reaches_authz_as_one_sum(stack):
    """The filter sums usage per worker and posts it every usage_flush_ms
    (100 ms): answers close together arrive as one report per key and model,
    carrying all their tokens."""
    client = openai.OpenAI(base_url=stack.base_url, api_key="tg-demo-key", max_retries=0)
    time.sleep(0.3)  # what earlier tests left in the batch has been posted
    reports0 = metric(stack, "tollgate_authz_usage_reports_total")
    tokens0 = metric(stack, "tollgate_authz_usage_tokens_total")
    n = 6
    start = time.monotonic()
    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(lambda _: client.chat.completions.create(
            model="anthropic/claude-sonnet-4-5", messages=HI), range(n)))
    span = time.monotonic() - start
    want = sum(a.usage.total_tokens for a in answers)
    deadline = time.monotonic() + 5
    while metric(stack, "tollgate_authz_usage_tokens_total") - tokens0 < want and time.monotonic() < deadline:
        time.sleep(0.05)
    assert metric(stack, "tollgate_authz_usage_tokens_total") - tokens0 == want
    # One report per flush: answers spanning `span` seconds fall into at most
    # span/0.1 + 2 flush intervals (a span shorter than one interval can still
    # straddle a tick); one report per answer would be n.
    assert metric(stack, "tollgate_authz_usage_reports_total") - reports0 <= min(n - 1, int(span / 0.1) + 2), span


def test_only_the_gateway_can_debit_a_budget(stack):
    """POST /v1/usage takes reports only with the token Envoy injects on its
    tollgate_authz_http cluster: any other process that reaches the port is
    refused, nothing is debited, and the refusal is counted."""
    report = {"tenant": "demo", "key_id": "demo-key", "model": "openai/gpt-4o-mini",
              "prompt_tokens": 1000, "completion_tokens": 1000}
    token = stack.usage_token_path.read_text()
    assert stack.usage_token_path.stat().st_mode & 0o077 == 0  # readable by its owner only
    refused0 = metric(stack, 'tollgate_authz_usage_reports_total{result="unauthorized"}')
    time.sleep(0.3)  # what earlier tests left in the filter's batch has been posted
    tokens0 = metric(stack, "tollgate_authz_usage_tokens_total")
    for headers in ({}, {"x-tollgate-usage-token": "wrong-" + token[6:]}, {"x-tollgate-usage-token": token[:-1]}):
        status, _, body = post(f"{stack.authz_http_url}/v1/usage", report, headers)
        assert status == 401, body
        assert_openai_error(body, "usage_unauthorized")
        assert token not in json.dumps(body)
    assert metric(stack, 'tollgate_authz_usage_reports_total{result="unauthorized"}') - refused0 == 3
    assert metric(stack, "tollgate_authz_usage_tokens_total") == tokens0

    # A client cannot smuggle the header through the gateway either: its
    # request is answered normally, and the gateway's own report lands.
    status, _, body = chat(stack, "tg-demo-key", **{"x-tollgate-usage-token": "forged-0123456789abcdef"})
    assert status == 200, body
    want = body["usage"]["total_tokens"]
    deadline = time.monotonic() + 5
    while metric(stack, "tollgate_authz_usage_tokens_total") - tokens0 < want and time.monotonic() < deadline:
        time.sleep(0.05)
    assert metric(stack, "tollgate_authz_usage_tokens_total") - tokens0 == want
    assert metric(stack, 'tollgate_authz_usage_reports_total{result="unauthorized"}') - refused0 == 3


def test_a_fail_closed_tenant_is_told_the_budget_store_is_down(make_stack):
    """Redis down, tenant with redis_failure: closed: the client gets
    authz-service's 503 naming the budget store, not Envoy's 'authorization
    service unavailable', with retry-after; a fail-open tenant is served."""
    s = make_stack()
    assert chat(s, "tg-test-closed")[0] == 200
    s.stop_component("redis")
    deadline = time.monotonic() + 10
    status, headers, body = chat(s, "tg-test-closed")
    while status == 200 and time.monotonic() < deadline:  # leases granted before the stop
        time.sleep(0.2)
        status, headers, body = chat(s, "tg-test-closed")
    assert status == 503, body
    assert_openai_error(body, "rate_limiter_unavailable")
    assert "budget store (Redis)" in body["error"]["message"], body
    assert headers["retry-after"] == "1", dict(headers)
    assert chat(s, "tg-demo-key")[0] == 200
