//! Keys made through the admin API, shared by every authz instance: one
//! JSON [`Record`] per key (hashes only, never a secret), a version counter
//! bumped by every write, and the version that last wrote each record, so
//! an instance polling the version reads only what changed.
//!
//! Behind one trait ([`KeyStore`]) with an in-memory store (one process,
//! `--redis-url memory://`) and a Redis one (`keys.lua`, contract at its
//! top); both keep the same rules: a write names the record it read and is
//! refused if another write came first ([`KeyStoreError::Conflict`]).
//!
//! Trade-off: records are never deleted (a revoked key keeps its id, so its
//! bucket and spend counters never pass to a new key of the same id); a
//! record is a few hundred bytes.

use std::future::Future;

use serde::{Deserialize, Serialize};

use crate::policy::{ApiKey, KeyFields};

pub mod memory;
pub mod redis;

pub use memory::MemoryKeyStore;
pub use redis::RedisKeyStore;

/// A secret a rotation replaced, valid until its grace period ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Previous {
    /// SHA-256 of the replaced secret, lowercase hex.
    pub sha256: String,
    /// Unix ms from which it is refused.
    pub valid_until_ms: i64,
}

/// One key as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub id: String,
    pub tenant: String,
    /// SHA-256 of the current secret, lowercase hex.
    pub sha256: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous: Vec<Previous>,
    /// Models, limits, model limits and budgets, as a policy file's key.
    pub fields: KeyFields,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at_ms: Option<i64>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl Record {
    /// The key as the policy compiles it; `None` when a hash is not 64
    /// hex characters (a record not written by this service).
    pub fn to_api_key(&self) -> Option<ApiKey> {
        let hash = |h: &str| {
            let mut out = [0u8; 32];
            hex::decode_to_slice(h, &mut out).ok().map(|()| out)
        };
        let mut previous = Vec::with_capacity(self.previous.len());
        for p in &self.previous {
            previous.push((hash(&p.sha256)?, p.valid_until_ms));
        }
        Some(ApiKey {
            id: self.id.clone(),
            tenant: self.tenant.clone(),
            sha256: hash(&self.sha256)?,
            previous,
            fields: self.fields.clone(),
            expires_at_ms: self.expires_at_ms,
            revoked_at_ms: self.revoked_at_ms,
        })
    }

    /// The stored form.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// What changed since a version a reader had seen.
#[derive(Debug, Clone, Default)]
pub struct Changes {
    pub version: u64,
    /// `records` is every record (replace what you hold), else only those
    /// written after the version seen (merge them in).
    pub full: bool,
    /// Stored JSON of each record.
    pub records: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyStoreError {
    /// The record was written by someone else since it was read.
    #[error("the key was changed meanwhile")]
    Conflict,
    #[error("key store unavailable: {0}")]
    Unavailable(String),
}

/// Where API keys live.
pub trait KeyStore: Send + Sync + 'static {
    /// What changed after version `seen` (0: everything).
    fn since(&self, seen: u64) -> impl Future<Output = Result<Changes, KeyStoreError>> + Send;
    /// One record's stored JSON.
    fn get(&self, id: &str) -> impl Future<Output = Result<Option<String>, KeyStoreError>> + Send;
    /// Write `new` for key `id` if its stored JSON is still `read` (`None`:
    /// no record yet); the new version.
    fn put(
        &self,
        id: &str,
        read: Option<&str>,
        new: &str,
    ) -> impl Future<Output = Result<u64, KeyStoreError>> + Send;
}

/// The key store used by the service: beside the bucket store, chosen by
/// the same `--redis-url`.
pub enum AnyKeyStore {
    Memory(MemoryKeyStore),
    Redis(RedisKeyStore),
}

impl KeyStore for AnyKeyStore {
    async fn since(&self, seen: u64) -> Result<Changes, KeyStoreError> {
        match self {
            AnyKeyStore::Memory(s) => s.since(seen).await,
            AnyKeyStore::Redis(s) => s.since(seen).await,
        }
    }

    async fn get(&self, id: &str) -> Result<Option<String>, KeyStoreError> {
        match self {
            AnyKeyStore::Memory(s) => s.get(id).await,
            AnyKeyStore::Redis(s) => s.get(id).await,
        }
    }

    async fn put(&self, id: &str, read: Option<&str>, new: &str) -> Result<u64, KeyStoreError> {
        match self {
            AnyKeyStore::Memory(s) => s.put(id, read, new).await,
            AnyKeyStore::Redis(s) => s.put(id, read, new).await,
        }
    }
}
