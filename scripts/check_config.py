#!/usr/bin/env python3
"""Cross-checks the config files that describe one provider (`make check-config`).

The Wasm filter cannot see Envoy's clusters, so a typo in a provider's
`cluster` would reach clients as 404 "Unknown path". This refuses it before
the stack starts, together with what else ties the files together:

- every provider's `cluster` and the `usage_cluster` are clusters of envoy.yaml;
- every provider cluster points at a port of config/ports.env or at 443,
  and has no upstream `http_filters` of its own (they would replace the
  router's per-attempt filter: a retry would go out on the key that failed);
- for a provider served by mock-llm (its cluster points at TG_MOCK_PORT), the
  mock (config/mock-llm.yaml) has a provider of that name and kind, knows
  every model (Azure: every deployment) and accepts every key, given by
  `value` or by `value_env` (read from config/provider-keys.env or the
  environment; values are never printed).

Usage: check_config.py [envoy.yaml] [mock-llm.yaml]. Prints one line per
problem and exits 1, or prints "check-config: OK".
"""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plugin_config import ENVOY_YAML, ROOT, load_envoy, plugin_config  # noqa: E402
from stack import provider_key_env, read_ports  # noqa: E402


def cluster_ports(cluster: dict) -> list[int]:
    ports = []
    for ep in cluster.get("load_assignment", {}).get("endpoints", []):
        for lb in ep.get("lb_endpoints", []):
            addr = lb.get("endpoint", {}).get("address", {}).get("socket_address", {})
            if "port_value" in addr:
                ports.append(int(addr["port_value"]))
    return ports


def check(envoy: dict, mock: dict, ports: dict[str, int], secrets: dict[str, str] | None = None) -> list[str]:
    problems = []
    secrets = secrets or {}
    try:
        cfg = plugin_config(envoy)
    except (LookupError, KeyError, ValueError) as e:
        return [f"envoy.yaml: cannot read the tollgate plugin config: {e}"]
    clusters = {c["name"]: c for c in envoy.get("static_resources", {}).get("clusters", [])}
    known = ", ".join(sorted(clusters))
    usage = cfg.get("usage_cluster", "tollgate_authz_http")
    if usage and usage not in clusters:
        problems.append(f"plugin config: usage_cluster {usage!r} is not a cluster of envoy.yaml (clusters: {known})")
    mock_port = ports.get("TG_MOCK_PORT")
    mock_providers = (mock or {}).get("providers", {})
    for name, p in cfg.get("providers", {}).items():
        at = f"plugin config: providers.{name}"
        cluster = clusters.get(p.get("cluster"))
        if cluster is None:
            problems.append(f"{at}.cluster: {p.get('cluster')!r} is not a cluster of envoy.yaml (clusters: {known})")
            continue
        if any("http_filters" in o for o in cluster.get("typed_extension_protocol_options", {}).values()):
            problems.append(f"envoy.yaml: cluster {cluster['name']} has http_filters of its own, which replace "
                            "the router's per-attempt filter (tollgate_attempt): retries would keep the failed key")
        cports = cluster_ports(cluster)
        for port in cports:
            if port != 443 and port not in ports.values():
                problems.append(f"envoy.yaml: cluster {cluster['name']} points at port {port}, "
                                "which is not in config/ports.env (nor 443)")
        if mock_port not in cports:
            continue
        m = mock_providers.get(name)
        if m is None:
            problems.append(f"{at}: cluster {cluster['name']} points at mock-llm, which has no provider {name!r}")
            continue
        if m.get("kind") != p.get("kind"):
            problems.append(f"{at}.kind: {p.get('kind')!r}, but mock-llm's {name} is {m.get('kind')!r}")
        models = p.get("models", [])
        models = list(models) if isinstance(models, (list, dict)) else []
        deployments = p.get("deployments", {})
        for model in models:
            served = deployments.get(model, model)
            if served not in m.get("models", []):
                problems.append(f"{at}.models: mock-llm's {name} does not serve {served!r}")
        accepted = {(k.get("access_key_id"), k.get("secret_access_key") or k.get("key")) for k in m.get("keys", [])}
        for i, key in enumerate(p.get("keys", [])):
            value = key["value"] if "value" in key else secrets.get(key.get("value_env"))
            if value is None:
                continue  # a variable set only where Envoy runs
            if (key.get("access_key_id"), value) not in accepted:
                problems.append(f"{at}.keys[{i}] ({key.get('id')}): mock-llm's {name} does not accept this key")
    return problems


def main(argv: list[str]) -> int:
    envoy_path = Path(argv[0]) if argv else ENVOY_YAML
    mock_path = Path(argv[1]) if len(argv) > 1 else ROOT / "config" / "mock-llm.yaml"
    problems = check(load_envoy(envoy_path), yaml.safe_load(mock_path.read_text()), read_ports(),
                     provider_key_env())
    for p in problems:
        print(f"check-config: {p}", file=sys.stderr)
    if problems:
        return 1
    print(f"check-config: OK ({envoy_path.name}, {mock_path.name}, ports.env)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
