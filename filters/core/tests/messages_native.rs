//! The Messages front door's native mappings, request bytes per target:
//! `thinking` → OpenAI/Azure `reasoning_effort`, Gemini
//! `thinkingConfig.thinkingBudget`, Bedrock
//! `additionalModelRequestFields.thinking` (Anthropic models only), each
//! for models configured as reasoning only (the others refuse them);
//! `cache_control` → Bedrock `cachePoint` blocks; what is not mapped is
//! named in the dropped list (the `x-tollgate-dropped` header).

use crate::common;

use serde_json::{json, Value};
use tollgate_core::config::Runtime;
use tollgate_core::translate::{messages, Endpoint};

const CONFIG: &str = r#"{"providers": {
  "openai": {"kind": "openai", "cluster": "openai",
    "models": {"o4-mini": {"reasoning": true}, "gpt-4o-mini": {}},
    "keys": [{"id": "o1", "value": "ok"}]},
  "azure": {"kind": "azure", "cluster": "azure", "api_version": "2024-10-21",
    "models": {"o3-mini": {"reasoning": true}}, "keys": [{"id": "az1", "value": "azk"}]},
  "gemini": {"kind": "gemini", "cluster": "gemini", "models": {"gemini-2.5-flash": {"reasoning": true}, "gemini-2.0-flash": {}},
    "keys": [{"id": "g1", "value": "gk"}]},
  "bedrock": {"kind": "bedrock", "cluster": "bedrock", "region": "us-east-1",
    "models": {"us.anthropic.claude-sonnet-4-5-20250929-v1:0": {"reasoning": true}, "amazon.nova-lite-v1:0": {}},
    "keys": [{"id": "b1", "access_key_id": "AKIDEXAMPLE", "value": "secret"}]}}}"#;

type Out = Result<(Value, Vec<&'static str>), (u16, Option<String>)>;

fn plan(model: &str, body: Value) -> Out {
    let rt = Runtime::from_json(CONFIG.as_bytes(), &|_| None).unwrap();
    common::with_chat_ctx(&rt, model, |kind, ctx| {
        match messages::request(kind, ctx, &body) {
            Ok((up, dropped)) => Ok((serde_json::from_slice(&up.body).unwrap(), dropped)),
            Err(e) => Err((e.status, e.param)),
        }
    })
}

fn thinking(budget: u64) -> Value {
    json!({"model": "m", "max_tokens": 32000, "thinking": {"type": "enabled", "budget_tokens": budget},
           "messages": [{"role": "user", "content": "hi"}]})
}

#[test]
fn openai_reasoning_models_get_an_effort() {
    for (budget, effort) in [
        (1024, "low"),
        (2047, "low"),
        (2048, "medium"),
        (8191, "medium"),
        (8192, "high"),
        (31999, "high"),
    ] {
        let (b, dropped) = plan("openai/o4-mini", thinking(budget)).unwrap();
        assert_eq!(b["reasoning_effort"], effort, "budget {budget}");
        assert_eq!(b["max_completion_tokens"], 32000);
        assert!(b.get("max_tokens").is_none());
        assert!(dropped.is_empty(), "{dropped:?}");
    }
    let (b, dropped) = plan("azure/o3-mini", thinking(4000)).unwrap();
    assert_eq!(b["reasoning_effort"], "medium");
    assert!(dropped.is_empty());
}

#[test]
fn openai_other_models_drop_thinking() {
    let (b, dropped) = plan("openai/gpt-4o-mini", thinking(2048)).unwrap();
    assert!(b.get("reasoning_effort").is_none());
    assert_eq!(b["max_tokens"], 32000);
    assert_eq!(dropped, vec!["thinking"]);
}

#[test]
fn gemini_gets_a_thinking_budget() {
    let (b, dropped) = plan("gemini/gemini-2.5-flash", thinking(2048)).unwrap();
    assert_eq!(
        b["generationConfig"]["thinkingConfig"],
        json!({"thinkingBudget": 2048})
    );
    assert_eq!(b["generationConfig"]["maxOutputTokens"], 32000);
    assert!(dropped.is_empty());
    // Adaptive thinking and an effort: Gemini's dynamic budget.
    let adaptive = json!({"model": "m", "max_tokens": 32000, "thinking": {"type": "adaptive"},
                          "output_config": {"effort": "high"}, "messages": [{"role": "user", "content": "hi"}]});
    let (b, dropped) = plan("gemini/gemini-2.5-flash", adaptive.clone()).unwrap();
    assert_eq!(
        b["generationConfig"]["thinkingConfig"],
        json!({"thinkingBudget": -1})
    );
    assert!(dropped.is_empty(), "{dropped:?}");
    // A model that does not think gets no thinking config (Gemini refuses
    // it there): dropped and named.
    let (b, dropped) = plan("gemini/gemini-2.0-flash", adaptive).unwrap();
    assert!(b.pointer("/generationConfig/thinkingConfig").is_none());
    assert_eq!(dropped, vec!["output_config.effort", "thinking"]);
    let (b, dropped) = plan("gemini/gemini-2.0-flash", thinking(2048)).unwrap();
    assert!(b.pointer("/generationConfig/thinkingConfig").is_none());
    assert_eq!(dropped, vec!["thinking"]);
}

#[test]
fn bedrock_anthropic_models_get_thinking_others_drop_it() {
    let (b, dropped) = plan(
        "bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        thinking(2048),
    )
    .unwrap();
    assert_eq!(
        b["additionalModelRequestFields"],
        json!({"thinking": {"type": "enabled", "budget_tokens": 2048}})
    );
    assert!(dropped.is_empty());
    let (b, dropped) = plan("bedrock/amazon.nova-lite-v1:0", thinking(2048)).unwrap();
    assert!(b.get("additionalModelRequestFields").is_none());
    assert_eq!(dropped, vec!["thinking"]);
}

#[test]
fn disabled_thinking_is_neither_mapped_nor_dropped() {
    for model in [
        "openai/o4-mini",
        "gemini/gemini-2.5-flash",
        "bedrock/amazon.nova-lite-v1:0",
    ] {
        let body = json!({"model": "m", "max_tokens": 100, "thinking": {"type": "disabled"},
                          "messages": [{"role": "user", "content": "hi"}]});
        let (b, dropped) = plan(model, body).unwrap();
        assert!(b.get("reasoning_effort").is_none());
        assert!(b.pointer("/generationConfig/thinkingConfig").is_none());
        assert!(dropped.is_empty(), "{model}: {dropped:?}");
    }
}

#[test]
fn bad_thinking_budgets_are_refused() {
    for t in [
        json!({"type": "enabled"}),
        json!({"type": "enabled", "budget_tokens": 1023}),
        json!({"type": "enabled", "budget_tokens": "2048"}),
        json!({"type": "enabled", "budget_tokens": 4000}),
    ] {
        let body = json!({"model": "m", "max_tokens": 4000, "thinking": t,
                          "messages": [{"role": "user", "content": "hi"}]});
        let e = plan("gemini/gemini-2.5-flash", body).unwrap_err();
        assert_eq!(e, (400, Some("thinking.budget_tokens".to_string())));
    }
}

fn cached() -> Value {
    let eph = json!({"type": "ephemeral"});
    json!({"model": "m", "max_tokens": 100,
        "system": [{"type": "text", "text": "rules"}, {"type": "text", "text": "more", "cache_control": eph}],
        "tools": [
            {"name": "a", "input_schema": {"type": "object"}},
            {"name": "b", "input_schema": {"type": "object"}, "cache_control": eph},
            {"name": "c", "input_schema": {"type": "object"}, "cache_control": eph}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "long document", "cache_control": eph}]},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "text", "text": "first"}]},
            {"role": "user", "content": [{"type": "text", "text": "question"}]}]})
}

#[test]
fn bedrock_cache_points_follow_the_markers() {
    let (b, dropped) = plan("bedrock/amazon.nova-lite-v1:0", cached()).unwrap();
    assert!(dropped.is_empty(), "{dropped:?}");
    let cp = json!({"cachePoint": {"type": "default"}});
    assert_eq!(b["system"].as_array().unwrap().last().unwrap(), &cp);
    let tools = b["toolConfig"]["tools"].as_array().unwrap();
    let names: Vec<Value> = tools
        .iter()
        .map(|t| {
            t.pointer("/toolSpec/name")
                .cloned()
                .unwrap_or_else(|| t.clone())
        })
        .collect();
    assert_eq!(
        names,
        vec![json!("a"), json!("b"), cp.clone(), json!("c"), cp.clone()]
    );
    let msgs = b["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3);
    assert_eq!(msgs[0]["content"], json!([{"text": "long document"}, cp]));
    assert_eq!(msgs[1]["content"], json!([{"text": "ok"}]));
    assert!(!msgs[2]["content"].as_array().unwrap().contains(&cp));
}

#[test]
fn bedrock_without_markers_is_unchanged() {
    let body = json!({"model": "m", "max_tokens": 100, "system": "s",
                      "messages": [{"role": "user", "content": "hi"}]});
    let (b, dropped) = plan("bedrock/amazon.nova-lite-v1:0", body).unwrap();
    assert!(dropped.is_empty());
    assert_eq!(b["system"], json!([{"text": "s"}]));
    assert_eq!(b["messages"][0]["content"], json!([{"text": "hi"}]));
}

#[test]
fn other_targets_name_cache_control_dropped() {
    for model in ["openai/gpt-4o-mini", "gemini/gemini-2.5-flash"] {
        let (b, dropped) = plan(model, cached()).unwrap();
        assert_eq!(dropped, vec!["cache_control"], "{model}");
        assert!(!b.to_string().contains("cachePoint"));
        assert!(!b.to_string().contains("cache_control"));
    }
}

#[test]
fn bedrock_cache_write_tokens_come_back_in_anthropic_fields() {
    use tollgate_core::config::Kind;
    use tollgate_core::translate::{Front, ResponseCtx};
    let ctx = ResponseCtx {
        endpoint: Endpoint::Chat,
        stream: false,
        include_usage: false,
        created: 1_700_000_000,
        json_mode: false,
        prompt_estimate: 0,
        embed_base64: false,
        model: "amazon.nova-lite-v1:0".into(),
    };
    let answer = json!({"output": {"message": {"role": "assistant", "content": [{"text": "hi"}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 10, "outputTokens": 3, "cacheReadInputTokens": 200,
                  "cacheWriteInputTokens": 40, "totalTokens": 253}});
    let t = messages::translator(Kind::Bedrock, Front::Messages)
        .response(&ctx, answer.to_string().as_bytes())
        .unwrap();
    let msg: Value = serde_json::from_slice(&t.body.unwrap()).unwrap();
    assert_eq!(
        msg["usage"],
        json!({"input_tokens": 10, "output_tokens": 3,
               "cache_read_input_tokens": 200, "cache_creation_input_tokens": 40})
    );
    let u = t.usage.unwrap();
    assert_eq!(
        (u.prompt_tokens, u.cached_tokens, u.cache_write_tokens),
        (250, 200, 40)
    );
}
