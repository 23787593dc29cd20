//! mock-llm: a strict, fast mock of the OpenAI, Azure OpenAI, Anthropic,
//! Gemini and Bedrock native APIs, for tests and benchmarks.
//!
//! ```no_run
//! # async fn run() -> Result<(), String> {
//! let cfg = mock_llm::config::Config::load("config/mock-llm.yaml")?;
//! let app = std::sync::Arc::new(mock_llm::app::App::new(&cfg));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
//! tokio::spawn(mock_llm::server::serve(listener, app));
//! # Ok(()) }
//! ```
//!
//! The crate denies panicking constructs: bad input always gets the
//! provider's own error document.

// Handlers return a complete native error `Reply` as their `Err` value; it
// is built once per refused request, so its size does not matter.
#![allow(clippy::result_large_err)]

pub mod anthropic;
pub mod app;
pub mod bedrock;
pub mod body;
pub mod config;
pub mod eventstream;
pub mod gemini;
pub mod openai;
pub mod server;
pub mod sigv4;
pub mod stats;
pub mod text;
