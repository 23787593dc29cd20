//! `tollgate-authz`: thin binary over the `tollgate_authz` library.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tollgate_authz::admin_client::AdminClient;
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
    /// Manage virtual keys through a running service's admin API: create,
    /// get, list (with spend and what is left), update, revoke, rotate.
    /// Prints the API's JSON answer; exits 1 on an error answer.
    Keys(Keys),
}

#[derive(Args)]
struct Keys {
    /// The admin API (`serve --admin-listen`).
    #[arg(
        long,
        value_name = "URL",
        global = true,
        default_value = "http://127.0.0.1:9102"
    )]
    admin_url: String,
    /// File holding the admin token (as given to `serve --admin-token-file`).
    #[arg(
        long,
        value_name = "FILE",
        global = true,
        env = "TOLLGATE_ADMIN_TOKEN_FILE"
    )]
    admin_token_file: Option<PathBuf>,
    #[command(subcommand)]
    verb: KeysVerb,
}

/// Limits, budgets, models and expiry of a key (create and update).
#[derive(Args)]
struct Grants {
    /// A model pattern the key may use (repeat the flag); create default: any (`*`).
    #[arg(long = "model", value_name = "PATTERN")]
    models: Vec<String>,
    #[arg(long, value_name = "N")]
    requests_per_minute: Option<u64>,
    #[arg(long, value_name = "N")]
    tokens_per_minute: Option<u64>,
    #[arg(long, value_name = "N")]
    requests_per_day: Option<u64>,
    #[arg(long, value_name = "N")]
    tokens_per_day: Option<u64>,
    /// Requests of the key in flight at once, across every gateway.
    #[arg(long, value_name = "N")]
    max_concurrent_requests: Option<u64>,
    /// Money budget per calendar day in the tenant's time zone, US dollars.
    #[arg(long, value_name = "USD")]
    usd_per_day: Option<String>,
    /// Money budget per calendar month, US dollars.
    #[arg(long, value_name = "USD")]
    usd_per_month: Option<String>,
    /// When the key stops working (RFC 3339, e.g. 2027-01-31T00:00:00Z).
    #[arg(long, value_name = "TIME")]
    expires_at: Option<String>,
    /// Any other field as JSON, merged over the flags (model_limits,
    /// rolling budgets, per-model budgets; `null` removes, on update).
    #[arg(long, value_name = "JSON")]
    json: Option<String>,
}

#[derive(Subcommand)]
enum KeysVerb {
    /// Make a key; its secret is printed once (in the JSON's "secret").
    Create {
        #[arg(long, value_parser = name)]
        tenant: String,
        /// Generated when absent.
        #[arg(long, value_parser = name)]
        id: Option<String>,
        #[command(flatten)]
        grants: Grants,
    },
    /// One key with its spend and what is left of each limit and budget.
    Get { id: String },
    /// Every key (both sources), by id, a page at a time.
    List {
        #[arg(long, value_parser = name)]
        tenant: Option<String>,
        /// Keys after this id (the previous page's next_after).
        #[arg(long)]
        after: Option<String>,
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Leave spend and what is left out (no store reads).
        #[arg(long)]
        no_usage: bool,
    },
    /// Change models, limits, budgets or expiry (flags given replace those
    /// fields; budgets and limits merge field by field).
    Update {
        id: String,
        #[command(flatten)]
        grants: Grants,
        /// Remove the expiry.
        #[arg(long, conflicts_with = "expires_at")]
        no_expiry: bool,
    },
    /// Refuse the key from now on, on every instance (within a second).
    Revoke { id: String },
    /// A new secret, printed once; the old one works for the grace period.
    Rotate {
        id: String,
        /// How long the old secret keeps working (default 3600; 0: stops now).
        #[arg(long, value_name = "SECONDS")]
        grace_seconds: Option<u64>,
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
    /// The admin API (keys created, listed, changed, revoked, rotated).
    #[arg(long, value_name = "ADDR", default_value_t = defaults::ADMIN_LISTEN)]
    admin_listen: SocketAddr,
    /// File holding the token the admin API requires (Authorization: Bearer);
    /// without this flag the admin API is off.
    #[arg(long, value_name = "FILE")]
    admin_token_file: Option<PathBuf>,
    /// How often the admin API's keys are polled for changes (at least 20).
    #[arg(long, value_name = "MS", default_value_t = defaults::KEYS_POLL_MS)]
    keys_poll_ms: u64,
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
        Some(Command::Keys(k)) => keys(k),
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

/// The body of a create or the patch of an update from the flags, `--json`
/// merged over them.
fn grants_body(
    g: &Grants,
    mut body: serde_json::Map<String, serde_json::Value>,
) -> Result<String, String> {
    use serde_json::{json, Value};
    if !g.models.is_empty() {
        body.insert("models".into(), json!(g.models));
    }
    let limits: serde_json::Map<String, Value> = [
        ("requests_per_minute", g.requests_per_minute),
        ("tokens_per_minute", g.tokens_per_minute),
        ("requests_per_day", g.requests_per_day),
        ("tokens_per_day", g.tokens_per_day),
        ("max_concurrent_requests", g.max_concurrent_requests),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| (k.to_string(), json!(v))))
    .collect();
    if !limits.is_empty() {
        body.insert("limits".into(), Value::Object(limits));
    }
    let budgets: serde_json::Map<String, Value> = [
        ("usd_per_day", &g.usd_per_day),
        ("usd_per_month", &g.usd_per_month),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.as_ref().map(|v| (k.to_string(), json!(v))))
    .collect();
    if !budgets.is_empty() {
        body.insert("budgets".into(), Value::Object(budgets));
    }
    if let Some(t) = &g.expires_at {
        body.insert("expires_at".into(), json!(t));
    }
    let mut body = Value::Object(body);
    if let Some(extra) = &g.json {
        let extra: Value =
            serde_json::from_str(extra).map_err(|e| format!("--json is not JSON: {e}"))?;
        tollgate_authz::admin::input::merge_patch(&mut body, &extra);
    }
    Ok(body.to_string())
}

fn keys(k: Keys) -> ExitCode {
    use serde_json::{json, Map};
    let Some(token_file) = &k.admin_token_file else {
        eprintln!("tollgate-authz keys: --admin-token-file FILE (or TOLLGATE_ADMIN_TOKEN_FILE) is required");
        return ExitCode::from(2);
    };
    let client = match AdminClient::new(&k.admin_url, token_file) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tollgate-authz keys: {e}");
            return ExitCode::from(2);
        }
    };
    let request = match &k.verb {
        KeysVerb::Create { tenant, id, grants } => {
            let mut base = Map::new();
            base.insert("tenant".into(), json!(tenant));
            if let Some(id) = id {
                base.insert("id".into(), json!(id));
            }
            grants_body(grants, base).map(|b| ("POST", "/admin/keys".to_string(), Some(b)))
        }
        KeysVerb::Get { id } => Ok(("GET", format!("/admin/keys/{id}"), None)),
        KeysVerb::List {
            tenant,
            after,
            limit,
            no_usage,
        } => {
            let mut q = Vec::new();
            q.extend(tenant.as_ref().map(|t| format!("tenant={t}")));
            q.extend(after.as_ref().map(|a| format!("after={a}")));
            q.extend(limit.map(|l| format!("limit={l}")));
            if *no_usage {
                q.push("usage=false".into());
            }
            let q = if q.is_empty() {
                String::new()
            } else {
                format!("?{}", q.join("&"))
            };
            Ok(("GET", format!("/admin/keys{q}"), None))
        }
        KeysVerb::Update {
            id,
            grants,
            no_expiry,
        } => {
            let mut base = Map::new();
            if *no_expiry {
                base.insert("expires_at".into(), serde_json::Value::Null);
            }
            grants_body(grants, base).map(|b| ("PATCH", format!("/admin/keys/{id}"), Some(b)))
        }
        KeysVerb::Revoke { id } => Ok(("POST", format!("/admin/keys/{id}/revoke"), None)),
        KeysVerb::Rotate { id, grace_seconds } => {
            let body = grace_seconds.map(|g| json!({ "grace_seconds": g }).to_string());
            Ok(("POST", format!("/admin/keys/{id}/rotate"), body))
        }
    };
    let (method, path, body) = match request {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tollgate-authz keys: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tollgate-authz keys: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let answer = match rt.block_on(client.call(method, &path, body)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("tollgate-authz keys: {e}");
            return ExitCode::from(1);
        }
    };
    let value: serde_json::Value = serde_json::from_str(&answer.body).unwrap_or(json!(answer.body));
    println!(
        "{}",
        serde_json::to_string_pretty(&value).unwrap_or(answer.body)
    );
    if !(200..300).contains(&answer.status) {
        let msg = value["error"]["message"].as_str().unwrap_or("");
        eprintln!("tollgate-authz keys: HTTP {}: {msg}", answer.status);
        return ExitCode::from(1);
    }
    if value.get("secret").is_some() {
        eprintln!("# \"secret\" above is the key's secret. It is shown only once: give it to the client now.");
    }
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
    cfg.admin_listen = s.admin_listen;
    cfg.keys_poll = Duration::from_millis(s.keys_poll_ms.max(20));
    if let Some(path) = &s.admin_token_file {
        match UsageToken::from_file_named(path, "admin token") {
            Ok(t) => cfg.admin_token = Some(t),
            Err(e) => {
                eprintln!("tollgate-authz: {e}");
                return ExitCode::from(1);
            }
        }
    }
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
