//! Long texts kept out of a translated document.
//!
//! A coding agent's request is mostly text: file contents, tool outputs and
//! earlier turns in `content`, `text` and `output` strings
//! ([`crate::scan::TEXT_KEYS`]). A translator that only moves those strings
//! into its upstream body ([`Translator::keeps_texts_whole`]) need not have
//! them decoded into a document and encoded again. Each long text
//! ([`TopLevel::texts`]) is replaced by a short mark before the body is
//! parsed, the translator works on that small document, and each mark in
//! its output stands for the client's own JSON text of the string, escapes
//! as written. Decoding and re-encoding 512 KB took about 0.8 ms in the Wasm
//! VM. The texts are not copied into the upstream body either: the plan
//! names where each one goes ([`Insert`]), and the filter writes them to
//! Envoy straight from the client's body ([`crate::plan::writes`]).
//!
//! A mark is `\u0000<n>\u0000` inside the string. No client string holds
//! U+0000 when texts are lifted ([`TopLevel::texts`] is empty then), so
//! every NUL in the translator's output comes from a mark, and a mark that
//! the translator joined with other text (a system prompt of several
//! messages) is still replaced where it lies.

use std::io::Write;
use std::ops::Range;

use serde_json::Value;

use crate::scan::TopLevel;
use crate::translate::{RequestCtx, Translator, UpstreamRequest};

/// Bodies at least this long have their long texts lifted; a smaller body
/// is built whole (the scan that finds the texts would cost more than the
/// decoding it saves).
pub const MIN_BODY: usize = 32 * 1024;

/// The escaped NUL that opens and closes a mark.
const NUL: &[u8] = b"\\u0000";

/// A client text the upstream body leaves out: the client body's bytes
/// `text` (a string's JSON text between its quotes, escapes as written) go
/// at byte `at` of the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insert {
    pub at: usize,
    pub text: Range<usize>,
}

/// The translator's request built from the body with its long texts lifted
/// out, its body without them, and where they go, in order. `None` when the
/// body has no long text, or when the small document does not translate
/// (the caller then builds the whole body, so that an error names what the
/// client sent).
pub fn request(
    tr: &dyn Translator,
    ctx: &RequestCtx<'_>,
    top: &TopLevel<'_>,
) -> Option<(UpstreamRequest, Vec<Insert>)> {
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
    let (out, inserts) = marks_out(&up.body, texts)?;
    up.body = out;
    Some((up, inserts))
}

/// `out` (JSON) without its marks, and the text each mark stood for, where
/// it stood. `None` if a mark names no text.
fn marks_out(out: &[u8], texts: &[Range<usize>]) -> Option<(Vec<u8>, Vec<Insert>)> {
    let mut v = Vec::with_capacity(out.len());
    let mut inserts = Vec::with_capacity(texts.len());
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
        inserts.push(Insert {
            at: v.len(),
            text: texts.get(n)?.clone(),
        });
        copied = end + NUL.len();
        at = copied;
    }
    v.extend_from_slice(out.get(copied..)?);
    Some((v, inserts))
}

/// The pieces of the upstream body, in order: `body` cut at each insert,
/// with the insert's text from `client` between the cuts. Inserts that do
/// not fit give empty pieces (never a panic in the VM).
pub fn pieces<'a>(
    body: &'a [u8],
    inserts: &'a [Insert],
    client: &'a [u8],
) -> impl Iterator<Item = &'a [u8]> {
    let cuts = inserts.iter().map(|i| i.at).chain([body.len()]);
    let starts = std::iter::once(0).chain(inserts.iter().map(|i| i.at));
    let texts = inserts
        .iter()
        .map(|i| client.get(i.text.clone()).unwrap_or_default())
        .map(Some)
        .chain([None]);
    starts
        .zip(cuts)
        .zip(texts)
        .flat_map(move |((from, to), text)| {
            std::iter::once(body.get(from..to).unwrap_or_default()).chain(text)
        })
}

/// `body` with each insert's text from `client` put in.
pub fn joined(body: &[u8], inserts: &[Insert], client: &[u8]) -> Vec<u8> {
    pieces(body, inserts, client).collect::<Vec<_>>().concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_taken_out_where_they_lie_and_other_escapes_kept() {
        let body = br#"{"a":"\"x\" AAA","b":"BBBB"}"#;
        let texts = [6..15, 22..26];
        let out = br#"{"s":"\u00000\u0000\n\n\u00001\u0000","t":"\\u00000 \u0001"}"#;
        let (v, inserts) = marks_out(out, &texts).unwrap();
        assert_eq!(
            inserts,
            [
                Insert { at: 6, text: 6..15 },
                Insert {
                    at: 10,
                    text: 22..26
                }
            ]
        );
        assert_eq!(
            std::str::from_utf8(&joined(&v, &inserts, body)).unwrap(),
            r#"{"s":"\"x\" AAA\n\nBBBB","t":"\\u00000 \u0001"}"#
        );
        // A mark naming no text, or cut short, is refused.
        assert_eq!(marks_out(br#""\u00002\u0000""#, &texts), None);
        assert_eq!(marks_out(br#""\u00001""#, &texts), None);
        assert_eq!(marks_out(br#""\u0000 ""#, &texts), None);
    }
}
