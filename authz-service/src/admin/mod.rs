//! The admin API: virtual keys created, read, listed, changed, revoked and
//! rotated over HTTP, on its own port (`--admin-listen`, loopback by
//! default) behind its own token (`--admin-token-file`; without one the API
//! is off). Its OpenAPI document is `openapi/admin.yaml`, served as
//! `GET /admin/openapi.json`.
//!
//! Keys it makes live in the key store ([`crate::keystore`], hashes only)
//! and reach every instance through [`crate::keysync`]; this instance
//! applies its own writes before answering. Keys of the policy file are
//! listed and read here too, and refused any change (409).
//!
//! Nothing here logs a request body, a secret or the admin token; an error
//! quotes client input cut short ([`crate::decision::echo`]).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::authz::Authorizer;
use crate::keystore::KeyStore;
use crate::keysync::KeySync;
use crate::storage::Store;
use crate::usage_token::UsageToken;

pub mod input;
pub mod keys;
pub mod usage;

/// The OpenAPI document (YAML), served as JSON.
pub const OPENAPI_YAML: &str = include_str!("../../openapi/admin.yaml");
/// Largest request body.
pub const MAX_BODY: usize = 64 * 1024;
/// Default grace of a rotated secret, in seconds.
pub const DEFAULT_GRACE_SECONDS: u64 = 3600;
/// Longest grace of a rotated secret (30 days), in seconds.
pub const MAX_GRACE_SECONDS: u64 = 30 * 86_400;

/// The admin API's token: the same kind of secret as the usage token.
pub type AdminToken = UsageToken;

/// What the handlers share.
pub struct AdminState<K: KeyStore, S: Store> {
    pub authz: Arc<Authorizer<S>>,
    pub sync: Arc<KeySync<K, S>>,
    pub token: AdminToken,
    /// The OpenAPI document as JSON, converted once.
    pub openapi: String,
}

/// An answer of the admin API that is not a success: status, code,
/// message and the field it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub param: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            param: None,
        }
    }

    /// A 400 about field `param`.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        ApiError {
            param: Some(param.to_string()),
            ..ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
        }
    }

    fn kind(&self) -> &'static str {
        match self.status {
            StatusCode::UNAUTHORIZED => "authentication_error",
            s if s.is_server_error() => "server_error",
            _ => "invalid_request_error",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = tollgate_wire::error_body(
            &self.message,
            self.kind(),
            self.param.as_deref(),
            Some(self.code),
        );
        json(self.status, body)
    }
}

/// A JSON answer.
pub fn json(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The OpenAPI document as JSON text.
pub fn openapi_json() -> Result<String, String> {
    let v: serde_json::Value =
        serde_norway::from_str(OPENAPI_YAML).map_err(|e| format!("openapi/admin.yaml: {e}"))?;
    serde_json::to_string(&v).map_err(|e| e.to_string())
}

pub fn router<K: KeyStore, S: Store>(state: Arc<AdminState<K, S>>) -> Router {
    Router::new()
        .route("/admin/openapi.json", get(openapi::<K, S>))
        .route("/admin/keys", get(list::<K, S>).post(create::<K, S>))
        .route("/admin/keys/{id}", get(read::<K, S>).patch(update::<K, S>))
        .route("/admin/keys/{id}/revoke", post(revoke::<K, S>))
        .route("/admin/keys/{id}/rotate", post(rotate::<K, S>))
        .fallback(not_found)
        .method_not_allowed_fallback(not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

async fn not_found() -> Response {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "Not found.").into_response()
}

async fn not_allowed() -> Response {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "This method is not allowed on this path.",
    )
    .into_response()
}

/// The admin token, compared in constant time; `Err` is the 401.
fn authorize<K: KeyStore, S: Store>(
    state: &AdminState<K, S>,
    headers: &HeaderMap,
) -> Result<(), ApiError> {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim());
    match presented {
        Some(t) if state.token.matches(t.as_bytes()) => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "admin_unauthorized",
            "The admin API needs its token: Authorization: Bearer <admin token>.",
        )),
    }
}

/// Count the answer under `route` and send it.
fn answer<K: KeyStore, S: Store>(
    state: &AdminState<K, S>,
    route: &'static str,
    r: Result<Response, ApiError>,
) -> Response {
    let resp = r.unwrap_or_else(IntoResponse::into_response);
    state
        .authz
        .metrics()
        .admin_requests
        .with_label_values(&[route, resp.status().as_str()])
        .inc();
    resp
}

/// The body, or the 400/413 that says why it could not be read.
fn body(b: Body) -> Result<Bytes, ApiError> {
    b.map_err(|e| {
        let status = e.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                status,
                "body_too_large",
                format!("The request body is larger than {MAX_BODY} bytes."),
            )
        } else {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_body",
                "The request body could not be read.",
            )
        }
    })
}

/// The key id of a path (one that cannot be decoded names no key: 404).
fn path_id(p: Id) -> Result<String, ApiError> {
    p.map(|Path(id)| id)
        .map_err(|_| ApiError::new(StatusCode::NOT_FOUND, "key_not_found", "No such key."))
}

async fn openapi<K: KeyStore, S: Store>(State(state): St<K, S>) -> Response {
    let r = Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        state.openapi.clone(),
    )
        .into_response());
    answer(&state, "openapi", r)
}

/// Run `op` if the admin token is right, and count the answer under
/// `route`.
async fn guarded<
    K: KeyStore,
    S: Store,
    F: std::future::Future<Output = Result<Response, ApiError>>,
>(
    state: &AdminState<K, S>,
    route: &'static str,
    headers: &HeaderMap,
    op: impl FnOnce() -> F,
) -> Response {
    let r = match authorize(state, headers) {
        Ok(()) => op().await,
        Err(e) => Err(e),
    };
    answer(state, route, r)
}

type St<K, S> = State<Arc<AdminState<K, S>>>;
type Id = Result<Path<String>, PathRejection>;
type Body = Result<Bytes, BytesRejection>;

async fn list<K: KeyStore, S: Store>(
    State(st): St<K, S>,
    h: HeaderMap,
    RawQuery(q): RawQuery,
) -> Response {
    guarded(&st, "list", &h, || {
        keys::list(&st, q.as_deref().unwrap_or(""))
    })
    .await
}

async fn create<K: KeyStore, S: Store>(State(st): St<K, S>, h: HeaderMap, b: Body) -> Response {
    guarded(&st, "create", &h, || async {
        keys::create(&st, &body(b)?).await
    })
    .await
}

async fn read<K: KeyStore, S: Store>(State(st): St<K, S>, h: HeaderMap, id: Id) -> Response {
    guarded(&st, "get", &h, || async {
        keys::get(&st, &path_id(id)?).await
    })
    .await
}

async fn update<K: KeyStore, S: Store>(
    State(st): St<K, S>,
    h: HeaderMap,
    id: Id,
    b: Body,
) -> Response {
    guarded(&st, "update", &h, || async {
        keys::update(&st, &path_id(id)?, &body(b)?).await
    })
    .await
}

async fn revoke<K: KeyStore, S: Store>(State(st): St<K, S>, h: HeaderMap, id: Id) -> Response {
    guarded(&st, "revoke", &h, || async {
        keys::revoke(&st, &path_id(id)?).await
    })
    .await
}

async fn rotate<K: KeyStore, S: Store>(
    State(st): St<K, S>,
    h: HeaderMap,
    id: Id,
    b: Body,
) -> Response {
    guarded(&st, "rotate", &h, || async {
        keys::rotate(&st, &path_id(id)?, &body(b)?).await
    })
    .await
}
