"""The Anthropic Messages front door end to end: the official `anthropic`
client against /v1/messages and /v1/messages/count_tokens through real
Envoy, authz-service, Redis and mock-llm, for every provider family.

Anthropic models are passed through (the mock sees the client's body and
its anthropic-version / anthropic-beta headers); every other family is
translated both ways, streams and a tool-use / tool-result round trip
included. Errors on these routes are Anthropic-shaped, Envoy's and
authz-service's included.
"""
from __future__ import annotations

import json
import urllib.request

import anthropic
import pytest

from helpers import post
from plugin_config import envoy_variant

# One model per provider family of the default config.
FAMILIES = {
    "anthropic": "claude-haiku-5-5",  # bare name: the Anthropic passthrough
    "openai": "openai/gpt-4o-mini",
    "azure": "azure/gpt-4o-mini",
    "gemini": "gemini/gemini-2.0-flash",
    "bedrock": "bedrock/anthropic.claude-3-haiku-20240307-v1:0",
}

WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}

HI = [{"role": "user", "content": "hello there gateway"}]


def root(stack) -> str:
    return stack.base_url.removesuffix("/v1")


@pytest.fixture(scope="module")
def client(stack, demo_key):
    return anthropic.Anthropic(base_url=root(stack), api_key=demo_key, max_retries=0, timeout=20)


def mock_last(stack) -> dict:
    with urllib.request.urlopen(f"{stack.mock_url}/_mock/stats", timeout=5) as resp:
        return json.load(resp)["recent"][-1]


def assert_anthropic_error(body, kind: str | None = None):
    assert isinstance(body, dict) and body.get("type") == "error", body
    err = body.get("error")
    assert isinstance(err, dict) and isinstance(err.get("message"), str) and err["message"], body
    if kind is not None:
        assert err.get("type") == kind, body


@pytest.mark.parametrize("family", FAMILIES)
def test_create(client, family):
    raw = client.messages.with_raw_response.create(
        model=FAMILIES[family], max_tokens=200, system="Answer briefly.", messages=HI)
    msg = raw.parse()
    assert raw.headers["x-tollgate-provider"] == family
    assert msg.type == "message" and msg.role == "assistant"
    assert msg.content[0].type == "text" and "mock response to: hello there gateway" in msg.content[0].text
    assert msg.stop_reason == "end_turn"
    assert msg.usage.input_tokens > 0 and msg.usage.output_tokens > 0


@pytest.mark.parametrize("family", FAMILIES)
def test_stream(client, family):
    with client.messages.stream(model=FAMILIES[family], max_tokens=200, messages=HI) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text.startswith("mock response to: hello there gateway")
    assert final.content[0].text == text
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens > 0


@pytest.mark.parametrize("family", FAMILIES)
def test_stream_tool_use_and_result_round_trip(client, family):
    model = FAMILIES[family]
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    with client.messages.stream(model=model, max_tokens=300, tools=[WEATHER],
                                tool_choice={"type": "any"}, messages=ask) as s:
        first = s.get_final_message()
    assert first.stop_reason == "tool_use"
    call = next(b for b in first.content if b.type == "tool_use")
    assert call.name == "get_weather" and call.input == {"city": "mock"} and call.id
    followup = ask + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 21 C"}]},
    ]
    second = client.messages.create(model=model, max_tokens=300, tools=[WEATHER], messages=followup)
    assert second.stop_reason == "end_turn"
    assert second.content[0].type == "text" and second.content[0].text


@pytest.mark.parametrize("family", FAMILIES)
def test_count_tokens(client, family):
    n = client.messages.count_tokens(model=FAMILIES[family], system="be brief", messages=HI)
    assert n.input_tokens > 0


def test_passthrough_keeps_the_body_and_forwards_anthropic_headers(stack, client):
    client.messages.create(model="claude-sonnet-5-5", max_tokens=50, messages=HI,
                           extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14",
                                          "anthropic-version": "2023-06-01"})
    last = mock_last(stack)
    assert last["path"] == "/v1/messages"
    assert last["body"] == {"model": "claude-sonnet-5-5", "max_tokens": 50, "messages": HI}
    headers = {k.lower(): v for k, v in (last["headers"].items() if isinstance(last["headers"], dict)
                                         else last["headers"])}
    assert headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert headers["anthropic-version"] == "2023-06-01"


def test_provider_prefixed_and_alias_names_reach_anthropic_with_the_upstream_name(stack, client):
    for name in ("anthropic/claude-opus-5-5", "smart"):
        msg = client.messages.create(model=name, max_tokens=20, messages=HI)
        assert msg.content[0].text
        assert mock_last(stack)["body"]["model"] == (name.split("/")[-1] if "/" in name else "claude-sonnet-4-5")


def test_translated_request_drops_cache_control_and_says_so(stack, client):
    raw = client.messages.with_raw_response.create(
        model="openai/gpt-4o-mini", max_tokens=50,
        system=[{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
        messages=HI)
    assert raw.headers["x-tollgate-dropped"] == "cache_control"
    body = mock_last(stack)["body"]
    assert body["messages"][0] == {"role": "system", "content": "You are terse."}


def test_errors_are_anthropic_shaped(stack, client, demo_key):
    url = root(stack) + "/v1/messages"
    # No key: authz-service's 401.
    status, _, body = post(url, {"model": "claude-haiku-5-5", "max_tokens": 5, "messages": HI})
    assert status == 401
    assert_anthropic_error(body, "authentication_error")
    # x-api-key works as the virtual key; an unknown model is the filter's 404.
    status, _, body = post(url, {"model": "nope", "max_tokens": 5, "messages": HI}, {"x-api-key": demo_key})
    assert status == 404
    assert_anthropic_error(body, "not_found_error")
    # Bad JSON.
    status, _, body = post(url, b"{", {"x-api-key": demo_key})
    assert status == 400
    assert_anthropic_error(body, "invalid_request_error")
    # A parameter Anthropic does not know either: Anthropic's shape.
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model="openai/gpt-4o-mini", max_tokens=5, messages=HI, extra_body={"frobnicate": 3})
    assert "frobnicate" in e.value.body["error"]["message"]
    # One Anthropic accepts but the target cannot honour: dropped, named.
    raw = client.messages.with_raw_response.create(model="openai/gpt-4o-mini", max_tokens=5, messages=HI,
                                                   extra_body={"top_k": 3})
    assert raw.headers["x-tollgate-dropped"] == "top_k"
    # The provider's own refusal (passthrough): Anthropic's 400 message kept.
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model="claude-haiku-5-5", max_tokens=10_000_000, messages=HI)
    assert "max_tokens" in e.value.body["error"]["message"]
    # The provider's 429 through the SDK's error class. `retry-after: 0`
    # keeps the keys of this session-wide stack out of cooldown for the
    # tests after this one.
    with pytest.raises(anthropic.RateLimitError):
        client.messages.create(model="openai/gpt-4o-mini", max_tokens=5, messages=HI,
                               extra_headers={"x-mock-error": "429", "x-mock-retry-after": "0"})
    assert client.messages.create(model="openai/gpt-4o-mini", max_tokens=5, messages=HI).content
    # Unknown path under /v1/messages.
    status, _, body = post(root(stack) + "/v1/messages/batches", {}, {"x-api-key": demo_key})
    assert status == 404
    assert_anthropic_error(body, "not_found_error")


def test_envoy_local_replies_are_anthropic_shaped(stack, demo_key):
    url = root(stack) + "/v1/messages"
    # Over Envoy's 16 MiB buffer.
    big = (b'{"model":"claude-haiku-5-5","max_tokens":5,"messages":[{"role":"user","content":"'
           + b"x" * (17 << 20) + b'"}]}')
    status, _, body = post(url, big, {"x-api-key": demo_key}, timeout=60)
    assert status == 413
    assert_anthropic_error(body, "request_too_large")
    # The OpenAI routes keep OpenAI's shape.
    status, _, body = post(stack.base_url + "/chat/completions", big, {"authorization": f"Bearer {demo_key}"},
                           timeout=60)
    assert status == 413 and body["error"]["code"] == "request_too_large"


def test_provider_down_is_anthropic_shaped_502(make_stack, demo_key):
    s = make_stack()
    s.stop_component("mock")
    for model in ("claude-haiku-5-5", "openai/gpt-4o-mini"):
        status, _, body = post(root(s) + "/v1/messages", {"model": model, "max_tokens": 5, "messages": HI},
                               {"x-api-key": demo_key})
        assert status == 502, body
        assert_anthropic_error(body, "api_error")
        assert "connect" not in body["error"]["message"].lower()


def test_rate_limit_headers_have_anthropic_twins(client):
    raw = client.messages.with_raw_response.create(model="claude-haiku-5-5", max_tokens=5, messages=HI)
    h = raw.headers
    for kind in ("requests", "tokens"):
        if f"x-ratelimit-limit-{kind}" in h:
            assert h[f"anthropic-ratelimit-{kind}-limit"] == h[f"x-ratelimit-limit-{kind}"]
            assert h[f"anthropic-ratelimit-{kind}-reset"].endswith("Z")
    assert any(k.startswith("anthropic-ratelimit-") for k in h), dict(h)


def test_stream_error_event_is_anthropic_shaped(client):
    for model in ("claude-haiku-5-5", "openai/gpt-4o-mini"):
        with pytest.raises(anthropic.APIStatusError):
            with client.messages.stream(model=model, max_tokens=200, messages=HI,
                                        extra_headers={"x-mock-error": "error-event"}) as s:
                for _ in s.text_stream:
                    pass


# --- thinking and cache_control on translated targets --------------------

THINK = {"type": "enabled", "budget_tokens": 2048}
EPH = {"type": "ephemeral"}


# Models that think; the families' default models do not (Gemini and Bedrock
# refuse a thinking config there).
THINKERS = {"gemini": "gemini/gemini-2.5-flash", "bedrock": "bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0"}


@pytest.mark.parametrize("family", ["gemini", "bedrock"])
def test_thinking_is_dropped_for_models_that_do_not_think(stack, client, family):
    raw = client.messages.with_raw_response.create(
        model=FAMILIES[family], max_tokens=4000, thinking=THINK, messages=HI)
    assert raw.headers["x-tollgate-dropped"] == "thinking"
    body = mock_last(stack)["body"]
    assert "thinkingConfig" not in json.dumps(body) and "additionalModelRequestFields" not in body


def test_thinking_becomes_gemini_thinking_budget(stack, client):
    raw = client.messages.with_raw_response.create(
        model=THINKERS["gemini"], max_tokens=4000, thinking=THINK, messages=HI)
    assert "x-tollgate-dropped" not in raw.headers
    assert raw.parse().content[0].text
    gc = mock_last(stack)["body"]["generationConfig"]
    assert gc["thinkingConfig"] == {"thinkingBudget": 2048} and gc["maxOutputTokens"] == 4000


def test_thinking_becomes_bedrock_anthropic_thinking(stack, client):
    with client.messages.stream(model=THINKERS["bedrock"], max_tokens=4000, thinking=THINK, messages=HI) as s:
        text = "".join(s.text_stream)
        assert "x-tollgate-dropped" not in s.response.headers
    assert text.startswith("mock response to: hello there gateway")
    body = mock_last(stack)["body"]
    assert body["additionalModelRequestFields"] == {"thinking": {"type": "enabled", "budget_tokens": 2048}}


def test_thinking_on_a_model_without_reasoning_control_is_dropped_and_named(stack, client):
    raw = client.messages.with_raw_response.create(
        model=FAMILIES["openai"], max_tokens=4000, thinking=THINK, messages=HI)
    assert raw.headers["x-tollgate-dropped"] == "thinking"
    assert "reasoning_effort" not in mock_last(stack)["body"]
    raw = client.messages.with_raw_response.create(
        model=FAMILIES["openai"], max_tokens=50, thinking={"type": "disabled"}, messages=HI)
    assert "x-tollgate-dropped" not in raw.headers


def test_thinking_budget_is_checked(client):
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=FAMILIES["gemini"], max_tokens=4000,
                               thinking={"type": "enabled", "budget_tokens": 100}, messages=HI)
    assert_anthropic_error(e.value.body, "invalid_request_error")
    assert "budget_tokens" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=FAMILIES["bedrock"], max_tokens=2000, thinking=THINK, messages=HI)
    assert "'max_tokens' must be greater than 'thinking.budget_tokens'" in e.value.body["error"]["message"]


def test_thinking_becomes_reasoning_effort_on_openai_reasoning_models(make_stack, demo_key, tmp_path):
    def edit(cfg):
        p = cfg["providers"]["openai"]
        p["models"] = {**p["models"], "o4-mini": {"reasoning": True}}

    s = make_stack(envoy_config=envoy_variant(tmp_path / "envoy-reasoning.yaml", plugin=edit))
    c = anthropic.Anthropic(base_url=root(s), api_key=demo_key, max_retries=0, timeout=20)
    for budget, effort in ((1024, "low"), (4096, "medium"), (12000, "high")):
        raw = c.messages.with_raw_response.create(
            model="openai/o4-mini", max_tokens=16000,
            thinking={"type": "enabled", "budget_tokens": budget}, messages=HI)
        assert "x-tollgate-dropped" not in raw.headers
        assert raw.parse().content[0].text
        body = mock_last(s)["body"]
        assert body["reasoning_effort"] == effort
        assert body["max_completion_tokens"] == 16000 and "max_tokens" not in body


def test_cache_control_becomes_bedrock_cache_points(stack, client):
    tools = [WEATHER, {**WEATHER, "name": "get_time", "cache_control": EPH}]
    ask = [{"role": "user", "content": [
        {"type": "text", "text": "a long shared document", "cache_control": EPH}]},
        {"role": "assistant", "content": "noted"},
        {"role": "user", "content": "What is the weather in Paris?"}]
    raw = client.messages.with_raw_response.create(
        model=FAMILIES["bedrock"], max_tokens=300, tools=tools,
        system=[{"type": "text", "text": "You are terse.", "cache_control": EPH}], messages=ask)
    assert "x-tollgate-dropped" not in raw.headers
    assert raw.parse().content
    body = mock_last(stack)["body"]
    point = {"cachePoint": {"type": "default"}}
    assert body["system"] == [{"text": "You are terse."}, point]
    assert [t.get("toolSpec", {}).get("name", t) for t in body["toolConfig"]["tools"]] == [
        "get_weather", "get_time", point]
    assert body["messages"][0]["content"] == [{"text": "a long shared document"}, point]
    assert point not in body["messages"][1]["content"] + body["messages"][2]["content"]


def test_cache_control_on_gemini_is_dropped_and_named(stack, client):
    raw = client.messages.with_raw_response.create(
        model=FAMILIES["gemini"], max_tokens=50,
        messages=[{"role": "user", "content": [{"type": "text", "text": "hello", "cache_control": EPH}]}])
    assert raw.headers["x-tollgate-dropped"] == "cache_control"
    assert "cache" not in json.dumps(mock_last(stack)["body"]).lower()
