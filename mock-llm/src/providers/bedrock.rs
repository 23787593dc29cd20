//! Bedrock runtime: Converse and ConverseStream (AWS event-stream framing),
//! plus InvokeModel (`invoke_model`: Titan text embeddings and Anthropic's
//! models), authenticated by a verified SigV4 signature (signing name
//! `bedrock`).
//!
//! Rules follow Bedrock's own definitions: every request is checked against
//! botocore's service model (`shapes`: closed structures, unions with
//! exactly one member, enums, lengths, patterns, ranges, answered in
//! Coral's words), then Bedrock's own checks as its errors show them:
//! `messages` required; roles `user`/`assistant` (and `system` turns),
//! first `user`, alternating; `toolUse`/`toolResult` blocks need
//! `toolConfig`; a `toolResult` answers a `toolUse` of the previous
//! assistant message; a tool result's `json` and a tool's
//! `inputSchema.json` are objects, the latter of type object; `maxTokens`
//! within the model's limit; `additionalModelRequestFields` only for
//! Anthropic models, never a field Converse has, `thinking` only on models
//! that think (`budget_tokens` ≥ 1024 and below `maxTokens`); Claude 4.5+
//! takes `temperature` or `topP`, not both.
//! Errors: JSON `{"message"}` with the `x-amzn-ErrorType` header, which is
//! how AWS SDKs recognise the exception.

use crate::core::ctx::{unknown_key_id, AuthFail, Ctx, ErrKind, KeyRt};
use crate::core::plan::{plan, GenInput, Output};
use crate::core::prefix::{Blocks, CacheUse};
use crate::core::reply::Reply;
use crate::core::script::{self, Script};
use crate::core::shape::{self, Expect, Msg, Opts, Problem, Seg, Violation};
use crate::core::{http, render};
mod eventstream;
mod invoke_model;
mod shapes;
pub use invoke_model::invoke;
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

/// A Converse request checked against botocore's shapes: an unknown
/// member (wording ours: AWS's is not on record), then a wrong JSON type
/// (`SerializationException`, wording ours), then a union without exactly
/// one member (wording ours), else every constraint violation in Coral's
/// words (`N validation errors detected: Value 'x' at 'a.1.member.b' failed
/// to satisfy constraint: Member must …`).
fn check_shape(ctx: &Ctx<'_>, root: &'static Msg, req: &Value) -> Result<(), Reply> {
    let mut vs = shape::check_msg(root, req, &Opts::default());
    if let Some(meta) = req.get("requestMetadata").and_then(Value::as_object) {
        for (i, k) in meta.keys().enumerate() {
            if !shapes::metadata_key_ok(k) {
                vs.push(Violation {
                    path: vec![Seg::Field("requestMetadata", ""), Seg::Entry(i, k.clone())],
                    problem: Problem::Pattern(shapes::METADATA_KEY_PATTERN),
                    value: json!(k),
                });
            }
        }
    }
    if vs.is_empty() {
        return Ok(());
    }
    if let Some(v) = vs.iter().find(|v| v.problem == Problem::Unknown) {
        let parent = coral_path(&v.path[..v.path.len() - 1]);
        let at = if parent.is_empty() {
            String::new()
        } else {
            format!(" at '{parent}'")
        };
        return Err(validation(
            ctx,
            &format!(
                "Unknown field '{}'{at}: the request shape has no such member.",
                v.last_key().unwrap_or("")
            ),
        ));
    }
    if let Some(v) = vs.iter().find(|v| matches!(v.problem, Problem::Type(_))) {
        let want = match &v.problem {
            Problem::Type(Expect::Str) => "a string".to_string(),
            Problem::Type(Expect::Bool) => "a boolean".to_string(),
            Problem::Type(Expect::Int) => "an integer".to_string(),
            Problem::Type(Expect::Num) => "a number".to_string(),
            Problem::Type(Expect::Enum(e)) => format!("a {} string", e.name),
            Problem::Type(Expect::List(_)) => "a list".to_string(),
            Problem::Type(Expect::Object(n)) => format!("a {n} object"),
            _ => String::new(),
        };
        return Err(aws_err(
            ctx,
            400,
            "SerializationException",
            &format!("Expected {want} at '{}'", coral_path(&v.path)),
        ));
    }
    if let Some(v) = vs.iter().find(|v| matches!(v.problem, Problem::Union(..))) {
        if let Problem::Union(u, n) = v.problem {
            return Err(validation(
                ctx,
                &format!(
                    "{} at '{}' must contain exactly one member; found {n}.",
                    u.name,
                    coral_path(&v.path)
                ),
            ));
        }
    }
    let parts: Vec<String> = vs.iter().filter_map(coral_violation).collect();
    let n = parts.len();
    Err(validation(
        ctx,
        &format!(
            "{n} validation error{} detected: {}",
            if n == 1 { "" } else { "s" },
            parts.join("; ")
        ),
    ))
}

/// A path as Coral writes it: list items `.N.member` from 1, map entries
/// `.key`.
fn coral_path(segs: &[Seg]) -> String {
    let mut out = String::new();
    for s in segs {
        let piece = match s {
            Seg::Field(n, _) => n.to_string(),
            Seg::Unknown(k) | Seg::Entry(_, k) => k.clone(),
            Seg::Index(i) => format!("{}.member", i + 1),
            Seg::Tag(_) => continue,
        };
        if !out.is_empty() {
            out.push('.');
        }
        out.push_str(&piece);
    }
    out
}

/// Numbers as Coral prints bounds: `1`, not `1.0`.
fn num(f: f64) -> String {
    if f.fract() == 0.0 {
        format!("{}", f as i64)
    } else {
        f.to_string()
    }
}

/// One constraint violation in Coral's words.
fn coral_violation(v: &Violation) -> Option<String> {
    let at = coral_path(&v.path);
    let value = match &v.value {
        Value::Null => "Value null".to_string(),
        Value::String(s) => format!("Value '{s}'"),
        Value::Number(n) => format!("Value '{n}'"),
        _ => "Value".to_string(),
    };
    let must = match &v.problem {
        Problem::Missing => "Member must not be null".to_string(),
        Problem::Short(n) | Problem::FewItems(n) => {
            format!("Member must have length greater than or equal to {n}")
        }
        Problem::Long(n) | Problem::ManyItems(n) => {
            format!("Member must have length less than or equal to {n}")
        }
        Problem::Pattern(p) => format!("Member must satisfy regular expression pattern: {p}"),
        Problem::Enum(e) => format!(
            "Member must satisfy enum value set: [{}]",
            e.values.join(", ")
        ),
        Problem::Below(b) => format!(
            "Member must have value greater than or equal to {}",
            num(*b)
        ),
        Problem::Above(b) => format!("Member must have value less than or equal to {}", num(*b)),
        _ => return None,
    };
    Some(format!(
        "{value} at '{at}' failed to satisfy constraint: {must}"
    ))
}

/// Anthropic model fields Converse already has (`additionalModelRequestFields`
/// may not repeat them: "The additional field system conflicts with an
/// existing field.").
const CONVERSE_OWNED: &[&str] = &[
    "system",
    "messages",
    "max_tokens",
    "temperature",
    "top_p",
    "stop_sequences",
    "tools",
    "tool_choice",
];

/// Model fields Converse passes to Bedrock's Anthropic models.
const ANTHROPIC_EXTRA: &[&str] = &[
    "anthropic_beta",
    "top_k",
    "thinking",
    "reasoning_config",
    "output_config",
];

/// `additionalModelRequestFields`, as Bedrock passes them to the model:
/// an object; for Anthropic models no field Converse already has, only the
/// model fields Converse lacks, `thinking` (or `reasoning_config`) only on
/// a model that thinks, `enabled` with `budget_tokens` ≥ 1024 and below
/// `maxTokens`; other models take none of them.
fn check_model_fields(ctx: &Ctx<'_>, req: &Value, model: &str) -> Result<(), String> {
    let Some(extra) = req
        .get("additionalModelRequestFields")
        .filter(|v| !v.is_null())
    else {
        return Ok(());
    };
    let Some(extra) = extra.as_object() else {
        return Err("The format of the value at additionalModelRequestFields is invalid. Provide a json object for the field and try again.".into());
    };
    let relayed = "The model returned the following errors:";
    for (k, v) in extra {
        if !model.contains("anthropic.") {
            return Err(format!("{relayed} {k}: Extra inputs are not permitted"));
        }
        if CONVERSE_OWNED.contains(&k.as_str()) {
            return Err(format!(
                "The additional field {k} conflicts with an existing field."
            ));
        }
        if !ANTHROPIC_EXTRA.contains(&k.as_str()) {
            return Err(format!("{relayed} {k}: Extra inputs are not permitted"));
        }
        if k != "thinking" && k != "reasoning_config" {
            continue;
        }
        if !ctx.provider.thinks(model) {
            return Err(format!("{relayed} {k}: Extra inputs are not permitted"));
        }
        match v.get("type").and_then(Value::as_str) {
            Some("disabled" | "adaptive") => continue,
            Some("enabled") => {}
            _ => {
                return Err(format!(
                    "{relayed} {k}.type: Input should be 'enabled', 'disabled' or 'adaptive'"
                ))
            }
        }
        let budget = v.get("budget_tokens").and_then(Value::as_u64).unwrap_or(0);
        if budget < 1024 {
            return Err(format!("{relayed} {k}.enabled.budget_tokens: Input should be greater than or equal to 1024"));
        }
        let max = req
            .pointer("/inferenceConfig/maxTokens")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        if budget >= max {
            return Err(format!(
                "{relayed} `max_tokens` must be greater than `thinking.budget_tokens`"
            ));
        }
    }
    Ok(())
}

/// Bedrock's own checks on `Document` members: a tool result's `json` and a
/// tool's `inputSchema.json` are JSON objects, the latter of type object.
fn check_documents(req: &Value) -> Result<(), String> {
    let bad_format = |at: String| {
        format!("The format of the value at {at} is invalid. Provide a json object for the field and try again.")
    };
    for (i, msg) in req
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        for (j, b) in msg
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let Some(tr) = b.get("toolResult") else {
                continue;
            };
            for (k, c) in tr
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                if c.get("json").is_some_and(|j| !j.is_object()) {
                    return Err(bad_format(format!(
                        "messages.{i}.content.{j}.toolResult.content.{k}.json"
                    )));
                }
            }
        }
    }
    for (j, t) in req
        .pointer("/toolConfig/tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let Some(schema) = t.pointer("/toolSpec/inputSchema/json") else {
            continue;
        };
        if !schema.is_object() {
            return Err(bad_format(format!(
                "toolConfig.tools.{j}.toolSpec.inputSchema.json"
            )));
        }
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(format!("The value at toolConfig.tools.{j}.toolSpec.inputSchema.json.type must be one of the following: object."));
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

/// One tool, system or content block for the cache: a `cachePoint` ends
/// the prefix before it, any other block is part of it.
fn push_block<'v>(cb: &mut Option<Blocks<'v>>, b: &'v Value, end: usize, default_ttl: u64) {
    if let Some(bl) = cb.as_mut() {
        match cache_point_ttl(b, default_ttl) {
            Some(ms) => bl.breakpoint(ms),
            None => bl.block(b, end),
        }
    }
}

/// The TTL of a `cachePoint` block (a tool, system or content block holding
/// one): `ttl: "1h"` an hour, else `default_ms`. None for other blocks.
fn cache_point_ttl(b: &Value, default_ms: u64) -> Option<u64> {
    let cp = b.get("cachePoint")?;
    Some(if cp.get("ttl").and_then(Value::as_str) == Some("1h") {
        3_600_000
    } else {
        default_ms
    })
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
    let root = if stream {
        &shapes::CONVERSE_STREAM
    } else {
        &shapes::CONVERSE
    };
    if let Err(r) = check_shape(ctx, root, &req) {
        return (r, m);
    }
    let Some(msgs) = req.get("messages").and_then(Value::as_array) else {
        return (validation(ctx, "1 validation error detected: Value null at 'messages' failed to satisfy constraint: Member must not be null"), m);
    };
    if msgs.is_empty() {
        return (validation(ctx, "A conversation must start with a user message. Try again with a conversation that starts with a user message."), m);
    }
    if let Err(e) = check_documents(&req).and_then(|()| check_model_fields(ctx, &req, &model)) {
        return (validation(ctx, &e), m);
    }
    let inference = |k: &str| req.pointer(&format!("/inferenceConfig/{k}"));
    if super::anthropic::one_sampling_knob(&model)
        && inference("temperature").is_some()
        && inference("topP").is_some()
    {
        return (validation(ctx, "The model returned the following errors: `temperature` and `top_p` cannot both be specified for this model. Please use only one."), m);
    }
    let max_tokens = inference("maxTokens").and_then(Value::as_u64);
    if let (Some(n), Some(limit)) = (max_tokens, ctx.provider.output_limit(&model)) {
        if n > limit {
            return (validation(ctx, &format!("The maximum tokens you requested exceeds the model limit of {limit}. Try again with a maximum tokens value that is lower than {limit}.")), m);
        }
    }
    let has_tool_config = req.get("toolConfig").is_some_and(|v| !v.is_null());
    // The prompt's blocks in the order Claude caches them (tools, system,
    // messages); a `cachePoint` block ends the prefix before it.
    let kc = ctx.prompt_cache(&model);
    let mut cblocks = kc.map(|_| Blocks::new());
    let default_ttl = kc.map_or(0, |k| k.ttl_ms);
    for t in req
        .pointer("/toolConfig/tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        push_block(&mut cblocks, t, 0, default_ttl);
    }
    let mut prompt = String::new();
    for s in req
        .get("system")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        block_text(s, &mut prompt);
        push_block(&mut cblocks, s, prompt.len(), default_ttl);
    }
    let mut echo = String::new();
    let mut prev_role = "";
    let mut prev_uses: Vec<String> = Vec::new();
    let mut script = Script::default();
    for (i, msg) in msgs.iter().enumerate() {
        let role = msg.get("role").and_then(Value::as_str).unwrap_or("");
        let content = msg
            .get("content")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        if let (Some(bl), Some(r)) = (cblocks.as_mut(), msg.get("role")) {
            bl.feed(r);
        }
        if role == "system" {
            // A system turn (ConversationRole's newest value) between the
            // others: text for the prompt, no turn of its own.
            for b in content {
                block_text(b, &mut prompt);
                push_block(&mut cblocks, b, prompt.len(), default_ttl);
            }
            continue;
        }
        if prev_role.is_empty() && role != "user" {
            return (validation(ctx, "A conversation must start with a user message. Try again with a conversation that starts with a user message."), m);
        }
        if role == prev_role {
            return (validation(ctx, "A conversation must alternate between user and assistant roles. Make sure the conversation alternates between user and assistant roles and try again."), m);
        }
        if content.is_empty() {
            return (validation(ctx, "The content field in the Message object is empty. Add a ContentBlock object to the content field and try again."), m);
        }
        let mut t = String::new();
        let mut uses = Vec::new();
        let mut results = Vec::new();
        for (j, b) in content.iter().enumerate() {
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
            push_block(&mut cblocks, b, prompt.len() + t.len(), default_ttl);
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
        for t in tc
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let (Some(name), Some(schema)) = (
                t.pointer("/toolSpec/name").and_then(Value::as_str),
                t.pointer("/toolSpec/inputSchema/json"),
            ) {
                tools.push((name.to_string(), schema));
            }
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
    let prompt_chars = prompt.chars().count();
    let used = match (kc, &cblocks) {
        (Some(kc), Some(bl)) if bl.has_breakpoint() && kc.applies(prompt_chars) => {
            Some(kc.apply(&bl.marks(&prompt), http::now_ms()))
        }
        (Some(_), Some(bl)) if bl.has_breakpoint() => Some(CacheUse::default()),
        _ => None,
    };
    let g = GenInput {
        echo,
        prompt_chars,
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
    let stop = p.stop_reason();
    // With cache points, inputTokens leaves out what was read from or
    // written to the cache; totalTokens counts all.
    let u = used.unwrap_or_default();
    let mut usage = json!({
        "inputTokens": p.prompt_tokens.saturating_sub(u.read + u.write),
        "outputTokens": p.completion_tokens,
        "totalTokens": p.prompt_tokens + p.completion_tokens,
    });
    if used.is_some() {
        usage["cacheReadInputTokens"] = json!(u.read);
        usage["cacheWriteInputTokens"] = json!(u.write);
    }
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
