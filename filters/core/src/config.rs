//! Plugin configuration: parsed and validated once (in `on_configure`) into
//! an immutable [`Runtime`] shared through an `Arc`. Every error names the
//! offending field; a bad configuration is rejected whole, never half-applied.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;
use tollgate_wire::valid_name;

use crate::keys::KeyPool;

/// Default `max_tokens` sent to Anthropic when neither the client nor the
/// model entry gives one.
pub const DEFAULT_ANTHROPIC_MAX_TOKENS: u32 = 4096;
pub const DEFAULT_ANTHROPIC_VERSION: &str = "2023-06-01";

/// Provider API families. Part 2 adds variants here and one translator module
/// per pair under `translate/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// OpenAI and every OpenAI-compatible API (Mistral, Groq, vLLM, Ollama…).
    Openai,
    /// Anthropic Messages.
    Anthropic,
    /// Azure OpenAI (deployment paths, `api-version`, `api-key`).
    Azure,
    /// Google Gemini generateContent / batchEmbedContents.
    Gemini,
    /// Amazon Bedrock Converse / ConverseStream (SigV4).
    Bedrock,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Openai => "openai",
            Kind::Anthropic => "anthropic",
            Kind::Azure => "azure",
            Kind::Gemini => "gemini",
            Kind::Bedrock => "bedrock",
        }
    }

    /// Default `base_path` of the kind's native API.
    pub fn default_base_path(self) -> &'static str {
        match self {
            Kind::Openai | Kind::Anthropic => "/v1",
            Kind::Azure => "/openai",
            Kind::Gemini => "/v1beta",
            Kind::Bedrock => "",
        }
    }
}

fn default_weight() -> u32 {
    1
}
fn default_cooldown() -> u64 {
    30
}
fn default_max_attempts() -> u32 {
    3
}
fn default_failure_cooldown() -> u64 {
    5
}
fn default_failure_threshold() -> u32 {
    10
}
fn default_max_body() -> u64 {
    8 * 1024 * 1024
}
fn default_usage_cluster() -> String {
    "tollgate_authz_http".to_string()
}
fn default_usage_path() -> String {
    "/v1/usage".to_string()
}
fn default_usage_timeout() -> u64 {
    2000
}
fn default_usage_flush() -> u64 {
    100
}
/// Azure OpenAI `api-version` sent when the config names none (GA).
pub const DEFAULT_AZURE_API_VERSION: &str = "2024-10-21";

/// Headers `forward_headers` may not name: credentials (the gateway sets the
/// provider's own) and what the filter sets itself.
const NEVER_FORWARDED: [&str; 10] = [
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "cookie",
    "host",
    "content-length",
    "transfer-encoding",
    "accept-encoding",
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    providers: BTreeMap<String, RawProvider>,
    /// alias → `provider/model`, or a list of them: the first serves, the
    /// others are fallbacks in order.
    #[serde(default)]
    aliases: BTreeMap<String, RawAlias>,
    #[serde(default = "default_cooldown")]
    key_cooldown_seconds: u64,
    #[serde(default = "default_max_body")]
    max_body_bytes: u64,
    /// Envoy cluster for usage reports; "" disables reporting.
    #[serde(default = "default_usage_cluster")]
    usage_cluster: String,
    #[serde(default = "default_usage_path")]
    usage_path: String,
    #[serde(default = "default_usage_timeout")]
    usage_timeout_ms: u64,
    /// Sum usage per worker and post it every this many ms; 0 posts one
    /// report per answer.
    #[serde(default = "default_usage_flush")]
    usage_flush_ms: u64,
    /// The Messages routes: provider of bare model names (neither an alias
    /// nor `provider/model`); default the first `anthropic` provider.
    #[serde(default)]
    bare_model_provider: Option<String>,
    /// Attempts per request (the first included), each on another key of
    /// the provider when one is available; 1 turns retries off.
    #[serde(default = "default_max_attempts")]
    max_attempts: u32,
    /// Cooldown of a key after a 5xx, 408, reset or timeout that gave no
    /// `retry-after`.
    #[serde(default = "default_failure_cooldown")]
    failure_cooldown_seconds: u64,
    /// Server-side failures of a key within 10 s that start that cooldown.
    #[serde(default = "default_failure_threshold")]
    failure_threshold: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProvider {
    kind: Kind,
    cluster: String,
    #[serde(default)]
    base_path: Option<String>,
    /// Optional `:authority` to send upstream (real providers behind TLS).
    #[serde(default)]
    host: Option<String>,
    /// Anthropic: `anthropic-version` header.
    #[serde(default)]
    version: Option<String>,
    /// Anthropic: default `max_tokens` for models without their own.
    #[serde(default)]
    max_tokens: Option<u32>,
    /// OpenAI kind: add `stream_options.include_usage` to streamed requests
    /// (false for compatible APIs that refuse the field; usage is then read
    /// from whatever chunk carries it).
    #[serde(default)]
    stream_usage: Option<bool>,
    /// OpenAI kind: the server speaks the Responses API (`/responses`), so
    /// `/v1/responses` passes through; false for chat-only compatible
    /// servers, which get it translated to chat.
    #[serde(default)]
    responses_api: Option<bool>,
    /// Anthropic and Gemini: a translated request's web search tool becomes
    /// the provider's own (Anthropic's server-side web search tool, Gemini's
    /// Google Search grounding), which the provider bills per use; false
    /// drops it and names it in `x-tollgate-dropped`.
    #[serde(default)]
    web_search: Option<bool>,
    /// Each conversation stays on one key (weighted rendezvous hashing on
    /// the tenant and session, [`crate::session`]) so the provider's prompt
    /// cache, kept per key, serves every turn; false: a weighted random key
    /// per request. Default true.
    #[serde(default)]
    key_affinity: Option<bool>,
    /// OpenAI and Azure: send the session as `prompt_cache_key` when the
    /// client sent none. Default true for Azure and for OpenAI servers that
    /// speak the Responses API (OpenAI itself); false for chat-only
    /// compatible servers, which may not know the field.
    #[serde(default)]
    prompt_cache_key: Option<bool>,
    /// Azure: `api-version` query parameter.
    #[serde(default)]
    api_version: Option<String>,
    /// Azure: model → deployment name (default: the model name).
    #[serde(default)]
    deployments: Option<BTreeMap<String, String>>,
    /// Bedrock: AWS region (SigV4 scope and default host).
    #[serde(default)]
    region: Option<String>,
    /// Client request headers forwarded to this provider on purpose, beside
    /// those its API needs (e.g. `anthropic-beta`).
    #[serde(default)]
    forward_headers: Vec<String>,
    /// Why the provider cannot serve (e.g. its key's variable is not set):
    /// it then has no keys, and its models answer 502
    /// `provider_not_configured` with this text.
    #[serde(default)]
    disabled: Option<String>,
    models: RawModels,
    #[serde(default)]
    keys: Vec<RawKey>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawAlias {
    One(String),
    Targets(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawModels {
    List(Vec<String>),
    Map(BTreeMap<String, RawModel>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    #[serde(default)]
    max_tokens: Option<u32>,
    /// A model that reasons: OpenAI / Azure take `reasoning_effort`, Gemini
    /// a `thinkingConfig`, Anthropic models on Bedrock a thinking budget;
    /// the others refuse them.
    #[serde(default)]
    reasoning: bool,
    /// The most output tokens the model writes in one answer (the
    /// provider's documented limit): a translated request asking for more
    /// is lowered to it.
    #[serde(default)]
    max_output_tokens: Option<u32>,
    /// The model's context window in tokens (documentation; `GET
    /// /v1/models` shows it).
    #[serde(default)]
    context_window: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKey {
    id: String,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    value_env: Option<String>,
    #[serde(default = "default_weight")]
    weight: u32,
    /// Models this key may serve; absent = all of the provider's models.
    #[serde(default)]
    models: Option<Vec<String>>,
    /// Bedrock: AWS access key id (`value` is then the secret access key).
    #[serde(default)]
    access_key_id: Option<String>,
    /// Bedrock: optional session token (temporary credentials).
    #[serde(default)]
    session_token: Option<String>,
    /// Bedrock: the environment variable holding the session token.
    #[serde(default)]
    session_token_env: Option<String>,
}

/// One upstream credential. `value` (and `session_token`) are secret: never
/// log or echo them. For Bedrock, `value` is the secret access key and
/// `access_key_id` names it.
#[derive(Clone, Default)]
pub struct Key {
    pub id: String,
    pub value: String,
    pub access_key_id: Option<String>,
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Key {{ id: {:?}, value: <redacted>, access_key_id: {:?}, session_token: {} }}",
            self.id,
            self.access_key_id,
            if self.session_token.is_some() {
                "<redacted>"
            } else {
                "None"
            }
        )
    }
}

#[derive(Debug, Clone)]
pub struct ModelCfg {
    /// Anthropic default `max_tokens`.
    pub max_tokens: u32,
    /// Keys allowed for this model, weights expanded.
    pub pool: KeyPool,
    /// A model that reasons (OpenAI / Azure `reasoning_effort`, Gemini
    /// `thinkingConfig`, Bedrock Claude thinking): the Messages front door
    /// maps `thinking` and `output_config.effort` to it.
    pub reasoning: bool,
    /// The model's output-token limit, when configured: translated front
    /// doors lower a larger `max_tokens` to it.
    pub max_output_tokens: Option<u32>,
    /// The model's context window, when configured.
    pub context_window: Option<u32>,
}

/// A model's settings from the plugin config, before its key pool is made.
struct ModelSettings {
    name: String,
    max_tokens: u32,
    reasoning: bool,
    max_output_tokens: Option<u32>,
    context_window: Option<u32>,
}

#[derive(Debug, Clone)]
pub struct Provider {
    pub name: String,
    pub cluster: String,
    pub base_path: String,
    pub host: Option<String>,
    /// Client headers forwarded on purpose (lowercase), see
    /// [`crate::plan::FORWARDED`] for those every provider gets.
    pub forward_headers: Vec<String>,
    pub models: BTreeMap<String, ModelCfg>,
    pub keys: Vec<Key>,
    /// What only this provider's kind has.
    pub api: Api,
    /// `/v1/responses` passes through to the provider's own Responses API
    /// (OpenAI unless `"responses_api": false`, Azure); otherwise it is
    /// translated through chat ([`crate::translate::responses`]).
    pub responses_api: bool,
    /// A translated request's web search runs as the provider's own search
    /// tool (Anthropic and Gemini; see [`crate::translate::add_web_search`]).
    pub web_search: bool,
    /// Sessions keep their key ([`crate::keys::KeyPool::pick_affine`]).
    pub key_affinity: bool,
    /// OpenAI / Azure requests carry the session as `prompt_cache_key`.
    pub cache_hint: bool,
    /// Left out on purpose (no key): why, said to clients naming its models.
    pub disabled: Option<String>,
}

/// One variant per provider kind, each with only its own settings (defaults
/// applied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Api {
    Openai {
        /// Ask for usage in streams (`stream_options.include_usage`).
        stream_usage: bool,
    },
    Anthropic {
        /// `anthropic-version` header.
        version: String,
    },
    Azure {
        /// `api-version` query parameter.
        api_version: String,
        /// Model → deployment name (absent: the model name).
        deployments: BTreeMap<String, String>,
        stream_usage: bool,
    },
    Gemini,
    Bedrock {
        /// SigV4 scope and default host.
        region: String,
    },
}

impl Api {
    pub fn kind(&self) -> Kind {
        match self {
            Api::Openai { .. } => Kind::Openai,
            Api::Anthropic { .. } => Kind::Anthropic,
            Api::Azure { .. } => Kind::Azure,
            Api::Gemini => Kind::Gemini,
            Api::Bedrock { .. } => Kind::Bedrock,
        }
    }
}

impl Provider {
    pub fn kind(&self) -> Kind {
        self.api.kind()
    }

    /// OpenAI and Azure: whether streamed requests ask for usage.
    pub fn stream_usage(&self) -> bool {
        match &self.api {
            Api::Openai { stream_usage } | Api::Azure { stream_usage, .. } => *stream_usage,
            _ => false,
        }
    }
}

#[derive(Debug, Clone)]
pub struct UsageTarget {
    pub cluster: String,
    pub path: String,
    pub timeout_ms: u64,
    /// 0: one report per answer; otherwise batched (see [`crate::usage`]).
    pub flush_ms: u64,
}

/// The compiled configuration.
#[derive(Debug, Clone)]
pub struct Runtime {
    pub providers: Vec<Provider>,
    by_name: HashMap<String, usize>,
    /// alias → (provider index, upstream model)
    aliases: BTreeMap<String, (usize, String)>,
    /// alias → the targets after its first, in order.
    fallbacks: BTreeMap<String, Vec<Resolved>>,
    pub cooldown_ms: u64,
    /// Attempts per request, the first included ([`crate::attempt`]).
    pub max_attempts: u32,
    /// Cooldown after `failure_threshold` server-side failures without a
    /// hint ([`crate::cooldown::server_failure`]).
    pub failure_cooldown_ms: u64,
    pub failure_threshold: u32,
    pub max_body_bytes: u64,
    pub usage: Option<UsageTarget>,
    /// Provider of bare model names on the Messages routes.
    bare_provider: Option<usize>,
}

/// A resolved model: which provider, which upstream model name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub provider: usize,
    pub model: String,
    /// `provider/model`, the canonical name used for usage and allow-lists.
    pub canonical: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid tollgate plugin configuration: {}", self.0)
    }
}

fn err<T>(msg: String) -> Result<T, ConfigError> {
    Err(ConfigError(msg))
}

impl Runtime {
    /// Parse and validate. `env` looks up environment variables (for
    /// `value_env`); tests pass a closure over a map.
    pub fn from_json(
        bytes: &[u8],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Runtime, ConfigError> {
        let de = &mut serde_json::Deserializer::from_slice(bytes);
        let raw: RawConfig = match serde_path_to_error::deserialize(de) {
            Ok(r) => r,
            Err(e) => {
                let path = e.path().to_string();
                let inner = e.into_inner();
                return if path == "." || path == "?" || path.is_empty() {
                    err(inner.to_string())
                } else {
                    err(format!("{path}: {inner}"))
                };
            }
        };
        Self::compile(raw, env)
    }

    fn compile(
        raw: RawConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Runtime, ConfigError> {
        if raw.providers.is_empty() {
            return err("providers: at least one provider is required".into());
        }
        if raw.max_body_bytes == 0 {
            return err("max_body_bytes: must be greater than 0".into());
        }
        if !raw.usage_path.starts_with('/') {
            return err("usage_path: must start with '/'".into());
        }
        if raw.max_attempts == 0 || raw.max_attempts > 10 {
            return err("max_attempts: must be between 1 and 10".into());
        }
        if raw.usage_flush_ms > 60_000 {
            return err("usage_flush_ms: at most 60000 (a minute of unreported usage)".into());
        }
        let mut providers = Vec::new();
        let mut by_name = HashMap::new();
        let mut key_ids: HashMap<String, String> = HashMap::new();
        for (name, p) in raw.providers {
            let provider = compile_provider(name, p, &mut key_ids, env)?;
            by_name.insert(provider.name.clone(), providers.len());
            providers.push(provider);
        }
        let mut rt = Runtime {
            providers,
            by_name,
            aliases: BTreeMap::new(),
            fallbacks: BTreeMap::new(),
            cooldown_ms: raw.key_cooldown_seconds.saturating_mul(1000),
            max_attempts: raw.max_attempts,
            failure_cooldown_ms: raw.failure_cooldown_seconds.saturating_mul(1000),
            failure_threshold: raw.failure_threshold.max(1),
            max_body_bytes: raw.max_body_bytes,
            usage: if raw.usage_cluster.is_empty() {
                None
            } else {
                Some(UsageTarget {
                    cluster: raw.usage_cluster,
                    path: raw.usage_path,
                    timeout_ms: raw.usage_timeout_ms,
                    flush_ms: raw.usage_flush_ms,
                })
            },
            bare_provider: None,
        };
        rt.bare_provider = match &raw.bare_model_provider {
            Some(name) => match rt.by_name.get(name) {
                Some(i) => Some(*i),
                None => {
                    return err(format!(
                        "bare_model_provider: '{name}' is not a configured provider"
                    ))
                }
            },
            None => rt
                .providers
                .iter()
                .position(|p| p.kind() == Kind::Anthropic),
        };
        rt.add_aliases(raw.aliases)?;
        Ok(rt)
    }

    /// The aliases, each resolved to its first target; the targets after it
    /// are its fallbacks, in order.
    fn add_aliases(&mut self, aliases: BTreeMap<String, RawAlias>) -> Result<(), ConfigError> {
        for (alias, target) in aliases {
            if alias.is_empty() || alias.contains('/') {
                return err(format!(
                    "aliases.{alias}: alias names must be non-empty and contain no '/'"
                ));
            }
            let targets = match target {
                RawAlias::One(t) => vec![t],
                RawAlias::Targets(ts) => ts,
            };
            let mut resolved = Vec::with_capacity(targets.len());
            for target in &targets {
                match self.resolve_canonical(target) {
                    Some(r) => resolved.push(r),
                    None => {
                        return err(format!(
                            "aliases.{alias}: {target} is not a configured provider/model"
                        ))
                    }
                }
            }
            let mut resolved = resolved.into_iter();
            let Some(first) = resolved.next() else {
                return err(format!("aliases.{alias}: at least one target is required"));
            };
            self.aliases
                .insert(alias.clone(), (first.provider, first.model));
            let rest: Vec<Resolved> = resolved.collect();
            if !rest.is_empty() {
                self.fallbacks.insert(alias, rest);
            }
        }
        Ok(())
    }

    fn resolve_canonical(&self, name: &str) -> Option<Resolved> {
        let (p, m) = name.split_once('/')?;
        let idx = *self.by_name.get(p)?;
        let prov = self.providers.get(idx)?;
        if !prov.models.contains_key(m) {
            return None;
        }
        Some(Resolved {
            provider: idx,
            model: m.to_string(),
            canonical: name.to_string(),
        })
    }

    /// `provider/model` or an alias.
    pub fn resolve(&self, name: &str) -> Option<Resolved> {
        if let Some((p, m)) = self.aliases.get(name) {
            let prov = self.providers.get(*p)?;
            return Some(Resolved {
                provider: *p,
                model: m.clone(),
                canonical: format!("{}/{}", prov.name, m),
            });
        }
        self.resolve_canonical(name)
    }

    /// A bare model name (`claude-sonnet-4-5`) as a model of the
    /// `bare_model_provider` (Messages routes).
    pub fn resolve_bare(&self, name: &str) -> Option<Resolved> {
        let prov = self.providers.get(self.bare_provider?)?;
        if name.contains('/') || !prov.models.contains_key(name) {
            return None;
        }
        Some(Resolved {
            provider: self.bare_provider?,
            model: name.to_string(),
            canonical: format!("{}/{}", prov.name, name),
        })
    }

    /// The fallbacks of an alias (empty for anything else), in order.
    pub fn fallbacks(&self, name: &str) -> &[Resolved] {
        self.fallbacks.get(name).map_or(&[], Vec::as_slice)
    }

    pub fn provider(&self, idx: usize) -> Option<&Provider> {
        self.providers.get(idx)
    }

    /// Every model id a client may name: `provider/model` then aliases, with
    /// the provider that owns it (disabled providers' models left out).
    pub fn model_ids(&self) -> Vec<(String, &str)> {
        let mut out = Vec::new();
        for p in self.providers.iter().filter(|p| p.disabled.is_none()) {
            for m in p.models.keys() {
                out.push((format!("{}/{}", p.name, m), p.name.as_str()));
            }
        }
        for a in self.aliases.keys() {
            out.push((a.clone(), "tollgate"));
        }
        out
    }
}

/// One provider's settings checked and compiled. `key_ids`: every key id
/// seen so far (an id names one key across all providers), and where.
fn compile_provider(
    name: String,
    mut p: RawProvider,
    key_ids: &mut HashMap<String, String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Provider, ConfigError> {
    let at = format!("providers.{name}");
    if !valid_name(&name) {
        return err(format!(
            "{at}: provider names may contain only letters, digits, '-', '_' and '.'"
        ));
    }
    if p.cluster.is_empty() {
        return err(format!("{at}.cluster: must not be empty"));
    }
    let base_path = p
        .base_path
        .take()
        .unwrap_or_else(|| p.kind.default_base_path().to_string());
    if !base_path.is_empty() && !base_path.starts_with('/') {
        return err(format!("{at}.base_path: must start with '/'"));
    }
    check_kind_settings(&at, &p)?;
    let region = p.region.unwrap_or_default();
    let default_max = p.max_tokens.unwrap_or(DEFAULT_ANTHROPIC_MAX_TOKENS);
    let model_max = model_settings(&at, p.kind, default_max, p.models)?;
    check_disabled(&at, p.disabled.as_deref(), &p.keys)?;
    let mut keys = Vec::new();
    let mut key_models: Vec<Option<Vec<String>>> = Vec::new();
    let mut weights = Vec::new();
    for (i, mut k) in p.keys.into_iter().enumerate() {
        let kat = format!("{at}.keys[{i}]");
        let (weight, models) = (k.weight, k.models.take());
        let key = compile_key(&kat, k, p.kind, key_ids, env)?;
        for (j, m) in models.iter().flatten().enumerate() {
            if !model_max.iter().any(|s| s.name == *m) {
                return err(format!("{kat}.models[{j}]: {m} is not one of {at}.models"));
            }
        }
        keys.push(key);
        weights.push(weight);
        key_models.push(models);
    }
    let models = model_pools(&at, model_max, &key_models, &weights, p.disabled.is_some())?;
    let deployments = p.deployments.unwrap_or_default();
    check_deployments(&at, &deployments, &models)?;
    let host = match (p.host, p.kind) {
        (Some(h), _) => Some(h),
        // SigV4 signs the host: send the real endpoint's name.
        (None, Kind::Bedrock) => Some(format!("bedrock-runtime.{region}.amazonaws.com")),
        (None, _) => None,
    };
    let forward_headers = forward_headers(&at, &p.forward_headers)?;
    let stream_usage = p.stream_usage.unwrap_or(true);
    let responses_api = match p.kind {
        Kind::Openai => p.responses_api.unwrap_or(true),
        Kind::Azure => true,
        _ => false,
    };
    let api = match p.kind {
        Kind::Openai => Api::Openai { stream_usage },
        Kind::Anthropic => Api::Anthropic {
            version: p
                .version
                .unwrap_or_else(|| DEFAULT_ANTHROPIC_VERSION.to_string()),
        },
        Kind::Azure => Api::Azure {
            api_version: p
                .api_version
                .unwrap_or_else(|| DEFAULT_AZURE_API_VERSION.to_string()),
            deployments,
            stream_usage,
        },
        Kind::Gemini => Api::Gemini,
        Kind::Bedrock => Api::Bedrock { region },
    };
    Ok(Provider {
        name,
        cluster: p.cluster,
        base_path: base_path.trim_end_matches('/').to_string(),
        host,
        forward_headers,
        models,
        keys,
        api,
        responses_api,
        web_search: p.web_search.unwrap_or(false),
        key_affinity: p.key_affinity.unwrap_or(true),
        cache_hint: match p.kind {
            Kind::Azure => p.prompt_cache_key.unwrap_or(true),
            Kind::Openai => p.prompt_cache_key.unwrap_or(responses_api),
            _ => false,
        },
        disabled: p.disabled,
    })
}

/// The settings that belong to one provider kind: refused on the others,
/// checked on theirs.
fn check_kind_settings(at: &str, p: &RawProvider) -> Result<(), ConfigError> {
    if p.kind != Kind::Azure {
        if p.api_version.is_some() {
            return err(format!("{at}.api_version: only valid for kind azure"));
        }
        if p.deployments.is_some() {
            return err(format!("{at}.deployments: only valid for kind azure"));
        }
    }
    if let Some(v) = &p.api_version {
        if !made_of(v, |b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.') {
            return err(format!(
                "{at}.api_version: must be a version such as 2024-10-21"
            ));
        }
    }
    match (p.kind, &p.region) {
        (Kind::Bedrock, Some(r)) => {
            if !made_of(r, |b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'
            }) {
                return err(format!(
                    "{at}.region: must be an AWS region such as us-east-1"
                ));
            }
        }
        (Kind::Bedrock, None) => return err(format!("{at}.region: required for kind bedrock")),
        (_, Some(_)) => return err(format!("{at}.region: only valid for kind bedrock")),
        (_, None) => {}
    }
    if p.kind != Kind::Anthropic {
        if p.version.is_some() {
            return err(format!("{at}.version: only valid for kind anthropic"));
        }
        if p.max_tokens.is_some() {
            return err(format!("{at}.max_tokens: only valid for kind anthropic"));
        }
    }
    if p.kind != Kind::Openai && p.responses_api.is_some() {
        return err(format!("{at}.responses_api: only valid for kind openai"));
    }
    if !matches!(p.kind, Kind::Openai | Kind::Azure) && p.prompt_cache_key.is_some() {
        return err(format!(
            "{at}.prompt_cache_key: only valid for kinds openai and azure"
        ));
    }
    if !matches!(p.kind, Kind::Anthropic | Kind::Gemini) && p.web_search.is_some() {
        return err(format!(
            "{at}.web_search: only valid for kinds anthropic and gemini"
        ));
    }
    if !matches!(p.kind, Kind::Openai | Kind::Azure) && p.stream_usage.is_some() {
        return err(format!(
            "{at}.stream_usage: only valid for kinds openai and azure"
        ));
    }
    if p.max_tokens == Some(0) {
        return err(format!("{at}.max_tokens: must be greater than 0"));
    }
    Ok(())
}

/// The provider's models, each with its `max_tokens` (`default_max` unless
/// its own) and whether it is a reasoning model.
fn model_settings(
    at: &str,
    kind: Kind,
    default_max: u32,
    models: RawModels,
) -> Result<Vec<ModelSettings>, ConfigError> {
    let mut out: Vec<ModelSettings> = Vec::new();
    match models {
        RawModels::List(list) => {
            for (i, m) in list.into_iter().enumerate() {
                if m.is_empty() {
                    return err(format!("{at}.models[{i}]: must not be empty"));
                }
                if out.iter().any(|s| s.name == m) {
                    return err(format!("{at}.models[{i}]: duplicate model {m}"));
                }
                out.push(ModelSettings {
                    name: m,
                    max_tokens: default_max,
                    reasoning: false,
                    max_output_tokens: None,
                    context_window: None,
                });
            }
        }
        RawModels::Map(map) => {
            for (m, cfg) in map {
                out.push(one_model(at, kind, default_max, m, cfg)?);
            }
        }
    }
    if out.is_empty() {
        return err(format!("{at}.models: at least one model is required"));
    }
    Ok(out)
}

/// One model of the map form, checked.
fn one_model(
    at: &str,
    kind: Kind,
    default_max: u32,
    m: String,
    cfg: RawModel,
) -> Result<ModelSettings, ConfigError> {
    if m.is_empty() {
        return err(format!("{at}.models: model names must not be empty"));
    }
    if cfg.max_tokens.is_some() && kind != Kind::Anthropic {
        return err(format!(
            "{at}.models.{m}.max_tokens: only valid for kind anthropic"
        ));
    }
    for (field, v) in [
        ("max_tokens", cfg.max_tokens),
        ("max_output_tokens", cfg.max_output_tokens),
        ("context_window", cfg.context_window),
    ] {
        if v == Some(0) {
            return err(format!("{at}.models.{m}.{field}: must be greater than 0"));
        }
    }
    if cfg.reasoning && kind == Kind::Anthropic {
        return err(format!(
            "{at}.models.{m}.reasoning: not valid for kind anthropic (its requests keep their own thinking)"
        ));
    }
    let max_tokens = cfg.max_tokens.unwrap_or(default_max);
    match cfg.max_output_tokens {
        Some(limit) if kind == Kind::Anthropic && max_tokens > limit => {
            return err(format!(
                "{at}.models.{m}.max_tokens: {max_tokens} is above the model's max_output_tokens ({limit})"
            ))
        }
        Some(limit) if cfg.context_window.is_some_and(|w| limit > w) => {
            return err(format!(
                "{at}.models.{m}.max_output_tokens: {limit} is above the model's context_window"
            ))
        }
        _ => {}
    }
    Ok(ModelSettings {
        name: m,
        max_tokens,
        reasoning: cfg.reasoning,
        max_output_tokens: cfg.max_output_tokens,
        context_window: cfg.context_window,
    })
}

/// One key (`kat`: its place in the config) checked, its value read
/// (from the environment for `value_env`), its id added to `key_ids`.
fn compile_key(
    kat: &str,
    k: RawKey,
    kind: Kind,
    key_ids: &mut HashMap<String, String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Key, ConfigError> {
    if !valid_name(&k.id) {
        return err(format!(
            "{kat}.id: must be non-empty and contain only letters, digits, '-', '_' and '.'"
        ));
    }
    if let Some(other) = key_ids.insert(k.id.clone(), kat.to_string()) {
        return err(format!(
            "{kat}.id: duplicate key id {} (also {other})",
            k.id
        ));
    }
    if k.weight == 0 || k.weight > 1000 {
        return err(format!("{kat}.weight: must be between 1 and 1000"));
    }
    let from_env = |field: &str, var: &str| {
        env(var).ok_or_else(|| {
            ConfigError(format!(
                "{kat}.{field}: environment variable {var} is not set (list it in vm_config.environment_variables.host_env_keys)"
            ))
        })
    };
    let value = match (k.value, k.value_env) {
        (Some(v), None) => v,
        (None, Some(var)) => from_env("value_env", &var)?,
        _ => {
            return err(format!(
                "{kat}: exactly one of value and value_env is required"
            ))
        }
    };
    let session_token = match (k.session_token, k.session_token_env) {
        (t, None) => t,
        (None, Some(var)) => Some(from_env("session_token_env", &var)?),
        (Some(_), Some(_)) => {
            return err(format!(
                "{kat}: at most one of session_token and session_token_env"
            ))
        }
    };
    if value.is_empty() {
        return err(format!("{kat}: the key value is empty"));
    }
    if value.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return err(format!("{kat}: the key value contains control characters"));
    }
    match (kind, &k.access_key_id) {
        (Kind::Bedrock, None) => {
            return err(format!(
                "{kat}.access_key_id: required for kind bedrock (value is the secret access key)"
            ))
        }
        (Kind::Bedrock, Some(a)) if !made_of(a, |b| b.is_ascii_alphanumeric()) => {
            return err(format!("{kat}.access_key_id: must be letters and digits"))
        }
        (Kind::Bedrock, _) => {}
        (_, Some(_)) => return err(format!("{kat}.access_key_id: only valid for kind bedrock")),
        (_, None) => {}
    }
    if kind != Kind::Bedrock && session_token.is_some() {
        return err(format!("{kat}.session_token: only valid for kind bedrock"));
    }
    if session_token
        .as_ref()
        .is_some_and(|t| t.is_empty() || t.bytes().any(|b| b < 0x20 || b == 0x7f))
    {
        return err(format!(
            "{kat}.session_token: must be non-empty, without control characters"
        ));
    }
    Ok(Key {
        id: k.id,
        value,
        access_key_id: k.access_key_id,
        session_token,
    })
}

/// Each model's weighted pool of the keys that may serve it (`key_models`:
/// each key's own list, `None` for all).
fn model_pools(
    at: &str,
    model_max: Vec<ModelSettings>,
    key_models: &[Option<Vec<String>>],
    weights: &[u32],
    disabled: bool,
) -> Result<BTreeMap<String, ModelCfg>, ConfigError> {
    let mut models = BTreeMap::new();
    for settings in model_max {
        let m = settings.name;
        let allowed: Vec<(u16, u32)> = (0..key_models.len())
            .filter(|&i| match key_models.get(i) {
                Some(Some(list)) => list.contains(&m),
                _ => true,
            })
            .map(|i| (i as u16, weights.get(i).copied().unwrap_or(1)))
            .collect();
        if allowed.is_empty() && !disabled {
            return err(format!("{at}.models: no key may serve model {m}"));
        }
        models.insert(
            m,
            ModelCfg {
                max_tokens: settings.max_tokens,
                pool: KeyPool::new(&allowed),
                reasoning: settings.reasoning,
                max_output_tokens: settings.max_output_tokens,
                context_window: settings.context_window,
            },
        );
    }
    Ok(models)
}

/// A disabled provider has a short reason and no keys; any other has keys.
fn check_disabled(at: &str, disabled: Option<&str>, keys: &[RawKey]) -> Result<(), ConfigError> {
    match disabled {
        Some(why)
            if why.is_empty() || why.chars().count() > 256 || why.chars().any(char::is_control) =>
        {
            err(format!(
                "{at}.disabled: must be 1-256 characters without control characters"
            ))
        }
        Some(_) if !keys.is_empty() => err(format!("{at}.keys: a disabled provider has no keys")),
        None if keys.is_empty() => err(format!("{at}.keys: at least one key is required")),
        _ => Ok(()),
    }
}

/// Azure's deployment names: each for a model of the provider, and a name.
fn check_deployments(
    at: &str,
    deployments: &BTreeMap<String, String>,
    models: &BTreeMap<String, ModelCfg>,
) -> Result<(), ConfigError> {
    for (m, d) in deployments {
        if !models.contains_key(m) {
            return err(format!("{at}.deployments.{m}: not one of {at}.models"));
        }
        if !made_of(d, |b| {
            b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.'
        }) {
            return err(format!("{at}.deployments.{m}: deployment names may contain only letters, digits, '-', '_' and '.'"));
        }
    }
    Ok(())
}

/// The client headers a provider forwards on purpose, lower-cased; never
/// credentials or gateway state.
fn forward_headers(at: &str, headers: &[String]) -> Result<Vec<String>, ConfigError> {
    let mut forward_headers = Vec::with_capacity(headers.len());
    for (i, h) in headers.iter().enumerate() {
        let h = h.to_ascii_lowercase();
        if !made_of(&h, |b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
            return err(format!(
                "{at}.forward_headers[{i}]: a header name has only letters, digits, '-' and '_'"
            ));
        }
        if NEVER_FORWARDED.contains(&h.as_str())
            || h.starts_with("x-tollgate-")
            || h.starts_with("x-amz-")
        {
            return err(format!("{at}.forward_headers[{i}]: '{h}' carries credentials or gateway state and is never forwarded"));
        }
        forward_headers.push(h);
    }
    Ok(forward_headers)
}

/// `s` is not empty and each of its bytes is `allowed`.
fn made_of(s: &str, allowed: impl Fn(u8) -> bool) -> bool {
    !s.is_empty() && s.bytes().all(allowed)
}

/// The `x-tollgate-models` allow-list check, shared with authz-service.
pub use tollgate_wire::models_allowed as model_allowed;

#[cfg(test)]
mod tests {
    use super::*;

    fn compile(provider: &str) -> Result<Runtime, ConfigError> {
        Runtime::from_json(
            format!(r#"{{"providers": {{"p": {provider}}}}}"#).as_bytes(),
            &|_| None,
        )
    }

    #[test]
    fn a_disabled_provider_has_a_reason_and_no_keys() {
        let rt = compile(r#"{"kind":"openai","cluster":"c","models":["m"],"disabled":"OPENAI_API_KEY is not set"}"#)
            .unwrap();
        assert_eq!(
            rt.providers[0].disabled.as_deref(),
            Some("OPENAI_API_KEY is not set")
        );
        assert!(rt.model_ids().is_empty());
        for (provider, want) in [
            (
                r#"{"kind":"openai","cluster":"c","models":["m"],"disabled":"x","keys":[{"id":"k","value":"v"}]}"#,
                "providers.p.keys: a disabled provider has no keys",
            ),
            (
                r#"{"kind":"openai","cluster":"c","models":["m"],"disabled":""}"#,
                "providers.p.disabled: must be 1-256 characters without control characters",
            ),
            (
                r#"{"kind":"openai","cluster":"c","models":["m"],"disabled":"a\nb"}"#,
                "providers.p.disabled: must be 1-256 characters without control characters",
            ),
            (
                r#"{"kind":"openai","cluster":"c","models":["m"]}"#,
                "providers.p.keys: at least one key is required",
            ),
        ] {
            assert_eq!(
                compile(provider).unwrap_err().to_string(),
                format!("invalid tollgate plugin configuration: {want}")
            );
        }
    }
}
