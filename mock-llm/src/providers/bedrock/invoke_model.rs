//! Bedrock's InvokeModel: the model's own body, validated as Bedrock's
//! JSON-schema validator does (`Malformed input request: #/messages/0:
//! extraneous key [x] is not permitted, please reformat your input and try
//! again.`, notes/bedrock.md §3) for Amazon Titan text embeddings and
//! Anthropic's models (the Messages API's body with `anthropic_version`
//! `bedrock-2023-05-31`, answered with a Messages API response).

use super::validation;
use crate::core::ctx::Ctx;
use crate::core::plan::{plan, GenInput, Output};
use crate::core::reply::Reply;
use crate::core::script::Script;
use crate::core::shape::{
    self, field, list, req, Enum, Expect, Msg, Opts, Problem, Seg, Ty, Violation, STR,
};
use crate::core::text;
use crate::providers::anthropic::shapes::BEDROCK_INVOKE;
use serde_json::{json, Value};

type Outcome = (Reply, Option<String>);

static DIMENSIONS: Enum = Enum {
    name: "dimensions",
    values: &["256", "512", "1024"],
    no_case: false,
};
static EMBEDDING_TYPES: Enum = Enum {
    name: "embeddingTypes",
    values: &["float", "binary"],
    no_case: false,
};

/// Titan Text Embeddings V2's body (AWS's Titan embeddings parameter page).
static TITAN: Msg = Msg::new(
    "TitanEmbedText",
    &[
        req("inputText", STR),
        field("dimensions", Ty::INT),
        field("normalize", Ty::Bool),
        field("embeddingTypes", list(&Ty::Enum(&EMBEDDING_TYPES))),
    ],
);

/// `POST /model/{modelId}/invoke`.
pub async fn invoke(ctx: &Ctx<'_>, model: String) -> Outcome {
    let m = Some(model.clone());
    if !ctx.provider.has_model(&model) {
        return (
            validation(ctx, "The provided model identifier is invalid."),
            m,
        );
    }
    let req: Value = match serde_json::from_slice(ctx.body) {
        Ok(v @ Value::Object(_)) => v,
        _ => return (malformed(ctx, "#: expected type: JSONObject"), m),
    };
    if model.starts_with("amazon.titan-embed") {
        return (titan(ctx, &req).await, m);
    }
    if model.contains("anthropic.") {
        return (anthropic(ctx, &req, &model).await, m);
    }
    (
        validation(ctx, "mock-llm: InvokeModel is only mocked for amazon.titan-embed-* and Anthropic models; use Converse."),
        m,
    )
}

/// `Malformed input request: …, please reformat your input and try again.`
fn malformed(ctx: &Ctx<'_>, what: &str) -> Reply {
    validation(
        ctx,
        &format!("Malformed input request: {what}, please reformat your input and try again."),
    )
}

/// A JSON pointer as the validator writes it: `#/messages/0/content/1`.
fn pointer(segs: &[Seg]) -> String {
    let mut out = String::from("#");
    for s in segs {
        match s {
            Seg::Field(n, _) => out.push_str(&format!("/{n}")),
            Seg::Unknown(k) | Seg::Entry(_, k) => out.push_str(&format!("/{k}")),
            Seg::Index(i) => out.push_str(&format!("/{i}")),
            Seg::Tag(_) => {}
        }
    }
    out
}

/// A JSON type as the validator names it.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "Null",
        Value::Bool(_) => "Boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "Integer",
        Value::Number(_) => "BigDecimal",
        Value::String(_) => "String",
        Value::Array(_) => "JSONArray",
        Value::Object(_) => "JSONObject",
    }
}

/// One violation in the validator's words: `#/x: extraneous key [k] is not
/// permitted`, `#: required key [k] not found`, `#/x: expected type: String,
/// found: Integer`, `#/x: y is not a valid enum value`.
fn schema_violation(v: &Violation) -> String {
    let parent = pointer(&v.path[..v.path.len().saturating_sub(1)]);
    let at = pointer(&v.path);
    match &v.problem {
        Problem::Unknown => format!(
            "{parent}: extraneous key [{}] is not permitted",
            v.last_key().unwrap_or("")
        ),
        Problem::Missing => format!(
            "{parent}: required key [{}] not found",
            v.last_key().unwrap_or("")
        ),
        Problem::Type(want) => {
            let want = match want {
                Expect::Str | Expect::Enum(_) => "String",
                Expect::Bool => "Boolean",
                Expect::Int => "Integer",
                Expect::Num => "Number",
                Expect::Object(_) => "JSONObject",
                Expect::List(_) => "JSONArray",
            };
            format!(
                "{at}: expected type: {want}, found: {}",
                json_type(&v.value)
            )
        }
        Problem::Enum(_) | Problem::Tag(_) => {
            let shown = v.value.as_str().map_or(v.value.to_string(), str::to_string);
            format!("{at}: {shown} is not a valid enum value")
        }
        Problem::Below(b) => format!("{at}: {} is not greater or equal to {b}", v.value),
        Problem::Above(b) => format!("{at}: {} is not less or equal to {b}", v.value),
        other => format!("{at}: {other:?}"),
    }
}

/// Every violation, concatenated as the validator reports them.
fn check_body(ctx: &Ctx<'_>, root: &'static Msg, body: &Value, betas: Vec<&str>) -> Option<Reply> {
    let opts = Opts {
        betas,
        ..Opts::default()
    };
    let vs = shape::check_msg(root, body, &opts);
    if vs.is_empty() {
        return None;
    }
    let all: Vec<String> = vs.iter().map(schema_violation).collect();
    Some(malformed(ctx, &all.concat()))
}

/// Titan Text Embeddings V2: `{"inputText", "dimensions"?, "normalize"?,
/// "embeddingTypes"?}` → `{"embedding", "inputTextTokenCount",
/// "embeddingsByType"}`.
async fn titan(ctx: &Ctx<'_>, req: &Value) -> Reply {
    if let Some(r) = check_body(ctx, &TITAN, req, Vec::new()) {
        return r;
    }
    let text = req.get("inputText").and_then(Value::as_str).unwrap_or("");
    let dims = match req.get("dimensions") {
        None => 1024,
        Some(v) => match v.as_u64() {
            Some(n @ (256 | 512 | 1024)) => n as usize,
            _ => {
                let at = vec![Seg::Field("dimensions", "")];
                let v = Violation {
                    path: at,
                    problem: Problem::Enum(&DIMENSIONS),
                    value: v.clone(),
                };
                return malformed(ctx, &schema_violation(&v));
            }
        },
    };
    let embedding = text::embedding(text, dims);
    let mut by_type = json!({"float": embedding});
    let types = req.get("embeddingTypes").and_then(Value::as_array);
    if types.is_some_and(|t| t.iter().any(|x| x == "binary")) {
        let bits: Vec<u8> = embedding.iter().map(|f| u8::from(*f > 0.0)).collect();
        by_type["binary"] = json!(bits);
    }
    if types.is_some_and(|t| !t.iter().any(|x| x == "float")) {
        if let Some(o) = by_type.as_object_mut() {
            o.remove("float");
        }
    }
    let v = json!({
        "embedding": embedding,
        "inputTextTokenCount": text::count_tokens(text),
        "embeddingsByType": by_type,
    });
    ctx.json_ok(&v, &[("x-amzn-requestid", ctx.request_id.clone())])
        .await
}

/// Anthropic's models: the Messages API's body (AWS's parameter page), the
/// model's output limit and thinking, then a Messages API response.
async fn anthropic(ctx: &Ctx<'_>, req: &Value, model: &str) -> Reply {
    let betas: Vec<&str> = req
        .get("anthropic_beta")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if let Some(r) = check_body(ctx, &BEDROCK_INVOKE, req, betas) {
        return r;
    }
    let max_tokens = req.get("max_tokens").and_then(Value::as_u64).unwrap_or(1);
    if let Some(limit) = ctx.provider.output_limit(model) {
        if max_tokens > limit {
            return validation(ctx, &format!("The maximum tokens you requested exceeds the model limit of {limit}. Try again with a maximum tokens value that is lower than {limit}."));
        }
    }
    let thinking = req.pointer("/thinking/type").and_then(Value::as_str);
    if matches!(thinking, Some("enabled" | "adaptive")) && !ctx.provider.thinks(model) {
        return malformed(ctx, "#: extraneous key [thinking] is not permitted");
    }
    let msgs = req
        .get("messages")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let mut prompt = String::new();
    let mut echo = String::new();
    let mut script = Script::default();
    let mut prev = "";
    for (i, msg) in msgs.iter().enumerate() {
        let role = msg.get("role").and_then(Value::as_str).unwrap_or("");
        if (i == 0 && role != "user") || role == prev {
            return validation(ctx, "messages: roles must alternate between \"user\" and \"assistant\", starting with \"user\"");
        }
        prev = role;
        let mut t = String::new();
        match msg.get("content") {
            Some(Value::String(s)) => t.push_str(s),
            Some(Value::Array(blocks)) => {
                for b in blocks {
                    match b.get("type").and_then(Value::as_str) {
                        Some("text") => {
                            let s = b.get("text").and_then(Value::as_str).unwrap_or("");
                            if role == "user" {
                                script.user_text(s);
                            }
                            t.push_str(s);
                        }
                        Some("tool_result") => {
                            let r = tool_result_text(b.get("content"));
                            script.tool_result(r.clone());
                            t.push_str(&r);
                        }
                        Some("tool_use") => {
                            t.push_str(&b.get("input").map(Value::to_string).unwrap_or_default())
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        if role == "user" {
            if let Some(Value::String(s)) = msg.get("content") {
                script.user_text(s);
            }
            echo = t.clone();
        }
        prompt.push_str(&t);
    }
    let tools: Vec<(String, &Value)> = req
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| Some((t.get("name")?.as_str()?.to_string(), t.get("input_schema")?)))
        .collect();
    let g = GenInput {
        echo,
        prompt_chars: prompt.chars().count(),
        tools,
        forced_tool: req
            .pointer("/tool_choice/name")
            .and_then(Value::as_str)
            .map(str::to_string),
        any_tool: req.pointer("/tool_choice/type").and_then(Value::as_str) == Some("any"),
        max_tokens: Some(max_tokens),
        tool_id_prefix: "toolu_bdrk_",
        script,
    };
    let p = match plan(ctx, g) {
        Ok(p) => p,
        Err(e) => return validation(ctx, &e),
    };
    let stop = p.stop_reason();
    let content = match &p.output {
        Output::Text(t) => json!([{"type": "text", "text": t}]),
        Output::Tool { id, name, args } => {
            json!([{"type": "tool_use", "id": id, "name": name, "input": args}])
        }
    };
    let v = json!({
        "id": format!("msg_bdrk_{}", ctx.request_id), "type": "message", "role": "assistant",
        "model": model, "content": content, "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": p.prompt_tokens, "output_tokens": p.completion_tokens},
    });
    ctx.json_ok(&v, &[("x-amzn-requestid", ctx.request_id.clone())])
        .await
}

/// A `tool_result` block's text: a string, or its text blocks.
fn tool_result_text(c: Option<&Value>) -> String {
    match c {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}
