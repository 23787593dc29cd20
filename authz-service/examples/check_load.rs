//! A small open-loop gRPC load driver for `Authorization/Check`: sends RATE
//! checks per second (in 1 ms batches) for SECONDS over CONNS HTTP/2
//! connections, and prints client-side latency quantiles. Loopback only.
//!
//! ```text
//! cargo run --release -p tollgate-authz --example check_load -- 127.0.0.1:9100 5000 10 tg-demo-key 4
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Request};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest};

fn request(key: &str) -> CheckRequest {
    let mut headers = HashMap::new();
    headers.insert("authorization".to_string(), format!("Bearer {key}"));
    headers.insert(":path".to_string(), "/v1/chat/completions".to_string());
    CheckRequest {
        attributes: Some(AttributeContext {
            request: Some(Request {
                http: Some(HttpRequest {
                    method: "POST".into(),
                    headers,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}

#[tokio::main]
async fn main() {
    let a: Vec<String> = std::env::args().collect();
    let addr = a.get(1).cloned().unwrap_or_else(|| "127.0.0.1:9100".into());
    assert!(
        addr.starts_with("127.") || addr.starts_with("localhost"),
        "loopback targets only"
    );
    let rate: u64 = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(5000);
    let secs: u64 = a.get(3).and_then(|s| s.parse().ok()).unwrap_or(10).min(120);
    let key = a.get(4).cloned().unwrap_or_else(|| "tg-demo-key".into());
    let conns: usize = a.get(5).and_then(|s| s.parse().ok()).unwrap_or(4);

    let mut clients = Vec::new();
    for _ in 0..conns {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .tcp_nodelay(true)
            .connect()
            .await
            .unwrap();
        clients.push(AuthorizationClient::new(ch));
    }
    let req = request(&key);
    let lat = Arc::new(Mutex::new(Vec::with_capacity((rate * secs) as usize)));
    let errors = Arc::new(Mutex::new(0u64));
    let total = rate * secs;
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut sent = 0u64;
    let mut tasks = Vec::new();
    while sent < total {
        tick.tick().await;
        // Catch up to the schedule: rate * elapsed requests by now.
        let due = ((started.elapsed().as_secs_f64() * rate as f64) as u64).min(total);
        while sent < due {
            let mut c = clients[(sent as usize) % conns].clone();
            let (req, lat, errors) = (req.clone(), lat.clone(), errors.clone());
            tasks.push(tokio::spawn(async move {
                let t = Instant::now();
                match c.check(req).await {
                    Ok(_) => lat.lock().unwrap().push(t.elapsed().as_micros() as u32),
                    Err(_) => *errors.lock().unwrap() += 1,
                }
            }));
            sent += 1;
        }
    }
    for t in tasks {
        let _ = t.await;
    }
    let wall = started.elapsed().as_secs_f64();
    let mut v = lat.lock().unwrap().clone();
    v.sort_unstable();
    let q = |p: f64| {
        v.get(((v.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(0)
    };
    println!(
        "rate {rate}/s for {secs}s over {conns} conns: {} ok, {} errors, achieved {:.0}/s; latency us p50 {} p90 {} p99 {} max {}",
        v.len(),
        errors.lock().unwrap(),
        v.len() as f64 / wall,
        q(0.5),
        q(0.9),
        q(0.99),
        v.last().copied().unwrap_or(0)
    );
}
