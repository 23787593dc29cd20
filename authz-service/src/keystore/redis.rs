//! API keys in Redis (`keys.lua`, contract at its top): every authz
//! instance sharing the Redis (or Redis Cluster: one hash tag, one slot)
//! sees the same keys. Its own connection, apart from the bucket store's:
//! these calls are few (a poll every few hundred ms, the admin API's
//! writes) and may wait longer ([`CALL_TIMEOUT`]) than a Check would.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Script, Value};
use tokio::sync::OnceCell;

use super::{Changes, KeyStore, KeyStoreError};

/// The script, with its KEYS/ARGV contract at its top.
pub const KEYS_LUA: &str = include_str!("keys.lua");
/// The hash of every record.
pub const RECORDS: &str = "tg:{$keys}:records";
/// The version counter.
pub const VERSION: &str = "tg:{$keys}:version";
/// The version that last wrote each record.
pub const CHANGES: &str = "tg:{$keys}:changes";
/// Deadline of one call.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(Arc<OnceCell<ClusterConnection>>, Box<ClusterClient>),
}

pub struct RedisKeyStore {
    conn: Conn,
    script: Script,
}

fn unavailable(e: impl std::fmt::Display) -> KeyStoreError {
    KeyStoreError::Unavailable(e.to_string())
}

impl RedisKeyStore {
    /// `url` as `--redis-url` takes it. Never waits for Redis: connects on
    /// first use.
    pub fn new(url: &str) -> Result<RedisKeyStore, KeyStoreError> {
        let conn = if let Some(nodes) = url.strip_prefix("redis+cluster://") {
            let nodes: Vec<String> = nodes.split(',').map(|n| format!("redis://{n}")).collect();
            let client = ClusterClient::builder(nodes)
                .connection_timeout(Duration::from_secs(1))
                .response_timeout(CALL_TIMEOUT)
                .build()
                .map_err(unavailable)?;
            Conn::Cluster(Arc::new(OnceCell::new()), Box::new(client))
        } else {
            let client = redis::Client::open(url).map_err(unavailable)?;
            let mc = redis::aio::ConnectionManagerConfig::new()
                .set_connection_timeout(Some(Duration::from_secs(1)))
                .set_response_timeout(Some(CALL_TIMEOUT))
                .set_number_of_retries(1);
            Conn::Single(ConnectionManager::new_lazy_with_config(client, mc).map_err(unavailable)?)
        };
        Ok(RedisKeyStore {
            conn,
            script: Script::new(KEYS_LUA),
        })
    }

    /// Run the script with `args` (EVALSHA, loaded again on NOSCRIPT).
    async fn call(&self, args: &[&str]) -> Result<Value, KeyStoreError> {
        let mut inv = self.script.prepare_invoke();
        inv.key(RECORDS).key(VERSION).key(CHANGES);
        for a in args {
            inv.arg(*a);
        }
        let fut = async {
            match &self.conn {
                Conn::Single(cm) => inv.invoke_async(&mut cm.clone()).await,
                Conn::Cluster(cell, client) => {
                    let c = cell
                        .get_or_try_init(|| client.get_async_connection())
                        .await?;
                    inv.invoke_async(&mut c.clone()).await
                }
            }
        };
        match tokio::time::timeout(CALL_TIMEOUT, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(unavailable(e)),
            Err(_) => Err(unavailable("timed out")),
        }
    }
}

fn int(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        _ => None,
    }
}

fn text(v: Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

impl KeyStore for RedisKeyStore {
    async fn since(&self, seen: u64) -> Result<Changes, KeyStoreError> {
        let reply = self.call(&["since", &seen.to_string()]).await?;
        let Value::Array(items) = reply else {
            return Err(unavailable(format!("unexpected reply {reply:?}")));
        };
        let mut items = items.into_iter();
        let (Some(version), Some(full)) = (
            items.next().as_ref().and_then(int),
            items.next().as_ref().and_then(int),
        ) else {
            return Err(unavailable("unexpected reply to since"));
        };
        Ok(Changes {
            version,
            full: full == 1,
            records: items.filter_map(text).collect(),
        })
    }

    async fn get(&self, id: &str) -> Result<Option<String>, KeyStoreError> {
        match self.call(&["get", id]).await? {
            Value::Nil => Ok(None),
            v => text(v)
                .map(Some)
                .ok_or_else(|| unavailable("unexpected reply to get")),
        }
    }

    async fn put(&self, id: &str, read: Option<&str>, new: &str) -> Result<u64, KeyStoreError> {
        let reply = self.call(&["put", id, read.unwrap_or(""), new]).await?;
        match int(&reply) {
            Some(0) => Err(KeyStoreError::Conflict),
            Some(v) => Ok(v),
            None => Err(unavailable(format!("unexpected reply {reply:?}"))),
        }
    }
}
