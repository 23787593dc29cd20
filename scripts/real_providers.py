"""Provider clusters for the real providers, read from deploy/k8s/providers.yaml.

One implementation for both renders of envoy.yaml against the real hosts:

- deploy/k8s/render_envoy.py: the Kubernetes configs (keys from the Secret,
  `TG_KEY_<ID>`);
- `make run TG_PROVIDERS=real` / `make up` (scripts/stack.py, `render_local`):
  keys from the variables users already have (`key_env` in providers.yaml,
  e.g. OPENAI_API_KEY), set in the environment or in config/provider-keys.env.

Each provider cluster becomes the same thing in both (`real_cluster`):
LOGICAL_DNS to the provider's host on port 443; TLS with SNI = the host and
the certificate verified against the system CA bundle, its SAN = the host;
HTTP/2 or HTTP/1.1 as the provider's ALPN answer picks (`auto_config`,
offering h2 then http/1.1), keeping envoy.yaml's HTTP/2 settings, pools,
queues and per-attempt filter. The plugin sends the host as `:authority`,
the provider's real `base_path` (`real_plugin_provider`) and none of
mock-llm's `x-mock-*` test headers.

    config, live, left_out = render_local(load_yaml(ENVOY_YAML), load_yaml(SETTINGS), env)

`render_local` leaves out a provider without a key: it keeps the provider
but marks it `disabled` with the variable to set, so its models answer a
502 `provider_not_configured` naming it (in the OpenAI or Anthropic shape of
the route). No key value is ever written: the rendered file names the
variables (`value_env`) and Envoy reads them from its environment. Bedrock's
AWS_ACCESS_KEY_ID (an identifier, not a secret) and Azure's endpoint host
are written in.
"""
from __future__ import annotations

import copy
import json
import urllib.parse
from pathlib import Path
from typing import Mapping

import yaml

ROOT = Path(__file__).resolve().parent.parent
ENVOY_YAML = ROOT / "envoy.yaml"
SETTINGS = ROOT / "deploy" / "k8s" / "providers.yaml"
# The system CA bundle (Debian and the Envoy image; also Ubuntu's).
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
WASM_FILTER = "envoy.filters.http.wasm"
HTTP_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
# Where a user keeps keys for `make run` (also the mock's demo keys).
KEYS_FILE = "config/provider-keys.env"


class RenderError(Exception):
    pass


def load_yaml(path: Path) -> dict:
    return yaml.safe_load(Path(path).read_text())


def socket_address(cluster: dict) -> dict:
    return cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]


def wasm_config(config: dict) -> dict:
    """The route-level Wasm filter's `config` in the gateway listener."""
    gateway = next(lis for lis in config["static_resources"]["listeners"] if lis["name"] == "gateway")
    for f in gateway["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"]:
        if f["name"] == WASM_FILTER:
            return f["typed_config"]["config"]
    raise RenderError("envoy.yaml: the gateway listener has no Wasm filter")


def settings_for(name: str, settings: dict) -> dict:
    try:
        return settings["providers"][name]
    except KeyError:
        raise RenderError(f"provider {name!r} of envoy.yaml is not in "
                          f"{SETTINGS.relative_to(ROOT)}") from None


def real_plugin_provider(provider: dict, host: str, ps: dict) -> None:
    """The plugin's provider entry for the real endpoint: `host` as the
    :authority, the real base_path, no mock-llm test headers."""
    provider["host"] = host
    # mock-llm's fault headers mean nothing to a real provider.
    forward = [h for h in provider.pop("forward_headers", []) if not h.startswith("x-mock-")]
    if forward:
        provider["forward_headers"] = forward
    if "base_path" in ps:
        provider["base_path"] = ps["base_path"]


def tls_socket(host: str, ca_file: str = CA_BUNDLE) -> dict:
    """Upstream TLS to `host`: SNI, certificate chain verified against
    `ca_file`, SAN matched exactly, ALPN offering h2 then http/1.1."""
    return {
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "sni": host,
            "common_tls_context": {
                "alpn_protocols": ["h2", "http/1.1"],
                "validation_context": {
                    "trusted_ca": {"filename": ca_file},
                    "match_typed_subject_alt_names": [{"san_type": "DNS", "matcher": {"exact": host}}],
                },
            },
        },
    }


def real_cluster(cluster: dict, host: str, port: int = 443, ca_file: str = CA_BUNDLE) -> None:
    """Turn an envoy.yaml provider cluster (STATIC, mock-llm, HTTP/2 prior
    knowledge) into the real provider's: DNS, TLS, protocol by ALPN."""
    cluster["type"] = "LOGICAL_DNS"
    cluster["dns_lookup_family"] = "V4_PREFERRED"
    socket_address(cluster).update({"address": host, "port_value": port})
    cluster["transport_socket"] = tls_socket(host, ca_file)
    options = cluster["typed_extension_protocol_options"][HTTP_OPTIONS]
    # envoy.yaml's provider clusters share this object (a YAML anchor):
    # change it in place, the same for each cluster.
    explicit = options.get("explicit_http_config")
    if explicit is not None:
        # The same HTTP/2 (and HTTP/1.1) settings whichever ALPN picks, in
        # the place of the explicit choice (the values are not copied).
        auto = {
            "http_protocol_options": explicit.get("http_protocol_options", {}),
            "http2_protocol_options": explicit.get("http2_protocol_options", {}),
        }
        items = [("auto_config", auto) if k == "explicit_http_config" else (k, v) for k, v in options.items()]
        options.clear()
        options.update(items)


# --- the local render (make run TG_PROVIDERS=real) ----------------------------

def _first_set(env: Mapping[str, str], names) -> str | None:
    return next((n for n in names if env.get(n)), None)


def _either(names) -> str:
    return " or ".join(names)


def azure_host(endpoint: str) -> str:
    """The host of AZURE_OPENAI_ENDPOINT (https://NAME.openai.azure.com/)."""
    url = urllib.parse.urlsplit(endpoint.strip())
    if url.scheme != "https" or not url.hostname or url.port not in (None, 443):
        raise ValueError("AZURE_OPENAI_ENDPOINT must look like https://YOUR-RESOURCE.openai.azure.com/")
    return url.hostname


def local_provider(name: str, provider: dict, ps: dict, env: Mapping[str, str]) -> tuple[str | None, str, list[str]]:
    """Decide one provider of the local render: (host, why it is left out or
    "", the variables Envoy must pass to the VM). Edits the plugin entry."""
    names = ps.get("key_env") or []
    if not names:
        return None, f"{SETTINGS.relative_to(ROOT)} names no key variable for it (key_env)", []
    var = _first_set(env, names)
    host = ps["host"]
    missing = []
    if var is None:
        missing.append(_either(names))
    kind = provider["kind"]
    if kind == "azure":
        if env.get("AZURE_OPENAI_ENDPOINT"):
            try:
                host = azure_host(env["AZURE_OPENAI_ENDPOINT"])
            except ValueError as err:
                return None, str(err), []
        else:
            missing.append("AZURE_OPENAI_ENDPOINT")
    if kind == "bedrock":
        if not env.get("AWS_ACCESS_KEY_ID"):
            missing.append("AWS_ACCESS_KEY_ID")
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
        if region:
            provider["region"] = region
            host = f"bedrock-runtime.{region}.amazonaws.com"
    if missing:
        return host, f"{' and '.join(missing)} not set (environment or {KEYS_FILE})", []
    first = provider["keys"][0]
    key = {"id": first["id"], "value_env": var}
    variables = [var]
    if kind == "bedrock":
        key["access_key_id"] = env["AWS_ACCESS_KEY_ID"]
        if env.get("AWS_SESSION_TOKEN"):
            # Temporary credentials: the token signs every request
            # (x-amz-security-token); `make rotate-keys` applies new ones.
            key["session_token_env"] = "AWS_SESSION_TOKEN"
            variables.append("AWS_SESSION_TOKEN")
    provider["keys"] = [key]
    return host, "", variables


def render_local(source: dict, settings: dict, env: Mapping[str, str]) -> tuple[dict, dict[str, str], dict[str, str]]:
    """envoy.yaml for the real providers, keys from `env` (the environment
    with config/provider-keys.env). Returns (config, live: provider → the
    variable its key comes from, left_out: provider → what to set)."""
    config = copy.deepcopy(source)
    wasm = wasm_config(config)
    plugin = json.loads(wasm["configuration"]["value"])
    live, left_out, env_keys, hosts = {}, {}, [], {}
    for name, provider in plugin["providers"].items():
        ps = settings_for(name, settings)
        host, why, variables = local_provider(name, provider, ps, env)
        host = host or ps["host"]
        real_plugin_provider(provider, host, ps)
        hosts[provider["cluster"]] = host
        if why:
            provider.pop("keys", None)
            provider["disabled"] = why
            left_out[name] = why
        else:
            live[name] = variables[0]
            env_keys.extend(v for v in variables if v not in env_keys)
    if not live:
        raise RenderError("no provider has a key: set at least one of "
                          + ", ".join(_either(settings_for(n, settings).get("key_env") or [n])
                                      for n in plugin["providers"])
                          + f" (environment or {KEYS_FILE})")
    wasm["configuration"]["value"] = json.dumps(plugin, indent=2) + "\n"
    # In place: the router's per-attempt filter shares this VM config.
    wasm["vm_config"]["environment_variables"]["host_env_keys"] = env_keys
    for cluster in config["static_resources"]["clusters"]:
        if cluster["name"] in hosts:
            real_cluster(cluster, hosts[cluster["name"]])
    return config, live, left_out


def dump(config: dict) -> str:
    return yaml.safe_dump(config, sort_keys=False, width=120)
