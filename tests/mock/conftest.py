"""Start mock-llm on a free loopback port for the tests in this folder.

The binary is taken from $MOCK_LLM_BIN when set, else built with
`cargo build -p mock-llm` (honouring $CARGO_TARGET_DIR). The server is
always stopped at the end of the session.
"""

import json
import os
import pathlib
import socket
import subprocess
import time
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config" / "mock-llm.yaml"


def _binary() -> pathlib.Path:
    env = os.environ.get("MOCK_LLM_BIN")
    if env:
        return pathlib.Path(env)
    subprocess.run(["cargo", "build", "-q", "-p", "mock-llm"], cwd=ROOT, check=True)
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "debug" / "mock-llm"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Mock:
    def __init__(self, base: str):
        self.base = base

    def request(self, method: str, path: str, body=None, headers=None):
        """Plain HTTP call; returns (status, headers, body bytes)."""
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def stats(self) -> dict:
        return json.loads(self.request("GET", "/_mock/stats")[2])

    def reset(self) -> None:
        assert self.request("POST", "/_mock/reset")[0] == 200


@pytest.fixture(scope="session")
def mock_bin() -> pathlib.Path:
    """Path of the mock-llm binary (built once per session)."""
    return _binary()


@pytest.fixture
def free_port() -> int:
    return _free_port()


@pytest.fixture(scope="session")
def mock(mock_bin):
    port = _free_port()
    proc = subprocess.Popen(
        [str(mock_bin), "--listen", f"127.0.0.1:{port}", "--config", str(CONFIG)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    m = Mock(f"http://127.0.0.1:{port}")
    try:
        deadline = time.time() + 20
        while True:
            if proc.poll() is not None:
                raise RuntimeError("mock-llm exited: " + proc.stderr.read().decode())
            try:
                if m.request("GET", "/_mock/health")[0] == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError("mock-llm did not become healthy")
            time.sleep(0.05)
        yield m
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
