"""The Bifrost replica's memory accounting (bench/bench.py).

Its peak RSS is set by fortio's warm-up, one request per connection at
once, so memory per in-flight request is divided by the most requests
Envoy had active, read from a real Envoy's gauges while a request waits on
the mock.
"""
from __future__ import annotations

import json
import sys
import threading
import time
import urllib.request

from stack import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import bench  # noqa: E402


def test_memory_is_divided_by_the_requests_in_flight_at_the_peak():
    run = {"actual_qps": 1000.0, "avg_us": 1_500_000.0, "peak_rss_mb": {"envoy": 200.0, "authz": 10.0}}
    idle = {"envoy": 80 * 2**20, "authz": 10 * 2**20}
    # The warm-up had 2,000 active, more than the steady 1,500.
    at_peak = bench.in_flight_memory(run, idle, 2000)
    assert at_peak["in_flight"] == 1500 and at_peak["peak_in_flight"] == 2000
    assert at_peak["kb_per_in_flight"] == {"envoy": 61.4, "authz": 0.0}
    # No sample above the steady state: Little's law stands.
    steady = bench.in_flight_memory(run, idle, 0)
    assert steady["peak_in_flight"] == 1500
    assert steady["kb_per_in_flight"]["envoy"] == 81.9


def test_the_no_retry_diagnosis_drops_the_retry_policy_and_nothing_else():
    cfg = bench.load_envoy()
    route = bench._route(cfg)["route"]
    assert route["retry_policy"]["num_retries"] >= 1
    out = bench.without_retry_policy(cfg)
    out_route = bench._route(out)["route"]
    assert out_route == {k: v for k, v in route.items() if k != "retry_policy"}
    assert "retry_policy" in route  # the product config it was given is left as it was
    assert out["static_resources"]["clusters"] == cfg["static_resources"]["clusters"]


def test_the_heap_sampler_sees_requests_active_in_envoy(tmp_path):
    sc = next(s for s in bench.scenarios("mock-openai-key-1") if s.name == "envoy")
    stack = bench.start_stack(sc, tmp_path, envoy_concurrency=1)
    try:
        sampler = bench.EnvoyHeapSampler(stack.admin_url)
        sampler.start()
        held = []

        def one():
            req = urllib.request.Request(
                f"{stack.base_url}/{sc.api}", data=sc.payload().encode(), method="POST",
                headers={**sc.headers, "content-type": "application/json", "x-mock-latency-ms": "2000"})
            with urllib.request.urlopen(req, timeout=10) as resp:
                held.append(json.loads(resp.read())["object"])

        clients = [threading.Thread(target=one) for _ in range(3)]
        for c in clients:
            c.start()
        for c in clients:
            c.join(timeout=15)
        time.sleep(0.6)
        sampler.stop()
    finally:
        stack.stop()
    assert held == ["chat.completion"] * 3
    # Three requests held 2 s, sampled every 0.5 s; the admin's own
    # request is not counted.
    assert sampler.peak_active == 3
    assert sampler.peak["allocated"] > 0
