//! Byte-stream codecs the translators read provider streams with: chunk-fed,
//! any split of the input gives the same output, bounded buffering.
//!
//! - [`sse`]: Server-Sent Events (OpenAI, Azure, Anthropic, Gemini).
//! - [`eventstream`]: AWS event stream frames with their CRCs (Bedrock).

pub mod eventstream;
pub mod sse;
