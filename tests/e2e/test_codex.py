"""OpenAI's Codex CLI (it speaks only the Responses API) completes a prompt
through the gateway: `codex exec` with a custom model provider whose
base_url is the gateway and whose key is a virtual key, against mock-llm,
offline: passed through to OpenAI, and translated (Codex's whole tool list
included) to Anthropic, Gemini, Bedrock and a chat-only OpenAI-compatible
server.

The CLI is installed by `scripts/bootstrap.sh --agents` into .tools/agents
(npm, pinned); the test runs that step itself and skips, saying why, only
when npm is missing or the install fails.
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
AGENTS = Path(os.environ.get("TG_AGENTS_PREFIX", ROOT / ".tools" / "agents"))
CODEX = AGENTS / "node_modules" / ".bin" / "codex"
PROMPT = "say hello in five words"


@pytest.fixture(scope="module")
def codex() -> Path:
    if not CODEX.exists():
        if shutil.which("npm") is None:
            pytest.skip("npm is not installed: the Codex CLI (an npm package) cannot be installed")
        r = subprocess.run([str(ROOT / "scripts" / "bootstrap.sh"), "--agents"], capture_output=True,
                           text=True, timeout=600)
        if r.returncode != 0 or not CODEX.exists():
            tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
            pytest.skip(f"the Codex CLI could not be installed with npm: {' / '.join(tail)}")
    return CODEX


def mock_requests(stack) -> list[dict]:
    with urllib.request.urlopen(f"{stack.mock_url}/_mock/stats", timeout=5) as resp:
        return json.load(resp)["recent"]


def run_codex(codex: Path, stack, demo_key: str, model: str, home: Path) -> subprocess.CompletedProcess:
    (home / ".codex").mkdir(parents=True)
    (home / ".codex" / "config.toml").write_text(f"""\
model = "{model}"
model_provider = "tollgate"

[model_providers.tollgate]
name = "Tollgate"
base_url = "{stack.base_url}"
env_key = "TG_KEY"
wire_api = "responses"
""")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "CODEX_HOME": str(home / ".codex"),
           "TG_KEY": demo_key}
    work = home / "work"
    work.mkdir()
    return subprocess.run([str(codex), "exec", "--skip-git-repo-check", PROMPT],
                          cwd=work, env=env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)


# Model → where its request lands at the provider (a path prefix).
ROUTES = [
    ("openai/gpt-4o-mini", "/v1/responses"),
    ("anthropic/claude-haiku-4-5", "/v1/messages"),
    ("gemini/gemini-2.0-flash", "/v1beta/models/gemini-2.0-flash:streamGenerateContent"),
    ("bedrock/anthropic.claude-3-haiku-20240307-v1:0", "/model/anthropic.claude-3-haiku-20240307-v1"),
    ("mistral/mistral-small-latest", "/mistral/v1/chat/completions"),
]


@pytest.mark.parametrize("model,path", ROUTES)
def test_codex_exec_completes_a_prompt_through_the_gateway(codex, stack, demo_key, tmp_path, model, path):
    r = run_codex(codex, stack, demo_key, model, tmp_path / "home")
    assert r.returncode == 0, f"stdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
    mine = [q for q in mock_requests(stack) if q["path"].startswith(path) and PROMPT in json.dumps(q["body"])]
    assert mine, "Codex's request never reached the provider"
    # Codex prints the model's final message: the mock's answer.
    assert "mock response to:" in r.stdout.lower(), r.stdout[-3000:]
