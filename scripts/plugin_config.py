"""The Wasm filter's plugin config (the JSON inside envoy.yaml) as data.

    cfg = plugin_config(load_envoy())            # read it
    envoy_variant(out, plugin=lambda c: ...)     # a changed copy of envoy.yaml

`envoy_variant` parses envoy.yaml, lets the caller change the plugin config
(and, if asked, the rest of the Envoy config) as dicts, and writes the
result to `out`; the original file is never edited. Used by the tests, the
bench and scripts/check_config.py.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Callable

import yaml

ROOT = Path(__file__).resolve().parent.parent
ENVOY_YAML = ROOT / "envoy.yaml"
PLUGIN_NAME = "tollgate"


def load_envoy(path: Path = ENVOY_YAML) -> dict:
    return yaml.safe_load(Path(path).read_text())


def _listener_filters(envoy: dict):
    for listener in envoy.get("static_resources", {}).get("listeners", []):
        for chain in listener.get("filter_chains", []):
            for f in chain.get("filters", []):
                yield from f.get("typed_config", {}).get("http_filters", [])


def wasm_config(envoy: dict) -> dict:
    """The Wasm filter's `config` (name, vm_config, configuration...)."""
    for f in _listener_filters(envoy):
        cfg = f.get("typed_config", {}).get("config", {})
        if f.get("name") == "envoy.filters.http.wasm" and cfg.get("name") == PLUGIN_NAME:
            return cfg
    raise LookupError(f"envoy config has no Wasm filter named {PLUGIN_NAME!r}")


def plugin_config(envoy: dict) -> dict:
    """The plugin config, parsed."""
    return json.loads(wasm_config(envoy)["configuration"]["value"])


def set_plugin_config(envoy: dict, cfg: dict) -> None:
    wasm_config(envoy)["configuration"]["value"] = json.dumps(cfg, indent=2) + "\n"


def envoy_variant(out: Path, plugin: Callable[[dict], None] | None = None,
                  envoy: Callable[[dict], None] | None = None, src: Path = ENVOY_YAML) -> Path:
    """Writes envoy.yaml with `plugin(cfg)` applied to the plugin config and
    `envoy(doc)` to the whole Envoy config; returns `out`."""
    doc = copy.deepcopy(load_envoy(src))
    if plugin is not None:
        cfg = plugin_config(doc)
        plugin(cfg)
        set_plugin_config(doc, cfg)
    if envoy is not None:
        envoy(doc)
    out = Path(out)
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out
