//! Per-attempt key choice: the upstream side of retries.
//!
//! The route filter ([`crate::flow`]) translates the request once, signs it
//! with the first key and asks Envoy's router for up to `max_attempts - 1`
//! retries (`x-envoy-max-retries`). The router retries on 429, 401, 402,
//! 403, 408, 5xx, resets and per-try timeouts, before any byte of the answer
//! reached the client, replaying the translated body. This module runs in the
//! router's upstream (per-attempt) filter, in the route filter's VM, so it
//! gets a new context on every attempt:
//!
//! - **Every attempt's answer**: a failing status ([`cooldown::fails_attempt`])
//!   cools the key that attempt used ([`cooldown::after_failure`]): a
//!   refusal (429, 401-403) at once, for the provider's `retry-after` when
//!   it gave one; a server-side failure (5xx, 408, and an attempt with no
//!   answer at all, seen in [`Attempt::on_done`]) when it gave a hint, or
//!   once the key failed `failure_threshold` times within 10 s. Cooldowns
//!   live in shared data, seen by every worker.
//! - **A retry** (attempt 2 and later): the request still carries the
//!   previous attempt's credentials, which name its key; the next key of the
//!   model's pool that is not cooling replaces them (Bedrock is signed again,
//!   over the replayed body).
//!
//! The first attempt reads two request headers and one property, and on its
//! answer one header: the success path stays as cheap as without retries.

use std::sync::Arc;

use tollgate_wire::header::CLUSTER;

use crate::config::{Kind, Provider, Runtime};
use crate::cooldown;
use crate::host::{Action, Host, Level, MetricKind};
use crate::metrics::property;
use crate::translate::{for_kind, UpstreamRequest};

/// Envoy's attempt number of this upstream request (1 for the first).
pub fn attempt_number(h: &dyn Host) -> u64 {
    h.property(&["upstream", "request_attempt_count"])
        .and_then(|v| v.get(..8).and_then(|b| b.try_into().ok()))
        .map_or(1, u64::from_le_bytes)
}

/// The request header holding a provider kind's credential.
fn credential_header(kind: Kind) -> &'static str {
    match kind {
        Kind::Openai | Kind::Bedrock => "authorization",
        Kind::Anthropic => "x-api-key",
        Kind::Azure => "api-key",
        Kind::Gemini => "x-goog-api-key",
    }
}

/// Does this credential header value belong to key `k` of `provider`?
fn is_key(provider: &Provider, k: usize, value: &str) -> bool {
    let Some(key) = provider.keys.get(k) else {
        return false;
    };
    match provider.kind() {
        Kind::Openai => value.strip_prefix("Bearer ") == Some(key.value.as_str()),
        Kind::Bedrock => key.access_key_id.as_deref().is_some_and(|id| {
            value
                .split("Credential=")
                .nth(1)
                .and_then(|c| c.split('/').next())
                == Some(id)
        }),
        _ => value == key.value,
    }
}

/// The provider and key the request's credentials name: (provider index,
/// key index). The provider is one whose cluster the request was routed to.
pub fn key_in_request(rt: &Runtime, h: &dyn Host) -> Option<(usize, usize)> {
    let cluster = h.request_header(CLUSTER)?;
    rt.providers
        .iter()
        .enumerate()
        .filter(|(_, p)| p.cluster == cluster)
        .find_map(|(i, p)| {
            let value = h.request_header(credential_header(p.kind()))?;
            (0..p.keys.len())
                .find(|&k| is_key(p, k, &value))
                .map(|k| (i, k))
        })
}

/// The key after `prev` for a retry: the next one of the model's pool (all
/// the provider's keys when the model is unknown) that is not cooling; when
/// every other key cools, the one whose cooldown ends first; `prev` only
/// when it is the pool's only key.
pub fn next_key(
    provider: &Provider,
    model: Option<&str>,
    prev: usize,
    cooling: &dyn Fn(&str) -> u64,
) -> usize {
    let pool: Vec<usize> = match model.and_then(|m| provider.models.get(m)) {
        Some(m) => m.pool.keys().collect(),
        None => (0..provider.keys.len()).collect(),
    };
    let start = pool.iter().position(|&k| k == prev).map_or(0, |i| i + 1);
    let others: Vec<(usize, u64)> = (0..pool.len())
        .filter_map(|i| pool.get((start + i) % pool.len()).copied())
        .filter(|&k| k != prev)
        .filter_map(|k| provider.keys.get(k).map(|key| (k, cooling(&key.id))))
        .collect();
    others
        .iter()
        .find(|(_, ms)| *ms == 0)
        .or_else(|| others.iter().min_by_key(|(_, ms)| *ms))
        .map_or(prev, |&(k, _)| k)
}

/// The `tollgate.failed_attempts.<reason>` of an attempt's status (0: no
/// answer).
pub fn failure_reason(status: u16) -> &'static str {
    match status {
        0 => "no_response",
        429 => "rate_limited",
        401..=403 => "refused_key",
        408 => "timeout",
        _ => "server_error",
    }
}

/// One upstream attempt.
pub struct Attempt {
    rt: Arc<Runtime>,
    /// The response headers of this attempt arrived.
    answered: bool,
    /// (provider, key) this attempt sends with, read from its request
    /// headers (the response callbacks cannot read them).
    key: Option<(usize, usize)>,
    /// Bedrock: the key to sign with once the replayed body is complete.
    sign_with: Option<(usize, usize)>,
}

impl Attempt {
    pub fn new(rt: Arc<Runtime>) -> Attempt {
        Attempt {
            rt,
            answered: false,
            key: None,
            sign_with: None,
        }
    }

    pub fn on_request_headers(&mut self, h: &mut dyn Host, end_of_stream: bool) -> Action {
        self.key = key_in_request(&self.rt, h);
        if attempt_number(h) <= 1 {
            return Action::Continue;
        }
        h.metric(MetricKind::Counter, "tollgate.retries", 1);
        let Some((p, prev)) = self.key else {
            return Action::Continue;
        };
        let Some(provider) = self.rt.provider(p) else {
            return Action::Continue;
        };
        let model = h
            .property(&[property::MODEL])
            .and_then(|v| String::from_utf8(v).ok());
        let now = h.now_ms();
        let next = {
            let host: &dyn Host = &*h;
            next_key(provider, model.as_deref(), prev, &|id| {
                cooldown::remaining_ms(host, id, now)
            })
        };
        if next == prev {
            return Action::Continue;
        }
        self.key = Some((p, next));
        if provider.kind() == Kind::Bedrock && !end_of_stream {
            // SigV4 signs the body: wait for the replayed one.
            self.sign_with = Some((p, next));
            return Action::Pause;
        }
        self.sign(h, p, next, Vec::new());
        Action::Continue
    }

    pub fn on_request_body(
        &mut self,
        h: &mut dyn Host,
        body_size: usize,
        end_of_stream: bool,
    ) -> Action {
        let Some((p, k)) = self.sign_with else {
            return Action::Continue;
        };
        if !end_of_stream {
            return Action::Pause;
        }
        self.sign_with = None;
        let body = h.request_body(body_size).unwrap_or_default();
        self.sign(h, p, k, body);
        Action::Continue
    }

    /// Puts key `k`'s credentials on the request in place of the previous
    /// attempt's.
    fn sign(&self, h: &mut dyn Host, p: usize, k: usize, body: Vec<u8>) {
        let (Some(provider), now) = (self.rt.provider(p), h.now_ms()) else {
            return;
        };
        let Some(key) = provider.keys.get(k) else {
            return;
        };
        let up = UpstreamRequest {
            path: h.request_header(":path").unwrap_or_default(),
            body,
            ..UpstreamRequest::default()
        };
        match for_kind(provider.kind()).auth_headers(provider, key, &up, now) {
            Ok(headers) => {
                if provider.kind() == Kind::Bedrock {
                    // The previous key's session token must not travel with this one.
                    h.set_request_header("x-amz-security-token", None);
                }
                for (name, value) in headers {
                    h.set_request_header(name, Some(&value));
                }
                // Debug: retries are counted in metrics; a line each would
                // flood the log at Envoy's usual info level in a 429 storm.
                h.log(
                    Level::Debug,
                    &format!(
                        "tollgate: retrying on provider {} with key {}",
                        provider.name, key.id
                    ),
                );
            }
            Err(e) => h.log(
                Level::Error,
                &format!(
                    "tollgate: could not sign a retry for provider {}: {}",
                    provider.name, e.message
                ),
            ),
        }
    }

    pub fn on_response_headers(&mut self, h: &mut dyn Host) -> Action {
        self.answered = true;
        let status: u16 = h
            .response_header(":status")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        if status != 0 && cooldown::fails_attempt(status) {
            let hint = {
                let host: &dyn Host = &*h;
                cooldown::hint_ms(&|name| host.response_header(name))
            };
            self.cool(h, status, hint);
        }
        Action::Continue
    }

    /// The attempt ended: without an answer (reset, per-try timeout, the
    /// client gone before it), its key cools as after a server error.
    pub fn on_done(&mut self, h: &mut dyn Host) {
        if !self.answered {
            self.cool(h, 0, None);
        }
    }

    fn cool(&self, h: &mut dyn Host, status: u16, hint: Option<u64>) {
        h.metric(
            MetricKind::Counter,
            &format!("tollgate.failed_attempts.{}", failure_reason(status)),
            1,
        );
        let Some((p, k)) = self.key else {
            return;
        };
        let (Some(provider), rt) = (self.rt.provider(p), &self.rt) else {
            return;
        };
        let Some(key) = provider.keys.get(k) else {
            return;
        };
        let now = h.now_ms();
        cooldown::after_failure(h, rt, &provider.name, &key.id, status, hint, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::fake::FakeHost;

    fn rt() -> Arc<Runtime> {
        Arc::new(
            Runtime::from_json(
                br#"{"providers":{
                  "openai":{"kind":"openai","cluster":"openai","models":["gpt-4o","gpt-x"],
                    "keys":[{"id":"o1","value":"sk-1"},{"id":"o2","value":"sk-2"},
                            {"id":"o3","value":"sk-3","models":["gpt-x"]}]},
                  "anthropic":{"kind":"anthropic","cluster":"anthropic","models":["claude"],
                    "keys":[{"id":"a1","value":"ant-1"}]},
                  "bedrock":{"kind":"bedrock","cluster":"bedrock","region":"us-east-1",
                    "models":["m"],"keys":[
                      {"id":"b1","access_key_id":"AKID1","value":"s1","session_token":"t1"},
                      {"id":"b2","access_key_id":"AKID2","value":"s2"}]}},
                  "key_cooldown_seconds":30,"failure_cooldown_seconds":5,"failure_threshold":1}"#,
                &|_| None,
            )
            .unwrap(),
        )
    }

    fn set_attempt(h: &mut FakeHost, n: u64) {
        h.properties.insert(
            "upstream.request_attempt_count".into(),
            n.to_le_bytes().to_vec(),
        );
    }

    fn attempt_host(n: u64, cluster: &str, creds: &[(&str, &str)]) -> FakeHost {
        let mut h = FakeHost {
            now: 1_000_000,
            ..FakeHost::default()
        };
        set_attempt(&mut h, n);
        h.req_headers = vec![
            (":path".into(), "/v1/chat/completions".into()),
            (CLUSTER.into(), cluster.into()),
        ];
        for (k, v) in creds {
            h.req_headers.push((k.to_string(), v.to_string()));
        }
        h
    }

    #[test]
    fn first_attempt_keeps_its_key() {
        let mut h = attempt_host(1, "openai", &[("authorization", "Bearer sk-1")]);
        let mut a = Attempt::new(rt());
        assert_eq!(a.on_request_headers(&mut h, true), Action::Continue);
        assert_eq!(
            h.req_header("authorization").as_deref(),
            Some("Bearer sk-1")
        );
    }

    /// A first attempt that succeeds: two request headers and the attempt
    /// number on the way out, the status on the way back; nothing more
    /// (filters/README.md, "The per-attempt filter").
    #[test]
    fn a_first_attempt_that_succeeds_costs_four_host_calls() {
        let mut h = attempt_host(1, "openai", &[("authorization", "Bearer sk-1")]);
        let mut a = Attempt::new(rt());
        assert_eq!(a.on_request_headers(&mut h, true), Action::Continue);
        assert_eq!(a.on_request_body(&mut h, 0, true), Action::Continue);
        h.resp_headers = vec![(":status".into(), "200".into())];
        assert_eq!(a.on_response_headers(&mut h), Action::Continue);
        a.on_done(&mut h);
        assert_eq!(
            *h.host_calls.borrow(),
            [
                ("property", 1),
                ("request_header", 2),
                ("response_header", 1)
            ]
            .into_iter()
            .collect()
        );
        assert!(h.shared.borrow().is_empty());
    }

    #[test]
    fn a_429_cools_for_its_hint_and_the_retry_takes_the_next_key() {
        let rt = rt();
        let mut h = attempt_host(1, "openai", &[("authorization", "Bearer sk-1")]);
        let mut first = Attempt::new(Arc::clone(&rt));
        first.on_request_headers(&mut h, true);
        h.resp_headers = vec![
            (":status".into(), "429".into()),
            ("retry-after".into(), "1".into()),
        ];
        first.on_response_headers(&mut h);
        first.on_done(&mut h);
        assert_eq!(cooldown::remaining_ms(&h, "o1", 1_000_000), 1_000);
        assert_eq!(h.metrics["tollgate.failed_attempts.rate_limited"], 1);
        assert_eq!(h.metrics["tollgate.key_cooldowns.openai"], 1);
        // Attempt 2 sees attempt 1's credentials and moves on.
        set_attempt(&mut h, 2);
        let mut second = Attempt::new(Arc::clone(&rt));
        assert_eq!(second.on_request_headers(&mut h, true), Action::Continue);
        assert_eq!(
            h.req_header("authorization").as_deref(),
            Some("Bearer sk-2")
        );
        h.resp_headers = vec![(":status".into(), "200".into())];
        second.on_response_headers(&mut h);
        second.on_done(&mut h);
        assert_eq!(cooldown::remaining_ms(&h, "o2", 1_000_000), 0);
        // The key comes back when its hint ends.
        assert!(!cooldown::active(&h, "o1", 1_001_000));
    }

    #[test]
    fn no_answer_cools_for_the_failure_cooldown() {
        let mut h = attempt_host(1, "anthropic", &[("x-api-key", "ant-1")]);
        let mut a = Attempt::new(rt());
        a.on_request_headers(&mut h, true);
        a.on_done(&mut h);
        assert_eq!(cooldown::remaining_ms(&h, "a1", 1_000_000), 5_000);
        // A single-key provider retries on the same key.
        set_attempt(&mut h, 2);
        let mut b = Attempt::new(rt());
        b.on_request_headers(&mut h, true);
        assert_eq!(h.req_header("x-api-key").as_deref(), Some("ant-1"));
    }

    #[test]
    fn next_key_rotates_within_the_pool_and_prefers_keys_not_cooling() {
        let rt = rt();
        let p = rt.providers.iter().find(|p| p.name == "openai").unwrap();
        let none = |_: &str| 0;
        assert_eq!(next_key(p, Some("gpt-4o"), 0, &none), 1);
        assert_eq!(next_key(p, Some("gpt-4o"), 1, &none), 0);
        // o3 serves gpt-x only.
        assert_eq!(next_key(p, Some("gpt-x"), 1, &none), 2);
        assert_eq!(next_key(p, None, 2, &none), 0);
        // o2 cools: skip it; every other cools: the first back.
        let o2 = |id: &str| if id == "o2" { 500 } else { 0 };
        assert_eq!(next_key(p, Some("gpt-x"), 0, &o2), 2);
        let all = |id: &str| match id {
            "o1" => 900,
            "o2" => 100,
            _ => 300,
        };
        assert_eq!(next_key(p, Some("gpt-x"), 0, &all), 1);
    }

    #[test]
    fn bedrock_is_signed_again_over_the_replayed_body() {
        let rt = rt();
        let auth = "AWS4-HMAC-SHA256 Credential=AKID1/20240101/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=00";
        let mut h = attempt_host(
            2,
            "bedrock",
            &[("authorization", auth), ("x-amz-security-token", "t1")],
        );
        h.req_headers
            .push((":path".into(), "/model/m/converse".into()));
        h.req_body = br#"{"messages":[]}"#.to_vec();
        let mut a = Attempt::new(rt);
        assert_eq!(a.on_request_headers(&mut h, false), Action::Pause);
        assert_eq!(a.on_request_body(&mut h, 3, false), Action::Pause);
        let n = h.req_body.len();
        assert_eq!(a.on_request_body(&mut h, n, true), Action::Continue);
        let signed = h.req_header("authorization").unwrap();
        assert!(signed.contains("Credential=AKID2/"), "{signed}");
        assert_eq!(h.req_header("x-amz-security-token"), None);
    }

    #[test]
    fn unknown_credentials_are_left_alone() {
        let mut h = attempt_host(2, "openai", &[("authorization", "Bearer nope")]);
        let mut a = Attempt::new(rt());
        assert_eq!(a.on_request_headers(&mut h, true), Action::Continue);
        assert_eq!(
            h.req_header("authorization").as_deref(),
            Some("Bearer nope")
        );
        a.on_done(&mut h);
        assert!(h.shared.borrow().is_empty());
    }
}
