//! Response body: a whole buffer, or frames fed by a task (streams), which
//! may end with an error to abort the connection mid-body.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;

pub type Chunk = Result<Bytes, std::io::Error>;

pub enum MockBody {
    Full(Option<Bytes>),
    Stream(mpsc::Receiver<Chunk>),
}

impl MockBody {
    pub fn full(b: impl Into<Bytes>) -> MockBody {
        MockBody::Full(Some(b.into()))
    }
    pub fn empty() -> MockBody {
        MockBody::Full(None)
    }
}

impl Body for MockBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            MockBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            MockBody::Stream(rx) => match rx.poll_recv(cx) {
                Poll::Ready(Some(Ok(b))) => Poll::Ready(Some(Ok(Frame::data(b)))),
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, MockBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            MockBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            MockBody::Full(None) => SizeHint::with_exact(0),
            MockBody::Stream(_) => SizeHint::default(),
        }
    }
}

/// One frame of a stream and the delay before it is sent.
pub struct Timed {
    pub delay_ms: u64,
    pub data: Bytes,
}

/// Spawn the task that feeds `frames` with their delays. With `abort_at`,
/// the body fails (the connection is cut) before that frame is sent.
pub fn spawn_stream(frames: Vec<Timed>, abort_at: Option<usize>) -> MockBody {
    let (tx, rx) = mpsc::channel::<Chunk>(8);
    tokio::spawn(async move {
        for (i, f) in frames.into_iter().enumerate() {
            if f.delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(f.delay_ms)).await;
            }
            if abort_at == Some(i) {
                let _ = tx
                    .send(Err(std::io::Error::other("mock-llm: abort mid-stream")))
                    .await;
                return;
            }
            if tx.send(Ok(f.data)).await.is_err() {
                return; // client went away
            }
        }
    });
    MockBody::Stream(rx)
}

/// A body that sends the first half of `data` then fails.
pub fn truncated(data: Bytes) -> MockBody {
    let half = data.slice(..data.len() / 2);
    spawn_stream(
        vec![
            Timed {
                delay_ms: 0,
                data: half,
            },
            Timed {
                delay_ms: 0,
                data: Bytes::new(),
            },
        ],
        Some(1),
    )
}
