"""The Kubernetes Envoy config (deploy/k8s/base/envoy.yaml), run for real.

The config is rendered by deploy/k8s/render_envoy.py exactly as for the edge
Deployment, with only what a machine without a cluster needs changed: the
authz Service name becomes `localhost` (still resolved by DNS, STRICT_DNS),
every provider cluster points at mock-llm on `localhost` without TLS (so
HTTP/2 by prior knowledge instead of by ALPN), the listeners bind 127.0.0.1,
and the ports move to free ones. The same config with its TLS, against
stand-ins for the providers' real names: test_real_providers.py. The provider keys
reach Envoy only as TG_KEY_* environment variables, the way the Secret gives
them to the container.
"""
from __future__ import annotations

import importlib.util
import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest
import yaml

from helpers import HI, assert_openai_error, post
from stack import PROVIDER_KEYS, free_ports, http_get, read_env_file

ROOT = Path(__file__).resolve().parent.parent.parent
_spec = importlib.util.spec_from_file_location("render_envoy", ROOT / "deploy" / "k8s" / "render_envoy.py")
render_envoy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(render_envoy)

MOCK_DEFAULT_PORT = 9000  # envoy.yaml's mock-llm port; the harness moves it
HTTP_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"


def inline_keys() -> dict[str, str]:
    """TG_KEY_<ID> → the demo value of config/provider-keys.env (mock-llm accepts them)."""
    plugin = json.loads(render_envoy.wasm_config(yaml.safe_load(render_envoy.SOURCE.read_text()))["configuration"]["value"])
    demo = read_env_file(PROVIDER_KEYS)
    return {render_envoy.key_env(k["id"]): demo[k["value_env"]] for p in plugin["providers"].values() for k in p["keys"]}


def local_k8s_config(path: Path, stats_port: int, variant: str = "base") -> None:
    settings = yaml.safe_load(render_envoy.SETTINGS.read_text())
    var = settings["variants"][variant]
    var["authz_host"] = "localhost"
    var["gateway_port"] = settings["variants"]["base"]["gateway_port"]  # the port the harness moves
    config = render_envoy.render(yaml.safe_load(render_envoy.SOURCE.read_text()), settings, variant)
    for listener in config["static_resources"]["listeners"]:
        listener["address"]["socket_address"]["address"] = "127.0.0.1"
        if listener["name"] == "stats":
            listener["address"]["socket_address"]["port_value"] = stats_port
    for cluster in config["static_resources"]["clusters"]:
        if cluster.pop("transport_socket", None) is not None:  # a provider
            render_envoy.socket_address(cluster).update({"address": "localhost", "port_value": MOCK_DEFAULT_PORT})
            # Without TLS there is no ALPN: HTTP/2 with prior knowledge (h2c), as envoy.yaml.
            options = cluster["typed_extension_protocol_options"][HTTP_OPTIONS]
            if "auto_config" in options:
                options["explicit_http_config"] = {
                    "http2_protocol_options": options.pop("auto_config")["http2_protocol_options"]}
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def start_k8s_stack(make_stack, tmp_path: Path, variant: str = "base"):
    """(stack, stats URL): a harness stack with Envoy on the variant's Kubernetes config."""
    stats_port = free_ports()["TG_ADMIN_PORT"]
    config = tmp_path / f"k8s-{variant}-envoy.yaml"
    local_k8s_config(config, stats_port, variant)
    return make_stack(envoy_config=config, env=inline_keys()), f"http://127.0.0.1:{stats_port}"


@pytest.fixture
def k8s_stack(make_stack, tmp_path):
    return start_k8s_stack(make_stack, tmp_path)


def test_chats_go_through_authz_and_use_the_keys_from_the_environment(k8s_stack):
    stack, _ = k8s_stack
    client = openai.OpenAI(base_url=stack.base_url, api_key="tg-demo-key", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model="openai/gpt-4o-mini", messages=HI)
    assert raw.parse().choices[0].message.content
    assert raw.headers["x-tollgate-provider"] == "openai"
    assert raw.headers["x-ratelimit-limit-requests"]  # set by authz-service, reached over STRICT_DNS
    with urllib.request.urlopen(f"{stack.mock_url}/_mock/stats", timeout=5) as resp:
        by_key = json.loads(resp.read())["by_key"]
    # mock-llm accepted one of the keys Envoy read from TG_KEY_OPENAI_1 / _2.
    assert set(by_key) & {"openai-1", "openai-2"}, by_key

    status, _, body = post(f"{stack.base_url}/chat/completions", {"model": "openai/gpt-4o-mini", "messages": HI},
                           {"authorization": "Bearer tg-wrong"})
    assert status == 401
    assert_openai_error(body)


def test_the_stats_listener_serves_readiness_and_metrics_only(k8s_stack):
    stack, stats = k8s_stack
    status, body = http_get(f"{stats}/ready", timeout=5)
    assert (status, body.strip()) == (200, b"LIVE")
    status, body = http_get(f"{stats}/stats/prometheus", timeout=5)
    assert status == 200 and b"envoy_server_live" in body
    for path in ("/config_dump", "/clusters", "/stats", "/"):
        assert http_get(f"{stats}{path}", timeout=5)[0] == 404, path
    # The admin's mutating endpoints are not reachable through it either.
    req = urllib.request.Request(f"{stats}/quitquitquit", method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=5)
    assert err.value.code == 404
    assert http_get(f"{stack.admin_url}/ready", timeout=5)[0] == 200
    assert not stack.dead()


def test_the_sidecar_gives_back_the_heap_its_start_freed(make_stack, tmp_path):
    """The sidecar variant sets tcmalloc's soft heap limit
    (deploy/k8s/providers.yaml, heap_soft_limit_mib): V8's compile of the
    module at start goes above it, and tcmalloc gives the pages the compile
    freed back to the system at once. Without the limit it keeps them for five
    minutes and this count is 0."""
    stack, _ = start_k8s_stack(make_stack, tmp_path, "sidecar")
    config = yaml.safe_load((tmp_path / "k8s-sidecar-envoy.yaml").read_text())
    assert config["memory_allocator_manager"]["soft_memory_limit_bytes"] == 32 * 2**20
    client = openai.OpenAI(base_url=stack.base_url, api_key="tg-demo-key", max_retries=0)
    assert client.chat.completions.create(model="openai/gpt-4o-mini", messages=HI).choices[0].message.content
    status, body = http_get(f"{stack.admin_url}/memory/tcmalloc", timeout=5)
    assert status == 200
    released = re.findall(r"^HugePageAware: (\d+) pages .* released from soft malloc limit hits$", body.decode(), re.M)
    assert released, body.decode()[:2000]
    assert sum(map(int, released)) > 0
