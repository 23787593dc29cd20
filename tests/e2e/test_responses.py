"""The OpenAI Responses front door (POST /v1/responses) end to end, with the
official openai client's `responses.create` and `responses.stream`, through
real Envoy, authz-service, Redis and mock-llm.

OpenAI and Azure get the request passed through (mock-llm's own
/v1/responses, as strict as its chat completions); Anthropic, Gemini,
Bedrock and the chat-only OpenAI-compatible provider (mistral,
`"responses_api": false`) get it translated through chat and answer with
Responses output items and events.
"""
from __future__ import annotations

import json
import re
import time
import urllib.request

import openai
import pytest

from helpers import assert_openai_error, post
from test_budgets import reserving_stack

NATIVE = ["openai/gpt-4o-mini", "azure/gpt-4o-mini"]
TRANSLATED = ["anthropic/claude-haiku-4-5", "gemini/gemini-2.0-flash",
              "bedrock/anthropic.claude-3-haiku-20240307-v1:0", "mistral/mistral-small-latest"]
EVERY = NATIVE + TRANSLATED

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
CALL_WEATHER = {"x-mock-tool-call": "get_weather"}


@pytest.fixture(scope="module")
def client(stack, demo_key):
    return openai.OpenAI(base_url=stack.base_url, api_key=demo_key, max_retries=0, timeout=20)


def mock_recent(stack) -> dict:
    with urllib.request.urlopen(f"{stack.mock_url}/_mock/stats", timeout=5) as resp:
        return json.load(resp)["recent"][-1]


def authz_metric(stack, name: str) -> float:
    with urllib.request.urlopen(f"{stack.authz_http_url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


@pytest.mark.parametrize("model", EVERY)
def test_create_answers_text_with_usage_and_rate_limit_headers(client, model):
    raw = client.responses.with_raw_response.create(
        model=model, instructions="be brief", input="hello there", store=False, max_output_tokens=200)
    r = raw.parse()
    assert r.object == "response" and r.status == "completed"
    assert r.output_text
    assert [item.type for item in r.output if item.type != "reasoning"] == ["message"]
    assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert raw.headers["x-tollgate-provider"] == model.split("/")[0]
    assert int(raw.headers["x-ratelimit-remaining-requests"]) >= 0


@pytest.mark.parametrize("model", EVERY)
def test_stream_events_build_the_same_answer(client, model):
    with client.responses.stream(model=model, input=[{"role": "user", "content": "tell me a story"}]) as s:
        events = list(s)
        final = s.get_final_response()
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(events[0].sequence_number,
                                                             events[0].sequence_number + len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text and final.output_text == text
    assert final.usage.output_tokens > 0 and final.usage.input_tokens > 0


@pytest.mark.parametrize("model", EVERY)
def test_function_call_and_tool_output_round_trip(client, model):
    question = {"role": "user", "content": "weather in Paris?"}
    first = client.responses.create(model=model, input=[question], tools=[WEATHER], extra_headers=CALL_WEATHER)
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert isinstance(json.loads(calls[0].arguments), dict)
    # store: false clients send the whole conversation back, with the call.
    passed_back = [item.model_dump(exclude_none=True) for item in first.output]
    second = client.responses.create(
        model=model, tools=[WEATHER],
        input=[question, *passed_back,
               {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 21 C"}])
    assert second.status == "completed" and second.output_text


@pytest.mark.parametrize("model", EVERY)
def test_streamed_function_call(client, model):
    with client.responses.stream(model=model, input="weather in Oslo?", tools=[WEATHER],
                                 extra_headers=CALL_WEATHER) as s:
        events = list(s)
        final = s.get_final_response()
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    call = [item for item in final.output if item.type == "function_call"][0]
    assert call.name == "get_weather" and call.arguments == args
    assert isinstance(json.loads(args), dict)
    assert "response.function_call_arguments.done" in [e.type for e in events]


@pytest.mark.parametrize("model", ["openai/gpt-4o-mini", "anthropic/claude-haiku-4-5"])
def test_json_schema_text_format(client, model):
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
              "additionalProperties": False}
    r = client.responses.create(model=model, input="a city please",
                                text={"format": {"type": "json_schema", "name": "city", "schema": schema,
                                                 "strict": True}})
    assert isinstance(json.loads(r.output_text)["city"], str)


def test_passthrough_reaches_the_providers_responses_api_without_state(stack, client):
    client.responses.create(model="openai/gpt-4o-mini", input="hi", reasoning={"effort": "low"})
    last = mock_recent(stack)
    assert last["path"] == "/v1/responses" and last["key_id"].startswith("openai-")
    assert last["body"]["model"] == "gpt-4o-mini" and last["body"]["store"] is False
    client.responses.create(model="azure/gpt-4o-mini", input="hi")
    last = mock_recent(stack)
    assert last["path"] == "/openai/v1/responses" and last["body"]["model"] == "gpt-4o-mini"


def test_chat_only_provider_gets_chat_completions(stack, client):
    r = client.responses.create(model="mistral/mistral-small-latest", input="hi", instructions="be brief",
                                reasoning={"effort": "low"})
    assert r.output_text
    last = mock_recent(stack)
    assert last["path"] == "/mistral/v1/chat/completions"
    assert last["body"]["messages"][0] == {"role": "system", "content": "be brief"}


def test_images_and_reasoning_items_passed_back_translate(client):
    pixel = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
             "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
    r = client.responses.create(model="anthropic/claude-haiku-4-5", input=[
        {"role": "user", "content": [{"type": "input_text", "text": "what is this?"},
                                     {"type": "input_image", "image_url": pixel}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"role": "assistant", "content": [{"type": "output_text", "text": "a pixel"}]},
        {"role": "user", "content": "sure?"}])
    assert r.output_text


@pytest.mark.parametrize("model", ["openai/gpt-4o-mini", "anthropic/claude-haiku-4-5"])
def test_usage_is_debited(stack, client, model):
    time.sleep(0.3)  # earlier answers' usage has been posted
    before = authz_metric(stack, "tollgate_authz_usage_tokens_total")
    r = client.responses.create(model=model, input="count my tokens")
    with client.responses.stream(model=model, input="and these") as s:
        streamed = s.get_final_response()
    want = r.usage.total_tokens + streamed.usage.total_tokens
    deadline = time.monotonic() + 5
    while authz_metric(stack, "tollgate_authz_usage_tokens_total") - before < want and time.monotonic() < deadline:
        time.sleep(0.05)
    assert authz_metric(stack, "tollgate_authz_usage_tokens_total") - before == want


@pytest.mark.parametrize("model", EVERY)
@pytest.mark.parametrize("field,value", [("previous_response_id", "resp_123"), ("store", True)])
def test_stateful_requests_are_refused(stack, demo_key, model, field, value):
    status, _, body = post(f"{stack.base_url}/responses", {"model": model, "input": "hi", field: value},
                           {"authorization": f"Bearer {demo_key}"})
    assert status == 400, body
    assert_openai_error(body, "unsupported_parameter")
    assert body["error"]["param"] == field and "stateless" in body["error"]["message"]


# Where a Responses request's web search goes, by family: OpenAI and Azure
# run it themselves; Anthropic's own server tool stands in (the default
# config enables it); Gemini's Google Search does not combine with function
# tools, so there (as on Bedrock and the chat-only server) it is dropped.
WEB_SEARCH_MAPPED = {"anthropic/claude-haiku-4-5"}


@pytest.mark.parametrize("model", EVERY)
def test_built_in_tools_are_never_refused(client, stack, model):
    raw = client.responses.with_raw_response.create(
        model=model, input="hi",
        tools=[WEATHER, {"type": "web_search"}, {"type": "file_search", "vector_store_ids": ["v"]}])
    r = raw.parse()
    assert r.status == "completed" and r.output_text
    dropped = [d for d in raw.headers.get("x-tollgate-dropped", "").split(",") if d]
    sent = mock_recent(stack)["body"]
    if model in NATIVE:
        # Passed through: the provider runs its own tools.
        assert dropped == []
        assert [t["type"] for t in sent["tools"]] == ["function", "web_search", "file_search"]
    elif model in WEB_SEARCH_MAPPED:
        assert dropped == ["file_search"]
        assert {"type": "web_search_20250305", "name": "web_search"} in sent["tools"], sent["tools"]
    else:
        assert sorted(dropped) == ["file_search", "web_search"]
        assert "web_search" not in json.dumps(sent)


@pytest.mark.parametrize("body,param", [
    ({"model": "anthropic/claude-haiku-4-5"}, "input"),
    ({"model": "anthropic/claude-haiku-4-5", "input": 7}, "input"),
    ({"model": "anthropic/claude-haiku-4-5", "input": "hi", "frobnicate": 3}, "frobnicate"),
    ({"model": "anthropic/claude-haiku-4-5", "input": [{"type": "item_reference", "id": "x"}]}, "input[0]"),
    ({"model": "anthropic/claude-haiku-4-5", "input": [{"type": "function_call_output"}]}, "input[0].call_id"),
    ({"model": "openai/gpt-4o-mini", "input": "hi", "stream": "yes"}, "stream"),
])
def test_bad_requests_get_openai_errors(stack, demo_key, body, param):
    status, _, got = post(f"{stack.base_url}/responses", body, {"authorization": f"Bearer {demo_key}"})
    assert status == 400, got
    assert_openai_error(got)
    assert got["error"]["param"] == param


@pytest.mark.parametrize("model", ["openai/gpt-4o-mini", "anthropic/claude-haiku-4-5"])
def test_provider_errors_mid_stream_end_in_an_error_event(client, model):
    with client.responses.stream(model=model, input="tell me a long story",
                                 extra_headers={"x-mock-error": "error-event", "x-mock-response-bytes": "2000"}) as s:
        try:
            types = [e.type for e in s]
        except openai.APIError:
            types = ["error"]
    assert "error" in types and "response.completed" not in types


@pytest.mark.parametrize("model", ["openai/gpt-4o-mini", "anthropic/claude-haiku-4-5"])
def test_provider_errors_are_openai_errors(client, model):
    with pytest.raises(openai.APIStatusError) as err:
        client.responses.create(model=model, input="hi", extra_headers={"x-mock-error": "503"})
    assert err.value.status_code == 503 and err.value.body["code"] == "provider_overloaded"


def access_log(stack) -> list[dict]:
    text = stack.log_path("envoy").read_text(errors="replace")
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_access_log_names_the_responses_operation_and_tokens(stack, client):
    time.sleep(1.5)  # Envoy flushes its access log every second: earlier tests' lines are in
    seen = len(access_log(stack))
    native = client.responses.create(model="openai/gpt-4o-mini", input="log me")
    with client.responses.stream(model="gemini/gemini-2.0-flash", input="log me too") as s:
        translated = s.get_final_response()
    deadline = time.monotonic() + 10
    while True:
        mine = [e for e in access_log(stack)[seen:] if e["operation"] == "responses" and e["status"] == 200]
        by_provider = {e["provider"]: e for e in mine}
        if {"openai", "gemini"} <= by_provider.keys():
            break
        assert time.monotonic() < deadline, [(e["provider"], e["status"], e["path"]) for e in access_log(stack)[seen:]]
        time.sleep(0.3)
    for provider, r in (("openai", native), ("gemini", translated)):
        e = by_provider[provider]
        assert (e["tenant"], e["operation"]) == ("demo", "responses")
        assert (e["input_tokens"], e["output_tokens"]) == (str(r.usage.input_tokens), str(r.usage.output_tokens))




@pytest.mark.parametrize("model", ["openai/gpt-4o-mini", "bedrock/anthropic.claude-3-haiku-20240307-v1:0"])
def test_a_reservation_is_settled_by_the_real_usage(make_stack, tmp_path, model):
    """authz-service reserves the prompt's estimate plus 1,000 tokens; the
    filter's usage report settles it, so the next request sees only the
    real usage charged."""
    s = reserving_stack(make_stack, tmp_path)
    c = openai.OpenAI(base_url=s.base_url, api_key="tg-reserve", max_retries=0, timeout=20)
    raw = c.responses.with_raw_response.create(model=model, input="hi there")
    first = 100000 - int(raw.headers["x-ratelimit-remaining-tokens"])
    used = raw.parse().usage.total_tokens
    assert used < 1000 < first
    deadline = time.monotonic() + 5  # the filter posts usage every 100 ms
    while authz_metric(s, "tollgate_authz_usage_tokens_total") < used and time.monotonic() < deadline:
        time.sleep(0.05)
    raw = c.responses.with_raw_response.create(model=model, input="hi there")
    second = 100000 - int(raw.headers["x-ratelimit-remaining-tokens"])
    # The first request's reservation came back but for its real usage (a
    # day's budget refills about a token a second).
    assert 0 <= used + first - second <= 5, (used, first, second)
