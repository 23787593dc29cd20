#!/usr/bin/env python3
"""Static checks of docker-compose.yml and the Dockerfiles (no Docker engine here).

- the YAML parses and has the services the stack needs;
- every build context, Dockerfile, COPY source and bind-mounted file exists;
- a Dockerfile that builds the Cargo workspace copies every member of it
  (cargo refuses a workspace with a member missing);
- every `depends_on: service_healthy` target has a health check;
- every port the compose file names is one of config/ports.env, and
  envoy.yaml listens on / points at exactly those ports;
- the Rust image in the Dockerfiles is new enough for every locked crate;
- Envoy gets the glibc tunable `make run` gives it (scripts/stack.py,
  ENVOY_GLIBC_TUNABLE).
Exit 1 with one line per problem.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from stack import DEFAULT_PORTS, ENVOY_GLIBC_TUNABLE, has_envoy_tunable  # noqa: E402

REQUIRED_SERVICES = {"redis", "mock-llm", "authz-service", "envoy", "fortio"}
problems: list[str] = []


def problem(msg: str) -> None:
    problems.append(msg)


def check_dockerfile(path: Path, context: Path) -> None:
    if not path.exists():
        problem(f"{path.relative_to(ROOT)}: missing")
        return
    for line in path.read_text().splitlines():
        m = re.match(r"\s*COPY\s+(?!--from)(.+)", line)
        if not m:
            continue
        *sources, _dest = m.group(1).split()
        for src in sources:
            if not (context / src).exists():
                problem(f"{path.relative_to(ROOT)}: COPY source {src} does not exist")
    copied = [src.rstrip("/") for line in path.read_text().splitlines()
              if (m := re.match(r"\s*COPY\s+(?!--from)(.+)", line)) for src in m.group(1).split()[:-1]]
    if "Cargo.toml" in copied:
        for member in workspace_members():
            if not any(member == src or member.startswith(src + "/") for src in copied):
                problem(f"{path.relative_to(ROOT)}: does not COPY workspace member {member}")
    for image in re.findall(r"FROM\s+rust:(\d+\.\d+)", path.read_text()):
        check_rust_version(path, image)


def workspace_members() -> list[str]:
    import tomllib
    return tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["members"]


_locked_msrv: tuple[int, int] | None = None


def locked_msrv() -> tuple[int, int]:
    """Highest rust-version declared by any crate in Cargo.lock's resolution."""
    global _locked_msrv
    if _locked_msrv is None:
        run = subprocess.run(["cargo", "metadata", "--format-version", "1"],
                             cwd=ROOT, capture_output=True, text=True)
        if run.returncode != 0:
            problem(f"cargo metadata failed: {run.stderr.strip().splitlines()[-1:]}")
            return (1, 0)
        meta = json.loads(run.stdout)
        versions = [tuple(int(x) for x in p["rust_version"].split(".")[:2])
                    for p in meta["packages"] if p.get("rust_version")]
        _locked_msrv = max(versions, default=(1, 0))
    return _locked_msrv


def check_rust_version(path: Path, image: str) -> None:
    have = tuple(int(x) for x in image.split("."))
    need = locked_msrv()
    if have < need:
        problem(f"{path.relative_to(ROOT)}: rust:{image} is older than the locked crates need "
                f"({need[0]}.{need[1]})")


def main() -> int:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose.get("services", {})
    missing = REQUIRED_SERVICES - services.keys()
    if missing:
        problem(f"docker-compose.yml: missing services {sorted(missing)}")
    if "bench" not in (services.get("fortio", {}).get("profiles") or []):
        problem("docker-compose.yml: fortio must be under the `bench` profile")

    for name, svc in services.items():
        build = svc.get("build")
        if build:
            context = ROOT / build.get("context", ".")
            check_dockerfile(context / build.get("dockerfile", "Dockerfile"), context)
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith(("./", "/")) and not (ROOT / src).exists():
                problem(f"{name}: mounted path {src} does not exist")
        for dep, cond in (svc.get("depends_on") or {}).items():
            if dep not in services:
                problem(f"{name}: depends on unknown service {dep}")
            elif cond.get("condition") == "service_healthy" and "healthcheck" not in services[dep]:
                problem(f"{name}: waits for {dep} to be healthy but {dep} has no healthcheck")
        if svc.get("network_mode") != "host" and name != "wasm-filter":
            problem(f"{name}: must use network_mode: host (envoy.yaml addresses are 127.0.0.1)")

    # Ports: compose ⊆ ports.env, and envoy.yaml uses exactly the Tollgate ports.
    known = set(DEFAULT_PORTS.values())
    compose_text = (ROOT / "docker-compose.yml").read_text()
    for port in {int(p) for p in re.findall(r"127\.0\.0\.1[:/ ,\"]+(\d{2,5})", compose_text)} | \
            {int(p) for p in re.findall(r'"--port",\s*"(\d+)"|"-p",\s*"(\d+)"', compose_text) for p in p if p}:
        if port not in known:
            problem(f"docker-compose.yml: port {port} is not in config/ports.env")
    envoy_ports = {int(p) for p in re.findall(r"port_value:\s*(\d+)", (ROOT / "envoy.yaml").read_text())}
    expected = {DEFAULT_PORTS[k] for k in ("TG_GATEWAY_PORT", "TG_ADMIN_PORT", "TG_MOCK_PORT",
                                            "TG_AUTHZ_GRPC_PORT", "TG_AUTHZ_HTTP_PORT", "TG_MCP_DEMO_PORT")}
    if envoy_ports != expected:
        problem(f"envoy.yaml ports {sorted(envoy_ports)} differ from config/ports.env {sorted(expected)}")
    for key in ("TG_GATEWAY_PORT", "TG_ADMIN_PORT", "TG_MOCK_PORT", "TG_AUTHZ_GRPC_PORT",
                "TG_AUTHZ_HTTP_PORT", "TG_AUTHZ_ADMIN_PORT", "TG_REDIS_PORT"):
        if str(DEFAULT_PORTS[key]) not in compose_text:
            problem(f"docker-compose.yml never uses {key}={DEFAULT_PORTS[key]}")
    envoy_env = (services.get("envoy") or {}).get("environment") or {}
    if not has_envoy_tunable(str(envoy_env.get("GLIBC_TUNABLES", ""))):
        problem(f"docker-compose.yml: envoy's environment lacks GLIBC_TUNABLES={ENVOY_GLIBC_TUNABLE} "
                "(tcmalloc's per-CPU caches; scripts/stack.py)")
    if "./envoy.yaml:" not in compose_text:
        problem("docker-compose.yml: envoy does not mount ./envoy.yaml")
    if "build/tollgate_filter.wasm" not in (ROOT / "envoy.yaml").read_text():
        problem("envoy.yaml: does not load build/tollgate_filter.wasm (the compose volume path)")

    for p in problems:
        print(f"compose-check: {p}", file=sys.stderr)
    if problems:
        return 1
    print(f"compose-check: docker-compose.yml OK ({len(services)} services, "
          f"ports {sorted(known)}, rust >= {'.'.join(map(str, locked_msrv()))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
