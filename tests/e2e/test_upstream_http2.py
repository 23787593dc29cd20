"""The provider clusters speak HTTP/2 (h2c to mock-llm, as the real providers
speak HTTP/2 over TLS): many requests in flight share one upstream
connection, and a provider's stream reset reaches the client as an
OpenAI-shaped error without harming the other streams of the connection.

Envoy's own cluster stats (admin `/stats`) tell how many connections and
requests went to a cluster, and with which HTTP version.
"""
from __future__ import annotations

import threading
import time
import urllib.request

from helpers import HI, assert_openai_error, post

CONCURRENT = 40


def cluster_stats(stack, cluster: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{stack.admin_url}/stats?filter=^cluster\\.{cluster}\\.", timeout=5) as resp:
        text = resp.read().decode()
    stats = {}
    for line in text.splitlines():
        name, _, value = line.partition(": ")
        if value.isdigit():
            stats[name.removeprefix(f"cluster.{cluster}.")] = int(value)
    return stats


def chat(stack, demo_key, headers: dict | None = None):
    return post(f"{stack.base_url}/chat/completions", {"model": "openai/gpt-4o-mini", "messages": HI},
                {"authorization": f"Bearer {demo_key}", **(headers or {})}, timeout=30)


def test_one_upstream_http2_connection_carries_many_concurrent_requests(stack, demo_key):
    before = cluster_stats(stack, "openai")
    results: list = [None] * CONCURRENT
    # The mock holds each answer for 3 s, so all of them are in flight at once.
    slow = {"x-mock-latency-ms": "3000"}

    def one(i: int):
        results[i] = chat(stack, demo_key, slow)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(CONCURRENT)]
    for t in threads:
        t.start()
    # Wait (bounded) until Envoy has every request in flight upstream, and
    # read how many connections carry them at that moment.
    deadline = time.monotonic() + 20
    peak = {}
    while time.monotonic() < deadline:
        now = cluster_stats(stack, "openai")
        if now.get("upstream_rq_active", 0) >= CONCURRENT:
            peak = now
            break
        time.sleep(0.02)
    for t in threads:
        t.join(30)
    after = cluster_stats(stack, "openai")

    assert [r[0] for r in results] == [200] * CONCURRENT, [r[0] for r in results if r and r[0] != 200]
    assert peak, f"never {CONCURRENT} requests in flight upstream at once: {now}"
    # One Envoy worker in the test stack: one connection carries them all.
    assert peak["upstream_cx_active"] == 1, peak
    assert after["upstream_rq_total"] - before["upstream_rq_total"] == CONCURRENT
    assert after["upstream_cx_total"] - before["upstream_cx_total"] <= 1
    assert after["upstream_cx_http2_total"] >= 1 and after.get("upstream_cx_http1_total", 0) == 0, after


def test_provider_stream_reset_is_an_openai_error_and_spares_other_streams(stack, demo_key):
    before = cluster_stats(stack, "openai")
    slow: list = []
    # A long answer on the same connection while another stream is reset.
    t = threading.Thread(target=lambda: slow.append(chat(stack, demo_key, {"x-mock-latency-ms": "1500"})))
    t.start()
    status, _, body = chat(stack, demo_key, {"x-mock-error": "reset"})
    t.join(30)
    assert status == 502, body
    assert_openai_error(body, "upstream_unavailable")
    assert slow and slow[0][0] == 200, slow
    after = cluster_stats(stack, "openai")
    # The reset request was sent again on the other key (reset again): 2 + 1.
    assert after["upstream_rq_total"] - before["upstream_rq_total"] == 3
    assert after.get("upstream_cx_http1_total", 0) == 0
