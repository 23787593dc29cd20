"""The plugin config against the rest of the config (`make check-config`):
a provider's cluster that envoy.yaml lacks, a key or model mock-llm does not
know, a port outside config/ports.env are refused before anything starts,
each with a message naming the field. Also checks that the helper tests and
bench use to change the plugin config round-trips it unchanged.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from plugin_config import ROOT, envoy_variant, load_envoy, plugin_config

CHECK = [sys.executable, str(ROOT / "scripts" / "check_config.py")]


def run_check(path) -> subprocess.CompletedProcess:
    return subprocess.run([*CHECK, str(path)], capture_output=True, text=True, timeout=60)


def test_shipped_config_passes():
    r = run_check(ROOT / "envoy.yaml")
    assert r.returncode == 0, r.stderr
    assert "check-config: OK" in r.stdout


def test_variant_round_trips_the_plugin_config(tmp_path):
    out = envoy_variant(tmp_path / "same.yaml", plugin=lambda cfg: None)
    assert plugin_config(load_envoy(out)) == plugin_config(load_envoy())
    assert run_check(out).returncode == 0


def _set_cluster(cfg):
    cfg["providers"]["anthropic"]["cluster"] = "antropic"


def _set_usage_cluster(cfg):
    cfg["usage_cluster"] = "authz_http"


def _unknown_key(cfg):
    cfg["providers"]["openai"]["keys"][1]["value"] = "sk-not-the-mock-key"


def _unknown_model(cfg):
    cfg["providers"]["gemini"]["models"]["gemini-9"] = {}


def _wrong_bedrock_secret(cfg):
    cfg["providers"]["bedrock"]["keys"][0]["value"] = "wrong-secret"


@pytest.mark.parametrize("edit,message", [
    (_set_cluster, "providers.anthropic.cluster: 'antropic' is not a cluster of envoy.yaml"),
    (_set_usage_cluster, "usage_cluster 'authz_http' is not a cluster of envoy.yaml"),
    (_unknown_key, "providers.openai.keys[1] (openai-2): mock-llm's openai does not accept this key"),
    (_unknown_model, "providers.gemini.models: mock-llm's gemini does not serve 'gemini-9'"),
    (_wrong_bedrock_secret, "providers.bedrock.keys[0] (bedrock-1): mock-llm's bedrock does not accept this key"),
])
def test_mismatch_is_refused_with_a_clear_message(tmp_path, edit, message):
    r = run_check(envoy_variant(tmp_path / "bad.yaml", plugin=edit))
    assert r.returncode == 1
    assert message in r.stderr, r.stderr
    assert "mock-openai-key" not in r.stderr + r.stdout, "key values are never printed"


def test_cluster_port_outside_ports_env_is_refused(tmp_path):
    def move_gemini(doc):
        for c in doc["static_resources"]["clusters"]:
            if c["name"] == "gemini":
                c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"][
                    "socket_address"]["port_value"] = 9999
    r = run_check(envoy_variant(tmp_path / "port.yaml", envoy=move_gemini))
    assert r.returncode == 1
    assert "cluster gemini points at port 9999, which is not in config/ports.env" in r.stderr, r.stderr


def test_a_provider_cluster_with_upstream_filters_of_its_own_is_refused(tmp_path):
    """A cluster's http_filters replace the router's upstream filters, the
    per-attempt filter among them."""
    def own_filters(doc):
        for c in doc["static_resources"]["clusters"]:
            if c["name"] == "mistral":
                options = dict(c["typed_extension_protocol_options"])  # the clusters share one dict
                http = dict(options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"])
                http["http_filters"] = [{"name": "envoy.filters.http.upstream_codec", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec"}}]
                options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"] = http
                c["typed_extension_protocol_options"] = options
    r = run_check(envoy_variant(tmp_path / "filters.yaml", envoy=own_filters))
    assert r.returncode == 1
    assert "cluster mistral has http_filters of its own, which replace the router's per-attempt filter" in r.stderr
    assert "cluster openai" not in r.stderr, r.stderr
