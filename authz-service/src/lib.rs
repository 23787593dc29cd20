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
//!
//! Modules stand on floors: each uses only modules on the floors below it
//! (`scripts/check_floors.py` refuses a circle), so the source reads from
//! the bottom up; authz-service/README.md, "Source layout", lists them.
//!
//! 1. [`bucket`], [`rolling`], [`prices`], [`decision`], [`metrics`],
//!    [`defaults`], [`usage_token`], [`learned`]: math, answers and
//!    settings that use no other module
//! 2. [`storage`] (buckets and spend counters, in memory or in Redis),
//!    [`anthropic`]
//! 3. [`budget`] (the money part of a policy), [`lease`]
//! 4. [`policy`]
//! 5. [`plan`] (the buckets of a request), [`backend`] (the store as the
//!    decisions reach it), [`keygen`], [`slots`] (concurrency slots)
//! 6. [`spend`] (money budgets reserved and settled)
//! 7. [`usage`] (usage reports settled, debits queued)
//! 8. [`authz`] (the Check decision and the [`authz::Authorizer`])
//! 9. [`service`] (ext_authz over gRPC), [`http`], [`reload`]
//! 10. [`server`] (wiring)

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
pub mod learned;
pub mod lease;
pub mod metrics;
pub mod plan;
pub mod policy;
pub mod prices;
pub mod reload;
pub mod rolling;
pub mod server;
pub mod service;
pub mod slots;
pub mod spend;
pub mod storage;
pub mod usage;
pub mod usage_token;
