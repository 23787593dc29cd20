#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::Request;
use mock_llm::app::App;
use mock_llm::core::config::Config;
use mock_llm::core::ctx::Reply;
use serde_json::Value;

pub fn config_path() -> String {
    format!("{}/../config/mock-llm.yaml", env!("CARGO_MANIFEST_DIR"))
}

pub fn app() -> App {
    App::new(&Config::load(&config_path()).unwrap())
}

pub struct Resp {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
    /// The body ended with an error (connection cut mid-body).
    pub aborted: bool,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn header(&self, n: &str) -> Option<&str> {
        self.headers.get(n).and_then(|v| v.to_str().ok())
    }
    /// SSE `data:` payloads (excluding `[DONE]`), as JSON.
    pub fn sse_data(&self) -> Vec<Value> {
        self.text()
            .split("\n\n")
            .filter_map(|ev| ev.lines().find_map(|l| l.strip_prefix("data: ")))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }
    /// SSE event names in order.
    pub fn sse_events(&self) -> Vec<String> {
        self.text()
            .split("\n\n")
            .filter_map(|ev| ev.lines().find_map(|l| l.strip_prefix("event: ")))
            .map(str::to_string)
            .collect()
    }
}

pub async fn call(
    app: &App,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Resp {
    let mut b = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let (parts, ()) = b.body(()).unwrap().into_parts();
    let reply: Reply = app.handle(parts, Bytes::from(body.to_string())).await;
    match reply.ready().await {
        None => Resp {
            status: 0,
            headers: Default::default(),
            body: Bytes::new(),
            aborted: true,
        },
        Some(r) => {
            let (p, mut body) = r.into_parts();
            let mut buf = Vec::new();
            let mut aborted = false;
            while let Some(f) = body.frame().await {
                match f {
                    Ok(f) => {
                        if let Ok(d) = f.into_data() {
                            buf.extend_from_slice(&d);
                        }
                    }
                    Err(_) => {
                        aborted = true;
                        break;
                    }
                }
            }
            Resp {
                status: p.status.as_u16(),
                headers: p.headers,
                body: Bytes::from(buf),
                aborted,
            }
        }
    }
}

pub const OA: (&str, &str) = ("authorization", "Bearer mock-openai-key-1");
pub const AK: (&str, &str) = ("x-api-key", "mock-anthropic-key-1");
pub const AV: (&str, &str) = ("anthropic-version", "2023-06-01");

pub async fn openai(app: &App, body: &str, extra: &[(&str, &str)]) -> Resp {
    let mut h = vec![OA];
    h.extend_from_slice(extra);
    call(app, "POST", "/v1/chat/completions", &h, body).await
}

pub async fn anthropic(app: &App, body: &str, extra: &[(&str, &str)]) -> Resp {
    let mut h = vec![AK, AV];
    h.extend_from_slice(extra);
    call(app, "POST", "/v1/messages", &h, body).await
}
