//! Wiring: bind the gRPC, HTTP and admin listeners, start the reloader and
//! the admin API's key sync, serve until shut down. Used by the binary and by the integration tests (which bind
//! `127.0.0.1:0`).

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;

use crate::admin::{AdminState, AdminToken};
use crate::authz::Authorizer;
use crate::defaults;
use crate::keystore::{AnyKeyStore, MemoryKeyStore, RedisKeyStore};
use crate::keysync::KeySync;
use crate::metrics::Metrics;
use crate::policy::Policy;
use crate::reload::Reloader;
use crate::service::AuthzService;
use crate::sources::Sources;
use crate::storage::{AnyStore, MemoryStore, RedisStore, RedisStoreConfig, SystemClock};
use crate::usage_token::UsageToken;

#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub policy_path: PathBuf,
    pub grpc_listen: SocketAddr,
    /// Also serve gRPC on this Unix domain socket (an Envoy on the same
    /// host can skip loopback TCP); the file is replaced at start.
    pub grpc_uds: Option<PathBuf>,
    pub http_listen: SocketAddr,
    /// `memory://` keeps buckets in this process only.
    pub redis_url: String,
    pub redis_timeout: Duration,
    pub redis_busy_timeout: Duration,
    /// Most Redis calls in flight; past it the failure mode applies at once.
    pub redis_max_in_flight: usize,
    pub reload_interval: Duration,
    /// The token `POST /v1/usage` requires in
    /// [`tollgate_wire::header::USAGE_TOKEN`]; `None` accepts any caller
    /// (development only: anyone who reaches the port can charge a tenant).
    pub usage_token: Option<UsageToken>,
    /// How long a concurrency slot lives after it was taken or renewed.
    pub slot_ttl: Duration,
    /// The admin API's address (served only with `admin_token`).
    pub admin_listen: SocketAddr,
    /// The token the admin API requires; `None`: the admin API is off.
    pub admin_token: Option<AdminToken>,
    /// How often the admin API's keys are polled for changes.
    pub keys_poll: Duration,
}

impl ServeConfig {
    pub fn new(policy_path: impl Into<PathBuf>) -> Self {
        ServeConfig {
            policy_path: policy_path.into(),
            grpc_listen: defaults::GRPC_LISTEN,
            grpc_uds: None,
            http_listen: defaults::HTTP_LISTEN,
            redis_url: defaults::REDIS_URL.to_string(),
            redis_timeout: Duration::from_millis(defaults::REDIS_TIMEOUT_MS),
            redis_busy_timeout: Duration::from_millis(defaults::REDIS_BUSY_TIMEOUT_MS),
            redis_max_in_flight: defaults::REDIS_MAX_IN_FLIGHT,
            reload_interval: Duration::from_millis(defaults::RELOAD_INTERVAL_MS),
            usage_token: None,
            slot_ttl: Duration::from_millis(defaults::SLOT_TTL_MS),
            admin_listen: defaults::ADMIN_LISTEN,
            admin_token: None,
            keys_poll: Duration::from_millis(defaults::KEYS_POLL_MS),
        }
    }
}

/// A started service.
pub struct Running {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    /// The admin API's address, when it is on.
    pub admin_addr: Option<SocketAddr>,
    pub authorizer: Arc<Authorizer<AnyStore>>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// Stop serving (in-flight requests finish) and wait for every task.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }

    /// Serve until `signal` resolves, then shut down gracefully.
    pub async fn run_until(self, signal: impl std::future::Future<Output = ()>) {
        signal.await;
        self.shutdown().await;
    }
}

async fn wait_shutdown(mut rx: watch::Receiver<bool>) {
    while !*rx.borrow() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// ext_authz Check and grpc.health.v1 (SERVING), ready to serve on a listener.
async fn grpc_router(authz: &Arc<Authorizer<AnyStore>>) -> tonic::transport::server::Router {
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<envoy_types::pb::envoy::service::auth::v3::authorization_server::AuthorizationServer<AuthzService<AnyStore>>>()
        .await;
    tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(AuthzService::new(authz.clone()).into_server())
}

/// Run a server to its end, logging `what` if it fails.
async fn logged<E: std::fmt::Display>(
    server: impl std::future::Future<Output = Result<(), E>>,
    what: &'static str,
) {
    if let Err(e) = server.await {
        tracing::error!(error = %e, "{what}");
    }
}

/// The store `cfg.redis_url` names: in memory (`memory://`) or Redis.
async fn open_store(cfg: &ServeConfig, metrics: &Metrics) -> Result<AnyStore, String> {
    if cfg.redis_url.starts_with("memory:") {
        tracing::warn!("using the in-memory store: limits apply per process, not globally");
        return Ok(AnyStore::Memory(MemoryStore::new(SystemClock)));
    }
    let mut rc = RedisStoreConfig::new(cfg.redis_url.clone());
    rc.timeout = cfg.redis_timeout;
    rc.busy_timeout = cfg.redis_busy_timeout;
    rc.max_in_flight = cfg.redis_max_in_flight;
    let s = RedisStore::new(&rc)
        .map_err(|e| e.to_string())?
        .with_call_counter(metrics.redis_calls.clone());
    // SCRIPT LOAD once up front; EVALSHA reloads on NOSCRIPT anyway.
    if let Err(e) = s.load_script().await {
        tracing::warn!(error = %e, "could not load the bucket script yet (redis down?); will load on first use");
    }
    Ok(AnyStore::Redis(s))
}

/// Bind the gRPC listeners (ext_authz Check and grpc.health.v1, on
/// `cfg.grpc_listen` and on `cfg.grpc_uds` when set) and the HTTP one
/// (`/healthz`, `/metrics`, `/v1/usage`), and serve each in a task until
/// `rx` says to stop: the bound gRPC and HTTP addresses.
async fn listen(
    cfg: &ServeConfig,
    authz: &Arc<Authorizer<AnyStore>>,
    rx: &watch::Receiver<bool>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Result<(SocketAddr, SocketAddr), String> {
    // gRPC: ext_authz Check + grpc.health.v1.
    let incoming = TcpIncoming::bind(cfg.grpc_listen)
        .map_err(|e| format!("cannot listen for gRPC on {}: {e}", cfg.grpc_listen))?
        .with_nodelay(Some(true));
    let grpc_addr = incoming.local_addr().map_err(|e| e.to_string())?;
    let grpc = grpc_router(authz)
        .await
        .serve_with_incoming_shutdown(incoming, wait_shutdown(rx.clone()));
    tasks.push(tokio::spawn(logged(grpc, "gRPC server failed")));
    if let Some(path) = &cfg.grpc_uds {
        // A socket left by an earlier run would make bind fail.
        let _ = std::fs::remove_file(path);
        let uds = tokio::net::UnixListener::bind(path)
            .map_err(|e| format!("cannot listen for gRPC on {}: {e}", path.display()))?;
        let grpc_uds = grpc_router(authz).await.serve_with_incoming_shutdown(
            tokio_stream::wrappers::UnixListenerStream::new(uds),
            wait_shutdown(rx.clone()),
        );
        tasks.push(tokio::spawn(logged(
            grpc_uds,
            "gRPC server (unix socket) failed",
        )));
    }

    // HTTP: /healthz, /metrics, /v1/usage.
    let listener = tokio::net::TcpListener::bind(cfg.http_listen)
        .await
        .map_err(|e| format!("cannot listen for HTTP on {}: {e}", cfg.http_listen))?;
    let http_addr = listener.local_addr().map_err(|e| e.to_string())?;
    if cfg.usage_token.is_none() {
        tracing::warn!(
            "no --usage-token-file: POST /v1/usage accepts reports from any caller that reaches {http_addr}"
        );
    }
    let app = crate::http::router(authz.clone(), cfg.usage_token.clone());
    let http = axum::serve(listener, app).with_graceful_shutdown(wait_shutdown(rx.clone()));
    tasks.push(tokio::spawn(logged(
        http.into_future(),
        "HTTP server failed",
    )));
    Ok((grpc_addr, http_addr))
}

/// The admin API's keys, in memory (`memory://`) or beside the buckets in
/// Redis.
fn open_key_store(cfg: &ServeConfig) -> Result<AnyKeyStore, String> {
    if cfg.redis_url.starts_with("memory:") {
        return Ok(AnyKeyStore::Memory(MemoryKeyStore::new()));
    }
    RedisKeyStore::new(&cfg.redis_url)
        .map(AnyKeyStore::Redis)
        .map_err(|e| e.to_string())
}

/// Serve the admin API on `cfg.admin_listen` when a token is set (else say
/// it is off): its bound address.
async fn admin(
    cfg: &ServeConfig,
    authz: &Arc<Authorizer<AnyStore>>,
    sync: &Arc<KeySync<AnyKeyStore, AnyStore>>,
    rx: &watch::Receiver<bool>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Result<Option<SocketAddr>, String> {
    let Some(token) = cfg.admin_token.clone() else {
        tracing::info!("admin API off: no --admin-token-file");
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(cfg.admin_listen)
        .await
        .map_err(|e| {
            format!(
                "cannot listen for the admin API on {}: {e}",
                cfg.admin_listen
            )
        })?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let state = Arc::new(AdminState {
        authz: authz.clone(),
        sync: sync.clone(),
        token,
        openapi: crate::admin::openapi_json()?,
    });
    let app = crate::admin::router(state);
    let serving = axum::serve(listener, app).with_graceful_shutdown(wait_shutdown(rx.clone()));
    tasks.push(tokio::spawn(logged(
        serving.into_future(),
        "admin API server failed",
    )));
    if !addr.ip().is_loopback() {
        tracing::warn!(%addr, "the admin API listens beyond loopback: only its token guards it");
    }
    Ok(Some(addr))
}

/// Every 250 ms until shut down: idle leases back to the store, queued
/// usage debits applied; then every lease back, so no unit is stranded.
async fn upkeep(authz: Arc<Authorizer<AnyStore>>, rx: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => authz.maintain().await,
            _ = wait_shutdown(rx.clone()) => break,
        }
    }
    // Shutting down: give every lease back so no unit is stranded.
    authz.leases().clear();
    authz.maintain().await;
}

/// Load the policy, bind both listeners and start serving in the background.
pub async fn start(cfg: ServeConfig) -> Result<Running, String> {
    let initial = std::fs::read(&cfg.policy_path)
        .map_err(|e| format!("cannot read policy file {}: {e}", cfg.policy_path.display()))?;
    let policy = Policy::from_yaml(&String::from_utf8_lossy(&initial))
        .map_err(|e| format!("invalid policy {}: {e}", cfg.policy_path.display()))?;
    let metrics = Arc::new(Metrics::new().map_err(|e| format!("metrics: {e}"))?);
    let store = open_store(&cfg, &metrics).await?;
    tracing::info!(
        keys = policy.key_count(),
        tenants = policy.tenant_count(),
        "policy loaded"
    );
    // A burst on a nearly empty bucket refills one Check at a time: give the
    // queue room beyond one busy Redis call (Envoy's ext_authz timeout, 2 s
    // in envoy.yaml, stays above it).
    let refill_wait =
        (cfg.redis_timeout.max(cfg.redis_busy_timeout) * 2).max(Duration::from_millis(100));
    let authz = Arc::new(
        Authorizer::new(policy, store, metrics)
            .with_refill_wait(refill_wait)
            .with_slot_ttl(cfg.slot_ttl.as_millis() as u64),
    );
    let (tx, rx) = watch::channel(false);
    let mut tasks = Vec::new();

    // The admin API's keys: read once before serving (briefly: a Redis
    // still down is retried by the poll), then polled.
    let sources = Arc::new(Sources::new(
        authz.clone(),
        String::from_utf8_lossy(&initial).into_owned(),
    ));
    let sync = Arc::new(KeySync::new(
        Arc::new(open_key_store(&cfg)?),
        sources.clone(),
    ));
    let _ = tokio::time::timeout(Duration::from_secs(1), sync.poll()).await;
    tasks.push(tokio::spawn(sync.clone().run(cfg.keys_poll, rx.clone())));

    let (grpc_addr, http_addr) = listen(&cfg, &authz, &rx, &mut tasks).await?;
    let admin_addr = admin(&cfg, &authz, &sync, &rx, &mut tasks).await?;
    // Idle leases back to the store, queued usage debits applied.
    tasks.push(tokio::spawn(upkeep(authz.clone(), rx.clone())));

    // Policy reload on change and SIGHUP.
    let reloader = Reloader::new(&cfg.policy_path, sources, Some(initial));
    tasks.push(tokio::spawn(reloader.run(cfg.reload_interval, rx.clone())));

    match admin_addr {
        Some(admin_addr) => {
            tracing::info!(%grpc_addr, %http_addr, %admin_addr, "tollgate-authz serving")
        }
        None => tracing::info!(%grpc_addr, %http_addr, "tollgate-authz serving"),
    }
    Ok(Running {
        grpc_addr,
        http_addr,
        admin_addr,
        authorizer: authz,
        shutdown: tx,
        tasks,
    })
}
