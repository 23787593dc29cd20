//! Bedrock runtime: Converse and ConverseStream (AWS event-stream framing),
//! plus InvokeModel for Titan text embeddings, authenticated by a verified
//! SigV4 signature (signing name `bedrock`).
//!
//! Rules follow the Bedrock API reference: `messages` required; roles
//! `user`/`assistant`, first `user`, alternating; each content block holds
//! exactly one member; `toolUse`/`toolResult` blocks need `toolConfig`; a
//! `toolResult` answers a `toolUse` of the previous assistant message;
//! `cachePoint` blocks (in system, message content and `toolConfig.tools`)
//! are exactly `{"type": "default"}`; `additionalModelRequestFields.thinking`
//! is accepted for Anthropic models only, with `budget_tokens` ≥ 1024 and
//! below `inferenceConfig.maxTokens`.
//! Errors: JSON `{"message"}` with the `x-amzn-ErrorType` header, which is
//! how AWS SDKs recognise the exception.

use crate::core::ctx::{unknown_key_id, AuthFail, Ctx, ErrKind, KeyRt};
use crate::core::plan::{plan, GenInput, Output};
use crate::core::reply::Reply;
use crate::core::script::{self, Script};
use crate::core::{http, render};
mod eventstream;
pub mod sigv4;

use bytes::Bytes;
use serde_json::{json, Value};
use sigv4::{SigError, SignedRequest};

type Outcome = (Reply, Option<String>);

const SERVICE: &str = "bedrock";

/// An AWS JSON error.
pub fn aws_err(ctx: &Ctx<'_>, status: u16, ty: &str, message: &str) -> Reply {
    let mut h = vec![
        (
            "x-amzn-errortype",
            format!("{ty}:http://internal.amazon.com/coral/com.amazon.bedrock/"),
        ),
        ("x-amzn-requestid", ctx.request_id.clone()),
    ];
    if status == 429 {
        h.push(("retry-after", ctx.retry_after_s().to_string()));
    }
    http::json_response(status, json!({"message": message}).to_string(), &h)
}

fn validation(ctx: &Ctx<'_>, msg: &str) -> Reply {
    aws_err(ctx, 400, "ValidationException", msg)
}

pub fn error_for(ctx: &Ctx<'_>, k: ErrKind, detail: &str) -> Reply {
    match k {
        ErrKind::MissingKey => aws_err(
            ctx,
            403,
            "MissingAuthenticationTokenException",
            "Missing Authentication Token",
        ),
        ErrKind::BadKey => aws_err(
            ctx,
            403,
            "UnrecognizedClientException",
            "The security token included in the request is invalid.",
        ),
        ErrKind::RateLimited => aws_err(
            ctx,
            429,
            "ThrottlingException",
            "Too many requests, please wait before trying again.",
        ),
        ErrKind::Internal => aws_err(
            ctx,
            500,
            "InternalServerException",
            "The server encountered an internal error.",
        ),
        ErrKind::Unavailable => aws_err(
            ctx,
            503,
            "ServiceUnavailableException",
            "Bedrock is unable to process your request.",
        ),
        ErrKind::Overloaded => aws_err(
            ctx,
            529,
            "ServiceUnavailableException",
            "Bedrock is unable to process your request.",
        ),
        ErrKind::MethodNotAllowed => aws_err(
            ctx,
            405,
            "UnknownOperationException",
            if detail.is_empty() {
                "Unknown operation"
            } else {
                detail
            },
        ),
    }
}

pub fn authenticate<'a>(ctx: &Ctx<'a>) -> Result<&'a KeyRt, AuthFail> {
    let Some(auth) = ctx.header("authorization") else {
        return Err((error_for(ctx, ErrKind::MissingKey, ""), None));
    };
    let Some(a) = sigv4::parse_authorization(auth) else {
        return Err((
            aws_err(ctx, 403, "IncompleteSignatureException", "Authorization header requires 'Credential', 'Signature' and 'SignedHeaders' parameters."),
            None,
        ));
    };
    let Some(key) = ctx
        .provider
        .keys
        .iter()
        .find(|k| k.access_key_id == a.access_key_id)
    else {
        return Err((
            error_for(ctx, ErrKind::BadKey, ""),
            Some(unknown_key_id(&a.access_key_id)),
        ));
    };
    let headers = |name: &str| -> Vec<String> {
        let mut v: Vec<String> = ctx
            .parts
            .headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        // HTTP/2 carries the host as `:authority`, which hyper puts in the URI.
        if v.is_empty() && name == "host" {
            v.extend(ctx.parts.uri.authority().map(|a| a.to_string()));
        }
        v
    };
    let req = SignedRequest {
        method: ctx.parts.method.as_str(),
        raw_path: ctx.parts.uri.path(),
        query: ctx.parts.uri.query(),
        header: &headers,
        body: ctx.body,
    };
    let now = http::now_secs() as i64;
    match sigv4::verify(&req, &a, &key.secret, &ctx.provider.region, SERVICE, now) {
        Ok(()) => Ok(key),
        Err(SigError::Mismatch) => Err((
            aws_err(ctx, 403, "InvalidSignatureException", "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details."),
            Some(key.name.clone()),
        )),
        Err(SigError::Expired(m)) | Err(SigError::Scope(m)) | Err(SigError::Malformed(m)) => {
            Err((aws_err(ctx, 403, "InvalidSignatureException", &m), Some(key.name.clone())))
        }
    }
}

const BLOCK_MEMBERS: &[&str] = &[
    "text",
    "image",
    "document",
    "video",
    "toolUse",
    "toolResult",
    "guardContent",
    "cachePoint",
    "reasoningContent",
    "citationsContent",
    "audio",
    "searchResult",
];

/// A `cachePoint` member that is not exactly `{"type": "default"}`: the
/// error, naming where it is.
fn bad_cache_point(b: &Value, at: &str) -> Option<String> {
    let cp = b.get("cachePoint")?;
    (*cp != json!({"type": "default"})).then(|| format!("1 validation error detected: Value at '{at}.cachePoint.type' failed to satisfy constraint: Member must satisfy enum value set: [default]"))
}

/// `additionalModelRequestFields.thinking`, as Bedrock's Anthropic models
/// take it.
fn check_thinking(req: &Value, model: &str) -> Result<(), String> {
    let Some(extra) = req
        .get("additionalModelRequestFields")
        .filter(|v| !v.is_null())
    else {
        return Ok(());
    };
    let Some(extra) = extra.as_object() else {
        return Err("additionalModelRequestFields must be an object".into());
    };
    for (k, v) in extra {
        if !model.contains("anthropic.") {
            return Err(format!(
                "The model returned the following errors: {k}: Extra inputs are not permitted"
            ));
        }
        if k != "thinking" {
            continue;
        }
        if v.get("type").and_then(Value::as_str) != Some("enabled") {
            return Err("The model returned the following errors: thinking.type: Input should be 'enabled' or 'disabled'".into());
        }
        let budget = v.get("budget_tokens").and_then(Value::as_u64).unwrap_or(0);
        if budget < 1024 {
            return Err("The model returned the following errors: thinking.enabled.budget_tokens: Input should be greater than or equal to 1024".into());
        }
        let max = req
            .pointer("/inferenceConfig/maxTokens")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        if budget >= max {
            return Err("The model returned the following errors: `max_tokens` must be greater than `thinking.budget_tokens`".into());
        }
    }
    Ok(())
}

fn block_text(b: &Value, out: &mut String) {
    if let Some(t) = b.get("text").and_then(Value::as_str) {
        out.push_str(t);
    }
    if let Some(i) = b.pointer("/toolUse/input") {
        out.push_str(&i.to_string());
    }
    if let Some(c) = b.pointer("/toolResult/content").and_then(Value::as_array) {
        for x in c {
            if let Some(t) = x.get("text").and_then(Value::as_str) {
                out.push_str(t);
            }
            if let Some(j) = x.get("json") {
                out.push_str(&j.to_string());
            }
        }
    }
}

/// The text of a `toolResult`: its `text` blocks and the string values of
/// its `json` blocks.
fn tool_result_text(tr: &Value) -> String {
    let mut out = Vec::new();
    for c in tr
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(t) = c.get("text").and_then(Value::as_str) {
            out.push(t.to_string());
        }
        if let Some(j) = c.get("json") {
            out.push(script::value_text(j));
        }
    }
    out.join("\n")
}

pub async fn converse(ctx: &Ctx<'_>, model: String, stream: bool) -> Outcome {
    let m = Some(model.clone());
    if !ctx.provider.has_model(&model) {
        return (
            validation(ctx, "The provided model identifier is invalid."),
            m,
        );
    }
    if model.contains("embed") {
        return (validation(ctx, "This action doesn't support the model that you provided. Try again with a supported text or chat model."), m);
    }
    let req: Value = match serde_json::from_slice(ctx.body) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            return (
                aws_err(
                    ctx,
                    400,
                    "SerializationException",
                    "Malformed input request, please reformat your input and try again.",
                ),
                m,
            )
        }
    };
    let Some(msgs) = req.get("messages").filter(|v| !v.is_null()) else {
        return (validation(ctx, "1 validation error detected: Value null at 'messages' failed to satisfy constraint: Member must not be null"), m);
    };
    let Some(msgs) = msgs.as_array() else {
        return (
            aws_err(
                ctx,
                400,
                "SerializationException",
                "Start of list found where not expected",
            ),
            m,
        );
    };
    if msgs.is_empty() {
        return (validation(ctx, "A conversation must start with a user message. Try again with a conversation that starts with a user message."), m);
    }
    let has_tool_config = req.get("toolConfig").is_some_and(|v| !v.is_null());
    let mut prompt = String::new();
    if let Some(sys) = req.get("system").and_then(Value::as_array) {
        for (j, s) in sys.iter().enumerate() {
            let members: Vec<&String> = s
                .as_object()
                .map(|o| o.keys().collect())
                .unwrap_or_default();
            if members.len() != 1
                || !["text", "guardContent", "cachePoint"].contains(&members[0].as_str())
            {
                return (validation(ctx, &format!("system.{j}: a SystemContentBlock must contain exactly one supported member")), m);
            }
            if let Some(e) = bad_cache_point(s, &format!("system.{}.member", j + 1)) {
                return (validation(ctx, &e), m);
            }
            block_text(s, &mut prompt);
        }
    }
    if let Err(e) = check_thinking(&req, &model) {
        return (validation(ctx, &e), m);
    }
    let mut echo = String::new();
    let mut prev_role = "";
    let mut prev_uses: Vec<String> = Vec::new();
    let mut script = Script::default();
    for (i, msg) in msgs.iter().enumerate() {
        let role = msg.get("role").and_then(Value::as_str).unwrap_or("");
        if role != "user" && role != "assistant" {
            return (validation(ctx, &format!("1 validation error detected: Value '{role}' at 'messages.{}.member.role' failed to satisfy constraint: Member must satisfy enum value set: [user, assistant]", i + 1)), m);
        }
        if i == 0 && role != "user" {
            return (validation(ctx, "A conversation must start with a user message. Try again with a conversation that starts with a user message."), m);
        }
        if role == prev_role {
            return (validation(ctx, "A conversation must alternate between user and assistant roles. Make sure the conversation alternates between user and assistant roles and try again."), m);
        }
        let Some(content) = msg.get("content").and_then(Value::as_array) else {
            return (validation(ctx, &format!("1 validation error detected: Value null at 'messages.{}.member.content' failed to satisfy constraint: Member must not be null", i + 1)), m);
        };
        if content.is_empty() {
            return (validation(ctx, "The content field in the Message object is empty. Add a ContentBlock object to the content field and try again."), m);
        }
        let mut t = String::new();
        let mut uses = Vec::new();
        let mut results = Vec::new();
        for (j, b) in content.iter().enumerate() {
            let members: Vec<&String> = b
                .as_object()
                .map(|o| o.keys().collect())
                .unwrap_or_default();
            if members.len() != 1 || !BLOCK_MEMBERS.contains(&members[0].as_str()) {
                return (validation(ctx, &format!("messages.{i}.content.{j}: a ContentBlock must contain exactly one supported member")), m);
            }
            if let Some(e) = bad_cache_point(
                b,
                &format!("messages.{}.member.content.{}.member", i + 1, j + 1),
            ) {
                return (validation(ctx, &e), m);
            }
            if let Some(tu) = b.get("toolUse") {
                if !has_tool_config {
                    return (validation(ctx, "The toolConfig field must be defined when using toolUse and toolResult content blocks."), m);
                }
                if role != "assistant" {
                    return (validation(ctx, &format!("messages.{i}.content.{j}: toolUse blocks are only allowed in assistant messages")), m);
                }
                uses.push(
                    tu.get("toolUseId")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                );
            }
            if let Some(tr) = b.get("toolResult") {
                if !has_tool_config {
                    return (validation(ctx, "The toolConfig field must be defined when using toolUse and toolResult content blocks."), m);
                }
                let id = tr.get("toolUseId").and_then(Value::as_str).unwrap_or("");
                if role != "user" || !prev_uses.iter().any(|u| u == id) {
                    return (validation(ctx, &format!("messages.{i}.content.{j}: toolResult toolUseId {id} does not match any toolUse block of the previous turn.")), m);
                }
                results.push(id.to_string());
                if script.active() {
                    script.tool_result(tool_result_text(tr));
                }
            }
            if role == "user" {
                if let Some(s) = b.get("text").and_then(Value::as_str) {
                    script.user_text(s);
                }
            }
            if b.get("text")
                .is_some_and(|x| x.as_str().is_none_or(|s| s.trim().is_empty()))
            {
                return (
                    validation(ctx, &format!("The text field in the ContentBlock object at messages.{i}.content.{j} is blank. Add text to the text field, and try again.")),
                    m,
                );
            }
            block_text(b, &mut t);
        }
        let missing: Vec<&str> = prev_uses
            .iter()
            .filter(|u| !results.contains(u))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return (validation(ctx, &format!("Expected toolResult blocks at messages.{i}.content for the following Ids: {}", missing.join(", "))), m);
        }
        if role == "user" && results.is_empty() {
            echo = t.clone();
        }
        prompt.push_str(&t);
        prev_uses = uses;
        prev_role = if role == "user" { "user" } else { "assistant" };
    }
    let mut tools: Vec<(String, &Value)> = Vec::new();
    let (mut forced, mut any) = (None, false);
    if let Some(tc) = req.get("toolConfig").filter(|v| !v.is_null()) {
        let Some(arr) = tc
            .get("tools")
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty())
        else {
            return (validation(ctx, "1 validation error detected: Value at 'toolConfig.tools' failed to satisfy constraint: Member must have length greater than or equal to 1"), m);
        };
        for (j, t) in arr.iter().enumerate() {
            let Some(spec) = t.get("toolSpec") else {
                if t.as_object().is_some_and(|o| o.len() == 1) {
                    if let Some(e) =
                        bad_cache_point(t, &format!("toolConfig.tools.{}.member", j + 1))
                    {
                        return (validation(ctx, &e), m);
                    }
                    if t.get("cachePoint").is_some() {
                        continue;
                    }
                }
                return (validation(ctx, &format!("toolConfig.tools.{j}: a Tool must contain exactly one of toolSpec, cachePoint")), m);
            };
            let Some(name) = spec.get("name").and_then(Value::as_str) else {
                return (validation(ctx, "1 validation error detected: Value null at 'toolConfig.tools.member.toolSpec.name' failed to satisfy constraint: Member must not be null"), m);
            };
            let Some(schema) = spec.pointer("/inputSchema/json") else {
                return (validation(ctx, "1 validation error detected: Value null at 'toolConfig.tools.member.toolSpec.inputSchema' failed to satisfy constraint: Member must not be null"), m);
            };
            tools.push((name.to_string(), schema));
        }
        if let Some(ch) = tc.get("toolChoice") {
            if ch.get("any").is_some() {
                any = true;
            } else if let Some(n) = ch.pointer("/tool/name").and_then(Value::as_str) {
                if !tools.iter().any(|t| t.0 == n) {
                    return (
                        validation(
                            ctx,
                            &format!(
                                "The tool {n} in toolChoice is not defined in toolConfig.tools."
                            ),
                        ),
                        m,
                    );
                }
                forced = Some(n.to_string());
            }
        }
    }
    for p in ["temperature", "topP"] {
        if !http::in_range(req.pointer(&format!("/inferenceConfig/{p}")), 0.0, 1.0) {
            return (
                validation(ctx, &format!("1 validation error detected: Value at 'inferenceConfig.{p}' failed to satisfy constraint: Member must have value less than or equal to 1 and greater than or equal to 0")),
                m,
            );
        }
    }
    let max_tokens = req
        .pointer("/inferenceConfig/maxTokens")
        .and_then(Value::as_u64);
    if req.pointer("/inferenceConfig/maxTokens").is_some() && max_tokens.is_none_or(|n| n < 1) {
        return (validation(ctx, "1 validation error detected: Value at 'inferenceConfig.maxTokens' failed to satisfy constraint: Member must have value greater than or equal to 1"), m);
    }
    let g = GenInput {
        echo,
        prompt_chars: prompt.chars().count(),
        tools,
        forced_tool: forced,
        any_tool: any,
        max_tokens,
        tool_id_prefix: "tooluse_",
        script,
    };
    let p = match plan(ctx, g) {
        Ok(p) => p,
        Err(e) => return (validation(ctx, &e), m),
    };
    let stop = if p.is_tool() {
        "tool_use"
    } else if p.truncated {
        "max_tokens"
    } else {
        "end_turn"
    };
    let usage = json!({
        "inputTokens": p.prompt_tokens,
        "outputTokens": p.completion_tokens,
        "totalTokens": p.prompt_tokens + p.completion_tokens,
    });
    let hdrs = [("x-amzn-requestid", ctx.request_id.clone())];
    if !stream {
        let content = match &p.output {
            Output::Text(t) => json!([{"text": t}]),
            Output::Tool { id, name, args } => {
                json!([{"toolUse": {"toolUseId": id, "name": name, "input": args}}])
            }
        };
        let v = json!({
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": stop, "usage": usage, "metrics": {"latencyMs": 1},
        });
        return (ctx.json_ok(&v, &hdrs).await, m);
    }
    let ev = |t: &str, v: Value| eventstream::event(t, v.to_string().as_bytes());
    let mut head: Vec<Bytes> = vec![ev("messageStart", json!({"role": "assistant"}))];
    let (content, delta) = match p.output {
        Output::Text(t) => (
            t,
            json!({"contentBlockIndex": 0, "delta": {"text": render::PIECE}}),
        ),
        Output::Tool { id, name, args } => {
            head.push(ev("contentBlockStart", json!({"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": id, "name": name}}})));
            (
                args.to_string(),
                json!({"contentBlockIndex": 0, "delta": {"toolUse": {"input": render::PIECE}}}),
            )
        }
    };
    let tpl = render::Template::new(delta.to_string().as_bytes());
    let tail = vec![
        ev("contentBlockStop", json!({"contentBlockIndex": 0})),
        ev("messageStop", json!({"stopReason": stop})),
        ev(
            "metadata",
            json!({"usage": usage, "metrics": {"latencyMs": 1}}),
        ),
    ];
    (
        ctx.stream(
            "application/vnd.amazon.eventstream",
            head,
            content,
            Box::new(move |_, piece, _| eventstream::event("contentBlockDelta", &tpl.render_vec(piece))),
            tail,
            &hdrs,
            eventstream::exception(
                "modelStreamErrorException",
                json!({"message": "The model stream failed.", "originalStatusCode": 500, "originalMessage": "mock-llm: injected error event"})
                    .to_string()
                    .as_bytes(),
            ),
        ),
        m,
    )
}

/// InvokeModel, for Amazon Titan text embedding models only
/// (`{"inputText", "dimensions"?, "normalize"?}` -> `{"embedding",
/// "inputTextTokenCount"}`).
pub async fn invoke(ctx: &Ctx<'_>, model: String) -> Outcome {
    let m = Some(model.clone());
    if !ctx.provider.has_model(&model) {
        return (
            validation(ctx, "The provided model identifier is invalid."),
            m,
        );
    }
    if !model.starts_with("amazon.titan-embed") {
        return (validation(ctx, "mock-llm: InvokeModel is only mocked for amazon.titan-embed-* models; use Converse."), m);
    }
    let req: Value = match serde_json::from_slice(ctx.body) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            return (
                validation(
                    ctx,
                    "Malformed input request, please reformat your input and try again.",
                ),
                m,
            )
        }
    };
    if let Some(k) = req.as_object().and_then(|o| {
        o.keys().find(|k| {
            !["inputText", "dimensions", "normalize", "embeddingTypes"].contains(&k.as_str())
        })
    }) {
        return (validation(ctx, &format!("Malformed input request: extraneous key [{k}] is not permitted, please reformat your input and try again.")), m);
    }
    let Some(text) = req.get("inputText").and_then(Value::as_str) else {
        return (validation(ctx, "Malformed input request: required key [inputText] not found, please reformat your input and try again."), m);
    };
    let dims = match req.get("dimensions") {
        None => 1024,
        Some(v) => match v.as_u64() {
            Some(n @ (256 | 512 | 1024)) => n as usize,
            _ => return (validation(ctx, "Malformed input request: dimensions must be one of 256, 512, 1024, please reformat your input and try again."), m),
        },
    };
    let v = json!({
        "embedding": crate::core::text::embedding(text, dims),
        "inputTextTokenCount": crate::core::text::count_tokens(text),
    });
    (
        ctx.json_ok(&v, &[("x-amzn-requestid", ctx.request_id.clone())])
            .await,
        m,
    )
}
