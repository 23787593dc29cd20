//! What a key has used and what is left of each of its own limits and
//! budgets, read from the store the Checks use: token buckets with a
//! debit of 0 (`bucket.lua` writes nothing for it), spend counters with a
//! spend debit of 0 (an `INCRBY 0` that sets the expiry the counter already
//! has), the concurrency cap's slots counted (`slots.lua`'s `count`, which
//! only drops expired slots). Tenant limits and budgets are shared by every key of the tenant
//! and are not listed per key.
//!
//! Trade-off: what running instances hold as leases (at most an eighth of
//! what a bucket or budget had left, returned after 1 s idle) counts as
//! used here, as in `tollgate-authz spend`.

use serde::Serialize;

use crate::budget::{Scope as MoneyScope, WindowCache};
use crate::plan::{plan, Scope, Take};
use crate::policy::{Key, Policy};
use crate::prices::format_usd;
use crate::storage::{key_slots, BucketOp, SlotMode, SlotOp, Store};

/// One token bucket of the key.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LimitUsage {
    /// `key`, or `key model <model>`.
    pub scope: String,
    /// `requests_per_minute`, `tokens_per_day`, …
    pub limit: String,
    pub capacity: u64,
    /// Whole units left now (negative after a long answer's debit).
    pub remaining: i64,
}

/// One money budget of the key, in its current window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BudgetUsage {
    /// `key`, or `key model <pattern>`.
    pub scope: String,
    /// `day`, `month` or `rolling`.
    pub period: String,
    /// The day (`2026-11-28`), month (`2026-11`) or rolling length (`24h`).
    pub window: String,
    pub budget_usd: String,
    pub spent_usd: String,
    pub remaining_usd: String,
    /// When the window ends (a rolling one: when its oldest slot leaves).
    pub resets_at: String,
}

#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct Usage {
    pub limits: Vec<LimitUsage>,
    pub budgets: Vec<BudgetUsage>,
}

fn limit_name(p: &crate::plan::Planned) -> String {
    format!("{}_per_{}", p.limit.kind.as_str(), p.limit.period)
}

/// The key's usage at `now_ms` (wall clock, for budget windows); `Err`
/// is the store's failure.
pub async fn read<S: Store>(
    store: &S,
    policy: &Policy,
    key: &Key,
    now_ms: i64,
) -> Result<Usage, String> {
    let mut out = Usage::default();
    // Token buckets: the key's own, then each of its models'.
    let mut planned: Vec<_> = plan(policy, key, None, Take::Check { reserve: 0 })
        .into_iter()
        .filter(|p| matches!(p.scope, Scope::Key))
        .map(|p| (String::from("key"), p))
        .collect();
    let mut models: Vec<&String> = key.model_limits.keys().collect();
    models.sort();
    for m in models {
        planned.extend(
            plan(policy, key, Some(m), Take::Check { reserve: 0 })
                .into_iter()
                .filter(|p| matches!(p.scope, Scope::KeyModel))
                .map(|p| (format!("key model {m}"), p)),
        );
    }
    let ops: Vec<BucketOp> = planned
        .iter()
        .map(|(_, p)| BucketOp {
            take: 0,
            lease: 0,
            ..p.op.clone()
        })
        .collect();
    let levels = store.debit(&ops).await.map_err(|e| e.to_string())?.levels;
    for ((scope, p), level) in planned.iter().zip(levels) {
        out.limits.push(LimitUsage {
            scope: scope.clone(),
            limit: limit_name(p),
            capacity: p.limit.spec.capacity,
            remaining: level.floor() as i64,
        });
    }
    // The concurrency cap: slots held now, on every gateway.
    if let Some(cap) = key.max_concurrent {
        let op = SlotOp {
            mode: SlotMode::Count,
            sets: vec![(key_slots(&key.tenant, &key.id), cap)],
            slot: String::new(),
            ttl_ms: 0,
        };
        let held = store.slots(&op).await.map_err(|e| e.to_string())?;
        let in_flight = held.counts.first().copied().unwrap_or(0);
        out.limits.push(LimitUsage {
            scope: "key".into(),
            limit: "max_concurrent_requests".into(),
            capacity: cap,
            remaining: cap as i64 - in_flight as i64,
        });
    }
    // Money budgets: the key's own, then each of its per-model ones.
    let money = &policy.money;
    let windows = WindowCache::default();
    let own = |model: Option<&str>| -> Vec<crate::budget::Planned> {
        money
            .plan(&key.id, &key.tenant, model, now_ms, &windows)
            .into_iter()
            .filter(|b| b.scope == MoneyScope::Key && b.model.as_deref() == model)
            .collect()
    };
    let mut budgets = own(None);
    if let Some(owner) = money.key_budgets(&key.id) {
        for (pattern, _) in &owner.models {
            budgets.extend(own(Some(pattern)));
        }
    }
    let ops: Vec<BucketOp> = budgets.iter().map(|b| b.op(0)).collect();
    let left = store
        .spend_debit(&ops)
        .await
        .map_err(|e| e.to_string())?
        .levels;
    for (b, left) in budgets.iter().zip(left) {
        let left = left as i64;
        out.budgets.push(BudgetUsage {
            scope: b.scope_label(),
            period: b.budget.period.as_str().to_string(),
            window: match b.budget.period {
                crate::budget::Period::Rolling(r) => r.label(),
                _ => b.window.id.clone(),
            },
            budget_usd: format_usd(b.budget.cap),
            spent_usd: format_usd(b.budget.cap - left),
            remaining_usd: format_usd(left.max(0)),
            resets_at: b.window.end_local.clone(),
        });
    }
    Ok(out)
}
