"""The official openai SDK, pointed straight at mock-llm, parses its answers."""

import json

import openai
import pytest


def client(mock, key="mock-openai-key-1", prefix=""):
    return openai.OpenAI(api_key=key, base_url=f"{mock.base}{prefix}/v1", max_retries=0)


def test_chat_non_stream(mock):
    r = client(mock).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hello there world"}]
    )
    assert r.choices[0].message.content == "mock response to: hello there world"
    assert r.choices[0].finish_reason == "stop"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (5, 9, 14)


def test_chat_stream_with_usage(mock):
    stream = client(mock).chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "hello there world"}],
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"x-mock-response-bytes": "1370"},
    )
    text, usage, finish = "", None, None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    assert len(text) == 1370 and text.startswith("mock response to: hello there world")
    assert finish == "stop"
    assert usage.completion_tokens == 343 and usage.prompt_tokens == 5


def test_tool_call_stream_and_non_stream(mock):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"]}}}]
    c = client(mock)
    r = c.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                  tools=tools, tool_choice="required")
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "mock", "days": 1}
    args = ""
    for chunk in c.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                           tools=tools, stream=True,
                                           extra_headers={"x-mock-tool-call": "get_weather"}):
        for tc in chunk.choices[0].delta.tool_calls or []:
            args += tc.function.arguments or ""
    assert json.loads(args) == {"city": "mock", "days": 1}


def test_embeddings_and_models(mock):
    c = client(mock)
    e = c.embeddings.create(model="text-embedding-3-small", input=["a", "bb"], dimensions=16)
    assert len(e.data) == 2 and len(e.data[1].embedding) == 16
    e = c.embeddings.create(model="text-embedding-3-small", input="abcd", encoding_format="float")
    assert len(e.data[0].embedding) == 1536
    ids = {m.id for m in c.models.list()}
    assert {"gpt-4o-mini", "gpt-4o", "text-embedding-3-small"} <= ids


def test_errors_map_to_sdk_exceptions(mock):
    with pytest.raises(openai.AuthenticationError):
        client(mock, key="wrong").chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.AuthenticationError):
        client(mock, key="mock-openai-key-401").chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.RateLimitError) as e:
        client(mock, key="mock-openai-key-429").chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}])
    assert e.value.response.headers["retry-after"] == "1"
    with pytest.raises(openai.NotFoundError) as e:
        client(mock).chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}])
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError):
        client(mock).chat.completions.create(model="gpt-4o-mini", messages=[])
    with pytest.raises(openai.InternalServerError):
        client(mock).chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}],
                                             extra_headers={"x-mock-error": "503"})


def test_abort_mid_stream_and_reset_are_connection_errors(mock):
    received = 0
    with pytest.raises(openai.APIConnectionError):
        for _ in client(mock).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hello there world"}], stream=True,
            extra_headers={"x-mock-error": "abort-mid-stream", "x-mock-response-bytes": "2000"},
        ):
            received += 1
    assert received > 10  # the cut comes mid-stream, after real chunks
    with pytest.raises(openai.APIConnectionError):
        client(mock).chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}],
                                             extra_headers={"x-mock-error": "reset"})


def test_mistral_prefix(mock):
    r = client(mock, key="mock-mistral-key-1", prefix="/mistral").chat.completions.create(
        model="mistral-small-latest", messages=[{"role": "user", "content": "bonjour"}]
    )
    assert r.choices[0].message.content == "mock response to: bonjour"
    with pytest.raises(openai.NotFoundError):
        client(mock, key="mock-mistral-key-1", prefix="/mistral").chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}])


def test_azure_client(mock):
    az = openai.AzureOpenAI(api_key="mock-azure-key-1", azure_endpoint=mock.base,
                            api_version="2024-10-21", max_retries=0)
    r = az.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hello azure"}])
    assert r.choices[0].message.content == "mock response to: hello azure"
    bad = openai.AzureOpenAI(api_key="nope", azure_endpoint=mock.base, api_version="2024-10-21", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.NotFoundError):
        az.chat.completions.create(model="no-such-deployment", messages=[{"role": "user", "content": "x"}])


def test_stats_name_the_key_and_redact_it(mock):
    mock.reset()
    client(mock, key="mock-openai-key-2").chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "count me"}])
    s = mock.stats()
    assert s["total"] == 1
    rec = s["recent"][0]
    assert rec["key_id"] == "openai-2" and rec["model"] == "gpt-4o" and rec["status"] == 200
    assert rec["headers"]["authorization"] == "<redacted>"
    assert rec["body"]["messages"][0]["content"] == "count me"
    assert "mock-openai-key-2" not in json.dumps(s)


def test_error_event_mid_stream_raises(mock):
    got = ""
    with pytest.raises(openai.APIError, match="server had an error"):
        for chunk in client(mock).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hello there world"}], stream=True,
            extra_headers={"x-mock-error": "error-event", "x-mock-response-bytes": "300"},
        ):
            if chunk.choices:
                got += chunk.choices[0].delta.content or ""
    assert got.startswith("mock response to: hello")
