//! Anthropic Messages API: `POST /v1/messages`, non-stream and stream.
//!
//! Rules follow Anthropic's API reference: `x-api-key` (or the same key as
//! `Authorization: Bearer`, as the official SDK 2.x sends it) and
//! `anthropic-version` headers required; `model`, `max_tokens` and `messages` required; roles
//! only `user`/`assistant` (a `system` role is refused: system prompts go in
//! the top-level `system`; with the `mid-conversation-system-*` beta a
//! text-only `system` message may sit between later turns); the first message is `user` and roles alternate
//! (stricter than today's API, which merges consecutive same-role turns: a
//! gateway should not rely on that); every `tool_result` answers a `tool_use`
//! of the previous assistant message, and every `tool_use` is answered in the
//! next message. Errors: `{"type":"error","error":{"type","message"},
//! "request_id"}` with the documented status per error type.

use crate::core::ctx::{unknown_key_id, AuthFail, Ctx, ErrKind, KeyRt};
use crate::core::http::json_response;
use crate::core::plan::{plan, GenInput, Output};
use crate::core::prefix::{Blocks, CacheUse};
use crate::core::reply::Reply;
use crate::core::script::Script;
use crate::core::shape::{self, Expect, Msg, Opts, Problem, Seg};
use crate::core::{http, render, text};
pub(crate) mod shapes;
use serde_json::{json, Value};

type Outcome = (Reply, Option<String>);

/// `anthropic-version` values are dates (`2023-06-01`, and later ones that
/// newer SDKs send); anything not shaped `YYYY-MM-DD` from 2023 on is refused.
fn valid_version(v: &str) -> bool {
    let b = v.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
        && v >= "2023-01-01"
        && (1..=12).contains(&v[5..7].parse::<u8>().unwrap_or(0))
        && (1..=31).contains(&v[8..10].parse::<u8>().unwrap_or(0))
}

pub fn authenticate<'a>(ctx: &Ctx<'a>) -> Result<&'a KeyRt, AuthFail> {
    // `x-api-key` is the documented header; official SDKs 2.x send the same
    // API key as `Authorization: Bearer`, which the API accepts too.
    let bearer = ctx
        .header("authorization")
        .and_then(|a| a.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(key) = ctx.header("x-api-key").or(bearer).filter(|k| !k.is_empty()) else {
        return Err((
            err(
                ctx,
                401,
                "authentication_error",
                "x-api-key header is required",
            ),
            None,
        ));
    };
    match ctx.provider.key_by_secret(key) {
        Some(k) => Ok(k),
        None => Err((
            err(ctx, 401, "authentication_error", "invalid x-api-key"),
            Some(unknown_key_id(key)),
        )),
    }
}

/// The Anthropic error document.
pub fn err(ctx: &Ctx<'_>, status: u16, ty: &str, message: &str) -> Reply {
    err_h(ctx, status, ty, message, &[])
}

fn err_h(
    ctx: &Ctx<'_>,
    status: u16,
    ty: &str,
    message: &str,
    extra: &[(&'static str, String)],
) -> Reply {
    let rid = format!("req_{}", ctx.request_id);
    let v = json!({"type": "error", "error": {"type": ty, "message": message}, "request_id": rid});
    let mut h: Vec<(&'static str, String)> = vec![("request-id", rid)];
    h.extend_from_slice(extra);
    json_response(status, v.to_string(), &h)
}

pub fn error_for(ctx: &Ctx<'_>, k: ErrKind, _detail: &str) -> Reply {
    match k {
        ErrKind::MissingKey => err(
            ctx,
            401,
            "authentication_error",
            "x-api-key header is required",
        ),
        ErrKind::BadKey => err(ctx, 401, "authentication_error", "invalid x-api-key"),
        ErrKind::RateLimited => {
            let retry = ctx.retry_after_s().to_string();
            err_h(
                ctx,
                429,
                "rate_limit_error",
                "Number of requests has exceeded your per-minute rate limit",
                &[("retry-after", retry)],
            )
        }
        ErrKind::Internal => err(ctx, 500, "api_error", "Internal server error"),
        ErrKind::Unavailable => err(ctx, 503, "api_error", "Service unavailable"),
        ErrKind::Overloaded => err(ctx, 529, "overloaded_error", "Overloaded"),
        ErrKind::MethodNotAllowed => err(ctx, 405, "invalid_request_error", "Method not allowed"),
    }
}

fn bad(ctx: &Ctx<'_>, msg: &str) -> Reply {
    err(ctx, 400, "invalid_request_error", msg)
}

/// Collect the text of a `content` value (string or blocks) for counting.
fn block_text(b: &Value, out: &mut String) {
    if let Some(t) = b.get("text").and_then(Value::as_str) {
        out.push_str(t);
    }
    if let Some(i) = b.get("input") {
        out.push_str(&i.to_string());
    }
    if let Some(c) = b.get("content") {
        match c {
            Value::String(s) => out.push_str(s),
            Value::Array(a) => a.iter().for_each(|x| block_text(x, out)),
            _ => {}
        }
    }
}

/// The TTL of a block's `cache_control` breakpoint, if it has one:
/// `ttl: "1h"` an hour, else `default_ms`.
pub(crate) fn breakpoint_ttl(b: &Value, default_ms: u64) -> Option<u64> {
    let cc = b.get("cache_control").filter(|c| c.is_object())?;
    Some(if cc.get("ttl").and_then(Value::as_str) == Some("1h") {
        3_600_000
    } else {
        default_ms
    })
}

/// The `anthropic-beta` values sent (comma-separated, one or more headers).
fn betas<'a>(ctx: &Ctx<'a>) -> Vec<&'a str> {
    ctx.parts
        .headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .collect()
}

/// The request checked against the SDK's types (`shapes`), its first
/// violation in the validator's words (`path: Extra inputs are not
/// permitted`, `path: Field required`, `path: Input should be …`).
pub(crate) fn shape_error(root: &'static Msg, req: &Value, betas: Vec<&str>) -> Option<String> {
    let opts = Opts {
        betas,
        ..Opts::default()
    };
    let v = shape::check_msg(root, req, &opts).into_iter().next()?;
    let at = path(&v.path);
    let what = match &v.problem {
        Problem::Unknown => "Extra inputs are not permitted".to_string(),
        Problem::Missing => "Field required".to_string(),
        Problem::Type(Expect::Str) => "Input should be a valid string".to_string(),
        Problem::Type(Expect::Int) => "Input should be a valid integer".to_string(),
        Problem::Type(Expect::Num) => "Input should be a valid number".to_string(),
        Problem::Type(Expect::Bool) => "Input should be a valid boolean".to_string(),
        Problem::Type(Expect::List(_)) => "Input should be a valid list".to_string(),
        Problem::Type(Expect::Object(_)) => "Input should be a valid dictionary".to_string(),
        Problem::Type(Expect::Enum(e)) | Problem::Enum(e) => {
            format!("Input should be {}", one_of(e.values))
        }
        Problem::Tag(t) => {
            let tags: Vec<String> = t.variants.iter().map(|(n, _)| format!("'{n}'")).collect();
            format!(
                "Input tag '{}' found using '{}' does not match any of the expected tags: {}",
                v.value.as_str().unwrap_or(""),
                t.tag,
                tags.join(", ")
            )
        }
        Problem::Below(b) => format!("Input should be greater than or equal to {b}"),
        Problem::Above(b) => format!("Input should be less than or equal to {b}"),
        other => format!("invalid value ({other:?})"),
    };
    Some(if at.is_empty() {
        what
    } else {
        format!("{at}: {what}")
    })
}

/// `'a', 'b' or 'c'`, as pydantic lists literals.
fn one_of(values: &[&str]) -> String {
    let q: Vec<String> = values.iter().map(|v| format!("'{v}'")).collect();
    match q.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => q.concat(),
    }
}

/// A path as the validator writes it: `messages.1.content.0.thinking.signature`.
fn path(segs: &[Seg]) -> String {
    let parts: Vec<String> = segs
        .iter()
        .map(|s| match s {
            Seg::Field(n, _) | Seg::Tag(n) => n.to_string(),
            Seg::Unknown(k) | Seg::Entry(_, k) => k.clone(),
            Seg::Index(i) => i.to_string(),
        })
        .collect();
    parts.join(".")
}

/// Claude 4.5 and later take `temperature` or `top_p`, not both (the API's
/// error relayed by Bedrock, notes/bedrock.md §2c; AWS's Claude parameter
/// page). Ids as Anthropic and Bedrock write them.
pub(crate) fn one_sampling_knob(model: &str) -> bool {
    let Some(rest) = model.split("claude-").nth(1) else {
        return false;
    };
    if rest.starts_with(|c: char| c.is_ascii_digit()) {
        return false; // claude-3-…, claude-3-5-…: older naming
    }
    let mut it = rest
        .split('-')
        .skip_while(|t| !t.starts_with(|c: char| c.is_ascii_digit()));
    let major: u32 = it.next().and_then(|t| t.parse().ok()).unwrap_or(0);
    let minor: u32 = it
        .next()
        .filter(|t| t.len() <= 2)
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    (major, minor) >= (4, 5)
}

/// What a model's thinking settings allow (the API's own errors, quoted in
/// the notes): no thinking on a model that does not think (`'m' does not
/// support thinking.`), no `enabled` budget on a model that thinks
/// adaptively only, a budget below `max_tokens`, and context management's
/// `clear_thinking` only with thinking on.
fn thinking_error(
    ctx: &Ctx<'_>,
    req: &Value,
    model: &str,
    max_tokens: u64,
    count: bool,
) -> Option<String> {
    let kind = req.pointer("/thinking/type").and_then(Value::as_str);
    let on = matches!(kind, Some("enabled" | "adaptive" | "between_tools"));
    if on && !ctx.provider.thinks(model) {
        return Some(format!("'{model}' does not support thinking."));
    }
    if kind == Some("enabled") {
        if ctx.provider.adaptive_only(model) {
            return Some("\"thinking.type.enabled\" is not supported for this model. Use \"thinking.type.adaptive\" and \"output_config.effort\" to control thinking behavior.".into());
        }
        let budget = req
            .pointer("/thinking/budget_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        if !count && budget >= max_tokens {
            return Some("`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size".into());
        }
    }
    let clears_thinking = req
        .pointer("/context_management/edits")
        .and_then(Value::as_array)
        .is_some_and(|e| {
            e.iter()
                .any(|x| x.get("type").and_then(Value::as_str) == Some("clear_thinking_20251015"))
        });
    if clears_thinking && !on {
        return Some(
            "`clear_thinking_20251015` strategy requires `thinking` to be enabled or adaptive"
                .into(),
        );
    }
    None
}

/// `POST /v1/messages`.
/// The blocks of the searches `x-mock-web-searches` asks for (a
/// `server_tool_use` and its `web_search_tool_result` each), when the
/// request declares Anthropic's web search tool.
fn web_searches(ctx: &Ctx<'_>, req: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for i in 0..crate::core::plan::web_searches(ctx, req, "web_search_") {
        let id = format!("srvtoolu_{}{i}", ctx.request_id);
        out.push(
            json!({"type": "server_tool_use", "id": id, "name": "web_search",
                        "input": {"query": format!("search {}", i + 1)}}),
        );
        out.push(json!({"type": "web_search_tool_result", "tool_use_id": id,
                        "content": [{"type": "web_search_result", "url": "https://example.com/",
                                     "title": "Example", "encrypted_content": "", "page_age": null}]}));
    }
    out
}

pub async fn messages(ctx: &Ctx<'_>) -> Outcome {
    messages_or_count(ctx, false).await
}

/// `POST /v1/messages/count_tokens`: the same checks as a message (without
/// `max_tokens` or sampling fields) and `{"input_tokens": N}`, N being the
/// `usage.input_tokens` the same request would get from `/v1/messages`.
pub async fn count_tokens(ctx: &Ctx<'_>) -> Outcome {
    messages_or_count(ctx, true).await
}

async fn messages_or_count(ctx: &Ctx<'_>, count: bool) -> Outcome {
    match ctx.header("anthropic-version") {
        None => return (bad(ctx, "anthropic-version: header is required"), None),
        Some(v) if !valid_version(v) => {
            return (
                bad(ctx, &format!("anthropic-version: invalid version: {v}")),
                None,
            )
        }
        _ => {}
    }
    let req: Value = match serde_json::from_slice::<Value>(ctx.body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return (bad(ctx, "body: Input should be an object"), None),
        Err(e) => {
            return (
                bad(
                    ctx,
                    &format!(
                        "There was an error parsing the body of your request: {}",
                        http::json_err(&e)
                    ),
                ),
                None,
            )
        }
    };
    let model = match req.get("model") {
        Some(Value::String(m)) => m.clone(),
        None => return (bad(ctx, "model: Field required"), None),
        Some(_) => return (bad(ctx, "model: Input should be a valid string"), None),
    };
    let m = Some(model.clone());
    let root = if count {
        &shapes::COUNT
    } else {
        &shapes::CREATE
    };
    if let Some(e) = shape_error(root, &req, betas(ctx)) {
        return (bad(ctx, &e), m);
    }
    if !ctx.provider.has_model(&model) {
        return (
            err(ctx, 404, "not_found_error", &format!("model: {model}")),
            m,
        );
    }
    let msgs = req
        .get("messages")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    if msgs.is_empty() {
        return (bad(ctx, "messages: at least one message is required"), m);
    }
    let max_tokens = req.get("max_tokens").and_then(Value::as_u64).unwrap_or(0);
    if let Some(limit) = ctx.provider.output_limit(&model) {
        if max_tokens > limit {
            return (
                bad(ctx, &format!("max_tokens: {max_tokens} > {limit}, which is the maximum allowed number of output tokens for {model}")),
                m,
            );
        }
    }
    if let Some(e) = thinking_error(ctx, &req, &model, max_tokens, count) {
        return (bad(ctx, &e), m);
    }
    let given = |k: &str| req.get(k).is_some_and(|v| !v.is_null());
    if one_sampling_knob(&model) && given("temperature") && given("top_p") {
        return (bad(ctx, "`temperature` and `top_p` cannot both be specified for this model. Please use only one."), m);
    }
    let stream = req.get("stream").and_then(Value::as_bool).unwrap_or(false);
    // The prompt's blocks in the order Anthropic caches them (tools, system,
    // messages), with their breakpoints; collected when this key's cache
    // could answer.
    let kc = ctx.prompt_cache(&model).filter(|_| !count);
    let mut cblocks = kc.map(|_| Blocks::new());
    let ttl = |b: &Value| breakpoint_ttl(b, kc.map_or(0, |k| k.ttl_ms));
    let mut prompt = String::new();
    if let Some(bl) = cblocks.as_mut() {
        for t in req
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            bl.block(t, 0);
            if let Some(ms) = ttl(t) {
                bl.breakpoint(ms);
            }
        }
    }
    match req.get("system") {
        Some(v @ Value::String(s)) => {
            prompt.push_str(s);
            if let Some(bl) = cblocks.as_mut() {
                bl.block(v, prompt.len());
            }
        }
        Some(Value::Array(a)) => {
            for b in a {
                block_text(b, &mut prompt);
                if let Some(bl) = cblocks.as_mut() {
                    bl.block(b, prompt.len());
                    if let Some(ms) = ttl(b) {
                        bl.breakpoint(ms);
                    }
                }
            }
        }
        _ => {}
    }
    let mut echo = String::new();
    let mut prev_role = "";
    let mut prev_tool_uses: Vec<String> = Vec::new();
    let mut script = Script::default();
    for (i, msg) in msgs.iter().enumerate() {
        // A `system` message (`SystemMessageParam`, text only) between
        // turns after the first; it is not a turn for alternation.
        if i > 0 && msg.get("role").and_then(Value::as_str) == Some("system") {
            let mut t = String::new();
            match msg.get("content") {
                Some(Value::String(s)) => t.push_str(s),
                Some(Value::Array(blocks))
                    if blocks
                        .iter()
                        .all(|b| b.get("type").and_then(Value::as_str) == Some("text")) =>
                {
                    for b in blocks {
                        block_text(b, &mut t);
                    }
                }
                _ => {
                    return (
                        bad(
                            ctx,
                            &format!("messages.{i}.content: a system message holds text only"),
                        ),
                        m,
                    )
                }
            }
            prompt.push_str(&t);
            if let Some(bl) = cblocks.as_mut() {
                bl.block(msg, prompt.len());
            }
            continue;
        }
        let role = msg.get("role").and_then(Value::as_str).unwrap_or("");
        if i == 0 && role == "system" {
            return (
                bad(ctx, "messages: Unexpected role \"system\". The Messages API accepts a top-level `system` parameter, not \"system\" as an input message role."),
                m,
            );
        }
        if i == 0 && role != "user" {
            return (
                bad(ctx, "messages: first message must use the \"user\" role"),
                m,
            );
        }
        if role == prev_role {
            return (
                bad(ctx, &format!("messages: roles must alternate between \"user\" and \"assistant\", but found multiple \"{role}\" roles in a row")),
                m,
            );
        }
        let mut t = String::new();
        let mut tool_uses: Vec<String> = Vec::new();
        let mut answered: Vec<String> = Vec::new();
        if let (Some(bl), Some(r)) = (cblocks.as_mut(), msg.get("role")) {
            bl.feed(r);
        }
        match msg.get("content") {
            Some(v @ Value::String(s)) => {
                if s.is_empty() && i + 1 < msgs.len() {
                    return (
                        bad(ctx, "messages: text content blocks must be non-empty"),
                        m,
                    );
                }
                if role == "user" {
                    script.user_text(s);
                }
                t.push_str(s);
                if let Some(bl) = cblocks.as_mut() {
                    bl.block(v, prompt.len() + t.len());
                }
            }
            Some(Value::Array(blocks)) => {
                if blocks.is_empty() && i + 1 < msgs.len() {
                    return (bad(ctx, &format!("messages.{i}: all messages must have non-empty content except for the optional final assistant message")), m);
                }
                for (j, b) in blocks.iter().enumerate() {
                    let ty = b.get("type").and_then(Value::as_str).unwrap_or("");
                    match ty {
                        "text" if b.get("text").and_then(Value::as_str) == Some("") => {
                            return (
                                bad(ctx, "messages: text content blocks must be non-empty"),
                                m,
                            );
                        }
                        "tool_use" => {
                            if role != "assistant" {
                                return (bad(ctx, &format!("messages.{i}.content.{j}: tool_use blocks can only be in assistant messages")), m);
                            }
                            let id = b.get("id").and_then(Value::as_str).unwrap_or("");
                            tool_uses.push(id.to_string());
                        }
                        "tool_result" => {
                            if role != "user" {
                                return (bad(ctx, &format!("messages.{i}.content.{j}: tool_result blocks can only be in user messages")), m);
                            }
                            let id = b.get("tool_use_id").and_then(Value::as_str).unwrap_or("");
                            if !prev_tool_uses.iter().any(|u| u == id) {
                                return (
                                    bad(ctx, &format!("messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.")),
                                    m,
                                );
                            }
                            answered.push(id.to_string());
                            if script.active() {
                                let mut r = String::new();
                                if let Some(c) = b.get("content") {
                                    block_text(&json!({"content": c}), &mut r);
                                }
                                script.tool_result(r);
                            }
                        }
                        "text" if role == "user" => {
                            script.user_text(b.get("text").and_then(Value::as_str).unwrap_or(""));
                        }
                        _ => {}
                    }
                    block_text(b, &mut t);
                    if let Some(bl) = cblocks.as_mut() {
                        bl.block(b, prompt.len() + t.len());
                        if let Some(ms) = ttl(b) {
                            bl.breakpoint(ms);
                        }
                    }
                }
            }
            _ => {}
        }
        let missing: Vec<&String> = prev_tool_uses
            .iter()
            .filter(|u| !answered.contains(u))
            .collect();
        if !missing.is_empty() {
            let ids: Vec<&str> = missing.iter().map(|s| s.as_str()).collect();
            return (
                bad(ctx, &format!("messages.{}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i - 1, ids.join(", "))),
                m,
            );
        }
        if role == "user" {
            echo = t.clone();
        }
        prompt.push_str(&t);
        prev_tool_uses = tool_uses;
        prev_role = if role == "user" { "user" } else { "assistant" };
    }
    // Tools the answers may call: the client's own (`custom`). Anthropic's
    // tools are run by the service and never answered here.
    let tools: Vec<(String, &Value)> = req
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|t| matches!(t.get("type").and_then(Value::as_str), None | Some("custom")))
        .filter_map(|t| Some((t.get("name")?.as_str()?.to_string(), t.get("input_schema")?)))
        .collect();
    let (mut forced, mut any) = (None, false);
    if let Some(tc) = req.get("tool_choice").filter(|v| !v.is_null()) {
        match tc.get("type").and_then(Value::as_str) {
            Some("any") => {
                if tools.is_empty() {
                    return (
                        bad(ctx, "tool_choice: `tool_choice` requires `tools` to be set"),
                        m,
                    );
                }
                any = true;
            }
            Some("tool") => {
                let n = tc.get("name").and_then(Value::as_str).unwrap_or("");
                if !tools.iter().any(|t| t.0 == n) {
                    return (
                        bad(ctx, &format!("tool_choice: tool '{n}' not found in tools")),
                        m,
                    );
                }
                forced = Some(n.to_string());
            }
            _ => {}
        }
    }
    if count {
        let n = text::tokens_for_chars(prompt.chars().count());
        let hdrs = [("request-id", format!("req_{}", ctx.request_id))];
        return (ctx.json_ok(&json!({"input_tokens": n}), &hdrs).await, m);
    }
    let prompt_chars = prompt.chars().count();
    // Top-level `cache_control`: a breakpoint on the last block.
    if let (Some(bl), Some(ms)) = (cblocks.as_mut(), ttl(&req)) {
        bl.breakpoint(ms);
    }
    let used = match (kc, &cblocks) {
        (Some(kc), Some(bl)) if bl.has_breakpoint() && kc.applies(prompt_chars) => {
            kc.apply(&bl.marks(&prompt), http::now_ms())
        }
        _ => CacheUse::default(),
    };
    let g = GenInput {
        echo,
        prompt_chars,
        tools,
        forced_tool: forced,
        any_tool: any,
        max_tokens: Some(max_tokens),
        tool_id_prefix: "toolu_",
        script,
    };
    let p = match plan(ctx, g) {
        Ok(p) => p,
        Err(e) => return (bad(ctx, &e), m),
    };
    let id = format!("msg_{}", ctx.request_id);
    // Input beyond the cache's reads and writes.
    let input = p.prompt_tokens.saturating_sub(used.read + used.write);
    let stop = p.stop_reason();
    let hdrs = [("request-id", format!("req_{}", ctx.request_id))];
    let searches = web_searches(ctx, &req);
    let searched = json!({"web_search_requests": searches.len() / 2});
    if !stream {
        let mut content = searches;
        content.push(match &p.output {
            Output::Text(t) => json!({"type": "text", "text": t}),
            Output::Tool { id, name, args } => {
                json!({"type": "tool_use", "id": id, "name": name, "input": args})
            }
        });
        let v = json!({
            "id": id, "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop, "stop_sequence": null,
            "usage": {"input_tokens": input, "output_tokens": p.completion_tokens,
                      "cache_creation_input_tokens": used.write, "cache_read_input_tokens": used.read,
                      "server_tool_use": searched},
        });
        return (ctx.json_ok(&v, &hdrs).await, m);
    }
    let start = render::sse_event(
        "message_start",
        &json!({
            "type": "message_start",
            "message": {"id": id, "type": "message", "role": "assistant", "model": model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": input, "output_tokens": 1,
                          "cache_creation_input_tokens": used.write, "cache_read_input_tokens": used.read}},
        }),
    );
    let (start_block, content, delta) = match p.output {
        Output::Text(t) => (
            json!({"type": "text", "text": ""}),
            t,
            json!({"type": "text_delta", "text": render::PIECE}),
        ),
        Output::Tool { id, name, args } => (
            json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
            args.to_string(),
            json!({"type": "input_json_delta", "partial_json": render::PIECE}),
        ),
    };
    let at = searches.len();
    let mut head = vec![start];
    for (i, b) in searches.into_iter().enumerate() {
        head.push(render::sse_event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": i, "content_block": b}),
        ));
        head.push(render::sse_event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": i}),
        ));
    }
    head.push(render::sse_event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": at, "content_block": start_block}),
    ));
    head.push(render::sse_event("ping", &json!({"type": "ping"})));
    let tpl = render::Template::new(&render::sse_event(
        "content_block_delta",
        &json!({"type": "content_block_delta", "index": at, "delta": delta}),
    ));
    let tail = vec![
        render::sse_event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": at}),
        ),
        render::sse_event(
            "message_delta",
            &json!({
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": null},
                "usage": {"output_tokens": p.completion_tokens, "server_tool_use": searched},
            }),
        ),
        render::sse_event("message_stop", &json!({"type": "message_stop"})),
    ];
    (
        ctx.stream(
            "text/event-stream; charset=utf-8",
            head,
            content,
            Box::new(move |_, piece, _| tpl.render(piece)),
            tail,
            &hdrs,
            render::sse_event("error", &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})),
        ),
        m,
    )
}
