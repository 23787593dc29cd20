//! Tollgate authz-service: Envoy ext_authz for virtual keys and token buckets.
//!
//! ```
//! use std::sync::Arc;
//! use tollgate_authz::authz::{Authorizer, CheckInput, Decision};
//! use tollgate_authz::metrics::Metrics;
//! use tollgate_authz::policy::{hash_key, Policy};
//! use tollgate_authz::storage::{MemoryStore, SystemClock};
//!
//! let yaml = format!(
//!     "version: 1\ntenants:\n  demo:\n    limits: {{requests_per_minute: 2}}\nkeys:\n  - id: k1\n    tenant: demo\n    sha256: {}\n",
//!     hash_key("tg-example"),
//! );
//! let policy = Policy::from_yaml(&yaml).unwrap();
//! let authz = Authorizer::new(policy, MemoryStore::new(SystemClock), Arc::new(Metrics::new().unwrap()));
//! let input = CheckInput { authorization: Some("Bearer tg-example".into()), ..Default::default() };
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! assert!(matches!(rt.block_on(authz.check(&input)), Decision::Allow { .. }));
//! assert!(matches!(rt.block_on(authz.check(&input)), Decision::Allow { .. }));
//! assert!(matches!(rt.block_on(authz.check(&input)), Decision::Deny { status: 429, .. }));
//! ```

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod anthropic;
pub mod authz;
pub mod backend;
pub mod bucket;
pub mod budget;
pub mod decision;
pub mod defaults;
pub mod http;
pub mod keygen;
pub mod lease;
pub mod metrics;
pub mod plan;
pub mod policy;
pub mod prices;
pub mod reload;
pub mod rolling;
pub mod server;
pub mod service;
pub mod spend;
pub mod storage;
pub mod usage;
pub mod usage_token;
