//! `envoy.service.auth.v3.Authorization/Check`: maps a request's headers to a
//! [`CheckInput`] and a [`Decision`] to a `CheckResponse`.
//!
//! Header mutations on an allowed request use `append_action:
//! OVERWRITE_IF_EXISTS_OR_ADD` (and leave the deprecated `append` unset, which
//! older Envoys read as "overwrite"), so a client cannot forge the
//! `x-tollgate-*` headers.

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::header_value_option::HeaderAppendAction;
use envoy_types::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption};
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::envoy::service::auth::v3::authorization_server::{
    Authorization, AuthorizationServer,
};
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{
    CheckRequest, CheckResponse, DeniedHttpResponse, OkHttpResponse,
};
use envoy_types::pb::google::rpc;

use tollgate_wire::header as wire;
use tollgate_wire::Reservation;

use crate::authz::{Authorizer, CheckInput};

pub mod mcp;
use crate::decision::Decision;
use crate::storage::Store;

/// gRPC status codes used in `CheckResponse.status`.
const GRPC_OK: i32 = 0;
const GRPC_PERMISSION_DENIED: i32 = 7;
const GRPC_UNAUTHENTICATED: i32 = 16;

/// Request headers removed from an allowed request (they carry the key).
pub const HEADERS_TO_REMOVE: [&str; 2] = ["authorization", "x-api-key"];

pub fn header(key: &str, value: impl Into<String>) -> HeaderValueOption {
    #[allow(deprecated)]
    HeaderValueOption {
        header: Some(HeaderValue {
            key: key.to_string(),
            value: value.into(),
            raw_value: Vec::new(),
        }),
        append: None,
        append_action: HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
        keep_empty_value: false,
    }
}

/// Pull the headers a decision needs out of a `CheckRequest`. Reads both
/// `headers` (the default) and `header_map` (Envoy's `encode_raw_headers`).
pub fn check_input(req: &CheckRequest) -> CheckInput {
    let mut input = CheckInput::default();
    let Some(http) = req
        .attributes
        .as_ref()
        .and_then(|a| a.request.as_ref())
        .and_then(|r| r.http.as_ref())
    else {
        return input;
    };
    let mut set = |name: &str, value: &str| {
        let slot = match name {
            "authorization" => &mut input.authorization,
            "x-api-key" => &mut input.api_key,
            wire::MODEL => &mut input.model,
            "content-length" => {
                if input.content_length.is_none() {
                    input.content_length = value.trim().parse().ok();
                }
                return;
            }
            _ => return,
        };
        if slot.is_none() {
            *slot = Some(value.to_string());
        }
    };
    for (k, v) in &http.headers {
        set(&k.to_ascii_lowercase(), v);
    }
    if let Some(map) = &http.header_map {
        for h in &map.headers {
            let value = if h.raw_value.is_empty() {
                h.value.clone()
            } else {
                String::from_utf8_lossy(&h.raw_value).into_owned()
            };
            set(&h.key.to_ascii_lowercase(), &value);
        }
    }
    input
}

/// Is the request on the Anthropic Messages routes (answered in Anthropic's
/// shapes, [`crate::anthropic`])?
pub fn is_messages_request(req: &CheckRequest) -> bool {
    req.attributes
        .as_ref()
        .and_then(|a| a.request.as_ref())
        .and_then(|r| r.http.as_ref())
        .is_some_and(|h| tollgate_wire::is_messages_path(&h.path))
}

/// Build the `CheckResponse` for a decision (`Err` = gRPC UNAVAILABLE).
pub fn to_response(decision: Decision) -> Result<CheckResponse, tonic::Status> {
    match decision {
        Decision::Allow {
            tenant,
            key_id,
            models,
            rate_headers,
            reserved,
            reserved_at,
            output,
            settle_now,
            slot,
            cache_breakpoints,
        } => {
            let reservation = Reservation {
                tokens: reserved,
                at_minute: reserved_at,
                output,
                settle_now,
            };
            let mut headers = vec![
                header(wire::TENANT, tenant),
                header(wire::KEY_ID, key_id),
                header(wire::MODELS, models),
                // Always set ("0" when nothing was reserved), so a
                // client cannot forge it; the filter echoes it.
                header(wire::RESERVED, reservation.header()),
                // Always set too, so a client cannot opt itself in.
                header(
                    wire::CACHE_BREAKPOINTS,
                    if cache_breakpoints { "1" } else { "0" }.to_string(),
                ),
            ];
            let mut headers_to_remove: Vec<String> =
                HEADERS_TO_REMOVE.iter().map(|s| s.to_string()).collect();
            match slot {
                Some(slot) => headers.push(header(wire::SLOT, slot.header())),
                // A client's copy never reaches the filter.
                None => headers_to_remove.push(wire::SLOT.to_string()),
            }
            let ok = OkHttpResponse {
                headers,
                headers_to_remove,
                response_headers_to_add: rate_headers
                    .into_iter()
                    .map(|(k, v)| header(k, v))
                    .collect(),
                ..Default::default()
            };
            Ok(CheckResponse {
                status: Some(rpc::Status {
                    code: GRPC_OK,
                    message: String::new(),
                    details: Vec::new(),
                }),
                http_response: Some(HttpResponse::OkResponse(ok)),
                ..Default::default()
            })
        }
        Decision::Deny {
            status,
            body,
            headers,
        } => {
            let mut hs = vec![header("content-type", "application/json")];
            hs.extend(headers.into_iter().map(|(k, v)| header(k, v)));
            let denied = DeniedHttpResponse {
                status: Some(HttpStatus {
                    code: i32::from(status),
                }),
                headers: hs,
                body,
            };
            let code = if status == 401 {
                GRPC_UNAUTHENTICATED
            } else {
                GRPC_PERMISSION_DENIED
            };
            Ok(CheckResponse {
                status: Some(rpc::Status {
                    code,
                    message: String::new(),
                    details: Vec::new(),
                }),
                http_response: Some(HttpResponse::DeniedResponse(denied)),
                ..Default::default()
            })
        }
        Decision::Unavailable(msg) => Err(tonic::Status::unavailable(msg)),
    }
}

/// The tonic service.
pub struct AuthzService<S: Store> {
    inner: Arc<Authorizer<S>>,
}

impl<S: Store> AuthzService<S> {
    pub fn new(inner: Arc<Authorizer<S>>) -> Self {
        AuthzService { inner }
    }

    pub fn into_server(self) -> AuthorizationServer<Self> {
        AuthorizationServer::new(self)
    }
}

#[tonic::async_trait]
impl<S: Store> Authorization for AuthzService<S> {
    async fn check(
        &self,
        request: tonic::Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, tonic::Status> {
        let input = check_input(request.get_ref());
        if let Some(call) = mcp::call_of(request.get_ref()) {
            return mcp::check(&self.inner, &input, &call)
                .await
                .map(tonic::Response::new);
        }
        let mut decision = self.inner.check(&input).await;
        if is_messages_request(request.get_ref()) {
            decision = crate::anthropic::for_messages(decision, crate::anthropic::now_ms());
        }
        to_response(decision).map(tonic::Response::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::policy::{hash_key, Policy};
    use crate::storage::{ManualClock, MemoryStore};
    use envoy_types::pb::envoy::config::core::v3::HeaderMap;
    use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Request};
    use envoy_types::pb::envoy::service::auth::v3::AttributeContext;
    use std::collections::HashMap;

    fn req(http: HttpRequest) -> tonic::Request<CheckRequest> {
        tonic::Request::new(CheckRequest {
            attributes: Some(AttributeContext {
                request: Some(Request {
                    http: Some(http),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        })
    }

    fn with_headers(hs: &[(&str, &str)]) -> tonic::Request<CheckRequest> {
        let headers: HashMap<String, String> = hs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        req(HttpRequest {
            headers,
            ..Default::default()
        })
    }

    fn service() -> AuthzService<MemoryStore> {
        let yaml = format!(
            "version: 1
tenants:
  t:
    limits: {{requests_per_minute: 100}}
    model_limits:
      big/model: {{requests_per_minute: 1}}
keys:
  - id: k
    tenant: t
    sha256: {}
    models: [\"openai/*\", big/model]
",
            hash_key("tg-k")
        );
        let policy = Policy::from_yaml(&yaml).unwrap();
        let metrics = Arc::new(Metrics::new().unwrap());
        AuthzService::new(Arc::new(Authorizer::new(
            policy,
            MemoryStore::new(ManualClock::new(0)),
            metrics,
        )))
    }

    fn denied(r: &CheckResponse) -> (i32, String) {
        match &r.http_response {
            Some(HttpResponse::DeniedResponse(d)) => (
                d.status.as_ref().map(|s| s.code).unwrap_or(0),
                d.body.clone(),
            ),
            other => panic!("not denied: {other:?}"),
        }
    }

    #[tokio::test]
    async fn handler_without_a_socket() {
        let svc = service();
        let r = svc
            .check(with_headers(&[("authorization", "Bearer tg-k")]))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.status.map(|s| s.code), Some(GRPC_OK));
        let Some(HttpResponse::OkResponse(ok)) = r.http_response else {
            panic!("not ok")
        };
        let hs: Vec<(String, String)> = ok
            .headers
            .iter()
            .filter_map(|h| h.header.clone())
            .map(|h| (h.key, h.value))
            .collect();
        assert!(hs.contains(&("x-tollgate-models".into(), "openai/*,big/model".into())));

        let r = svc.check(with_headers(&[])).await.unwrap().into_inner();
        assert_eq!(
            r.status.as_ref().map(|s| s.code),
            Some(GRPC_UNAUTHENTICATED)
        );
        assert_eq!(denied(&r).0, 401);
    }

    #[tokio::test]
    async fn cache_breakpoints_follow_the_key_then_its_tenant_and_are_always_set() {
        let yaml = format!(
            "version: 1
tenants:
  on: {{cache_breakpoints: true}}
  off: {{}}
keys:
  - {{id: a, tenant: on, sha256: {}}}
  - {{id: b, tenant: on, sha256: {}, cache_breakpoints: false}}
  - {{id: c, tenant: off, sha256: {}}}
",
            hash_key("tg-a"),
            hash_key("tg-b"),
            hash_key("tg-c")
        );
        let svc = AuthzService::new(Arc::new(Authorizer::new(
            Policy::from_yaml(&yaml).unwrap(),
            MemoryStore::new(ManualClock::new(0)),
            Arc::new(Metrics::new().unwrap()),
        )));
        for (key, want) in [("tg-a", "1"), ("tg-b", "0"), ("tg-c", "0")] {
            let auth = format!("Bearer {key}");
            // A client's own copy is overwritten.
            let r = svc
                .check(with_headers(&[
                    ("authorization", auth.as_str()),
                    ("x-tollgate-cache-breakpoints", "1"),
                ]))
                .await
                .unwrap()
                .into_inner();
            let Some(HttpResponse::OkResponse(ok)) = r.http_response else {
                panic!("not ok")
            };
            let got: Vec<String> = ok
                .headers
                .iter()
                .filter_map(|h| h.header.clone())
                .filter(|h| h.key == "x-tollgate-cache-breakpoints")
                .map(|h| h.value)
                .collect();
            assert_eq!(got, vec![want.to_string()], "{key}");
        }
    }

    #[tokio::test]
    async fn raw_header_map_is_read_too() {
        let svc = service();
        let http = HttpRequest {
            header_map: Some(HeaderMap {
                headers: vec![HeaderValue {
                    key: "authorization".into(),
                    value: String::new(),
                    raw_value: b"Bearer tg-k".to_vec(),
                }],
            }),
            ..Default::default()
        };
        let r = svc.check(req(http)).await.unwrap().into_inner();
        assert_eq!(r.status.map(|s| s.code), Some(GRPC_OK));
    }

    #[tokio::test]
    async fn model_header_is_checked_and_per_model_limits_apply() {
        let svc = service();
        let key = ("authorization", "Bearer tg-k");
        let r = svc
            .check(with_headers(&[
                key,
                ("x-tollgate-model", "anthropic/claude"),
            ]))
            .await
            .unwrap()
            .into_inner();
        let (status, body) = denied(&r);
        assert_eq!(status, 403);
        assert!(body.contains("\"code\":\"model_not_allowed\""), "{body}");

        // A huge model name is echoed as a short prefix only.
        let huge = format!("anthropic/{}", "x".repeat(5000));
        let r = svc
            .check(with_headers(&[key, ("x-tollgate-model", &huge)]))
            .await
            .unwrap()
            .into_inner();
        let (status, body) = denied(&r);
        assert_eq!(status, 403);
        assert!(body.len() < 300, "{} bytes: {body}", body.len());
        assert!(body.contains(r#"model \"anthropic/xxxxx"#), "{body}");
        assert!(body.contains("…"), "{body}");

        let big = [key, ("x-tollgate-model", "big/model")];
        assert_eq!(
            svc.check(with_headers(&big))
                .await
                .unwrap()
                .into_inner()
                .status
                .map(|s| s.code),
            Some(GRPC_OK)
        );
        let r = svc.check(with_headers(&big)).await.unwrap().into_inner();
        let (status, body) = denied(&r);
        assert_eq!(status, 429);
        assert!(
            body.contains("Rate limit reached for tenant t model big/model on requests per minute"),
            "{body}"
        );
        // Other models are not affected by big/model's limit.
        let r = svc
            .check(with_headers(&[key, ("x-tollgate-model", "openai/gpt-4o")]))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.status.map(|s| s.code), Some(GRPC_OK));
    }

    #[test]
    fn unavailable_maps_to_grpc_unavailable() {
        let e = to_response(Decision::Unavailable("x".into())).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable);
    }
}
