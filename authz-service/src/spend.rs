//! Spending money budgets: a Check reserves on every budget that applies
//! ([`crate::budget`] plans them, [`crate::prices`] prices them), a usage
//! report settles the reservation at the real cost, and the `spend`
//! command lists what each budget has spent.
//!
//! Trade-off (design, reservation and accuracy bound in
//! `docs/architecture.md`, "Money budgets"): ext_authz sees headers only, so
//! a Check reserves the request's *maximum* cost: the tokens it reserves
//! (`x-tollgate-reserved`) times the highest price of any model the key may
//! use. The usage report settles the difference from the real cost. Spend
//! counters are integers (nano-dollars) in Redis, one per budget and
//! window, expiring after the window; this instance takes from them through
//! the same [`Leases`] as the token buckets, so a Check rarely calls Redis.
//!
//! Nothing here reads a clock: the wall clock is the [`MoneyState`]'s
//! (injectable with [`crate::authz::Authorizer::with_wall_clock`]).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jiff::Timestamp;
use tollgate_wire::UsageReport;

use crate::backend::Backend;
use crate::bucket::format_reset;
use crate::budget::{
    counter_key, scope_key, window, Budget, Owner, Period, Planned, Scope, WindowCache,
};
use crate::decision::{error_body, Decision};
use crate::lease::{Leases, Local};
use crate::policy::{Key, Policy};
use crate::prices::{format_usd, reserve_nano, Priced, Tokens};
use crate::storage::{BucketOp, Outcome, Store, StoreError};

/// How long a counter outlives its window ([`crate::rolling`] states it:
/// its slots expire by it too).
pub use crate::rolling::GRACE_MS;

/// This instance's money state: leases on spend counters and the wall clock.
pub struct MoneyState {
    pub leases: Leases,
    windows: WindowCache,
    wall: Arc<dyn Fn() -> i64 + Send + Sync>,
}

impl Default for MoneyState {
    fn default() -> Self {
        MoneyState {
            leases: Leases::new(),
            windows: WindowCache::default(),
            wall: Arc::new(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_millis() as i64)
                    .unwrap_or(0)
            }),
        }
    }
}

impl MoneyState {
    pub fn now_ms(&self) -> i64 {
        (self.wall)()
    }

    /// Use `wall` (unix milliseconds) as the clock of budget windows.
    pub fn with_wall_clock(mut self, wall: impl Fn() -> i64 + Send + Sync + 'static) -> Self {
        self.wall = Arc::new(wall);
        self
    }
}

/// A rolling budget's window ends when its oldest slot holding spend
/// leaves it: `oldest` is that slot's 1-based position among the covered
/// slots, as the store answers it (0: nothing spent, the window's end stays
/// the earliest instant a slot leaves).
fn frees_up(p: &mut Planned, oldest: u64) {
    let Period::Rolling(r) = p.budget.period else {
        return;
    };
    if oldest == 0 {
        return;
    }
    let idx = r.slot_of(p.window.start_ms) - r.slots + oldest as i64;
    let end_ms = r.leaves_at(idx);
    if let Ok(t) = Timestamp::from_millisecond(end_ms) {
        p.window.end_ms = end_ms;
        p.window.end_local = t.to_string();
    }
}

/// Money taken by an admitted Check: the ops (to give back if the request
/// is refused later) and the budget headers.
#[derive(Debug, Clone, Default)]
pub struct MoneyTaken {
    pub ops: Vec<BucketOp>,
    pub headers: Vec<(&'static str, String)>,
    /// The wall clock that chose the windows (ms since the epoch): the
    /// usage report settles the windows of its minute.
    pub at_ms: i64,
}

/// Response header names (documented in authz-service/README.md).
pub mod header {
    pub const LIMIT: &str = "x-tollgate-budget-limit-usd";
    pub const REMAINING: &str = "x-tollgate-budget-remaining-usd";
    pub const RESET: &str = "x-tollgate-budget-reset";
    pub const SCOPE: &str = "x-tollgate-budget-scope";
    pub const WARNING: &str = "x-tollgate-budget-warning";
}

fn spent_share(b: &Budget, remaining: f64) -> f64 {
    (b.cap as f64 - remaining) / b.cap as f64 * 100.0
}

/// Budget headers from the most constrained budget (least remaining; key
/// before tenant on a tie), and the warnings of every budget past its
/// soft cap: (headers, soft-capped budgets).
fn budget_headers(
    planned: &[Planned],
    remaining: &[f64],
    now_ms: i64,
) -> (Vec<(&'static str, String)>, Vec<usize>) {
    let mut h = Vec::with_capacity(5);
    // Never above the cap (a level counts this instance's unused lease).
    let best = planned
        .iter()
        .zip(remaining)
        .map(|(p, r)| (p, r.min(p.budget.cap as f64)))
        .min_by(|a, b| a.1.floor().total_cmp(&b.1.floor()));
    if let Some((p, r)) = best {
        h.push((header::LIMIT, format_usd(p.budget.cap)));
        h.push((header::REMAINING, format_usd(r.floor().max(0.0) as i64)));
        h.push((
            header::RESET,
            format_reset((p.window.end_ms - now_ms).max(0) as u64),
        ));
        h.push((
            header::SCOPE,
            format!("{}/{}", p.scope_label(), p.budget.period.label()),
        ));
    }
    let mut soft = Vec::new();
    let mut warnings = Vec::new();
    for (i, (p, r)) in planned.iter().zip(remaining).enumerate() {
        let Some(pct) = p.budget.soft_percent else {
            continue;
        };
        let share = spent_share(&p.budget, *r);
        if share >= f64::from(pct) {
            soft.push(i);
            warnings.push(format!(
                "{}/{} {:.0}% used (soft cap {pct}%)",
                p.scope_label(),
                p.budget.period.label(),
                share.min(100.0).floor()
            ));
        }
    }
    if !warnings.is_empty() {
        h.push((header::WARNING, warnings.join(", ")));
    }
    (h, soft)
}

/// The scope label of a budget's metrics: `key`, `tenant`, `key_model`,
/// `tenant_model` (the model's spend is in `tollgate_authz_spend_usd_total`).
fn metric_scope(p: &Planned) -> &'static str {
    match (p.scope, p.model.is_some()) {
        (Scope::Key, false) => "key",
        (Scope::Tenant, false) => "tenant",
        (Scope::Key, true) => "key_model",
        (Scope::Tenant, true) => "tenant_model",
    }
}

/// The money path of one authorizer: its money state and its store.
pub struct Spend<'a, S: Store> {
    pub money: &'a MoneyState,
    pub backend: &'a Backend<S>,
}

impl<S: Store> Spend<'_, S> {
    /// Reserve the maximum cost of a request on every budget of `key`:
    /// `reserve_tokens` at the highest price of the key's models. `Ok(None)`:
    /// no budget applies (or the store failed and the tenant fails open);
    /// `Err`: the answer (429 `budget_exceeded`, or the failure policy's).
    pub async fn admit(
        &self,
        policy: &Policy,
        key: &Key,
        model: Option<&str>,
        reserve_tokens: u64,
    ) -> Result<Option<MoneyTaken>, Decision> {
        let money = &policy.money;
        if !money.applies(&key.id, &key.tenant) {
            return Ok(None);
        }
        // An alias names no provider, so it could not pick the budgets the
        // report's `provider/model` will be settled on: not a declaration.
        if !model.is_some_and(|m| m.contains('/')) && money.has_model_budgets(&key.id, &key.tenant)
        {
            self.backend.record("denied", "model_not_declared");
            let msg = format!(
                "The virtual key {} has per-model budgets: send the request's model as provider/model in the x-tollgate-model header.",
                key.id
            );
            return Err(Decision::Deny {
                status: 400,
                body: error_body(&msg, "invalid_request_error", "model_not_declared"),
                headers: Vec::new(),
            });
        }
        let take = reserve_nano(reserve_tokens, money.prices.highest_for(&key.models));
        self.admit_nano(policy, key, model, take).await
    }

    /// Reserve `take` nano-dollars on every budget of `key` (and of
    /// `model`, when given): [`Self::admit`] once the amount is known, and
    /// the price of an MCP tool call (`crate::authz::mcp`), which no usage
    /// report settles: what is reserved is what the call costs.
    pub async fn admit_nano(
        &self,
        policy: &Policy,
        key: &Key,
        model: Option<&str>,
        take: i64,
    ) -> Result<Option<MoneyTaken>, Decision> {
        let money = &policy.money;
        // No budget of the key or its tenant: nothing planned.
        let now_ms = self.money.now_ms();
        let planned = money.plan(&key.id, &key.tenant, model, now_ms, &self.money.windows);
        if planned.is_empty() {
            return Ok(None);
        }
        let ops: Vec<BucketOp> = planned.iter().map(|p| p.op(take)).collect();
        if planned
            .iter()
            .any(|p| matches!(p.budget.period, Period::Rolling(_)))
        {
            // A rolling window's spend is the sum of its slots: no lease
            // can stand for it, every such Check asks Redis.
            return self
                .take_rolling(policy, key, &planned, &ops, take, now_ms)
                .await;
        }
        self.take_leased(policy, key, &planned, ops, take, now_ms)
            .await
    }

    /// [`Self::admit`] for calendar budgets: from this instance's money
    /// leases and cached refusals, or, when they fall short, in one store
    /// call that refills them.
    async fn take_leased(
        &self,
        policy: &Policy,
        key: &Key,
        planned: &[Planned],
        mut ops: Vec<BucketOp>,
        take: i64,
        now_ms: i64,
    ) -> Result<Option<MoneyTaken>, Decision> {
        let leases = &self.money.leases;
        let from_memory = |ops: &[BucketOp], now| match leases.try_take(ops, now) {
            Local::Taken(levels) => Some(Ok(self.money_taken(key, planned, ops, &levels, now_ms))),
            Local::Denied { index, levels } => Some(Err(
                self.budget_exceeded(key, planned, index, &levels, take, now_ms)
            )),
            Local::Miss => None,
        };
        if let Some(d) = from_memory(&ops, Instant::now()) {
            return d.map(Some);
        }
        let refill = leases.refill(&ops[0], Instant::now());
        let waiting = refill.wait();
        let Ok(_guard) = tokio::time::timeout(self.backend.refill_wait, refill.lock.lock()).await
        else {
            drop(waiting);
            return self.money_unreachable(policy, key, planned, &ops, take, StoreError::Timeout);
        };
        let now = Instant::now();
        if let Some(d) = from_memory(&ops, now) {
            return d.map(Some);
        }
        let wants = leases.wants(&ops, &refill, now);
        for (op, want) in ops.iter_mut().zip(wants) {
            op.lease = want;
        }
        drop(waiting);
        let result = self.timed_spend_take(&ops).await;
        let now = Instant::now();
        match result {
            Ok(outcome @ Outcome { denied: None, .. }) => {
                let levels = leases.grant(&ops, &outcome, now);
                Ok(Some(self.money_taken(key, planned, &ops, &levels, now_ms)))
            }
            Ok(Outcome {
                denied: Some(i),
                levels,
                ..
            }) if i < planned.len() => {
                let retry = (planned[i].window.end_ms - now_ms).max(1000) as u64;
                let level = levels.get(i).copied().unwrap_or(0.0);
                leases.deny(&ops[i], level, Duration::from_millis(retry), now);
                // What is still leased of an exhausted budget would stay
                // unspendable (and count as spent) until the window ends:
                // give it back now (the refusal stays cached).
                if let Some(back) = leases.release(&ops[i].key) {
                    let _ = self
                        .backend
                        .store
                        .spend_debit(std::slice::from_ref(&back))
                        .await;
                }
                Err(self.budget_exceeded(key, planned, i, &levels, take, now_ms))
            }
            Ok(Outcome {
                denied: Some(i), ..
            }) => self.money_unreachable(
                policy,
                key,
                planned,
                &ops,
                take,
                StoreError::Protocol(format!("store refused unknown counter {i}")),
            ),
            Err(e) => self.money_unreachable(policy, key, planned, &ops, take, e),
        }
    }

    /// The store's check-and-take of spend counters, timed in the Redis
    /// duration metric.
    async fn timed_spend_take(&self, ops: &[BucketOp]) -> Result<Outcome, StoreError> {
        let store = &self.backend.store;
        self.backend
            .timed("spend_check", store.spend_take(ops))
            .await
    }

    /// [`Self::admit_money`] for budgets that include a rolling window:
    /// one store call, no leases.
    async fn take_rolling(
        &self,
        policy: &Policy,
        key: &Key,
        planned: &[Planned],
        ops: &[BucketOp],
        take: i64,
        now_ms: i64,
    ) -> Result<Option<MoneyTaken>, Decision> {
        let result = self.timed_spend_take(ops).await;
        let frees = |granted: &[u64]| {
            let mut planned = planned.to_vec();
            for (p, &oldest) in planned.iter_mut().zip(granted) {
                frees_up(p, oldest);
            }
            planned
        };
        match result {
            Ok(Outcome {
                denied: None,
                levels,
                granted,
            }) => Ok(Some(self.money_taken(
                key,
                &frees(&granted),
                ops,
                &levels,
                now_ms,
            ))),
            Ok(Outcome {
                denied: Some(i),
                levels,
                granted,
            }) if i < planned.len() => {
                Err(self.budget_exceeded(key, &frees(&granted), i, &levels, take, now_ms))
            }
            Ok(Outcome {
                denied: Some(i), ..
            }) => self.money_unreachable(
                policy,
                key,
                planned,
                ops,
                take,
                StoreError::Protocol(format!("store refused unknown counter {i}")),
            ),
            Err(e) => self.money_unreachable(policy, key, planned, ops, take, e),
        }
    }

    fn money_taken(
        &self,
        key: &Key,
        planned: &[Planned],
        ops: &[BucketOp],
        levels: &[f64],
        now_ms: i64,
    ) -> MoneyTaken {
        let (headers, soft) = budget_headers(planned, levels, now_ms);
        for i in soft {
            let p = &planned[i];
            self.backend
                .metrics
                .budget_soft_cap
                .with_label_values(&[&key.tenant, metric_scope(p), p.budget.period.as_str()])
                .inc();
        }
        MoneyTaken {
            ops: ops
                .iter()
                .map(|o| BucketOp {
                    lease: 0,
                    ..o.clone()
                })
                .collect(),
            headers,
            at_ms: now_ms,
        }
    }

    // `Err` is the Check's answer (a `Decision`, sized by the admitted one).
    #[allow(clippy::result_large_err)]
    fn money_unreachable(
        &self,
        policy: &Policy,
        key: &Key,
        planned: &[Planned],
        ops: &[BucketOp],
        take: i64,
        e: StoreError,
    ) -> Result<Option<MoneyTaken>, Decision> {
        let now_ms = self.money.now_ms();
        if let Some((i, levels)) = self.money.leases.known_exhausted(ops, Instant::now()) {
            self.backend.count_store_error("spend_check", &e);
            return Err(self.budget_exceeded(key, planned, i, &levels, take, now_ms));
        }
        match self.backend.failed(policy, key, e, |_| Decision::Allow {
            tenant: String::new(),
            key_id: String::new(),
            models: String::new(),
            rate_headers: Vec::new(),
            reserved: 0,
            reserved_at: None,
            output: None,
            settle_now: false,
            slot: None,
            cache_breakpoints: false,
        }) {
            Decision::Allow { .. } => Ok(None),
            d => Err(d),
        }
    }

    /// A 429 naming budget `i` of `planned`.
    fn budget_exceeded(
        &self,
        key: &Key,
        planned: &[Planned],
        i: usize,
        levels: &[f64],
        take: i64,
        now_ms: i64,
    ) -> Decision {
        let Some(p) = planned.get(i) else {
            return Decision::Unavailable(format!("no budget {i}"));
        };
        let remaining = levels.get(i).copied().unwrap_or(0.0).floor().max(0.0) as i64;
        let reset_ms = (p.window.end_ms - now_ms).max(0) as u64;
        let mut who = match p.scope {
            Scope::Key => format!("key {}", key.id),
            Scope::Tenant => format!("tenant {}", key.tenant),
        };
        if let Some(m) = &p.model {
            who.push_str(&format!(" on model {m}"));
        }
        let msg = format!(
            "Budget exhausted for {who}: ${} per {}, ${} left, this request may cost up to ${}. The budget resets at {} (in {}).",
            format_usd(p.budget.cap),
            p.budget.period.label(),
            format_usd(remaining),
            format_usd(take),
            p.window.end_local,
            format_reset(reset_ms),
        );
        self.backend.record("denied", "budget_exceeded");
        let mut headers = vec![("retry-after", reset_ms.div_ceil(1000).max(1).to_string())];
        headers.extend(budget_headers(planned, levels, now_ms).0);
        Decision::Deny {
            status: 429,
            body: error_body(&msg, "insufficient_quota", "budget_exceeded"),
            headers,
        }
    }

    /// Give back money taken for a request that was refused afterwards.
    pub fn put_back(&self, taken: &MoneyTaken) {
        let back: Vec<BucketOp> = taken
            .ops
            .iter()
            .map(|o| BucketOp {
                take: -o.take,
                ..o.clone()
            })
            .collect();
        // Into the lease it came from (no store call); a lease already
        // dropped keeps the reservation charged until the window ends.
        let _ = self.money.leases.try_take(&back, Instant::now());
    }

    /// The money part of a usage report: its cost, and the counter debits
    /// (cost minus the reserved maximum cost) of the key's budgets.
    pub fn settlement(&self, policy: &Policy, key: &Key, report: &UsageReport) -> Vec<BucketOp> {
        let money = &policy.money;
        let model = report.model.as_deref().unwrap_or("");
        let tokens = Tokens {
            prompt: report.prompt_tokens,
            completion: report.completion_tokens,
            cached: report.cached_tokens,
            cache_write: report.cache_write_tokens,
            web_searches: report.web_searches,
        };
        let (cost, priced) = money.prices.cost(model, &tokens);
        let label = match priced {
            Priced::Listed => model,
            Priced::Unlisted => "unlisted",
        };
        self.backend
            .metrics
            .spend_usd
            .with_label_values(&[&key.tenant, &key.id, label])
            .inc_by(cost as f64 / crate::prices::NANO_PER_USD as f64);
        if !money.applies(&key.id, &key.tenant) {
            return Vec::new();
        }
        let reserved = report.reserved.map_or(0, |r| {
            reserve_nano(r, money.prices.highest_for(&key.models))
        });
        let take = cost.saturating_sub(reserved);
        if take == 0 {
            return Vec::new();
        }
        money
            .plan(
                &key.id,
                &key.tenant,
                report.model.as_deref(),
                settled_at(report.reserved_at, self.money.now_ms()),
                &self.money.windows,
            )
            .iter()
            .map(|p| p.op(take))
            .collect()
    }
}

/// When a usage report is charged: the minute its money was reserved (so
/// an answer admitted before midnight, or in an earlier slot of a rolling
/// window, settles the windows that reserved it), unless that minute is in
/// the future or so old that its counters may have expired ([`GRACE_MS`]
/// after their window): then `now_ms`.
pub fn settled_at(reserved_at: Option<u64>, now_ms: i64) -> i64 {
    reserved_at
        .and_then(|minute| i64::try_from(minute).ok()?.checked_mul(60_000))
        .filter(|&at| at <= now_ms && now_ms - at < GRACE_MS)
        .unwrap_or(now_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Window;

    #[test]
    fn headers_name_the_tightest_budget_and_soft_caps() {
        let b = |cap, soft| Budget {
            period: Period::Day,
            cap,
            soft_percent: soft,
        };
        let w = Window {
            id: "d".into(),
            start_ms: 0,
            end_ms: 60_000,
            end_local: String::new(),
        };
        let p = |scope, budget| Planned {
            key: String::new(),
            budget,
            scope,
            model: None,
            window: w.clone(),
        };
        let planned = [
            p(Scope::Key, b(5_000_000_000, Some(80))),
            p(Scope::Tenant, b(100_000_000_000, Some(80))),
        ];
        let (h, soft) = budget_headers(&planned, &[900_000_000.0, 90_000_000_000.0], 0);
        assert_eq!(
            h,
            vec![
                (header::LIMIT, "5.00".to_string()),
                (header::REMAINING, "0.90".to_string()),
                (header::RESET, "1m0s".to_string()),
                (header::SCOPE, "key/day".to_string()),
                (
                    header::WARNING,
                    "key/day 82% used (soft cap 80%)".to_string()
                ),
            ]
        );
        assert_eq!(soft, vec![0]);
        // A level past its cap shows as the cap, and that budget is then
        // the tighter one.
        let (h, _) = budget_headers(&planned, &[5_400_000_000.0, 5_100_000_000.0], 0);
        assert_eq!(h[0], (header::LIMIT, "5.00".to_string()));
        assert_eq!(h[1], (header::REMAINING, "5.00".to_string()));
    }
}

/// One budget window as `tollgate-authz spend` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub scope: String,
    pub period: &'static str,
    pub window: String,
    /// Redis key of the counter (a rolling window's current slot).
    pub key: String,
    /// Every key whose sum is the window's spend: `key`, and a rolling
    /// window's older slots.
    pub slots: Vec<String>,
    pub cap: i64,
    pub end_local: String,
}

/// The current windows of every budget of `tenant` (and of its keys, or of
/// key `key_id` only) at `now_ms`; `Err` names what is unknown.
pub fn rows(
    policy: &Policy,
    tenant: &str,
    key_id: Option<&str>,
    now_ms: i64,
) -> Result<Vec<Row>, String> {
    if policy.tenant(tenant).is_none() {
        return Err(format!("unknown tenant {tenant:?}"));
    }
    let money = &policy.money;
    let (_, tz) = money.zone_of(tenant);
    let mut out = Vec::new();
    let mut push = |owner: Option<&Owner>, scope: Scope, id: &str| {
        let Some(owner) = owner else { return };
        let name = match scope {
            Scope::Key => format!("key {id}"),
            Scope::Tenant => format!("tenant {tenant}"),
        };
        let all = std::iter::once((None, owner.budgets.as_slice())).chain(
            owner
                .models
                .iter()
                .map(|(m, b)| (Some(m.as_str()), b.as_slice())),
        );
        for (pattern, budgets) in all {
            let label = match pattern {
                Some(m) => format!("{name} model {m}"),
                None => name.clone(),
            };
            for b in budgets {
                if let Some(w) = window(b.period, &tz, now_ms) {
                    let key = counter_key(tenant, b.period, &w.id, &scope_key(scope, id, pattern));
                    let mut slots = crate::rolling::older_keys(&key).unwrap_or_default();
                    slots.push(key.clone());
                    out.push(Row {
                        key,
                        slots,
                        scope: label.clone(),
                        period: b.period.as_str(),
                        // A rolling window's slot index says little: its length.
                        window: match b.period {
                            Period::Rolling(r) => r.label(),
                            _ => w.id,
                        },
                        cap: b.cap,
                        end_local: w.end_local,
                    });
                }
            }
        }
    };
    match key_id {
        Some(id) => {
            match policy.key_by_id(id) {
                Some(k) if k.tenant == tenant => {}
                _ => return Err(format!("unknown key {id:?} of tenant {tenant:?}")),
            }
            push(money.key_budgets(id), Scope::Key, id);
        }
        None => {
            push(money.tenant_budgets(tenant), Scope::Tenant, "");
            let mut ids: Vec<&str> = money
                .keys_with_budgets()
                .filter(|id| policy.key_by_id(id).is_some_and(|k| k.tenant == tenant))
                .collect();
            ids.sort();
            for id in ids {
                push(money.key_budgets(id), Scope::Key, id);
            }
        }
    }
    Ok(out)
}

/// The `spend` command's table: `rows` with each counter's spend (`None`:
/// nothing spent in that window yet).
pub fn render(tenant: &str, zone: &str, rows: &[(Row, Option<i64>)]) -> String {
    let mut s = format!("tenant {tenant}, time zone {zone}\n");
    // Per-model scopes are longer: the column widens to the longest.
    let w = rows.iter().map(|(r, _)| r.scope.len()).fold(24, usize::max);
    s.push_str(&format!(
        "{:<w$} {:<6} {:<11} {:>14} {:>14} {:>14}  {}\n",
        "scope", "period", "window", "spent_usd", "budget_usd", "remaining_usd", "resets_at"
    ));
    for (r, spent) in rows {
        let spent = spent.unwrap_or(0);
        s.push_str(&format!(
            "{:<w$} {:<6} {:<11} {:>14} {:>14} {:>14}  {}\n",
            r.scope,
            r.period,
            r.window,
            format_usd(spent),
            format_usd(r.cap),
            format_usd((r.cap - spent).max(0)),
            r.end_local
        ));
    }
    if rows.is_empty() {
        s.push_str("(no money budgets)\n");
    }
    s
}
