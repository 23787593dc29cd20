//! The per-request state machine. The cdylib forwards each proxy-wasm
//! callback here with a [`Host`]; all decisions live in this module.
//!
//! Request: pause on headers (routes we serve), buffer the body, parse,
//! resolve the model, check the key's allow-list, pick a provider key,
//! translate, rewrite headers/body, clear the route cache, continue.
//! Response: name the provider, translate (buffered for plain bodies,
//! incrementally for SSE), turn provider errors into OpenAI errors, cool
//! down keys that got 429/401, and after the stream report usage and stats.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use serde_json::json;

use crate::config::{model_allowed, Provider, Runtime};
use crate::error::{ApiError, SERVER};
use crate::host::{Host, Level, MetricKind};
use crate::translate::{
    for_kind, parse_client_body, Endpoint, RequestCtx, ResponseCtx, StreamTranslator, Usage,
};
use crate::usage::{Report, UsageBatch};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Continue,
    Pause,
}

pub const HDR_TENANT: &str = "x-tollgate-tenant";
pub const HDR_KEY_ID: &str = "x-tollgate-key-id";
pub const HDR_MODELS: &str = "x-tollgate-models";
/// Tokens authz-service reserved at Check time; echoed in the usage report.
pub const HDR_RESERVED: &str = "x-tollgate-reserved";
pub const HDR_CLUSTER: &str = "x-tollgate-cluster";
pub const HDR_MODEL: &str = "x-tollgate-model";
pub const HDR_PROVIDER: &str = "x-tollgate-provider";
const COOLDOWN_PREFIX: &str = "tollgate.cooldown.";
/// Largest passthrough body copied to read its usage.
const MAX_COPY: usize = 16 * 1024 * 1024;
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Not ours (or not started).
    Idle,
    AwaitBody,
    /// Body over the limit: discard it as it arrives, answer 413 at its end
    /// (an HTTP/1 client still uploading would otherwise see a reset).
    Draining,
    Routed,
    /// We answered locally.
    Replied,
}

struct Route {
    provider: usize,
    canonical: String,
    key: usize,
    stream: bool,
    include_usage: bool,
    json_mode: bool,
    prompt_estimate: u64,
    embed_base64: bool,
    upstream_model: String,
    endpoint: Endpoint,
    sent_ms: u64,
}

enum RespMode {
    None,
    /// Pass the body through chunk by chunk, keeping a copy to read usage
    /// at the end (`None` once over [`MAX_COPY`]).
    Copy(Option<Vec<u8>>),
    /// Buffer the body; translate (or only read usage) at the end.
    Buffer,
    /// Buffer the error body and rewrite it as an OpenAI error.
    Error(u16),
    Stream(Box<dyn StreamTranslator>),
}

pub struct Flow {
    rt: Arc<Runtime>,
    phase: Phase,
    endpoint: Option<Endpoint>,
    tenant: Option<String>,
    key_id: Option<String>,
    reserved: Option<u64>,
    allowed: Option<String>,
    /// `x-tollgate-model`, the client's declaration that authz-service used
    /// for per-model admission: must name the body's model.
    declared_model: Option<String>,
    route: Option<Route>,
    resp: RespMode,
    usage: Option<Usage>,
    first_token: bool,
    upstream_status: u16,
    stream_finished: bool,
    logged: bool,
    drained: u64,
    /// The response is Envoy's own local reply (left untouched).
    envoy_reply: bool,
    /// The worker's usage batch, when batching is on.
    batch: Option<Rc<RefCell<UsageBatch>>>,
}

/// Metric-safe fragment: model names may contain '.', '/', ':'.
pub fn metric_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

impl Flow {
    pub fn new(rt: Arc<Runtime>) -> Flow {
        Flow {
            rt,
            phase: Phase::Idle,
            endpoint: None,
            tenant: None,
            key_id: None,
            reserved: None,
            allowed: None,
            declared_model: None,
            route: None,
            resp: RespMode::None,
            usage: None,
            first_token: false,
            upstream_status: 0,
            stream_finished: false,
            logged: false,
            drained: 0,
            envoy_reply: false,
            batch: None,
        }
    }

    /// Add this request's usage to a worker's batch instead of posting it on
    /// its own; the owner of the batch posts it (see [`crate::usage`]).
    pub fn with_usage_batch(mut self, batch: Rc<RefCell<UsageBatch>>) -> Flow {
        self.batch = Some(batch);
        self
    }

    fn reply(&mut self, h: &mut dyn Host, e: &ApiError) -> Action {
        h.send_local_reply(e.status, &[("content-type", "application/json")], &e.body());
        h.metric(
            MetricKind::Counter,
            &format!("tollgate.rejected.{}", e.code.as_deref().unwrap_or("error")),
            1,
        );
        self.phase = Phase::Replied;
        Action::Pause
    }

    pub fn on_request_headers(&mut self, h: &mut dyn Host, end_of_stream: bool) -> Action {
        let method = h.request_header(":method").unwrap_or_default();
        let full_path = h.request_header(":path").unwrap_or_default();
        let path = full_path.split('?').next().unwrap_or("");
        self.allowed = h.request_header(HDR_MODELS);
        if path == "/v1/models" || path.starts_with("/v1/models/") {
            if method != "GET" {
                return self.reply(h, &ApiError::method_not_allowed(&method, path));
            }
            let one = path
                .strip_prefix("/v1/models/")
                .map(|id| id.replace("%2F", "/").replace("%2f", "/"));
            return self.models_reply(h, one.as_deref());
        }
        let Some(ep) = Endpoint::from_path(path) else {
            return self.reply(h, &ApiError::unknown_url(&method, path));
        };
        if method != "POST" {
            return self.reply(h, &ApiError::method_not_allowed(&method, path));
        }
        if let Some(cl) = h.request_header("content-length") {
            if let Ok(n) = cl.trim().parse::<u64>() {
                if n > self.rt.max_body_bytes {
                    if end_of_stream {
                        return self.reply(h, &ApiError::too_large(self.rt.max_body_bytes));
                    }
                    self.phase = Phase::Draining;
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
        self.endpoint = Some(ep);
        self.tenant = h.request_header(HDR_TENANT);
        self.key_id = h.request_header(HDR_KEY_ID);
        self.reserved = h.request_header(HDR_RESERVED).and_then(|v| v.parse().ok());
        self.declared_model = h.request_header(HDR_MODEL);
        self.phase = Phase::AwaitBody;
        Action::Pause
    }

    fn models_reply(&mut self, h: &mut dyn Host, one: Option<&str>) -> Action {
        let allowed = self.allowed.clone().unwrap_or_default();
        let mut data = Vec::new();
        for (id, owner) in self.rt.model_ids() {
            let canonical = self
                .rt
                .resolve(&id)
                .map(|r| r.canonical)
                .unwrap_or_default();
            if !model_allowed(&allowed, &[&id, &canonical]) {
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
        h.send_local_reply(200, &[("content-type", "application/json")], &bytes);
        self.phase = Phase::Replied;
        Action::Pause
    }

    pub fn on_request_body(
        &mut self,
        h: &mut dyn Host,
        body_size: usize,
        end_of_stream: bool,
    ) -> Action {
        if self.phase == Phase::Draining {
            return self.drain(h, body_size, end_of_stream);
        }
        if self.phase != Phase::AwaitBody {
            return if self.phase == Phase::Replied {
                Action::Pause
            } else {
                Action::Continue
            };
        }
        if body_size as u64 > self.rt.max_body_bytes {
            self.phase = Phase::Draining;
            return self.drain(h, body_size, end_of_stream);
        }
        if !end_of_stream {
            return Action::Pause;
        }
        let body = h.request_body(body_size).unwrap_or_default();
        match self.route_request(h, &body) {
            Ok(()) => Action::Continue,
            Err(e) => self.reply(h, &e),
        }
    }

    /// Discard what was buffered; answer 413 at the end of the body, or at
    /// once past [`DRAIN_FACTOR`] × the limit.
    fn drain(&mut self, h: &mut dyn Host, body_size: usize, end_of_stream: bool) -> Action {
        self.drained = self.drained.saturating_add(body_size as u64);
        if end_of_stream || self.drained > self.rt.max_body_bytes.saturating_mul(DRAIN_FACTOR) {
            return self.reply(h, &ApiError::too_large(self.rt.max_body_bytes));
        }
        h.set_request_body(body_size, b"");
        Action::Pause
    }

    fn cooling(&self, h: &dyn Host, key_id: &str, now: u64) -> bool {
        h.shared_get(&format!("{COOLDOWN_PREFIX}{key_id}"))
            .and_then(|v| String::from_utf8(v).ok())
            .and_then(|s| s.parse::<u64>().ok())
            .is_some_and(|until| until > now)
    }

    fn route_request(&mut self, h: &mut dyn Host, body: &[u8]) -> Result<(), ApiError> {
        let ep = self.endpoint.unwrap_or(Endpoint::Chat);
        if body.is_empty() {
            return Err(ApiError::new(
                400,
                crate::error::INVALID_REQUEST,
                "invalid_json",
                "Request body is required",
            ));
        }
        let (value, model) = parse_client_body(body)?;
        let rt = Arc::clone(&self.rt);
        let resolved = rt
            .resolve(&model)
            .ok_or_else(|| ApiError::model_not_found(&model))?;
        let allowed = self.allowed.as_deref().unwrap_or("");
        if !model_allowed(allowed, &[&model, &resolved.canonical]) {
            return Err(ApiError::model_not_allowed(&model));
        }
        if let Some(declared) = self.declared_model.as_deref() {
            let declared = declared.trim();
            if declared != model && declared != resolved.canonical {
                return Err(ApiError {
                    param: Some("model".into()),
                    ..ApiError::new(
                        400,
                        crate::error::INVALID_REQUEST,
                        "model_mismatch",
                        format!("The x-tollgate-model header ('{declared}') does not name the request's model ('{model}')"),
                    )
                });
            }
        }
        let provider: &Provider = rt
            .provider(resolved.provider)
            .ok_or_else(|| ApiError::model_not_found(&model))?;
        let model_cfg = provider
            .models
            .get(&resolved.model)
            .ok_or_else(|| ApiError::model_not_found(&model))?;
        let tr = for_kind(provider.kind);
        let ctx = RequestCtx {
            provider,
            model: &resolved.model,
            model_cfg,
            endpoint: ep,
        };
        let up = tr.request(&ctx, &value)?;
        let now = h.now_ms();
        let r = h.random_u32();
        let key_idx = model_cfg
            .pool
            .pick(r, |k| provider.keys.get(k).is_some_and(|key| !self.cooling(h, &key.id, now)))
            .ok_or_else(|| {
                ApiError::new(
                    503,
                    SERVER,
                    "no_provider_key_available",
                    format!("Every key of provider '{}' is cooling down after provider errors; retry later", provider.name),
                )
            })?;
        let key = provider
            .keys
            .get(key_idx)
            .ok_or_else(|| ApiError::model_not_found(&model))?;

        let len = up.body.len().to_string();
        let mut ok = true;
        for name in [
            "authorization",
            "x-api-key",
            HDR_TENANT,
            HDR_KEY_ID,
            HDR_MODELS,
            HDR_MODEL,
            HDR_RESERVED,
            "accept-encoding",
            "transfer-encoding",
        ] {
            ok &= h.set_request_header(name, None);
        }
        ok &= h.set_request_header(HDR_CLUSTER, Some(&provider.cluster));
        ok &= h.set_request_header(":path", Some(&up.path));
        if let Some(host) = &provider.host {
            ok &= h.set_request_header(":authority", Some(host));
        }
        for (name, value) in tr.auth_headers(provider, key, &up, now)? {
            ok &= h.set_request_header(name, Some(&value));
        }
        ok &= h.set_request_header("content-type", Some("application/json"));
        ok &= h.set_request_header("content-length", Some(&len));
        ok &= h.set_request_body(body.len(), &up.body);
        if !ok {
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
        h.metric(
            MetricKind::Counter,
            &self.metric_name(provider, &resolved.model, "requests"),
            1,
        );
        self.route = Some(Route {
            provider: resolved.provider,
            canonical: resolved.canonical,
            key: key_idx,
            stream: up.stream,
            include_usage: up.include_usage,
            json_mode: up.json_mode,
            prompt_estimate: up.prompt_estimate,
            embed_base64: up.embed_base64,
            upstream_model: resolved.model.clone(),
            endpoint: ep,
            sent_ms: now,
        });
        self.phase = Phase::Routed;
        Ok(())
    }

    fn metric_name(&self, provider: &Provider, model: &str, what: &str) -> String {
        format!(
            "tollgate.provider.{}.model.{}.{}",
            metric_safe(&provider.name),
            metric_safe(model),
            what
        )
    }

    fn route_metric(&self, what: &str) -> Option<String> {
        let r = self.route.as_ref()?;
        let p = self.rt.provider(r.provider)?;
        let model = r.canonical.split_once('/').map(|(_, m)| m).unwrap_or("");
        Some(self.metric_name(p, model, what))
    }

    /// Error and translated bodies hold the response headers until the body
    /// is complete (status, content-type and content-length are final then);
    /// streams and passthrough bodies go on at once.
    pub fn on_response_headers(&mut self, h: &mut dyn Host, end_of_stream: bool) -> Action {
        if self.phase != Phase::Routed {
            return Action::Continue;
        }
        let Some(route) = self.route.as_ref() else {
            return Action::Continue;
        };
        let Some(provider) = self.rt.provider(route.provider) else {
            return Action::Continue;
        };
        let status: u16 = h
            .response_header(":status")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let now = h.now_ms();
        if !h.response_from_upstream() {
            // Envoy's own reply (connect failure, timeout, overflow…): its
            // body is already OpenAI-shaped by local_reply_config.
            self.envoy_reply = true;
            self.resp = RespMode::None;
            return Action::Continue;
        }
        self.upstream_status = status;
        h.set_response_header(HDR_PROVIDER, Some(&provider.name));
        // The provider's rate-limit headers describe the gateway's provider
        // key, not the client's virtual key (authz-service sets those).
        for name in PROVIDER_RATELIMIT_HEADERS {
            h.set_response_header(name, None);
        }
        let latency = now.saturating_sub(route.sent_ms);
        if let Some(n) = self.route_metric("upstream_latency_ms") {
            h.metric(MetricKind::Histogram, &n, latency);
        }
        if status == 429 || status == 401 {
            if let Some(key) = provider.keys.get(route.key) {
                let until = now.saturating_add(self.rt.cooldown_ms);
                h.shared_set(
                    &format!("{COOLDOWN_PREFIX}{}", key.id),
                    until.to_string().as_bytes(),
                );
                h.log(
                    Level::Warn,
                    &format!("tollgate: provider {} answered {status} for key {}; cooling it down for {} ms", provider.name, key.id, self.rt.cooldown_ms),
                );
            }
        }
        let ctype = h.response_header("content-type").unwrap_or_default();
        let tr = for_kind(provider.kind);
        if status >= 400 {
            let (mapped, _, _) = crate::translate::map_error_status(status);
            h.set_response_header(":status", Some(&mapped.to_string()));
            h.set_response_header("content-type", Some("application/json"));
            self.resp = RespMode::Error(status);
        } else if route.stream && tr.is_stream(&ctype) {
            let ctx = ResponseCtx {
                endpoint: route.endpoint,
                stream: true,
                include_usage: route.include_usage,
                created: now / 1000,
                json_mode: route.json_mode,
                prompt_estimate: route.prompt_estimate,
                embed_base64: route.embed_base64,
                model: route.upstream_model.clone(),
            };
            self.resp = RespMode::Stream(tr.stream(&ctx));
            h.set_response_header("content-length", None);
            if !tr.passthrough() {
                h.set_response_header("content-type", Some("text/event-stream"));
            }
            return Action::Continue;
        } else if tr.passthrough() {
            self.resp = RespMode::Copy(Some(Vec::new()));
            return Action::Continue;
        } else {
            h.set_response_header("content-type", Some("application/json"));
            self.resp = RespMode::Buffer;
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
        if self.phase != Phase::Routed {
            return Action::Continue;
        }
        let Some(route) = self.route.as_ref() else {
            return Action::Continue;
        };
        let Some(provider) = self.rt.provider(route.provider) else {
            return Action::Continue;
        };
        let tr = for_kind(provider.kind);
        let created = h.now_ms() / 1000;
        match &mut self.resp {
            RespMode::None => Action::Continue,
            RespMode::Copy(copy) => {
                if let Some(buf) = copy {
                    if buf.len() + body_size > MAX_COPY {
                        *copy = None;
                    } else if let Some(chunk) = h.response_body(body_size) {
                        buf.extend_from_slice(&chunk);
                    }
                }
                if end_of_stream {
                    if let Some(buf) = copy.take() {
                        let ctx = ResponseCtx {
                            endpoint: route.endpoint,
                            stream: false,
                            include_usage: false,
                            created,
                            json_mode: route.json_mode,
                            prompt_estimate: route.prompt_estimate,
                            embed_base64: route.embed_base64,
                            model: route.upstream_model.clone(),
                        };
                        if let Ok(t) = tr.response(&ctx, &buf) {
                            self.usage = t.usage;
                        }
                    }
                }
                Action::Continue
            }
            RespMode::Stream(t) => {
                let chunk = h.response_body(body_size).unwrap_or_default();
                let mut out = Vec::with_capacity(chunk.len() + 64);
                t.feed(&chunk, &mut out);
                if end_of_stream {
                    t.finish(&mut out);
                    self.stream_finished = true;
                }
                self.usage = t.usage();
                if !self.first_token && t.first_token_seen() {
                    self.first_token = true;
                    let ttft = h.now_ms().saturating_sub(route.sent_ms);
                    if let Some(n) = self.route_metric("ttft_ms") {
                        h.metric(MetricKind::Histogram, &n, ttft);
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
                let ctx = ResponseCtx {
                    endpoint: route.endpoint,
                    stream: false,
                    include_usage: false,
                    created,
                    json_mode: route.json_mode,
                    prompt_estimate: route.prompt_estimate,
                    embed_base64: route.embed_base64,
                    model: route.upstream_model.clone(),
                };
                let out = match tr.response(&ctx, &body) {
                    Ok(t) => {
                        self.usage = t.usage;
                        t.body
                    }
                    Err(e) => {
                        h.set_response_header(":status", Some(&e.status.to_string()));
                        Some(e.body())
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
                let body = h.response_body(body_size).unwrap_or_default();
                let e = tr.error(*status, &body);
                // The body can say more than the status (Gemini answers a bad
                // key with 400 API_KEY_INVALID): the translated error decides.
                h.set_response_header(":status", Some(&e.status.to_string()));
                if e.code.as_deref() == Some("provider_auth_failed") && *status != 401 {
                    // 401 already cooled the key on the headers; other
                    // credential refusals (Bedrock 403, Gemini 400) do here.
                    if let Some(key) = provider.keys.get(route.key) {
                        let now = h.now_ms();
                        let until = now.saturating_add(self.rt.cooldown_ms);
                        h.shared_set(
                            &format!("{COOLDOWN_PREFIX}{}", key.id),
                            until.to_string().as_bytes(),
                        );
                        h.log(
                            Level::Warn,
                            &format!("tollgate: provider {} refused the credentials of key {} ({status}); cooling it down for {} ms", provider.name, key.id, self.rt.cooldown_ms),
                        );
                    }
                }
                let b = e.body();
                h.set_response_header("content-length", Some(&b.len().to_string()));
                h.set_response_body(body_size, &b);
                Action::Continue
            }
        }
    }

    /// Stream end (success or not): stats and the usage report. Idempotent.
    pub fn on_log(&mut self, h: &mut dyn Host) {
        if self.logged {
            return;
        }
        self.logged = true;
        let Some(route) = self.route.as_ref() else {
            return;
        };
        if let RespMode::Stream(t) = &self.resp {
            self.usage = t.usage();
        }
        let status = self.upstream_status;
        let class = match status {
            _ if self.envoy_reply => Some("gateway"),
            0 => Some("no_response"),
            429 => Some("rate_limited"),
            400..=499 => Some("upstream_4xx"),
            500.. => Some("upstream_5xx"),
            _ => None,
        };
        if let Some(c) = class {
            if let Some(n) = self.route_metric(&format!("errors.{c}")) {
                h.metric(MetricKind::Counter, &n, 1);
            }
        }
        let Some(u) = self.usage else { return };
        if let Some(n) = self.route_metric("prompt_tokens") {
            h.metric(MetricKind::Counter, &n, u.prompt_tokens);
        }
        if let Some(n) = self.route_metric("completion_tokens") {
            h.metric(MetricKind::Counter, &n, u.completion_tokens);
        }
        let (Some(target), Some(tenant), Some(key_id)) = (
            self.rt.usage.as_ref(),
            self.tenant.as_ref(),
            self.key_id.as_ref(),
        ) else {
            return;
        };
        let report = Report {
            tenant: tenant.clone(),
            key_id: key_id.clone(),
            model: route.canonical.clone(),
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            reserved: self.reserved,
        };
        let body = match &self.batch {
            None => report.body(),
            Some(b) => {
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
        };
        if !h.post(&target.cluster, &target.path, &body, target.timeout_ms) {
            h.log(
                Level::Warn,
                &format!(
                    "tollgate: could not send the usage report to cluster {}",
                    target.cluster
                ),
            );
        }
    }
}
