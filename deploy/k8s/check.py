#!/usr/bin/env python3
"""Offline check of the Kubernetes manifests (`make k8s-check`; no cluster here).

1. The generated Envoy configs are up to date with envoy.yaml (render_envoy.py --check).
2. Each generated config passes `envoy --mode validate` with the built Wasm
   filter, which parses the plugin config and reads every value_env key.
3. Every variant renders with kustomize, and every object (plus the example
   Secret) validates against the Kubernetes JSON schemas of the oldest and
   newest supported versions (kubernetes-validate, strict: unknown fields fail).
4. Cross-references the schemas cannot see: Services, PDBs, HPAs and
   NetworkPolicies select existing pods and ports (and autoscaled workloads
   leave replicas to the HPA); every volume and Secret is defined; each container
   has probes and resource requests; Envoy's memory limit is above its
   overload-manager heap and it gets `make run`'s glibc tunable; the example
   Secret names every provider key; Redis persists to a PVC; images are the
   documented ones; the policy validates.

Exit 1 with one line per problem.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import sys
from pathlib import Path

import kubernetes_validate
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
import render_envoy  # noqa: E402  (puts scripts/ on the path)
from stack import ENVOY_GLIBC_TUNABLE, has_envoy_tunable  # noqa: E402

# The Kubernetes versions validated against: native sidecars need 1.29+.
K8S_VERSIONS = ("1.30", "1.37")
# Each kustomization a user applies → the variant of the Envoy config it carries.
ENTRY_POINTS = {"edge": "base", "edge-external-redis": "base", "sidecar-example": "sidecar"}
PROVIDER_KEYS_SECRET = "tollgate-provider-keys"
EXAMPLE_SECRET = HERE / "provider-keys.example.yaml"
# Image name → the Dockerfile that builds it (tagged with the workspace version).
OWN_IMAGES = {"tollgate/authz-service": "authz-service/Dockerfile", "tollgate/wasm-filter": "filters/Dockerfile"}
WORKLOADS = ("Deployment", "StatefulSet")
# Where Envoy and authz-service read the usage token (a mounted Secret).
USAGE_TOKEN_PATH = "/etc/tollgate/usage/token"


def tool(name: str) -> str | None:
    local = ROOT / ".tools" / "bin" / name
    return str(local) if local.exists() else shutil.which(name)


def workspace_version() -> str:
    text = (ROOT / "Cargo.toml").read_text()
    return re.search(r'^\[workspace\.package\][^\[]*?^version\s*=\s*"([^"]+)"', text, re.M | re.S).group(1)


def compose_images() -> set[str]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return {s["image"] for s in compose["services"].values() if "image" in s}


def kustomize_build(path: Path) -> list[dict]:
    kustomize = tool("kustomize")
    if kustomize is None:
        raise RuntimeError("kustomize not found; run `make bootstrap`")
    run = subprocess.run([kustomize, "build", str(path)], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"kustomize build {path.relative_to(ROOT)}: {run.stderr.strip()}")
    return [d for d in yaml.safe_load_all(run.stdout) if d]


def pod_spec(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]


def containers(spec: dict) -> list[dict]:
    """Containers that run for the pod's life: regular ones and native sidecars."""
    sidecars = [c for c in spec.get("initContainers", []) if c.get("restartPolicy") == "Always"]
    return spec["containers"] + sidecars


def selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def quantity_bytes(q: str) -> float:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 1e3, "M": 1e6, "G": 1e9}
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMG]i?)?", str(q))
    if not m:
        raise ValueError(f"unsupported quantity {q!r}")
    return float(m.group(1)) * units.get(m.group(2) or "", 1)


class Checker:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def problem(self, where: str, msg: str) -> None:
        self.problems.append(f"{where}: {msg}")

    # -- 3. schemas ----------------------------------------------------------
    def schemas(self, where: str, docs: list[dict]) -> None:
        for doc in docs:
            name = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
            for version in K8S_VERSIONS:
                try:
                    kubernetes_validate.validate(doc, version, strict=True)
                except kubernetes_validate.ValidationError as err:
                    path = ".".join(str(p) for p in err.path)
                    self.problem(where, f"{name} (Kubernetes {version}) {path}: {err.message}")
                except kubernetes_validate.SchemaNotFoundError as err:
                    self.problem(where, f"{name}: {err.message}")

    # -- 4. cross-references --------------------------------------------------
    def references(self, where: str, docs: list[dict], variant: str, secret_keys: set[str]) -> None:
        by_kind: dict[str, dict[str, dict]] = {}
        for doc in docs:
            by_kind.setdefault(doc["kind"], {})[doc["metadata"]["name"]] = doc
        workloads = [d for d in docs if d["kind"] in WORKLOADS]
        version = workspace_version()
        upstream_images = compose_images()

        for w in workloads:
            wname = f"{w['kind']}/{w['metadata']['name']}"
            spec = pod_spec(w)
            if not selects(w["spec"]["selector"]["matchLabels"], w["spec"]["template"]["metadata"]["labels"]):
                self.problem(where, f"{wname}: selector does not match its pod labels")
            volumes = {v["name"]: v for v in spec.get("volumes", [])}
            claims = {c["metadata"]["name"] for c in w["spec"].get("volumeClaimTemplates", [])}
            for c in spec.get("initContainers", []) + spec["containers"]:
                cname = f"{wname} container {c['name']}"
                self.image(where, cname, c["image"], version, upstream_images)
                requests = c.get("resources", {}).get("requests", {})
                if not {"cpu", "memory"} <= requests.keys():
                    self.problem(where, f"{cname}: needs cpu and memory requests")
                if "memory" not in c.get("resources", {}).get("limits", {}):
                    self.problem(where, f"{cname}: needs a memory limit")
                for mount in c.get("volumeMounts", []):
                    if mount["name"] not in volumes and mount["name"] not in claims:
                        self.problem(where, f"{cname}: mounts undefined volume {mount['name']}")
                for env in c.get("env", []):
                    if "value" in env and "valueFrom" in env:
                        self.problem(where, f"{cname}: env {env['name']} has both value and valueFrom")
                for src in c.get("envFrom", []):
                    if src.get("secretRef", {}).get("name") != PROVIDER_KEYS_SECRET:
                        self.problem(where, f"{cname}: envFrom only takes the provider keys Secret")
            for c in containers(spec):
                cname = f"{wname} container {c['name']}"
                for probe in ("readinessProbe", "livenessProbe"):
                    if probe not in c:
                        self.problem(where, f"{cname}: no {probe}")
            for vname, vol in volumes.items():
                if "configMap" in vol and vol["configMap"]["name"] not in by_kind.get("ConfigMap", {}):
                    self.problem(where, f"{wname}: volume {vname} names a ConfigMap that is not rendered")
            for c in containers(spec):
                if c["image"].startswith("envoyproxy/envoy:"):
                    self.envoy(where, f"{wname} container {c['name']}", c, volumes, by_kind, variant, secret_keys)
                if c["image"].startswith("redis:"):
                    self.redis(where, f"{wname} container {c['name']}", c, claims)

        for svc in by_kind.get("Service", {}).values():
            pods = [w for w in workloads if selects(svc["spec"].get("selector", {}), w["spec"]["template"]["metadata"]["labels"])]
            if not pods:
                self.problem(where, f"Service/{svc['metadata']['name']}: selects no pod")
                continue
            names = {p.get("name") for w in pods for c in containers(pod_spec(w)) for p in c.get("ports", [])}
            numbers = {p["containerPort"] for w in pods for c in containers(pod_spec(w)) for p in c.get("ports", [])}
            for port in svc["spec"]["ports"]:
                target = port.get("targetPort", port["port"])
                if target not in names and target not in numbers:
                    self.problem(where, f"Service/{svc['metadata']['name']}: targetPort {target} is no container port")
        for pdb in by_kind.get("PodDisruptionBudget", {}).values():
            if not any(selects(pdb["spec"]["selector"]["matchLabels"], w["spec"]["template"]["metadata"]["labels"])
                       for w in workloads):
                self.problem(where, f"PodDisruptionBudget/{pdb['metadata']['name']}: selects no pod")
        for policy in by_kind.get("NetworkPolicy", {}).values():
            selected = [w for w in workloads
                        if selects(policy["spec"]["podSelector"]["matchLabels"], w["spec"]["template"]["metadata"]["labels"])]
            if not selected:
                self.problem(where, f"NetworkPolicy/{policy['metadata']['name']}: selects no pod")
            names = {p.get("name") for w in selected for c in containers(pod_spec(w)) for p in c.get("ports", [])}
            for rule in policy["spec"].get("ingress", []):
                for port in rule.get("ports", []):
                    if isinstance(port["port"], str) and port["port"] not in names:
                        self.problem(where, f"NetworkPolicy/{policy['metadata']['name']}: no port named {port['port']}")
        hpas = by_kind.get("HorizontalPodAutoscaler", {})
        for hpa in hpas.values():
            ref = hpa["spec"]["scaleTargetRef"]
            target = by_kind.get(ref["kind"], {}).get(ref["name"])
            if target is None:
                self.problem(where, f"HorizontalPodAutoscaler/{hpa['metadata']['name']}: no {ref['kind']}/{ref['name']}")
            elif "replicas" in target["spec"]:
                self.problem(where, f"{ref['kind']}/{ref['name']}: sets replicas, which its autoscaler owns")
        # Every Deployment of Tollgate itself scales and survives node drains.
        for w in by_kind.get("Deployment", {}).values():
            if w["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") != "tollgate":
                continue
            name = w["metadata"]["name"]
            if not any(h["spec"]["scaleTargetRef"]["name"] == name for h in hpas.values()):
                self.problem(where, f"Deployment/{name}: no HorizontalPodAutoscaler")
            if not any(selects(p["spec"]["selector"]["matchLabels"], w["spec"]["template"]["metadata"]["labels"])
                       for p in by_kind.get("PodDisruptionBudget", {}).values()):
                self.problem(where, f"Deployment/{name}: no PodDisruptionBudget")

    def image(self, where: str, cname: str, image: str, version: str, upstream: set[str]) -> None:
        name, _, tag = image.rpartition(":")
        if name in OWN_IMAGES:
            if tag != version:
                self.problem(where, f"{cname}: {image} should be tagged with the workspace version {version}")
            if not (ROOT / OWN_IMAGES[name]).exists():
                self.problem(where, f"{cname}: {OWN_IMAGES[name]} (builds {name}) is missing")
        elif name.startswith(("envoyproxy/", "redis")) and image not in upstream:
            self.problem(where, f"{cname}: {image} differs from docker-compose.yml's {sorted(upstream)}")

    def envoy(self, where, cname, c, volumes, by_kind, variant, secret_keys) -> None:
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        config_path = c["command"][c["command"].index("-c") + 1]
        vol = volumes.get(mounts.get(str(Path(config_path).parent), ""), {})
        cm = by_kind.get("ConfigMap", {}).get(vol.get("configMap", {}).get("name"))
        if cm is None or Path(config_path).name not in cm.get("data", {}):
            self.problem(where, f"{cname}: {config_path} is not in a mounted ConfigMap")
            return
        config = yaml.safe_load(cm["data"][Path(config_path).name])
        expected = yaml.safe_load(render_envoy.render_text(variant))
        if config != expected:
            self.problem(where, f"{cname}: the mounted Envoy config is not the {variant!r} render of envoy.yaml")
        wasm = render_envoy.wasm_config(config)
        wasm_file = wasm["vm_config"]["code"]["local"]["filename"]
        wasm_path = Path(c.get("workingDir", "/")) / wasm_file
        if not any(str(wasm_path.parent) == path for path in mounts):
            self.problem(where, f"{cname}: nothing mounted where the Wasm module is loaded from ({wasm_path})")
        tunables = next((e.get("value", "") for e in c.get("env", []) if e["name"] == "GLIBC_TUNABLES"), "")
        if not has_envoy_tunable(tunables):
            self.problem(where, f"{cname}: lacks the env GLIBC_TUNABLES={ENVOY_GLIBC_TUNABLE} "
                                "(tcmalloc's per-CPU caches; scripts/stack.py)")
        env_keys = set(wasm["vm_config"].get("environment_variables", {}).get("host_env_keys", []))
        if not c.get("envFrom"):
            self.problem(where, f"{cname}: gets no provider keys (envFrom the Secret {PROVIDER_KEYS_SECRET})")
        missing = env_keys - secret_keys
        if missing:
            self.problem(where, f"{EXAMPLE_SECRET.name} lacks provider keys the config reads: {sorted(missing)}")
        heap = next(m["typed_config"]["max_heap_size_bytes"] for m in config["overload_manager"]["resource_monitors"]
                    if "max_heap_size_bytes" in m.get("typed_config", {}))
        limit = quantity_bytes(c["resources"]["limits"]["memory"])
        if limit <= heap:
            self.problem(where, f"{cname}: memory limit {c['resources']['limits']['memory']} is not above the "
                                f"overload manager's heap of {heap} bytes")
        ports = {p["containerPort"] for p in c.get("ports", [])}
        stats = {p.get("port") for probe in ("readinessProbe", "livenessProbe") for p in [c[probe].get("httpGet", {})]}
        listen = {lis["name"]: lis["address"]["socket_address"] for lis in config["static_resources"]["listeners"]}
        if stats - {render_envoy.STATS_PORT, "tg-stats"}:
            self.problem(where, f"{cname}: probes should use the stats listener ({render_envoy.STATS_PORT})")
        if render_envoy.STATS_PORT not in ports:
            self.problem(where, f"{cname}: does not expose the stats port {render_envoy.STATS_PORT}")
        if listen["gateway"]["address"] != "127.0.0.1" and listen["gateway"]["port_value"] not in ports:
            self.problem(where, f"{cname}: does not expose the gateway port {listen['gateway']['port_value']}")

    def redis(self, where, cname, c, claims) -> None:
        args = " ".join(c.get("args", []))
        for flag in ("--appendonly yes", "--appendfsync everysec"):
            if flag not in args:
                self.problem(where, f"{cname}: not persistent (missing {flag})")
        data_dir = re.search(r"--dir (\S+)", args)
        mounted = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        if not data_dir or mounted.get(data_dir.group(1)) not in claims:
            self.problem(where, f"{cname}: its --dir is not on a PersistentVolumeClaim")


def envoy_validate(variant: str) -> str | None:
    """`envoy --mode validate` of a generated config with placeholder keys;
    then without the first key, which must make Envoy refuse the config."""
    envoy = tool("envoy")
    if envoy is None:
        return "envoy not found; run `make bootstrap`"
    path = render_envoy.output(variant)
    config = yaml.safe_load(path.read_text())
    keys = render_envoy.wasm_config(config)["vm_config"]["environment_variables"]["host_env_keys"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TG_KEY_")}

    # The usage token is a mounted Secret in the pod: validate with a stand-in file.
    tmp = Path(tempfile.mkdtemp())
    (tmp / "token").write_text("validate-only-usage-token")
    (tmp / "envoy.yaml").write_text(path.read_text().replace(f"filename: {USAGE_TOKEN_PATH}", f"filename: {tmp / 'token'}"))
    path = tmp / "envoy.yaml"

    def validate(present: list[str]) -> subprocess.CompletedProcess:
        # From the repository root: the Wasm module's path is relative (build/...).
        return subprocess.run([envoy, "--mode", "validate", "-c", str(path), "--disable-hot-restart",
                               "--log-level", "error"], cwd=ROOT, env={**env, **{k: "placeholder" for k in present}},
                              capture_output=True, text=True)

    run = validate(keys)
    if run.returncode != 0:
        return (run.stderr or run.stdout).strip()[-2000:]
    run = validate(keys[1:])
    if run.returncode == 0 or f"{keys[0]} is not set" not in run.stderr + run.stdout:
        return f"Envoy accepted the config without {keys[0]} in its environment"
    return None


def validate_policy(checker: Checker) -> None:
    binary = ROOT / "target" / "release" / "tollgate-authz"
    policy = HERE / "base" / "policy.yaml"
    if not binary.exists():
        print("k8s-check: tollgate-authz not built; policy not validated (make build)")
        return
    run = subprocess.run([str(binary), "--validate", str(policy)], capture_output=True, text=True)
    if run.returncode != 0:
        checker.problem(str(policy.relative_to(ROOT)), (run.stderr or run.stdout).strip())


def main() -> int:
    checker = Checker()
    if subprocess.run([sys.executable, str(HERE / "render_envoy.py"), "--check"]).returncode != 0:
        checker.problem("deploy/k8s", "generated Envoy configs are stale")
    for variant in render_envoy.variants():
        err = envoy_validate(variant)
        if err:
            checker.problem(str(render_envoy.output(variant).relative_to(ROOT)), f"envoy --mode validate:\n{err}")

    example = yaml.safe_load(EXAMPLE_SECRET.read_text())
    checker.schemas(EXAMPLE_SECRET.name, [example])
    secret_keys = set(example.get("stringData", {}))
    counts = {}
    for entry, variant in ENTRY_POINTS.items():
        try:
            docs = kustomize_build(HERE / entry)
        except RuntimeError as err:
            checker.problem(entry, str(err))
            continue
        counts[entry] = len(docs)
        checker.schemas(entry, docs)
        checker.references(entry, docs, variant, secret_keys)
    validate_policy(checker)

    for p in checker.problems:
        print(f"k8s-check: {p}", file=sys.stderr)
    if checker.problems:
        return 1
    summary = ", ".join(f"{e} {n} objects" for e, n in counts.items())
    print(f"k8s-check: OK ({summary}; Kubernetes {' and '.join(K8S_VERSIONS)} schemas; "
          f"Envoy configs validated: {', '.join(render_envoy.variants())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
