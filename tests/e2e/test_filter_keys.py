"""Provider keys end to end: the weighted split over 1,000 conversations,
each conversation on one key on every gateway (prompt caches are per key),
the cooldown of a key that got 429 or 401 (shared across Envoy workers), and
the usage report that debits the virtual key's token budget.
"""
from __future__ import annotations

import json
import time
import urllib.request

import openai

from helpers import HI, post
from plugin_config import envoy_variant, wasm_config


def mock_stats(s) -> dict:
    with urllib.request.urlopen(f"{s.mock_url}/_mock/stats", timeout=5) as resp:
        return json.load(resp)


def plugin_variant(tmp_path, edit, envoy=None) -> "Path":
    """envoy.yaml with the tollgate plugin config passed through edit(dict)."""
    return envoy_variant(tmp_path / "envoy-filter-variant.yaml", plugin=edit, envoy=envoy)


def test_weighted_split_over_1000_conversations(stack, demo_key):
    client = openai.OpenAI(base_url=stack.base_url, api_key=demo_key, max_retries=0, timeout=20)
    before = mock_stats(stack)["by_key"]
    for i in range(1000):
        client.chat.completions.create(model="openai/gpt-4o-mini", max_tokens=1,
                                       messages=[{"role": "user", "content": f"question {i}"}])
    after = mock_stats(stack)["by_key"]
    one = after.get("openai-1", 0) - before.get("openai-1", 0)
    two = after.get("openai-2", 0) - before.get("openai-2", 0)
    assert one + two == 1000
    # Weights 3:1 → 750 expected; wide bounds (p of a false failure < 1e-9).
    assert 650 <= one <= 850, (one, two)


def conversation(first: str, turns: int) -> list[dict]:
    msgs = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": first}]
    for t in range(turns):
        msgs += [{"role": "assistant", "content": f"answer {t}"}, {"role": "user", "content": f"next {t}"}]
    return msgs


def test_a_conversation_stays_on_one_key_on_both_gateways(stack, make_stack, demo_key):
    """60 conversations of 3 turns, each identified by a session header, a
    prompt_cache_key or nothing but its prompt: every turn of a
    conversation reaches the same provider key, and a second gateway (its
    own Envoy, authz-service and mock) picks the same key."""
    other = make_stack()
    clients = {id(s): openai.OpenAI(base_url=s.base_url, api_key=demo_key, max_retries=0, timeout=20)
               for s in (stack, other)}

    def key_of(s, messages, **extra) -> tuple[str, dict]:
        clients[id(s)].chat.completions.create(model="openai/gpt-4o-mini", max_tokens=1, messages=messages, **extra)
        last = mock_stats(s)["recent"][-1]
        return last["key_id"], last["body"]

    split, hints = [], set()
    for i in range(60):
        how = ("header", "prompt_cache_key", "prompt")[i % 3]
        extra = {"prompt_cache_key": f"codex-{i}"} if how == "prompt_cache_key" else {}
        if how == "header":
            extra = {"extra_headers": {"x-claude-code-session-id": f"cc-{i}"}}
        keys = set()
        for turn in range(3):
            # The session header names the session whatever the prompt.
            first = f"task {i}" if how != "header" else f"task {i} turn {turn}"
            k, body = key_of(stack, conversation(first, turn), **extra)
            k2, _ = key_of(other, conversation(first, turn), **extra)
            keys |= {k, k2}
            if how == "prompt_cache_key":
                assert body["prompt_cache_key"] == f"codex-{i}"  # the client's own, kept
            else:
                assert body["prompt_cache_key"].startswith("tg-")
                hints.add(body["prompt_cache_key"])
        if len(keys) > 1:
            split.append((i, how, keys))
    assert split == []
    # One hint per conversation, never the client's raw session id.
    assert len(hints) == 40 and not any("cc-" in h for h in hints)


def test_key_cools_down_after_429_and_401(demo_key, tmp_path):
    def edit(cfg):
        cfg["providers"]["openai"]["keys"] = [
            {"id": "openai-429", "value": "mock-openai-key-429", "weight": 1},
            {"id": "openai-401", "value": "mock-openai-key-401", "weight": 1},
            {"id": "openai-1", "value": "mock-openai-key-1", "weight": 1},
        ]
        cfg["key_cooldown_seconds"] = 60
    from stack import Stack, free_ports
    # Two Envoy workers (make_stack uses one): the cooldown must be shared.
    s = Stack(run_dir=tmp_path / "stack", ports=free_ports(), envoy_concurrency=2,
              envoy_config=plugin_variant(tmp_path, edit))
    s.run_dir.mkdir()
    try:
        s.start()
        url = f"{s.base_url}/chat/completions"
        auth = {"authorization": f"Bearer {demo_key}"}
        statuses = [post(url, {"model": "openai/gpt-4o-mini", "messages": HI}, auth)[0] for _ in range(40)]
        by_key = mock_stats(s)["by_key"]
    except BaseException:
        s.dump_logs()
        raise
    finally:
        s.stop()
    # Each failing key is used at most once, then skipped for 60 s; with two
    # Envoy workers the cooldown must be shared (proxy-wasm shared data).
    # The attempt that met it was sent again on another key: no client saw
    # the 429 or the 401.
    assert by_key.get("openai-429", 0) <= 1 and by_key.get("openai-401", 0) <= 1, by_key
    assert statuses == [200] * 40, statuses
    assert by_key.get("openai-1", 0) == 40, by_key


def test_every_key_cooling_is_503(make_stack, demo_key, tmp_path):
    def edit(cfg):
        cfg["providers"]["mistral"]["keys"] = [{"id": "mistral-429", "value": "mock-mistral-key-429"}]
    s = make_stack(envoy_config=plugin_variant(tmp_path, edit))
    url = f"{s.base_url}/chat/completions"
    auth = {"authorization": f"Bearer {demo_key}"}
    body = {"model": "mistral/mistral-small-latest", "messages": HI}
    first, _, err1 = post(url, body, auth)
    second, headers2, err2 = post(url, body, auth)
    assert first == 429 and err1["error"]["code"] == "rate_limit_exceeded"
    assert second == 503 and err2["error"]["code"] == "no_provider_key_available"
    # Retry when the key's cooldown (key_cooldown_seconds: 30) ends.
    assert 1 <= int(headers2["retry-after"]) <= 30, dict(headers2)


def test_usage_is_reported_and_debits_the_token_budget(stack):
    # tg-test-tpm: 100 tokens per minute. Tokens are debited only by the
    # filter's usage reports, so the budget runs out after a few requests.
    url = f"{stack.base_url}/chat/completions"
    auth = {"authorization": "Bearer tg-test-tpm"}
    body = {"model": "openai/gpt-4o-mini", "messages": [{"role": "user", "content": "x " * 60}]}
    statuses = []
    for _ in range(20):
        status, _, _ = post(url, body, auth)
        statuses.append(status)
        if status == 429:
            break
        time.sleep(0.2)  # the report is fire-and-forget
    assert statuses[0] == 200
    assert statuses[-1] == 429, statuses


def test_key_value_from_host_environment(make_stack, demo_key, tmp_path):
    """`value_env` reads a variable Envoy passes to the VM (host_env_keys)."""
    def edit(cfg):
        cfg["providers"]["mistral"]["keys"] = [{"id": "mistral-env", "value_env": "TG_TEST_MISTRAL_KEY"}]
    def pass_env(doc):
        wasm_config(doc)["vm_config"]["environment_variables"]["host_env_keys"].append("TG_TEST_MISTRAL_KEY")
    cfg = plugin_variant(tmp_path, edit, envoy=pass_env)
    s = make_stack(envoy_config=cfg, env={"TG_TEST_MISTRAL_KEY": "mock-mistral-key-1"})
    status, _, body = post(f"{s.base_url}/chat/completions", {"model": "mistral/mistral-small-latest", "messages": HI},
                           {"authorization": f"Bearer {demo_key}"})
    assert status == 200, body
    assert mock_stats(s)["by_key"].get("mistral-1") == 1
    # The value is never logged.
    assert "mock-mistral-key-1" not in s.tail("envoy", 500)
