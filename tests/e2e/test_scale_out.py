"""Scale-out: two complete gateways (Envoy + Wasm filter + authz-service each)
share one local Redis Cluster of 3 masters and 3 replicas (made by the
harness with redis-cli, 1 s cluster-node-timeout).

- One key's request limit and token limit hold across both gateways: a limit
  of N requests admits N ± 1 % under 16 concurrent clients, a budget of T
  tokens serves at most T + one reservation and at least 0.9 T.
- The master serving a tenant's slot is killed under load: its replica takes
  over, every request gets an answer (admitted ones a completion), and the
  failure policy (fail-closed 503s, fail-open admissions) applies only
  between the kill and the moment the cluster reports its slots served again
  (plus the service's reconnect slack).
- One gateway killed, the other keeps serving.

The day limits refill about 0.003 units a second, so "plus refill" is zero
over the test. Everything runs on 127.0.0.1 and stops by itself; the whole
module takes well under a minute on an idle machine.
"""
from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from helpers import HI, assert_openai_error, authz_metric, load, post, sample_for
from stack import RedisCluster, Stack, free_ports

N_REQUESTS = 300          # requests_per_day of the request-limited key
T_TOKENS = 4000           # tokens_per_day of the token-limited key
RESERVE_COMPLETION = 64   # reserve_completion_tokens of every tenant here
CLIENTS = 16
# After the cluster reports the killed master's slots served again, how long
# a service may still apply its failure policy: its 250 ms breaker, the
# cluster client's topology refresh, and a Check already in flight (measured:
# the last fail-closed answer ended 0.07 s and the last fail-open came
# within 0.55 s after the cluster reported ok, 2.0 s after the kill).
RECOVERY_SLACK_S = 1.5

KEYS = {  # virtual key → (key id, tenant, limits, redis_failure)
    "tg-so-req": ("req-key", "so-req", {"requests_per_day": N_REQUESTS}, "open"),
    "tg-so-tok": ("tok-key", "so-tok", {"tokens_per_day": T_TOKENS}, "open"),
    "tg-so-open": ("open-key", "so-open", {"requests_per_minute": 1000000}, "open"),
    "tg-so-closed": ("closed-key", "so-closed", {"requests_per_minute": 1000000}, "closed"),
    "tg-so-serve": ("serve-key", "so-serve", {"requests_per_minute": 1000000}, "open"),
}


def bucket_key(tenant: str) -> str:
    """A key in the tenant's hash slot (authz-service tags keys with {tenant})."""
    return f"tg:{{{tenant}}}:probe"


def policy_text(tenants: dict[str, str]) -> str:
    """The policy, with each tenant's name as chosen by the fixture."""
    lines = ["version: 1", f"defaults: {{reserve_completion_tokens: {RESERVE_COMPLETION}}}", "tenants:"]
    for _, (_, tenant, _, failure) in KEYS.items():
        lines.append(f"  {tenants[tenant]}: {{redis_failure: {failure}}}")
    lines.append("keys:")
    for key, (key_id, tenant, limits, _) in KEYS.items():
        lines += [f"  - id: {key_id}", f"    tenant: {tenants[tenant]}",
                  f"    sha256: {hashlib.sha256(key.encode()).hexdigest()}",
                  f"    limits: {json.dumps(limits)}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def scale(request, tmp_path_factory):
    """(cluster, [gateway A, gateway B], tenant names). The fail-open and
    fail-closed tenants are named so that both live on one master, the one
    the failover test kills."""
    cluster = RedisCluster(tmp_path_factory.mktemp("redis-cluster")).start()
    gateways: list[Stack] = []
    failed_before = request.session.testsfailed
    try:
        closed_master = cluster.master_of(bucket_key("so-closed"))
        open_name = next(f"so-open-{i}" for i in range(1000)
                         if cluster.master_of(bucket_key(f"so-open-{i}")) == closed_master)
        tenants = {t: t for _, t, _, _ in KEYS.values()} | {"so-open": open_name}
        policy = tmp_path_factory.mktemp("policy") / "policy.yaml"
        policy.write_text(policy_text(tenants))
        for _ in range(2):
            gw = Stack(run_dir=tmp_path_factory.mktemp("gateway"), ports=free_ports(), policy=policy,
                       components=("mock", "authz", "envoy"), redis_url=cluster.url, envoy_concurrency=1,
                       authz_args=("--redis-timeout-ms", "100"))
            gateways.append(gw)
            gw.start()
        yield cluster, gateways, tenants
    except BaseException:
        for gw in gateways:
            gw.dump_logs()
        raise
    finally:
        for gw in gateways:
            gw.stop()
        cluster.stop()
        if request.session.testsfailed > failed_before:
            for gw in gateways:
                gw.dump_logs()


BODY = {"model": "openai/gpt-4o-mini", "messages": HI}


def chat(gw: Stack, key: str, **headers):
    return post(f"{gw.base_url}/chat/completions", BODY, {"authorization": f"Bearer {key}", **headers})


def test_a_request_limit_holds_across_two_gateways(scale):
    _, gateways, _ = scale

    def one(i: int) -> int:
        status, _, answer = chat(gateways[i % 2], "tg-so-req")
        assert status in (200, 429), answer
        if status == 429:
            assert_openai_error(answer, "rate_limit_exceeded")
        return status

    with ThreadPoolExecutor(CLIENTS) as pool:
        statuses = list(pool.map(one, range(N_REQUESTS * 3 // 2)))
    admitted = statuses.count(200)
    assert N_REQUESTS * 0.99 <= admitted <= N_REQUESTS * 1.01, admitted
    # Both gateways admitted part of the one budget.
    assert statuses[0::2].count(200) > 0 and statuses[1::2].count(200) > 0
    for gw in gateways:
        assert authz_metric(gw, "tollgate_authz_fail_open_total") == 0


def test_a_token_budget_holds_across_two_gateways(scale):
    """Each Check reserves the prompt's estimate plus 64 tokens; answers of
    about 50 tokens leave part of it to refund, which the usage reports of
    both gateways settle in the shared buckets. Clients keep sending for
    10 s, or until neither gateway has admitted anything for 2.5 s (longer
    than a cached denial lasts, so refunds are seen)."""
    _, gateways, _ = scale
    reservation = math.ceil(len(json.dumps(BODY).encode()) / 4) + RESERVE_COMPLETION
    served, lock = [], threading.Lock()
    last_admit = [time.monotonic()]
    deadline = time.monotonic() + 10

    def client(c: int) -> None:
        i = 0
        while time.monotonic() < deadline and time.monotonic() - last_admit[0] < 2.5:
            status, _, answer = chat(gateways[(c + i) % 2], "tg-so-tok", **{"x-mock-response-bytes": "200"})
            i += 1
            assert status in (200, 429), answer
            if status == 200:
                with lock:
                    served.append(answer["usage"]["total_tokens"])
                    last_admit[0] = time.monotonic()
            else:
                assert_openai_error(answer, "rate_limit_exceeded")
                time.sleep(0.05)

    with ThreadPoolExecutor(CLIENTS) as pool:
        for f in [pool.submit(client, c) for c in range(CLIENTS)]:
            f.result()
    total = sum(served)
    assert served and max(served) < reservation, (served, reservation)
    assert 0.9 * T_TOKENS <= total <= T_TOKENS + reservation, (total, len(served), reservation)


def test_a_killed_master_fails_over_and_the_failure_policy_applies_only_meanwhile(scale):
    cluster, gateways, tenants = scale
    victim = cluster.master_of(bucket_key(tenants["so-closed"]))
    assert victim == cluster.master_of(bucket_key(tenants["so-open"]))
    witness = next(p for p in cluster.alive() if p != victim)

    def fail_open() -> float:
        return sum(authz_metric(gw, "tollgate_authz_fail_open_total") for gw in gateways)

    fail_open_before = fail_open()

    def send(c: int, i: int):
        key = "tg-so-closed" if c % 2 else "tg-so-open"
        status, _, answer = chat(gateways[(c + i) % 2], key)
        return key, status, answer

    samples = []  # (time, fail-open total) while the load runs
    with load(8, send) as results:
        time.sleep(1.0)
        samples.append((time.monotonic(), fail_open()))
        t_kill = time.monotonic()
        cluster.kill(victim)
        # The switch ends when the cluster reports ok again with the slot
        # served by a live master (the promoted replica).
        t_served, limit = None, t_kill + 20
        while time.monotonic() < limit:
            try:
                if cluster.state(witness) == "ok" and cluster.master_of(bucket_key(tenants["so-closed"]), witness) != victim:
                    t_served = time.monotonic()
                    break
            except (RuntimeError, OSError, ValueError):
                pass
            samples.append((time.monotonic(), fail_open()))
            time.sleep(0.05)
        assert t_served is not None, "the replica never took over"
        sample_for(RECOVERY_SLACK_S + 3.0, samples, fail_open)
    window = (t_kill, t_served + RECOVERY_SLACK_S)

    # Every request got an answer: a completion, or the fail-closed 503.
    closed_503 = []
    for t0, t1, key, status, answer in results:
        if status == 503 and key == "tg-so-closed":
            assert_openai_error(answer, "rate_limiter_unavailable")
            closed_503.append((t0, t1))
        else:
            assert status == 200 and answer["choices"][0]["message"]["content"], (status, key, answer)
    assert closed_503, "no Check ever met the failover (the test proves nothing)"
    late = [(round(t0 - t_kill, 2), round(t1 - t_kill, 2)) for t0, t1 in closed_503
            if t1 < window[0] or t0 > window[1]]
    assert not late, (f"fail-closed outside the failover window 0..{window[1] - t_kill:.2f} s "
                      f"(cluster served again at {t_served - t_kill:.2f} s): {late}")
    # Fail-open admissions too: none before the kill, some during the
    # switch, none after the window (a sample counts every decision before it).
    assert samples[0][1] == fail_open_before
    after = [v for t, v in samples if t > window[1]]
    assert after and len(set(after)) == 1 and after[0] > fail_open_before, (after, t_served - t_kill)
    served_after = [r for r in results if r[0] > window[1]]
    assert len(served_after) > 10 and all(r[3] == 200 for r in served_after)


def test_one_gateway_killed_the_other_keeps_serving(scale):
    _, gateways, _ = scale
    a, b = gateways
    for gw in gateways:
        assert chat(gw, "tg-so-serve")[0] == 200
    a.procs["envoy"].kill()
    a.procs["authz"].kill()
    a.procs["envoy"].wait()
    statuses = [chat(b, "tg-so-serve")[0] for _ in range(30)]
    assert statuses == [200] * 30
    with pytest.raises(OSError):
        chat(a, "tg-so-serve")
