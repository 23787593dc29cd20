//! Criterion benches of the logic crate, driven by a scenario table with a
//! fixed seed. Run: `cargo bench -p tollgate-core --bench core`
//! (`TG_BENCH_CLOCK=cpu` to measure the thread's CPU time instead of
//! wall time, for comparisons on a loaded machine).
//! Goals (issue 5): key selection ≤ 50 ns, 0.13 KB OpenAI→Anthropic request
//! ≤ 5 µs, 10 KB Anthropic→OpenAI response ≤ 30 µs; stream cost per chunk.
//! Goals (issue 6): each provider's 0.13 KB request ≤ 5 µs (Bedrock with
//! SigV4 signing ≤ 15 µs), 10 KB Gemini/Bedrock responses ≤ 30 µs.
//! Goal (issue 39): a session's key among 4 weighted keys < 1 µs.

use std::hint::black_box;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{criterion_group, Criterion, Throughput};
use serde_json::json;
use tollgate_core::config::{Kind, Runtime};
use tollgate_core::keys::{KeyPool, XorShift};
use tollgate_core::plan::{choose_key, plan, RequestFacts};
use tollgate_core::session;
use tollgate_core::translate::{
    for_kind, parse_client_body, Endpoint, Front, RequestCtx, ResponseCtx,
};

const CONFIG: &str = r#"{"providers": {
  "openai": {"kind": "openai", "cluster": "openai", "models": ["gpt-4o-mini"],
    "keys": [{"id": "o1", "value": "k1", "weight": 3}, {"id": "o2", "value": "k2", "weight": 1}]},
  "anthropic": {"kind": "anthropic", "cluster": "anthropic", "models": {"claude-sonnet-4-5": {"max_tokens": 8192}},
    "keys": [{"id": "a1", "value": "k3"}]},
  "azure": {"kind": "azure", "cluster": "azure", "models": ["gpt-4o-mini"], "keys": [{"id": "az1", "value": "k4"}]},
  "gemini": {"kind": "gemini", "cluster": "gemini", "models": ["gemini-2.0-flash"], "keys": [{"id": "g1", "value": "k5"}]},
  "bedrock": {"kind": "bedrock", "cluster": "bedrock", "region": "us-east-1",
    "models": ["anthropic.claude-3-haiku-20240307-v1:0"],
    "keys": [{"id": "b1", "access_key_id": "AKIDEXAMPLE", "value": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}]}},
  "aliases": {"smart": "anthropic/claude-sonnet-4-5"}}"#;

/// Four keys of different weights, for the cache-affine choice.
const AFFINE_CONFIG: &str = r#"{"providers": {"openai": {"kind": "openai", "cluster": "openai",
  "models": ["gpt-4o-mini"], "keys": [{"id": "cache-0", "value": "k0", "weight": 1},
    {"id": "cache-1", "value": "k1", "weight": 2}, {"id": "cache-2", "value": "k2", "weight": 3},
    {"id": "cache-3", "value": "k3", "weight": 4}]}}}"#;

/// 0.13 KB chat request.
const SMALL_REQUEST: &str = r#"{"model":"smart","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Capital of France?"}],"max_tokens":64}"#;

fn response_10kb() -> Vec<u8> {
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(225);
    serde_json::to_vec(&json!({"id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5", "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 2095, "output_tokens": 503, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}}))
    .unwrap_or_default()
}

const DELTA_EVENT: &[u8] = b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello, world! \"}}\n\n";
const OPENAI_CHUNK: &[u8] = b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello, world! \"},\"finish_reason\":null}]}\n\n";

const OPENAI_USAGE_CHUNK: &[u8] = b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o-mini\",\"choices\":[],\"usage\":{\"prompt_tokens\":2095,\"completion_tokens\":503,\"total_tokens\":2598,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n";

/// CPU time of the benchmarking thread (`TG_BENCH_CLOCK=cpu`): on a machine
/// shared with other work, time spent preempted is not counted, so old and
/// new builds compare on what they cost rather than on the load around them.
struct ThreadCpuTime {
    wall: WallTime,
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Measurement for ThreadCpuTime {
    type Intermediate = u64;
    type Value = std::time::Duration;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> std::time::Duration {
        std::time::Duration::from_nanos(thread_cpu_ns().saturating_sub(start))
    }
    fn add(&self, a: &std::time::Duration, b: &std::time::Duration) -> std::time::Duration {
        *a + *b
    }
    fn zero(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    fn to_f64(&self, d: &std::time::Duration) -> f64 {
        d.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        self.wall.formatter()
    }
}

fn benches<M: Measurement + 'static>(c: &mut Criterion<M>) {
    let rt = Runtime::from_json(CONFIG.as_bytes(), &|_| None).unwrap_or_else(|e| panic!("{e}"));

    // --- key selection
    let pool = KeyPool::new(&[(0, 3), (1, 1)]);
    let mut rng = XorShift::new(42);
    c.bench_function("key_selection/weighted_2_keys", |b| {
        b.iter(|| black_box(pool.pick(rng.next_u32(), |_| true)))
    });
    c.bench_function("key_selection/one_key_cooling", |b| {
        b.iter(|| black_box(pool.pick(rng.next_u32(), |k| k != 0)))
    });
    // Cache-affine choice: four weighted keys, a session as Claude Code names
    // it (its session header), the filter's own functions.
    let affine =
        Runtime::from_json(AFFINE_CONFIG.as_bytes(), &|_| None).unwrap_or_else(|e| panic!("{e}"));
    let openai = affine.provider(0).unwrap_or_else(|| panic!("no provider"));
    let model = &openai.models["gpt-4o-mini"];
    let ids: Vec<String> = (0..1024u32)
        .map(|i| format!("5f0c6a2e-8d1b-4c7e-9a3f-{:012x}", u64::from(i) * 7919))
        .collect();
    let hashes: Vec<u64> = ids
        .iter()
        .filter_map(|id| session::of_document("demo", Some(id), &serde_json::Value::Null))
        .map(|s| s.hash)
        .collect();
    let mut i = 0usize;
    c.bench_function("key_selection/affine_4_keys", |b| {
        b.iter(|| {
            i = (i + 1) % hashes.len();
            black_box(choose_key(openai, model, Some(hashes[i]), 0, &|_| 0))
        })
    });
    c.bench_function("key_selection/affine_4_keys_from_session_header", |b| {
        b.iter(|| {
            i = (i + 1) % ids.len();
            let s = session::of_document("demo", Some(&ids[i]), &serde_json::Value::Null);
            black_box(choose_key(openai, model, s.map(|s| s.hash), 0, &|_| 0))
        })
    });

    // --- request translation (bytes in, bytes out: what the filter does)
    let mut g = c.benchmark_group("request");
    g.throughput(Throughput::Bytes(SMALL_REQUEST.len() as u64));
    g.bench_function(
        format!("openai_to_anthropic_{}B", SMALL_REQUEST.len()),
        |b| {
            b.iter(|| {
                let (v, model) = parse_client_body(black_box(SMALL_REQUEST.as_bytes()))
                    .unwrap_or_else(|e| panic!("{e:?}"));
                let r = rt.resolve(&model).unwrap_or_else(|| panic!("model"));
                let p = rt
                    .provider(r.provider)
                    .unwrap_or_else(|| panic!("provider"));
                let ctx = RequestCtx {
                    provider: p,
                    model: &r.model,
                    model_cfg: &p.models[&r.model],
                    endpoint: Endpoint::Chat,
                    cache_breakpoints: false,
                };
                black_box(for_kind(p.kind()).request(&ctx, &v).map(|u| u.body.len()))
            })
        },
    );
    let openai_req = SMALL_REQUEST.replace("smart", "openai/gpt-4o-mini");
    g.bench_function(format!("openai_passthrough_{}B", openai_req.len()), |b| {
        b.iter(|| {
            let (v, model) = parse_client_body(black_box(openai_req.as_bytes()))
                .unwrap_or_else(|e| panic!("{e:?}"));
            let r = rt.resolve(&model).unwrap_or_else(|| panic!("model"));
            let p = rt
                .provider(r.provider)
                .unwrap_or_else(|| panic!("provider"));
            let ctx = RequestCtx {
                provider: p,
                model: &r.model,
                model_cfg: &p.models[&r.model],
                endpoint: Endpoint::Chat,
                cache_breakpoints: false,
            };
            black_box(for_kind(p.kind()).request(&ctx, &v).map(|u| u.body.len()))
        })
    });
    for (name, model, sign) in [
        ("openai_to_azure", "azure/gpt-4o-mini", false),
        ("openai_to_gemini", "gemini/gemini-2.0-flash", false),
        (
            "openai_to_bedrock_signed",
            "bedrock/anthropic.claude-3-haiku-20240307-v1:0",
            true,
        ),
    ] {
        let req = SMALL_REQUEST.replace("smart", model);
        g.bench_function(format!("{name}_{}B", req.len()), |b| {
            b.iter(|| {
                let (v, model) = parse_client_body(black_box(req.as_bytes()))
                    .unwrap_or_else(|e| panic!("{e:?}"));
                let r = rt.resolve(&model).unwrap_or_else(|| panic!("model"));
                let p = rt
                    .provider(r.provider)
                    .unwrap_or_else(|| panic!("provider"));
                let ctx = RequestCtx {
                    provider: p,
                    model: &r.model,
                    model_cfg: &p.models[&r.model],
                    endpoint: Endpoint::Chat,
                    cache_breakpoints: false,
                };
                let tr = for_kind(p.kind());
                let up = tr.request(&ctx, &v).unwrap_or_else(|e| panic!("{e:?}"));
                let auth = if sign {
                    tr.auth_headers(p, &p.keys[0], &up, 1_763_812_800_000)
                        .map(|h| h.len())
                        .unwrap_or(0)
                } else {
                    0
                };
                black_box((up.body.len(), auth))
            })
        });
    }
    g.finish();

    // --- 512 KB requests through the planner (what the filter runs on the
    // body): the OpenAI passthrough edits in place, OpenAI→Anthropic
    // translates. A coding agent's turn: text with newlines and quotes.
    let filler = "fn main() {\n    println!(\"hello, {}\", name); // the filler line\n}\n";
    let text = filler.repeat(512 * 1024 / filler.len());
    let mut g = c.benchmark_group("plan_512KB");
    for (name, model, endpoint) in [
        ("openai_passthrough", "openai/gpt-4o-mini", Endpoint::Chat),
        ("openai_to_anthropic", "smart", Endpoint::Chat),
        ("responses_to_anthropic", "smart", Endpoint::Responses),
    ] {
        let doc = match endpoint {
            Endpoint::Responses => {
                json!({"model": model, "input": [{"role": "user", "content": text}]})
            }
            _ => json!({"model": model, "messages": [{"role": "user", "content": text}]}),
        };
        let body = serde_json::to_vec(&doc).unwrap_or_default();
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| {
                let facts = RequestFacts {
                    endpoint,
                    front: Front::OpenAi,
                    body: black_box(&body),
                    header_names: None,
                    allowed: "*",
                    declared_model: None,
                    now_ms: 1_763_812_800_000,
                    random: 0,
                    tenant: "",
                    session_header: None,
                    cache_breakpoints: false,
                };
                let p = plan(&rt, &facts, &|_| 0).unwrap_or_else(|e| panic!("{e:?}"));
                black_box((p.body.len(), p.body_replaces))
            })
        });
    }
    g.finish();

    // --- response translation
    let resp = response_10kb();
    let ctx = ResponseCtx {
        endpoint: Endpoint::Chat,
        stream: false,
        include_usage: false,
        created: 1,
        json_mode: false,
        prompt_estimate: 0,
        embed_base64: false,
        model: String::new(),
    };
    let mut g = c.benchmark_group("response");
    g.throughput(Throughput::Bytes(resp.len() as u64));
    g.bench_function(format!("anthropic_to_openai_{}B", resp.len()), |b| {
        b.iter(|| {
            black_box(
                for_kind(Kind::Anthropic)
                    .response(&ctx, black_box(&resp))
                    .map(|t| t.body.map(|b| b.len())),
            )
        })
    });
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(225);
    let gem = serde_json::to_vec(&json!({"candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
        "finishReason": "STOP", "index": 0}], "usageMetadata": {"promptTokenCount": 2095, "candidatesTokenCount": 503,
        "totalTokenCount": 2598}, "modelVersion": "gemini-2.0-flash", "responseId": "abcdefghijklmnop"}))
    .unwrap_or_default();
    let bed = serde_json::to_vec(&json!({"output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": "end_turn", "usage": {"inputTokens": 2095, "outputTokens": 503, "totalTokens": 2598},
        "metrics": {"latencyMs": 1200}}))
    .unwrap_or_default();
    let oai = serde_json::to_vec(&json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
        "model": "gpt-4o-mini", "choices": [{"index": 0, "message": {"role": "assistant", "content": text,
        "refusal": null}, "logprobs": null, "finish_reason": "stop"}], "usage": {"prompt_tokens": 2095,
        "completion_tokens": 503, "total_tokens": 2598, "prompt_tokens_details": {"cached_tokens": 0}}}))
    .unwrap_or_default();
    // Tool calls: arguments are re-serialized, not passed through.
    let args = json!({"location": "Paris, France", "unit": "celsius", "days": 3, "hourly": false});
    let ant_tool = serde_json::to_vec(
        &json!({"id": "msg_01", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5", "content": [{"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": args}],
        "stop_reason": "tool_use", "usage": {"input_tokens": 300, "output_tokens": 40}}),
    )
    .unwrap_or_default();
    let gem_tool = serde_json::to_vec(&json!({"candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": "get_weather", "args": args}}]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 300, "candidatesTokenCount": 40}, "modelVersion": "gemini-2.0-flash"}))
    .unwrap_or_default();
    let bed_tool = serde_json::to_vec(&json!({"output": {"message": {"role": "assistant", "content": [
        {"text": "Let me check."}, {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather", "input": args}}]}},
        "stopReason": "tool_use", "usage": {"inputTokens": 300, "outputTokens": 40}}))
    .unwrap_or_default();
    for (name, kind, body) in [
        ("gemini", Kind::Gemini, &gem),
        ("bedrock", Kind::Bedrock, &bed),
        ("openai_usage_read", Kind::Openai, &oai),
        ("anthropic_tool_use", Kind::Anthropic, &ant_tool),
        ("gemini_function_call", Kind::Gemini, &gem_tool),
        ("bedrock_tool_use", Kind::Bedrock, &bed_tool),
    ] {
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_function(format!("{name}_to_openai_{}B", body.len()), |b| {
            b.iter(|| {
                black_box(
                    for_kind(kind)
                        .response(&ctx, black_box(body))
                        .map(|t| t.body.map(|b| b.len())),
                )
            })
        });
    }
    g.finish();

    // --- streaming, per upstream chunk (one SSE event)
    let sctx = ResponseCtx {
        endpoint: Endpoint::Chat,
        stream: true,
        include_usage: true,
        created: 1,
        json_mode: false,
        prompt_estimate: 0,
        embed_base64: false,
        model: String::new(),
    };
    let mut g = c.benchmark_group("stream_per_chunk");
    let mut t = for_kind(Kind::Anthropic).stream(&sctx);
    let mut out = Vec::with_capacity(4096);
    t.feed(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n", &mut out);
    g.throughput(Throughput::Bytes(DELTA_EVENT.len() as u64));
    g.bench_function("anthropic_to_openai_text_delta", |b| {
        b.iter(|| {
            out.clear();
            t.feed(black_box(DELTA_EVENT), &mut out);
            black_box(out.len())
        })
    });
    let mut t = for_kind(Kind::Anthropic).stream(&sctx);
    t.feed(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01\",\"name\":\"get_weather\",\"input\":{}}}\n\n", &mut out);
    let tool_delta: &[u8] = b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"location\\\": \\\"Paris\"}}\n\n";
    g.throughput(Throughput::Bytes(tool_delta.len() as u64));
    g.bench_function("anthropic_to_openai_tool_delta", |b| {
        b.iter(|| {
            out.clear();
            t.feed(black_box(tool_delta), &mut out);
            black_box(out.len())
        })
    });
    let mut t = for_kind(Kind::Anthropic).stream(&sctx);
    t.feed(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n", &mut out);
    let msg_delta: &[u8] = b"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":503}}\n\n";
    g.throughput(Throughput::Bytes(msg_delta.len() as u64));
    g.bench_function("anthropic_message_delta", |b| {
        b.iter(|| {
            out.clear();
            t.feed(black_box(msg_delta), &mut out);
            black_box(out.len())
        })
    });
    let mut t = for_kind(Kind::Openai).stream(&sctx);
    g.throughput(Throughput::Bytes(OPENAI_USAGE_CHUNK.len() as u64));
    g.bench_function("openai_usage_chunk", |b| {
        b.iter(|| {
            out.clear();
            t.feed(black_box(OPENAI_USAGE_CHUNK), &mut out);
            black_box(out.len())
        })
    });
    let mut t = for_kind(Kind::Openai).stream(&sctx);
    g.throughput(Throughput::Bytes(OPENAI_CHUNK.len() as u64));
    g.bench_function("openai_passthrough_chunk", |b| {
        b.iter(|| {
            out.clear();
            t.feed(black_box(OPENAI_CHUNK), &mut out);
            black_box(out.len())
        })
    });
    let gem_event: &[u8] = b"data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Hello, world! \"}]},\"index\":0}],\"modelVersion\":\"gemini-2.0-flash\"}\r\n\r\n";
    let mut t = for_kind(Kind::Gemini).stream(&sctx);
    t.feed(gem_event, &mut out);
    g.throughput(Throughput::Bytes(gem_event.len() as u64));
    g.bench_function("gemini_to_openai_text_chunk", |b| {
        b.iter(|| {
            out.clear();
            t.feed(black_box(gem_event), &mut out);
            black_box(out.len())
        })
    });
    let bed_event = tollgate_core::codec::eventstream::event(
        "contentBlockDelta",
        br#"{"contentBlockIndex":0,"delta":{"text":"Hello, world! "},"p":"abcdefghijklmnopqrstuvwxyzABCDEF"}"#,
    );
    let gem_call: &[u8] = b"data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"get_weather\",\"args\":{\"location\":\"Paris, France\",\"days\":3}}}]},\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":300,\"candidatesTokenCount\":40},\"modelVersion\":\"gemini-2.0-flash\"}\r\n\r\n";
    let mut t = for_kind(Kind::Gemini).stream(&sctx);
    t.feed(gem_call, &mut out);
    g.throughput(Throughput::Bytes(gem_call.len() as u64));
    g.bench_function("gemini_to_openai_function_call_chunk", |b| {
        b.iter(|| {
            out.clear();
            t.feed(black_box(gem_call), &mut out);
            black_box(out.len())
        })
    });
    let mut t = for_kind(Kind::Bedrock).stream(&sctx);
    t.feed(
        &tollgate_core::codec::eventstream::event(
            "contentBlockStart",
            br#"{"contentBlockIndex":0,"start":{"toolUse":{"toolUseId":"tooluse_1","name":"get_weather"}}}"#,
        ),
        &mut out,
    );
    let bed_tool_event = tollgate_core::codec::eventstream::event(
        "contentBlockDelta",
        br#"{"contentBlockIndex":0,"delta":{"toolUse":{"input":"{\"location\": \"Paris\""}},"p":"abcdefghijklmnopqrstuvwxyzABCDEF"}"#,
    );
    g.throughput(Throughput::Bytes(bed_tool_event.len() as u64));
    g.bench_function("bedrock_eventstream_to_openai_tool_delta", |b| {
        b.iter(|| {
            out.clear();
            t.feed(black_box(&bed_tool_event), &mut out);
            black_box(out.len())
        })
    });
    let bed_meta = tollgate_core::codec::eventstream::event(
        "metadata",
        br#"{"usage":{"inputTokens":300,"outputTokens":40,"totalTokens":340},"metrics":{"latencyMs":1200},"p":"abcdefghijklmnopqrstuvwxyzABCDEF"}"#,
    );
    g.throughput(Throughput::Bytes(bed_meta.len() as u64));
    g.bench_function("bedrock_eventstream_metadata_end", |b| {
        b.iter(|| {
            // A fresh stream each time: metadata ends it.
            let mut t = for_kind(Kind::Bedrock).stream(&sctx);
            out.clear();
            t.feed(black_box(&bed_meta), &mut out);
            black_box(out.len())
        })
    });
    let mut t = for_kind(Kind::Bedrock).stream(&sctx);
    g.throughput(Throughput::Bytes(bed_event.len() as u64));
    g.bench_function("bedrock_eventstream_to_openai_text_delta", |b| {
        b.iter(|| {
            out.clear();
            t.feed(black_box(&bed_event), &mut out);
            black_box(out.len())
        })
    });
    g.finish();
}

criterion_group!(wall, benches);
criterion_group! {
    name = cpu;
    config = Criterion::default().with_measurement(ThreadCpuTime { wall: WallTime });
    targets = benches
}

fn main() {
    if std::env::var("TG_BENCH_CLOCK").as_deref() == Ok("cpu") {
        cpu();
    } else {
        wall();
    }
    Criterion::default().configure_from_args().final_summary();
}
