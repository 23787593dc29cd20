//! A request body's top-level JSON object read in one pass without building
//! the document: where each top-level value lies in the body, and whether
//! `messages` has the shape every chat request needs. The OpenAI passthrough
//! routes on `model` and `stream` and edits the body in place
//! ([`edit_prefix`]); only the small values it reads are parsed.
//!
//! The pass validates the whole body as JSON (serde_json's own grammar,
//! skipping values instead of building them; UTF-8 is checked first), so a
//! malformed body gets the same OpenAI 400 `invalid_json` as a parsed one and
//! never reaches the provider. A top-level key given twice is refused too:
//! providers' parsers disagree on which one wins, and an edit in place would
//! change only one of them.

use std::borrow::Cow;
use std::ops::Range;

use serde_json::{Map, Value};

use crate::error::{echo, ApiError, INVALID_REQUEST};

mod block;

/// Nesting deeper than this is refused (serde_json's own limit when it
/// builds a document).
const MAX_DEPTH: usize = 128;

/// The shape of `messages`, checked while it is skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Messages {
    Absent,
    Null,
    NotArray,
    Empty,
    /// Index of the first message without a string `role`.
    BadRole(usize),
    Ok,
}

/// A body's top-level object: each key with where its value lies.
#[derive(Debug)]
pub struct TopLevel<'a> {
    body: &'a str,
    fields: Vec<(Cow<'a, str>, Range<usize>)>,
    messages: Messages,
    /// Where `messages` lies, when present.
    messages_span: Option<Range<usize>>,
    /// The long texts, for [`crate::lift`]: where the contents of each
    /// string of [`LONG_TEXT`] bytes or more lie whose key is one of
    /// [`TEXT_KEYS`].
    texts: Vec<Range<usize>>,
    /// Does a string anywhere hold `\u0000` or half of an escaped surrogate
    /// pair? (Then no text is lifted.)
    odd_escapes: bool,
}

/// A string at least this long (its JSON text) under one of [`TEXT_KEYS`]
/// is a long text ([`TopLevel::texts`]).
pub const LONG_TEXT: usize = 1024;

/// The keys of the texts that make a coding agent's request long: chat
/// `content` and content parts' `text`; the Responses API's `instructions`,
/// `input` and function call `output`.
pub const TEXT_KEYS: [&str; 5] = ["content", "text", "output", "instructions", "input"];

impl<'a> TopLevel<'a> {
    /// Reads a client body: valid UTF-8, valid JSON, an object, no key given
    /// twice. Errors are the client's 400 `invalid_json`.
    pub fn parse(body: &'a [u8]) -> Result<TopLevel<'a>, ApiError> {
        let Ok(text) = std::str::from_utf8(body) else {
            return Err(ApiError::new(
                400,
                INVALID_REQUEST,
                "invalid_json",
                "Request body is not valid UTF-8",
            ));
        };
        let mut sc = Scanner::new(body);
        sc.ws();
        if sc.peek() != Some(b'{') {
            // Valid JSON but no object, or no JSON at all: say which.
            sc.value(0).map_err(|e| sc.error(e))?;
            sc.ws();
            if sc.at == body.len() {
                return Err(not_an_object());
            }
            return Err(sc.error("trailing characters"));
        }
        let (fields, messages, messages_span) = sc.top().map_err(|e| sc.error(e))?;
        sc.ws();
        if sc.at != body.len() {
            return Err(sc.error("trailing characters"));
        }
        Ok(TopLevel {
            body: text,
            fields,
            messages,
            messages_span,
            texts: sc.texts,
            odd_escapes: sc.odd_escapes,
        })
    }

    /// The long texts: where the contents (between the quotes) of the
    /// strings under [`TEXT_KEYS`] of [`LONG_TEXT`] bytes or more lie, in
    /// body order; none when a string holds `\u0000` or half of an escaped
    /// surrogate pair.
    pub fn texts(&self) -> &[Range<usize>] {
        if self.odd_escapes {
            &[]
        } else {
            &self.texts
        }
    }

    /// The raw text of a top-level value (`messages` is not kept: only its
    /// shape, [`TopLevel::messages`]).
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.span(key).and_then(|r| self.body.get(r))
    }

    /// Where a top-level value lies in the body (bytes).
    pub fn span(&self, key: &str) -> Option<Range<usize>> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, r)| r.clone())
    }

    /// The edit that makes `model` the body's model (its span and new JSON
    /// text), unless the body already names it that way.
    pub fn model_edit(&self, model: &str) -> Option<(Range<usize>, String)> {
        let span = self.span("model")?;
        let model = Value::from(model).to_string();
        (self.body.get(span.clone())? != model).then_some((span, model))
    }

    /// The body itself.
    pub fn body(&self) -> &'a str {
        self.body
    }

    /// The raw text of `messages` (kept apart from [`TopLevel::get`]'s
    /// values: the filter reads only its start, for a session's prefix).
    pub fn messages_text(&self) -> Option<&'a str> {
        self.messages_span.clone().and_then(|r| self.body.get(r))
    }

    pub fn messages(&self) -> Messages {
        self.messages
    }

    /// The named top-level values parsed into an object (absent ones are
    /// left out): the small values a translator reads.
    pub fn small(&self, keys: &[&str]) -> Result<Value, ApiError> {
        let mut map = Map::new();
        for key in keys {
            if let Some(raw) = self.get(key) {
                let v = serde_json::from_str(raw)
                    .map_err(|e| ApiError::invalid_json(&e.to_string()))?;
                map.insert((*key).to_string(), v);
            }
        }
        Ok(Value::Object(map))
    }

    /// The whole body as a document (for translators that need it).
    pub fn value(&self) -> Result<Value, ApiError> {
        serde_json::from_str(self.body).map_err(|e| ApiError::invalid_json(&e.to_string()))
    }

    /// `model`: a non-empty string (the errors of a parsed body).
    pub fn model(&self) -> Result<String, ApiError> {
        match self.get("model").map(serde_json::from_str::<Value>) {
            Some(Ok(Value::String(s))) if !s.is_empty() => Ok(s),
            None | Some(Ok(Value::Null)) => Err(ApiError::bad_param(
                "model",
                "Missing required parameter: 'model'",
            )),
            _ => Err(ApiError::bad_param(
                "model",
                "Invalid type for 'model': expected a non-empty string",
            )),
        }
    }

    /// `messages` as [`crate::translate::check_messages`] checks it.
    pub fn check_messages(&self) -> Result<(), ApiError> {
        match self.messages {
            Messages::Ok => Ok(()),
            Messages::Absent | Messages::Null => Err(ApiError::bad_param(
                "messages",
                "Missing required parameter: 'messages'",
            )),
            Messages::NotArray => Err(ApiError::bad_param(
                "messages",
                "Invalid type for 'messages': expected an array",
            )),
            Messages::Empty => Err(ApiError::bad_param(
                "messages",
                "'messages' must contain at least one message",
            )),
            Messages::BadRole(i) => Err(ApiError::bad_param(
                &format!("messages[{i}].role"),
                format!("Invalid value for 'messages[{i}].role': expected a string"),
            )),
        }
    }
}

fn not_an_object() -> ApiError {
    ApiError::new(
        400,
        INVALID_REQUEST,
        "invalid_json",
        "Request body must be a JSON object",
    )
}

/// The model of a body whose first key is `model` with a plain string
/// (no escapes): read without scanning the rest. A hint only: the body is
/// still validated by whichever parse follows.
pub fn leading_model(body: &[u8]) -> Option<&str> {
    let head = body.get(..body.len().min(512))?;
    // The first 512 bytes may end inside a character.
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        Err(e) => std::str::from_utf8(head.get(..e.valid_up_to())?).ok()?,
    };
    let ws = [' ', '\t', '\n', '\r'];
    let rest = text.trim_start_matches(ws).strip_prefix('{')?;
    let rest = rest.trim_start_matches(ws).strip_prefix("\"model\"")?;
    let rest = rest.trim_start_matches(ws).strip_prefix(':')?;
    let rest = rest.trim_start_matches(ws).strip_prefix('"')?;
    let end = rest.find(['"', '\\'])?;
    let model = rest.get(..end)?;
    (rest.as_bytes().get(end) == Some(&b'"') && !model.bytes().any(|b| b < 0x20)).then_some(model)
}

/// Applies edits (byte range of `body` → replacement; sorted, disjoint) and
/// returns the new prefix with the length of the old prefix it replaces:
/// the rest of the body is left where it is, so the host replaces only the
/// prefix (Envoy edits a body only from its start or at its end).
pub fn edit_prefix(body: &str, edits: &[(Range<usize>, String)]) -> (Vec<u8>, usize) {
    let end = edits.iter().map(|(r, _)| r.end).max().unwrap_or(0);
    let added: usize = edits.iter().map(|(_, s)| s.len()).sum();
    let mut out = Vec::with_capacity(end + added);
    let mut at = 0;
    for (range, with) in edits {
        if let Some(kept) = body.as_bytes().get(at..range.start) {
            out.extend_from_slice(kept);
        }
        out.extend_from_slice(with.as_bytes());
        at = range.end.max(at);
    }
    (out, end)
}

/// What a value turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Object,
    Array,
    Str,
    Scalar,
    Null,
}

type Fields<'a> = Vec<(Cow<'a, str>, Range<usize>)>;

/// A JSON validator over bytes (RFC 8259 grammar; UTF-8 is checked before).
/// Strings are skipped eight bytes at a time up to their first escape, then
/// by 64-byte blocks.
struct Scanner<'a> {
    b: &'a [u8],
    at: usize,
    /// A top-level key given twice (for the error).
    twice: Option<String>,
    texts: Vec<Range<usize>>,
    odd_escapes: bool,
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Bytes of `w` below `n` (n ≤ 128) flagged in their high bit; the lowest
/// flag is exact.
fn below(w: u64, n: u8) -> u64 {
    w.wrapping_sub(ONES * u64::from(n)) & !w & HIGHS
}

/// Where the plain run of string bytes from `at` ends: the first quote,
/// backslash or control character (or the end of the body), eight bytes at
/// a time. The same bytes are the ones JSON output must escape
/// ([`crate::translate::write_json`]).
pub(crate) fn plain_end(b: &[u8], mut at: usize) -> usize {
    while let Some(w) = word(b, at) {
        let hits = below(w ^ (ONES * u64::from(b'"')), 1)
            | below(w ^ (ONES * u64::from(b'\\')), 1)
            | below(w, 0x20);
        if hits != 0 {
            return at + (hits.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    while let Some(&c) = b.get(at) {
        if c == b'"' || c == b'\\' || c < 0x20 {
            break;
        }
        at += 1;
    }
    at
}

/// Is `c` the letter of an escape that stands alone (`\n`, `\"`, …), i.e.
/// any escape but `\uXXXX`?
fn plain_escape(c: u8) -> bool {
    matches!(c, b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't')
}

/// Four hex digits (an escape's `XXXX` in `\uXXXX`).
fn hex4(hex: &[u8]) -> Option<u16> {
    if hex.len() != 4 || !hex.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

/// The eight bytes at `at` (little-endian), if the body has them.
fn word(b: &[u8], at: usize) -> Option<u64> {
    let chunk: [u8; 8] = b.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_le_bytes(chunk))
}

impl<'a> Scanner<'a> {
    fn new(b: &'a [u8]) -> Self {
        Scanner {
            b,
            at: 0,
            twice: None,
            texts: Vec::new(),
            odd_escapes: false,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.at).copied()
    }

    fn error(&self, what: &str) -> ApiError {
        match &self.twice {
            Some(key) => ApiError::invalid_json(&format!("the key '{key}' is given twice")),
            None => ApiError::invalid_json(&format!("{what} at byte {}", self.at)),
        }
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: u8, what: &'static str) -> Result<(), &'static str> {
        self.ws();
        if self.peek() == Some(c) {
            self.at += 1;
            Ok(())
        } else {
            Err(what)
        }
    }

    /// The top-level object: its fields, and the shape of `messages`.
    fn top(&mut self) -> Result<(Fields<'a>, Messages, Option<Range<usize>>), &'static str> {
        let mut fields: Fields<'a> = Vec::with_capacity(16);
        let mut messages = Messages::Absent;
        let mut messages_span = None;
        self.ws();
        self.object(|sc, key| {
            if fields.iter().any(|(k, _)| *k == key)
                || (key == "messages" && messages != Messages::Absent)
            {
                sc.twice = Some(echo(&key).into_owned());
                return Err("a top-level key is given twice");
            }
            if key == "messages" {
                let start = sc.at;
                messages = sc.messages()?;
                messages_span = Some(start..sc.at);
            } else {
                let start = sc.at;
                sc.field(&key, 1)?;
                fields.push((key, start..sc.at));
            }
            Ok(())
        })?;
        Ok((fields, messages, messages_span))
    }

    /// `messages`, noting its shape.
    fn messages(&mut self) -> Result<Messages, &'static str> {
        if self.peek() != Some(b'[') {
            return Ok(match self.value(1)? {
                Kind::Null => Messages::Null,
                _ => Messages::NotArray,
            });
        }
        let mut bad = None;
        let n = self.array(|sc, i| {
            // Does the message's (last) `role` hold a string?
            let mut role = false;
            if sc.peek() == Some(b'{') {
                sc.object(|sc, key| {
                    let kind = sc.field(&key, 3)?;
                    if key == "role" {
                        role = kind == Kind::Str;
                    }
                    Ok(())
                })?;
            } else {
                sc.value(2)?;
            }
            if !role && bad.is_none() {
                bad = Some(i);
            }
            Ok(())
        })?;
        Ok(match (n, bad) {
            (0, _) => Messages::Empty,
            (_, Some(i)) => Messages::BadRole(i),
            (_, None) => Messages::Ok,
        })
    }

    /// An object from its `{`: `field` reads each value (the scanner is
    /// on it) after its key.
    fn object(
        &mut self,
        mut field: impl FnMut(&mut Self, Cow<'a, str>) -> Result<(), &'static str>,
    ) -> Result<(), &'static str> {
        self.eat(b'{', "expected '{'")?;
        self.ws();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(());
        }
        loop {
            self.ws();
            let key = self.key()?;
            self.eat(b':', "expected ':'")?;
            self.ws();
            field(self, key)?;
            self.ws();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err("expected ',' or '}'"),
            }
        }
    }

    /// An array from its `[`: `element` reads each element (by index, the
    /// scanner on it). Returns how many there were.
    fn array(
        &mut self,
        mut element: impl FnMut(&mut Self, usize) -> Result<(), &'static str>,
    ) -> Result<usize, &'static str> {
        self.eat(b'[', "expected '['")?;
        self.ws();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(0);
        }
        let mut n = 0;
        loop {
            self.ws();
            element(self, n)?;
            n += 1;
            self.ws();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(n);
                }
                _ => return Err("expected ',' or ']'"),
            }
        }
    }

    /// An object key, decoded only when it has escapes.
    fn key(&mut self) -> Result<Cow<'a, str>, &'static str> {
        if self.peek() != Some(b'"') {
            return Err("expected a string key");
        }
        let start = self.at;
        let escaped = self.string()?;
        let raw = self.b.get(start..self.at).ok_or("truncated key")?;
        if escaped {
            let s: String = serde_json::from_slice(raw).map_err(|_| "invalid key")?;
            Ok(Cow::Owned(s))
        } else {
            let inner = raw.get(1..raw.len() - 1).ok_or("truncated key")?;
            std::str::from_utf8(inner)
                .map(Cow::Borrowed)
                .map_err(|_| "invalid key")
        }
    }

    fn value(&mut self, depth: usize) -> Result<Kind, &'static str> {
        if depth > MAX_DEPTH {
            return Err("nested too deeply");
        }
        self.ws();
        match self.peek() {
            Some(b'"') => self.string().map(|_| Kind::Str),
            Some(b'{') => self
                .object(|sc, key| sc.field(&key, depth + 1).map(drop))
                .map(|()| Kind::Object),
            Some(b'[') => self
                .array(|sc, _| sc.value(depth + 1).map(drop))
                .map(|_| Kind::Array),
            Some(b't') => self.literal(b"true", Kind::Scalar),
            Some(b'f') => self.literal(b"false", Kind::Scalar),
            Some(b'n') => self.literal(b"null", Kind::Null),
            Some(b'-' | b'0'..=b'9') => self.number().map(|()| Kind::Scalar),
            Some(_) => Err("expected a value"),
            None => Err("unexpected end of the body"),
        }
    }

    /// An object's value after its key, noting a long text.
    fn field(&mut self, key: &str, depth: usize) -> Result<Kind, &'static str> {
        self.ws();
        let start = self.at;
        let kind = self.value(depth)?;
        if kind == Kind::Str && self.at - start >= LONG_TEXT + 2 && TEXT_KEYS.contains(&key) {
            self.texts.push(start + 1..self.at - 1);
        }
        Ok(kind)
    }

    fn literal(&mut self, word: &[u8], kind: Kind) -> Result<Kind, &'static str> {
        if self.b.get(self.at..self.at + word.len()) == Some(word) {
            self.at += word.len();
            Ok(kind)
        } else {
            Err("expected a value")
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
        self.at - start
    }

    fn number(&mut self) -> Result<(), &'static str> {
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek() {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err("invalid number"),
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return Err("invalid number");
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            if self.digits() == 0 {
                return Err("invalid number");
            }
        }
        Ok(())
    }

    /// A string from its opening quote; true when it holds escapes.
    fn string(&mut self) -> Result<bool, &'static str> {
        self.string_by(true)
    }

    /// [`Self::string`]; `blocks`: once the string has an escape, the rest
    /// is skipped by 64-byte blocks where it can ([`block::skip`]), else
    /// escape by escape.
    fn string_by(&mut self, blocks: bool) -> Result<bool, &'static str> {
        self.at += 1;
        let mut escaped = false;
        // Blocks are tried from this index on (none before the first escape:
        // most strings are short and plain).
        let mut blocks_from = usize::MAX;
        loop {
            if self.at >= blocks_from {
                match block::skip(self.b, self.at) {
                    block::Skip::End(quote) => {
                        self.at = quote + 1;
                        return Ok(escaped);
                    }
                    block::Skip::Stop { at, until } => {
                        self.at = at;
                        blocks_from = until.map_or(usize::MAX, |i| i + 1);
                    }
                }
            }
            self.at = plain_end(self.b, self.at);
            match self.peek() {
                Some(b'"') => {
                    self.at += 1;
                    return Ok(escaped);
                }
                Some(b'\\') => {
                    if blocks && !escaped {
                        blocks_from = self.at;
                    }
                    escaped = true;
                    self.at += 1;
                    match self.peek() {
                        Some(c) if plain_escape(c) => self.at += 1,
                        Some(b'u') => {
                            let hex = self
                                .b
                                .get(self.at + 1..self.at + 5)
                                .ok_or("invalid escape")?;
                            let code = hex4(hex).ok_or("invalid escape")?;
                            self.at += 5;
                            match code {
                                0 | 0xdc00..=0xdfff => self.odd_escapes = true,
                                0xd800..=0xdbff => {
                                    // A pair is one character; a lone half
                                    // is text serde_json will not decode.
                                    let low = self.b.get(self.at..self.at + 6);
                                    match low.and_then(|l| l.strip_prefix(b"\\u")).and_then(hex4) {
                                        Some(0xdc00..=0xdfff) => self.at += 6,
                                        _ => self.odd_escapes = true,
                                    }
                                }
                                _ => {}
                            }
                        }
                        _ => return Err("invalid escape"),
                    }
                }
                Some(c) if c < 0x20 => return Err("control character in a string"),
                Some(_) => self.at += 1,
                None => return Err("unterminated string"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(body: &[u8]) -> String {
        let e = TopLevel::parse(body).unwrap_err();
        assert_eq!(e.status, 400);
        e.code.unwrap_or_default()
    }

    #[test]
    fn finds_top_level_values_and_their_spans() {
        let body =
            br#" {"messages":[{"role":"user","content":"a \"model\": b"}], "model" : "x\u00e9",
            "stream":true,"stream_options":{"include_usage":false},"n":1} "#;
        let top = TopLevel::parse(body).unwrap();
        assert_eq!(top.model().unwrap(), "x\u{e9}");
        assert_eq!(top.get("model"), Some(r#""x\u00e9""#));
        assert_eq!(&top.body()[top.span("model").unwrap()], r#""x\u00e9""#);
        assert_eq!(top.messages(), Messages::Ok);
        assert_eq!(
            top.small(&["stream", "stream_options", "absent"]).unwrap(),
            serde_json::json!({"stream": true, "stream_options": {"include_usage": false}})
        );
        assert!(top.get("role").is_none(), "nested keys are not top-level");
    }

    #[test]
    fn malformed_bodies_are_invalid_json() {
        for body in [
            &b""[..],
            b"{",
            b"{\"model\":\"a\"",
            b"{\"model\":\"a\"} x",
            b"{\"model\":\"a\",}",
            b"{\"model\":\"a\nb\"}",
            b"{\"model\":\"a\\q\"}",
            b"{\"model\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"]}",
            b"{\"model\":\"a\",\"n\":01}",
            b"{\"model\":\"a\",\"n\":tru}",
            b"{\"model\":\"a\",\"model\":\"b\"}",
            b"{\"messages\":[],\"messages\":[]}",
            b"{\"model\":\"\xff\"}",
            b"[]",
            b"\"model\"",
            b"nope",
        ] {
            assert_eq!(
                code(body),
                "invalid_json",
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        let e = TopLevel::parse(b"[1]").unwrap_err();
        assert_eq!(e.message, "Request body must be a JSON object");
        let e = TopLevel::parse(br#"{"model":"a","model":"b"}"#).unwrap_err();
        assert!(
            e.message.contains("'model' is given twice"),
            "{}",
            e.message
        );
    }

    #[test]
    fn model_and_messages_errors_match_a_parsed_body() {
        let model = |b: &[u8]| TopLevel::parse(b).unwrap().model().unwrap_err().message;
        assert_eq!(model(b"{}"), "Missing required parameter: 'model'");
        assert_eq!(
            model(br#"{"model":null}"#),
            "Missing required parameter: 'model'"
        );
        assert!(model(br#"{"model":""}"#).contains("non-empty string"));
        assert!(model(br#"{"model":1}"#).contains("non-empty string"));
        let shape = |b: &[u8]| TopLevel::parse(b).unwrap().messages();
        assert_eq!(shape(b"{}"), Messages::Absent);
        assert_eq!(shape(br#"{"messages":null}"#), Messages::Null);
        assert_eq!(
            shape(br#"{"messages":{"role":"user"}}"#),
            Messages::NotArray
        );
        assert_eq!(shape(br#"{"messages":"hi"}"#), Messages::NotArray);
        assert_eq!(shape(br#"{"messages":[]}"#), Messages::Empty);
        assert_eq!(
            shape(br#"{"messages":[{"role":"user"},{"content":"x"},{"role":1}]}"#),
            Messages::BadRole(1)
        );
        assert_eq!(
            shape(br#"{"messages":[{"role":"user"},[1],"x"]}"#),
            Messages::BadRole(1)
        );
        assert_eq!(
            shape(br#"{"messages":[{"role":1,"role":"user"}]}"#),
            Messages::Ok,
            "the last role wins, as in a parsed body"
        );
        let e = TopLevel::parse(br#"{"messages":[{"role":"u"},{}]}"#)
            .unwrap()
            .check_messages()
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[1].role"));
    }

    #[test]
    fn a_leading_plain_model_is_read_without_a_scan() {
        assert_eq!(
            leading_model(br#" { "model" : "smart", "messages": ["#),
            Some("smart")
        );
        assert_eq!(leading_model(br#"{"model":"a/b"}"#), Some("a/b"));
        for body in [
            &br#"{"messages":[],"model":"smart"}"#[..],
            br#"{"model":"sm\u0061rt"}"#,
            br#"{"model":1}"#,
            br#"{"model":"smart"#,
            br#"["model"]"#,
            b"{\"model\":\"a\nb\"}",
        ] {
            assert_eq!(
                leading_model(body),
                None,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn edits_replace_only_the_prefix_they_reach() {
        let body = r#"{"model":"a/b","messages":[]}"#;
        let (prefix, replaced) =
            edit_prefix(body, &[(1..1, "\"x\":1,".into()), (9..14, "\"b\"".into())]);
        assert_eq!(replaced, 14);
        let mut whole = prefix;
        whole.extend_from_slice(&body.as_bytes()[replaced..]);
        assert_eq!(whole, br#"{"x":1,"model":"b","messages":[]}"#);
        assert_eq!(edit_prefix(body, &[]), (Vec::new(), 0));
    }

    /// The string starting `body`, read by blocks or escape by escape:
    /// the result, where it ended, and whether it had odd escapes.
    fn string_read(body: &[u8], blocks: bool) -> (Result<bool, &'static str>, usize, bool) {
        let mut sc = Scanner::new(body);
        let result = sc.string_by(blocks);
        (result, sc.at, sc.odd_escapes)
    }

    /// Strings skipped by blocks end where, and fail how, the same strings
    /// skipped escape by escape do: long texts with escapes of every kind,
    /// runs of backslashes, bad escapes and raw control bytes at every
    /// offset of a block, closed or not.
    #[test]
    fn strings_skipped_by_blocks_match_escape_by_escape() {
        const PIECES: [&[u8]; 21] = [
            b"\\n",
            b"\\\"",
            b"\\\\",
            b"\\/",
            b"\\t",
            b"\\b\\f\\r",
            b"\\u00e9",
            b"\\ud83d\\ude00",
            b"\\ud800",
            b"\\udc00x",
            b"\\u0000",
            b"\\u12",
            b"\\x",
            b"\\\\\\\\\\\\",
            b"\\\\\\\"",
            b"\x01",
            b"\x1f",
            "\u{e9}\u{1f600}".as_bytes(),
            b" ",
            b"let x = 1;",
            b"\"",
        ];
        let mut rng = crate::keys::XorShift::new(0x853c_49e6_748f_ea9b);
        let mut next = move || rng.next_u32() as usize;
        let (mut closed, mut refused) = (0, 0);
        for _ in 0..20_000 {
            let mut body = b"\"".to_vec();
            while body.len() < 40 + next() % 400 {
                match next() % 10 {
                    // Mostly plain text with the escapes a coding agent's text has.
                    0..=4 => body.extend(std::iter::repeat_n(b'a', next() % 30)),
                    5..=7 => body.extend_from_slice(PIECES[next() % 6]),
                    _ => body.extend_from_slice(PIECES[next() % PIECES.len()]),
                }
            }
            if next() % 4 > 0 {
                body.extend_from_slice(b"\",1]");
            }
            let by_blocks = string_read(&body, true);
            assert_eq!(
                by_blocks,
                string_read(&body, false),
                "{}",
                String::from_utf8_lossy(&body)
            );
            match by_blocks.0 {
                Ok(_) => closed += 1,
                Err(_) => refused += 1,
            }
        }
        assert!(
            closed > 3_000 && refused > 3_000,
            "{closed} closed, {refused} refused"
        );
        // Runs of backslashes longer than a block, ending with the string
        // or escaping its quote.
        for run in [63, 64, 65, 127, 128, 129, 200] {
            for tail in ["\"", "x\"", "\"x\""] {
                let body = format!("\"a\\n{}{tail},1]", "\\".repeat(run));
                let body = body.as_bytes();
                assert_eq!(
                    string_read(body, true),
                    string_read(body, false),
                    "{}",
                    String::from_utf8_lossy(body)
                );
            }
        }
    }
}
