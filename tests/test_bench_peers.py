"""bench/peers.py, Tollgate beside its peers: a short real run (`peers.py
smoke`: each gateway started once, 2 s per mode at 20 requests/s) on
whichever peers .tools/peers holds (`make peers-install`); a peer that is not
installed is skipped, saying why. The full lane (`make bench-peers`) does not
run here.

Every figure of the summary must come from this run: each load's request
count is the one in fortio's own JSON that it names, its CPU and memory were
read from the gateway's processes, and a streamed answer is larger than the
same answer whole (it was really streamed).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stack import ROOT, tool

sys.path.insert(0, str(ROOT / "bench"))
import peers  # noqa: E402

SMOKE = peers.PLANS["smoke"]
PEERS = ["litellm", "portkey", "aigw", "litellm-keys"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("peers")
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "peers.py"), "smoke", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, json.loads((out / "summary.json").read_text())


def check_gateway(out, summary: dict, name: str) -> None:
    sizes = {}
    for mode in peers.MODES:
        sc = summary["scenarios"][f"{name}-{mode}"]
        assert sc["gateway"] == name and sc["mode"] == mode, sc
        (rate,) = sc["rates"]
        r = sc["rates"][rate]
        raw = json.loads((out / r["raw"]).read_text())
        # The figures are fortio's own for this load.
        assert raw["DurationHistogram"]["Count"] == r["requests"], (name, mode)
        assert float(raw["RequestedQPS"]) == float(rate) == SMOKE.rates[0]
        assert r["ret_codes"] == {"200": r["requests"]} and r["success_rate"] == 1.0, (name, mode, r["ret_codes"])
        assert r["requests"] >= 0.9 * SMOKE.rates[0] * SMOKE.seconds, r
        assert r["latency_us"]["50"] > 0 and r["latency_us"]["99"] >= r["latency_us"]["50"], r
        # CPU and memory were read from the gateway's own processes.
        if sc["processes"]:
            assert set(sc["processes"]) <= set(r["cpu_us_per_request"]) and r["gateway_cpu_us_per_request"] > 0, r
            assert r["gateway_peak_rss_mb"] > 1 and sc["idle_rss_mb"] > 1, r
        else:  # direct: no gateway, the mock only
            assert r["gateway_cpu_us_per_request"] == 0 and list(r["cpu_us_per_request"]) == ["mock"], r
        sizes[mode] = raw["Sizes"]["Avg"]
    assert sizes["stream"] > sizes["chat"], sizes  # server-sent events, not one JSON answer


@pytest.mark.parametrize("name", ["direct", "envoy", "floor", "tollgate", "tollgate-keys"])
def test_baselines_and_tollgate(run, name):
    out, summary = run
    check_gateway(out, summary, name)
    assert summary["scenarios"]["tollgate-chat"]["processes"] == ["envoy", "authz", "redis"]


def test_the_floor_runs_the_null_module_without_redis(run):
    out, summary = run
    assert summary["scenarios"]["floor-chat"]["processes"] == ["envoy", "authz"]
    # The floor's Envoy runs the do-nothing module, not Tollgate's.
    floor_config = (out / "stacks" / "floor-chat" / "envoy.yaml").read_text()
    assert "tollgate_null_filter.wasm" in floor_config and "tollgate_filter.wasm" not in floor_config


@pytest.mark.parametrize("peer", PEERS)
def test_peer(run, peer):
    out, summary = run
    if peer in summary["not_installed"]:
        pytest.skip(f"{peer}: {summary['not_installed'][peer]}")
    if peer == "litellm-keys" and "litellm" in summary["no_virtual_keys"]:
        pytest.skip(f"{peer}: {summary['no_virtual_keys']['litellm']}")
    check_gateway(out, summary, peer)
    assert summary["versions"][peer.removesuffix("-keys")], summary["versions"]
    if peer == "litellm-keys":
        # LiteLLM's database is part of the gateway measured.
        assert summary["scenarios"]["litellm-keys-chat"]["processes"] == ["litellm", "postgres"]
    if peer == "aigw":
        # func-e ran this machine's Envoy, under the version aigw was told, not one it downloaded.
        data = out / "stacks" / "aigw-chat" / "aigw" / "data" / "envoy-versions"
        (envoy,) = data.glob("*/bin/envoy")
        assert envoy.resolve() == Path(tool("envoy")).resolve(), envoy
        assert envoy.parent.parent.name == summary["machine"]["envoy"]


def test_the_report_says_what_was_not_measured(run):
    out, summary = run
    report = (out / "REPORT-peers.md").read_text()
    assert {"bifrost", "agentgateway"} <= set(summary["not_installed"])
    for peer in PEERS:
        assert (f"{peer}-chat" in summary["scenarios"] or peer in summary["not_installed"]
                or (peer.endswith("-keys") and peer.removesuffix("-keys") in summary["no_virtual_keys"])), peer
    for peer, why in summary["not_installed"].items():
        assert f"**{peer}**: {why}" in report
    for peer, why in summary["no_virtual_keys"].items():
        assert f"**{peer}**: not measured with keys: {why}" in report
    for name, sc in summary["scenarios"].items():
        if sc["gateway"] != "direct":
            assert f"| {sc['gateway']} | {sc['mode']} | {SMOKE.rates[0]:g} |" in report, name
    assert (out / "peers.png").stat().st_size > 10_000
    assert summary["load_average_start"] and summary["load_average_end"]
