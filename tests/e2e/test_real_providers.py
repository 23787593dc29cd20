"""The real-provider config (`make run TG_PROVIDERS=real`) carries requests over
TLS to every provider's real name, offline.

Envoy runs the config scripts/stack.py renders for the real providers
(scripts/real_providers.py from deploy/k8s/providers.yaml, keys from the
usual variables) with three test-only changes, made in `point_at_stand_ins`
and nowhere else: each provider cluster trusts the test's CA file instead of
the system bundle, connects to the stand-ins' port instead of 443, and
resolves its host through the test's DNS responder (c-ares with that one
server, tls_stand_ins.py). Everything else is as shipped: LOGICAL_DNS to
api.openai.com & co., SNI and the certificate's SAN checked against that
name, HTTP/2 or HTTP/1.1 by ALPN, the real base paths and :authority, and
keys from OPENAI_API_KEY & co. (the mock's values).

One TLS port serves every provider name with its own certificate (picked by
SNI), terminates TLS and passes the bytes to mock-llm (a second mock-llm for
api.mistral.ai, whose real base path /v1 is the OpenAI mock's), and records
each handshake: the Azure stand-in offers only HTTP/1.1, every other name
h2 too.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import anthropic
import openai
import pytest
import yaml

import real_providers
from helpers import HI, assert_openai_error, post
from stack import DEMO_KEY, ROOT, Stack, free_ports, http_get
from tls_stand_ins import DnsResponder, TestCA, TlsStandIns, dns_patch

_spec = importlib.util.spec_from_file_location("render_envoy", ROOT / "deploy" / "k8s" / "render_envoy.py")
render_envoy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(render_envoy)

AZURE_HOST = "tollgate-test.openai.azure.com"
HOSTS = {
    "openai": "api.openai.com",
    "anthropic": "api.anthropic.com",
    "mistral": "api.mistral.ai",
    "azure": AZURE_HOST,
    "gemini": "generativelanguage.googleapis.com",
    "bedrock": "bedrock-runtime.us-east-1.amazonaws.com",
}
# The keys, under the names users already have (mock-llm's demo values).
# GEMINI_API_KEY is empty: Gemini's key comes from its other name.
KEYS = {
    "OPENAI_API_KEY": "mock-openai-key-1",
    "ANTHROPIC_API_KEY": "mock-anthropic-key-1",
    "MISTRAL_API_KEY": "mock-mistral-key-1",
    "AZURE_OPENAI_API_KEY": "mock-azure-key-1",
    "AZURE_OPENAI_ENDPOINT": f"https://{AZURE_HOST}/",
    "GEMINI_API_KEY": "",
    "GOOGLE_API_KEY": "mock-gemini-key-1",
    "AWS_ACCESS_KEY_ID": "AKIDMOCKBEDROCK1",
    "AWS_SECRET_ACCESS_KEY": "mock-bedrock-secret-1",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "",
    "AWS_SESSION_TOKEN": "",
}
SECRETS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "MISTRAL_API_KEY", "AZURE_OPENAI_API_KEY", "GEMINI_API_KEY",
           "GOOGLE_API_KEY", "AWS_SECRET_ACCESS_KEY")
# The mock key name each provider's key is known by (mock-llm's /_mock/stats).
MOCK_KEY = {"openai": "openai-1", "anthropic": "anthropic-1", "mistral": "mistral-1", "azure": "azure-1",
            "gemini": "gemini-1", "bedrock": "bedrock-1"}
CHAT_MODEL = {
    "openai": "openai/gpt-4o-mini",
    "anthropic": "anthropic/claude-haiku-4-5",
    "mistral": "mistral/mistral-small-latest",
    "azure": "azure/gpt-4o-mini",
    "gemini": "gemini/gemini-2.0-flash",
    "bedrock": "bedrock/anthropic.claude-3-haiku-20240307-v1:0",
}
EMBED_MODEL = {"openai": "openai/text-embedding-3-small", "azure": "azure/text-embedding-3-small",
               "gemini": "gemini/text-embedding-004", "bedrock": "bedrock/amazon.titan-embed-text-v2:0"}


class StandIns:
    """The test CA, a CA Envoy does not trust, the DNS responder, the TLS
    stand-ins and the mistral mock."""

    def __init__(self, tmp: Path):
        self.ca = TestCA(tmp / "pki")
        self.untrusted = TestCA(tmp / "pki", "untrusted")
        self.dns = DnsResponder(HOSTS.values())
        self.tls = TlsStandIns()
        self.mistral_port = free_ports()["TG_MOCK_PORT"]
        doc = yaml.safe_load((ROOT / "config" / "mock-llm.yaml").read_text())
        mistral = doc["providers"]["mistral"]
        mistral.pop("path_prefix")  # api.mistral.ai/v1, as the real one
        doc["providers"] = {"mistral": mistral}
        doc["listen"] = f"127.0.0.1:{self.mistral_port}"
        (tmp / "mock-mistral.yaml").write_text(yaml.safe_dump(doc))
        self.mistral_mock = subprocess.Popen(
            [str(ROOT / "target" / "release" / "mock-llm"), "--config", str(tmp / "mock-mistral.yaml")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while http_get_ok(f"http://127.0.0.1:{self.mistral_port}/_mock/health") is False:
            assert time.monotonic() < deadline and self.mistral_mock.poll() is None, "mistral mock did not start"
            time.sleep(0.05)

    def serve_every_name(self, mock_port: int) -> None:
        """Each provider name with a valid certificate of the test CA; Azure
        offers only HTTP/1.1."""
        for name, host in HOSTS.items():
            backend = ("127.0.0.1", self.mistral_port if name == "mistral" else mock_port)
            alpn = ("http/1.1",) if name == "azure" else ("h2", "http/1.1")
            self.tls.serve(host, *self.ca.issue(host), backend, alpn=alpn)

    def point_at_stand_ins(self, config: dict) -> None:
        """The test-only changes to a rendered config: trust the test CA,
        connect to the stand-ins' port, resolve through the DNS responder."""
        for cluster in config["static_resources"]["clusters"]:
            tls = cluster.get("transport_socket")
            if tls is None:
                continue
            validation = tls["typed_config"]["common_tls_context"]["validation_context"]
            assert validation["trusted_ca"]["filename"] == real_providers.CA_BUNDLE
            validation["trusted_ca"]["filename"] = str(self.ca.path)
            address = real_providers.socket_address(cluster)
            assert address["port_value"] == 443
            address["port_value"] = self.tls.port
            dns_patch(cluster, self.dns.port)

    def stop(self) -> None:
        self.tls.stop()
        self.dns.stop()
        self.mistral_mock.terminate()
        self.mistral_mock.wait(5)


def http_get_ok(url: str) -> bool:
    try:
        return http_get(url)[0] == 200
    except OSError:
        return False


def started(request, stack: Stack) -> Stack:
    try:
        stack.start()
    except BaseException:
        stack.dump_logs()
        raise
    request.addfinalizer(lambda: (stack.stop(), request.session.testsfailed and stack.dump_logs()))
    return stack


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    s = StandIns(tmp_path_factory.mktemp("stand-ins"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def real(request, stand_ins, tmp_path_factory):
    """A stack on the real-provider config, every provider's key set."""
    ports = free_ports()
    stand_ins.serve_every_name(ports["TG_MOCK_PORT"])
    stack = Stack(run_dir=tmp_path_factory.mktemp("real"), ports=ports, envoy_concurrency=1,
                  authz_args=("--redis-timeout-ms", "100"), providers="real",
                  envoy_patch=stand_ins.point_at_stand_ins, env=KEYS)
    return started(request, stack)


def mock_stats(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_mock/stats", timeout=5) as resp:
        return json.load(resp)


def served(stack: Stack, stand_ins: StandIns, provider: str) -> dict:
    return mock_stats(stand_ins.mistral_port if provider == "mistral" else stack.ports["TG_MOCK_PORT"])


@pytest.mark.parametrize("provider", list(HOSTS))
def test_every_api_over_tls_to_the_real_name(real, stand_ins, provider):
    """Chat, stream, embeddings, Messages and Responses through the official
    clients, each reaching the provider's stand-in over TLS with its key."""
    site = stand_ins.tls.sites[HOSTS[provider]]
    before = served(real, stand_ins, provider)["by_key"].get(MOCK_KEY[provider], 0)
    client = openai.OpenAI(base_url=real.base_url, api_key=DEMO_KEY, max_retries=0, timeout=20)
    model = CHAT_MODEL[provider]

    raw = client.chat.completions.with_raw_response.create(model=model, messages=HI)
    assert raw.headers["x-tollgate-provider"] == provider
    assert raw.parse().choices[0].message.content

    chunks = list(client.chat.completions.create(model=model, messages=HI, stream=True,
                                                 stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage.total_tokens > 0
    calls = 2

    if provider in EMBED_MODEL:
        emb = client.embeddings.create(model=EMBED_MODEL[provider], input=["one", "two"])
        assert [len(d.embedding) > 0 for d in emb.data] == [True, True]
        calls += 2 if provider == "bedrock" else 1  # Titan embeds one input per call

    messages = anthropic.Anthropic(base_url=real.base_url.removesuffix("/v1"), api_key=DEMO_KEY,
                                   max_retries=0, timeout=20)
    msg = messages.messages.create(model=model, max_tokens=64, messages=HI)
    assert msg.content[0].text
    with messages.messages.stream(model=model, max_tokens=64, messages=HI) as stream:
        assert "".join(stream.text_stream)
    calls += 2

    assert client.responses.create(model=model, input="hi", store=False).output_text
    calls += 1

    after = served(real, stand_ins, provider)
    assert after["by_key"].get(MOCK_KEY[provider], 0) - before == calls, after["by_key"]
    if provider == "azure":
        # The real :authority reached the provider: mock-llm records the Host
        # header of HTTP/1.1 requests (Bedrock's SigV4 signs it, and
        # mock-llm checks the signature).
        last = [r for r in after["recent"] if r["key_id"] == MOCK_KEY[provider]][-1]
        assert last["headers"]["host"] == AZURE_HOST, last["headers"]
    assert site.handshakes and not site.failures
    assert site.request_bytes > 0


def test_tls_sni_alpn_and_dns_as_configured(real, stand_ins):
    """After the calls above: every name was resolved through the DNS
    responder and served by SNI; ALPN picked h2, or HTTP/1.1 where the
    provider offers only that (Azure's stand-in)."""
    tls = stand_ins.tls
    assert tls.unknown_sni == []
    for provider, host in HOSTS.items():
        assert stand_ins.dns.asked(host), (host, stand_ins.dns.queries)
        site = tls.sites[host]
        if site.handshakes:  # the parametrized test ran first (pytest keeps file order)
            assert set(site.handshakes) == ({"http/1.1"} if provider == "azure" else {"h2"}), (host, site.handshakes)
    # Envoy's own record of the upstream protocols.
    status, body = http_get(f"{real.admin_url}/stats?filter=upstream_cx_http", timeout=5)
    stats = dict(line.split(": ") for line in body.decode().splitlines() if ": " in line)
    assert int(stats.get("cluster.azure.upstream_cx_http1_total", 0)) >= 1, stats
    assert int(stats.get("cluster.openai.upstream_cx_http2_total", 0)) >= 1, stats


def test_the_rendered_config_holds_no_key_and_trusts_only_the_system_bundle(real, stand_ins):
    """The shipped render (before the test's changes): the system CA bundle,
    port 443, the system resolver, SNI and SAN = the real name; keys named
    by variable, never by value, in the file Envoy ran and in its logs."""
    source = yaml.safe_load((ROOT / "envoy.yaml").read_text())
    config, live, left_out = real_providers.render_local(source, real_providers.load_yaml(real_providers.SETTINGS),
                                                         {**KEYS, "MISTRAL_API_KEY": ""})
    assert set(live) == set(HOSTS) - {"mistral"} and list(left_out) == ["mistral"]
    assert live["gemini"] == "GOOGLE_API_KEY"
    providers = real_providers.wasm_config(config)
    assert sorted(providers["vm_config"]["environment_variables"]["host_env_keys"]) == sorted(
        ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AZURE_OPENAI_API_KEY", "GOOGLE_API_KEY", "AWS_SECRET_ACCESS_KEY"])
    clusters = {c["name"]: c for c in config["static_resources"]["clusters"]}
    for provider, host in HOSTS.items():
        cluster = clusters[provider]
        assert cluster["type"] == "LOGICAL_DNS" and "typed_dns_resolver_config" not in cluster
        assert real_providers.socket_address(cluster) == {"address": host, "port_value": 443}
        tls = cluster["transport_socket"]["typed_config"]
        assert tls["sni"] == host
        ctx = tls["common_tls_context"]
        assert ctx["alpn_protocols"] == ["h2", "http/1.1"]
        assert ctx["validation_context"] == {
            "trusted_ca": {"filename": "/etc/ssl/certs/ca-certificates.crt"},
            "match_typed_subject_alt_names": [{"san_type": "DNS", "matcher": {"exact": host}}]}
        assert "auto_config" in cluster["typed_extension_protocol_options"][real_providers.HTTP_OPTIONS]
    secrets = [v for k, v in KEYS.items() if v and k in SECRETS]
    for text in (real_providers.dump(config), (real.run_dir / "envoy.yaml").read_text(), real.tail("envoy", 100000)):
        assert not [s for s in secrets if s in text]
    assert oct((real.run_dir / "envoy.yaml").stat().st_mode & 0o777) == "0o600"

    # Temporary AWS credentials: the session token is named by variable too.
    token = "FwoGZXIvYXdzEXAMPLEsessiontoken"
    config, live, _ = real_providers.render_local(source, real_providers.load_yaml(real_providers.SETTINGS),
                                                  {**KEYS, "AWS_SESSION_TOKEN": token})
    assert "bedrock" in live
    plugin = real_providers.wasm_config(config)
    assert "AWS_SESSION_TOKEN" in plugin["vm_config"]["environment_variables"]["host_env_keys"]
    bedrock = json.loads(plugin["configuration"]["value"])["providers"]["bedrock"]
    assert bedrock["keys"] == [{"id": bedrock["keys"][0]["id"], "value_env": "AWS_SECRET_ACCESS_KEY",
                                "access_key_id": KEYS["AWS_ACCESS_KEY_ID"], "session_token_env": "AWS_SESSION_TOKEN"}]
    assert token not in real_providers.dump(config)


@pytest.fixture(scope="module")
def failing(request, stand_ins, tmp_path_factory):
    """A stack whose OpenAI stand-in shows a certificate for another name,
    Anthropic's one from a CA Envoy does not trust, Gemini's an expired
    one; Mistral has no key."""
    ports = free_ports()
    tls = TlsStandIns()
    mock = ("127.0.0.1", ports["TG_MOCK_PORT"])
    for name, host in HOSTS.items():
        tls.serve(host, *stand_ins.ca.issue(host), mock)
    tls.serve(HOSTS["openai"], *stand_ins.ca.issue("api.wrong.example"), mock)
    tls.serve(HOSTS["anthropic"], *stand_ins.untrusted.issue(HOSTS["anthropic"]), mock)
    tls.serve(HOSTS["gemini"], *stand_ins.ca.issue(HOSTS["gemini"], expired=True), mock)
    request.addfinalizer(tls.stop)

    def patch(config: dict) -> None:
        stand_ins.point_at_stand_ins(config)
        for cluster in config["static_resources"]["clusters"]:
            if "transport_socket" in cluster:
                real_providers.socket_address(cluster)["port_value"] = tls.port

    # Distinct keys: any of them reaching a server would show in its bytes.
    keys = {**KEYS, "OPENAI_API_KEY": "sk-never-sent-openai", "ANTHROPIC_API_KEY": "sk-ant-never-sent",
            "GOOGLE_API_KEY": "gemini-never-sent", "MISTRAL_API_KEY": ""}
    stack = Stack(run_dir=tmp_path_factory.mktemp("failing"), ports=ports, envoy_concurrency=1,
                  authz_args=("--redis-timeout-ms", "100"), providers="real", envoy_patch=patch, env=keys)
    return started(request, stack), tls, keys


FAILURES = {
    "openai": "SAN_matcher,_certificate_SANs_are_[api.wrong.example]",
    "anthropic": "unable_to_get_local_issuer_certificate",
    "gemini": "certificate_has_expired",
}


@pytest.mark.parametrize("provider", list(FAILURES))
def test_a_certificate_that_fails_validation_is_a_502_naming_it_and_gets_no_request(failing, provider):
    stack, tls, keys = failing
    site = tls.sites[HOSTS[provider]]
    for stream in (False, True):
        status, headers, body = post(f"{stack.base_url}/chat/completions",
                                     {"model": CHAT_MODEL[provider], "messages": HI, "stream": stream},
                                     {"authorization": f"Bearer {DEMO_KEY}"})
        assert status == 502, body
        assert_openai_error(body, "upstream_tls_error")
        message = body["error"]["message"]
        assert message.startswith("TLS with the provider failed, so nothing was sent to it: ") and \
            "CERTIFICATE_VERIFY_FAILED" in message and FAILURES[provider] in message, message
    # Every handshake failed on the server's side too, and not one byte of a
    # request (headers, key, body) reached it.
    assert site.failures and not site.handshakes and site.request_bytes == 0, site
    assert not [v for k, v in keys.items() if v and k in SECRETS and v in stack.tail("envoy", 100000)]
    # The Messages route answers in Anthropic's shape.
    status, _, body = post(f"{stack.base_url}/messages",
                           {"model": CHAT_MODEL[provider], "max_tokens": 16, "messages": HI},
                           {"authorization": f"Bearer {DEMO_KEY}"})
    assert status == 502 and body["type"] == "error" and body["error"]["type"] == "api_error", body
    assert FAILURES[provider] in body["error"]["message"], body


def test_the_other_providers_of_that_stack_still_serve(failing):
    stack, tls, _ = failing
    client = openai.OpenAI(base_url=stack.base_url, api_key=DEMO_KEY, max_retries=0, timeout=20)
    for provider in ("azure", "bedrock"):
        assert client.chat.completions.create(model=CHAT_MODEL[provider], messages=HI).choices[0].message.content
        assert tls.sites[HOSTS[provider]].request_bytes > 0


def test_a_provider_without_a_key_is_left_out_with_an_error_naming_its_variable(failing):
    stack, _, _ = failing
    assert stack.left_out == {"mistral": "MISTRAL_API_KEY not set (environment or config/provider-keys.env)"}
    assert "mistral" not in stack.live
    want = ("Provider 'mistral' is not configured on this gateway: "
            "MISTRAL_API_KEY not set (environment or config/provider-keys.env)")
    status, _, body = post(f"{stack.base_url}/chat/completions", {"model": CHAT_MODEL["mistral"], "messages": HI},
                           {"authorization": f"Bearer {DEMO_KEY}"})
    assert status == 502, body
    assert_openai_error(body, "provider_not_configured")
    assert body["error"]["message"] == want
    status, _, body = post(f"{stack.base_url}/messages",
                           {"model": CHAT_MODEL["mistral"], "max_tokens": 16, "messages": HI},
                           {"authorization": f"Bearer {DEMO_KEY}"})
    assert (status, body["type"], body["error"]["message"]) == (502, "error", want), body
    models = openai.OpenAI(base_url=stack.base_url, api_key=DEMO_KEY, max_retries=0).models.list()
    ids = {m.id for m in models}
    assert CHAT_MODEL["openai"] in ids and not [i for i in ids if i.startswith("mistral/")]


def test_the_kubernetes_render_goes_through_the_same_tls_endpoints(request, real, stand_ins, tmp_path):
    """deploy/k8s/render_envoy.py's edge config, keys from TG_KEY_* as the
    Secret gives them: the same clusters reach the same stand-ins."""
    settings = yaml.safe_load(render_envoy.SETTINGS.read_text())
    settings["variants"]["base"]["authz_host"] = "localhost"
    settings["providers"]["azure"]["host"] = AZURE_HOST
    settings["providers"]["bedrock"]["access_key_ids"]["bedrock-1"] = "AKIDMOCKBEDROCK1"
    config = render_envoy.render(yaml.safe_load(render_envoy.SOURCE.read_text()), settings, "base")
    stats_port = free_ports()["TG_ADMIN_PORT"]
    for listener in config["static_resources"]["listeners"]:
        listener["address"]["socket_address"]["address"] = "127.0.0.1"
        if listener["name"] == "stats":
            listener["address"]["socket_address"]["port_value"] = stats_port
    stand_ins.point_at_stand_ins(config)
    path = tmp_path / "k8s-envoy.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    env = {render_envoy.key_env(k): v for k, v in {
        "openai-1": "mock-openai-key-1", "openai-2": "mock-openai-key-2", "anthropic-1": "mock-anthropic-key-1",
        "anthropic-2": "mock-anthropic-key-2", "mistral-1": "mock-mistral-key-1", "azure-1": "mock-azure-key-1",
        "gemini-1": "mock-gemini-key-1", "bedrock-1": "mock-bedrock-secret-1"}.items()}
    # Envoy, authz-service and Redis of its own; the providers are the
    # stand-ins in front of the `real` stack's mocks.
    stack = started(request, Stack(run_dir=tmp_path / "stack", ports=free_ports(), envoy_concurrency=1,
                                   authz_args=("--redis-timeout-ms", "100"), envoy_config=path, env=env,
                                   components=("redis", "authz", "envoy")))
    client = openai.OpenAI(base_url=stack.base_url, api_key=DEMO_KEY, max_retries=0, timeout=20)
    for provider, host in HOSTS.items():
        site = stand_ins.tls.sites[host]
        handshakes = len(site.handshakes)
        raw = client.chat.completions.with_raw_response.create(model=CHAT_MODEL[provider], messages=HI)
        assert raw.headers["x-tollgate-provider"] == provider and raw.parse().choices[0].message.content
        stream = client.chat.completions.create(model=CHAT_MODEL[provider], messages=HI, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert len(site.handshakes) > handshakes, host  # this Envoy's own TLS connection
