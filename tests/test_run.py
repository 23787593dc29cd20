"""`make run` and `make up` / `make down`, as a user runs them.

The stack is started through scripts/stack.py, the command both make targets
run, on free ports given through the environment (the same override a user
has: TG_GATEWAY_PORT=8081 make run).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from helpers import HI, post
from stack import DEMO_KEY, ROOT, free_ports, port_in_use, with_envoy_tunable

STACK = [sys.executable, str(ROOT / "scripts" / "stack.py")]


def env_with(ports: dict[str, int]) -> dict[str, str]:
    return {**os.environ, **{k: str(v) for k, v in ports.items()}}


def chat_ok(ports: dict[str, int]) -> bool:
    status, _, body = post(f"http://127.0.0.1:{ports['TG_GATEWAY_PORT']}/v1/chat/completions",
                           {"model": "openai/gpt-4o-mini", "messages": HI},
                           {"authorization": f"Bearer {DEMO_KEY}"})
    return status == 200 and body["object"] == "chat.completion"


def wait_for_line(proc: subprocess.Popen, needle: str, timeout: float = 90) -> str:
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return "".join(seen)
    raise AssertionError(f"{needle!r} not printed; output:\n{''.join(seen)}")


def test_foreground_run_serves_and_ctrl_c_frees_every_port(tmp_path):
    ports = free_ports()
    for attempt in range(2):  # running it twice in a row works
        proc = subprocess.Popen([*STACK, "run", "--concurrency", "1", "--run-dir", str(tmp_path)],
                                env=env_with(ports), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, stdin=subprocess.DEVNULL)
        try:
            out = wait_for_line(proc, "Ctrl-C stops it.")
            assert f"http://127.0.0.1:{ports['TG_GATEWAY_PORT']}/v1" in out
            assert DEMO_KEY in out
            assert chat_ok(ports)
            proc.send_signal(signal.SIGINT)
            assert proc.wait(30) == 0, proc.stdout.read()
        finally:
            if proc.poll() is None:
                proc.kill()
        busy = [name for name, port in ports.items() if port_in_use(port)]
        assert not busy, f"attempt {attempt}: still listening after Ctrl-C: {busy}"


def test_detached_up_then_down(tmp_path):
    ports = free_ports()
    run = lambda *args: subprocess.run([*STACK, *args, "--run-dir", str(tmp_path)], env=env_with(ports),
                                       capture_output=True, text=True, timeout=120)
    try:
        up = run("up", "--concurrency", "1")
        assert up.returncode == 0, up.stdout + up.stderr
        assert chat_ok(ports)
        status = run("status")
        assert status.stdout.count("running") == 4, status.stdout
    finally:
        down = run("down")
    assert down.returncode == 0, down.stdout + down.stderr
    busy = [name for name, port in ports.items() if port_in_use(port)]
    assert not busy, f"still listening after down: {busy}"


def test_envoy_gets_rseq_off_beside_the_callers_glibc_tunables():
    assert with_envoy_tunable(None) == "glibc.pthread.rseq=0"
    assert with_envoy_tunable("glibc.malloc.arena_max=2") == "glibc.malloc.arena_max=2:glibc.pthread.rseq=0"
    # A caller's own choice stands.
    assert with_envoy_tunable("glibc.pthread.rseq=1") == "glibc.pthread.rseq=1"
