//! The HTTP side: `GET /healthz`, `GET /metrics`, `POST /v1/usage`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::authz::{error_body, Authorizer, UsageError, UsageReport};
use crate::storage::Store;

pub fn router<S: Store>(authz: Arc<Authorizer<S>>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics::<S>))
        .route("/v1/usage", post(usage::<S>))
        .fallback(not_found)
        .with_state(authz)
}

fn json(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn healthz() -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain")],
        "ok\n",
    )
        .into_response()
}

async fn not_found() -> Response {
    json(
        StatusCode::NOT_FOUND,
        error_body("Not found.", "invalid_request_error", "not_found"),
    )
}

async fn metrics<S: Store>(State(authz): State<Arc<Authorizer<S>>>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        authz.metrics().render(),
    )
        .into_response()
}

async fn usage<S: Store>(State(authz): State<Arc<Authorizer<S>>>, body: Bytes) -> Response {
    let report: UsageReport = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            authz
                .metrics()
                .usage_reports
                .with_label_values(&["bad_request"])
                .inc();
            let msg = format!("Invalid usage report: {e}");
            return json(
                StatusCode::BAD_REQUEST,
                error_body(&msg, "invalid_request_error", "invalid_usage_report"),
            );
        }
    };
    match authz.record_usage(&report).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e @ UsageError::UnknownKey(..)) => json(
            StatusCode::BAD_REQUEST,
            error_body(&format!("{e}."), "invalid_request_error", "unknown_key"),
        ),
        Err(UsageError::Store(_)) => json(
            StatusCode::SERVICE_UNAVAILABLE,
            error_body(
                "The rate-limit store is unavailable; usage was not recorded.",
                "server_error",
                "store_unavailable",
            ),
        ),
    }
}
