//! The router: endpoint parsing, authentication and fault injection, then
//! dispatch to a provider module. It takes a request whose body is already
//! read, so tests call [`App::handle`] directly without a socket. The module
//! graph is one-way: `app`/`server` → `providers` → `core`.

use crate::core::config::{
    Behavior, Config, KeyBehavior, Kind, Thinking, ThinkingMode, DEFAULT_CACHE_MIN_TOKENS,
    MAX_DELAY_MS,
};
use crate::core::ctx::{
    CacheRt, Ctx, Drawn, ErrKind, Fault, KeyFaultsRt, KeyRt, ModelRt, Overrides, ProviderRt,
};
use crate::core::http::{json_escape, percent_decode, plain_json};
use crate::core::prefix::{hash_str, PrefixCache, Rule};
use crate::core::reply::Reply;
use crate::core::rng::Rng;
use crate::core::stats::{Recent, Stats};
use crate::providers::openai_responses::{self, Flavor};
use crate::providers::{anthropic, bedrock, gemini, openai};
use bytes::Bytes;
use hyper::header::HeaderValue;
use hyper::http::request::Parts;
use hyper::Method;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use crate::core::config::MAX_RESPONSE_BYTES;

/// Native endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    OpenaiChat,
    OpenaiEmbeddings,
    OpenaiModels,
    OpenaiModel(String),
    OpenaiResponses,
    AzureChat(String),
    AzureEmbeddings(String),
    AzureResponses(Flavor),
    AnthropicMessages,
    AnthropicCountTokens,
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
            | Endpoint::OpenaiModel(_)
            | Endpoint::OpenaiResponses => Kind::Openai,
            Endpoint::AzureChat(_) | Endpoint::AzureEmbeddings(_) | Endpoint::AzureResponses(_) => {
                Kind::Azure
            }
            Endpoint::AnthropicMessages | Endpoint::AnthropicCountTokens => Kind::Anthropic,
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
        "/v1/messages/count_tokens" => return Some(Endpoint::AnthropicCountTokens),
        "/v1/responses" => return Some(Endpoint::OpenaiResponses),
        "/openai/v1/responses" => return Some(Endpoint::AzureResponses(Flavor::AzureV1)),
        "/openai/responses" => return Some(Endpoint::AzureResponses(Flavor::AzureVersioned)),
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

/// The mock server's state.
pub struct App {
    pub providers: Vec<ProviderRt>,
    pub stats: Stats,
    pub max_body_bytes: usize,
    pub rng: Rng,
    /// Every key's simulated prompt cache (None: the simulation is off).
    pub prompt_cache: Option<PrefixCache>,
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
                        faults: k
                            .faults
                            .clone()
                            .map(|f| KeyFaultsRt::new(f, cfg.seed ^ name_seed(&k.name))),
                        cache_seed: hash_str(&format!("{name}\0{}", k.name)),
                        id_header: HeaderValue::from_str(&k.name)
                            .unwrap_or(HeaderValue::from_static("invalid")),
                    })
                    .collect(),
                models: p
                    .models
                    .iter()
                    .map(|id| {
                        let own = p.model_settings.get(id);
                        let thinking = own.and_then(|f| f.thinking);
                        let caches = own
                            .and_then(|f| f.prompt_cache)
                            .or(p.prompt_cache)
                            .unwrap_or(true);
                        ModelRt {
                            id: id.clone(),
                            max_output_tokens: own
                                .and_then(|f| f.max_output_tokens)
                                .or(p.max_output_tokens),
                            thinking: match thinking {
                                None => p.thinking,
                                Some(Thinking::Flag(b)) => b,
                                Some(Thinking::Mode(_)) => true,
                            },
                            adaptive_only: thinking == Some(Thinking::Mode(ThinkingMode::Adaptive)),
                            cache_min_tokens: caches.then(|| {
                                own.and_then(|f| f.cache_min_tokens)
                                    .or(p.cache_min_tokens)
                                    .unwrap_or(DEFAULT_CACHE_MIN_TOKENS)
                            }),
                        }
                    })
                    .collect(),
                region: p.region.clone().unwrap_or_default(),
                behavior: p.behavior.clone().unwrap_or_else(|| cfg.behavior.clone()),
                cache: (cfg.prompt_cache.enabled && p.prompt_cache != Some(false)).then(|| {
                    CacheRt {
                        rule: match p.kind {
                            // OpenAI and Azure: automatic, read in 128-token increments.
                            Kind::Openai | Kind::Azure => Rule::Automatic { step: 128 },
                            // Gemini's implicit cache: automatic, no increments documented.
                            Kind::Gemini => Rule::Automatic { step: 1 },
                            Kind::Anthropic | Kind::Bedrock => Rule::Breakpoints,
                        },
                        ttl_ms: cfg.prompt_cache.ttl_s.saturating_mul(1000),
                    }
                }),
            })
            .collect();
        // Longest prefix first, so `/mistral/v1/...` is not taken by "".
        providers.sort_by_key(|p| std::cmp::Reverse(p.prefix.len()));
        App {
            providers,
            stats: Stats::new(cfg.recent_requests),
            max_body_bytes: cfg.max_body_bytes,
            rng: Rng::new(cfg.seed),
            prompt_cache: cfg
                .prompt_cache
                .enabled
                .then(|| PrefixCache::new(cfg.prompt_cache.max_entries)),
            counter: AtomicU64::new(1),
        }
    }

    /// One latency sample from a behaviour's distribution, ms.
    pub fn sample_latency(&self, b: &Behavior) -> u64 {
        self.rng.sample_latency(b)
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
                let mut doc = self.stats.to_json();
                doc["prompt_cache_entries"] =
                    self.prompt_cache.as_ref().map(PrefixCache::len).into();
                return Reply::Response(plain_json(200, doc.to_string()));
            }
            (Method::POST, "/_mock/reset") => {
                self.stats.reset();
                if let Some(c) = &self.prompt_cache {
                    c.clear();
                }
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
            rng: &self.rng,
            provider,
            parts,
            body,
            ov,
            abort: false,
            error_event: false,
            reset_after_first_chunk: false,
            request_id,
            cache: self.prompt_cache.as_ref(),
            key: None,
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
        ctx.key = Some(key);
        let (reply, key_id, model) = self.on_key(provider, ep, ctx, key, key_id, ep_model).await;
        (
            reply.with_header("x-mock-key-id", key.id_header.clone()),
            key_id,
            model,
        )
    }

    /// The rest of a request once its key is known: the key's behaviour,
    /// faults, then the provider's handler.
    async fn on_key(
        &self,
        provider: &ProviderRt,
        ep: Endpoint,
        mut ctx: Ctx<'_>,
        key: &KeyRt,
        key_id: Option<Arc<str>>,
        ep_model: Option<String>,
    ) -> (Reply, Option<Arc<str>>, Option<String>) {
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
        // Faults: the override header wins, else the key's own faults (one
        // draw per request), else the provider's configured rates.
        let mut fault = ctx.ov.error;
        if fault.is_none() {
            match key.faults.as_ref().and_then(|f| f.draw()) {
                Some(Drawn::Fault(f)) => fault = Some(f),
                Some(Drawn::Slow(ms)) => {
                    ctx.ov.slow_ms.get_or_insert(ms);
                }
                None => {}
            }
            if fault == Some(Fault::E429) {
                if let Some(s) = key.faults.as_ref().and_then(|f| f.cfg.retry_after_s) {
                    ctx.ov.retry_after_s.get_or_insert(s);
                }
            }
        }
        let fault = fault.or_else(|| self.roll_fault(&provider.behavior));
        let slow_ms = ctx.ov.slow_ms.unwrap_or(0);
        match fault {
            None => {}
            Some(Fault::AbortMidStream) => ctx.abort = true,
            Some(Fault::ErrorEvent) => ctx.error_event = true,
            Some(Fault::ResetAfterFirstChunk) => ctx.reset_after_first_chunk = true,
            Some(Fault::Reset) => return (Reply::Reset, key_id, ep_model),
            Some(f) => {
                let k = match f {
                    Fault::E429 => ErrKind::RateLimited,
                    Fault::E500 => ErrKind::Internal,
                    Fault::E503 => ErrKind::Unavailable,
                    _ => ErrKind::Overloaded,
                };
                let r = native_error(&ctx, k, "").delayed_by(slow_ms);
                return (r, key_id, ep_model);
            }
        }
        let (reply, model) = match ep {
            Endpoint::OpenaiChat => openai::chat(&ctx, None).await,
            Endpoint::OpenaiEmbeddings => openai::embeddings(&ctx, None).await,
            Endpoint::OpenaiModels => openai::models(&ctx),
            Endpoint::OpenaiModel(id) => openai::model(&ctx, id),
            Endpoint::AzureChat(d) => openai::chat(&ctx, Some(d)).await,
            Endpoint::AzureEmbeddings(d) => openai::embeddings(&ctx, Some(d)).await,
            Endpoint::OpenaiResponses => openai_responses::create(&ctx, Flavor::Openai).await,
            Endpoint::AzureResponses(f) => openai_responses::create(&ctx, f).await,
            Endpoint::AnthropicMessages => anthropic::messages(&ctx).await,
            Endpoint::AnthropicCountTokens => anthropic::count_tokens(&ctx).await,
            Endpoint::GeminiGenerate(m) => gemini::generate(&ctx, m, false).await,
            Endpoint::GeminiStream(m) => gemini::generate(&ctx, m, true).await,
            Endpoint::GeminiEmbed(m) => gemini::embed(&ctx, m, false).await,
            Endpoint::GeminiBatchEmbed(m) => gemini::embed(&ctx, m, true).await,
            Endpoint::BedrockConverse(m) => bedrock::converse(&ctx, m, false).await,
            Endpoint::BedrockConverseStream(m) => bedrock::converse(&ctx, m, true).await,
            Endpoint::BedrockInvoke(m) => bedrock::invoke(&ctx, m).await,
        };
        let mut reply = reply.delayed_by(slow_ms);
        if ctx.reset_after_first_chunk {
            reply = reply.reset_on_body_error();
        }
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
            if rate > 0.0 && self.rng.uniform() < rate {
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
            .map(|v| v.min(MAX_DELAY_MS))
    };
    Overrides {
        latency_ms: num("x-mock-latency-ms"),
        ttft_ms: num("x-mock-ttft-ms"),
        itl_ms: num("x-mock-itl-ms"),
        response_bytes: h("x-mock-response-bytes")
            .and_then(|v| v.trim().parse::<usize>().ok())
            .map(|v| v.min(MAX_RESPONSE_BYTES)),
        error: h("x-mock-error").and_then(Fault::parse),
        retry_after_s: num("x-mock-retry-after"),
        slow_ms: num("x-mock-slow-ms"),
        tool_call: h("x-mock-tool-call")
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty()),
        web_searches: num("x-mock-web-searches").unwrap_or(0).min(10),
    }
}

/// A stable 64-bit mix of a key's name (FNV-1a), so keys without a seed of
/// their own still get distinct, repeatable sequences.
fn name_seed(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
