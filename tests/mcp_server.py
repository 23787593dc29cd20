#!/usr/bin/env python3
"""A real MCP server for the gateway's tests and for trying `/mcp/demo` by
hand, made with the official `mcp` package (its `MCPServer`, formerly
FastMCP) over streamable HTTP.

    .venv/bin/python tests/mcp_server.py --port 9200 --token mock-mcp-demo-token

Tools: `get_weather(city)`, `search_docs(query)`, `delete_repo(name)` (the
one the demo policy forbids). It only answers requests that carry
`authorization: Bearer <token>`, the credential the gateway injects (so a
test proves the injection), and counts what reached it:

    GET /_stats  → {"replica": ..., "calls": {"get_weather": 2}, "posts": 5,
                    "sessions": ["<Mcp-Session-Id it minted>", ...],
                    "unauthorized": 0}

`--replica NAME` names the process in its answers (two replicas behind one
cluster show which one served a session).
"""
from __future__ import annotations

import argparse
import json
from collections import Counter

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.requests import Request
from starlette.responses import JSONResponse


def build(replica: str, token: str, json_response: bool = False):
    calls: Counter = Counter()
    stats = {"posts": 0, "unauthorized": 0, "sessions": [], "seen_sessions": Counter()}
    server = MCPServer("tollgate-test-tools", instructions="Test tools behind Tollgate.")

    @server.tool()
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls["get_weather"] += 1
        return f"Sunny in {city}, 21 C (replica {replica})"

    @server.tool()
    def search_docs(query: str) -> str:
        """Search the documentation."""
        calls["search_docs"] += 1
        return f"3 results for {query!r}"

    @server.tool()
    def delete_repo(name: str) -> str:
        """Delete a repository (forbidden by the demo policy)."""
        calls["delete_repo"] += 1
        return f"deleted {name}"

    @server.custom_route("/_stats", methods=["GET"])
    async def _stats(_: Request) -> JSONResponse:
        return JSONResponse({"replica": replica, "calls": dict(calls), "posts": stats["posts"],
                             "unauthorized": stats["unauthorized"], "sessions": stats["sessions"],
                             "seen_sessions": dict(stats["seen_sessions"])})

    app = server.streamable_http_app(json_response=json_response)

    async def guarded(scope, receive, send):
        """Only the gateway's credential gets in; counts posts and sessions."""
        if scope["type"] != "http" or scope["path"] == "/_stats":
            return await app(scope, receive, send)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        if headers.get("authorization") != f"Bearer {token}":
            stats["unauthorized"] += 1
            body = json.dumps({"jsonrpc": "2.0", "id": None,
                               "error": {"code": -32001, "message": "missing or wrong server credential"}}).encode()
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json")]})
            return await send({"type": "http.response.body", "body": body})
        if scope["method"] == "POST":
            stats["posts"] += 1
        if sid := headers.get("mcp-session-id"):
            stats["seen_sessions"][sid] += 1

        async def send_counting(message):
            if message["type"] == "http.response.start":
                for k, v in message.get("headers", []):
                    if k.decode().lower() == "mcp-session-id" and v.decode() not in stats["sessions"]:
                        stats["sessions"].append(v.decode())
            await send(message)

        return await app(scope, receive, send_counting)

    return guarded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=9200)
    ap.add_argument("--token", default="mock-mcp-demo-token")
    ap.add_argument("--replica", default="a")
    ap.add_argument("--json-response", action="store_true", help="answer requests with JSON, not SSE")
    args = ap.parse_args()
    uvicorn.run(build(args.replica, args.token, args.json_response), host="127.0.0.1", port=args.port,
                log_level="warning")


if __name__ == "__main__":
    main()
