"""REPORT.md and PNG charts from a bench run's summary.json.

    python bench/report.py bench/results/<run>     (re-render a past run)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

PCTS = ("50", "90", "99", "99.9")


def _fmt(v: float | None, unit: str = "") -> str:
    return "–" if v is None else f"{v:,.0f}{unit}"


def _run(s: dict, name: str | None, rate: str) -> dict | None:
    return s["scenarios"].get(name, {}).get("rates", {}).get(rate) if name else None


def _baseline(sc: dict) -> str:
    """The plain Envoy at the scenario's body size (runs before the floors existed: `envoy`)."""
    return sc.get("baseline", "envoy")


def _cpu_ratio(r: dict, base: dict | None) -> str:
    if not base or not base["gateway_cpu_us_per_request"]:
        return "–"
    return f"{r['gateway_cpu_us_per_request'] / base['gateway_cpu_us_per_request']:.2f}"


def _envoy_ratio(r: dict, base: dict | None) -> str:
    """The Envoy process alone (filters and VM included) over the baseline's Envoy."""
    mine, theirs = r["cpu_us_per_request"].get("envoy"), (base or {}).get("cpu_us_per_request", {}).get("envoy")
    return f"{mine / theirs:.2f}" if mine is not None and theirs else "–"


def latency_table(s: dict, rate: str) -> list[str]:
    rows = ["| scenario | success | served rps | p50 µs | p90 µs | p99 µs | p99.9 µs | "
            "+p50 / +p99 over plain Envoy | +p50 / +p99 over direct |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, sc in s["scenarios"].items():
        r = sc["rates"].get(rate)
        if not r:
            continue
        lat = r["latency_us"]
        over = []
        for b in (_baseline(sc), "direct"):
            base = _run(s, b, rate)
            if base and name != b:
                over.append(f"{lat['50'] - base['latency_us']['50']:+,.0f} / "
                            f"{lat['99'] - base['latency_us']['99']:+,.0f}")
            else:
                over.append("–")
        rows.append(f"| {name} | {r['success_rate']:.2%} | {r['actual_qps']:,.0f} | "
                    + " | ".join(_fmt(lat[p]) for p in PCTS) + f" | {over[0]} | {over[1]} |")
    return rows


def cpu_table(s: dict, rate: str) -> list[str]:
    rows = ["| scenario | Envoy µs/req | authz µs/req | Redis µs/req | gateway sum µs/req | × envoy | × floor | "
            "Envoy alone × envoy | mock µs/req | peak RSS Envoy / authz / Redis / mock MB | fortio cores | "
            "authz fail-open | Redis calls per Check |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, sc in s["scenarios"].items():
        r = sc["rates"].get(rate)
        if not r:
            continue
        c, m = r["cpu_us_per_request"], r["peak_rss_mb"]
        floor = sc.get("floor")
        floor_ratio = f"{_cpu_ratio(r, _run(s, floor, rate))} ({floor})" if _run(s, floor, rate) else "–"
        redis_calls = r.get("redis_calls_per_check")
        base = _run(s, _baseline(sc), rate)
        rows.append(f"| {name} | {_fmt(c.get('envoy'))} | {_fmt(c.get('authz'))} | {_fmt(c.get('redis'))} | "
                    f"{_fmt(r['gateway_cpu_us_per_request'])} | {_cpu_ratio(r, base)} | "
                    f"{floor_ratio} | {_envoy_ratio(r, base)} | {_fmt(c.get('mock'))} | "
                    + " / ".join(_fmt(m.get(n)) for n in ("envoy", "authz", "redis", "mock"))
                    + f" | {r.get('fortio_cpu_cores', '–')} | {_fmt(r.get('authz_fail_open'))} | "
                    + ("n/a" if redis_calls is None else f"{redis_calls:.2f}") + " |")
    return rows


def charts(s: dict, out: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    rates = sorted({r for sc in s["scenarios"].values() for r in sc["rates"]}, key=float)
    if rates:
        rate = rates[len(rates) // 2]
        fig, ax = plt.subplots(figsize=(8, 4.5))
        names = [n for n, sc in s["scenarios"].items() if rate in sc["rates"]]
        width = 0.8 / len(PCTS)
        for i, p in enumerate(PCTS):
            ax.bar([x + i * width for x in range(len(names))],
                   [s["scenarios"][n]["rates"][rate]["latency_us"][p] / 1000 for n in names], width, label=f"p{p}")
        ax.set_xticks([x + 1.5 * width for x in range(len(names))], names)
        ax.set_ylabel("latency (ms)")
        ax.set_title(f"Latency percentiles at {rate} requests/s offered")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "latency.png", dpi=110)
        plt.close(fig)
        made.append("latency.png")

        # The stepped runs span the widest range of offered load; the smoke
        # and quick plans without steps fall back to the fixed rates.
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
        for name, sc in s["scenarios"].items():
            points = sc.get("steps") or {x: {"actual_qps": r["actual_qps"], "p99_us": r["latency_us"]["99"]}
                                         for x, r in sc["rates"].items()}
            xs = sorted(points, key=float)
            ax1.plot([float(x) for x in xs], [points[x]["actual_qps"] for x in xs], marker="o", label=name)
            ax2.plot([float(x) for x in xs], [points[x]["p99_us"] / 1000 for x in xs], marker="o", label=name)
        ax1.set_xlabel("offered requests/s"); ax1.set_ylabel("served requests/s"); ax1.set_title("Throughput")
        ax2.set_xlabel("offered requests/s"); ax2.set_ylabel("p99 latency (ms)"); ax2.set_title("p99 against load")
        ax1.legend(); ax2.legend()
        fig.tight_layout()
        fig.savefig(out / "load.png", dpi=110)
        plt.close(fig)
        made.append("load.png")
    return made


def write_report(s: dict, out: Path) -> None:
    m = s["machine"]
    p = s["plan_settings"]
    workers = s.get("envoy_workers", {"scenarios": 1, "bifrost": 1})
    lines = [f"# Tollgate benchmark ({s['plan']}, {s['started']})", "",
             f"Machine: {m['cores']} cores ({m['cpu']}), {m['memory']} memory, Linux {m['kernel']}; "
             f"Envoy {m['envoy']}; fortio {m['fortio']}. The load generator, Envoy, authz-service, Redis "
             "and the mock share these cores, so only figures measured in this same run are compared.", "",
             "## Definitions", "",
             "- **Overhead** is end to end: a scenario's latency percentile minus the baseline's percentile "
             "under the same offered load, in this run. Baselines: `envoy` (plain Envoy router) and "
             "`direct` (no proxy).",
             "- **Gateway CPU per request**: user+system CPU seconds of Envoy, authz-service and Redis "
             "during the load (from /proc/PID/stat), divided by the requests served. The mock's CPU is "
             "reported apart. `× envoy` is a scenario's gateway sum over the plain Envoy's at the same "
             "request size (`envoy`, or `envoy-512k` for 512 KB bodies). `× floor` is its gateway sum over "
             "the same design with null parts (named in brackets): `authz` over `authz-null` (the same "
             "ext_authz hop to a server that allows everything at once), `wasm` over `wasm-null` (a Wasm "
             "module that only waits for the body and reads it), `full`, `full-stream`, `responses`, "
             "`responses-openai`, `messages` and `messages-openai` over `floor` "
             "(both null parts together): what the design costs beyond the hops the architecture requires; "
             "`full-429` over `full`: what retrying 10 % of the requests once (after a 429, on another key) "
             "costs, so (× floor - 1) × 10 is the cost of one retry in requests. "
             "`Envoy alone × envoy` compares the Envoy process only (its filters and Wasm VM included). At the "
             "low rate of the 512 KB scenarios, fixed background work (health checks, the filter's usage "
             "flush, Redis's timers) weighs on authz and Redis per request.",
             "- **Redis calls per Check**: the authz service's Redis round trips "
             "(`tollgate_authz_redis_calls_total`, every `op`) over its decisions (`tollgate_authz_checks_total`) "
             "during the load; n/a where the service does not export them.",
             "- **Latency** from fortio's histogram with 10 µs buckets (`-r 0.00001`), clients spread over "
             "each interval (`-uniform`) rather than firing together. `fortio cores` is the load "
             "generator's own CPU (CPU seconds per second): near the machine's core count, the generator "
             "is the limit. `authz fail-open` counts checks admitted without a Redis answer (its "
             "in-flight limit or deadline).",
             f"- Load: fortio, {p['conns']} connections, {p['seconds']} s per rate, 127.0.0.1 only; "
             f"Envoy with {workers['scenarios']} worker thread(s). "
             f"Max throughput: offered load stepped over {p['max_steps'] or 'no steps (smoke)'}, "
             f"{p['step_seconds']} s each; a step passes with 100% success, p99 ≤ {p['p99_bound_ms']} ms "
             "and ≥ 95% of the offered requests sent; ≥ marks a scenario that passed the highest step.", "",
             "## Scenarios", ""]
    lines += [f"- `{n}`: {sc['what']}" for n, sc in s["scenarios"].items()]
    by_size: dict[int, dict] = {}
    for n, sc in s["scenarios"].items():
        by_size.setdefault(sc.get("body_bytes") or 0, {})[n] = sc
    for size, group in sorted(by_size.items()):
        sub = {**s, "scenarios": group}
        for rate in sorted({r for sc in group.values() for r in sc["rates"]}, key=float):
            title = f"At {rate} requests/s offered"
            if size:
                title = f"{size // 1024} KB request bodies at {rate} requests/s offered"
            lines += ["", f"## {title}", "", "### Latency (µs)", ""]
            lines += latency_table(sub, rate)
            lines += ["", "### CPU per request and memory", ""]
            lines += cpu_table(sub, rate)
    lines += ["", "## Maximum sustained throughput", "", "| scenario | requests/s | × envoy |", "| --- | --- | --- |"]
    envoy_max = s["scenarios"].get("envoy", {}).get("max_throughput")
    top = max(p["max_steps"], default=0)
    for name, sc in s["scenarios"].items():
        mt = sc.get("max_throughput")
        # Passing the highest step offered bounds the throughput from below only.
        at_top = bool(mt and mt >= 0.99 * top)
        envoy_top = bool(envoy_max and envoy_max >= 0.99 * top)
        if not (mt and envoy_max) or (at_top and envoy_top):
            ratio = "–"
        else:
            ratio = ("≥ " if at_top else "≤ " if envoy_top else "") + f"{mt / envoy_max:.2f}"
        lines.append(f"| {name} | {'≥ ' if at_top else ''}{_fmt(mt)} | {ratio} |")
    if s.get("bifrost"):
        lines += ["", "## Bifrost replica", "",
                  f"Whole gateway (Envoy with {workers['bifrost']} worker thread(s)), provider latency 1.5 s, "
                  "0.13 KB requests; each rate offered for "
                  f"{p.get('bifrost_seconds')} s with connections = rate × 1.5 s × 1.3; a rate is held with 100% "
                  "success and ≥ 95% of the offered requests sent (fortio stops a run when a connection's first "
                  "request fails; such a rate shows fortio's message). Added latency is the "
                  "percentile minus 1.5 s (fortio's histogram is offset by the 1.5 s, so its 10 µs buckets "
                  "cover the added part). Gateway memory is the peak RSS of Envoy + authz-service + Redis "
                  "(Bifrost reports 1,312.79 MB on 2 vCPU / 4 GB and 3,340.44 MB on 4 vCPU / 16 GB at 5,000 rps). "
                  "**KB per in-flight** is, by process, the peak RSS during the load minus the idle stack's RSS "
                  "before the first rate, over the requests in flight when the peak was set: the most Envoy "
                  "had active (its `downstream_rq_active` gauge, sampled every 0.5 s; fortio's warm-up sends one "
                  "request per connection at once, about 1.3 × the steady state's in flight, which is served rate "
                  "× mean latency). "
                  "**Upstream requests per connection**: Envoy's provider-cluster `upstream_rq_total` over "
                  "`upstream_cx_total` since the stack started; an answer labelled `h1` or `h2` ran with the "
                  "provider clusters forced to HTTP/1.1 or HTTP/2, otherwise as envoy.yaml has them.", "",
                  "| answer | offered rps | served rps | success | held | +p50 ms | +p99 ms | gateway MB | "
                  "in flight steady / at peak | KB per in-flight Envoy / authz / Redis | upstream rq per cx | "
                  "gateway CPU µs/req | fortio cores | authz fail-open |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for label, b in s["bifrost"].items():
            for qps, r in b["steps"].items():
                if "error" in r:
                    lines.append(f"| {label} | {float(qps):,.0f} | – | – | no | {r['error']} |" + " – |" * 8)
                    continue
                per = r.get("kb_per_in_flight", {})
                per_kb = " / ".join(f"{per[n]:.1f}" if n in per else "–" for n in ("envoy", "authz", "redis"))
                up = r.get("upstream") or {}
                share = f"{up['rq'] / up['cx']:.1f}" if up.get("cx") else "–"
                lines.append(f"| {label} | {float(qps):,.0f} | {r['actual_qps']:,.0f} | {r['success_rate']:.2%} | "
                             f"{'yes' if r['held'] else 'no'} | {r['added_ms']['50']} | {r['added_ms']['99']} | "
                             f"{r['gateway_peak_rss_mb']:,.0f} | {_fmt(r.get('in_flight'))} / "
                             f"{_fmt(r.get('peak_in_flight'))} | {per_kb} | {share} | "
                             f"{_fmt(r['gateway_cpu_us_per_request'])} | "
                             f"{r.get('fortio_cpu_cores', '–')} | {_fmt(r.get('authz_fail_open'))} |")
        lines += [""] + [f"Highest rate held with {label} answers: {_fmt(b['highest_rate_held'])} requests/s."
                         for label, b in s["bifrost"].items()]
    made = charts(s, out)
    if made:
        lines += ["", "## Charts", ""] + [f"![{c}]({c})" for c in made]
    (out / "REPORT.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    run = Path(sys.argv[1])
    write_report(json.loads((run / "summary.json").read_text()), run)
    print(f"report: {run / 'REPORT.md'}")
