//! The parts of an Anthropic `message` written from an OpenAI answer: its
//! id, stop reason, usage and tool inputs. Both the whole answer
//! ([`super::messages`]) and its stream of events
//! ([`super::messages_stream`]) write them, so they stand beneath both.

use serde_json::{json, Value};

use super::Usage;

/// Usage in Anthropic's fields: `input_tokens` excludes the cache reads
/// (OpenAI's `prompt_tokens` includes them).
pub(super) fn anthropic_usage(u: &Usage) -> Value {
    json!({
        "input_tokens": u
            .prompt_tokens
            .saturating_sub(u.cached_tokens)
            .saturating_sub(u.cache_write_tokens),
        "output_tokens": u.completion_tokens,
        "cache_creation_input_tokens": u.cache_write_tokens,
        "cache_read_input_tokens": u.cached_tokens,
    })
}

/// OpenAI `finish_reason` → Anthropic `stop_reason`.
pub(super) fn stop_reason(finish: &str) -> &'static str {
    match finish {
        "length" => "max_tokens",
        "tool_calls" | "function_call" => "tool_use",
        "content_filter" => "refusal",
        _ => "end_turn",
    }
}

/// An Anthropic message id from the provider's id.
pub(super) fn message_id(id: &str) -> String {
    if id.starts_with("msg_") {
        id.to_string()
    } else {
        format!("msg_{id}")
    }
}

/// Tool-call arguments (a JSON string) as a tool_use `input` object.
pub(super) fn tool_input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ if arguments.trim().is_empty() => json!({}),
        _ => json!({ "_raw": arguments }),
    }
}
