#!/usr/bin/env python3
"""Prompt-cache economics: agent sessions replayed through two gateways.

    bench/cache.py                       200 sessions x 10 turns (make bench-cache)
    bench/cache.py --sessions 6 --turns 4  a smoke (tests/test_bench_cache.py)

Agent sessions resend a growing prefix every turn. A third of them are named
as Claude Code names them (`x-claude-code-session-id` on /v1/messages), a
third as Codex does (`prompt_cache_key` on /v1/responses), a third by nothing
but their prompt (/v1/chat/completions). All go to one provider (OpenAI,
`openai/gpt-4o-mini`) with four keys of weights 1, 2, 3 and 4, through TWO
gateways (two Envoys sharing one authz-service, Redis and mock-llm): turn t
goes to gateway t mod 2. mock-llm simulates each key's prompt cache
(mock-llm/README.md, "Prompt caches") and names the key of every answer
(`x-mock-key-id`).

Three key choices, each on a fresh stack (empty caches):
    affine   Tollgate's default: weighted rendezvous hashing on the session
    random   today's weighted random choice (the provider's key_affinity: false)
    single   one key only (the best a provider cache can do)

For each: the hit ratio (cached / input tokens, from the answers' usage),
dollars per session (config/prices.yaml: cached input at its cached price),
each key's share of sessions (by its first turn) beside its weight, the share
of sessions that stayed on one key, and the share whose two gateways picked
the same single key. Results: OUT/cache.json and a table on stdout. Every
request targets 127.0.0.1; every process is stopped at the end.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import shutil
import sys
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

import bench as B
from plugin_config import plugin_config, set_plugin_config
from stack import DEMO_KEY, Stack, free_ports, write_private

MODEL = "openai/gpt-4o-mini"
WEIGHTS = (1, 2, 3, 4)
KEYS = [{"id": f"cache-{i}", "value": f"mock-openai-key-cache-{i}", "weight": w} for i, w in enumerate(WEIGHTS)]
MOCK_KEYS = {"openai": [{"name": k["id"], "key": k["value"]} for k in KEYS]}
KINDS = ("claude-code", "codex", "plain")
COMPONENTS = ("redis", "mock", "authz", "envoy")

# The prompt every session of a kind starts with: an agent's long system
# prompt and its tools (as Claude Code's and Codex's are the same for all).
_WORDS = ("read the file before editing it, run the tests after every change, keep diffs small, "
          "never print secrets, prefer the project's own helpers, explain what changed and why. ").split()
TOOLS = [{"name": n, "description": f"{n} a file or a command in the workspace",
          "schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}
         for n in ("Read", "Edit", "Bash")]


def filler(rng: random.Random, chars: int) -> str:
    out, n = [], 0
    while n < chars:
        w = rng.choice(_WORDS)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)[:chars]


SYSTEM = "You are a coding agent. " + filler(random.Random(39), 6000)


@dataclass
class Session:
    index: int
    kind: str
    name: str              # the client's session id (Claude Code, Codex)
    first: str             # the first user turn
    turns: list = field(default_factory=list)   # (assistant answer, next user turn)


def make_sessions(n: int, turns: int, seed: int) -> list[Session]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        s = Session(i, KINDS[i % len(KINDS)], str(uuid.UUID(int=rng.getrandbits(128))),
                    f"Task {i}: " + filler(rng, 1000))
        s.turns = [f"Tool output for turn {t}:\n" + filler(rng, 2000) for t in range(1, turns)]
        out.append(s)
    return out


# -- one request in each client's own API ------------------------------------
def request(s: Session, answers: list[str], turn: int) -> tuple[str, dict, dict]:
    """(path under /v1, headers, body) of turn `turn` (0-based), the answers so far included."""
    users = [s.first] + s.turns[:turn]
    if s.kind == "claude-code":
        msgs = []
        for t, u in enumerate(users):
            if t:
                msgs.append({"role": "assistant", "content": [{"type": "text", "text": answers[t - 1]}]})
            block = {"type": "text", "text": u}
            if t == turn:  # Claude Code moves its breakpoint to the newest turn
                block["cache_control"] = {"type": "ephemeral"}
            msgs.append({"role": "user", "content": [block]})
        body = {"model": MODEL, "max_tokens": 256,
                "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
                "tools": [{"name": t["name"], "description": t["description"], "input_schema": t["schema"]}
                          for t in TOOLS],
                "messages": msgs}
        return "messages", {"x-api-key": DEMO_KEY, "anthropic-version": "2023-06-01",
                            "x-claude-code-session-id": s.name}, body
    if s.kind == "codex":
        items = []
        for t, u in enumerate(users):
            if t:
                items.append({"type": "message", "role": "assistant",
                              "content": [{"type": "output_text", "text": answers[t - 1], "annotations": []}]})
            items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": u}]})
        body = {"model": MODEL, "instructions": SYSTEM, "input": items, "store": False, "prompt_cache_key": s.name,
                "tools": [{"type": "function", "name": t["name"], "description": t["description"],
                           "parameters": t["schema"]} for t in TOOLS]}
        return "responses", {"authorization": f"Bearer {DEMO_KEY}"}, body
    msgs = [{"role": "system", "content": SYSTEM}]
    for t, u in enumerate(users):
        if t:
            msgs.append({"role": "assistant", "content": answers[t - 1]})
        msgs.append({"role": "user", "content": u})
    body = {"model": MODEL, "messages": msgs,
            "tools": [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                                        "parameters": t["schema"]}} for t in TOOLS]}
    return "chat/completions", {"authorization": f"Bearer {DEMO_KEY}"}, body


def read_answer(kind: str, doc: dict) -> tuple[str, dict]:
    """(answer text, usage as {input, cached, write, output}) from each API's answer."""
    u = doc.get("usage") or {}
    if kind == "claude-code":
        read, write = u.get("cache_read_input_tokens", 0), u.get("cache_creation_input_tokens", 0)
        text = next(b["text"] for b in doc["content"] if b.get("type") == "text")
        return text, {"input": u["input_tokens"] + read + write, "cached": read, "write": write,
                      "output": u["output_tokens"]}
    if kind == "codex":
        msg = next(o for o in doc["output"] if o.get("type") == "message")
        return msg["content"][0]["text"], {"input": u["input_tokens"], "write": 0, "output": u["output_tokens"],
                                           "cached": (u.get("input_tokens_details") or {}).get("cached_tokens", 0)}
    return doc["choices"][0]["message"]["content"], {
        "input": u["prompt_tokens"], "write": 0, "output": u["completion_tokens"],
        "cached": (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)}


def post(url: str, headers: dict, body: dict) -> tuple[int, dict, str | None]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read()), resp.headers.get("x-mock-key-id")
    except urllib.error.HTTPError as err:
        return err.code, {"error": err.read().decode(errors="replace")[:500]}, None


def replay(s: Session, gateways: list[Stack]) -> dict:
    """Every turn of one session, turn t through gateway t mod 2."""
    answers, rows = [], []
    for turn in range(len(s.turns) + 1):
        gw = turn % len(gateways)
        path, headers, body = request(s, answers, turn)
        status, doc, key = post(f"{gateways[gw].base_url}/{path}", headers, body)
        if status != 200:
            return {"kind": s.kind, "error": f"turn {turn} on gateway {gw}: {status} {doc}"}
        text, usage = read_answer(s.kind, doc)
        answers.append(text)
        rows.append({"gateway": gw, "key": key, **usage})
    return {"kind": s.kind, "turns": rows}


# -- two gateways ---------------------------------------------------------------
def second_gateway(first: Stack, run_dir: Path) -> Stack:
    """Another Envoy with `first`'s config in front of `first`'s authz-service
    and mock-llm (its own listener and admin ports, the same usage token)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    run_dir.chmod(0o700)
    fresh = free_ports()
    ports = {**first.ports, "TG_GATEWAY_PORT": fresh["TG_GATEWAY_PORT"], "TG_ADMIN_PORT": fresh["TG_ADMIN_PORT"]}
    gw = Stack(run_dir=run_dir, ports=ports, components=("envoy",), envoy_config=first.envoy_config,
               envoy_concurrency=first.envoy_concurrency)
    write_private(gw.usage_token_path, first.usage_token_path.read_text())
    gw.start_component("envoy")
    return gw


def envoy_for(choice: str) -> dict:
    cfg = B.with_provider_keys(B.load_envoy(), "openai", KEYS[:1] if choice == "single" else KEYS)
    if choice == "random":
        plugin = plugin_config(cfg)
        plugin["providers"]["openai"]["key_affinity"] = False
        set_plugin_config(cfg, plugin)
    return cfg


def run_choice(choice: str, sessions: list[Session], out: Path, workers: int) -> dict:
    sc = B.Scenario(f"cache-{choice}", f"agent sessions, {choice} key choice", COMPONENTS, envoy_for(choice), MODEL,
                    mock_keys=MOCK_KEYS)
    first = B.start_stack(sc, out, mock_config=B.mock_config_with(sc.mock_keys, out / "stacks" / sc.name))
    gateways = [first]
    try:
        gateways.append(second_gateway(first, out / "stacks" / f"{sc.name}-b"))
        started = time.monotonic()
        with ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(lambda s: replay(s, gateways), sessions))
        return summarize(choice, results, time.monotonic() - started)
    except BaseException:
        for gw in gateways:
            gw.dump_logs()
        raise
    finally:
        for gw in reversed(gateways):
            gw.stop()


# -- figures ---------------------------------------------------------------------
def prices(model: str) -> dict:
    row = yaml.safe_load((B.ROOT / "config" / "prices.yaml").read_text())["models"][model]
    return {"input": row["input"], "cached_input": row.get("cached_input", row["input"]),
            "cache_write": row.get("cache_write", row["input"]), "output": row["output"]}


def dollars(turn: dict, p: dict) -> float:
    plain = turn["input"] - turn["cached"] - turn["write"]
    return (plain * p["input"] + turn["cached"] * p["cached_input"] + turn["write"] * p["cache_write"]
            + turn["output"] * p["output"]) / 1e6


def ratio(rows: list[dict]) -> float:
    total = sum(r["input"] for r in rows)
    return round(sum(r["cached"] for r in rows) / total, 4) if total else 0.0


def summarize(choice: str, results: list[dict], seconds: float) -> dict:
    errors = [r["error"] for r in results if "error" in r]
    done = [r for r in results if "error" not in r]
    rows = [t for r in done for t in r["turns"]]
    p = prices(MODEL)
    key_ids = [k["id"] for k in (KEYS[:1] if choice == "single" else KEYS)]
    total_weight = sum(k["weight"] for k in KEYS if k["id"] in key_ids)
    first_keys = [r["turns"][0]["key"] for r in done]
    one_key = [len({t["key"] for t in r["turns"]}) == 1 for r in done]
    both = [{t["key"] for t in r["turns"] if t["gateway"] == 0} == {t["key"] for t in r["turns"] if t["gateway"] == 1}
            and len({t["key"] for t in r["turns"]}) == 1 for r in done]
    n = len(done) or 1
    return {
        "choice": choice, "sessions": len(done), "requests": len(rows), "errors": errors,
        "seconds": round(seconds, 2),
        "hit_ratio": ratio(rows),
        "hit_ratio_by_kind": {k: ratio([t for r in done if r["kind"] == k for t in r["turns"]]) for k in KINDS},
        "input_tokens": sum(r["input"] for r in rows), "cached_tokens": sum(r["cached"] for r in rows),
        "usd_per_session": round(sum(dollars(t, p) for t in rows) / n, 6),
        "key_share": {k: {"weight": round(next(x["weight"] for x in KEYS if x["id"] == k) / total_weight, 3),
                          "sessions": round(first_keys.count(k) / n, 3)} for k in key_ids},
        "unknown_keys": sorted({t["key"] for t in rows if t["key"] not in key_ids}, key=str),
        "one_key_sessions": round(sum(one_key) / n, 4),
        "same_key_both_gateways": round(sum(both) / n, 4),
    }


def table(res: dict) -> str:
    rows = [("hit ratio (cached ÷ input tokens)", lambda r: f"{r['hit_ratio']:.3f}"),
            ("  Claude Code / Codex / plain chat", lambda r: " / ".join(f"{r['hit_ratio_by_kind'][k]:.3f}" for k in KINDS)),
            ("$ per session", lambda r: f"{r['usd_per_session']:.5f}"),
            ("sessions on one key", lambda r: f"{r['one_key_sessions']:.1%}"),
            ("both gateways, same single key", lambda r: f"{r['same_key_both_gateways']:.1%}"),
            ("key share of sessions (weight)", lambda r: ", ".join(
                f"{k} {v['sessions']:.3f} ({v['weight']:.3f})" for k, v in r["key_share"].items())),
            ("requests, errors, seconds", lambda r: f"{r['requests']}, {len(r['errors'])}, {r['seconds']}")]
    choices = list(res)
    lines = ["| | " + " | ".join(choices) + " |", "| --- |" + " --- |" * len(choices)]
    lines += [f"| {label} | " + " | ".join(f(res[c]) for c in choices) + " |" for label, f in rows]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--workers", type=int, default=8, help="sessions replayed at once")
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--choices", default="affine,random,single")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or B.ROOT / "bench" / "results" / f"{stamp}-cache"
    if out.exists():
        shutil.rmtree(out / "stacks", ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    sessions = make_sessions(args.sessions, args.turns, args.seed)
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    res = {}
    for choice in args.choices.split(","):
        print(f"cache: {choice}: {args.sessions} sessions x {args.turns} turns through two gateways", flush=True)
        res[choice] = run_choice(choice, sessions, out, args.workers)
        print(f"  hit ratio {res[choice]['hit_ratio']:.3f}, ${res[choice]['usd_per_session']:.5f} a session, "
              f"{res[choice]['seconds']} s", flush=True)
    doc = {"started": stamp, "sessions": args.sessions, "turns": args.turns, "model": MODEL,
           "weights": {k["id"]: k["weight"] for k in KEYS}, "prices": prices(MODEL),
           "load_average": {"before": load_before, "after": Path("/proc/loadavg").read_text().split()[:3]},
           "machine": B.machine(), "results": res}
    if "affine" in res and "single" in res and res["single"]["hit_ratio"]:
        doc["affine_over_single"] = round(res["affine"]["hit_ratio"] / res["single"]["hit_ratio"], 4)
    (out / "cache.json").write_text(json.dumps(doc, indent=2))
    print(table(res))
    if "affine_over_single" in doc:
        print(f"affine hit ratio / single key's: {doc['affine_over_single']:.3f} (target >= 0.95)")
    print(f"load average {' '.join(load_before)} -> {' '.join(doc['load_average']['after'])}; results in {out}")
    failed = {c: r["errors"][:3] for c, r in res.items() if r["errors"] or r["unknown_keys"]}
    if failed:
        print(f"cache: FAILED: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
