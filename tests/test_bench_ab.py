"""bench/ab.py, the alternated A/B of Wasm modules: a real (short) run.

The variant's module must be the one its Envoy loads (both the route filter
and the providers' per-attempt filter), and the summary compares it with the
first SPEC round by round; `--ratio A/B` divides one SPEC's CPU per request
by another's, the module's path (with its "/") included.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml

from stack import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import ab  # noqa: E402
import bench  # noqa: E402


def test_every_reference_to_the_module_is_replaced(tmp_path):
    known = {sc.name: sc for sc in bench.scenarios("mock-openai-key-1")}
    module = tmp_path / "other.wasm"
    module.write_bytes(b"\0asm")
    _, sc = ab.parse_spec(f"wasm@{module}", known)
    text = yaml.safe_dump(sc.envoy)
    assert ab.FILTER_WASM not in text and str(module) in text
    # The scenario itself is left as it was.
    assert ab.FILTER_WASM in yaml.safe_dump(known["wasm"].envoy)
    with pytest.raises(SystemExit, match="nothing to replace"):
        ab.parse_spec(f"wasm-null@{module}", known)
    with pytest.raises(SystemExit, match="not a bench scenario"):
        ab.parse_spec("no-such-scenario", known)


def test_a_short_alternated_run(tmp_path):
    module = tmp_path / "copy.wasm"
    shutil.copyfile(ROOT / ab.FILTER_WASM, module)
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "ab.py"), "--rate", "50", "--seconds", "1",
                          "--warmup", "0", "--rounds", "1", "--conns", "2", "--out", str(out),
                          "wasm", f"wasm@{module}", "--ratio", f"wasm@{module}/wasm"],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    result = json.loads((out / "ab.json").read_text())
    for label in ("wasm", f"wasm@{module}"):
        (row,) = result["runs"][label]
        assert row["success_rate"] == 1.0 and row["requests"] >= 45, row
        assert row["envoy_us"] > 0 and row["gateway_us"] >= row["envoy_us"], row
    variant = result["summary"][f"wasm@{module}"]
    assert variant["rounds_lower_than_reference"] in (0, 1)
    assert "rounds_lower_than_reference" not in result["summary"]["wasm"]
    (ratios,) = result["ratios"].values()
    (a,), (b,) = result["runs"][f"wasm@{module}"], result["runs"]["wasm"]
    for name, key in (("envoy", "envoy_us"), ("gateway", "gateway_us")):
        assert ratios[name]["rounds"] == [round(a[key] / b[key], 3)], ratios
        assert ratios[name]["of_means"] == round(a[key] / b[key], 3), ratios
    assert f"wasm@{module} ÷ wasm: envoy {ratios['envoy']['of_means']:.2f} (rounds " in run.stdout
    # The variant's Envoy loaded the copy, in both of its Wasm filters (the
    # per-attempt filter's vm_config is the route filter's, an alias).
    config = (out / "spec1" / "stacks" / "wasm" / "envoy.yaml").read_text()
    assert config.count(str(module)) == 1 and config.count("vm_config: *") == 1
    assert ab.FILTER_WASM not in config
    assert ab.FILTER_WASM in (out / "spec0" / "stacks" / "wasm" / "envoy.yaml").read_text()


def test_a_ratio_names_two_specs():
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "ab.py"), "--rounds", "1",
                          "wasm", "wasm-null", "--ratio", "wasm/floor"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "--ratio wasm/floor: not A/B" in run.stderr, run.stderr
