//! Translators between the client's OpenAI API and each provider family.
//!
//! One module per pair, named `<from>_<to>`, each implementing
//! [`Translator`]: request body → upstream request, upstream body → OpenAI
//! body plus token usage, upstream error → OpenAI error, and a chunk-fed
//! [`StreamTranslator`] for SSE. Adding a provider family (Gemini, Bedrock,
//! Azure — part 2) means adding a [`crate::config::Kind`] variant, one module
//! here and one arm in [`for_kind`]; the request flow does not change.

pub mod chat_ir;
mod chunk;
pub mod messages;
mod messages_parts;
mod messages_stream;
pub mod openai_anthropic;
pub mod openai_azure;
pub mod openai_bedrock;
pub mod openai_gemini;
pub mod openai_openai;
mod read;
pub mod responses;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::codec::sse::{Event, SseParser};
use crate::config::{Key, Kind, ModelCfg, Provider};
use crate::error::{ApiError, INVALID_REQUEST, RATE_LIMIT, SERVER};
use crate::scan::{self, TopLevel};

/// Token usage of one completion, as the client sees it (OpenAI semantics:
/// `prompt_tokens` includes cached prompt tokens).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Prompt tokens read from the provider's cache (subset of prompt_tokens).
    pub cached_tokens: u64,
    /// Prompt tokens written to the provider's cache (subset of
    /// prompt_tokens): Anthropic `cache_creation_input_tokens`, Bedrock
    /// `cacheWriteInputTokens`; 0 where the provider reports none.
    pub cache_write_tokens: u64,
    /// Web searches the provider ran for the answer (OpenAI's and Azure's
    /// `web_search_call` output items, Anthropic's
    /// `server_tool_use.web_search_requests`), priced per search.
    pub web_searches: u64,
}

impl Usage {
    pub fn total(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Embeddings,
    /// The OpenAI Responses API front door ([`responses`]).
    Responses,
}

impl Endpoint {
    pub fn from_path(path: &str) -> Option<Endpoint> {
        match path {
            "/v1/chat/completions" => Some(Endpoint::Chat),
            "/v1/embeddings" => Some(Endpoint::Embeddings),
            "/v1/responses" => Some(Endpoint::Responses),
            _ => None,
        }
    }
}

/// The client API a request came in on. The OpenAI routes are
/// [`Endpoint`]s; the Anthropic Messages front door ([`messages`]) reads an
/// Anthropic body, becomes an OpenAI chat request for the translators of
/// every non-Anthropic provider, and answers in Anthropic's shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Front {
    #[default]
    OpenAi,
    /// `POST /v1/messages`.
    Messages,
    /// `POST /v1/messages/count_tokens`.
    CountTokens,
}

impl Front {
    /// The front door of a path (query string removed), or `None` when it
    /// is not one of the Messages routes.
    pub fn messages_path(path: &str) -> Option<Front> {
        match path {
            "/v1/messages" => Some(Front::Messages),
            "/v1/messages/count_tokens" => Some(Front::CountTokens),
            _ => None,
        }
    }

    /// Errors are written in Anthropic's shape.
    pub fn anthropic(self) -> bool {
        self != Front::OpenAi
    }
}

/// The translator of a provider kind for a front door: [`for_kind`] on the
/// OpenAI routes; on the Messages routes the Anthropic passthrough, or the
/// Messages adapter around the kind's OpenAI translator.
pub fn for_route(provider: &Provider, endpoint: Endpoint, front: Front) -> &'static dyn Translator {
    match front {
        Front::OpenAi => responses::translator(provider, endpoint),
        Front::Messages | Front::CountTokens => messages::translator(provider.kind(), front),
    }
}

/// What a request translator needs to know.
#[derive(Debug, Clone, Copy)]
pub struct RequestCtx<'a> {
    pub provider: &'a Provider,
    /// Upstream model name.
    pub model: &'a str,
    pub model_cfg: &'a ModelCfg,
    pub endpoint: Endpoint,
    /// Add Anthropic prompt-cache breakpoints to a request that has none
    /// ([`add_cache_breakpoints`]; the key's policy opts in).
    pub cache_breakpoints: bool,
}

/// Response header naming the request fields (and tool types) a translated
/// request could not carry to its provider (comma-separated, e.g.
/// `cache_control,thinking` or `web_search`).
pub const DROPPED_HEADER: &str = "x-tollgate-dropped";

/// Response header naming the request values a translated request lowered
/// to what the model takes (e.g. `max_tokens=16384`).
pub const LOWERED_HEADER: &str = "x-tollgate-lowered";

/// The translated request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpstreamRequest {
    /// `:path` upstream.
    pub path: String,
    pub body: Vec<u8>,
    /// The client asked for a stream.
    pub stream: bool,
    /// The client asked for `stream_options.include_usage`.
    pub include_usage: bool,
    /// JSON mode done by the translator (e.g. a forced tool): the response
    /// side must turn it back into plain content.
    pub json_mode: bool,
    /// Prompt tokens estimated from the request (4 characters a token), for
    /// providers whose answers carry no usage (Gemini embeddings); 0 = none.
    pub prompt_estimate: u64,
    /// Embeddings translated by the filter: the client asked for
    /// `encoding_format: base64`.
    pub embed_base64: bool,
    /// More bodies for the same path, one call each, whose answers are
    /// merged in order after `body`'s ([`merge_embeddings`]): a provider
    /// that embeds one input per call (Bedrock Titan) gets several inputs
    /// this way.
    pub fan_out: Vec<Vec<u8>>,
    /// Request fields and tool types the provider does not get (for
    /// [`DROPPED_HEADER`]).
    pub dropped: Vec<&'static str>,
    /// Values lowered to the model's limits (for [`LOWERED_HEADER`]).
    pub lowered: Vec<String>,
}

impl UpstreamRequest {
    /// A copy without the bodies (for one call of a fan-out).
    pub fn clone_head(&self) -> UpstreamRequest {
        UpstreamRequest {
            path: self.path.clone(),
            body: Vec::new(),
            stream: self.stream,
            include_usage: self.include_usage,
            json_mode: self.json_mode,
            prompt_estimate: self.prompt_estimate,
            embed_base64: self.embed_base64,
            ..UpstreamRequest::default()
        }
    }
}

/// Gives a translated request the provider's own web search in place of the
/// client's web search tool (`tool`: the Responses `web_search` tool or
/// the Messages `web_search_*` server tool, for their options), when the
/// provider config enables it (`"web_search": true`):
///
/// - Anthropic: the server-side tool `web_search_20250305`, with the
///   allowed or blocked domains, the user's location and `max_uses` the
///   client gave;
/// - Gemini: the `googleSearch` tool (grounding), only in a request without
///   function declarations (Gemini 2.x models do not combine them).
///
/// Returns false (nothing changed) where there is no such tool, for the
/// caller to name the tool dropped.
pub fn add_web_search(
    provider: &Provider,
    up: &mut UpstreamRequest,
    tool: &Value,
) -> Result<bool, ApiError> {
    if !provider.web_search || !matches!(provider.kind(), Kind::Anthropic | Kind::Gemini) {
        return Ok(false);
    }
    let malformed = || {
        ApiError::new(
            502,
            SERVER,
            "provider_error",
            "translated request is not a JSON object",
        )
    };
    let mut body: Value = serde_json::from_slice(&up.body).map_err(|_| malformed())?;
    let Some(obj) = body.as_object_mut() else {
        return Err(malformed());
    };
    let native = if provider.kind() == Kind::Anthropic {
        let mut t = Map::new();
        t.insert("type".into(), Value::from("web_search_20250305"));
        t.insert("name".into(), Value::from("web_search"));
        let domains = tool
            .get("filters")
            .and_then(|f| f.get("allowed_domains"))
            .or_else(|| tool.get("allowed_domains"));
        if let Some(d) = domains.filter(|d| d.is_array()) {
            t.insert("allowed_domains".into(), d.clone());
        } else if let Some(d) = tool.get("blocked_domains").filter(|d| d.is_array()) {
            t.insert("blocked_domains".into(), d.clone());
        }
        if let Some(Value::Object(loc)) = tool.get("user_location") {
            let mut l = Map::new();
            l.insert("type".into(), Value::from("approximate"));
            for k in ["city", "region", "country", "timezone"] {
                if let Some(v) = loc.get(k).filter(|v| v.is_string()) {
                    l.insert(k.into(), v.clone());
                }
            }
            t.insert("user_location".into(), Value::Object(l));
        }
        if let Some(n) = tool.get("max_uses").filter(|n| n.is_u64()) {
            t.insert("max_uses".into(), n.clone());
        }
        Value::Object(t)
    } else {
        let declares = obj
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|ts| ts.iter().any(|t| t.get("functionDeclarations").is_some()));
        if declares {
            return Ok(false);
        }
        serde_json::json!({"googleSearch": {}})
    };
    match obj.get_mut("tools") {
        Some(Value::Array(ts)) => ts.push(native),
        _ => {
            obj.insert("tools".into(), Value::Array(vec![native]));
        }
    }
    up.body = serde_json::to_vec(&body).map_err(|_| malformed())?;
    Ok(true)
}

/// Anthropic allows at most this many `cache_control` breakpoints a request.
pub const MAX_BREAKPOINTS: usize = 4;

/// Gives an Anthropic Messages body prompt-cache breakpoints when it has
/// none, for clients that never set them (opted in per tenant or key):
/// `cache_control: {"type": "ephemeral"}` on the system prompt's last
/// block, the last tool and the last block of the latest user turn — three,
/// within Anthropic's limit of [`MAX_BREAKPOINTS`]. Anthropic caches the
/// prefix up to each breakpoint, so the next turn reads all of it from the
/// cache. A body that already holds a `cache_control` anywhere is left as
/// the client wrote it. Returns whether anything was added.
pub fn add_cache_breakpoints(body: &mut Value) -> bool {
    if body.to_string().contains("\"cache_control\"") {
        return false;
    }
    let Value::Object(o) = body else {
        return false;
    };
    let mark = || serde_json::json!({"type": "ephemeral"});
    let mut added = 0;
    // A string becomes one text block, which can carry the marker.
    let as_blocks = |v: &mut Value| {
        if let Value::String(s) = v {
            if !s.is_empty() {
                *v = serde_json::json!([{"type": "text", "text": s}]);
            }
        }
    };
    let mut mark_last = |v: Option<&mut Value>| {
        if let Some(Value::Array(items)) = v {
            if let Some(Value::Object(last)) = items.last_mut() {
                last.insert("cache_control".into(), mark());
                added += 1;
            }
        }
    };
    if let Some(system) = o.get_mut("system") {
        as_blocks(system);
    }
    mark_last(o.get_mut("system"));
    mark_last(o.get_mut("tools"));
    let user = o.get_mut("messages").and_then(|m| match m {
        Value::Array(msgs) => msgs
            .iter_mut()
            .rev()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user")),
        _ => None,
    });
    if let Some(Value::Object(user)) = user {
        if let Some(content) = user.get_mut("content") {
            as_blocks(content);
        }
        mark_last(user.get_mut("content"));
    }
    added > 0
}

/// Lowers a chat request's output limit (`max_tokens` or
/// `max_completion_tokens`) to the model's `max_output_tokens` when it asks
/// for more, noting `name=limit` in `lowered`. Used by the translated front
/// doors (Messages and Responses to another family), whose clients ask for
/// what their own provider's models take (Claude Code: 32,000 to a model it
/// does not know); a passthrough leaves the client's value alone.
pub fn lower_output_limit(chat: &mut Value, cfg: &ModelCfg, lowered: &mut Vec<String>) {
    let (Some(limit), Value::Object(o)) = (cfg.max_output_tokens, chat) else {
        return;
    };
    for name in ["max_tokens", "max_completion_tokens"] {
        if let Some(v) = o.get_mut(name) {
            if v.as_u64().is_some_and(|n| n > u64::from(limit)) {
                *v = Value::from(limit);
                lowered.push(format!("{name}={limit}"));
            }
        }
    }
}

/// What response translators need to know about the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseCtx {
    pub endpoint: Endpoint,
    pub stream: bool,
    pub include_usage: bool,
    /// Unix seconds, for `created`.
    pub created: u64,
    /// See [`UpstreamRequest::json_mode`].
    pub json_mode: bool,
    /// See [`UpstreamRequest::prompt_estimate`].
    pub prompt_estimate: u64,
    /// Embeddings translated by the filter: the client asked for
    /// `encoding_format: base64`.
    pub embed_base64: bool,
    /// Upstream model name (for answers that do not name it).
    pub model: String,
}

/// A translated non-streaming response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Translated {
    /// New body, or `None` to pass the upstream body through untouched.
    pub body: Option<Vec<u8>>,
    pub usage: Option<Usage>,
}

/// One provider family.
pub trait Translator: Sync {
    fn kind(&self) -> Kind;
    /// Client body (already parsed, an object with a string `model`) →
    /// upstream request.
    fn request(&self, ctx: &RequestCtx<'_>, body: &Value) -> Result<UpstreamRequest, ApiError>;
    /// Headers carrying the provider credential (and version headers). Gets
    /// the translated request and the time so that signing schemes (SigV4)
    /// fit the same interface.
    fn auth_headers(
        &self,
        provider: &Provider,
        key: &Key,
        req: &UpstreamRequest,
        now_ms: u64,
    ) -> Result<Vec<(&'static str, String)>, ApiError>;
    /// Is a 2xx answer with this content type the stream to translate?
    fn is_stream(&self, content_type: &str) -> bool {
        content_type.contains("text/event-stream")
    }
    /// Are successful bodies passed through untouched (only read for usage)?
    fn passthrough(&self) -> bool {
        false
    }
    /// The request from the body's top level ([`crate::scan`]) without
    /// building the document: `Some` for translators that forward the
    /// client's body with a few edits. The upstream body is then the new
    /// prefix, replacing the first `usize` bytes of the client's body (the
    /// rest goes on as it is). `None`: [`Translator::request`] is used.
    fn request_in_place(
        &self,
        _ctx: &RequestCtx<'_>,
        _top: &TopLevel<'_>,
    ) -> Option<Result<(UpstreamRequest, usize), ApiError>> {
        None
    }
    /// Does [`Translator::request`] carry the client's strings under
    /// [`crate::scan::TEXT_KEYS`] into the upstream body only whole: moved,
    /// joined or concatenated, never read (beyond being empty or not), cut
    /// or parsed?
    /// Then a large body's long texts are kept out of the document it
    /// builds ([`crate::lift`]), and out of the `body` the plan holds until
    /// it is written: such a translator's [`Translator::auth_headers`] must
    /// not depend on the body (no signature over it), and it makes no
    /// fan-out.
    fn keeps_texts_whole(&self) -> bool {
        false
    }
    /// Successful non-streaming upstream body → OpenAI body.
    fn response(&self, ctx: &ResponseCtx, body: &[u8]) -> Result<Translated, ApiError>;
    /// Upstream error (status ≥ 400) → OpenAI error.
    fn error(&self, status: u16, body: &[u8]) -> ApiError;
    /// A fresh incremental translator for one SSE response.
    fn stream(&self, ctx: &ResponseCtx) -> Box<dyn StreamTranslator>;
}

/// Chunk-fed stream translation: `feed` any split of the upstream bytes,
/// append whatever can be emitted to `out`; `finish` at end of stream.
pub trait StreamTranslator {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>);
    fn finish(&mut self, out: &mut Vec<u8>);
    /// Usage seen so far (final once `finish` ran).
    fn usage(&self) -> Option<Usage>;
    /// Has a content or tool-call token been emitted yet (for TTFT)?
    fn first_token_seen(&self) -> bool;
}

/// The provider-specific half of a stream translator whose provider streams
/// SSE (OpenAI, Azure, Anthropic, Gemini): `feed_sse` and `finish_sse` do
/// the parsing.
pub(crate) trait SseEvents {
    fn parser(&mut self) -> &mut SseParser;
    /// The translator has closed the client's stream (its own `[DONE]`
    /// written); later upstream bytes are ignored.
    fn is_done(&self) -> bool;
    fn on_event(&mut self, ev: Event, out: &mut Vec<u8>);
    /// Writes an OpenAI error event and `[DONE]` (see `push_stream_error`).
    fn error_event(&mut self, out: &mut Vec<u8>, status: u16, message: &str);
}

/// Hands every complete event in `chunk` to `on_event`; a malformed stream
/// (an over-long line, invalid UTF-8) ends in an OpenAI error event.
pub(crate) fn feed_sse<T: SseEvents>(t: &mut T, chunk: &[u8], out: &mut Vec<u8>) {
    if t.is_done() {
        return;
    }
    let mut parser = std::mem::take(t.parser());
    let r = parser.feed(chunk, &mut |e| t.on_event(e, out));
    *t.parser() = parser;
    if r.is_err() && !t.is_done() {
        t.error_event(out, 502, "Malformed stream from the provider");
    }
}

/// Hands on an event left unterminated at the end of the stream. Returns
/// true while the OpenAI stream is still open, for the caller to close.
pub(crate) fn finish_sse<T: SseEvents>(t: &mut T, out: &mut Vec<u8>) -> bool {
    if t.is_done() {
        return false;
    }
    let mut parser = std::mem::take(t.parser());
    let _ = parser.finish(&mut |e| t.on_event(e, out));
    *t.parser() = parser;
    !t.is_done()
}

pub fn for_kind(kind: Kind) -> &'static dyn Translator {
    match kind {
        Kind::Openai => &openai_openai::OpenAiOpenAi,
        Kind::Anthropic => &openai_anthropic::OpenAiAnthropic,
        Kind::Azure => &openai_azure::OpenAiAzure,
        Kind::Gemini => &openai_gemini::OpenAiGemini,
        Kind::Bedrock => &openai_bedrock::OpenAiBedrock,
    }
}

/// A document written as JSON, byte for byte what `serde_json::to_vec`
/// writes, with strings copied a run at a time: the runs between the bytes
/// JSON must escape are found eight bytes at a time ([`scan::plain_end`])
/// where serde_json looks each byte up. A translated 512 KB prompt is
/// mostly one long string.
pub fn write_json(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_json(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            out.push(b'{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, k);
                out.push(b':');
                write_json(out, item);
            }
            out.push(b'}');
        }
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => out.extend_from_slice(n.to_string().as_bytes()),
    }
}

/// A JSON string with serde_json's escapes (`\"`, `\\`, the short forms of
/// the usual controls, `\u00xx` for the rest).
fn write_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let b = s.as_bytes();
    out.push(b'"');
    let mut at = 0;
    loop {
        let end = scan::plain_end(b, at);
        out.extend_from_slice(b.get(at..end).unwrap_or_default());
        let Some(&c) = b.get(end) else { break };
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(c >> 4)],
                HEX[usize::from(c & 0xf)],
            ]),
        }
        at = end + 1;
    }
    out.push(b'"');
}

/// Parse a client body: valid UTF-8 JSON object with a string `model`.
pub fn parse_client_body(body: &[u8]) -> Result<(Value, String), ApiError> {
    if std::str::from_utf8(body).is_err() {
        return Err(ApiError::new(
            400,
            INVALID_REQUEST,
            "invalid_json",
            "Request body is not valid UTF-8",
        ));
    }
    let v: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::invalid_json(&e.to_string()))?;
    let Value::Object(map) = &v else {
        return Err(ApiError::new(
            400,
            INVALID_REQUEST,
            "invalid_json",
            "Request body must be a JSON object",
        ));
    };
    let model = match map.get("model") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        None | Some(Value::Null) => {
            return Err(ApiError::bad_param(
                "model",
                "Missing required parameter: 'model'",
            ))
        }
        Some(_) => {
            return Err(ApiError::bad_param(
                "model",
                "Invalid type for 'model': expected a non-empty string",
            ))
        }
    };
    Ok((v, model))
}

/// `stream` as a bool (absent/null = false); wrong type → 400.
pub fn stream_flag(body: &Value) -> Result<bool, ApiError> {
    match body.get("stream") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::bad_param(
            "stream",
            "Invalid type for 'stream': expected a boolean",
        )),
    }
}

/// `stream_options.include_usage` (wrong types → 400).
pub fn include_usage_flag(body: &Value) -> Result<bool, ApiError> {
    match body.get("stream_options") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Object(o)) => match o.get("include_usage") {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(ApiError::bad_param(
                "stream_options.include_usage",
                "Invalid type for 'stream_options.include_usage': expected a boolean",
            )),
        },
        Some(_) => Err(ApiError::bad_param(
            "stream_options",
            "Invalid type for 'stream_options': expected an object",
        )),
    }
}

/// `messages`: a non-empty array of objects each with a string `role`.
pub fn check_messages(body: &Value) -> Result<&Vec<Value>, ApiError> {
    let msgs = match body.get("messages") {
        Some(Value::Array(a)) => a,
        None | Some(Value::Null) => {
            return Err(ApiError::bad_param(
                "messages",
                "Missing required parameter: 'messages'",
            ))
        }
        Some(_) => {
            return Err(ApiError::bad_param(
                "messages",
                "Invalid type for 'messages': expected an array",
            ))
        }
    };
    if msgs.is_empty() {
        return Err(ApiError::bad_param(
            "messages",
            "'messages' must contain at least one message",
        ));
    }
    for (i, m) in msgs.iter().enumerate() {
        match m.get("role") {
            Some(Value::String(_)) => {}
            _ => {
                return Err(ApiError::bad_param(
                    &format!("messages[{i}].role"),
                    format!("Invalid value for 'messages[{i}].role': expected a string"),
                ))
            }
        }
    }
    Ok(msgs)
}

/// Map an upstream error status to the client status, type and code.
pub fn map_error_status(status: u16) -> (u16, &'static str, &'static str) {
    match status {
        400 | 422 => (400, INVALID_REQUEST, "invalid_request"),
        401 | 403 => (502, SERVER, "provider_auth_failed"),
        404 => (404, INVALID_REQUEST, "model_not_found"),
        408 => (504, SERVER, "upstream_timeout"),
        413 => (413, INVALID_REQUEST, "request_too_large"),
        429 => (429, RATE_LIMIT, "rate_limit_exceeded"),
        529 | 503 => (503, SERVER, "provider_overloaded"),
        504 => (504, SERVER, "upstream_timeout"),
        s if s < 500 => (400, INVALID_REQUEST, "invalid_request"),
        _ => (502, SERVER, "provider_error"),
    }
}

/// Build the OpenAI error for an upstream error, keeping the provider's
/// message where the client can act on it (4xx other than auth).
pub fn upstream_error(status: u16, provider_message: Option<String>) -> ApiError {
    let (st, kind, code) = map_error_status(status);
    let message = match (st, provider_message) {
        (502, _) if status == 401 || status == 403 => {
            "The provider rejected the gateway's credentials".to_string()
        }
        (_, Some(m)) if !m.is_empty() => m,
        _ => format!("The provider answered with HTTP {status}"),
    };
    ApiError::new(st, kind, code, message)
}

/// Token estimate for text whose usage the provider does not report:
/// `max(1, ceil(chars / 4))`.
pub fn estimate_tokens(text: &str) -> u64 {
    let chars = text.chars().count() as u64;
    chars.div_ceil(4).max(1)
}

/// Embeddings `input` → list of strings (token-id arrays are refused: only
/// OpenAI's own tokenizer gives them meaning).
pub fn embedding_inputs(body: &Value, provider: &str) -> Result<Vec<String>, ApiError> {
    if stream_flag(body)? {
        return Err(ApiError::bad_param(
            "stream",
            "Embeddings cannot be streamed",
        ));
    }
    let bad = || {
        ApiError::bad_param(
            "input",
            format!("Invalid type for 'input': provider '{provider}' takes a string or an array of strings"),
        )
    };
    let out = match body.get("input") {
        None | Some(Value::Null) => {
            return Err(ApiError::bad_param(
                "input",
                "Missing required parameter: 'input'",
            ))
        }
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => {
            let mut v = Vec::with_capacity(a.len());
            for x in a {
                v.push(x.as_str().ok_or_else(bad)?.to_string());
            }
            v
        }
        Some(_) => return Err(bad()),
    };
    if out.is_empty() || out.iter().any(String::is_empty) {
        return Err(ApiError::bad_param("input", "'input' must not be empty"));
    }
    Ok(out)
}

/// `encoding_format`: `float` (default) or `base64`.
pub fn embedding_base64(body: &Value) -> Result<bool, ApiError> {
    match body.get("encoding_format") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::String(s)) if s == "float" => Ok(false),
        Some(Value::String(s)) if s == "base64" => Ok(true),
        Some(_) => Err(ApiError::bad_param(
            "encoding_format",
            "Invalid value for 'encoding_format': expected float or base64",
        )),
    }
}

/// `dimensions` as a positive integer, if given.
pub fn embedding_dimensions(body: &Value) -> Result<Option<u64>, ApiError> {
    match body.get("dimensions") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 => Ok(Some(n)),
            _ => Err(ApiError::bad_param(
                "dimensions",
                "Invalid value for 'dimensions': expected a positive integer",
            )),
        },
    }
}

/// One OpenAI embedding item: floats, or base64 of little-endian f32s
/// (what the official clients ask for by default).
pub fn embedding_item(index: usize, values: &[f64], base64: bool) -> Value {
    let embedding = if base64 {
        let mut bytes = Vec::with_capacity(values.len() * 4);
        for v in values {
            bytes.extend_from_slice(&(*v as f32).to_le_bytes());
        }
        Value::String(base64_encode(&bytes))
    } else {
        Value::Array(values.iter().map(|v| serde_json::json!(v)).collect())
    };
    serde_json::json!({"object": "embedding", "index": index, "embedding": embedding})
}

/// The OpenAI embeddings list.
pub fn embedding_list(data: Vec<Value>, model: &str, prompt_tokens: u64) -> Value {
    serde_json::json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    })
}

/// OpenAI embedding lists (translated answers to the calls of a fan-out,
/// in request order) → one list, items re-indexed in order, prompt tokens
/// summed.
pub fn merge_embeddings(lists: &[Vec<u8>], model: &str) -> Result<(Vec<u8>, Usage), ApiError> {
    let bad = || {
        ApiError::new(
            502,
            SERVER,
            "provider_error",
            "The provider returned a malformed response",
        )
    };
    let mut data = Vec::with_capacity(lists.len());
    let mut prompt_tokens = 0u64;
    for list in lists {
        let v: Value = serde_json::from_slice(list).map_err(|_| bad())?;
        let items = v.get("data").and_then(Value::as_array).ok_or_else(bad)?;
        for item in items {
            let mut item = item.clone();
            if let Some(o) = item.as_object_mut() {
                o.insert("index".into(), Value::from(data.len()));
            }
            data.push(item);
        }
        prompt_tokens = prompt_tokens.saturating_add(
            v.get("usage")
                .and_then(|u| u.get("prompt_tokens"))
                .and_then(Value::as_u64)
                .unwrap_or(0),
        );
    }
    let body =
        serde_json::to_vec(&embedding_list(data, model, prompt_tokens)).map_err(|_| bad())?;
    Ok((
        body,
        Usage {
            prompt_tokens,
            completion_tokens: 0,
            cached_tokens: 0,
            cache_write_tokens: 0,
            web_searches: 0,
        },
    ))
}

/// Standard base64 with padding.
pub fn base64_encode(bytes: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let b = [
            c.first().copied().unwrap_or(0),
            c.get(1).copied().unwrap_or(0),
            c.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].iter().enumerate() {
            if i <= c.len() {
                out.push(char::from(T[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Split a `data:<media>;base64,<data>` URL.
pub fn data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (meta, data) = rest.split_once(',')?;
    let media = meta.strip_suffix(";base64")?;
    Some((media, data))
}

/// A `chat.completion` choice's message: text and tool calls (`content`
/// null when the answer is only tool calls).
pub(crate) fn assistant_message(text: String, calls: Vec<Value>) -> Value {
    let mut message = Map::new();
    message.insert("role".into(), Value::String("assistant".into()));
    let content = if text.is_empty() && !calls.is_empty() {
        Value::Null
    } else {
        Value::String(text)
    };
    message.insert("content".into(), content);
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    message.insert("refusal".into(), Value::Null);
    Value::Object(message)
}

/// An OpenAI `chat.completion` answer with one choice, serialized straight
/// from the translator's borrowed fields: no `Value` tree is built and
/// dropped for every answer (in the Wasm VM, building it, serializing it and
/// freeing its map nodes took most of the response translation's time).
/// Serializes as [`assistant_message`] and [`usage_json`] read.
#[derive(Serialize)]
pub(crate) struct Completion<'a> {
    pub id: Option<&'a str>,
    pub object: &'static str,
    pub created: u64,
    pub model: Option<&'a str>,
    pub choices: [CompletionChoice; 1],
    pub usage: UsageOut,
}

impl<'a> Completion<'a> {
    pub(crate) fn new(
        id: Option<&'a str>,
        created: u64,
        model: Option<&'a str>,
        text: String,
        calls: Vec<Value>,
        finish_reason: &'static str,
        usage: &Usage,
    ) -> Completion<'a> {
        Completion {
            id,
            object: "chat.completion",
            created,
            model,
            choices: [CompletionChoice {
                index: 0,
                message: AssistantMessage {
                    role: "assistant",
                    content: (!text.is_empty() || calls.is_empty()).then_some(text),
                    tool_calls: calls,
                    refusal: (),
                },
                logprobs: (),
                finish_reason,
            }],
            usage: UsageOut::new(usage),
        }
    }
}

#[derive(Serialize)]
pub(crate) struct CompletionChoice {
    index: u32,
    message: AssistantMessage,
    logprobs: (),
    finish_reason: &'static str,
}

/// [`assistant_message`] as a struct.
#[derive(Serialize)]
struct AssistantMessage {
    role: &'static str,
    content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<Value>,
    refusal: (),
}

/// [`usage_json`] as a struct.
#[derive(Serialize)]
pub(crate) struct UsageOut {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
    prompt_tokens_details: CachedTokens,
}

#[derive(Serialize)]
struct CachedTokens {
    cached_tokens: u64,
}

impl UsageOut {
    pub(crate) fn new(u: &Usage) -> UsageOut {
        UsageOut {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.total(),
            prompt_tokens_details: CachedTokens {
                cached_tokens: u.cached_tokens,
            },
        }
    }
}

/// Append `data: <json>\n\n`.
pub(crate) fn push_data(out: &mut Vec<u8>, json: &[u8]) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(json);
    out.extend_from_slice(b"\n\n");
}

pub(crate) const DONE: &[u8] = b"data: [DONE]\n\n";

/// Appends an in-stream OpenAI error event and `[DONE]`, the last bytes of a
/// stream that failed after its headers were sent. `status` is the HTTP
/// status the provider would have answered the same failure with (429, 503,
/// 502 for a broken stream): the error is `upstream_error`'s.
pub(crate) fn push_stream_error(out: &mut Vec<u8>, status: u16, message: &str) {
    push_data(
        out,
        &upstream_error(status, Some(message.to_string())).body(),
    );
    out.extend_from_slice(DONE);
}

/// Usage object in OpenAI form.
pub(crate) fn usage_json(u: &Usage) -> Value {
    serde_json::json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.total(),
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_serializes_as_the_value_it_replaces() {
        use serde_json::json;
        let usage = Usage {
            prompt_tokens: 12,
            completion_tokens: 7,
            cached_tokens: 3,
            ..Usage::default()
        };
        let call = json!({"id": "t1", "type": "function",
            "function": {"name": "f", "arguments": "{}"}});
        for (text, calls) in [
            ("hi", vec![]),
            ("", vec![]),
            ("", vec![call.clone()]),
            ("both", vec![call]),
        ] {
            for (id, model) in [(Some("msg_1"), Some("m")), (None, None)] {
                let got = serde_json::to_value(Completion::new(
                    id,
                    1700000000,
                    model,
                    text.to_string(),
                    calls.clone(),
                    "stop",
                    &usage,
                ))
                .unwrap();
                let want = json!({
                    "id": id, "object": "chat.completion", "created": 1700000000, "model": model,
                    "choices": [{"index": 0, "message": assistant_message(text.to_string(), calls.clone()),
                                 "logprobs": null, "finish_reason": "stop"}],
                    "usage": usage_json(&usage),
                });
                assert_eq!(got, want, "{text:?} {calls:?} {id:?}");
            }
        }
    }

    #[test]
    fn write_json_writes_what_serde_json_writes() {
        use serde_json::json;
        let controls: String = (0u8..0x20).map(char::from).collect();
        let long = "fn main() {\n    println!(\"hi\\\\\"); // é 🦀 \u{7f}\n}\n".repeat(300);
        for v in [
            json!(null),
            json!({"a": [1, -2, 3.5, 1e300, u64::MAX, i64::MIN, true, false, null], "b": {}, "c": []}),
            json!({"model": "claude", "messages": [{"role": "user", "content": [{"type": "text", "text": long}]}]}),
            json!([
                controls,
                "\"\\/",
                "",
                "plain",
                "tail\u{1}",
                "é",
                "x".repeat(17)
            ]),
            json!({"\"k\n": "v\t", "": 0.1}),
        ] {
            let mut out = Vec::new();
            write_json(&mut out, &v);
            assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&serde_json::to_vec(&v).unwrap())
            );
        }
    }

    #[test]
    fn parse_errors() {
        assert_eq!(
            parse_client_body(b"{").unwrap_err().code.as_deref(),
            Some("invalid_json")
        );
        assert_eq!(parse_client_body(b"[]").unwrap_err().status, 400);
        assert_eq!(
            parse_client_body(b"{\"model\":1}")
                .unwrap_err()
                .param
                .as_deref(),
            Some("model")
        );
        assert_eq!(
            parse_client_body(b"{}").unwrap_err().param.as_deref(),
            Some("model")
        );
        assert_eq!(
            parse_client_body(b"{\"model\":\"\xff\"}")
                .unwrap_err()
                .status,
            400
        );
        assert_eq!(parse_client_body(b"{\"model\":\"a\"}").unwrap().1, "a");
    }

    #[test]
    fn error_mapping() {
        assert_eq!(map_error_status(429).0, 429);
        assert_eq!(map_error_status(529).0, 503);
        assert_eq!(map_error_status(400).0, 400);
        assert_eq!(map_error_status(401).0, 502);
        assert_eq!(map_error_status(500).0, 502);
    }
}
