//! `tollgate-authz`: thin binary over the `tollgate_authz` library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use tollgate_authz::keygen;
use tollgate_authz::policy::{Policy, PolicyError};
use tollgate_authz::server::{self, ServeConfig};

const USAGE: &str = "\
tollgate-authz: Envoy ext_authz service for Tollgate virtual keys and rate limits

USAGE:
  tollgate-authz serve --policy FILE [--grpc-listen ADDR] [--http-listen ADDR]
                       [--redis-url URL] [--redis-timeout-ms MS] [--redis-max-in-flight N]
                       [--reload-interval-ms MS]
  tollgate-authz keygen --tenant TENANT --id KEY_ID
  tollgate-authz --validate FILE        (also: tollgate-authz validate FILE)
  tollgate-authz --help | --version

serve defaults:
  --grpc-listen 127.0.0.1:9100     ext_authz Check + grpc.health.v1.Health
  --http-listen 127.0.0.1:9101     GET /healthz, GET /metrics, POST /v1/usage
  --redis-url redis://127.0.0.1:6390
                                   or redis+cluster://h1:p1,h2:p2, or memory:// (per-process buckets)
  --redis-timeout-ms 10            deadline for one Redis call; past it the tenant's
                                   redis_failure policy applies (fail-open by default)
  --redis-max-in-flight 256        most Redis calls at once; past it the failure policy
                                   applies at once instead of queueing behind a slow Redis
  --reload-interval-ms 1000        how often the policy file is checked for changes
                                   (SIGHUP reloads at once)

Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=debug) to change the level.
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("tollgate-authz: {msg}");
            eprintln!("run `tollgate-authz --help` for usage");
            ExitCode::from(2)
        }
    }
}

fn run(args: &[String]) -> Result<ExitCode, String> {
    match args.first().map(String::as_str) {
        None | Some("-h") | Some("--help") | Some("help") => {
            print!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        Some("-V") | Some("--version") => {
            println!("tollgate-authz {}", env!("CARGO_PKG_VERSION"));
            Ok(ExitCode::SUCCESS)
        }
        Some("--validate") | Some("validate") => match &args[1..] {
            [file] => Ok(validate(&PathBuf::from(file))),
            _ => Err("--validate takes exactly one FILE".into()),
        },
        Some("keygen") => keygen_cmd(&args[1..]),
        Some("serve") => serve_cmd(&args[1..]),
        Some(other) => Err(format!("unknown command or flag {other:?}")),
    }
}

fn validate(path: &std::path::Path) -> ExitCode {
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

/// Parse `--flag value` pairs; every flag must be in `allowed`.
fn flags<'a>(args: &'a [String], allowed: &[&str]) -> Result<Vec<(&'a str, &'a str)>, String> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (name, value) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, v),
            _ => {
                let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
                (a.as_str(), v.as_str())
            }
        };
        if !allowed.contains(&name) {
            return Err(format!("unknown flag {name:?}"));
        }
        out.push((name, value));
    }
    Ok(out)
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

fn keygen_cmd(args: &[String]) -> Result<ExitCode, String> {
    let mut tenant = None;
    let mut id = None;
    for (k, v) in flags(args, &["--tenant", "--id"])? {
        match k {
            "--tenant" => tenant = Some(v),
            _ => id = Some(v),
        }
    }
    let tenant = tenant.ok_or("keygen needs --tenant")?;
    let id = id.ok_or("keygen needs --id")?;
    if !valid_name(tenant) || !valid_name(id) {
        return Err("--tenant and --id must match [A-Za-z0-9._-]{1,64}".into());
    }
    let key = keygen::new_key();
    println!("{key}");
    eprintln!("# The line above is the new virtual key. It is shown only once: give it to the client now.");
    eprintln!("# Paste these lines under `keys:` in the policy file (it stores only the SHA-256):");
    print!("{}", keygen::policy_entry(tenant, id, &key));
    Ok(ExitCode::SUCCESS)
}

fn serve_cmd(args: &[String]) -> Result<ExitCode, String> {
    let mut policy = None;
    let mut cfg = ServeConfig::new(PathBuf::new());
    let parse_addr = |v: &str| {
        v.parse::<SocketAddr>()
            .map_err(|e| format!("bad address {v:?}: {e}"))
    };
    let parse_ms = |v: &str| {
        v.parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|e| format!("bad milliseconds {v:?}: {e}"))
    };
    for (k, v) in flags(
        args,
        &[
            "--policy",
            "--grpc-listen",
            "--http-listen",
            "--redis-url",
            "--redis-timeout-ms",
            "--redis-max-in-flight",
            "--reload-interval-ms",
        ],
    )? {
        match k {
            "--policy" => policy = Some(PathBuf::from(v)),
            "--grpc-listen" => cfg.grpc_listen = parse_addr(v)?,
            "--http-listen" => cfg.http_listen = parse_addr(v)?,
            "--redis-url" => cfg.redis_url = v.to_string(),
            "--redis-timeout-ms" => cfg.redis_timeout = parse_ms(v)?,
            "--redis-max-in-flight" => {
                cfg.redis_max_in_flight =
                    v.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
                        format!("bad --redis-max-in-flight {v:?}: need a positive integer")
                    })?
            }
            _ => cfg.reload_interval = parse_ms(v)?.max(Duration::from_millis(50)),
        }
    }
    cfg.policy_path = policy.ok_or("serve needs --policy FILE")?;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    rt.block_on(async move {
        let running = match server::start(cfg).await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!("{e}");
                return Ok(ExitCode::from(1));
            }
        };
        running.run_until(shutdown_signal()).await;
        tracing::info!("stopped");
        Ok(ExitCode::SUCCESS)
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
