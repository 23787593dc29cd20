"""The Wasm filter end to end: routing, translation and streaming through real
Envoy, authz-service and mock-llm, with the official openai client.

Complements test_gateway.py (the smoke tests): an OpenAI-compatible
provider under its own base path, aliases, Anthropic streaming and tools with
a full tool-result round trip, GET /v1/models, refused parameters and provider
errors.
"""
from __future__ import annotations

import json
import urllib.request

import openai
import pytest

from helpers import HI, assert_openai_error, post

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def client(stack, demo_key):
    return openai.OpenAI(base_url=stack.base_url, api_key=demo_key, max_retries=0, timeout=20)


def mock_stats(stack) -> dict:
    with urllib.request.urlopen(f"{stack.mock_url}/_mock/stats", timeout=5) as resp:
        return json.load(resp)


def test_openai_compatible_provider_uses_its_cluster_and_base_path(stack, client):
    raw = client.chat.completions.with_raw_response.create(model="mistral/mistral-small-latest", messages=HI)
    resp = raw.parse()
    assert raw.headers["x-tollgate-provider"] == "mistral"
    assert resp.choices[0].message.content
    last = mock_stats(stack)["recent"][-1]
    assert last["path"] == "/mistral/v1/chat/completions"
    assert last["body"]["model"] == "mistral-small-latest"
    assert last["key_id"] == "mistral-1"


def test_openai_compatible_stream(client):
    chunks = list(client.chat.completions.create(model="mistral/mistral-small-latest", messages=HI, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    # The filter asks upstream for usage but the client did not: no usage chunk.
    assert all(c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"


@pytest.mark.parametrize("alias,provider", [("fast", "openai"), ("smart", "anthropic")])
def test_aliases(client, alias, provider):
    raw = client.chat.completions.with_raw_response.create(model=alias, messages=HI)
    assert raw.headers["x-tollgate-provider"] == provider
    assert raw.parse().choices[0].message.content


def test_models_list(client):
    ids = {m.id for m in client.models.list()}
    assert {"openai/gpt-4o-mini", "anthropic/claude-sonnet-4-5", "mistral/mistral-small-latest",
            "fast", "smart"} <= ids
    assert client.models.retrieve("smart").id == "smart"
    assert client.models.retrieve("openai/gpt-4o-mini").id == "openai/gpt-4o-mini"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("openai/nope")


def test_anthropic_stream_with_usage(client):
    chunks = list(client.chat.completions.create(
        model="anthropic/claude-haiku-4-5", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "tell me a story"}]))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage.prompt_tokens > 0 and usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_anthropic_request_is_translated(stack, client):
    client.chat.completions.create(
        model="smart", stop=["END"], temperature=0.3, user="u-42",
        messages=[{"role": "system", "content": "sys one"}, {"role": "developer", "content": "sys two"},
                  {"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    last = mock_stats(stack)["recent"][-1]
    assert last["path"] == "/v1/messages"
    body = last["body"]
    assert body["model"] == "claude-sonnet-4-5"
    assert body["system"] == "sys one\n\nsys two"
    assert body["max_tokens"] == 8192
    assert body["stop_sequences"] == ["END"]
    assert body["metadata"] == {"user_id": "u-42"}
    assert [m["role"] for m in body["messages"]] == ["user"]
    assert last["headers"].get("anthropic-version") == "2023-06-01"
    assert last["key_id"] in ("anthropic-1", "anthropic-2")
    assert "authorization" not in {k.lower() for k in last["headers"]}


@pytest.mark.parametrize("model", ["anthropic/claude-sonnet-4-5", "openai/gpt-4o-mini"])
def test_tool_call_round_trip(client, model):
    messages = [{"role": "user", "content": "weather in Paris?"}]
    first = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER_TOOL],
                                           tool_choice="required")
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    assert isinstance(args, dict) and "city" in args
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21C"}]
    second = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER_TOOL])
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content


@pytest.mark.parametrize("model", ["anthropic/claude-sonnet-4-5", "openai/gpt-4o-mini"])
def test_streamed_tool_call_arguments_reassemble(client, model):
    chunks = list(client.chat.completions.create(
        model=model, stream=True, tools=[WEATHER_TOOL], tool_choice="required",
        messages=[{"role": "user", "content": "weather in Paris?"}]))
    calls: dict[int, dict] = {}
    for c in chunks:
        if not c.choices:
            continue
        for tc in c.choices[0].delta.tool_calls or []:
            entry = calls.setdefault(tc.index, {"name": "", "args": "", "id": None})
            if tc.id:
                entry["id"] = tc.id
            if tc.function and tc.function.name:
                entry["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                entry["args"] += tc.function.arguments
    assert calls[0]["name"] == "get_weather" and calls[0]["id"]
    assert "city" in json.loads(calls[0]["args"])
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_image_parts_reach_anthropic_as_blocks(stack, client):
    client.chat.completions.create(model="smart", messages=[{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}])
    blocks = mock_stats(stack)["recent"][-1]["body"]["messages"][0]["content"]
    assert blocks[1]["source"] == {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
    assert blocks[2]["source"] == {"type": "url", "url": "https://example.com/cat.png"}


@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_response_format_on_anthropic(client, stream):
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
              "required": ["city", "population"]}
    kwargs = dict(model="smart", messages=[{"role": "user", "content": "biggest city in France, as JSON"}],
                  response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema}})
    if stream:
        chunks = list(client.chat.completions.create(stream=True, **kwargs))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    else:
        resp = client.chat.completions.create(**kwargs)
        text = resp.choices[0].message.content
        assert not resp.choices[0].message.tool_calls
        finish = [resp.choices[0].finish_reason]
    answer = json.loads(text)
    assert isinstance(answer["city"], str) and isinstance(answer["population"], int)
    assert finish == ["stop"]


def test_parameters_anthropic_cannot_honour_are_dropped_and_named(client):
    # OpenAI accepts them, so they are no 400: the provider does not get
    # them and the header says so.
    raw = client.chat.completions.with_raw_response.create(
        model="smart", messages=HI, n=2, presence_penalty=0.5, seed=3, temperature=0.5, top_p=0.9,
        reasoning_effort="low")
    assert raw.parse().choices[0].message.content
    assert sorted(raw.headers["x-tollgate-dropped"].split(",")) == [
        "n", "presence_penalty", "reasoning_effort", "seed", "top_p"]
    # What cannot be honoured together is still refused, naming it.
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="smart", messages=HI, response_format={"type": "json_object"},
                                       tools=[WEATHER_TOOL])
    assert exc.value.body["param"] == "response_format"


def test_model_not_allowed_and_bad_input(stack, demo_key):
    url = f"{stack.base_url}/chat/completions"
    auth = {"authorization": f"Bearer {demo_key}"}
    for body, status, code in [
        (b"{not json", 400, "invalid_json"),
        (b'{"model":"fast","messages":"\xff"}', 400, "invalid_json"),
        (b'{"model":"fast","messages":[]}', 400, None),
        (b'{"model":"fast"}', 400, None),
        (b'{"model":5,"messages":[]}', 400, None),
        (b'[]', 400, None),
    ]:
        got, _, resp = post(url, body, auth)
        assert got == status, (body, resp)
        assert_openai_error(resp, code)


def test_anthropic_overloaded_is_503(client):
    with pytest.raises(openai.InternalServerError) as exc:
        client.chat.completions.create(model="smart", messages=HI, extra_headers={"x-mock-error": "529"})
    assert exc.value.status_code == 503
    assert exc.value.body["type"] == "server_error"


def test_anthropic_bad_request_keeps_the_provider_message(client):
    # max_tokens far over what the mock accepts is the provider's 400.
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="smart", messages=HI, extra_headers={"x-mock-tool-call": "nope"},
                                       tools=[WEATHER_TOOL])
    assert exc.value.status_code == 400
    assert "nope" in exc.value.body["message"]


def test_embeddings(client):
    resp = client.embeddings.create(model="openai/text-embedding-3-small", input=["a", "b"])
    assert len(resp.data) == 2 and resp.usage.prompt_tokens > 0
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="smart", input="a")


def test_filter_stats_are_exported(stack, client):
    client.chat.completions.create(model="anthropic/claude-haiku-4-5", messages=HI)
    with urllib.request.urlopen(f"{stack.admin_url}/stats?filter=tollgate", timeout=5) as resp:
        text = resp.read().decode()
    prefix = "tollgate.tenant.demo.key.demo-key.provider.anthropic.model.claude-haiku-4-5."
    for name in ("requests", "prompt_tokens", "completion_tokens", "upstream_latency_ms"):
        assert prefix + name in text, name


def test_in_stream_provider_error_reaches_the_client(client):
    stream = client.chat.completions.create(model="smart", messages=HI, stream=True,
                                            extra_headers={"x-mock-error": "error-event"})
    with pytest.raises(openai.APIError) as exc:
        for _ in stream:
            pass
    assert "overloaded" in str(exc.value).lower() or "Overloaded" in str(exc.value.body)


@pytest.mark.parametrize("model", ["smart", "openai/gpt-4o-mini"])
@pytest.mark.parametrize("stream", [True, False])
def test_connection_cut_mid_answer_fails_fast(client, model, stream):
    """A provider that dies half-way never leaves the client hanging, and a
    cut answer never looks complete."""
    import time
    t0 = time.monotonic()
    try:
        resp = client.chat.completions.create(model=model, messages=HI, stream=stream,
                                              extra_headers={"x-mock-error": "abort-mid-stream"})
        chunks = list(resp) if stream else None
    except openai.APIError:
        pass  # connection error, or an error event / status from the gateway
    else:
        assert stream, "a cut non-streaming answer must not be returned as a success"
        assert not any(c.choices and c.choices[0].finish_reason for c in chunks)
    assert time.monotonic() - t0 < 10
