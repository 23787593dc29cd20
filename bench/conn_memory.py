#!/usr/bin/env python3
"""Envoy's live heap per downstream connection and per in-flight request.

    conn_memory.py SCENARIO [--connections N] [--no-retry]
    conn_memory.py SCENARIO --pending-check [--connections N]
    conn_memory.py SCENARIO --burst [--connections N]

Starts a fresh stack of one bench scenario (bench.py's configs, Envoy with
two workers as in the Bifrost replica) and reads Envoy's live allocations
(admin `/memory`, `allocated`) three times: idle; after N HTTP/1.1
connections each made one quick request and stayed open; and while one
request per connection waits for the provider (mock-llm answers after
`--hold-ms`). The differences over N are the KB that an idle keep-alive
connection and a request in flight on it hold. `--no-retry` drops the
route's retry_policy (a diagnosis: what buffering the body for retries
holds). The same three points also give each gateway process's RSS (Envoy,
authz-service, Redis: `rss_mb`) and tcmalloc's heap size (`heap_mb`, what
Envoy's RSS follows), so the KB per connection and per request can be read
by process.

`--pending-check` (scenarios with authz-service): the same connections, but
authz-service is paused (SIGSTOP) while their requests arrive, so each one
waits on its ext_authz check; read after 1 s (`pending`), then again once
the service is resumed and the requests wait on the provider (`allowed`).
The difference is what a check outstanding costs Envoy per request.

`--burst`: the Bifrost replica's warm-up without the rest of the run. fortio
opens N connections and each sends one request at once (`-c N -n N`, as its
parallel warm-up does at the replica's start); the mock holds each answer
`--hold-ms` (1.5 s, as in the replica). Peak RSS of each gateway process and
of their sum, and Envoy's allocator at its peak, sampled every 50 ms.

Loopback only; bounded by the hold time and a timeout per call.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402

TIMEOUT_S = 30


def allocated_mb(admin_url: str) -> float:
    return envoy_memory(admin_url)["allocated"]


def envoy_memory(admin_url: str) -> dict[str, float]:
    """Envoy's allocator, MB: live allocations and tcmalloc's heap."""
    with urllib.request.urlopen(f"{admin_url}/memory", timeout=5) as resp:
        doc = json.loads(resp.read())
    return {k: int(doc[k]) / 2**20 for k in ("allocated", "heap_size")}


def snapshot(stack: bench.Stack) -> dict[str, float]:
    """MB: Envoy's allocator and the RSS of each gateway process."""
    snap = envoy_memory(stack.admin_url)
    for name, proc in stack.procs.items():
        if name != "mock":
            snap[f"rss_{name}"] = bench.rss_bytes(proc.pid) / 2**20
    return snap


def request(sc: bench.Scenario, host: str, latency_ms: int) -> bytes:
    body = sc.payload()
    if "/" in sc.model:
        # As in the replica: Tollgate's filter routes provider/model.
        body = json.dumps(dict(json.loads(body), model="openai/gpt-4o-mini"))
    headers = {**sc.headers, "host": host, "content-type": "application/json",
               "content-length": str(len(body)), "x-mock-latency-ms": str(latency_ms),
               "x-mock-response-bytes": "1370"}
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"POST /v1/{sc.api} HTTP/1.1\r\n{head}\r\n{body}".encode()


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, payload: bytes) -> None:
    writer.write(payload)
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT_S)
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"gateway answered {head.splitlines()[0]!r}")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    await asyncio.wait_for(reader.readexactly(length), TIMEOUT_S)


async def measure(sc: bench.Scenario, stack: bench.Stack, n: int, hold_ms: int) -> dict:
    url = urllib.parse.urlparse(stack.base_url)
    idle_snap = snapshot(stack)
    idle = idle_snap["allocated"]
    conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    opening = asyncio.Semaphore(200)

    async def open_one() -> None:
        async with opening:
            reader, writer = await asyncio.open_connection(url.hostname, url.port)
            conns.append((reader, writer))
            await exchange(reader, writer, request(sc, url.netloc, 0))

    try:
        await asyncio.gather(*(open_one() for _ in range(n)))
        await asyncio.sleep(1)
        open_snap = snapshot(stack)
        open_idle = open_snap["allocated"]
        held = asyncio.gather(*(exchange(r, w, request(sc, url.netloc, hold_ms)) for r, w in conns))
        await asyncio.sleep(hold_ms / 1000 * 2 / 3)
        flight_snap = snapshot(stack)
        in_flight = flight_snap["allocated"]
        await held
    finally:
        for _, writer in conns:
            writer.close()
    return {"scenario": sc.name, "connections": n, "idle_allocated_mb": round(idle, 1),
            "kb_per_idle_connection": round((open_idle - idle) * 1024 / n, 1),
            "kb_per_request_in_flight": round((in_flight - open_idle) * 1024 / n, 1),
            # By figure: idle MB, then KB per idle connection and per request in flight.
            "by_figure": {k: {"idle_mb": round(idle_snap[k], 1),
                              "kb_per_idle_connection": round((open_snap[k] - idle_snap[k]) * 1024 / n, 1),
                              "kb_per_request_in_flight": round((flight_snap[k] - open_snap[k]) * 1024 / n, 1)}
                          for k in idle_snap}}


async def pending_check(sc: bench.Scenario, stack: bench.Stack, n: int, hold_ms: int) -> dict:
    """KB per request while its ext_authz check is outstanding (authz-service
    paused) and once allowed, waiting on the provider; over n connections
    opened first."""
    url = urllib.parse.urlparse(stack.base_url)
    conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    opening = asyncio.Semaphore(200)

    async def open_one() -> None:
        async with opening:
            conns.append(await asyncio.open_connection(url.hostname, url.port))

    authz = stack.procs["authz"].pid
    try:
        await asyncio.gather(*(open_one() for _ in range(n)))
        await asyncio.sleep(1)
        opened = snapshot(stack)
        os.kill(authz, signal.SIGSTOP)
        try:
            for _, writer in conns:
                writer.write(request(sc, url.netloc, hold_ms))
            await asyncio.gather(*(writer.drain() for _, writer in conns))
            await asyncio.sleep(1)
            pending = snapshot(stack)
        finally:
            os.kill(authz, signal.SIGCONT)
        await asyncio.sleep(hold_ms / 1000 / 2)
        allowed = snapshot(stack)
    finally:
        for _, writer in conns:
            writer.close()
    return {"scenario": sc.name, "connections": n, "mode": "pending-check",
            "by_figure": {k: {"kb_per_request_check_pending": round((pending[k] - opened[k]) * 1024 / n, 1),
                              "kb_per_request_allowed": round((allowed[k] - opened[k]) * 1024 / n, 1)}
                          for k in opened}}


class PeakSampler(threading.Thread):
    """The largest value of each snapshot() figure, and of the gateway
    processes' RSS summed, every 50 ms."""

    def __init__(self, stack: bench.Stack):
        super().__init__(daemon=True)
        self.stack, self.peak, self.rss_sum = stack, {}, 0.0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                snap = snapshot(self.stack)
            except (OSError, ValueError):
                snap = {}
            for k, v in snap.items():
                self.peak[k] = max(self.peak.get(k, 0.0), v)
            self.rss_sum = max(self.rss_sum, sum(v for k, v in snap.items() if k.startswith("rss_")))
            self.done.wait(0.05)


def burst(sc: bench.Scenario, stack: bench.Stack, n: int, hold_ms: int, out: Path) -> dict:
    """fortio's parallel warm-up alone: n connections, one request each at
    once, answers held hold_ms by the mock; peak memory by process."""
    body = sc.payload()
    if "/" in sc.model:
        body = json.dumps(dict(json.loads(body), model="openai/gpt-4o-mini"))
    out.mkdir(parents=True, exist_ok=True)
    payload, result = out / f"{sc.name}-burst.payload", out / f"{sc.name}-burst.json"
    payload.write_text(body)
    cmd = [bench.tool("fortio"), "load", "-quiet", "-c", str(n), "-n", str(n), "-qps", "-1", "-timeout", "30s",
           "-payload-file", str(payload), "-json", str(result), "-H", "content-type: application/json",
           "-H", f"x-mock-latency-ms: {hold_ms}", "-H", "x-mock-response-bytes: 1370"]
    for k, v in sc.headers.items():
        cmd += ["-H", f"{k}: {v}"]
    cmd.append(f"{stack.base_url}/{sc.api}")
    idle = snapshot(stack)
    sampler = PeakSampler(stack)
    sampler.start()
    t0 = time.monotonic()
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=hold_ms / 1000 + 120)
    finally:
        took = time.monotonic() - t0
        time.sleep(0.2)
        sampler.done.set()
        sampler.join()
    if run.returncode != 0 or not result.exists():
        raise RuntimeError(f"fortio failed ({run.returncode}): {run.stderr[-2000:]}")
    raw = json.loads(result.read_text())
    # fortio's latency of each request, its connection's setup included.
    latency = {f"p{p['Percentile']:g}_ms": round(p["Value"] * 1000, 1)
               for p in raw["DurationHistogram"]["Percentiles"] if p["Percentile"] in (50, 99)}
    return {"scenario": sc.name, "connections": n, "mode": "burst", "seconds": round(took, 1),
            "ret_codes": raw["RetCodes"], "latency": latency, "idle_mb": {k: round(v, 1) for k, v in idle.items()},
            "peak_mb": {k: round(v, 1) for k, v in sampler.peak.items()},
            "peak_rss_sum_mb": round(sampler.rss_sum, 1)}


def with_accept_per_event(cfg: dict, n: int) -> dict:
    """Every listener accepting at most n connections per socket event (0:
    all the kernel has, Envoy's default)."""
    cfg = json.loads(json.dumps(cfg))
    for listener in cfg["static_resources"]["listeners"]:
        listener.pop("max_connections_to_accept_per_socket_event", None)
        if n:
            listener["max_connections_to_accept_per_socket_event"] = n
    return cfg


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario")
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--hold-ms", type=int, default=0,
                        help="how long the mock holds each answer (default 6000; 1500 with --burst)")
    parser.add_argument("--no-retry", action="store_true", help="without the route's retry_policy")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--pending-check", action="store_true",
                      help="KB per request waiting on its ext_authz check (authz-service paused)")
    mode.add_argument("--burst", action="store_true",
                      help="peak memory of the replica's warm-up: N connections, one request each at once")
    parser.add_argument("--accept-per-event", type=int, default=None,
                        help="the listener's max_connections_to_accept_per_socket_event instead of envoy.yaml's "
                             "(0: no limit)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/tollgate-conn-memory"))
    args = parser.parse_args()
    sc = next(s for s in bench.scenarios("mock-openai-key-1") if s.name == args.scenario)
    if sc.envoy is None:
        parser.error("the scenario has no Envoy")
    if not args.burst:
        args.hold_ms = args.hold_ms or 6000
    if args.no_retry:
        sc.envoy = bench.without_retry_policy(sc.envoy)
    if args.accept_per_event is not None:
        sc.envoy = with_accept_per_event(sc.envoy, args.accept_per_event)
    if args.pending_check and "authz" not in sc.components:
        parser.error(f"--pending-check: {sc.name} has no authz-service")
    stack = bench.start_stack(sc, args.out, envoy_concurrency=bench.BIFROST_ENVOY_CONCURRENCY)
    try:
        if args.pending_check:
            result = asyncio.run(pending_check(sc, stack, args.connections, args.hold_ms))
        elif args.burst:
            result = burst(sc, stack, args.connections, args.hold_ms or bench.BIFROST_LATENCY_MS, args.out)
        else:
            result = asyncio.run(measure(sc, stack, args.connections, args.hold_ms))
    except BaseException:
        stack.dump_logs()
        raise
    finally:
        stack.stop()
    result["retry_policy"] = not args.no_retry
    result["accept_per_event"] = [lst.get("max_connections_to_accept_per_socket_event", 0)
                                  for lst in sc.envoy["static_resources"]["listeners"]]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
