//! The policy file: tenants, virtual keys (by SHA-256 hash) and limits.
//!
//! The YAML is parsed into serde types with `deny_unknown_fields`, then
//! compiled once into a [`Policy`] that answers lookups without allocation.
//! Every validation error has a fixed, exact message (see
//! `tests/fixtures/invalid/`), so a typo fails loudly and the old policy stays.
//!
//! Keys made through the admin API ([`ApiKey`], stored by
//! `crate::keystore`) are compiled into the same [`Policy`] beside the
//! file's, with the same checks: a Check finds either kind in one lookup.
//! The file wins: an API key whose id it also defines, or whose tenant it
//! does not, is left out with a warning rather than failing the file.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tollgate_wire::{model_matches, valid_model, valid_name, MAX_POLICY_NAME_LEN};

use crate::bucket::BucketSpec;

pub const MINUTE_MS: u64 = 60_000;
pub const DAY_MS: u64 = 86_400_000;

/// What to do with a request when Redis cannot be reached in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum RedisFailure {
    /// Admit the request (counted in `tollgate_authz_fail_open_total`).
    #[default]
    Open,
    /// Deny with 503 and an OpenAI-format body.
    Closed,
    /// Answer gRPC UNAVAILABLE so Envoy's `failure_mode_allow` decides.
    Envoy,
}

/// Limits of one scope. Absent fields mean "no limit".
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_minute: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_day: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_day: Option<u64>,
    /// Requests in flight at once (a key's or a tenant's, never a model's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_requests: Option<u64>,
}

/// Largest `max_concurrent_requests`.
pub const MAX_CONCURRENT_REQUESTS: u64 = 1_000_000;
impl Limits {
    /// The limits as (field name, value), in the file's field order.
    pub fn fields(&self) -> [(&'static str, Option<u64>); 4] {
        [
            ("requests_per_minute", self.requests_per_minute),
            ("tokens_per_minute", self.tokens_per_minute),
            ("requests_per_day", self.requests_per_day),
            ("tokens_per_day", self.tokens_per_day),
        ]
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    #[serde(default)]
    redis_failure: Option<RedisFailure>,
    #[serde(default)]
    reserve_completion_tokens: Option<u64>,
    /// IANA time zone of budget windows (default UTC).
    #[serde(default)]
    time_zone: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenant {
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    model_limits: BTreeMap<String, Limits>,
    #[serde(default)]
    redis_failure: Option<RedisFailure>,
    #[serde(default)]
    reserve_completion_tokens: Option<u64>,
    #[serde(default)]
    time_zone: Option<String>,
    #[serde(default)]
    budgets: Option<crate::budget::RawBudgets>,
    /// Add prompt-cache breakpoints to Anthropic requests that carry none.
    #[serde(default)]
    cache_breakpoints: Option<bool>,
    /// MCP servers and tools of every key of the tenant (`crate::mcp_rules`).
    #[serde(default)]
    mcp: Option<crate::mcp_rules::RawMcp>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKey {
    id: String,
    tenant: String,
    sha256: String,
    #[serde(default = "default_models")]
    models: Vec<String>,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    model_limits: BTreeMap<String, Limits>,
    #[serde(default)]
    budgets: Option<crate::budget::RawBudgets>,
    /// Overrides the tenant's `cache_breakpoints`.
    #[serde(default)]
    cache_breakpoints: Option<bool>,
    /// The MCP servers and tools this key may use (`crate::mcp_rules`).
    #[serde(default)]
    mcp: Option<crate::mcp_rules::RawMcp>,
}

fn default_models() -> Vec<String> {
    vec!["*".to_string()]
}

impl RawKey {
    fn fields(&self) -> KeyFields {
        KeyFields {
            models: self.models.clone(),
            limits: self.limits.clone(),
            model_limits: self.model_limits.clone(),
            budgets: self.budgets.clone(),
            cache_breakpoints: self.cache_breakpoints,
            mcp: self.mcp.clone(),
        }
    }
}

/// What a key grants, as a policy file's key states it: its models,
/// limits and money budgets (everything but its id, tenant and hash).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KeyFields {
    #[serde(default = "default_models")]
    pub models: Vec<String>,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub model_limits: BTreeMap<String, Limits>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budgets: Option<crate::budget::RawBudgets>,
    /// Overrides the tenant's `cache_breakpoints`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_breakpoints: Option<bool>,
    /// The MCP servers and tools the key may use (`crate::mcp_rules`);
    /// without it, none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<crate::mcp_rules::RawMcp>,
}

impl Default for KeyFields {
    fn default() -> Self {
        KeyFields {
            models: default_models(),
            limits: Limits::default(),
            model_limits: BTreeMap::new(),
            budgets: None,
            cache_breakpoints: None,
            mcp: None,
        }
    }
}

/// A key made through the admin API, as the policy compiles it: hashes
/// only, never a secret.
#[derive(Debug, Clone)]
pub struct ApiKey {
    pub id: String,
    pub tenant: String,
    /// SHA-256 of the current secret.
    pub sha256: [u8; 32],
    /// Secrets replaced by a rotation, each valid until its unix ms.
    pub previous: Vec<([u8; 32], i64)>,
    pub fields: KeyFields,
    /// Unix ms from which the key answers 401 `key_expired`.
    pub expires_at_ms: Option<i64>,
    /// Unix ms at which the key was revoked (401 `key_revoked` since).
    pub revoked_at_ms: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    version: u32,
    #[serde(default)]
    defaults: RawDefaults,
    #[serde(default)]
    tenants: BTreeMap<String, RawTenant>,
    #[serde(default)]
    keys: Vec<RawKey>,
    /// Price overrides and additions (see `crate::prices`).
    #[serde(default)]
    prices: BTreeMap<String, crate::prices::RawPrice>,
    /// US dollars per MCP tool call (`crate::mcp_rules`).
    #[serde(default)]
    mcp_prices: BTreeMap<String, crate::prices::Decimal>,
}

/// What a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Requests,
    Tokens,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Requests => "requests",
            Kind::Tokens => "tokens",
        }
    }
}

/// One configured limit: a bucket spec plus what it counts and its period.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit {
    pub kind: Kind,
    /// "minute" or "day".
    pub period: &'static str,
    pub spec: BucketSpec,
}

fn compile_limits(l: &Limits) -> Vec<Limit> {
    let mut out = Vec::new();
    let mut push = |v: Option<u64>, kind, period, window_ms| {
        if let Some(capacity) = v {
            out.push(Limit {
                kind,
                period,
                spec: BucketSpec {
                    capacity,
                    window_ms,
                },
            });
        }
    };
    push(l.requests_per_minute, Kind::Requests, "minute", MINUTE_MS);
    push(l.requests_per_day, Kind::Requests, "day", DAY_MS);
    push(l.tokens_per_minute, Kind::Tokens, "minute", MINUTE_MS);
    push(l.tokens_per_day, Kind::Tokens, "day", DAY_MS);
    out
}

/// A tenant after validation.
#[derive(Debug, Clone)]
pub struct Tenant {
    pub name: String,
    pub limits: Vec<Limit>,
    pub model_limits: HashMap<String, Vec<Limit>>,
    pub redis_failure: RedisFailure,
    /// Tokens reserved at Check time for a request's answer (the prompt's
    /// estimate comes on top), settled by the usage report.
    pub reserve_completion_tokens: u64,
    /// Requests of all its keys in flight at once (`limits.max_concurrent_requests`).
    pub max_concurrent: Option<u64>,
    /// Prompt-cache breakpoints for Anthropic requests without any.
    pub cache_breakpoints: bool,
    /// Its `mcp:` (`None`: no restriction or limit of its own).
    pub mcp: Option<crate::mcp_rules::McpRules>,
}

/// Default of `reserve_completion_tokens`.
pub const DEFAULT_RESERVE_COMPLETION_TOKENS: u64 = 256;

/// A virtual key after validation (never holds the key itself).
#[derive(Debug, Clone)]
pub struct Key {
    pub id: String,
    pub tenant: String,
    pub models: Vec<String>,
    /// `models` joined with ",", as sent in `x-tollgate-models`.
    pub models_header: String,
    pub limits: Vec<Limit>,
    pub model_limits: HashMap<String, Vec<Limit>>,
    /// Requests of this key in flight at once (`limits.max_concurrent_requests`).
    pub max_concurrent: Option<u64>,
    /// The key's own `cache_breakpoints`, else its tenant's.
    pub cache_breakpoints: bool,
    /// Made through the admin API (else: the policy file's, read-only).
    pub from_api: bool,
    /// Unix ms from which the key is refused as expired.
    pub expires_at_ms: Option<i64>,
    /// Unix ms at which the key was revoked: refused since.
    pub revoked_at_ms: Option<i64>,
    /// Its `mcp:`; without one, no MCP server.
    pub mcp: crate::mcp_rules::McpRules,
}

/// A presented secret found by its hash: the key, and until when this
/// secret is valid when a rotation replaced it (unix ms).
#[derive(Debug, Clone, Copy)]
pub struct Credential<'a> {
    pub key: &'a Key,
    pub valid_until_ms: Option<i64>,
}

impl Key {
    /// Whether this key may use `model`. Patterns: `*` (any), an exact name,
    /// or a prefix ending in `*` (`openai/*`).
    pub fn allows_model(&self, model: &str) -> bool {
        self.models.iter().any(|p| model_matches(p, model))
    }
}

/// A compiled, valid policy.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Key index, and for a secret a rotation replaced, its last unix ms.
    by_hash: HashMap<[u8; 32], (usize, Option<i64>)>,
    by_id: HashMap<String, usize>,
    keys: Vec<Key>,
    tenants: HashMap<String, Tenant>,
    /// Prices, time zones and money budgets (`crate::budget`).
    pub money: crate::budget::Money,
    /// Prices of MCP tool calls.
    pub mcp_prices: crate::mcp_rules::McpPrices,
}

/// A policy that failed to load; `Display` is the exact, user-facing message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, PolicyError> {
    Err(PolicyError(msg.into()))
}

/// A tenant or key id: the wire contract's name rule, at most
/// [`MAX_POLICY_NAME_LEN`] bytes.
pub fn valid_policy_name(s: &str) -> bool {
    valid_name(s) && s.len() <= MAX_POLICY_NAME_LEN
}

fn check_limits(owner: &str, field: &str, l: &Limits) -> Result<(), PolicyError> {
    let fields = [
        ("requests_per_minute", l.requests_per_minute),
        ("tokens_per_minute", l.tokens_per_minute),
        ("requests_per_day", l.requests_per_day),
        ("tokens_per_day", l.tokens_per_day),
    ];
    for (name, v) in fields {
        if v == Some(0) {
            return err(format!("{owner}: {field}.{name} must be greater than 0"));
        }
    }
    match l.max_concurrent_requests {
        Some(0) => err(format!(
            "{owner}: {field}.max_concurrent_requests must be greater than 0"
        )),
        Some(n) if n > MAX_CONCURRENT_REQUESTS => err(format!(
            "{owner}: {field}.max_concurrent_requests must be at most {MAX_CONCURRENT_REQUESTS}"
        )),
        _ => Ok(()),
    }
}

fn check_model_limits(
    owner: &str,
    ml: &BTreeMap<String, Limits>,
) -> Result<HashMap<String, Vec<Limit>>, PolicyError> {
    let mut out = HashMap::new();
    for (model, limits) in ml {
        if !valid_model(model) || model.contains('*') {
            return err(format!(
                "{owner}: model_limits key {model:?} must be an exact model name"
            ));
        }
        check_limits(owner, &format!("model_limits.{model:?}"), limits)?;
        if limits.max_concurrent_requests.is_some() {
            return err(format!(
                "{owner}: model_limits.{model:?}.max_concurrent_requests: concurrency caps are per key and per tenant, not per model"
            ));
        }
        out.insert(model.clone(), compile_limits(limits));
    }
    Ok(out)
}

/// SHA-256 of a virtual key, as lowercase hex (what the policy stores).
pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// The tenants of a policy, each with the defaults applied.
fn compile_tenants(raw: &RawPolicy) -> Result<HashMap<String, Tenant>, PolicyError> {
    let default_failure = raw.defaults.redis_failure.unwrap_or_default();
    let default_reserve = raw
        .defaults
        .reserve_completion_tokens
        .unwrap_or(DEFAULT_RESERVE_COMPLETION_TOKENS);
    let mut tenants = HashMap::new();
    for (name, t) in &raw.tenants {
        if !valid_policy_name(name) {
            return err(format!(
                "tenant {name:?}: name must match [A-Za-z0-9._-]{{1,64}}"
            ));
        }
        let owner = format!("tenant {name:?}");
        check_limits(&owner, "limits", &t.limits)?;
        let model_limits = check_model_limits(&owner, &t.model_limits)?;
        tenants.insert(
            name.clone(),
            Tenant {
                name: name.clone(),
                limits: compile_limits(&t.limits),
                model_limits,
                redis_failure: t.redis_failure.unwrap_or(default_failure),
                reserve_completion_tokens: t.reserve_completion_tokens.unwrap_or(default_reserve),
                max_concurrent: t.limits.max_concurrent_requests,
                cache_breakpoints: t.cache_breakpoints.unwrap_or(false),
                mcp: t
                    .mcp
                    .as_ref()
                    .map(|m| crate::mcp_rules::compile(&owner, m))
                    .transpose()
                    .map_err(PolicyError)?,
            },
        );
    }
    Ok(tenants)
}

/// A key's `sha256` field as bytes: exactly 64 lowercase hex characters.
fn key_hash(owner: &str, sha256: &str) -> Result<[u8; 32], PolicyError> {
    let is_hex = sha256.len() == 64
        && sha256
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let mut hash = [0u8; 32];
    if !is_hex || hex::decode_to_slice(sha256, &mut hash).is_err() {
        return err(format!(
            "{owner}: sha256 must be 64 lowercase hex characters"
        ));
    }
    Ok(hash)
}

/// One key's grants checked and compiled (models, limits, model limits;
/// budgets are compiled with the money part), its ids already checked.
fn compile_key(owner: &str, id: &str, tenant: &str, f: &KeyFields) -> Result<Key, PolicyError> {
    if f.models.is_empty() {
        return err(format!("{owner}: models must not be empty"));
    }
    for m in &f.models {
        if !valid_model(m) {
            return err(format!("{owner}: invalid model pattern {m:?}"));
        }
    }
    check_limits(owner, "limits", &f.limits)?;
    let model_limits = check_model_limits(owner, &f.model_limits)?;
    let mcp = match &f.mcp {
        Some(m) => crate::mcp_rules::compile(owner, m).map_err(PolicyError)?,
        None => crate::mcp_rules::McpRules {
            tools: Some(Vec::new()),
            limits: Vec::new(),
        },
    };
    Ok(Key {
        id: id.to_string(),
        tenant: tenant.to_string(),
        models_header: f.models.join(","),
        models: f.models.clone(),
        limits: compile_limits(&f.limits),
        model_limits,
        max_concurrent: f.limits.max_concurrent_requests,
        cache_breakpoints: false,
        from_api: false,
        expires_at_ms: None,
        revoked_at_ms: None,
        mcp,
    })
}

/// Whether a key asks for cache breakpoints: its own setting, else its
/// tenant's.
fn breakpoints(f: &KeyFields, tenants: &HashMap<String, Tenant>, tenant: &str) -> bool {
    f.cache_breakpoints
        .unwrap_or_else(|| tenants.get(tenant).is_some_and(|t| t.cache_breakpoints))
}

/// Check a key's grants as the policy would (models, limits, model
/// limits, budgets): `Err` is the exact message, naming `owner`.
pub fn check_key_fields(owner: &str, f: &KeyFields) -> Result<(), PolicyError> {
    compile_key(owner, "", "", f)?;
    if let Some(b) = &f.budgets {
        crate::budget::compile_budgets(owner, b).map_err(PolicyError)?;
    }
    Ok(())
}

/// A compiled key's limits (and concurrency cap) as a policy file writes
/// them.
pub fn raw_limits(limits: &[Limit], max_concurrent: Option<u64>) -> Limits {
    let mut out = Limits {
        max_concurrent_requests: max_concurrent,
        ..Limits::default()
    };
    for l in limits {
        let v = Some(l.spec.capacity);
        match (l.kind, l.period) {
            (Kind::Requests, "day") => out.requests_per_day = v,
            (Kind::Requests, _) => out.requests_per_minute = v,
            (Kind::Tokens, "day") => out.tokens_per_day = v,
            (Kind::Tokens, _) => out.tokens_per_minute = v,
        }
    }
    out
}

/// An API key checked against the file's tenants, keys and hashes and
/// compiled; `Err` says why it is left out.
fn compile_api_key(
    k: &ApiKey,
    tenants: &HashMap<String, Tenant>,
    by_id: &HashMap<String, usize>,
    by_hash: &HashMap<[u8; 32], (usize, Option<i64>)>,
) -> Result<Key, PolicyError> {
    let owner = format!("API key {:?}", k.id);
    if !valid_policy_name(&k.id) {
        return err(format!("{owner}: id must match [A-Za-z0-9._-]{{1,64}}"));
    }
    if by_id.contains_key(&k.id) {
        return err(format!(
            "{owner}: left out, the policy file defines a key with this id"
        ));
    }
    if !tenants.contains_key(&k.tenant) {
        return err(format!(
            "{owner}: left out, tenant {:?} is not in the policy file",
            k.tenant
        ));
    }
    let hashes = std::iter::once(&k.sha256).chain(k.previous.iter().map(|(h, _)| h));
    for h in hashes {
        if by_hash.contains_key(h) {
            return err(format!("{owner}: left out, its sha256 duplicates a key"));
        }
    }
    if let Some(b) = &k.fields.budgets {
        crate::budget::compile_budgets(&owner, b).map_err(PolicyError)?;
    }
    let mut key = compile_key(&owner, &k.id, &k.tenant, &k.fields)?;
    key.cache_breakpoints = breakpoints(&k.fields, tenants, &k.tenant);
    key.from_api = true;
    key.expires_at_ms = k.expires_at_ms;
    key.revoked_at_ms = k.revoked_at_ms;
    Ok(key)
}

/// The money part of a policy: prices, time zones and budgets (the file
/// keys' and those of `api`).
fn compile_money(raw: &RawPolicy, api: &[&ApiKey]) -> Result<crate::budget::Money, PolicyError> {
    crate::budget::Money::compile(&crate::budget::MoneyInput {
        default_zone: raw.defaults.time_zone.as_deref(),
        prices: &raw.prices,
        tenants: raw
            .tenants
            .iter()
            .map(|(n, t)| (n.as_str(), t.time_zone.as_deref(), t.budgets.as_ref()))
            .collect(),
        keys: raw
            .keys
            .iter()
            .map(|k| (k.id.as_str(), k.budgets.as_ref()))
            .chain(
                api.iter()
                    .map(|k| (k.id.as_str(), k.fields.budgets.as_ref())),
            )
            .collect(),
    })
    .map_err(PolicyError)
}

impl Policy {
    /// Parse and validate policy YAML.
    pub fn from_yaml(text: &str) -> Result<Policy, PolicyError> {
        Policy::from_yaml_with(text, &[]).map(|(p, _)| p)
    }

    /// Parse and validate policy YAML, then add the keys `api` made
    /// through the admin API: the policy, and why each API key left out
    /// was (the file's errors fail the whole policy, an API key's only
    /// itself).
    pub fn from_yaml_with(
        text: &str,
        api: &[ApiKey],
    ) -> Result<(Policy, Vec<String>), PolicyError> {
        if text.trim().is_empty() {
            return err("policy file is empty");
        }
        let raw: RawPolicy = match serde_norway::from_str(text) {
            Ok(r) => r,
            Err(e) => return err(e.to_string()),
        };
        if raw.version != 1 {
            return err(format!(
                "unsupported policy version {} (expected 1)",
                raw.version
            ));
        }
        let tenants = compile_tenants(&raw)?;
        let mut by_hash = HashMap::new();
        let mut by_id = HashMap::new();
        let mut keys = Vec::new();
        for k in &raw.keys {
            if !valid_policy_name(&k.id) {
                return err(format!(
                    "key {:?}: id must match [A-Za-z0-9._-]{{1,64}}",
                    k.id
                ));
            }
            let owner = format!("key {:?}", k.id);
            if by_id.contains_key(&k.id) {
                return err(format!("{owner}: duplicate id"));
            }
            if !tenants.contains_key(&k.tenant) {
                return err(format!("{owner}: unknown tenant {:?}", k.tenant));
            }
            let hash = key_hash(&owner, &k.sha256)?;
            if let Some(&(other, _)) = by_hash.get(&hash) {
                let other: &Key = &keys[other];
                return err(format!("{owner}: sha256 duplicates key {:?}", other.id));
            }
            by_hash.insert(hash, (keys.len(), None));
            by_id.insert(k.id.clone(), keys.len());
            let fields = k.fields();
            let mut key = compile_key(&owner, &k.id, &k.tenant, &fields)?;
            key.cache_breakpoints = breakpoints(&fields, &tenants, &k.tenant);
            keys.push(key);
        }
        let mut left_out = Vec::new();
        let mut added = Vec::new();
        for k in api {
            match compile_api_key(k, &tenants, &by_id, &by_hash) {
                Ok(key) => {
                    by_hash.insert(k.sha256, (keys.len(), None));
                    for (h, until) in &k.previous {
                        by_hash.insert(*h, (keys.len(), Some(*until)));
                    }
                    by_id.insert(k.id.clone(), keys.len());
                    keys.push(key);
                    added.push(k);
                }
                Err(e) => left_out.push(e.0),
            }
        }
        let money = compile_money(&raw, &added)?;
        let mcp_prices =
            crate::mcp_rules::McpPrices::compile(&raw.mcp_prices).map_err(PolicyError)?;
        let policy = Policy {
            by_hash,
            by_id,
            keys,
            tenants,
            money,
            mcp_prices,
        };
        Ok((policy, left_out))
    }

    /// Read, parse and validate a policy file.
    pub fn from_file(path: &Path) -> Result<Policy, PolicyError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Policy::from_yaml(&text),
            Err(e) => err(format!("cannot read policy file {}: {e}", path.display())),
        }
    }

    /// Look a presented virtual key up by its SHA-256, whatever its state
    /// (revoked, expired). Never touches Redis.
    pub fn authenticate(&self, presented_key: &str) -> Option<&Key> {
        self.credential(presented_key).map(|c| c.key)
    }

    /// The key a presented secret belongs to, and how long this secret
    /// stays valid when a rotation replaced it. The caller checks
    /// [`Key::revoked_at_ms`], [`Key::expires_at_ms`] and the grace
    /// against its clock.
    pub fn credential(&self, presented_key: &str) -> Option<Credential<'_>> {
        let digest: [u8; 32] = Sha256::digest(presented_key.as_bytes()).into();
        self.by_hash.get(&digest).map(|&(i, until)| Credential {
            key: &self.keys[i],
            valid_until_ms: until,
        })
    }

    /// Every key, the file's first, then the admin API's.
    pub fn keys(&self) -> impl Iterator<Item = &Key> {
        self.keys.iter()
    }

    pub fn key_by_id(&self, id: &str) -> Option<&Key> {
        self.by_id.get(id).map(|&i| &self.keys[i])
    }

    pub fn tenant(&self, name: &str) -> Option<&Tenant> {
        self.tenants.get(name)
    }

    pub fn key_count(&self) -> usize {
        self.keys.len()
    }

    pub fn tenant_count(&self) -> usize {
        self.tenants.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_of_demo_key() {
        assert_eq!(
            hash_key("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn minimal_policy_authenticates_by_hash() {
        let yaml = format!(
            "version: 1\ntenants:\n  t: {{}}\nkeys:\n  - id: k\n    tenant: t\n    sha256: {}\n",
            hash_key("tg-secret")
        );
        let p = Policy::from_yaml(&yaml).expect("valid");
        let k = p.authenticate("tg-secret").expect("known");
        assert_eq!(k.id, "k");
        assert_eq!(k.models_header, "*");
        assert!(p.authenticate("tg-other").is_none());
        assert_eq!(
            p.tenant("t").map(|t| t.redis_failure),
            Some(RedisFailure::Open)
        );
    }
}
