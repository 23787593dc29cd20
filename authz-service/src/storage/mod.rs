//! Bucket storage behind one trait, with an in-memory and a Redis
//! implementation that share one behaviour suite (`tests/storage_suite.rs`).
//!
//! Both implement the same rules as [`crate::bucket`]: the memory store calls
//! those functions directly, the Redis store runs `bucket.lua`.

use std::future::Future;

use crate::bucket::BucketSpec;

pub mod memory;
pub mod redis;

pub use memory::{Clock, ManualClock, MemorySlots, MemoryStore, SystemClock};
pub use redis::{RedisStore, RedisStoreConfig};

/// One bucket touched by a request.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketOp {
    /// Storage key, e.g. `tg:{demo}:rm:k:demo-key` (see [`bucket_key`]).
    pub key: String,
    pub spec: BucketSpec,
    /// Units to take: 1 per request, the reservation for a token bucket at
    /// Check time, the usage (minus the reservation) on a debit; negative
    /// on a debit is a refund.
    pub take: i64,
    /// Extra units wanted as a lease on an admitted check (0 for none).
    pub lease: u64,
}

/// Result of a check-and-take or debit over a set of buckets.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Index (into the ops) of the first bucket that refused, if any.
    pub denied: Option<usize>,
    /// Level of each bucket after the decision (in ops order).
    pub levels: Vec<f64>,
    /// Lease granted per bucket (in ops order; zeros unless admitted).
    pub granted: Vec<u64>,
}

/// What a [`SlotOp`] does to a request's concurrency slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotMode {
    /// Take the slot in every set, or in none when one is full.
    Acquire,
    /// Remove the slot from every set.
    Release,
    /// Push the slot's deadline to now + ttl where it is still held.
    Renew,
    /// Count the slots each set holds (expired ones dropped).
    Count,
}

impl SlotMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SlotMode::Acquire => "acquire",
            SlotMode::Release => "release",
            SlotMode::Renew => "renew",
            SlotMode::Count => "count",
        }
    }
}

/// One request's concurrency slot in the slot sets of its key and tenant
/// (`slots.lua`: contract at its top).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotOp {
    pub mode: SlotMode,
    /// Each set's storage key ([`key_slots`], [`tenant_slots`]) and cap (most slots it may
    /// hold; read by [`SlotMode::Acquire`] only).
    pub sets: Vec<(String, u64)>,
    pub slot: String,
    /// A slot expires this long after it was taken or last renewed.
    pub ttl_ms: u64,
}

/// Result of a [`SlotOp`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotOutcome {
    /// Acquire: index (into the sets) of the first full set, if any.
    pub denied: Option<usize>,
    /// Acquire and count: the slots each set holds after the call;
    /// release and renew: 1 where the set held the slot, else 0.
    pub counts: Vec<u64>,
}

/// Storage key of a key's slot set. The tenant is the hash tag, as for
/// buckets, so a request's sets share a Redis Cluster slot.
pub fn key_slots(tenant: &str, key_id: &str) -> String {
    format!("tg:{{{tenant}}}:cc:k:{key_id}")
}

/// Storage key of a tenant's slot set.
pub fn tenant_slots(tenant: &str) -> String {
    format!("tg:{{{tenant}}}:cc:t")
}

/// A storage failure: the request's fate is decided by the failure policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("storage timed out")]
    Timeout,
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    #[error("storage answered unexpectedly: {0}")]
    Protocol(String),
    #[error("too many storage calls in flight")]
    Overloaded,
}

/// Where buckets live. All buckets of one call are decided atomically.
pub trait Store: Send + Sync + 'static {
    /// Admit or refuse a request over `ops`; if admitted take every op's
    /// `take` and grant leases (see [`crate::bucket::lease_grant`]), if
    /// refused take nothing.
    fn check_and_take(
        &self,
        ops: &[BucketOp],
    ) -> impl Future<Output = Result<Outcome, StoreError>> + Send;
    /// Take every op's `take` unconditionally (levels may go negative).
    fn debit(&self, ops: &[BucketOp]) -> impl Future<Output = Result<Outcome, StoreError>> + Send;
    /// Money budgets (`crate::budget`): admit or refuse over spend counters
    /// (`spend.lua`: capacity is the cap, `window_ms` the unix ms at which
    /// the counter expires); levels are what is left of each cap.
    fn spend_take(
        &self,
        ops: &[BucketOp],
    ) -> impl Future<Output = Result<Outcome, StoreError>> + Send;
    /// Add every take to its spend counter unconditionally.
    fn spend_debit(
        &self,
        ops: &[BucketOp],
    ) -> impl Future<Output = Result<Outcome, StoreError>> + Send;
    /// Acquire, release or renew a concurrency slot in all its sets at once.
    fn slots(&self, op: &SlotOp) -> impl Future<Output = Result<SlotOutcome, StoreError>> + Send;
}

/// Storage key of one bucket. `kind_period` is `rm`, `rd`, `tm` or `td`;
/// `scope` is `t`, `k:<key id>`, `tm:<model>` or `km:<key id>:<model>`.
/// The tenant is the hash tag, so all buckets of one request share a slot.
pub fn bucket_key(tenant: &str, kind_period: &str, scope: &str) -> String {
    format!("tg:{{{tenant}}}:{kind_period}:{scope}")
}

/// The store used by the service: chosen at start-up.
pub enum AnyStore {
    Memory(MemoryStore),
    Redis(RedisStore),
}

impl Store for AnyStore {
    async fn check_and_take(&self, ops: &[BucketOp]) -> Result<Outcome, StoreError> {
        match self {
            AnyStore::Memory(s) => s.check_and_take(ops).await,
            AnyStore::Redis(s) => s.check_and_take(ops).await,
        }
    }

    async fn debit(&self, ops: &[BucketOp]) -> Result<Outcome, StoreError> {
        match self {
            AnyStore::Memory(s) => s.debit(ops).await,
            AnyStore::Redis(s) => s.debit(ops).await,
        }
    }

    async fn spend_take(&self, ops: &[BucketOp]) -> Result<Outcome, StoreError> {
        match self {
            AnyStore::Memory(s) => s.spend_take(ops).await,
            AnyStore::Redis(s) => s.spend_take(ops).await,
        }
    }

    async fn spend_debit(&self, ops: &[BucketOp]) -> Result<Outcome, StoreError> {
        match self {
            AnyStore::Memory(s) => s.spend_debit(ops).await,
            AnyStore::Redis(s) => s.spend_debit(ops).await,
        }
    }

    async fn slots(&self, op: &SlotOp) -> Result<SlotOutcome, StoreError> {
        match self {
            AnyStore::Memory(s) => s.slots(op).await,
            AnyStore::Redis(s) => s.slots(op).await,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn keys_share_the_tenant_hash_tag() {
        assert_eq!(
            super::bucket_key("demo", "rm", "k:demo-key"),
            "tg:{demo}:rm:k:demo-key"
        );
    }
}
