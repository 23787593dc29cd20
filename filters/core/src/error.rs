//! OpenAI-shaped errors: every error a client sees from the filter is one of
//! these, rendered as `{"error":{"message","type","param","code"}}`.

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
        }
    }

    /// 400 `invalid_request_error` naming a parameter.
    pub fn bad_param(param: &str, message: impl Into<String>) -> Self {
        ApiError {
            status: 400,
            message: message.into(),
            kind: INVALID_REQUEST,
            param: Some(param.to_string()),
            code: Some("invalid_value".to_string()),
        }
    }

    /// 400 for a parameter the chosen provider cannot honour.
    pub fn unsupported_param(param: &str, provider: &str) -> Self {
        ApiError {
            status: 400,
            message: format!("Parameter '{param}' is not supported by provider '{provider}'"),
            kind: INVALID_REQUEST,
            param: Some(param.to_string()),
            code: Some("unsupported_parameter".to_string()),
        }
    }

    pub fn invalid_json(detail: &str) -> Self {
        ApiError::new(
            400,
            INVALID_REQUEST,
            "invalid_json",
            format!("Request body is not valid JSON: {detail}"),
        )
    }

    pub fn model_not_found(model: &str) -> Self {
        ApiError {
            param: Some("model".to_string()),
            ..ApiError::new(
                404,
                INVALID_REQUEST,
                "model_not_found",
                format!("The model '{model}' does not exist or is not configured on this gateway"),
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
                format!("This API key is not allowed to use the model '{model}'"),
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
            format!("Unrecognized request URL ({method} {path})"),
        )
    }

    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        ApiError::new(
            405,
            INVALID_REQUEST,
            "method_not_allowed",
            format!("Method {method} is not allowed on {path}"),
        )
    }

    /// The JSON body (the wire contract's, shared with authz-service).
    pub fn body(&self) -> Vec<u8> {
        tollgate_wire::error_body(
            &self.message,
            self.kind,
            self.param.as_deref(),
            self.code.as_deref(),
        )
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
}
