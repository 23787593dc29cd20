//! In-memory bucket store: one process, one mutex, time from a [`Clock`];
//! money budgets' spend counters beside the buckets ([`MemoryCounters`]).
//!
//! For tests and single-instance development (`--redis-url memory://`);
//! limits are per process, not global.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use super::{BucketOp, Outcome, SlotMode, SlotOp, SlotOutcome, Store, StoreError};
use crate::bucket::{self, BucketState};

/// Source of milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> u64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// A clock tests move by hand.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    pub fn new(start_ms: u64) -> Self {
        ManualClock(AtomicU64::new(start_ms))
    }
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl<C: Clock> Clock for Arc<C> {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }
}

struct Entry {
    state: BucketState,
    expires_ms: u64,
}

/// Buckets in a `HashMap` behind a mutex. Expired entries are swept when
/// the map has doubled since the last sweep, so it does not grow without
/// bound.
pub struct MemoryStore {
    clock: Box<dyn Clock>,
    inner: Mutex<Inner>,
    /// Money budgets' spend counters.
    pub counters: MemoryCounters,
    /// Concurrency slots.
    pub slots: MemorySlots,
}

struct Inner {
    map: HashMap<String, Entry>,
    sweep_at: usize,
}

/// Levels are kept in thousandths, exactly as the Redis script stores them.
fn quantize(level: f64) -> f64 {
    (level * 1000.0).floor() / 1000.0
}

impl MemoryStore {
    pub fn new(clock: impl Clock) -> Self {
        MemoryStore {
            clock: Box::new(clock),
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                sweep_at: 1024,
            }),
            counters: Default::default(),
            slots: Default::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.inner.lock().map(|g| g.map.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn apply(&self, ops: &[BucketOp], take_mode: bool) -> Result<Outcome, StoreError> {
        let now = self.clock.now_ms();
        let mut g = self
            .inner
            .lock()
            .map_err(|_| StoreError::Unavailable("memory store poisoned".into()))?;
        let states: Vec<Option<BucketState>> = ops
            .iter()
            .map(|op| {
                g.map
                    .get(&op.key)
                    .filter(|e| e.expires_ms > now)
                    .map(|e| e.state)
            })
            .collect();
        let specs: Vec<_> = ops.iter().map(|o| o.spec).collect();
        let takes: Vec<i64> = ops.iter().map(|o| o.take).collect();
        let (denied, levels, granted) = if take_mode {
            let wants: Vec<u64> = ops.iter().map(|o| o.lease).collect();
            let (out, denied) = bucket::check_and_take(&states, &specs, &takes, &wants, now);
            (
                denied,
                out.iter().map(|o| o.level).collect::<Vec<_>>(),
                out.iter().map(|o| o.granted).collect::<Vec<_>>(),
            )
        } else {
            let levels = states
                .iter()
                .zip(&specs)
                .zip(&takes)
                .map(|((s, spec), take)| bucket::debit(*s, *spec, *take, now).level)
                .collect();
            (None, levels, vec![0; ops.len()])
        };
        let mut reported = Vec::with_capacity(levels.len());
        for ((op, level), lease) in ops.iter().zip(levels).zip(&granted) {
            if denied.is_none() && (op.take != 0 || *lease > 0) {
                let level = quantize(level);
                let ttl = bucket::ttl_ms(level, op.spec);
                g.map.insert(
                    op.key.clone(),
                    Entry {
                        state: BucketState { level, ts_ms: now },
                        expires_ms: now + ttl,
                    },
                );
                reported.push(level);
            } else {
                reported.push(quantize(level));
            }
        }
        if g.map.len() >= g.sweep_at {
            g.map.retain(|_, e| e.expires_ms > now);
            g.sweep_at = (g.map.len() * 2).max(1024);
        }
        Ok(Outcome {
            denied,
            levels: reported,
            granted,
        })
    }
}

impl Store for MemoryStore {
    async fn check_and_take(&self, ops: &[BucketOp]) -> Result<Outcome, StoreError> {
        self.apply(ops, true)
    }

    async fn debit(&self, ops: &[BucketOp]) -> Result<Outcome, StoreError> {
        self.apply(ops, false)
    }

    async fn spend_take(&self, ops: &[BucketOp]) -> Result<Outcome, StoreError> {
        Ok(self.counters.apply(ops, true))
    }

    async fn spend_debit(&self, ops: &[BucketOp]) -> Result<Outcome, StoreError> {
        Ok(self.counters.apply(ops, false))
    }

    async fn slots(&self, op: &SlotOp) -> Result<SlotOutcome, StoreError> {
        Ok(self.slots.apply(op, self.clock.now_ms()))
    }
}

/// Concurrency slot sets in process memory: the rules of `slots.lua`, each
/// set a map of slot id to the unix ms it expires at.
#[derive(Default)]
pub struct MemorySlots {
    sets: std::sync::Mutex<HashMap<String, HashMap<String, u64>>>,
}

impl MemorySlots {
    pub fn apply(&self, op: &SlotOp, now: u64) -> SlotOutcome {
        let mut sets = self.sets.lock().unwrap_or_else(|p| p.into_inner());
        let mut counts = Vec::with_capacity(op.sets.len());
        if op.mode == SlotMode::Release {
            for (key, _) in &op.sets {
                let held = sets.get_mut(key).and_then(|s| s.remove(&op.slot));
                counts.push(u64::from(held.is_some()));
            }
            sets.retain(|_, s| !s.is_empty());
            return SlotOutcome {
                denied: None,
                counts,
            };
        }
        for (key, _) in &op.sets {
            if let Some(s) = sets.get_mut(key) {
                s.retain(|_, expires| *expires > now);
            }
        }
        let held = |sets: &HashMap<String, HashMap<String, u64>>, key: &str| {
            sets.get(key).map_or(0, |s| s.len() as u64)
        };
        if op.mode == SlotMode::Count {
            return SlotOutcome {
                denied: None,
                counts: op.sets.iter().map(|(key, _)| held(&sets, key)).collect(),
            };
        }
        let expires = now.saturating_add(op.ttl_ms);
        if op.mode == SlotMode::Renew {
            for (key, _) in &op.sets {
                let held = sets.get_mut(key).and_then(|s| s.get_mut(&op.slot));
                counts.push(u64::from(held.is_some()));
                if let Some(e) = held {
                    *e = expires;
                }
            }
            return SlotOutcome {
                denied: None,
                counts,
            };
        }
        let denied = op
            .sets
            .iter()
            .position(|(key, cap)| held(&sets, key) >= *cap);
        for (key, _) in &op.sets {
            if denied.is_none() {
                sets.entry(key.clone())
                    .or_default()
                    .insert(op.slot.clone(), expires);
            }
            counts.push(held(&sets, key));
        }
        SlotOutcome { denied, counts }
    }

    /// Slots held in set `key` at `now` (tests).
    pub fn held(&self, key: &str, now: u64) -> usize {
        self.sets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .map_or(0, |s| s.values().filter(|e| **e > now).count())
    }
}

/// Spend counters in process memory (the `memory://` store and tests):
/// the rules of `spend.lua`, windows kept until restart.
#[derive(Default)]
pub struct MemoryCounters {
    map: std::sync::Mutex<HashMap<String, i64>>,
}

impl MemoryCounters {
    pub fn apply(&self, ops: &[BucketOp], take_mode: bool) -> Outcome {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        // A rolling counter's older slots: their values, oldest first.
        let slots: Vec<Option<Vec<i64>>> = ops
            .iter()
            .map(|o| {
                crate::rolling::older_keys(&o.key).map(|keys| {
                    keys.iter()
                        .map(|k| map.get(k).copied().unwrap_or(0))
                        .collect()
                })
            })
            .collect();
        let older: Vec<i64> = slots
            .iter()
            .map(|s| s.as_ref().map_or(0, |v| v.iter().sum()))
            .collect();
        let spent: Vec<i64> = ops
            .iter()
            .zip(&older)
            .map(|(o, old)| map.get(&o.key).copied().unwrap_or(0) + old)
            .collect();
        let denied = if take_mode {
            ops.iter().zip(&spent).position(|(o, s)| {
                let cap = o.spec.capacity as i64;
                *s >= cap || s.saturating_add(o.take) > cap
            })
        } else {
            None
        };
        let mut levels = Vec::with_capacity(ops.len());
        let mut granted = Vec::with_capacity(ops.len());
        for (((o, s), old), olds) in ops.iter().zip(spent).zip(older).zip(&slots) {
            let cap = o.spec.capacity as i64;
            let mut g = 0;
            let mut s = s;
            if denied.is_none() {
                if take_mode && o.lease > 0 {
                    g = ((cap - s - o.take) / 8).clamp(0, o.lease as i64);
                }
                s = s.saturating_add(o.take + g);
                map.insert(o.key.clone(), s - old);
            }
            levels.push((cap - s) as f64);
            // As spend.lua: a rolling counter answers, in place of a lease,
            // the 1-based position of its oldest slot holding spend.
            if let Some(olds) = olds {
                g = match olds.iter().position(|v| *v != 0) {
                    Some(j) => j as i64 + 1,
                    None if s != old => olds.len() as i64 + 1,
                    None => 0,
                };
            }
            granted.push(g as u64);
        }

        Outcome {
            denied,
            levels,
            granted,
        }
    }

    /// The spend recorded under `key` (tests, the CLI's memory path).
    pub fn get(&self, key: &str) -> Option<i64> {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bucket::BucketSpec;

    #[tokio::test]
    async fn refill_and_expiry_follow_the_manual_clock() {
        let clock = Arc::new(ManualClock::new(1_000_000));
        let store = MemoryStore::new(clock.clone());
        let ops = [BucketOp {
            key: "b".into(),
            spec: BucketSpec {
                capacity: 2,
                window_ms: 60_000,
            },
            take: 1,
            lease: 0,
        }];
        assert_eq!(store.check_and_take(&ops).await.unwrap().denied, None);
        assert_eq!(store.check_and_take(&ops).await.unwrap().denied, None);
        assert_eq!(store.check_and_take(&ops).await.unwrap().denied, Some(0));
        clock.advance(29_999);
        assert_eq!(store.check_and_take(&ops).await.unwrap().denied, Some(0));
        clock.advance(1);
        assert_eq!(store.check_and_take(&ops).await.unwrap().denied, None);
        // Full again after a whole window: the entry has expired.
        clock.advance(60_000);
        let o = store.check_and_take(&ops).await.unwrap();
        assert_eq!(o.levels, vec![1.0]);
    }

    #[test]
    fn counters_refuse_past_the_cap_and_lease_an_eighth() {
        let c = MemoryCounters::default();
        let op = |take, lease| BucketOp {
            key: "k".into(),
            spec: BucketSpec {
                capacity: 1000,
                window_ms: 0,
            },
            take,
            lease,
        };
        let o = c.apply(&[op(200, 1000)], true);
        assert_eq!((o.denied, o.levels[0], o.granted[0]), (None, 700.0, 100));
        assert_eq!(c.apply(&[op(701, 0)], true).denied, Some(0));
        assert_eq!(c.get("k"), Some(300));
        c.apply(&[op(-100, 0)], false);
        assert_eq!(c.apply(&[op(800, 0)], true).levels[0], 0.0);
        assert_eq!(c.apply(&[op(0, 0)], true).denied, Some(0), "at the cap");
    }
}
