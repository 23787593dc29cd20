//! Tollgate's Wasm filter logic, with no proxy-wasm dependency so that all
//! of it is tested natively (`cargo test -p tollgate-core`).
//!
//! ```
//! use std::sync::Arc;
//! use tollgate_core::config::Runtime;
//! use tollgate_core::flow::Flow;
//! use tollgate_core::host::fake::FakeHost;
//! use tollgate_core::host::Action;
//!
//! let cfg = br#"{"providers":{"openai":{"kind":"openai","cluster":"openai",
//!   "models":["gpt-4o-mini"],"keys":[{"id":"k1","value":"sk-1"}]}}}"#;
//! let rt = Arc::new(Runtime::from_json(cfg, &|_| None).unwrap());
//! let mut host = FakeHost::default();
//! host.req_headers = vec![
//!     (":method".into(), "POST".into()),
//!     (":path".into(), "/v1/chat/completions".into()),
//!     ("x-tollgate-models".into(), "*".into()),
//! ];
//! host.req_body = br#"{"model":"openai/gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#.to_vec();
//! let mut flow = Flow::new(rt);
//! assert_eq!(flow.on_request_headers(&mut host, false), Action::Pause);
//! let n = host.req_body.len();
//! assert_eq!(flow.on_request_body(&mut host, n, true), Action::Continue);
//! assert_eq!(host.req_header("x-tollgate-cluster").as_deref(), Some("openai"));
//! assert_eq!(host.req_header("authorization").as_deref(), Some("Bearer sk-1"));
//! ```
//!
//! Modules: [`config`] (plugin JSON → [`config::Runtime`]), [`keys`]
//! (weighted choice), [`codec`] (SSE and AWS event-stream readers),
//! [`credentials`] (API-key headers, SigV4), [`translate`] (one
//! `<from>_<to>` module per provider family), [`plan`] (the pure route
//! planner), [`scan`] (a body's top level read without building it),
//! [`lift`] (long texts kept out of a translated document), [`flow`] (the
//! per-request state machine, in phases), [`calls`] (the calls a request
//! makes itself: a fan-out, a fallback to the next target, and the answer
//! made from theirs), [`cooldown`] (provider keys skipped after refusals),
//! [`attempt`] (the per-attempt key choice of retries, in an upstream
//! filter), [`usage`] (usage reports and their batches, reservation
//! top-ups), [`slots`] (concurrency slots renewed while their requests
//! run), [`metrics`] (the
//! per-request metrics and the facts exposed to the access log and tracer),
//! [`error`] (the OpenAI-shaped errors), [`host`] (the one host boundary).

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod attempt;
pub mod calls;
pub mod codec;
pub mod config;
pub mod cooldown;
pub mod credentials;
pub mod error;
pub mod flow;
pub mod hash;
pub mod host;
pub mod keys;
pub mod lift;
pub mod mcp;
pub mod metrics;
pub mod plan;
pub mod scan;
pub mod session;
pub mod slots;
pub mod translate;
pub mod usage;
