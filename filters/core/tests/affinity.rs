//! Cache-affine key choice through the whole request side (issue 39): a
//! conversation stays on one provider key whatever the worker's random
//! numbers, two gateways (two runtimes) choose alike, the weights hold over
//! many sessions, a cooling key moves only its own sessions and gets them
//! back, and OpenAI gets the session as `prompt_cache_key`.

use crate::common;

use std::sync::Arc;

use serde_json::{json, Value};
use tollgate_core::config::Runtime;
use tollgate_core::flow::Flow;
use tollgate_core::host::fake::FakeHost;
use tollgate_core::keys::XorShift;

/// The shared test config with the defaults of a real deployment: key
/// affinity and the cache hint on.
fn runtime() -> Arc<Runtime> {
    let cfg = common::CONFIG
        .replace(r#""key_affinity": false, "prompt_cache_key": false,"#, "")
        .replace(r#""key_affinity": false,"#, "")
        .replace(
            r#""stream_usage": false,"#,
            r#""stream_usage": false, "responses_api": false,"#,
        );
    assert!(!cfg.contains("key_affinity"));
    Arc::new(Runtime::from_json(cfg.as_bytes(), &common::env).unwrap())
}

/// The key a request is sent with, and the body sent upstream.
fn send(
    rt: &Arc<Runtime>,
    body: &Value,
    headers: &[(&str, &str)],
    random: u32,
    now_extra: u64,
) -> (String, Value, FakeHost) {
    let bytes = serde_json::to_vec(body).unwrap();
    let mut h = FakeHost {
        now: 1_700_000_000_000 + now_extra,
        ..FakeHost::default()
    };
    h.req_headers = vec![
        (":method".into(), "POST".into()),
        (":path".into(), "/v1/chat/completions".into()),
        ("x-tollgate-tenant".into(), "demo".into()),
        ("x-tollgate-key-id".into(), "demo-key".into()),
        ("x-tollgate-models".into(), "*".into()),
        ("content-length".into(), bytes.len().to_string()),
    ];
    for (k, v) in headers {
        h.req_headers.push(((*k).into(), (*v).into()));
    }
    h.req_body = bytes;
    h.random = vec![random];
    let mut f = Flow::new(Arc::clone(rt));
    common::send_request(&mut f, &mut h);
    let key = h.req_header("authorization").unwrap_or_default();
    let sent: Value = serde_json::from_slice(&h.req_body).expect("the upstream body is JSON");
    (key, sent, h)
}

fn conversation(first: &str, turns: usize) -> Value {
    let mut msgs = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": first}),
    ];
    for t in 0..turns {
        msgs.push(json!({"role": "assistant", "content": format!("answer {t}")}));
        msgs.push(json!({"role": "user", "content": format!("follow-up {t}")}));
    }
    json!({"model": "openai/gpt-4o", "messages": msgs})
}

#[test]
fn every_turn_of_a_conversation_takes_the_same_key_on_every_gateway() {
    let (gw1, gw2) = (runtime(), runtime());
    let mut rng = XorShift::new(9);
    for s in 0..50 {
        let first = format!("task {s}");
        let (key, _, _) = send(&gw1, &conversation(&first, 0), &[], rng.next_u32(), 0);
        for turn in 1..5 {
            let body = conversation(&first, turn);
            assert_eq!(
                send(&gw1, &body, &[], rng.next_u32(), 0).0,
                key,
                "session {s} turn {turn}"
            );
            assert_eq!(
                send(&gw2, &body, &[], rng.next_u32(), 0).0,
                key,
                "second gateway, session {s}"
            );
        }
    }
}

#[test]
fn the_weights_hold_over_many_sessions() {
    let rt = runtime();
    let mut one = 0;
    for s in 0..2_000 {
        let (key, _, _) = send(&rt, &conversation(&format!("question {s}"), 0), &[], 0, 0);
        if key == "Bearer sk-one" {
            one += 1;
        }
    }
    // openai-1 has weight 3 of 4: 1,500 expected, within 5 %.
    assert!(
        (1_425..=1_575).contains(&one),
        "openai-1 served {one} of 2,000 sessions"
    );
}

#[test]
fn a_session_header_or_prompt_cache_key_names_the_session() {
    let rt = runtime();
    let mut keys = std::collections::BTreeSet::new();
    for i in 0..30 {
        // Different prompts, one session: one key.
        let body = conversation(&format!("unrelated {i}"), 0);
        keys.insert(send(&rt, &body, &[("x-claude-code-session-id", "cc-1")], i, 0).0);
    }
    assert_eq!(keys.len(), 1, "{keys:?}");
    let mut keys = std::collections::BTreeSet::new();
    for i in 0..30 {
        let mut body = conversation(&format!("unrelated {i}"), 0);
        body["prompt_cache_key"] = json!("codex-session-7");
        let (key, sent, _) = send(&rt, &body, &[], i, 0);
        // The client's own key is kept, never doubled.
        assert_eq!(sent["prompt_cache_key"], "codex-session-7");
        keys.insert(key);
    }
    assert_eq!(keys.len(), 1, "{keys:?}");
}

#[test]
fn openai_gets_the_session_as_prompt_cache_key_and_compatible_servers_do_not() {
    let rt = runtime();
    let (_, sent, _) = send(&rt, &conversation("hello", 1), &[], 0, 0);
    let hint = sent["prompt_cache_key"].as_str().unwrap().to_string();
    assert!(hint.starts_with("tg-") && hint.len() == 19, "{hint}");
    assert_eq!(sent["messages"][1]["content"], "hello");
    // Later turns carry the same hint; the raw header never travels.
    let (_, sent, h) = send(&rt, &conversation("hello", 3), &[], 5, 0);
    assert_eq!(sent["prompt_cache_key"], hint.as_str());
    let (_, sent, _) = send(
        &rt,
        &conversation("x", 0),
        &[("x-claude-code-session-id", "secret-id")],
        0,
        0,
    );
    assert!(!sent.to_string().contains("secret-id"));
    assert_eq!(
        h.req_header("content-length").unwrap(),
        h.req_body.len().to_string()
    );
    // Mistral (a chat-only compatible server) gets no hint.
    let mut body = conversation("hello", 0);
    body["model"] = json!("mistral/mistral-small-latest");
    let (_, sent, _) = send(&rt, &body, &[], 0, 0);
    assert!(sent.get("prompt_cache_key").is_none());
}

#[test]
fn a_cooling_key_moves_only_its_sessions_and_gets_them_back() {
    let rt = runtime();
    let sessions: Vec<(Value, String)> = (0..40)
        .map(|s| {
            let body = conversation(&format!("s{s}"), 0);
            let key = send(&rt, &body, &[], 0, 0).0;
            (body, key)
        })
        .collect();
    assert!(sessions.iter().any(|(_, k)| k == "Bearer sk-two"));
    // openai-2 answers 429: it cools for key_cooldown_seconds (30 s), in
    // the shared data every worker reads.
    let (body, _) = sessions.iter().find(|(_, k)| k == "Bearer sk-two").unwrap();
    let bytes = serde_json::to_vec(body).unwrap();
    let mut h = FakeHost {
        now: 1_700_000_000_000,
        ..FakeHost::default()
    };
    h.req_headers = vec![
        (":method".into(), "POST".into()),
        (":path".into(), "/v1/chat/completions".into()),
        ("x-tollgate-tenant".into(), "demo".into()),
        ("x-tollgate-models".into(), "*".into()),
    ];
    h.req_body = bytes;
    let mut f = Flow::new(Arc::clone(&rt));
    f.on_request_headers(&mut h, false);
    let n = h.req_body.len();
    f.on_request_body(&mut h, n, true);
    assert_eq!(
        h.req_header("authorization").as_deref(),
        Some("Bearer sk-two")
    );
    h.resp_headers = vec![
        (":status".into(), "429".into()),
        ("content-type".into(), "application/json".into()),
    ];
    f.on_response_headers(&mut h, true);
    let shared = h.shared.clone();
    assert!(!shared.borrow().is_empty(), "the key cooled");
    for (at, back) in [(10_000, false), (31_000, true)] {
        for (body, before) in &sessions {
            let mut h2 = FakeHost {
                now: 1_700_000_000_000 + at,
                ..FakeHost::default()
            };
            h2.shared = shared.clone();
            h2.req_headers = vec![
                (":method".into(), "POST".into()),
                (":path".into(), "/v1/chat/completions".into()),
                ("x-tollgate-tenant".into(), "demo".into()),
                ("x-tollgate-models".into(), "*".into()),
            ];
            h2.req_body = serde_json::to_vec(body).unwrap();
            let mut f2 = Flow::new(Arc::clone(&rt));
            f2.on_request_headers(&mut h2, false);
            let n = h2.req_body.len();
            f2.on_request_body(&mut h2, n, true);
            let now = h2.req_header("authorization").unwrap();
            match (before.as_str(), back) {
                ("Bearer sk-two", false) => assert_eq!(now, "Bearer sk-one"),
                _ => assert_eq!(&now, before, "at +{at} ms"),
            }
        }
    }
}

/// Four keys of different weights, 10,000 sessions named by Claude Code's
/// session header (random ids), the session and the key as the filter
/// computes them: each key serves its weight's share of the sessions within
/// ±5 % of that share (bench/REPORT.md, "Prompt cache", prints these with
/// `--nocapture`).
#[test]
fn four_keys_keep_their_weights_over_10000_sessions() {
    use tollgate_core::plan::choose_key;
    use tollgate_core::session;
    let weights = [1u32, 2, 3, 4];
    let keys: Vec<String> = weights
        .iter()
        .enumerate()
        .map(|(i, w)| format!(r#"{{"id": "cache-{i}", "value": "sk-{i}", "weight": {w}}}"#))
        .collect();
    let cfg = format!(
        r#"{{"providers": {{"openai": {{"kind": "openai", "cluster": "openai",
            "models": ["gpt-4o-mini"], "keys": [{}]}}}}}}"#,
        keys.join(",")
    );
    let rt = Runtime::from_json(cfg.as_bytes(), &common::env).unwrap();
    let provider = rt.provider(0).unwrap();
    let model = &provider.models["gpt-4o-mini"];
    let mut rng = XorShift::new(39);
    let mut served = [0u32; 4];
    const N: u32 = 10_000;
    for _ in 0..N {
        let id = format!("{:08x}-{:08x}", rng.next_u32(), rng.next_u32());
        let s = session::of_document("demo", Some(&id), &Value::Null).unwrap();
        let k = choose_key(provider, model, Some(s.hash), rng.next_u32(), &|_| 0).unwrap();
        served[k] += 1;
    }
    let total: u32 = weights.iter().sum();
    for (k, (&n, &w)) in served.iter().zip(&weights).enumerate() {
        let (share, want) = (f64::from(n) / f64::from(N), f64::from(w) / f64::from(total));
        println!("cache-{k}: weight {w}/{total} = {want:.3}, share of {N} sessions {share:.4} ({:+.1} %)",
                 (share / want - 1.0) * 100.0);
        assert!(
            (share - want).abs() <= 0.05 * want,
            "key {k}: {share} for weight share {want}"
        );
    }
}
