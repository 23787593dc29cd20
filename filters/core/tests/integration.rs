//! The integration tests, one module per file, built as one test binary:
//! linked once rather than once per file (`cargo test --test integration
//! MODULE::` runs one file's tests).

mod affinity;
mod anthropic_vectors;
mod breakpoints;
mod common;
mod config_errors;
mod eventstream_oracle;
mod field_types;
mod flow;
mod fuzz;
mod lift;
mod limits;
mod messages_native;
mod messages_streams;
mod provider_vectors;
mod responses;
mod sigv4_botocore;
mod stream_splits;
