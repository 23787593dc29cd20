#!/usr/bin/env python3
"""Render the Kubernetes Envoy configs from the root envoy.yaml.

    render_envoy.py            write deploy/k8s/<variant>/envoy.yaml for every variant
    render_envoy.py --check    exit 1 when a committed file differs from a fresh render

envoy.yaml stays the only hand-written Envoy config: filters, limits, local
replies, timeouts and pools are copied unchanged. For Kubernetes this script
changes only what must differ there, as listed in deploy/k8s/providers.yaml:

- the gateway listener binds the variant's address and port (0.0.0.0:8080 at
  the edge, 127.0.0.1:18080 in a sidecar, off the application's own ports);
- a second listener on STATS_PORT serves only /ready and /stats/prometheus
  (proxied to the admin interface, which stays on 127.0.0.1): probes and
  Prometheus reach those two paths and nothing else of the admin API;
- each provider cluster resolves its real host by DNS on port 443 with TLS
  (SNI, the certificate verified against the image's CA bundle, HTTP/2 or
  HTTP/1.1 by ALPN), and the plugin sends that host as :authority: the same
  clusters `make run TG_PROVIDERS=real` renders, from the same code
  (scripts/real_providers.py);
- every provider key is read from `value_env: TG_KEY_<ID>` (as in envoy.yaml), listed
  in the VM's host_env_keys, so keys come from a Secret through the
  container's environment and never sit in a ConfigMap;
- the authz-service clusters resolve the authz Service name by DNS;
- a variant with `heap_soft_limit_mib` (the sidecar) sets tcmalloc's soft
  limit (`memory_allocator_manager.soft_memory_limit_bytes`).
"""
from __future__ import annotations

import argparse
import copy
import difflib
import json
import re
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
# The provider clusters and plugin entries, shared with `make run TG_PROVIDERS=real`.
from real_providers import (  # noqa: E402
    CA_BUNDLE, SETTINGS, RenderError, real_cluster, real_plugin_provider, settings_for, socket_address, wasm_config,
)

SOURCE = ROOT / "envoy.yaml"
STATS_PORT = 9902
ADMIN_CLUSTER = "envoy_admin"
AUTHZ_CLUSTERS = ("tollgate_authz", "tollgate_authz_http")
__all__ = ["CA_BUNDLE", "RenderError", "render", "render_text", "socket_address", "wasm_config"]


def key_env(key_id: str) -> str:
    """Environment variable (and Secret key) holding a provider key's secret."""
    return "TG_KEY_" + re.sub(r"[^A-Z0-9]", "_", key_id.upper())


def stats_listener() -> dict:
    """Listener exposing only Envoy's readiness and Prometheus endpoints."""
    to_admin = {"cluster": ADMIN_CLUSTER, "timeout": "5s"}
    return {
        "name": "stats",
        "address": {"socket_address": {"address": "0.0.0.0", "port_value": STATS_PORT}},
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network."
                         "http_connection_manager.v3.HttpConnectionManager",
                "stat_prefix": "stats",
                "route_config": {"virtual_hosts": [{
                    "name": "stats",
                    "domains": ["*"],
                    "routes": [
                        {"match": {"path": "/ready"}, "route": to_admin},
                        {"match": {"path": "/stats/prometheus"}, "route": to_admin},
                        {"match": {"prefix": "/"}, "direct_response": {"status": 404}},
                    ],
                }]},
                "http_filters": [{
                    "name": "envoy.filters.http.router",
                    "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
                }],
            },
        }]}],
    }


def static_cluster(name: str, address: str, port: int) -> dict:
    return {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [{"endpoint": {
            "address": {"socket_address": {"address": address, "port_value": port}}}}]}]},
    }


def drop_demo_mcp(config: dict) -> None:
    """The demo MCP server of envoy.yaml (tests/mcp_server.py on loopback)
    is not deployed: its routes, cluster and credential are left out. The
    MCP filter, the `/mcp/` fallback (404) and the JSON-RPC error replies
    stay, ready for a deployment's own MCP servers (README, "MCP servers
    behind the gate")."""
    resources = config["static_resources"]
    demo = {c["name"] for c in resources["clusters"] if c["name"].startswith("mcp_")}
    resources["clusters"] = [c for c in resources["clusters"] if c["name"] not in demo]
    resources["secrets"] = [s for s in resources.get("secrets", []) if not s["name"].startswith("mcp_")]
    for listener in resources["listeners"]:
        for chain in listener.get("filter_chains", []):
            for f in chain.get("filters", []):
                for vh in f.get("typed_config", {}).get("route_config", {}).get("virtual_hosts", []):
                    vh["routes"] = [r for r in vh["routes"] if r.get("route", {}).get("cluster") not in demo]


def render(source: dict, settings: dict, variant: str) -> dict:
    config = copy.deepcopy(source)
    var = settings["variants"][variant]
    providers_settings = settings["providers"]
    resources = config["static_resources"]

    listeners = resources["listeners"]
    gateway = next(lis for lis in listeners if lis["name"] == "gateway")
    gateway["address"]["socket_address"]["address"] = var["gateway_address"]
    gateway["address"]["socket_address"]["port_value"] = var["gateway_port"]

    listeners.append(stats_listener())

    wasm = wasm_config(config)
    plugin = json.loads(wasm["configuration"]["value"])
    provider_clusters = {p["cluster"]: name for name, p in plugin["providers"].items()}
    env_keys = []
    for name, provider in plugin["providers"].items():
        ps = settings_for(name, settings)
        real_plugin_provider(provider, ps["host"], ps)
        for key in provider["keys"]:
            if "value" not in key and key.get("value_env") != key_env(key["id"]):
                raise RenderError(f"provider {name!r} key {key['id']!r}: expected value_env {key_env(key['id'])}")
            key.pop("value", None)
            key["value_env"] = key_env(key["id"])
            env_keys.append(key["value_env"])
            if "access_key_id" in key:
                try:
                    key["access_key_id"] = ps["access_key_ids"][key["id"]]
                except KeyError:
                    raise RenderError(f"provider {name!r} key {key['id']!r}: no access_key_ids entry") from None
    unknown = set(providers_settings) - set(plugin["providers"])
    if unknown:
        raise RenderError(f"{SETTINGS.relative_to(ROOT)} names providers envoy.yaml lacks: {sorted(unknown)}")
    wasm["configuration"]["value"] = json.dumps(plugin, indent=2) + "\n"
    # In place: the router's per-attempt filter shares this VM config.
    wasm["vm_config"]["environment_variables"]["host_env_keys"] = env_keys

    drop_demo_mcp(config)
    clusters = resources["clusters"]
    for cluster in clusters:
        name = cluster["name"]
        if name in provider_clusters:
            # Verified against the image's CA bundle (scripts/real_providers.py).
            real_cluster(cluster, providers_settings[provider_clusters[name]]["host"])
        elif name in AUTHZ_CLUSTERS:
            cluster["type"] = "STRICT_DNS"
            cluster["dns_lookup_family"] = "V4_PREFERRED"
            socket_address(cluster)["address"] = var["authz_host"]
        else:
            raise RenderError(f"envoy.yaml cluster {name!r} is neither a provider's nor authz-service's")
    clusters.append(static_cluster(ADMIN_CLUSTER, "127.0.0.1", config["admin"]["address"]["socket_address"]["port_value"]))
    limit = var.get("heap_soft_limit_mib")
    if limit is not None:
        if type(limit) is not int or limit <= 0:
            raise RenderError(f"variant {variant!r}: heap_soft_limit_mib must be a positive whole number, not {limit!r}")
        config.setdefault("memory_allocator_manager", {})["soft_memory_limit_bytes"] = limit * 2**20
    return config


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)
_Dumper.ignore_aliases = lambda *_: True


def render_text(variant: str) -> str:
    source = yaml.safe_load(SOURCE.read_text())
    settings = yaml.safe_load(SETTINGS.read_text())
    config = render(source, settings, variant)
    header = (f"# GENERATED by deploy/k8s/render_envoy.py from envoy.yaml and deploy/k8s/providers.yaml\n"
              f"# (variant {variant!r}). Do not edit: change those files and run `make k8s-config`.\n")
    return header + yaml.dump(config, Dumper=_Dumper, sort_keys=False, width=120)


def variants() -> list[str]:
    return list(yaml.safe_load(SETTINGS.read_text())["variants"])


def output(variant: str) -> Path:
    return HERE / variant / "envoy.yaml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail when a committed file is stale")
    args = parser.parse_args()
    stale = 0
    for variant in variants():
        try:
            text = render_text(variant)
        except (RenderError, KeyError) as err:
            print(f"render_envoy: {err}", file=sys.stderr)
            return 1
        path = output(variant)
        rel = path.relative_to(ROOT)
        old = path.read_text() if path.exists() else ""
        if args.check:
            if old != text:
                stale += 1
                diff = difflib.unified_diff(old.splitlines(), text.splitlines(), str(rel), "fresh render", lineterm="")
                print("\n".join(list(diff)[:40]), file=sys.stderr)
                print(f"render_envoy: {rel} is stale: run `make k8s-config` and commit it", file=sys.stderr)
        elif old != text:
            path.write_text(text)
            print(f"render_envoy: wrote {rel}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
