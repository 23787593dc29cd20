"""The official anthropic SDK, pointed straight at mock-llm, parses its answers."""

import anthropic
from anthropic._constants import ANTHROPIC_API_VERSION
import pytest

HELLO = [{"role": "user", "content": "hello there world"}]
TOOLS = [{"name": "get_weather", "description": "weather", "input_schema": {
    "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
    "required": ["city"]}}]


def client(mock, key="mock-anthropic-key-1"):
    return anthropic.Anthropic(api_key=key, base_url=mock.base, max_retries=0)


def test_messages_non_stream(mock):
    m = client(mock).messages.create(model="claude-sonnet-4-5", max_tokens=100, messages=HELLO)
    assert m.content[0].type == "text"
    assert m.content[0].text == "mock response to: hello there world"
    assert m.stop_reason == "end_turn"
    assert (m.usage.input_tokens, m.usage.output_tokens) == (5, 9)


def test_messages_stream_helper(mock):
    with client(mock).messages.stream(model="claude-haiku-4-5", max_tokens=1000, messages=HELLO,
                                      extra_headers={"x-mock-response-bytes": "1370"}) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert len(text) == 1370 and final.content[0].text == text
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 343


def test_raw_stream_event_order(mock):
    # The SDK parses every event (it skips pings) ...
    events = [e.type for e in client(mock).messages.create(
        model="claude-haiku-4-5", max_tokens=100, messages=HELLO, stream=True)]
    assert events[:2] == ["message_start", "content_block_start"]
    assert events[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(events[2:-3]) == {"content_block_delta"}
    # ... and on the wire the ping comes right after the first block start.
    status, headers, body = mock.request(
        "POST", "/v1/messages", {"model": "claude-haiku-4-5", "max_tokens": 100, "messages": HELLO, "stream": True},
        {"x-api-key": "mock-anthropic-key-1", "anthropic-version": "2023-06-01", "content-type": "application/json"})
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    wire = [line[len("event: "):] for line in body.decode().splitlines() if line.startswith("event: ")]
    assert wire[:3] == ["message_start", "content_block_start", "ping"]
    assert wire[3:] == events[2:]


def test_tool_use_stream(mock):
    with client(mock).messages.stream(model="claude-haiku-4-5", max_tokens=100, messages=HELLO, tools=TOOLS,
                                      tool_choice={"type": "tool", "name": "get_weather"}) as s:
        final = s.get_final_message()
    block = final.content[0]
    assert block.type == "tool_use" and block.name == "get_weather"
    assert block.input == {"city": "mock", "unit": "c"}
    assert final.stop_reason == "tool_use"
    # Answering it is accepted; answering another id is refused.
    c = client(mock)
    follow = HELLO + [{"role": "assistant", "content": [block.model_dump()]}]
    ok = c.messages.create(model="claude-haiku-4-5", max_tokens=50, tools=TOOLS, messages=follow + [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block.id, "content": "sunny"}]}])
    assert ok.stop_reason == "end_turn"
    with pytest.raises(anthropic.BadRequestError, match="tool_use_id"):
        c.messages.create(model="claude-haiku-4-5", max_tokens=50, tools=TOOLS, messages=follow + [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_other", "content": "x"}]}])


@pytest.mark.parametrize("messages,needle", [
    ([{"role": "system", "content": "s"}, {"role": "user", "content": "x"}], "system"),
    ([{"role": "assistant", "content": "a"}], "first message"),
    ([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "alternate"),
])
def test_message_rules(mock, messages, needle):
    with pytest.raises(anthropic.BadRequestError, match=needle) as e:
        client(mock).messages.create(model="claude-sonnet-4-5", max_tokens=10, messages=messages)
    assert e.value.body["error"]["type"] == "invalid_request_error"


def test_errors_map_to_sdk_exceptions(mock):
    with pytest.raises(anthropic.AuthenticationError):
        client(mock, key="wrong").messages.create(model="claude-sonnet-4-5", max_tokens=10, messages=HELLO)
    with pytest.raises(anthropic.AuthenticationError):
        client(mock, key="mock-anthropic-key-401").messages.create(model="claude-sonnet-4-5", max_tokens=10, messages=HELLO)
    with pytest.raises(anthropic.RateLimitError):
        client(mock, key="mock-anthropic-key-429").messages.create(model="claude-sonnet-4-5", max_tokens=10, messages=HELLO)
    with pytest.raises(anthropic.NotFoundError):
        client(mock).messages.create(model="claude-0", max_tokens=10, messages=HELLO)
    with pytest.raises(anthropic.OverloadedError):
        client(mock).messages.create(model="claude-sonnet-4-5", max_tokens=10, messages=HELLO,
                                     extra_headers={"x-mock-error": "529"})
    # max_tokens is required by the API; send a raw request without it.
    status, _, body = mock.request("POST", "/v1/messages", {"model": "claude-sonnet-4-5", "messages": HELLO},
                                   {"x-api-key": "mock-anthropic-key-1", "anthropic-version": "2023-06-01",
                                    "content-type": "application/json"})
    assert status == 400 and b"max_tokens" in body


def test_stats_name_the_key(mock):
    mock.reset()
    client(mock, key="mock-anthropic-key-2").messages.create(model="claude-haiku-4-5", max_tokens=10, messages=HELLO)
    rec = mock.stats()["recent"][0]
    assert rec["key_id"] == "anthropic-2" and rec["headers"]["authorization"] == "<redacted>"
    assert rec["headers"]["anthropic-version"] == ANTHROPIC_API_VERSION


def test_x_api_key_header_and_bearer_both_identify_the_key(mock):
    mock.reset()
    headers = {"x-api-key": "mock-anthropic-key-1", "anthropic-version": "2023-06-01", "content-type": "application/json"}
    body = {"model": "claude-haiku-4-5", "max_tokens": 10, "messages": HELLO}
    assert mock.request("POST", "/v1/messages", body, headers)[0] == 200
    client(mock).messages.create(model="claude-haiku-4-5", max_tokens=10, messages=HELLO)
    assert [r["key_id"] for r in mock.stats()["recent"]] == ["anthropic-1", "anthropic-1"]
    del headers["anthropic-version"]
    status, _, err = mock.request("POST", "/v1/messages", body, headers)
    assert status == 400 and b"anthropic-version" in err


def test_error_event_mid_stream_raises(mock):
    with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
        with client(mock).messages.stream(model="claude-haiku-4-5", max_tokens=500, messages=HELLO,
                                          extra_headers={"x-mock-error": "error-event"}) as s:
            for _ in s.text_stream:
                pass


def test_count_tokens_matches_usage(mock):
    c = client(mock)
    kwargs = dict(model="claude-opus-5-5", system="be brief",
                  messages=[{"role": "user", "content": "hello there world"}])
    counted = c.messages.count_tokens(**kwargs)
    created = c.messages.create(max_tokens=50, **kwargs)
    assert counted.input_tokens == created.usage.input_tokens == 7
    with pytest.raises(anthropic.NotFoundError):
        c.messages.count_tokens(model="claude-nope", messages=[{"role": "user", "content": "x"}])


def test_mid_conversation_system_message(mock):
    # The SDK's stable types have SystemMessageParam (role "system", text
    # only), so no beta header is needed; Claude Code sends its beta anyway.
    messages = [{"role": "user", "content": "hello there"},
                {"role": "system", "content": "answer in French"}]
    beta = {"anthropic-beta": "claude-code-20250219,mid-conversation-system-2026-04-07"}
    for headers in (beta, {}):
        m = client(mock).messages.create(model="claude-haiku-4-5", max_tokens=50, messages=messages,
                                         extra_headers=headers)
        assert m.content[0].text.startswith("mock response to: hello there")
    # Never as the first message.
    with pytest.raises(anthropic.BadRequestError, match="system"):
        client(mock).messages.create(model="claude-haiku-4-5", max_tokens=50, messages=messages[::-1],
                                     extra_headers=beta)
