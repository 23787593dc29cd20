//! The policy file: tenants, virtual keys (by SHA-256 hash) and limits.
//!
//! The YAML is parsed into serde types with `deny_unknown_fields`, then
//! compiled once into a [`Policy`] that answers lookups without allocation.
//! Every validation error has a fixed, exact message (see
//! `tests/fixtures/invalid/`), so a typo fails loudly and the old policy stays.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Deserialize;
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub requests_per_minute: Option<u64>,
    pub tokens_per_minute: Option<u64>,
    pub requests_per_day: Option<u64>,
    pub tokens_per_day: Option<u64>,
    /// Requests in flight at once (a key's or a tenant's, never a model's).
    pub max_concurrent_requests: Option<u64>,
}

/// Largest `max_concurrent_requests`.
pub const MAX_CONCURRENT_REQUESTS: u64 = 1_000_000;

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
}

fn default_models() -> Vec<String> {
    vec!["*".to_string()]
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
    by_hash: HashMap<[u8; 32], usize>,
    by_id: HashMap<String, usize>,
    keys: Vec<Key>,
    tenants: HashMap<String, Tenant>,
    /// Prices, time zones and money budgets (`crate::budget`).
    pub money: crate::budget::Money,
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

/// The money part of a policy: prices, time zones and budgets.
fn compile_money(raw: &RawPolicy) -> Result<crate::budget::Money, PolicyError> {
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
            .collect(),
    })
    .map_err(PolicyError)
}

impl Policy {
    /// Parse and validate policy YAML.
    pub fn from_yaml(text: &str) -> Result<Policy, PolicyError> {
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
            if let Some(&other) = by_hash.get(&hash) {
                let other: &Key = &keys[other];
                return err(format!("{owner}: sha256 duplicates key {:?}", other.id));
            }
            if k.models.is_empty() {
                return err(format!("{owner}: models must not be empty"));
            }
            for m in &k.models {
                if !valid_model(m) {
                    return err(format!("{owner}: invalid model pattern {m:?}"));
                }
            }
            check_limits(&owner, "limits", &k.limits)?;
            let model_limits = check_model_limits(&owner, &k.model_limits)?;
            by_hash.insert(hash, keys.len());
            by_id.insert(k.id.clone(), keys.len());
            keys.push(Key {
                id: k.id.clone(),
                tenant: k.tenant.clone(),
                models_header: k.models.join(","),
                models: k.models.clone(),
                limits: compile_limits(&k.limits),
                model_limits,
                max_concurrent: k.limits.max_concurrent_requests,
            });
        }
        let money = compile_money(&raw)?;
        Ok(Policy {
            by_hash,
            by_id,
            keys,
            tenants,
            money,
        })
    }

    /// Read, parse and validate a policy file.
    pub fn from_file(path: &Path) -> Result<Policy, PolicyError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Policy::from_yaml(&text),
            Err(e) => err(format!("cannot read policy file {}: {e}", path.display())),
        }
    }

    /// Look a presented virtual key up by its SHA-256. Never touches Redis.
    pub fn authenticate(&self, presented_key: &str) -> Option<&Key> {
        let digest: [u8; 32] = Sha256::digest(presented_key.as_bytes()).into();
        self.by_hash.get(&digest).map(|&i| &self.keys[i])
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
