"""The offline deployment checks catch what they claim to (`make k8s-check`,
`make dashboard-check`): each case breaks one thing in the real rendered
manifests, config or dashboard and expects that exact problem."""
from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def load(name: str, path: Path):
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


k8s = load("k8s_check", ROOT / "deploy" / "k8s" / "check.py")
render = load("render_envoy", ROOT / "deploy" / "k8s" / "render_envoy.py")
dashboard = load("dashboard_check", ROOT / "deploy" / "grafana" / "check.py")


@pytest.fixture(scope="module")
def edge() -> list[dict]:
    return k8s.kustomize_build(ROOT / "deploy" / "k8s" / "edge")


@pytest.fixture(scope="module")
def secret_keys() -> set[str]:
    return set(yaml.safe_load(k8s.EXAMPLE_SECRET.read_text())["stringData"])


def find(docs: list[dict], kind: str, name: str) -> dict:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def container(docs: list[dict], kind: str, name: str) -> dict:
    return k8s.pod_spec(find(docs, kind, name))["containers"][0]


def problems(docs: list[dict], secret_keys: set[str]) -> list[str]:
    checker = k8s.Checker()
    checker.references("edge", docs, "base", secret_keys)
    return checker.problems


def test_the_shipped_edge_manifests_pass(edge, secret_keys):
    assert problems(edge, secret_keys) == []


def drop_env_from(docs):
    del container(docs, "Deployment", "tollgate-gateway")["envFrom"]


def drop_glibc_tunable(docs):
    del container(docs, "Deployment", "tollgate-gateway")["env"]


def low_memory_limit(docs):
    container(docs, "Deployment", "tollgate-gateway")["resources"]["limits"]["memory"] = "2Gi"


def redis_without_fsync(docs):
    c = container(docs, "StatefulSet", "tollgate-redis")
    c["args"] = [a for a in c["args"] if a not in ("--appendfsync", "everysec")]


def replicas_beside_hpa(docs):
    find(docs, "Deployment", "tollgate-authz")["spec"]["replicas"] = 3


def policy_on_unknown_port(docs):
    find(docs, "NetworkPolicy", "tollgate-redis")["spec"]["ingress"][0]["ports"][0]["port"] = "nope"


def service_without_pods(docs):
    find(docs, "Service", "tollgate-authz")["spec"]["selector"] = {"app.kubernetes.io/name": "nobody"}


def no_pdb_for_gateway(docs):
    docs.remove(find(docs, "PodDisruptionBudget", "tollgate-gateway"))


def no_readiness_probe(docs):
    del container(docs, "Deployment", "tollgate-authz")["readinessProbe"]


def stale_envoy_config(docs):
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("tollgate-envoy"))
    cm["data"]["envoy.yaml"] = cm["data"]["envoy.yaml"].replace("idle_timeout: 300s", "idle_timeout: 301s")


def unknown_image_tag(docs):
    container(docs, "Deployment", "tollgate-authz")["image"] = "tollgate/authz-service:latest"


@pytest.mark.parametrize("breakage, expected", [
    (drop_env_from, "gets no provider keys"),
    (drop_glibc_tunable, "lacks the env GLIBC_TUNABLES=glibc.pthread.rseq=0"),
    (low_memory_limit, "is not above the overload manager's heap"),
    (redis_without_fsync, "missing --appendfsync everysec"),
    (replicas_beside_hpa, "sets replicas, which its autoscaler owns"),
    (policy_on_unknown_port, "NetworkPolicy/tollgate-redis: no port named nope"),
    (service_without_pods, "Service/tollgate-authz: selects no pod"),
    (no_pdb_for_gateway, "Deployment/tollgate-gateway: no PodDisruptionBudget"),
    (no_readiness_probe, "container authz: no readinessProbe"),
    (stale_envoy_config, "is not the 'base' render of envoy.yaml"),
    (unknown_image_tag, "should be tagged with the workspace version"),
])
def test_each_broken_manifest_is_reported(edge, secret_keys, breakage, expected):
    docs = copy.deepcopy(edge)
    breakage(docs)
    found = problems(docs, secret_keys)
    assert any(expected in p for p in found), found


def test_a_missing_provider_key_in_the_example_secret_is_reported(edge, secret_keys):
    found = problems(edge, secret_keys - {"TG_KEY_GEMINI_1"})
    assert any("lacks provider keys the config reads: ['TG_KEY_GEMINI_1']" in p for p in found), found


def test_strict_schemas_refuse_an_unknown_field(edge):
    docs = copy.deepcopy(edge)
    container(docs, "Deployment", "tollgate-gateway")["imagePullPolcy"] = "Always"
    checker = k8s.Checker()
    checker.schemas("edge", [find(docs, "Deployment", "tollgate-gateway")])
    assert any("'imagePullPolcy' was unexpected" in p for p in checker.problems), checker.problems


def test_render_refuses_a_provider_without_kubernetes_settings():
    source = yaml.safe_load(render.SOURCE.read_text())
    settings = yaml.safe_load(render.SETTINGS.read_text())
    del settings["providers"]["gemini"]
    with pytest.raises(render.RenderError, match="provider 'gemini' of envoy.yaml is not in deploy/k8s/providers.yaml"):
        render.render(source, settings, "base")


@pytest.mark.parametrize("limit", ["32Mi", 0, True])
def test_render_refuses_a_heap_limit_that_is_not_a_positive_number(limit):
    settings = yaml.safe_load(render.SETTINGS.read_text())
    settings["variants"]["sidecar"]["heap_soft_limit_mib"] = limit
    with pytest.raises(render.RenderError, match="heap_soft_limit_mib must be a positive whole number"):
        render.render(yaml.safe_load(render.SOURCE.read_text()), settings, "sidecar")


def test_render_moves_every_inline_key_to_the_environment():
    config = render.render(yaml.safe_load(render.SOURCE.read_text()), yaml.safe_load(render.SETTINGS.read_text()), "base")
    text = yaml.safe_dump(config)
    assert "mock-openai-key" not in text and "mock-bedrock-secret" not in text
    wasm = render.wasm_config(config)
    assert "TG_KEY_OPENAI_1" in wasm["vm_config"]["environment_variables"]["host_env_keys"]


def test_dashboard_check_reports_a_panel_without_a_query():
    broken = copy.deepcopy(dashboard.load_dashboard())
    dashboard.panels(broken)[0]["targets"] = []
    found: list[str] = []
    dashboard.check_dashboard(broken, found)
    assert any("every panel needs a PromQL query" in p for p in found), found
