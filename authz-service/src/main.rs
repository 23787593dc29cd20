//! `tollgate-authz`: thin binary over the `tollgate_authz` library.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tollgate_authz::defaults;
use tollgate_authz::keygen;
use tollgate_authz::policy::{Policy, PolicyError};
use tollgate_authz::server::{self, ServeConfig};
use tollgate_authz::usage_token::UsageToken;

/// Envoy ext_authz service for Tollgate virtual keys and rate limits.
///
/// Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=debug) to change the level.
#[derive(Parser)]
#[command(name = "tollgate-authz", version, arg_required_else_help = true)]
struct Cli {
    /// Check a policy file and exit (0 valid, 1 invalid); same as `validate FILE`.
    #[arg(long, value_name = "FILE", exclusive = true)]
    validate: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve ext_authz Check and grpc.health.v1 (gRPC) and /healthz, /metrics, /v1/usage (HTTP).
    Serve(Serve),
    /// Print a new virtual key once, then the policy entry (its SHA-256 only) to paste.
    Keygen {
        #[arg(long, value_parser = name)]
        tenant: String,
        #[arg(long, value_parser = name)]
        id: String,
    },
    /// Check a policy file and exit (0 valid, 1 invalid).
    Validate { file: PathBuf },
    /// Print the current money budget windows of a tenant (or one key) and
    /// what was spent in them, read from Redis. Spend includes money still
    /// leased by running instances (returned after 1 s idle).
    Spend {
        #[arg(long, value_name = "FILE")]
        policy: PathBuf,
        #[arg(long, value_name = "URL", default_value = defaults::REDIS_URL)]
        redis_url: String,
        #[arg(long, value_parser = name)]
        tenant: String,
        #[arg(long, value_parser = name)]
        key: Option<String>,
    },
}

#[derive(Args)]
struct Serve {
    /// Policy file; reloaded when it changes and on SIGHUP.
    #[arg(long, value_name = "FILE")]
    policy: PathBuf,
    /// ext_authz Check + grpc.health.v1.Health.
    #[arg(long, value_name = "ADDR", default_value_t = defaults::GRPC_LISTEN)]
    grpc_listen: SocketAddr,
    /// Also serve ext_authz Check on this Unix domain socket (replaced at start).
    #[arg(long, value_name = "PATH")]
    grpc_uds: Option<PathBuf>,
    /// GET /healthz, GET /metrics, POST /v1/usage, /v1/reserve, /v1/slots/renew.
    #[arg(long, value_name = "ADDR", default_value_t = defaults::HTTP_LISTEN)]
    http_listen: SocketAddr,
    /// redis://host:port, redis+cluster://h1:p1,h2:p2, or memory:// (per-process buckets).
    #[arg(long, value_name = "URL", default_value = defaults::REDIS_URL)]
    redis_url: String,
    /// Deadline for one Redis call; past it the tenant's redis_failure policy applies.
    #[arg(long, value_name = "MS", default_value_t = defaults::REDIS_TIMEOUT_MS)]
    redis_timeout_ms: u64,
    /// Deadline for one Redis call while Redis answered others in the last
    /// second (busy, not down); at least --redis-timeout-ms.
    #[arg(long, value_name = "MS", default_value_t = defaults::REDIS_BUSY_TIMEOUT_MS)]
    redis_busy_timeout_ms: u64,
    /// Most Redis calls at once; past it the failure policy applies at once.
    #[arg(long, value_name = "N", default_value_t = defaults::REDIS_MAX_IN_FLIGHT,
          value_parser = positive)]
    redis_max_in_flight: usize,
    /// How often the policy file is compared with the active one (at least 50).
    #[arg(long, value_name = "MS", default_value_t = defaults::RELOAD_INTERVAL_MS)]
    reload_interval_ms: u64,
    /// File holding the token Envoy sends on usage reports (x-tollgate-usage-token);
    /// POST /v1/usage refuses reports without it. Without this flag any caller may report.
    #[arg(long, value_name = "FILE")]
    usage_token_file: Option<PathBuf>,
    /// How long a concurrency slot (max_concurrent_requests) lives after it
    /// was taken or last renewed: a dead gateway's slots are free after it.
    #[arg(long, value_name = "MS", default_value_t = defaults::SLOT_TTL_MS,
          value_parser = slot_ttl)]
    slot_ttl_ms: u64,
}

fn slot_ttl(s: &str) -> Result<u64, String> {
    s.parse::<u64>()
        .ok()
        .filter(|n| *n >= defaults::SLOT_TTL_MIN_MS)
        .ok_or_else(|| format!("need at least {} (ms)", defaults::SLOT_TTL_MIN_MS))
}

fn name(s: &str) -> Result<String, String> {
    if tollgate_authz::policy::valid_policy_name(s) {
        Ok(s.to_string())
    } else {
        Err("must match [A-Za-z0-9._-]{1,64}".into())
    }
}

fn positive(s: &str) -> Result<usize, String> {
    s.parse::<usize>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| "need a positive integer".into())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(file) = cli.validate {
        return validate(&file);
    }
    match cli.command {
        Some(Command::Validate { file }) => validate(&file),
        Some(Command::Keygen { tenant, id }) => {
            let key = keygen::new_key();
            println!("{key}");
            eprintln!("# The line above is the new virtual key. It is shown only once: give it to the client now.");
            eprintln!("# Paste these lines under `keys:` in the policy file (it stores only the SHA-256):");
            print!("{}", keygen::policy_entry(&tenant, &id, &key));
            ExitCode::SUCCESS
        }
        Some(Command::Serve(s)) => serve(s),
        Some(Command::Spend {
            policy,
            redis_url,
            tenant,
            key,
        }) => spend(&policy, &redis_url, &tenant, key.as_deref()),
        // arg_required_else_help: clap has already printed the help.
        None => ExitCode::from(2),
    }
}

fn spend(policy: &Path, redis_url: &str, tenant: &str, key: Option<&str>) -> ExitCode {
    let p = match Policy::from_file(policy) {
        Ok(p) => p,
        Err(PolicyError(msg)) => {
            eprintln!("{}: invalid policy: {msg}", policy.display());
            return ExitCode::from(1);
        }
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let rows = match tollgate_authz::spend::rows(&p, tenant, key, now_ms) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tollgate-authz spend: {e}");
            return ExitCode::from(1);
        }
    };
    let conn = redis::Client::open(redis_url).and_then(|c| c.get_connection());
    let mut conn = match conn {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tollgate-authz spend: cannot reach redis at {redis_url}: {e}");
            return ExitCode::from(1);
        }
    };
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        // A rolling window's spend is the sum of its slots.
        match redis::cmd("MGET")
            .arg(&r.slots)
            .query::<Vec<Option<i64>>>(&mut conn)
        {
            Ok(v) => {
                let spent = v.iter().flatten().copied().reduce(|a, b| a + b);
                out.push((r, spent))
            }
            Err(e) => {
                eprintln!("tollgate-authz spend: redis MGET failed: {e}");
                return ExitCode::from(1);
            }
        }
    }
    print!(
        "{}",
        tollgate_authz::spend::render(tenant, &p.money.zone_of(tenant).0, &out)
    );
    ExitCode::SUCCESS
}

fn validate(path: &Path) -> ExitCode {
    match Policy::from_file(path) {
        Ok(p) => {
            println!(
                "{}: OK ({} tenants, {} keys)",
                path.display(),
                p.tenant_count(),
                p.key_count()
            );
            ExitCode::SUCCESS
        }
        Err(PolicyError(msg)) => {
            eprintln!("{}: invalid policy: {msg}", path.display());
            ExitCode::from(1)
        }
    }
}

fn serve(s: Serve) -> ExitCode {
    let mut cfg = ServeConfig::new(s.policy);
    cfg.grpc_listen = s.grpc_listen;
    cfg.grpc_uds = s.grpc_uds;
    cfg.http_listen = s.http_listen;
    cfg.redis_url = s.redis_url;
    cfg.redis_timeout = Duration::from_millis(s.redis_timeout_ms);
    cfg.redis_busy_timeout = Duration::from_millis(s.redis_busy_timeout_ms);
    cfg.redis_max_in_flight = s.redis_max_in_flight;
    cfg.reload_interval = Duration::from_millis(s.reload_interval_ms.max(50));
    cfg.slot_ttl = Duration::from_millis(s.slot_ttl_ms);
    if let Some(path) = &s.usage_token_file {
        match UsageToken::from_file(path) {
            Ok(t) => cfg.usage_token = Some(t),
            Err(e) => {
                eprintln!("tollgate-authz: {e}");
                return ExitCode::from(1);
            }
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tollgate-authz: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    rt.block_on(async move {
        let running = match server::start(cfg).await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!("{e}");
                return ExitCode::from(1);
            }
        };
        running.run_until(shutdown_signal()).await;
        tracing::info!("stopped");
        ExitCode::SUCCESS
    })
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
