"""bench/replica_turns.py, the replica's memory of a few scenarios in turns:
a real (short) run, and the ratios it derives from its rows."""
from __future__ import annotations

import json
import subprocess
import sys

from stack import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import replica_turns  # noqa: E402


def test_ratios_pair_each_round_with_the_references_same_round():
    rows = [{"spec": s, "round": r, "answer": "1.37 KB", "rate": "5000", "gateway_peak_rss_mb": mb}
            for s, r, mb in (("envoy", 0, 500.0), ("full", 0, 650.0), ("envoy", 1, 400.0), ("full", 1, 600.0))]
    # A rate the reference never reached has no ratio.
    rows.append({"spec": "full", "round": 1, "answer": "1.37 KB", "rate": "9000", "gateway_peak_rss_mb": 700.0})
    got = replica_turns.ratios(rows, "envoy")
    assert got == {"full": {"1.37 KB": {"5000": {"rounds": [1.3, 1.5], "min": 1.3, "max": 1.5, "mean": 1.4}}}}


def test_a_short_run_in_turns(tmp_path):
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "replica_turns.py"), "--rounds", "1",
                          "--rates", "50", "--seconds", "2", "--out", str(out), "envoy", "floor"],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    summary = json.loads((out / "replica_turns.json").read_text())
    envoy, floor = summary["rows"]
    assert (envoy["spec"], floor["spec"]) == ("envoy", "floor")
    for row in (envoy, floor):
        assert row["held"] and row["rate"] == "50" and row["gateway_peak_rss_mb"] > 0, row
    # The floor's gateway is Envoy with its Wasm VM plus authz-null: more than
    # the plain router's Envoy alone.
    assert set(floor["peak_rss_mb"]) >= {"envoy", "authz"} and "authz" not in envoy["peak_rss_mb"]
    ratio = summary["ratios"]["floor"]["1.37 KB"]["50"]
    assert ratio["rounds"] == [round(floor["gateway_peak_rss_mb"] / envoy["gateway_peak_rss_mb"], 3)]
    assert ratio["rounds"][0] > 1
    assert "floor, 1.37 KB: 50/s" in run.stdout
