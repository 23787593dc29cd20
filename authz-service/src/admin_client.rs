//! The client side of the admin API, for `tollgate-authz keys …`: one
//! HTTP/1.1 request per call over plain TCP (the admin API listens on
//! loopback or a private network; put TLS in front of it, not in here).

use std::path::Path;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::Request;
use hyper_util::rt::TokioIo;

/// Longest a call may take, connection included.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Where the admin API is and its token.
pub struct AdminClient {
    /// `host:port`.
    authority: String,
    /// Path prefix before `/admin/...` (usually empty).
    prefix: String,
    token: String,
}

/// An answer: its status and body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

impl AdminClient {
    /// `url` is `http://host:port[/prefix]`; the token is read from
    /// `token_file` (its bytes as they are, as the server reads them).
    pub fn new(url: &str, token_file: &Path) -> Result<AdminClient, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("--admin-url must start with http:// (got {url:?})"))?;
        let (authority, prefix) = match rest.split_once('/') {
            Some((a, p)) => (a, format!("/{}", p.trim_end_matches('/'))),
            None => (rest, String::new()),
        };
        if authority.is_empty() {
            return Err(format!("--admin-url has no host: {url:?}"));
        }
        let token = std::fs::read_to_string(token_file)
            .map_err(|e| format!("cannot read admin token file {}: {e}", token_file.display()))?;
        Ok(AdminClient {
            authority: authority.to_string(),
            prefix: prefix.trim_end_matches('/').to_string(),
            token,
        })
    }

    /// `method path` with an optional JSON body.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> Result<Answer, String> {
        tokio::time::timeout(TIMEOUT, self.send(method, path, body))
            .await
            .map_err(|_| format!("no answer from {} within {TIMEOUT:?}", self.authority))?
    }

    async fn send(&self, method: &str, path: &str, body: Option<String>) -> Result<Answer, String> {
        let stream = tokio::net::TcpStream::connect(&self.authority)
            .await
            .map_err(|e| format!("cannot reach the admin API at {}: {e}", self.authority))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let req = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.prefix))
            .header("host", &self.authority)
            .header("authorization", format!("Bearer {}", self.token))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| e.to_string())?;
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok(Answer {
            status,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        })
    }
}
