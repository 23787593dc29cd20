"""Shared pytest fixtures: real stacks on free loopback ports.

`stack` is one session-wide gateway (Redis, mock-llm, authz-service, Envoy with
the built Wasm filter) started from the default config with every port moved.
`make_stack` starts extra, private stacks for tests that break things (kill a
process, change the policy). Every stack is stopped at the end, also when a
test fails, and then the logs of every process it ran are printed.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from stack import DEMO_KEY, Stack, free_ports  # noqa: E402

# Test stacks: one Envoy worker, and a Redis timeout that a busy 2-core CI
# machine meets (the service's default, 10 ms, is for production).
TEST_STACK = {"envoy_concurrency": 1, "authz_args": ("--redis-timeout-ms", "100")}


@pytest.fixture(scope="session")
def demo_key() -> str:
    return DEMO_KEY


def _run(request, stack: Stack):
    failed_before = request.session.testsfailed
    try:
        stack.start()
    except BaseException:
        stack.dump_logs()
        raise
    try:
        yield stack
    finally:
        stack.stop()
        if request.session.testsfailed > failed_before:
            stack.dump_logs()


@pytest.fixture(scope="session")
def stack(request, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("stack")
    yield from _run(request, Stack(run_dir=run_dir, ports=free_ports(), **TEST_STACK))


@pytest.fixture
def make_stack(request, tmp_path_factory):
    """Factory: make_stack(**Stack fields) → a started private stack."""
    started = []

    def factory(**kwargs) -> Stack:
        s = Stack(run_dir=tmp_path_factory.mktemp("stack"), ports=free_ports(), **{**TEST_STACK, **kwargs})
        try:
            s.start()
        except BaseException:
            s.dump_logs()
            raise
        started.append(s)
        return s

    failed_before = request.session.testsfailed
    yield factory
    for s in started:
        s.stop()
        if request.session.testsfailed > failed_before:
            s.dump_logs()
