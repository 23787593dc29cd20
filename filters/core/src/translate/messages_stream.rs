//! Streams of the Anthropic Messages front door.
//!
//! [`MessagesStream`] wraps a provider kind's OpenAI stream translator: the
//! OpenAI `chat.completion.chunk` lines it writes are read back as they come
//! and become Anthropic events (`message_start`, `content_block_start` /
//! `_delta` / `_stop` for text and tool_use blocks, `message_delta` with the
//! stop reason and usage, `message_stop`; an OpenAI error event becomes an
//! Anthropic `error` event). [`AnthropicUsageStream`] is the passthrough's:
//! bytes go out untouched, events are only read for usage.

use serde_json::{json, Value};

use super::messages_parts::{anthropic_usage, message_id, stop_reason};
use super::openai_anthropic::parse_usage;
use super::{StreamTranslator, Usage};
use crate::codec::sse::{Event, SseParser};

/// Appends `event: <name>\ndata: <json>\n\n`.
fn push_event(out: &mut Vec<u8>, name: &str, data: &Value) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(data.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

/// An Anthropic `error` event.
fn push_error(out: &mut Vec<u8>, kind: &str, message: &str) {
    push_event(
        out,
        "error",
        &json!({"type": "error", "error": {"type": kind, "message": message}}),
    );
}

enum Open {
    Text,
    /// A tool_use block, for the OpenAI tool call of this index.
    Tool(u64),
}

/// OpenAI chunks (from the provider kind's translator) → Anthropic events.
pub(crate) struct MessagesStream {
    inner: Box<dyn StreamTranslator>,
    parser: SseParser,
    model: String,
    started: bool,
    open: Option<Open>,
    /// Index of the next content block.
    next_index: u64,
    stop: Option<String>,
    done: bool,
}

impl MessagesStream {
    pub(crate) fn new(inner: Box<dyn StreamTranslator>, model: &str) -> MessagesStream {
        MessagesStream {
            inner,
            parser: SseParser::default(),
            model: model.to_string(),
            started: false,
            open: None,
            next_index: 0,
            stop: None,
            done: false,
        }
    }

    fn start(&mut self, out: &mut Vec<u8>, id: &str, model: &str) {
        if self.started {
            return;
        }
        self.started = true;
        let model = if model.is_empty() {
            self.model.as_str()
        } else {
            model
        };
        push_event(
            out,
            "message_start",
            &json!({"type": "message_start", "message": {
                "id": message_id(id), "type": "message", "role": "assistant", "model": model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0}}}),
        );
    }

    fn close_block(&mut self, out: &mut Vec<u8>) {
        if self.open.take().is_some() {
            let index = self.next_index;
            self.next_index += 1;
            push_event(
                out,
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": index}),
            );
        }
    }

    fn text(&mut self, out: &mut Vec<u8>, text: &str) {
        if !matches!(self.open, Some(Open::Text)) {
            self.close_block(out);
            self.open = Some(Open::Text);
            push_event(
                out,
                "content_block_start",
                &json!({"type": "content_block_start", "index": self.next_index,
                        "content_block": {"type": "text", "text": ""}}),
            );
        }
        push_event(
            out,
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": self.next_index,
                    "delta": {"type": "text_delta", "text": text}}),
        );
    }

    fn tool_call(&mut self, out: &mut Vec<u8>, tc: &Value) {
        let i = tc.get("index").and_then(Value::as_u64).unwrap_or(0);
        let f = tc.get("function").unwrap_or(&Value::Null);
        let same = matches!(self.open, Some(Open::Tool(j)) if j == i);
        if !same {
            self.close_block(out);
            self.open = Some(Open::Tool(i));
            push_event(
                out,
                "content_block_start",
                &json!({"type": "content_block_start", "index": self.next_index,
                        "content_block": {"type": "tool_use",
                            "id": tc.get("id").and_then(Value::as_str).unwrap_or(""),
                            "name": f.get("name").and_then(Value::as_str).unwrap_or(""),
                            "input": {}}}),
            );
        }
        if let Some(args) = f.get("arguments").and_then(Value::as_str) {
            if !args.is_empty() {
                push_event(
                    out,
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": self.next_index,
                            "delta": {"type": "input_json_delta", "partial_json": args}}),
                );
            }
        }
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        self.start(out, "", "");
        self.close_block(out);
        let usage = self.inner.usage().unwrap_or_default();
        let stop = stop_reason(self.stop.as_deref().unwrap_or("stop"));
        push_event(
            out,
            "message_delta",
            &json!({"type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": null},
                    "usage": anthropic_usage(&usage)}),
        );
        push_event(out, "message_stop", &json!({"type": "message_stop"}));
        self.done = true;
    }

    fn on_event(&mut self, ev: Event, out: &mut Vec<u8>) {
        if self.done || ev.data.is_empty() {
            return;
        }
        if ev.data == "[DONE]" {
            self.end(out);
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(&ev.data) else {
            return;
        };
        if let Some(e) = v.get("error") {
            let kind = match (
                e.get("type").and_then(Value::as_str),
                e.get("code").and_then(Value::as_str),
            ) {
                (Some("rate_limit_error"), _) => "rate_limit_error",
                (_, Some("provider_overloaded")) => "overloaded_error",
                (Some("invalid_request_error"), _) => "invalid_request_error",
                _ => "api_error",
            };
            let message = e
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("The provider's stream failed");
            push_error(out, kind, message);
            self.done = true;
            return;
        }
        let id = v.get("id").and_then(Value::as_str).unwrap_or("");
        let model = v.get("model").and_then(Value::as_str).unwrap_or("");
        self.start(out, id, model);
        let Some(choice) = v.get("choices").and_then(|c| c.get(0)) else {
            return;
        };
        if let Some(delta) = choice.get("delta") {
            if let Some(t) = delta.get("content").and_then(Value::as_str) {
                if !t.is_empty() {
                    self.text(out, t);
                }
            }
            if let Some(Value::Array(calls)) = delta.get("tool_calls") {
                for tc in calls {
                    self.tool_call(out, tc);
                }
            }
        }
        if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
            self.stop = Some(f.to_string());
        }
    }

    fn convert(&mut self, openai: &[u8], out: &mut Vec<u8>) {
        if self.done || openai.is_empty() {
            return;
        }
        let mut parser = std::mem::take(&mut self.parser);
        let r = parser.feed(openai, &mut |e| self.on_event(e, out));
        self.parser = parser;
        if r.is_err() && !self.done {
            push_error(out, "api_error", "Malformed stream from the provider");
            self.done = true;
        }
    }
}

impl StreamTranslator for MessagesStream {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        let mut openai = Vec::with_capacity(chunk.len() + 64);
        self.inner.feed(chunk, &mut openai);
        self.convert(&openai, out);
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        let mut openai = Vec::new();
        self.inner.finish(&mut openai);
        self.convert(&openai, out);
        if !self.done {
            let mut parser = std::mem::take(&mut self.parser);
            let _ = parser.finish(&mut |e| self.on_event(e, out));
            self.parser = parser;
        }
        if !self.done {
            push_error(out, "api_error", "The provider's stream ended early");
            self.done = true;
        }
    }

    fn usage(&self) -> Option<Usage> {
        self.inner.usage()
    }

    fn first_token_seen(&self) -> bool {
        self.inner.first_token_seen()
    }
}

/// The Anthropic passthrough's stream: the bytes go out untouched; the
/// events are read for usage (`message_start`, then `message_delta`'s
/// cumulative counts) and the first token.
pub(crate) struct AnthropicUsageStream {
    parser: SseParser,
    usage: Option<Usage>,
    first_token: bool,
    /// `message_stop` or an `error` event was seen: the stream is whole.
    ended: bool,
    /// The parser gave up (an over-long line): bytes still pass.
    broken: bool,
    /// The last byte passed on ended a line.
    at_line_start: bool,
}

impl Default for AnthropicUsageStream {
    fn default() -> Self {
        AnthropicUsageStream {
            parser: SseParser::default(),
            usage: None,
            first_token: false,
            ended: false,
            broken: false,
            at_line_start: true,
        }
    }
}

impl AnthropicUsageStream {
    fn on_event(&mut self, ev: Event) {
        let ty = ev.event.as_str();
        match ty {
            "message_start" | "message_delta" => {}
            "content_block_delta" => {
                self.first_token = true;
                return;
            }
            "message_stop" | "error" => {
                self.ended = true;
                return;
            }
            _ => return,
        }
        let Ok(v) = serde_json::from_str::<Value>(&ev.data) else {
            return;
        };
        let u = if ty == "message_start" {
            v.get("message").and_then(|m| m.get("usage"))
        } else {
            v.get("usage")
        };
        let Some(u) = u else { return };
        let seen = parse_usage(u);
        let mut total = self.usage.unwrap_or_default();
        if ty == "message_start" || u.get("input_tokens").is_some() {
            total.prompt_tokens = seen.prompt_tokens;
            total.cached_tokens = seen.cached_tokens;
            total.cache_write_tokens = seen.cache_write_tokens;
        }
        if u.get("output_tokens").is_some() {
            total.completion_tokens = seen.completion_tokens;
        }
        if u.get("server_tool_use").is_some() {
            total.web_searches = seen.web_searches;
        }
        self.usage = Some(total);
    }
}

impl StreamTranslator for AnthropicUsageStream {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(chunk);
        if let Some(last) = chunk.last() {
            self.at_line_start = matches!(last, b'\n' | b'\r');
        }
        if self.broken {
            return;
        }
        let mut parser = std::mem::take(&mut self.parser);
        let r = parser.feed(chunk, &mut |e| self.on_event(e));
        self.parser = parser;
        self.broken = r.is_err();
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        if !self.broken {
            let mut parser = std::mem::take(&mut self.parser);
            let _ = parser.finish(&mut |e| self.on_event(e));
            self.parser = parser;
        }
        if !self.ended {
            // End the cut line and event first, so the error is an event of
            // its own.
            if !self.at_line_start {
                out.push(b'\n');
            }
            out.push(b'\n');
            push_error(out, "api_error", "The provider's stream ended early");
            self.ended = true;
        }
    }

    fn usage(&self) -> Option<Usage> {
        self.usage
    }

    fn first_token_seen(&self) -> bool {
        self.first_token
    }
}
