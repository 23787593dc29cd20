"""authz-service's admin API fuzzed against its own OpenAPI document with
schemathesis: schema-driven and random requests, stateful sequences
(create, then get, update, rotate, revoke what was created), bounded to
40 s. Every answer must be no server error, of a documented status and
content type, and match the documented schema. `positive_data_acceptance`
is left out: a schema-valid body can still be refused, and must be, for
what no schema states (a tenant the policy file lacks, a budget window
such as "9").

Needs only the built binary (`--redis-url memory://`); the Redis-backed
paths are tests/admin.rs's.
"""
from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target" / "release" / "tollgate-authz"


def schemathesis() -> str | None:
    local = ROOT / ".venv" / "bin" / "schemathesis"
    return str(local) if local.exists() else shutil.which("schemathesis")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_admin_api_fuzzed_against_its_openapi_document(tmp_path):
    st = schemathesis()
    if st is None:
        if os.environ.get("CI"):
            pytest.fail("schemathesis is not installed: run `make bootstrap` (requirements-dev.txt)")
        pytest.skip("schemathesis is not installed: run `make bootstrap`")
    token = secrets.token_hex(24)
    (tmp_path / "admin-token").write_text(token)
    admin = free_port()
    log = open(tmp_path / "serve.log", "wb")
    proc = subprocess.Popen(
        [str(BIN), "serve", "--policy", str(ROOT / "config" / "policy.yaml"), "--redis-url", "memory://",
         "--grpc-listen", f"127.0.0.1:{free_port()}", "--http-listen", f"127.0.0.1:{free_port()}",
         "--admin-listen", f"127.0.0.1:{admin}", "--admin-token-file", str(tmp_path / "admin-token")],
        stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", admin), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, (tmp_path / "serve.log").read_text()
                time.sleep(0.05)
        out = subprocess.run(
            [st, "run", f"http://127.0.0.1:{admin}/admin/openapi.json",
             "-H", f"Authorization: Bearer {token}", "--checks", "all",
             "--exclude-checks", "positive_data_acceptance", "--max-time", "40", "-w", "1",
             "--seed", "38", "--no-color"],
            capture_output=True, text=True, timeout=240, cwd=tmp_path)
        print(out.stdout[-4000:], file=sys.stderr)
        assert out.returncode == 0, out.stdout[-8000:] + out.stderr[-2000:]
        assert "generated" in out.stdout
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
    # The run's requests carried the token and created keys with secrets:
    # none of it reached the log.
    assert token not in (tmp_path / "serve.log").read_text()
