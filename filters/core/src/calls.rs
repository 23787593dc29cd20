//! The calls a request makes itself, inside its own stream, and the one
//! answer the client gets from theirs: the fan-out of a request that the
//! provider takes one input at a time (Bedrock Titan embeddings, one
//! [`crate::plan::Call`] per input, their answers merged in order), and the
//! fallback that sends a failed request to its alias's next target (its
//! answer replacing the failed one).
//!
//! [`crate::flow`] calls this at its phases (the plan, the response
//! headers, and [`Host::call`]'s answers) and keeps the request's state:
//! its metrics, its usage and the reply. Nothing here calls back.

use tollgate_wire::header::{CACHE_BREAKPOINTS, CLUSTER, TENANT};

use crate::config::{Provider, Runtime};
use crate::cooldown;
use crate::error::{ApiError, SERVER};
use crate::host::{Host, Level};
use crate::plan::{apply_header_changes, plan, Call, Plan, RequestFacts, Route, MAX_RETRIES};
use crate::translate::{for_route, merge_embeddings, Endpoint, Front, Usage};

/// How long a fan-out's calls may take.
pub const FAN_OUT_TIMEOUT_MS: u64 = 60_000;
/// How long a fallback target's call may take (the route's `timeout`).
pub const FALLBACK_TIMEOUT_MS: u64 = 600_000;

/// A final answer that a fallback target may replace: a refusal, a server
/// failure, or Envoy's own reply (connect failure, timeout).
pub fn fallback_worthy(status: u16, from_upstream: bool) -> bool {
    !from_upstream || matches!(status, 401 | 403 | 408 | 429) || status >= 500
}

/// What the client gets, made from the answers of the request's calls.
pub(crate) struct Answer {
    /// The provider's status of the last answer read (0: none came).
    pub upstream_status: u16,
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    /// The token usage, when the answer succeeded.
    pub usage: Option<Usage>,
    /// A stream's whole answer was read to its end.
    pub stream_ended: bool,
}

/// A call that brought no answer (a timeout, a connect failure).
fn no_answer() -> ApiError {
    ApiError::new(
        502,
        SERVER,
        "upstream_unavailable",
        "The provider could not be reached or did not answer in time",
    )
}

/// Starts the cooldown of the route's key after a refusal.
fn cool_key(
    h: &mut dyn Host,
    rt: &Runtime,
    provider: &Provider,
    key: usize,
    status: u16,
    now: u64,
) {
    if let Some(key) = provider.keys.get(key) {
        cooldown::start(h, &provider.name, &key.id, status, now, rt.cooldown_ms);
    }
}

/// A fan-out under way: one answer slot per call, in request order.
pub(crate) struct FanOut {
    tokens: Vec<u32>,
    answers: Vec<Option<(u16, Vec<u8>)>>,
}

impl FanOut {
    /// Sends every call to `cluster`; an error when the host refuses one.
    pub fn send(h: &mut dyn Host, cluster: &str, calls: &[Call]) -> Result<FanOut, ApiError> {
        let mut tokens = Vec::with_capacity(calls.len());
        for call in calls {
            let headers: Vec<(&str, &str)> =
                call.headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            match h.call(cluster, &headers, &call.body, FAN_OUT_TIMEOUT_MS) {
                Some(t) => tokens.push(t),
                None => {
                    h.log(
                        Level::Error,
                        &format!("tollgate: the host refused a call to cluster {cluster}"),
                    );
                    return Err(ApiError::new(
                        500,
                        SERVER,
                        "internal_error",
                        "The gateway could not call the provider",
                    ));
                }
            }
        }
        Ok(FanOut {
            answers: vec![None; tokens.len()],
            tokens,
        })
    }

    /// Keeps the answer to the call `token` (`status` 0: no answer, e.g. a
    /// timeout or a connect failure): true once every call has answered.
    pub fn answered(&mut self, token: u32, status: u16, body: Vec<u8>) -> bool {
        let Some(i) = self.tokens.iter().position(|t| *t == token) else {
            return false;
        };
        if let Some(slot) = self.answers.get_mut(i) {
            *slot = Some((status, body));
        }
        self.answers.iter().all(Option::is_some)
    }

    /// The client's answer once every call has answered: the merged
    /// answers, or the first failure in request order as an OpenAI error
    /// (a refused key cools).
    pub fn merge(
        self,
        h: &mut dyn Host,
        rt: &Runtime,
        provider: &Provider,
        route: &Route,
        now: u64,
    ) -> Answer {
        let tr = for_route(provider, route.endpoint, route.front);
        let ctx = route.response_ctx(false, now / 1000);
        let mut upstream_status = 0;
        let mut lists = Vec::with_capacity(self.answers.len());
        let mut outcome: Result<(), ApiError> = Ok(());
        for (status, body) in self.answers.into_iter().flatten() {
            upstream_status = status;
            if status == 0 {
                outcome = Err(no_answer());
                break;
            }
            if !(200..300).contains(&status) {
                let e = tr.error(status, &body);
                if status == 429
                    || status == 401
                    || e.code.as_deref() == Some("provider_auth_failed")
                {
                    cool_key(h, rt, provider, route.key, status, now);
                }
                outcome = Err(e);
                break;
            }
            match tr.response(&ctx, &body) {
                Ok(t) => lists.push(t.body.unwrap_or(body)),
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
        }
        let (status, body, usage) =
            match outcome.and_then(|()| merge_embeddings(&lists, &ctx.model)) {
                Ok((body, usage)) => (200, body, Some(usage)),
                Err(e) => (e.status, e.body(), None),
            };
        Answer {
            upstream_status,
            status,
            content_type: "application/json",
            body,
            usage,
            stream_ended: false,
        }
    }
}

/// What a fallback within the request needs: the client's request as it
/// came, and the providers that failed it.
pub(crate) struct Retained {
    pub endpoint: Endpoint,
    pub front: Front,
    pub allowed: Option<String>,
    pub declared_model: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub tried: Vec<usize>,
}

impl Retained {
    /// Sends the request, which the provider `failed` failed, to the next
    /// target of its alias that has not failed it (translated for that
    /// target, with one of its keys), as a call whose answer replaces the
    /// failed one ([`fallback_answer`]): the new route and the call's
    /// token. `None` when there is no such target, or the host refused the
    /// call.
    pub fn fall_back(
        &mut self,
        h: &mut dyn Host,
        rt: &Runtime,
        failed: usize,
    ) -> Option<(Route, u32)> {
        self.tried.push(failed);
        let planned = self.plan_next(h, rt)?;
        let provider = rt.provider(planned.route.provider)?;
        let token = self.call(h, provider, &planned)?;
        Some((planned.route, token))
    }

    /// The client's request planned again, every key of the providers that
    /// failed it counted as cooling. `None` when that plan lands on one of
    /// them again or is not a plain forward (a fan-out, a local answer).
    fn plan_next(&self, h: &mut dyn Host, rt: &Runtime) -> Option<Plan> {
        let now = h.now_ms();
        let random = h.random_u32();
        let names: Vec<String> = self.headers.iter().map(|(n, _)| n.clone()).collect();
        let facts = RequestFacts {
            endpoint: self.endpoint,
            front: self.front,
            body: &self.body,
            header_names: Some(&names),
            allowed: self.allowed.as_deref().unwrap_or(""),
            declared_model: self.declared_model.as_deref(),
            now_ms: now,
            random,
            tenant: self
                .headers
                .iter()
                .find(|(n, _)| n == TENANT)
                .map_or("", |(_, v)| v.as_str()),
            session_header: crate::session::header_in(&self.headers),
            cache_breakpoints: self
                .headers
                .iter()
                .any(|(n, v)| n == CACHE_BREAKPOINTS && v == "1"),
        };
        let failed: Vec<&str> = self
            .tried
            .iter()
            .filter_map(|&p| rt.provider(p))
            .flat_map(|p| p.keys.iter().map(|k| k.id.as_str()))
            .collect();
        let host: &dyn Host = &*h;
        let planned = plan(rt, &facts, &|id| {
            if failed.contains(&id) {
                u64::MAX / 4
            } else {
                cooldown::remaining_ms(host, id, now)
            }
        })
        .ok()?;
        let again = self.tried.contains(&planned.route.provider);
        (!again && planned.calls.is_empty() && planned.local.is_none()).then_some(planned)
    }

    /// Sends the planned request to `provider`'s cluster: the call's token.
    fn call(&self, h: &mut dyn Host, provider: &Provider, planned: &Plan) -> Option<u32> {
        let mut headers = self.headers.clone();
        apply_header_changes(&mut headers, &planned.headers);
        // Routing and retry headers are for the router; a call names its
        // cluster and is not retried.
        headers.retain(|(n, _)| {
            !n.eq_ignore_ascii_case(CLUSTER) && !n.eq_ignore_ascii_case(MAX_RETRIES)
        });
        let pairs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let body = planned.upstream_body(&self.body);
        let token = h.call(&provider.cluster, &pairs, &body, FALLBACK_TIMEOUT_MS);
        if token.is_none() {
            h.log(
                Level::Error,
                &format!(
                    "tollgate: the host refused a call to cluster {}",
                    provider.cluster
                ),
            );
        }
        token
    }
}

/// A fallback target's answer (`status` 0: none came) as the client gets
/// it: translated, or its failure as the API's error naming the provider
/// (a refused key cools). `anthropic`: the error in Anthropic's shape.
pub(crate) fn fallback_answer(
    h: &mut dyn Host,
    rt: &Runtime,
    provider: &Provider,
    route: &Route,
    (status, body): (u16, Vec<u8>),
    now: u64,
    anthropic: bool,
) -> Answer {
    let tr = for_route(provider, route.endpoint, route.front);
    let mut content_type = "application/json";
    let mut usage = None;
    let mut stream_ended = false;
    let answer = if status == 0 {
        Err(no_answer())
    } else if status >= 400 {
        let e = tr.error(status, &body);
        if matches!(status, 401 | 403 | 429) || e.code.as_deref() == Some("provider_auth_failed") {
            cool_key(h, rt, provider, route.key, status, now);
        }
        Err(e)
    } else if route.stream {
        // The whole stream at once: its events, translated.
        let mut t = tr.stream(&route.response_ctx(true, now / 1000));
        let mut out = Vec::with_capacity(body.len() + 64);
        t.feed(&body, &mut out);
        t.finish(&mut out);
        usage = t.usage();
        stream_ended = true;
        content_type = "text/event-stream";
        Ok(out)
    } else {
        tr.response(&route.response_ctx(false, now / 1000), &body)
            .map(|t| {
                usage = t.usage;
                t.body.unwrap_or(body)
            })
    };
    let (status_out, body) = match answer {
        Ok(out) => (200, out),
        Err(mut e) => {
            e.message = format!("provider {}: {}", provider.name, e.message);
            (e.status, e.body_for(anthropic))
        }
    };
    Answer {
        upstream_status: status,
        status: status_out,
        content_type,
        body,
        usage,
        stream_ended,
    }
}
