"""The Grafana dashboard against a live stack: every panel's query returns data.

A real Prometheus (Debian's `prometheus`) scrapes a stack on free loopback
ports with the shipped scrape jobs (deploy/prometheus/prometheus.yml, static
targets in place of Kubernetes discovery, the relabel rules unchanged) while
the official openai client sends traffic: chats on two providers, a stream, a
provider error, an unknown model, a bad key, a 429 from the 5-per-minute
key, and a long prompt sent twice (mock-llm's simulated prompt cache answers
the second from the key's cache, so the cache hit ratio has data). Then every query of deploy/grafana/tollgate.json runs through
Prometheus' HTTP API: one that returns nothing fails, and so does one that
stays at zero although this traffic should move it.
"""
from __future__ import annotations

import importlib.util
import json
import math
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import openai
import pytest
import yaml

from helpers import HI
from stack import _die_with_parent, free_ports

ROOT = Path(__file__).resolve().parent.parent.parent
_spec = importlib.util.spec_from_file_location("dashboard_check", ROOT / "deploy" / "grafana" / "check.py")
dashboard = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dashboard)

# Panels that may read zero here; they must still return a series. Nothing
# overflows and authz-service and Redis stay up; the healthy-endpoint count
# follows Envoy's active health checks (one endpoint, 1 s timeout), not the
# traffic, and a loaded 2-core machine can fail a few of them in a row.
MAY_BE_ZERO = ("Provider queue overflows", "authz-service errors seen by Envoy", "Healthy authz-service endpoints")
DEADLINE_S = 90
# A system prompt above OpenAI's 1,024-token cache minimum (4 characters a token).
LONG = [{"role": "system", "content": "You are a careful assistant. " * 200}, *HI]


def prom_get(base: str, path: str, **params) -> dict:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}" if params else f"{base}{path}"
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def query(base: str, expr: str) -> list[dict]:
    body = prom_get(base, "/api/v1/query", query=expr)
    assert body["status"] == "success", body
    return body["data"]["result"]


def wait_for(what: str, predicate, deadline: float, proc: subprocess.Popen, log: Path):
    while True:
        assert proc.poll() is None, f"prometheus exited:\n{log.read_text()[-3000:]}"
        try:
            value = predicate()
        except OSError:
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


@pytest.fixture
def prometheus(make_stack, tmp_path):
    """(stack, Prometheus base URL): Prometheus scraping a private stack every second."""
    exe = shutil.which("prometheus")
    assert exe, "prometheus not installed; run `make bootstrap`"
    stack = make_stack()
    port = free_ports()["TG_GATEWAY_PORT"]
    config = dashboard.static_scrape_config({
        "tollgate-envoy": f"127.0.0.1:{stack.ports['TG_ADMIN_PORT']}",
        "tollgate-authz": f"127.0.0.1:{stack.ports['TG_AUTHZ_HTTP_PORT']}",
    }, scrape_interval="1s")
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = tmp_path / "prometheus.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [exe, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + DEADLINE_S
        wait_for("both scrape jobs up", lambda: len(query(base, "up == 1")) == 2, deadline, proc, log)
        yield stack, base, proc, log
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def send_traffic(stack, clients: dict, rate_limited_calls: int) -> None:
    demo = clients["demo"]
    for model in ("openai/gpt-4o-mini", "anthropic/claude-sonnet-4-5"):
        assert demo.chat.completions.create(model=model, messages=HI).choices[0].message.content
    # The same long prompt twice: the conversation keeps its key, whose cache
    # serves the second.
    cached = [demo.chat.completions.create(model="openai/gpt-4o-mini", messages=LONG).usage
              .prompt_tokens_details.cached_tokens for _ in range(2)]
    assert cached[1] > 0, cached
    chunks = list(demo.chat.completions.create(model="openai/gpt-4o-mini", messages=HI, stream=True,
                                               stream_options={"include_usage": True}))
    assert chunks and chunks[-1].usage is not None
    with pytest.raises(openai.InternalServerError):
        demo.chat.completions.create(model="openai/gpt-4o-mini", messages=HI,
                                     extra_headers={"x-mock-error": "500"})
    with pytest.raises(openai.NotFoundError):
        demo.chat.completions.create(model="nope/unknown", messages=HI)
    with pytest.raises(openai.AuthenticationError):
        clients["bad"].chat.completions.create(model="openai/gpt-4o-mini", messages=HI)
    for _ in range(rate_limited_calls):
        try:
            clients["rpm5"].chat.completions.create(model="openai/gpt-4o-mini", messages=HI)
        except openai.RateLimitError:
            continue


def evaluate(base: str, queries: list[tuple[str, str]]) -> dict[str, str]:
    """label → why it fails (empty: every query has data)."""
    failing = {}
    for label, expr in queries:
        result = query(base, expr)
        values = [float(r["value"][1]) for r in result]
        finite = [v for v in values if not math.isnan(v)]
        if not result:
            failing[label] = "returned nothing"
        elif not finite:
            failing[label] = f"only NaN: {result}"
        elif not any(finite) and not any(name in label for name in MAY_BE_ZERO):
            failing[label] = f"stayed at zero: {result}"
    return failing


def test_every_dashboard_query_returns_data_after_traffic(prometheus):
    stack, base, proc, log = prometheus
    # Rates over a window that spans the whole test, so a slow machine cannot
    # slide the traffic out of it while the histograms are still being published.
    queries = dashboard.queries(dashboard.load_dashboard(), __rate_interval="5m")
    assert len(queries) >= 20
    clients = {name: openai.OpenAI(base_url=stack.base_url, api_key=key, max_retries=0)
               for name, key in (("demo", "tg-demo-key"), ("bad", "tg-not-a-key"), ("rpm5", "tg-test-rpm5"))}
    deadline = time.monotonic() + DEADLINE_S

    # First round: creates every series (5 admitted + 1 denied for the rpm5 key);
    # Prometheus scrapes them before the second round moves them, so rates are non-zero.
    send_traffic(stack, clients, rate_limited_calls=6)
    # Usage reports reach authz-service after the answers (the filter batches
    # them for up to 100 ms): a scrape right after the round can miss them,
    # and a series first seen with the second round's counts already in it
    # has no rate. So wait until Prometheus holds two samples of every series.
    wait_for("every query to return a series after the first round",
             lambda: not any(why == "returned nothing" for why in evaluate(base, queries).values()),
             deadline, proc, log)
    send_traffic(stack, clients, rate_limited_calls=1)

    failing: dict[str, str] = {}
    while time.monotonic() < deadline:
        failing = evaluate(base, queries)
        if not failing:
            break
        time.sleep(1)  # Envoy publishes histograms on its stats flush (every 5 s)
    assert not failing, "dashboard queries without data:\n" + "\n".join(f"  {k}: {v}" for k, v in failing.items())
    assert proc.poll() is None, log.read_text()[-3000:]
