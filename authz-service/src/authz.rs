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

use tollgate_wire::{OutputCover, Refusal, Slot, SlotRef, TopUp, TopUpAnswer};

use crate::backend::Backend;
use crate::bucket::{format_reset, ms_until_admits, ms_until_full};
use crate::decision::{echo, error_body};
use crate::learned::Learned;
use crate::lease::{Leases, Local};
use crate::metrics::Metrics;
use crate::plan::{plan, Planned, Scope, Take};
use crate::policy::{Credential, Key, Kind, Policy, Tenant};
use crate::slots::Slots;
use crate::spend::{MoneyState, MoneyTaken, Spend};
use crate::storage::{
    tenant_slots, BucketOp, Outcome, SlotMode, SlotOp, SlotOutcome, Store, StoreError,
};
use crate::usage::{Recorded, Settle, UsageError, UsageQueue};

pub mod mcp;

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

/// The smallest key or tenant token bucket of `key`: what one reservation
/// is capped at (so every bucket reserves the same amount and one echoed
/// figure settles all of them). None without token limits.
fn smallest_token_bucket(key: &Key, tenant: Option<&Tenant>) -> Option<u64> {
    key.limits
        .iter()
        .chain(tenant.map(|t| t.limits.as_slice()).unwrap_or_default())
        .filter(|l| l.kind == Kind::Tokens)
        .map(|l| l.spec.capacity)
        .min()
}

/// The tenant's answer reservation for a request that declares no output
/// limit (`reserve_completion_tokens`).
fn undeclared_output(tenant: Option<&Tenant>) -> u64 {
    tenant.map_or(crate::policy::DEFAULT_RESERVE_COMPLETION_TOKENS, |t| {
        t.reserve_completion_tokens
    })
}

/// Tokens to reserve for one request: the prompt estimated from its size
/// (4 bytes a token) plus `output` for the answer, at most the smallest
/// token bucket; and the answer's part when the reservation holds it
/// whole. 0 without token limits.
fn reservation(
    key: &Key,
    tenant: Option<&Tenant>,
    content_length: Option<u64>,
    output: OutputCover,
) -> (u64, Option<OutputCover>) {
    let Some(smallest) = smallest_token_bucket(key, tenant) else {
        return (0, None);
    };
    let wanted = estimate(content_length, output.reserved);
    if wanted > smallest {
        // The whole bucket: no top-up could add to it.
        return (smallest, None);
    }
    (wanted, Some(output))
}

/// The tokens a request may use, uncapped: the prompt's estimate plus
/// `output` for the answer (what money budgets reserve when no token
/// bucket caps it).
fn estimate(content_length: Option<u64>, output: u64) -> u64 {
    content_length
        .unwrap_or(0)
        .div_ceil(4)
        .saturating_add(output)
}

/// Below this many reservations left in the tightest token bucket, a
/// finished request's refund should land before the next request: the
/// filter is asked to post its report at once (`;now`). At 1,000 requests
/// a second a batch of 100 ms holds about 100 unsettled reservations.
pub const SETTLE_NOW_RESERVATIONS: f64 = 128.0;

/// Whether the tightest reserving token bucket of `planned` (levels after
/// this request's take) holds less than [`SETTLE_NOW_RESERVATIONS`]
/// reservations of `reserve` tokens.
fn settle_now(planned: &[Planned], levels: &[f64], reserve: u64) -> bool {
    reserve > 0
        && planned
            .iter()
            .zip(levels)
            .filter(|(p, _)| p.limit.kind == Kind::Tokens && p.scope.reserves())
            .any(|(_, &level)| level < SETTLE_NOW_RESERVATIONS * reserve as f64)
}

/// The refusal a filter relays for a denied top-up: the status, the
/// OpenAI body's message, type and code, and `retry-after`.
fn refusal(status: u16, body: &str, headers: &[(&'static str, String)]) -> Refusal {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    let field = |name: &str| {
        v.get("error")
            .and_then(|e| e.get(name))
            .and_then(|m| m.as_str())
            .unwrap_or_default()
            .to_string()
    };
    Refusal {
        status,
        message: field("message"),
        kind: field("type"),
        code: field("code"),
        retry_after: headers
            .iter()
            .find(|(n, _)| *n == "retry-after")
            .and_then(|(_, v)| v.parse().ok()),
    }
}

/// How the buckets admitted a request: the tokens reserved, whether to
/// settle at once, and whether anything was taken (false: the store
/// failed open).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Admitted {
    reserved: u64,
    settle_now: bool,
    taken: bool,
}

/// Admitted without a decision (the store failed open): nothing taken.
const FAILED_OPEN: Admitted = Admitted {
    reserved: 0,
    settle_now: false,
    taken: false,
};

/// Which outcomes of the buckets count as a Check's decision
/// (`tollgate_authz_decisions_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counted {
    Every,
    /// A capped Check: its admission is counted once its slot decided it.
    Refusals,
    /// A top-up: no Check.
    Nothing,
}

/// Why a top-up was not decided.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopUpError {
    #[error("unknown key_id {} for tenant {}", echo(.0), echo(.1))]
    UnknownKey(String, String),
    /// The store failed and the tenant's `redis_failure` is `envoy`.
    #[error("{0}")]
    Unavailable(String),
}

/// "key demo-key", "tenant demo", "key demo-key model m", "tenant demo model m".
fn scope_label(scope: Scope, key: &Key, model: Option<&str>) -> String {
    let m = model.unwrap_or("");
    match scope {
        Scope::Key => format!("key {}", key.id),
        Scope::Tenant => format!("tenant {}", key.tenant),
        Scope::KeyModel => format!("key {} model {m}", key.id),
        Scope::TenantModel => format!("tenant {} model {m}", key.tenant),
        // The limit's name is the bucket key's last part (crate::mcp_rules).
        Scope::KeyMcp | Scope::TenantMcp => {
            let owner = match scope {
                Scope::KeyMcp => format!("key {}", key.id),
                _ => format!("tenant {}", key.tenant),
            };
            format!("{owner}, MCP calls of {m}")
        }
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
    /// Answer reservations learned per key from the filter's reports.
    learned: Learned,
    /// Concurrency slots: their ids, ttl and the Checks waiting for one.
    slots: Slots,
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
            learned: Learned::new(),
            slots: Slots::default(),
        }
    }

    /// Longest a Check waits for a refill already under way (twice the
    /// store's deadline is a good value); past it the failure policy
    /// applies as for a slow store.
    pub fn with_refill_wait(mut self, wait: Duration) -> Self {
        self.backend.refill_wait = wait;
        self
    }

    /// Concurrency slots live `ttl_ms` after they were taken or last
    /// renewed ([`crate::slots::DEFAULT_TTL_MS`] by default).
    pub fn with_slot_ttl(mut self, ttl_ms: u64) -> Self {
        self.slots = Slots::new(ttl_ms);
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

    /// Answer reservations this instance learned per key.
    pub fn learned(&self) -> &Learned {
        &self.learned
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
            learned: &self.learned,
            slots: &self.slots,
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
    /// 401 or 403 (a `Decision` like every answer of a Check: its size is
    /// the admitted answer's, slot and reservation included).
    #[allow(clippy::result_large_err)]
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
        let undeclared = undeclared_output(tenant);
        let output = OutputCover {
            reserved: self
                .learned
                .output(&key.id, Instant::now())
                .unwrap_or(undeclared),
            undeclared,
        };
        let (mut reserve, mut cover) = reservation(key, tenant, input.content_length, output);
        if reserve == 0 && policy.money.applies(&key.id, &key.tenant) {
            // No token bucket caps the estimate: money budgets reserve it whole.
            reserve = estimate(input.content_length, output.reserved);
            cover = Some(output);
        }
        *money = match self.spend().admit(&policy, key, model, reserve).await {
            Ok(m) => m,
            Err(d) => return d,
        };
        let budget_headers = money.as_ref().map(|m| m.headers.clone());
        let reserved_at = money
            .as_ref()
            .and_then(|m| u64::try_from(m.at_ms / 60_000).ok());
        let taken = std::sync::atomic::AtomicBool::new(false);
        let allow = |mut rate_headers: Vec<(&'static str, String)>, a: Admitted| {
            taken.store(a.taken, std::sync::atomic::Ordering::Relaxed);
            // Money was reserved for `reserve` tokens: the report settles it.
            let reserved = if budget_headers.is_some() {
                reserve
            } else {
                a.reserved
            };
            rate_headers.extend(budget_headers.iter().flatten().cloned());
            Decision::Allow {
                tenant: key.tenant.clone(),
                key_id: key.id.clone(),
                models: key.models_header.clone(),
                rate_headers,
                reserved,
                reserved_at,
                output: cover.filter(|_| reserved > 0),
                settle_now: a.settle_now,
                slot: None,
                cache_breakpoints: key.cache_breakpoints,
            }
        };
        let planned = plan(&policy, key, model, Take::Check { reserve });
        // With a cap, the decision is counted once the slot decided it.
        let slot = self.slots.acquire(key, tenant);
        let reason = if planned.is_empty() {
            "no_limits"
        } else {
            "ok"
        };
        let d = if planned.is_empty() {
            if slot.is_none() {
                self.backend.record("allowed", reason);
            }
            allow(Vec::new(), FAILED_OPEN)
        } else {
            let counted = match slot {
                None => Counted::Every,
                Some(_) => Counted::Refusals,
            };
            self.take_buckets(&planned, reserve, &policy, key, model, counted, allow)
                .await
        };
        let (Decision::Allow { .. }, Some(op)) = (&d, slot) else {
            return d;
        };
        let taken = taken.load(std::sync::atomic::Ordering::Relaxed);
        if !planned.is_empty() && !taken {
            // The buckets failed open (no decision): no slot either.
            return d;
        }
        match self.hold_slot(&policy, key, op, d, reason).await {
            Ok(d) => d,
            Err(refused) => {
                if taken {
                    self.give_back(&planned);
                }
                refused
            }
        }
    }

    /// Take the concurrency slot `op` for a request of `key` its buckets
    /// admitted (`allowed` then carries it, and the decision is counted
    /// with `reason`); `Err`: the 429 at the cap, or the failure policy's
    /// answer when the store failed.
    async fn hold_slot(
        &self,
        policy: &Policy,
        key: &Key,
        op: SlotOp,
        mut allowed: Decision,
        reason: &str,
    ) -> Result<Decision, Decision> {
        let mut waited = false;
        loop {
            let call = self.backend.store.slots(&op);
            match self.backend.timed("slot_acquire", call).await {
                Ok(SlotOutcome { denied: None, .. }) => {
                    self.count_slots("acquired");
                    self.backend.record("allowed", reason);
                    if let Decision::Allow { slot, .. } = &mut allowed {
                        *slot = Some(Slot {
                            id: op.slot,
                            ttl_ms: op.ttl_ms,
                        });
                    }
                    return Ok(allowed);
                }
                Ok(SlotOutcome {
                    denied: Some(i), ..
                }) if !waited && i < op.sets.len() => {
                    // A release on its way (a sequential client's last
                    // request) frees a slot in a moment.
                    waited = true;
                    self.slots.freed(&op.sets[i].0, crate::slots::WAIT).await;
                }
                Ok(SlotOutcome {
                    denied: Some(i),
                    counts,
                }) => {
                    self.count_slots("refused");
                    let headers = match &allowed {
                        Decision::Allow { rate_headers, .. } => rate_headers.clone(),
                        _ => Vec::new(),
                    };
                    return Err(self.over_cap(key, &op, i, &counts, headers));
                }
                Err(e) => {
                    return match self.backend.failed(policy, key, e, |_| allowed) {
                        d @ Decision::Allow { .. } => Ok(d),
                        d => Err(d),
                    }
                }
            }
        }
    }

    fn count_slots(&self, op: &str) {
        self.backend.metrics.slots.with_label_values(&[op]).inc();
    }

    /// The 429 of a request refused at the cap of set `i` of `op`.
    fn over_cap(
        &self,
        key: &Key,
        op: &SlotOp,
        i: usize,
        counts: &[u64],
        rate_headers: Vec<(&'static str, String)>,
    ) -> Decision {
        let cap = op.sets.get(i).map_or(0, |(_, cap)| *cap);
        let tenant_set = op
            .sets
            .get(i)
            .is_some_and(|(set, _)| *set == tenant_slots(&key.tenant));
        let (scope, label) = if tenant_set {
            ("tenant", format!("tenant {}", key.tenant))
        } else {
            ("key", format!("key {}", key.id))
        };
        let in_flight = counts.get(i).copied().unwrap_or(cap);
        let msg = format!(
            "Concurrency limit reached for {label}: {in_flight} requests in flight, limit {cap}. Please retry when one of them has finished."
        );
        self.backend.record("denied", "concurrency_limited");
        self.backend
            .metrics
            .denials
            .with_label_values(&[&key.tenant, "concurrent_requests", "in_flight", scope])
            .inc();
        let mut headers = vec![("retry-after", "1".to_string())];
        headers.extend(rate_headers);
        Decision::Deny {
            status: 429,
            body: error_body(&msg, "requests", "concurrency_limit_exceeded"),
            headers,
        }
    }

    /// Put what `planned` took back into this instance's leases (a request
    /// refused after its buckets admitted it); a lease already dropped
    /// keeps the units until they refill.
    fn give_back(&self, planned: &[Planned]) {
        let back: Vec<BucketOp> = planned
            .iter()
            .map(|p| BucketOp {
                take: -p.op.take,
                ..p.op.clone()
            })
            .collect();
        let _ = self.leases.try_take(&back, Instant::now());
    }

    /// Top an admitted request's reservation up to what its output limit
    /// needs (`POST /v1/reserve`, from the filter before it forwards the
    /// request): `need - output` more tokens, at most what keeps the
    /// reservation within the smallest token bucket, from the key's and
    /// tenant's token buckets and money budgets, admitted by the same rules
    /// as a Check's reservation. The answer says what is reserved in all,
    /// or the refusal the client gets (the request's first reservation
    /// stays for its usage report to refund).
    pub async fn top_up(&self, t: &TopUp) -> Result<TopUpAnswer, TopUpError> {
        let policy = self.policy.load();
        let key = match policy.key_by_id(&t.key_id) {
            Some(k) if k.tenant == t.tenant => k,
            _ => return Err(TopUpError::UnknownKey(t.key_id.clone(), t.tenant.clone())),
        };
        let tenant = policy.tenant(&key.tenant);
        let mut extra = t.need.saturating_sub(t.output);
        if let Some(smallest) = smallest_token_bucket(key, tenant) {
            extra = extra.min(smallest.saturating_sub(t.reserved));
        }
        let metric = |result: &str| {
            self.backend
                .metrics
                .top_ups
                .with_label_values(&[result])
                .inc();
        };
        let covered = TopUpAnswer {
            reserved: t.reserved,
            refused: None,
        };
        if extra == 0 {
            metric("covered");
            return Ok(covered);
        }
        let model = t.model.as_deref().map(str::trim).filter(|m| !m.is_empty());
        let refused = |d: Decision| match d {
            Decision::Deny {
                status,
                body,
                headers,
            } => {
                metric("refused");
                Ok(TopUpAnswer {
                    reserved: t.reserved,
                    refused: Some(refusal(status, &body, &headers)),
                })
            }
            Decision::Unavailable(msg) => {
                metric("error");
                Err(TopUpError::Unavailable(msg))
            }
            Decision::Allow { .. } => Ok(covered.clone()),
        };
        let money = match self.spend().admit(&policy, key, model, extra).await {
            Ok(m) => m,
            Err(d) => return refused(d),
        };
        let planned = plan(&policy, key, model, Take::TopUp { extra });
        let allow = |_, a: Admitted| Decision::Allow {
            tenant: String::new(),
            key_id: String::new(),
            models: String::new(),
            rate_headers: Vec::new(),
            reserved: a.reserved,
            reserved_at: None,
            output: None,
            settle_now: false,
            slot: None,
            cache_breakpoints: false,
        };
        let d = if planned.is_empty() {
            allow(
                Vec::new(),
                Admitted {
                    reserved: extra,
                    ..FAILED_OPEN
                },
            )
        } else {
            self.take_buckets(
                &planned,
                extra,
                &policy,
                key,
                model,
                Counted::Nothing,
                allow,
            )
            .await
        };
        match d {
            Decision::Allow { reserved, .. } => {
                // Fail-open takes nothing: the money reservation is the
                // only one, and the report settles it.
                let added = if money.is_some() { extra } else { reserved };
                metric("added");
                // The key's next Checks reserve this need at once (a
                // refused one teaches nothing: it would lock the key's
                // smaller requests out).
                self.learned.observe(&key.id, t.need, Instant::now());
                Ok(TopUpAnswer {
                    reserved: t.reserved.saturating_add(added),
                    refused: None,
                })
            }
            d => {
                if let Some(taken) = &money {
                    self.spend().put_back(taken);
                }
                refused(d)
            }
        }
    }

    /// Take every bucket of `planned` (`reserve` tokens from those that
    /// reserve) for `key` from this instance's leases, or, when they fall
    /// short, in one store call that refills them; `allow` builds the answer
    /// of an admitted request from its rate-limit headers, the tokens
    /// reserved and whether to settle at once; `counted`: which outcomes
    /// count as a Check's decision.
    #[allow(clippy::too_many_arguments)]
    async fn take_buckets(
        &self,
        planned: &[Planned],
        reserve: u64,
        policy: &Policy,
        key: &Key,
        model: Option<&str>,
        counted: Counted,
        allow: impl Fn(Vec<(&'static str, String)>, Admitted) -> Decision,
    ) -> Decision {
        let mut ops: Vec<BucketOp> = planned.iter().map(|p| p.op.clone()).collect();
        let admitted = |levels: &[f64]| {
            if counted == Counted::Every {
                self.backend.record("allowed", "ok");
            }
            let admitted = Admitted {
                reserved: reserve,
                settle_now: settle_now(planned, levels, reserve),
                taken: true,
            };
            allow(rate_headers(planned, levels), admitted)
        };
        let rate_limited = |i: usize, levels: &[f64]| {
            if counted != Counted::Nothing {
                let reason = match planned.get(i).map(|p| p.limit.kind) {
                    Some(Kind::Requests) => "rate_limited_requests",
                    _ => "rate_limited_tokens",
                };
                self.backend.record("denied", reason);
            }
            self.rate_limited(planned, i, levels, key, model)
        };
        // From this instance's leases and cached refusals, when they decide.
        let from_memory = |ops: &[BucketOp], now| match self.leases.try_take(ops, now) {
            Local::Taken(levels) => Some(admitted(&levels)),
            Local::Denied { index, levels } => Some(rate_limited(index, &levels)),
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
                admitted(&levels)
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
                rate_limited(i, &levels)
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
            scope_label(p.scope, key, mcp::limit_name(p).or(model)),
            p.limit.period,
            p.limit.spec.capacity,
            level.floor().max(0.0) as u64,
            format_reset(retry_ms),
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
        allow: impl FnOnce(Vec<(&'static str, String)>, Admitted) -> Decision,
    ) -> Decision {
        let ops: Vec<BucketOp> = planned.iter().map(|p| p.op.clone()).collect();
        if let Some((i, levels)) = self.leases.known_exhausted(&ops, Instant::now()) {
            self.backend.count_store_error("check", &e);
            let reason = match planned.get(i).map(|p| p.limit.kind) {
                Some(Kind::Requests) => "rate_limited_requests",
                _ => "rate_limited_tokens",
            };
            self.backend.record("denied", reason);
            return self.rate_limited(planned, i, &levels, key, model);
        }
        self.backend
            .failed(policy, key, e, |h| allow(h, FAILED_OPEN))
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

    /// Renew the slots of requests still running (`POST /v1/slots/renew`,
    /// from the filter every third of their ttl): each slot's deadline
    /// moves to now + ttl where it is still held; a slot that expired is
    /// not taken back (counted as `expired`). Returns how many were renewed.
    pub async fn renew_slots(&self, slots: &[SlotRef]) -> usize {
        let mut renewed = 0;
        for s in slots {
            if !crate::policy::valid_policy_name(&s.tenant)
                || !crate::policy::valid_policy_name(&s.key_id)
                || !tollgate_wire::valid_slot_id(&s.slot)
            {
                continue;
            }
            let op = self
                .slots
                .held(SlotMode::Renew, &s.tenant, &s.key_id, &s.slot);
            let call = self.backend.store.slots(&op);
            match self.backend.timed("slot_renew", call).await {
                Ok(out) if out.counts.iter().any(|&c| c > 0) => {
                    renewed += 1;
                    self.count_slots("renewed");
                }
                Ok(_) => self.count_slots("expired"),
                Err(e) => self.backend.count_store_error("slot_renew", &e),
            }
        }
        renewed
    }

    /// Periodic upkeep (every 250 ms from the server): give idle leases back
    /// to the store, then apply queued usage debits while the store takes
    /// them.
    pub async fn maintain(&self) {
        self.learned.sweep(Instant::now());
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

    #[test]
    fn a_reservation_holds_the_answer_part_unless_it_is_the_whole_bucket() {
        let policy = crate::policy::Policy::from_yaml(&format!(
            "version: 1\ntenants:\n  t: {{limits: {{tokens_per_minute: 5000}}}}\n  u: {{}}\nkeys:\n  - {{id: k, tenant: t, sha256: {}, limits: {{tokens_per_minute: 2000}}}}\n  - {{id: n, tenant: u, sha256: {}}}\n",
            crate::policy::hash_key("a"),
            crate::policy::hash_key("b"),
        ))
        .unwrap();
        let key = policy.key_by_id("k").unwrap();
        let tenant = policy.tenant("t");
        let out = OutputCover {
            reserved: 16,
            undeclared: 256,
        };
        assert_eq!(reservation(key, tenant, Some(100), out), (41, Some(out)));
        assert_eq!(reservation(key, tenant, None, out), (16, Some(out)));
        // Capped at the smallest bucket (the key's 2,000): no answer part.
        assert_eq!(reservation(key, tenant, Some(8000), out), (2000, None));
        let none = policy.key_by_id("n").unwrap();
        assert_eq!(
            reservation(none, policy.tenant("u"), Some(100), out),
            (0, None)
        );
    }

    #[test]
    fn settle_now_when_the_tightest_bucket_holds_few_reservations() {
        let plan = [
            planned(Kind::Requests, 1_000, Scope::Key),
            planned(Kind::Tokens, 1_000_000, Scope::Key),
            planned(Kind::Tokens, 1_000_000, Scope::KeyModel),
        ];
        assert!(!settle_now(&plan, &[10.0, 900_000.0, 1.0], 100));
        assert!(settle_now(&plan, &[10.0, 12_000.0, 1.0], 100));
        assert!(
            !settle_now(&plan, &[10.0, 12_000.0, 1.0], 0),
            "nothing reserved"
        );
    }

    #[test]
    fn a_refusal_keeps_the_denials_message_type_code_and_retry() {
        let body = error_body("Rate limit reached", "tokens", "rate_limit_exceeded");
        let r = refusal(429, &body, &[("retry-after", "7".into())]);
        assert_eq!(
            (
                r.status,
                r.message.as_str(),
                r.kind.as_str(),
                r.code.as_str(),
                r.retry_after
            ),
            (
                429,
                "Rate limit reached",
                "tokens",
                "rate_limit_exceeded",
                Some(7)
            )
        );
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
