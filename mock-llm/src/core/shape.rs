//! Closed request shapes and the walk that checks a JSON body against them.
//!
//! Each provider module describes its API's request types as static tables
//! (`Msg`: the members a JSON object may have, with their types, which are
//! required, which need a beta header) taken from the provider's own
//! definitions, and renders the [`Violation`]s this walk finds in its own
//! error format. The walk knows no provider: how lenient the JSON parsing
//! is (numbers as strings, enums as numbers) comes in [`Opts`].
//!
//! ```
//! use mock_llm::core::shape::{check, field, req, Msg, Opts, Problem, Ty, STR};
//! static POINT: Msg = Msg::new("Point", &[req("x", Ty::INT), field("label", STR)]);
//! static T: Ty = Ty::Msg(&POINT);
//! let v = serde_json::json!({"x": 1, "colour": "red"});
//! let found = check(&T, &v, &Opts::default());
//! assert!(matches!(found[0].problem, Problem::Unknown));
//! assert_eq!(found[0].last_key(), Some("colour"));
//! ```

use serde_json::Value;

/// The type of a member.
pub enum Ty {
    /// Any JSON value.
    Any,
    /// Any JSON object (a protobuf Struct, a Smithy Document object, a
    /// JSON schema).
    Object,
    Str(Str),
    Bool,
    Int(Bounds),
    Num(Bounds),
    Enum(&'static Enum),
    Msg(&'static Msg),
    List(&'static Ty, Len),
    /// An object whose keys are free and whose values have one type.
    Map(&'static Ty, Len),
    /// An object whose `tag` member chooses its message.
    Tagged(&'static Tagged),
    /// One of several types, chosen by the JSON kind of the value
    /// (string, number, bool, array or object).
    OneOf(&'static [Ty]),
}

impl Ty {
    pub const INT: Ty = Ty::Int(Bounds::NONE);
    pub const NUM: Ty = Ty::Num(Bounds::NONE);
}

/// A string member's limits.
pub struct Str {
    pub min: usize,
    pub max: Option<usize>,
    pub pattern: Option<Pattern>,
}

/// A string pattern: the provider's text of it, and the test (a full
/// match).
pub struct Pattern {
    pub text: &'static str,
    pub test: fn(&str) -> bool,
}

/// Numeric bounds, inclusive.
#[derive(Clone, Copy)]
pub struct Bounds {
    pub min: Option<f64>,
    pub max: Option<f64>,
}

impl Bounds {
    pub const NONE: Bounds = Bounds {
        min: None,
        max: None,
    };
}

/// A list's or map's length limits.
#[derive(Clone, Copy)]
pub struct Len {
    pub min: usize,
    pub max: Option<usize>,
}

impl Len {
    pub const ANY: Len = Len { min: 0, max: None };
}

/// An enumeration: its name (as the provider writes it) and its values.
pub struct Enum {
    pub name: &'static str,
    pub values: &'static [&'static str],
    /// Values compare without case (Gemini's `Schema.type`).
    pub no_case: bool,
}

/// A closed JSON object.
pub struct Msg {
    pub name: &'static str,
    pub fields: &'static [Field],
    /// A union: exactly one member must be set (Smithy unions, protobuf
    /// oneofs that must be set).
    pub union: bool,
    /// Members beyond `fields` are allowed (a type whose every member the
    /// mock does not list).
    pub open: bool,
}

impl Msg {
    pub const fn new(name: &'static str, fields: &'static [Field]) -> Msg {
        Msg {
            name,
            fields,
            union: false,
            open: false,
        }
    }
    pub const fn union(name: &'static str, fields: &'static [Field]) -> Msg {
        Msg {
            name,
            fields,
            union: true,
            open: false,
        }
    }
    /// A message that checks `fields` and lets other members pass.
    pub const fn open(name: &'static str, fields: &'static [Field]) -> Msg {
        Msg {
            name,
            fields,
            union: false,
            open: true,
        }
    }
}

/// One member of a message.
pub struct Field {
    pub name: &'static str,
    /// Another accepted spelling (protobuf's snake_case name), or "".
    pub alias: &'static str,
    pub ty: Ty,
    pub required: bool,
    /// Beta header values that enable this member (any one of them, by
    /// prefix); empty: always there.
    pub betas: &'static [&'static str],
}

/// An optional member.
pub const fn field(name: &'static str, ty: Ty) -> Field {
    Field {
        name,
        alias: "",
        ty,
        required: false,
        betas: &[],
    }
}

/// A required member.
pub const fn req(name: &'static str, ty: Ty) -> Field {
    Field {
        name,
        alias: "",
        ty,
        required: true,
        betas: &[],
    }
}

/// An optional member with a second spelling (camelCase and snake_case).
pub const fn field2(name: &'static str, alias: &'static str, ty: Ty) -> Field {
    Field {
        name,
        alias,
        ty,
        required: false,
        betas: &[],
    }
}

/// A member that exists only with one of these beta headers.
pub const fn beta(name: &'static str, ty: Ty, betas: &'static [&'static str]) -> Field {
    Field {
        name,
        alias: "",
        ty,
        required: false,
        betas,
    }
}

/// A string of any length.
pub const STR: Ty = Ty::Str(Str {
    min: 0,
    max: None,
    pattern: None,
});

/// A string with length limits.
pub const fn str_len(min: usize, max: Option<usize>) -> Ty {
    Ty::Str(Str {
        min,
        max,
        pattern: None,
    })
}

/// A list of any length.
pub const fn list(of: &'static Ty) -> Ty {
    Ty::List(of, Len::ANY)
}

/// Objects told apart by a tag member.
pub struct Tagged {
    /// Name of the union (for messages).
    pub name: &'static str,
    pub tag: &'static str,
    pub variants: &'static [(&'static str, &'static Msg)],
    /// The message of an object without the tag (Anthropic's custom tool,
    /// whose `type` is optional), if any.
    pub untagged: Option<(&'static str, &'static Msg)>,
    /// Variants that exist only with one of these beta headers (by prefix).
    pub betas: &'static [(&'static str, &'static [&'static str])],
}

/// Tables are compared by identity and shown by name.
macro_rules! by_name {
    ($($t:ty),*) => {$(
        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name)
            }
        }
        impl PartialEq for $t {
            fn eq(&self, other: &Self) -> bool {
                std::ptr::eq(self, other)
            }
        }
    )*};
}
by_name!(Enum, Msg, Tagged);

/// One step of a path into the request.
#[derive(Debug, Clone, PartialEq)]
pub enum Seg {
    /// A known member: its name and its other spelling.
    Field(&'static str, &'static str),
    /// A member the message does not have.
    Unknown(String),
    /// A list item, from 0.
    Index(usize),
    /// A map entry: its position, from 0, and its key.
    Entry(usize, String),
    /// The variant a tag chose.
    Tag(&'static str),
}

/// What is wrong at a path.
#[derive(Debug, Clone, PartialEq)]
pub enum Problem {
    /// A member the message does not have (or not without its beta header).
    Unknown,
    /// A required member is absent (or null).
    Missing,
    /// The value has the wrong JSON type.
    Type(Expect),
    /// A list where the type is not repeated.
    NotRepeated,
    Enum(&'static Enum),
    /// The tag names no variant (the value is the tag's value).
    Tag(&'static Tagged),
    /// A string shorter / longer than allowed.
    Short(usize),
    Long(usize),
    Pattern(&'static str),
    Below(f64),
    Above(f64),
    /// A list or map with fewer / more items than allowed.
    FewItems(usize),
    ManyItems(usize),
    /// A union with this many members set (not one).
    Union(&'static Msg, usize),
}

/// The JSON type a member wanted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Expect {
    Str,
    Bool,
    Int,
    Num,
    Enum(&'static Enum),
    /// An object: the message's name (or "object").
    Object(&'static str),
    /// A list of this (a message's or enum's name, or a scalar's
    /// protobuf type).
    List(&'static str),
}

/// One thing wrong with a request.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    pub path: Vec<Seg>,
    pub problem: Problem,
    /// The offending value (null for a missing member).
    pub value: Value,
}

impl Violation {
    /// The name in the last path step (the unknown or missing member).
    pub fn last_key(&self) -> Option<&str> {
        match self.path.last()? {
            Seg::Field(n, _) => Some(n),
            Seg::Unknown(k) | Seg::Entry(_, k) => Some(k),
            _ => None,
        }
    }
}

/// How lenient the JSON parsing is.
#[derive(Default)]
pub struct Opts<'a> {
    /// Integers and floats may be strings (protobuf's JSON mapping).
    pub numeric_strings: bool,
    /// Enums may be given by number (protobuf's JSON mapping).
    pub enum_numbers: bool,
    /// Beta header values sent with the request.
    pub betas: Vec<&'a str>,
}

impl Opts<'_> {
    /// A beta header starting with one of `wanted` was sent (or none is
    /// wanted).
    pub fn has_beta(&self, wanted: &[&str]) -> bool {
        wanted.is_empty()
            || wanted
                .iter()
                .any(|want| self.betas.iter().any(|b| b.starts_with(want)))
    }
}

/// Most violations one walk reports.
const MAX_VIOLATIONS: usize = 64;

/// Check `v` against `ty`: every violation found (an object's members in
/// the order `serde_json` keeps them, which is by name), then its missing
/// members.
pub fn check(ty: &'static Ty, v: &Value, opts: &Opts<'_>) -> Vec<Violation> {
    let mut w = Walk {
        opts,
        path: Vec::new(),
        out: Vec::new(),
    };
    w.value(ty, v);
    w.out
}

/// Check one member of an object against a message (the walk of a
/// message's single field, with the path starting at it).
pub fn check_msg(msg: &'static Msg, v: &Value, opts: &Opts<'_>) -> Vec<Violation> {
    let mut w = Walk {
        opts,
        path: Vec::new(),
        out: Vec::new(),
    };
    w.msg(msg, v);
    w.out
}

struct Walk<'a, 'b> {
    opts: &'a Opts<'b>,
    path: Vec<Seg>,
    out: Vec<Violation>,
}

impl Walk<'_, '_> {
    fn report(&mut self, problem: Problem, value: &Value) {
        if self.out.len() < MAX_VIOLATIONS {
            self.out.push(Violation {
                path: self.path.clone(),
                problem,
                value: value.clone(),
            });
        }
    }

    fn wrong(&mut self, want: Expect, v: &Value) {
        if v.is_array() && !matches!(want, Expect::List(_)) && self.opts.numeric_strings {
            self.report(Problem::NotRepeated, v);
        } else {
            self.report(Problem::Type(want), v);
        }
    }

    fn value(&mut self, ty: &'static Ty, v: &Value) {
        if self.out.len() >= MAX_VIOLATIONS {
            return;
        }
        match ty {
            Ty::Any => {}
            Ty::Object => {
                if !v.is_object() {
                    self.wrong(Expect::Object("object"), v);
                }
            }
            Ty::Str(s) => match v {
                Value::String(x) => self.string(s, x, v),
                _ => self.wrong(Expect::Str, v),
            },
            Ty::Bool => {
                if !v.is_boolean() {
                    self.wrong(Expect::Bool, v);
                }
            }
            Ty::Int(b) => match self.number(v, true) {
                Some(n) => self.bounds(b, n, v),
                None => self.wrong(Expect::Int, v),
            },
            Ty::Num(b) => match self.number(v, false) {
                Some(n) => self.bounds(b, n, v),
                None => self.wrong(Expect::Num, v),
            },
            Ty::Enum(e) => {
                let ok = match v {
                    Value::String(s) => e
                        .values
                        .iter()
                        .any(|x| *x == s || (e.no_case && x.eq_ignore_ascii_case(s))),
                    Value::Number(n) => {
                        self.opts.enum_numbers
                            && n.as_u64().is_some_and(|i| (i as usize) < e.values.len())
                    }
                    _ => false,
                };
                if !ok {
                    if v.is_string() || v.is_number() {
                        self.report(Problem::Enum(e), v);
                    } else {
                        self.wrong(Expect::Enum(e), v);
                    }
                }
            }
            Ty::Msg(m) => self.msg(m, v),
            Ty::List(of, len) => {
                let Some(a) = v.as_array() else {
                    self.wrong(Expect::List(proto_name(of)), v);
                    return;
                };
                self.len(len, a.len(), v);
                for (i, x) in a.iter().enumerate() {
                    self.path.push(Seg::Index(i));
                    self.value(of, x);
                    self.path.pop();
                }
            }
            Ty::Map(of, len) => {
                let Some(o) = v.as_object() else {
                    self.wrong(Expect::Object("object"), v);
                    return;
                };
                self.len(len, o.len(), v);
                for (i, (k, x)) in o.iter().enumerate() {
                    self.path.push(Seg::Entry(i, k.clone()));
                    self.value(of, x);
                    self.path.pop();
                }
            }
            Ty::Tagged(t) => self.tagged(t, v),
            Ty::OneOf(tys) => {
                // The type the value's JSON kind fits, else the first
                // (whose error then says what was wanted).
                if let Some(t) = tys.iter().find(|t| kind_fits(t, v)).or(tys.first()) {
                    self.value(t, v);
                }
            }
        }
    }

    fn number(&self, v: &Value, int: bool) -> Option<f64> {
        let n = match v {
            Value::Number(n) => {
                let f = n.as_f64()?;
                // protobuf's JSON mapping takes `40.0` for an integer.
                let whole = self.opts.numeric_strings && f.fract() == 0.0;
                if int && !(n.is_i64() || n.is_u64() || whole) {
                    return None;
                }
                f
            }
            Value::String(s) if self.opts.numeric_strings => {
                if int {
                    s.parse::<i64>().ok()? as f64
                } else {
                    s.parse::<f64>().ok()?
                }
            }
            _ => return None,
        };
        Some(n)
    }

    fn bounds(&mut self, b: &Bounds, n: f64, v: &Value) {
        if let Some(min) = b.min.filter(|m| n < *m) {
            self.report(Problem::Below(min), v);
        } else if let Some(max) = b.max.filter(|m| n > *m) {
            self.report(Problem::Above(max), v);
        }
    }

    fn len(&mut self, l: &Len, n: usize, v: &Value) {
        if n < l.min {
            self.report(Problem::FewItems(l.min), v);
        } else if let Some(max) = l.max.filter(|m| n > *m) {
            self.report(Problem::ManyItems(max), v);
        }
    }

    fn string(&mut self, s: &Str, x: &str, v: &Value) {
        let n = x.chars().count();
        if n < s.min {
            self.report(Problem::Short(s.min), v);
        }
        if let Some(max) = s.max.filter(|m| n > *m) {
            self.report(Problem::Long(max), v);
        }
        if let Some(p) = &s.pattern {
            if !(p.test)(x) {
                self.report(Problem::Pattern(p.text), v);
            }
        }
    }

    fn msg(&mut self, m: &'static Msg, v: &Value) {
        let Some(o) = v.as_object() else {
            self.wrong(Expect::Object(m.name), v);
            return;
        };
        let mut set = 0;
        for (k, x) in o {
            let f = m.fields.iter().find(|f| {
                (f.name == k || (!f.alias.is_empty() && f.alias == k))
                    && self.opts.has_beta(f.betas)
            });
            let Some(f) = f else {
                if m.open {
                    continue;
                }
                self.path.push(Seg::Unknown(k.clone()));
                self.report(Problem::Unknown, x);
                self.path.pop();
                continue;
            };
            if x.is_null() {
                continue;
            }
            set += 1;
            self.path.push(Seg::Field(f.name, f.alias));
            self.value(&f.ty, x);
            self.path.pop();
        }
        for f in m.fields.iter().filter(|f| f.required) {
            let present = [f.name, f.alias]
                .iter()
                .any(|n| !n.is_empty() && o.get(*n).is_some_and(|x| !x.is_null()));
            if !present {
                self.path.push(Seg::Field(f.name, f.alias));
                self.report(Problem::Missing, &Value::Null);
                self.path.pop();
            }
        }
        if m.union && set != 1 {
            self.report(Problem::Union(m, set), v);
        }
    }

    fn tagged(&mut self, t: &'static Tagged, v: &Value) {
        let Some(o) = v.as_object() else {
            self.wrong(Expect::Object(t.name), v);
            return;
        };
        let (name, m) = match o.get(t.tag) {
            None | Some(Value::Null) => match t.untagged {
                Some(u) => u,
                None => {
                    self.path.push(Seg::Field(t.tag, ""));
                    self.report(Problem::Missing, &Value::Null);
                    self.path.pop();
                    return;
                }
            },
            Some(tag) => match t
                .variants
                .iter()
                .find(|(n, _)| {
                    tag.as_str() == Some(*n)
                        && t.betas
                            .iter()
                            .all(|(v, wanted)| v != n || self.opts.has_beta(wanted))
                })
                .copied()
            {
                Some(x) => x,
                None => {
                    self.report(Problem::Tag(t), tag);
                    return;
                }
            },
        };
        self.path.push(Seg::Tag(name));
        self.msg(m, v);
        self.path.pop();
    }
}

/// The name of a type as protobuf writes it in errors: a message's or
/// enum's name, `TYPE_STRING`, `TYPE_BOOL`, `TYPE_INT32`, `TYPE_FLOAT`.
pub fn proto_name(t: &Ty) -> &'static str {
    match t {
        Ty::Str(_) => "TYPE_STRING",
        Ty::Bool => "TYPE_BOOL",
        Ty::Int(_) => "TYPE_INT32",
        Ty::Num(_) => "TYPE_FLOAT",
        Ty::Enum(e) => e.name,
        Ty::Msg(m) => m.name,
        Ty::Tagged(t) => t.name,
        Ty::Object | Ty::Map(..) => "google.protobuf.Struct",
        Ty::Any | Ty::List(..) | Ty::OneOf(_) => "google.protobuf.Value",
    }
}

/// Whether a value's JSON kind is the one a type reads (for `OneOf`).
fn kind_fits(t: &Ty, v: &Value) -> bool {
    match t {
        Ty::Any => true,
        Ty::Str(_) => v.is_string(),
        Ty::Enum(_) => v.is_string(),
        Ty::Bool => v.is_boolean(),
        Ty::Int(_) | Ty::Num(_) => v.is_number(),
        Ty::List(..) => v.is_array(),
        Ty::Object | Ty::Msg(_) | Ty::Map(..) | Ty::Tagged(_) => v.is_object(),
        Ty::OneOf(ts) => ts.iter().any(|t| kind_fits(t, v)),
    }
}

/// A full match of `s` against a character class repeated `min..=max`
/// times: `class` lists single characters and `a-z` style ranges.
pub fn all_in(s: &str, class: &str, min: usize, max: usize) -> bool {
    let n = s.chars().count();
    if n < min || n > max {
        return false;
    }
    let c: Vec<char> = class.chars().collect();
    s.chars().all(|x| {
        let mut i = 0;
        while i < c.len() {
            if i + 2 < c.len() && c[i + 1] == '-' {
                if (c[i]..=c[i + 2]).contains(&x) {
                    return true;
                }
                i += 3;
            } else {
                if c[i] == x {
                    return true;
                }
                i += 1;
            }
        }
        false
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    static COLOUR: Enum = Enum {
        name: "Colour",
        values: &["RED", "BLUE"],
        no_case: false,
    };
    static NODE: Msg = Msg::new(
        "Node",
        &[
            req("name", str_len(1, Some(4))),
            field2("childNodes", "child_nodes", list(&Ty::Msg(&NODE))),
            field("colour", Ty::Enum(&COLOUR)),
            field(
                "n",
                Ty::Int(Bounds {
                    min: Some(1.0),
                    max: None,
                }),
            ),
            beta("extra", STR, &["extras-"]),
        ],
    );
    static ONE: Msg = Msg::union("One", &[field("a", STR), field("b", STR)]);

    fn probs(ty: &'static Ty, v: Value, opts: &Opts<'_>) -> Vec<(Vec<Seg>, Problem)> {
        check(ty, &v, opts)
            .into_iter()
            .map(|x| (x.path, x.problem))
            .collect()
    }

    #[test]
    fn walks_nested_messages() {
        static T: Ty = Ty::Msg(&NODE);
        let o = Opts::default();
        assert!(probs(&T, json!({"name": "a", "child_nodes": [{"name": "b"}]}), &o).is_empty());
        let p = probs(
            &T,
            json!({"name": "abcde", "childNodes": [{"x": 1}], "colour": "GREEN", "n": 0, "extra": "e"}),
            &o,
        );
        let f = |n| Seg::Field(n, "");
        let kids = Seg::Field("childNodes", "child_nodes");
        assert_eq!(
            p,
            vec![
                (
                    vec![kids.clone(), Seg::Index(0), Seg::Unknown("x".into())],
                    Problem::Unknown
                ),
                (vec![kids, Seg::Index(0), f("name")], Problem::Missing),
                (vec![f("colour")], Problem::Enum(&COLOUR)),
                (vec![Seg::Unknown("extra".into())], Problem::Unknown),
                (vec![f("n")], Problem::Below(1.0)),
                (vec![f("name")], Problem::Long(4)),
            ]
        );
        let betas = Opts {
            betas: vec!["extras-2026"],
            ..Opts::default()
        };
        assert!(probs(&T, json!({"name": "a", "extra": "e"}), &betas).is_empty());
    }

    #[test]
    fn json_mapping_leniency() {
        static T: Ty = Ty::Msg(&NODE);
        let v = json!({"name": "a", "n": "3", "colour": 1});
        assert_eq!(probs(&T, v.clone(), &Opts::default()).len(), 2);
        let proto = Opts {
            numeric_strings: true,
            enum_numbers: true,
            ..Opts::default()
        };
        assert!(probs(&T, v, &proto).is_empty());
        // A list where one value belongs.
        assert_eq!(
            probs(&T, json!({"name": ["a"]}), &proto),
            vec![(vec![Seg::Field("name", "")], Problem::NotRepeated)]
        );
    }

    #[test]
    fn unions_need_exactly_one_member() {
        static T: Ty = Ty::Msg(&ONE);
        assert!(probs(&T, json!({"a": "x"}), &Opts::default()).is_empty());
        assert_eq!(
            probs(&T, json!({"a": "x", "b": "y"}), &Opts::default()),
            vec![(vec![], Problem::Union(&ONE, 2))]
        );
        assert_eq!(
            probs(&T, json!({}), &Opts::default()),
            vec![(vec![], Problem::Union(&ONE, 0))]
        );
    }

    #[test]
    fn tagged_unions_choose_by_tag() {
        static A: Msg = Msg::new("A", &[req("type", STR), req("a", STR)]);
        static TAGS: Tagged = Tagged {
            name: "AorCustom",
            tag: "type",
            variants: &[("a", &A)],
            untagged: Some(("custom", &ONE)),
            betas: &[],
        };
        static T: Ty = Ty::Tagged(&TAGS);
        assert!(probs(&T, json!({"type": "a", "a": "x"}), &Opts::default()).is_empty());
        assert_eq!(
            probs(&T, json!({"type": "a", "a": "x", "z": 1}), &Opts::default()),
            vec![(
                vec![Seg::Tag("a"), Seg::Unknown("z".into())],
                Problem::Unknown
            )]
        );
        assert_eq!(
            probs(&T, json!({"type": "q"}), &Opts::default()),
            vec![(vec![], Problem::Tag(&TAGS))]
        );
        assert!(probs(&T, json!({"b": "x"}), &Opts::default()).is_empty());
    }

    #[test]
    fn character_classes() {
        assert!(all_in("get_weather-2", "a-zA-Z0-9_-", 1, 64));
        assert!(!all_in("get.weather", "a-zA-Z0-9_-", 1, 64));
        assert!(!all_in("", "a-z", 1, 64));
        assert!(all_in("123456789012", "0-9", 12, 12));
    }
}
