//! The per-request state machine. The cdylib forwards each proxy-wasm
//! callback here with a [`Host`]; all decisions live in this module and in
//! the pure planner ([`crate::plan`]).
//!
//! Request: pause on headers (routes we serve), buffer the body, gather the
//! facts, let the planner resolve the model, check the key's allow-list,
//! pick a provider key and translate; apply its header and body mutations,
//! clear the route cache, continue. Response: name the provider, translate
//! (buffered for plain bodies, incrementally for SSE), turn provider errors
//! into OpenAI errors, cool down keys the provider refused
//! ([`crate::cooldown`]), and after the stream report usage and stats.
//!
//! The calls a request makes itself, inside its own stream (a fan-out, a
//! fallback to the alias's next target), are [`crate::calls`]'s: the
//! phases call it where the plan asks for them and where an answer fails.
//! One more call comes before a request is forwarded when its own output
//! limit needs more tokens than its Check reserved: the top-up
//! ([`crate::usage::top_up`]); the request waits for it, paused.
//!
//! Every request that ext_authz admitted ends with a usage report, sent
//! when its answer ends (before Envoy passes the answer's last bytes on)
//! or else from [`Flow::on_log`], which Envoy calls on every end: the
//! usage of an answer, a refund of the reservation when the gateway
//! answered itself before any provider call, and the release of the
//! request's concurrency slot ([`crate::slots`]).
//!
//! Each [`Phase`] owns what is valid in it: the request's headers while its
//! body is awaited, the route and the response state once routed.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use percent_encoding::percent_decode_str;
use serde_json::json;
use tollgate_wire::header::{
    CACHE_BREAKPOINTS, KEY_ID, MODEL, MODELS, PROVIDER, PROVIDER_REQUEST_ID, RESERVED, SLOT, TENANT,
};
use tollgate_wire::{models_allowed, Reservation, Slot, RESERVE_PATH};

use crate::calls::{self, Answer, FanOut, Retained};
use crate::config::{Runtime, UsageTarget};
use crate::cooldown;
use crate::error::{clip, ApiError, ECHO_MAX_CHARS, SERVER};
use crate::host::{Host, Level, MetricKind};
use crate::metrics::{self, property, ErrorClass, Metrics, Series};
use crate::plan::{
    apply_header_changes, plan, provider_request_id_header, upstream_body, writes, Call, Plan,
    RequestFacts, Route,
};
use crate::session;
use crate::slots::SlotBook;
use crate::translate::{for_route, map_error_status, Endpoint, Front, StreamTranslator, Usage};
use crate::translate::{DROPPED_HEADER, LOWERED_HEADER};
use crate::usage::{self, report_body, Report, TopUpResult, UsageBatch};

/// The host's answer to a callback, also named `flow::Action` by the
/// crate's tests.
pub use crate::host::Action;
pub use crate::plan::metric_safe;

const PROVIDER_RATELIMIT_HEADERS: [&str; 6] = [
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
];
/// An over-limit body is read and discarded up to this many times the limit
/// before the 413 is sent regardless.
pub const DRAIN_FACTOR: u64 = 8;

/// A request body up to this size is written back whole, edited or not.
/// Envoy holds a buffered body in the 16 KiB slices it read it into, and an
/// edit of its start in a slice of its own; the router keeps that body for
/// retries until the answer ends. Written whole, a small body is held in
/// one slice of its own size (rounded up to 4 KiB): 12–16 KiB less per
/// request in flight (`bench/conn_memory.py`). Larger bodies fill their
/// slices, so they are edited in place and their tail is never copied.
pub const COMPACT_BODY_MAX: usize = 16 * 1024;

enum Phase {
    /// Not ours (or not started).
    Idle,
    /// A request we serve; its body is being buffered.
    AwaitBody(Box<Pending>),
    /// Body over the limit: discard it as it arrives, answer 413 at its end
    /// (an HTTP/1 client still uploading would otherwise see a reset).
    Draining { drained: u64 },
    /// Waiting for the answers of a fan-out's calls ([`crate::calls`]).
    FanOut { routed: Box<Routed>, calls: FanOut },
    /// Rewritten for its provider, paused until authz-service tops its
    /// reservation up (the call `token`).
    TopUp { routed: Box<Routed>, token: u32 },
    /// Sent to a provider.
    Routed(Box<Routed>),
    /// We answered locally.
    Replied,
}

/// What the request headers said, kept until the body is complete.
struct Pending {
    endpoint: Endpoint,
    front: Front,
    tenant: Option<String>,
    key_id: Option<String>,
    /// `x-tollgate-reserved`: what authz-service reserved for this request.
    reserved: Option<Reservation>,
    /// `x-tollgate-models`.
    allowed: Option<String>,
    /// `x-tollgate-model`, the client's declaration that authz-service used
    /// for per-model admission: must name the body's model.
    declared_model: Option<String>,
    /// The request's headers, read with the headers callback (`None`: the
    /// host refused; ask it for the names when planning).
    headers: Option<Vec<(String, String)>>,
    /// `x-tollgate-cache-breakpoints: 1` (authz-service, from the policy).
    cache_breakpoints: bool,
}

/// A request on its way to (or back from) a provider.
struct Routed {
    route: Route,
    tenant: Option<String>,
    key_id: Option<String>,
    /// What the request has reserved (a top-up included).
    reserved: Option<Reservation>,
    /// The output tokens it needs, for the report (authz-service learns
    /// the key's answer reservation from it); None for the gateway's own
    /// answers.
    output_need: Option<u64>,
    resp: RespMode,
    usage: Option<Usage>,
    first_token: bool,
    /// When the first token came (0 until then, and for non-streams).
    first_token_ms: u64,
    /// The request's metric ids (set once it is counted).
    series: Option<Rc<Series>>,
    /// The usage was set as filter state ([`expose_usage`]).
    usage_exposed: bool,
    /// 0 until the response headers arrive.
    upstream_status: u16,
    /// The response is Envoy's own local reply (left untouched).
    envoy_reply: bool,
    /// The filter answered itself: a fan-out's merged answers, a fallback
    /// target's answer, or the gateway's own (count_tokens).
    fanned_out: bool,
    /// A stream whose last upstream byte reached the filter (false when the
    /// client or the provider left first).
    stream_ended: bool,
    /// The client's request, kept when its model names fallback targets.
    retained: Option<Box<Retained>>,
    /// The call that sends the request to a fallback target, under way.
    fallback_call: Option<u32>,
}

impl Routed {
    /// A request sent on `route`, nothing of its answer seen yet.
    fn new(
        route: Route,
        tenant: Option<String>,
        key_id: Option<String>,
        reserved: Option<Reservation>,
    ) -> Routed {
        let output_need = reserved
            .and_then(|r| r.output)
            .map(|o| o.need(route.output_limit));
        Routed {
            route,
            tenant,
            key_id,
            reserved,
            output_need,
            resp: RespMode::None,
            usage: None,
            first_token: false,
            first_token_ms: 0,
            series: None,
            usage_exposed: false,
            upstream_status: 0,
            envoy_reply: false,
            fanned_out: false,
            stream_ended: false,
            retained: None,
            fallback_call: None,
        }
    }

    /// Records the provider's latency, from the request's sending to `now`.
    fn record_latency(&self, h: &mut dyn Host, now: u64) {
        if let Some(s) = &self.series {
            let ms = now.saturating_sub(self.route.sent_ms);
            metrics::record(h, MetricKind::Histogram, s.upstream_latency_ms, ms);
        }
    }

    /// Counts the router's retries of the request, from the attempt count
    /// it sets on the answer (the virtual host's
    /// include_attempt_count_in_response). `all`: the response headers,
    /// when the host gave them in one call.
    fn count_retries(&self, h: &mut dyn Host, all: Option<&[(String, String)]>) {
        let Some(s) = &self.series else {
            return;
        };
        let attempts: u64 = match all {
            Some(all) => find_header(all, "x-envoy-attempt-count"),
            None => h.response_header("x-envoy-attempt-count"),
        }
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
        if attempts > 1 {
            metrics::record(h, MetricKind::Counter, s.retries, attempts - 1);
        }
    }
}

enum RespMode {
    None,
    /// Buffer the body; translate (or only read usage) at the end.
    Buffer,
    /// Buffer the error body and rewrite it as an OpenAI error.
    Error(u16),
    Stream(Box<dyn StreamTranslator>),
}

/// Whose request this is, as ext_authz said: what it reserved and the
/// concurrency slot it holds.
struct Account {
    tenant: String,
    key_id: String,
    reserved: Option<Reservation>,
    slot: Option<Slot>,
}

pub struct Flow {
    rt: Arc<Runtime>,
    phase: Phase,
    logged: bool,
    /// The request's account, when ext_authz admitted it.
    account: Option<Account>,
    /// The worker's usage batch, when batching is on.
    batch: Option<Rc<RefCell<UsageBatch>>>,
    /// The worker's held concurrency slots, renewed on its tick.
    slots: Option<Rc<RefCell<SlotBook>>>,
    /// The worker's metric ids.
    metrics: Rc<RefCell<Metrics>>,
    /// The request came in on the Anthropic Messages routes: errors are
    /// written in Anthropic's shape.
    anthropic: bool,
}

impl Flow {
    pub fn new(rt: Arc<Runtime>) -> Flow {
        Flow {
            rt,
            phase: Phase::Idle,
            logged: false,
            account: None,
            batch: None,
            slots: None,
            metrics: Rc::default(),
            anthropic: false,
        }
    }

    /// Share a worker's metric ids (see [`crate::metrics`]).
    pub fn with_metrics(mut self, metrics: Rc<RefCell<Metrics>>) -> Flow {
        self.metrics = metrics;
        self
    }

    /// Add this request's usage to a worker's batch instead of posting it on
    /// its own; the owner of the batch posts it (see [`crate::usage`]).
    pub fn with_usage_batch(mut self, batch: Rc<RefCell<UsageBatch>>) -> Flow {
        self.batch = Some(batch);
        self
    }

    /// Put the request's concurrency slot in a worker's book, renewed
    /// while the request runs; without one the slot is only released.
    pub fn with_slot_book(mut self, slots: Rc<RefCell<SlotBook>>) -> Flow {
        self.slots = Some(slots);
        self
    }

    /// Answers the client with `e`, before any provider call. The report
    /// (the whole reservation refunded, the slot released) goes first, so
    /// that the client's next Check finds them.
    fn reply(&mut self, h: &mut dyn Host, e: &ApiError) -> Action {
        self.phase = Phase::Replied;
        self.settle(h);
        let retry_after = e.retry_after.map(|s| s.to_string());
        let mut headers = vec![("content-type", "application/json")];
        if let Some(s) = &retry_after {
            headers.push(("retry-after", s));
        }
        h.send_local_reply(e.status, &headers, &e.body_for(self.anthropic));
        h.metric(
            MetricKind::Counter,
            &format!("tollgate.rejected.{}", e.code.as_deref().unwrap_or("error")),
            1,
        );
        Action::Pause
    }

    pub fn on_request_headers(&mut self, h: &mut dyn Host, end_of_stream: bool) -> Action {
        // Every header in one host call (one call per name if the host
        // refuses); their names are kept for the plan's removals.
        let all = h.request_headers();
        let header = |name: &str| match &all {
            Some(all) => find_header(all, name),
            None => h.request_header(name),
        };
        let method = header(":method").unwrap_or_default();
        let full_path = header(":path").unwrap_or_default();
        let allowed = header(MODELS);
        let content_length = header("content-length");
        let reserved = header(RESERVED).and_then(|v| Reservation::parse(&v));
        let slot = header(SLOT).and_then(|v| Slot::parse(&v));
        let pending = Pending {
            endpoint: Endpoint::Chat,
            front: Front::OpenAi,
            tenant: header(TENANT),
            key_id: header(KEY_ID),
            reserved,
            allowed: None,
            declared_model: header(MODEL),
            cache_breakpoints: header(CACHE_BREAKPOINTS).as_deref() == Some("1"),
            headers: all,
        };
        if let (Some(tenant), Some(key_id)) = (&pending.tenant, &pending.key_id) {
            if let (Some(slot), Some(book)) = (&slot, &self.slots) {
                let now = h.now_ms();
                book.borrow_mut().hold(slot, tenant, key_id, now);
            }
            self.account = Some(Account {
                tenant: tenant.clone(),
                key_id: key_id.clone(),
                reserved,
                slot,
            });
        }
        let path = full_path.split('?').next().unwrap_or("");
        self.anthropic = tollgate_wire::is_messages_path(path);
        if self.anthropic {
            h.set_property(property::API, b"anthropic");
        }
        if path == "/v1/models" || path.starts_with("/v1/models/") {
            if method != "GET" {
                return self.reply(h, &ApiError::method_not_allowed(&method, path));
            }
            // Ids hold '/' and ':' (Bedrock), which clients may escape.
            let one = path
                .strip_prefix("/v1/models/")
                .map(|id| percent_decode_str(id).decode_utf8_lossy().into_owned());
            return self.models_reply(h, allowed.as_deref().unwrap_or(""), one.as_deref());
        }
        let front = Front::messages_path(path).unwrap_or_default();
        let endpoint = match front {
            Front::OpenAi => Endpoint::from_path(path),
            Front::Messages | Front::CountTokens => Some(Endpoint::Chat),
        };
        let Some(endpoint) = endpoint else {
            return self.reply(h, &ApiError::unknown_url(&method, path));
        };
        if method != "POST" {
            return self.reply(h, &ApiError::method_not_allowed(&method, path));
        }
        if let Some(cl) = content_length {
            if let Ok(n) = cl.trim().parse::<u64>() {
                if n > self.rt.max_body_bytes {
                    if end_of_stream {
                        return self.reply(h, &ApiError::too_large(self.rt.max_body_bytes));
                    }
                    self.phase = Phase::Draining { drained: 0 };
                    return Action::Pause;
                }
            }
        }
        if end_of_stream {
            return self.reply(
                h,
                &ApiError::new(
                    400,
                    crate::error::INVALID_REQUEST,
                    "invalid_json",
                    "Request body is required",
                ),
            );
        }
        self.phase = Phase::AwaitBody(Box::new(Pending {
            endpoint,
            front,
            allowed,
            ..pending
        }));
        Action::Pause
    }

    fn models_reply(&mut self, h: &mut dyn Host, allowed: &str, one: Option<&str>) -> Action {
        let mut data = Vec::new();
        for (id, owner) in self.rt.model_ids() {
            let canonical = self
                .rt
                .resolve(&id)
                .map(|r| r.canonical)
                .unwrap_or_default();
            if !models_allowed(allowed, &[&id, &canonical]) {
                continue;
            }
            if let Some(want) = one {
                if want != id {
                    continue;
                }
            }
            data.push(json!({"id": id, "object": "model", "created": 0, "owned_by": owner}));
        }
        let body = match one {
            Some(want) => match data.pop() {
                Some(m) => m,
                None => return self.reply(h, &ApiError::model_not_found(want)),
            },
            None => json!({"object": "list", "data": data}),
        };
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        self.phase = Phase::Replied;
        self.settle(h);
        h.send_local_reply(200, &[("content-type", "application/json")], &bytes);
        Action::Pause
    }

    pub fn on_request_body(
        &mut self,
        h: &mut dyn Host,
        body_size: usize,
        end_of_stream: bool,
    ) -> Action {
        match &self.phase {
            Phase::Draining { .. } => return self.drain(h, body_size, end_of_stream),
            Phase::AwaitBody(_) => {}
            Phase::Replied => return Action::Pause,
            Phase::FanOut { .. } | Phase::TopUp { .. } => return Action::Pause,
            Phase::Idle | Phase::Routed(_) => return Action::Continue,
        }
        if body_size as u64 > self.rt.max_body_bytes {
            self.phase = Phase::Draining { drained: 0 };
            return self.drain(h, body_size, end_of_stream);
        }
        if !end_of_stream {
            return Action::Pause;
        }
        let Phase::AwaitBody(pending) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return Action::Continue;
        };
        let body = h.request_body(body_size).unwrap_or_default();
        match self.route_request(h, &body, *pending) {
            Ok(phase @ (Phase::FanOut { .. } | Phase::TopUp { .. })) => {
                self.phase = phase;
                Action::Pause
            }
            Ok(phase) => {
                self.phase = phase;
                Action::Continue
            }
            Err(e) => self.reply(h, &e),
        }
    }

    /// Discard what was buffered; answer 413 at the end of the body, or at
    /// once past [`DRAIN_FACTOR`] × the limit.
    fn drain(&mut self, h: &mut dyn Host, body_size: usize, end_of_stream: bool) -> Action {
        let total = match &mut self.phase {
            Phase::Draining { drained } => {
                *drained = drained.saturating_add(body_size as u64);
                *drained
            }
            _ => body_size as u64,
        };
        if end_of_stream || total > self.rt.max_body_bytes.saturating_mul(DRAIN_FACTOR) {
            return self.reply(h, &ApiError::too_large(self.rt.max_body_bytes));
        }
        h.set_request_body(body_size, b"");
        Action::Pause
    }

    /// Gathers the facts, plans, and applies the plan's mutations (or makes
    /// its calls): the next phase.
    fn route_request(
        &mut self,
        h: &mut dyn Host,
        body: &[u8],
        pending: Pending,
    ) -> Result<Phase, ApiError> {
        let mut planned = self.plan_request(h, body, &pending)?;
        let routed_on =
            |route| Routed::new(route, pending.tenant, pending.key_id, pending.reserved);
        if !planned.calls.is_empty() {
            return self.fan_out(h, routed_on(planned.route), &planned.calls);
        }
        if let Some(answer) = planned.local.take() {
            return Ok(self.answer_locally(h, routed_on(planned.route), &answer));
        }
        // The client's request, kept for its alias's fallback targets.
        let retained = match &pending.headers {
            Some(headers) if planned.fallbacks => Some(Box::new(Retained {
                endpoint: pending.endpoint,
                front: pending.front,
                allowed: pending.allowed.clone(),
                declared_model: pending.declared_model.clone(),
                headers: headers.clone(),
                body: body.to_vec(),
                tried: Vec::new(),
            })),
            _ => None,
        };
        if !write_request(h, body, pending.headers, &mut planned) {
            h.log(Level::Error, "tollgate: the host refused a request rewrite");
            return Err(ApiError::new(
                500,
                SERVER,
                "internal_error",
                "The gateway could not rewrite the request",
            ));
        }
        if !h.clear_route_cache() {
            h.log(
                Level::Warn,
                "tollgate: clear_route_cache is not available; routing may use a stale route",
            );
        }
        let mut routed = routed_on(planned.route);
        routed.retained = retained;
        if let Some(token) = self.top_up(h, &routed, pending.declared_model.as_deref()) {
            return Ok(Phase::TopUp {
                routed: Box::new(routed),
                token,
            });
        }
        self.count_request(h, &mut routed);
        Ok(Phase::Routed(Box::new(routed)))
    }

    /// When the request's output limit needs more than its Check reserved,
    /// asks authz-service for the rest ([`usage::top_up`]): the call's
    /// token. Its answer comes to [`Flow::top_up_answer`].
    fn top_up(&self, h: &mut dyn Host, routed: &Routed, declared: Option<&str>) -> Option<u32> {
        let target = self.rt.usage.as_ref()?;
        let (tenant, key_id) = (routed.tenant.as_deref()?, routed.key_id.as_deref()?);
        let t = usage::top_up(
            tenant,
            key_id,
            declared,
            routed.reserved.as_ref()?,
            routed.route.output_limit,
        )?;
        let body = serde_json::to_vec(&t).unwrap_or_default();
        let headers = [
            (":method", "POST"),
            (":path", RESERVE_PATH),
            (":authority", target.cluster.as_str()),
            ("content-type", "application/json"),
        ];
        let token = h.call(&target.cluster, &headers, &body, target.timeout_ms);
        if token.is_none() {
            // Forwarded with the reservation it has: its report settles
            // the difference.
            h.log(
                Level::Warn,
                &format!(
                    "tollgate: could not call cluster {} to top a reservation up",
                    target.cluster
                ),
            );
        }
        token
    }

    /// authz-service's answer to the request's top-up: the request goes on
    /// with its reservation raised, or the client gets the refusal (a 429
    /// in its API's shape, or a 503 when no answer came).
    fn top_up_answer(&mut self, h: &mut dyn Host, status: u16, body: &[u8]) {
        let Phase::TopUp { mut routed, .. } = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            return;
        };
        match usage::read_top_up(status, body) {
            TopUpResult::Reserved(tokens) => {
                if let Some(r) = routed.reserved.as_mut() {
                    r.tokens = tokens;
                }
                self.count_request(h, &mut routed);
                self.phase = Phase::Routed(routed);
                if !h.resume_request() {
                    h.log(
                        Level::Error,
                        "tollgate: the host refused to resume a request",
                    );
                }
            }
            TopUpResult::Refused(e) => {
                self.reply(h, &e);
            }
        }
    }

    /// The request's facts gathered (its headers' names, the time, a random
    /// number for the key choice) and planned, keys that cool skipped.
    fn plan_request(
        &self,
        h: &mut dyn Host,
        body: &[u8],
        pending: &Pending,
    ) -> Result<Plan, ApiError> {
        let now = h.now_ms();
        let random = h.random_u32();
        let header_names = match &pending.headers {
            Some(all) => Some(all.iter().map(|(name, _)| name.clone()).collect()),
            None => h.request_header_names(),
        };
        let asked;
        let session_header = match &pending.headers {
            Some(all) => session::header_in(all),
            None => {
                asked = session::SESSION_HEADERS
                    .iter()
                    .find_map(|name| h.request_header(name));
                asked.as_deref()
            }
        };
        let facts = RequestFacts {
            endpoint: pending.endpoint,
            front: pending.front,
            body,
            header_names: header_names.as_deref(),
            allowed: pending.allowed.as_deref().unwrap_or(""),
            declared_model: pending.declared_model.as_deref(),
            now_ms: now,
            random,
            tenant: pending.tenant.as_deref().unwrap_or(""),
            session_header,
            cache_breakpoints: pending.cache_breakpoints,
        };
        let host: &dyn Host = &*h;
        plan(&self.rt, &facts, &|id| {
            cooldown::remaining_ms(host, id, now)
        })
    }

    /// Answers without a provider call (the plan's local answer): no tokens
    /// used, so the usage report (0) refunds the reservation.
    fn answer_locally(&self, h: &mut dyn Host, mut routed: Routed, body: &[u8]) -> Phase {
        self.count_request(h, &mut routed);
        routed.output_need = None;
        routed.usage = Some(Usage::default());
        routed.fanned_out = true;
        routed.upstream_status = 200;
        expose_usage(h, &mut routed);
        h.send_local_reply(200, &[("content-type", "application/json")], body);
        Phase::Routed(Box::new(routed))
    }

    /// Counts the request, and exposes its labels to the access log and
    /// the tracer.
    fn count_request(&self, h: &mut dyn Host, routed: &mut Routed) {
        let Some(p) = self.rt.provider(routed.route.provider) else {
            return;
        };
        let tenant = routed.tenant.as_deref();
        let key_id = routed.key_id.as_deref();
        let s = self.metrics.borrow_mut().series(
            h,
            tenant,
            key_id,
            routed.route.provider,
            &p.name,
            &routed.route.upstream_model,
        );
        metrics::record(h, MetricKind::Counter, s.requests, 1);
        if routed.route.fallback {
            metrics::record(h, MetricKind::Counter, s.fallbacks, 1);
        }
        routed.series = Some(s);
        h.set_property(property::TENANT, metrics::label(tenant).as_bytes());
        h.set_property(property::KEY_ID, metrics::label(key_id).as_bytes());
        h.set_property(property::PROVIDER, p.name.as_bytes());
        h.set_property(property::MODEL, routed.route.upstream_model.as_bytes());
        let operation = match routed.route.endpoint {
            Endpoint::Chat => "chat",
            Endpoint::Embeddings => "embeddings",
            Endpoint::Responses => "responses",
        };
        h.set_property(property::OPERATION, operation.as_bytes());
        if let Some(s) = routed.route.session {
            h.set_property(property::SESSION, format!("{s:016x}").as_bytes());
        }
    }

    /// Makes a fan-out's calls ([`FanOut::send`]); their answers come to
    /// [`Flow::on_call_response`].
    fn fan_out(
        &mut self,
        h: &mut dyn Host,
        mut routed: Routed,
        calls: &[Call],
    ) -> Result<Phase, ApiError> {
        let cluster = self
            .rt
            .provider(routed.route.provider)
            .map(|p| p.cluster.clone())
            .unwrap_or_default();
        let calls = FanOut::send(h, &cluster, calls)?;
        self.count_request(h, &mut routed);
        Ok(Phase::FanOut {
            routed: Box::new(routed),
            calls,
        })
    }

    /// The answer to one of the request's own calls (`status` 0: no
    /// answer, e.g. a timeout or a connect failure): a fallback target's,
    /// or one of a fan-out's. Once every call of a fan-out has answered,
    /// the client gets the merged answers, or the first failure in request
    /// order as an OpenAI error.
    pub fn on_call_response(&mut self, h: &mut dyn Host, token: u32, status: u16, body: Vec<u8>) {
        if self.logged {
            // The stream has ended: nothing left to answer.
            return;
        }
        if let Phase::TopUp { token: t, .. } = &self.phase {
            if *t == token {
                self.top_up_answer(h, status, &body);
            }
            return;
        }
        if let Phase::Routed(r) = &self.phase {
            if r.fallback_call == Some(token) {
                self.fallback_answer(h, status, body);
            }
            return;
        }
        let Phase::FanOut { calls, .. } = &mut self.phase else {
            return;
        };
        if calls.answered(token, status, body) {
            self.fan_out_answer(h);
        }
    }

    /// Every call of the fan-out has answered: the client gets their
    /// answers merged ([`FanOut::merge`]).
    fn fan_out_answer(&mut self, h: &mut dyn Host) {
        let Phase::FanOut { routed, calls } = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            return;
        };
        let rt = Arc::clone(&self.rt);
        let Some(provider) = rt.provider(routed.route.provider) else {
            return;
        };
        let now = h.now_ms();
        routed.record_latency(h, now);
        let answer = calls.merge(h, &rt, provider, &routed.route, now);
        self.phase = Phase::Routed(routed);
        self.answer(h, answer);
    }

    /// An answer that failed a request with fallback targets: cools what
    /// failed and sends the request to the next target
    /// ([`Flow::fall_back`]). False when there is none: the request has no
    /// further fallback then.
    fn fall_back_after_failure(
        &mut self,
        h: &mut dyn Host,
        status: u16,
        from_upstream: bool,
        now: u64,
    ) -> bool {
        let Phase::Routed(r) = &self.phase else {
            return false;
        };
        let (failed, key) = (r.route.provider, r.route.key);
        let rt = Arc::clone(&self.rt);
        if !from_upstream && matches!(status, 502 | 503) && rt.failure_cooldown_ms > 0 {
            // Envoy's own reply after its retries (connect failure, no
            // healthy host; local_reply_config makes it a 502): the
            // provider is down, not one key. Every key cools, so the
            // next requests go to the fallback at once.
            if let Some(p) = rt.provider(failed) {
                for k in &p.keys {
                    cooldown::start(h, &p.name, &k.id, status, now, rt.failure_cooldown_ms);
                }
            }
        }
        if self.fall_back(h) {
            if from_upstream && matches!(status, 401 | 403 | 429) {
                cool_final_key(h, &rt, failed, key, status, now);
            }
            return true;
        }
        if let Phase::Routed(r) = &mut self.phase {
            r.retained = None;
        }
        false
    }

    /// Sends the request to the next target of its alias that has not
    /// failed it ([`Retained::fall_back`]), as a call whose answer replaces
    /// the failed one ([`Flow::fallback_answer`]). False when there is none.
    fn fall_back(&mut self, h: &mut dyn Host) -> bool {
        let Phase::Routed(r) = &mut self.phase else {
            return false;
        };
        let failed = r.route.provider;
        let Some(keep) = r.retained.as_mut() else {
            return false;
        };
        let Some((route, token)) = keep.fall_back(h, &self.rt, failed) else {
            return false;
        };
        r.route = route;
        r.fallback_call = Some(token);
        r.series = None;
        r.usage = None;
        r.resp = RespMode::None;
        let mut routed = std::mem::replace(&mut self.phase, Phase::Idle);
        if let Phase::Routed(r) = &mut routed {
            self.count_request(h, r);
        }
        self.phase = routed;
        true
    }

    /// A fallback target's answer: the client gets it
    /// ([`calls::fallback_answer`]), or, when it failed too, the next
    /// target's ([`Flow::fall_back`]).
    fn fallback_answer(&mut self, h: &mut dyn Host, status: u16, body: Vec<u8>) {
        if let Phase::Routed(r) = &mut self.phase {
            r.fallback_call = None;
            r.upstream_status = status;
        }
        if calls::fallback_worthy(status, status != 0) && self.fall_back(h) {
            return;
        }
        let rt = Arc::clone(&self.rt);
        let Phase::Routed(r) = &mut self.phase else {
            return;
        };
        let Some(provider) = rt.provider(r.route.provider) else {
            return;
        };
        let now = h.now_ms();
        r.record_latency(h, now);
        let answer = calls::fallback_answer(
            h,
            &rt,
            provider,
            &r.route,
            (status, body),
            now,
            self.anthropic,
        );
        self.answer(h, answer);
    }

    /// Sends the client the answer made from the request's own calls.
    fn answer(&mut self, h: &mut dyn Host, answer: Answer) {
        let Phase::Routed(r) = &mut self.phase else {
            return;
        };
        let Some(provider) = self.rt.provider(r.route.provider) else {
            return;
        };
        r.upstream_status = answer.upstream_status;
        r.usage = answer.usage;
        r.stream_ended |= answer.stream_ended;
        r.fanned_out = true;
        expose_usage(h, r);
        let mut headers = vec![
            ("content-type", answer.content_type),
            (PROVIDER, provider.name.as_str()),
        ];
        if !r.route.dropped.is_empty() {
            headers.push((DROPPED_HEADER, r.route.dropped.as_str()));
        }
        if !r.route.lowered.is_empty() {
            headers.push((LOWERED_HEADER, r.route.lowered.as_str()));
        }
        h.send_local_reply(answer.status, &headers, &answer.body);
    }

    /// Error and translated bodies hold the response headers until the body
    /// is complete (status, content-type and content-length are final then);
    /// streams and passthrough bodies go on at once.
    pub fn on_response_headers(&mut self, h: &mut dyn Host, end_of_stream: bool) -> Action {
        let Phase::Routed(r) = &mut self.phase else {
            return Action::Continue;
        };
        if r.fanned_out {
            return Action::Continue;
        }
        let rt = &self.rt;
        let Some(provider) = rt.provider(r.route.provider) else {
            return Action::Continue;
        };
        // Every header in one host call (one call per name if the host
        // refuses).
        let all = h.response_headers();
        let header = |name: &str| match &all {
            Some(all) => find_header(all, name),
            None => h.response_header(name),
        };
        let status: u16 = header(":status").and_then(|s| s.parse().ok()).unwrap_or(0);
        let provider_request_id = provider_request_id_header(provider.kind()).and_then(header);
        let ctype = header("content-type").unwrap_or_default();
        let now = h.now_ms();
        // Envoy's own replies to a routed request (no healthy host,
        // overflow, timeout, reset) are all errors: a 2xx came from the
        // provider, and only other statuses pay for the property read (a
        // host call returning data enters the VM twice).
        let from_upstream = (200..300).contains(&status) || h.response_from_upstream();
        if r.retained.is_some() && calls::fallback_worthy(status, from_upstream) {
            if self.fall_back_after_failure(h, status, from_upstream, now) {
                return Action::Pause;
            }
            // No target left: this answer is the client's.
            return self.on_response_headers(h, end_of_stream);
        }
        if !from_upstream {
            // Envoy's own reply (connect failure, timeout, overflow…): its
            // body is already OpenAI-shaped by local_reply_config.
            r.envoy_reply = true;
            r.resp = RespMode::None;
            return Action::Continue;
        }
        r.upstream_status = status;
        name_provider(h, &provider.name, provider_request_id, all.as_deref());
        r.record_latency(h, now);
        r.count_retries(h, all.as_deref());
        if matches!(status, 401 | 403 | 429) {
            // The per-attempt filter cooled this key already when it runs
            // (crate::attempt); cooling the same key again is harmless, and
            // needed without it. Server-side failures are counted there only.
            cool_final_key(h, rt, r.route.provider, r.route.key, status, now);
        }
        if !r.route.dropped.is_empty() {
            h.set_response_header(DROPPED_HEADER, Some(&r.route.dropped));
        }
        if !r.route.lowered.is_empty() {
            h.set_response_header(LOWERED_HEADER, Some(&r.route.lowered));
        }
        let tr = for_route(provider, r.route.endpoint, r.route.front);
        if status >= 400 {
            let (mapped, _, _) = map_error_status(status);
            h.set_response_header(":status", Some(&mapped.to_string()));
            h.set_response_header("content-type", Some("application/json"));
            r.resp = RespMode::Error(status);
        } else if r.route.stream && tr.is_stream(&ctype) {
            r.resp = RespMode::Stream(tr.stream(&r.route.response_ctx(true, now / 1000)));
            h.set_response_header("content-length", None);
            if !tr.passthrough() {
                h.set_response_header("content-type", Some("text/event-stream"));
            }
            return Action::Continue;
        } else {
            // Held until the body is complete, passthrough too: an answer the
            // provider cuts short then fails as Envoy's OpenAI-shaped 502
            // (`upstream_unavailable`) instead of a 200 with a short body.
            if !tr.passthrough() {
                h.set_response_header("content-type", Some("application/json"));
            }
            r.resp = RespMode::Buffer;
        }
        if end_of_stream {
            // No body will follow: nothing to rewrite.
            h.set_response_header("content-length", None);
            Action::Continue
        } else {
            Action::Pause
        }
    }

    pub fn on_response_body(
        &mut self,
        h: &mut dyn Host,
        body_size: usize,
        end_of_stream: bool,
    ) -> Action {
        let action = self.response_body(h, body_size, end_of_stream);
        if end_of_stream && action == Action::Continue {
            // Before Envoy finishes the span (its tags are read then).
            let answered = match &mut self.phase {
                Phase::Routed(r) => {
                    expose_usage(h, r);
                    r.fallback_call.is_none()
                }
                _ => false,
            };
            if answered {
                self.settle(h);
            }
        }
        action
    }

    fn response_body(&mut self, h: &mut dyn Host, body_size: usize, end_of_stream: bool) -> Action {
        let Phase::Routed(r) = &mut self.phase else {
            return Action::Continue;
        };
        if r.fallback_call.is_some() {
            // A failed answer held while a fallback target answers instead.
            return Action::Pause;
        }
        let rt = &self.rt;
        let Some(provider) = rt.provider(r.route.provider) else {
            return Action::Continue;
        };
        let tr = for_route(provider, r.route.endpoint, r.route.front);
        let anthropic = r.route.front.anthropic();
        match &mut r.resp {
            RespMode::None => Action::Continue,
            RespMode::Stream(t) => {
                let chunk = h.response_body(body_size).unwrap_or_default();
                let mut out = Vec::with_capacity(chunk.len() + 64);
                t.feed(&chunk, &mut out);
                if end_of_stream {
                    t.finish(&mut out);
                    r.stream_ended = true;
                }
                r.usage = t.usage();
                if !r.first_token && t.first_token_seen() {
                    r.first_token = true;
                    r.first_token_ms = h.now_ms();
                    if let Some(s) = &r.series {
                        let ttft = r.first_token_ms.saturating_sub(r.route.sent_ms);
                        metrics::record(h, MetricKind::Histogram, s.ttft_ms, ttft);
                    }
                }
                if out != chunk {
                    h.set_response_body(body_size, &out);
                }
                Action::Continue
            }
            RespMode::Buffer => {
                if !end_of_stream {
                    return Action::Pause;
                }
                let body = h.response_body(body_size).unwrap_or_default();
                let created = h.now_ms() / 1000;
                let out = match tr.response(&r.route.response_ctx(false, created), &body) {
                    Ok(t) => {
                        r.usage = t.usage;
                        t.body
                    }
                    Err(e) => {
                        h.set_response_header(":status", Some(&e.status.to_string()));
                        Some(e.body_for(anthropic))
                    }
                };
                if let Some(b) = out {
                    h.set_response_header("content-length", Some(&b.len().to_string()));
                    h.set_response_body(body_size, &b);
                }
                Action::Continue
            }
            RespMode::Error(status) => {
                if !end_of_stream {
                    return Action::Pause;
                }
                let status = *status;
                let body = h.response_body(body_size).unwrap_or_default();
                let e = tr.error(status, &body);
                // The body can say more than the status (Gemini answers a bad
                // key with 400 API_KEY_INVALID): the translated error decides.
                h.set_response_header(":status", Some(&e.status.to_string()));
                if e.code.as_deref() == Some("provider_auth_failed") && !matches!(status, 401 | 403)
                {
                    // 401/403 already cooled the key on the headers; other
                    // credential refusals (Gemini 400) do here.
                    let now = h.now_ms();
                    cool_final_key(h, rt, r.route.provider, r.route.key, 401, now);
                }
                // The client learns who failed and why, never with which key.
                let mut e = e;
                e.message = format!("provider {}: {}", provider.name, e.message);
                let b = e.body_for(anthropic);
                h.set_response_header("content-length", Some(&b.len().to_string()));
                h.set_response_body(body_size, &b);
                Action::Continue
            }
        }
    }

    /// Stream end (success or not, on every end): stats and the usage
    /// report, unless the answer's end sent it already. Idempotent.
    ///
    /// The report carries the answer's usage; for a request the gateway
    /// answered itself before any provider call (an error, a refused
    /// top-up, a client that left first) a refund of its reservation; and
    /// the release of its concurrency slot. A report whose Check asked for
    /// it goes at once, whole; others join the batch, their slot's release
    /// sent at once alone.
    pub fn on_log(&mut self, h: &mut dyn Host) {
        if self.logged {
            return;
        }
        self.logged = true;
        if let Phase::Routed(r) = &mut self.phase {
            routed_stats(h, r);
        }
        self.settle(h);
    }

    /// The request's usage report (see [`Flow::on_log`]), once: at the end
    /// of its answer, before Envoy passes the last bytes on to the client,
    /// or just before the gateway's own reply, so that a sequential
    /// client's next Check finds the refund and the released slot; else
    /// (the client left, the stream was cut) when the stream is logged.
    /// Nothing when ext_authz did not admit the request here (no account
    /// headers).
    fn settle(&mut self, h: &mut dyn Host) {
        let Some(account) = self.account.take() else {
            return;
        };
        let slot = account.slot.as_ref().map(|s| s.id.clone());
        if let (Some(id), Some(book)) = (&slot, &self.slots) {
            book.borrow_mut().release(id);
        }
        let mut report = match &mut self.phase {
            Phase::Routed(r) => r.usage.map(|u| answer_report(&account, r, u)),
            // The calls may have run: the reservation stays.
            Phase::FanOut { .. } | Phase::Idle => None,
            // Never forwarded: nothing was used.
            Phase::AwaitBody(_) | Phase::Draining { .. } | Phase::Replied | Phase::TopUp { .. } => {
                account.reserved.filter(|r| r.tokens > 0).map(|r| Report {
                    tenant: account.tenant.clone(),
                    key_id: account.key_id.clone(),
                    reserved: Some(r.tokens),
                    reserved_at: r.at_minute,
                    ..Report::default()
                })
            }
        };
        let usage_to_settle = report.is_some();
        if report.is_none() && slot.is_some() {
            // Nothing to settle (the reservation stays), a slot to release.
            report = Some(Report {
                tenant: account.tenant.clone(),
                key_id: account.key_id.clone(),
                ..Report::default()
            });
        }
        let (Some(mut report), Some(target)) = (report, self.rt.usage.as_ref()) else {
            return;
        };
        let body = match &self.batch {
            Some(b) if usage_to_settle && !usage::at_once(account.reserved.as_ref()) => {
                if let Some(id) = slot {
                    // The slot goes back at once, alone (one store call);
                    // the usage joins the batch, as any other key's.
                    let release = Report {
                        tenant: report.tenant.clone(),
                        key_id: report.key_id.clone(),
                        slot: Some(id),
                        ..Report::default()
                    };
                    post_report(h, target, &report_body(&release));
                }
                let mut b = b.borrow_mut();
                if !b.add(report) {
                    return;
                }
                // Full: send now rather than wait for the tick.
                match b.take_body() {
                    Some(body) => body,
                    None => return,
                }
            }
            _ => {
                report.slot = slot;
                report_body(&report)
            }
        };
        post_report(h, target, &body);
    }
}

/// Posts a usage report (or a batch) to authz-service; a failure is logged
/// (the slot then expires by its ttl, the reservation stays charged).
fn post_report(h: &mut dyn Host, target: &UsageTarget, body: &[u8]) {
    if !h.post(&target.cluster, &target.path, body, target.timeout_ms) {
        h.log(
            Level::Warn,
            &format!(
                "tollgate: could not send the usage report to cluster {}",
                target.cluster
            ),
        );
    }
}

/// An answered request's stats at its end: its error class, its tokens,
/// the generation speed; its usage exposed to the access log.
fn routed_stats(h: &mut dyn Host, r: &mut Routed) {
    if let RespMode::Stream(t) = &r.resp {
        r.usage = t.usage();
    }
    let class = ErrorClass::of(r.upstream_status, r.envoy_reply);
    if let (Some(c), Some(s)) = (class, &r.series) {
        metrics::record(h, MetricKind::Counter, s.error(c), 1);
    }
    let Some(u) = r.usage else { return };
    if let Some(s) = &r.series {
        use MetricKind::{Counter, Histogram};
        metrics::record(h, Counter, s.prompt_tokens, u.prompt_tokens);
        metrics::record(h, Counter, s.completion_tokens, u.completion_tokens);
        metrics::record(h, Counter, s.cached_tokens, u.cached_tokens);
        if u.completion_tokens > 0 && class.is_none() {
            // Generation speed: from the first token for streams, from
            // the request for whole answers.
            let from = if r.first_token_ms > 0 {
                r.first_token_ms
            } else {
                r.route.sent_ms
            };
            let ms = h.now_ms().saturating_sub(from);
            let tps = metrics::tokens_per_second(u.completion_tokens, ms);
            metrics::record(h, Histogram, s.tokens_per_second, tps);
        }
    }
    // A stream the client left: the usage seen so far.
    expose_usage(h, r);
}

/// The usage report of an answer.
fn answer_report(account: &Account, r: &Routed, u: Usage) -> Report {
    Report {
        tenant: account.tenant.clone(),
        key_id: account.key_id.clone(),
        model: Some(r.route.canonical.clone()),
        prompt_tokens: u.prompt_tokens,
        completion_tokens: u.completion_tokens,
        cached_tokens: u.cached_tokens,
        cache_write_tokens: u.cache_write_tokens,
        web_searches: u.web_searches,
        // A stream cut before its end reports only what the filter saw
        // (the provider's final usage never came): it is not settled, so
        // the reservation stays charged and the usage seen is added.
        reserved: match r.resp {
            RespMode::Stream(_) if !r.stream_ended => None,
            _ => r.reserved.map(|r| r.tokens),
        },
        // Charged to the budgets' windows of the reservation's minute.
        reserved_at: r.reserved.and_then(|r| r.at_minute),
        output_limit: r.output_need,
        slot: None,
    }
}

/// Writes the plan's header and body changes over the client's request:
/// false when the host refused one. `headers`: the request's headers as
/// read with the headers callback (`None`: the host refused them).
fn write_request(
    h: &mut dyn Host,
    body: &[u8],
    headers: Option<Vec<(String, String)>>,
    planned: &mut Plan,
) -> bool {
    // The whole header map in one call where the host can (the plan's
    // removals and sets applied to the headers read), else one call a
    // change.
    let mut ok = match headers {
        Some(mut all) => {
            apply_header_changes(&mut all, &planned.headers);
            let pairs: Vec<(&str, &str)> =
                all.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
            h.set_request_headers(&pairs)
        }
        None => false,
    };
    if !ok {
        ok = true;
        for (name, value) in &planned.headers {
            ok &= h.set_request_header(name.as_ref(), value.as_deref());
        }
    }
    let edited = planned.body_replaces > 0 || !planned.body.is_empty();
    if !body.is_empty() && body.len() <= COMPACT_BODY_MAX {
        let whole = upstream_body(
            std::mem::take(&mut planned.body),
            planned.body_replaces,
            &planned.inserts,
            body,
        );
        // Unedited, the write only saves memory: a refusal is no error.
        let written = h.set_request_body(body.len(), &whole);
        ok &= written || !edited;
    } else if edited && planned.body_replaces >= body.len() {
        // Replaced whole: written in slices (crate::plan::writes).
        let mut writes = writes(&planned.body, &planned.inserts, body).into_iter();
        let first = writes.next().unwrap_or_default();
        ok &= h.set_request_body(planned.body_replaces, &first);
        for more in writes {
            ok = ok && h.append_request_body(&more);
        }
    } else if edited {
        // An edit at the start; only whole replacements have inserts.
        ok &= h.set_request_body(planned.body_replaces, &planned.body);
    }
    ok
}

/// Names the provider and its request id to the client, and removes the
/// provider's rate-limit headers. `all`: the response headers, when the
/// host gave them in one call.
fn name_provider(
    h: &mut dyn Host,
    provider: &str,
    request_id: Option<String>,
    all: Option<&[(String, String)]>,
) {
    h.set_response_header(PROVIDER, Some(provider));
    if let Some(id) = request_id {
        h.set_response_header(PROVIDER_REQUEST_ID, Some(&clip(&id, ECHO_MAX_CHARS)));
    }
    // The provider's rate-limit headers describe the gateway's provider
    // key, not the client's virtual key (authz-service sets those):
    // removed where present (each removal is a host call).
    for name in PROVIDER_RATELIMIT_HEADERS {
        if all.is_none_or(|all| find_header(all, name).is_some()) {
            h.set_response_header(name, None);
        }
    }
}

/// A header's value from a host's list (names are lower case there).
fn find_header(all: &[(String, String)], name: &str) -> Option<String> {
    all.iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
}

/// Cools the key of the request's last attempt (named by the credentials
/// the request carries, else the planned key) for `status`, for the
/// provider's `retry-after` when the response has one.
fn cool_final_key(
    h: &mut dyn Host,
    rt: &Runtime,
    provider: usize,
    planned_key: usize,
    status: u16,
    now: u64,
) {
    let (p, k) = crate::attempt::key_in_request(rt, h).unwrap_or((provider, planned_key));
    let Some((provider, key)) = rt.provider(p).and_then(|p| Some((p, p.keys.get(k)?))) else {
        return;
    };
    let hint = {
        let host: &dyn Host = &*h;
        cooldown::hint_ms(&|name| host.response_header(name))
    };
    cooldown::after_failure(h, rt, &provider.name, &key.id, status, hint, now);
}

/// Sets the request's token usage as filter state, once it is known, for
/// the access log and the tracer.
fn expose_usage(h: &mut dyn Host, r: &mut Routed) {
    if r.usage_exposed {
        return;
    }
    if let RespMode::Stream(t) = &r.resp {
        r.usage = t.usage();
    }
    let Some(u) = r.usage else { return };
    r.usage_exposed = true;
    for (name, n) in [
        (property::INPUT_TOKENS, u.prompt_tokens),
        (property::OUTPUT_TOKENS, u.completion_tokens),
        (property::CACHED_TOKENS, u.cached_tokens),
    ] {
        h.set_property(name, n.to_string().as_bytes());
    }
}
