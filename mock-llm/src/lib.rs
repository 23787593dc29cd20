//! mock-llm: a strict, fast mock of the OpenAI, Azure OpenAI, Anthropic,
//! Gemini and Bedrock native APIs, for tests and benchmarks.
//!
//! ```no_run
//! # async fn run() -> Result<(), String> {
//! let cfg = mock_llm::core::config::Config::load("config/mock-llm.yaml")?;
//! let app = std::sync::Arc::new(mock_llm::app::App::new(&cfg));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
//! tokio::spawn(mock_llm::server::serve(listener, app));
//! # Ok(()) }
//! ```
//!
//! Modules form a one-way graph: [`server`] (sockets) and [`app`] (routing,
//! authentication, faults) → [`providers`] (one module per native API) →
//! [`core`] (config, context, bodies, text, stats).
//!
//! The crate denies panicking constructs: bad input always gets the
//! provider's own error document.

// Handlers return a complete native error `Reply` as their `Err` value; it
// is built once per refused request, so its size does not matter.
#![allow(clippy::result_large_err)]

// Module graph, one way: `server` → `app` (router) → `providers` → `core`.
pub mod app;
pub mod core;
pub mod providers;
pub mod server;
