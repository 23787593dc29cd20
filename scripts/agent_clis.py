"""The real coding-agent CLIs (Claude Code, Codex) run against a Tollgate
gateway with their default configuration, each in an isolated HOME.

Shared by the e2e tests (tests/e2e/test_messages_claude_code.py,
tests/e2e/test_codex.py) and scripts/record_agent_traffic.py. The CLIs are
installed, pinned, by `scripts/bootstrap.sh --agents` into .tools/agents
(TG_AGENTS_PREFIX moves it).

Both clients are driven by mock-llm's scripted agent mode: a
`[[mock-tools: Tool {json args} ; …]]` directive in the prompt makes the mock
(through any provider translation) call those tools one by one, then answer
`mock agent result: <last tool result>`.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AGENTS = Path(os.environ.get("TG_AGENTS_PREFIX", ROOT / ".tools" / "agents"))
BIN = {"claude": AGENTS / "node_modules" / ".bin" / "claude",
       "codex": AGENTS / "node_modules" / ".bin" / "codex"}

# Every CLI run is bounded: a hung client fails its test instead of CI.
RUN_TIMEOUT = 120


class Unavailable(Exception):
    """The CLI is not installed and cannot be (no npm, no registry)."""


def binary(name: str) -> Path:
    """Path of the `claude` or `codex` CLI, installing both with
    `scripts/bootstrap.sh --agents` when missing."""
    path = BIN[name]
    if path.exists():
        return path
    if shutil.which("npm") is None:
        raise Unavailable(f"npm is not installed, so scripts/bootstrap.sh cannot install {name}")
    r = subprocess.run(["bash", str(ROOT / "scripts" / "bootstrap.sh"), "--agents"], capture_output=True,
                       text=True, timeout=900)
    if not path.exists():
        tail = " / ".join((r.stderr or r.stdout).strip().splitlines()[-3:])
        raise Unavailable(f"{name} did not install into {AGENTS} (no registry access?): {tail}")
    return path


def directive(*steps: tuple[str, dict]) -> str:
    """mock-llm's scripted agent directive for `steps` of (tool, arguments)."""
    return "[[mock-tools: " + " ; ".join(f"{name} {json.dumps(args)}" for name, args in steps) + "]]"


def claude_env(gateway: str, key: str, home: Path) -> dict[str, str]:
    """Claude Code's environment: the gateway as its Anthropic base URL
    (`gateway` without /v1), a virtual key as its API key, telemetry and
    non-essential traffic off, nothing else from the caller's environment."""
    home.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "SHELL": "/bin/bash",
        "TERM": "dumb",
        "TZ": "UTC",
        "ANTHROPIC_BASE_URL": gateway,
        "ANTHROPIC_API_KEY": key,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


def run_claude(env: dict[str, str], cwd: Path, prompt: str, *args: str,
               timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess:
    """`claude -p PROMPT ARGS…`; its stdout is the final answer."""
    return run([str(binary("claude")), "-p", prompt, *args], env, cwd, timeout)


def codex_env(base_url: str, key: str, home: Path, model: str) -> dict[str, str]:
    """Codex's environment and its default configuration, as the README
    gives it: a custom model provider whose base_url is the gateway
    (`base_url` ends in /v1) and whose key is a virtual key. Nothing else:
    no web_search line, no output-token override, no extra headers."""
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".codex" / "config.toml").write_text(f"""\
model = "{model}"
model_provider = "tollgate"

[model_providers.tollgate]
name = "Tollgate"
base_url = "{base_url}"
env_key = "TG_KEY"
wire_api = "responses"
""")
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "SHELL": "/bin/bash",
            "TERM": "dumb", "TZ": "UTC",
            "CODEX_HOME": str(home / ".codex"), "TG_KEY": key}


def run_codex(env: dict[str, str], cwd: Path, prompt: str, *args: str,
              timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess:
    """`codex exec ARGS… --skip-git-repo-check PROMPT`; its stdout is the
    final answer (the progress log goes to stderr). ARGS may start with a
    subcommand of exec (`resume --last`)."""
    return run([str(binary("codex")), "exec", *args, "--skip-git-repo-check", prompt], env, cwd, timeout)


def run(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    """Run a CLI in its own process group; past `timeout` the whole group
    (the npm launcher and the native binary it starts) is killed and
    TimeoutExpired raised."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise subprocess.TimeoutExpired(cmd, timeout, out, err) from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def output(run: subprocess.CompletedProcess, limit: int = 3000) -> str:
    """A run's exit code, stdout and stderr, for an assertion message."""
    return f"exit {run.returncode}\nstdout:\n{run.stdout[-limit:]}\nstderr:\n{run.stderr[-limit:]}"
