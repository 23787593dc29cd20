//! The integration tests, one module per file, built as one test binary:
//! linked once rather than once per file (`cargo test --test integration
//! MODULE::` runs one file's tests).

mod admin;
mod admission;
mod bucket_vectors;
mod common;
mod envoy;
mod failover;
mod grpc;
mod keystore_suite;
mod limits;
mod money;
mod multi_instance;
mod policy_fixtures;
mod reload;
mod storage_suite;
