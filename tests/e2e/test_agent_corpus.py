"""Every request real coding agents sent, replayed through every provider
family: the strict mock (which refuses what each real API refuses) must
accept every upstream request the gateway makes of them.

The corpus, tests/fixtures/agent-traffic/, is recorded by
scripts/record_agent_traffic.py from real Claude Code and Codex sessions of
several turns with tool calls (read a file, run a command, edit a file);
re-run it when the CLIs change. Each file is one request as the CLI sent it
(ids and machine details scrubbed, the API key REDACTED).

- Claude Code's Messages requests go to the Anthropic passthrough (its
  default model by bare name) and, with the model rewritten, to OpenAI,
  Azure, Gemini, Bedrock and Mistral models, reasoning models included.
- Codex's Responses requests go, with the model rewritten, to every family.

Each replay must be answered 2xx by the provider the model names (the
`x-tollgate-provider` header), with no error event in the stream; a failure
names the request, the target and the error's body. Requests that are not
model calls (Claude Code's `HEAD /` connectivity check) must get an answer
that is not a gateway error.
"""
from __future__ import annotations

import http.client
import json
import time
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "agent-traffic"

# Target model → the provider that must serve it.
MESSAGES_TARGETS = [
    ("claude-opus-4-8", "anthropic"),  # Claude Code's default model: passthrough
    ("openai/gpt-4o-mini", "openai"),
    # A reasoning model: effort → reasoning_effort. Claude Code asks for
    # 64,000 (32,000) output tokens; o4-mini writes up to 100,000, so they
    # go as they are.
    ("openai/o4-mini", "openai"),
    ("azure/gpt-4o-mini", "azure"),
    ("gemini/gemini-2.0-flash", "gemini"),
    ("gemini/gemini-2.5-flash", "gemini"),  # thinking model
    ("bedrock/anthropic.claude-3-haiku-20240307-v1:0", "bedrock"),
    ("bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0", "bedrock"),  # reasoning
    ("mistral/mistral-small-latest", "mistral"),
]
RESPONSES_TARGETS = [
    ("openai/gpt-4o-mini", "openai"),
    ("openai/o4-mini", "openai"),
    ("azure/gpt-4o-mini", "azure"),
    ("anthropic/claude-haiku-4-5", "anthropic"),
    ("anthropic/claude-sonnet-4-5", "anthropic"),
    ("gemini/gemini-2.0-flash", "gemini"),
    ("gemini/gemini-2.5-flash", "gemini"),
    ("bedrock/anthropic.claude-3-haiku-20240307-v1:0", "bedrock"),
    ("bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0", "bedrock"),
    ("mistral/mistral-small-latest", "mistral"),
]
# Error events of the three front doors' streams.
STREAM_ERRORS = ("event: error", "event: response.failed", "event: response.incomplete", '"type":"error"')


def corpus(cli: str) -> list[tuple[str, dict]]:
    files = sorted((CORPUS / cli).glob("*.json"))
    assert files, f"no recorded requests in {CORPUS / cli}: run scripts/record_agent_traffic.py"
    return [(f"{cli}/{f.name}", json.loads(f.read_text())) for f in files]


def model_calls(cli: str) -> list[tuple[str, dict]]:
    return [(name, r) for name, r in corpus(cli) if r["method"] == "POST" and isinstance(r["body"], dict)]


def replay(stack, key: str, request: dict, model: str | None = None) -> tuple[int, dict, str]:
    """Sends a recorded request to the gateway as the CLI sent it, with the
    virtual key where the CLI put its key and, if given, another model;
    returns (status, headers, body text)."""
    headers = {}
    for name, value in request["headers"].items():
        if name == "accept-encoding":  # the answer must be readable here
            continue
        if value == "REDACTED":
            value = f"Bearer {key}" if name == "authorization" else key
        headers[name] = value
    body = None
    if request["body"] is not None:
        data = dict(request["body"], model=model) if model else request["body"]
        body = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
        headers["content-length"] = str(len(body))
    conn = http.client.HTTPConnection("127.0.0.1", stack.ports["TG_GATEWAY_PORT"], timeout=30)
    try:
        conn.request(request["method"], request["path"], body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode("utf-8", "replace")
    finally:
        conn.close()


def check_family(stack, key: str, cli: str, model: str, provider: str) -> None:
    failures = []
    t0 = time.monotonic()
    calls = model_calls(cli)
    for name, request in calls:
        status, headers, text = replay(stack, key, request, model)
        served_by = headers.get("x-tollgate-provider")
        if not 200 <= status < 300:
            failures.append(f"{name} → {model}: {status} from {served_by or 'the gateway'}: {text[:2000]}")
        elif served_by != provider:
            failures.append(f"{name} → {model}: served by {served_by!r}, not {provider}")
        elif any(marker in text for marker in STREAM_ERRORS):
            failures.append(f"{name} → {model}: {status} with an error in the stream: {text[-2000:]}")
    elapsed = time.monotonic() - t0
    assert not failures, f"{len(failures)} of {len(calls)} recorded requests failed:\n" + "\n".join(failures)
    assert elapsed < 30, f"{len(calls)} replays took {elapsed:.1f}s"


@pytest.mark.parametrize("model,provider", MESSAGES_TARGETS)
def test_claude_code_corpus_on_every_family(stack, demo_key, model, provider):
    check_family(stack, demo_key, "claude-code", model, provider)


@pytest.mark.parametrize("model,provider", RESPONSES_TARGETS)
def test_codex_corpus_on_every_family(stack, demo_key, model, provider):
    check_family(stack, demo_key, "codex", model, provider)


def test_corpus_holds_multi_turn_tool_sessions():
    """The corpus is what the recorder promises: conversations of several
    turns in which each CLI read a file, ran a command and edited a file,
    every model call answered 2xx while recording."""
    steps = {"claude-code": ['"name": "Read"', '"name": "Bash"', '"name": "Edit"'],
             "codex": ["cat notes.txt", '\\"cmd\\":\\"ls\\"', "apply_patch"]}
    for cli, wanted in steps.items():
        calls = model_calls(cli)
        assert len(calls) >= 4, cli
        assert all(200 <= r["status"] < 300 for _, r in calls), [(n, r["status"]) for n, r in calls]
        longest = max((r["body"].get("messages") or r["body"].get("input") for _, r in calls), key=len)
        text = json.dumps(longest)
        assert [w for w in wanted if w not in text] == [], cli
        users = [m for m in longest if m.get("role") == "user" and "[[mock-tools:" in json.dumps(m)]
        assert len(users) >= 2, f"{cli}: one user turn only"


def test_non_model_requests_get_an_answer(stack, demo_key):
    others = [(n, r) for cli in ("claude-code", "codex") for n, r in corpus(cli) if r["method"] != "POST"]
    for name, request in others:
        status, _, text = replay(stack, demo_key, request)
        assert status < 500, f"{name}: {request['method']} {request['path']} → {status}: {text[:500]}"
