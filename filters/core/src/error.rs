//! OpenAI-shaped errors: every error a client sees from the filter is one of
//! these, rendered as `{"error":{"message","type","param","code"}}`.
//! Client input echoed in a message (model names, paths, parameter values)
//! goes through [`clip`], and [`ApiError::body`] caps the message and
//! `param` again, so an error body has a bounded size whatever was sent.

use std::borrow::Cow;

/// Characters of client input an error message may echo.
pub const ECHO_MAX_CHARS: usize = 64;
/// Characters of a whole error message (a backstop for every message).
pub const MESSAGE_MAX_CHARS: usize = 512;

/// `s` cut to its first `max_chars` characters, with `...` when cut.
pub fn clip(s: &str, max_chars: usize) -> Cow<'_, str> {
    match s.char_indices().nth(max_chars) {
        None => Cow::Borrowed(s),
        Some((end, _)) => Cow::Owned(format!("{}...", s.get(..end).unwrap_or_default())),
    }
}

/// Client input as echoed in an error message.
pub fn echo(s: &str) -> Cow<'_, str> {
    clip(s, ECHO_MAX_CHARS)
}

/// An error answered to the client (by a local reply or by rewriting an
/// upstream error body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
    /// OpenAI's `type` field.
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<String>,
    /// Seconds for a `retry-after` header (503s that will clear by
    /// themselves).
    pub retry_after: Option<u64>,
}

pub use tollgate_wire::error_type::{AUTH, INVALID_REQUEST, PERMISSION, RATE_LIMIT, SERVER};

impl ApiError {
    pub fn new(status: u16, kind: &'static str, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: Some(code.to_string()),
            retry_after: None,
        }
    }

    /// 400 `invalid_request_error` naming a parameter.
    pub fn bad_param(param: &str, message: impl Into<String>) -> Self {
        ApiError {
            status: 400,
            message: message.into(),
            kind: INVALID_REQUEST,
            param: Some(echo(param).into_owned()),
            code: Some("invalid_value".to_string()),
            retry_after: None,
        }
    }

    /// 400 for a parameter the chosen provider cannot honour.
    pub fn unsupported_param(param: &str, provider: &str) -> Self {
        ApiError {
            status: 400,
            message: format!(
                "Parameter '{}' is not supported by provider '{provider}'",
                echo(param)
            ),
            kind: INVALID_REQUEST,
            param: Some(echo(param).into_owned()),
            code: Some("unsupported_parameter".to_string()),
            retry_after: None,
        }
    }

    pub fn invalid_json(detail: &str) -> Self {
        ApiError::new(
            400,
            INVALID_REQUEST,
            "invalid_json",
            format!(
                "Request body is not valid JSON: {}",
                clip(detail, 2 * ECHO_MAX_CHARS)
            ),
        )
    }

    pub fn model_not_found(model: &str) -> Self {
        ApiError {
            param: Some("model".to_string()),
            ..ApiError::new(
                404,
                INVALID_REQUEST,
                "model_not_found",
                format!(
                    "The model '{}' does not exist or is not configured on this gateway",
                    echo(model)
                ),
            )
        }
    }

    pub fn model_not_allowed(model: &str) -> Self {
        ApiError {
            param: Some("model".to_string()),
            ..ApiError::new(
                403,
                PERMISSION,
                "model_not_allowed",
                format!(
                    "This API key is not allowed to use the model '{}'",
                    echo(model)
                ),
            )
        }
    }

    pub fn too_large(limit: u64) -> Self {
        ApiError::new(
            413,
            INVALID_REQUEST,
            "request_too_large",
            format!("Request body is larger than the limit of {limit} bytes"),
        )
    }

    pub fn unknown_url(method: &str, path: &str) -> Self {
        ApiError::new(
            404,
            INVALID_REQUEST,
            "unknown_url",
            format!("Unrecognized request URL ({} {})", echo(method), echo(path)),
        )
    }

    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        ApiError::new(
            405,
            INVALID_REQUEST,
            "method_not_allowed",
            format!("Method {} is not allowed on {}", echo(method), echo(path)),
        )
    }

    /// The JSON body (the wire contract's, shared with authz-service).
    pub fn body(&self) -> Vec<u8> {
        tollgate_wire::error_body(
            &clip(&self.message, MESSAGE_MAX_CHARS),
            self.kind,
            self.param.as_deref().map(echo).as_deref(),
            self.code.as_deref(),
        )
    }

    /// The same error in Anthropic's shape (the Messages front door):
    /// `{"type":"error","error":{"type":…,"message":…}}`.
    pub fn anthropic_body(&self) -> Vec<u8> {
        tollgate_wire::anthropic_error_body(self.status, &clip(&self.message, MESSAGE_MAX_CHARS))
    }

    /// The body in the shape of the client's API.
    pub fn body_for(&self, anthropic: bool) -> Vec<u8> {
        if anthropic {
            self.anthropic_body()
        } else {
            self.body()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_shape() {
        let e = ApiError::model_not_found("x/y");
        let v: serde_json::Value = serde_json::from_slice(&e.body()).unwrap();
        assert_eq!(v["error"]["code"], "model_not_found");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["param"], "model");
        assert_eq!(e.status, 404);
    }

    #[test]
    fn echoed_input_is_clipped() {
        let long = "m".repeat(5000);
        let e = ApiError::model_not_found(&long);
        assert!(e.message.len() < 200, "{}", e.message.len());
        assert!(e
            .message
            .contains(&format!("{}...", "m".repeat(ECHO_MAX_CHARS))));
        // Multi-byte characters are cut on a boundary.
        assert_eq!(clip("ééé", 2), "éé...");
        assert_eq!(clip("short", 64), "short");
        // The body caps any message and param.
        let e = ApiError::bad_param(&"p".repeat(1000), "x".repeat(10_000));
        assert!(
            e.body().len() < MESSAGE_MAX_CHARS + ECHO_MAX_CHARS + 200,
            "{}",
            e.body().len()
        );
    }
}
