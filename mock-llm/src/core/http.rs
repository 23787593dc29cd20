//! Small HTTP and JSON helpers: responses, URL decoding, ranges, time.

use crate::core::body::MockBody;
use crate::core::reply::Reply;
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use serde_json::Value;

/// Decode %XX escapes; None on a malformed escape or invalid UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = b.get(i + 1..i + 3)?;
            let v = u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()?;
            out.push(v);
            i += 3;
        } else if b[i] == b'+' {
            out.push(b'+');
            i += 1;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

pub fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        if percent_decode(k).as_deref() == Some(name) {
            percent_decode(&v.replace('+', " "))
        } else {
            None
        }
    })
}

/// A JSON response with a status.
pub fn json_response(status: u16, body: String, extra: &[(&'static str, String)]) -> Reply {
    let mut r = plain_json(status, body);
    for (k, v) in extra {
        if let Ok(v) = HeaderValue::from_str(v) {
            r.headers_mut().insert(*k, v);
        }
    }
    Reply::Response(r)
}

pub fn plain_json(status: u16, body: String) -> Response<MockBody> {
    let len = body.len();
    let mut r = Response::new(MockBody::full(body));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r.headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(len));
    r
}

pub fn json_escape(s: &str) -> String {
    let v = serde_json::to_string(s).unwrap_or_default();
    v.trim_matches('"').to_string()
}

/// A sampling parameter, when present and not null, must be a number
/// within `lo..=hi`.
pub fn in_range(v: Option<&Value>, lo: f64, hi: f64) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(x) => x.as_f64().is_some_and(|f| (lo..=hi).contains(&f)),
    }
}

/// Current Unix time, seconds.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Current Unix time, milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Short description of a serde_json parse error for messages.
pub fn json_err(e: &serde_json::Error) -> String {
    e.to_string()
}
