"""REPORT-peers.md and peers.png from a `peers.py` run's summary.json.

    python bench/peers_report.py bench/results/<run>     (re-render a past run)

Every figure is read from the summary; every ratio divides two figures of
the same run: a gateway's over Tollgate's (`× tollgate`) or over the plain
Envoy's (`× envoy`), at the same rate and mode; latency overheads subtract
the `direct` baseline (fortio → mock-llm) at the same rate and mode. The
`floor` (Envoy with a do-nothing Wasm filter and ext_authz against an
allow-everything service) is what Tollgate's architecture costs before any
of its work: a peer below it is below what any gateway of this shape holds.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from bench import held as B_held
from report import _fmt

PEERS = ("litellm", "portkey", "aigw")
SHOWN = ("envoy", "floor", "tollgate", "tollgate-keys", "litellm", "litellm-keys", "portkey", "aigw")
COLORS = {"envoy": "#999999", "floor": "#c7c7c7", "tollgate": "#1f77b4", "tollgate-keys": "#6baed6",
          "litellm": "#d62728", "litellm-keys": "#ff9896", "portkey": "#ff7f0e", "aigw": "#2ca02c"}


def rate_held(s: dict, r: dict, rate: str) -> bool:
    """A fixed rate was held over the time it ran (runs before the plan had
    a minimum request count ran every rate for the plan's seconds)."""
    return B_held(r, float(rate), r.get("seconds", s["plan_settings"]["seconds"]))


def per_rate(plan: dict) -> str:
    """How long each fixed rate ran, in words."""
    text = f"{plan['seconds']:g} s per rate"
    low = [q for q in plan["rates"] if plan.get("min_requests", 0) / q > plan["seconds"]]
    if low:
        text += (f" (at least {plan['min_requests']:,} requests: "
                 + ", ".join(f"{plan['min_requests'] / q:g} s at {q:g} requests/s" for q in low) + ")")
    return text


def _load(s: dict, gw: str, mode: str, rate: str) -> dict | None:
    return s["scenarios"].get(f"{gw}-{mode}", {}).get("rates", {}).get(rate)


def _x(a: float | None, b: float | None) -> str:
    """a over b, where both are positive (an overhead at or below the
    baseline's has no ratio)."""
    return f"{a / b:.2f}×" if a is not None and b is not None and a > 0 and b > 0 else "–"


def overhead_us(s: dict, gw: str, mode: str, rate: str, pct: str) -> float | None:
    """The gateway's latency percentile minus direct's, same rate and mode."""
    r, d = _load(s, gw, mode, rate), _load(s, "direct", mode, rate)
    return r["latency_us"][pct] - d["latency_us"][pct] if r and d else None


def _rates(s: dict) -> list[str]:
    return [f"{q:g}" for q in s["plan_settings"]["rates"]]


def cost_table(s: dict, part: int) -> list[str]:
    rows = ["| gateway | mode | rate | served rps | success | CPU µs/req | × envoy | × tollgate | "
            "+p50 µs | +p99 µs | +p99 × tollgate | peak RSS MB | × tollgate |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for rate in _rates(s):
        for mode in ("chat", "stream"):
            t = _load(s, "tollgate", mode, rate)
            e = _load(s, "envoy", mode, rate)
            for name, sc in s["scenarios"].items():
                if sc["mode"] != mode or name.startswith("direct") or (sc["part"] != part and sc["gateway"] != "tollgate"):
                    continue
                r = sc["rates"].get(rate)
                if not r:
                    continue
                gw = sc["gateway"]
                cpu, p50, p99 = (r["gateway_cpu_us_per_request"], overhead_us(s, gw, mode, rate, "50"),
                                 overhead_us(s, gw, mode, rate, "99"))
                t99 = overhead_us(s, "tollgate", mode, rate, "99")
                held = "" if rate_held(s, r, rate) else " (not held)"
                rows.append(
                    f"| {gw} | {mode} | {rate} | {r['actual_qps']:,.0f}{held} | {r['success_rate']:.2%} | {cpu:,.0f} | "
                    f"{_x(cpu, e and e['gateway_cpu_us_per_request'])} | "
                    f"{_x(cpu, t and t['gateway_cpu_us_per_request'])} | {_fmt(p50)} | {_fmt(p99)} | "
                    f"{_x(p99, t99)} | {r['gateway_peak_rss_mb']:,.1f} | "
                    f"{_x(r['gateway_peak_rss_mb'], t and t['gateway_peak_rss_mb'])} |")
    return rows


def throughput_table(s: dict) -> list[str]:
    rows = ["| gateway | chat: highest step held (served rps) | stream | startup s | idle RSS / PSS MB | "
            "PSS after the chat loads MB |", "| --- | --- | --- | --- | --- | --- |"]
    for gw in ("direct", *SHOWN):
        chat, stream = s["scenarios"].get(f"{gw}-chat"), s["scenarios"].get(f"{gw}-stream")
        if not chat:
            continue

        def top(sc):
            if not sc or not sc["steps"]:
                return "–"
            held = [q for q, st in sc["steps"].items() if st["held"]]
            if not held:
                return f"< {next(iter(sc['steps']))} (none held)"
            last = list(sc["steps"])[-1]
            more = "" if held[-1] != last else " (highest step)"
            return f"{held[-1]} ({_fmt(sc['max_throughput'])}){more}"

        rows.append(f"| {gw} | {top(chat)} | {top(stream)} | {chat['startup_s']} | {chat.get('idle_rss_mb', '–')} / "
                    f"{chat.get('idle_pss_mb', '–')} | {chat.get('pss_after_mb', '–')} |")
    return rows


def replica_table(s: dict) -> list[str]:
    rows = ["| gateway | answer | highest rate held | at each rate: served rps, success, +p50 / +p99 ms over 1.5 s, "
            "gateway CPU µs/req, peak RSS MB |", "| --- | --- | --- | --- |"]
    for gw, sizes in s["replica"].items():
        for label, b in sizes.items():
            cells = []
            for q, r in b["steps"].items():
                if "error" in r:
                    cells.append(f"{q}: failed ({r['error'][:80]})")
                else:
                    cells.append(f"{q}: {r['actual_qps']:,.0f}, {r['success_rate']:.2%}, +{r['added_ms']['50']} / "
                                 f"+{r['added_ms']['99']}, {r['gateway_cpu_us_per_request']:,.0f}, "
                                 f"{r['gateway_peak_rss_mb']:,.0f}")
            rows.append(f"| {gw} | {label} | {_fmt(b['highest_rate_held'])} | {'; '.join(cells)} |")
    return rows


def replica_memory(s: dict) -> list[str]:
    """Tollgate's peak RSS, and the floor's, over plain Envoy's at each
    replica rate both served (the same route and retry policy)."""
    e = s["replica"].get("envoy", {})
    lines = []
    for gw, what in (("tollgate", "Tollgate"), ("floor", "the floor")):
        for label, b in s["replica"].get(gw, {}).items():
            cells = []
            for q, r in b["steps"].items():
                er = e.get(label, {}).get("steps", {}).get(q)
                if "error" in r or not er or "error" in er:
                    continue
                held = "" if r["held"] and er["held"] else " (not held)"
                cells.append(f"{q}: {_x(r['gateway_peak_rss_mb'], er['gateway_peak_rss_mb'])}{held}")
            if cells:
                lines.append(f"- {what}, {label}: " + ", ".join(cells))
    return (["Peak RSS × plain Envoy's (same route and retry policy), by offered rate:", "", *lines]
            if lines else [])


def headline(s: dict) -> list[str]:
    """One line per peer (and the floor) and fixed rate: its ratios to
    Tollgate, non-streaming and streaming, a rate the peer or Tollgate did not
    hold marked (its CPU per request and latency are then those of a queue);
    a peer's peak RSS over the floor's too. The README's claim is read from
    here."""
    lines = []
    for peer, base in (("floor", "tollgate"), *((p, "tollgate") for p in PEERS), ("litellm-keys", "tollgate-keys")):
        for rate in _rates(s):
            parts = []
            for mode in ("chat", "stream"):
                p, t = _load(s, peer, mode, rate), _load(s, base, mode, rate)
                if not p or not t:
                    continue
                f = _load(s, "floor", mode, rate) if peer != "floor" else None
                late = [g for g, r in ((peer, p), (base, t)) if not rate_held(s, r, rate)]
                parts.append(f"{mode}{' (not held by ' + ', '.join(late) + ')' if late else ''}: CPU per request "
                             f"{_x(p['gateway_cpu_us_per_request'], t['gateway_cpu_us_per_request'])}, p99 overhead "
                             f"{_x(overhead_us(s, peer, mode, rate, '99'), overhead_us(s, base, mode, rate, '99'))}, "
                             f"peak RSS {_x(p['gateway_peak_rss_mb'], t['gateway_peak_rss_mb'])}"
                             + (f" (× the floor: {_x(p['gateway_peak_rss_mb'], f['gateway_peak_rss_mb'])})" if f else ""))
            if parts:
                against = "Tollgate" if base == "tollgate" else f"`{base}`"
                lines.append(f"- **{peer}** at {rate} requests/s, × {against}: " + "; ".join(parts))
    return lines


def chart(s: dict, out: Path) -> str | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rate = _rates(s)[0]
    gws = [g for g in SHOWN if f"{g}-chat" in s["scenarios"]]
    if not gws:
        return None
    panels = [
        ("gateway CPU per request, µs", lambda g, m: (_load(s, g, m, rate) or {}).get("gateway_cpu_us_per_request")),
        ("p99 overhead over direct, ms", lambda g, m: (lambda v: v / 1000 if v is not None else None)(
            overhead_us(s, g, m, rate, "99"))),
        ("peak RSS of the gateway, MB", lambda g, m: (_load(s, g, m, rate) or {}).get("gateway_peak_rss_mb")),
        ("highest step held, requests/s", lambda g, m: s["scenarios"].get(f"{g}-{m}", {}).get("max_throughput")),
    ]
    fig, axes = plt.subplots(1, 4, figsize=(17, 4.2))
    for ax, (title, value) in zip(axes, panels):
        width = 0.8 / max(len(gws), 1)
        for i, g in enumerate(gws):
            vals = [value(g, m) for m in ("chat", "stream")]
            xs = [j + i * width for j in range(2)]
            ax.bar(xs, [v or 0 for v in vals], width, label=g, color=COLORS.get(g))
            for x, v in zip(xs, vals):
                if v is not None:
                    ax.text(x, v, f"{v:,.0f}" if v >= 10 else f"{v:.1f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks([j + width * (len(gws) - 1) / 2 for j in range(2)], ["non-streaming", "streaming"])
        ax.set_title(title, fontsize=10)
        if ax.get_ylim()[1] > 1:
            ax.set_yscale("log")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(gws), fontsize=9)
    fig.suptitle(f"Same box, same mock, same fortio load: {rate} requests/s (highest step: stepped to "
                 "100 % success); lower is better except the last", fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(out / "peers.png", dpi=110)
    plt.close(fig)
    return "peers.png"


def write_report(s: dict, out: Path) -> None:
    m, v = s["machine"], s["versions"]
    png = chart(s, out)
    lines = [
        "# Tollgate beside the gateways users would pick instead",
        "",
        f"`bench/peers.py {s['plan']}`, run {s['started']} ({s.get('seconds', 0) / 60:.0f} min), on one machine: "
        f"{m['cores']} cores ({m['cpu']}), {m['memory']}, Envoy {m['envoy']}, fortio {m['fortio']}. "
        f"Load average at the start {s['load_average_start']}, at the end {s.get('load_average_end')}"
        + (f"; the run's processes (every gateway, the mock and fortio alike) at nice {s['nice']}, ahead of the "
           "machine's other work." if s.get("nice") else "."),
        f"Peers: LiteLLM {v.get('litellm') or 'not installed'}, Portkey gateway {v.get('portkey') or 'not installed'}"
        f" (@hono/node-server {v.get('hono_node_server') or '–'}), Envoy AI Gateway's aigw "
        f"{v.get('aigw') or 'not installed'}. Workers: Envoy {s['workers']['envoy']} "
        f"(Tollgate and the plain Envoy), LiteLLM {s['workers']['litellm']}, Portkey {s['workers']['portkey']} "
        f"(one Node process), aigw's Envoy {s['workers'].get('aigw', '–')} (its default, one per core). fortio and "
        "the mock share the same 2 cores: only the ratios within this run mean anything.",
        "",
    ]
    if png:
        lines += [f"![CPU per request, p99 overhead, peak RSS and highest step held, per gateway]({png})", ""]
    lines += ["## In short", "", *headline(s), "",
              "## Part 1: each gateway as its docs recommend for production", "",
              "Same OpenAI chat request (`Say hello to the benchmark.`), non-streaming (`chat`) and streaming "
              "(`stream`), same fortio load (`-uniform`, "
              f"rate ÷ 4 connections, at most {s['plan_settings']['conns']}, {per_rate(s['plan_settings'])} after a "
              f"{s['plan_settings']['warmup_seconds']:g} s warm-up). CPU per request: user+system CPU of every "
              "process of the gateway with its whole process tree, over the requests served. +p50 / +p99: the "
              "gateway's percentile minus `direct`'s at the same rate and mode. Peak RSS: summed over the "
              "gateway's process trees, sampled every 100 ms.", "",
              *cost_table(s, 1), "",
              "### Maximum sustained throughput", "",
              (f"Offered load stepped ({', '.join(f'{q:g}' for q in s['plan_settings']['steps'])} requests/s, "
               f"{s['plan_settings']['step_seconds']:g} s each, stopping at the first not held); a step is held "
               "with 100 % success and at least 95 % of the offered requests sent."
               if s["plan_settings"]["steps"] else "No steps in this plan."), "",
              *throughput_table(s), ""]
    if s["replica"]:
        lines += ["### Bifrost replica", "",
                  "bench.py's replica shape: mock-llm answers after 1.5 s, 1.37 KB and 10.32 KB answers, offered "
                  f"{', '.join(f'{q:g}' for q in s['plan_settings']['replica_rates'])} requests/s for "
                  f"{s['plan_settings']['replica_seconds']:g} s each (rate × 1.5 s × 1.3 + 16 connections), "
                  "stopping at the first rate not held; each answer size on a fresh start of the gateway.", "",
                  *replica_table(s), "", *replica_memory(s), ""]
    lines += ["## Part 2: with a virtual key, a rate limit and a budget", "",
              "`tollgate-keys` is Tollgate with `tg-bench-money` (config/policy.yaml: requests and tokens per "
              "minute, daily and monthly money budgets, all checked on every request), beside `tollgate` with the "
              "demo key (rate limits only); `litellm-keys` is LiteLLM with its Postgres database and a virtual "
              "key made with `/key/generate` (the same per-minute request and token limits, a money budget "
              "reset every 30 days; `peers.LITELLM_KEY`), its CPU and memory Postgres's too "
              f"(Prisma's engines: {v.get('prisma_engines') or '–'}):", "", *cost_table(s, 2), ""]
    for peer, why in s["no_virtual_keys"].items():
        lines.append(f"- **{peer}**: not measured with keys: {why}.")
    lines += ["", "## Not measured", ""]
    for peer, why in s["not_installed"].items():
        lines.append(f"- **{peer}**: {why}.")
    lines += ["", "## How each gateway is set up", "",
              "- **tollgate**: `make run`'s stack (envoy.yaml with its JSON access log, the Wasm filter, ext_authz "
              "→ authz-service, Redis), Envoy with 2 workers, model `openai/gpt-4o-mini` (Tollgate's "
              "`provider/model` form) passed through to the mock's OpenAI API with the provider key from "
              "config/provider-keys.env.",
              "- **envoy**: the same Envoy with only the router (bench.py's `envoy` scenario), 2 workers.",
              "- **floor**: the same Envoy with a Wasm filter that does nothing and ext_authz against authz-null, "
              "which allows every request (bench.py's `floor` scenario), 2 workers; no Redis. What the "
              "architecture costs before any of Tollgate's work: Tollgate adds its module, authz-service's "
              "checks and the Redis they use.",
              "- **litellm**: `litellm --config … --num_workers 2 --run_gunicorn` (LiteLLM's server-tuning guide: "
              "gunicorn when several workers share one container; one per core), one model `gpt-4o-mini` → "
              "`openai/gpt-4o-mini` at the mock with one key, a master key, `LITELLM_LOG=ERROR`, `set_verbose: "
              "false`, JSON logs, the model cost map from the package, `LITELLM_TELEMETRY_DISABLED=true`. Without "
              "its database (see Part 2), so no spend is written.",
              "- **portkey**: `node build/start-server.js --headless --port=…` with `NODE_ENV=production`; the "
              "provider (`x-portkey-provider: openai`), its host (`x-portkey-custom-host`) and key (`authorization`) "
              "in each request's headers, as the open-source gateway takes them. Node runs one thread of "
              "JavaScript: one core at most, as shipped.",
              "- **aigw**: `aigw run --admin-port=…` with no config file, as its CLI docs start: it configures one "
              "OpenAI-compatible backend from `OPENAI_BASE_URL` (the mock) and `OPENAI_API_KEY` (the key it adds "
              "to each request), Envoy's logging at `error`, its access log on stdout (to the run's log file), no "
              "OpenTelemetry exporter; it listens on its fixed port 1975. Its Envoy is this machine's Envoy, "
              "which func-e finds in `AIGW_DATA_HOME` under `ENVOY_VERSION`, so nothing is downloaded; Envoy "
              "Gateway's control plane (in Host mode) and the AI Gateway's ext_proc run in the one aigw process.",
              "- **litellm-keys**: the same LiteLLM with `DATABASE_URL` at a fresh Postgres (Debian's, its "
              "defaults, on loopback) whose schema LiteLLM migrates at start with the prisma CLI, and a key from "
              "`POST /key/generate`; its processes are LiteLLM's tree (each worker's Prisma query engine "
              "included) and Postgres's.",
              "- RSS summed over a process tree counts pages shared between its processes once per process "
              "(LiteLLM's gunicorn arbiter and two workers); the PSS columns (each shared page divided among the "
              "processes sharing it, read once when idle and once after the last load) count them once.", ""]
    (out / "REPORT-peers.md").write_text("\n".join(lines))


if __name__ == "__main__":
    run = Path(sys.argv[1])
    write_report(json.loads((run / "summary.json").read_text()), run)
    print(run / "REPORT-peers.md")
