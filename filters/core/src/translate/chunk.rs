//! The one writer of the OpenAI `chat.completion.chunk` stream for every
//! translator that builds chunks (Anthropic, Gemini, Bedrock): the envelope
//! prefix shared by all chunks of an answer, first-token tracking (for the
//! TTFT metric), the finish chunk, the usage chunk, `[DONE]`, and the error
//! event that ends a failed stream. [`BlockTools`] numbers the tool calls
//! of the streams whose provider numbers its content blocks.

use std::fmt::Write as _;

use serde_json::{json, Value};

use super::{push_stream_error, usage_json, ResponseCtx, Usage, DONE};

pub(crate) struct ChunkWriter {
    created: u64,
    include_usage: bool,
    /// `data: {"id":..,"object":"chat.completion.chunk","created":..,"model":..,"choices":[{"index":0,"delta":`
    prefix: String,
    first_token: bool,
    done: bool,
}

impl ChunkWriter {
    pub(crate) fn new(ctx: &ResponseCtx) -> ChunkWriter {
        ChunkWriter {
            created: ctx.created,
            include_usage: ctx.include_usage,
            prefix: String::new(),
            first_token: false,
            done: false,
        }
    }

    /// Names the answer (`id`, `model`) in every later chunk.
    pub(crate) fn open(&mut self, id: &str, model: &str) {
        let id = serde_json::to_string(id).unwrap_or_else(|_| "\"\"".into());
        let model = serde_json::to_string(model).unwrap_or_else(|_| "\"\"".into());
        self.prefix.clear();
        let _ = write!(
            self.prefix,
            "data: {{\"id\":{id},\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{model},\"choices\":[{{\"index\":0,\"delta\":",
            self.created
        );
    }

    /// One chunk: `delta` is a JSON object; a non-empty content or a
    /// tool-call delta is the first token (the role chunk's empty content,
    /// `{"content":"","role":"assistant"}`, is not).
    pub(crate) fn delta(&mut self, out: &mut Vec<u8>, delta: &str, finish: Option<&str>) {
        if !self.first_token
            && ((delta.starts_with("{\"content\"") && !delta.starts_with("{\"content\":\"\""))
                || delta.starts_with("{\"tool_calls\""))
        {
            self.first_token = true;
        }
        if self.prefix.is_empty() {
            self.open("", "");
        }
        out.extend_from_slice(self.prefix.as_bytes());
        out.extend_from_slice(delta.as_bytes());
        chunk_tail(out, finish);
    }

    pub(crate) fn delta_value(&mut self, out: &mut Vec<u8>, delta: &Value, finish: Option<&str>) {
        self.delta(out, &delta.to_string(), finish);
    }

    /// The finish chunk, the usage chunk when the client asked for it
    /// (same envelope, empty choices), and `[DONE]`.
    pub(crate) fn end(&mut self, out: &mut Vec<u8>, finish: &str, usage: Usage) {
        self.delta(out, "{}", Some(finish));
        if self.include_usage {
            let envelope = match self.prefix.find("\"choices\":[") {
                Some(pos) => self.prefix.get(..pos).unwrap_or(""),
                None => self.prefix.as_str(),
            };
            out.extend_from_slice(envelope.as_bytes());
            out.extend_from_slice(b"\"choices\":[],\"usage\":");
            out.extend_from_slice(usage_json(&usage).to_string().as_bytes());
            out.extend_from_slice(b"}\n\n");
        }
        out.extend_from_slice(DONE);
        self.done = true;
    }

    /// Ends a failed stream: an OpenAI error event and `[DONE]`.
    pub(crate) fn fail(&mut self, out: &mut Vec<u8>, status: u16, message: &str) {
        push_stream_error(out, status, message);
        self.done = true;
    }

    /// The client's stream is closed; later upstream bytes are ignored.
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    pub(crate) fn first_token_seen(&self) -> bool {
        self.first_token
    }
}

/// The tool calls of a stream whose provider numbers its content blocks
/// (Anthropic, Bedrock): a tool-use block gets the next OpenAI `tool_calls`
/// index when it starts, and its argument deltas go to that call.
#[derive(Default)]
pub(crate) struct BlockTools {
    /// Provider block index → OpenAI tool-call index.
    index: Vec<(u64, u32)>,
}

impl BlockTools {
    /// Block `block` starts a tool call: its index, and the delta that
    /// opens it (id, name, empty arguments).
    pub(crate) fn open<T: serde::Serialize>(
        &mut self,
        block: u64,
        id: &T,
        name: &T,
    ) -> (u32, Value) {
        let k = self.index.len() as u32;
        self.index.push((block, k));
        let delta = json!({"tool_calls": [{
            "index": k,
            "id": id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }]});
        (k, delta)
    }

    /// The tool-call index of block `block`, when it started one.
    pub(crate) fn call_of(&self, block: u64) -> Option<u32> {
        self.index
            .iter()
            .find(|(i, _)| *i == block)
            .map(|(_, k)| *k)
    }

    /// No tool call has started.
    pub(crate) fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}

/// The delta of more `arguments` (JSON text) of tool call `k`.
pub(crate) fn arguments_delta(k: u32, arguments: &str) -> Value {
    json!({"tool_calls": [{"index": k, "function": {"arguments": arguments}}]})
}

/// The end of a `chat.completion.chunk` whose prefix and delta are written:
/// `,"logprobs":null,"finish_reason":…}]}` and the SSE event's end.
fn chunk_tail(out: &mut Vec<u8>, finish: Option<&str>) {
    out.extend_from_slice(b",\"logprobs\":null,\"finish_reason\":");
    match finish {
        Some(f) => {
            out.push(b'"');
            out.extend_from_slice(f.as_bytes());
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b"}]}\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::Endpoint;

    fn ctx(include_usage: bool) -> ResponseCtx {
        ResponseCtx {
            endpoint: Endpoint::Chat,
            stream: true,
            include_usage,
            created: 5,
            json_mode: false,
            prompt_estimate: 0,
            embed_base64: false,
            model: String::new(),
        }
    }

    #[test]
    fn writes_chunks_usage_and_done() {
        let mut w = ChunkWriter::new(&ctx(true));
        let mut out = Vec::new();
        w.open("id\"1", "m");
        w.delta(&mut out, r#"{"role":"assistant","content":""}"#, None);
        w.delta(&mut out, r#"{"content":"","role":"assistant"}"#, None);
        assert!(!w.first_token_seen());
        w.delta(&mut out, r#"{"content":"hi"}"#, None);
        assert!(w.first_token_seen());
        w.end(
            &mut out,
            "stop",
            Usage {
                prompt_tokens: 2,
                completion_tokens: 3,
                cached_tokens: 0,
                cache_write_tokens: 0,
                web_searches: 0,
            },
        );
        assert!(w.is_done());
        let text = String::from_utf8(out).unwrap();
        let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(events.len(), 6);
        assert_eq!(events[5], "data: [DONE]");
        let v: Vec<Value> = events[1..5]
            .iter()
            .map(|e| serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap())
            .collect();
        assert_eq!(v[0]["id"], "id\"1");
        assert_eq!(v[0]["object"], "chat.completion.chunk");
        assert_eq!(v[0]["created"], 5);
        assert_eq!(v[1]["choices"][0]["delta"]["content"], "hi");
        assert_eq!(v[2]["choices"][0]["finish_reason"], "stop");
        assert_eq!(v[3]["choices"], serde_json::json!([]));
        assert_eq!(v[3]["usage"]["total_tokens"], 5);
    }

    #[test]
    fn no_usage_chunk_unless_asked_and_errors_close() {
        let mut w = ChunkWriter::new(&ctx(false));
        let mut out = Vec::new();
        w.end(&mut out, "length", Usage::default());
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.matches("data: ").count(), 2, "{text}");
        assert!(
            text.contains(r#""id":"""#),
            "an unnamed answer still has an id"
        );
        let mut w = ChunkWriter::new(&ctx(true));
        let mut out = Vec::new();
        w.fail(&mut out, 429, "slow down");
        assert!(w.is_done());
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("rate_limit_exceeded") && text.ends_with("data: [DONE]\n\n"));
    }
}
