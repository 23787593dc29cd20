//! The bottom layer: configuration, bodies, text, stats, the random source
//! and the per-request context. Nothing here knows a provider or the router.
//!
//! Floors, bottom up (`scripts/check_floors.py --show`): `body`, `config`,
//! `script`, `text`, `prefix` (the simulated prompt caches) import nothing
//! of `core`; `reply` (a handler's answer)
//! and `rng` sit on them; `http` builds replies; `ctx` holds the request
//! and the compiled provider; `plan` decides the answer.

pub mod body;
pub mod config;
pub mod ctx;
pub mod http;
pub mod plan;
pub mod prefix;
pub mod render;
pub mod reply;
pub mod rng;
pub mod script;
pub mod shape;
pub mod stats;
pub mod text;
