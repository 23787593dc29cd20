//! Usage reports for the authz service (`POST /v1/usage`).
//!
//! A report is one JSON object; a batch is a JSON array of them. With
//! batching on (`usage_flush_ms` > 0) each Wasm VM sums the answers of one
//! flush interval per (tenant, key, model) and posts the sums on its tick, so
//! the debit costs one callout per interval instead of one per answer. The
//! authz service adds them up either way. The report type is the wire
//! contract's ([`tollgate_wire::UsageReport`]).

pub use tollgate_wire::UsageReport as Report;

/// One report as the body of its own `POST`.
pub fn report_body(r: &Report) -> Vec<u8> {
    serde_json::to_vec(r).unwrap_or_default()
}

fn same_account(a: &Report, b: &Report) -> bool {
    a.tenant == b.tenant
        && a.key_id == b.key_id
        && a.model == b.model
        && a.reserved_at == b.reserved_at
}

/// Reports waiting for the next flush, summed per (tenant, key, model,
/// minute of the money reservation).
#[derive(Debug, Default)]
pub struct UsageBatch {
    entries: Vec<Report>,
}

impl UsageBatch {
    /// Distinct (tenant, key, model) sums held before a flush is due anyway.
    pub const MAX_ENTRIES: usize = 256;

    /// Adds a report; true when the batch is full and should be flushed now.
    pub fn add(&mut self, r: Report) -> bool {
        match self.entries.iter_mut().find(|e| same_account(e, &r)) {
            Some(e) => {
                e.prompt_tokens = e.prompt_tokens.saturating_add(r.prompt_tokens);
                e.completion_tokens = e.completion_tokens.saturating_add(r.completion_tokens);
                e.cached_tokens = e.cached_tokens.saturating_add(r.cached_tokens);
                e.cache_write_tokens = e.cache_write_tokens.saturating_add(r.cache_write_tokens);
                e.web_searches = e.web_searches.saturating_add(r.web_searches);
                e.reserved = match (e.reserved, r.reserved) {
                    (Some(a), Some(b)) => Some(a.saturating_add(b)),
                    (a, b) => a.or(b),
                };
            }
            None => self.entries.push(r),
        }
        self.entries.len() >= Self::MAX_ENTRIES
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The pending sums as a JSON array, leaving the batch empty; None when
    /// there is nothing to send.
    pub fn take_body(&mut self) -> Option<Vec<u8>> {
        if self.entries.is_empty() {
            return None;
        }
        let body = serde_json::to_vec(&self.entries).unwrap_or_default();
        self.entries.clear();
        Some(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn report(tenant: &str, key: &str, model: &str, p: u64, c: u64) -> Report {
        Report {
            tenant: tenant.into(),
            key_id: key.into(),
            model: Some(model.into()),
            prompt_tokens: p,
            completion_tokens: c,
            cached_tokens: 0,
            cache_write_tokens: 0,
            web_searches: 0,
            reserved: None,
            reserved_at: None,
        }
    }

    #[test]
    fn reservations_are_echoed_and_summed() {
        let mut b = UsageBatch::default();
        let with = |r| Report {
            reserved: Some(r),
            ..report("t", "k", "openai/m", 1, 2)
        };
        b.add(with(300));
        b.add(report("t", "k", "openai/m", 1, 2));
        b.add(with(200));
        let v: Value = serde_json::from_slice(&b.take_body().unwrap_or_default()).unwrap();
        assert_eq!(
            v,
            json!([{"tenant": "t", "key_id": "k", "model": "openai/m",
                    "prompt_tokens": 3, "completion_tokens": 6, "reserved": 500}])
        );
    }

    #[test]
    fn reservations_of_another_minute_are_kept_apart() {
        let mut b = UsageBatch::default();
        let at = |minute| Report {
            reserved: Some(100),
            reserved_at: Some(minute),
            ..report("t", "k", "openai/m", 1, 2)
        };
        b.add(at(7));
        b.add(at(7));
        b.add(at(8));
        assert_eq!(b.len(), 2);
        let v: Value = serde_json::from_slice(&b.take_body().unwrap_or_default()).unwrap();
        assert_eq!(v[0]["reserved"], 200);
        assert_eq!(v[0]["reserved_at"], 7);
        assert_eq!(v[1]["reserved"], 100);
        assert_eq!(v[1]["reserved_at"], 8);
    }

    #[test]
    fn a_report_is_one_object() {
        let v: Value =
            serde_json::from_slice(&report_body(&report("t", "k", "openai/m", 3, 4))).unwrap();
        assert_eq!(
            v,
            json!({"tenant": "t", "key_id": "k", "model": "openai/m",
                   "prompt_tokens": 3, "completion_tokens": 4})
        );
    }

    #[test]
    fn sums_per_tenant_key_and_model_in_arrival_order() {
        let mut b = UsageBatch::default();
        assert!(b.take_body().is_none(), "nothing to send");
        b.add(report("t", "k", "a/m", 1, 10));
        b.add(report("t", "k2", "a/m", 2, 20));
        b.add(report("t", "k", "a/m", 3, 30));
        b.add(report("t", "k", "b/m", 4, 40));
        b.add(report("u", "k", "a/m", 5, 50));
        assert_eq!(b.len(), 4);
        let v: Value = serde_json::from_slice(&b.take_body().unwrap()).unwrap();
        assert_eq!(
            v,
            json!([
                {"tenant": "t", "key_id": "k", "model": "a/m", "prompt_tokens": 4, "completion_tokens": 40},
                {"tenant": "t", "key_id": "k2", "model": "a/m", "prompt_tokens": 2, "completion_tokens": 20},
                {"tenant": "t", "key_id": "k", "model": "b/m", "prompt_tokens": 4, "completion_tokens": 40},
                {"tenant": "u", "key_id": "k", "model": "a/m", "prompt_tokens": 5, "completion_tokens": 50},
            ])
        );
        assert!(
            b.is_empty() && b.take_body().is_none(),
            "taking empties the batch"
        );
    }

    #[test]
    fn full_when_the_distinct_sums_reach_the_limit() {
        let mut b = UsageBatch::default();
        for i in 0..UsageBatch::MAX_ENTRIES - 1 {
            assert!(!b.add(report("t", &format!("k{i}"), "a/m", 1, 1)));
        }
        assert!(
            !b.add(report("t", "k0", "a/m", 1, 1)),
            "a repeat adds no entry"
        );
        assert!(b.add(report("t", "last", "a/m", 1, 1)));
    }

    #[test]
    fn sums_saturate() {
        let mut b = UsageBatch::default();
        b.add(report("t", "k", "a/m", u64::MAX, 1));
        b.add(report("t", "k", "a/m", 1, 1));
        let v: Value = serde_json::from_slice(&b.take_body().unwrap()).unwrap();
        assert_eq!(v[0]["prompt_tokens"], json!(u64::MAX));
        assert_eq!(v[0]["completion_tokens"], json!(2));
    }
}
