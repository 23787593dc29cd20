//! OpenAI (and OpenAI-compatible) plus Azure OpenAI: chat completions,
//! embeddings, models.
//!
//! Rules follow the OpenAI API reference: Bearer auth; `model` and
//! `messages` required; roles system/developer/user/assistant/tool/function;
//! a `tool` message must answer a preceding assistant `tool_calls` entry and
//! every tool call must be answered; `stream_options` only with `stream`;
//! `tool_choice` only with `tools`. Azure: `api-key` header, `api-version`
//! query parameter required, deployments instead of models.

use crate::core::ctx::{unknown_key_id, AuthFail, Ctx, ErrKind, KeyRt};
use crate::core::http::json_response;
use crate::core::plan::{plan, GenInput, Output};
use crate::core::prefix::Blocks;
use crate::core::reply::Reply;
use crate::core::script::Script;
use crate::core::shape::{self, Expect, Opts, Problem, Seg, Violation};
mod shapes;
use crate::core::{http, render};
use base64::Engine;
use bytes::Bytes;
use serde_json::{json, Value};

type Outcome = (Reply, Option<String>);

pub fn authenticate<'a>(ctx: &Ctx<'a>) -> Result<&'a KeyRt, AuthFail> {
    let Some(auth) = ctx.header("authorization") else {
        return Err((error_for(ctx, ErrKind::MissingKey, "", false), None));
    };
    let token = auth.strip_prefix("Bearer ").unwrap_or("").trim();
    if token.is_empty() {
        return Err((error_for(ctx, ErrKind::MissingKey, "", false), None));
    }
    match ctx.provider.key_by_secret(token) {
        Some(k) => Ok(k),
        None => Err((
            error_for(ctx, ErrKind::BadKey, token, false),
            Some(unknown_key_id(token)),
        )),
    }
}

pub fn authenticate_azure<'a>(ctx: &Ctx<'a>) -> Result<&'a KeyRt, AuthFail> {
    let Some(key) = ctx.header("api-key").filter(|k| !k.is_empty()) else {
        return Err((error_for(ctx, ErrKind::MissingKey, "", true), None));
    };
    match ctx.provider.key_by_secret(key) {
        Some(k) => Ok(k),
        None => Err((
            error_for(ctx, ErrKind::BadKey, key, true),
            Some(unknown_key_id(key)),
        )),
    }
}

/// The OpenAI error document.
pub fn err(status: u16, message: &str, ty: &str, param: Option<&str>, code: Option<&str>) -> Reply {
    let v = json!({"error": {"message": message, "type": ty, "param": param, "code": code}});
    json_response(status, v.to_string(), &[])
}

pub(crate) fn azure_err(
    status: u16,
    code: &str,
    message: &str,
    extra: &[(&'static str, String)],
) -> Reply {
    let v = json!({"error": {"code": code, "message": message}});
    json_response(status, v.to_string(), extra)
}

fn mask(key: &str) -> String {
    let n = key.chars().count();
    if n <= 8 {
        return "*".repeat(n);
    }
    let head: String = key.chars().take(3).collect();
    let tail: String = key.chars().skip(n - 4).collect();
    format!("{head}{}{tail}", "*".repeat(n - 7))
}

pub fn error_for(ctx: &Ctx<'_>, k: ErrKind, detail: &str, azure: bool) -> Reply {
    let retry = ctx.retry_after_s().to_string();
    if azure {
        return match k {
            ErrKind::MissingKey | ErrKind::BadKey => azure_err(
                401,
                "401",
                "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.",
                &[],
            ),
            ErrKind::RateLimited => azure_err(
                429,
                "429",
                &format!("Requests to the ChatCompletions_Create Operation under Azure OpenAI API have exceeded the token rate limit of your current pricing tier. Please retry after {retry} seconds."),
                &[("retry-after", retry.clone()), ("retry-after-ms", format!("{}000", retry))],
            ),
            ErrKind::Internal => err(500, "The server had an error while processing your request. Sorry about that!", "server_error", None, None),
            ErrKind::Unavailable => err(503, "The service is temporarily unable to process your request. Please try again later.", "server_error", None, None),
            ErrKind::Overloaded => err(529, "The server is overloaded. Please try again later.", "server_error", None, None),
            ErrKind::MethodNotAllowed => azure_err(405, "405", "Method not allowed", &[]),
        };
    }
    match k {
        ErrKind::MissingKey => err(
            401,
            "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
            "invalid_request_error",
            None,
            None,
        ),
        ErrKind::BadKey => err(
            401,
            &format!("Incorrect API key provided: {}. You can find your API key at https://platform.openai.com/account/api-keys.", mask(detail)),
            "invalid_request_error",
            None,
            Some("invalid_api_key"),
        ),
        ErrKind::RateLimited => {
            let v = json!({"error": {"message": format!("Rate limit reached for requests. Please try again in {retry}s."), "type": "requests", "param": null, "code": "rate_limit_exceeded"}});
            json_response(
                429,
                v.to_string(),
                &[
                    ("retry-after", retry.clone()),
                    ("x-ratelimit-remaining-requests", "0".to_string()),
                    ("x-ratelimit-reset-requests", format!("{retry}s")),
                ],
            )
        }
        ErrKind::Internal => err(500, "The server had an error while processing your request. Sorry about that!", "server_error", None, None),
        ErrKind::Unavailable => err(503, "The engine is currently overloaded, please try again later.", "server_error", None, None),
        ErrKind::Overloaded => err(529, "The server is overloaded, please try again later.", "server_error", None, None),
        ErrKind::MethodNotAllowed => err(405, "Method not allowed.", "invalid_request_error", None, None),
    }
}

pub(crate) fn bad(msg: &str, param: &str, code: &str) -> Reply {
    invalid(msg, Some(param), Some(code))
}

pub(crate) fn missing(param: &str) -> Reply {
    bad(
        &format!("Missing required parameter: '{param}'."),
        param,
        "missing_required_parameter",
    )
}

pub(crate) fn wrong_type(param: &str, want: &str) -> Reply {
    bad(
        &format!("Invalid type for '{param}': expected {want}."),
        param,
        "invalid_type",
    )
}

pub(crate) fn bad_value(param: &str, v: &str, supported: &[&str]) -> Reply {
    let list: Vec<String> = supported.iter().map(|s| format!("'{s}'")).collect();
    bad(
        &format!(
            "Invalid value: '{v}'. Supported values are: {}.",
            list.join(", ")
        ),
        param,
        "invalid_value",
    )
}

/// A violation of the SDK's types in OpenAI's words (`Unknown parameter:
/// 'input[3].foo'.`, `Missing required parameter: …`, `Invalid type for …`,
/// `Invalid value: …`), `param` naming its path.
pub(crate) fn violation_reply(v: &Violation) -> Reply {
    let at = openai_path(&v.path);
    match &v.problem {
        Problem::Unknown => bad(
            &format!("Unknown parameter: '{at}'."),
            &at,
            "unknown_parameter",
        ),
        Problem::Missing => missing(&at),
        Problem::Type(want) => wrong_type(&at, expected(want)),
        Problem::Enum(e) => bad_value(&at, v.value.as_str().unwrap_or(""), e.values),
        Problem::Tag(t) => {
            let names: Vec<&str> = t.variants.iter().map(|(n, _)| *n).collect();
            bad_value(
                &format!("{at}.{}", t.tag),
                v.value.as_str().unwrap_or(""),
                &names,
            )
        }
        other => bad(
            &format!("Invalid value for '{at}' ({other:?})."),
            &at,
            "invalid_value",
        ),
    }
}

/// What a type wants, as OpenAI's errors say it.
fn expected(want: &Expect) -> &'static str {
    match want {
        Expect::Str => "a string",
        Expect::Bool => "a boolean",
        Expect::Int => "an integer",
        Expect::Num => "a number",
        Expect::Enum(_) => "a string",
        Expect::Object(_) => "an object",
        Expect::List(_) => "an array",
    }
}

/// A path as OpenAI writes it: `input[3].content[0].text`.
fn openai_path(segs: &[Seg]) -> String {
    let mut out = String::new();
    for s in segs {
        match s {
            Seg::Field(n, _) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(n);
            }
            Seg::Unknown(k) | Seg::Entry(_, k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
            Seg::Tag(_) => {}
        }
    }
    out
}

pub(crate) fn parse_error() -> Reply {
    err(
        400,
        "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)",
        "invalid_request_error",
        None,
        None,
    )
}

pub(crate) fn invalid(msg: &str, param: Option<&str>, code: Option<&str>) -> Reply {
    err(400, msg, "invalid_request_error", param, code)
}

pub(crate) fn model_not_found(m: &str) -> Reply {
    err(
        404,
        &format!("The model `{m}` does not exist or you do not have access to it."),
        "invalid_request_error",
        None,
        Some("model_not_found"),
    )
}

pub(crate) fn is_embedding_model(m: &str) -> bool {
    m.contains("embed")
}

/// Azure: `api-version` required, deployment must exist.
pub(crate) fn azure_checks(ctx: &Ctx<'_>, deployment: &str) -> Result<(), Reply> {
    if ctx
        .query_param("api-version")
        .filter(|v| !v.is_empty())
        .is_none()
    {
        return Err(azure_err(404, "404", "Resource not found", &[]));
    }
    if !ctx.provider.has_model(deployment) {
        return Err(azure_err(
            404,
            "DeploymentNotFound",
            "The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again.",
            &[],
        ));
    }
    Ok(())
}

/// What chat and embeddings check first: Azure's `api-version` and
/// deployment, a JSON object body, and the model (the deployment on Azure,
/// else `model`, which must be one of the provider's).
fn request_and_model(
    ctx: &Ctx<'_>,
    deployment: &Option<String>,
) -> Result<(Value, String), Outcome> {
    if let Some(d) = deployment {
        if let Err(r) = azure_checks(ctx, d) {
            return Err((r, Some(d.clone())));
        }
    }
    let req: Value = match serde_json::from_slice(ctx.body) {
        Ok(v @ Value::Object(_)) => v,
        _ => return Err((parse_error(), deployment.clone())),
    };
    let model = match (deployment, req.get("model")) {
        (Some(d), _) => d.clone(),
        (None, Some(Value::String(m))) => m.clone(),
        (None, _) => {
            return Err((
                invalid("you must provide a model parameter", None, None),
                None,
            ))
        }
    };
    if deployment.is_none() && !ctx.provider.has_model(&model) {
        return Err((model_not_found(&model), Some(model)));
    }
    Ok((req, model))
}

/// Text of a message `content` (string or array of parts).
fn content_text(c: &Value, out: &mut String) {
    match c {
        Value::String(s) => out.push_str(s),
        Value::Array(parts) => {
            for p in parts {
                if let Some(t) = p.get("text").and_then(Value::as_str) {
                    out.push_str(t);
                }
            }
        }
        _ => {}
    }
}

/// Chat Completions request fields (openai-python's
/// `CompletionCreateParams`); anything else is "Unrecognized request
/// argument supplied", as OpenAI answers.
const CHAT_FIELDS: &[&str] = &[
    "model",
    "messages",
    "audio",
    "frequency_penalty",
    "function_call",
    "functions",
    "logit_bias",
    "logprobs",
    "max_completion_tokens",
    "max_tokens",
    "metadata",
    "modalities",
    "n",
    "parallel_tool_calls",
    "prediction",
    "presence_penalty",
    "moderation",
    "prompt_cache_key",
    "prompt_cache_options",
    "prompt_cache_retention",
    "reasoning_effort",
    "response_format",
    "safety_identifier",
    "seed",
    "service_tier",
    "stop",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "user",
    "verbosity",
    "web_search_options",
];

/// Extensions of OpenAI-compatible servers (Mistral, vLLM, Groq, Ollama,
/// ...), taken by providers under a path prefix only: OpenAI itself answers
/// `Unrecognized request argument supplied: top_k` (notes/openai.md §7).
const COMPAT_FIELDS: &[&str] = &[
    "safe_prompt",
    "random_seed",
    "top_k",
    "min_p",
    "repetition_penalty",
    "prompt_mode",
];

const ROLES: &[&str] = &[
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
];

/// OpenAI's own rules (providers without a path prefix: OpenAI and Azure;
/// OpenAI-compatible servers under a prefix differ and are left alone):
/// reasoning models (the `o1`/`o3`/`o4` and `gpt-5` families, by name, the
/// deployment name on Azure) take `reasoning_effort` and refuse
/// `max_tokens`; other models refuse `reasoning_effort`.
fn is_reasoning_model(model: &str) -> bool {
    ["o1", "o3", "o4", "gpt-5"].iter().any(|p| {
        model
            .strip_prefix(p)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
    })
}

/// OpenAI's own nested members (`shapes`): messages by role and their
/// parts, tool calls, tools, `response_format`, `stream_options`. A bad
/// role keeps the role error's own words (below).
fn nested_refusal(req: &Value) -> Option<Reply> {
    let v = shape::check_msg(&shapes::NESTED, req, &Opts::default())
        .into_iter()
        .next()?;
    let role_tag = matches!(v.problem, Problem::Tag(_))
        && matches!(
            v.path.as_slice(),
            [Seg::Field("messages", _), Seg::Index(_)]
        );
    (!role_tag).then(|| violation_reply(&v))
}

fn reasoning_refusal(req: &Value, model: &str) -> Option<Reply> {
    let given = |p: &str| req.get(p).is_some_and(|v| !v.is_null());
    if is_reasoning_model(model) {
        if given("max_tokens") {
            return Some(invalid("Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.", Some("max_tokens"), Some("unsupported_parameter")));
        }
        let effort = req.get("reasoning_effort").filter(|v| !v.is_null());
        // The SDK's `ReasoningEffort`.
        let efforts = ["none", "minimal", "low", "medium", "high", "xhigh", "max"];
        if let Some(e) = effort {
            let e = e.as_str().unwrap_or("");
            if !efforts.contains(&e) {
                return Some(bad_value("reasoning_effort", e, &efforts));
            }
        }
    } else if given("reasoning_effort") {
        return Some(invalid(
            "Unsupported parameter: 'reasoning_effort' is not supported with this model.",
            Some("reasoning_effort"),
            Some("unsupported_parameter"),
        ));
    }
    None
}

/// The prompt cache's answer, as OpenAI reports it (`cached_tokens`, also
/// the Responses API's): None when the provider simulates no cache (its
/// usage then has no details, as OpenAI-compatible servers answer), else the
/// tokens read from this key's cache. `marks` hashes the prompt's blocks; it
/// runs only for a prompt long enough to be cached.
pub(crate) fn cached_tokens(
    ctx: &Ctx<'_>,
    model: &str,
    prompt_chars: usize,
    marks: impl FnOnce() -> Vec<crate::core::prefix::Mark>,
) -> Option<u64> {
    ctx.provider.cache?;
    Some(match ctx.prompt_cache(model) {
        Some(kc) if kc.applies(prompt_chars) => kc.apply(&marks(), http::now_ms()).read,
        _ => 0,
    })
}

pub async fn chat(ctx: &Ctx<'_>, deployment: Option<String>) -> Outcome {
    let (req, model) = match request_and_model(ctx, &deployment) {
        Ok(x) => x,
        Err(o) => return o,
    };
    let m = Some(model.clone());
    if is_embedding_model(&model) {
        return (
            err(404, "This is not a chat model and thus not supported in the v1/chat/completions endpoint.", "invalid_request_error", Some("model"), Some("model_not_found")),
            m,
        );
    }
    let msgs = match req.get("messages") {
        None | Some(Value::Null) => {
            return (
                invalid(
                    "Missing required parameter: 'messages'.",
                    Some("messages"),
                    Some("missing_required_parameter"),
                ),
                m,
            )
        }
        Some(Value::Array(a)) => a,
        Some(_) => {
            return (
                invalid(
                    "Invalid type for 'messages': expected an array of objects.",
                    Some("messages"),
                    Some("invalid_type"),
                ),
                m,
            )
        }
    };
    if msgs.is_empty() {
        return (
            invalid("Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.", Some("messages"), Some("empty_array")),
            m,
        );
    }
    let compat = !ctx.provider.prefix.is_empty();
    let known = |k: &str| CHAT_FIELDS.contains(&k) || (compat && COMPAT_FIELDS.contains(&k));
    if let Some(k) = req.as_object().and_then(|o| o.keys().find(|k| !known(k))) {
        return (
            invalid(
                &format!("Unrecognized request argument supplied: {k}"),
                None,
                None,
            ),
            m,
        );
    }
    if ctx.provider.prefix.is_empty() {
        if let Some(r) = nested_refusal(&req) {
            return (r, m);
        }
        if let Some(r) = reasoning_refusal(&req, &model) {
            return (r, m);
        }
    }
    for (p, hi) in [
        ("temperature", 2.0),
        ("top_p", 1.0),
        ("frequency_penalty", 2.0),
        ("presence_penalty", 2.0),
    ] {
        let lo = if p.ends_with("penalty") { -2.0 } else { 0.0 };
        if !http::in_range(req.get(p), lo, hi) {
            return (
                invalid(&format!("Invalid '{p}': decimal above maximum value or below minimum value. Expected a value within [{lo}, {hi}]."), Some(p), Some("invalid_value")),
                m,
            );
        }
    }
    let stream = match req.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return (
                invalid(
                    "Invalid type for 'stream': expected a boolean.",
                    Some("stream"),
                    Some("invalid_type"),
                ),
                m,
            )
        }
    };
    let include_usage = match req.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(so) => {
            if !stream {
                return (
                    invalid(
                        "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                        Some("stream_options"),
                        None,
                    ),
                    m,
                );
            }
            so.get("include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false)
        }
    };
    let mut max_tokens = None;
    for p in ["max_tokens", "max_completion_tokens"] {
        match req.get(p) {
            None | Some(Value::Null) => {}
            Some(v) => match v.as_u64() {
                Some(n) if n >= 1 => {
                    if let Some(limit) = ctx.provider.output_limit(&model) {
                        if n > limit {
                            return (
                                invalid(&format!("{p} is too large: {n}. This model supports at most {limit} completion tokens, whereas you provided {n}."), Some(p), Some("invalid_value")),
                                m,
                            );
                        }
                    }
                    max_tokens = Some(n)
                }
                _ => {
                    return (
                        invalid(
                            &format!("Invalid '{p}': expected an integer >= 1."),
                            Some(p),
                            Some("invalid_value"),
                        ),
                        m,
                    )
                }
            },
        }
    }
    // Messages: roles, text, tool call pairing.
    let mut prompt = String::new();
    // Where each message's text ends in `prompt` (the cache's blocks).
    let mut ends: Vec<usize> = Vec::with_capacity(msgs.len());
    let mut echo = String::new();
    let mut open_calls: Vec<String> = Vec::new();
    let mut open_at = 0usize;
    let mut script = Script::default();
    for (i, msg) in msgs.iter().enumerate() {
        let Some(role) = msg.get("role").and_then(Value::as_str) else {
            return (
                invalid(
                    &format!("Missing required parameter: 'messages[{i}].role'."),
                    Some(&format!("messages[{i}].role")),
                    Some("missing_required_parameter"),
                ),
                m,
            );
        };
        if !ROLES.contains(&role) {
            return (
                invalid(&format!("Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'."), Some(&format!("messages[{i}].role")), Some("invalid_value")),
                m,
            );
        }
        if role != "tool" && !open_calls.is_empty() {
            return (
                invalid(&format!("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}", open_calls.join(", ")), Some(&format!("messages.[{open_at}].role")), None),
                m,
            );
        }
        let content = msg.get("content").unwrap_or(&Value::Null);
        let mut t = String::new();
        content_text(content, &mut t);
        match role {
            "assistant" => {
                if let Some(calls) = msg.get("tool_calls").and_then(Value::as_array) {
                    for c in calls {
                        let id = c.get("id").and_then(Value::as_str).unwrap_or("");
                        open_calls.push(id.to_string());
                        if let Some(a) = c.pointer("/function/arguments").and_then(Value::as_str) {
                            t.push_str(a);
                        }
                    }
                    open_at = i;
                } else if content.is_null() {
                    return (
                        invalid(
                            "Invalid value for 'content': expected a string, got null.",
                            Some(&format!("messages.[{i}].content")),
                            None,
                        ),
                        m,
                    );
                }
            }
            "tool" => {
                let id = msg
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                match open_calls.iter().position(|c| c == id) {
                    Some(p) => {
                        open_calls.remove(p);
                        script.tool_result(t.clone());
                    }
                    None => {
                        return (
                            invalid("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.", Some(&format!("messages.[{i}].role")), None),
                            m,
                        )
                    }
                }
            }
            _ => {
                if content.is_null() {
                    return (
                        invalid(
                            &format!("Missing required parameter: 'messages[{i}].content'."),
                            Some(&format!("messages[{i}].content")),
                            Some("missing_required_parameter"),
                        ),
                        m,
                    );
                }
            }
        }
        if role == "user" {
            script.user_text(&t);
            echo = t.clone();
        }
        prompt.push_str(&t);
        ends.push(prompt.len());
    }
    if !open_calls.is_empty() {
        return (
            invalid(&format!("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}", open_calls.join(", ")), Some(&format!("messages.[{open_at}].role")), None),
            m,
        );
    }
    // Tools.
    let empty = json!({});
    let mut tools: Vec<(String, &Value)> = Vec::new();
    if let Some(ts) = req.get("tools").filter(|v| !v.is_null()) {
        let Some(arr) = ts.as_array() else {
            return (
                invalid(
                    "Invalid type for 'tools': expected an array.",
                    Some("tools"),
                    Some("invalid_type"),
                ),
                m,
            );
        };
        for (i, t) in arr.iter().enumerate() {
            let Some(name) = t.pointer("/function/name").and_then(Value::as_str) else {
                return (
                    invalid(
                        &format!("Missing required parameter: 'tools[{i}].function.name'."),
                        Some(&format!("tools[{i}].function.name")),
                        Some("missing_required_parameter"),
                    ),
                    m,
                );
            };
            tools.push((
                name.to_string(),
                t.pointer("/function/parameters").unwrap_or(&empty),
            ));
        }
    }
    let (mut forced, mut any) = (None, false);
    match req.get("tool_choice") {
        None | Some(Value::Null) => {}
        Some(tc) => {
            if tools.is_empty() {
                return (invalid("Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.", Some("tool_choice"), None), m);
            }
            match tc {
                Value::String(s) if s == "required" => any = true,
                Value::String(s) if s == "auto" || s == "none" => {}
                Value::Object(_) => match tc.pointer("/function/name").and_then(Value::as_str) {
                    Some(n) if tools.iter().any(|t| t.0 == n) => forced = Some(n.to_string()),
                    _ => return (invalid("Invalid value for 'tool_choice': the named function is not in 'tools'.", Some("tool_choice"), None), m),
                },
                _ => return (invalid("Invalid value for 'tool_choice'.", Some("tool_choice"), Some("invalid_value")), m),
            }
        }
    }
    let prompt_chars = prompt.chars().count();
    let cached = cached_tokens(ctx, &model, prompt_chars, || {
        let mut b = Blocks::new();
        for k in ["prompt_cache_key", "tools", "response_format"] {
            if let Some(v) = req.get(k) {
                b.feed(v);
            }
        }
        for (msg, &end) in msgs.iter().zip(&ends) {
            b.block(msg, end);
        }
        b.marks(&prompt)
    });
    let g = GenInput {
        echo,
        prompt_chars,
        tools,
        forced_tool: forced,
        any_tool: any,
        max_tokens,
        tool_id_prefix: "call_",
        script,
    };
    let p = match plan(ctx, g) {
        Ok(p) => p,
        Err(e) => return (invalid(&e, Some("tools"), None), m),
    };
    let id = format!("chatcmpl-{}", ctx.request_id);
    let created = http::now_secs();
    let finish = if p.is_tool() {
        "tool_calls"
    } else if p.truncated {
        "length"
    } else {
        "stop"
    };
    let mut usage = json!({
        "prompt_tokens": p.prompt_tokens,
        "completion_tokens": p.completion_tokens,
        "total_tokens": p.prompt_tokens + p.completion_tokens,
    });
    if let Some(n) = cached {
        usage["prompt_tokens_details"] = json!({"cached_tokens": n});
    }
    let hdrs = [("x-request-id", ctx.request_id.clone())];
    if !stream {
        let message = match &p.output {
            Output::Text(t) => {
                json!({"role": "assistant", "content": t, "refusal": null, "annotations": []})
            }
            Output::Tool { id, name, args } => json!({
                "role": "assistant", "content": null, "refusal": null, "annotations": [],
                "tool_calls": [{"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}],
            }),
        };
        let v = json!({
            "id": id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
            "usage": usage, "service_tier": "default", "system_fingerprint": "fp_mock",
        });
        return (ctx.json_ok(&v, &hdrs).await, m);
    }
    let chunk = |delta: Value, finish: Value| {
        let mut c = json!({
            "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "system_fingerprint": "fp_mock",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        if include_usage {
            c["usage"] = Value::Null;
        }
        render::sse_data(&c)
    };
    let (first, content, piece) = match p.output {
        Output::Text(t) => (
            chunk(
                json!({"role": "assistant", "content": "", "refusal": null}),
                Value::Null,
            ),
            t,
            chunk(json!({"content": render::PIECE}), Value::Null),
        ),
        Output::Tool {
            id: cid,
            name,
            args,
        } => (
            chunk(
                json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": cid, "type": "function", "function": {"name": name, "arguments": ""}}]}),
                Value::Null,
            ),
            args.to_string(),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": render::PIECE}}]}),
                Value::Null,
            ),
        ),
    };
    let tpl = render::Template::new(&piece);
    let mut tail = vec![chunk(json!({}), Value::String(finish.to_string()))];
    if include_usage {
        let c = json!({
            "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "system_fingerprint": "fp_mock", "choices": [], "usage": usage,
        });
        tail.push(render::sse_data(&c));
    }
    tail.push(Bytes::from_static(b"data: [DONE]\n\n"));
    (
        ctx.stream(
            "text/event-stream; charset=utf-8",
            vec![first],
            content,
            Box::new(move |_, piece, _| tpl.render(piece)),
            tail,
            &hdrs,
            render::sse_data(&json!({"error": {"message": "The server had an error while processing your request. Sorry about that!", "type": "server_error", "param": null, "code": null}})),
        ),
        m,
    )
}

pub async fn embeddings(ctx: &Ctx<'_>, deployment: Option<String>) -> Outcome {
    let (req, model) = match request_and_model(ctx, &deployment) {
        Ok(x) => x,
        Err(o) => return o,
    };
    let m = Some(model.clone());
    if !is_embedding_model(&model) {
        return (
            invalid(
                &format!("The model `{model}` does not support embeddings."),
                Some("model"),
                None,
            ),
            m,
        );
    }
    let inputs: Vec<String> = match req.get("input") {
        None | Some(Value::Null) => {
            return (
                invalid(
                    "Missing required parameter: 'input'.",
                    Some("input"),
                    Some("missing_required_parameter"),
                ),
                m,
            )
        }
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) if !a.is_empty() => {
            let mut v = Vec::with_capacity(a.len());
            for x in a {
                match x {
                    Value::String(s) => v.push(s.clone()),
                    Value::Number(_) => v.push("t".repeat(4)),
                    Value::Array(toks) => v.push("t".repeat(4 * toks.len())),
                    _ => return (
                        invalid(
                            "Invalid 'input': expected a string or an array of strings or tokens.",
                            Some("input"),
                            Some("invalid_type"),
                        ),
                        m,
                    ),
                }
            }
            if a.iter().all(Value::is_number) {
                vec!["t".repeat(4 * a.len())]
            } else {
                v
            }
        }
        Some(_) => {
            return (
                invalid(
                    "Invalid 'input': expected a string or an array of strings or tokens.",
                    Some("input"),
                    Some("invalid_type"),
                ),
                m,
            )
        }
    };
    let dims = match req.get("dimensions") {
        None | Some(Value::Null) => 1536,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=3072).contains(&n) => n as usize,
            _ => {
                return (
                    invalid(
                        "Invalid 'dimensions': expected an integer between 1 and 3072.",
                        Some("dimensions"),
                        Some("invalid_value"),
                    ),
                    m,
                )
            }
        },
    };
    let b64 = match req.get("encoding_format").and_then(Value::as_str) {
        None | Some("float") => false,
        Some("base64") => true,
        Some(o) => {
            return (
                invalid(
                    &format!("Invalid value: '{o}'. Supported values are: 'float' and 'base64'."),
                    Some("encoding_format"),
                    Some("invalid_value"),
                ),
                m,
            )
        }
    };
    let mut tokens = 0u64;
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            tokens += crate::core::text::count_tokens(s);
            let e = crate::core::text::embedding(s, dims);
            let emb = if b64 {
                let mut raw = Vec::with_capacity(e.len() * 4);
                for f in &e {
                    raw.extend_from_slice(&f.to_le_bytes());
                }
                Value::String(base64::engine::general_purpose::STANDARD.encode(raw))
            } else {
                json!(e)
            };
            json!({"object": "embedding", "index": i, "embedding": emb})
        })
        .collect();
    let v = json!({
        "object": "list", "data": data, "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    });
    (ctx.json_ok(&v, &[]).await, m)
}

pub fn models(ctx: &Ctx<'_>) -> Outcome {
    let data: Vec<Value> = ctx
        .provider
        .models
        .iter()
        .map(|m| json!({"id": m.id, "object": "model", "created": 1_700_000_000u64, "owned_by": "mock-llm"}))
        .collect();
    let v = json!({"object": "list", "data": data});
    (json_response(200, v.to_string(), &[]), None)
}

pub fn model(ctx: &Ctx<'_>, id: String) -> Outcome {
    if !ctx.provider.has_model(&id) {
        return (model_not_found(&id), Some(id));
    }
    let v =
        json!({"id": id, "object": "model", "created": 1_700_000_000u64, "owned_by": "mock-llm"});
    (json_response(200, v.to_string(), &[]), Some(id))
}
