//! The decision core: authenticate a virtual key against the policy (never
//! Redis), then take every bucket of the request from this instance's leases
//! ([`crate::lease`]), or, when they fall short, in one store call that also
//! refills them.
//!
//! The [`Authorizer`] holds one instance's state: the active policy, the
//! bucket leases, the money state of its budgets ([`crate::spend`]), the
//! queue of usage debits ([`crate::usage`]) and the store they all reach
//! through one [`Backend`].
//!
//! Transport-free: [`crate::service`] maps a [`Decision`] onto an ext_authz
//! `CheckResponse`, [`crate::http`] feeds usage reports to
//! [`Authorizer::record_usage`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use crate::backend::Backend;
use crate::bucket::{format_reset, ms_until_admits, ms_until_full};
use crate::decision::{echo, error_body};
use crate::lease::{Leases, Local};
use crate::metrics::Metrics;
use crate::plan::{plan, Planned, Scope, Take};
use crate::policy::{Credential, Key, Kind, Policy, Tenant};
use crate::spend::{MoneyState, MoneyTaken, Spend};
use crate::storage::{BucketOp, Outcome, Store, StoreError};
use crate::usage::{Recorded, Settle, UsageError, UsageQueue};

/// The request headers a decision needs (names as Envoy sends them, lowercase).
#[derive(Debug, Clone, Default)]
pub struct CheckInput {
    /// `authorization` header.
    pub authorization: Option<String>,
    /// `x-api-key` header.
    pub api_key: Option<String>,
    /// `x-tollgate-model` header: the model, when a client states it up front
    /// (ext_authz sees headers only, never the body).
    pub model: Option<String>,
    /// `content-length` header: the prompt's size estimate for the token
    /// reservation.
    pub content_length: Option<u64>,
}

/// What to answer (stated in [`crate::decision`], below the money path
/// that answers too).
pub use crate::decision::Decision;

/// A usage report from the filter (`POST /v1/usage`): the wire contract's
/// type, unknown fields refused. `reserved` is absent in reports of older
/// filters: the usage is then debited in full.
pub use tollgate_wire::UsageReport;

/// Tokens to reserve for one request: the prompt estimated from its size
/// (4 bytes a token) plus the tenant's answer reservation, at most the
/// smallest key or tenant token bucket (so every bucket reserves the same
/// amount and one echoed figure settles all of them). 0 without token limits.
fn reservation(key: &Key, tenant: Option<&Tenant>, content_length: Option<u64>) -> u64 {
    let smallest = key
        .limits
        .iter()
        .chain(tenant.map(|t| t.limits.as_slice()).unwrap_or_default())
        .filter(|l| l.kind == Kind::Tokens)
        .map(|l| l.spec.capacity)
        .min();
    let Some(smallest) = smallest else { return 0 };
    estimate(tenant, content_length).min(smallest)
}

/// The tokens a request may use, uncapped: the prompt's estimate plus the
/// tenant's answer reservation (what money budgets reserve when no token
/// bucket caps it).
fn estimate(tenant: Option<&Tenant>, content_length: Option<u64>) -> u64 {
    let answer = tenant.map_or(crate::policy::DEFAULT_RESERVE_COMPLETION_TOKENS, |t| {
        t.reserve_completion_tokens
    });
    content_length
        .unwrap_or(0)
        .div_ceil(4)
        .saturating_add(answer)
}

/// "key demo-key", "tenant demo", "key demo-key model m", "tenant demo model m".
fn scope_label(scope: Scope, key: &Key, model: Option<&str>) -> String {
    let m = model.unwrap_or("");
    match scope {
        Scope::Key => format!("key {}", key.id),
        Scope::Tenant => format!("tenant {}", key.tenant),
        Scope::KeyModel => format!("key {} model {m}", key.id),
        Scope::TenantModel => format!("tenant {} model {m}", key.tenant),
    }
}

/// The six OpenAI rate-limit headers, from the most constrained bucket of
/// each kind (lowest remaining; on a tie the first: key before tenant).
/// Remaining never shows above the limit: a level is the store's plus what
/// this instance still leases, and the store refills to full while a lease
/// is out, so the sum can pass the capacity by up to the lease (the bound
/// docs/architecture.md gives); no client is told it has more than its limit.
fn rate_headers(planned: &[Planned], levels: &[f64]) -> Vec<(&'static str, String)> {
    let mut h = Vec::with_capacity(6);
    for (kind, names) in [
        (
            Kind::Requests,
            [
                "x-ratelimit-limit-requests",
                "x-ratelimit-remaining-requests",
                "x-ratelimit-reset-requests",
            ],
        ),
        (
            Kind::Tokens,
            [
                "x-ratelimit-limit-tokens",
                "x-ratelimit-remaining-tokens",
                "x-ratelimit-reset-tokens",
            ],
        ),
    ] {
        let best = planned
            .iter()
            .zip(levels)
            .filter(|(p, _)| p.limit.kind == kind)
            .map(|(p, level)| (p, level.min(p.limit.spec.capacity as f64)))
            .min_by(|a, b| a.1.floor().total_cmp(&b.1.floor()));
        if let Some((p, level)) = best {
            h.push((names[0], p.limit.spec.capacity.to_string()));
            h.push((names[1], (level.floor().max(0.0) as u64).to_string()));
            h.push((names[2], format_reset(ms_until_full(level, p.limit.spec))));
        }
    }
    h
}

const MISSING_KEY: &str = "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or in an x-api-key header.";
const INVALID_KEY: &str = "Incorrect API key provided. Check the virtual key issued to you by your Tollgate administrator.";
const NOT_BEARER: &str =
    "The Authorization header must use the Bearer scheme (Authorization: Bearer YOUR_KEY).";

/// Whether a found key may be used now: `Err` is the 401's code (also the
/// metric's reason) and message for a revoked key, an expired one, or a
/// secret past the grace a rotation gave it. The clock `now_ms` (unix ms)
/// is read only for a key with an expiry or a replaced secret.
fn usable(
    cred: &Credential<'_>,
    now_ms: impl FnOnce() -> i64,
) -> Result<(), (&'static str, String)> {
    let key = cred.key;
    if key.revoked_at_ms.is_some() {
        let msg = format!(
            "The virtual key {} was revoked. Ask your Tollgate administrator for a new key.",
            key.id
        );
        return Err(("key_revoked", msg));
    }
    let ends = [key.expires_at_ms, cred.valid_until_ms];
    if ends.iter().all(Option::is_none) {
        return Ok(());
    }
    let now = now_ms();
    if cred.valid_until_ms.is_some_and(|t| now >= t) {
        let msg = format!(
            "This secret of virtual key {} was replaced by a rotation and its grace period is over. Use the new secret.",
            key.id
        );
        return Err(("key_expired", msg));
    }
    if key.expires_at_ms.is_some_and(|t| now >= t) {
        let msg = format!(
            "The virtual key {} has expired. Ask your Tollgate administrator for a new key.",
            key.id
        );
        return Err(("key_expired", msg));
    }
    Ok(())
}

fn nonempty(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

/// Extract the presented virtual key: `Authorization: Bearer <key>` first,
/// else `x-api-key`. `Err` carries the 401 message.
fn presented_key(input: &CheckInput) -> Result<&str, &'static str> {
    let mut auth_error = MISSING_KEY;
    if let Some(auth) = nonempty(&input.authorization) {
        let (scheme, rest) = auth.split_once(' ').unwrap_or((auth, ""));
        if !scheme.eq_ignore_ascii_case("bearer") {
            auth_error = NOT_BEARER;
        } else if !rest.trim().is_empty() {
            return Ok(rest.trim());
        }
    }
    nonempty(&input.api_key).ok_or(auth_error)
}

pub struct Authorizer<S: Store> {
    policy: ArcSwap<Policy>,
    /// The store, the metrics, the failure policy.
    backend: Backend<S>,
    leases: Leases,
    usage_queue: UsageQueue,
    /// Money budgets: leases on spend counters, the wall clock.
    money: MoneyState,
}

impl<S: Store> Authorizer<S> {
    pub fn new(policy: Policy, store: S, metrics: Arc<Metrics>) -> Self {
        metrics.policy_keys.set(policy.key_count() as i64);
        Authorizer {
            policy: ArcSwap::from_pointee(policy),
            backend: Backend::new(store, metrics),
            leases: Leases::new(),
            usage_queue: UsageQueue::default(),
            money: Default::default(),
        }
    }

    /// Longest a Check waits for a refill already under way (twice the
    /// store's deadline is a good value); past it the failure policy
    /// applies as for a slow store.
    pub fn with_refill_wait(mut self, wait: Duration) -> Self {
        self.backend.refill_wait = wait;
        self
    }

    /// Use `wall` (unix milliseconds) as the clock of budget windows.
    pub fn with_wall_clock(mut self, wall: impl Fn() -> i64 + Send + Sync + 'static) -> Self {
        self.money = self.money.with_wall_clock(wall);
        self
    }

    /// The wall clock of budget windows and key expiry (unix ms).
    pub fn now_ms(&self) -> i64 {
        self.money.now_ms()
    }

    /// This instance's leases.
    pub fn leases(&self) -> &Leases {
        &self.leases
    }

    /// Money leases of this instance.
    pub fn money_leases(&self) -> &Leases {
        &self.money.leases
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.backend.metrics
    }

    pub fn store(&self) -> &S {
        &self.backend.store
    }

    /// Usage settlement, on this instance's leases, money state and store.
    fn settle(&self) -> Settle<'_, S> {
        Settle {
            backend: &self.backend,
            leases: &self.leases,
            money: &self.money,
            queue: &self.usage_queue,
        }
    }

    /// The money path, on this instance's money state and store.
    fn spend(&self) -> Spend<'_, S> {
        Spend {
            money: &self.money,
            backend: &self.backend,
        }
    }

    /// The active policy.
    pub fn policy(&self) -> Arc<Policy> {
        self.policy.load_full()
    }

    /// Swap in a new policy. In-flight checks finish on the old one.
    pub fn set_policy(&self, policy: Policy) {
        self.backend
            .metrics
            .policy_keys
            .set(policy.key_count() as i64);
        self.policy.store(Arc::new(policy));
        // Limits may have changed: no lease or cached refusal outlives them.
        self.leases.clear();
        self.money.leases.clear();
    }

    /// Decide one request.
    pub async fn check(&self, input: &CheckInput) -> Decision {
        let started = Instant::now();
        let mut money = None;
        let d = self.decide(input, &mut money).await;
        if let (Some(taken), Decision::Deny { .. } | Decision::Unavailable(_)) = (&money, &d) {
            self.spend().put_back(taken);
        }
        self.backend.metrics.checks.inc();
        self.backend
            .metrics
            .check_duration
            .observe(started.elapsed().as_secs_f64());
        d
    }

    /// The key a request presents, known to `policy` and allowed the
    /// request's model (when it states one), and that model; `Err` is the
    /// 401 or 403.
    fn authenticate<'p, 'i>(
        &self,
        policy: &'p Policy,
        input: &'i CheckInput,
    ) -> Result<(&'p Key, Option<&'i str>), Decision> {
        let key_str = match presented_key(input) {
            Ok(k) => k,
            Err(msg) => {
                self.backend.record("denied", "missing_key");
                return Err(Decision::Deny {
                    status: 401,
                    body: error_body(msg, "invalid_request_error", "invalid_api_key"),
                    headers: Vec::new(),
                });
            }
        };
        let Some(cred) = policy.credential(key_str) else {
            self.backend.record("denied", "invalid_key");
            return Err(Decision::Deny {
                status: 401,
                body: error_body(INVALID_KEY, "invalid_request_error", "invalid_api_key"),
                headers: Vec::new(),
            });
        };
        let key = cred.key;
        if let Err((reason, msg)) = usable(&cred, || self.money.now_ms()) {
            self.backend.record("denied", reason);
            return Err(Decision::Deny {
                status: 401,
                body: error_body(&msg, "invalid_request_error", reason),
                headers: Vec::new(),
            });
        }
        let model = input
            .model
            .as_deref()
            .map(str::trim)
            .filter(|m| !m.is_empty());
        if let Some(m) = model {
            if !key.allows_model(m) {
                self.backend.record("denied", "model_not_allowed");
                let msg = format!("The virtual key {} may not use model {}.", key.id, echo(m));
                return Err(Decision::Deny {
                    status: 403,
                    body: error_body(&msg, "invalid_request_error", "model_not_allowed"),
                    headers: Vec::new(),
                });
            }
        }
        Ok((key, model))
    }

    async fn decide(&self, input: &CheckInput, money: &mut Option<MoneyTaken>) -> Decision {
        let policy = self.policy.load();
        let (key, model) = match self.authenticate(&policy, input) {
            Ok(found) => found,
            Err(d) => return d,
        };
        let tenant = policy.tenant(&key.tenant);
        let mut reserve = reservation(key, tenant, input.content_length);
        if reserve == 0 && policy.money.applies(&key.id, &key.tenant) {
            // No token bucket caps the estimate: money budgets reserve it whole.
            reserve = estimate(tenant, input.content_length);
        }
        *money = match self.spend().admit(&policy, key, model, reserve).await {
            Ok(m) => m,
            Err(d) => return d,
        };
        let budget_headers = money.as_ref().map(|m| m.headers.clone());
        let reserved_at = money
            .as_ref()
            .and_then(|m| u64::try_from(m.at_ms / 60_000).ok());
        let allow = |mut rate_headers: Vec<(&'static str, String)>, reserved| {
            // Money was reserved for `reserve` tokens: the report settles it.
            let reserved = if budget_headers.is_some() {
                reserve
            } else {
                reserved
            };
            rate_headers.extend(budget_headers.iter().flatten().cloned());
            Decision::Allow {
                tenant: key.tenant.clone(),
                key_id: key.id.clone(),
                models: key.models_header.clone(),
                rate_headers,
                reserved,
                reserved_at,
                cache_breakpoints: key.cache_breakpoints,
            }
        };
        let planned = plan(&policy, key, model, Take::Check { reserve });
        if planned.is_empty() {
            self.backend.record("allowed", "no_limits");
            return allow(Vec::new(), 0);
        }
        self.take_buckets(&planned, reserve, &policy, key, model, allow)
            .await
    }

    /// Take every bucket of `planned` (`reserve` tokens from those that
    /// reserve) for `key` from this instance's leases, or, when they fall
    /// short, in one store call that refills them; `allow` builds the answer
    /// of an admitted request from its rate-limit headers and the tokens
    /// reserved.
    async fn take_buckets(
        &self,
        planned: &[Planned],
        reserve: u64,
        policy: &Policy,
        key: &Key,
        model: Option<&str>,
        allow: impl Fn(Vec<(&'static str, String)>, u64) -> Decision,
    ) -> Decision {
        let mut ops: Vec<BucketOp> = planned.iter().map(|p| p.op.clone()).collect();
        // From this instance's leases and cached refusals, when they decide.
        let from_memory = |ops: &[BucketOp], now| match self.leases.try_take(ops, now) {
            Local::Taken(levels) => {
                self.backend.record("allowed", "ok");
                Some(allow(rate_headers(planned, &levels), reserve))
            }
            Local::Denied { index, levels } => {
                Some(self.rate_limited(planned, index, &levels, key, model))
            }
            Local::Miss => None,
        };
        if let Some(d) = from_memory(&ops, Instant::now()) {
            return d;
        }
        // Refill: one at a time per lease set; the others wait, then take
        // from what it brought (a burst coalesces into one store call).
        let refill = self.leases.refill(&ops[0], Instant::now());
        let waiting = refill.wait();
        let Ok(_guard) = tokio::time::timeout(self.backend.refill_wait, refill.lock.lock()).await
        else {
            drop(waiting);
            return self.unreachable(policy, key, model, planned, StoreError::Timeout, allow);
        };
        let now = Instant::now();
        if let Some(d) = from_memory(&ops, now) {
            return d;
        }
        let wants = self.leases.wants(&ops, &refill, now);
        for (op, want) in ops.iter_mut().zip(wants) {
            op.lease = want;
        }
        drop(waiting);
        let result = self
            .backend
            .timed("check", self.backend.store.check_and_take(&ops))
            .await;
        let now = Instant::now();
        match result {
            Ok(outcome @ Outcome { denied: None, .. }) => {
                let levels = self.leases.grant(&ops, &outcome, now);
                self.backend.record("allowed", "ok");
                allow(rate_headers(planned, &levels), reserve)
            }
            Ok(Outcome {
                denied: Some(i),
                levels,
                ..
            }) if i < planned.len() => {
                let level = levels.get(i).copied().unwrap_or(0.0);
                let p = &planned[i];
                let retry = ms_until_admits(level, p.op.take, p.limit.spec);
                self.leases
                    .deny(&p.op, level, Duration::from_millis(retry), now);
                self.rate_limited(planned, i, &levels, key, model)
            }
            Ok(Outcome {
                denied: Some(i), ..
            }) => self.unreachable(
                policy,
                key,
                model,
                planned,
                StoreError::Protocol(format!("store refused unknown bucket {i}")),
                allow,
            ),
            Err(e) => self.unreachable(policy, key, model, planned, e, allow),
        }
    }

    /// A 429 naming bucket `i` of `planned`; `levels` are every bucket's.
    fn rate_limited(
        &self,
        planned: &[Planned],
        i: usize,
        levels: &[f64],
        key: &Key,
        model: Option<&str>,
    ) -> Decision {
        let (Some(p), Some(&level)) = (planned.get(i), levels.get(i)) else {
            return Decision::Unavailable(format!("no bucket {i}"));
        };
        let kind = p.limit.kind.as_str();
        let retry_ms = ms_until_admits(level, p.op.take, p.limit.spec);
        let msg = format!(
            "Rate limit reached for {} on {kind} per {}: limit {}, remaining {}. Please try again in {}.",
            scope_label(p.scope, key, model),
            p.limit.period,
            p.limit.spec.capacity,
            level.floor().max(0.0) as u64,
            format_reset(retry_ms),
        );
        self.backend.record(
            "denied",
            if p.limit.kind == Kind::Requests {
                "rate_limited_requests"
            } else {
                "rate_limited_tokens"
            },
        );
        self.backend
            .metrics
            .denials
            .with_label_values(&[&key.tenant, kind, p.limit.period, p.scope.as_str()])
            .inc();
        let mut headers = vec![("retry-after", retry_ms.div_ceil(1000).max(1).to_string())];
        headers.extend(rate_headers(planned, levels));
        Decision::Deny {
            status: 429,
            body: error_body(&msg, kind, "rate_limit_exceeded"),
            headers,
        }
    }

    /// The store could not decide: a bucket this instance saw exhausted is
    /// still refused (it cannot have refilled); otherwise the tenant's
    /// `redis_failure` policy applies.
    fn unreachable(
        &self,
        policy: &Policy,
        key: &Key,
        model: Option<&str>,
        planned: &[Planned],
        e: StoreError,
        allow: impl FnOnce(Vec<(&'static str, String)>, u64) -> Decision,
    ) -> Decision {
        let ops: Vec<BucketOp> = planned.iter().map(|p| p.op.clone()).collect();
        if let Some((i, levels)) = self.leases.known_exhausted(&ops, Instant::now()) {
            self.backend.count_store_error("check", &e);
            return self.rate_limited(planned, i, &levels, key, model);
        }
        self.backend.failed(policy, key, e, |h| allow(h, 0))
    }

    /// Settle a usage report: debit its tokens from the token buckets of
    /// the key, its tenant and, when configured, the model, minus what was
    /// reserved at Check time on the buckets that reserved it (a refund when
    /// the answer was shorter), and its cost from its money budgets. Levels
    /// may go negative. When the store is unreachable the debit is queued
    /// ([`crate::usage::USAGE_QUEUE_MAX`], oldest dropped first and counted)
    /// and applied by [`Authorizer::maintain`].
    pub async fn record_usage(&self, report: &UsageReport) -> Result<Recorded, UsageError> {
        let policy = self.policy.load();
        self.settle().record(&policy, report).await
    }

    /// Periodic upkeep (every 250 ms from the server): give idle leases back
    /// to the store, then apply queued usage debits while the store takes
    /// them.
    pub async fn maintain(&self) {
        for op in self.leases.sweep(Instant::now()) {
            // A lost return only leaves units unused until they refill.
            let _ = self.backend.store.debit(std::slice::from_ref(&op)).await;
        }
        for op in self.money.leases.sweep(Instant::now()) {
            // A lost return leaves money unspendable until the window ends.
            let _ = self
                .backend
                .store
                .spend_debit(std::slice::from_ref(&op))
                .await;
        }
        self.settle().drain().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bucket::BucketSpec;
    use crate::policy::Limit;

    fn planned(kind: Kind, capacity: u64, scope: Scope) -> Planned {
        let spec = BucketSpec {
            capacity,
            window_ms: 60_000,
        };
        Planned {
            op: BucketOp {
                key: String::new(),
                spec,
                take: 1,
                lease: 0,
            },
            limit: Limit {
                kind,
                period: "minute",
                spec,
            },
            scope,
        }
    }

    fn header<'a>(h: &'a [(&'static str, String)], name: &str) -> &'a str {
        h.iter()
            .find(|(n, _)| *n == name)
            .map_or("", |(_, v)| v.as_str())
    }

    #[test]
    fn remaining_never_shows_above_the_limit() {
        // A lease still held while the store refilled to full: the level
        // passes the capacity (seen live: 10,000,004,130 of 10,000,000,000).
        let plan = [
            planned(Kind::Requests, 1_000, Scope::Key),
            planned(Kind::Tokens, 10_000, Scope::Key),
            planned(Kind::Tokens, 50_000, Scope::Tenant),
        ];
        let h = rate_headers(&plan, &[1_003.0, 14_130.5, 10_500.0]);
        assert_eq!(header(&h, "x-ratelimit-limit-requests"), "1000");
        assert_eq!(header(&h, "x-ratelimit-remaining-requests"), "1000");
        assert_eq!(header(&h, "x-ratelimit-reset-requests"), "0s");
        // The key's bucket, full, is the tighter one (10,000 against the
        // tenant's 10,500), not the tenant's as the raw levels would say.
        assert_eq!(header(&h, "x-ratelimit-limit-tokens"), "10000");
        assert_eq!(header(&h, "x-ratelimit-remaining-tokens"), "10000");
        // Below the capacity nothing changes.
        let h = rate_headers(&plan, &[999.9, 9_000.0, 10_500.0]);
        assert_eq!(header(&h, "x-ratelimit-remaining-requests"), "999");
        assert_eq!(header(&h, "x-ratelimit-remaining-tokens"), "9000");
    }

    fn input(auth: Option<&str>, api_key: Option<&str>) -> CheckInput {
        CheckInput {
            authorization: auth.map(String::from),
            api_key: api_key.map(String::from),
            model: None,
            content_length: None,
        }
    }

    #[test]
    fn bearer_and_api_key_extraction() {
        assert_eq!(presented_key(&input(Some("Bearer tg-a"), None)), Ok("tg-a"));
        assert_eq!(
            presented_key(&input(Some("bearer   tg-a "), None)),
            Ok("tg-a")
        );
        assert_eq!(presented_key(&input(None, Some("tg-b"))), Ok("tg-b"));
        assert_eq!(
            presented_key(&input(Some("Basic eHg6eXk="), None)),
            Err(NOT_BEARER)
        );
        assert_eq!(
            presented_key(&input(Some("Basic eHg6eXk="), Some("tg-d"))),
            Ok("tg-d")
        );
        assert_eq!(
            presented_key(&input(Some("Bearer "), None)),
            Err(MISSING_KEY)
        );
        assert_eq!(presented_key(&input(None, None)), Err(MISSING_KEY));
        assert_eq!(presented_key(&input(Some(""), Some("tg-c"))), Ok("tg-c"));
    }
}
