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

pub mod mcp;

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
    /// What authz-service reserved at Check time (request, set by
    /// ext_authz): the tokens, the minute money was reserved for them, the
    /// answer's part and whether to settle at once ([`crate::Reservation`]);
    /// the filter echoes the tokens and the minute in the usage report
    /// (`reserved`, `reserved_at`) and tops the reservation up when the
    /// request's own output limit needs more ([`crate::TopUp`]).
    pub const RESERVED: &str = "x-tollgate-reserved";
    /// The concurrency slot the request holds (request, set by ext_authz
    /// when a `max_concurrent_requests` applies): `<id>;ttl=<ms>`
    /// ([`crate::Slot`]). The filter renews it while the request runs and
    /// releases it in the request's usage report.
    pub const SLOT: &str = "x-tollgate-slot";
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
/// Path on authz-service's HTTP port that tops a reservation up
/// ([`TopUp`] in, [`TopUpAnswer`] out).
pub const RESERVE_PATH: &str = "/v1/reserve";
/// Path on authz-service's HTTP port that renews concurrency slots (a JSON
/// array of [`SlotRef`]).
pub const SLOTS_RENEW_PATH: &str = "/v1/slots/renew";

/// One answer's (or one batch entry's) usage, debited from the tenant's and
/// the key's token budgets. The filter posts one object, or a JSON array of
/// them (a batch), to [`USAGE_PATH`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Web searches the provider ran for the answer, priced per search.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub web_searches: u64,
    /// Tokens authz-service reserved at Check time (`x-tollgate-reserved`),
    /// settled against the usage; absent in reports that settle nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved: Option<u64>,
    /// The unix minute at which money was reserved for `reserved`: the
    /// report settles the money budgets' windows of that minute, not of its
    /// arrival (a request admitted before midnight is charged to that day).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_at: Option<u64>,
    /// The output tokens the requests needed: their declared output limit
    /// (`max_tokens`, `max_completion_tokens`, `max_output_tokens`, after
    /// the gateway lowered it), or for a request that declared none what
    /// the Check covers for it ([`OutputCover::undeclared`]); the largest
    /// of a batch's requests. authz-service learns the key's answer
    /// reservation from it. Absent when nothing was reserved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_limit: Option<u64>,
    /// The concurrency slot the request held ([`header::SLOT`]): the report
    /// releases it. Reports holding a slot are never batched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
}

/// Of a reservation, the answer's part: the output tokens it covers, and
/// what a request that declares no output limit needs (the tenant's
/// `reserve_completion_tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputCover {
    pub reserved: u64,
    pub undeclared: u64,
}

impl OutputCover {
    /// The output tokens a request needs: its declared limit, or
    /// [`OutputCover::undeclared`].
    pub fn need(&self, declared: Option<u64>) -> u64 {
        declared.unwrap_or(self.undeclared)
    }

    /// How many more tokens a request declaring `declared` needs than
    /// were reserved for its answer (0: covered).
    pub fn shortfall(&self, declared: Option<u64>) -> u64 {
        self.need(declared).saturating_sub(self.reserved)
    }
}

/// A Check's reservation as [`header::RESERVED`] carries it:
/// `<tokens>[@<unix minute>][;o=<output>;u=<undeclared>][;now]`.
///
/// - `tokens`: reserved from the key's and tenant's token buckets (and
///   priced on money budgets);
/// - `@minute`: the minute money was reserved at;
/// - `o`, `u`: the answer's part ([`OutputCover`]), present when tokens
///   were reserved: a request whose output limit needs more than `o` is
///   topped up before it is forwarded ([`TopUp`]);
/// - `now`: the bucket is nearly empty: the filter posts this request's
///   usage report at once rather than with its batch, so the refund of a
///   short answer lands before the client's next request.
///
/// Parts the reader does not know are skipped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reservation {
    pub tokens: u64,
    pub at_minute: Option<u64>,
    pub output: Option<OutputCover>,
    pub settle_now: bool,
}

impl Reservation {
    /// The header value.
    pub fn header(&self) -> String {
        let mut v = self.tokens.to_string();
        if let Some(m) = self.at_minute {
            v.push('@');
            v.push_str(&m.to_string());
        }
        if let Some(o) = self.output {
            v.push_str(&format!(";o={};u={}", o.reserved, o.undeclared));
        }
        if self.settle_now {
            v.push_str(";now");
        }
        v
    }

    /// Reads a header value written by [`Reservation::header`]; None when
    /// it is not one.
    pub fn parse(value: &str) -> Option<Reservation> {
        let mut parts = value.split(';');
        let head = parts.next()?;
        let (tokens, at_minute) = match head.split_once('@') {
            Some((tokens, minute)) => (tokens.parse().ok()?, Some(minute.parse().ok()?)),
            None => (head.parse().ok()?, None),
        };
        let mut r = Reservation {
            tokens,
            at_minute,
            ..Reservation::default()
        };
        let (mut o, mut u) = (None, None);
        for part in parts {
            match part.split_once('=') {
                Some(("o", n)) => o = Some(n.parse().ok()?),
                Some(("u", n)) => u = Some(n.parse().ok()?),
                None if part == "now" => r.settle_now = true,
                _ => {}
            }
        }
        if let (Some(reserved), Some(undeclared)) = (o, u) {
            r.output = Some(OutputCover {
                reserved,
                undeclared,
            });
        }
        Some(r)
    }
}

/// A concurrency slot as [`header::SLOT`] carries it: `<id>;ttl=<ms>`. The
/// slot expires `ttl_ms` after it was taken or last renewed; the filter
/// renews it every third of that while its request runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub id: String,
    pub ttl_ms: u64,
}

/// Longest slot id: `[A-Za-z0-9]`, at most this many bytes.
pub const SLOT_ID_MAX_LEN: usize = 40;

/// Is `id` a slot id authz-service could have made?
pub fn valid_slot_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= SLOT_ID_MAX_LEN && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

impl Slot {
    pub fn header(&self) -> String {
        format!("{};ttl={}", self.id, self.ttl_ms)
    }

    /// Reads a header value written by [`Slot::header`]; None when it is
    /// not one.
    pub fn parse(value: &str) -> Option<Slot> {
        let (id, ttl) = value.split_once(";ttl=")?;
        let ttl_ms = ttl.parse().ok().filter(|&t| t > 0)?;
        valid_slot_id(id).then(|| Slot {
            id: id.to_string(),
            ttl_ms,
        })
    }
}

/// One slot to renew ([`SLOTS_RENEW_PATH`] takes an array of them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlotRef {
    pub tenant: String,
    pub key_id: String,
    pub slot: String,
}

/// A request whose output limit needs more than its Check reserved, as the
/// filter sends it to [`RESERVE_PATH`] before forwarding the request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopUp {
    pub tenant: String,
    pub key_id: String,
    /// The client's `x-tollgate-model` declaration, as the Check saw it
    /// (per-model money budgets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// What the Check reserved ([`Reservation::tokens`]).
    pub reserved: u64,
    /// Its answer's part ([`OutputCover::reserved`]).
    pub output: u64,
    /// The output tokens the request needs ([`OutputCover::need`]).
    pub need: u64,
}

/// authz-service's answer to a [`TopUp`] (always HTTP 200 once decided):
/// the tokens now reserved for the request, or the refusal the client gets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopUpAnswer {
    /// Tokens reserved for the request in all: what the usage report
    /// echoes as `reserved`.
    pub reserved: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refusal>,
}

/// A refusal to relay to the client in its API's shape.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Refusal {
    pub status: u16,
    pub message: String,
    /// OpenAI's error `type` (`tokens`, `insufficient_quota`…).
    #[serde(rename = "type")]
    pub kind: String,
    pub code: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
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
            ..UsageReport::default()
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
        let tokens = |tokens, at_minute| Reservation {
            tokens,
            at_minute,
            ..Reservation::default()
        };
        assert_eq!(tokens(500, None).header(), "500");
        assert_eq!(tokens(500, Some(29_000_000)).header(), "500@29000000");
        let full = Reservation {
            output: Some(OutputCover {
                reserved: 16,
                undeclared: 256,
            }),
            settle_now: true,
            ..tokens(40, Some(29_000_000))
        };
        assert_eq!(full.header(), "40@29000000;o=16;u=256;now");
        for r in [tokens(500, None), tokens(500, Some(29_000_000)), full] {
            assert_eq!(Reservation::parse(&r.header()), Some(r));
        }
        // Unknown parts are skipped; an output part needs both figures.
        assert_eq!(
            Reservation::parse("40;x=1;o=16;later"),
            Some(tokens(40, None))
        );
        for bad in ["", "x", "500@", "@1", "5@x", "-1", "1@2@3", "1;o=x;u=2"] {
            assert_eq!(Reservation::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn output_cover_needs() {
        let o = OutputCover {
            reserved: 16,
            undeclared: 256,
        };
        assert_eq!(o.shortfall(Some(16)), 0);
        assert_eq!(o.shortfall(Some(8)), 0);
        assert_eq!(o.shortfall(Some(100)), 84);
        assert_eq!(o.shortfall(None), 240, "undeclared: the default");
    }

    #[test]
    fn slot_header_round_trip() {
        let s = Slot {
            id: "a1B2".into(),
            ttl_ms: 30_000,
        };
        assert_eq!(s.header(), "a1B2;ttl=30000");
        assert_eq!(Slot::parse(&s.header()), Some(s));
        let long = format!("{};ttl=1", "a".repeat(SLOT_ID_MAX_LEN + 1));
        for bad in ["", "a", "a;ttl=", "a;ttl=0", ";ttl=5", "a-b;ttl=5", &long] {
            assert_eq!(Slot::parse(bad), None, "{bad:?}");
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
