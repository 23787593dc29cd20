//! What a provider module works with: the compiled provider and key, the
//! per-request context (which builds successful replies) and the error
//! kinds every provider answers in its own shape. Sits above `config`,
//! `body`, `reply`, `rng` and `http`; nothing beneath imports it.

use crate::core::body::{self, MockBody};
use crate::core::config::{Behavior, KeyBehavior, KeyFaults, Kind};
use crate::core::http::query_param;
use crate::core::prefix::{hash_str, KeyCache, PrefixCache, Rule};
// A handler's answer: defined on the floor beneath (`reply`), named here
// too because a context and its reply go together.
pub use crate::core::reply::{Reply, ResetOnBodyError};
use crate::core::rng::Rng;
use bytes::Bytes;
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::http::request::Parts;
use hyper::Response;
use serde_json::Value;
use std::sync::Arc;

/// A configured credential, compiled.
pub struct KeyRt {
    pub name: Arc<str>,
    pub secret: String,
    pub access_key_id: String,
    pub behavior: KeyBehavior,
    /// Per-key fault injection, with its own random sequence.
    pub faults: Option<KeyFaultsRt>,
    /// Hash of (provider, key name): the key's own prompt cache.
    pub cache_seed: u64,
    /// `x-mock-key-id` answered with every reply on this key (the name,
    /// never the secret), so a client behind a gateway sees which key served.
    pub id_header: HeaderValue,
}

/// A key's fault rates and its own seeded random sequence.
pub struct KeyFaultsRt {
    pub cfg: KeyFaults,
    pub rng: Rng,
}

/// What one draw of a key's faults gave.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Drawn {
    Fault(Fault),
    /// Answer after this many more ms.
    Slow(u64),
}

impl KeyFaultsRt {
    pub fn new(cfg: KeyFaults, seed: u64) -> KeyFaultsRt {
        KeyFaultsRt {
            rng: Rng::new(cfg.seed.unwrap_or(seed)),
            cfg,
        }
    }

    /// One draw: at most one fault, chosen by where the draw falls among
    /// the cumulated rates.
    pub fn draw(&self) -> Option<Drawn> {
        let u = self.rng.uniform();
        let mut acc = 0.0;
        for (rate, name) in self.cfg.rates() {
            acc += rate;
            if rate > 0.0 && u < acc {
                return Some(match name {
                    "429" => Drawn::Fault(Fault::E429),
                    "500" => Drawn::Fault(Fault::E500),
                    "503" => Drawn::Fault(Fault::E503),
                    "slow" => Drawn::Slow(self.cfg.slow_ms),
                    "reset" => Drawn::Fault(Fault::Reset),
                    _ => Drawn::Fault(Fault::ResetAfterFirstChunk),
                });
            }
        }
        None
    }
}

/// A configured provider, compiled.
pub struct ProviderRt {
    pub name: Arc<str>,
    pub kind: Kind,
    pub prefix: String,
    pub keys: Vec<KeyRt>,
    pub models: Vec<ModelRt>,
    pub region: String,
    pub behavior: Behavior,
    /// How this provider caches prompts (None: it does not).
    pub cache: Option<CacheRt>,
}

/// A provider's prompt cache, compiled.
#[derive(Clone, Copy, Debug)]
pub struct CacheRt {
    pub rule: Rule,
    pub ttl_ms: u64,
}

/// A known model, compiled: its output limit (its own, else the
/// provider's) and whether it thinks.
pub struct ModelRt {
    pub id: String,
    pub max_output_tokens: Option<u64>,
    pub thinking: bool,
    /// Thinks adaptively only (Anthropic's newest models).
    pub adaptive_only: bool,
    /// Smallest cacheable prompt in tokens (None: the model does not cache).
    pub cache_min_tokens: Option<u64>,
}

impl ProviderRt {
    pub fn has_model(&self, m: &str) -> bool {
        self.model(m).is_some()
    }
    pub fn model(&self, m: &str) -> Option<&ModelRt> {
        self.models.iter().find(|x| x.id == m)
    }
    /// Largest output limit a request for this model may ask.
    pub fn output_limit(&self, m: &str) -> Option<u64> {
        self.model(m).and_then(|x| x.max_output_tokens)
    }
    /// The model takes a thinking configuration.
    pub fn thinks(&self, m: &str) -> bool {
        self.model(m).is_some_and(|x| x.thinking)
    }
    /// The model thinks adaptively only.
    pub fn adaptive_only(&self, m: &str) -> bool {
        self.model(m).is_some_and(|x| x.adaptive_only)
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
    /// `retry-after` seconds on a 429 (header, or the key's faults).
    pub retry_after_s: Option<u64>,
    /// Extra delay before the answer starts, stream or not.
    pub slow_ms: Option<u64>,
    /// Web searches the answer runs when the request declares the
    /// provider's web search tool (`x-mock-web-searches`, at most 10).
    pub web_searches: u64,
}

/// An injected fault.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Fault {
    E429,
    E500,
    E503,
    E529,
    Reset,
    /// Reset the connection after the first stream chunk (non-streaming
    /// answers: after half of the body).
    ResetAfterFirstChunk,
    AbortMidStream,
    ErrorEvent,
}

impl Fault {
    pub fn parse(s: &str) -> Option<Fault> {
        Some(match s.trim() {
            "429" => Fault::E429,
            "500" => Fault::E500,
            "503" => Fault::E503,
            "529" => Fault::E529,
            "reset" => Fault::Reset,
            "reset-after-first-chunk" => Fault::ResetAfterFirstChunk,
            "abort-mid-stream" => Fault::AbortMidStream,
            "error-event" => Fault::ErrorEvent,
            _ => return None,
        })
    }
}

/// Everything a provider module needs to answer one request.
pub struct Ctx<'a> {
    /// The seeded random source (latency samples).
    pub rng: &'a Rng,
    pub provider: &'a ProviderRt,
    pub parts: &'a Parts,
    pub body: &'a Bytes,
    pub ov: Overrides,
    /// Fault to apply to the successful answer (abort mid-stream).
    pub abort: bool,
    /// Streams: end half-way with the provider's in-stream error event.
    pub error_event: bool,
    /// Reset the connection after the first stream chunk (or half of a
    /// non-streaming body).
    pub reset_after_first_chunk: bool,
    pub request_id: String,
    /// The prompt caches; None when the simulation is off.
    pub cache: Option<&'a PrefixCache>,
    /// The key the request authenticated with (set once it has).
    pub key: Option<&'a KeyRt>,
}

impl Ctx<'_> {
    /// This request's key's prompt cache for `model` (Azure: the
    /// deployment), or None when the provider or model caches nothing.
    pub fn prompt_cache(&self, model: &str) -> Option<KeyCache<'_>> {
        let (store, key, rt) = (self.cache?, self.key?, self.provider.cache?);
        let min_tokens = self.provider.model(model)?.cache_min_tokens?;
        Some(KeyCache {
            store,
            seed: key.cache_seed ^ hash_str(model).rotate_left(21),
            rule: rt.rule,
            min_tokens,
            ttl_ms: rt.ttl_ms,
        })
    }

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
        self.rng.sample_latency(&self.provider.behavior)
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
    /// Seconds announced in `retry-after` on a 429.
    pub fn retry_after_s(&self) -> u64 {
        self.ov
            .retry_after_s
            .unwrap_or(self.provider.behavior.retry_after_s)
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
        let body = if self.abort || self.reset_after_first_chunk {
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
        let cut = if self.reset_after_first_chunk {
            Some(body::Cut::ResetAfterFirst)
        } else if self.abort {
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
