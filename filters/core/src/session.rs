//! Which conversation a request belongs to, for cache-affine key choice.
//!
//! Providers cache prompt prefixes per account or key, so every turn of one
//! conversation should reach the same provider key: [`crate::keys::KeyPool`]
//! picks by weighted rendezvous hashing on the session this module names,
//! the same on every worker and every gateway replica, with no shared state.
//!
//! The session, in order: the client's session header
//! (`x-claude-code-session-id`, `session_id`, `session-id`, `x-session-id`),
//! the body's `prompt_cache_key` (Codex sets its session id there), else a
//! hash of the prompt's stable prefix: the system prompt (`system`,
//! `instructions`), the tools, and the first message or input item. Agents
//! resend that prefix unchanged every turn and append to the conversation,
//! so its hash is the same for every turn. Each is hashed with the tenant,
//! so two tenants never share a session. Only the hash leaves this module:
//! the raw id never reaches logs or the provider.

use serde_json::Value;

pub use crate::hash::{hash_bytes, mix};
use crate::scan::TopLevel;

/// Request headers that name a session, in the order they are read.
pub const SESSION_HEADERS: [&str; 4] = [
    "x-claude-code-session-id",
    "session_id",
    "session-id",
    "x-session-id",
];

/// The first session header of a request's headers (lowercase names).
pub fn header_in(headers: &[(String, String)]) -> Option<&str> {
    SESSION_HEADERS.iter().find_map(|name| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    })
}

/// Where a session's name came from (for the access log and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Header,
    PromptCacheKey,
    Prefix,
}

/// A request's session: the hash of (tenant, name) and where the name came
/// from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Session {
    pub hash: u64,
    pub source: Source,
}

impl Session {
    /// The value a provider's cache hint (`prompt_cache_key`) gets: the
    /// session's hash, never the client's raw id.
    pub fn hint(&self) -> String {
        format!("tg-{:016x}", self.hash)
    }
}

fn named(tenant: &str, parts: &[&[u8]], source: Source) -> Session {
    let mut h = hash_bytes(0x746f_6c6c_6761_7465, tenant.as_bytes());
    for p in parts {
        h = hash_bytes(h, p);
    }
    Session { hash: h, source }
}

/// A request's session from its header (`header`: the first of
/// [`SESSION_HEADERS`] it carries) or its scanned body.
pub fn of_scanned(tenant: &str, header: Option<&str>, top: &TopLevel<'_>) -> Option<Session> {
    if let Some(h) = header.filter(|h| !h.is_empty()) {
        return Some(named(tenant, &[h.as_bytes()], Source::Header));
    }
    if let Some(k) = top.get("prompt_cache_key").filter(|k| k.starts_with('"')) {
        return Some(named(tenant, &[k.as_bytes()], Source::PromptCacheKey));
    }
    let system = top.get("system").or_else(|| top.get("instructions"));
    let tools = top.get("tools");
    let first = top
        .messages_text()
        .or_else(|| top.get("input"))
        .map(first_turn);
    prefix(tenant, system, tools, first)
}

/// The same from a built document.
pub fn of_document(tenant: &str, header: Option<&str>, body: &Value) -> Option<Session> {
    if let Some(h) = header.filter(|h| !h.is_empty()) {
        return Some(named(tenant, &[h.as_bytes()], Source::Header));
    }
    if let Some(Value::String(k)) = body.get("prompt_cache_key") {
        return Some(named(tenant, &[k.as_bytes()], Source::PromptCacheKey));
    }
    let text = |v: Option<&Value>| v.filter(|v| !v.is_null()).map(Value::to_string);
    let system = text(body.get("system").or_else(|| body.get("instructions")));
    let tools = text(body.get("tools"));
    let first = match body.get("messages").or_else(|| body.get("input")) {
        Some(Value::Array(items)) => {
            let n = items
                .iter()
                .position(|m| m.get("role").and_then(Value::as_str) == Some("user"))
                .map_or(1, |i| i + 1);
            Some(Value::Array(items.iter().take(n).cloned().collect()).to_string())
        }
        other => text(other),
    };
    prefix(
        tenant,
        system.as_deref(),
        tools.as_deref(),
        first.as_deref(),
    )
}

fn prefix(
    tenant: &str,
    system: Option<&str>,
    tools: Option<&str>,
    first: Option<&str>,
) -> Option<Session> {
    if system.is_none() && tools.is_none() && first.is_none() {
        return None;
    }
    let parts = [system, tools, first].map(|p| p.unwrap_or("").as_bytes());
    Some(named(tenant, &parts, Source::Prefix))
}

/// The messages up to the first user turn, as text: chat requests open with
/// their system message, then the user's first words; every turn of a
/// conversation starts the same way. The text (validated as JSON before,
/// so brackets outside strings balance) is walked once; the whole text when
/// it is no array.
fn first_turn(text: &str) -> &str {
    let b = text.as_bytes();
    let Some(open) = b.iter().position(|c| !c.is_ascii_whitespace()) else {
        return text;
    };
    if b.get(open) != Some(&b'[') {
        return text;
    }
    let mut element = open + 1;
    let (mut depth, mut in_str, mut escaped) = (0usize, false, false);
    for (i, &c) in b.iter().enumerate().skip(open + 1) {
        if in_str {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            b'"' => in_str = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' if depth > 0 => depth -= 1,
            b']' | b',' if depth == 0 => {
                let el = text.get(element..i).unwrap_or("");
                let user = el.contains("\"role\":\"user\"") || el.contains("\"role\": \"user\"");
                if c == b']' || user {
                    return text.get(open + 1..i).unwrap_or(text).trim();
                }
                element = i + 1;
            }
            _ => {}
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scanned(tenant: &str, header: Option<&str>, body: &Value) -> Option<Session> {
        let bytes = serde_json::to_vec(body).unwrap();
        let top = TopLevel::parse(&bytes).unwrap();
        of_scanned(tenant, header, &top)
    }

    #[test]
    fn turns_of_one_conversation_share_their_session() {
        let turn1 = json!({"model": "m", "system": "be brief", "tools": [{"name": "Read"}],
                           "messages": [{"role": "user", "content": "fix the \"bug\" ]"}]});
        let mut turn2 = turn1.clone();
        let msgs = turn2["messages"].as_array_mut().unwrap();
        msgs.push(json!({"role": "assistant", "content": "done"}));
        msgs.push(json!({"role": "user", "content": "thanks"}));
        let (a, b) = (
            scanned("t", None, &turn1).unwrap(),
            scanned("t", None, &turn2).unwrap(),
        );
        assert_eq!(a, b);
        assert_eq!(a.source, Source::Prefix);
        // Scanned and built bodies agree on the prefix's parts: both paths
        // name the same session for the same turns only when the JSON text
        // is the same, which a client's own serialisation keeps.
        assert_eq!(
            of_document("t", None, &turn1),
            of_document("t", None, &turn2)
        );
        // Another first question is another conversation; another tenant
        // never shares one.
        let mut other = turn1.clone();
        other["messages"][0]["content"] = json!("another question");
        assert_ne!(scanned("t", None, &other), Some(a));
        assert_ne!(scanned("u", None, &turn1), Some(a));
    }

    #[test]
    fn a_header_then_prompt_cache_key_name_the_session() {
        let body = json!({"model": "m", "input": "hi", "prompt_cache_key": "codex-123"});
        let by_header = scanned("t", Some("s-1"), &body).unwrap();
        assert_eq!(by_header.source, Source::Header);
        assert_eq!(
            scanned("t", Some("s-1"), &json!({"model": "x"})),
            Some(by_header)
        );
        let by_key = scanned("t", None, &body).unwrap();
        assert_eq!(by_key.source, Source::PromptCacheKey);
        assert_eq!(
            of_document("t", None, &body).unwrap().source,
            Source::PromptCacheKey
        );
        assert!(by_key.hint().starts_with("tg-") && !by_key.hint().contains("codex"));
        assert_eq!(scanned("t", None, &json!({"model": "m"})), None);
    }

    #[test]
    fn the_first_turn_ends_with_the_first_user_message() {
        let sys = r#"{"role":"system","content":"],\"x"}"#;
        let user = r#"{"role":"user","content":[{"type":"text","text":"hi"}]}"#;
        let later = format!("[{sys},{user},{{\"role\":\"assistant\",\"content\":\"a\"}}]");
        assert_eq!(first_turn(&later), format!("{sys},{user}"));
        assert_eq!(
            first_turn(&format!("[{sys},{user}]")),
            format!("{sys},{user}")
        );
        assert_eq!(first_turn(&format!(" [ {user} , {sys}]")), user);
        assert_eq!(first_turn(r#" [ [1,[2]] , 3]"#), "[1,[2]] , 3");
        assert_eq!(first_turn(r#""just text""#), r#""just text""#);
        assert_eq!(first_turn("[]"), "");
    }

    #[test]
    fn the_hash_is_fixed() {
        // Every replica and build must agree: these values are the
        // contract, not an accident.
        assert_eq!(hash_bytes(0, b"tollgate"), 0x8d67_1dc3_778e_2ee6);
        assert_eq!(
            hash_bytes(7, b"a session id of 29 characters"),
            0x1b38_dd15_e911_bff0
        );
        assert_eq!(hash_bytes(1, b"abc"), hash_bytes(1, b"abc"));
        assert_ne!(hash_bytes(1, b"abc"), hash_bytes(1, b"abd"));
        assert_ne!(hash_bytes(1, b"abcdefgh"), hash_bytes(1, b"abcdefgh\0"));
    }
}
