//! Tollgate's proxy-wasm filter: a thin shim. Each callback is forwarded to
//! `tollgate_core::flow::Flow` with a [`host::WasmHost`], the only place
//! that talks to Envoy. Configuration is parsed once per VM in `on_configure`
//! and shared with every request through an `Arc`. With usage batching on,
//! the requests of a VM add their usage to the root's batch, which the root
//! posts on its tick; on the same tick it renews the concurrency slots its
//! requests hold (`tollgate_core::slots`).
//!
//! The same module, in the same VM, also runs as the router's per-attempt
//! (upstream) filter, configured with root id [`ATTEMPT_ROOT_ID`]: its
//! requests go to `tollgate_core::attempt::Attempt` instead.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod host;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action as WasmAction, BufferType, ContextType, LogLevel, MapType};
use tollgate_core::attempt::Attempt;
use tollgate_core::config::Runtime;
use tollgate_core::error::{ApiError, SERVER};
use tollgate_core::flow::Flow;
use tollgate_core::host::{Action, Host};
use tollgate_core::mcp::{is_mcp_path, Exchange, McpMetrics};
use tollgate_core::metrics::Metrics;
use tollgate_core::slots::SlotBook;
use tollgate_core::usage::UsageBatch;

use host::WasmHost;

/// The root id of the per-attempt filter (the router's upstream filter in
/// envoy.yaml).
pub const ATTEMPT_ROOT_ID: &str = "tollgate_attempt";

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    std::panic::set_hook(Box::new(|info| {
        host::log(LogLevel::Critical, &format!("tollgate: panic: {info}"));
    }));
    proxy_wasm::set_root_context(|context_id| -> Box<dyn RootContext> {
        Box::new(Root {
            context_id,
            runtime: None,
            batch: None,
            slots: Rc::default(),
            flush_every: 1,
            ticks: 0,
            metrics: Rc::default(),
            mcp_metrics: Rc::default(),
            attempts: false,
        })
    });
}}

struct Root {
    context_id: u32,
    runtime: Option<Arc<Runtime>>,
    /// This VM's pending usage, when `usage_flush_ms` > 0.
    batch: Option<Rc<RefCell<UsageBatch>>>,
    /// The concurrency slots this VM's requests hold.
    slots: Rc<RefCell<SlotBook>>,
    /// The batch is posted every this many ticks; ticks since it was.
    flush_every: u64,
    ticks: u64,
    /// This VM's metric ids per (tenant, key, provider, model).
    metrics: Rc<RefCell<Metrics>>,
    /// This VM's MCP metric ids.
    mcp_metrics: Rc<RefCell<McpMetrics>>,
    /// This root serves the per-attempt filter.
    attempts: bool,
}

impl Root {
    fn flush_usage(&self) {
        let (Some(batch), Some(target)) = (
            self.batch.as_ref(),
            self.runtime.as_ref().and_then(|rt| rt.usage.as_ref()),
        ) else {
            return;
        };
        let Some(body) = batch.borrow_mut().take_body() else {
            return;
        };
        if !host::post(&target.cluster, &target.path, &body, target.timeout_ms) {
            host::log(
                LogLevel::Warn,
                &format!(
                    "tollgate: could not send the usage report to cluster {}",
                    target.cluster
                ),
            );
        }
    }
}

impl Root {
    /// Renew the slots held a third of their ttl since their last renewal.
    fn renew_slots(&self) {
        let Some(target) = self.runtime.as_ref().and_then(|rt| rt.usage.as_ref()) else {
            return;
        };
        let Some(body) = self.slots.borrow_mut().due(host::now_ms()) else {
            return;
        };
        let path = tollgate_core::usage::SLOTS_RENEW_PATH;
        if !host::post(&target.cluster, path, &body, target.timeout_ms) {
            host::log(
                LogLevel::Warn,
                &format!(
                    "tollgate: could not renew concurrency slots at cluster {}",
                    target.cluster
                ),
            );
        }
    }
}

/// The tick without usage batching: often enough to renew a slot of the
/// shortest ttl (1 s) every third of it.
const SLOT_TICK: Duration = Duration::from_millis(250);

impl Context for Root {
    fn on_done(&mut self) -> bool {
        self.flush_usage();
        true
    }
}

impl RootContext for Root {
    fn on_configure(&mut self, size: usize) -> bool {
        let bytes = host::get_buffer(BufferType::PluginConfiguration, 0, size).unwrap_or_default();
        let env = |name: &str| std::env::var(name).ok();
        let root_id = WasmHost::new(self.context_id, self.context_id)
            .property(&["plugin_root_id"])
            .unwrap_or_default();
        self.attempts = root_id == ATTEMPT_ROOT_ID.as_bytes();
        match Runtime::from_json(&bytes, &env) {
            Ok(rt) if self.attempts => {
                self.runtime = Some(Arc::new(rt));
                true
            }
            Ok(rt) => {
                let models: usize = rt.providers.iter().map(|p| p.models.len()).sum();
                host::log(
                    LogLevel::Info,
                    &format!(
                        "tollgate: configured {} providers, {} models",
                        rt.providers.len(),
                        models
                    ),
                );
                let flush_ms = rt.usage.as_ref().map_or(0, |u| u.flush_ms);
                // A reconfiguration sends what the old settings held back.
                self.flush_usage();
                if flush_ms > 0 {
                    // Kept across reconfigurations: requests in flight hold it.
                    self.batch.get_or_insert_with(Rc::default);
                    let tick = Duration::from_millis(flush_ms).min(SLOT_TICK);
                    self.set_tick_period(tick);
                    // Every this many ticks (1 unless flush_ms > SLOT_TICK).
                    self.flush_every = flush_ms.div_ceil(tick.as_millis() as u64).max(1);
                } else {
                    self.batch = None;
                    self.set_tick_period(SLOT_TICK);
                }
                // Series are keyed by provider index: a new config starts anew.
                self.metrics = Rc::default();
                self.runtime = Some(Arc::new(rt));
                true
            }
            Err(e) => {
                host::log(LogLevel::Error, &e.to_string());
                false
            }
        }
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        if self.attempts {
            return Some(Box::new(AttemptHttp {
                attempt: self.runtime.as_ref().map(|rt| Attempt::new(Arc::clone(rt))),
                host: WasmHost::new(context_id, self.context_id),
            }));
        }
        // Never None: the SDK panics on None. Without a runtime (cannot
        // happen once on_configure succeeded) requests get a 503.
        Some(Box::new(Http {
            flow: self.runtime.as_ref().map(|rt| {
                let flow = Flow::new(Arc::clone(rt))
                    .with_metrics(Rc::clone(&self.metrics))
                    .with_slot_book(Rc::clone(&self.slots));
                match &self.batch {
                    Some(b) => flow.with_usage_batch(Rc::clone(b)),
                    None => flow,
                }
            }),
            mcp: None,
            mcp_metrics: Rc::clone(&self.mcp_metrics),
            host: WasmHost::new(context_id, self.context_id),
        }))
    }

    fn on_tick(&mut self) {
        // The tick may be shorter than the flush interval (slot renewals).
        self.ticks += 1;
        if self.ticks >= self.flush_every {
            self.ticks = 0;
            self.flush_usage();
        }
        self.renew_slots();
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Http {
    flow: Option<Flow>,
    /// A request of the MCP routes (`/mcp/<server>`): handled by
    /// `tollgate_core::mcp` instead of the flow.
    mcp: Option<Exchange>,
    mcp_metrics: Rc<RefCell<McpMetrics>>,
    host: WasmHost,
}

fn action(a: Action) -> WasmAction {
    match a {
        Action::Continue => WasmAction::Continue,
        Action::Pause => WasmAction::Pause,
    }
}

impl Context for Http {
    /// The answer to one of the request's own calls, a fan-out's or a
    /// fallback's (see `Flow::on_call_response`).
    fn on_http_call_response(
        &mut self,
        token_id: u32,
        _num_headers: usize,
        body_size: usize,
        _num_trailers: usize,
    ) {
        let status =
            proxy_wasm::hostcalls::get_map_value(MapType::HttpCallResponseHeaders, ":status")
                .ok()
                .flatten()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
        let body =
            proxy_wasm::hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size)
                .ok()
                .flatten()
                .unwrap_or_default();
        if let Some(f) = self.flow.as_mut() {
            f.on_call_response(&mut self.host, token_id, status, body);
        }
    }
}

impl HttpContext for Http {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> WasmAction {
        if self
            .host
            .request_header(":path")
            .is_some_and(|p| is_mcp_path(&p))
        {
            let mut x = Exchange::new(Rc::clone(&self.mcp_metrics));
            let a = x.on_request_headers(&mut self.host);
            self.mcp = Some(x);
            return action(a);
        }
        match self.flow.as_mut() {
            Some(f) => action(f.on_request_headers(&mut self.host, end_of_stream)),
            None => {
                let e = ApiError::new(
                    503,
                    SERVER,
                    "gateway_not_configured",
                    "The gateway filter has no valid configuration",
                );
                self.host
                    .send_local_reply(503, &[("content-type", "application/json")], &e.body());
                WasmAction::Pause
            }
        }
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> WasmAction {
        if self.mcp.is_some() {
            return WasmAction::Continue;
        }
        self.flow.as_mut().map_or(WasmAction::Continue, |f| {
            action(f.on_request_body(&mut self.host, body_size, end_of_stream))
        })
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> WasmAction {
        if let Some(x) = self.mcp.as_mut() {
            return action(x.on_response_headers(&mut self.host, end_of_stream));
        }
        self.flow.as_mut().map_or(WasmAction::Continue, |f| {
            action(f.on_response_headers(&mut self.host, end_of_stream))
        })
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> WasmAction {
        if let Some(x) = self.mcp.as_mut() {
            return action(x.on_response_body(&mut self.host, body_size, end_of_stream));
        }
        self.flow.as_mut().map_or(WasmAction::Continue, |f| {
            action(f.on_response_body(&mut self.host, body_size, end_of_stream))
        })
    }

    fn on_log(&mut self) {
        if let Some(x) = self.mcp.as_mut() {
            x.on_log(&mut self.host);
            return;
        }
        if let Some(f) = self.flow.as_mut() {
            f.on_log(&mut self.host);
        }
    }
}

/// One upstream attempt (see `tollgate_core::attempt`).
struct AttemptHttp {
    attempt: Option<Attempt>,
    host: WasmHost,
}

impl Context for AttemptHttp {
    fn on_done(&mut self) -> bool {
        if let Some(a) = self.attempt.as_mut() {
            a.on_done(&mut self.host);
        }
        true
    }
}

impl HttpContext for AttemptHttp {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> WasmAction {
        self.attempt.as_mut().map_or(WasmAction::Continue, |a| {
            action(a.on_request_headers(&mut self.host, end_of_stream))
        })
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> WasmAction {
        self.attempt.as_mut().map_or(WasmAction::Continue, |a| {
            action(a.on_request_body(&mut self.host, body_size, end_of_stream))
        })
    }

    fn on_http_response_headers(
        &mut self,
        _num_headers: usize,
        _end_of_stream: bool,
    ) -> WasmAction {
        self.attempt.as_mut().map_or(WasmAction::Continue, |a| {
            action(a.on_response_headers(&mut self.host))
        })
    }
}
