//! The bottom layer: configuration, bodies, text, stats, the random source
//! and the per-request context. Nothing here knows a provider or the router.

pub mod body;
pub mod config;
pub mod ctx;
pub mod http;
pub mod plan;
pub mod render;
pub mod rng;
pub mod script;
pub mod stats;
pub mod text;
