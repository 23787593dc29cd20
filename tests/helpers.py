"""Small helpers shared by the test suites."""
from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

HI = [{"role": "user", "content": "hi"}]


def post(url: str, body: dict | bytes, headers: dict | None = None, timeout: float = 10):
    """Raw POST; returns (status, headers, parsed-or-raw body)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, hdrs, raw = resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as err:
        status, hdrs, raw = err.code, err.headers, err.read()
    try:
        return status, hdrs, json.loads(raw)
    except ValueError:
        return status, hdrs, raw


def assert_openai_error(body, code: str | None = None):
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), body
    err = body["error"]
    assert isinstance(err.get("message"), str) and err["message"], body
    assert isinstance(err.get("type"), str) and err["type"], body
    if code is not None:
        assert err.get("code") == code, body


def admin(stack, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    """A call to the stack's authz-service admin API (its token): (status,
    parsed JSON body)."""
    req = urllib.request.Request(
        f"{stack.authz_admin_url}{path}", method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"authorization": f"Bearer {stack.admin_token_path.read_text()}",
                 "content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def authz_metric(stack, name: str) -> float:
    """Sum of every series of `name` (optionally with a {label="…"} selector)
    on the stack's authz-service /metrics."""
    with urllib.request.urlopen(f"{stack.authz_http_url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    values = [float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)]
    return sum(values)


@contextmanager
def load(clients: int, send):
    """`clients` threads each call send(client, i) → (key, status, body) for
    i = 0, 1, … until the block ends. Yields the list of answers as
    (start, end, key, status, body), complete once the block has exited."""
    results, lock, stop = [], threading.Lock(), threading.Event()

    def run(c: int) -> None:
        i = 0
        while not stop.is_set():
            t0 = time.monotonic()
            key, status, body = send(c, i)
            with lock:
                results.append((t0, time.monotonic(), key, status, body))
            i += 1

    pool = ThreadPoolExecutor(clients)
    futures = [pool.submit(run, c) for c in range(clients)]
    try:
        yield results
    finally:
        stop.set()
        for f in futures:
            f.result()
        pool.shutdown()


def sample_for(seconds: float, samples: list, read, interval: float = 0.1) -> None:
    """Append (time, read()) to `samples` every `interval` for `seconds`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        samples.append((time.monotonic(), read()))
        time.sleep(interval)
