//! Request counters and the log of recent requests, redacted of secrets.

use bytes::Bytes;
use hyper::http::request::Parts;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// Headers whose values are credentials: replaced by `<redacted>`.
const SECRET_HEADERS: &[&str] = &[
    "authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "x-amz-security-token",
    "proxy-authorization",
    "cookie",
];

/// Query parameters whose values are credentials.
const SECRET_PARAMS: &[&str] = &["key", "api-key", "X-Amz-Signature", "X-Amz-Credential"];

pub const REDACTED: &str = "<redacted>";

/// One logged request.
pub struct Recent {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl Recent {
    pub fn capture(parts: &Parts, body: &Bytes) -> Recent {
        let headers = parts
            .headers
            .iter()
            .map(|(k, v)| {
                let name = k.as_str().to_string();
                let val = if SECRET_HEADERS.contains(&k.as_str()) {
                    REDACTED.to_string()
                } else {
                    String::from_utf8_lossy(v.as_bytes()).into_owned()
                };
                (name, val)
            })
            .collect();
        Recent {
            method: parts.method.as_str().to_string(),
            path: redact_query(parts.uri.path(), parts.uri.query()),
            headers,
            body: body.clone(),
        }
    }
}

fn redact_query(path: &str, query: Option<&str>) -> String {
    let Some(q) = query else {
        return path.to_string();
    };
    let parts: Vec<String> = q
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if SECRET_PARAMS.iter().any(|s| s.eq_ignore_ascii_case(k)) => {
                format!("{k}={REDACTED}")
            }
            _ => kv.to_string(),
        })
        .collect();
    format!("{path}?{}", parts.join("&"))
}

type CountKey = (Arc<str>, Option<Arc<str>>, Option<String>, u16);

struct Entry {
    seq: u64,
    ts_ms: u64,
    provider: Arc<str>,
    key_id: Option<Arc<str>>,
    model: Option<String>,
    status: u16,
    req: Recent,
}

#[derive(Default)]
struct Inner {
    total: u64,
    counts: HashMap<CountKey, u64>,
    recent: VecDeque<Entry>,
}

pub struct Stats {
    keep: usize,
    inner: Mutex<Inner>,
}

impl Stats {
    pub fn new(keep: usize) -> Stats {
        Stats {
            keep,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Count a request; `capture` is only called when the log is enabled.
    pub fn record(
        &self,
        provider: Arc<str>,
        key_id: Option<Arc<str>>,
        model: Option<String>,
        status: u16,
        capture: impl FnOnce() -> Recent,
    ) {
        let req = if self.keep > 0 { Some(capture()) } else { None };
        let Ok(mut g) = self.inner.lock() else { return };
        g.total += 1;
        if let Some(req) = req {
            if g.recent.len() == self.keep {
                g.recent.pop_front();
            }
            let seq = g.total;
            g.recent.push_back(Entry {
                seq,
                ts_ms: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0),
                provider: provider.clone(),
                key_id: key_id.clone(),
                model: model.clone(),
                status,
                req,
            });
        }
        *g.counts
            .entry((provider, key_id, model, status))
            .or_insert(0) += 1;
    }

    pub fn reset(&self) {
        if let Ok(mut g) = self.inner.lock() {
            *g = Inner::default();
        }
    }

    /// The `/_mock/stats` document.
    pub fn to_json(&self) -> Value {
        let Ok(g) = self.inner.lock() else {
            return json!({"error":"poisoned"});
        };
        let mut counts: Vec<Value> = g
            .counts
            .iter()
            .map(|((p, k, m, s), n)| {
                json!({"provider": &**p, "key_id": k.as_deref(), "model": m, "status": s, "count": n})
            })
            .collect();
        counts.sort_by_key(|v| v.to_string());
        let mut by_provider: HashMap<&str, u64> = HashMap::new();
        let mut by_status: HashMap<String, u64> = HashMap::new();
        let mut by_key: HashMap<&str, u64> = HashMap::new();
        let mut by_model: HashMap<&str, u64> = HashMap::new();
        for ((p, k, m, s), n) in &g.counts {
            *by_provider.entry(p).or_insert(0) += n;
            *by_status.entry(s.to_string()).or_insert(0) += n;
            if let Some(k) = k {
                *by_key.entry(k).or_insert(0) += n;
            }
            if let Some(m) = m {
                *by_model.entry(m).or_insert(0) += n;
            }
        }
        let recent: Vec<Value> = g
            .recent
            .iter()
            .map(|e| {
                let body = serde_json::from_slice::<Value>(&e.req.body).unwrap_or_else(|_| {
                    Value::String(String::from_utf8_lossy(&e.req.body).into_owned())
                });
                let headers: serde_json::Map<String, Value> = e
                    .req
                    .headers
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect();
                json!({
                    "seq": e.seq,
                    "ts_ms": e.ts_ms,
                    "provider": &*e.provider,
                    "key_id": e.key_id.as_deref(),
                    "model": e.model,
                    "status": e.status,
                    "method": e.req.method,
                    "path": e.req.path,
                    "headers": headers,
                    "body": body,
                })
            })
            .collect();
        json!({
            "total": g.total,
            "by_provider": by_provider,
            "by_key": by_key,
            "by_model": by_model,
            "by_status": by_status,
            "counts": counts,
            "recent": recent,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_secrets_are_redacted() {
        assert_eq!(
            redact_query(
                "/v1beta/models/x:generateContent",
                Some("alt=sse&key=secret")
            ),
            "/v1beta/models/x:generateContent?alt=sse&key=<redacted>"
        );
    }
}
