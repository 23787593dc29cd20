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
//!    [`defaults`], [`usage_token`], [`admin_client`], [`learned`]: math,
//!    answers, settings and the admin API's client, using no other module
//! 2. [`storage`] (buckets and spend counters, in memory or in Redis),
//!    [`anthropic`]
//! 3. [`budget`] (the money part of a policy), [`lease`]
//! 4. [`policy`] (the file's keys and the admin API's, compiled)
//! 5. [`plan`] (the buckets of a request), [`backend`] (the store as the
//!    decisions reach it), [`keygen`], [`keystore`] (the admin API's keys,
//!    in memory or in Redis), [`slots`] (concurrency slots)
//! 6. [`spend`] (money budgets reserved and settled)
//! 7. [`usage`] (usage reports settled, debits queued)
//! 8. [`authz`] (the Check decision and the [`authz::Authorizer`])
//! 9. [`service`] (ext_authz over gRPC), [`http`], [`sources`] (the
//!    policy compiled from the file and the admin API's keys)
//! 10. [`reload`] (the file), [`keysync`] (the admin API's keys, polled)
//! 11. [`admin`] (the admin API)
//! 12. [`server`] (wiring)

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod admin;
pub mod admin_client;
pub mod anthropic;
pub mod authz;
pub mod backend;
pub mod bucket;
pub mod budget;
pub mod decision;
pub mod defaults;
pub mod http;
pub mod keygen;
pub mod keystore;
pub mod keysync;
pub mod learned;
pub mod lease;
pub mod mcp_rules;
pub mod metrics;
pub mod plan;
pub mod policy;
pub mod prices;
pub mod reload;
pub mod rolling;
pub mod server;
pub mod service;
pub mod slots;
pub mod sources;
pub mod spend;
pub mod storage;
pub mod usage;
pub mod usage_token;
