#!/usr/bin/env python3
"""Envoy's live heap per downstream connection and per in-flight request.

    conn_memory.py SCENARIO [--connections N] [--no-retry]

Starts a fresh stack of one bench scenario (bench.py's configs, Envoy with
two workers as in the Bifrost replica) and reads Envoy's live allocations
(admin `/memory`, `allocated`) three times: idle; after N HTTP/1.1
connections each made one quick request and stayed open; and while one
request per connection waits for the provider (mock-llm answers after
`--hold-ms`). The differences over N are the KB that an idle keep-alive
connection and a request in flight on it hold. `--no-retry` drops the
route's retry_policy (a diagnosis: what buffering the body for retries
holds). Loopback only; bounded by the hold time and a timeout per call.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402

TIMEOUT_S = 30


def allocated_mb(admin_url: str) -> float:
    with urllib.request.urlopen(f"{admin_url}/memory", timeout=5) as resp:
        return int(json.loads(resp.read())["allocated"]) / 2**20


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
    idle = allocated_mb(stack.admin_url)
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
        open_idle = allocated_mb(stack.admin_url)
        held = asyncio.gather(*(exchange(r, w, request(sc, url.netloc, hold_ms)) for r, w in conns))
        await asyncio.sleep(hold_ms / 1000 * 2 / 3)
        in_flight = allocated_mb(stack.admin_url)
        await held
    finally:
        for _, writer in conns:
            writer.close()
    return {"scenario": sc.name, "connections": n, "idle_allocated_mb": round(idle, 1),
            "kb_per_idle_connection": round((open_idle - idle) * 1024 / n, 1),
            "kb_per_request_in_flight": round((in_flight - open_idle) * 1024 / n, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario")
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--hold-ms", type=int, default=6000)
    parser.add_argument("--no-retry", action="store_true", help="without the route's retry_policy")
    parser.add_argument("--out", type=Path, default=Path("/tmp/tollgate-conn-memory"))
    args = parser.parse_args()
    sc = next(s for s in bench.scenarios("mock-openai-key-1") if s.name == args.scenario)
    if sc.envoy is None:
        parser.error("the scenario has no Envoy")
    if args.no_retry:
        sc.envoy = bench.without_retry_policy(sc.envoy)
    stack = bench.start_stack(sc, args.out, envoy_concurrency=bench.BIFROST_ENVOY_CONCURRENCY)
    try:
        result = asyncio.run(measure(sc, stack, args.connections, args.hold_ms))
    except BaseException:
        stack.dump_logs()
        raise
    finally:
        stack.stop()
    result["retry_policy"] = not args.no_retry
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
