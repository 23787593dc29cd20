//! Deterministic generated content, token counting and tool arguments.
//!
//! Counting rule (documented in the README): `tokens(text) =
//! ceil(chars / 4)` where chars counts Unicode scalar values. Prompt tokens
//! are computed over the concatenated text of the request (system prompt,
//! message text, tool call arguments and tool results), minimum 1.
//! Completion tokens are computed over the generated text, or over the
//! serialized tool call arguments, minimum 1.

use serde_json::{json, Map, Value};

/// Tokens for `chars` characters: ceil(chars / 4), at least 1.
pub fn tokens_for_chars(chars: usize) -> u64 {
    (chars.div_ceil(4)).max(1) as u64
}

/// Tokens of a text under the counting rule.
pub fn count_tokens(text: &str) -> u64 {
    tokens_for_chars(text.chars().count())
}

const FILLER: &str = " lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et dolore magna aliqua";

/// The deterministic answer to a prompt: `mock response to: <first 8 words>`,
/// padded with filler words to `target_bytes` (when larger), then cut to
/// `max_chars` characters when the request limits output tokens.
/// The text is ASCII except for echoed prompt words.
pub fn answer(prompt: &str, target_bytes: usize, max_chars: Option<usize>) -> (String, bool) {
    let mut out = String::with_capacity(target_bytes.max(64));
    out.push_str("mock response to:");
    let mut any = false;
    for w in prompt.split_whitespace().take(8) {
        out.push(' ');
        out.push_str(w);
        any = true;
    }
    if !any {
        out.push_str(" (empty)");
    }
    if out.len() < target_bytes {
        let f = FILLER.as_bytes();
        let mut i = 0;
        while out.len() < target_bytes {
            out.push(f[i % f.len()] as char);
            i += 1;
        }
    }
    let mut truncated = false;
    if let Some(max) = max_chars {
        if out.chars().count() > max {
            out = out.chars().take(max).collect();
            truncated = true;
        }
    }
    (out, truncated)
}

/// Split text into chunks of at most `n` characters (on char boundaries).
pub fn chunks(text: &str, n: usize) -> Vec<&str> {
    let n = n.max(1);
    let mut v = Vec::with_capacity(text.len() / n + 1);
    let mut start = 0;
    let mut count = 0;
    for (i, _) in text.char_indices() {
        if count == n {
            v.push(&text[start..i]);
            start = i;
            count = 0;
        }
        count += 1;
    }
    if start < text.len() {
        v.push(&text[start..]);
    }
    v
}

/// A value that satisfies a JSON schema (the subset tools use): objects get
/// every property, strings take the first enum value or "mock", numbers 1.
pub fn value_for_schema(schema: &Value, depth: usize) -> Value {
    if depth > 8 {
        return Value::Null;
    }
    if let Some(e) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
    {
        return e.clone();
    }
    if let Some(c) = schema.get("const") {
        return c.clone();
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(first) = schema
            .get(key)
            .and_then(Value::as_array)
            .and_then(|a| a.first())
        {
            return value_for_schema(first, depth + 1);
        }
    }
    let ty = match schema.get("type") {
        Some(Value::String(s)) => s.to_ascii_lowercase(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .find(|s| *s != "null")
            .unwrap_or("null")
            .to_ascii_lowercase(),
        _ if schema.get("properties").is_some() => "object".to_string(),
        _ => "string".to_string(),
    };
    match ty.as_str() {
        "object" => {
            let mut m = Map::new();
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, s) in props {
                    m.insert(k.clone(), value_for_schema(s, depth + 1));
                }
            }
            Value::Object(m)
        }
        "array" => {
            let item = schema
                .get("items")
                .cloned()
                .unwrap_or(json!({"type":"string"}));
            Value::Array(vec![value_for_schema(&item, depth + 1)])
        }
        "integer" => json!(1),
        "number" => json!(1.0),
        "boolean" => json!(true),
        "null" => Value::Null,
        _ => json!("mock"),
    }
}

/// Short deterministic hex id derived from the request body.
pub fn short_id(seed: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(seed);
    hex::encode(&d[..12])
}

/// Deterministic pseudo-embedding of `dims` values in [-1, 1) for a text.
pub fn embedding(text: &str, dims: usize) -> Vec<f32> {
    let mut x: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        x ^= b as u64;
        x = x.wrapping_mul(0x0100_0000_01b3);
    }
    (0..dims)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 23) as f32) - 1.0
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counting_rule() {
        assert_eq!(count_tokens(""), 1);
        assert_eq!(count_tokens("abcd"), 1);
        assert_eq!(count_tokens("abcde"), 2);
        assert_eq!(count_tokens("ééééé"), 2);
    }

    #[test]
    fn answer_is_deterministic_and_sized() {
        let (a, t) = answer("hello there  world", 0, None);
        assert_eq!(a, "mock response to: hello there world");
        assert!(!t);
        let (b, _) = answer("hello", 1370, None);
        assert_eq!(b.len(), 1370);
        assert!(b.starts_with("mock response to: hello lorem"));
        let (c, t) = answer("hello", 1370, Some(10));
        assert_eq!(c, "mock respo");
        assert!(t);
    }

    #[test]
    fn chunking_covers_text() {
        let s = "héllo wörld, this is text";
        let c = chunks(s, 4);
        assert_eq!(c.concat(), s);
        assert!(c.iter().all(|x| x.chars().count() <= 4));
    }

    #[test]
    fn schema_values() {
        let s = json!({"type":"object","properties":{
            "city":{"type":"string"},"unit":{"type":"string","enum":["c","f"]},
            "days":{"type":"integer"},"tags":{"type":"array","items":{"type":"boolean"}}}});
        let v = value_for_schema(&s, 0);
        assert_eq!(v, json!({"city":"mock","unit":"c","days":1,"tags":[true]}));
    }
}
