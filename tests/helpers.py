"""Small helpers shared by the test suites."""
from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

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


def authz_metric(stack, name: str) -> float:
    """Sum of every series of `name` (optionally with a {label="…"} selector)
    on the stack's authz-service /metrics."""
    with urllib.request.urlopen(f"{stack.authz_http_url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    values = [float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)]
    return sum(values)
