//! Defaults of `tollgate-authz serve`: the flags, [`crate::server::ServeConfig::new`]
//! and [`crate::storage::RedisStoreConfig::new`] all read them; nothing else
//! states them.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

pub const GRPC_LISTEN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9100));
pub const HTTP_LISTEN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9101));
/// The admin API (on only with `--admin-token-file`).
pub const ADMIN_LISTEN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9102));
/// How often the admin API's keys are polled for changes.
pub const KEYS_POLL_MS: u64 = 200;
pub const REDIS_URL: &str = "redis://127.0.0.1:6390";
pub const REDIS_TIMEOUT_MS: u64 = 10;
/// A Redis that answered in the last second is busy, not down: its
/// calls may take this long (a connection burst saturates the cores).
pub const REDIS_BUSY_TIMEOUT_MS: u64 = 250;
pub const REDIS_MAX_IN_FLIGHT: usize = 256;
pub const RELOAD_INTERVAL_MS: u64 = 500;
/// A concurrency slot lives this long after it was taken or last renewed
/// (a dead gateway's slots come back within it).
pub const SLOT_TTL_MS: u64 = 30_000;
/// The shortest `--slot-ttl-ms` (the filter renews every third of it).
pub const SLOT_TTL_MIN_MS: u64 = 1_000;
