//! Redis bucket store: one Lua script (`bucket.lua`) decides all buckets of a
//! request in one round trip, on Redis's clock, so any number of authz
//! instances sharing one Redis (or one Redis Cluster) enforce one limit.
//!
//! Trade-off: every call waits at most `timeout` (a few ms) while Redis is
//! silent. When Redis answered any call in the last second it is busy, not
//! down: a call then waits up to `busy_timeout` instead, so a burst that
//! saturates the machine's cores (and with them Redis and this service's
//! own scheduler) waits instead of failing open. Past that, or on any Redis
//! error, the call fails and the caller applies the tenant's failure policy
//! (fail-open by default). After a connection-level error the
//! store answers "unavailable" at once for `breaker` (default 250 ms) instead
//! of queueing every request behind a reconnect; the first call after that
//! window probes Redis again. The connection itself reconnects on its own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus::IntCounterVec;
use redis::aio::ConnectionManager;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};
use tokio::sync::{OnceCell, Semaphore};

use super::{BucketOp, Outcome, SlotMode, SlotOp, SlotOutcome, Store, StoreError};

/// The Lua script, with its KEYS/ARGV contract at its top.
pub const BUCKET_LUA: &str = include_str!("bucket.lua");
/// The money budgets' script (spend counters), contract at its top.
pub const SPEND_LUA: &str = include_str!("spend.lua");
/// The concurrency slots' script, contract at its top.
pub const SLOTS_LUA: &str = include_str!("slots.lua");

/// How to reach Redis.
#[derive(Debug, Clone)]
pub struct RedisStoreConfig {
    /// `redis://host:port[/db]` for one Redis, or
    /// `redis+cluster://host1:port1,host2:port2` for Redis Cluster.
    pub url: String,
    /// Deadline for one call, script reload included, while Redis has not
    /// answered anything in the last second.
    pub timeout: Duration,
    /// Deadline for one call while Redis answers other calls (it is busy,
    /// not down): at least `timeout`.
    pub busy_timeout: Duration,
    /// How long to skip Redis after a connection-level error.
    pub breaker: Duration,
    /// Most Redis calls in flight at once; past it a call fails at once
    /// (`StoreError::Overloaded`) instead of queueing behind a slow Redis.
    pub max_in_flight: usize,
}

impl RedisStoreConfig {
    pub fn new(url: impl Into<String>) -> Self {
        RedisStoreConfig {
            url: url.into(),
            timeout: Duration::from_millis(crate::defaults::REDIS_TIMEOUT_MS),
            busy_timeout: Duration::from_millis(crate::defaults::REDIS_BUSY_TIMEOUT_MS),
            breaker: Duration::from_millis(250),
            max_in_flight: crate::defaults::REDIS_MAX_IN_FLIGHT,
        }
    }
}

#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(Arc<OnceCell<ClusterConnection>>),
}

impl Conn {
    async fn query(&self, cmd: &redis::Cmd) -> Result<Value, RedisError> {
        match self {
            Conn::Single(cm) => {
                let mut c = cm.clone();
                cmd.query_async(&mut c).await
            }
            Conn::Cluster(cell) => match cell.get() {
                Some(c) => {
                    let mut c = c.clone();
                    cmd.query_async(&mut c).await
                }
                None => Err(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "redis cluster not connected yet",
                ))),
            },
        }
    }

    /// EVALSHA; on NOSCRIPT (Redis restarted, SCRIPT FLUSH) load the script
    /// again and retry once. Every round trip is counted under `op`.
    async fn evalsha(
        &self,
        cmd: &redis::Cmd,
        calls: &Option<IntCounterVec>,
        op: &str,
        lua: &'static str,
    ) -> Result<Value, RedisError> {
        let count = |op: &str| {
            if let Some(c) = calls {
                c.with_label_values(&[op]).inc();
            }
        };
        count(op);
        match self.query(cmd).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                let mut load = redis::cmd("SCRIPT");
                load.arg("LOAD").arg(lua);
                count("script_load");
                self.query(&load).await?;
                count(op);
                self.query(cmd).await
            }
            r => r,
        }
    }
}

pub struct RedisStore {
    conn: Conn,
    sha: String,
    spend_sha: String,
    slots_sha: String,
    timeout: Duration,
    busy_timeout: Duration,
    breaker: Duration,
    started: Instant,
    /// Milliseconds since `started` of Redis's last answer (0: none yet).
    answered_at: AtomicU64,
    /// Milliseconds since `started` until which Redis is skipped.
    down_until: AtomicU64,
    /// Bounds calls in flight; a permit is held until Redis answers, even
    /// after the caller gave up at its deadline.
    in_flight: Arc<Semaphore>,
    /// `tollgate_authz_redis_calls_total{op}`, when the service counts.
    calls: Option<IntCounterVec>,
}

fn to_store_error(e: &RedisError) -> StoreError {
    if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() {
        StoreError::Unavailable(e.to_string())
    } else {
        StoreError::Protocol(e.to_string())
    }
}

impl RedisStore {
    /// Create the store. Never waits for Redis: the connection is made in
    /// the background and on first use, so the service starts (and
    /// authenticates) while Redis is still down.
    pub fn new(cfg: &RedisStoreConfig) -> Result<RedisStore, StoreError> {
        let sha = redis::Script::new(BUCKET_LUA).get_hash().to_string();
        let conn = if let Some(nodes) = cfg.url.strip_prefix("redis+cluster://") {
            let nodes: Vec<String> = nodes.split(',').map(|n| format!("redis://{n}")).collect();
            let client = ClusterClient::builder(nodes)
                .connection_timeout(Duration::from_secs(1))
                .response_timeout(Duration::from_secs(1))
                .build()
                .map_err(|e| StoreError::Unavailable(format!("invalid redis cluster url: {e}")))?;
            let cell = Arc::new(OnceCell::new());
            let bg = cell.clone();
            tokio::spawn(async move {
                let mut delay = Duration::from_millis(50);
                loop {
                    match client.get_async_connection().await {
                        Ok(c) => {
                            let _ = bg.set(c);
                            tracing::info!("connected to redis cluster");
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "redis cluster not reachable yet; retrying");
                            tokio::time::sleep(delay).await;
                            delay = (delay * 2).min(Duration::from_secs(2));
                        }
                    }
                }
            });
            Conn::Cluster(cell)
        } else {
            let client = redis::Client::open(cfg.url.as_str())
                .map_err(|e| StoreError::Unavailable(format!("invalid redis url: {e}")))?;
            let mc = redis::aio::ConnectionManagerConfig::new()
                .set_connection_timeout(Some(Duration::from_secs(1)))
                .set_response_timeout(Some(Duration::from_secs(1)))
                .set_number_of_retries(2)
                .set_min_delay(Duration::from_millis(20))
                .set_max_delay(Duration::from_millis(500));
            let cm = ConnectionManager::new_lazy_with_config(client, mc)
                .map_err(|e| StoreError::Unavailable(format!("redis: {e}")))?;
            Conn::Single(cm)
        };
        Ok(RedisStore {
            conn,
            sha,
            spend_sha: redis::Script::new(SPEND_LUA).get_hash().to_string(),
            slots_sha: redis::Script::new(SLOTS_LUA).get_hash().to_string(),
            timeout: cfg.timeout,
            busy_timeout: cfg.busy_timeout.max(cfg.timeout),
            breaker: cfg.breaker,
            started: Instant::now(),
            answered_at: AtomicU64::new(0),
            down_until: AtomicU64::new(0),
            in_flight: Arc::new(Semaphore::new(cfg.max_in_flight.max(1))),
            calls: None,
        })
    }

    /// Count every Redis round trip in `calls` (label `op`: `check`,
    /// `debit`, `script_load`).
    pub fn with_call_counter(mut self, calls: IntCounterVec) -> Self {
        self.calls = Some(calls);
        self
    }

    /// SHA-1 of the script (what EVALSHA sends).
    pub fn script_sha(&self) -> &str {
        &self.sha
    }

    /// SCRIPT LOAD (on every node of a cluster).
    pub async fn load_script(&self) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(BUCKET_LUA);
        if let Some(c) = &self.calls {
            c.with_label_values(&["script_load"]).inc();
        }
        let fut = self.conn.query(&cmd);
        match tokio::time::timeout(Duration::from_secs(2), fut).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(to_store_error(&e)),
            Err(_) => Err(StoreError::Timeout),
        }
    }

    /// `spend.lua`'s call: with a rolling window among the counters, the
    /// older slots follow the counters' keys and each counter carries the
    /// number of its older slots (mode `take+r`, `debit+r`).
    fn spend_command(&self, ops: &[BucketOp], mode: &str) -> redis::Cmd {
        let older: Vec<Vec<String>> = ops
            .iter()
            .map(|o| crate::rolling::older_keys(&o.key).unwrap_or_default())
            .collect();
        if older.iter().all(Vec::is_empty) {
            return self.command(ops, mode, &self.spend_sha);
        }
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&self.spend_sha)
            .arg(ops.len() + older.iter().map(Vec::len).sum::<usize>());
        for op in ops {
            cmd.arg(&op.key);
        }
        for keys in &older {
            cmd.arg(keys);
        }
        cmd.arg(format!("{mode}+r"));
        for (op, keys) in ops.iter().zip(&older) {
            cmd.arg(op.spec.capacity)
                .arg(op.spec.window_ms)
                .arg(op.take)
                .arg(op.lease)
                .arg(keys.len());
        }
        cmd
    }

    fn command(&self, ops: &[BucketOp], mode: &str, sha: &str) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(sha).arg(ops.len());
        for op in ops {
            cmd.arg(&op.key);
        }
        cmd.arg(mode);
        for op in ops {
            cmd.arg(op.spec.capacity)
                .arg(op.spec.window_ms)
                .arg(op.take)
                .arg(op.lease);
        }
        cmd
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Redis answered a call in the last second: a slow call means a busy
    /// Redis (or a busy machine), not a dead one.
    fn answered_lately(&self) -> bool {
        let at = self.answered_at.load(Ordering::Relaxed);
        at != 0 && self.now_ms().saturating_sub(at) <= 1000
    }

    async fn run(&self, ops: &[BucketOp], mode: &str) -> Result<Outcome, StoreError> {
        let op = if mode == "take" { "check" } else { "debit" };
        self.run_script(ops, mode, op, BUCKET_LUA, &self.sha).await
    }

    async fn run_script(
        &self,
        ops: &[BucketOp],
        mode: &str,
        op: &'static str,
        lua: &'static str,
        sha: &str,
    ) -> Result<Outcome, StoreError> {
        if ops.is_empty() {
            return Ok(Outcome {
                denied: None,
                levels: Vec::new(),
                granted: Vec::new(),
            });
        }
        let cmd = if lua == SPEND_LUA {
            self.spend_command(ops, mode)
        } else {
            self.command(ops, mode, sha)
        };
        let value = self.call(cmd, op, lua).await?;
        // Bucket levels come in thousandths, spend counters in whole units.
        let per_unit = if lua == BUCKET_LUA { 1000.0 } else { 1.0 };
        parse_outcome(value, ops.len(), per_unit)
    }

    /// `slots.lua`'s call for `op`.
    async fn run_slots(&self, op: &SlotOp) -> Result<SlotOutcome, StoreError> {
        let n = op.sets.len();
        if n == 0 {
            return Ok(SlotOutcome {
                denied: None,
                counts: Vec::new(),
            });
        }
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&self.slots_sha).arg(n);
        for (key, _) in &op.sets {
            cmd.arg(key);
        }
        cmd.arg(op.mode.as_str()).arg(&op.slot).arg(op.ttl_ms);
        for (_, cap) in &op.sets {
            cmd.arg(*cap);
        }
        let name = match op.mode {
            SlotMode::Acquire => "slot_acquire",
            SlotMode::Release => "slot_release",
            SlotMode::Renew => "slot_renew",
            SlotMode::Count => "slot_count",
        };
        let value = self.call(cmd, name, SLOTS_LUA).await?;
        let ints = reply_ints(value, n + 1)?;
        Ok(SlotOutcome {
            denied: denied_index(ints[0], n, "set")?,
            counts: ints[1..].iter().map(|&c| c.max(0) as u64).collect(),
        })
    }

    /// One script call (`cmd`, an EVALSHA of `lua`) within the deadlines,
    /// counted under `op`: the reply, or the error (a connection error
    /// opens the breaker).
    async fn call(
        &self,
        cmd: redis::Cmd,
        op: &'static str,
        lua: &'static str,
    ) -> Result<Value, StoreError> {
        if self.now_ms() < self.down_until.load(Ordering::Relaxed) {
            return Err(StoreError::Unavailable(
                "redis marked down after an error; retrying shortly".into(),
            ));
        }
        let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
            return Err(StoreError::Overloaded);
        };
        let conn = self.conn.clone();
        let calls = self.calls.clone();
        // The call runs in its own task holding the permit, so a caller that
        // gives up at its deadline still counts until Redis has answered.
        let mut call = tokio::spawn(async move {
            let r = conn.evalsha(&cmd, &calls, op, lua).await;
            drop(permit);
            r
        });
        let mut answer = tokio::time::timeout(self.timeout, &mut call).await;
        if answer.is_err() && self.answered_lately() {
            // Busy, not down: the rest of the busy deadline.
            let rest = self.busy_timeout.saturating_sub(self.timeout);
            answer = tokio::time::timeout(rest, &mut call).await;
        }
        let value = match answer {
            Err(_) => return Err(StoreError::Timeout),
            Ok(Err(join)) => {
                return Err(StoreError::Protocol(format!(
                    "redis call task failed: {join}"
                )))
            }
            Ok(Ok(r)) => r,
        };
        match value {
            Err(e) => {
                let err = to_store_error(&e);
                if matches!(err, StoreError::Unavailable(_)) {
                    let until = self.now_ms() + self.breaker.as_millis() as u64;
                    self.down_until.store(until, Ordering::Relaxed);
                }
                Err(err)
            }
            Ok(v) => {
                self.answered_at
                    .store(self.now_ms().max(1), Ordering::Relaxed);
                Ok(v)
            }
        }
    }
}

/// A script's reply: exactly `len` integers.
fn reply_ints(value: Value, len: usize) -> Result<Vec<i64>, StoreError> {
    let items = match value {
        Value::Array(items) if items.len() == len => items,
        other => {
            return Err(StoreError::Protocol(format!(
                "unexpected script reply {other:?}"
            )))
        }
    };
    let mut ints = Vec::with_capacity(items.len());
    for item in items {
        match item {
            Value::Int(i) => ints.push(i),
            other => {
                return Err(StoreError::Protocol(format!(
                    "unexpected script reply item {other:?}"
                )))
            }
        }
    }
    Ok(ints)
}

/// A script's first reply value: 0 (nothing refused) or the 1-based index
/// of the first refusing one of `n` (`what`: bucket, set).
fn denied_index(i: i64, n: usize, what: &str) -> Result<Option<usize>, StoreError> {
    match i {
        0 => Ok(None),
        i if i >= 1 && (i as usize) <= n => Ok(Some(i as usize - 1)),
        i => Err(StoreError::Protocol(format!(
            "script refused {what} {i} of {n}"
        ))),
    }
}

fn parse_outcome(value: Value, n: usize, per_unit: f64) -> Result<Outcome, StoreError> {
    let ints = reply_ints(value, 2 * n + 1)?;
    Ok(Outcome {
        denied: denied_index(ints[0], n, "bucket")?,
        levels: ints[1..=n].iter().map(|&m| m as f64 / per_unit).collect(),
        granted: ints[n + 1..].iter().map(|&g| g.max(0) as u64).collect(),
    })
}

impl Store for RedisStore {
    async fn check_and_take(&self, ops: &[BucketOp]) -> Result<Outcome, StoreError> {
        self.run(ops, "take").await
    }

    async fn debit(&self, ops: &[BucketOp]) -> Result<Outcome, StoreError> {
        self.run(ops, "debit").await
    }

    async fn spend_take(&self, ops: &[BucketOp]) -> Result<Outcome, StoreError> {
        self.run_script(ops, "take", "spend_check", SPEND_LUA, &self.spend_sha)
            .await
    }

    async fn spend_debit(&self, ops: &[BucketOp]) -> Result<Outcome, StoreError> {
        self.run_script(ops, "debit", "spend_debit", SPEND_LUA, &self.spend_sha)
            .await
    }

    async fn slots(&self, op: &SlotOp) -> Result<SlotOutcome, StoreError> {
        self.run_slots(op).await
    }
}
