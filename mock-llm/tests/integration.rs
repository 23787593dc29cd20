//! The integration tests, one module per file, built as one test binary:
//! linked once rather than once per file (`cargo test --test integration
//! MODULE::` runs one file's tests).

mod agent;
mod anthropic;
mod common;
mod faults;
mod gemini_bedrock;
mod openai;
mod prompt_cache;
mod responses;
mod stats_server;
mod strict_anthropic;
mod strict_bedrock;
mod strict_gemini;
mod strict_openai;
mod strict_responses;
