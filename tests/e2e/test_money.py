"""Money budgets end to end: the real gateway, Redis, mock provider and the
official OpenAI client.

Key tg-test-money (config/policy.yaml): $0.002 a day on openai/gpt-4o-mini
($0.15 / $0.60 per million tokens, config/prices.yaml), soft cap 50 %; its
tenant test-money: $1 a month, in Europe/Paris. Each test starts a private
stack, so its budgets start unspent.
"""
from __future__ import annotations

import re
import subprocess
import time
import urllib.request
from pathlib import Path

import openai
import pytest

from helpers import HI, assert_openai_error, post

ROOT = Path(__file__).resolve().parents[2]
KEY = "tg-test-money"
# Each answer is ~500 completion tokens ($0.0003): the day's $0.002 lasts a few requests.
LONG = {"x-mock-response-bytes": "2000"}


def chat(stack, **headers):
    return post(f"{stack.base_url}/chat/completions", {"model": "openai/gpt-4o-mini", "messages": HI},
                {"authorization": f"Bearer {KEY}", **headers})


def metrics(stack) -> str:
    with urllib.request.urlopen(f"{stack.authz_http_url}/metrics", timeout=5) as resp:
        return resp.read().decode()


def metric(text: str, name: str, **labels) -> float:
    total = 0.0
    for m in re.finditer(rf"^{name}(?:{{([^}}]*)}})? (\S+)$", text, re.M):
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(m.group(2))
    return total


def spend_cli(stack, *args: str) -> str:
    out = subprocess.run(
        [str(ROOT / "target" / "release" / "tollgate-authz"), "spend", "--policy", str(stack.policy),
         "--redis-url", f"redis://127.0.0.1:{stack.ports['TG_REDIS_PORT']}", *args],
        capture_output=True, text=True, timeout=20, check=True)
    return out.stdout


def usd(nano: int) -> str:
    whole, frac = divmod(nano, 10**9)
    frac = f"{frac:09d}".rstrip("0")
    return f"{whole}.{frac:0<2}"


def test_budget_headers_soft_cap_hard_cap_and_exact_spend(make_stack):
    s = make_stack()
    status, headers, body = chat(s)
    assert status == 200, body
    assert headers["x-tollgate-budget-limit-usd"] == "0.002"
    assert headers["x-tollgate-budget-scope"] == "key/day"
    assert re.fullmatch(r"\d+h\d+m\d+s|\d+m\d+s|\d+s", headers["x-tollgate-budget-reset"])
    remaining = float(headers["x-tollgate-budget-remaining-usd"])
    assert 0.0015 < remaining < 0.002  # the request's maximum cost is reserved
    spent_nano = 150 * body["usage"]["prompt_tokens"] + 600 * body["usage"]["completion_tokens"]

    warned, denied = False, None
    for _ in range(40):
        status, headers, body = chat(s, **LONG)
        if status == 429:
            denied = (headers, body)
            break
        assert status == 200, body
        spent_nano += 150 * body["usage"]["prompt_tokens"] + 600 * body["usage"]["completion_tokens"]
        warned |= "x-tollgate-budget-warning" in headers
        time.sleep(0.15)  # the gateway posts usage every 100 ms
    assert denied, "the budget was never exhausted"
    headers, body = denied
    assert_openai_error(body, "budget_exceeded")
    assert body["error"]["type"] == "insufficient_quota"
    assert "Budget exhausted for key money-key: $0.002 per day" in body["error"]["message"]
    assert re.search(r"resets at \d{4}-\d\d-\d\dT00:00:00\+0[12]:00", body["error"]["message"])
    assert int(headers["retry-after"]) >= 1
    assert warned, "no soft-cap warning before the hard cap"
    assert spent_nano <= 2_000_000 + 600 * 600  # at most one answer past the cap

    # Another tenant's key is not affected.
    assert post(f"{s.base_url}/chat/completions", {"model": "openai/gpt-4o-mini", "messages": HI},
                {"authorization": "Bearer tg-demo-key"})[0] == 200

    text = metrics(s)
    assert metric(text, "tollgate_authz_spend_usd_total", tenant="test-money", key="money-key",
                  model="openai/gpt-4o-mini") == pytest.approx(spent_nano / 1e9, rel=1e-9)
    assert metric(text, "tollgate_authz_budget_soft_cap_total", tenant="test-money") >= 1
    assert metric(text, "tollgate_authz_decisions_total", reason="budget_exceeded") >= 1

    # The CLI reads the same spend from Redis once idle leases went back (1 s).
    time.sleep(1.6)
    out = spend_cli(s, "--tenant", "test-money")
    assert "time zone Europe/Paris" in out
    key_row = next(line for line in out.splitlines() if line.startswith("key money-key "))
    tenant_row = next(line for line in out.splitlines() if line.startswith("tenant test-money "))
    assert key_row.split()[4] == usd(spent_nano), out
    assert key_row.split()[5] == "0.002", out
    assert tenant_row.split()[4] == usd(spent_nano), out
    assert tenant_row.split()[2] == "month" and re.fullmatch(r"\d{4}-\d\d", tenant_row.split()[3])
    only_key = spend_cli(s, "--tenant", "test-money", "--key", "money-key")
    assert "tenant test-money " not in only_key.split("\n", 2)[2] and "key money-key" in only_key


def test_streams_are_charged_and_the_client_sees_budget_exceeded(make_stack):
    s = make_stack()
    client = openai.OpenAI(base_url=s.base_url, api_key=KEY, max_retries=0)
    spent_nano = 0
    with pytest.raises(openai.RateLimitError) as exc:
        for _ in range(40):
            stream = client.chat.completions.create(
                model="openai/gpt-4o-mini", messages=HI, stream=True,
                stream_options={"include_usage": True}, extra_headers=LONG)
            usage = [c.usage for c in stream if c.usage][-1]
            spent_nano += 150 * usage.prompt_tokens + 600 * usage.completion_tokens
            time.sleep(0.15)
    assert exc.value.code == "budget_exceeded"
    assert spent_nano > 1_000_000  # streamed usage was settled, not only reserved
    time.sleep(1.6)
    row = next(line for line in spend_cli(s, "--tenant", "test-money", "--key", "money-key").splitlines()
               if line.startswith("key money-key "))
    assert row.split()[4] == usd(spent_nano)


MODEL_KEY = "tg-test-model-money"


def chat_as(stack, model: str, **headers):
    return post(f"{stack.base_url}/chat/completions", {"model": model, "messages": HI},
                {"authorization": f"Bearer {MODEL_KEY}", **headers})


def test_a_model_budget_caps_its_model_only(make_stack):
    """Key model-money-key: $0.01 a day on openai/gpt-4o-mini, nothing on
    anthropic/claude-sonnet-4-5."""
    s = make_stack()
    status, _, body = chat_as(s, "openai/gpt-4o-mini")
    assert status == 400, body
    assert_openai_error(body, "model_not_declared")
    assert "x-tollgate-model" in body["error"]["message"]

    mini = {"x-tollgate-model": "openai/gpt-4o-mini", **LONG}
    spent_nano, denied = 0, None
    for _ in range(60):
        status, headers, body = chat_as(s, "openai/gpt-4o-mini", **mini)
        if status == 429:
            denied = body
            break
        assert status == 200, body
        assert headers["x-tollgate-budget-scope"] == "key model openai/gpt-4o-mini/day"
        spent_nano += 150 * body["usage"]["prompt_tokens"] + 600 * body["usage"]["completion_tokens"]
        time.sleep(0.15)  # the gateway posts usage every 100 ms
    assert denied, "the model budget was never exhausted"
    assert_openai_error(denied, "budget_exceeded")
    assert "key model-money-key on model openai/gpt-4o-mini: $0.01 per day" in denied["error"]["message"]
    assert spent_nano <= 10_000_000

    # Another model of the same key is not held to it, nor charged to it.
    status, _, body = chat_as(s, "anthropic/claude-sonnet-4-5",
                              **{"x-tollgate-model": "anthropic/claude-sonnet-4-5"})
    assert status == 200, body

    time.sleep(1.6)  # idle leases go back to Redis
    out = spend_cli(s, "--tenant", "test-model-money")
    row = next(line for line in out.splitlines()
               if line.startswith("key model-money-key model openai/gpt-4o-mini "))
    assert row.split()[6] == usd(spent_nano), out
    assert row.split()[7] == "0.01", out


ROLLING_POLICY = """version: 1
tenants:
  rolling: {{}}
keys:
  - id: rolling-key
    tenant: rolling
    sha256: {sha}
    models: ["openai/gpt-4o-mini"]
    budgets:
      rolling: [{{window: 24h, usd: 0.002, soft_percent: 50}}]
"""


def test_a_rolling_budget_spent_gets_the_openai_429(make_stack, tmp_path):
    """$0.002 in the last 24 hours: a few long answers spend it, then the
    gateway answers 429 budget_exceeded saying when spend frees up."""
    import hashlib
    policy = tmp_path / "policy.yaml"
    policy.write_text(ROLLING_POLICY.format(sha=hashlib.sha256(b"tg-test-rolling").hexdigest()))
    s = make_stack(policy=policy)
    auth = {"authorization": "Bearer tg-test-rolling", **LONG}
    spent_nano, denied, warned = 0, None, False
    for _ in range(40):
        status, headers, body = post(f"{s.base_url}/chat/completions",
                                     {"model": "openai/gpt-4o-mini", "messages": HI}, auth)
        if status == 429:
            denied = (headers, body)
            break
        assert status == 200, body
        assert headers["x-tollgate-budget-scope"] == "key/24h"
        warned |= "key/24h" in headers.get("x-tollgate-budget-warning", "")
        spent_nano += 150 * body["usage"]["prompt_tokens"] + 600 * body["usage"]["completion_tokens"]
        time.sleep(0.15)  # the gateway posts usage every 100 ms
    assert denied, "the rolling budget was never exhausted"
    headers, body = denied
    assert_openai_error(body, "budget_exceeded")
    msg = body["error"]["message"]
    assert "key rolling-key: $0.002 per 24h" in msg, msg
    # Spend frees up when the hour slot of the first request leaves the
    # window: between 23 and 24 hours from now.
    assert 23 * 3600 <= int(headers["retry-after"]) <= 24 * 3600, headers
    assert warned
    assert 0 < spent_nano <= 2_000_000 + 600 * 600  # at most one answer past the cap
    time.sleep(0.3)
    out = spend_cli(s, "--tenant", "rolling", "--key", "rolling-key")
    row = next(line for line in out.splitlines() if line.startswith("key rolling-key"))
    assert row.split()[2:6] == ["rolling", "24h", usd(spent_nano), "0.002"], out


# Prices of config/prices.yaml in nano-dollars: per prompt token, per
# completion token, per web search ($10 per 1,000).
PRICES = {"openai/gpt-4o-mini": (150, 600), "anthropic/claude-haiku-4-5": (1000, 5000)}
SEARCH_NANO = 10_000_000


def spend_nano(stack, model: str) -> int:
    return round(metric(metrics(stack), "tollgate_authz_spend_usd_total", key="demo-key", model=model) * 1e9)


def test_web_searches_are_priced_per_search(make_stack):
    """The provider's web searches (OpenAI's web_search_call items,
    Anthropic's server_tool_use.web_search_requests) are counted in spend at
    the table's price per search, whole answers and streams alike, on
    OpenAI passthrough, Anthropic passthrough and Responses to Anthropic."""
    import anthropic

    s = make_stack()
    oa = openai.OpenAI(base_url=s.base_url, api_key="tg-demo-key", max_retries=0, timeout=20)
    an = anthropic.Anthropic(base_url=s.base_url.removesuffix("/v1"), api_key="tg-demo-key",
                             max_retries=0, timeout=20)

    def responses(model, searches, stream):
        kw = dict(model=model, input="what is new?", tools=[{"type": "web_search"}],
                  extra_headers={"x-mock-web-searches": str(searches)})
        if not stream:
            r = oa.responses.create(**kw)
        else:
            with oa.responses.stream(**kw) as st:
                r = st.get_final_response()
        if model.startswith("openai/"):
            assert [i.type for i in r.output].count("web_search_call") == searches, r.output
        return r.usage.input_tokens, r.usage.output_tokens

    def messages(searches, stream):
        kw = dict(model="anthropic/claude-haiku-4-5", max_tokens=256,
                  messages=[{"role": "user", "content": "what is new?"}],
                  tools=[{"type": "web_search_20250305", "name": "web_search"}],
                  extra_headers={"x-mock-web-searches": str(searches)})
        if not stream:
            m = an.messages.create(**kw)
        else:
            with an.messages.stream(**kw) as st:
                m = st.get_final_message()
        assert m.usage.server_tool_use.web_search_requests == searches
        assert [b.type for b in m.content].count("server_tool_use") == searches
        return m.usage.input_tokens, m.usage.output_tokens

    cases = [
        ("openai/gpt-4o-mini", lambda: responses("openai/gpt-4o-mini", 2, False), 2),
        ("openai/gpt-4o-mini", lambda: responses("openai/gpt-4o-mini", 1, True), 1),
        ("openai/gpt-4o-mini", lambda: responses("openai/gpt-4o-mini", 0, False), 0),
        ("anthropic/claude-haiku-4-5", lambda: messages(3, False), 3),
        ("anthropic/claude-haiku-4-5", lambda: messages(2, True), 2),
        ("anthropic/claude-haiku-4-5", lambda: responses("anthropic/claude-haiku-4-5", 1, False), 1),
        ("anthropic/claude-haiku-4-5", lambda: responses("anthropic/claude-haiku-4-5", 2, True), 2),
    ]
    for model, run, searches in cases:
        before = spend_nano(s, model)
        prompt, completion = run()
        p_in, p_out = PRICES[model]
        want = before + p_in * prompt + p_out * completion + searches * SEARCH_NANO
        deadline = time.monotonic() + 5
        while (got := spend_nano(s, model)) != want and time.monotonic() < deadline:
            time.sleep(0.05)
        assert got == want, (model, searches, got - before, want - before)
