#!/usr/bin/env python3
"""Record what the real coding-agent CLIs send, as test fixtures.

    make build && scripts/bootstrap.sh --agents     # once
    .venv/bin/python scripts/record_agent_traffic.py

Starts the Tollgate stack (Redis, mock-llm, authz-service, Envoy) on free
loopback ports, puts a small recording proxy on 127.0.0.1 between each CLI
and the gateway, and runs real Claude Code and Codex sessions of several
turns with tool calls (read a file, run a command, edit a file), driven by
mock-llm's scripted agent mode (a `[[mock-tools: …]]` directive in the
prompt). Every request a CLI sends is written, in order, to

    tests/fixtures/agent-traffic/claude-code/NN.json
    tests/fixtures/agent-traffic/codex/NN.json

as {session, method, path, headers, body, status}: the path with its
query, the headers without secrets (the API key's value is REDACTED) and
without hop-by-hop ones, the body as sent, and the status the gateway
answered while recording. Ids and machine details are scrubbed so that a
re-run changes nothing but what the CLIs changed: UUIDs and long hex ids
become numbered placeholders (the same id gets the same placeholder within a
CLI's corpus), temp paths become /tmp/agent/…, dates 2000-01-01, Unix
timestamps 0, the kernel release, OS version, Node version, hostname and user
name fixed strings, and the timings Codex reports for a command zero.

Re-running replaces the corpus (a CLI's old files are removed first). The
e2e test tests/e2e/test_agent_corpus.py replays every file through every
provider family. The CLI versions are pinned in scripts/bootstrap.sh: bump
them there, run `scripts/bootstrap.sh --agents`, then this script, and
review the diff.
"""
from __future__ import annotations

import argparse
import datetime as dt
import getpass
import http.client
import http.server
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import agent_clis  # noqa: E402
from agent_clis import directive  # noqa: E402
from stack import DEMO_KEY, Stack, free_ports  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "agent-traffic"

# Not recorded: hop-by-hop headers (RFC 9110 §7.6.1), and what the proxy or
# the replay sets itself.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization",
              "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length"}
# Kept by name, value replaced: the replay puts a virtual key there.
SECRET_HEADERS = {"authorization", "x-api-key", "api-key", "x-goog-api-key"}
REDACTED = "REDACTED"


# -- the recording proxy --------------------------------------------------------
class Recorder(http.server.ThreadingHTTPServer):
    """HTTP/1.1 proxy on 127.0.0.1 to one upstream (the gateway): every
    request is appended to `self.log` as {method, path, headers, body
    bytes, status}, forwarded, and its answer streamed back as it comes."""

    daemon_threads = True

    def __init__(self, upstream_port: int):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream_port = upstream_port
        self.log: list[dict] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Recorder

    def log_message(self, *args) -> None:  # quiet
        pass

    def _body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def _proxy(self) -> None:
        body = self._body()
        entry = {"method": self.command, "path": self.path, "headers": list(self.headers.items()),
                 "body": body, "status": None}
        with self.server.lock:
            self.server.log.append(entry)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["content-length"] = str(len(body))
        conn = http.client.HTTPConnection("127.0.0.1", self.server.upstream_port, timeout=120)
        try:
            conn.request(self.command, self.path, body=body if body or self.command != "GET" else None,
                         headers=headers)
            resp = conn.getresponse()
            entry["status"] = resp.status
            self.send_response_only(resp.status, resp.reason)
            for k, v in resp.getheaders():
                if k.lower() not in HOP_BY_HOP:
                    self.send_header(k, v)
            # The answer may be a stream: relay it as it comes, ending it by
            # closing the connection.
            self.send_header("connection", "close")
            self.end_headers()
            self.close_connection = True
            while chunk := resp.read1(65536):
                self.wfile.write(chunk)
                self.wfile.flush()
        finally:
            conn.close()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _proxy


# -- scrubbing --------------------------------------------------------------------
UUID = re.compile(r"(?<![0-9A-Za-z])[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?![0-9A-Za-z])", re.I)
# Ids the mock made up for tool calls and messages (random on every run):
# toolu_…, call_…, msg_…, fc_…
PREFIXED_ID = re.compile(r"(?<![0-9A-Za-z])(toolu|call|msg|fc|fco|rs|resp)_([0-9A-Za-z]{16,})(?![0-9A-Za-z])")
LONG_HEX = re.compile(r"(?<![0-9A-Za-z])[0-9a-f]{32,}(?![0-9A-Za-z])")
DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
CODEX_TIMINGS = [(re.compile(r"Chunk ID: [0-9a-f]+"), "Chunk ID: 000000"),
                 (re.compile(r"Wall time: [0-9.]+ seconds"), "Wall time: 0.0000 seconds")]
# Codex's user agent names the OS: "codex_exec/0.169.0 (Debian 12.0.0; x86_64) dumb (…)".
CODEX_UA_OS = re.compile(r"^(codex_\w+/[\w.\-]+ )\([^;()]+;")
# Objects whose key order the client does not keep (Codex's client_metadata
# is a Rust HashMap): sorted.
UNORDERED = {"client_metadata"}
TIMESTAMP_KEY = re.compile(r"(_unix_ms|_unix|timestamp|_at_ms)$")


class Scrubber:
    """Replaces ids and machine details in one CLI's recorded requests.
    Ids become numbered placeholders in order of first appearance, so the
    same id keeps the same placeholder across the corpus and a re-run of the
    same session gives the same text."""

    def __init__(self, temp_root: Path):
        self.ids: dict[str, str] = {}
        self.counters: dict[str, int] = {}
        self.replacements: list[tuple[str, str]] = [
            (str(temp_root), "/tmp/agent"),
            # Claude Code names its per-project directories after the path.
            (re.sub(r"[^A-Za-z0-9]", "-", str(temp_root)), "-tmp-agent"),
        ]
        real = Path(os.path.realpath(temp_root))
        if str(real) != str(temp_root):
            self.replacements.append((str(real), "/tmp/agent"))
        # The caller's home (the CLIs get their own), as a directory prefix.
        home = os.path.expanduser("~").rstrip("/")
        if home:
            self.replacements.append((home + "/", "/home/user/"))
        self.replacements.append((f"/home/{getpass.getuser()}/", "/home/user/"))
        self.replacements.append((platform.release(), "0.0.0"))
        self.words = [(re.compile(rf"\b{re.escape(w)}\b"), "host") for w in {socket.gethostname(),
                      socket.getfqdn()} if len(w) >= 3 and w != "localhost"]
        today = dt.date.today()
        self.dates = {str(today + dt.timedelta(days=d)) for d in (-1, 0, 1)}
        self.dates |= {str(dt.datetime.now(dt.timezone.utc).date() + dt.timedelta(days=d)) for d in (-1, 0, 1)}

    def _id(self, value: str, kind: str) -> str:
        """The placeholder of an id: numbered per kind, the same length."""
        key = value.lower()
        if key not in self.ids:
            n = self.counters[kind] = self.counters.get(kind, 0) + 1
            self.ids[key] = (f"00000000-0000-4000-8000-{n:012d}" if kind == "uuid"
                             else f"{n:0{len(value)}d}")
        return self.ids[key]

    def text(self, s: str) -> str:
        for old, new in self.replacements:
            s = s.replace(old, new)
        for pattern, new in self.words:
            s = pattern.sub(new, s)
        s = UUID.sub(lambda m: self._id(m.group(0), "uuid"), s)
        s = PREFIXED_ID.sub(lambda m: f"{m.group(1)}_{self._id(m.group(2), m.group(1))}", s)
        s = LONG_HEX.sub(lambda m: self._id(m.group(0), "hex"), s)
        s = DATE.sub(lambda m: "2000-01-01" if m.group(0) in self.dates else m.group(0), s)
        for pattern, new in CODEX_TIMINGS:
            s = pattern.sub(new, s)
        return s

    def value(self, v, key: str = ""):
        if isinstance(v, dict):
            items = v.items()
            if key in UNORDERED:  # a hash map in the client: its order varies from run to run
                items = sorted(items)
            return {k: self.value(x, k) for k, x in items}
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, (int, float)) and not isinstance(v, bool) and TIMESTAMP_KEY.search(key):
            return 0
        if isinstance(v, str):
            nested = _json_object(v)
            if nested is not None:  # a JSON object inside a string (metadata.user_id, Codex's turn metadata)
                return json.dumps(self.value(nested), separators=(",", ":"), ensure_ascii=False)
            return self.text(v)
        return v

    def headers(self, pairs: list[tuple[str, str]]) -> dict[str, str]:
        out = {}
        for name, value in pairs:
            name = name.lower()
            if name in HOP_BY_HOP:
                continue
            if name in SECRET_HEADERS:
                value = REDACTED
            elif name == "user-agent":
                value = CODEX_UA_OS.sub(r"\1(Linux;", value)
            elif name == "x-stainless-runtime-version":
                value = "v0.0.0"
            out[name] = self.value(value, name)
        return dict(sorted(out.items()))


def _json_object(s: str):
    if not s.startswith("{"):
        return None
    try:
        v = json.loads(s)
    except ValueError:
        return None
    # Only when writing it back gives the same text: nothing else changes.
    if isinstance(v, dict) and json.dumps(v, separators=(",", ":"), ensure_ascii=False) == s:
        return v
    return None


# -- the sessions -------------------------------------------------------------------
NOTES = "release notes\nthe codename is plum\n"


def claude_sessions(work: Path) -> list[tuple[str, list[str], str]]:
    """(session name, extra CLI arguments, prompt) in order; a name seen
    again continues that session (`--continue`)."""
    notes = str(work / "notes.txt")
    return [
        ("default-model", ["--permission-mode", "acceptEdits", "--allowedTools", "Bash"],
         "Read notes.txt, list the directory, then rename the codename to pear. "
         + directive(("Read", {"file_path": notes}),
                     ("Bash", {"command": "ls", "description": "List files"}),
                     ("Edit", {"file_path": notes, "old_string": "plum", "new_string": "pear"}))),
        ("default-model", ["--continue", "--allowedTools", "Bash"],
         "Show me the notes now. " + directive(("Bash", {"command": "cat notes.txt",
                                                         "description": "Show the notes"}))),
        # A model Claude Code does not know: it asks differently (max_tokens 32000…).
        ("openai-model", ["--model", "openai/gpt-4o-mini"],
         "What is in notes.txt? " + directive(("Read", {"file_path": notes}))),
    ]


PATCH = "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: notes.txt\n@@\n-the codename is plum\n" \
        "+the codename is fig\n*** End Patch\nEOF"


def codex_sessions(work: Path) -> list[tuple[str, list[str], str]]:
    # workspace-write: `codex exec` is read-only by default, and the edit
    # step must be allowed to write.
    write = ["-c", 'sandbox_mode="workspace-write"']
    return [
        ("exec", write,
         "Read notes.txt, list the directory, then rename the codename to fig. "
         + directive(("exec_command", {"cmd": "cat notes.txt"}),
                     ("exec_command", {"cmd": "ls"}),
                     ("exec_command", {"cmd": PATCH}))),
        ("exec", ["resume", "--last", *write],
         "Show me the notes now. " + directive(("exec_command", {"cmd": "cat notes.txt"}))),
    ]


def record(cli: str, stack: Stack, temp: Path, timeout: float) -> tuple[list[dict], list[str]]:
    """Run `cli`'s sessions through a recording proxy; returns the recorded
    requests (each tagged with its session) and the CLI's answers."""
    home, work = temp / "home", temp / "work"
    work.mkdir(parents=True)
    (work / "notes.txt").write_text(NOTES)
    proxy = Recorder(stack.ports["TG_GATEWAY_PORT"])
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    answers = []
    try:
        if cli == "claude-code":
            sessions = claude_sessions(work)
            envs = {}
        else:
            sessions = codex_sessions(work)
            env = agent_clis.codex_env(f"{proxy.url}/v1", DEMO_KEY, home, "openai/gpt-4o-mini")
        for name, args, prompt in sessions:
            start = len(proxy.log)
            if cli == "claude-code":
                env = envs.setdefault(name, agent_clis.claude_env(proxy.url, DEMO_KEY, temp / f"home-{name}"))
                run = agent_clis.run_claude(env, work, prompt, *args, timeout=timeout)
            else:
                run = agent_clis.run_codex(env, work, prompt, *args, timeout=timeout)
            if run.returncode != 0 or "mock agent result:" not in run.stdout:
                raise RuntimeError(f"{cli} session {name!r} did not complete:\n{agent_clis.output(run)}")
            answers.append(run.stdout.strip())
            for entry in proxy.log[start:]:
                entry["session"] = name
    finally:
        proxy.shutdown()
        proxy.server_close()
    return proxy.log, answers


def fixture(entry: dict, scrub: Scrubber) -> dict:
    raw = entry["body"]
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = raw.decode("utf-8", "replace")
    return {
        "session": entry["session"],
        "method": entry["method"],
        "path": scrub.text(entry["path"]),
        "headers": scrub.headers(entry["headers"]),
        "body": scrub.value(body),
        "status": entry["status"],
    }


def leaks(text: str, temp: Path) -> list[str]:
    """Machine details still in a scrubbed fixture."""
    found = [s for s in (str(temp), os.path.expanduser("~") + "/", socket.gethostname())
             if len(s) > 3 and s in text and s != "/root/"]
    found += [d for d in {str(dt.date.today())} if d in text]
    return found


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT, help="corpus directory (default: %(default)s)")
    parser.add_argument("--cli", choices=["claude-code", "codex"], action="append",
                        help="record only this CLI (repeatable; default: both)")
    parser.add_argument("--timeout", type=float, default=agent_clis.RUN_TIMEOUT, help="seconds per CLI run")
    args = parser.parse_args()
    clis = args.cli or ["claude-code", "codex"]
    try:
        for name in clis:
            agent_clis.binary("claude" if name == "claude-code" else "codex")
    except agent_clis.Unavailable as err:
        print(f"record: {err}", file=sys.stderr)
        return 1

    with tempfile.TemporaryDirectory(prefix="tollgate-record-") as tmp:
        tmp = Path(tmp)
        stack = Stack(run_dir=tmp / "stack", ports=free_ports(), envoy_concurrency=1)
        try:
            stack.start()
        except RuntimeError as err:
            print(f"record: the stack did not start ({err}); run `make build` first", file=sys.stderr)
            return 1
        try:
            for cli in clis:
                t0 = time.monotonic()
                # A fixed-length temp root per CLI: scrubbed to /tmp/agent.
                temp = tmp / cli
                log, answers = record(cli, stack, temp, args.timeout)
                scrub = Scrubber(temp)
                out = args.out / cli
                if out.exists():
                    shutil.rmtree(out)
                out.mkdir(parents=True)
                problems = []
                for i, entry in enumerate(log, 1):
                    text = json.dumps(fixture(entry, scrub), indent=1, ensure_ascii=False) + "\n"
                    (out / f"{i:02d}.json").write_text(text)
                    problems += [f"{i:02d}.json: {leak}" for leak in leaks(text, temp)]
                    # Every API call must succeed; Claude Code's connectivity
                    # check (HEAD /, no key) is answered 401 and recorded as is.
                    if entry["method"] == "POST" and not (entry["status"] and 200 <= entry["status"] < 300):
                        problems.append(f"{i:02d}.json: the gateway answered {entry['status']}")
                size = sum(p.stat().st_size for p in out.iterdir())
                print(f"record: {cli}: {len(log)} requests, {size // 1024} KiB in {_shown(out)}"
                      f" ({time.monotonic() - t0:.1f}s)")
                for a in answers:
                    print(f"  answer: {a.splitlines()[-1][:100]}")
                if problems:
                    print("record: check these:\n  " + "\n  ".join(problems), file=sys.stderr)
                    return 1
        except (RuntimeError, subprocess.TimeoutExpired) as err:
            print(f"record: {err}", file=sys.stderr)
            stack.dump_logs()
            return 1
        finally:
            stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
