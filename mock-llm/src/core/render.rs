//! Stream frame rendering: templates serialized once per stream, SSE
//! framing.

use bytes::Bytes;
use serde_json::Value;

/// Marker replaced by each content piece in a frame template.
pub const PIECE: &str = "@@mock-llm-piece@@";

/// A frame serialized once with [`PIECE`] in place of the content; each
/// piece is rendered by splicing in its JSON string encoding.
#[derive(Clone)]
pub struct Template {
    pre: Bytes,
    post: Bytes,
}

impl Template {
    /// `frame` must contain the JSON string `"@@mock-llm-piece@@"` once.
    pub fn new(frame: &[u8]) -> Template {
        let mark = format!("\"{PIECE}\"");
        let at = frame
            .windows(mark.len())
            .position(|w| w == mark.as_bytes())
            .unwrap_or(frame.len());
        let end = (at + mark.len()).min(frame.len());
        Template {
            pre: Bytes::copy_from_slice(&frame[..at]),
            post: Bytes::copy_from_slice(&frame[end..]),
        }
    }

    pub fn render(&self, piece: &str) -> Bytes {
        let mut out = Vec::with_capacity(self.pre.len() + self.post.len() + piece.len() + 8);
        out.extend_from_slice(&self.pre);
        let _ = serde_json::to_writer(&mut out, piece);
        out.extend_from_slice(&self.post);
        Bytes::from(out)
    }

    /// The rendered JSON document without framing (for binary framings).
    pub fn render_vec(&self, piece: &str) -> Vec<u8> {
        self.render(piece).to_vec()
    }
}

/// SSE helpers.
pub fn sse_data(v: &Value) -> Bytes {
    let mut s = Vec::with_capacity(128);
    s.extend_from_slice(b"data: ");
    let _ = serde_json::to_writer(&mut s, v);
    s.extend_from_slice(b"\n\n");
    Bytes::from(s)
}

pub fn sse_event(event: &str, v: &Value) -> Bytes {
    let mut s = Vec::with_capacity(128);
    s.extend_from_slice(b"event: ");
    s.extend_from_slice(event.as_bytes());
    s.extend_from_slice(b"\ndata: ");
    let _ = serde_json::to_writer(&mut s, v);
    s.extend_from_slice(b"\n\n");
    Bytes::from(s)
}
