//! What a handler returns: a response, a delayed response or a reset.
//! Depends only on `body`, so both `http` (which builds replies) and `ctx`
//! (which hands them back) sit above it.

use crate::core::body::MockBody;
use hyper::Response;
use std::time::Duration;

/// What the server does with a request.
pub enum Reply {
    Response(Response<MockBody>),
    /// A response to send after a delay (ms). The server sleeps after the
    /// handler returned, so a delayed request holds only its response bytes,
    /// not its parsed request.
    Delayed(Response<MockBody>, u64),
    /// Close the connection with a TCP reset and no response.
    Reset,
}

impl Reply {
    pub fn status(&self) -> u16 {
        match self {
            Reply::Response(r) | Reply::Delayed(r, _) => r.status().as_u16(),
            Reply::Reset => 0,
        }
    }

    /// Start the answer `ms` later (a reset stays immediate).
    pub fn delayed_by(self, ms: u64) -> Reply {
        match self {
            Reply::Response(r) if ms > 0 => Reply::Delayed(r, ms),
            Reply::Delayed(r, d) => Reply::Delayed(r, d.saturating_add(ms)),
            other => other,
        }
    }

    /// Add a response header (a reset has none).
    pub fn with_header(mut self, name: &'static str, value: hyper::header::HeaderValue) -> Reply {
        if let Reply::Response(r) | Reply::Delayed(r, _) = &mut self {
            r.headers_mut().insert(name, value);
        }
        self
    }

    /// Mark a successful answer so that its failing body resets the
    /// connection.
    pub fn reset_on_body_error(mut self) -> Reply {
        if let Reply::Response(r) | Reply::Delayed(r, _) = &mut self {
            if r.status().is_success() {
                r.extensions_mut().insert(ResetOnBodyError);
            }
        }
        self
    }

    /// Wait out the delay, if any: the response, or None for a reset.
    pub async fn ready(self) -> Option<Response<MockBody>> {
        match self {
            Reply::Response(r) => Some(r),
            Reply::Delayed(r, ms) => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Some(r)
            }
            Reply::Reset => None,
        }
    }
}

/// Response extension: when the body fails, close the connection with a
/// TCP reset rather than a plain close.
#[derive(Clone, Copy, Debug)]
pub struct ResetOnBodyError;
