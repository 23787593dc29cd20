//! The OpenAI Responses front door (`POST /v1/responses`).
//!
//! Two ways to a provider, chosen by [`translator`]:
//!
//! - **Native** ([`Native`]): OpenAI, and Azure OpenAI's v1 API, speak the
//!   Responses API themselves. The body passes through with the upstream
//!   model (or Azure deployment) substituted and `store: false`; answers
//!   and stream events pass through untouched, only read for usage
//!   (`response.completed` / `response.incomplete` / `response.failed`).
//!   A provider of kind `openai` with `"responses_api": false` (a
//!   chat-only compatible server) takes the other way.
//! - **Through chat** ([`ViaChat`]): every other provider. The Responses
//!   request becomes an OpenAI chat request ([`to_chat`]), the shared
//!   representation every `openai_<x>` translator reads (Anthropic, Gemini
//!   and Bedrock through `chat_ir`); that translator's OpenAI answer becomes
//!   a `response` object ([`from_chat`]) and its `chat.completion.chunk`
//!   stream becomes the Responses event sequence ([`ChatToResponses`]).
//!
//! Tollgate is stateless: `previous_response_id`, `store: true`,
//! `conversation`, `background: true`, stored prompts and item references
//! are refused with a 400 that says so, and native requests are sent with
//! `store: false`, so no provider keeps a tenant's conversation under the
//! gateway's account.
//!
//! Built-in tools (web search, file search, code interpreter, MCP, …) are
//! never refused: OpenAI and Azure run them, so they pass through with the
//! rest of the body; a translated request drops them and names them in
//! `x-tollgate-dropped`, except web search where the provider config enables
//! the target's own (Anthropic's server-side web search tool, Gemini's
//! Google Search grounding: [`super::add_web_search`]). A `max_output_tokens`
//! above the target model's limit is lowered to it and named in
//! `x-tollgate-lowered`.

use serde_json::{json, Map, Value};

use super::openai_openai::error_message;
use super::{
    add_web_search, for_kind, lower_output_limit, stream_flag, upstream_error, Endpoint,
    RequestCtx, ResponseCtx, StreamTranslator, Translated, Translator, UpstreamRequest, Usage,
};
use crate::codec::sse::{Event, SseParser};
use crate::config::{Api, Key, Kind, Provider};
use crate::error::{echo, ApiError, INVALID_REQUEST, SERVER};

/// Tool types that run inside OpenAI's service (billed per call, or reading
/// state kept at the provider): passed through to OpenAI and Azure, dropped
/// and named on translated routes (web search mapped where it can be).
const BUILT_IN_TOOLS: [&str; 13] = [
    "web_search",
    "web_search_preview",
    "web_search_2025_08_26",
    "web_search_preview_2025_03_11",
    "file_search",
    "computer",
    "computer_use_preview",
    "code_interpreter",
    "image_generation",
    "mcp",
    "tool_search",
    "programmatic_tool_calling",
    "container",
];

/// Tool types the client runs that have no chat counterpart: dropped and
/// named on translated routes.
const CLIENT_ONLY_TOOLS: [&str; 4] = ["custom", "local_shell", "shell", "apply_patch"];

/// Request fields OpenAI accepts that a translated request has no place
/// for: dropped and named when set.
const DROPPED_FIELDS: [&str; 4] = [
    "max_tool_calls",
    "top_logprobs",
    "prompt_cache_retention",
    "context_management",
];

/// Input item types of built-in and client-only tool calls (and their
/// outputs) that a translated request leaves out.
const BUILT_IN_CALL_ITEMS: &[&str] = &[
    "web_search_call",
    "file_search_call",
    "computer_call",
    "computer_call_output",
    "code_interpreter_call",
    "image_generation_call",
    "local_shell_call",
    "local_shell_call_output",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "custom_tool_call",
    "custom_tool_call_output",
];

/// Request fields read (or knowingly ignored) when translating through
/// chat; anything else is refused by name.
const VIA_CHAT_FIELDS: [&str; 24] = [
    "model",
    "input",
    "instructions",
    "stream",
    "stream_options",
    "max_output_tokens",
    "temperature",
    "top_p",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "text",
    "reasoning",
    "metadata",
    "user",
    "store",
    "include",
    "prompt_cache_key",
    "safety_identifier",
    "service_tier",
    "truncation",
    "client_metadata",
    "previous_response_id",
    "background",
];

/// The translator for a request to `provider` on `endpoint`: the
/// provider's own for the chat and embeddings front doors.
pub fn translator(provider: &Provider, endpoint: Endpoint) -> &'static dyn Translator {
    if endpoint != Endpoint::Responses {
        return for_kind(provider.kind());
    }
    match provider.kind() {
        Kind::Openai if provider.responses_api => &NATIVE_OPENAI,
        Kind::Azure => &NATIVE_AZURE,
        Kind::Openai => &VIA_OPENAI,
        Kind::Anthropic => &VIA_ANTHROPIC,
        Kind::Gemini => &VIA_GEMINI,
        Kind::Bedrock => &VIA_BEDROCK,
    }
}

static NATIVE_OPENAI: Native = Native(Kind::Openai);
static NATIVE_AZURE: Native = Native(Kind::Azure);
static VIA_OPENAI: ViaChat = ViaChat(Kind::Openai);
static VIA_ANTHROPIC: ViaChat = ViaChat(Kind::Anthropic);
static VIA_GEMINI: ViaChat = ViaChat(Kind::Gemini);
static VIA_BEDROCK: ViaChat = ViaChat(Kind::Bedrock);

fn stateless(param: &str, what: &str) -> ApiError {
    ApiError {
        param: Some(param.to_string()),
        ..ApiError::new(
            400,
            INVALID_REQUEST,
            "unsupported_parameter",
            format!(
                "{what} is not supported: the gateway is stateless and stores no responses. Send the whole conversation in 'input' with 'store': false"
            ),
        )
    }
}

/// 400 for a required parameter that is absent.
fn missing(param: &str) -> ApiError {
    ApiError::bad_param(param, format!("Missing required parameter: '{param}'"))
}

fn is_set(v: Option<&Value>) -> bool {
    !matches!(v, None | Some(Value::Null))
}

/// Checks shared by both ways: a JSON object with `input`, nothing that
/// needs stored state, `tools` an array of typed tools.
fn check_common(body: &Value) -> Result<&Map<String, Value>, ApiError> {
    let Some(obj) = body.as_object() else {
        return Err(ApiError::invalid_json("expected an object"));
    };
    if is_set(obj.get("previous_response_id")) {
        return Err(stateless("previous_response_id", "'previous_response_id'"));
    }
    match obj.get("store") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => return Err(stateless("store", "'store': true")),
        Some(_) => {
            return Err(ApiError::bad_param(
                "store",
                "Invalid type for 'store': expected a boolean",
            ))
        }
    }
    if is_set(obj.get("conversation")) {
        return Err(stateless("conversation", "'conversation'"));
    }
    if is_set(obj.get("prompt")) {
        return Err(stateless("prompt", "A stored 'prompt'"));
    }
    match obj.get("background") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        _ => return Err(stateless("background", "'background': true")),
    }
    match obj.get("input") {
        Some(Value::String(_)) => {}
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                if item.get("type").and_then(Value::as_str) == Some("item_reference") {
                    return Err(stateless(&format!("input[{i}]"), "An 'item_reference'"));
                }
            }
        }
        None | Some(Value::Null) => return Err(missing("input")),
        Some(_) => {
            return Err(ApiError::bad_param(
                "input",
                "Invalid type for 'input': expected a string or an array of items",
            ))
        }
    }
    stream_flag(body)?;
    check_tools(obj)?;
    Ok(obj)
}

/// `tools`, when given, is an array of tools that each name their type.
fn check_tools(obj: &Map<String, Value>) -> Result<(), ApiError> {
    let tools = match obj.get("tools") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(ApiError::bad_param(
                "tools",
                "Invalid type for 'tools': expected an array",
            ))
        }
    };
    for (i, t) in tools.iter().enumerate() {
        if t.get("type").and_then(Value::as_str).is_none() {
            return Err(missing(&format!("tools[{i}].type")));
        }
    }
    Ok(())
}

/// OpenAI and Azure: the Responses API passes through.
pub struct Native(Kind);

impl Translator for Native {
    fn kind(&self) -> Kind {
        self.0
    }

    fn request(&self, ctx: &RequestCtx<'_>, body: &Value) -> Result<UpstreamRequest, ApiError> {
        check_common(body)?;
        let stream = stream_flag(body)?;
        let (model, path) = match &ctx.provider.api {
            Api::Azure { deployments, .. } => (
                deployments
                    .get(ctx.model)
                    .map(String::as_str)
                    .unwrap_or(ctx.model),
                // Azure OpenAI's v1 API: no api-version, the deployment in `model`.
                format!("{}/v1/responses", ctx.provider.base_path),
            ),
            _ => (ctx.model, format!("{}/responses", ctx.provider.base_path)),
        };
        let mut body = body.clone();
        if let Some(o) = body.as_object_mut() {
            o.insert("model".into(), Value::String(model.to_string()));
            o.insert("store".into(), Value::Bool(false));
        }
        let bytes =
            serde_json::to_vec(&body).map_err(|e| ApiError::invalid_json(&e.to_string()))?;
        Ok(UpstreamRequest {
            path,
            body: bytes,
            stream,
            ..UpstreamRequest::default()
        })
    }

    fn auth_headers(
        &self,
        provider: &Provider,
        key: &Key,
        req: &UpstreamRequest,
        now_ms: u64,
    ) -> Result<Vec<(&'static str, String)>, ApiError> {
        for_kind(self.0).auth_headers(provider, key, req, now_ms)
    }

    fn passthrough(&self) -> bool {
        true
    }

    fn response(&self, _ctx: &ResponseCtx, body: &[u8]) -> Result<Translated, ApiError> {
        let usage = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| response_usage(&v));
        Ok(Translated { body: None, usage })
    }

    fn error(&self, status: u16, body: &[u8]) -> ApiError {
        upstream_error(status, error_message(body))
    }

    fn stream(&self, _ctx: &ResponseCtx) -> Box<dyn StreamTranslator> {
        Box::new(NativeStream::default())
    }
}

/// A Responses response's usage, with the web searches its output items
/// say the provider ran (each priced per call).
fn response_usage(response: &Value) -> Option<Usage> {
    let mut u = parse_usage(response.get("usage")?)?;
    u.web_searches = response
        .get("output")
        .and_then(Value::as_array)
        .map_or(0, |items| {
            items
                .iter()
                .filter(|i| i.get("type").and_then(Value::as_str) == Some("web_search_call"))
                .count() as u64
        });
    Some(u)
}

/// A Responses `usage` object → [`Usage`].
pub fn parse_usage(u: &Value) -> Option<Usage> {
    let o = u.as_object()?;
    Some(Usage {
        prompt_tokens: o.get("input_tokens")?.as_u64()?,
        completion_tokens: o.get("output_tokens").and_then(Value::as_u64).unwrap_or(0),
        cached_tokens: o
            .get("input_tokens_details")
            .and_then(|d| d.get("cached_tokens"))
            .and_then(Value::as_u64)
            .unwrap_or(0),
        cache_write_tokens: 0,
        web_searches: 0,
    })
}

/// A native Responses stream: passed through byte for byte; its final
/// lifecycle event gives the usage.
#[derive(Default)]
pub struct NativeStream {
    parser: SseParser,
    usage: Option<Usage>,
    first_token: bool,
}

impl NativeStream {
    fn on_event(&mut self, ev: &Event) {
        let ty = if ev.event.is_empty() {
            // No `event:` line: the type is in the data.
            event_type(&ev.data)
        } else {
            ev.event.as_str()
        };
        match ty {
            "response.output_text.delta"
            | "response.function_call_arguments.delta"
            | "response.refusal.delta"
            | "response.custom_tool_call_input.delta" => self.first_token = true,
            "response.completed" | "response.incomplete" | "response.failed" => {
                if let Some(u) = serde_json::from_str::<Value>(&ev.data)
                    .ok()
                    .and_then(|v| v.get("response").and_then(response_usage))
                {
                    self.usage = Some(u);
                }
            }
            _ => {}
        }
    }
}

/// The `"type"` of an event's data, found without parsing the whole event.
fn event_type(data: &str) -> &str {
    let Some(at) = data.find("\"type\":\"") else {
        return "";
    };
    let rest = data.get(at + 8..).unwrap_or("");
    rest.split('"').next().unwrap_or("")
}

impl StreamTranslator for NativeStream {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(chunk);
        let mut parser = std::mem::take(&mut self.parser);
        // A malformed stream still reaches the client as it came.
        let _ = parser.feed(chunk, &mut |e| self.on_event(&e));
        self.parser = parser;
    }

    fn finish(&mut self, _out: &mut Vec<u8>) {
        let mut parser = std::mem::take(&mut self.parser);
        let _ = parser.finish(&mut |e| self.on_event(&e));
        self.parser = parser;
    }

    fn usage(&self) -> Option<Usage> {
        self.usage
    }

    fn first_token_seen(&self) -> bool {
        self.first_token
    }
}

/// Every other provider: through the OpenAI chat translator of its kind.
pub struct ViaChat(Kind);

impl ViaChat {
    fn inner(&self) -> &'static dyn Translator {
        for_kind(self.0)
    }
}

fn chat_ctx(ctx: &ResponseCtx) -> ResponseCtx {
    ResponseCtx {
        endpoint: Endpoint::Chat,
        ..ctx.clone()
    }
}

impl Translator for ViaChat {
    fn kind(&self) -> Kind {
        self.0
    }

    fn request(&self, ctx: &RequestCtx<'_>, body: &Value) -> Result<UpstreamRequest, ApiError> {
        let mut chat = chat_request(body, &ctx.provider.name, self.0)?;
        let mut lowered = Vec::new();
        lower_output_limit(&mut chat.body, ctx.model_cfg, &mut lowered);
        let chat_ctx = RequestCtx {
            endpoint: Endpoint::Chat,
            ..*ctx
        };
        let mut up = self.inner().request(&chat_ctx, &chat.body)?;
        if let Some(search) = &chat.web_search {
            if !add_web_search(ctx.provider, &mut up, search)? {
                chat.dropped.push("web_search");
            }
        }
        for d in chat.dropped {
            if !up.dropped.contains(&d) {
                up.dropped.push(d);
            }
        }
        up.lowered.extend(lowered);
        Ok(up)
    }

    /// `to_chat` moves `instructions`, `input`, message `content`, parts'
    /// `text` and call `output` into chat messages, or joins them; it reads
    /// none of them.
    fn keeps_texts_whole(&self) -> bool {
        self.inner().keeps_texts_whole()
    }

    fn auth_headers(
        &self,
        provider: &Provider,
        key: &Key,
        req: &UpstreamRequest,
        now_ms: u64,
    ) -> Result<Vec<(&'static str, String)>, ApiError> {
        self.inner().auth_headers(provider, key, req, now_ms)
    }

    fn is_stream(&self, content_type: &str) -> bool {
        self.inner().is_stream(content_type)
    }

    fn response(&self, ctx: &ResponseCtx, body: &[u8]) -> Result<Translated, ApiError> {
        let t = self.inner().response(&chat_ctx(ctx), body)?;
        let chat = t.body.as_deref().unwrap_or(body);
        let (out, usage) = from_chat(chat, ctx)?;
        Ok(Translated {
            body: Some(out),
            usage: t.usage.or(usage),
        })
    }

    fn error(&self, status: u16, body: &[u8]) -> ApiError {
        self.inner().error(status, body)
    }

    fn stream(&self, ctx: &ResponseCtx) -> Box<dyn StreamTranslator> {
        Box::new(ChatToResponses::new(
            self.inner().stream(&chat_ctx(ctx)),
            ctx,
        ))
    }
}

fn unsupported(param: &str, provider: &str, what: &str) -> ApiError {
    ApiError {
        message: format!("{what} is not supported by provider '{provider}'"),
        ..ApiError::unsupported_param(param, provider)
    }
}

/// A Responses request → the OpenAI chat request with the same meaning.
pub fn to_chat(body: &Value, provider: &str, kind: Kind) -> Result<Value, ApiError> {
    Ok(chat_request(body, provider, kind)?.body)
}

/// [`to_chat`]'s chat request, with what it could not carry.
pub struct ChatRequest {
    pub body: Value,
    /// Request fields, tool types and input items left out (named in
    /// `x-tollgate-dropped`).
    pub dropped: Vec<&'static str>,
    /// The request's web search tool (its options), for the target's own
    /// search where it has one.
    pub web_search: Option<Value>,
}

/// A Responses request → the chat request and what it left out.
pub fn chat_request(body: &Value, provider: &str, kind: Kind) -> Result<ChatRequest, ApiError> {
    let obj = check_common(body)?;
    let mut dropped: Vec<&'static str> = Vec::new();
    for (k, v) in obj {
        if v.is_null() || VIA_CHAT_FIELDS.contains(&k.as_str()) {
            continue;
        }
        match DROPPED_FIELDS.iter().find(|f| **f == k) {
            Some(f) => note(&mut dropped, f),
            None => return Err(ApiError::unsupported_param(k, provider)),
        }
    }
    let mut chat = Map::new();
    chat.insert(
        "model".into(),
        obj.get("model").cloned().unwrap_or(Value::Null),
    );
    chat.insert(
        "messages".into(),
        Value::Array(chat_messages(obj, provider, &mut dropped)?),
    );
    if stream_flag(body)? {
        chat.insert("stream".into(), Value::Bool(true));
        chat.insert("stream_options".into(), json!({"include_usage": true}));
    }
    for (from, to) in [
        ("max_output_tokens", "max_tokens"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("parallel_tool_calls", "parallel_tool_calls"),
        ("user", "user"),
    ] {
        if let Some(v) = obj.get(from).filter(|v| !v.is_null()) {
            chat.insert(to.into(), v.clone());
        }
    }
    let mut web_search = None;
    if let Some(Value::Array(tools)) = obj.get("tools") {
        let out = chat_tools(tools, provider, &mut dropped, &mut web_search)?;
        if !out.is_empty() {
            chat.insert("tools".into(), Value::Array(out));
        }
    }
    if let Some(choice) = chat_tool_choice(obj.get("tool_choice"), &mut dropped)? {
        chat.insert("tool_choice".into(), choice);
    }
    if let Some(format) = obj.get("text").and_then(|t| t.get("format")) {
        if let Some(rf) = response_format(format)? {
            chat.insert("response_format".into(), rf);
        }
    }
    // Reasoning effort: OpenAI-compatible chat servers take it as
    // `reasoning_effort`; the other translations have no such knob.
    if let Some(effort) = obj
        .get("reasoning")
        .and_then(|r| r.get("effort"))
        .filter(|e| e.is_string())
    {
        if matches!(kind, Kind::Openai | Kind::Gemini) {
            // Gemini maps it to a thinking budget on models that think, and
            // names it dropped on the others.
            chat.insert("reasoning_effort".into(), effort.clone());
        } else {
            note(&mut dropped, "reasoning");
        }
    }
    Ok(ChatRequest {
        body: Value::Object(chat),
        dropped,
        web_search,
    })
}

fn note(dropped: &mut Vec<&'static str>, what: &'static str) {
    if !dropped.contains(&what) {
        dropped.push(what);
    }
}

/// `instructions` and `input` as chat messages.
fn chat_messages(
    obj: &Map<String, Value>,
    provider: &str,
    dropped: &mut Vec<&'static str>,
) -> Result<Vec<Value>, ApiError> {
    let mut messages: Vec<Value> = Vec::new();
    match obj.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => messages.push(json!({"role": "system", "content": s})),
        Some(_) => {
            return Err(ApiError::bad_param(
                "instructions",
                "Invalid type for 'instructions': expected a string",
            ))
        }
    }
    match obj.get("input") {
        Some(Value::String(s)) => messages.push(json!({"role": "user", "content": s})),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                input_item(&mut messages, item, i, provider, dropped)?;
            }
        }
        _ => {}
    }
    Ok(messages)
}

/// The Responses `tools` as chat tools: functions, and the functions of a
/// namespace one by one.
fn chat_tools(
    tools: &[Value],
    provider: &str,
    dropped: &mut Vec<&'static str>,
    web_search: &mut Option<Value>,
) -> Result<Vec<Value>, ApiError> {
    let mut out = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        let at = format!("tools[{i}]");
        match t.get("type").and_then(Value::as_str).unwrap_or("") {
            "function" => out.push(chat_tool(t, &at)?),
            // A group of functions: offered one by one.
            "namespace" => {
                let Some(Value::Array(inner)) = t.get("tools") else {
                    return Err(missing(&format!("{at}.tools")));
                };
                for (j, f) in inner.iter().enumerate() {
                    let at = format!("{at}.tools[{j}]");
                    if f.get("type").and_then(Value::as_str) != Some("function") {
                        return Err(unsupported(
                            &format!("{at}.type"),
                            provider,
                            "A tool other than a function inside a namespace",
                        ));
                    }
                    out.push(chat_tool(f, &at)?);
                }
            }
            // The target's own search where the provider has one
            // (decided by the caller), else dropped.
            ty if ty.starts_with("web_search") => *web_search = Some(t.clone()),
            ty => note(dropped, tool_name(ty)),
        }
    }
    Ok(out)
}

/// The static name of a tool type a translated request leaves out.
fn tool_name(ty: &str) -> &'static str {
    BUILT_IN_TOOLS
        .iter()
        .chain(CLIENT_ONLY_TOOLS.iter())
        .find(|t| **t == ty)
        .copied()
        .unwrap_or("tools")
}

/// The Responses `tool_choice` as the chat one (`None`: not given). A
/// choice of a tool the translation left out (a built-in, a custom tool,
/// `allowed_tools`) is dropped, so the model chooses.
fn chat_tool_choice(
    choice: Option<&Value>,
    dropped: &mut Vec<&'static str>,
) -> Result<Option<Value>, ApiError> {
    match choice {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(Value::String(s.clone()))),
        Some(Value::Object(c)) if c.get("type").and_then(Value::as_str) == Some("function") => {
            let Some(name) = c.get("name").and_then(Value::as_str) else {
                return Err(missing("tool_choice.name"));
            };
            Ok(Some(
                json!({"type": "function", "function": {"name": name}}),
            ))
        }
        Some(_) => {
            note(dropped, "tool_choice");
            Ok(None)
        }
    }
}

/// `text.format` as the chat `response_format` (`None` for text).
fn response_format(format: &Value) -> Result<Option<Value>, ApiError> {
    match format.get("type").and_then(Value::as_str) {
        None | Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "json_object"}))),
        Some("json_schema") => {
            let mut schema = Map::new();
            for k in ["name", "schema", "strict", "description"] {
                if let Some(v) = format.get(k).filter(|v| !v.is_null()) {
                    schema.insert(k.into(), v.clone());
                }
            }
            Ok(Some(json!({"type": "json_schema", "json_schema": schema})))
        }
        Some(_) => Err(ApiError::bad_param(
            "text.format.type",
            "Invalid value for 'text.format.type': expected text, json_object or json_schema",
        )),
    }
}

fn chat_tool(t: &Value, at: &str) -> Result<Value, ApiError> {
    let Some(name) = t.get("name").and_then(Value::as_str) else {
        return Err(missing(&format!("{at}.name")));
    };
    let mut f = Map::new();
    f.insert("name".into(), Value::String(name.to_string()));
    if let Some(d) = t.get("description").filter(|v| !v.is_null()) {
        f.insert("description".into(), d.clone());
    }
    let params = t
        .get("parameters")
        .filter(|v| !v.is_null())
        .cloned()
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    f.insert("parameters".into(), params);
    Ok(json!({"type": "function", "function": f}))
}

/// Text of an item's `content` / `output`: a string or an array of text parts.
fn text_of(v: &Value, at: &str) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut text = String::new();
            for (j, p) in parts.iter().enumerate() {
                match p.get("type").and_then(Value::as_str) {
                    Some("input_text" | "output_text" | "text") => {
                        text.push_str(p.get("text").and_then(Value::as_str).unwrap_or(""));
                    }
                    Some("refusal") => {
                        text.push_str(p.get("refusal").and_then(Value::as_str).unwrap_or(""));
                    }
                    _ => {
                        return Err(ApiError::bad_param(
                            &format!("{at}[{j}].type"),
                            format!(
                                "Invalid value for '{at}[{j}].type': expected a text part here"
                            ),
                        ))
                    }
                }
            }
            Ok(text)
        }
        _ => Err(ApiError::bad_param(
            at,
            format!("Invalid type for '{at}': expected a string or an array of parts"),
        )),
    }
}

/// A user or system message's content → chat content (text and images).
fn chat_content(v: &Value, at: &str, provider: &str) -> Result<Value, ApiError> {
    let Value::Array(parts) = v else {
        return Ok(Value::String(text_of(v, at)?));
    };
    let mut out = Vec::with_capacity(parts.len());
    for (j, p) in parts.iter().enumerate() {
        let here = format!("{at}[{j}]");
        match p.get("type").and_then(Value::as_str) {
            Some("input_text" | "output_text" | "text") => {
                let text = p
                    .get("text")
                    .and_then(Value::as_str)
                    .ok_or_else(|| missing(&format!("{here}.text")))?;
                out.push(json!({"type": "text", "text": text}));
            }
            Some("input_image") => match p.get("image_url").and_then(Value::as_str) {
                Some(url) => {
                    let mut image = Map::new();
                    image.insert("url".into(), Value::String(url.to_string()));
                    if let Some(d) = p.get("detail").filter(|d| d.is_string()) {
                        image.insert("detail".into(), d.clone());
                    }
                    out.push(json!({"type": "image_url", "image_url": image}));
                }
                None => {
                    return Err(unsupported(
                        &format!("{here}.file_id"),
                        provider,
                        "An image given by 'file_id'",
                    ))
                }
            },
            Some(other) => {
                return Err(unsupported(
                    &format!("{here}.type"),
                    provider,
                    &format!("Content type '{}'", echo(other)),
                ))
            }
            None => return Err(missing(&format!("{here}.type"))),
        }
    }
    Ok(Value::Array(out))
}

/// Appends one input item as chat messages. Function calls join the
/// assistant message before them (one assistant turn with its calls).
fn input_item(
    messages: &mut Vec<Value>,
    item: &Value,
    i: usize,
    provider: &str,
    dropped: &mut Vec<&'static str>,
) -> Result<(), ApiError> {
    let at = format!("input[{i}]");
    let ty = match item.get("type").and_then(Value::as_str) {
        Some(t) => t,
        None if item.get("role").is_some() => "message",
        None => return Err(missing(&format!("{at}.type"))),
    };
    match ty {
        "message" => {
            let role = item.get("role").and_then(Value::as_str).unwrap_or("");
            let content = item.get("content").unwrap_or(&Value::Null);
            let at = format!("{at}.content");
            match role {
                "user" | "system" | "developer" => {
                    let role = if role == "user" { "user" } else { "system" };
                    messages.push(
                        json!({"role": role, "content": chat_content(content, &at, provider)?}),
                    );
                }
                "assistant" => {
                    messages.push(json!({"role": "assistant", "content": text_of(content, &at)?}))
                }
                _ => {
                    return Err(ApiError::bad_param(
                        &format!("input[{i}].role"),
                        format!("Invalid value for 'input[{i}].role': expected user, system, developer or assistant"),
                    ))
                }
            }
        }
        "function_call" => {
            let field = |k: &str| {
                item.get(k)
                    .and_then(Value::as_str)
                    .ok_or_else(|| missing(&format!("{at}.{k}")))
            };
            let call = json!({"id": field("call_id")?, "type": "function",
                              "function": {"name": field("name")?, "arguments": field("arguments")?}});
            let last_is_assistant = messages
                .last()
                .is_some_and(|m| m.get("role").and_then(Value::as_str) == Some("assistant"));
            if !last_is_assistant {
                messages.push(json!({"role": "assistant", "content": Value::Null}));
            }
            if let Some(Value::Object(m)) = messages.last_mut() {
                match m.get_mut("tool_calls") {
                    Some(Value::Array(calls)) => calls.push(call),
                    _ => {
                        m.insert("tool_calls".into(), Value::Array(vec![call]));
                    }
                }
            }
        }
        "function_call_output" => {
            let Some(call_id) = item.get("call_id").and_then(Value::as_str) else {
                return Err(missing(&format!("{at}.call_id")));
            };
            let output = text_of(
                item.get("output").unwrap_or(&Value::Null),
                &format!("{at}.output"),
            )?;
            messages.push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
        }
        // Reasoning passed back by the client belongs to the model that
        // wrote it; other providers cannot read it.
        "reasoning" => {}
        // Calls of built-in or client-only tools from earlier turns (served
        // by OpenAI): the target has no such tools, so their record is left
        // out.
        other if BUILT_IN_CALL_ITEMS.contains(&other) => note(dropped, "input_items"),
        other => {
            return Err(unsupported(
                &format!("{at}.type"),
                provider,
                &format!("Input item type '{}'", echo(other)),
            ))
        }
    }
    Ok(())
}

fn malformed() -> ApiError {
    ApiError::new(
        502,
        SERVER,
        "provider_error",
        "The provider returned a malformed response",
    )
}

/// The `usage` of a `response` object.
fn usage_value(u: &Usage, reasoning_tokens: u64) -> Value {
    json!({
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": u.total(),
    })
}

/// The `response` object's envelope (no output, no usage).
fn envelope(id: &str, created: u64, model: &str, status: &str) -> Map<String, Value> {
    let mut r = Map::new();
    for (k, v) in [
        ("id", json!(id)),
        ("object", json!("response")),
        ("created_at", json!(created)),
        ("status", json!(status)),
        ("background", json!(false)),
        ("error", Value::Null),
        ("incomplete_details", Value::Null),
        ("instructions", Value::Null),
        ("max_output_tokens", Value::Null),
        ("metadata", json!({})),
        ("model", json!(model)),
        ("output", json!([])),
        ("parallel_tool_calls", json!(true)),
        ("previous_response_id", Value::Null),
        ("reasoning", Value::Null),
        ("store", json!(false)),
        ("temperature", Value::Null),
        ("text", json!({"format": {"type": "text"}})),
        ("tool_choice", json!("auto")),
        ("tools", json!([])),
        ("top_p", Value::Null),
        ("truncation", json!("disabled")),
        ("usage", Value::Null),
    ] {
        r.insert(k.into(), v);
    }
    r
}

/// Final status and `incomplete_details` for a chat finish reason.
fn finish_status(finish: &str) -> (&'static str, Value) {
    match finish {
        "length" => ("incomplete", json!({"reason": "max_output_tokens"})),
        "content_filter" => ("incomplete", json!({"reason": "content_filter"})),
        _ => ("completed", Value::Null),
    }
}

fn message_item(id: &str, status: &str, text: Option<&str>, refusal: Option<&str>) -> Value {
    let mut content = Vec::new();
    if let Some(t) = text {
        content.push(text_part(t));
    }
    if let Some(r) = refusal {
        content.push(json!({"type": "refusal", "refusal": r}));
    }
    json!({"id": id, "type": "message", "status": status, "role": "assistant", "content": content})
}

fn text_part(t: &str) -> Value {
    json!({"type": "output_text", "text": t, "annotations": [], "logprobs": []})
}

fn call_item(call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({"id": format!("fc_{call_id}"), "type": "function_call", "status": status,
           "call_id": call_id, "name": name, "arguments": arguments})
}

fn reasoning_tokens(usage: &Value) -> u64 {
    usage
        .pointer("/completion_tokens_details/reasoning_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// An OpenAI `chat.completion` → a Responses `response` object.
pub fn from_chat(body: &[u8], ctx: &ResponseCtx) -> Result<(Vec<u8>, Option<Usage>), ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(|_| malformed())?;
    let choice = v.pointer("/choices/0").ok_or_else(malformed)?;
    let message = choice.get("message").ok_or_else(malformed)?;
    let chat_id = v.get("id").and_then(Value::as_str).unwrap_or("");
    let rid = response_id(chat_id, ctx.created);
    let model = v.get("model").and_then(Value::as_str).unwrap_or(&ctx.model);
    let finish = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .unwrap_or("stop");
    let (status, incomplete) = finish_status(finish);
    let mut output = Vec::new();
    let text = message
        .get("content")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty());
    let refusal = message.get("refusal").and_then(Value::as_str);
    if text.is_some() || refusal.is_some() {
        output.push(message_item(&format!("msg_{rid}"), status, text, refusal));
    }
    if let Some(Value::Array(calls)) = message.get("tool_calls") {
        for c in calls {
            let s = |p: &str| c.pointer(p).and_then(Value::as_str).unwrap_or("");
            output.push(call_item(
                s("/id"),
                s("/function/name"),
                s("/function/arguments"),
                "completed",
            ));
        }
    }
    let usage = v.get("usage").and_then(super::openai_openai::parse_usage);
    let mut r = envelope(&format!("resp_{rid}"), ctx.created, model, status);
    r.insert("incomplete_details".into(), incomplete);
    r.insert("output".into(), Value::Array(output));
    if let Some(u) = &usage {
        let rt = v.get("usage").map(reasoning_tokens).unwrap_or(0);
        r.insert("usage".into(), usage_value(u, rt));
    }
    let bytes = serde_json::to_vec(&Value::Object(r)).map_err(|_| malformed())?;
    Ok((bytes, usage))
}

/// A response id from the provider's answer id (or the time when it gave
/// none): letters, digits, `_` and `-` only.
fn response_id(chat_id: &str, created: u64) -> String {
    let id: String = chat_id
        .trim_start_matches("chatcmpl-")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .take(64)
        .collect();
    if id.is_empty() {
        format!("tg{created}")
    } else {
        id
    }
}

/// One function call being streamed.
struct Call {
    /// The chat stream's `tool_calls[].index`.
    index: u64,
    output_index: usize,
    call_id: String,
    name: String,
    arguments: String,
    done: bool,
}

/// The output items open in the stream: the message, or the calls (chat
/// streams may interleave the deltas of parallel calls).
enum Open {
    None,
    Message { output_index: usize },
    Calls,
}

/// An OpenAI chat chunk stream (what every chat translator writes) → the
/// Responses event sequence: `response.created`, `response.in_progress`,
/// per item `response.output_item.added` … deltas … `.done`, then
/// `response.completed` (or `response.incomplete`) with the whole output
/// and the usage; a failure is an `error` event and `response.failed`.
pub struct ChatToResponses {
    inner: Box<dyn StreamTranslator>,
    parser: SseParser,
    /// The inner translator's output, reused.
    buf: Vec<u8>,
    created: u64,
    model: String,
    rid: String,
    seq: u64,
    started: bool,
    done: bool,
    open: Open,
    /// Output items announced so far.
    items: usize,
    /// Finished output items, in order.
    output: Vec<Value>,
    text: String,
    refusal: String,
    calls: Vec<Call>,
    finish: Option<String>,
    usage: Option<(Usage, u64)>,
}

impl ChatToResponses {
    pub fn new(inner: Box<dyn StreamTranslator>, ctx: &ResponseCtx) -> ChatToResponses {
        ChatToResponses {
            inner,
            parser: SseParser::default(),
            buf: Vec::new(),
            created: ctx.created,
            model: ctx.model.clone(),
            rid: String::new(),
            seq: 0,
            started: false,
            done: false,
            open: Open::None,
            items: 0,
            output: Vec::new(),
            text: String::new(),
            refusal: String::new(),
            calls: Vec::new(),
            finish: None,
            usage: None,
        }
    }

    fn emit(&mut self, out: &mut Vec<u8>, ty: &str, mut v: Map<String, Value>) {
        v.insert("type".into(), Value::String(ty.to_string()));
        v.insert("sequence_number".into(), Value::from(self.seq));
        self.seq += 1;
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(ty.as_bytes());
        out.extend_from_slice(b"\ndata: ");
        let _ = serde_json::to_writer(&mut *out, &Value::Object(v));
        out.extend_from_slice(b"\n\n");
    }

    fn response(&self, status: &str) -> Value {
        let mut r = envelope(
            &format!("resp_{}", self.rid),
            self.created,
            &self.model,
            status,
        );
        if status != "in_progress" {
            r.insert("output".into(), Value::Array(self.output.clone()));
        }
        Value::Object(r)
    }

    fn start(&mut self, out: &mut Vec<u8>, chat_id: &str, model: Option<&str>) {
        if self.started {
            return;
        }
        self.started = true;
        self.rid = response_id(chat_id, self.created);
        if let Some(m) = model.filter(|m| !m.is_empty()) {
            self.model = m.to_string();
        }
        for ty in ["response.created", "response.in_progress"] {
            let r = self.response("in_progress");
            self.emit(out, ty, obj([("response", r)]));
        }
    }

    fn item_id(&self) -> String {
        format!("msg_{}", self.rid)
    }

    fn open_message(&mut self, out: &mut Vec<u8>) -> usize {
        if let Open::Message { output_index } = self.open {
            return output_index;
        }
        self.close(out);
        let output_index = self.items;
        self.items += 1;
        let id = self.item_id();
        self.emit(
            out,
            "response.output_item.added",
            obj([
                ("output_index", json!(output_index)),
                ("item", message_item(&id, "in_progress", None, None)),
            ]),
        );
        self.open = Open::Message { output_index };
        output_index
    }

    fn text_delta(&mut self, out: &mut Vec<u8>, delta: &str) {
        let output_index = self.open_message(out);
        if self.text.is_empty() {
            self.emit(
                out,
                "response.content_part.added",
                obj([
                    ("item_id", json!(self.item_id())),
                    ("output_index", json!(output_index)),
                    ("content_index", json!(0)),
                    ("part", text_part("")),
                ]),
            );
        }
        self.text.push_str(delta);
        self.emit(
            out,
            "response.output_text.delta",
            obj([
                ("item_id", json!(self.item_id())),
                ("output_index", json!(output_index)),
                ("content_index", json!(0)),
                ("delta", json!(delta)),
                ("logprobs", json!([])),
            ]),
        );
    }

    fn call_delta(&mut self, out: &mut Vec<u8>, tc: &Value) {
        let index = tc.get("index").and_then(Value::as_u64).unwrap_or(0);
        let s = |p: &str| tc.pointer(p).and_then(Value::as_str).unwrap_or("");
        let open = if matches!(self.open, Open::Calls) {
            self.calls.iter().position(|c| c.index == index && !c.done)
        } else {
            None
        };
        let at = match open {
            Some(at) => at,
            None => self.open_call(out, index, s("/id"), s("/function/name")),
        };
        let args = s("/function/arguments");
        if args.is_empty() {
            return;
        }
        let Some(c) = self.calls.get_mut(at) else {
            return;
        };
        c.arguments.push_str(args);
        let (item_id, output_index) = (format!("fc_{}", c.call_id), c.output_index);
        self.emit(
            out,
            "response.function_call_arguments.delta",
            obj([
                ("item_id", json!(item_id)),
                ("output_index", json!(output_index)),
                ("delta", json!(args)),
            ]),
        );
    }

    /// Announces a new call (the message before it ends): its place in
    /// `calls`.
    fn open_call(&mut self, out: &mut Vec<u8>, index: u64, id: &str, name: &str) -> usize {
        if !matches!(self.open, Open::Calls) {
            self.close(out);
        }
        let output_index = self.items;
        self.items += 1;
        let call_id = match id {
            "" => format!("call_{}_{index}", self.rid),
            id => id.to_string(),
        };
        let name = name.to_string();
        self.emit(
            out,
            "response.output_item.added",
            obj([
                ("output_index", json!(output_index)),
                ("item", call_item(&call_id, &name, "", "in_progress")),
            ]),
        );
        self.calls.push(Call {
            index,
            output_index,
            call_id,
            name,
            arguments: String::new(),
            done: false,
        });
        self.open = Open::Calls;
        self.calls.len() - 1
    }

    /// Ends the open item: its `.done` events, and it joins the output.
    fn close(&mut self, out: &mut Vec<u8>) {
        match std::mem::replace(&mut self.open, Open::None) {
            Open::None => {}
            Open::Message { output_index } => {
                let id = self.item_id();
                let text = std::mem::take(&mut self.text);
                let refusal = std::mem::take(&mut self.refusal);
                if !text.is_empty() {
                    for (ty, k, v) in [
                        ("response.output_text.done", "text", json!(text)),
                        ("response.content_part.done", "part", text_part(&text)),
                    ] {
                        let mut m = obj([
                            ("item_id", json!(id)),
                            ("output_index", json!(output_index)),
                            ("content_index", json!(0)),
                            (k, v),
                        ]);
                        if k == "text" {
                            m.insert("logprobs".into(), json!([]));
                        }
                        self.emit(out, ty, m);
                    }
                }
                let item = message_item(
                    &id,
                    "completed",
                    Some(text.as_str()).filter(|t| !t.is_empty()),
                    Some(refusal.as_str()).filter(|r| !r.is_empty()),
                );
                self.item_done(out, output_index, item);
            }
            Open::Calls => {
                for at in 0..self.calls.len() {
                    self.close_call(out, at);
                }
            }
        }
    }

    /// A call's `.done` events, once.
    fn close_call(&mut self, out: &mut Vec<u8>, at: usize) {
        let Some(c) = self.calls.get_mut(at).filter(|c| !c.done) else {
            return;
        };
        c.done = true;
        let item = call_item(&c.call_id, &c.name, &c.arguments, "completed");
        let (item_id, output_index, name, arguments) = (
            format!("fc_{}", c.call_id),
            c.output_index,
            c.name.clone(),
            c.arguments.clone(),
        );
        self.emit(
            out,
            "response.function_call_arguments.done",
            obj([
                ("item_id", json!(item_id)),
                ("output_index", json!(output_index)),
                ("name", json!(name)),
                ("arguments", json!(arguments)),
            ]),
        );
        self.item_done(out, output_index, item);
    }

    /// `response.output_item.done`; the item joins the output.
    fn item_done(&mut self, out: &mut Vec<u8>, output_index: usize, item: Value) {
        self.emit(
            out,
            "response.output_item.done",
            obj([
                ("output_index", json!(output_index)),
                ("item", item.clone()),
            ]),
        );
        self.output.push(item);
    }

    fn complete(&mut self, out: &mut Vec<u8>) {
        self.start(out, "", None);
        self.close(out);
        let (status, incomplete) = finish_status(self.finish.as_deref().unwrap_or("stop"));
        let mut r = self.response(status);
        if let Some(o) = r.as_object_mut() {
            o.insert("incomplete_details".into(), incomplete);
            if let Some((u, rt)) = &self.usage {
                o.insert("usage".into(), usage_value(u, *rt));
            }
        }
        let ty = if status == "completed" {
            "response.completed"
        } else {
            "response.incomplete"
        };
        self.emit(out, ty, obj([("response", r)]));
        self.done = true;
    }

    fn fail(&mut self, out: &mut Vec<u8>, code: &str, message: &str) {
        self.start(out, "", None);
        self.emit(
            out,
            "error",
            obj([
                ("code", json!(code)),
                ("message", json!(message)),
                ("param", Value::Null),
            ]),
        );
        let mut r = self.response("failed");
        if let Some(o) = r.as_object_mut() {
            o.insert("error".into(), json!({"code": code, "message": message}));
        }
        self.emit(out, "response.failed", obj([("response", r)]));
        self.done = true;
    }

    fn on_chunk(&mut self, ev: Event, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        if ev.data == "[DONE]" {
            self.complete(out);
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(&ev.data) else {
            self.fail(out, "server_error", "Malformed stream from the provider");
            return;
        };
        if let Some(e) = v.get("error") {
            let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("");
            let code = match s("code") {
                "" => "server_error",
                c => c,
            };
            let message = match s("message") {
                "" => "The provider's stream failed",
                m => m,
            };
            let (code, message) = (code.to_string(), message.to_string());
            self.fail(out, &code, &message);
            return;
        }
        let id = v.get("id").and_then(Value::as_str).unwrap_or("");
        self.start(out, id, v.get("model").and_then(Value::as_str));
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            if let Some(parsed) = super::openai_openai::parse_usage(u) {
                self.usage = Some((parsed, reasoning_tokens(u)));
            }
        }
        let Some(choice) = v.pointer("/choices/0") else {
            return;
        };
        if let Some(delta) = choice.get("delta") {
            if let Some(t) = delta.get("content").and_then(Value::as_str) {
                if !t.is_empty() {
                    self.text_delta(out, t);
                }
            }
            if let Some(r) = delta.get("refusal").and_then(Value::as_str) {
                if !r.is_empty() {
                    self.open_message(out);
                    self.refusal.push_str(r);
                }
            }
            if let Some(Value::Array(calls)) = delta.get("tool_calls") {
                for tc in calls {
                    self.call_delta(out, tc);
                }
            }
        }
        if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(f.to_string());
        }
    }

    fn translate(&mut self, out: &mut Vec<u8>) {
        let chat = std::mem::take(&mut self.buf);
        let mut parser = std::mem::take(&mut self.parser);
        let r = parser.feed(&chat, &mut |e| self.on_chunk(e, out));
        self.parser = parser;
        if r.is_err() && !self.done {
            self.fail(out, "server_error", "Malformed stream from the provider");
        }
        self.buf = chat;
        self.buf.clear();
    }
}

fn obj<const N: usize>(pairs: [(&str, Value); N]) -> Map<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

impl StreamTranslator for ChatToResponses {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        let mut buf = std::mem::take(&mut self.buf);
        self.inner.feed(chunk, &mut buf);
        self.buf = buf;
        self.translate(out);
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        let mut buf = std::mem::take(&mut self.buf);
        self.inner.finish(&mut buf);
        self.buf = buf;
        self.translate(out);
        let mut parser = std::mem::take(&mut self.parser);
        let _ = parser.finish(&mut |e| self.on_chunk(e, out));
        self.parser = parser;
        if !self.done {
            self.fail(
                out,
                "server_error",
                "The provider's stream ended before the answer was complete",
            );
        }
    }

    fn usage(&self) -> Option<Usage> {
        self.inner.usage()
    }

    fn first_token_seen(&self) -> bool {
        self.inner.first_token_seen()
    }
}
