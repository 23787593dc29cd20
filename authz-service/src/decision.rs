//! What the service answers, shared by every path that answers: a Check's
//! [`Decision`] (the bucket path in [`crate::authz`], money budgets in
//! [`crate::spend`], reshaped for Anthropic clients in [`crate::anthropic`]),
//! the OpenAI-format error body of a denial or an HTTP error, and client
//! input as an error message quotes it.
//!
//! Transport-free: [`crate::service`] maps a [`Decision`] onto an ext_authz
//! `CheckResponse`, [`crate::http`] sends the bodies of `/v1/usage`.

use tollgate_wire::{OutputCover, Slot};

/// What to answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Allow {
        tenant: String,
        key_id: String,
        models: String,
        /// `x-ratelimit-*` response headers (empty when the key has no
        /// limits, or when Redis failed open).
        rate_headers: Vec<(&'static str, String)>,
        /// Tokens reserved from the token buckets (0: none), sent on as
        /// `x-tollgate-reserved` for the filter to echo in its usage report.
        reserved: u64,
        /// The unix minute money was reserved at (None: no money budget),
        /// sent with `reserved` ([`tollgate_wire::Reservation`]).
        reserved_at: Option<u64>,
        /// The answer's part of `reserved` (None when nothing was reserved,
        /// or when the reservation is the smallest bucket's whole capacity,
        /// which no top-up could add to).
        output: Option<OutputCover>,
        /// The tightest token bucket is nearly empty: the filter posts this
        /// request's usage report at once.
        settle_now: bool,
        /// The concurrency slot the request holds (None: no
        /// `max_concurrent_requests` applies, or the store failed open).
        slot: Option<Slot>,
        /// The key's policy asks for prompt-cache breakpoints on Anthropic
        /// requests that carry none (`x-tollgate-cache-breakpoints: 1`).
        cache_breakpoints: bool,
    },
    Deny {
        status: u16,
        /// OpenAI-format JSON error body.
        body: String,
        /// Extra response headers (`retry-after`, `x-ratelimit-*`).
        headers: Vec<(&'static str, String)>,
    },
    /// Let Envoy's failure mode decide (gRPC UNAVAILABLE).
    Unavailable(String),
}

/// Longest piece of client input echoed in an error message, in characters.
pub const ECHO_MAX_CHARS: usize = 64;

/// Client input as quoted in an error message: debug-quoted (control
/// characters escaped) and cut to [`ECHO_MAX_CHARS`] characters, marked
/// with `…` when cut, so an error body stays short whatever was sent.
pub fn echo(input: &str) -> String {
    let (head, cut) = prefix(input, ECHO_MAX_CHARS);
    format!("{head:?}{}", if cut { "…" } else { "" })
}

/// `s` cut to `max_chars` characters, marked with `…` when cut.
pub fn clip(s: &str, max_chars: usize) -> String {
    let (head, cut) = prefix(s, max_chars);
    format!("{head}{}", if cut { "…" } else { "" })
}

/// The first `max_chars` characters of `s`, and whether anything was cut.
fn prefix(s: &str, max_chars: usize) -> (&str, bool) {
    match s.char_indices().nth(max_chars) {
        Some((at, _)) => (&s[..at], true),
        None => (s, false),
    }
}

/// An OpenAI-format error body (`param` null), as the text of a
/// `CheckResponse` or HTTP body: [`tollgate_wire::error_body`].
pub fn error_body(message: &str, kind: &str, code: &str) -> String {
    String::from_utf8_lossy(&tollgate_wire::error_body(message, kind, None, Some(code)))
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_body_keeps_openai_field_order() {
        assert_eq!(
            error_body("m \"q\"", "t", "c"),
            r#"{"error":{"message":"m \"q\"","type":"t","param":null,"code":"c"}}"#
        );
    }

    #[test]
    fn error_body_is_openai_shaped() {
        let v: serde_json::Value =
            serde_json::from_str(&error_body("m", "t", "c")).unwrap_or_default();
        assert_eq!(
            v,
            serde_json::json!({"error": {"message": "m", "type": "t", "param": null, "code": "c"}})
        );
    }
}
