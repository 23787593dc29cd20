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

/// Renders piece `i` of the generated content as a frame; the flag is true
/// for the last piece.
pub type Render = Box<dyn Fn(usize, &str, bool) -> Bytes + Send + Sync>;

/// How a stream is cut short.
pub enum Cut {
    /// Fail the body half-way: the connection is cut.
    Abort,
    /// Fail the body right after the first content piece.
    ResetAfterFirst,
    /// Send this frame (the provider's in-stream error) and end.
    Error(Bytes),
}

/// A stream whose content frames are rendered as they are sent, so a slow
/// stream holds its text once rather than every frame.
pub struct StreamSpec {
    /// Frames sent at once.
    pub head: Vec<Bytes>,
    /// Generated content (text or tool arguments), sent in pieces.
    pub content: String,
    pub chunk_chars: usize,
    pub render: Render,
    /// Frames after the content.
    pub tail: Vec<Bytes>,
    /// Delay before the first frame after `head`.
    pub ttft_ms: u64,
    /// Delay before each later content frame, and before the first tail frame.
    pub itl_ms: u64,
    /// Cut the stream short (half-way, or after the first piece).
    pub cut: Option<Cut>,
}

/// How many pieces of `n` characters `text` is sent in.
pub fn piece_count(text: &str, n: usize) -> usize {
    text.chars().count().div_ceil(n.max(1))
}

/// The piece before which a stream of `n` pieces is cut half-way.
pub fn cut_index(n: usize) -> usize {
    (n / 2).max(1).min(n)
}

fn piece_bounds(text: &str, n: usize) -> Vec<usize> {
    let mut b = Vec::with_capacity(text.len() / n.max(1) + 2);
    b.push(0);
    let mut count = 0;
    for (i, _) in text.char_indices() {
        if count == n.max(1) {
            b.push(i);
            count = 0;
        }
        count += 1;
    }
    if !text.is_empty() {
        b.push(text.len());
    }
    b
}

async fn pause(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

/// Pause between the first chunk and a reset-after-first-chunk, ms.
pub const RESET_GAP_MS: u64 = 10;

/// Spawn the task that sends a [`StreamSpec`].
pub fn spawn_spec(spec: StreamSpec) -> MockBody {
    let (tx, rx) = mpsc::channel::<Chunk>(8);
    tokio::spawn(async move {
        let StreamSpec {
            head,
            content,
            chunk_chars,
            render,
            tail,
            ttft_ms,
            itl_ms,
            cut,
        } = spec;
        for f in head {
            if tx.send(Ok(f)).await.is_err() {
                return;
            }
        }
        let bounds = piece_bounds(&content, chunk_chars);
        let n = bounds.len().saturating_sub(1);
        let cut_at = cut.as_ref().map(|c| match c {
            Cut::ResetAfterFirst => n.min(1),
            _ => cut_index(n),
        });
        let mut first = true;
        for i in 0..=n {
            if cut_at == Some(i) {
                match cut {
                    Some(Cut::ResetAfterFirst) => {
                        // Give the server time to flush the first chunk, so
                        // the client reads it before the reset.
                        pause(itl_ms.max(RESET_GAP_MS)).await;
                        let _ = tx
                            .send(Err(std::io::Error::other(
                                "mock-llm: reset after first chunk",
                            )))
                            .await;
                    }
                    Some(Cut::Abort) => {
                        let _ = tx
                            .send(Err(std::io::Error::other("mock-llm: abort mid-stream")))
                            .await;
                    }
                    Some(Cut::Error(f)) => {
                        let _ = tx.send(Ok(f)).await;
                    }
                    None => {}
                }
                return;
            }
            if i == n {
                break;
            }
            pause(if first { ttft_ms } else { itl_ms }).await;
            first = false;
            let piece = content.get(bounds[i]..bounds[i + 1]).unwrap_or("");
            if tx.send(Ok(render(i, piece, i + 1 == n))).await.is_err() {
                return;
            }
        }
        for (j, f) in tail.into_iter().enumerate() {
            pause(if first {
                ttft_ms
            } else if j == 0 {
                itl_ms
            } else {
                0
            })
            .await;
            first = false;
            if tx.send(Ok(f)).await.is_err() {
                return;
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
