//! Reading a provider's JSON into the typed, borrowed structs each
//! translator declares for its answers and stream events (the one place a
//! field's spelling and type live). Strings borrow from the input (`Cow`
//! when an escape forces a copy); unknown fields are skipped unparsed.
//!
//! Trade-off: a field of the wrong type is an error, not a silently missing
//! value (a `"text": 5` is not dropped text; an `"input_tokens": "9"` is not
//! free tokens). The error says what was wrong and where (line and column),
//! not the field's path: tracking the path (serde_path_to_error) would put a
//! second copy of every struct's parsing code in the .wasm. Events are read
//! with the same byte reader as whole answers, for the same reason.

use std::borrow::Cow;
use std::fmt;
use std::ops::Deref;

use serde::de::{Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// A string field of a provider's JSON: borrowed from the input, copied only
/// when it holds an escape. (`Option<Cow<str>>` alone would always copy.)
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Str<'a>(pub Cow<'a, str>);

impl Deref for Str<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl Serialize for Str<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Cow<'de, str>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Cow::Borrowed(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Cow::Owned(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Cow::Owned(v))
            }
        }
        d.deserialize_str(V).map(Str)
    }
}

/// Why an answer or event could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unreadable {
    /// Not JSON (or truncated).
    Syntax,
    /// JSON with a field of the wrong type: what was wrong, and where.
    Field(String),
}

impl Unreadable {
    /// `base`, followed by what was wrong with a field, if anything.
    pub(crate) fn message(&self, base: &str) -> String {
        match self {
            Unreadable::Syntax => base.to_string(),
            Unreadable::Field(detail) => format!("{base} ({detail})"),
        }
    }
}

/// Parses a whole answer or payload.
pub(crate) fn parse<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, Unreadable> {
    serde_json::from_slice(bytes).map_err(|e| {
        if e.is_data() {
            Unreadable::Field(e.to_string())
        } else {
            Unreadable::Syntax
        }
    })
}

/// Parses one SSE event's data (the same reader as [`parse`]: one copy of
/// each struct's parsing code in the .wasm).
pub(crate) fn parse_str<'a, T: Deserialize<'a>>(data: &'a str) -> Result<T, Unreadable> {
    parse(data.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Doc<'a> {
        #[serde(borrow)]
        items: Option<Vec<Item<'a>>>,
    }

    #[derive(Deserialize)]
    struct Item<'a> {
        #[serde(borrow)]
        text: Option<Str<'a>>,
    }

    #[test]
    fn says_what_was_wrong_and_where() {
        let e = parse::<Doc>(br#"{"items":[{"text":"a"},{"text":5}]}"#)
            .err()
            .unwrap();
        assert_eq!(
            e.message("Bad answer"),
            "Bad answer (invalid type: integer `5`, expected a string at line 1 column 32)"
        );
        assert_eq!(
            parse_str::<Doc>("{\"items\":").err(),
            Some(Unreadable::Syntax)
        );
    }

    #[test]
    fn borrows_unless_escaped() {
        let d = parse_str::<Doc>(r#"{"items":[{"text":"plain"},{"text":"a\nb"}],"x":{"y":[1]}}"#)
            .unwrap();
        let items = d.items.unwrap();
        assert!(matches!(items[0].text, Some(Str(Cow::Borrowed("plain")))));
        assert!(matches!(&items[1].text, Some(Str(Cow::Owned(s))) if s == "a\nb"));
    }
}
