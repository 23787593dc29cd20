#!/usr/bin/env python3
"""Alternated A/B runs: Envoy's CPU per request for a few Wasm modules (or
scenarios) measured in turns, so that a slow minute on this shared machine
falls on every variant alike.

    bench/ab.py --rate 1000 --rounds 4 wasm wasm@/tmp/new.wasm wasm-null

Each SPEC is a bench scenario (bench.py's names), optionally followed by
`@PATH`: the Tollgate module Envoy loads instead of build/tollgate_filter.wasm
(for the route filter and the router's per-attempt filter alike). Every
round runs every SPEC in the given order, each on a fresh stack: a warm-up,
then fortio at a fixed rate. The first SPEC is the reference: for each other
one the summary says in how many rounds it cost less than the reference did
in the same round. A difference smaller than the rounds' spread is not a
result; filters/README.md ("Where the route filter's CPU goes") has the
figures of past runs.

`--ratio A/B` (repeatable; A and B among the SPECs) also prints A's CPU per
request over B's, Envoy's and the gateway's (Envoy + authz-service + Redis,
as bench/REPORT.md's × columns), as the ratio of the means and round by
round: a target such as `full` ≤ 1.25 × `floor` measured in turns:

    bench/ab.py --rate 1000 --rounds 3 wasm-null wasm floor full --ratio wasm/wasm-null --ratio full/floor

Results go to stdout and to OUT/ab.json (default bench/results/<time>-ab/);
SPEC number i's stack (its Envoy config and logs) is in OUT/spec<i>/.
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

FILTER_WASM = "build/tollgate_filter.wasm"


def with_module(cfg: dict, module: Path) -> dict:
    """cfg with every reference to Tollgate's module pointed at `module`."""
    cfg = copy.deepcopy(cfg)
    found = 0

    def walk(node):
        nonlocal found
        if isinstance(node, dict):
            local = node.get("local")
            if isinstance(local, dict) and local.get("filename") == FILTER_WASM:
                local["filename"] = str(module)
                found += 1
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(cfg)
    if not found:
        raise SystemExit(f"ab: this scenario does not load {FILTER_WASM}; @PATH has nothing to replace")
    return cfg


def parse_spec(spec: str, known: dict[str, B.Scenario]) -> tuple[str, B.Scenario]:
    name, _, path = spec.partition("@")
    sc = known.get(name)
    if sc is None or sc.envoy is None:
        raise SystemExit(f"ab: {name!r} is not a bench scenario with Envoy")
    if not path:
        return spec, sc
    module = Path(path).resolve()
    if not module.is_file():
        raise SystemExit(f"ab: {module}: no such module")
    sc = copy.copy(sc)
    sc.envoy = with_module(sc.envoy, module)
    return spec, sc


def ratio(runs: dict[str, list[dict]], a: str, b: str) -> dict:
    """A's CPU per request over B's, for Envoy and the gateway: the ratio of
    the means, and round by round."""
    out = {}
    for key, name in (("envoy_us", "envoy"), ("gateway_us", "gateway")):
        xs, ys = [row[key] for row in runs[a]], [row[key] for row in runs[b]]
        out[name] = {"of_means": round(statistics.fmean(xs) / statistics.fmean(ys), 3),
                     "rounds": [round(x / y, 3) for x, y in zip(xs, ys)]}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("specs", nargs="+", metavar="SPEC", help="scenario or scenario@module.wasm")
    parser.add_argument("--rate", type=float, default=1000, help="requests/s (default 1000)")
    parser.add_argument("--seconds", type=float, default=12, help="measured seconds per run (default 12)")
    parser.add_argument("--warmup", type=float, default=3, help="warm-up seconds per run (default 3; 0: none)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds (default 4)")
    parser.add_argument("--conns", type=int, default=32, help="fortio connections (default 32, as bench.py cpu)")
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    parser.add_argument("--ratio", action="append", default=[], metavar="A/B",
                        help="also print SPEC A's CPU per request over SPEC B's (repeatable)")
    args = parser.parse_args()
    if args.rounds < 1 or args.rate <= 0 or args.seconds <= 0 or args.warmup < 0:
        parser.error("--rounds, --rate and --seconds must be positive, --warmup not negative")

    known = {sc.name: sc for sc in B.scenarios("mock-openai-key-1")}
    specs = [parse_spec(s, known) for s in args.specs]
    if len({label for label, _ in specs}) != len(specs):
        parser.error("each SPEC once")
    # A/B: split at a "/" that leaves two SPECs (a module path has "/" too).
    pairs = []
    labels = [label for label, _ in specs]
    for r in args.ratio:
        pair = next(((r[:i], r[i + 1:]) for i in range(len(r)) if r[i] == "/"
                     and r[:i] in labels and r[i + 1:] in labels), None)
        if pair is None:
            parser.error(f"--ratio {r}: not A/B with A and B among the SPECs")
        pairs.append(pair)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or B.ROOT / "bench" / "results" / f"{stamp}-ab"
    (out / "raw").mkdir(parents=True, exist_ok=True)

    runs: dict[str, list[dict]] = {label: [] for label, _ in specs}
    for rnd in range(1, args.rounds + 1):
        for i, (label, sc) in enumerate(specs):
            # Each SPEC in its own directory: SPECs can share a scenario.
            work = out / f"spec{i}"
            stack = B.start_stack(sc, work, mock_config=B.mock_config_with(sc.mock_keys, work / "stacks" / sc.name))
            try:
                if args.warmup > 0:  # fortio's -t 0 would run until stopped
                    B.run_load(stack, sc, args.rate, args.warmup, args.conns, out / "raw" / f"warmup-{i}.json")
                r = B.run_load(stack, sc, args.rate, args.seconds, args.conns, out / "raw" / f"r{rnd}-{i}.json")
            finally:
                stack.stop()
            row = {"envoy_us": r["cpu_us_per_request"].get("envoy"), "gateway_us": r["gateway_cpu_us_per_request"],
                   "success_rate": r["success_rate"], "p50_us": r["latency_us"]["50"],
                   "requests": r["requests"]}
            runs[label].append(row)
            print(f"round {rnd} {label}: Envoy {row['envoy_us']} µs/req, gateway {row['gateway_us']} µs/req, "
                  f"p50 {row['p50_us']:.0f} µs, success {row['success_rate']:.2%}", flush=True)

    ref = specs[0][0]
    summary = {}
    print(f"\n{args.rounds} rounds at {args.rate:g} rps, {args.seconds:g} s each; Envoy CPU µs per request")
    for label, _ in specs:
        envoy = [row["envoy_us"] for row in runs[label]]
        s = {"mean": round(statistics.fmean(envoy), 1), "min": min(envoy), "max": max(envoy), "rounds": envoy}
        line = f"  {label}: mean {s['mean']} (min {s['min']}, max {s['max']})"
        if label != ref:
            lower = sum(a < b for a, b in zip(envoy, (row["envoy_us"] for row in runs[ref])))
            s["rounds_lower_than_reference"] = lower
            s["mean_minus_reference"] = round(s["mean"] - statistics.fmean(row["envoy_us"] for row in runs[ref]), 1)
            line += f", {s['mean_minus_reference']:+} vs {ref}, lower in {lower} of {args.rounds} rounds"
        if any(row["success_rate"] < 1.0 for row in runs[label]):
            line += "  (some requests failed: not comparable)"
        summary[label] = s
        print(line)
    ratios = {}
    for a, b in pairs:
        ratios[f"{a}/{b}"] = rt = ratio(runs, a, b)
        print(f"  {a} ÷ {b}: " + ", ".join(
            f"{name} {r['of_means']:.2f} (rounds {', '.join(f'{x:.2f}' for x in r['rounds'])})"
            for name, r in rt.items()))
    (out / "ab.json").write_text(json.dumps({"started": stamp, "rate": args.rate, "seconds": args.seconds,
                                             "rounds": args.rounds, "conns": args.conns, "runs": runs,
                                             "summary": summary, "ratios": ratios}, indent=2))
    print(f"ab: {out / 'ab.json'}")
    return 1 if any(row["success_rate"] < 1.0 for rows in runs.values() for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
