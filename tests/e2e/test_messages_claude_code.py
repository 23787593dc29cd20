"""Claude Code (the npm package, installed by scripts/bootstrap.sh into
.tools/agents) completes a prompt through the gateway against the default
config: `claude -p` with ANTHROPIC_BASE_URL at the gateway, the demo virtual
key as its API key, telemetry and non-essential traffic off, no `--model`,
so it picks its own default models (a main one and a small one for
background work), by bare name.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def claude_binary() -> Path:
    agents = Path(os.environ.get("TG_AGENTS_DIR", ROOT / ".tools" / "agents"))
    binary = agents / "node_modules" / ".bin" / "claude"
    if not binary.exists():
        if shutil.which("npm") is None:
            pytest.skip("npm is not installed, so scripts/bootstrap.sh cannot install Claude Code")
        subprocess.run(["bash", str(ROOT / "scripts" / "bootstrap.sh")], check=True, timeout=900,
                       stdout=subprocess.DEVNULL)
    if not binary.exists():
        pytest.skip(f"Claude Code did not install into {agents} (no registry access?)")
    return binary


def mock_recent(stack) -> list[dict]:
    with urllib.request.urlopen(f"{stack.mock_url}/_mock/stats", timeout=5) as resp:
        return json.load(resp)["recent"]


def test_claude_code_prompt_with_default_models(stack, demo_key, tmp_path):
    binary = claude_binary()
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": stack.base_url.removesuffix("/v1"),
        "ANTHROPIC_API_KEY": demo_key,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    before = len(mock_recent(stack))
    run = subprocess.run([str(binary), "-p", "Say hello to the gateway"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, (run.stdout, run.stderr)
    assert "mock response to" in run.stdout, (run.stdout, run.stderr)
    seen = [r for r in mock_recent(stack)[-50:] if r.get("path", "").startswith("/v1/messages")]
    models = {r["body"].get("model") for r in seen if isinstance(r.get("body"), dict)}
    assert "claude-opus-5-5" in models, (models, before)
