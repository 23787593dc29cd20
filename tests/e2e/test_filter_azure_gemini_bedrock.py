"""Azure OpenAI, Gemini and Bedrock through real Envoy, authz-service and
mock-llm, with the official openai client: chat (plain and streamed),
tools with a full tool-result round trip, embeddings, and what the provider
received (paths, auth, native bodies) read back from the mock's stats.
"""
from __future__ import annotations

import base64
import json
import struct
import urllib.request

import openai
import pytest

from helpers import HI, assert_openai_error, post
from plugin_config import envoy_variant

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"], "additionalProperties": False},
    },
}

AZURE = "azure/gpt-4o-mini"
GEMINI = "gemini/gemini-2.0-flash"
BEDROCK = "bedrock/anthropic.claude-3-haiku-20240307-v1:0"
CHAT_MODELS = [AZURE, GEMINI, BEDROCK]
PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJRU5ErkJggg=="


@pytest.fixture(scope="module")
def client(stack, demo_key):
    return openai.OpenAI(base_url=stack.base_url, api_key=demo_key, max_retries=0, timeout=20)


def recent(stack) -> list[dict]:
    with urllib.request.urlopen(f"{stack.mock_url}/_mock/stats", timeout=5) as resp:
        return json.load(resp)["recent"]


def last_request(stack) -> dict:
    return recent(stack)[-1]


@pytest.mark.parametrize("model", CHAT_MODELS)
def test_chat(stack, client, model):
    raw = client.chat.completions.with_raw_response.create(
        model=model, max_tokens=50, temperature=0.5, stop=["zzz"],
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}])
    resp = raw.parse()
    provider = model.split("/")[0]
    assert raw.headers["x-tollgate-provider"] == provider
    assert resp.object == "chat.completion"
    assert resp.choices[0].message.content.startswith("mock response to: hello there")
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage.prompt_tokens > 0 and resp.usage.completion_tokens > 0
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    last = last_request(stack)
    assert last["status"] == 200 and last["key_id"] == f"{provider}-1"
    body = last["body"]
    if provider == "azure":
        assert last["path"].startswith("/openai/deployments/gpt-4o-mini/chat/completions")
        assert "api-version=2024-10-21" in last["path"]
    elif provider == "gemini":
        assert last["path"] == "/v1beta/models/gemini-2.0-flash:generateContent"
        assert body["systemInstruction"] == {"parts": [{"text": "be brief"}]}
        assert body["generationConfig"] == {"temperature": 0.5, "maxOutputTokens": 50, "stopSequences": ["zzz"]}
    else:
        assert last["path"].startswith("/model/anthropic.claude-3-haiku-20240307-v1")
        assert last["path"].endswith("/converse")
        assert body["system"] == [{"text": "be brief"}]
        assert body["inferenceConfig"] == {"maxTokens": 50, "temperature": 0.5, "stopSequences": ["zzz"]}


@pytest.mark.parametrize("model", CHAT_MODELS)
def test_stream_with_usage(client, model):
    chunks = list(client.chat.completions.create(
        model=model, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "tell me a long story about the sea"}]))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("mock response to: tell me a long story")
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0


@pytest.mark.parametrize("model", CHAT_MODELS)
def test_stream_without_usage(client, model):
    chunks = list(client.chat.completions.create(model=model, stream=True, messages=HI))
    assert all(c.usage is None for c in chunks)
    assert all(c.choices for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", CHAT_MODELS)
def test_tool_round_trip(stack, client, model, stream):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    kwargs = dict(model=model, tools=[WEATHER_TOOL], tool_choice="required")
    if stream:
        chunks = list(client.chat.completions.create(messages=messages, stream=True, **kwargs))
        calls: dict[int, dict] = {}
        finish = None
        for c in chunks:
            if not c.choices:
                continue
            finish = c.choices[0].finish_reason or finish
            for tc in c.choices[0].delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
                slot["id"] = tc.id or slot["id"]
                if tc.function and tc.function.name:
                    slot["name"] = tc.function.name
                if tc.function and tc.function.arguments:
                    slot["arguments"] += tc.function.arguments
        assert finish == "tool_calls"
        assert len(calls) == 1
        call = calls[0]
        tool_calls = [{"id": call["id"], "type": "function",
                       "function": {"name": call["name"], "arguments": call["arguments"]}}]
    else:
        resp = client.chat.completions.create(messages=messages, **kwargs)
        assert resp.choices[0].finish_reason == "tool_calls"
        tc = resp.choices[0].message.tool_calls[0]
        call = {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments}
        tool_calls = [tc.model_dump()]
    assert call["id"] and call["name"] == "get_weather"
    assert json.loads(call["arguments"]) == {"city": "mock"}
    messages += [
        {"role": "assistant", "content": None, "tool_calls": tool_calls},
        {"role": "tool", "tool_call_id": call["id"], "content": json.dumps({"temp_c": 21})},
    ]
    final = client.chat.completions.create(model=model, tools=[WEATHER_TOOL], messages=messages)
    assert final.choices[0].finish_reason == "stop"
    assert final.choices[0].message.content
    body = last_request(stack)["body"]
    provider = model.split("/")[0]
    if provider == "gemini":
        assert body["contents"][1] == {"role": "model", "parts": [
            {"functionCall": {"name": "get_weather", "args": {"city": "mock"}}}]}
        assert body["contents"][2] == {"role": "user", "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"temp_c": 21}}}]}
        # The schema whole, in the field that takes full JSON Schema
        # (`parameters` takes only Gemini's subset and refuses the rest).
        decl = body["tools"][0]["functionDeclarations"][0]
        assert "parameters" not in decl
        assert decl["parametersJsonSchema"] == WEATHER_TOOL["function"]["parameters"]
    elif provider == "bedrock":
        assert body["messages"][1]["content"][0]["toolUse"]["toolUseId"] == call["id"]
        assert body["messages"][2]["content"][0] == {
            "toolResult": {"toolUseId": call["id"], "content": [{"json": {"temp_c": 21}}]}}
        assert body["toolConfig"]["tools"][0]["toolSpec"]["name"] == "get_weather"
    else:
        assert body["messages"][2]["tool_call_id"] == call["id"]


def test_gemini_image_and_json_mode(stack, client):
    resp = client.chat.completions.create(
        model=GEMINI, response_format={"type": "json_object"},
        messages=[{"role": "user", "content": [{"type": "text", "text": "describe"},
                                               {"type": "image_url", "image_url": {"url": PNG}}]}])
    assert resp.choices[0].message.content
    body = last_request(stack)["body"]
    assert body["contents"][0]["parts"][1] == {"inlineData": {"mimeType": "image/png", "data": PNG.split(",", 1)[1]}}
    assert body["generationConfig"]["responseMimeType"] == "application/json"


def test_bedrock_image(stack, client):
    client.chat.completions.create(
        model=BEDROCK, messages=[{"role": "user", "content": [{"type": "text", "text": "describe"},
                                                             {"type": "image_url", "image_url": {"url": PNG}}]}])
    block = last_request(stack)["body"]["messages"][0]["content"][1]
    assert block == {"image": {"format": "png", "source": {"bytes": PNG.split(",", 1)[1]}}}


@pytest.mark.parametrize("model,dims", [
    ("azure/text-embedding-3-small", None),
    ("gemini/text-embedding-004", 256),
    ("bedrock/amazon.titan-embed-text-v2:0", 256),
])
def test_embeddings(stack, client, model, dims):
    inputs = ["the quick brown fox"] if model.startswith("bedrock") else ["the quick brown fox", "jumps"]
    kw = {"dimensions": dims} if dims else {}
    # The client asks for base64 by default and decodes it.
    resp = client.embeddings.create(model=model, input=inputs, **kw)
    assert [d.index for d in resp.data] == list(range(len(inputs)))
    assert all(isinstance(d.embedding, list) and len(d.embedding) > 8 for d in resp.data)
    if dims:
        assert all(len(d.embedding) == dims for d in resp.data)
    assert resp.usage.prompt_tokens > 0
    # Floats on request, equal to the decoded base64.
    floats = client.embeddings.create(model=model, input=inputs, encoding_format="float", **kw)
    for a, b in zip(resp.data, floats.data):
        assert a.embedding == pytest.approx(b.embedding, rel=1e-6, abs=1e-6)
    if model.startswith("gemini"):
        last = last_request(stack)
        assert last["path"] == "/v1beta/models/text-embedding-004:batchEmbedContents"
        assert last["body"]["requests"][0]["model"] == "models/text-embedding-004"


def test_embeddings_base64_raw(stack, demo_key):
    status, _, body = post(f"{stack.base_url}/embeddings",
                           {"model": "gemini/text-embedding-004", "input": "abc", "encoding_format": "base64"},
                           {"authorization": f"Bearer {demo_key}"})
    assert status == 200, body
    raw = base64.b64decode(body["data"][0]["embedding"])
    assert len(raw) % 4 == 0 and struct.unpack(f"<{len(raw) // 4}f", raw)


def test_bedrock_titan_embeds_several_inputs_in_order(stack, client):
    """Titan embeds one input per call: the filter makes one signed call per
    input (the mock verifies each signature) and merges them in order."""
    texts = ["first text", "the second", "3"]
    before = len([r for r in recent(stack) if r["path"].endswith("/invoke")])
    many = client.embeddings.create(model="bedrock/amazon.titan-embed-text-v2:0", input=texts)
    calls = [r for r in recent(stack) if r["path"].endswith("/invoke")]
    assert len(calls) - before == 3
    assert all(r["status"] == 200 and r["key_id"] == "bedrock-1" for r in calls[-3:])
    assert sorted(r["body"]["inputText"] for r in calls[-3:]) == sorted(texts)
    assert [d.index for d in many.data] == [0, 1, 2]
    singles = [client.embeddings.create(model="bedrock/amazon.titan-embed-text-v2:0", input=t) for t in texts]
    for d, one in zip(many.data, singles):
        assert d.embedding == one.data[0].embedding
    assert many.usage.prompt_tokens == sum(one.usage.prompt_tokens for one in singles) > 0


def test_bedrock_embeddings_refusals(stack, demo_key):
    status, _, body = post(f"{stack.base_url}/embeddings",
                           {"model": "bedrock/amazon.titan-embed-text-v2:0", "input": [f"t{i}" for i in range(65)]},
                           {"authorization": f"Bearer {demo_key}"})
    assert status == 400
    assert_openai_error(body)
    assert body["error"]["param"] == "input"
    status, _, body = post(f"{stack.base_url}/embeddings", {"model": BEDROCK, "input": "a"},
                           {"authorization": f"Bearer {demo_key}"})
    assert status == 400
    assert_openai_error(body, "unsupported_endpoint")
    assert "amazon.titan-embed-text" in body["error"]["message"]


def test_models_list_has_every_provider(client):
    ids = {m.id for m in client.models.list()}
    assert {AZURE, GEMINI, BEDROCK, "gemini/text-embedding-004", "azure/text-embedding-3-small",
            "bedrock/amazon.titan-embed-text-v2:0"} <= ids


@pytest.mark.parametrize("escaped", [
    "bedrock%2Fanthropic.claude-3-haiku-20240307-v1%3A0",
    "bedrock/anthropic.claude-3-haiku-20240307-v1%3a0",
])
def test_one_model_with_escaped_id(stack, demo_key, escaped):
    """Every percent-escape of the id is decoded (Bedrock ids hold ':')."""
    req = urllib.request.Request(f"{stack.base_url}/models/{escaped}",
                                 headers={"authorization": f"Bearer {demo_key}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
        assert json.load(resp)["id"] == BEDROCK


def test_bedrock_signature_is_verified(stack, client):
    """The mock checks SigV4 against the secret: a 200 proves the signature
    (host, date, body hash) is right; the request carries no client key."""
    client.chat.completions.create(model=BEDROCK, messages=HI)
    last = last_request(stack)
    assert last["status"] == 200 and last["key_id"] == "bedrock-1"
    auth = last["headers"].get("authorization", "")
    assert auth in ("<redacted>",) or auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDMOCKBEDROCK1/")


@pytest.mark.parametrize("model", CHAT_MODELS)
def test_provider_errors_are_openai_shaped(client, model):
    # 503, not 429: a 429 would cool the provider's only key for the session.
    with pytest.raises(openai.InternalServerError) as e:
        client.chat.completions.create(model=model, messages=HI, extra_headers={"x-mock-error": "503"})
    assert e.value.status_code == 503
    assert e.value.body["code"] == "provider_overloaded"


@pytest.mark.parametrize("model", [GEMINI, BEDROCK])
def test_stream_error_event(client, model):
    stream = client.chat.completions.create(model=model, messages=HI, stream=True,
                                            extra_headers={"x-mock-error": "error-event"})
    with pytest.raises(openai.APIError):
        list(stream)


def test_what_converse_cannot_take_is_dropped_and_named(client):
    # OpenAI accepts these; Converse has no tool_choice none and no n: the
    # answer comes, and the header names what the provider did not get.
    raw = client.chat.completions.with_raw_response.create(
        model=BEDROCK, messages=HI, tools=[WEATHER_TOOL], tool_choice="none", n=2, logprobs=True)
    assert raw.parse().choices[0].message.content
    assert sorted(raw.headers["x-tollgate-dropped"].split(",")) == ["logprobs", "n", "tool_choice"]
    # A parameter OpenAI does not know either is still a 400 naming it.
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=BEDROCK, messages=HI, extra_body={"frobnicate": 1})
    assert e.value.body["param"] == "frobnicate"


@pytest.mark.parametrize("stream", [False, True])
def test_bedrock_json_mode_through_a_forced_tool(stack, client, stream):
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "sunny": {"type": "boolean"}},
              "required": ["city", "sunny"]}
    kwargs = dict(model=BEDROCK, messages=[{"role": "user", "content": "weather as json"}],
                  response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema}})
    if stream:
        chunks = list(client.chat.completions.create(stream=True, **kwargs))
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert all(not c.choices[0].delta.tool_calls for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    else:
        resp = client.chat.completions.create(**kwargs)
        content = resp.choices[0].message.content
        assert resp.choices[0].message.tool_calls is None
        finish = [resp.choices[0].finish_reason]
    assert json.loads(content) == {"city": "mock", "sunny": True}
    assert finish == ["stop"]
    tc = last_request(stack)["body"]["toolConfig"]
    assert tc["toolChoice"] == {"tool": {"name": "json_response"}}


def test_refused_credentials_cool_the_key(make_stack, demo_key, tmp_path):
    """Gemini refuses a bad key with 400 API_KEY_INVALID and Bedrock with 403:
    the client gets 502 provider_auth_failed, and the key is skipped after."""
    def edit(cfg):
        cfg["providers"]["gemini"]["keys"] = [
            {"id": "gemini-401", "value": "mock-gemini-key-401", "weight": 1000},
            {"id": "gemini-1", "value": "mock-gemini-key-1", "weight": 1},
        ]
        cfg["providers"]["bedrock"]["keys"] = [
            {"id": "bedrock-401", "access_key_id": "AKIDMOCKBEDROCK401", "value": "mock-bedrock-secret-401",
             "weight": 1000},
            {"id": "bedrock-1", "access_key_id": "AKIDMOCKBEDROCK1", "value": "mock-bedrock-secret-1", "weight": 1},
        ]
        cfg["key_cooldown_seconds"] = 60
    s = make_stack(envoy_config=envoy_variant(tmp_path / "envoy-provider-keys.yaml", plugin=edit))
    client = openai.OpenAI(base_url=s.base_url, api_key=demo_key, max_retries=0, timeout=20)
    for model, bad in [(GEMINI, "gemini-401"), (BEDROCK, "bedrock-401")]:
        failures = 0
        for _ in range(6):
            try:
                client.chat.completions.create(model=model, messages=HI)
            except openai.APIStatusError as e:
                assert e.status_code == 502, e
                assert e.body["code"] == "provider_auth_failed"
                failures += 1
        # Weight 1000:1 picks the bad key first (p ≈ 0.999); once refused it
        # cools down and every later request goes to the good key.
        assert failures <= 1
        by_key = {r["key_id"]: r["status"] for r in recent(s) if r["key_id"] in (bad, bad.replace("-401", "-1"))}
        assert by_key.get(bad.replace("-401", "-1")) == 200
