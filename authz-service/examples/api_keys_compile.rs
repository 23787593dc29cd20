//! How long compiling the policy takes with N keys made through the admin
//! API (what every instance does on each change it polls, so it adds to
//! the time a change takes to reach it):
//!
//! ```sh
//! cargo run --release -p tollgate-authz --example api_keys_compile -- 10000
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use tollgate_authz::policy::{hash_key, ApiKey, KeyFields, Limits, Policy};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let file = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../config/policy.yaml"
    ))
    .unwrap();
    let keys: Vec<ApiKey> = (0..n)
        .map(|i| {
            let mut h = [0u8; 32];
            hex::decode_to_slice(hash_key(&format!("tg-{i}")), &mut h).unwrap();
            let budgets = serde_json::from_str(r#"{"usd_per_day": "5"}"#).unwrap();
            ApiKey {
                id: format!("api-{i:06}"),
                tenant: "demo".into(),
                sha256: h,
                previous: Vec::new(),
                fields: KeyFields {
                    limits: Limits {
                        requests_per_minute: Some(600),
                        ..Limits::default()
                    },
                    budgets: Some(budgets),
                    ..KeyFields::default()
                },
                expires_at_ms: None,
                revoked_at_ms: None,
            }
        })
        .collect();
    for run in 0..3 {
        let started = Instant::now();
        let (p, left_out) = Policy::from_yaml_with(&file, &keys).unwrap();
        println!(
            "run {run}: {} keys ({} left out) compiled in {:.1} ms",
            p.key_count(),
            left_out.len(),
            started.elapsed().as_secs_f64() * 1000.0
        );
    }
}
