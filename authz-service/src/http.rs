//! The HTTP side: `GET /healthz`, `GET /metrics`, `POST /v1/usage`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use tollgate_wire::UsageReport;

use crate::authz::Authorizer;
use crate::decision::{clip, error_body, ECHO_MAX_CHARS};
use crate::storage::Store;
use crate::usage::{Recorded, UsageError};
use crate::usage_token::UsageToken;

/// What the handlers share: the authorizer, and the token usage reports
/// must carry (`None`: any caller may report, for development only).
pub struct HttpState<S: Store> {
    pub authz: Arc<Authorizer<S>>,
    pub usage_token: Option<UsageToken>,
}

pub fn router<S: Store>(authz: Arc<Authorizer<S>>, usage_token: Option<UsageToken>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics::<S>))
        .route("/v1/usage", post(usage::<S>))
        .fallback(not_found)
        .with_state(Arc::new(HttpState { authz, usage_token }))
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

async fn metrics<S: Store>(State(state): State<Arc<HttpState<S>>>) -> Response {
    let authz = &state.authz;
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        authz.metrics().render(),
    )
        .into_response()
}

/// One report, or an array of them (the filter's per-worker batches). Every
/// report of an array is recorded even when another one fails; the answer is
/// then the first failure's, naming how many were not recorded.
#[derive(Deserialize)]
#[serde(untagged)]
enum Reports {
    One(UsageReport),
    Many(Vec<UsageReport>),
}

async fn usage<S: Store>(
    State(state): State<Arc<HttpState<S>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let authz = &state.authz;
    if let Some(token) = &state.usage_token {
        let presented = headers
            .get(tollgate_wire::header::USAGE_TOKEN)
            .map(|v| v.as_bytes());
        if !presented.is_some_and(|p| token.matches(p)) {
            authz
                .metrics()
                .usage_reports
                .with_label_values(&["unauthorized"])
                .inc();
            return json(
                StatusCode::UNAUTHORIZED,
                error_body(
                    "Usage reports are accepted only from the gateway.",
                    "authentication_error",
                    "usage_unauthorized",
                ),
            );
        }
    }
    let reports = match parse_reports(&body) {
        Ok(reports) => reports,
        Err(msg) => {
            authz
                .metrics()
                .usage_reports
                .with_label_values(&["bad_request"])
                .inc();
            return json(
                StatusCode::BAD_REQUEST,
                error_body(&msg, "invalid_request_error", "invalid_usage_report"),
            );
        }
    };
    let total = reports.len();
    let mut failed = 0;
    let mut first: Option<UsageError> = None;
    let mut queued = false;
    for report in &reports {
        match authz.record_usage(report).await {
            Ok(Recorded::Debited) => {}
            Ok(Recorded::Queued) => queued = true,
            Err(e) => {
                failed += 1;
                first.get_or_insert(e);
            }
        }
    }
    let Some(e) = first else {
        // 202: kept, to be applied when the store is reachable again.
        return if queued {
            StatusCode::ACCEPTED
        } else {
            StatusCode::NO_CONTENT
        }
        .into_response();
    };
    not_recorded(&e, failed, total)
}

/// The body of `POST /v1/usage`: one report or an array of them; `Err` is
/// the 400's message.
fn parse_reports(body: &[u8]) -> Result<Vec<UsageReport>, String> {
    match serde_json::from_slice::<Reports>(body) {
        Ok(Reports::One(r)) => Ok(vec![r]),
        Ok(Reports::Many(rs)) => Ok(rs),
        Err(_) => {
            // The untagged enum's own error says nothing useful: name what
            // is wrong with the report as a single one.
            Err(match serde_json::from_slice::<UsageReport>(body) {
                // serde's message can quote the input (an unknown field's
                // name): cut it like any echo.
                Err(e) => format!(
                    "Invalid usage report: {}",
                    clip(&e.to_string(), 3 * ECHO_MAX_CHARS)
                ),
                Ok(_) => "Invalid usage report.".to_string(),
            })
        }
    }
}

/// The answer when `failed` of `total` reports were not recorded, `e`
/// being the first failure.
fn not_recorded(e: &UsageError, failed: usize, total: usize) -> Response {
    let (status, msg, kind, code) = match e {
        UsageError::UnknownKey(..) => (
            StatusCode::BAD_REQUEST,
            format!("{e}."),
            "invalid_request_error",
            "unknown_key",
        ),
        UsageError::Store(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "The rate-limit store is unavailable; usage was not recorded.".to_string(),
            "server_error",
            "store_unavailable",
        ),
    };
    let msg = if total > 1 {
        format!("{failed} of {total} usage reports were not recorded. First: {msg}")
    } else {
        msg
    };
    json(status, error_body(&msg, kind, code))
}
