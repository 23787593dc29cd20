"""OpenAI's Codex CLI (it speaks only the Responses API), with its default
configuration (a custom model provider whose base_url is the gateway and
whose key is a virtual key: no web_search line, no output-token override,
no extra headers), completes a two-turn task that uses a tool through the
gateway on every provider family: passed through to OpenAI and Azure, and
translated (Codex's whole tool list included: function, namespace and
web_search tools) to Anthropic, Gemini, Bedrock and a chat-only
OpenAI-compatible server (Mistral), against mock-llm, offline.

The task: a file in the test's temp dir holds a random secret; the prompt
carries mock-llm's scripted-agent directive naming Codex's own default shell
tool, `exec_command`, with `cat` of that file. Turn 1: the provider asks
for the call, Codex runs it (in its default read-only sandbox). Turn 2: the
command's output goes back through the gateway's translation in the
provider's own shape, and the provider's answer quotes it. Codex's final
message containing the secret proves all of that.

The CLI is installed by `scripts/bootstrap.sh --agents` into .tools/agents
(npm, pinned); the test runs that step itself and skips, saying why, only
when npm is missing or the install fails.
"""
from __future__ import annotations

import json
import secrets
import urllib.request
from pathlib import Path

import pytest

import agent_clis
from agent_clis import codex_env, directive, output, run_codex


@pytest.fixture(scope="module")
def codex() -> Path:
    try:
        return agent_clis.binary("codex")
    except agent_clis.Unavailable as err:
        pytest.skip(str(err))


def mock_requests(stack) -> list[dict]:
    with urllib.request.urlopen(f"{stack.mock_url}/_mock/stats", timeout=5) as resp:
        return json.load(resp)["recent"]


# Model → where its request lands at the provider (a path prefix).
ROUTES = [
    ("openai/gpt-4o-mini", "/v1/responses"),
    ("azure/gpt-4o-mini", "/openai/v1/responses"),
    ("anthropic/claude-haiku-4-5", "/v1/messages"),
    ("gemini/gemini-2.0-flash", "/v1beta/models/gemini-2.0-flash:streamGenerateContent"),
    ("bedrock/anthropic.claude-3-haiku-20240307-v1:0", "/model/anthropic.claude-3-haiku-20240307-v1"),
    ("mistral/mistral-small-latest", "/mistral/v1/chat/completions"),
]


@pytest.mark.parametrize("model,path", ROUTES)
def test_codex_reads_a_file_and_answers_from_it(codex, stack, demo_key, tmp_path, model, path):
    secret = f"secret-{secrets.token_hex(8)}"
    task = f"task-{secrets.token_hex(4)}"  # finds this run's requests at the mock
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text(f"the password is {secret}\n")
    env = codex_env(stack.base_url, demo_key, tmp_path / "home", model)
    prompt = f"What is the password in notes.txt? ({task}) " + directive(("exec_command", {"cmd": "cat notes.txt"}))
    run = run_codex(env, work, prompt)
    assert run.returncode == 0, output(run)
    # Codex prints the model's final message on stdout (its progress log,
    # which also shows the command's output, goes to stderr): the mock's
    # answer quoting the tool's result.
    assert "mock agent result:" in run.stdout and secret in run.stdout, output(run)

    mine = [q for q in mock_requests(stack) if task in json.dumps(q["body"])]
    assert [q["path"] for q in mine if not q["path"].startswith(path)] == [], "a request went elsewhere"
    assert len(mine) == 2, [q["path"] for q in mine]
    first, second = (json.dumps(q["body"]) for q in mine)
    # Turn 1 declares the tool the mock called; turn 2 carries its result in
    # the provider's own shape.
    assert "exec_command" in first and secret not in first
    assert secret in second, second[-2000:]
    assert all(q["status"] == 200 for q in mine), [q["status"] for q in mine]
