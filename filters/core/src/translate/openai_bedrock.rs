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

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::chat_ir::{self, Accept, Chat, Part, Role, ToolChoice};
use super::chunk::{arguments_delta, BlockTools, ChunkWriter};
use super::openai_openai::error_message;
use super::read::{self, Unreadable};
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

/// JSON mode as a forced tool ([`JSON_TOOL`]) whose input is the answer
/// (Converse has no response format): true when the request asked for it.
fn json_mode_as_tool(chat: &mut Chat) -> Result<bool, ApiError> {
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
    Ok(json_mode)
}

/// Converse's `toolConfig`: the tools' specs and the tool choice.
fn tool_config(tools: &[chat_ir::Tool], choice: Option<&ToolChoice>) -> Value {
    let tools: Vec<Value> = tools
        .iter()
        .map(|t| {
            // Converse wants an object schema that says so: OpenAI takes
            // `{}` (or properties without `type`) for a function.
            let mut schema = t.parameters.clone();
            if let Value::Object(o) = &mut schema {
                o.entry("type").or_insert_with(|| json!("object"));
            }
            let spec = t.declared(Some(("inputSchema", json!({"json": schema}))));
            json!({"toolSpec": spec})
        })
        .collect();
    let mut tc = Map::new();
    tc.insert("tools".into(), Value::Array(tools));
    match choice {
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
    Value::Object(tc)
}

/// The Converse request of a chat request.
struct Converse {
    body: Value,
    stream: bool,
    json_mode: bool,
    dropped: Vec<&'static str>,
    lowered: Vec<String>,
}

fn chat_request(ctx: &RequestCtx<'_>, body: &Value) -> Result<Converse, ApiError> {
    let mut chat = chat_ir::parse(
        body,
        &Accept {
            provider: PROVIDER,
            sampling_extras: false,
        },
    )?;
    let lowered = chat.lower_to(ctx.model_cfg.max_output_tokens);
    let json_mode = json_mode_as_tool(&mut chat)?;
    if chat.tool_choice == Some(ToolChoice::None) {
        // Converse has auto, any and a named tool, and wants the tools
        // declared whenever the conversation holds tool calls: the model
        // chooses.
        chat.tool_choice = None;
        chat.drop("tool_choice");
    }
    if is_anthropic(ctx.model) && chat.temperature.is_some() && chat.top_p.is_some() {
        // Claude 4.5 and later take one of the two.
        chat.top_p = None;
        chat.drop("top_p");
    }
    // Converse refuses an empty stop sequence (and it stops nothing).
    chat.stop.retain(|s| !s.is_empty());
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
        let tc = tool_config(&chat.tools, chat.tool_choice.as_ref());
        out.insert("toolConfig".into(), tc);
    }
    Ok(Converse {
        body: Value::Object(out),
        stream: chat.stream,
        json_mode,
        dropped: chat.dropped,
        lowered,
    })
}

/// Anthropic's models on Bedrock (`anthropic.…`, with or without a
/// cross-region prefix such as `us.`).
pub(crate) fn is_anthropic(model: &str) -> bool {
    model.starts_with("anthropic.") || model.contains(".anthropic.")
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
                let c = chat_request(ctx, body)?;
                let verb = if c.stream {
                    "converse-stream"
                } else {
                    "converse"
                };
                Ok(UpstreamRequest {
                    path: format!("{base}/model/{model}/{verb}"),
                    body: serde_json::to_vec(&c.body)
                        .map_err(|e| ApiError::invalid_json(&e.to_string()))?,
                    stream: c.stream,
                    include_usage,
                    json_mode: c.json_mode,
                    dropped: c.dropped,
                    lowered: c.lowered,
                    ..UpstreamRequest::default()
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
                    ..UpstreamRequest::default()
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
        let (out, usage) = match ctx.endpoint {
            Endpoint::Embeddings => {
                let v: native::TitanEmbedding = read::parse(body).map_err(unreadable)?;
                let vals = v.embedding.ok_or_else(bad_upstream)?;
                let n = v.input_text_token_count.unwrap_or(0);
                let usage = Usage {
                    prompt_tokens: n,
                    completion_tokens: 0,
                    cached_tokens: 0,
                    cache_write_tokens: 0,
                    web_searches: 0,
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

fn unreadable(e: Unreadable) -> ApiError {
    ApiError {
        message: e.message(&bad_upstream().message),
        ..bad_upstream()
    }
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

/// Converse `usage` → [`Usage`] (cache reads and writes are prompt tokens;
/// a usage that cannot be read counts nothing).
pub fn parse_usage(u: &Value) -> Usage {
    native::Usage::deserialize(u)
        .map(|u| u.usage())
        .unwrap_or_default()
}

fn chat_response(ctx: &ResponseCtx, v: &native::Converse) -> (Value, Usage) {
    let mut text = String::new();
    let mut calls = Vec::new();
    let blocks = v
        .output
        .as_ref()
        .and_then(|o| o.message.as_ref())
        .and_then(|m| m.content.as_ref());
    for b in blocks.into_iter().flatten() {
        if let Some(t) = &b.text {
            text.push_str(t);
        } else if let Some(tu) = b
            .tool_use
            .as_ref()
            .filter(|tu| ctx.json_mode && tu.name.as_deref() == Some(JSON_TOOL))
        {
            // JSON mode: the forced tool's input is the answer.
            if let Some(input) = &tu.input {
                text.push_str(&input.to_string());
            }
        } else if let Some(tu) = &b.tool_use {
            calls.push(json!({
                "id": tu.tool_use_id,
                "type": "function",
                "function": {
                    "name": tu.name,
                    "arguments": tu.input.as_ref().map_or_else(|| "{}".into(), Value::to_string),
                },
            }));
        }
    }
    let usage = v
        .usage
        .as_ref()
        .map(native::Usage::usage)
        .unwrap_or_default();
    let finish = match v.stop_reason.as_deref() {
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

/// Bedrock's answers (Converse, Titan embeddings) and ConverseStream event
/// payloads as the translator reads them: each field's name and type, here
/// only. Unknown fields are skipped; a known field of the wrong type makes
/// the answer (or event) unreadable.
mod native {
    use serde::Deserialize;
    use serde_json::Value;

    use crate::translate::read::Str;

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub(super) struct Converse<'a> {
        #[serde(borrow)]
        pub output: Option<Output<'a>>,
        #[serde(borrow)]
        pub stop_reason: Option<Str<'a>>,
        pub usage: Option<Usage>,
    }

    #[derive(Deserialize)]
    pub(super) struct Output<'a> {
        #[serde(borrow)]
        pub message: Option<OutputMessage<'a>>,
    }

    #[derive(Deserialize)]
    pub(super) struct OutputMessage<'a> {
        #[serde(borrow)]
        pub content: Option<Vec<Block<'a>>>,
    }

    /// A content block: `text` or `toolUse` (others are skipped).
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub(super) struct Block<'a> {
        #[serde(borrow)]
        pub text: Option<Str<'a>>,
        #[serde(borrow)]
        pub tool_use: Option<ToolUse<'a>>,
    }

    /// A tool call (whole in an answer; without `input` at a stream's
    /// `contentBlockStart`).
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub(super) struct ToolUse<'a> {
        #[serde(borrow)]
        pub tool_use_id: Option<Str<'a>>,
        #[serde(borrow)]
        pub name: Option<Str<'a>>,
        /// Re-serialized compactly as OpenAI `arguments`.
        pub input: Option<Value>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub(super) struct Usage {
        pub input_tokens: Option<u64>,
        pub output_tokens: Option<u64>,
        pub cache_read_input_tokens: Option<u64>,
        pub cache_write_input_tokens: Option<u64>,
    }

    impl Usage {
        pub fn usage(&self) -> super::Usage {
            let read = self.cache_read_input_tokens.unwrap_or(0);
            super::Usage {
                prompt_tokens: self.input_tokens.unwrap_or(0)
                    + read
                    + self.cache_write_input_tokens.unwrap_or(0),
                completion_tokens: self.output_tokens.unwrap_or(0),
                cached_tokens: read,
                cache_write_tokens: self.cache_write_input_tokens.unwrap_or(0),
                web_searches: 0,
            }
        }
    }

    /// Titan's InvokeModel embeddings answer.
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub(super) struct TitanEmbedding {
        pub embedding: Option<Vec<f64>>,
        pub input_text_token_count: Option<u64>,
    }

    /// One ConverseStream event payload (`messageStart`,
    /// `contentBlockStart`, `contentBlockDelta`, `messageStop`, `metadata`)
    /// or exception payload.
    #[derive(Deserialize, Default)]
    #[serde(rename_all = "camelCase")]
    pub(super) struct Event<'a> {
        pub content_block_index: Option<u64>,
        #[serde(borrow)]
        pub start: Option<Start<'a>>,
        #[serde(borrow)]
        pub delta: Option<Delta<'a>>,
        #[serde(borrow)]
        pub stop_reason: Option<Str<'a>>,
        pub usage: Option<Usage>,
        /// An exception's message.
        #[serde(borrow)]
        pub message: Option<Str<'a>>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub(super) struct Start<'a> {
        #[serde(borrow)]
        pub tool_use: Option<ToolUse<'a>>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub(super) struct Delta<'a> {
        #[serde(borrow)]
        pub text: Option<Str<'a>>,
        #[serde(borrow)]
        pub tool_use: Option<DeltaToolUse<'a>>,
    }

    /// A fragment of a tool call's input: JSON text, passed on as is.
    #[derive(Deserialize)]
    pub(super) struct DeltaToolUse<'a> {
        #[serde(borrow)]
        pub input: Option<Str<'a>>,
    }
}

/// The stream events the translator reads.
const HANDLED: [&str; 5] = [
    "messageStart",
    "contentBlockStart",
    "contentBlockDelta",
    "messageStop",
    "metadata",
];

/// ConverseStream (event-stream frames) → OpenAI chunks.
pub struct BedrockStream {
    decoder: Decoder,
    w: ChunkWriter,
    /// The tool calls, by Bedrock content-block index.
    tools: BlockTools,
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
            tools: BlockTools::default(),
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

    /// An exception or error message (`message`: its payload's): the
    /// stream ends with an OpenAI error, its status from the exception's
    /// type.
    fn provider_error(&mut self, m: &Message, message: Option<&str>, out: &mut Vec<u8>) {
        let kind = m
            .header(":exception-type")
            .or(m.header(":error-code"))
            .unwrap_or("");
        let status = match kind {
            "throttlingException" => 429,
            "serviceUnavailableException" | "modelStreamErrorException" => 503,
            _ => 502,
        };
        let msg = message
            .or(m.header(":error-message"))
            .unwrap_or("Provider error")
            .to_string();
        self.error_event(out, status, &msg);
    }

    fn on_message(&mut self, m: Message, out: &mut Vec<u8>) {
        if self.w.is_done() {
            return;
        }
        let parsed = read::parse::<native::Event>(&m.payload);
        match m.header(":message-type") {
            Some("event") => {}
            Some("exception") | Some("error") => {
                let message = parsed.as_ref().ok().and_then(|v| v.message.as_deref());
                self.provider_error(&m, message, out);
                return;
            }
            _ => return,
        }
        let ty = m.header(":event-type").unwrap_or("");
        let v = match parsed {
            Ok(v) => v,
            // Not JSON: read as an empty payload.
            Err(Unreadable::Syntax) => native::Event::default(),
            // A field of the wrong type in an event the translator reads
            // would lose or garble the answer.
            Err(e) if HANDLED.contains(&ty) => {
                self.error_event(out, 502, &e.message("Malformed stream from the provider"));
                return;
            }
            Err(_) => return,
        };
        match ty {
            "messageStart" => self.start(out),
            "contentBlockStart" => {
                self.start(out);
                let idx = v.content_block_index.unwrap_or(0);
                let start = v.start.as_ref().and_then(|s| s.tool_use.as_ref());
                if self.json_mode && start.and_then(|t| t.name.as_deref()) == Some(JSON_TOOL) {
                    self.json_block = Some(idx);
                } else if let Some(tu) = start {
                    let (_, d) = self.tools.open(idx, &tu.tool_use_id, &tu.name);
                    self.chunk(out, &d, None);
                }
            }
            "contentBlockDelta" => {
                self.start(out);
                let idx = v.content_block_index.unwrap_or(0);
                let Some(d) = &v.delta else {
                    return;
                };
                let input = d.tool_use.as_ref().and_then(|t| t.input.as_deref());
                if let Some(t) = d.text.as_deref() {
                    if !t.is_empty() {
                        self.chunk(out, &json!({"content": t}), None);
                    }
                } else if let Some(input) = input.filter(|_| self.json_block == Some(idx)) {
                    if !input.is_empty() {
                        self.chunk(out, &json!({"content": input}), None);
                    }
                } else if let Some(input) = input {
                    if let Some(k) = self.tools.call_of(idx) {
                        if !input.is_empty() {
                            self.chunk(out, &arguments_delta(k, input), None);
                        }
                    }
                }
            }
            "messageStop" => {
                if let Some(r) = v.stop_reason.as_deref() {
                    self.finish = Some(
                        if r == "tool_use" && self.json_block.is_some() && self.tools.is_empty() {
                            "stop"
                        } else {
                            finish_reason(r)
                        },
                    );
                }
            }
            "metadata" => {
                if let Some(u) = &v.usage {
                    self.usage = Some(u.usage());
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
