//! Test harness: a real redis-server on a free loopback port, and a service
//! started on 127.0.0.1:0.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tollgate_authz::server::{start, Running, ServeConfig};

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A redis-server child process, stopped on drop.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
}

fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

impl RedisServer {
    pub fn start() -> RedisServer {
        Self::start_on(free_port())
    }

    pub fn start_on(port: u16) -> RedisServer {
        Self::spawn(port, &[])
    }

    /// Start redis-server on `port` with `extra` arguments and wait until it
    /// answers PING.
    fn spawn(port: u16, extra: &[&str]) -> RedisServer {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (apt-get install redis-server)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ping(port) {
            assert!(
                Instant::now() < deadline,
                "redis-server did not start on port {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        RedisServer {
            port,
            child: Some(child),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kill the server now (SIGKILL) and wait for it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Run one command with redis-cli, returning its stdout.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn repo_policy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/policy.yaml")
}

/// Start a service on 127.0.0.1:0 with `policy` and `redis_url`.
pub async fn start_service(policy: &Path, redis_url: &str) -> Running {
    let mut cfg = ServeConfig::new(policy);
    cfg.grpc_listen = "127.0.0.1:0".parse().unwrap();
    cfg.http_listen = "127.0.0.1:0".parse().unwrap();
    cfg.redis_url = redis_url.to_string();
    // Generous: CI machines have 2 busy cores.
    cfg.redis_timeout = Duration::from_millis(250);
    cfg.reload_interval = Duration::from_millis(50);
    start(cfg).await.unwrap()
}

use std::collections::HashMap;

use envoy_types::pb::envoy::config::core::v3::HeaderValueOption;
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Request};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest, CheckResponse};
use tonic::transport::Channel;

pub type AuthzClient = AuthorizationClient<Channel>;

pub async fn client(running: &Running) -> AuthorizationClient<Channel> {
    AuthorizationClient::connect(format!("http://{}", running.grpc_addr))
        .await
        .unwrap()
}

pub fn request_with(headers: &[(&str, &str)]) -> CheckRequest {
    let headers: HashMap<String, String> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    CheckRequest {
        attributes: Some(AttributeContext {
            request: Some(Request {
                http: Some(HttpRequest {
                    method: "POST".into(),
                    path: "/v1/chat/completions".into(),
                    headers,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}

pub async fn check_key(
    c: &mut AuthorizationClient<Channel>,
    key: &str,
) -> Result<CheckResponse, tonic::Status> {
    c.check(request_with(&[("authorization", &format!("Bearer {key}"))]))
        .await
        .map(|r| r.into_inner())
}

/// HTTP status a response gives the client (200 for OK).
pub fn http_status(r: &CheckResponse) -> u16 {
    match &r.http_response {
        Some(HttpResponse::OkResponse(_)) => 200,
        Some(HttpResponse::DeniedResponse(d)) => {
            d.status.as_ref().map(|s| s.code as u16).unwrap_or(403)
        }
        _ => 0,
    }
}

/// Response headers sent to the client (OK: response_headers_to_add; denied: headers).
pub fn client_headers(r: &CheckResponse) -> HashMap<String, String> {
    let hs = match &r.http_response {
        Some(HttpResponse::OkResponse(ok)) => &ok.response_headers_to_add,
        Some(HttpResponse::DeniedResponse(d)) => &d.headers,
        _ => return HashMap::new(),
    };
    header_map(hs)
}

/// Header options as a name → value map (options without a header skipped).
pub fn header_map(hs: &[HeaderValueOption]) -> HashMap<String, String> {
    hs.iter()
        .filter_map(|h| h.header.as_ref())
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect()
}

/// Value of one metric line (exact name with labels) in /metrics text.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(' '))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0.0)
}

/// A policy file in a temp dir (kept alive by the returned guard).
pub fn temp_policy(yaml: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, yaml).unwrap();
    (dir, path)
}

/// A loopback port P such that P and P + 10000 (the cluster bus) are free.
pub fn free_cluster_port() -> u16 {
    for _ in 0..200 {
        let p = 20_000 + (rand_u16() % 10_000);
        if TcpListener::bind(("127.0.0.1", p)).is_ok()
            && TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok()
        {
            return p;
        }
    }
    panic!("no free cluster port");
}

fn rand_u16() -> u16 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    (nanos ^ (std::process::id() << 7)) as u16
}

/// A three-primary Redis Cluster on loopback, stopped on drop.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    _dir: tempfile::TempDir,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        let dir = tempfile::tempdir().unwrap();
        let mut nodes = Vec::new();
        for i in 0..3 {
            let port = free_cluster_port();
            let config_file = format!("nodes-{i}.conf");
            nodes.push(RedisServer::spawn(
                port,
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    &config_file,
                    "--dir",
                    dir.path().to_str().unwrap(),
                ],
            ));
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while !nodes
            .iter()
            .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
        {
            assert!(Instant::now() < deadline, "cluster never became ok");
            std::thread::sleep(Duration::from_millis(100));
        }
        RedisCluster { nodes, _dir: dir }
    }

    pub fn url(&self) -> String {
        let addrs: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", addrs.join(","))
    }
}

/// One HTTP/1.1 request on a fresh connection: (status, lowercase headers
/// as (name, value) pairs in order, body).
pub async fn http1(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let hs = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, hs, body.to_string())
}

/// Path of Envoy if the bootstrap installed it (`.venv/bin/envoy`,
/// `.tools/bin/envoy`), `$ENVOY_BIN`, or on PATH.
pub fn envoy_bin() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("ENVOY_BIN") {
        return Some(PathBuf::from(p));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for c in [root.join(".venv/bin/envoy"), root.join(".tools/bin/envoy")] {
        if c.exists() {
            return Some(c);
        }
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("envoy"))
            .find(|p| p.exists())
    })
}
