"""Claude Code (the npm package, installed by scripts/bootstrap.sh into
.tools/agents, TG_AGENTS_PREFIX moves it) completes a prompt through the
gateway against the default config: `claude -p` with ANTHROPIC_BASE_URL at the gateway, the demo virtual
key as its API key, telemetry and non-essential traffic off, no `--model`,
so it picks its own default model by bare name (2.1.197: claude-opus-4-8,
64,000 max_tokens, with its betas and a mid-conversation system message);
its small model for background work (claude-haiku-4-5) is checked through
its `haiku` alias.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from plugin_config import envoy_variant

ROOT = Path(__file__).resolve().parents[2]


def claude_binary() -> Path:
    agents = Path(os.environ.get("TG_AGENTS_PREFIX", ROOT / ".tools" / "agents"))
    binary = agents / "node_modules" / ".bin" / "claude"
    if not binary.exists():
        if shutil.which("npm") is None:
            pytest.skip("npm is not installed, so scripts/bootstrap.sh cannot install Claude Code")
        subprocess.run(["bash", str(ROOT / "scripts" / "bootstrap.sh"), "--agents"], check=True, timeout=900,
                       stdout=subprocess.DEVNULL)
    if not binary.exists():
        pytest.skip(f"Claude Code did not install into {agents} (no registry access?)")
    return binary


def mock_recent(stack) -> list[dict]:
    with urllib.request.urlopen(f"{stack.mock_url}/_mock/stats", timeout=5) as resp:
        return json.load(resp)["recent"]


def claude_env(stack, demo_key, home: Path) -> dict:
    home.mkdir()
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": stack.base_url.removesuffix("/v1"),
        "ANTHROPIC_API_KEY": demo_key,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


def test_claude_code_prompt_with_default_models(stack, demo_key, tmp_path):
    binary = claude_binary()
    env = claude_env(stack, demo_key, tmp_path / "home")
    before = len(mock_recent(stack))
    run = subprocess.run([str(binary), "-p", "Say hello to the gateway"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, (run.stdout, run.stderr)
    assert "mock response to" in run.stdout, (run.stdout, run.stderr)
    seen = [r for r in mock_recent(stack)[-50:] if r.get("path", "").startswith("/v1/messages")]
    models = {r["body"].get("model") for r in seen if isinstance(r.get("body"), dict)}
    # Claude Code's default main model, by bare name (-p makes no
    # background calls).
    assert "claude-opus-4-8" in models, (models, before)
    # Its small model (background work: titles, summaries) is served too:
    # `haiku` is Claude Code's own alias for it.
    run = subprocess.run([str(binary), "-p", "Say hello again", "--model", "haiku"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, (run.stdout, run.stderr)
    assert "mock response to" in run.stdout, (run.stdout, run.stderr)
    small = mock_recent(stack)[-1]["body"]["model"]
    assert small.startswith("claude-haiku-4-5"), small


def test_claude_code_through_a_translated_provider(make_stack, demo_key, tmp_path):
    """An alias sends Claude Code's default model to OpenAI: its request
    (system blocks with cache_control, tools, thinking, a mid-conversation
    system message, output_config) is translated and its answer read back."""
    binary = claude_binary()

    def edit(cfg: dict) -> None:
        cfg["aliases"]["claude-opus-4-8"] = "openai/gpt-4o-mini"

    s = make_stack(envoy_config=envoy_variant(tmp_path / "envoy-cc-openai.yaml", plugin=edit))
    env = claude_env(s, demo_key, tmp_path / "home")
    # Claude Code asks for more output tokens than gpt-4o-mini writes
    # (16,384), with its default configuration: the gateway lowers it.
    run = subprocess.run([str(binary), "-p", "Say hello to the gateway"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, (run.stdout, run.stderr)
    assert "mock response to" in run.stdout, (run.stdout, run.stderr)
    last = mock_recent(s)[-1]
    assert last["path"] == "/v1/chat/completions" and last["body"]["model"] == "gpt-4o-mini", last["path"]
    assert last["body"]["max_tokens"] == 16384, last["body"].get("max_tokens")
