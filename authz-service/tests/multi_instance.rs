//! Two service instances sharing one Redis enforce one global limit: a limit
//! of N admits N in total (± one refill's worth), never N per instance.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use crate::common::{check_key, client, http_status, start_service, temp_policy, RedisServer};
use tollgate_authz::policy::hash_key;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_one_limit() {
    const N: u32 = 30;
    let yaml = format!(
        "version: 1\ntenants:\n  shared: {{}}\nkeys:\n  - id: k\n    tenant: shared\n    sha256: {}\n    limits:\n      requests_per_minute: {N}\n",
        hash_key("tg-shared")
    );
    let (_dir, path) = temp_policy(&yaml);
    let redis = RedisServer::start();
    let a = start_service(&path, &redis.url()).await;
    let b = start_service(&path, &redis.url()).await;

    // 3N requests, half through each instance, all concurrently.
    let (ca, cb) = (client(&a).await, client(&b).await);
    let mut tasks = Vec::new();
    for i in 0..(3 * N) {
        let mut c = if i % 2 == 0 { ca.clone() } else { cb.clone() };
        tasks.push(tokio::spawn(async move {
            http_status(&check_key(&mut c, "tg-shared").await.unwrap())
        }));
    }
    let mut admitted = 0;
    let mut refused = 0;
    for t in tasks {
        match t.await.unwrap() {
            200 => admitted += 1,
            429 => refused += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    // 30 per minute refills one unit every 2 s; the test takes well under
    // that, so at most one extra admission.
    assert!(
        (N..=N + 1).contains(&admitted),
        "admitted {admitted} of {} (limit {N})",
        3 * N
    );
    assert_eq!(admitted + refused, 3 * N);

    // Both instances counted Redis decisions, and none failed open.
    for s in [&a, &b] {
        let text = s.authorizer.metrics().render();
        assert_eq!(common::metric(&text, "tollgate_authz_fail_open_total"), 0.0);
    }
    a.shutdown().await;
    b.shutdown().await;
}
