//! OpenAI → OpenAI and OpenAI-compatible providers: the body passes through
//! with the upstream model name substituted. For streams the filter always
//! asks for `stream_options.include_usage` (it needs the usage for budgets)
//! and, when the client did not ask for it, drops the usage-only chunk so
//! the client sees exactly what it asked for.

use std::ops::Range;

use serde::Deserialize;
use serde_json::Value;

use super::read;
use super::{
    feed_sse, finish_sse, include_usage_flag, push_stream_error, stream_flag, upstream_error,
    Endpoint, RequestCtx, ResponseCtx, SseEvents, StreamTranslator, Translated, Translator,
    UpstreamRequest, Usage,
};
use crate::codec::sse::{Event, SseParser};
use crate::config::{Key, Kind, Provider};
use crate::error::ApiError;
use crate::scan::{edit_prefix, TopLevel};

pub struct OpenAiOpenAi;

impl Translator for OpenAiOpenAi {
    fn kind(&self) -> Kind {
        Kind::Openai
    }

    fn request(&self, ctx: &RequestCtx<'_>, body: &Value) -> Result<UpstreamRequest, ApiError> {
        let (bytes, suffix, stream, include_usage) = prepare(ctx, body)?;
        let path = format!("{}{}", ctx.provider.base_path, suffix);
        Ok(upstream(path, bytes, stream, include_usage))
    }

    fn request_in_place(
        &self,
        ctx: &RequestCtx<'_>,
        top: &TopLevel<'_>,
    ) -> Option<Result<(UpstreamRequest, usize), ApiError>> {
        Some(
            prepare_in_place(ctx, top).map(|(prefix, replaced, suffix, stream, usage)| {
                let path = format!("{}{}", ctx.provider.base_path, suffix);
                (upstream(path, prefix, stream, usage), replaced)
            }),
        )
    }

    fn auth_headers(
        &self,
        _provider: &Provider,
        key: &Key,
        _req: &UpstreamRequest,
        _now_ms: u64,
    ) -> Result<Vec<(&'static str, String)>, ApiError> {
        Ok(vec![crate::credentials::bearer(key)])
    }

    fn passthrough(&self) -> bool {
        true
    }

    fn response(&self, _ctx: &ResponseCtx, body: &[u8]) -> Result<Translated, ApiError> {
        Ok(passthrough_response(body))
    }

    fn error(&self, status: u16, body: &[u8]) -> ApiError {
        upstream_error(status, error_message(body))
    }

    fn stream(&self, ctx: &ResponseCtx) -> Box<dyn StreamTranslator> {
        Box::new(OpenAiStream::new(ctx, false))
    }
}

/// The upstream request of a passthrough (shared with Azure).
pub(crate) fn upstream(
    path: String,
    body: Vec<u8>,
    stream: bool,
    include_usage: bool,
) -> UpstreamRequest {
    UpstreamRequest {
        path,
        body,
        stream,
        include_usage,
        ..UpstreamRequest::default()
    }
}

/// An OpenAI-shaped answer goes to the client as it is; only its usage is
/// read (shared with Azure).
pub(crate) fn passthrough_response(body: &[u8]) -> Translated {
    let usage = read::parse::<native::Answer>(body)
        .ok()
        .and_then(|v| v.usage?.usage());
    Translated { body: None, usage }
}

/// Check and adjust an OpenAI-shaped body for an OpenAI-compatible upstream
/// (shared with Azure): → (body bytes, path suffix, stream, include_usage).
/// A parsed body is written out and edited as a client's body is
/// ([`prepare_in_place`]), so both take the same checks.
pub(crate) fn prepare(
    ctx: &RequestCtx<'_>,
    body: &Value,
) -> Result<(Vec<u8>, &'static str, bool, bool), ApiError> {
    let bytes = serde_json::to_vec(body).map_err(|e| ApiError::invalid_json(&e.to_string()))?;
    let top = TopLevel::parse(&bytes)?;
    let (mut prefix, replaced, suffix, stream, include_usage) = prepare_in_place(ctx, &top)?;
    prefix.extend_from_slice(bytes.get(replaced..).unwrap_or_default());
    Ok((prefix, suffix, stream, include_usage))
}

/// [`prepare`] on the client's body as it is: the checks read only the
/// small top-level values, and the edits (the upstream model, the stream's
/// `include_usage`) give a new prefix replacing the first bytes of the body
/// (see [`edit_prefix`]): → (prefix, bytes it replaces, path suffix,
/// stream, include_usage). Nothing to edit: an empty prefix replacing 0.
pub(crate) fn prepare_in_place(
    ctx: &RequestCtx<'_>,
    top: &TopLevel<'_>,
) -> Result<(Vec<u8>, usize, &'static str, bool, bool), ApiError> {
    let mut edits: Vec<(Range<usize>, String)> = Vec::with_capacity(2);
    let (suffix, stream, include_usage) = match ctx.endpoint {
        Endpoint::Chat | Endpoint::Responses => {
            top.check_messages()?;
            let small = top.small(&["stream", "stream_options"])?;
            let stream = stream_flag(&small)?;
            let include_usage = include_usage_flag(&small)?;
            if stream && !include_usage && ctx.provider.stream_usage() {
                let mut so = match small.get("stream_options") {
                    Some(Value::Object(existing)) => existing.clone(),
                    _ => serde_json::Map::new(),
                };
                so.insert("include_usage".into(), Value::Bool(true));
                let so = Value::Object(so).to_string();
                match top.span("stream_options") {
                    Some(span) => edits.push((span, so)),
                    None => {
                        // Right after the object's `{` (a model follows).
                        let at = top.body().find('{').map_or(0, |i| i + 1);
                        edits.push((at..at, format!("\"stream_options\":{so},")));
                    }
                }
            }
            ("/chat/completions", stream, include_usage)
        }
        Endpoint::Embeddings => {
            let small = top.small(&["input", "stream"])?;
            match small.get("input") {
                None | Some(Value::Null) => {
                    return Err(ApiError::bad_param(
                        "input",
                        "Missing required parameter: 'input'",
                    ))
                }
                Some(Value::String(s)) if s.is_empty() => {
                    return Err(ApiError::bad_param("input", "'input' must not be empty"))
                }
                Some(Value::Array(a)) if a.is_empty() => {
                    return Err(ApiError::bad_param("input", "'input' must not be empty"))
                }
                Some(Value::String(_)) | Some(Value::Array(_)) => {}
                Some(_) => {
                    return Err(ApiError::bad_param(
                        "input",
                        "Invalid type for 'input': expected a string or an array",
                    ))
                }
            }
            if stream_flag(&small)? {
                return Err(ApiError::bad_param(
                    "stream",
                    "Embeddings cannot be streamed",
                ));
            }
            ("/embeddings", false, false)
        }
    };
    edits.extend(top.model_edit(ctx.model));
    edits.sort_by_key(|(r, _)| r.start);
    let (prefix, replaced) = edit_prefix(top.body(), &edits);
    Ok((prefix, replaced, suffix, stream, include_usage))
}

/// OpenAI `usage` object → [`Usage`] (`None` without `prompt_tokens`, or
/// when the object cannot be read).
pub fn parse_usage(u: &Value) -> Option<Usage> {
    native::Usage::deserialize(u).ok()?.usage()
}

/// What the filter reads of an OpenAI-shaped answer or stream chunk, which
/// otherwise passes through untouched: the usage, and whether a chunk's
/// `choices` is empty (the usage-only chunk). Every other field is skipped
/// unparsed. Each field's name and type, here only.
mod native {
    use std::fmt;

    use serde::de::{Deserializer, IgnoredAny, SeqAccess, Visitor};
    use serde::Deserialize;

    /// An answer or chunk.
    #[derive(Deserialize)]
    pub(super) struct Answer {
        pub usage: Option<Usage>,
        #[serde(default)]
        pub choices: EmptyArray,
    }

    #[derive(Deserialize)]
    pub(super) struct Usage {
        pub prompt_tokens: Option<u64>,
        pub completion_tokens: Option<u64>,
        pub prompt_tokens_details: Option<Details>,
    }

    #[derive(Deserialize)]
    pub(super) struct Details {
        pub cached_tokens: Option<u64>,
    }

    impl Usage {
        pub fn usage(&self) -> Option<super::Usage> {
            Some(super::Usage {
                prompt_tokens: self.prompt_tokens?,
                completion_tokens: self.completion_tokens.unwrap_or(0),
                cached_tokens: self
                    .prompt_tokens_details
                    .as_ref()
                    .and_then(|d| d.cached_tokens)
                    .unwrap_or(0),
                cache_write_tokens: 0,
                web_searches: 0,
            })
        }
    }

    /// Is the value an empty array? Any JSON is accepted, its items skipped.
    #[derive(Default)]
    pub(super) struct EmptyArray(pub bool);

    impl<'de> Deserialize<'de> for EmptyArray {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = bool;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("any JSON value")
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
                    let mut empty = true;
                    while seq.next_element::<IgnoredAny>()?.is_some() {
                        empty = false;
                    }
                    Ok(empty)
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<bool, A::Error> {
                    IgnoredAny.visit_map(map).map(|_| false)
                }
                fn visit_bool<E>(self, _: bool) -> Result<bool, E> {
                    Ok(false)
                }
                fn visit_i64<E>(self, _: i64) -> Result<bool, E> {
                    Ok(false)
                }
                fn visit_u64<E>(self, _: u64) -> Result<bool, E> {
                    Ok(false)
                }
                fn visit_f64<E>(self, _: f64) -> Result<bool, E> {
                    Ok(false)
                }
                fn visit_str<E>(self, _: &str) -> Result<bool, E> {
                    Ok(false)
                }
                fn visit_unit<E>(self) -> Result<bool, E> {
                    Ok(false)
                }
                fn visit_none<E>(self) -> Result<bool, E> {
                    Ok(false)
                }
            }
            d.deserialize_any(V).map(EmptyArray)
        }
    }
}

/// The message of an OpenAI-style (or similar) error body.
pub fn error_message(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let s = |x: &Value| x.as_str().map(str::to_string);
    match v.get("error") {
        Some(Value::String(m)) => Some(m.clone()),
        Some(e) => e.get("message").and_then(s),
        None => v
            .get("message")
            .and_then(s)
            .or_else(|| v.get("detail").and_then(s)),
    }
}

pub(crate) struct OpenAiStream {
    parser: SseParser,
    strip_usage: bool,
    usage: Option<Usage>,
    failed: bool,
    first_token: bool,
    /// Azure: content-filter chunks are made valid or dropped
    /// ([`azure_chunk`]).
    azure: bool,
}

impl OpenAiStream {
    pub(crate) fn new(ctx: &ResponseCtx, azure: bool) -> OpenAiStream {
        OpenAiStream {
            parser: SseParser::default(),
            strip_usage: !ctx.include_usage,
            usage: None,
            failed: false,
            first_token: false,
            azure,
        }
    }
}

impl SseEvents for OpenAiStream {
    fn parser(&mut self) -> &mut SseParser {
        &mut self.parser
    }

    fn is_done(&self) -> bool {
        self.failed
    }

    fn on_event(&mut self, ev: Event, out: &mut Vec<u8>) {
        if ev.data.is_empty() && ev.event.is_empty() {
            return;
        }
        let data = ev.data.as_str();
        if !self.first_token
            && ((data.contains("\"content\":\"") && !data.contains("\"content\":\"\""))
                || data.contains("\"tool_calls\""))
        {
            self.first_token = true;
        }
        let rewritten;
        let data = if self.azure && azure_annotation(data) {
            match azure_chunk(data) {
                AzureChunk::Drop => return,
                AzureChunk::Keep => data,
                AzureChunk::Rewritten(s) => {
                    rewritten = s;
                    rewritten.as_str()
                }
            }
        } else {
            data
        };
        // Only chunks that carry usage need parsing.
        if data != "[DONE]" && data.contains("\"usage\"") {
            if let Ok(v) = read::parse_str::<native::Answer>(data) {
                if let Some(u) = v.usage.as_ref().and_then(native::Usage::usage) {
                    self.usage = Some(u);
                    if self.strip_usage && v.choices.0 {
                        return;
                    }
                }
            }
        }
        if !ev.event.is_empty() {
            out.extend_from_slice(b"event: ");
            out.extend_from_slice(ev.event.as_bytes());
            out.push(b'\n');
        }
        for line in data.split('\n') {
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
        }
        out.push(b'\n');
    }

    fn error_event(&mut self, out: &mut Vec<u8>, status: u16, message: &str) {
        push_stream_error(out, status, message);
        self.failed = true;
    }
}

/// Could this Azure chunk be a content-filter one? Cheap: the others are
/// passed on without being parsed.
fn azure_annotation(data: &str) -> bool {
    data != "[DONE]"
        && (data.contains("\"object\":\"\"")
            || data.contains("\"choices\":[]")
            || data.contains("filter_offsets\"")
            || data.contains("\"prompt_filter_results\"")
            || !data.contains("\"choices\""))
}

enum AzureChunk {
    Drop,
    Keep,
    Rewritten(String),
}

/// Azure interleaves content-filter chunks with the completion: one with
/// `prompt_filter_results` and no choices opens the stream, and with the
/// asynchronous filter others carry only `content_filter_results` /
/// `content_filter_offsets`. They have an empty `object`, `id` and `model`,
/// which OpenAI clients reject or misread. A chunk with no usage and no
/// delta with content is dropped; one that does carry them but is not a
/// `chat.completion.chunk` is labelled as one.
fn azure_chunk(data: &str) -> AzureChunk {
    let Ok(Value::Object(mut v)) = serde_json::from_str::<Value>(data) else {
        return AzureChunk::Keep;
    };
    let has_usage = v.get("usage").is_some_and(|u| !u.is_null());
    let has_delta = v
        .get("choices")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("delta")
                    .and_then(Value::as_object)
                    .is_some_and(|d| !d.is_empty())
                    || c.get("finish_reason").is_some_and(|f| !f.is_null())
            })
        });
    if !has_usage && !has_delta {
        return AzureChunk::Drop;
    }
    if v.get("object").and_then(Value::as_str) == Some(CHUNK_OBJECT) {
        return AzureChunk::Keep;
    }
    v.insert("object".into(), Value::from(CHUNK_OBJECT));
    v.entry("choices")
        .or_insert_with(|| Value::Array(Vec::new()));
    match serde_json::to_string(&v) {
        Ok(s) => AzureChunk::Rewritten(s),
        Err(_) => AzureChunk::Drop,
    }
}

const CHUNK_OBJECT: &str = "chat.completion.chunk";

impl StreamTranslator for OpenAiStream {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        feed_sse(self, chunk, out);
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        finish_sse(self, out);
    }

    fn usage(&self) -> Option<Usage> {
        self.usage
    }

    fn first_token_seen(&self) -> bool {
        self.first_token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\n\
data: [DONE]\n\n";

    fn run(include_usage: bool, input: &[u8], split: usize) -> (Vec<u8>, Option<Usage>) {
        let ctx = ResponseCtx {
            endpoint: Endpoint::Chat,
            stream: true,
            include_usage,
            created: 0,
            json_mode: false,
            prompt_estimate: 0,
            embed_base64: false,
            model: String::new(),
        };
        let mut t = OpenAiOpenAi.stream(&ctx);
        let mut out = Vec::new();
        let (a, b) = input.split_at(split);
        t.feed(a, &mut out);
        t.feed(b, &mut out);
        t.finish(&mut out);
        (out, t.usage())
    }

    #[test]
    fn passthrough_every_split() {
        let input = STREAM.as_bytes();
        for i in 0..=input.len() {
            let (out, usage) = run(true, input, i);
            assert_eq!(out, input, "split {i}");
            assert_eq!(
                usage,
                Some(Usage {
                    prompt_tokens: 5,
                    completion_tokens: 2,
                    cached_tokens: 0,
                    cache_write_tokens: 0,
                    web_searches: 0,
                })
            );
        }
    }

    #[test]
    fn strips_injected_usage_every_split() {
        let input = STREAM.as_bytes();
        let expected: String = STREAM
            .split("\n\n")
            .filter(|e| !e.contains("\"choices\":[]"))
            .filter(|e| !e.is_empty())
            .map(|e| format!("{e}\n\n"))
            .collect();
        for i in 0..=input.len() {
            let (out, usage) = run(false, input, i);
            assert_eq!(String::from_utf8(out).unwrap(), expected, "split {i}");
            assert_eq!(usage.unwrap().prompt_tokens, 5);
        }
    }

    #[test]
    fn error_messages() {
        assert_eq!(
            error_message(br#"{"error":{"message":"bad"}}"#).as_deref(),
            Some("bad")
        );
        assert_eq!(error_message(br#"{"message":"m"}"#).as_deref(), Some("m"));
        assert_eq!(error_message(br#"{"detail":"d"}"#).as_deref(), Some("d"));
        assert_eq!(error_message(b"nope"), None);
    }
}
