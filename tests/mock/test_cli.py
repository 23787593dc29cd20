"""The binary's command line: --validate, config errors, --listen override."""

import pathlib
import subprocess

CONFIG = pathlib.Path(__file__).resolve().parents[2] / "config" / "mock-llm.yaml"


def test_validate_accepts_the_default_config(mock_bin):
    r = subprocess.run([str(mock_bin), "--validate", "--config", str(CONFIG)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "valid" in r.stderr


def test_config_errors_exit_2_with_the_reason(mock_bin, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(CONFIG.read_text().replace("recent_requests:", "recent_request:"))
    r = subprocess.run([str(mock_bin), "--validate", "--config", str(bad)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "unknown field" in r.stderr
    r = subprocess.run([str(mock_bin), "--config", str(tmp_path / "missing.yaml")], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "missing.yaml" in r.stderr
    r = subprocess.run([str(mock_bin), "--bogus"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "usage" in r.stderr


def test_listen_overrides_config_and_one_startup_line(mock_bin, free_port):
    port = free_port
    p = subprocess.Popen([str(mock_bin), "--listen", f"127.0.0.1:{port}", "--config", str(CONFIG)],
                         stderr=subprocess.PIPE, text=True)
    try:
        line = p.stderr.readline()
        assert f"listening on 127.0.0.1:{port}" in line
        assert "mock-" not in line.replace("mock-llm", "")  # no key in the log line
    finally:
        p.terminate()
        p.wait(timeout=5)
    assert p.stderr.read() == ""  # nothing else was logged
