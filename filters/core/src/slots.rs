//! The concurrency slots held by one worker's requests, renewed while
//! they run.
//!
//! authz-service gives a request of a key with `max_concurrent_requests` a
//! slot that expires `ttl` after it was taken (`x-tollgate-slot:
//! <id>;ttl=<ms>`). The request's flow puts it here on its headers and
//! takes it out when the request ends (its usage report releases it); the
//! worker's tick posts, for every slot held for a third of its ttl since
//! its last renewal, one renewal (`POST /v1/slots/renew`, all such slots in
//! one array). A gateway that dies stops renewing: its slots expire.

use std::collections::HashMap;

use tollgate_wire::{Slot, SlotRef};

/// One slot held by a request of this worker.
#[derive(Debug, Clone)]
struct Held {
    tenant: String,
    key_id: String,
    ttl_ms: u64,
    /// When it was taken or last renewed (this worker's clock, ms).
    renewed_ms: u64,
}

/// The slots this worker's requests hold, by id.
#[derive(Debug, Default)]
pub struct SlotBook {
    held: HashMap<String, Held>,
}

impl SlotBook {
    /// A request of `key_id` of `tenant` holds `slot` since `now_ms`.
    pub fn hold(&mut self, slot: &Slot, tenant: &str, key_id: &str, now_ms: u64) {
        self.held.insert(
            slot.id.clone(),
            Held {
                tenant: tenant.to_string(),
                key_id: key_id.to_string(),
                ttl_ms: slot.ttl_ms,
                renewed_ms: now_ms,
            },
        );
    }

    /// The request holding `id` ended.
    pub fn release(&mut self, id: &str) {
        self.held.remove(id);
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// The renewal due at `now_ms`, as the body of `POST /v1/slots/renew`:
    /// every slot last renewed a third of its ttl ago or more (then marked
    /// renewed now); None when none is due.
    pub fn due(&mut self, now_ms: u64) -> Option<Vec<u8>> {
        let mut due = Vec::new();
        for (id, h) in &mut self.held {
            if now_ms.saturating_sub(h.renewed_ms) >= h.ttl_ms / 3 {
                h.renewed_ms = now_ms;
                due.push(SlotRef {
                    tenant: h.tenant.clone(),
                    key_id: h.key_id.clone(),
                    slot: id.clone(),
                });
            }
        }
        if due.is_empty() {
            return None;
        }
        due.sort_by(|a, b| a.slot.cmp(&b.slot));
        serde_json::to_vec(&due).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn slot(id: &str, ttl_ms: u64) -> Slot {
        Slot {
            id: id.into(),
            ttl_ms,
        }
    }

    #[test]
    fn slots_are_renewed_every_third_of_their_ttl_until_released() {
        let mut b = SlotBook::default();
        b.hold(&slot("a", 30_000), "t", "k", 1_000);
        b.hold(&slot("b", 3_000), "t", "k2", 1_000);
        assert_eq!(b.due(1_999), None);
        let v: Value = serde_json::from_slice(&b.due(2_000).unwrap()).unwrap();
        assert_eq!(v, json!([{"tenant": "t", "key_id": "k2", "slot": "b"}]));
        assert_eq!(b.due(2_999), None, "renewed at 2,000");
        let v: Value = serde_json::from_slice(&b.due(11_000).unwrap()).unwrap();
        assert_eq!(v.as_array().map(Vec::len), Some(2), "both due");
        b.release("b");
        let v: Value = serde_json::from_slice(&b.due(21_000).unwrap()).unwrap();
        assert_eq!(v, json!([{"tenant": "t", "key_id": "k", "slot": "a"}]));
        b.release("a");
        assert!(b.is_empty());
        assert_eq!(b.due(100_000), None);
    }
}
