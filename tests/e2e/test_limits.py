"""Limits people can use to the last token, and concurrency caps, end to end
through real Envoy, the Wasm filter, authz-service and Redis.

- Reservations that fit the request: one client sending one request after
  the other with the official openai client (`max_tokens: 16`) uses at
  least 90 % of a 2,000 tokens/min limit before its first 429 (the Check
  reserves the output limit the key's requests declare, and each answer's
  refund lands before the next Check). A request declaring more than the
  Check reserved is topped up before it is forwarded, or refused in its
  API's shape.
- Concurrency caps (`max_concurrent_requests`) with two gateways (two
  Envoys, each with its own authz-service, sharing one Redis, slots living
  3 s without renewal): the key's and the tenant's caps hold across both,
  the 429 comes in OpenAI's shape on OpenAI routes and Anthropic's on
  /v1/messages with `retry-after`; streams dropped mid-way give their
  slots back at once (rounds of them leak nothing); a stream longer than
  the slot's life keeps its slot (the filter renews it); a gateway killed
  with SIGKILL holds its slots until they expire, then they are free.

Every figure measured is printed. Everything runs on 127.0.0.1 and stops
by itself.
"""
from __future__ import annotations

import hashlib
import http.client
import json
import math
import socket
import subprocess
import threading
import time
import urllib.request

import anthropic
import openai
import pytest

from helpers import HI, assert_openai_error, authz_metric, post
from stack import Stack, free_ports, tool

TPM = 2000          # tokens/min of the sequential client's key
SLOT_TTL_MS = 3000  # --slot-ttl-ms of the two gateways
KEY_CAP = 2         # max_concurrent_requests of tg-cc-a
TENANT_CAP = 4      # max_concurrent_requests of tenant cc (tg-cc-a and tg-cc-b)

KEYS = {  # virtual key → (key id, tenant, limits)
    "tg-lim-seq": ("seq-key", "seq", {"tokens_per_minute": TPM}),
    "tg-lim-top": ("top-key", "top", {"tokens_per_day": 1000}),
    "tg-lim-top2": ("top-key2", "top", {"tokens_per_day": 1000}),
    "tg-cc-a": ("cc-a", "cc", {"max_concurrent_requests": KEY_CAP}),
    "tg-cc-b": ("cc-b", "cc", {}),
    "tg-cc-one": ("cc-one", "one", {"max_concurrent_requests": 1}),
}
TENANTS = {"seq": {}, "top": {}, "cc": {"max_concurrent_requests": TENANT_CAP}, "one": {}}


def write_policy(path) -> None:
    lines = ["version: 1", "tenants:"]
    lines += [f"  {t}: {{limits: {json.dumps(limits)}}}" for t, limits in TENANTS.items()]
    lines.append("keys:")
    for key, (key_id, tenant, limits) in KEYS.items():
        lines += [f"  - id: {key_id}", f"    tenant: {tenant}",
                  f"    sha256: {hashlib.sha256(key.encode()).hexdigest()}",
                  f"    limits: {json.dumps(limits)}"]
    path.write_text("\n".join(lines) + "\n")


# ---- reservations that fit the request ------------------------------------


def test_a_sequential_client_uses_at_least_90_percent_of_its_tokens_per_minute(make_stack, tmp_path):
    policy = tmp_path / "policy.yaml"
    write_policy(policy)
    s = make_stack(policy=policy)
    client = openai.OpenAI(base_url=s.base_url, api_key="tg-lim-seq", max_retries=0)
    used, requests, started = 0, 0, time.monotonic()
    while True:
        try:
            # Answers use their 16 tokens whole (mock-llm cuts a longer text).
            answer = client.chat.completions.create(model="openai/gpt-4o-mini", messages=HI, max_tokens=16,
                                                    extra_headers={"x-mock-response-bytes": "2000"})
            assert answer.usage.completion_tokens == 16
        except openai.RateLimitError as err:
            refusal = err
            break
        used += answer.usage.total_tokens
        requests += 1
        assert requests < 1000, "never refused"
    elapsed = time.monotonic() - started
    refill = TPM * elapsed / 60
    # The most one request may reserve: its prompt's estimate (the body's
    # size / 4) plus its max_tokens.
    reservation = math.ceil(len(json.dumps({"messages": HI, "model": "openai/gpt-4o-mini",
                                            "max_tokens": 16}).encode()) / 4) + 16
    print(f"\nsequential client, max_tokens 16, {TPM} tokens/min: {used} tokens in {requests} requests "
          f"before the first 429 = {used / TPM:.1%} of the limit ({elapsed:.2f} s, refill during it "
          f"{refill:.0f} tokens)")
    assert refusal.code == "rate_limit_exceeded", refusal.body
    assert "tokens per minute" in refusal.message, refusal.message
    assert int(refusal.response.headers["retry-after"]) >= 1
    assert used >= 0.9 * TPM, (used, requests)
    assert used <= TPM + refill + reservation, (used, refill, reservation)
    # No request needed a top-up: each Check held its 16 tokens already
    # (the first one the tenant's default), and every report settled.
    assert authz_metric(s, 'tollgate_authz_top_ups_total{result="added"}') == 0
    assert authz_metric(s, 'tollgate_authz_usage_reports_total{result="ok"}') >= requests


def test_a_request_declaring_more_is_topped_up_or_refused_in_its_apis_shape(make_stack, tmp_path):
    """Two keys of 1,000 tokens a day (no refill to speak of during the
    test), one asked through OpenAI's API, the other through Anthropic's."""
    policy = tmp_path / "policy.yaml"
    write_policy(policy)
    s = make_stack(policy=policy)
    for n, (key, api) in enumerate([("tg-lim-top", "openai"), ("tg-lim-top2", "anthropic")]):
        client = openai.OpenAI(base_url=s.base_url, api_key=key, max_retries=0)
        aclient = anthropic.Anthropic(base_url=s.base_url.removesuffix("/v1"), api_key=key, max_retries=0)

        def ask(max_tokens: int):
            if api == "openai":
                return client.chat.completions.create(model="openai/gpt-4o-mini", messages=HI,
                                                      max_tokens=max_tokens)
            return aclient.messages.create(model="openai/gpt-4o-mini", max_tokens=max_tokens, messages=HI)

        # 16 declared: covered by the default answer reservation; learned.
        ask(16)
        # 600 declared, 16 reserved: topped up by 584 (the bucket has them).
        ask(600)
        assert authz_metric(s, 'tollgate_authz_top_ups_total{result="added"}') == n + 1
        # 990 declared, 600 reserved (learned): 390 more than the ~350 left.
        if api == "openai":
            with pytest.raises(openai.RateLimitError) as exc:
                ask(990)
            assert exc.value.code == "rate_limit_exceeded"
            assert exc.value.body["type"] == "tokens"
            message = exc.value.body["message"]
        else:
            with pytest.raises(anthropic.RateLimitError) as exc:
                ask(990)
            body = exc.value.body
            assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error", body
            message = body["error"]["message"]
        assert "tokens per day" in message, message
        assert int(exc.value.response.headers["retry-after"]) >= 1
        assert authz_metric(s, 'tollgate_authz_top_ups_total{result="refused"}') == n + 1
        # The refused request gave its whole reservation back at once, and
        # taught nothing: 600 declared fits again.
        ask(600)


# ---- concurrency caps across two gateways ---------------------------------


@pytest.fixture(scope="module")
def gateways(request, tmp_path_factory):
    """[A, B]: A runs Redis, mock-llm, authz-service and Envoy; B its own
    authz-service and Envoy on A's Redis and mock-llm."""
    policy = tmp_path_factory.mktemp("policy") / "policy.yaml"
    write_policy(policy)
    args = ("--redis-timeout-ms", "100", "--slot-ttl-ms", str(SLOT_TTL_MS))
    a = Stack(run_dir=tmp_path_factory.mktemp("gw-a"), ports=free_ports(), policy=policy,
              envoy_concurrency=1, authz_args=args)
    b_ports = free_ports() | {"TG_MOCK_PORT": a.ports["TG_MOCK_PORT"], "TG_REDIS_PORT": a.ports["TG_REDIS_PORT"]}
    b = Stack(run_dir=tmp_path_factory.mktemp("gw-b"), ports=b_ports, policy=policy, envoy_concurrency=1,
              authz_args=args, components=("authz", "envoy"), shared_ports=("TG_MOCK_PORT", "TG_REDIS_PORT"),
              redis_url=f"redis://127.0.0.1:{a.ports['TG_REDIS_PORT']}")
    started = []
    failed_before = request.session.testsfailed
    try:
        for gw in (a, b):
            started.append(gw)
            gw.start()
        yield [a, b]
    except BaseException:
        for gw in started:
            gw.dump_logs()
        raise
    finally:
        for gw in reversed(started):
            gw.stop()
        if request.session.testsfailed > failed_before:
            for gw in started:
                gw.dump_logs()


class Stream:
    """A streamed chat completion held open: its status and headers read,
    then the first bytes of the body (when admitted). mock-llm sends its 16
    tokens (64 characters of a longer text, cut) in 4 chunks `itl_ms` apart
    and `[DONE]` `itl_ms` after the last, so the request stays in flight
    about 4 × `itl_ms`."""

    def __init__(self, gw: Stack, key: str, itl_ms: int = 10000, messages: bool = False, **mock: str):
        self.conn = http.client.HTTPConnection("127.0.0.1", gw.ports["TG_GATEWAY_PORT"], timeout=30)
        body = {"model": "openai/gpt-4o-mini", "messages": HI, "stream": True, "max_tokens": 16}
        path = "/v1/messages" if messages else "/v1/chat/completions"
        self.conn.request("POST", path, json.dumps(body), {
            "authorization": f"Bearer {key}", "content-type": "application/json",
            "x-mock-itl-ms": str(itl_ms), "x-mock-response-bytes": "2000", **mock})
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.headers = self.resp.headers
        if self.status == 200:
            assert self.resp.read1(65536), "no first chunk"
        else:
            self.body = json.loads(self.resp.read())

    def drop(self) -> None:
        """The client goes away mid-stream."""
        self.conn.sock.shutdown(socket.SHUT_RDWR)
        self.conn.close()

    def finish(self) -> bytes:
        """Read the stream to its end."""
        rest = self.resp.read()
        self.conn.close()
        return rest


def in_flight(gw: Stack, key_id: str) -> int:
    """Slots the key holds now on every gateway (the admin API counts
    them in Redis, expired ones dropped)."""
    token = gw.admin_token_path.read_text().strip()
    req = urllib.request.Request(f"{gw.authz_admin_url}/admin/keys/{key_id}",
                                 headers={"authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        view = json.loads(resp.read())
    row = next(r for r in view["usage"]["limits"] if r["limit"] == "max_concurrent_requests")
    return row["capacity"] - row["remaining"]


def redis_cli(gw: Stack, *args: str) -> str:
    return subprocess.run([tool("redis-cli"), "-p", str(gw.ports["TG_REDIS_PORT"]), *args],
                          capture_output=True, text=True, timeout=5, check=True).stdout.strip()


LIVE = "local t = redis.call('TIME') return redis.call('ZCOUNT', KEYS[1], '(' .. (t[1] * 1000 + math.floor(t[2] / 1000)), '+inf')"


def live_slots(gw: Stack, set_: str) -> int:
    """Slots of a slot set in Redis that have not expired."""
    return int(redis_cli(gw, "EVAL", LIVE, "1", set_))


KEY_SET, OTHER_SET, TENANT_SET = "tg:{cc}:cc:k:cc-a", "tg:{cc}:cc:k:cc-b", "tg:{cc}:cc:t"


def eventually_zero(read, limit: float = 1.0) -> float:
    """Poll `read()` until it is 0 (a release is reported as the answer
    ends, beside the answer's last bytes, not before them): the seconds it
    took."""
    started = time.monotonic()
    while (n := read()) != 0:
        assert time.monotonic() - started < limit, f"still {n} after {limit} s"
        time.sleep(0.01)
    return time.monotonic() - started


def chat(gw: Stack, key: str, **headers):
    return post(f"{gw.base_url}/chat/completions", {"model": "openai/gpt-4o-mini", "messages": HI},
                {"authorization": f"Bearer {key}", **headers})


def until_admitted(gw: Stack, key: str, limit: float) -> float:
    """Send a request every 20 ms until one is admitted: the seconds it took."""
    started = time.monotonic()
    while True:
        status, _, body = chat(gw, key)
        if status == 200:
            return time.monotonic() - started
        assert status == 429 and body["error"]["code"] == "concurrency_limit_exceeded", (status, body)
        assert time.monotonic() - started < limit, f"still refused after {limit} s"
        time.sleep(0.02)


def test_a_key_and_its_tenant_are_capped_across_two_gateways(gateways):
    a, b = gateways
    held = [Stream(a, "tg-cc-a"), Stream(b, "tg-cc-a")]
    assert [s.status for s in held] == [200, 200]
    assert in_flight(a, "cc-a") == KEY_CAP
    # Over the key's cap on either gateway: 429 in OpenAI's shape...
    for gw in (a, b):
        status, headers, body = chat(gw, "tg-cc-a")
        assert status == 429, body
        assert_openai_error(body, "concurrency_limit_exceeded")
        assert body["error"]["type"] == "requests"
        assert f"key cc-a: {KEY_CAP} requests in flight, limit {KEY_CAP}" in body["error"]["message"]
        assert headers["retry-after"] == "1"
    # ...the official client's RateLimitError...
    client = openai.OpenAI(base_url=b.base_url, api_key="tg-cc-a", max_retries=0)
    with pytest.raises(openai.RateLimitError) as exc:
        client.chat.completions.create(model="openai/gpt-4o-mini", messages=HI)
    assert exc.value.code == "concurrency_limit_exceeded"
    # ...and Anthropic's shape on /v1/messages.
    aclient = anthropic.Anthropic(base_url=a.base_url.removesuffix("/v1"), api_key="tg-cc-a", max_retries=0)
    with pytest.raises(anthropic.RateLimitError) as aexc:
        aclient.messages.create(model="openai/gpt-4o-mini", max_tokens=16, messages=HI)
    assert aexc.value.body["type"] == "error"
    assert aexc.value.body["error"]["type"] == "rate_limit_error"
    assert "Concurrency limit reached" in aexc.value.body["error"]["message"]
    assert aexc.value.response.headers["retry-after"] == "1"
    # The tenant's cap counts its other key: two more, then 429 naming it.
    held += [Stream(b, "tg-cc-b"), Stream(a, "tg-cc-b", messages=True)]
    assert [s.status for s in held] == [200] * 4
    extra = Stream(a, "tg-cc-b")
    assert extra.status == 429
    assert f"tenant cc: {TENANT_CAP} requests in flight, limit {TENANT_CAP}" in extra.body["error"]["message"]
    # The clients leave: their slots are free for the next requests.
    for s in held:
        s.drop()
    assert until_admitted(a, "tg-cc-a", 2.0) < 2.0
    assert until_admitted(b, "tg-cc-b", 2.0) < 2.0
    eventually_zero(lambda: in_flight(a, "cc-a") + live_slots(a, TENANT_SET))


def test_streams_dropped_mid_way_give_their_slots_back(gateways):
    a, b = gateways
    released = []
    rounds = 8
    for r in range(rounds):
        gws = (a, b) if r % 2 == 0 else (b, a)
        held = [Stream(gws[0], "tg-cc-a"), Stream(gws[1], "tg-cc-a", messages=r % 4 == 1),
                Stream(gws[0], "tg-cc-b"), Stream(gws[1], "tg-cc-b")]
        assert [s.status for s in held] == [200] * 4, [getattr(s, "body", None) for s in held]
        assert Stream(gws[1], "tg-cc-b").status == 429
        t0 = time.monotonic()
        for s in held:
            s.drop()
        eventually_zero(lambda: live_slots(a, TENANT_SET))
        released.append(time.monotonic() - t0)
    # Whole answers, streamed and not, give theirs back too, and so do
    # streams the provider cuts.
    for gw in (a, b):
        assert Stream(gw, "tg-cc-a", itl_ms=0).finish()
        assert chat(gw, "tg-cc-a")[0] == 200
        cut = [Stream(gw, "tg-cc-a", itl_ms=0, **{"x-mock-error": "reset-after-first-chunk"})
               for _ in range(KEY_CAP)]
        for s in cut:
            try:
                s.finish()
            except (http.client.HTTPException, OSError):
                pass
        assert until_admitted(gw, "tg-cc-a", 2.0) < 2.0
    eventually_zero(lambda: in_flight(b, "cc-a") + live_slots(a, TENANT_SET))
    released.sort()
    print(f"\n{rounds} rounds of 4 streams dropped mid-way: all slots free after "
          f"median {released[len(released) // 2] * 1000:.0f} ms, max {released[-1] * 1000:.0f} ms")
    # Every slot taken was released by its gateway's report, none expired.
    for gw in (a, b):
        acquired = authz_metric(gw, 'tollgate_authz_slots_total{op="acquired"}')
        assert acquired > 0
        assert authz_metric(gw, 'tollgate_authz_slots_total{op="released"}') == acquired
        assert authz_metric(gw, 'tollgate_authz_slots_total{op="expired"}') == 0
    for set_ in (KEY_SET, OTHER_SET, TENANT_SET):
        assert redis_cli(a, "ZCARD", set_) == "0", set_


def test_a_stream_longer_than_the_slot_life_keeps_its_slot(gateways):
    a, b = gateways
    lasts_ms = SLOT_TTL_MS + 2000
    results = {}

    def run():
        s = Stream(b, "tg-cc-one", itl_ms=lasts_ms // 4)
        results["status"] = s.status
        results["rest"] = s.finish()
        results["ended"] = time.monotonic()

    t = threading.Thread(target=run)
    started = time.monotonic()
    t.start()
    time.sleep(SLOT_TTL_MS / 1000 + 1.0)
    # Past the slot's life: still held (renewed by the filter), on both.
    for gw in (a, b):
        status, _, body = chat(gw, "tg-cc-one")
        assert status == 429, body
        assert_openai_error(body, "concurrency_limit_exceeded")
    t.join(30)
    assert results["status"] == 200 and results["rest"]
    assert results["ended"] - started >= lasts_ms / 1000
    assert until_admitted(a, "tg-cc-one", 2.0) < 2.0
    assert authz_metric(b, 'tollgate_authz_slots_total{op="renewed"}') >= 1


def test_a_killed_gateways_slots_expire(gateways):
    a, b = gateways
    held = [Stream(b, "tg-cc-a"), Stream(b, "tg-cc-a")]
    assert [s.status for s in held] == [200, 200]
    time.sleep(1.5)  # renewed at least once
    b.procs["envoy"].kill()  # SIGKILL: no report, no release, no renewal
    b.procs["envoy"].wait()
    killed = time.monotonic()
    assert chat(a, "tg-cc-a")[0] == 429, "the dead gateway's slots are held"
    freed = until_admitted(a, "tg-cc-a", SLOT_TTL_MS / 1000 + 2.0)
    print(f"\ngateway killed with 2 slots held (ttl {SLOT_TTL_MS} ms): free again after {freed:.2f} s")
    # Renewed every third of the ttl until the kill: free between two
    # thirds of the ttl and the ttl after it (plus the polling).
    assert SLOT_TTL_MS / 1000 / 3 <= freed <= SLOT_TTL_MS / 1000 + 1.0, freed
    assert time.monotonic() - killed >= SLOT_TTL_MS / 1000 / 3
    for s in held:
        s.conn.close()
    eventually_zero(lambda: in_flight(a, "cc-a"))
