//! The HTTP server (HTTP/1.1, and HTTP/2 with prior knowledge): accept loop,
//! body reading, connection resets.

use crate::app::App;
use crate::core::body::MockBody;
use crate::core::reply::{Reply, ResetOnBodyError};
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A TCP stream that, when asked, closes with an RST (SO_LINGER 0) so the
/// client sees "connection reset by peer".
struct ResetIo {
    inner: TcpStream,
    reset: Arc<AtomicBool>,
}

impl Drop for ResetIo {
    fn drop(&mut self) {
        if self.reset.load(Ordering::Relaxed) {
            let _ = self.inner.set_zero_linger();
        }
    }
}

impl AsyncRead for ResetIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for ResetIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

fn too_large() -> Response<MockBody> {
    let mut r = Response::new(MockBody::full(Bytes::from_static(
        br#"{"error":{"message":"request body too large","type":"request_too_large","param":null,"code":null}}"#,
    )));
    *r.status_mut() = StatusCode::PAYLOAD_TOO_LARGE;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

async fn serve_one(
    app: Arc<App>,
    req: Request<Incoming>,
    reset: Arc<AtomicBool>,
) -> Result<Response<MockBody>, BoxError> {
    let (parts, body) = req.into_parts();
    let bytes = match Limited::new(body, app.max_body_bytes).collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                return Ok(too_large());
            }
            return Err(e);
        }
    };
    let reply: Reply = app.handle(parts, bytes).await;
    match reply.ready().await {
        Some(r) => {
            if r.extensions().get::<ResetOnBodyError>().is_some() {
                // The body will fail on purpose: close with an RST then.
                reset.store(true, Ordering::Relaxed);
            }
            Ok(r)
        }
        None => {
            reset.store(true, Ordering::Relaxed);
            Err("mock-llm: connection reset requested".into())
        }
    }
}

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether the client's first bytes are the HTTP/2 connection preface.
async fn opens_with_h2_preface(s: &TcpStream) -> bool {
    let mut buf = [0u8; 24];
    for _ in 0..1000 {
        // A silent client falls through to HTTP/1.1 and its header timeout.
        let n = match tokio::time::timeout(std::time::Duration::from_secs(30), s.peek(&mut buf))
            .await
        {
            Ok(Ok(n)) if n > 0 => n,
            _ => return false,
        };
        if buf[..n] != H2_PREFACE[..n] {
            return false;
        }
        if n == H2_PREFACE.len() {
            return true;
        }
        // A partial preface: wait for the rest.
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    false
}

/// Serve connections from `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, app: Arc<App>) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(_) => {
                // Out of file descriptors or a transient error: back off.
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        tokio::spawn(async move {
            let reset = Arc::new(AtomicBool::new(false));
            let io = ResetIo {
                inner: stream,
                reset: reset.clone(),
            };
            let svc = service_fn(move |req| serve_one(app.clone(), req, reset.clone()));
            // HTTP/2 with prior knowledge (h2c) when the connection opens
            // with its preface, else HTTP/1.1. Peeking once per connection
            // keeps HTTP/1.1 on hyper's plain path (hyper-util's auto
            // builder cost throughput and memory per connection).
            if opens_with_h2_preface(&io.inner).await {
                // Boxed so HTTP/1.1 connection tasks stay small.
                let _ = Box::pin(
                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .timer(TokioTimer::new())
                        .max_concurrent_streams(1024)
                        .serve_connection(TokioIo::new(io), svc),
                )
                .await;
            } else {
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(io), svc)
                    .await;
            }
        });
    }
}
