//! One behaviour suite for every bucket store: the in-memory store and the
//! Redis store (against a real redis-server) must agree, on buckets and on
//! concurrency slots.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use tollgate_authz::bucket::BucketSpec;
use tollgate_authz::storage::{
    bucket_key, key_slots, tenant_slots, BucketOp, MemoryStore, RedisStore, RedisStoreConfig,
    SlotMode, SlotOp, Store, SystemClock,
};

use crate::common::RedisServer;

const MIN: u64 = 60_000;
const DAY: u64 = 86_400_000;

fn op(tenant: &str, scope: &str, capacity: u64, window_ms: u64, take: i64) -> BucketOp {
    BucketOp {
        key: bucket_key(tenant, "rm", scope),
        spec: BucketSpec {
            capacity,
            window_ms,
        },
        take,
        lease: 0,
    }
}

async fn admits_capacity_then_refuses<S: Store>(s: &S, t: &str) {
    let ops = [op(t, "k:a", 5, MIN, 1)];
    for i in 0..5 {
        let o = s.check_and_take(&ops).await.unwrap();
        assert_eq!(o.denied, None, "request {i}");
        let want = (4 - i) as f64;
        assert!(
            o.levels[0] <= want && o.levels[0] > want - 0.01,
            "level {} want {want}",
            o.levels[0]
        );
    }
    let o = s.check_and_take(&ops).await.unwrap();
    assert_eq!(o.denied, Some(0));
    assert!(
        o.levels[0] < 0.01 && o.levels[0] >= 0.0,
        "level {}",
        o.levels[0]
    );
}

async fn refused_request_takes_nothing<S: Store>(s: &S, t: &str) {
    let ops = [op(t, "k:a", 10, MIN, 1), op(t, "t", 1, MIN, 1)];
    assert_eq!(s.check_and_take(&ops).await.unwrap().denied, None);
    let o = s.check_and_take(&ops).await.unwrap();
    assert_eq!(o.denied, Some(1));
    assert!(
        o.levels[0] >= 9.0 && o.levels[0] < 9.01,
        "key bucket untouched: {}",
        o.levels[0]
    );
    // The key bucket alone still has 9.
    let alone = s.check_and_take(&ops[..1]).await.unwrap();
    assert_eq!(alone.denied, None);
    assert!(alone.levels[0] >= 8.0 && alone.levels[0] < 8.01);
}

async fn token_bucket_admits_while_positive_and_debits_negative<S: Store>(s: &S, t: &str) {
    let check = [BucketOp {
        key: bucket_key(t, "tm", "k:a"),
        spec: BucketSpec {
            capacity: 100,
            window_ms: MIN,
        },
        take: 0,
        lease: 0,
    }];
    let o = s.check_and_take(&check).await.unwrap();
    assert_eq!(o.denied, None);
    assert_eq!(
        o.levels[0], 100.0,
        "absent bucket is full; take 0 takes nothing"
    );
    let debit = [BucketOp {
        take: 150,
        ..check[0].clone()
    }];
    let o = s.debit(&debit).await.unwrap();
    assert_eq!(o.denied, None);
    assert!(
        o.levels[0] >= -50.0 && o.levels[0] < -49.9,
        "level {}",
        o.levels[0]
    );
    let o = s.check_and_take(&check).await.unwrap();
    assert_eq!(o.denied, Some(0));
    assert!(o.levels[0] < -49.0);
}

async fn day_window<S: Store>(s: &S, t: &str) {
    let ops = [op(t, "k:d", 3, DAY, 1)];
    for _ in 0..3 {
        assert_eq!(s.check_and_take(&ops).await.unwrap().denied, None);
    }
    assert_eq!(s.check_and_take(&ops).await.unwrap().denied, Some(0));
}

async fn buckets_are_independent<S: Store>(s: &S, t: &str) {
    let a = [op(t, "k:x", 1, MIN, 1)];
    let b = [op(t, "k:y", 1, MIN, 1)];
    assert_eq!(s.check_and_take(&a).await.unwrap().denied, None);
    assert_eq!(s.check_and_take(&a).await.unwrap().denied, Some(0));
    assert_eq!(s.check_and_take(&b).await.unwrap().denied, None);
}

async fn refills_continuously<S: Store>(s: &S, t: &str) {
    // 2 per second: one unit every 500 ms (room for a slow machine between
    // the calls before the sleep).
    let ops = [op(t, "k:r", 2, 1000, 1)];
    assert_eq!(s.check_and_take(&ops).await.unwrap().denied, None);
    assert_eq!(s.check_and_take(&ops).await.unwrap().denied, None);
    assert_eq!(s.check_and_take(&ops).await.unwrap().denied, Some(0));
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(s.check_and_take(&ops).await.unwrap().denied, None);
}

async fn concurrent_requests_admit_exactly_capacity<S: Store>(s: Arc<S>, t: &str) {
    let ops = vec![op(t, "k:c", 20, DAY, 1), op(t, "t", 1000, DAY, 1)];
    let mut handles = Vec::new();
    for _ in 0..60 {
        let (s, ops) = (s.clone(), ops.clone());
        handles.push(tokio::spawn(async move {
            s.check_and_take(&ops).await.unwrap().denied.is_none()
        }));
    }
    let mut admitted = 0;
    for h in handles {
        admitted += h.await.unwrap() as u32;
    }
    assert_eq!(admitted, 20);
    // The tenant bucket was taken exactly 20 times.
    let o = s.check_and_take(&ops[1..]).await.unwrap();
    assert!(
        o.levels[0] >= 979.0 && o.levels[0] < 979.1,
        "tenant level {}",
        o.levels[0]
    );
}

async fn leases_are_granted_with_the_take_and_refunds_capped<S: Store>(s: &S, t: &str) {
    let mut ops = [op(t, "k:l", 100, DAY, 1), op(t, "t", 17, DAY, 1)];
    ops[0].lease = 50;
    ops[1].lease = 50;
    let o = s.check_and_take(&ops).await.unwrap();
    assert_eq!(o.denied, None);
    // floor(99 / 8) = 12 and floor(16 / 8) = 2: an eighth of what is left.
    assert_eq!(o.granted, vec![12, 2]);
    assert!(o.levels[0] >= 87.0 && o.levels[0] < 87.01, "{:?}", o.levels);
    assert!(o.levels[1] >= 14.0 && o.levels[1] < 14.01, "{:?}", o.levels);
    // A refused request is granted nothing and takes nothing.
    let mut refused = [op(t, "k:l", 100, DAY, 1), op(t, "t", 17, DAY, 15)];
    refused[0].lease = 50;
    let o = s.check_and_take(&refused).await.unwrap();
    assert_eq!((o.denied, o.granted.clone()), (Some(1), vec![0, 0]));
    assert!(o.levels[0] >= 87.0 && o.levels[0] < 87.01);
    // Refunds (negative debits) go back, capped at capacity.
    let back = [op(t, "k:l", 100, DAY, -12), op(t, "t", 17, DAY, -100)];
    let o = s.debit(&back).await.unwrap();
    assert!(o.levels[0] >= 99.0 && o.levels[0] < 99.01, "{:?}", o.levels);
    assert_eq!(o.levels[1], 17.0);
}

async fn empty_request_is_admitted<S: Store>(s: &S) {
    let o = s.check_and_take(&[]).await.unwrap();
    assert_eq!(o.denied, None);
    assert!(o.levels.is_empty());
}

fn slot(t: &str, mode: SlotMode, id: &str, caps: (u64, u64), ttl_ms: u64) -> SlotOp {
    SlotOp {
        mode,
        sets: vec![(key_slots(t, "a"), caps.0), (tenant_slots(t), caps.1)],
        slot: id.to_string(),
        ttl_ms,
    }
}

async fn slots_are_taken_in_every_set_or_none_and_expire<S: Store>(s: &S, t: &str) {
    use SlotMode::{Acquire, Count, Release, Renew};
    let take = |id: &str, ttl| slot(t, Acquire, id, (2, 3), ttl);
    let o = s.slots(&take("s1", 60_000)).await.unwrap();
    assert_eq!((o.denied, o.counts), (None, vec![1, 1]));
    assert_eq!(s.slots(&take("s2", 300)).await.unwrap().denied, None);
    // The key's set is full: refused, and the tenant's set not written.
    let o = s.slots(&take("s3", 60_000)).await.unwrap();
    assert_eq!((o.denied, o.counts), (Some(0), vec![2, 2]));
    // Another key of the tenant: the tenant's set takes one more, then no.
    let other = |id: &str| SlotOp {
        sets: vec![(key_slots(t, "b"), 5), (tenant_slots(t), 3)],
        ..slot(t, Acquire, id, (0, 0), 60_000)
    };
    assert_eq!(s.slots(&other("s4")).await.unwrap().denied, None);
    assert_eq!(s.slots(&other("s5")).await.unwrap().denied, Some(1));
    // Release: gone from both sets; a second release finds nothing.
    let o = s.slots(&slot(t, Release, "s1", (0, 0), 0)).await.unwrap();
    assert_eq!(o.counts, vec![1, 1]);
    let o = s.slots(&slot(t, Release, "s1", (0, 0), 0)).await.unwrap();
    assert_eq!(o.counts, vec![0, 0]);
    // s2 (300 ms) expires unless renewed: renewed once, then left alone.
    let o = s.slots(&slot(t, Renew, "s2", (0, 0), 300)).await.unwrap();
    assert_eq!(o.counts, vec![1, 1]);
    let o = s.slots(&slot(t, Count, "", (0, 0), 0)).await.unwrap();
    assert_eq!((o.denied, o.counts), (None, vec![1, 2]));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let o = s.slots(&slot(t, Count, "", (0, 0), 0)).await.unwrap();
    assert_eq!(o.counts, vec![0, 1], "s2 expired; s4 of key b holds");
    // An expired slot is not renewed back.
    let o = s.slots(&slot(t, Renew, "s2", (0, 0), 300)).await.unwrap();
    assert_eq!(o.counts, vec![0, 0]);
    assert_eq!(s.slots(&take("s6", 60_000)).await.unwrap().denied, None);
}

async fn suite<S: Store>(s: Arc<S>) {
    admits_capacity_then_refuses(&*s, "t1").await;
    refused_request_takes_nothing(&*s, "t2").await;
    token_bucket_admits_while_positive_and_debits_negative(&*s, "t3").await;
    day_window(&*s, "t4").await;
    buckets_are_independent(&*s, "t5").await;
    refills_continuously(&*s, "t6").await;
    concurrent_requests_admit_exactly_capacity(s.clone(), "t7").await;
    leases_are_granted_with_the_take_and_refunds_capped(&*s, "t8").await;
    empty_request_is_admitted(&*s).await;
    slots_are_taken_in_every_set_or_none_and_expire(&*s, "t9").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_behaviour() {
    suite(Arc::new(MemoryStore::new(SystemClock))).await;
}

fn redis_store(url: &str) -> RedisStore {
    let mut cfg = RedisStoreConfig::new(url);
    cfg.timeout = Duration::from_millis(500);
    RedisStore::new(&cfg).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_behaviour() {
    let redis = RedisServer::start();
    let store = redis_store(&redis.url());
    store.load_script().await.unwrap();
    suite(Arc::new(store)).await;

    // Every key the suite wrote carries a TTL.
    let keys = redis.cli(&["KEYS", "tg:*"]);
    assert!(!keys.is_empty());
    for k in keys.lines() {
        let ttl: i64 = redis.cli(&["PTTL", k]).parse().unwrap();
        assert!(ttl > 0, "{k} has no TTL ({ttl})");
    }
    // Token buckets at Check time (take 0) are never written.
    assert_eq!(
        redis.cli(&["EXISTS", "tg:{t3}:tm:k:a"]),
        "1",
        "written by the debit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_reloads_script_after_flush() {
    let redis = RedisServer::start();
    let store = redis_store(&redis.url());
    let ops = [op("flush", "k:a", 5, MIN, 1)];
    // Never loaded: NOSCRIPT, load, retry once.
    assert_eq!(store.check_and_take(&ops).await.unwrap().denied, None);
    assert_eq!(redis.cli(&["SCRIPT", "EXISTS", store.script_sha()]), "1");
    assert_eq!(redis.cli(&["SCRIPT", "FLUSH"]), "OK");
    let o = store.check_and_take(&ops).await.unwrap();
    assert_eq!(o.denied, None);
    assert!(
        o.levels[0] >= 3.0 && o.levels[0] < 3.1,
        "level {}",
        o.levels[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_reports_errors_when_down_and_recovers() {
    let mut redis = RedisServer::start();
    let port = redis.port;
    let store = redis_store(&redis.url());
    let ops = [op("down", "k:a", 5, MIN, 1)];
    assert!(store.check_and_take(&ops).await.is_ok());
    redis.kill();
    assert!(store.check_and_take(&ops).await.is_err());
    let _redis = RedisServer::start_on(port);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(o) = store.check_and_take(&ops).await {
            // A fresh Redis: the bucket starts full again.
            assert_eq!(o.denied, None);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "store did not recover"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_store_behaviour() {
    let cluster = common::RedisCluster::start();
    let store = redis_store(&cluster.url());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while store.load_script().await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "cluster client never connected"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let store = Arc::new(store);
    suite(store.clone()).await;
    // The suite's tenants hash to different slots, so keys landed on more
    // than one node; every request still ran as one script on one node.
    let nodes_with_keys = cluster
        .nodes
        .iter()
        .filter(|n| n.cli(&["DBSIZE"]) != "0")
        .count();
    assert!(nodes_with_keys >= 2, "keys on {nodes_with_keys} node(s)");
    // One request's keys share a slot: key + tenant buckets of tenant t2,
    // and its concurrency sets.
    let a = cluster.nodes[0].cli(&["CLUSTER", "KEYSLOT", "tg:{t2}:rm:k:a"]);
    let b = cluster.nodes[0].cli(&["CLUSTER", "KEYSLOT", "tg:{t2}:rm:t"]);
    let c = cluster.nodes[0].cli(&["CLUSTER", "KEYSLOT", &key_slots("t2", "a")]);
    let d = cluster.nodes[0].cli(&["CLUSTER", "KEYSLOT", &tenant_slots("t2")]);
    assert_eq!((&a, &a, &a), (&b, &c, &d));
    // NOSCRIPT on the node that owns the slot: reloaded and retried.
    for n in &cluster.nodes {
        n.cli(&["SCRIPT", "FLUSH"]);
    }
    assert!(store
        .check_and_take(&[op("after-flush", "k:a", 2, MIN, 1)])
        .await
        .unwrap()
        .denied
        .is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_bounds_calls_in_flight() {
    let redis = RedisServer::start();
    let mut cfg = RedisStoreConfig::new(redis.url());
    cfg.timeout = Duration::from_millis(50);
    cfg.max_in_flight = 1;
    let store = RedisStore::new(&cfg).unwrap();
    store.load_script().await.unwrap();
    let ops = [op("busy", "k:a", 5, MIN, 1)];
    // Redis stalls for 600 ms.
    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "600", "ALL"]), "OK");
    assert_eq!(
        store.check_and_take(&ops).await,
        Err(tollgate_authz::storage::StoreError::Timeout)
    );
    // The timed-out call still occupies the only slot until Redis answers.
    assert_eq!(
        store.check_and_take(&ops).await,
        Err(tollgate_authz::storage::StoreError::Overloaded)
    );
    // Once Redis resumes and answers, the slot frees up.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let o = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        match store.check_and_take(&ops).await {
            Ok(o) => break o,
            Err(e) => assert!(std::time::Instant::now() < deadline, "still failing: {e}"),
        }
    };
    assert_eq!(o.denied, None);
    // The stalled call ran once Redis resumed (it was sent): 5 - 2 = 3 left,
    // plus under a second of refill at 5/min.
    assert!(
        o.levels[0] >= 3.0 && o.levels[0] < 3.1,
        "level {}",
        o.levels[0]
    );
}

/// A Redis that answered in the last second is busy, not down: a call waits
/// past `timeout`, up to `busy_timeout`, instead of failing (and failing
/// open) because a burst slowed Redis or this process down. A Redis silent
/// for over a second is held to `timeout` again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_waits_for_a_busy_redis_not_a_silent_one() {
    let redis = RedisServer::start();
    let mut cfg = RedisStoreConfig::new(redis.url());
    cfg.timeout = Duration::from_millis(20);
    cfg.busy_timeout = Duration::from_secs(1);
    let store = RedisStore::new(&cfg).unwrap();
    store.load_script().await.unwrap();
    let ops = [op("slow", "k:a", 100, MIN, 1)];
    assert_eq!(store.check_and_take(&ops).await.unwrap().denied, None);

    // Redis stalls for 200 ms just after answering: waited for.
    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "200", "ALL"]), "OK");
    let o = store
        .check_and_take(&ops)
        .await
        .expect("a busy Redis is waited for");
    assert_eq!(o.denied, None);

    // No answer for over a second, then a stall: the call ends at its own
    // 20 ms deadline, not the busy one.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "1500", "ALL"]), "OK");
    let t = std::time::Instant::now();
    assert_eq!(
        store.check_and_take(&ops).await,
        Err(tollgate_authz::storage::StoreError::Timeout)
    );
    assert!(
        t.elapsed() < Duration::from_millis(700),
        "a silent Redis was waited for {:?}",
        t.elapsed()
    );
}
