#!/usr/bin/env python3
"""Offline check of the Grafana dashboard and the Prometheus scrape config
(`make dashboard-check`). tests/e2e/test_dashboard.py runs the same queries
against a live stack and reuses the helpers here.

- tollgate.json is a Grafana dashboard: unique panel ids, every panel on the
  `datasource` variable, every target with a PromQL query;
- every query, with Grafana's variables replaced, parses (`promtool check rules`);
- deploy/prometheus/prometheus.yml passes `promtool check config`. Debian's
  Prometheus is built without Kubernetes discovery, so promtool checks it with
  each `kubernetes_sd_configs` swapped for a static target carrying the pod
  labels the relabel rules read (static_scrape_config below); this script
  requires the discovery block itself to be the documented `role: pod` form.

Exit 1 with one line per problem.
"""
from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "tollgate.json"
SCRAPE_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
# The container port name each job keeps (deploy/k8s manifests name them so).
JOB_PORT_NAMES = {"tollgate-envoy": "tg-stats", "tollgate-authz": "tg-metrics"}
# Grafana's built-in variables, as a live check evaluates them.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}


def load_dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard: dict) -> list[dict]:
    """Every non-row panel, rows' nested panels included."""
    found = []
    for p in dashboard["panels"]:
        if p.get("type") == "row":
            found.extend(p.get("panels", []))
        else:
            found.append(p)
    return found


def expand(expr: str, **overrides: str) -> str:
    """expr with Grafana's variables replaced; overrides by name without `$`,
    e.g. __rate_interval="5m"."""
    for var, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(var, overrides.get(var[1:], value))
    return expr


def queries(dashboard: dict, **overrides: str) -> list[tuple[str, str]]:
    """(label, PromQL) of every target, Grafana's variables replaced."""
    return [(f"panel {p['id']} {p['title']!r} {t['refId']}", expand(t["expr"], **overrides))
            for p in panels(dashboard) for t in p.get("targets", [])]


def static_scrape_config(targets: dict[str, str], scrape_interval: str | None = None) -> dict:
    """prometheus.yml with Kubernetes discovery replaced by one static target
    per job (job name → host:port). The target carries the pod labels that
    discovery would set, so the shipped relabel rules run unchanged."""
    config = copy.deepcopy(yaml.safe_load(SCRAPE_CONFIG.read_text()))
    if scrape_interval:
        config["global"]["scrape_interval"] = scrape_interval
        config["global"]["scrape_timeout"] = scrape_interval
    for job in config["scrape_configs"]:
        name = job["job_name"]
        job.pop("kubernetes_sd_configs", None)
        job["static_configs"] = [{"targets": [targets[name]], "labels": {
            "__meta_kubernetes_pod_container_port_name": JOB_PORT_NAMES[name],
            "__meta_kubernetes_namespace": "tollgate",
            "__meta_kubernetes_pod_name": f"{name}-0",
        }}]
    return config


def check_dashboard(dashboard: dict, problems: list[str]) -> None:
    variables = {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}
    if variables.get("datasource", {}).get("query") != "prometheus":
        problems.append("tollgate.json: needs a `datasource` variable of Prometheus data sources")
    ids = [p["id"] for p in dashboard["panels"]] + [p["id"] for p in panels(dashboard) if p not in dashboard["panels"]]
    if len(ids) != len(set(ids)):
        problems.append("tollgate.json: panel ids are not unique")
    for p in panels(dashboard):
        where = f"tollgate.json panel {p['id']} {p.get('title')!r}"
        if p.get("datasource", {}).get("uid") != "${datasource}":
            problems.append(f"{where}: datasource is not the ${{datasource}} variable")
        targets = p.get("targets", [])
        if not targets or not all(t.get("expr") for t in targets):
            problems.append(f"{where}: every panel needs a PromQL query")
        if len({t.get("refId") for t in targets}) != len(targets):
            problems.append(f"{where}: refIds are not unique")
        for t in targets:
            leftover = re.findall(r"\$\w+", expand(t.get("expr", "")))
            if leftover:
                problems.append(f"{where}: unknown variables {leftover}")


def promtool(args: list[str], problems: list[str], what: str) -> None:
    exe = shutil.which("promtool")
    if exe is None:
        problems.append("promtool not found; run `make bootstrap`")
        return
    run = subprocess.run([exe, *args], capture_output=True, text=True)
    if run.returncode != 0:
        problems.append(f"{what}: {(run.stdout + run.stderr).strip()}")


def main() -> int:
    problems: list[str] = []
    dashboard = load_dashboard()
    check_dashboard(dashboard, problems)
    config = yaml.safe_load(SCRAPE_CONFIG.read_text())
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    if set(jobs) != set(JOB_PORT_NAMES):
        problems.append(f"prometheus.yml: jobs {sorted(jobs)}, expected {sorted(JOB_PORT_NAMES)}")
    for name, job in jobs.items():
        if job.get("kubernetes_sd_configs") != [{"role": "pod"}]:
            problems.append(f"prometheus.yml job {name}: expected kubernetes_sd_configs [{{role: pod}}]")
    with tempfile.TemporaryDirectory() as tmp:
        rules = {"groups": [{"name": "dashboard", "rules": [
            {"record": f"tollgate:dashboard:query{i}", "expr": expr} for i, (_, expr) in enumerate(queries(dashboard))]}]}
        rules_file = Path(tmp) / "dashboard-rules.yml"
        rules_file.write_text(yaml.safe_dump(rules))
        promtool(["check", "rules", str(rules_file)], problems, "dashboard queries")
        scrape_file = Path(tmp) / "prometheus.yml"
        scrape_file.write_text(yaml.safe_dump(static_scrape_config(
            {job: "127.0.0.1:1" for job in JOB_PORT_NAMES} if set(jobs) == set(JOB_PORT_NAMES) else {})))
        promtool(["check", "config", str(scrape_file)], problems, "prometheus.yml")
    for p in problems:
        print(f"dashboard-check: {p}", file=sys.stderr)
    if problems:
        return 1
    print(f"dashboard-check: OK ({len(panels(dashboard))} panels, {len(queries(dashboard))} queries parse; "
          f"prometheus.yml jobs {', '.join(jobs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
