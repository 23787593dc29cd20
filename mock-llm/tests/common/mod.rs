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

pub const MODEL: &str = "anthropic.claude-3-haiku-20240307-v1:0";
pub const PATH: &str = "/model/anthropic.claude-3-haiku-20240307-v1%3A0";

/// Headers of a request signed by AWS's own signer (`aws-sigv4`; botocore
/// signs in the Python suite), with `host` and `x-amz-date` signed.
pub fn signed(path: &str, body: &str, secret: &str) -> Vec<(String, String)> {
    use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
    let identity =
        aws_credential_types::Credentials::new("AKIDMOCKBEDROCK1", secret, None, None, "test")
            .into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("bedrock")
        .time(std::time::SystemTime::now())
        .settings(SigningSettings::default())
        .build()
        .unwrap()
        .into();
    let uri = format!("http://mock{path}");
    let req = SignableRequest::new(
        "POST",
        uri.as_str(),
        [("host", "mock")].into_iter(),
        SignableBody::Bytes(body.as_bytes()),
    )
    .unwrap();
    let (instructions, _) = sign(req, &params).unwrap().into_parts();
    let mut out = vec![("host".to_string(), "mock".to_string())];
    for (k, v) in instructions.headers() {
        out.push((k.to_string(), v.to_string()));
    }
    out
}

/// One event-stream message decoded by AWS's own decoder
/// (`aws-smithy-eventstream`, CRCs checked): string headers, payload and
/// bytes used.
pub fn decode(buf: &[u8]) -> (Vec<(String, String)>, Vec<u8>, usize) {
    let total = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
    let m = aws_smithy_eventstream::frame::read_message_from(&buf[..total]).unwrap();
    let headers = m
        .headers()
        .iter()
        .map(|h| {
            let v = h.value().as_string().unwrap().as_str().to_string();
            (h.name().as_str().to_string(), v)
        })
        .collect();
    (headers, m.payload().to_vec(), total)
}

pub async fn bedrock(app: &mock_llm::app::App, op: &str, body: &str, secret: &str) -> Resp {
    bedrock_on(app, PATH, op, body, secret).await
}

/// Bedrock's Claude Sonnet 4.5 (a model that thinks), percent-encoded.
pub const SONNET_PATH: &str = "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0";

/// A signed Bedrock request to the model at `model_path`.
pub async fn bedrock_on(
    app: &mock_llm::app::App,
    model_path: &str,
    op: &str,
    body: &str,
    secret: &str,
) -> Resp {
    let path = format!("{model_path}/{op}");
    let h = signed(&path, body, secret);
    let hr: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    call(app, "POST", &path, &hr, body).await
}
