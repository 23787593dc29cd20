"""The OpenAI passthrough's body path through real Envoy: the filter reads the
body's top level without building it and edits it in place (only the prefix up
to its last edit is written back), and refuses malformed bodies with an
OpenAI 400 before the provider sees them (filters/README.md, "The passthrough
body path"). Large bodies of the other doors too: the Messages passthrough
(scanned and edited in place) and the translations to Anthropic, whose long
texts are copied rather than rebuilt (filters/README.md, `lift.rs`).
"""
from __future__ import annotations

import json
import urllib.request

import anthropic
import openai
import pytest

from helpers import assert_openai_error, post

# A coding agent's turn: source text with newlines and quotes to escape.
FILLER = 'fn main() {\n    println!("hello, {}", name); // "quoted"\n}\n'


def mock_recent(stack) -> list[dict]:
    with urllib.request.urlopen(f"{stack.mock_url}/_mock/stats", timeout=5) as resp:
        return json.load(resp)["recent"]


def last_seq(stack) -> int:
    return max((r["seq"] for r in mock_recent(stack)), default=0)


@pytest.fixture(scope="module")
def auth(demo_key):
    return {"authorization": f"Bearer {demo_key}"}


def test_large_body_with_the_model_last_reaches_the_provider_edited(stack, auth):
    text = FILLER * (600_000 // len(FILLER))
    # messages first, model last (the order the openai SDK writes), a stream
    # without stream_options: the filter rewrites the model and asks for usage.
    body = json.dumps({"messages": [{"role": "user", "content": text}], "stream": True,
                       "temperature": 0.5, "model": "openai/gpt-4o-mini"}).encode()
    req = urllib.request.Request(f"{stack.base_url}/chat/completions", data=body, method="POST",
                                 headers={"content-type": "application/json", **auth})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
        events = resp.read().decode()
    assert events.rstrip().endswith("data: [DONE]")
    # The client did not ask for usage: the usage-only chunk is not passed on.
    chunks = [json.loads(line[6:]) for line in events.splitlines()
              if line.startswith("data: {")]
    assert chunks and all(c.get("usage") is None for c in chunks)
    sent = next(r for r in reversed(mock_recent(stack)) if r["path"] == "/v1/chat/completions")
    assert sent["body"]["model"] == "gpt-4o-mini"
    assert sent["body"]["stream_options"] == {"include_usage": True}
    assert sent["body"]["messages"][0]["content"] == text
    assert sent["body"]["temperature"] == 0.5


def test_large_body_through_the_official_client(stack, demo_key):
    client = openai.OpenAI(base_url=stack.base_url, api_key=demo_key, max_retries=0, timeout=30)
    text = FILLER * (300_000 // len(FILLER))
    resp = client.chat.completions.create(model="openai/gpt-4o-mini",
                                          messages=[{"role": "system", "content": "be brief"},
                                                    {"role": "user", "content": text}])
    assert resp.choices[0].message.content
    assert resp.usage.prompt_tokens > 0
    sent = next(r for r in reversed(mock_recent(stack)) if r["path"] == "/v1/chat/completions")
    assert sent["body"]["model"] == "gpt-4o-mini"
    assert sent["body"]["messages"][1]["content"] == text


def test_large_body_translated_to_anthropic_keeps_every_character(stack, auth):
    # The translated body is written by the filter's own JSON writer: every
    # escape (quotes, backslashes, each control character) and non-ASCII
    # text must reach the provider as the client sent it.
    text = (FILLER + "tab\there \\ back\\slash \x01\x1f\x7f é 🦀 \u2028\r\n") * (400_000 // len(FILLER))
    body = json.dumps({"model": "anthropic/claude-sonnet-4-5", "max_tokens": 16,
                       "messages": [{"role": "system", "content": "be brief"},
                                    {"role": "user", "content": text}]}).encode()
    req = urllib.request.Request(f"{stack.base_url}/chat/completions", data=body, method="POST",
                                 headers={"content-type": "application/json", **auth})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
        assert json.load(resp)["choices"][0]["message"]["content"]
    sent = next(r for r in reversed(mock_recent(stack)) if r["path"] == "/v1/messages")
    assert sent["body"]["model"] == "claude-sonnet-4-5"
    assert sent["body"]["system"] == "be brief"
    assert sent["body"]["messages"] == [{"role": "user", "content": [{"type": "text", "text": text}]}]


def holds(value, text: str) -> bool:
    """Does this JSON value hold `text` as one of its strings?"""
    if isinstance(value, dict):
        return any(holds(v, text) for v in value.values())
    if isinstance(value, list):
        return any(holds(v, text) for v in value)
    return value == text


@pytest.mark.parametrize("model,path", [
    ("anthropic/claude-sonnet-4-5", "/v1/messages"),
    ("gemini/gemini-2.0-flash", ":generateContent"),
    ("bedrock/anthropic.claude-3-haiku-20240307-v1:0", "/converse"),
])
@pytest.mark.parametrize("lifted", [True, False])
def test_large_translated_body_written_in_slices_reaches_each_provider_whole(stack, auth, model, path,
                                                                             lifted):
    # A translated body of about 1.2 MB is written to Envoy in 16 KiB
    # slices (filters/README.md, "512 KB translated with its long texts
    # lifted out"): each provider gets it whole and in order, Bedrock's
    # signature included (the mock checks it over the body it received).
    # A NUL in a string keeps the texts from being lifted.
    tail = "end" if lifted else "end \x00"
    texts = [(FILLER + f"part {i} \"é\" 🦀\t") * (3_000 + 1_000 * i) + tail for i in range(3)]
    body = json.dumps({"model": model, "max_tokens": 16,
                       "messages": [{"role": "user", "content": texts[0]},
                                    {"role": "assistant", "content": texts[1]},
                                    {"role": "user", "content": texts[2]}]}).encode()
    seq = last_seq(stack)
    req = urllib.request.Request(f"{stack.base_url}/chat/completions", data=body, method="POST",
                                 headers={"content-type": "application/json", **auth})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
        assert json.load(resp)["choices"][0]["message"]["content"]
    sent = [r for r in mock_recent(stack) if r["seq"] > seq]
    assert len(sent) == 1 and sent[0]["path"].endswith(path)
    assert sent[0]["status"] == 200
    assert all(holds(sent[0]["body"], t) for t in texts)


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "anthropic/claude-sonnet-4-5"])
def test_large_messages_request_reaches_anthropic_edited_only_at_the_model(stack, demo_key, model):
    # Claude Code's turn through the official client: the body goes on as
    # it came, but for a model named another way.
    client = anthropic.Anthropic(base_url=stack.base_url.removesuffix("/v1"), api_key=demo_key,
                                 max_retries=0, timeout=30)
    text = FILLER * (400_000 // len(FILLER))
    msg = client.messages.create(model=model, max_tokens=16, system="be brief",
                                 messages=[{"role": "user", "content": text}])
    assert msg.content and msg.usage.input_tokens > 0
    sent = next(r for r in reversed(mock_recent(stack)) if r["path"] == "/v1/messages")
    assert sent["body"]["model"] == "claude-sonnet-4-5"
    assert sent["body"]["messages"] == [{"role": "user", "content": text}]
    assert sent["body"]["system"] == "be brief"


def test_large_responses_turn_translated_to_anthropic_keeps_its_texts(stack, demo_key):
    # A Codex turn through the official client's responses.create: long
    # instructions, a long prompt and a long tool output, each copied into
    # the Anthropic request.
    client = openai.OpenAI(base_url=stack.base_url, api_key=demo_key, max_retries=0, timeout=30)
    instructions = "You are a coding agent. é 🦀\n" * 2_000
    text = FILLER * (200_000 // len(FILLER))
    output = ("total 42\n-rw-r--r-- 1 me me 1337 \"main.rs\"\t\u2028\n" * 3_000)
    resp = client.responses.create(
        model="anthropic/claude-sonnet-4-5", instructions=instructions, store=False,
        input=[{"role": "user", "content": [{"type": "input_text", "text": text}]},
               {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": '{"cmd":"ls"}'},
               {"type": "function_call_output", "call_id": "c1", "output": output}])
    assert resp.status == "completed" and resp.output_text
    sent = next(r for r in reversed(mock_recent(stack)) if r["path"] == "/v1/messages")["body"]
    assert sent["system"] == instructions
    blocks = [b for m in sent["messages"] for b in m["content"]]
    assert {"type": "text", "text": text} in blocks
    assert any(b["type"] == "tool_result" and b["content"] == output for b in blocks)
    assert any(b["type"] == "tool_use" and b["input"] == {"cmd": "ls"} for b in blocks)


@pytest.mark.parametrize("body", [
    b'{"model":"openai/gpt-4o-mini","messages":[{"role":"user","content":"a\x01b"}]}',
    b'{"model":"openai/gpt-4o-mini","messages":[{"role":"user","content":"a\\qb"}]}',
    b'{"model":"openai/gpt-4o-mini","messages":[{"role":"user","content":"hi"}],}',
    b'{"model":"openai/gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}{}',
    b'{"messages":[{"role":"user","content":"hi"}],"model":"openai/gpt-4o-mini","n":01}',
    b'{"model":"openai/gpt-4o","model":"openai/gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}',
], ids=["control-char", "bad-escape", "trailing-comma", "trailing-garbage", "leading-zero", "key-twice"])
def test_malformed_passthrough_body_is_an_openai_400(stack, auth, body):
    before = last_seq(stack)
    status, _, err = post(f"{stack.base_url}/chat/completions", body, auth)
    assert status == 400
    assert_openai_error(err, "invalid_json")
    assert err["error"]["type"] == "invalid_request_error"
    assert last_seq(stack) == before, "the provider got nothing"


def test_message_without_a_role_names_it(stack, auth):
    body = b'{"messages":[{"role":"user","content":"hi"},{"content":"x"}],"model":"openai/gpt-4o-mini"}'
    status, _, err = post(f"{stack.base_url}/chat/completions", body, auth)
    assert status == 400
    assert_openai_error(err)
    assert err["error"]["param"] == "messages[1].role"
