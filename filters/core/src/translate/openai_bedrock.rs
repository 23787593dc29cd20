//! OpenAI → Amazon Bedrock Converse / ConverseStream (and Titan text
//! embeddings through InvokeModel), signed with SigV4 ([`crate::credentials::sigv4`]).
//!
//! Request: system/developer messages → `system` text blocks; turns →
//! `messages` with content blocks (`text`; data: URL images → `image` with
//! `format` and base64 `source.bytes`; assistant tool calls → `toolUse`;
//! tool messages → `toolResult` in the next user turn, `json` when the
//! result is a JSON object, else `text`); `max(_completion)_tokens`,
//! `temperature`, `top_p`, `stop` → `inferenceConfig`; `tools` →
//! `toolConfig.tools[].toolSpec` (`inputSchema.json`), `tool_choice`
//! `auto` / `required` / named → `auto` / `any` / `tool`; `response_format`
//! `json_object` / `json_schema` → one forced tool ([`JSON_TOOL`]) whose
//! input schema is the schema, its input answered as plain `content` with
//! `finish_reason: "stop"` (streamed as content deltas). Refused by name:
//! `tool_choice: "none"` (Converse has no such mode), json modes together
//! with `tools`, `n` > 1, non-zero penalties. `seed`, `user` and the other
//! harmless OpenAI fields are accepted and not sent.
//!
//! Response: `text` blocks → `content`, `toolUse` → `tool_calls`;
//! `stopReason` end_turn / stop_sequence → stop, max_tokens → length,
//! tool_use → tool_calls, guardrail_intervened / content_filtered →
//! content_filter; usage `inputTokens` (+ cache read/write) / `outputTokens`.
//!
//! Stream: the event-stream frames are decoded incrementally
//! ([`crate::codec::eventstream`], CRC-checked); `messageStart` → role chunk,
//! `contentBlockStart` (tool use) → tool call header, `contentBlockDelta`
//! text / tool input fragments → content / argument deltas (never
//! re-split), `messageStop` → finish reason, `metadata` → usage and the end
//! of the OpenAI stream; exception messages and framing errors → an OpenAI
//! error event and `[DONE]`.

use serde_json::{json, Map, Value};

use super::chat_ir::{self, Accept, Part, Role, ToolChoice};
use super::chunk::ChunkWriter;
use super::openai_openai::error_message;
use super::{
    assistant_message, embedding_base64, embedding_dimensions, embedding_inputs, embedding_item,
    embedding_list, upstream_error, usage_json, Endpoint, RequestCtx, ResponseCtx,
    StreamTranslator, Translated, Translator, UpstreamRequest, Usage,
};
use crate::codec::eventstream::{Decoder, Message};
use crate::config::{Api, Key, Kind, Provider};
use crate::credentials::sigv4::{self, uri_encode, SignInput};
use crate::error::{ApiError, INVALID_REQUEST, SERVER};

pub struct OpenAiBedrock;

const PROVIDER: &str = "bedrock";
/// Embedding models served through InvokeModel (model id prefix).
pub const EMBEDDING_PREFIX: &str = "amazon.titan-embed-text";
/// Most inputs of one embeddings request (one Titan call each).
pub const MAX_EMBEDDING_INPUTS: usize = 64;

/// Name of the forced tool that carries JSON-mode answers.
pub const JSON_TOOL: &str = "json_response";

/// → (Converse body, stream, json_mode).
fn chat_request(body: &Value) -> Result<(Value, bool, bool), ApiError> {
    let mut chat = chat_ir::parse(
        body,
        &Accept {
            provider: PROVIDER,
            sampling_extras: false,
        },
    )?;
    let json_mode = chat.json.is_some();
    if let Some(schema) = chat.json.take() {
        if !chat.tools.is_empty() {
            return Err(ApiError {
                message: "'response_format' json modes cannot be combined with 'tools' for provider 'bedrock'".into(),
                ..ApiError::unsupported_param("response_format", PROVIDER)
            });
        }
        let schema = schema.unwrap_or_else(|| json!({"type": "object"}));
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(ApiError {
                message: "Provider 'bedrock' supports 'response_format.json_schema.schema' only with \"type\": \"object\" at the top".into(),
                ..ApiError::unsupported_param("response_format.json_schema.schema", PROVIDER)
            });
        }
        chat.tools.push(chat_ir::Tool {
            name: JSON_TOOL.into(),
            description: Some("Give the answer as JSON matching this schema.".into()),
            parameters: schema,
        });
        chat.tool_choice = Some(ToolChoice::Named(JSON_TOOL.into()));
    }
    if chat.tool_choice == Some(ToolChoice::None) {
        return Err(ApiError {
            message: "tool_choice 'none' is not supported by provider 'bedrock' (Converse has auto, any and a named tool); leave 'tools' out instead".into(),
            ..ApiError::unsupported_param("tool_choice", PROVIDER)
        });
    }
    let mut messages = Vec::new();
    for t in &chat.turns {
        let mut blocks = Vec::new();
        for p in &t.parts {
            blocks.push(match p {
                Part::Text(s) => json!({"text": s}),
                Part::Image { media, data } => {
                    let format = media.strip_prefix("image/").unwrap_or("png");
                    json!({"image": {"format": format, "source": {"bytes": data}}})
                }
                Part::ImageUrl { at, .. } => return Err(chat_ir::image_url_refused(at, PROVIDER)),
                Part::ToolCall { id, name, args } => {
                    json!({"toolUse": {"toolUseId": id, "name": name, "input": args}})
                }
                Part::ToolResult { id, content, .. } => {
                    let c = match serde_json::from_str::<Value>(content) {
                        Ok(v @ Value::Object(_)) => json!([{"json": v}]),
                        _ if content.trim().is_empty() => json!([{"json": {}}]),
                        _ => json!([{"text": content}]),
                    };
                    json!({"toolResult": {"toolUseId": id, "content": c}})
                }
            });
        }
        let role = match t.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        messages.push(json!({"role": role, "content": blocks}));
    }
    let mut out = Map::new();
    out.insert("messages".into(), Value::Array(messages));
    if !chat.system.is_empty() {
        out.insert(
            "system".into(),
            Value::Array(chat.system.iter().map(|s| json!({"text": s})).collect()),
        );
    }
    let mut ic = Map::new();
    if let Some(n) = chat.max_tokens {
        ic.insert("maxTokens".into(), json!(n));
    }
    if let Some(t) = chat.temperature {
        ic.insert("temperature".into(), t);
    }
    if let Some(t) = chat.top_p {
        ic.insert("topP".into(), t);
    }
    if !chat.stop.is_empty() {
        ic.insert("stopSequences".into(), json!(chat.stop));
    }
    if !ic.is_empty() {
        out.insert("inferenceConfig".into(), Value::Object(ic));
    }
    if !chat.tools.is_empty() {
        let tools: Vec<Value> = chat
            .tools
            .iter()
            .map(|t| {
                let mut spec = Map::new();
                spec.insert("name".into(), json!(t.name));
                if let Some(d) = &t.description {
                    spec.insert("description".into(), json!(d));
                }
                spec.insert("inputSchema".into(), json!({"json": t.parameters}));
                json!({"toolSpec": spec})
            })
            .collect();
        let mut tc = Map::new();
        tc.insert("tools".into(), Value::Array(tools));
        match &chat.tool_choice {
            Some(ToolChoice::Auto) => {
                tc.insert("toolChoice".into(), json!({"auto": {}}));
            }
            Some(ToolChoice::Required) => {
                tc.insert("toolChoice".into(), json!({"any": {}}));
            }
            Some(ToolChoice::Named(n)) => {
                tc.insert("toolChoice".into(), json!({"tool": {"name": n}}));
            }
            _ => {}
        }
        out.insert("toolConfig".into(), Value::Object(tc));
    }
    Ok((Value::Object(out), chat.stream, json_mode))
}

impl Translator for OpenAiBedrock {
    fn kind(&self) -> Kind {
        Kind::Bedrock
    }

    fn request(&self, ctx: &RequestCtx<'_>, body: &Value) -> Result<UpstreamRequest, ApiError> {
        let model = uri_encode(ctx.model, false);
        let base = &ctx.provider.base_path;
        match ctx.endpoint {
            Endpoint::Chat | Endpoint::Responses => {
                let include_usage = super::include_usage_flag(body)?;
                let (v, stream, json_mode) = chat_request(body)?;
                let verb = if stream {
                    "converse-stream"
                } else {
                    "converse"
                };
                Ok(UpstreamRequest {
                    path: format!("{base}/model/{model}/{verb}"),
                    body: serde_json::to_vec(&v)
                        .map_err(|e| ApiError::invalid_json(&e.to_string()))?,
                    stream,
                    include_usage,
                    json_mode,
                    prompt_estimate: 0,
                    embed_base64: false,
                    fan_out: Vec::new(),
                })
            }
            Endpoint::Embeddings => {
                if !ctx.model.starts_with(EMBEDDING_PREFIX) {
                    return Err(ApiError {
                        param: Some("model".into()),
                        ..ApiError::new(
                            400,
                            INVALID_REQUEST,
                            "unsupported_endpoint",
                            format!("Provider '{}' serves embeddings only with Amazon Titan text embedding models ({EMBEDDING_PREFIX}*), not '{}'", ctx.provider.name, ctx.model),
                        )
                    });
                }
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
                // Titan embeds one input per call: several inputs are fanned
                // out, one call each, and the answers merged in order.
                let inputs = embedding_inputs(body, PROVIDER)?;
                if inputs.len() > MAX_EMBEDDING_INPUTS {
                    return Err(ApiError::bad_param(
                        "input",
                        format!("Provider 'bedrock' (Titan) embeds one input per call: at most {MAX_EMBEDDING_INPUTS} inputs per request"),
                    ));
                }
                let dimensions = embedding_dimensions(body)?;
                let mut bodies = Vec::with_capacity(inputs.len());
                for text in &inputs {
                    let mut req = json!({"inputText": text});
                    if let (Some(d), Some(o)) = (dimensions, req.as_object_mut()) {
                        o.insert("dimensions".into(), json!(d));
                    }
                    bodies.push(
                        serde_json::to_vec(&req)
                            .map_err(|e| ApiError::invalid_json(&e.to_string()))?,
                    );
                }
                let mut bodies = bodies.into_iter();
                let first = bodies.next().unwrap_or_default();
                Ok(UpstreamRequest {
                    path: format!("{base}/model/{model}/invoke"),
                    body: first,
                    stream: false,
                    include_usage: false,
                    json_mode: false,
                    prompt_estimate: 0,
                    embed_base64: embedding_base64(body)?,
                    fan_out: bodies.collect(),
                })
            }
        }
    }

    fn auth_headers(
        &self,
        provider: &Provider,
        key: &Key,
        req: &UpstreamRequest,
        now_ms: u64,
    ) -> Result<Vec<(&'static str, String)>, ApiError> {
        let missing = || {
            ApiError::new(
                500,
                SERVER,
                "internal_error",
                "The Bedrock key has no access key id",
            )
        };
        let access = key.access_key_id.as_deref().ok_or_else(missing)?;
        let host = provider.host.as_deref().unwrap_or("");
        let region = match &provider.api {
            Api::Bedrock { region } => region.as_str(),
            _ => "",
        };
        Ok(sigv4::sign(&SignInput {
            method: "POST",
            path: &req.path,
            host,
            content_type: "application/json",
            body: &req.body,
            access_key_id: access,
            secret: &key.value,
            session_token: key.session_token.as_deref(),
            region,
            service: "bedrock",
            now_ms,
        }))
    }

    fn is_stream(&self, content_type: &str) -> bool {
        content_type.contains("application/vnd.amazon.eventstream")
    }

    fn response(&self, ctx: &ResponseCtx, body: &[u8]) -> Result<Translated, ApiError> {
        let v: Value = serde_json::from_slice(body).map_err(|_| bad_upstream())?;
        let (out, usage) = match ctx.endpoint {
            Endpoint::Embeddings => {
                let vals: Vec<f64> = v
                    .get("embedding")
                    .and_then(Value::as_array)
                    .ok_or_else(bad_upstream)?
                    .iter()
                    .map(|x| x.as_f64().unwrap_or(0.0))
                    .collect();
                let n = v
                    .get("inputTextTokenCount")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                let usage = Usage {
                    prompt_tokens: n,
                    completion_tokens: 0,
                    cached_tokens: 0,
                };
                (
                    embedding_list(
                        vec![embedding_item(0, &vals, ctx.embed_base64)],
                        &ctx.model,
                        n,
                    ),
                    usage,
                )
            }
            Endpoint::Chat | Endpoint::Responses => chat_response(ctx, &v),
        };
        let bytes = serde_json::to_vec(&out).map_err(|_| bad_upstream())?;
        Ok(Translated {
            body: Some(bytes),
            usage: Some(usage),
        })
    }

    fn error(&self, status: u16, body: &[u8]) -> ApiError {
        upstream_error(status, error_message(body))
    }

    fn stream(&self, ctx: &ResponseCtx) -> Box<dyn StreamTranslator> {
        Box::new(BedrockStream::new(ctx))
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

/// Bedrock `stopReason` → OpenAI `finish_reason`.
pub fn finish_reason(r: &str) -> &'static str {
    match r {
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "guardrail_intervened" | "content_filtered" => "content_filter",
        _ => "stop",
    }
}

/// Converse `usage` → [`Usage`] (cache reads and writes are prompt tokens).
pub fn parse_usage(u: &Value) -> Usage {
    let g = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    let read = g("cacheReadInputTokens");
    Usage {
        prompt_tokens: g("inputTokens") + read + g("cacheWriteInputTokens"),
        completion_tokens: g("outputTokens"),
        cached_tokens: read,
    }
}

fn chat_response(ctx: &ResponseCtx, v: &Value) -> (Value, Usage) {
    let mut text = String::new();
    let mut calls = Vec::new();
    let blocks = v
        .get("output")
        .and_then(|o| o.get("message"))
        .and_then(|m| m.get("content"))
        .and_then(Value::as_array);
    for b in blocks.into_iter().flatten() {
        if let Some(t) = b.get("text").and_then(Value::as_str) {
            text.push_str(t);
        } else if let Some(tu) = b
            .get("toolUse")
            .filter(|tu| ctx.json_mode && tu.get("name").and_then(Value::as_str) == Some(JSON_TOOL))
        {
            // JSON mode: the forced tool's input is the answer.
            if let Some(input) = tu.get("input") {
                text.push_str(&input.to_string());
            }
        } else if let Some(tu) = b.get("toolUse") {
            calls.push(json!({
                "id": tu.get("toolUseId").cloned().unwrap_or(Value::Null),
                "type": "function",
                "function": {
                    "name": tu.get("name").cloned().unwrap_or(Value::Null),
                    "arguments": tu.get("input").map(Value::to_string).unwrap_or_else(|| "{}".into()),
                },
            }));
        }
    }
    let usage = v.get("usage").map(parse_usage).unwrap_or_default();
    let finish = match v.get("stopReason").and_then(Value::as_str) {
        Some("tool_use") if ctx.json_mode && calls.is_empty() => "stop",
        Some(r) => finish_reason(r),
        None => "stop",
    };
    let message = assistant_message(text, calls);
    let out = json!({
        "id": "chatcmpl-bedrock",
        "object": "chat.completion",
        "created": ctx.created,
        "model": ctx.model,
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": usage_json(&usage),
    });
    (out, usage)
}

/// ConverseStream (event-stream frames) → OpenAI chunks.
pub struct BedrockStream {
    decoder: Decoder,
    w: ChunkWriter,
    /// Bedrock content-block index → OpenAI tool index.
    tool_index: Vec<(u64, u32)>,
    next_tool: u32,
    usage: Option<Usage>,
    finish: Option<&'static str>,
    started: bool,
    json_mode: bool,
    /// JSON mode: block index of the forced tool, streamed as content.
    json_block: Option<u64>,
}

impl BedrockStream {
    pub fn new(ctx: &ResponseCtx) -> BedrockStream {
        let mut w = ChunkWriter::new(ctx);
        w.open("chatcmpl-bedrock", &ctx.model);
        BedrockStream {
            decoder: Decoder::default(),
            w,
            tool_index: Vec::new(),
            next_tool: 0,
            usage: None,
            finish: None,
            started: false,
            json_mode: ctx.json_mode,
            json_block: None,
        }
    }

    fn chunk(&mut self, out: &mut Vec<u8>, delta: &Value, finish: Option<&str>) {
        self.w.delta_value(out, delta, finish);
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if !self.started {
            self.started = true;
            self.chunk(out, &json!({"role": "assistant", "content": ""}), None);
        }
    }

    fn error_event(&mut self, out: &mut Vec<u8>, status: u16, message: &str) {
        self.w.fail(out, status, message);
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        self.start(out);
        let f = self.finish.unwrap_or("stop");
        self.w.end(out, f, self.usage.unwrap_or_default());
    }

    fn on_message(&mut self, m: Message, out: &mut Vec<u8>) {
        if self.w.is_done() {
            return;
        }
        let v: Value = serde_json::from_slice(&m.payload).unwrap_or(Value::Null);
        match m.header(":message-type") {
            Some("event") => {}
            Some("exception") | Some("error") => {
                let kind = m
                    .header(":exception-type")
                    .or(m.header(":error-code"))
                    .unwrap_or("");
                let status = match kind {
                    "throttlingException" => 429,
                    "serviceUnavailableException" | "modelStreamErrorException" => 503,
                    _ => 502,
                };
                let msg = v
                    .get("message")
                    .and_then(Value::as_str)
                    .or(m.header(":error-message"))
                    .unwrap_or("Provider error")
                    .to_string();
                self.error_event(out, status, &msg);
                return;
            }
            _ => return,
        }
        match m.header(":event-type").unwrap_or("") {
            "messageStart" => self.start(out),
            "contentBlockStart" => {
                self.start(out);
                let idx = v
                    .get("contentBlockIndex")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                let start = v.get("start").and_then(|s| s.get("toolUse"));
                if self.json_mode
                    && start.and_then(|t| t.get("name")).and_then(Value::as_str) == Some(JSON_TOOL)
                {
                    self.json_block = Some(idx);
                } else if let Some(tu) = start {
                    let k = self.next_tool;
                    self.next_tool += 1;
                    self.tool_index.push((idx, k));
                    let d = json!({"tool_calls": [{
                        "index": k,
                        "id": tu.get("toolUseId").cloned().unwrap_or(Value::Null),
                        "type": "function",
                        "function": {"name": tu.get("name").cloned().unwrap_or(Value::Null), "arguments": ""},
                    }]});
                    self.chunk(out, &d, None);
                }
            }
            "contentBlockDelta" => {
                self.start(out);
                let idx = v
                    .get("contentBlockIndex")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                let d = v.get("delta").unwrap_or(&Value::Null);
                if let Some(t) = d.get("text").and_then(Value::as_str) {
                    if !t.is_empty() {
                        self.chunk(out, &json!({"content": t}), None);
                    }
                } else if let Some(input) = d
                    .get("toolUse")
                    .and_then(|t| t.get("input"))
                    .and_then(Value::as_str)
                    .filter(|_| self.json_block == Some(idx))
                {
                    if !input.is_empty() {
                        self.chunk(out, &json!({"content": input}), None);
                    }
                } else if let Some(input) = d
                    .get("toolUse")
                    .and_then(|t| t.get("input"))
                    .and_then(Value::as_str)
                {
                    let k = self
                        .tool_index
                        .iter()
                        .find(|(i, _)| *i == idx)
                        .map(|(_, k)| *k);
                    if let Some(k) = k {
                        if !input.is_empty() {
                            self.chunk(out, &json!({"tool_calls": [{"index": k, "function": {"arguments": input}}]}), None);
                        }
                    }
                }
            }
            "messageStop" => {
                if let Some(r) = v.get("stopReason").and_then(Value::as_str) {
                    self.finish = Some(
                        if r == "tool_use" && self.json_block.is_some() && self.next_tool == 0 {
                            "stop"
                        } else {
                            finish_reason(r)
                        },
                    );
                }
            }
            "metadata" => {
                if let Some(u) = v.get("usage") {
                    self.usage = Some(parse_usage(u));
                }
                self.end(out);
            }
            _ => {}
        }
    }
}

impl StreamTranslator for BedrockStream {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        if self.w.is_done() {
            return;
        }
        let mut msgs = Vec::new();
        let r = self.decoder.feed(chunk, &mut |m| msgs.push(m));
        for m in msgs {
            self.on_message(m, out);
        }
        if let Err(e) = r {
            if !self.w.is_done() {
                self.error_event(
                    out,
                    502,
                    &format!("Malformed stream from the provider: {e}"),
                );
            }
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        if self.w.is_done() {
            return;
        }
        if let Err(e) = self.decoder.finish() {
            self.error_event(
                out,
                502,
                &format!("Malformed stream from the provider: {e}"),
            );
            return;
        }
        if self.finish.is_some() {
            // messageStop without metadata: end with the usage seen.
            self.end(out);
        } else {
            self.error_event(out, 502, "The provider's stream ended early");
        }
    }

    fn usage(&self) -> Option<Usage> {
        self.usage
    }

    fn first_token_seen(&self) -> bool {
        self.w.first_token_seen()
    }
}
