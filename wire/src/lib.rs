//! The wire contract between Tollgate's parts: what authz-service and the
//! Wasm filter say to each other (the `x-tollgate-*` request headers, the
//! usage report of `POST /v1/usage`), the OpenAI error body both answer
//! clients with, and the rules both apply to names and model patterns.
//! No dependency beyond serde, so it builds for wasm32 as well as natively.
//!
//! ```
//! use tollgate_wire::{error_body, models_allowed, UsageReport, header};
//!
//! assert_eq!(header::MODELS, "x-tollgate-models");
//! assert!(models_allowed("openai/*, fast", &["openai/gpt-4o"]));
//! let r: UsageReport = serde_json::from_str(
//!     r#"{"tenant":"t","key_id":"k","model":"openai/gpt-4o","prompt_tokens":3,"completion_tokens":4}"#,
//! ).unwrap();
//! assert_eq!(r.prompt_tokens, 3);
//! assert_eq!(
//!     error_body("No such model", "invalid_request_error", Some("model"), Some("model_not_found")),
//!     br#"{"error":{"message":"No such model","type":"invalid_request_error","param":"model","code":"model_not_found"}}"#,
//! );
//! ```

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use serde::{Deserialize, Serialize};

/// Request headers set by authz-service for the filter (and, for
/// [`MODEL`](header::MODEL), by clients), and those the filter sets itself.
/// authz-service removes any client-sent copy of the ones it owns.
pub mod header {
    /// The tenant of the virtual key (authz-service → filter).
    pub const TENANT: &str = "x-tollgate-tenant";
    /// The virtual key's id, never the key (authz-service → filter).
    pub const KEY_ID: &str = "x-tollgate-key-id";
    /// The key's model allow-list: patterns joined with `,` (authz-service →
    /// filter); see [`crate::models_allowed`].
    pub const MODELS: &str = "x-tollgate-models";
    /// The model a client declares up front for per-model admission; the
    /// filter checks that the body names the same model.
    pub const MODEL: &str = "x-tollgate-model";
    /// The provider cluster the filter routes to (filter → router).
    pub const CLUSTER: &str = "x-tollgate-cluster";
    /// Tokens authz-service reserved at Check time (request, set by
    /// ext_authz), and when money was reserved for them the minute it was
    /// (`<tokens>@<unix minute>`, see [`crate::reservation`]); the filter
    /// echoes both in the usage report (`reserved`, `reserved_at`).
    pub const RESERVED: &str = "x-tollgate-reserved";
    /// The provider that answered (filter → client).
    pub const PROVIDER: &str = "x-tollgate-provider";
    /// Response: the provider's own request id (OpenAI `x-request-id`,
    /// Anthropic `request-id`, Bedrock `x-amzn-requestid`), for support
    /// requests to the provider.
    pub const PROVIDER_REQUEST_ID: &str = "x-tollgate-provider-request-id";
    /// The gateway's credential on its usage reports (Envoy → authz-service,
    /// injected by the `tollgate_authz_http` cluster from a secret file; the
    /// filter never sees it).
    pub const USAGE_TOKEN: &str = "x-tollgate-usage-token";
    /// `1` when the key's or tenant's policy asks the gateway to add prompt
    /// cache breakpoints to Anthropic requests that carry none
    /// (authz-service → filter; always set, `0` otherwise, so a client
    /// cannot forge it).
    pub const CACHE_BREAKPOINTS: &str = "x-tollgate-cache-breakpoints";
}

/// Path on authz-service's HTTP port that takes usage reports.
pub const USAGE_PATH: &str = "/v1/usage";

/// One answer's (or one batch entry's) usage, debited from the tenant's and
/// the key's token budgets. The filter posts one object, or a JSON array of
/// them (a batch), to [`USAGE_PATH`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageReport {
    pub tenant: String,
    pub key_id: String,
    /// `provider/model`; absent in reports that only debit key and tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    /// Prompt tokens read from the provider's cache (part of
    /// `prompt_tokens`), priced as cached input.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_tokens: u64,
    /// Prompt tokens written to the provider's cache (part of
    /// `prompt_tokens`), priced as cache writes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    /// Tokens authz-service reserved at Check time (`x-tollgate-reserved`),
    /// settled against the usage; absent in reports that settle nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved: Option<u64>,
    /// The unix minute at which money was reserved for `reserved`: the
    /// report settles the money budgets' windows of that minute, not of its
    /// arrival (a request admitted before midnight is charged to that day).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_at: Option<u64>,
}

/// The [`header::RESERVED`] value: `<tokens>`, or `<tokens>@<unix minute>`
/// when money was reserved at that minute.
pub fn reservation(tokens: u64, at_minute: Option<u64>) -> String {
    match at_minute {
        Some(m) => format!("{tokens}@{m}"),
        None => tokens.to_string(),
    }
}

/// Reads a [`header::RESERVED`] value written by [`reservation`]; None
/// when it is not one.
pub fn parse_reservation(value: &str) -> Option<(u64, Option<u64>)> {
    match value.split_once('@') {
        Some((tokens, minute)) => Some((tokens.parse().ok()?, Some(minute.parse().ok()?))),
        None => Some((value.parse().ok()?, None)),
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// OpenAI's error `type` values used by Tollgate.
pub mod error_type {
    pub const INVALID_REQUEST: &str = "invalid_request_error";
    pub const AUTH: &str = "authentication_error";
    pub const PERMISSION: &str = "permission_error";
    pub const RATE_LIMIT: &str = "rate_limit_error";
    pub const SERVER: &str = "server_error";
}

/// `{"error":{"message","type","param","code"}}` in OpenAI's field order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorBody<'a> {
    pub error: ErrorDetail<'a>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorDetail<'a> {
    pub message: &'a str,
    #[serde(rename = "type")]
    pub kind: &'a str,
    pub param: Option<&'a str>,
    pub code: Option<&'a str>,
}

/// The OpenAI error body as bytes.
pub fn error_body(message: &str, kind: &str, param: Option<&str>, code: Option<&str>) -> Vec<u8> {
    let body = ErrorBody {
        error: ErrorDetail {
            message,
            kind,
            param,
            code,
        },
    };
    serde_json::to_vec(&body).unwrap_or_else(|_| {
        br#"{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}"#
            .to_vec()
    })
}

/// Does one allow-list pattern match `model`? `*` matches any model, a
/// trailing `*` a prefix (`openai/*`), anything else only itself.
pub fn model_matches(pattern: &str, model: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => model.starts_with(prefix),
        None => pattern == model,
    }
}

/// Does the comma-separated allow-list (as sent in [`header::MODELS`];
/// blanks around patterns and empty patterns are ignored) allow any of
/// `names` (a model can be named as asked and as resolved)?
pub fn models_allowed(patterns: &str, names: &[&str]) -> bool {
    patterns
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .any(|p| names.iter().any(|n| model_matches(p, n)))
}

/// A name of the config (tenant, key id, provider): non-empty, only ASCII
/// letters, digits, `.`, `_` and `-`, so it is safe in headers, metric names,
/// Redis keys and logs.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

/// Longest tenant or virtual key id authz-service accepts.
pub const MAX_POLICY_NAME_LEN: usize = 64;

/// A model name or allow-list pattern: non-empty, at most 128 bytes of
/// visible ASCII, without the `,` that separates patterns in
/// [`header::MODELS`] or braces (Redis hash tags).
pub fn valid_model(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_graphic() && b != b',' && b != b'{' && b != b'}')
}

/// Path prefix of the Anthropic Messages front door: errors on it are in
/// Anthropic's shape ([`anthropic_error_body`]).
pub const MESSAGES_PATH: &str = "/v1/messages";

/// Does a request path belong to the Anthropic Messages front door
/// (`/v1/messages`, `/v1/messages/count_tokens`, any query string)?
pub fn is_messages_path(path: &str) -> bool {
    path.strip_prefix(MESSAGES_PATH)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || rest.starts_with('?'))
}

/// Anthropic's error `type` for an HTTP status.
pub fn anthropic_error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        504 => "timeout_error",
        s if s < 500 => "invalid_request_error",
        _ => "api_error",
    }
}

#[derive(Serialize)]
struct AnthropicErrorBody<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    error: AnthropicErrorDetail<'a>,
}

#[derive(Serialize)]
struct AnthropicErrorDetail<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    message: &'a str,
}

/// The Anthropic error body as bytes:
/// `{"type":"error","error":{"type":…,"message":…}}`, the type from the
/// status ([`anthropic_error_type`]).
pub fn anthropic_error_body(status: u16, message: &str) -> Vec<u8> {
    let body = AnthropicErrorBody {
        kind: "error",
        error: AnthropicErrorDetail {
            kind: anthropic_error_type(status),
            message,
        },
    };
    serde_json::to_vec(&body).unwrap_or_else(|_| {
        br#"{"type":"error","error":{"type":"api_error","message":"internal error"}}"#.to_vec()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert!(model_matches("*", "openai/gpt-4o"));
        assert!(model_matches("openai/*", "openai/gpt-4o"));
        assert!(!model_matches("openai/*", "anthropic/claude"));
        assert!(model_matches("openai/gpt-4o", "openai/gpt-4o"));
        assert!(!model_matches("openai/gpt-4o", "openai/gpt-4o-mini"));
        assert!(models_allowed(" , anthropic/*, fast ", &["x", "fast"]));
        assert!(!models_allowed("", &["fast"]));
        assert!(!models_allowed(" , ", &["fast"]));
        assert!(!models_allowed("openai/gpt-4o", &["openai/gpt-4o-mini"]));
    }

    #[test]
    fn names() {
        assert!(valid_name("demo-key_1.a"));
        for bad in ["", "a b", "a/b", "é", "a,b"] {
            assert!(!valid_name(bad), "{bad:?}");
        }
        assert!(valid_model(
            "bedrock/anthropic.claude-3-haiku-20240307-v1:0"
        ));
        for bad in ["", "a,b", "a b", "{a}", &"m".repeat(129)] {
            assert!(!valid_model(bad), "{bad:?}");
        }
    }

    #[test]
    fn usage_report_round_trip() {
        let r = UsageReport {
            tenant: "t".into(),
            key_id: "k".into(),
            model: Some("a/m".into()),
            prompt_tokens: 3,
            completion_tokens: 4,
            cached_tokens: 0,
            cache_write_tokens: 0,
            reserved: None,
            reserved_at: None,
        };
        let bytes = serde_json::to_vec(&r).unwrap();
        assert_eq!(
            bytes,
            br#"{"tenant":"t","key_id":"k","model":"a/m","prompt_tokens":3,"completion_tokens":4}"#
        );
        assert_eq!(serde_json::from_slice::<UsageReport>(&bytes).unwrap(), r);
        let settled = UsageReport {
            reserved: Some(500),
            reserved_at: Some(29_000_000),
            ..r
        };
        let bytes = serde_json::to_vec(&settled).unwrap();
        assert!(bytes.ends_with(br#""completion_tokens":4,"reserved":500,"reserved_at":29000000}"#));
        assert_eq!(
            serde_json::from_slice::<UsageReport>(&bytes).unwrap(),
            settled
        );
        let minimal: UsageReport = serde_json::from_str(r#"{"tenant":"t","key_id":"k"}"#).unwrap();
        assert_eq!(
            (minimal.model, minimal.prompt_tokens, minimal.reserved),
            (None, 0, None)
        );
        assert!(
            serde_json::from_str::<UsageReport>(r#"{"tenant":"t","key_id":"k","x":1}"#).is_err()
        );
    }

    #[test]
    fn reservation_header_round_trip() {
        assert_eq!(reservation(500, None), "500");
        assert_eq!(reservation(500, Some(29_000_000)), "500@29000000");
        assert_eq!(parse_reservation("500"), Some((500, None)));
        assert_eq!(
            parse_reservation("500@29000000"),
            Some((500, Some(29_000_000)))
        );
        for bad in ["", "x", "500@", "@1", "5@x", "-1", "1@2@3"] {
            assert_eq!(parse_reservation(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn error_body_escapes_and_orders() {
        let b = error_body("m \"q\"", "t", None, Some("c"));
        assert_eq!(
            b,
            br#"{"error":{"message":"m \"q\"","type":"t","param":null,"code":"c"}}"#
        );
    }

    #[test]
    fn anthropic_error_shape_and_paths() {
        assert_eq!(
            anthropic_error_body(429, "slow \"down\""),
            br#"{"type":"error","error":{"type":"rate_limit_error","message":"slow \"down\""}}"#
        );
        assert_eq!(anthropic_error_type(401), "authentication_error");
        assert_eq!(anthropic_error_type(400), "invalid_request_error");
        assert_eq!(anthropic_error_type(502), "api_error");
        assert_eq!(anthropic_error_type(503), "overloaded_error");
        for p in [
            "/v1/messages",
            "/v1/messages/count_tokens",
            "/v1/messages?beta=true",
        ] {
            assert!(is_messages_path(p), "{p}");
        }
        for p in ["/v1/messagesx", "/v1/chat/completions", "/v1/message"] {
            assert!(!is_messages_path(p), "{p}");
        }
    }
}
