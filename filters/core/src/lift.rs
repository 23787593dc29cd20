//! Long texts kept out of a translated document.
//!
//! A coding agent's request is mostly text: file contents, tool outputs and
//! earlier turns in `content`, `text` and `output` strings
//! ([`crate::scan::TEXT_KEYS`]). A translator that only moves those strings
//! into its upstream body ([`Translator::keeps_texts_whole`]) need not have
//! them decoded into a document and encoded again. Each long text
//! ([`TopLevel::texts`]) is replaced by a short mark before the body is
//! parsed, the translator works on that small document, and each mark in
//! its output is replaced by the client's own JSON text of the string,
//! escapes as written. Decoding and re-encoding 512 KB took about 0.8 ms in
//! the Wasm VM; the marks cost two copies.
//!
//! A mark is `\u0000<n>\u0000` inside the string. No client string holds
//! U+0000 when texts are lifted ([`TopLevel::texts`] is empty then), so
//! every NUL in the translator's output comes from a mark, and a mark that
//! the translator joined with other text (a system prompt of several
//! messages) is still replaced where it lies.

use std::io::Write;

use serde_json::Value;

use crate::scan::TopLevel;
use crate::translate::{RequestCtx, Translator, UpstreamRequest};

/// Bodies at least this long have their long texts lifted; a smaller body
/// is built whole (the scan that finds the texts would cost more than the
/// decoding it saves).
pub const MIN_BODY: usize = 32 * 1024;

/// The escaped NUL that opens and closes a mark.
const NUL: &[u8] = b"\\u0000";

/// The translator's request built from the body with its long texts lifted
/// out. `None` when the body has no long text, or when the small document
/// does not translate (the caller then builds the whole body, so that an
/// error names what the client sent).
pub fn request(
    tr: &dyn Translator,
    ctx: &RequestCtx<'_>,
    top: &TopLevel<'_>,
) -> Option<UpstreamRequest> {
    let texts = top.texts();
    if texts.is_empty() {
        return None;
    }
    let body = top.body().as_bytes();
    let lifted: usize = texts.iter().map(|r| r.len()).sum();
    let mut small = Vec::with_capacity(body.len() - lifted + texts.len() * 16);
    let mut at = 0;
    for (n, r) in texts.iter().enumerate() {
        small.extend_from_slice(body.get(at..r.start)?);
        small.extend_from_slice(NUL);
        write!(small, "{n}").ok()?;
        small.extend_from_slice(NUL);
        at = r.end;
    }
    small.extend_from_slice(body.get(at..)?);
    let doc: Value = serde_json::from_slice(&small).ok()?;
    let mut up = tr.request(ctx, &doc).ok()?;
    up.body = put_back(&up.body, body, texts)?;
    Some(up)
}

/// `out` (JSON) with each mark replaced by its text. `None` if a mark names
/// no text.
fn put_back(out: &[u8], body: &[u8], texts: &[std::ops::Range<usize>]) -> Option<Vec<u8>> {
    let lifted: usize = texts.iter().map(|r| r.len()).sum();
    let mut v = Vec::with_capacity(out.len() + lifted);
    let (mut copied, mut at) = (0, 0);
    // Backslashes occur only inside strings, each opening one escape.
    while let Some(i) = out.get(at..)?.iter().position(|&c| c == b'\\') {
        let esc = at + i;
        if out.get(esc..esc + NUL.len()) != Some(NUL) {
            at = esc + 2;
            continue;
        }
        let digits = esc + NUL.len();
        let len = out
            .get(digits..)?
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        let end = digits + len;
        if len == 0 || out.get(end..end + NUL.len()) != Some(NUL) {
            return None;
        }
        let n: usize = std::str::from_utf8(out.get(digits..end)?)
            .ok()?
            .parse()
            .ok()?;
        v.extend_from_slice(out.get(copied..esc)?);
        v.extend_from_slice(body.get(texts.get(n)?.clone())?);
        copied = end + NUL.len();
        at = copied;
    }
    v.extend_from_slice(out.get(copied..)?);
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_replaced_where_they_lie_and_other_escapes_kept() {
        let body = br#"{"a":"\"x\" AAA","b":"BBBB"}"#;
        let texts = [6..15, 22..26];
        let out = br#"{"s":"\u00000\u0000\n\n\u00001\u0000","t":"\\u00000 \u0001"}"#;
        let v = put_back(out, body, &texts).unwrap();
        assert_eq!(
            std::str::from_utf8(&v).unwrap(),
            r#"{"s":"\"x\" AAA\n\nBBBB","t":"\\u00000 \u0001"}"#
        );
        // A mark naming no text, or cut short, is refused.
        assert_eq!(put_back(br#""\u00002\u0000""#, body, &texts), None);
        assert_eq!(put_back(br#""\u00001""#, body, &texts), None);
        assert_eq!(put_back(br#""\u0000 ""#, body, &texts), None);
    }
}
