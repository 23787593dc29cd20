//! Concurrency slots: `max_concurrent_requests` per key and per tenant.
//!
//! A request of a key with a cap (its own or its tenant's) holds a *slot*
//! from its Check until its answer ends: a member of the key's and the
//! tenant's slot sets in the store, taken in both or in neither by one call
//! (`slots.lua`, atomic, on the store's clock), so every authz instance and
//! gateway sharing the store enforces one cap. The Check sends the slot to
//! the filter (`x-tollgate-slot`); the filter renews it every third of its
//! ttl while the request runs and releases it in the request's usage
//! report, which Envoy calls for on every end (answer done, client gone,
//! stream cut).
//!
//! Trade-off: a slot is a lease with a deadline ([`DEFAULT_TTL_MS`]), not
//! a counter. A counter leaks when a gateway dies between increment and
//! decrement; a slot whose gateway died expires by itself within its ttl,
//! at the price of one renewal call per long request per ttl/3. Every
//! Check of a capped key calls the store (exactness across instances: no
//! lease can stand for a slot); keys without a cap never do.
//!
//! A Check at the cap waits up to [`WAIT`] for a slot of the full set that
//! this instance sees released (a sequential client's previous request
//! whose release is still on its way), then asks the store once more.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::policy::{Key, Tenant};
use crate::storage::{key_slots, tenant_slots, SlotMode, SlotOp};

/// How long a slot lives after it was taken or last renewed, by default
/// (`--slot-ttl-ms`): a gateway that died gives its slots back within it.
pub use crate::defaults::SLOT_TTL_MS as DEFAULT_TTL_MS;

/// Longest a Check at the cap waits for a slot released on this instance.
pub const WAIT: Duration = Duration::from_millis(50);

/// This instance's slot state: how slots are named and how long they
/// live, and the Checks waiting for one to be released.
pub struct Slots {
    /// Random per instance, so ids never collide across instances.
    prefix: String,
    next: AtomicU64,
    pub ttl_ms: u64,
    /// Per slot set, the Checks waiting for one of its slots.
    waiters: Mutex<HashMap<String, Arc<Notify>>>,
}

impl Default for Slots {
    fn default() -> Self {
        Slots::new(DEFAULT_TTL_MS)
    }
}

impl Slots {
    pub fn new(ttl_ms: u64) -> Slots {
        Slots {
            prefix: format!("{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff),
            next: AtomicU64::new(1),
            ttl_ms: ttl_ms.max(1),
            waiters: Mutex::default(),
        }
    }

    /// A new slot id (`[0-9a-f]`, at most 28 characters).
    pub fn next_id(&self) -> String {
        format!(
            "{}{:x}",
            self.prefix,
            self.next.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// The acquisition of a new slot for a request of `key`: its key's and
    /// tenant's sets with their caps; None when neither has a cap.
    pub fn acquire(&self, key: &Key, tenant: Option<&Tenant>) -> Option<SlotOp> {
        let mut sets = Vec::new();
        if let Some(cap) = key.max_concurrent {
            sets.push((key_slots(&key.tenant, &key.id), cap));
        }
        if let Some(cap) = tenant.and_then(|t| t.max_concurrent) {
            sets.push((tenant_slots(&key.tenant), cap));
        }
        (!sets.is_empty()).then(|| SlotOp {
            mode: SlotMode::Acquire,
            sets,
            slot: self.next_id(),
            ttl_ms: self.ttl_ms,
        })
    }

    /// Release or renew `slot` of a request of `key_id` of `tenant`: in
    /// both sets whatever the caps are now (a reload may have removed one).
    pub fn held(&self, mode: SlotMode, tenant: &str, key_id: &str, slot: &str) -> SlotOp {
        SlotOp {
            mode,
            sets: vec![(key_slots(tenant, key_id), 0), (tenant_slots(tenant), 0)],
            slot: slot.to_string(),
            ttl_ms: self.ttl_ms,
        }
    }

    fn waiters(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Slots of `sets` were released: wake the Checks waiting for them.
    pub fn released(&self, sets: &[(String, u64)]) {
        let waiters = self.waiters();
        for (set, _) in sets {
            if let Some(n) = waiters.get(set) {
                n.notify_waiters();
            }
        }
    }

    /// Wait until a slot of `set` is released on this instance, at most
    /// `within`.
    pub async fn freed(&self, set: &str, within: Duration) {
        let notify = Arc::clone(self.waiters().entry(set.to_string()).or_default());
        let notified = notify.notified();
        // Registered before the lock is taken again: a release that takes
        // it from now on wakes this wait.
        let mut notified = std::pin::pin!(notified);
        notified.as_mut().enable();
        let _ = tokio::time::timeout(within, notified).await;
        let mut waiters = self.waiters();
        // The map's and this one: nobody else waits.
        if Arc::strong_count(&notify) == 2 {
            waiters.remove(set);
        }
    }

    /// Sets with Checks waiting (tests).
    pub fn waiting(&self) -> usize {
        self.waiters().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{hash_key, Policy};

    #[test]
    fn a_request_takes_the_sets_of_the_caps_that_apply() {
        let yaml = format!(
            "version: 1
tenants:
  capped: {{limits: {{max_concurrent_requests: 5}}}}
  free: {{}}
keys:
  - {{id: a, tenant: capped, sha256: {}, limits: {{max_concurrent_requests: 2}}}}
  - {{id: b, tenant: capped, sha256: {}}}
  - {{id: c, tenant: free, sha256: {}}}
",
            hash_key("a"),
            hash_key("b"),
            hash_key("c")
        );
        let p = Policy::from_yaml(&yaml).unwrap();
        let s = Slots::new(3000);
        let op = |id: &str| {
            let k = p.key_by_id(id).unwrap();
            s.acquire(k, p.tenant(&k.tenant))
        };
        let a = op("a").unwrap();
        assert_eq!(
            a.sets,
            vec![
                ("tg:{capped}:cc:k:a".to_string(), 2),
                ("tg:{capped}:cc:t".to_string(), 5)
            ]
        );
        assert_eq!((a.mode, a.ttl_ms), (SlotMode::Acquire, 3000));
        assert_eq!(op("b").unwrap().sets, vec![("tg:{capped}:cc:t".into(), 5)]);
        assert!(op("c").is_none(), "no cap: no store call");
        let b = op("b").unwrap();
        assert_ne!(a.slot, b.slot);
        assert!(tollgate_wire::valid_slot_id(&a.slot), "{}", a.slot);
        let r = s.held(SlotMode::Release, "capped", "b", &b.slot);
        assert_eq!(r.sets.len(), 2, "both sets, whatever the caps");
    }

    #[tokio::test]
    async fn a_release_wakes_the_checks_waiting_on_its_set() {
        let s = Arc::new(Slots::new(3000));
        let waiter = {
            let s = Arc::clone(&s);
            tokio::spawn(async move {
                let t = std::time::Instant::now();
                s.freed("set", Duration::from_secs(5)).await;
                t.elapsed()
            })
        };
        while s.waiting() == 0 {
            tokio::task::yield_now().await;
        }
        s.released(&[("other".into(), 0)]);
        s.released(&[("set".into(), 0)]);
        let waited = waiter.await.unwrap();
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        assert_eq!(s.waiting(), 0, "the entry is dropped");
        // Nobody released: the wait ends at its bound.
        s.freed("set", Duration::from_millis(20)).await;
    }
}
