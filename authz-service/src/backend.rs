//! The store as the decision paths reach it: the bucket path of
//! [`crate::authz`] and the money path of [`crate::spend`] both call the
//! store through one [`Backend`], count what they decide in its metrics,
//! wait at most [`Backend::refill_wait`] for another Check's refill, and
//! answer a failed store call with the tenant's `redis_failure` (logged at
//! most once every 10 s).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::decision::{error_body, Decision};
use crate::metrics::Metrics;
use crate::policy::{Key, Policy, RedisFailure};
use crate::storage::{Store, StoreError};

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Logs a warning at most once per interval, counting what it suppressed.
struct Throttle {
    last_ms: AtomicU64,
    suppressed: AtomicU64,
    interval_ms: u64,
}

impl Throttle {
    fn new(interval_ms: u64) -> Self {
        Throttle {
            last_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
            interval_ms,
        }
    }

    /// Returns `Some(suppressed since last time)` when it is time to log.
    fn ready(&self) -> Option<u64> {
        let now = wall_ms();
        let last = self.last_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= self.interval_ms
            && self
                .last_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

/// A store, and what the decisions taken with it count and log.
pub struct Backend<S: Store> {
    pub store: S,
    pub metrics: Arc<Metrics>,
    /// Longest a Check waits for another Check's refill of its leases.
    pub refill_wait: Duration,
    fail_log: Throttle,
}

impl<S: Store> Backend<S> {
    pub fn new(store: S, metrics: Arc<Metrics>) -> Self {
        Backend {
            store,
            metrics,
            refill_wait: Duration::from_millis(20),
            fail_log: Throttle::new(10_000),
        }
    }

    /// Count a decision by result and reason.
    pub fn record(&self, result: &str, reason: &str) {
        self.metrics
            .decisions
            .with_label_values(&[result, reason])
            .inc();
    }

    /// A store call, timed in `tollgate_authz_redis_duration_seconds{op}`.
    pub async fn timed<T>(&self, op: &str, call: impl Future<Output = T>) -> T {
        let t = Instant::now();
        let out = call.await;
        self.metrics
            .redis_duration
            .with_label_values(&[op])
            .observe(t.elapsed().as_secs_f64());
        out
    }

    /// The store failed: apply the tenant's `redis_failure` policy.
    pub fn failed(
        &self,
        policy: &Policy,
        key: &Key,
        e: StoreError,
        allow: impl FnOnce(Vec<(&'static str, String)>) -> Decision,
    ) -> Decision {
        self.count_store_error("check", &e);
        let failure = policy
            .tenant(&key.tenant)
            .map(|t| t.redis_failure)
            .unwrap_or_default();
        match failure {
            RedisFailure::Open => {
                self.metrics.fail_open.inc();
                if let Some(suppressed) = self.fail_log.ready() {
                    tracing::warn!(error = %e, suppressed, "rate-limit store failed; admitting requests (fail-open)");
                }
                self.record("allowed", "fail_open");
                allow(Vec::new())
            }
            RedisFailure::Closed => {
                if let Some(suppressed) = self.fail_log.ready() {
                    tracing::warn!(error = %e, suppressed, tenant = %key.tenant, "rate-limit store failed; refusing requests (fail-closed)");
                }
                self.record("denied", "fail_closed");
                Decision::Deny {
                    status: 503,
                    body: error_body(
                        "The budget store (Redis) is unavailable and this tenant refuses requests without it (redis_failure: closed). Please retry in 1 second.",
                        "server_error",
                        "rate_limiter_unavailable",
                    ),
                    headers: vec![("retry-after", "1".to_string())],
                }
            }
            RedisFailure::Envoy => {
                if let Some(suppressed) = self.fail_log.ready() {
                    tracing::warn!(error = %e, suppressed, tenant = %key.tenant, "rate-limit store failed; answering UNAVAILABLE");
                }
                self.record("error", "unavailable");
                Decision::Unavailable(format!("rate-limit store failed: {e}"))
            }
        }
    }

    /// Count a failed store call by operation and error kind.
    pub fn count_store_error(&self, op: &str, e: &StoreError) {
        let kind = match e {
            StoreError::Timeout => "timeout",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Protocol(_) => "protocol",
            StoreError::Overloaded => "overloaded",
        };
        self.metrics
            .redis_errors
            .with_label_values(&[op, kind])
            .inc();
    }

    /// A usage debit failed: counted, and logged at most once per interval.
    pub fn debit_failed(&self, e: &StoreError) {
        self.count_store_error("debit", e);
        if let Some(suppressed) = self.fail_log.ready() {
            tracing::warn!(error = %e, suppressed, "rate-limit store failed; usage not debited yet");
        }
    }
}
