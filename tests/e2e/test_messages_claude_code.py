"""Claude Code (the npm package, installed by scripts/bootstrap.sh into
.tools/agents, TG_AGENTS_PREFIX moves it), with its default configuration,
completes a two-turn task that uses a tool through the gateway on every
provider family: `claude -p` with ANTHROPIC_BASE_URL at the gateway, the
demo virtual key as its API key, telemetry and non-essential traffic off.

- No `--model`: it picks its own default model by bare name (2.1.197:
  claude-opus-4-8, 64,000 max_tokens, with its betas and a
  mid-conversation system message), passed through to Anthropic; its small
  model for background work (claude-haiku-4-5) through its `haiku` alias.
- `--model provider/model` for every other family (OpenAI, Azure, Gemini,
  Bedrock, Mistral): its request (system blocks with cache_control, its 24
  tools with full JSON Schemas, thinking, output_config, max_tokens 32,000)
  is translated and the answers read back.
- An alias sends its default model to OpenAI: the 64,000 max_tokens it asks
  for is lowered to gpt-4o-mini's 16,384.

The task: a file in the test's temp dir holds a random secret; the prompt
carries mock-llm's scripted-agent directive naming Claude Code's own `Read`
tool with that file. Turn 1: the provider asks for the call and Claude Code
reads the file. Turn 2: the tool result goes back through the gateway's
translation in the provider's own shape, and the provider's answer quotes
it. Claude Code's final output containing the secret proves all of that.
"""
from __future__ import annotations

import json
import secrets
import urllib.request
from pathlib import Path

import pytest

import agent_clis
from agent_clis import claude_env, directive, output, run_claude
from plugin_config import envoy_variant


@pytest.fixture(scope="module")
def claude() -> Path:
    try:
        return agent_clis.binary("claude")
    except agent_clis.Unavailable as err:
        pytest.skip(str(err))


def mock_recent(stack) -> list[dict]:
    with urllib.request.urlopen(f"{stack.mock_url}/_mock/stats", timeout=5) as resp:
        return json.load(resp)["recent"]


def read_task(stack, demo_key, tmp_path: Path, *args: str) -> tuple[str, list[dict]]:
    """Runs the two-turn Read task with `claude -p … ARGS`; returns the
    secret and this run's requests as the provider got them."""
    secret = f"secret-{secrets.token_hex(8)}"
    task = f"task-{secrets.token_hex(4)}"  # finds this run's requests at the mock
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text(f"the password is {secret}\n")
    env = claude_env(stack.base_url.removesuffix("/v1"), demo_key, tmp_path / "home")
    prompt = (f"What is the password in notes.txt? ({task}) "
              + directive(("Read", {"file_path": str(work / "notes.txt")})))
    run = run_claude(env, work, prompt, *args)
    assert run.returncode == 0, output(run)
    # Its output is the final answer: the mock's, quoting the tool result.
    assert "mock agent result:" in run.stdout and secret in run.stdout, output(run)
    mine = [q for q in mock_recent(stack) if task in json.dumps(q["body"])]
    assert len(mine) == 2, [(q["path"], q["status"]) for q in mine]
    first, second = (json.dumps(q["body"]) for q in mine)
    # Turn 1 declares the tool the mock called; turn 2 carries its result in
    # the provider's own shape; the provider accepted both.
    assert '"Read"' in first and secret not in first
    assert secret in second, second[-2000:]
    assert [q["status"] for q in mine] == [200, 200]
    return secret, mine


# --model (None: Claude Code's default) → where its request lands at the
# provider, and the model the provider is asked for.
ROUTES = [
    (None, "/v1/messages", "claude-opus-4-8"),
    ("haiku", "/v1/messages", "claude-haiku-4-5"),
    ("openai/gpt-4o-mini", "/v1/chat/completions", "gpt-4o-mini"),
    ("azure/gpt-4o-mini", "/openai/deployments/gpt-4o-mini/chat/completions", None),
    ("gemini/gemini-2.0-flash", "/v1beta/models/gemini-2.0-flash:streamGenerateContent", None),
    ("bedrock/anthropic.claude-3-haiku-20240307-v1:0",
     "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream", None),
    ("mistral/mistral-small-latest", "/mistral/v1/chat/completions", "mistral-small-latest"),
]


@pytest.mark.parametrize("model,path,upstream_model", ROUTES, ids=[r[0] or "default" for r in ROUTES])
def test_claude_code_reads_a_file_and_answers_from_it(claude, stack, demo_key, tmp_path, model, path,
                                                      upstream_model):
    _, mine = read_task(stack, demo_key, tmp_path, *(["--model", model] if model else []))
    assert all(q["path"].startswith(path) for q in mine), [q["path"] for q in mine]
    if upstream_model:
        # The default model by bare name (-p makes no background calls); its
        # small model through Claude Code's own alias.
        assert all(q["body"]["model"].startswith(upstream_model) for q in mine), [q["body"]["model"] for q in mine]


def test_claude_code_default_model_through_a_translated_provider(claude, make_stack, demo_key, tmp_path):
    """An alias sends Claude Code's default model to OpenAI: its request
    (system blocks with cache_control, tools, thinking, a mid-conversation
    system message, output_config) is translated and its answers read back;
    the output tokens it asks for, more than gpt-4o-mini writes (16,384),
    are lowered with its default configuration."""

    def edit(cfg: dict) -> None:
        cfg["aliases"]["claude-opus-4-8"] = "openai/gpt-4o-mini"

    s = make_stack(envoy_config=envoy_variant(tmp_path / "envoy-cc-openai.yaml", plugin=edit))
    _, mine = read_task(s, demo_key, tmp_path)
    assert [q["path"] for q in mine] == ["/v1/chat/completions"] * 2
    assert [q["body"]["model"] for q in mine] == ["gpt-4o-mini"] * 2
    assert [q["body"]["max_tokens"] for q in mine] == [16384] * 2
