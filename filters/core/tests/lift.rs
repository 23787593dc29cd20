//! Long texts lifted out of a large translated body (`lift`): the upstream
//! body means what the translator makes of the whole document, and carries
//! each long text as the client escaped it.

#![allow(clippy::manual_is_multiple_of)]

use crate::common;

use serde_json::{json, Value};
use tollgate_core::error::ApiError;
use tollgate_core::keys::XorShift;
use tollgate_core::lift::MIN_BODY;
use tollgate_core::plan::{plan, RequestFacts};
use tollgate_core::scan::{TopLevel, LONG_TEXT};
use tollgate_core::translate::{responses, Endpoint, Front};

fn planned(body: &[u8]) -> Result<Vec<u8>, ApiError> {
    planned_at(body, Endpoint::Chat)
}

fn planned_at(body: &[u8], endpoint: Endpoint) -> Result<Vec<u8>, ApiError> {
    let rt = common::runtime();
    let facts = RequestFacts {
        endpoint,
        front: Front::OpenAi,
        body,
        header_names: None,
        allowed: "*",
        declared_model: None,
        now_ms: 1,
        random: 0,
        tenant: "",
        session_header: None,
        cache_breakpoints: false,
    };
    plan(&rt, &facts, &|_| 0).map(|p| p.upstream_body(body))
}

/// What the translator makes of the whole document.
fn built(body: &[u8]) -> Result<Vec<u8>, ApiError> {
    built_at(body, Endpoint::Chat)
}

fn built_at(body: &[u8], endpoint: Endpoint) -> Result<Vec<u8>, ApiError> {
    let doc: Value = serde_json::from_slice(body).unwrap();
    let model = doc["model"].as_str().unwrap();
    common::with_ctx(&common::runtime(), model, endpoint, |p, ctx| {
        responses::translator(p, endpoint)
            .request(ctx, &doc)
            .map(|up| up.body)
    })
}

fn parsed(b: &[u8]) -> Value {
    serde_json::from_slice(b).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(b)))
}

/// A long text whose JSON holds escapes serde_json would write otherwise
/// (`\/`, `\u00e9`), so a copied text can be told from a rewritten one.
fn long_text(tag: &str) -> String {
    let line = format!(r#"{tag}: \"quoted\" a\/b caf\u00e9 \\ tab\t end\n"#);
    line.repeat(LONG_TEXT / line.len() + 1)
}

fn agent_body(model: &str, extra: &str) -> Vec<u8> {
    let pad = long_text("pad").repeat(MIN_BODY / LONG_TEXT);
    format!(
        r#"{{"messages":[
          {{"role":"system","content":"{s1}"}},
          {{"role":"developer","content":[{{"type":"text","text":"{s2}"}}]}},
          {{"role":"user","content":"{u1}"}},
          {{"role":"user","content":[{{"type":"text","text":"short"}},{{"type":"text","text":"{u2}"}}]}},
          {{"role":"assistant","content":"{a1}","tool_calls":[{{"id":"c1","type":"function","function":{{"name":"read","arguments":"{{\"path\":\"src/main.rs\"}}"}}}}]}},
          {{"role":"tool","tool_call_id":"c1","content":"{t1}"}},
          {{"role":"user","content":"{pad}"{extra}}}
        ],"model":"{model}","max_tokens":100}}"#,
        s1 = long_text("system one"),
        s2 = long_text("system two"),
        u1 = long_text("user one"),
        u2 = long_text("user two"),
        a1 = long_text("assistant"),
        t1 = long_text("tool result"),
    )
    .into_bytes()
}

#[test]
fn long_texts_reach_anthropic_as_the_client_wrote_them() {
    for model in ["anthropic/claude-sonnet-4-5", "smart"] {
        let body = agent_body(model, "");
        assert!(body.len() >= MIN_BODY);
        let sent = planned(&body).unwrap();
        let text = String::from_utf8_lossy(&sent);
        assert_eq!(parsed(&sent), parsed(&built(&body).unwrap()), "{model}");
        for tag in ["user one", "user two", "assistant", "tool result", "pad"] {
            assert!(text.contains(&long_text(tag)), "{tag} not copied: {model}");
        }
        // Joined system texts: each copied, the join written by the translator.
        assert!(text.contains(&format!(
            "{}\\n\\n{}",
            long_text("system one"),
            long_text("system two")
        )));
        // The tool call's arguments were parsed, not copied.
        assert!(!text.contains(r#"\"path\""#));
    }
}

#[test]
fn the_whole_body_is_built_when_a_string_holds_a_nul_or_half_a_surrogate_pair() {
    let body = agent_body("smart", r#","name":"\u0000""#);
    let sent = planned(&body).unwrap();
    // Byte for byte what the translator writes from the whole document.
    assert_eq!(sent, built(&body).unwrap());
    assert!(!String::from_utf8_lossy(&sent).contains(r"a\/b"));
    // Half a pair: serde_json's own error for the whole document.
    for half in [r"\ud83d", r"\ude00", r"\ud83d\ud83d"] {
        let body = agent_body("smart", &format!(r#","name":"{half}""#));
        let e = planned(&body).unwrap_err();
        assert_eq!(e.code.as_deref(), Some("invalid_json"), "{half}");
    }
    // A whole pair is one character: the texts are lifted.
    let body = agent_body("smart", r#","name":"\ud83d\ude00""#);
    let sent = planned(&body).unwrap();
    assert_eq!(parsed(&sent), parsed(&built(&body).unwrap()));
    assert!(String::from_utf8_lossy(&sent).contains(r"a\/b"));
}

#[test]
fn a_body_that_does_not_translate_gets_the_whole_documents_error() {
    let base = String::from_utf8(agent_body("smart", "")).unwrap();
    for (from, to) in [
        (r#""model":"smart""#, r#""model":"smart","frobnicate":3"#),
        (
            r#"{"type":"text","text":"short"}"#,
            r#"{"type":"audio","text":"short"}"#,
        ),
        (r#""role":"tool","tool_call_id":"c1""#, r#""role":"tool""#),
    ] {
        let body = base.replacen(from, to, 1).into_bytes();
        let (got, want) = (planned(&body).unwrap_err(), built(&body).unwrap_err());
        assert_eq!(
            (got.status, &got.param, &got.message),
            (want.status, &want.param, &want.message)
        );
    }
    // Invalid JSON after a long text: the scanner's own error.
    let cut = &base.as_bytes()[..base.len() - 3];
    assert_eq!(
        planned(cut).unwrap_err().code.as_deref(),
        Some("invalid_json")
    );
}

#[test]
fn a_responses_turn_reaches_anthropic_with_its_texts_copied() {
    let pad = long_text("pad").repeat(MIN_BODY / LONG_TEXT);
    let items = format!(
        r#"{{"model":"smart","instructions":"{i}","input":[
          {{"type":"message","role":"developer","content":"{d}"}},
          {{"type":"message","role":"user","content":[{{"type":"input_text","text":"{u}"}}]}},
          {{"type":"function_call","call_id":"c1","name":"shell","arguments":"{{\"cmd\":\"ls\"}}"}},
          {{"type":"function_call_output","call_id":"c1","output":"{o}"}},
          {{"role":"assistant","content":[{{"type":"output_text","text":"{a}"}}]}},
          {{"role":"user","content":"{pad}"}}]}}"#,
        i = long_text("instructions"),
        d = long_text("developer"),
        u = long_text("user"),
        o = long_text("output"),
        a = long_text("assistant"),
    );
    let bare = format!(r#"{{"input":"{pad}","model":"smart","stream":true}}"#);
    for (body, tags) in [
        (
            items,
            &["developer", "user", "output", "assistant", "pad"][..],
        ),
        (bare, &["pad"][..]),
    ] {
        let body = body.into_bytes();
        assert!(!TopLevel::parse(&body).unwrap().texts().is_empty());
        let sent = planned_at(&body, Endpoint::Responses).unwrap();
        let text = String::from_utf8_lossy(&sent);
        assert_eq!(
            parsed(&sent),
            parsed(&built_at(&body, Endpoint::Responses).unwrap())
        );
        for tag in tags {
            assert!(text.contains(&long_text(tag)), "{tag} not copied");
        }
    }
}

/// Random agent turns: texts long and short, of characters JSON escapes
/// in several ways, written compact or pretty, a model first or last.
#[test]
fn random_turns_translate_as_their_whole_documents() {
    let iters: u64 = std::env::var("TG_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let mut r = XorShift::new(0x11f7);
    let pieces = [
        "a",
        "fn main() {",
        "\n",
        "\t",
        "\"",
        "\\",
        "/",
        "é",
        "😀",
        "\u{1}",
        "\u{7f}",
        " ",
        "\u{2028}",
    ];
    let text = |r: &mut XorShift| -> String {
        let n = if r.next_u32() % 3 == 0 {
            8
        } else {
            LONG_TEXT / 2 + r.next_u32() as usize % 4096
        };
        (0..n)
            .map(|_| pieces[r.next_u32() as usize % pieces.len()])
            .collect()
    };
    let (mut lifted, mut whole) = (0, 0);
    for _ in 0..iters {
        let mut msgs = Vec::new();
        let mut size = 0;
        while size < MIN_BODY + 1024 {
            let t = text(&mut r);
            size += t.len();
            msgs.push(match r.next_u32() % 6 {
                0 => json!({"role": "system", "content": t}),
                1 => json!({"role": "user", "content": [{"type": "text", "text": t}, {"type": "text", "text": "x"}]}),
                2 => json!({"role": "assistant", "content": t}),
                3 => json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": json!({"t": t}).to_string()}}]}),
                4 => json!({"role": "tool", "tool_call_id": "c", "content": t}),
                _ => json!({"role": "user", "content": t}),
            });
        }
        if r.next_u32() % 8 == 0 {
            msgs.push(json!({"role": "user", "content": "a NUL: \0"}));
        }
        let doc = if r.next_u32() % 2 == 0 {
            json!({"model": "smart", "messages": msgs})
        } else {
            json!({"messages": msgs, "model": "smart", "stream": true})
        };
        let mut body = if r.next_u32() % 2 == 0 {
            serde_json::to_vec_pretty(&doc).unwrap()
        } else {
            serde_json::to_vec(&doc).unwrap()
        };
        if r.next_u32() % 2 == 0 {
            // Escapes serde_json does not write, which mean the same.
            body = String::from_utf8(body)
                .unwrap()
                .replace('/', r"\/")
                .replace('é', r"\u00e9")
                .replace('😀', r"\ud83d\ude00")
                .into_bytes();
        }
        if TopLevel::parse(&body).unwrap().texts().is_empty() {
            whole += 1;
        } else {
            lifted += 1;
        }
        let (got, want) = (planned(&body), built(&body));
        match (got, want) {
            (Ok(got), Ok(want)) => assert_eq!(parsed(&got), parsed(&want)),
            (Err(got), Err(want)) => assert_eq!(got.message, want.message),
            (got, want) => panic!("{got:?} against {want:?}"),
        }
    }
    // Both kinds of body came by (NULs keep a body whole).
    assert!(
        lifted > iters / 4 && whole > 0,
        "lifted {lifted}, whole {whole}"
    );
}
