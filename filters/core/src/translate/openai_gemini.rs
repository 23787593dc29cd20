//! OpenAI → Google Gemini (`generateContent`, `streamGenerateContent?alt=sse`,
//! `batchEmbedContents`), and back.
//!
//! Request: system/developer messages → `systemInstruction`; turns →
//! `contents` with roles `user` / `model`; text → `text` parts, data: URL
//! images → `inlineData`; assistant `tool_calls` → `functionCall` parts;
//! `tool` messages → `functionResponse` parts named after the earlier call
//! (a JSON-object result is sent as the response, anything else as
//! `{"content": text}`); `tools` → one `functionDeclarations` tool;
//! `tool_choice` → `toolConfig.functionCallingConfig` (`AUTO`, `NONE`,
//! `ANY`, `ANY` + `allowedFunctionNames`); `generationConfig` from
//! temperature, top_p, max(_completion)_tokens, stop, n, seed, penalties and
//! `response_format` (`responseMimeType: application/json`,
//! `responseJsonSchema`). Tool and answer schemas go as the client wrote
//! them, in `parametersJsonSchema` and `responseJsonSchema`, which take full
//! JSON Schema (v1beta since 2025-08): `parameters` and `responseSchema`
//! take only Gemini's OpenAPI subset (the 22 fields of its `Schema`) and
//! refuse the rest (`$schema`, `additionalProperties`, `const`,
//! `exclusiveMinimum`, `propertyNames`…), which agents' tool schemas use.
//!
//! Response: text parts (not thoughts) → `content`, `functionCall` →
//! `tool_calls` (ids from the call's `id`, else `call_<n>`); `finishReason`
//! STOP → stop (tool_calls when calls were made), MAX_TOKENS → length,
//! SAFETY, RECITATION, BLOCKLIST, PROHIBITED_CONTENT, SPII, IMAGE_SAFETY,
//! LANGUAGE → content_filter, other → stop; a prompt blocked by
//! `promptFeedback` → empty content with content_filter; `usageMetadata`
//! → usage (thought tokens count as completion, cached content as cached).

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::chat_ir::{self, Accept, Part, Role, Tool, ToolChoice};
use super::chunk::ChunkWriter;
use super::read::{self, Unreadable};
use super::{
    assistant_message, embedding_base64, embedding_dimensions, embedding_inputs, embedding_item,
    embedding_list, estimate_tokens, feed_sse, finish_sse, upstream_error, usage_json, Endpoint,
    RequestCtx, ResponseCtx, SseEvents, StreamTranslator, Translated, Translator, UpstreamRequest,
    Usage,
};
use crate::codec::sse::{Event, SseParser};
use crate::config::{Key, Kind, Provider};
use crate::error::{ApiError, SERVER};

pub struct OpenAiGemini;

const PROVIDER: &str = "gemini";

/// The tools as Gemini `functionDeclarations`, each schema whole in
/// `parametersJsonSchema`; a function without properties declares none.
fn function_declarations(tools: &[Tool]) -> Vec<Value> {
    tools
        .iter()
        .map(|t| {
            let empty = t
                .parameters
                .get("properties")
                .and_then(Value::as_object)
                .is_none_or(Map::is_empty);
            Value::Object(
                t.declared((!empty).then(|| ("parametersJsonSchema", t.parameters.clone()))),
            )
        })
        .collect()
}

/// A Gemini body of a chat request, with what it dropped and lowered.
struct Generate {
    body: Value,
    stream: bool,
    dropped: Vec<&'static str>,
    lowered: Vec<String>,
}

/// OpenAI's `reasoning_effort` as a Gemini thinking budget (tokens; Gemini
/// 2.5 Flash takes up to 24,576, Pro up to 32,768).
fn thinking_budget(effort: &str) -> Option<i64> {
    match effort {
        "minimal" | "low" => Some(1024),
        "medium" => Some(8192),
        "high" | "xhigh" => Some(24576),
        _ => None,
    }
}

fn chat_request(ctx: &RequestCtx<'_>, body: &Value) -> Result<Generate, ApiError> {
    let mut chat = chat_ir::parse(
        body,
        &Accept {
            provider: PROVIDER,
            sampling_extras: true,
        },
    )?;
    let lowered = chat.lower_to(ctx.model_cfg.max_output_tokens);
    let budget = chat
        .reasoning_effort
        .as_deref()
        .filter(|_| ctx.model_cfg.reasoning)
        .and_then(thinking_budget);
    if budget.is_some() {
        chat.mapped("reasoning_effort");
    }
    let mut contents = Vec::new();
    for t in &chat.turns {
        let mut parts = Vec::new();
        for p in &t.parts {
            parts.push(match p {
                Part::Text(s) => json!({"text": s}),
                Part::Image { media, data } => {
                    json!({"inlineData": {"mimeType": media, "data": data}})
                }
                Part::ImageUrl { at, .. } => return Err(chat_ir::image_url_refused(at, PROVIDER)),
                Part::ToolCall { name, args, .. } => {
                    json!({"functionCall": {"name": name, "args": args}})
                }
                Part::ToolResult { name, content, .. } => {
                    let response = match serde_json::from_str::<Value>(content) {
                        Ok(v @ Value::Object(_)) => v,
                        _ => json!({"content": content}),
                    };
                    json!({"functionResponse": {"name": name, "response": response}})
                }
            });
        }
        let role = match t.role {
            Role::User => "user",
            Role::Assistant => "model",
        };
        contents.push(json!({"role": role, "parts": parts}));
    }
    let mut out = Map::new();
    out.insert("contents".into(), Value::Array(contents));
    if !chat.system.is_empty() {
        out.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": chat.system.join("\n\n")}]}),
        );
    }
    if !chat.tools.is_empty() {
        let decls = function_declarations(&chat.tools);
        out.insert("tools".into(), json!([{"functionDeclarations": decls}]));
        if let Some(c) = &chat.tool_choice {
            let cfg = match c {
                ToolChoice::Auto => json!({"mode": "AUTO"}),
                ToolChoice::None => json!({"mode": "NONE"}),
                ToolChoice::Required => json!({"mode": "ANY"}),
                ToolChoice::Named(n) => json!({"mode": "ANY", "allowedFunctionNames": [n]}),
            };
            out.insert("toolConfig".into(), json!({"functionCallingConfig": cfg}));
        }
    }
    let mut gc = Map::new();
    if let Some(t) = chat.temperature {
        gc.insert("temperature".into(), t);
    }
    if let Some(t) = chat.top_p {
        gc.insert("topP".into(), t);
    }
    if let Some(n) = chat.max_tokens {
        gc.insert("maxOutputTokens".into(), json!(n));
    }
    if !chat.stop.is_empty() {
        gc.insert("stopSequences".into(), json!(chat.stop));
    }
    if let Some(n) = chat.n {
        gc.insert("candidateCount".into(), json!(n));
    }
    if let Some(s) = chat.seed {
        gc.insert("seed".into(), s);
    }
    if let Some(p) = chat.presence_penalty {
        gc.insert("presencePenalty".into(), p);
    }
    if let Some(p) = chat.frequency_penalty {
        gc.insert("frequencyPenalty".into(), p);
    }
    if let Some(schema) = &chat.json {
        gc.insert("responseMimeType".into(), json!("application/json"));
        if let Some(s) = schema {
            gc.insert("responseJsonSchema".into(), s.clone());
        }
    }
    if let Some(b) = budget {
        gc.insert("thinkingConfig".into(), json!({"thinkingBudget": b}));
    }
    if !gc.is_empty() {
        out.insert("generationConfig".into(), Value::Object(gc));
    }
    Ok(Generate {
        body: Value::Object(out),
        stream: chat.stream,
        dropped: chat.dropped,
        lowered,
    })
}

impl Translator for OpenAiGemini {
    fn kind(&self) -> Kind {
        Kind::Gemini
    }

    fn request(&self, ctx: &RequestCtx<'_>, body: &Value) -> Result<UpstreamRequest, ApiError> {
        let base = &ctx.provider.base_path;
        match ctx.endpoint {
            Endpoint::Chat | Endpoint::Responses => {
                let include_usage = super::include_usage_flag(body)?;
                let g = chat_request(ctx, body)?;
                let (v, stream) = (g.body, g.stream);
                let path = if stream {
                    format!("{base}/models/{}:streamGenerateContent?alt=sse", ctx.model)
                } else {
                    format!("{base}/models/{}:generateContent", ctx.model)
                };
                Ok(UpstreamRequest {
                    path,
                    body: serde_json::to_vec(&v)
                        .map_err(|e| ApiError::invalid_json(&e.to_string()))?,
                    stream,
                    include_usage,
                    dropped: g.dropped,
                    lowered: g.lowered,
                    ..UpstreamRequest::default()
                })
            }
            Endpoint::Embeddings => {
                if let Some((k, _)) = body.as_object().and_then(|o| {
                    o.iter().find(|(k, v)| {
                        !v.is_null()
                            && !matches!(
                                k.as_str(),
                                "model" | "input" | "encoding_format" | "dimensions" | "user"
                            )
                    })
                }) {
                    return Err(ApiError::unsupported_param(k, PROVIDER));
                }
                let inputs = embedding_inputs(body, PROVIDER)?;
                let base64 = embedding_base64(body)?;
                let dims = embedding_dimensions(body)?;
                let model = format!("models/{}", ctx.model);
                let requests: Vec<Value> = inputs
                    .iter()
                    .map(|t| {
                        let mut r = json!({"model": model, "content": {"parts": [{"text": t}]}});
                        if let (Some(d), Some(o)) = (dims, r.as_object_mut()) {
                            o.insert("outputDimensionality".into(), json!(d));
                        }
                        r
                    })
                    .collect();
                let estimate = inputs.iter().map(|t| estimate_tokens(t)).sum();
                Ok(UpstreamRequest {
                    path: format!("{base}/models/{}:batchEmbedContents", ctx.model),
                    body: serde_json::to_vec(&json!({"requests": requests}))
                        .map_err(|e| ApiError::invalid_json(&e.to_string()))?,
                    stream: false,
                    include_usage: false,
                    json_mode: false,
                    prompt_estimate: estimate,
                    embed_base64: base64,
                    fan_out: Vec::new(),
                    ..UpstreamRequest::default()
                })
            }
        }
    }

    fn auth_headers(
        &self,
        _provider: &Provider,
        key: &Key,
        _req: &UpstreamRequest,
        _now_ms: u64,
    ) -> Result<Vec<(&'static str, String)>, ApiError> {
        Ok(vec![crate::credentials::api_key("x-goog-api-key", key)])
    }

    fn response(&self, ctx: &ResponseCtx, body: &[u8]) -> Result<Translated, ApiError> {
        let (out, usage) = match ctx.endpoint {
            Endpoint::Embeddings => {
                embeddings_response(ctx, &read::parse(body).map_err(unreadable)?)?
            }
            Endpoint::Chat | Endpoint::Responses => {
                chat_response(ctx, &read::parse(body).map_err(unreadable)?)
            }
        };
        let bytes = serde_json::to_vec(&out).map_err(|_| bad_upstream())?;
        Ok(Translated {
            body: Some(bytes),
            usage: Some(usage),
        })
    }

    fn error(&self, status: u16, body: &[u8]) -> ApiError {
        let v: Option<Value> = serde_json::from_slice(body).ok();
        let e = v.as_ref().and_then(|v| v.get("error"));
        let msg = e
            .and_then(|e| e.get("message"))
            .and_then(Value::as_str)
            .map(str::to_string);
        // Gemini answers a bad API key with 400 API_KEY_INVALID: it is the
        // gateway's credential, not the client's request.
        let key_invalid = body.windows(15).any(|w| w == b"API_KEY_INVALID");
        if key_invalid {
            return upstream_error(401, None);
        }
        upstream_error(status, msg)
    }

    fn stream(&self, ctx: &ResponseCtx) -> Box<dyn StreamTranslator> {
        Box::new(GeminiStream::new(ctx))
    }
}

fn bad_upstream() -> ApiError {
    ApiError::new(
        502,
        SERVER,
        "provider_error",
        "The provider's answer could not be read",
    )
}

fn unreadable(e: Unreadable) -> ApiError {
    ApiError {
        message: e.message(&bad_upstream().message),
        ..bad_upstream()
    }
}

fn embeddings_response(
    ctx: &ResponseCtx,
    v: &native::Embeddings,
) -> Result<(Value, Usage), ApiError> {
    let Some(list) = &v.embeddings else {
        return Err(bad_upstream());
    };
    let mut data = Vec::with_capacity(list.len());
    for (i, e) in list.iter().enumerate() {
        let vals = e.values.as_ref().ok_or_else(bad_upstream)?;
        data.push(embedding_item(i, vals, ctx.embed_base64));
    }
    let usage = Usage {
        prompt_tokens: ctx.prompt_estimate,
        completion_tokens: 0,
        cached_tokens: 0,
        cache_write_tokens: 0,
        web_searches: 0,
    };
    Ok((embedding_list(data, &ctx.model, usage.prompt_tokens), usage))
}

/// Gemini `finishReason` → OpenAI `finish_reason`.
pub fn finish_reason(r: &str) -> &'static str {
    match r {
        "MAX_TOKENS" => "length",
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY"
        | "LANGUAGE" => "content_filter",
        _ => "stop",
    }
}

/// `usageMetadata` → [`Usage`] (one that cannot be read counts nothing).
pub fn parse_usage(u: &Value) -> Usage {
    native::UsageMetadata::deserialize(u)
        .map(|u| u.usage())
        .unwrap_or_default()
}

/// Text and calls of the first candidate.
fn candidate_parts(
    c: &native::Candidate,
    calls_from: usize,
    text: &mut String,
    calls: &mut Vec<Value>,
) {
    let Some(parts) = c.content.as_ref().and_then(|c| c.parts.as_ref()) else {
        return;
    };
    for p in parts {
        if p.thought == Some(true) {
            continue;
        }
        if let Some(t) = &p.text {
            text.push_str(t);
        } else if let Some(fc) = &p.function_call {
            let n = calls_from + calls.len();
            let id = fc
                .id
                .as_deref()
                .map(str::to_string)
                .unwrap_or_else(|| chat_ir::tool_call_id("gemini", n));
            let args = fc
                .args
                .as_ref()
                .map_or_else(|| "{}".into(), Value::to_string);
            calls.push(json!({
                "id": id,
                "type": "function",
                "function": {"name": fc.name, "arguments": args},
            }));
        }
    }
}

/// `chatcmpl-<responseId>`, or `chatcmpl-gemini` without one.
fn completion_id(v: &native::Response) -> String {
    v.response_id
        .as_deref()
        .map(|s| format!("chatcmpl-{s}"))
        .unwrap_or_else(|| "chatcmpl-gemini".into())
}

fn chat_response(ctx: &ResponseCtx, v: &native::Response) -> (Value, Usage) {
    let usage = v
        .usage_metadata
        .as_ref()
        .map(native::UsageMetadata::usage)
        .unwrap_or_default();
    let mut choices = Vec::new();
    for (i, c) in v.candidates.iter().flatten().enumerate() {
        let mut text = String::new();
        let mut calls = Vec::new();
        candidate_parts(c, 0, &mut text, &mut calls);
        let finish = match c.finish_reason.as_deref() {
            Some("STOP") | None if !calls.is_empty() => "tool_calls",
            Some(r) => finish_reason(r),
            None => "stop",
        };
        let message = assistant_message(text, calls);
        let index = c.index.unwrap_or(i as u64);
        choices.push(
            json!({"index": index, "message": message, "logprobs": null, "finish_reason": finish}),
        );
    }
    if choices.is_empty() {
        // Prompt blocked (promptFeedback.blockReason): no candidates.
        choices.push(
            json!({"index": 0, "message": {"role": "assistant", "content": "", "refusal": null},
            "logprobs": null, "finish_reason": "content_filter"}),
        );
    }
    let model = v.model_version.as_deref().unwrap_or(&ctx.model);
    let out = json!({
        "id": completion_id(v),
        "object": "chat.completion",
        "created": ctx.created,
        "model": model,
        "choices": choices,
        "usage": usage_json(&usage),
    });
    (out, usage)
}

/// Gemini's answers (`GenerateContentResponse`, one per stream event too)
/// and embeddings as the translator reads them: each field's name and type,
/// here only. Unknown fields are skipped; a known field of the wrong type
/// makes the answer (or event) unreadable.
mod native {
    use serde::Deserialize;
    use serde_json::Value;

    use crate::translate::read::Str;

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub(super) struct Response<'a> {
        #[serde(borrow)]
        pub candidates: Option<Vec<Candidate<'a>>>,
        pub usage_metadata: Option<UsageMetadata>,
        #[serde(borrow)]
        pub model_version: Option<Str<'a>>,
        #[serde(borrow)]
        pub response_id: Option<Str<'a>>,
        #[serde(borrow)]
        pub prompt_feedback: Option<PromptFeedback<'a>>,
        /// In a stream: the error that ends it.
        #[serde(borrow)]
        pub error: Option<Error<'a>>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub(super) struct Candidate<'a> {
        #[serde(borrow)]
        pub content: Option<Content<'a>>,
        #[serde(borrow)]
        pub finish_reason: Option<Str<'a>>,
        pub index: Option<u64>,
    }

    #[derive(Deserialize)]
    pub(super) struct Content<'a> {
        #[serde(borrow)]
        pub parts: Option<Vec<Part<'a>>>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub(super) struct Part<'a> {
        #[serde(borrow)]
        pub text: Option<Str<'a>>,
        /// A thought summary, not part of the answer.
        pub thought: Option<bool>,
        #[serde(borrow)]
        pub function_call: Option<FunctionCall<'a>>,
    }

    #[derive(Deserialize)]
    pub(super) struct FunctionCall<'a> {
        #[serde(borrow)]
        pub id: Option<Str<'a>>,
        #[serde(borrow)]
        pub name: Option<Str<'a>>,
        /// Re-serialized compactly as OpenAI `arguments`.
        pub args: Option<Value>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub(super) struct UsageMetadata {
        pub prompt_token_count: Option<u64>,
        pub tool_use_prompt_token_count: Option<u64>,
        pub candidates_token_count: Option<u64>,
        pub thoughts_token_count: Option<u64>,
        pub cached_content_token_count: Option<u64>,
    }

    impl UsageMetadata {
        pub fn usage(&self) -> super::Usage {
            let g = |n: Option<u64>| n.unwrap_or(0);
            super::Usage {
                prompt_tokens: g(self.prompt_token_count) + g(self.tool_use_prompt_token_count),
                completion_tokens: g(self.candidates_token_count) + g(self.thoughts_token_count),
                cached_tokens: g(self.cached_content_token_count),
                cache_write_tokens: 0,
                web_searches: 0,
            }
        }
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub(super) struct PromptFeedback<'a> {
        #[serde(borrow)]
        pub block_reason: Option<Str<'a>>,
    }

    #[derive(Deserialize)]
    pub(super) struct Error<'a> {
        #[serde(borrow)]
        pub status: Option<Str<'a>>,
        #[serde(borrow)]
        pub message: Option<Str<'a>>,
    }

    /// `batchEmbedContents`' answer.
    #[derive(Deserialize)]
    pub(super) struct Embeddings {
        pub embeddings: Option<Vec<Embedding>>,
    }

    #[derive(Deserialize)]
    pub(super) struct Embedding {
        pub values: Option<Vec<f64>>,
    }
}

/// Gemini SSE (one `GenerateContentResponse` per event) → OpenAI chunks.
pub struct GeminiStream {
    parser: SseParser,
    w: ChunkWriter,
    model: String,
    started: bool,
    next_tool: usize,
    usage: Option<Usage>,
    finish: Option<&'static str>,
}

impl GeminiStream {
    pub fn new(ctx: &ResponseCtx) -> GeminiStream {
        GeminiStream {
            parser: SseParser::default(),
            w: ChunkWriter::new(ctx),
            model: ctx.model.clone(),
            started: false,
            next_tool: 0,
            usage: None,
            finish: None,
        }
    }

    fn chunk(&mut self, out: &mut Vec<u8>, delta: &Value, finish: Option<&str>) {
        self.w.delta_value(out, delta, finish);
    }
}

impl SseEvents for GeminiStream {
    fn parser(&mut self) -> &mut SseParser {
        &mut self.parser
    }

    fn is_done(&self) -> bool {
        self.w.is_done()
    }

    fn on_event(&mut self, ev: Event, out: &mut Vec<u8>) {
        if self.w.is_done() || ev.data.is_empty() {
            return;
        }
        let v: native::Response = match read::parse_str(&ev.data) {
            Ok(v) => v,
            Err(e) => {
                self.error_event(out, 502, &e.message("Malformed stream from the provider"));
                return;
            }
        };
        if let Some(e) = &v.error {
            let status = match e.status.as_deref() {
                Some("UNAVAILABLE") => 503,
                Some("RESOURCE_EXHAUSTED") => 429,
                _ => 502,
            };
            let msg = e.message.as_deref().unwrap_or("Provider error").to_string();
            self.error_event(out, status, &msg);
            return;
        }
        if !self.started {
            self.started = true;
            let id = completion_id(&v);
            if let Some(m) = v.model_version.as_deref() {
                self.model = m.to_string();
            }
            self.w.open(&id, &self.model);
            self.chunk(out, &json!({"role": "assistant", "content": ""}), None);
        }
        if let Some(u) = &v.usage_metadata {
            self.usage = Some(u.usage());
        }
        let cand = v.candidates.as_ref().and_then(|c| c.first());
        if let Some(c) = cand {
            let mut text = String::new();
            let mut calls = Vec::new();
            candidate_parts(c, self.next_tool, &mut text, &mut calls);
            if !text.is_empty() {
                self.chunk(out, &json!({"content": text}), None);
            }
            for mut call in calls {
                if let Some(o) = call.as_object_mut() {
                    o.insert("index".into(), json!(self.next_tool));
                }
                self.next_tool += 1;
                self.chunk(out, &json!({"tool_calls": [call]}), None);
            }
            if let Some(r) = c.finish_reason.as_deref() {
                self.finish = Some(finish_reason(r));
            }
        } else if v
            .prompt_feedback
            .as_ref()
            .is_some_and(|p| p.block_reason.is_some())
        {
            self.finish = Some("content_filter");
        }
    }

    fn error_event(&mut self, out: &mut Vec<u8>, status: u16, message: &str) {
        self.w.fail(out, status, message);
    }
}

impl StreamTranslator for GeminiStream {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        feed_sse(self, chunk, out);
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        if !finish_sse(self, out) {
            return;
        }
        let Some(mut f) = self.finish else {
            self.error_event(out, 502, "The provider's stream ended early");
            return;
        };
        if f == "stop" && self.next_tool > 0 {
            f = "tool_calls";
        }
        self.w.end(out, f, self.usage.unwrap_or_default());
    }

    fn usage(&self) -> Option<Usage> {
        self.usage
    }

    fn first_token_seen(&self) -> bool {
        self.w.first_token_seen()
    }
}
