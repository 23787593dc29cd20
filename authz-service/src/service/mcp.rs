//! ext_authz for the MCP routes (`/mcp/<server>`): reads what Envoy's MCP
//! filter parsed (dynamic metadata `envoy.filters.http.mcp`, which
//! ext_authz forwards: `metadata_context_namespaces` in envoy.yaml), asks
//! [`Authorizer::check_mcp`], and answers in MCP's shape: a denial is a
//! JSON-RPC error response carrying the request's id (401 with
//! `WWW-Authenticate`, 403, 429 with `retry-after`, 400), an allowed
//! request carries the key's tool patterns for the filter
//! ([`tollgate_wire::mcp::TOOLS_HEADER`]). Every answer leaves dynamic
//! metadata (tenant, key id, server, decision) for the access log.

use std::collections::HashMap;

use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{CheckRequest, CheckResponse};
use envoy_types::pb::google::protobuf::{value::Kind, ListValue, Struct, Value as PbValue};
use serde_json::{json, Value};
use tollgate_wire::mcp::{code, error_body, is_aggregate, server_of, METADATA_NAMESPACE};

use super::{header, to_response};
use crate::authz::mcp::{allowed_headers, McpAllowed, McpCall};
use crate::authz::{Authorizer, CheckInput};
use crate::decision::Decision;
use crate::storage::Store;

/// The MCP request a Check is about, when its path is an MCP route.
pub fn call_of(req: &CheckRequest) -> Option<McpCall> {
    let attrs = req.attributes.as_ref()?;
    let path = &attrs.request.as_ref()?.http.as_ref()?.path;
    // The aggregate endpoint has no server of its own: its tools name theirs.
    let server = match server_of(path) {
        Some(s) => s.to_string(),
        None if is_aggregate(path) => String::new(),
        None => return None,
    };
    let md = attrs
        .metadata_context
        .as_ref()
        .and_then(|m| m.filter_metadata.get(METADATA_NAMESPACE));
    let field = |name: &str| md.and_then(|s| s.fields.get(name)).map(to_json);
    let name = md
        .and_then(|s| s.fields.get("params"))
        .and_then(|p| match &p.kind {
            Some(Kind::StructValue(s)) => s.fields.get("name").map(to_json),
            _ => None,
        });
    Some(McpCall {
        server,
        method: field("method").and_then(|m| m.as_str().map(str::to_string)),
        id: field("id"),
        name,
    })
}

/// A protobuf `Value` as JSON; a whole number stays an integer (JSON-RPC
/// ids come as doubles).
fn to_json(v: &PbValue) -> Value {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::NumberValue(n)) if n.fract() == 0.0 && n.abs() < 9.0e15 => json!(*n as i64),
        Some(Kind::NumberValue(n)) => json!(n),
        Some(Kind::StringValue(s)) => json!(s),
        Some(Kind::BoolValue(b)) => json!(b),
        Some(Kind::StructValue(s)) => Value::Object(
            s.fields
                .iter()
                .map(|(k, v)| (k.clone(), to_json(v)))
                .collect(),
        ),
        Some(Kind::ListValue(ListValue { values })) => values.iter().map(to_json).collect(),
    }
}

fn string(s: &str) -> PbValue {
    PbValue {
        kind: Some(Kind::StringValue(s.to_string())),
    }
}

/// The JSON-RPC code and reason of a denial, from its status and the
/// OpenAI-shaped body the decision carries.
fn jsonrpc_code(status: u16, reason: &str) -> i64 {
    match status {
        401 => code::UNAUTHENTICATED,
        403 => code::NOT_ALLOWED,
        429 if reason == "budget_exceeded" => code::BUDGET_EXCEEDED,
        429 => code::RATE_LIMITED,
        400 => code::INVALID_PARAMS,
        _ => code::UNAVAILABLE,
    }
}

/// Decide an MCP request and answer Envoy.
pub async fn check<S: Store>(
    authz: &Authorizer<S>,
    input: &CheckInput,
    call: &McpCall,
) -> Result<CheckResponse, tonic::Status> {
    let (decision, allowed) = authz.check_mcp(input, call).await;
    let mut md: HashMap<String, PbValue> = HashMap::new();
    md.insert("mcp_server".into(), string(call.server_label()));
    if let (Some(t), Some(k)) = (&allowed.tenant, &allowed.key_id) {
        md.insert("tenant".into(), string(t));
        md.insert("key_id".into(), string(k));
    }
    let (label, mut response) = match decision {
        Decision::Allow { .. } => {
            let mut r = to_response(decision)?;
            if let Some(HttpResponse::OkResponse(ok)) = r.http_response.as_mut() {
                for (k, v) in allowed_headers(&allowed) {
                    ok.headers.push(header(k, v));
                }
            }
            ("allowed".to_string(), r)
        }
        Decision::Deny {
            status,
            body,
            mut headers,
        } => {
            let openai: Value = serde_json::from_str(&body).unwrap_or_default();
            let message = openai["error"]["message"].as_str().unwrap_or("Refused");
            let reason = openai["error"]["code"].as_str().unwrap_or("refused");
            let mut extra = json!({});
            if let Some((_, s)) = headers.iter().find(|(k, _)| *k == "retry-after") {
                extra["retry_after"] = json!(s.parse::<u64>().unwrap_or(1));
            }
            let rpc = error_body(
                call.id.as_ref(),
                jsonrpc_code(status, reason),
                message,
                Some(reason),
                Some(extra),
            );
            if status == 401 {
                // RFC 6750: a missing key gets the bare challenge, a wrong
                // one says invalid_token. No RFC 9728 metadata: virtual keys
                // are handed out by the operator, no OAuth server issues them.
                let challenge = if input.authorization.is_some() || input.api_key.is_some() {
                    r#"Bearer realm="tollgate", error="invalid_token", error_description="The virtual key is not valid""#
                } else {
                    r#"Bearer realm="tollgate""#
                };
                headers.push(("www-authenticate", challenge.to_string()));
            }
            let r = to_response(Decision::Deny {
                status,
                body: String::from_utf8_lossy(&rpc).into_owned(),
                headers,
            })?;
            refused(authz, call, &allowed, reason);
            (reason.to_string(), r)
        }
        Decision::Unavailable(msg) => return Err(tonic::Status::unavailable(msg)),
    };
    md.insert("mcp_decision".into(), string(&label));
    response.dynamic_metadata = Some(Struct { fields: md });
    Ok(response)
}

/// Counts a refusal in `tollgate_authz_mcp_refusals_total`. Label values
/// come from the policy, never from the client: a call the policy granted
/// and a limit or budget then refused names its server and tool; any other
/// refusal names them `other` (the names are the client's), and `-` stands
/// for no key or no tool (a method other than `tools/call`).
fn refused<S: Store>(authz: &Authorizer<S>, call: &McpCall, allowed: &McpAllowed, reason: &str) {
    let known = allowed.key_id.is_some();
    let granted = known && matches!(reason, "rate_limit_exceeded" | "budget_exceeded");
    let server = match (known, granted) {
        (false, _) => "-",
        (true, true) => call.server_label(),
        (true, false) => "other",
    };
    let tool = match call.tool() {
        None => "-",
        Some(_) if !known => "-",
        Some(_) if granted => allowed.tool.as_str(),
        Some(_) => "other",
    };
    authz
        .metrics()
        .mcp_refusals
        .with_label_values(&[
            allowed.tenant.as_deref().unwrap_or("-"),
            allowed.key_id.as_deref().unwrap_or("-"),
            server,
            tool,
            reason,
        ])
        .inc();
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::core::v3::Metadata;
    use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Request};
    use envoy_types::pb::envoy::service::auth::v3::AttributeContext;

    fn pb(v: Value) -> PbValue {
        let kind = match v {
            Value::Null => Kind::NullValue(0),
            Value::Bool(b) => Kind::BoolValue(b),
            Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap()),
            Value::String(s) => Kind::StringValue(s),
            Value::Array(a) => Kind::ListValue(ListValue {
                values: a.into_iter().map(pb).collect(),
            }),
            Value::Object(o) => Kind::StructValue(Struct {
                fields: o.into_iter().map(|(k, v)| (k, pb(v))).collect(),
            }),
        };
        PbValue { kind: Some(kind) }
    }

    fn request(path: &str, md: Value) -> CheckRequest {
        let Kind::StructValue(s) = pb(md).kind.unwrap() else {
            panic!()
        };
        CheckRequest {
            attributes: Some(AttributeContext {
                request: Some(Request {
                    http: Some(HttpRequest {
                        path: path.into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                metadata_context: Some(Metadata {
                    filter_metadata: [(METADATA_NAMESPACE.to_string(), s)].into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn calls_from_the_mcp_filters_metadata() {
        let r = request(
            "/mcp/demo?x",
            json!({"method": "tools/call", "id": 7, "params": {"name": "get_weather"}}),
        );
        let c = call_of(&r).unwrap();
        assert_eq!(c.server, "demo");
        assert_eq!(c.method.as_deref(), Some("tools/call"));
        assert_eq!(c.id, Some(json!(7)));
        assert_eq!(c.tool(), Some(Ok("get_weather")));
        let c = call_of(&request(
            "/mcp/demo",
            json!({"method": "tools/call", "id": "a", "params": {"name": 5}}),
        ))
        .unwrap();
        assert_eq!(c.id, Some(json!("a")));
        assert_eq!(c.tool(), Some(Err(())));
        assert!(call_of(&request("/v1/chat/completions", json!({}))).is_none());
        let c = call_of(&request("/mcp/demo", json!({}))).unwrap();
        assert_eq!(c.method, None);
        assert_eq!(c.tool(), None);
    }
}
