"""Keys made through authz-service's admin API, through the real gateway:
a key made with `tollgate-authz keys create` serves chat completions and
Anthropic's Messages API at once; revoked, it gets 401 `key_revoked` in
OpenAI's shape on OpenAI routes and Anthropic's on /v1/messages; expired,
401 `key_expired`; a rotated key's new secret serves. Neither the admin
token nor any secret is in a log, a run-directory file or a metric.
"""
from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

from helpers import HI, admin, assert_openai_error, post

ROOT = Path(__file__).resolve().parents[2]
CHAT = {"model": "openai/gpt-4o-mini", "messages": HI}
MESSAGES = {"model": "claude-haiku-5-5", "max_tokens": 50, "messages": HI}


def keys(stack, *args: str) -> dict:
    """`tollgate-authz keys …` against the stack's admin API: its JSON answer."""
    out = subprocess.run(
        [str(ROOT / "target" / "release" / "tollgate-authz"), "keys", *args,
         "--admin-url", stack.authz_admin_url, "--admin-token-file", str(stack.admin_token_path)],
        capture_output=True, text=True, timeout=20)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def chat(stack, secret: str):
    return post(f"{stack.base_url}/chat/completions", CHAT, {"authorization": f"Bearer {secret}"})


def messages(stack, secret: str):
    return post(f"{stack.base_url}/messages", MESSAGES,
                {"x-api-key": secret, "anthropic-version": "2023-06-01"})


def test_admin_keys_through_the_gateway(make_stack):
    stack = make_stack()
    token = stack.admin_token_path.read_text()
    made = keys(stack, "create", "--tenant", "demo", "--id", "team-a", "--requests-per-minute", "100")
    secret = made["secret"]
    # This instance applied its own write before answering: usable at once.
    status, _, body = chat(stack, secret)
    assert status == 200, body
    status, _, body = messages(stack, secret)
    assert status == 200, body

    rotated = keys(stack, "rotate", "team-a", "--grace-seconds", "0")
    new = rotated["secret"]
    assert chat(stack, new)[0] == 200
    status, _, body = chat(stack, secret)
    assert status == 401
    assert_openai_error(body, "key_expired")

    keys(stack, "revoke", "team-a")
    status, _, body = chat(stack, new)
    assert status == 401
    assert_openai_error(body, "key_revoked")
    assert "was revoked" in body["error"]["message"]
    status, _, body = messages(stack, new)
    assert status == 401
    assert body["type"] == "error" and body["error"]["type"] == "authentication_error", body
    assert "was revoked" in body["error"]["message"]

    soon = (datetime.now(timezone.utc) + timedelta(seconds=2)).isoformat()
    status, v = admin(stack, "POST", "/admin/keys", {"tenant": "demo", "id": "short", "expires_at": soon})
    assert status == 201, v
    short = v["secret"]
    assert chat(stack, short)[0] == 200
    time.sleep(2.2)
    status, _, body = chat(stack, short)
    assert status == 401
    assert_openai_error(body, "key_expired")
    status, _, body = messages(stack, short)
    assert status == 401 and body["type"] == "error", body

    listed = keys(stack, "list", "--tenant", "demo")
    states = {k["id"]: k["state"] for k in listed["data"]}
    assert states["team-a"] == "revoked" and states["short"] == "expired"
    assert states["demo-key"] == "active"
    # The key's own limit, read from Redis: two requests taken (and refunds
    # never exceed them).
    team = next(k for k in listed["data"] if k["id"] == "team-a")
    rpm = next(u for u in team["usage"]["limits"] if u["limit"] == "requests_per_minute")
    assert rpm["capacity"] == 100 and rpm["remaining"] <= 100

    # No secret and no admin token anywhere the stack writes or shows.
    secrets = {"admin token": token, "secret": secret, "rotated secret": new, "short secret": short}
    texts = {f"log {p.name}": p.read_text(errors="replace") for p in stack.run_dir.glob("*.log")}
    for url in (f"{stack.authz_http_url}/metrics", f"{stack.admin_url}/stats/prometheus"):
        with urllib.request.urlopen(url, timeout=5) as resp:
            texts[url] = resp.read().decode(errors="replace")
    assert any(name.startswith("log ") for name in texts), sorted(texts)
    leaks = [f"{what} in {where}" for where, text in texts.items()
             for what, value in secrets.items() if value in text]
    assert not leaks, leaks
