"""`make rotate-keys` applies new provider keys without losing a request.

The stack is started as `make up` starts it (scripts/stack.py up: Envoy with
hot restart, under the stack's controller) on free ports, with a short
drain (2 s) and parent shutdown (6 s) so that the rotation and the old
Envoy's exit happen within the test. fortio (Go's HTTP client) sends 500
requests/s to 127.0.0.1 for 10 s (400/s plain chats on 16 connections,
100/s streamed chats on 8), and four slow streams (one chunk every 100 ms
for ~6 s) are in flight on the old Envoy when `stack.py rotate` runs with a
new TG_KEY_OPENAI_1. Every answer must be a 200 (fortio counts any other
status or a socket error), every client connection must have moved to the
new Envoy, every slow stream must end whole, and the requests after the
rotation must reach mock-llm with the new key only (mock-llm's
/_mock/stats names the key that served). About 16 s.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

import openai

from helpers import HI, post
from stack import DEMO_KEY, ROOT, free_ports, tool

STACK = [sys.executable, str(ROOT / "scripts" / "stack.py")]
OLD_KEY, NEW_KEY = "mock-openai-key-1", "mock-openai-key-1-next"
LOAD_SECONDS = 10


def by_key(ports) -> dict[str, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{ports['TG_MOCK_PORT']}/_mock/stats", timeout=5) as resp:
        return json.load(resp)["by_key"]


def fortio(ports, out, qps: int, connections: int, stream: bool) -> subprocess.Popen:
    body = {"model": "openai/gpt-4o-mini", "messages": HI, "stream": stream}
    return subprocess.Popen(
        # -stdclient: Go's HTTP client, which like most clients opens a new
        # connection after a `connection: close` (the old Envoy's drain);
        # fortio's own fast client keeps using the connection until the old
        # Envoy closes it at its shutdown.
        [tool("fortio"), "load", "-stdclient", "-quiet", "-qps", str(qps), "-c", str(connections), "-t", f"{LOAD_SECONDS}s",
         "-timeout", "10s", "-H", f"Authorization: Bearer {DEMO_KEY}", "-content-type", "application/json",
         "-payload", json.dumps(body), "-json", str(out),
         f"http://127.0.0.1:{ports['TG_GATEWAY_PORT']}/v1/chat/completions"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def slow_stream(ports, results: list) -> None:
    """One streamed chat of ~60 chunks 100 ms apart (~6 s), on its own connection
    (the official client; its iteration ends at `data: [DONE]`)."""
    t0 = time.monotonic()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{ports['TG_GATEWAY_PORT']}/v1", api_key=DEMO_KEY,
                           max_retries=0, timeout=20)
    try:
        chunks = list(client.chat.completions.create(
            model="openai/gpt-4o-mini", messages=HI, stream=True,
            extra_headers={"x-mock-itl-ms": "100", "x-mock-response-bytes": "960"}))
        finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        results.append((finish, len(chunks), t0, time.monotonic()))
    except openai.OpenAIError as err:
        results.append((repr(err), 0, t0, time.monotonic()))
    finally:
        client.close()


def test_rotation_under_load_loses_no_request_and_uses_the_new_key(tmp_path):
    ports = free_ports()
    env = {**os.environ, **{k: str(v) for k, v in ports.items()}, "TG_KEY_OPENAI_1": OLD_KEY}
    run = lambda *args, **kw: subprocess.run([*STACK, *args, "--run-dir", str(tmp_path / "run")],  # noqa: E731
                                             env=kw.get("env", env), capture_output=True, text=True, timeout=120)
    up = run("up", "--concurrency", "1", "--drain-seconds", "2", "--parent-shutdown-seconds", "6")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        state = json.loads((tmp_path / "run" / "pids.json").read_text())
        old_envoy = state["envoy"]
        before = by_key(ports)
        plain = fortio(ports, tmp_path / "plain.json", 400, 16, stream=False)
        streamed = fortio(ports, tmp_path / "stream.json", 100, 8, stream=True)
        time.sleep(1.5)
        slow: list = []
        threads = [threading.Thread(target=slow_stream, args=(ports, slow)) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        t_rotate = time.monotonic()
        rotated = run("rotate", env={**env, "TG_KEY_OPENAI_1": NEW_KEY})
        t_ready = time.monotonic()
        assert rotated.returncode == 0, rotated.stdout + rotated.stderr
        assert "keys applied: Envoy epoch 1" in rotated.stdout, rotated.stdout
        # While the old Envoy still finishes its requests, another rotation
        # is refused (it would stop the old one at once).
        refused = run("rotate", env={**env, "TG_KEY_OPENAI_1": NEW_KEY})
        assert refused.returncode == 1 and "still finishing its requests" in refused.stderr, refused.stderr
        for t in threads:
            t.join(30)
        assert plain.wait(LOAD_SECONDS + 30) == 0, plain.stderr.read()
        assert streamed.wait(LOAD_SECONDS + 30) == 0, streamed.stderr.read()

        # No request failed: fortio saw only 200s, at the rate asked.
        # The old Envoy's drain closed every client connection
        # (`connection: close`) and each was opened again on the new one.
        figures = {}
        for name, connections in (("plain", 16), ("stream", 8)):
            result = json.loads((tmp_path / f"{name}.json").read_text())
            codes = result["RetCodes"]
            figures[name] = (sum(codes.values()), round(result["ActualQPS"]), result["SocketCount"])
            assert set(codes) == {"200"}, (name, codes)
            assert result["SocketCount"] >= 2 * connections, (name, result["SocketCount"])
        total = sum(f[0] for f in figures.values())
        print(f"\nrotation under load: {figures} (requests, rps, connections), total {total}, "
              f"rotate command {t_ready - t_rotate:.1f} s", file=sys.stderr)
        assert total >= 0.9 * 500 * LOAD_SECONDS, figures
        # The slow streams began on the old Envoy, outlived the switch, and
        # ended whole.
        assert len(slow) == 4 and all(s[0] == "stop" and s[1] >= 50 for s in slow), slow
        assert all(s[2] < t_rotate and s[3] > t_ready for s in slow), (slow, t_rotate, t_ready)

        # The new key serves; the old one no longer does.
        mid = by_key(ports)
        for _ in range(20):
            status, _, body = post(f"http://127.0.0.1:{ports['TG_GATEWAY_PORT']}/v1/chat/completions",
                                   {"model": "openai/gpt-4o-mini", "messages": HI},
                                   {"authorization": f"Bearer {DEMO_KEY}"})
            assert status == 200, body
        after = by_key(ports)
        assert before.get("openai-1-next", 0) == 0 and mid.get("openai-1-next", 0) > 0, (before, mid)
        assert after.get("openai-1", 0) == mid.get("openai-1", 0), (mid, after)
        assert after["openai-1-next"] > mid["openai-1-next"], (mid, after)
        assert mid["openai-1"] > before.get("openai-1", 0), (before, mid)  # the old key served before

        # The old Envoy exits by itself (stopped 6 s after the new one was
        # ready); the new one stays.
        deadline = time.monotonic() + 15
        while True:
            state = json.loads((tmp_path / "run" / "pids.json").read_text())
            if not state["envoy_draining"] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert state["envoy"] != old_envoy and state["epoch"] == 1 and state["envoy_draining"] == [], state
        assert not os.path.exists(f"/proc/{old_envoy}")
        os.kill(state["envoy"], 0)
        # A second rotation now works too (nothing left draining).
        again = run("rotate", env={**env, "TG_KEY_OPENAI_1": NEW_KEY})
        assert again.returncode == 0 and "epoch 2" in again.stdout, again.stdout + again.stderr
    finally:
        down = run("down")
        assert down.returncode == 0, down.stdout + down.stderr
