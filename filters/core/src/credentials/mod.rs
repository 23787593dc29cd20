//! Provider credentials: how a provider key becomes request headers. API
//! keys go in one header; Bedrock signs each request with [`sigv4`].
//! Key values are secret: they leave only in these headers.

pub mod sigv4;

use crate::config::Key;

/// `authorization: Bearer <key>` (OpenAI and compatible APIs).
pub fn bearer(key: &Key) -> (&'static str, String) {
    ("authorization", format!("Bearer {}", key.value))
}

/// The key as the value of its own header (`x-api-key`, `api-key`,
/// `x-goog-api-key`).
pub fn api_key(header: &'static str, key: &Key) -> (&'static str, String) {
    (header, key.value.clone())
}
