//! `authz-null`: an ext_authz Check server that allows every request at once.
//!
//! The bench's floor for authorization (`bench/bench.py`, scenarios
//! `authz-null` and `floor`): the same gRPC hop, tonic server and answer
//! shape as `tollgate-authz` (three `x-tollgate-*` request headers set, the
//! key headers removed, six rate-limit response headers), with no policy, no
//! Redis and no metrics. What `tollgate-authz` costs beyond this is the cost
//! of its decisions.
//!
//! ```sh
//! authz-null --grpc-listen 127.0.0.1:9100 --http-listen 127.0.0.1:9101
//! curl 127.0.0.1:9101/healthz     # ok
//! ```

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::process::ExitCode;

use envoy_types::pb::envoy::config::core::v3::header_value_option::HeaderAppendAction;
use envoy_types::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption};
use envoy_types::pb::envoy::service::auth::v3::authorization_server::{
    Authorization, AuthorizationServer,
};
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{CheckRequest, CheckResponse, OkHttpResponse};
use envoy_types::pb::google::rpc;

const USAGE: &str = "\
authz-null: ext_authz Check server that allows everything (benchmark floor)

USAGE:
  authz-null [--grpc-listen ADDR] [--http-listen ADDR]

defaults:
  --grpc-listen 127.0.0.1:9100     ext_authz Check + grpc.health.v1.Health
  --http-listen 127.0.0.1:9101     GET /healthz, GET /metrics (empty)
";

fn header(key: &str, value: &str) -> HeaderValueOption {
    #[allow(deprecated)]
    HeaderValueOption {
        header: Some(HeaderValue {
            key: key.to_string(),
            value: value.to_string(),
            raw_value: Vec::new(),
        }),
        append: None,
        append_action: HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
        keep_empty_value: false,
    }
}

/// The one answer, built once: what `tollgate-authz` answers for the demo key.
fn allow_all() -> CheckResponse {
    let ok = OkHttpResponse {
        headers: vec![
            header("x-tollgate-tenant", "demo"),
            header("x-tollgate-key-id", "demo-key"),
            header("x-tollgate-models", "*"),
        ],
        headers_to_remove: vec!["authorization".into(), "x-api-key".into()],
        response_headers_to_add: [
            ("x-ratelimit-limit-requests", "1000000"),
            ("x-ratelimit-remaining-requests", "999999"),
            ("x-ratelimit-reset-requests", "0s"),
            ("x-ratelimit-limit-tokens", "1000000000"),
            ("x-ratelimit-remaining-tokens", "999999999"),
            ("x-ratelimit-reset-tokens", "0s"),
        ]
        .iter()
        .map(|(k, v)| header(k, v))
        .collect(),
        ..Default::default()
    };
    CheckResponse {
        status: Some(rpc::Status {
            code: 0,
            message: String::new(),
            details: Vec::new(),
        }),
        http_response: Some(HttpResponse::OkResponse(ok)),
        ..Default::default()
    }
}

struct AllowAll(CheckResponse);

#[tonic::async_trait]
impl Authorization for AllowAll {
    async fn check(
        &self,
        _request: tonic::Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, tonic::Status> {
        Ok(tonic::Response::new(self.0.clone()))
    }
}

fn parse_args(args: &[String]) -> Result<(SocketAddr, SocketAddr), String> {
    let mut grpc = SocketAddr::from(([127, 0, 0, 1], 9100));
    let mut http = SocketAddr::from(([127, 0, 0, 1], 9101));
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let slot = match flag.as_str() {
            "--grpc-listen" => &mut grpc,
            "--http-listen" => &mut http,
            other => return Err(format!("unknown flag {other:?}")),
        };
        let value = it.next().ok_or(format!("{flag} needs ADDR"))?;
        *slot = value
            .parse()
            .map_err(|e| format!("{flag} {value:?}: {e}"))?;
    }
    Ok((grpc, http))
}

async fn serve(grpc: SocketAddr, http: SocketAddr) -> Result<(), String> {
    let incoming = tonic::transport::server::TcpIncoming::bind(grpc)
        .map_err(|e| format!("cannot listen for gRPC on {grpc}: {e}"))?
        .with_nodelay(Some(true));
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<AuthorizationServer<AllowAll>>()
        .await;
    let listener = tokio::net::TcpListener::bind(http)
        .await
        .map_err(|e| format!("cannot listen for HTTP on {http}: {e}"))?;
    let app = axum::Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .route("/metrics", axum::routing::get(|| async { "" }));
    let grpc_server = tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(AuthorizationServer::new(AllowAll(allow_all())))
        .serve_with_incoming_shutdown(incoming, shutdown_signal());
    tokio::select! {
        r = grpc_server => r.map_err(|e| format!("gRPC server failed: {e}")),
        r = axum::serve(listener, app).into_future() => r.map_err(|e| format!("HTTP server failed: {e}")),
    }
}

async fn shutdown_signal() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let result = parse_args(&args).and_then(|(grpc, http)| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the runtime: {e}"))?
            .block_on(serve(grpc, http))
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("authz-null: {msg}");
            ExitCode::from(2)
        }
    }
}
