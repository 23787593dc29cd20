#!/usr/bin/env python3
"""The Bifrost replica's memory for a few scenarios measured in turns: each
scenario's whole-gateway peak RSS over the first one's, round by round.

    bench/replica_turns.py --rounds 2 --rates 2500,5000 envoy floor full

One replica run's peak RSS moves by tens of MB from one start to the next
(fortio's warm-up sets it: how many of its connections' first requests are
in flight, and waiting on what, at the same instant), so a ratio between
two scenarios means something only when they ran in the same minutes.
Every round runs every SPEC in the given order, each on a fresh stack, with
the replica's shape (bench.py's `bifrost`: answers after 1.5 s, rates
stepped up on the same stack, rate × 1.95 + 16 connections). The first SPEC
is the reference. `floor` (Envoy with an allow-everything ext_authz and a
do-nothing Wasm module) says what the architecture itself holds: a target
below the floor's ratio cannot be met by any filter or authz service.

The whole gateway is Envoy, authz-service (or authz-null) and Redis, as in
bench.py's GATEWAY_PROCS; the mock is left out. Results go to stdout and to
OUT/replica_turns.json (default bench/results/<time>-replica-turns/).
"""
from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import statistics
import sys
from pathlib import Path

import bench as B


def ratios(rows: list[dict], reference: str) -> dict:
    """For each SPEC other than `reference`, at each (size, rate): its
    gateway peak RSS over the reference's in the same round, round by
    round, with the lowest and highest."""
    by_key: dict[tuple, float] = {(r["spec"], r["round"], r["answer"], r["rate"]): r["gateway_peak_rss_mb"]
                                  for r in rows}
    out: dict = {}
    for (spec, rnd, answer, rate), mb in sorted(by_key.items(), key=lambda kv: kv[0][1]):
        ref = by_key.get((reference, rnd, answer, rate))
        if spec == reference or not ref:
            continue
        cell = out.setdefault(spec, {}).setdefault(answer, {}).setdefault(rate, {"rounds": []})
        cell["rounds"].append(round(mb / ref, 3))
    for per_answer in out.values():
        for per_rate in per_answer.values():
            for cell in per_rate.values():
                cell["min"], cell["max"] = min(cell["rounds"]), max(cell["rounds"])
                cell["mean"] = round(statistics.fmean(cell["rounds"]), 3)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("specs", nargs="+", help="bench scenarios with Envoy; the first is the reference")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rates", default="2500,5000", help="offered rates, stepped up on each stack")
    parser.add_argument("--seconds", type=float, default=15, help="seconds per rate")
    parser.add_argument("--answer-bytes", default="1370", help="answer sizes: 1370,10320")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    known = {sc.name: sc for sc in B.scenarios("mock-openai-key-1")}
    for name in args.specs:
        if name not in known or known[name].envoy is None:
            parser.error(f"{name}: not a bench scenario with Envoy")
    plan = copy.copy(B.PLANS["replica"])
    plan.bifrost_rates = [float(q) for q in args.rates.split(",")]
    plan.bifrost_seconds = args.seconds
    plan.bifrost_sizes = tuple(int(b) for b in args.answer_bytes.split(","))
    plan.bifrost_protocols = ("config",)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or B.ROOT / "bench" / "results" / f"{stamp}-replica-turns"

    rows = []
    for rnd in range(args.rounds):
        for i, name in enumerate(args.specs):
            spec_out = out / f"round{rnd}-spec{i}"
            (spec_out / "raw").mkdir(parents=True, exist_ok=True)
            print(f"replica-turns: round {rnd + 1}/{args.rounds}: {name}", flush=True)
            for answer, result in B.bifrost(plan, spec_out, known[name], "config").items():
                for rate, step in result["steps"].items():
                    if "gateway_peak_rss_mb" not in step:
                        continue  # fortio gave up at this rate: nothing measured
                    rows.append({"spec": name, "round": rnd, "answer": answer, "rate": rate,
                                 "held": step["held"], "gateway_peak_rss_mb": step["gateway_peak_rss_mb"],
                                 "peak_rss_mb": step["peak_rss_mb"], "envoy_heap_mb": step["envoy_heap_mb"],
                                 "added_ms": step["added_ms"],
                                 "gateway_cpu_us_per_request": step["gateway_cpu_us_per_request"]})

    summary = {"started": stamp, "machine": B.machine(), "specs": args.specs, "rates": plan.bifrost_rates,
               "seconds": args.seconds, "rows": rows, "ratios": ratios(rows, args.specs[0])}
    out.mkdir(parents=True, exist_ok=True)
    (out / "replica_turns.json").write_text(json.dumps(summary, indent=1))
    print(f"\nwhole-gateway peak RSS × {args.specs[0]}, same round (rounds: lowest–highest):")
    for spec, per_answer in summary["ratios"].items():
        for answer, per_rate in per_answer.items():
            cells = ", ".join(f"{rate}/s {c['rounds']} ({c['min']:.2f}–{c['max']:.2f})"
                              for rate, c in per_rate.items())
            print(f"  {spec}, {answer}: {cells}")
    not_held = sorted({f"{r['spec']} at {r['rate']}/s" for r in rows if not r["held"]})
    if not_held:
        print(f"not held (its peak RSS still counted): {', '.join(not_held)}")
    print(f"results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
