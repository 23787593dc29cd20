//! Usage reports for the authz service (`POST /v1/usage`).
//!
//! A report is one JSON object; a batch is a JSON array of them. With
//! batching on (`usage_flush_ms` > 0) each Wasm VM sums the answers of one
//! flush interval per (tenant, key, model) and posts the sums on its tick, so
//! the debit costs one callout per interval instead of one per answer. The
//! authz service adds them up either way. The report type is the wire
//! contract's ([`tollgate_wire::UsageReport`]).
//!
//! Two kinds of report go at once instead: one that releases a
//! concurrency slot (`slot`), and one whose Check asked for it (`;now` in
//! `x-tollgate-reserved`: the key's token bucket is nearly empty, so the
//! refund of a short answer should land before the client's next request).
//!
//! A request whose own output limit needs more than its Check reserved is
//! topped up first ([`top_up`]): the filter asks authz-service for the rest
//! and forwards the request only once it has it.

use tollgate_wire::{OutputCover, Refusal, Reservation, TopUp, TopUpAnswer};

use crate::error::{ApiError, RATE_LIMIT, SERVER};

pub use tollgate_wire::UsageReport as Report;
pub use tollgate_wire::SLOTS_RENEW_PATH;

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
                e.output_limit = e.output_limit.max(r.output_limit);
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

/// Should a request's usage go at once rather than with its batch? When
/// its Check asked for it (`settle_now`: the key's bucket runs low). A
/// concurrency slot's release always goes at once, alone when the usage
/// waits for the batch.
pub fn at_once(reservation: Option<&Reservation>) -> bool {
    reservation.is_some_and(|r| r.settle_now)
}

/// The top-up a request needs before it is forwarded: its reservation's
/// answer part falls short of its output limit (`declared`, None when it
/// declared none). None when the reservation covers it.
pub fn top_up(
    tenant: &str,
    key_id: &str,
    model: Option<&str>,
    reservation: &Reservation,
    declared: Option<u64>,
) -> Option<TopUp> {
    let cover: OutputCover = reservation.output?;
    if cover.shortfall(declared) == 0 {
        return None;
    }
    Some(TopUp {
        tenant: tenant.to_string(),
        key_id: key_id.to_string(),
        model: model.map(str::to_string),
        reserved: reservation.tokens,
        output: cover.reserved,
        need: cover.need(declared),
    })
}

/// What became of a top-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopUpResult {
    /// The request may go on with this many tokens reserved in all.
    Reserved(u64),
    /// The client's answer: a refusal (429 at a limit or budget), or 503
    /// when authz-service could not decide.
    Refused(ApiError),
}

/// authz-service's answer to a top-up call (`status` 0: no answer).
pub fn read_top_up(status: u16, body: &[u8]) -> TopUpResult {
    let answer = (status == 200)
        .then(|| serde_json::from_slice::<TopUpAnswer>(body).ok())
        .flatten();
    match answer {
        Some(TopUpAnswer {
            refused: Some(r), ..
        }) => TopUpResult::Refused(refusal(r)),
        Some(a) => TopUpResult::Reserved(a.reserved),
        None => TopUpResult::Refused(ApiError {
            retry_after: Some(1),
            ..ApiError::new(
                503,
                SERVER,
                "authz_unavailable",
                "The gateway could not reserve this request's output tokens. Please retry in 1 second.",
            )
        }),
    }
}

/// A refusal from authz-service as the client's error.
fn refusal(r: Refusal) -> ApiError {
    // OpenAI's `type` values authz-service answers with; any other is a
    // rate-limit error.
    let kind = [
        "tokens",
        "requests",
        "insufficient_quota",
        "invalid_request_error",
        "server_error",
    ]
    .into_iter()
    .find(|k| *k == r.kind)
    .unwrap_or(RATE_LIMIT);
    ApiError {
        retry_after: r.retry_after,
        ..ApiError::new(r.status, kind, &r.code, r.message)
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
            ..Report::default()
        }
    }

    #[test]
    fn a_batch_keeps_the_largest_output_need() {
        let mut b = UsageBatch::default();
        let need = |n| Report {
            output_limit: n,
            ..report("t", "k", "openai/m", 1, 2)
        };
        b.add(need(Some(16)));
        b.add(need(None));
        b.add(need(Some(256)));
        b.add(need(Some(32)));
        let v: Value = serde_json::from_slice(&b.take_body().unwrap_or_default()).unwrap();
        assert_eq!(v[0]["output_limit"], 256);
    }

    #[test]
    fn a_top_up_asks_for_the_shortfall_only() {
        let r = Reservation {
            tokens: 40,
            at_minute: Some(7),
            output: Some(OutputCover {
                reserved: 16,
                undeclared: 256,
            }),
            settle_now: false,
        };
        assert_eq!(top_up("t", "k", None, &r, Some(16)), None);
        assert_eq!(top_up("t", "k", None, &r, Some(4)), None);
        let t = top_up("t", "k", Some("openai/m"), &r, Some(1000)).unwrap();
        assert_eq!((t.reserved, t.output, t.need), (40, 16, 1000));
        assert_eq!(t.model.as_deref(), Some("openai/m"));
        // No declared limit: the tenant's default.
        assert_eq!(top_up("t", "k", None, &r, None).map(|t| t.need), Some(256));
        // No answer part (nothing reserved, or the whole bucket): never.
        let whole = Reservation { output: None, ..r };
        assert_eq!(top_up("t", "k", None, &whole, Some(100_000)), None);
    }

    #[test]
    fn top_up_answers() {
        assert_eq!(
            read_top_up(200, br#"{"reserved":1040}"#),
            TopUpResult::Reserved(1040)
        );
        let refused = br#"{"reserved":40,"refused":{"status":429,"message":"Rate limit reached","type":"tokens","code":"rate_limit_exceeded","retry_after":7}}"#;
        let TopUpResult::Refused(e) = read_top_up(200, refused) else {
            panic!("refused")
        };
        assert_eq!((e.status, e.kind, e.retry_after), (429, "tokens", Some(7)));
        assert_eq!(e.code.as_deref(), Some("rate_limit_exceeded"));
        assert_eq!(e.message, "Rate limit reached");
        for (status, body) in [(0, &b""[..]), (503, b"{}"), (200, b"nope")] {
            let TopUpResult::Refused(e) = read_top_up(status, body) else {
                panic!("{status}")
            };
            assert_eq!((e.status, e.retry_after), (503, Some(1)));
        }
    }

    #[test]
    fn settle_now_reports_go_at_once() {
        assert!(!at_once(None));
        let now = Reservation {
            settle_now: true,
            ..Reservation::default()
        };
        assert!(at_once(Some(&now)));
        assert!(!at_once(Some(&Reservation::default())));
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
