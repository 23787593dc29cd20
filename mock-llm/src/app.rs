//! The request handler: routing, authentication, fault injection and the
//! shared generation plan. It takes a request whose body is already read,
//! so tests call [`App::handle`] directly without a socket.

use crate::body::{self, MockBody};
use crate::config::{Behavior, Config, Dist, KeyBehavior, Kind};
use crate::stats::{Recent, Stats};
use crate::text;
use crate::{anthropic, bedrock, gemini, openai};
use bytes::Bytes;
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::http::request::Parts;
use hyper::{Method, Response, StatusCode};
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the server does with a request.
pub enum Reply {
    Response(Response<MockBody>),
    /// A response to send after a delay (ms). The server sleeps after the
    /// handler returned, so a delayed request holds only its response bytes,
    /// not its parsed request.
    Delayed(Response<MockBody>, u64),
    /// Close the connection with a TCP reset and no response.
    Reset,
}

impl Reply {
    pub fn status(&self) -> u16 {
        match self {
            Reply::Response(r) | Reply::Delayed(r, _) => r.status().as_u16(),
            Reply::Reset => 0,
        }
    }

    /// Wait out the delay, if any: the response, or None for a reset.
    pub async fn ready(self) -> Option<Response<MockBody>> {
        match self {
            Reply::Response(r) => Some(r),
            Reply::Delayed(r, ms) => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Some(r)
            }
            Reply::Reset => None,
        }
    }
}

/// A configured credential, compiled.
pub struct KeyRt {
    pub name: Arc<str>,
    pub secret: String,
    pub access_key_id: String,
    pub behavior: KeyBehavior,
}

/// A configured provider, compiled.
pub struct ProviderRt {
    pub name: Arc<str>,
    pub kind: Kind,
    pub prefix: String,
    pub keys: Vec<KeyRt>,
    pub models: Vec<String>,
    pub region: String,
    pub max_output_tokens: Option<u64>,
    pub behavior: Behavior,
}

impl ProviderRt {
    pub fn has_model(&self, m: &str) -> bool {
        self.models.iter().any(|x| x == m)
    }
    pub fn key_by_secret(&self, s: &str) -> Option<&KeyRt> {
        self.keys.iter().find(|k| k.secret == s)
    }
}

/// Per-request overrides read from `x-mock-*` headers.
#[derive(Default, Clone)]
pub struct Overrides {
    pub latency_ms: Option<u64>,
    pub ttft_ms: Option<u64>,
    pub itl_ms: Option<u64>,
    pub response_bytes: Option<usize>,
    pub error: Option<Fault>,
    pub tool_call: Option<String>,
}

/// An injected fault.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Fault {
    E429,
    E500,
    E503,
    E529,
    Reset,
    AbortMidStream,
    ErrorEvent,
}

impl Fault {
    fn parse(s: &str) -> Option<Fault> {
        Some(match s.trim() {
            "429" => Fault::E429,
            "500" => Fault::E500,
            "503" => Fault::E503,
            "529" => Fault::E529,
            "reset" => Fault::Reset,
            "abort-mid-stream" => Fault::AbortMidStream,
            "error-event" => Fault::ErrorEvent,
            _ => return None,
        })
    }
}

/// Largest generated answer, bytes (`x-mock-response-bytes` is capped here).
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Everything a provider module needs to answer one request.
pub struct Ctx<'a> {
    pub app: &'a App,
    pub provider: &'a ProviderRt,
    pub parts: &'a Parts,
    pub body: &'a Bytes,
    pub ov: Overrides,
    /// Fault to apply to the successful answer (abort mid-stream).
    pub abort: bool,
    /// Streams: end half-way with the provider's in-stream error event.
    pub error_event: bool,
    pub request_id: String,
}

impl Ctx<'_> {
    pub fn behavior(&self) -> &Behavior {
        &self.provider.behavior
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.parts.headers.get(name).and_then(|v| v.to_str().ok())
    }
    pub fn query_param(&self, name: &str) -> Option<String> {
        query_param(self.parts.uri.query(), name)
    }
    /// Delay before a non-streaming answer.
    pub fn latency_ms(&self) -> u64 {
        if let Some(v) = self.ov.latency_ms {
            return v;
        }
        self.app.sample_latency(&self.provider.behavior)
    }
    pub fn ttft_ms(&self) -> u64 {
        self.ov.ttft_ms.unwrap_or(self.provider.behavior.ttft_ms)
    }
    pub fn itl_ms(&self) -> u64 {
        self.ov.itl_ms.unwrap_or(self.provider.behavior.itl_ms)
    }
    pub fn response_bytes(&self) -> usize {
        self.ov
            .response_bytes
            .unwrap_or(self.provider.behavior.response_bytes)
    }
    pub fn chunk_chars(&self) -> usize {
        self.provider.behavior.stream_chunk_chars
    }

    /// A complete JSON answer, sent after the latency delay; cut mid-body
    /// when an abort was requested.
    pub async fn json_ok(&self, v: &Value, extra: &[(&'static str, String)]) -> Reply {
        let lat = self.latency_ms();
        let bytes = Bytes::from(serde_json::to_vec(v).unwrap_or_default());
        let len = bytes.len();
        let body = if self.abort {
            body::truncated(bytes)
        } else {
            MockBody::full(bytes)
        };
        let mut r = Response::new(body);
        let h = r.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        h.insert(CONTENT_LENGTH, HeaderValue::from(len));
        for (k, v) in extra {
            if let Ok(v) = HeaderValue::from_str(v) {
                h.insert(*k, v);
            }
        }
        if lat > 0 {
            Reply::Delayed(r, lat)
        } else {
            Reply::Response(r)
        }
    }

    /// A streaming answer: `head` frames at once, then `content` in pieces
    /// of `stream_chunk_chars` rendered by `render` (the first after TTFT,
    /// the others after ITL), then `tail` (its first frame after ITL). An
    /// abort cuts the connection half-way through the content; an error
    /// event ends the stream there with `error_frame`, the provider's
    /// native in-stream error.
    #[allow(clippy::too_many_arguments)]
    pub fn stream(
        &self,
        content_type: &'static str,
        head: Vec<Bytes>,
        content: String,
        render: body::Render,
        tail: Vec<Bytes>,
        extra: &[(&'static str, String)],
        error_frame: Bytes,
    ) -> Reply {
        let cut = if self.abort {
            Some(body::Cut::Abort)
        } else if self.error_event {
            Some(body::Cut::Error(error_frame))
        } else {
            None
        };
        let spec = body::StreamSpec {
            head,
            content,
            chunk_chars: self.chunk_chars(),
            render,
            tail,
            ttft_ms: self.ttft_ms(),
            itl_ms: self.itl_ms(),
            cut,
        };
        let mut r = Response::new(body::spawn_spec(spec));
        let h = r.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        h.insert("cache-control", HeaderValue::from_static("no-cache"));
        for (k, v) in extra {
            if let Ok(v) = HeaderValue::from_str(v) {
                h.insert(*k, v);
            }
        }
        Reply::Response(r)
    }
}

/// Marker replaced by each content piece in a frame template.
pub const PIECE: &str = "@@mock-llm-piece@@";

/// A frame serialized once with [`PIECE`] in place of the content; each
/// piece is rendered by splicing in its JSON string encoding.
#[derive(Clone)]
pub struct Template {
    pre: Bytes,
    post: Bytes,
}

impl Template {
    /// `frame` must contain the JSON string `"@@mock-llm-piece@@"` once.
    pub fn new(frame: &[u8]) -> Template {
        let mark = format!("\"{PIECE}\"");
        let at = frame
            .windows(mark.len())
            .position(|w| w == mark.as_bytes())
            .unwrap_or(frame.len());
        let end = (at + mark.len()).min(frame.len());
        Template {
            pre: Bytes::copy_from_slice(&frame[..at]),
            post: Bytes::copy_from_slice(&frame[end..]),
        }
    }

    pub fn render(&self, piece: &str) -> Bytes {
        let mut out = Vec::with_capacity(self.pre.len() + self.post.len() + piece.len() + 8);
        out.extend_from_slice(&self.pre);
        let _ = serde_json::to_writer(&mut out, piece);
        out.extend_from_slice(&self.post);
        Bytes::from(out)
    }

    /// The rendered JSON document without framing (for binary framings).
    pub fn render_vec(&self, piece: &str) -> Vec<u8> {
        self.render(piece).to_vec()
    }
}

/// The output of a generation.
pub enum Output {
    Text(String),
    Tool {
        id: String,
        name: String,
        args: Value,
    },
}

pub struct Plan {
    pub output: Output,
    /// Stopped by the output token limit.
    pub truncated: bool,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl Plan {
    pub fn text(&self) -> &str {
        match &self.output {
            Output::Text(t) => t,
            Output::Tool { .. } => "",
        }
    }
    pub fn is_tool(&self) -> bool {
        matches!(self.output, Output::Tool { .. })
    }
}

/// Inputs of a generation, extracted by each provider module.
pub struct GenInput<'a> {
    /// Text the answer echoes: the last user message's text.
    pub echo: String,
    /// Characters of all prompt text (system, messages, tool data).
    pub prompt_chars: usize,
    /// Declared tools: (name, JSON schema of the arguments).
    pub tools: Vec<(String, &'a Value)>,
    /// Tool the request forces (by name), if any.
    pub forced_tool: Option<String>,
    /// The request asks for some tool call without naming one.
    pub any_tool: bool,
    pub max_tokens: Option<u64>,
    /// Id prefix for tool calls (`call_`, `toolu_`, `tooluse_`).
    pub tool_id_prefix: &'static str,
}

/// Build the deterministic answer: a tool call when a tool is forced by the
/// request or named by `x-mock-tool-call` (and declared), else echo text.
pub fn plan(ctx: &Ctx<'_>, g: GenInput<'_>) -> Result<Plan, String> {
    let prompt_tokens = text::tokens_for_chars(g.prompt_chars);
    let wanted = ctx
        .ov
        .tool_call
        .clone()
        .or(g.forced_tool.clone())
        .or_else(|| {
            if g.any_tool {
                g.tools.first().map(|t| t.0.clone())
            } else {
                None
            }
        });
    if let Some(name) = wanted {
        let Some((_, schema)) = g.tools.iter().find(|t| t.0 == name) else {
            return Err(format!("tool {name:?} is not declared in the request"));
        };
        let args = text::value_for_schema(schema, 0);
        let args_s = serde_json::to_string(&args).unwrap_or_default();
        let id = format!("{}{}", g.tool_id_prefix, text::short_id(ctx.body));
        return Ok(Plan {
            completion_tokens: text::count_tokens(&args_s),
            output: Output::Tool { id, name, args },
            truncated: false,
            prompt_tokens,
        });
    }
    let max_chars = g.max_tokens.map(|m| (m as usize).saturating_mul(4));
    let (t, truncated) = text::answer(&g.echo, ctx.response_bytes(), max_chars);
    Ok(Plan {
        completion_tokens: text::count_tokens(&t),
        output: Output::Text(t),
        truncated,
        prompt_tokens,
    })
}

/// Native endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    OpenaiChat,
    OpenaiEmbeddings,
    OpenaiModels,
    OpenaiModel(String),
    AzureChat(String),
    AzureEmbeddings(String),
    AnthropicMessages,
    GeminiGenerate(String),
    GeminiStream(String),
    GeminiEmbed(String),
    GeminiBatchEmbed(String),
    BedrockConverse(String),
    BedrockConverseStream(String),
    BedrockInvoke(String),
}

impl Endpoint {
    fn kind(&self) -> Kind {
        match self {
            Endpoint::OpenaiChat
            | Endpoint::OpenaiEmbeddings
            | Endpoint::OpenaiModels
            | Endpoint::OpenaiModel(_) => Kind::Openai,
            Endpoint::AzureChat(_) | Endpoint::AzureEmbeddings(_) => Kind::Azure,
            Endpoint::AnthropicMessages => Kind::Anthropic,
            Endpoint::GeminiGenerate(_)
            | Endpoint::GeminiStream(_)
            | Endpoint::GeminiEmbed(_)
            | Endpoint::GeminiBatchEmbed(_) => Kind::Gemini,
            Endpoint::BedrockConverse(_)
            | Endpoint::BedrockConverseStream(_)
            | Endpoint::BedrockInvoke(_) => Kind::Bedrock,
        }
    }
    fn method(&self) -> Method {
        if matches!(self, Endpoint::OpenaiModels | Endpoint::OpenaiModel(_)) {
            Method::GET
        } else {
            Method::POST
        }
    }
}

/// Parse a native path (prefix already removed).
pub fn parse_endpoint(path: &str) -> Option<Endpoint> {
    match path {
        "/v1/chat/completions" => return Some(Endpoint::OpenaiChat),
        "/v1/embeddings" => return Some(Endpoint::OpenaiEmbeddings),
        "/v1/models" => return Some(Endpoint::OpenaiModels),
        "/v1/messages" => return Some(Endpoint::AnthropicMessages),
        _ => {}
    }
    if let Some(rest) = path.strip_prefix("/openai/deployments/") {
        let (dep, op) = rest.split_once('/')?;
        if dep.is_empty() {
            return None;
        }
        return match op {
            "chat/completions" => Some(Endpoint::AzureChat(dep.to_string())),
            "embeddings" => Some(Endpoint::AzureEmbeddings(dep.to_string())),
            _ => None,
        };
    }
    // Gemini serves the same methods under /v1beta and /v1.
    if let Some(rest) = path
        .strip_prefix("/v1beta/models/")
        .or_else(|| path.strip_prefix("/v1/models/"))
    {
        if let Some((model, method)) = rest.rsplit_once(':') {
            if !model.is_empty() && !model.contains('/') {
                let m = model.to_string();
                match method {
                    "generateContent" => return Some(Endpoint::GeminiGenerate(m)),
                    "streamGenerateContent" => return Some(Endpoint::GeminiStream(m)),
                    "embedContent" => return Some(Endpoint::GeminiEmbed(m)),
                    "batchEmbedContents" => return Some(Endpoint::GeminiBatchEmbed(m)),
                    _ => {}
                }
            }
        }
    }
    // OpenAI: retrieve one model (ids may contain ':', e.g. fine-tunes).
    if let Some(id) = path.strip_prefix("/v1/models/") {
        if !id.is_empty() && !id.contains('/') {
            return Some(Endpoint::OpenaiModel(percent_decode(id)?));
        }
    }
    if let Some(rest) = path.strip_prefix("/model/") {
        let (model, op) = rest.split_once('/')?;
        let m = percent_decode(model)?;
        if m.is_empty() {
            return None;
        }
        return match op {
            "converse" => Some(Endpoint::BedrockConverse(m)),
            "converse-stream" => Some(Endpoint::BedrockConverseStream(m)),
            "invoke" => Some(Endpoint::BedrockInvoke(m)),
            _ => None,
        };
    }
    None
}

/// Decode %XX escapes; None on a malformed escape or invalid UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = b.get(i + 1..i + 3)?;
            let v = u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()?;
            out.push(v);
            i += 3;
        } else if b[i] == b'+' {
            out.push(b'+');
            i += 1;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

pub fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        if percent_decode(k).as_deref() == Some(name) {
            percent_decode(&v.replace('+', " "))
        } else {
            None
        }
    })
}

/// The mock server's state.
pub struct App {
    pub providers: Vec<ProviderRt>,
    pub stats: Stats,
    pub max_body_bytes: usize,
    rng: AtomicU64,
    counter: AtomicU64,
}

impl App {
    pub fn new(cfg: &Config) -> App {
        let mut providers: Vec<ProviderRt> = cfg
            .providers
            .iter()
            .map(|(name, p)| ProviderRt {
                name: Arc::from(name.as_str()),
                kind: p.kind,
                prefix: p.path_prefix.clone(),
                keys: p
                    .keys
                    .iter()
                    .map(|k| KeyRt {
                        name: Arc::from(k.name.as_str()),
                        secret: k
                            .key
                            .clone()
                            .or_else(|| k.secret_access_key.clone())
                            .unwrap_or_default(),
                        access_key_id: k.access_key_id.clone().unwrap_or_default(),
                        behavior: k.behavior,
                    })
                    .collect(),
                models: p.models.clone(),
                region: p.region.clone().unwrap_or_default(),
                max_output_tokens: p.max_output_tokens,
                behavior: p.behavior.clone().unwrap_or_else(|| cfg.behavior.clone()),
            })
            .collect();
        // Longest prefix first, so `/mistral/v1/...` is not taken by "".
        providers.sort_by_key(|p| std::cmp::Reverse(p.prefix.len()));
        App {
            providers,
            stats: Stats::new(cfg.recent_requests),
            max_body_bytes: cfg.max_body_bytes,
            rng: AtomicU64::new(cfg.seed),
            counter: AtomicU64::new(1),
        }
    }

    /// Uniform in [0, 1) (splitmix64 over an atomic counter).
    pub fn uniform(&self) -> f64 {
        let mut z = self.rng.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    fn std_normal(&self) -> f64 {
        let u1 = self.uniform().max(f64::MIN_POSITIVE);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// One latency sample from a behaviour's distribution, ms.
    pub fn sample_latency(&self, b: &Behavior) -> u64 {
        let l = &b.latency;
        let v = match l.dist {
            Dist::Fixed => l.mean_ms,
            Dist::Normal => l.mean_ms + l.sd_ms * self.std_normal(),
            Dist::Lognormal => {
                if l.mean_ms <= 0.0 {
                    0.0
                } else {
                    // mean and sd are those of the lognormal itself.
                    let s2 = (1.0 + (l.sd_ms * l.sd_ms) / (l.mean_ms * l.mean_ms)).ln();
                    let mu = l.mean_ms.ln() - s2 / 2.0;
                    (mu + s2.sqrt() * self.std_normal()).exp()
                }
            }
        };
        if v.is_finite() && v > 0.0 {
            v.round() as u64
        } else {
            0
        }
    }

    pub fn next_request_id(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("{n:024x}")
    }

    fn route(&self, path: &str) -> Option<(&ProviderRt, Endpoint)> {
        for p in &self.providers {
            let Some(rest) = path.strip_prefix(p.prefix.as_str()) else {
                continue;
            };
            if !p.prefix.is_empty() && !rest.starts_with('/') {
                continue;
            }
            if let Some(ep) = parse_endpoint(rest) {
                if ep.kind() == p.kind {
                    return Some((p, ep));
                }
            }
        }
        None
    }

    /// Answer one request whose body has been read.
    pub async fn handle(&self, parts: Parts, body: Bytes) -> Reply {
        let path = parts.uri.path();
        match (parts.method.clone(), path) {
            (Method::GET, "/_mock/health") => {
                return Reply::Response(plain_json(200, r#"{"status":"ok"}"#.to_string()))
            }
            (Method::GET, "/_mock/stats") => {
                return Reply::Response(plain_json(200, self.stats.to_json().to_string()))
            }
            (Method::POST, "/_mock/reset") => {
                self.stats.reset();
                return Reply::Response(plain_json(200, r#"{"status":"reset"}"#.to_string()));
            }
            _ => {}
        }
        let Some((provider, ep)) = self.route(path) else {
            let r = plain_json(
                404,
                format!(
                    r#"{{"error":{{"message":"mock-llm: no route for {} {}","type":"invalid_request_error","param":null,"code":"unknown_url"}}}}"#,
                    parts.method,
                    json_escape(path)
                ),
            );
            self.record(None, None, None, &parts, &body, 404);
            return Reply::Response(r);
        };
        let request_id = self.next_request_id();
        let (reply, key, model) = self
            .handle_provider(provider, ep, &parts, &body, request_id)
            .await;
        self.record(Some(provider), key, model, &parts, &body, reply.status());
        reply
    }

    async fn handle_provider(
        &self,
        provider: &ProviderRt,
        ep: Endpoint,
        parts: &Parts,
        body: &Bytes,
        request_id: String,
    ) -> (Reply, Option<Arc<str>>, Option<String>) {
        let ov = read_overrides(parts);
        let mut ctx = Ctx {
            app: self,
            provider,
            parts,
            body,
            ov,
            abort: false,
            error_event: false,
            request_id,
        };
        let ep_model = match &ep {
            Endpoint::AzureChat(m)
            | Endpoint::AzureEmbeddings(m)
            | Endpoint::GeminiGenerate(m)
            | Endpoint::GeminiStream(m)
            | Endpoint::GeminiEmbed(m)
            | Endpoint::GeminiBatchEmbed(m)
            | Endpoint::BedrockConverse(m)
            | Endpoint::BedrockConverseStream(m)
            | Endpoint::BedrockInvoke(m) => Some(m.clone()),
            _ => None,
        };
        if parts.method != ep.method() {
            let r = native_error(&ctx, ErrKind::MethodNotAllowed, "method not allowed");
            return (r, None, ep_model);
        }
        // Authentication in the provider's own way.
        let key = match provider.kind {
            Kind::Openai => openai::authenticate(&ctx),
            Kind::Azure => openai::authenticate_azure(&ctx),
            Kind::Anthropic => anthropic::authenticate(&ctx),
            Kind::Gemini => gemini::authenticate(&ctx),
            Kind::Bedrock => bedrock::authenticate(&ctx),
        };
        let key = match key {
            Ok(k) => k,
            Err((r, kid)) => return (r, kid, ep_model),
        };
        let key_id = Some(key.name.clone());
        match key.behavior {
            KeyBehavior::Ok => {}
            KeyBehavior::Always401 => {
                return (
                    native_error(&ctx, ErrKind::BadKey, "invalid key"),
                    key_id,
                    ep_model,
                )
            }
            KeyBehavior::Always429 => {
                return (
                    native_error(&ctx, ErrKind::RateLimited, ""),
                    key_id,
                    ep_model,
                )
            }
        }
        // Faults: the override header wins, else the configured rates.
        let fault = ctx.ov.error.or_else(|| self.roll_fault(&provider.behavior));
        match fault {
            None => {}
            Some(Fault::AbortMidStream) => ctx.abort = true,
            Some(Fault::ErrorEvent) => ctx.error_event = true,
            Some(Fault::Reset) => return (Reply::Reset, key_id, ep_model),
            Some(f) => {
                let k = match f {
                    Fault::E429 => ErrKind::RateLimited,
                    Fault::E500 => ErrKind::Internal,
                    Fault::E503 => ErrKind::Unavailable,
                    _ => ErrKind::Overloaded,
                };
                return (native_error(&ctx, k, ""), key_id, ep_model);
            }
        }
        let (reply, model) = match ep {
            Endpoint::OpenaiChat => openai::chat(&ctx, None).await,
            Endpoint::OpenaiEmbeddings => openai::embeddings(&ctx, None).await,
            Endpoint::OpenaiModels => openai::models(&ctx),
            Endpoint::OpenaiModel(id) => openai::model(&ctx, id),
            Endpoint::AzureChat(d) => openai::chat(&ctx, Some(d)).await,
            Endpoint::AzureEmbeddings(d) => openai::embeddings(&ctx, Some(d)).await,
            Endpoint::AnthropicMessages => anthropic::messages(&ctx).await,
            Endpoint::GeminiGenerate(m) => gemini::generate(&ctx, m, false).await,
            Endpoint::GeminiStream(m) => gemini::generate(&ctx, m, true).await,
            Endpoint::GeminiEmbed(m) => gemini::embed(&ctx, m, false).await,
            Endpoint::GeminiBatchEmbed(m) => gemini::embed(&ctx, m, true).await,
            Endpoint::BedrockConverse(m) => bedrock::converse(&ctx, m, false).await,
            Endpoint::BedrockConverseStream(m) => bedrock::converse(&ctx, m, true).await,
            Endpoint::BedrockInvoke(m) => bedrock::invoke(&ctx, m).await,
        };
        (reply, key_id, model)
    }

    fn roll_fault(&self, b: &Behavior) -> Option<Fault> {
        let r = &b.error_rates;
        for (rate, f) in [
            (r.e429, Fault::E429),
            (r.e500, Fault::E500),
            (r.e503, Fault::E503),
            (r.e529, Fault::E529),
            (r.reset, Fault::Reset),
            (r.abort_mid_stream, Fault::AbortMidStream),
            (r.error_event, Fault::ErrorEvent),
        ] {
            if rate > 0.0 && self.uniform() < rate {
                return Some(f);
            }
        }
        None
    }

    fn record(
        &self,
        provider: Option<&ProviderRt>,
        key: Option<Arc<str>>,
        model: Option<String>,
        parts: &Parts,
        body: &Bytes,
        status: u16,
    ) {
        let pname: Arc<str> = provider
            .map(|p| p.name.clone())
            .unwrap_or_else(|| Arc::from("none"));
        self.stats
            .record(pname, key, model, status, || Recent::capture(parts, body));
    }
}

/// A failed authentication: the native answer, and the identifier of the
/// unknown credential when one was presented.
pub type AuthFail = (Reply, Option<Arc<str>>);

/// Stable identifier of a credential that matches no configured key:
/// `unknown:` + the first 12 hex digits of its SHA-256 (never the key).
pub fn unknown_key_id(secret: &str) -> Arc<str> {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(secret.as_bytes());
    Arc::from(format!("unknown:{}", &hex::encode(d)[..12]).as_str())
}

/// Kinds of error every provider can answer, each in its native shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrKind {
    MissingKey,
    BadKey,
    RateLimited,
    Internal,
    Unavailable,
    Overloaded,
    MethodNotAllowed,
}

pub fn native_error(ctx: &Ctx<'_>, k: ErrKind, msg: &str) -> Reply {
    match ctx.provider.kind {
        Kind::Openai => openai::error_for(ctx, k, msg, false),
        Kind::Azure => openai::error_for(ctx, k, msg, true),
        Kind::Anthropic => anthropic::error_for(ctx, k, msg),
        Kind::Gemini => gemini::error_for(ctx, k, msg),
        Kind::Bedrock => bedrock::error_for(ctx, k, msg),
    }
}

fn read_overrides(parts: &Parts) -> Overrides {
    let h = |n: &str| parts.headers.get(n).and_then(|v| v.to_str().ok());
    // Capped so a typo cannot ask for a day-long wait or a terabyte answer.
    let num = |n: &str| {
        h(n).and_then(|v| v.trim().parse::<u64>().ok())
            .map(|v| v.min(600_000))
    };
    Overrides {
        latency_ms: num("x-mock-latency-ms"),
        ttft_ms: num("x-mock-ttft-ms"),
        itl_ms: num("x-mock-itl-ms"),
        response_bytes: h("x-mock-response-bytes")
            .and_then(|v| v.trim().parse::<usize>().ok())
            .map(|v| v.min(MAX_RESPONSE_BYTES)),
        error: h("x-mock-error").and_then(Fault::parse),
        tool_call: h("x-mock-tool-call")
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty()),
    }
}

/// A JSON response with a status.
pub fn json_response(status: u16, body: String, extra: &[(&'static str, String)]) -> Reply {
    let mut r = plain_json(status, body);
    for (k, v) in extra {
        if let Ok(v) = HeaderValue::from_str(v) {
            r.headers_mut().insert(*k, v);
        }
    }
    Reply::Response(r)
}

fn plain_json(status: u16, body: String) -> Response<MockBody> {
    let len = body.len();
    let mut r = Response::new(MockBody::full(body));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r.headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(len));
    r
}

pub fn json_escape(s: &str) -> String {
    let v = serde_json::to_string(s).unwrap_or_default();
    v.trim_matches('"').to_string()
}

/// A sampling parameter, when present and not null, must be a number
/// within `lo..=hi`.
pub fn in_range(v: Option<&Value>, lo: f64, hi: f64) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(x) => x.as_f64().is_some_and(|f| (lo..=hi).contains(&f)),
    }
}

/// Current Unix time, seconds.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Short description of a serde_json parse error for messages.
pub fn json_err(e: &serde_json::Error) -> String {
    e.to_string()
}

/// SSE helpers.
pub fn sse_data(v: &Value) -> Bytes {
    let mut s = Vec::with_capacity(128);
    s.extend_from_slice(b"data: ");
    let _ = serde_json::to_writer(&mut s, v);
    s.extend_from_slice(b"\n\n");
    Bytes::from(s)
}

pub fn sse_event(event: &str, v: &Value) -> Bytes {
    let mut s = Vec::with_capacity(128);
    s.extend_from_slice(b"event: ");
    s.extend_from_slice(event.as_bytes());
    s.extend_from_slice(b"\ndata: ");
    let _ = serde_json::to_writer(&mut s, v);
    s.extend_from_slice(b"\n\n");
    Bytes::from(s)
}
