//! Policy reload on file change and on SIGHUP; an invalid file is refused and
//! the previous policy stays.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::{Duration, Instant};

use crate::common::{check_key, client, http_status, metric, temp_policy};
use tollgate_authz::policy::hash_key;
use tollgate_authz::server::{start, ServeConfig};

fn policy_with(keys: &[(&str, &str)]) -> String {
    let mut y = "version: 1\ntenants:\n  t: {}\nkeys:\n".to_string();
    for (id, key) in keys {
        y.push_str(&format!(
            "  - id: {id}\n    tenant: t\n    sha256: {}\n",
            hash_key(key)
        ));
    }
    y
}

async fn wait_status(c: &mut common::AuthzClient, key: &str, want: u16) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if http_status(&check_key(c, key).await.unwrap()) == want {
            return;
        }
        assert!(Instant::now() < deadline, "{key} never answered {want}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_on_change_and_keeps_old_policy_when_invalid() {
    let (_dir, path) = temp_policy(&policy_with(&[("a", "tg-a")]));
    let svc = common::start_service(&path, "memory://").await;
    let mut c = client(&svc).await;
    assert_eq!(http_status(&check_key(&mut c, "tg-a").await.unwrap()), 200);
    assert_eq!(http_status(&check_key(&mut c, "tg-b").await.unwrap()), 401);

    std::fs::write(&path, policy_with(&[("a", "tg-a"), ("b", "tg-b")])).unwrap();
    wait_status(&mut c, "tg-b", 200).await;

    // Invalid: refused, old policy (a and b) stays.
    std::fs::write(
        &path,
        "version: 1\nkeys:\n  - id: c\n    tenant: missing\n    sha256: 00\n",
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric(
        &svc.authorizer.metrics().render(),
        r#"tollgate_authz_policy_reloads_total{result="refused"}"#,
    ) < 1.0
    {
        assert!(Instant::now() < deadline, "invalid policy never noticed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(http_status(&check_key(&mut c, "tg-a").await.unwrap()), 200);
    assert_eq!(http_status(&check_key(&mut c, "tg-b").await.unwrap()), 200);

    // Removing a key takes effect.
    std::fs::write(&path, policy_with(&[("b", "tg-b")])).unwrap();
    wait_status(&mut c, "tg-a", 401).await;
    svc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_at_once() {
    let (_dir, path) = temp_policy(&policy_with(&[("a", "tg-a")]));
    let mut cfg = ServeConfig::new(&path);
    cfg.grpc_listen = "127.0.0.1:0".parse().unwrap();
    cfg.http_listen = "127.0.0.1:0".parse().unwrap();
    cfg.redis_url = "memory://".into();
    // Polling effectively off: only SIGHUP can reload.
    cfg.reload_interval = Duration::from_secs(3600);
    let svc = start(cfg).await.unwrap();
    let mut c = client(&svc).await;
    // Let the reloader install its SIGHUP handler before signalling.
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::write(&path, policy_with(&[("b", "tg-b")])).unwrap();
    assert_eq!(http_status(&check_key(&mut c, "tg-b").await.unwrap()), 401);
    let st = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    wait_status(&mut c, "tg-b", 200).await;
    assert_eq!(http_status(&check_key(&mut c, "tg-a").await.unwrap()), 401);
    svc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_drop_no_requests() {
    let (_dir, path) = temp_policy(&policy_with(&[("a", "tg-a")]));
    let svc = common::start_service(&path, "memory://").await;
    let c = client(&svc).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (mut c, stop) = (c.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let (mut ok, mut other) = (0u32, 0u32);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match check_key(&mut c, "tg-a").await.map(|r| http_status(&r)) {
                    Ok(200) => ok += 1,
                    _ => other += 1,
                }
            }
            (ok, other)
        }));
    }
    // Twenty reloads (a new key each time, key a always present), one refused.
    for i in 0..20 {
        let yaml = if i == 10 {
            "version: 1\nbroken: [".to_string()
        } else {
            policy_with(&[("a", "tg-a"), ("b", &format!("tg-b{i}"))])
        };
        std::fs::write(&path, yaml).unwrap();
        tokio::time::sleep(Duration::from_millis(80)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut ok, mut other) = (0, 0);
    for w in workers {
        let (o, x) = w.await.unwrap();
        ok += o;
        other += x;
    }
    assert!(ok > 100, "only {ok} checks ran");
    assert_eq!(
        other,
        0,
        "{other} of {} checks were not answered 200 during reloads",
        ok + other
    );
    let m = svc.authorizer.metrics().render();
    assert!(
        metric(
            &m,
            r#"tollgate_authz_policy_reloads_total{result="applied"}"#
        ) >= 10.0
    );
    assert!(
        metric(
            &m,
            r#"tollgate_authz_policy_reloads_total{result="refused"}"#
        ) >= 1.0
    );
    svc.shutdown().await;
}
