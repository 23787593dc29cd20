"""bench/cache.py, the prompt-cache replay: a real (small) run.

Six agent sessions of four turns (two named by Claude Code's header, two by
Codex's prompt_cache_key, two by nothing but their prompt) through two
gateways sharing one authz-service and mock-llm, for the three key choices.
The figures must agree with each other: Tollgate's affine choice keeps every
session on one key on both gateways and reads nearly what a single key
reads; the weighted random choice spreads turns over the keys and reads
less; dollars follow the hit ratio.
"""
from __future__ import annotations

import json
import subprocess
import sys

from stack import ROOT


def test_a_small_replay_gives_consistent_figures(tmp_path):
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "cache.py"), "--sessions", "6", "--turns", "4",
                          "--workers", "3", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    doc = json.loads((out / "cache.json").read_text())
    affine, rand, single = (doc["results"][c] for c in ("affine", "random", "single"))
    for r in (affine, rand, single):
        assert r["sessions"] == 6 and r["requests"] == 24 and not r["errors"] and not r["unknown_keys"], r
        assert 0 < r["cached_tokens"] < r["input_tokens"], r
    # Every kind of session is read back from the cache under the affine choice.
    assert all(v > 0.5 for v in affine["hit_ratio_by_kind"].values()), affine
    assert affine["one_key_sessions"] == 1.0 and affine["same_key_both_gateways"] == 1.0, affine
    assert single["same_key_both_gateways"] == 1.0
    assert affine["hit_ratio"] >= 0.95 * single["hit_ratio"], (affine, single)
    assert doc["affine_over_single"] >= 0.95
    assert rand["hit_ratio"] < affine["hit_ratio"], (rand, affine)
    assert rand["one_key_sessions"] < 1.0, rand
    assert affine["usd_per_session"] < rand["usd_per_session"], (affine, rand)
    assert abs(sum(v["sessions"] for v in affine["key_share"].values()) - 1.0) < 0.01
    assert "hit ratio" in run.stdout and "| affine | random | single |" in run.stdout
