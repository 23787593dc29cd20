//! Configuration: the YAML file format and its compiled, validated form.
//!
//! Serde types use `deny_unknown_fields` so a typo in `config/mock-llm.yaml`
//! fails at startup instead of being silently ignored.

use serde::Deserialize;
use std::collections::BTreeMap;

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Listen address; the `--listen` flag overrides it.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Seed of the random source used for latency samples and error rates.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// How many recent requests `/_mock/stats` keeps (0 disables the log).
    #[serde(default = "default_recent")]
    pub recent_requests: usize,
    /// Largest accepted request body, bytes.
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    /// Behaviour applied to every provider that does not override it.
    #[serde(default)]
    pub behavior: Behavior,
    /// The simulated prompt caches (one per key).
    #[serde(default)]
    pub prompt_cache: PromptCache,
    /// Providers by name (the name appears in stats).
    pub providers: BTreeMap<String, Provider>,
}

fn default_listen() -> String {
    "127.0.0.1:9000".to_string()
}
fn default_seed() -> u64 {
    42
}
fn default_recent() -> usize {
    100
}
fn default_max_body() -> usize {
    32 * 1024 * 1024
}

/// The simulated prompt caches: each key's cache keeps the prefixes sent
/// with it for `ttl_s` after their last use, all keys together at most
/// `max_entries` prefixes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptCache {
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Entry lifetime after its last use (Anthropic's default and OpenAI's
    /// in-memory retention: 5 minutes). A breakpoint's `ttl: 1h` wins.
    #[serde(default = "default_cache_ttl")]
    pub ttl_s: u64,
    /// Most prefixes held, all keys together (about 40 bytes each).
    #[serde(default = "default_cache_entries")]
    pub max_entries: usize,
}

fn default_true() -> bool {
    true
}
fn default_cache_ttl() -> u64 {
    300
}
fn default_cache_entries() -> usize {
    200_000
}

impl Default for PromptCache {
    fn default() -> Self {
        PromptCache {
            enabled: true,
            ttl_s: default_cache_ttl(),
            max_entries: default_cache_entries(),
        }
    }
}

/// Smallest cacheable prompt of the models without their own setting
/// (OpenAI's and Azure's automatic cache, Claude Sonnet 4.5's breakpoints).
pub const DEFAULT_CACHE_MIN_TOKENS: u64 = 1024;

/// Which native API a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Openai,
    Azure,
    Anthropic,
    Gemini,
    Bedrock,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Openai => "openai",
            Kind::Azure => "azure",
            Kind::Anthropic => "anthropic",
            Kind::Gemini => "gemini",
            Kind::Bedrock => "bedrock",
        }
    }
}

/// One provider.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provider {
    pub kind: Kind,
    /// Path prefix under which this provider's native paths are served,
    /// e.g. `/mistral` serves `POST /mistral/v1/chat/completions`.
    #[serde(default)]
    pub path_prefix: String,
    /// Accepted credentials.
    pub keys: Vec<KeyConfig>,
    /// Known model ids (Azure: deployment names).
    pub models: Vec<String>,
    /// Per-model settings, by id (each id one of `models`).
    #[serde(default)]
    pub model_settings: BTreeMap<String, ModelConfig>,
    /// Largest output token limit a request may ask for, for models that
    /// do not set their own (OpenAI `max_tokens`/`max_completion_tokens`,
    /// Responses `max_output_tokens`, Anthropic `max_tokens`, Gemini
    /// `maxOutputTokens`, Bedrock `maxTokens`).
    #[serde(default)]
    pub max_output_tokens: Option<u64>,
    /// Whether this provider's models take a thinking configuration, for
    /// models that do not say (default false).
    #[serde(default)]
    pub thinking: bool,
    /// Whether this provider's models cache prompts, for models that do not
    /// say (default true; the global `prompt_cache.enabled` must be on).
    #[serde(default)]
    pub prompt_cache: Option<bool>,
    /// Smallest cacheable prompt in tokens, for models that do not say
    /// (default 1024).
    #[serde(default)]
    pub cache_min_tokens: Option<u64>,
    /// Bedrock only: the SigV4 region that signatures must be scoped to.
    #[serde(default)]
    pub region: Option<String>,
    /// Overrides of the global behaviour for this provider.
    #[serde(default)]
    pub behavior: Option<Behavior>,
}

/// A model's own settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Largest output limit a request may ask for this model.
    #[serde(default)]
    pub max_output_tokens: Option<u64>,
    /// The model takes a thinking configuration (Anthropic `thinking`,
    /// Gemini `thinkingConfig`, Bedrock's `thinking` model field): `true`,
    /// `false`, or `adaptive` (Anthropic: adaptive thinking only, a
    /// `budget_tokens` configuration is refused).
    #[serde(default)]
    pub thinking: Option<Thinking>,
    /// The model caches prompts (Gemini: 2.5 and later only).
    #[serde(default)]
    pub prompt_cache: Option<bool>,
    /// The model's smallest cacheable prompt, tokens.
    #[serde(default)]
    pub cache_min_tokens: Option<u64>,
}

/// Whether a model thinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Thinking {
    Flag(bool),
    Mode(ThinkingMode),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThinkingMode {
    Adaptive,
}

/// One accepted credential.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    /// Stable, non-secret identifier reported in stats.
    pub name: String,
    /// The API key (Bedrock: unused, see `access_key_id`).
    #[serde(default)]
    pub key: Option<String>,
    /// Bedrock: AWS access key id.
    #[serde(default)]
    pub access_key_id: Option<String>,
    /// Bedrock: AWS secret access key.
    #[serde(default)]
    pub secret_access_key: Option<String>,
    /// `ok` (default), `always_429` or `always_401`.
    #[serde(default)]
    pub behavior: KeyBehavior,
    /// Faults injected on this key's requests.
    #[serde(default)]
    pub faults: Option<KeyFaults>,
}

/// Per-key fault injection. Each request on the key takes one draw from
/// the key's own seeded sequence and gets at most one fault; the rates
/// (each 0..=1) partition that draw, so they must sum to at most 1. For a
/// given seed the n-th request on the key always gets the same outcome, and
/// N requests give the same counts whatever their concurrency.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyFaults {
    /// Seed of this key's sequence (default: the global seed mixed with
    /// the key's name).
    #[serde(default)]
    pub seed: Option<u64>,
    /// Rate of 429 answers.
    #[serde(default, rename = "429")]
    pub e429: f64,
    /// `retry-after` seconds on this key's injected 429s (default: the
    /// behaviour's `retry_after_s`).
    #[serde(default)]
    pub retry_after_s: Option<u64>,
    /// Rate of 500 answers.
    #[serde(default, rename = "500")]
    pub e500: f64,
    /// Rate of 503 answers.
    #[serde(default, rename = "503")]
    pub e503: f64,
    /// Rate of slow answers: the answer (stream or not) starts after
    /// `slow_ms` more.
    #[serde(default)]
    pub slow: f64,
    #[serde(default = "default_slow_ms")]
    pub slow_ms: u64,
    /// Rate of connections reset before any response byte.
    #[serde(default)]
    pub reset: f64,
    /// Rate of answers whose connection is reset after the first stream
    /// chunk (non-streaming answers: after half of the body).
    #[serde(default)]
    pub reset_after_first_chunk: f64,
}

fn default_slow_ms() -> u64 {
    2000
}

impl KeyFaults {
    /// (rate, name) in the order they partition the draw.
    pub fn rates(&self) -> [(f64, &'static str); 6] {
        [
            (self.e429, "429"),
            (self.e500, "500"),
            (self.e503, "503"),
            (self.slow, "slow"),
            (self.reset, "reset"),
            (self.reset_after_first_chunk, "reset_after_first_chunk"),
        ]
    }

    fn validate(&self) -> Result<(), String> {
        let mut sum = 0.0;
        for (v, n) in self.rates() {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("faults.{n} must be within 0..=1"));
            }
            sum += v;
        }
        if sum > 1.0 + 1e-9 {
            return Err(format!("faults: the rates sum to {sum}, more than 1"));
        }
        if self.slow_ms > MAX_DELAY_MS {
            return Err(format!("faults.slow_ms must be <= {MAX_DELAY_MS}"));
        }
        Ok(())
    }
}

/// Longest delay any knob may ask for, ms.
pub const MAX_DELAY_MS: u64 = 600_000;

/// Largest generated answer, bytes (`x-mock-response-bytes` is capped here).
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyBehavior {
    #[default]
    Ok,
    #[serde(rename = "always_429")]
    Always429,
    #[serde(rename = "always_401")]
    Always401,
}

/// Timing, size and fault knobs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Behavior {
    /// Delay before a non-streaming response (streams use `ttft_ms`).
    #[serde(default)]
    pub latency: Latency,
    /// Streams: delay before the first content chunk.
    #[serde(default)]
    pub ttft_ms: u64,
    /// Streams: delay between content chunks.
    #[serde(default)]
    pub itl_ms: u64,
    /// Target bytes of generated text (0 = the short echo sentence only).
    #[serde(default)]
    pub response_bytes: usize,
    /// Streams: characters of generated text per content chunk.
    #[serde(default = "default_chunk_chars")]
    pub stream_chunk_chars: usize,
    /// Seconds announced in `retry-after` on 429 answers.
    #[serde(default = "default_retry_after")]
    pub retry_after_s: u64,
    /// Probability (0..=1) of each injected fault, checked in this order.
    #[serde(default)]
    pub error_rates: ErrorRates,
}

fn default_chunk_chars() -> usize {
    16
}
fn default_retry_after() -> u64 {
    1
}

impl Default for Behavior {
    fn default() -> Self {
        Behavior {
            latency: Latency::default(),
            ttft_ms: 0,
            itl_ms: 0,
            response_bytes: 0,
            stream_chunk_chars: default_chunk_chars(),
            retry_after_s: default_retry_after(),
            error_rates: ErrorRates::default(),
        }
    }
}

/// Latency distribution, milliseconds.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Latency {
    #[serde(default)]
    pub dist: Dist,
    #[serde(default)]
    pub mean_ms: f64,
    #[serde(default)]
    pub sd_ms: f64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dist {
    #[default]
    Fixed,
    Normal,
    Lognormal,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorRates {
    #[serde(default, rename = "429")]
    pub e429: f64,
    #[serde(default, rename = "500")]
    pub e500: f64,
    #[serde(default, rename = "503")]
    pub e503: f64,
    #[serde(default, rename = "529")]
    pub e529: f64,
    #[serde(default)]
    pub reset: f64,
    #[serde(default)]
    pub abort_mid_stream: f64,
    #[serde(default)]
    pub error_event: f64,
}

impl Config {
    /// Parse and validate a YAML document.
    pub fn from_yaml(text: &str) -> Result<Config, String> {
        let cfg: Config = serde_norway::from_str(text).map_err(|e| format!("config: {e}"))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Read, parse and validate a file.
    pub fn load(path: &str) -> Result<Config, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("config {path}: {e}"))?;
        Config::from_yaml(&text)
    }

    fn validate(&self) -> Result<(), String> {
        if self.prompt_cache.ttl_s == 0 || self.prompt_cache.max_entries == 0 {
            return Err("prompt_cache: ttl_s and max_entries must be >= 1".to_string());
        }
        let mut seen: Vec<(Kind, &str)> = Vec::new();
        for (name, p) in &self.providers {
            if !p.path_prefix.is_empty()
                && (!p.path_prefix.starts_with('/') || p.path_prefix.ends_with('/'))
            {
                return Err(format!(
                    "provider {name}: path_prefix must start with '/' and not end with '/'"
                ));
            }
            if seen.contains(&(p.kind, p.path_prefix.as_str())) {
                return Err(format!(
                    "provider {name}: another {} provider already uses path_prefix {:?}",
                    p.kind.as_str(),
                    p.path_prefix
                ));
            }
            seen.push((p.kind, p.path_prefix.as_str()));
            for k in &p.keys {
                if p.kind == Kind::Bedrock {
                    if k.access_key_id.is_none() || k.secret_access_key.is_none() {
                        return Err(format!(
                            "provider {name}: key {}: bedrock keys need access_key_id and secret_access_key",
                            k.name
                        ));
                    }
                } else if k.key.as_deref().unwrap_or("").is_empty() {
                    return Err(format!("provider {name}: key {}: missing key", k.name));
                }
                if let Some(f) = &k.faults {
                    f.validate()
                        .map_err(|e| format!("provider {name}: key {}: {e}", k.name))?;
                }
            }
            if let Some(id) = p.model_settings.keys().find(|id| !p.models.contains(id)) {
                return Err(format!(
                    "provider {name}: model_settings names {id:?}, which is not one of its models"
                ));
            }
            if p.kind == Kind::Bedrock && p.region.is_none() {
                return Err(format!("provider {name}: bedrock needs region"));
            }
            let mut mins = p
                .model_settings
                .values()
                .filter_map(|m| m.cache_min_tokens)
                .chain(p.cache_min_tokens);
            if mins.any(|n| n == 0) {
                return Err(format!(
                    "provider {name}: cache_min_tokens must be >= 1 (prompt_cache: false turns caching off)"
                ));
            }
            for b in std::iter::once(&self.behavior).chain(p.behavior.iter()) {
                b.validate().map_err(|e| format!("provider {name}: {e}"))?;
            }
        }
        Ok(())
    }
}

impl Behavior {
    fn validate(&self) -> Result<(), String> {
        let r = &self.error_rates;
        for (n, v) in [
            ("429", r.e429),
            ("500", r.e500),
            ("503", r.e503),
            ("529", r.e529),
            ("reset", r.reset),
            ("abort_mid_stream", r.abort_mid_stream),
            ("error_event", r.error_event),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("error_rates.{n} must be within 0..=1"));
            }
        }
        if self.latency.mean_ms < 0.0 || self.latency.sd_ms < 0.0 {
            return Err("latency mean_ms and sd_ms must be >= 0".to_string());
        }
        if self.response_bytes > MAX_RESPONSE_BYTES {
            return Err(format!("response_bytes must be <= {}", MAX_RESPONSE_BYTES));
        }
        if self.stream_chunk_chars == 0 {
            return Err("stream_chunk_chars must be > 0".to_string());
        }
        Ok(())
    }
}
