"""No configured secret leaves the gateway: not in Envoy's admin dumps, the
stack's logs, the files of its run directory, any response or any metric.

The secrets are every provider key of config/provider-keys.env (the Bedrock
secret among them) and the demo virtual key, which clients send but nothing
may echo or record.
"""
from __future__ import annotations

import json
import stat
import urllib.request

from helpers import HI, post
from stack import DEMO_KEY, http_get, provider_key_env


def secrets() -> dict[str, str]:
    found = dict(provider_key_env())
    assert len(found) >= 8, f"config/provider-keys.env lists too few keys: {sorted(found)}"
    found["virtual key"] = DEMO_KEY
    return found


def leaks(where: str, text: str) -> list[str]:
    return [f"{name} in {where}" for name, value in secrets().items() if value in text]


def stream(url: str, body: dict, headers: dict) -> tuple[int, str, str]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json", **headers})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status, str(resp.headers), resp.read().decode(errors="replace")


def exercise(s) -> list[str]:
    """Chat, stream, Bedrock (signed), an error, a bad virtual key; the
    leaks found in what the client got back."""
    auth = {"authorization": f"Bearer {DEMO_KEY}"}
    url = f"{s.base_url}/chat/completions"
    found = []
    for body, headers in [
        ({"model": "openai/gpt-4o-mini", "messages": HI}, auth),
        ({"model": "smart", "messages": HI}, auth),
        ({"model": "bedrock/anthropic.claude-3-haiku-20240307-v1:0", "messages": HI}, auth),
        ({"model": "azure/gpt-4o-mini", "messages": HI}, auth),
        ({"model": "gemini/gemini-2.0-flash", "messages": HI}, auth),
        ({"model": "mistral/mistral-small-latest", "messages": HI}, auth),
        ({"model": "openai/no-such-model", "messages": HI}, auth),
        ({"model": "openai/gpt-4o-mini", "messages": "not a list"}, auth),
        ({"model": "openai/gpt-4o-mini", "messages": HI}, {"authorization": "Bearer tg-not-a-key"}),
        ({"model": "openai/gpt-4o-mini", "messages": HI}, {"x-mock-error": "500", **auth}),
    ]:
        status, hdrs, got = post(url, body, headers)
        assert status < 600, status
        found += leaks(f"response {status} to {body['model']}", f"{hdrs}\n{got}")
    status, hdrs, text = stream(url, {"model": "smart", "stream": True, "messages": HI}, auth)
    assert status == 200 and "[DONE]" in text, text[-300:]
    found += leaks("stream response", hdrs + text)
    return found


def test_no_secret_in_dumps_logs_files_responses_or_metrics(stack):
    found = exercise(stack)
    for path in ("/config_dump", "/config_dump?include_eds", "/stats/prometheus", "/stats", "/clusters",
                 "/server_info"):
        status, body = http_get(stack.admin_url + path, timeout=5)
        assert status == 200, path
        found += leaks(f"admin {path}", body.decode(errors="replace"))
    status, body = http_get(f"{stack.authz_http_url}/metrics", timeout=5)
    assert status == 200
    found += leaks("authz /metrics", body.decode(errors="replace"))
    files = [p for p in stack.run_dir.rglob("*") if p.is_file()]
    assert any(p.name == "envoy.log" for p in files) and any(p.name == "envoy.yaml" for p in files), files
    for path in files:
        found += leaks(str(path.relative_to(stack.run_dir)), path.read_text(errors="replace"))
    assert not found, found
    # The gateway's usage token lives in its own 0600 file and nowhere else.
    token = stack.usage_token_path.read_text()
    assert len(token) >= 32 and stat.S_IMODE(stack.usage_token_path.stat().st_mode) == 0o600
    for path in ("/config_dump", "/config_dump?include_eds", "/stats/prometheus"):
        assert token not in http_get(stack.admin_url + path, timeout=5)[1].decode(errors="replace"), path
    assert token not in http_get(f"{stack.authz_http_url}/metrics", timeout=5)[1].decode(errors="replace")
    for path in files:
        if path != stack.usage_token_path:
            assert token not in path.read_text(errors="replace"), path


def test_run_directory_is_private(stack):
    """Logs and rendered configs are readable by their owner only."""
    assert stat.S_IMODE(stack.run_dir.stat().st_mode) == 0o700
    for name in ("envoy.yaml", "envoy.log", "authz.log"):
        mode = stat.S_IMODE((stack.run_dir / name).stat().st_mode)
        assert mode == 0o600, f"{name}: {oct(mode)}"


def test_the_check_catches_an_inline_key(make_stack, tmp_path):
    """The same check finds a key the config holds inline: the test can fail."""
    from plugin_config import envoy_variant

    def inline(cfg):
        cfg["providers"]["mistral"]["keys"] = [{"id": "mistral-1", "value": secrets()["TG_KEY_MISTRAL_1"]}]
    s = make_stack(envoy_config=envoy_variant(tmp_path / "inline.yaml", plugin=inline))
    status, body = http_get(s.admin_url + "/config_dump", timeout=5)
    assert status == 200
    assert leaks("admin /config_dump", body.decode(errors="replace")) == ["TG_KEY_MISTRAL_1 in admin /config_dump"]
