//! The HTTP side: `GET /healthz`, `GET /metrics`, and the gateway's calls:
//! `POST /v1/usage` (usage reports), `POST /v1/reserve` (reservation
//! top-ups), `POST /v1/slots/renew` (concurrency slots of long requests).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use tollgate_wire::{SlotRef, TopUp, UsageReport};

use crate::authz::{Authorizer, TopUpError};
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
        .route(tollgate_wire::RESERVE_PATH, post(reserve::<S>))
        .route(tollgate_wire::SLOTS_RENEW_PATH, post(renew::<S>))
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

/// The 401 for a caller without the gateway's usage token, counted as
/// `unauthorized` in `refusals` (None: the caller may go on).
fn not_the_gateway<S: Store>(
    state: &HttpState<S>,
    headers: &HeaderMap,
    refusals: &prometheus::IntCounterVec,
) -> Option<Response> {
    let token = state.usage_token.as_ref()?;
    let presented = headers
        .get(tollgate_wire::header::USAGE_TOKEN)
        .map(|v| v.as_bytes());
    if presented.is_some_and(|p| token.matches(p)) {
        return None;
    }
    refusals.with_label_values(&["unauthorized"]).inc();
    Some(json(
        StatusCode::UNAUTHORIZED,
        error_body(
            "Usage reports are accepted only from the gateway.",
            "authentication_error",
            "usage_unauthorized",
        ),
    ))
}

async fn usage<S: Store>(
    State(state): State<Arc<HttpState<S>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let authz = &state.authz;
    if let Some(refused) = not_the_gateway(&state, &headers, &authz.metrics().usage_reports) {
        return refused;
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

/// `POST /v1/reserve`: top a request's reservation up to what its output
/// limit needs ([`Authorizer::top_up`]). 200 with a
/// [`tollgate_wire::TopUpAnswer`] once decided (a refusal included); 400
/// for a malformed body or an unknown key; 503 when the store failed and
/// the tenant's `redis_failure` is `envoy`.
async fn reserve<S: Store>(
    State(state): State<Arc<HttpState<S>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let authz = &state.authz;
    let count = |result: &str| authz.metrics().top_ups.with_label_values(&[result]).inc();
    if let Some(refused) = not_the_gateway(&state, &headers, &authz.metrics().top_ups) {
        return refused;
    }
    let top_up: TopUp = match serde_json::from_slice(&body) {
        Ok(t) => t,
        Err(e) => {
            count("bad_request");
            return malformed("top-up", "invalid_top_up", &e);
        }
    };
    match authz.top_up(&top_up).await {
        Ok(answer) => json(
            StatusCode::OK,
            serde_json::to_string(&answer).unwrap_or_default(),
        ),
        Err(e @ TopUpError::UnknownKey(..)) => {
            count("unknown_key");
            json(
                StatusCode::BAD_REQUEST,
                error_body(&format!("{e}."), "invalid_request_error", "unknown_key"),
            )
        }
        Err(TopUpError::Unavailable(_)) => json(
            StatusCode::SERVICE_UNAVAILABLE,
            error_body(
                "The rate-limit store is unavailable.",
                "server_error",
                "store_unavailable",
            ),
        ),
    }
}

/// `POST /v1/slots/renew`: renew the concurrency slots of requests still
/// running (an array of [`SlotRef`]): 204; 400 for a malformed body.
async fn renew<S: Store>(
    State(state): State<Arc<HttpState<S>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let authz = &state.authz;
    if let Some(refused) = not_the_gateway(&state, &headers, &authz.metrics().slots) {
        return refused;
    }
    match serde_json::from_slice::<Vec<SlotRef>>(&body) {
        Ok(slots) => {
            authz.renew_slots(&slots).await;
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => malformed("slot renewal", "invalid_slot_renewal", &e),
    }
}

/// The 400 for a body that is not a `what`: serde's message, which can
/// quote the input, cut like any echo.
fn malformed(what: &str, code: &str, e: &serde_json::Error) -> Response {
    let msg = format!(
        "Invalid {what}: {}",
        clip(&e.to_string(), 3 * ECHO_MAX_CHARS)
    );
    json(
        StatusCode::BAD_REQUEST,
        error_body(&msg, "invalid_request_error", code),
    )
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
