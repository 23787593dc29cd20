"""The Responses API (`POST /v1/responses`), read by the official openai SDK:
`responses.create` (stream or not) and the `responses.stream` helper, which
rebuilds the response from the events and checks their order."""

import json

import openai
import pytest

TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather of a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"], "additionalProperties": False},
          "strict": True}]


def client(mock, key="mock-openai-key-1"):
    return openai.OpenAI(api_key=key, base_url=f"{mock.base}/v1", max_retries=0)


def test_create_text(mock):
    r = client(mock).responses.create(model="gpt-4o-mini", input="hello there world",
                                      instructions="be brief", store=False)
    assert r.object == "response" and r.status == "completed"
    assert r.output_text == "mock response to: hello there world"
    assert r.output[0].type == "message" and r.output[0].content[0].type == "output_text"
    assert r.store is False and r.instructions == "be brief"
    # prompt = "hello there world" + "be brief" (25 chars) → 7 tokens; answer 35 chars → 9.
    u = r.usage
    assert (u.input_tokens, u.output_tokens, u.total_tokens) == (7, 9, 16)
    assert u.input_tokens_details.cached_tokens == 0
    assert u.output_tokens_details.reasoning_tokens == 0


def test_reasoning_item_and_tokens(mock):
    r = client(mock).responses.create(model="gpt-4o-mini", input="think", reasoning={"effort": "high"})
    assert [o.type for o in r.output] == ["reasoning", "message"]
    assert r.usage.output_tokens_details.reasoning_tokens == 64
    assert r.usage.output_tokens == 64 + 6  # "mock response to: think" is 23 chars
    assert r.reasoning.effort == "high"


def test_stream_events_in_order(mock):
    events = list(client(mock).responses.create(
        model="gpt-4o-mini", input=[{"role": "user", "content": [{"type": "input_text", "text": "hello there world"}]}],
        stream=True, extra_headers={"x-mock-response-bytes": "100"}))
    kinds = [e.type for e in events]
    assert kinds[:5] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added", "response.output_text.delta"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) == 7  # 100 chars in pieces of 16
    text = "".join(deltas)
    assert len(text) == 100 and text.startswith("mock response to: hello there world")
    done = events[-1].response
    assert done.output_text == text and done.usage.output_tokens == 25


def test_stream_helper_with_function_call(mock):
    c = client(mock)
    with c.responses.stream(model="gpt-4o-mini", input="weather in Paris?", tools=TOOLS,
                            tool_choice="required") as s:
        kinds = [e.type for e in s]
        final = s.get_final_response()
    assert "response.function_call_arguments.delta" in kinds
    assert kinds[-3:] == ["response.function_call_arguments.done", "response.output_item.done",
                          "response.completed"]
    call = final.output[0]
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "mock"}
    # Answering the call is accepted; an output for an unknown call is not.
    r = c.responses.create(model="gpt-4o-mini", tools=TOOLS, input=[
        {"role": "user", "content": "weather in Paris?"},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
    ])
    assert r.output_text.startswith("mock response to:")
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model="gpt-4o-mini", input=[
            {"role": "user", "content": "x"},
            {"type": "function_call_output", "call_id": "call_nope", "output": "sunny"}])
    assert "No tool call found" in e.value.body["message"]


def test_x_mock_tool_call_and_structured_output(mock):
    c = client(mock)
    r = c.responses.create(model="gpt-4o-mini", input="hi", tools=TOOLS,
                           extra_headers={"x-mock-tool-call": "get_weather"})
    assert r.output[0].type == "function_call"
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}},
              "required": ["n", "ok"], "additionalProperties": False}
    r = c.responses.create(model="gpt-4o-mini", input="hi",
                           text={"format": {"type": "json_schema", "name": "out", "schema": schema, "strict": True}})
    assert json.loads(r.output_text) == {"n": 1, "ok": True}


def test_truncated_answer_is_incomplete(mock):
    r = client(mock).responses.create(model="gpt-4o-mini", input="hello", max_output_tokens=16,
                                      extra_headers={"x-mock-response-bytes": "1000"})
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert len(r.output_text) == 64


@pytest.mark.parametrize("kwargs, param, fragment", [
    ({"input": "x", "bogus": 1}, "bogus", "Unknown parameter"),
    ({}, "input", "Missing required parameter"),
    ({"input": "x", "max_output_tokens": 5}, "max_output_tokens", "Expected a value >= 16"),
    ({"input": "x", "reasoning": {"effort": "huge"}}, "reasoning.effort", "Invalid value: 'huge'"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format.name", "Missing"),
    ({"input": "x", "tool_choice": "required"}, "tool_choice", "must be specified with 'tools'"),
    ({"input": [{"type": "message", "role": "user", "content": [{"type": "input_image"}]}]},
     "input[0].content[0]", "image_url"),
    ({"input": [{"type": "bogus"}]}, "input[0].type", "Invalid value: 'bogus'"),
    ({"input": "x", "store": "yes"}, "store", "expected a boolean"),
    ({"input": "x", "previous_response_id": "resp_1"}, "previous_response_id", "not found"),
])
def test_bad_requests_are_refused(mock, kwargs, param, fragment):
    with pytest.raises(openai.BadRequestError) as e:
        client(mock).responses.create(model="gpt-4o-mini", extra_body=kwargs)
    assert e.value.body["param"] == param and fragment in e.value.body["message"]
    assert e.value.body["type"] == "invalid_request_error"


def test_unknown_model_and_key(mock):
    with pytest.raises(openai.NotFoundError):
        client(mock).responses.create(model="gpt-nope", input="x")
    with pytest.raises(openai.AuthenticationError):
        client(mock, key="nope").responses.create(model="gpt-4o-mini", input="x")


def test_azure_responses(mock):
    az = openai.AzureOpenAI(api_key="mock-azure-key-1", azure_endpoint=mock.base,
                            api_version="2025-04-01-preview", max_retries=0)
    r = az.responses.create(model="gpt-4o-mini", input="hello azure")
    assert r.output_text == "mock response to: hello azure"
    with pytest.raises(openai.NotFoundError):
        az.responses.create(model="no-such-deployment", input="x")
    v1 = openai.OpenAI(api_key="unused", base_url=f"{mock.base}/openai/v1", max_retries=0,
                       default_headers={"api-key": "mock-azure-key-1"})
    events = [e.type for e in v1.responses.create(model="gpt-4o-mini", input="hi", stream=True)]
    assert events[0] == "response.created" and events[-1] == "response.completed"
    stats = mock.stats()
    paths = {r["path"].split("?")[0] for r in stats["recent"] if r["status"] == 200}
    assert {"/openai/responses", "/openai/v1/responses"} <= paths
