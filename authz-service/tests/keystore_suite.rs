//! One behaviour suite for the admin API's key stores, run against the
//! in-memory store, a real Redis and a real 3-node Redis Cluster: a write
//! names what it read and is refused when someone wrote first; a reader
//! gets everything first, then only what changed; a Redis that lost its
//! data (the version went back) sends everything again. With a cluster, a
//! key made on one instance is admitted by another.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use crate::common::{
    check_key, client, http1, http_status, temp_policy, RedisCluster, RedisServer,
};
use tollgate_authz::admin::AdminToken;
use tollgate_authz::keystore::{KeyStore, KeyStoreError, MemoryKeyStore, RedisKeyStore};
use tollgate_authz::server::{start, ServeConfig};

async fn suite(s: &impl KeyStore) {
    let c = s.since(0).await.unwrap();
    assert_eq!((c.version, c.records.len()), (0, 0));
    let v1 = s.put("a", None, r#"{"n":1}"#).await.unwrap();
    assert_eq!(
        s.put("a", None, r#"{"n":9}"#).await,
        Err(KeyStoreError::Conflict)
    );
    let v2 = s.put("b", None, r#"{"n":2}"#).await.unwrap();
    assert!(v2 > v1);
    assert_eq!(s.get("a").await.unwrap().as_deref(), Some(r#"{"n":1}"#));
    assert_eq!(s.get("zz").await.unwrap(), None);
    // Everything at first.
    let c = s.since(0).await.unwrap();
    assert!(c.full);
    assert_eq!(c.version, v2);
    let mut all = c.records.clone();
    all.sort();
    assert_eq!(all, vec![r#"{"n":1}"#, r#"{"n":2}"#]);
    // Nothing new.
    let c = s.since(v2).await.unwrap();
    assert!(!c.full && c.records.is_empty());
    // Only what changed: a write that names what it read.
    assert_eq!(
        s.put("a", Some(r#"{"n":0}"#), r#"{"n":3}"#).await,
        Err(KeyStoreError::Conflict)
    );
    let v3 = s.put("a", Some(r#"{"n":1}"#), r#"{"n":3}"#).await.unwrap();
    let c = s.since(v2).await.unwrap();
    assert_eq!(
        (c.full, c.version, c.records),
        (false, v3, vec![r#"{"n":3}"#.to_string()])
    );
    // A version ahead of the store's: everything again.
    let c = s.since(v3 + 100).await.unwrap();
    assert!(c.full);
    assert_eq!(c.records.len(), 2);
}

#[tokio::test]
async fn memory_store() {
    suite(&MemoryKeyStore::new()).await;
}

#[tokio::test]
async fn redis_store() {
    let redis = RedisServer::start();
    let s = RedisKeyStore::new(&redis.url()).unwrap();
    suite(&s).await;
    // Records and counters share one hash tag (one Cluster slot), and no
    // secret: only what the caller wrote.
    let keys = redis.cli(&["KEYS", "*"]);
    assert!(keys.lines().all(|k| k.starts_with("tg:{$keys}:")), "{keys}");
    // Redis lost its data: a reader that held version 3 gets all (none).
    redis.cli(&["FLUSHALL"]);
    let c = s.since(3).await.unwrap();
    assert!(c.full && c.records.is_empty() && c.version == 0);
    // Down: an error, not a hang.
    let mut redis = redis;
    redis.kill();
    let started = Instant::now();
    assert!(matches!(
        s.since(0).await,
        Err(KeyStoreError::Unavailable(_))
    ));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_store_and_two_instances() {
    let cluster = RedisCluster::start();
    let s = RedisKeyStore::new(&cluster.url()).unwrap();
    suite(&s).await;

    let (_dir, path) = temp_policy("version: 1\ntenants:\n  team: {}\n");
    let token = "cluster-admin-token-0123456789";
    let mut running = Vec::new();
    for _ in 0..2 {
        let mut cfg = ServeConfig::new(&path);
        cfg.grpc_listen = "127.0.0.1:0".parse().unwrap();
        cfg.http_listen = "127.0.0.1:0".parse().unwrap();
        cfg.admin_listen = "127.0.0.1:0".parse().unwrap();
        cfg.redis_url = cluster.url();
        cfg.redis_timeout = Duration::from_millis(250);
        cfg.admin_token = Some(AdminToken::named(token, "admin token").unwrap());
        running.push(start(cfg).await.unwrap());
    }
    let auth = format!("Bearer {token}");
    let (status, _, body) = http1(
        &running[0].admin_addr.unwrap().to_string(),
        "POST",
        "/admin/keys",
        &[("authorization", &auth)],
        r#"{"tenant":"team","id":"c1"}"#,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let secret = v["secret"].as_str().unwrap();
    let mut cb = client(&running[1]).await;
    let started = Instant::now();
    while http_status(&check_key(&mut cb, secret).await.unwrap()) != 200 {
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "not on b within 1 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for r in running {
        r.shutdown().await;
    }
}
