//! Usage reports (`POST /v1/usage`) settle what a Check reserved: the
//! tokens a request used are debited from its token buckets, minus the
//! reservation on the buckets that held it, and its cost from its money
//! budgets ([`crate::spend`]). While the store is unreachable a debit waits
//! in a bounded queue and is applied when the store returns; a debit that
//! may have been applied is never retried.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use tollgate_wire::UsageReport;

use crate::backend::Backend;
use crate::decision::echo;
use crate::learned::Learned;
use crate::lease::Leases;
use crate::plan::{plan, Take};
use crate::policy::{valid_policy_name, Policy};
use crate::slots::Slots;
use crate::spend::{MoneyState, Spend};
use crate::storage::{BucketOp, SlotMode, Store, StoreError};

/// What became of a usage report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// Written to the store.
    Debited,
    /// The store is unreachable: kept in the bounded queue, applied when it
    /// returns.
    Queued,
}

/// Queued usage debits kept at most (oldest dropped first and counted).
pub const USAGE_QUEUE_MAX: usize = 10_000;

struct QueuedDebit {
    tenant: String,
    tokens: u64,
    ops: Vec<BucketOp>,
    /// Spend counters of money budgets (`Store::spend_debit`), not buckets.
    counters: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    #[error("unknown key_id {} for tenant {}", echo(.0), echo(.1))]
    UnknownKey(String, String),
    #[error("{0}")]
    Store(StoreError),
}

/// Usage debits waiting for the store, oldest first.
#[derive(Default)]
pub struct UsageQueue(Mutex<VecDeque<QueuedDebit>>);

/// Usage settlement on one authorizer's leases, money state and store.
pub struct Settle<'a, S: Store> {
    pub backend: &'a Backend<S>,
    pub leases: &'a Leases,
    pub money: &'a MoneyState,
    pub queue: &'a UsageQueue,
    /// Where the reports' output needs are learned.
    pub learned: &'a Learned,
    /// Concurrency slots, released by the reports that name one.
    pub slots: &'a Slots,
}

impl<S: Store> Settle<'_, S> {
    /// Settle a usage report: debit its tokens from the token buckets of
    /// the key, its tenant and, when configured, the model, minus what was
    /// reserved at Check time on the buckets that reserved it (a refund when
    /// the answer was shorter). Levels may go negative. When the store is
    /// unreachable the debit is queued ([`USAGE_QUEUE_MAX`], oldest dropped
    /// first and counted) and applied by [`Settle::drain`].
    pub async fn record(
        &self,
        policy: &Policy,
        report: &UsageReport,
    ) -> Result<Recorded, UsageError> {
        if let Some(slot) = &report.slot {
            // First, and whatever the key's fate: a removed key's request
            // still gives its slot back.
            self.release(&report.tenant, &report.key_id, slot).await;
        }
        let key = match policy.key_by_id(&report.key_id) {
            Some(k) if k.tenant == report.tenant => k,
            _ => {
                self.backend
                    .metrics
                    .usage_reports
                    .with_label_values(&["unknown_key"])
                    .inc();
                return Err(UsageError::UnknownKey(
                    report.key_id.clone(),
                    report.tenant.clone(),
                ));
            }
        };
        if let Some(need) = report.output_limit {
            self.learned.observe(&key.id, need, Instant::now());
        }
        let tokens = report
            .prompt_tokens
            .saturating_add(report.completion_tokens);
        let how = Take::Settle {
            tokens,
            reserved: report.reserved.unwrap_or(0),
        };
        let ops: Vec<BucketOp> = plan(policy, key, report.model.as_deref(), how)
            .into_iter()
            .map(|p| p.op)
            .filter(|op| op.take != 0)
            .collect();
        let spend = Spend {
            money: self.money,
            backend: self.backend,
        };
        let money = spend.settlement(policy, key, report);
        let money = if money.is_empty() {
            None
        } else {
            let debit = QueuedDebit {
                tenant: key.tenant.clone(),
                tokens: 0,
                ops: money,
                counters: true,
            };
            Some(self.apply_or_queue(debit).await)
        };
        if ops.is_empty() {
            self.count_debited(&key.tenant, tokens);
            return money.unwrap_or(Ok(Recorded::Debited));
        }
        let debit = QueuedDebit {
            tenant: key.tenant.clone(),
            tokens,
            ops,
            counters: false,
        };
        let buckets = self.apply_or_queue(debit).await;
        match (money, buckets) {
            (Some(Err(e)), _) | (_, Err(e)) => Err(e),
            (Some(Ok(Recorded::Queued)), _) | (_, Ok(Recorded::Queued)) => Ok(Recorded::Queued),
            _ => Ok(Recorded::Debited),
        }
    }

    /// Release a request's concurrency slot, and wake the Checks of this
    /// instance waiting for one. A release the store did not take leaves
    /// the slot to expire by itself (never queued: its ttl bounds it).
    async fn release(&self, tenant: &str, key_id: &str, slot: &str) {
        if !valid_policy_name(tenant)
            || !valid_policy_name(key_id)
            || !tollgate_wire::valid_slot_id(slot)
        {
            return;
        }
        let op = self.slots.held(SlotMode::Release, tenant, key_id, slot);
        let call = self.backend.store.slots(&op);
        match self.backend.timed("slot_release", call).await {
            Ok(out) => {
                // Not held any more: it expired first.
                let held = out.counts.iter().any(|&c| c > 0);
                let what = if held { "released" } else { "expired" };
                self.backend.metrics.slots.with_label_values(&[what]).inc();
                self.slots.released(&op.sets);
            }
            Err(e) => self.backend.count_store_error("slot_release", &e),
        }
    }

    /// Apply one debit, or queue it while the store is unreachable.
    async fn apply_or_queue(&self, debit: QueuedDebit) -> Result<Recorded, UsageError> {
        match self.apply_debit(&debit).await {
            Ok(()) => Ok(Recorded::Debited),
            // Never sent (store down, breaker open, no call slot): keep it.
            Err(StoreError::Unavailable(_) | StoreError::Overloaded) => {
                self.enqueue(debit);
                Ok(Recorded::Queued)
            }
            // Sent but unanswered or refused: it may have been applied, so
            // it is not retried (never debited twice).
            Err(e) => {
                self.backend
                    .metrics
                    .usage_reports
                    .with_label_values(&["store_error"])
                    .inc();
                Err(UsageError::Store(e))
            }
        }
    }

    fn count_debited(&self, tenant: &str, tokens: u64) {
        self.backend
            .metrics
            .usage_reports
            .with_label_values(&["ok"])
            .inc();
        self.backend
            .metrics
            .usage_tokens
            .with_label_values(&[tenant])
            .inc_by(tokens as f64);
    }

    async fn apply_debit(&self, debit: &QueuedDebit) -> Result<(), StoreError> {
        let store = &self.backend.store;
        let result = if debit.counters {
            let call = store.spend_debit(&debit.ops);
            self.backend.timed("spend_debit", call).await
        } else {
            self.backend.timed("debit", store.debit(&debit.ops)).await
        };
        match result {
            Ok(outcome) if debit.counters => {
                self.money.leases.observe(&debit.ops, &outcome.levels);
                Ok(())
            }
            Ok(outcome) => {
                self.leases.observe(&debit.ops, &outcome.levels);
                self.count_debited(&debit.tenant, debit.tokens);
                Ok(())
            }
            Err(e) => {
                self.backend.debit_failed(&e);
                Err(e)
            }
        }
    }

    fn queue(&self) -> MutexGuard<'_, VecDeque<QueuedDebit>> {
        self.queue.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn enqueue(&self, debit: QueuedDebit) {
        let mut q = self.queue();
        if q.len() >= USAGE_QUEUE_MAX {
            q.pop_front();
            self.backend.metrics.usage_dropped.inc();
        }
        q.push_back(debit);
        self.backend.metrics.usage_queued.set(q.len() as i64);
        self.backend
            .metrics
            .usage_reports
            .with_label_values(&["queued"])
            .inc();
    }

    /// Apply queued usage debits while the store takes them (from the
    /// authorizer's periodic upkeep).
    pub async fn drain(&self) {
        loop {
            let Some(debit) = self.queue().pop_front() else {
                break;
            };
            match self.apply_debit(&debit).await {
                Ok(()) => {}
                Err(StoreError::Unavailable(_) | StoreError::Overloaded) => {
                    self.queue().push_front(debit);
                    break;
                }
                // Sent but unanswered: may have been applied; not retried,
                // counted like a report's own ambiguous failure.
                Err(_) => {
                    self.backend
                        .metrics
                        .usage_reports
                        .with_label_values(&["store_error"])
                        .inc();
                }
            }
        }
        self.backend
            .metrics
            .usage_queued
            .set(self.queue().len() as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::{clip, ECHO_MAX_CHARS};

    #[test]
    fn echoed_input_is_quoted_and_cut() {
        assert_eq!(echo("gpt-4o"), r#""gpt-4o""#);
        assert_eq!(echo("a\nb"), r#""a\nb""#);
        let long = "é".repeat(ECHO_MAX_CHARS + 1);
        assert_eq!(echo(&long), format!("{:?}…", "é".repeat(ECHO_MAX_CHARS)));
        assert_eq!(
            echo(&"é".repeat(ECHO_MAX_CHARS)).chars().count(),
            ECHO_MAX_CHARS + 2
        );
        assert_eq!(clip("abcdef", 3), "abc…");
        assert_eq!(clip("abc", 3), "abc");
        let e = UsageError::UnknownKey("k".repeat(5000), "t".into()).to_string();
        assert!(e.len() < 120, "{e}");
        assert!(
            e.starts_with(&format!(
                "unknown key_id \"{}\"…",
                "k".repeat(ECHO_MAX_CHARS)
            )),
            "{e}"
        );
    }
}
