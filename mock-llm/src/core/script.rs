//! The scripted agent mode: a directive in the user's prompt names the tool
//! calls the mock answers, one per request, so a real coding agent (Claude
//! Code, Codex) completes a multi-turn task with no client configuration.
//!
//! ```text
//! [[mock-tools: Read {"file_path":"/tmp/x/notes.txt"} ; Bash {"command":"ls"}]]
//! ```
//!
//! Each step is a tool name, optionally followed by its arguments as one
//! JSON object (`{}` when left out); steps are separated by `;`. The mock
//! keeps nothing between requests: each provider module reports the user
//! text and the tool results of the conversation as it reads them, and the
//! number of results that follow the directive says which step comes next.
//! Once every step has its result, the answer is text that quotes the last
//! result.

use serde_json::{Map, Value};

/// Opening of a directive.
pub const OPEN: &str = "[[mock-tools:";

/// One scripted tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub name: String,
    pub args: Value,
}

/// Parse the first directive in `text`: None when there is none, else its
/// steps or what is wrong with it.
pub fn parse(text: &str) -> Option<Result<Vec<Step>, String>> {
    let start = text.find(OPEN)? + OPEN.len();
    Some(parse_steps(&text[start..]))
}

fn parse_steps(mut rest: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    loop {
        rest = rest.trim_start();
        if rest.starts_with("]]") {
            return Ok(steps);
        }
        let end = rest
            .find(|c: char| c.is_whitespace() || c == '{' || c == ';' || c == ']')
            .unwrap_or(rest.len());
        let name = &rest[..end];
        if name.is_empty() {
            return Err(format!(
                "step {} has no tool name (near {:?})",
                steps.len() + 1,
                head(rest)
            ));
        }
        rest = rest[end..].trim_start();
        let args = if rest.starts_with('{') {
            let mut it = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
            match it.next() {
                Some(Ok(v @ Value::Object(_))) => {
                    rest = &rest[it.byte_offset()..];
                    v
                }
                Some(Err(e)) => return Err(format!("arguments of {name}: {e}")),
                _ => return Err(format!("arguments of {name} are not a JSON object")),
            }
        } else {
            Value::Object(Map::new())
        };
        steps.push(Step {
            name: name.to_string(),
            args,
        });
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix(';') {
            rest = r;
        } else if !rest.starts_with("]]") {
            return Err(format!(
                "expected ';' or ']]' after step {} (near {:?})",
                steps.len(),
                head(rest)
            ));
        }
    }
}

fn head(s: &str) -> String {
    s.chars().take(24).collect()
}

/// What a provider module gathers while reading a conversation in order.
#[derive(Default, Debug)]
pub struct Script {
    steps: Option<Result<Vec<Step>, String>>,
    results: usize,
    last: Option<String>,
}

/// What the script asks for in this request.
#[derive(Debug, PartialEq)]
pub enum Next<'a> {
    /// Call this tool (the step that has no result yet).
    Call(&'a Step),
    /// Every step has its result: answer with this text.
    Done(String),
}

impl Script {
    /// A user turn's text. A directive in it (re)starts the script: only
    /// the tool results after it count.
    pub fn user_text(&mut self, text: &str) {
        if let Some(s) = parse(text) {
            self.steps = Some(s);
            self.results = 0;
            self.last = None;
        }
    }

    /// True once a directive was seen: then tool results are worth reading.
    pub fn active(&self) -> bool {
        self.steps.is_some()
    }

    /// A tool result (its text) found after the directive.
    pub fn tool_result(&mut self, text: String) {
        if self.active() {
            self.results += 1;
            self.last = Some(text);
        }
    }

    /// The next step, the final text, an error in the directive, or None
    /// when the conversation holds no directive.
    pub fn next(&self) -> Option<Result<Next<'_>, String>> {
        let steps = match self.steps.as_ref()? {
            Ok(s) => s,
            Err(e) => return Some(Err(format!("mock-llm: bad {OPEN} directive: {e}"))),
        };
        Some(Ok(match steps.get(self.results) {
            Some(s) => Next::Call(s),
            None => Next::Done(final_text(self.last.as_deref())),
        }))
    }
}

/// The answer once every step has its result: the last result's text.
pub fn final_text(last: Option<&str>) -> String {
    format!(
        "mock agent result: {}",
        last.unwrap_or("(no tool results)").trim()
    )
}

/// The text of a structured tool result (Gemini's `response`, Bedrock's
/// `json`): its string values joined by newlines, else its JSON.
pub fn value_text(v: &Value) -> String {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) => out.push(s.clone()),
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(o) => o.values().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, &mut out);
    if out.is_empty() {
        v.to_string()
    } else {
        out.join("\n")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_steps_with_and_without_arguments() {
        let t = r#"please [[mock-tools: Read {"file_path":"/tmp/x;y]]"} ; Bash {"command":"ls"};Done]] thanks"#;
        let s = parse(t).unwrap().unwrap();
        assert_eq!(
            s,
            vec![
                Step {
                    name: "Read".into(),
                    args: json!({"file_path": "/tmp/x;y]]"})
                },
                Step {
                    name: "Bash".into(),
                    args: json!({"command": "ls"})
                },
                Step {
                    name: "Done".into(),
                    args: json!({})
                },
            ]
        );
        assert_eq!(parse("[[mock-tools:]]").unwrap().unwrap(), vec![]);
        assert!(parse("no directive here").is_none());
    }

    #[test]
    fn bad_directives_say_why() {
        for (t, want) in [
            ("[[mock-tools: Read {\"a\":}]]", "arguments of Read"),
            ("[[mock-tools: Read [1]]]", "expected ';' or ']]'"),
            (
                "[[mock-tools: Read {\"a\":1} Bash]]",
                "expected ';' or ']]'",
            ),
            ("[[mock-tools: ; Read]]", "no tool name"),
            ("[[mock-tools: Read", "expected ';' or ']]' after step 1"),
            ("[[mock-tools: Read;", "step 2 has no tool name"),
        ] {
            let e = parse(t).unwrap().unwrap_err();
            assert!(e.contains(want), "{t}: {e}");
        }
    }

    #[test]
    fn counts_results_after_the_directive() {
        let mut s = Script::default();
        s.tool_result("before".into());
        assert!(s.next().is_none());
        s.user_text(r#"[[mock-tools: A {"x":1}; B]]"#);
        assert_eq!(
            s.next().unwrap().unwrap(),
            Next::Call(&Step {
                name: "A".into(),
                args: json!({"x": 1})
            })
        );
        s.tool_result("one".into());
        assert!(matches!(s.next().unwrap().unwrap(), Next::Call(st) if st.name == "B"));
        s.tool_result(" two\n".into());
        assert_eq!(
            s.next().unwrap().unwrap(),
            Next::Done("mock agent result: two".into())
        );
        // A new directive starts over.
        s.user_text("[[mock-tools: C]]");
        assert!(matches!(s.next().unwrap().unwrap(), Next::Call(st) if st.name == "C"));
    }

    #[test]
    fn structured_results_read_as_text() {
        assert_eq!(value_text(&json!({"content": "file text"})), "file text");
        assert_eq!(value_text(&json!({"a": ["x", {"b": "y"}], "n": 1})), "x\ny");
        assert_eq!(value_text(&json!({"n": 1})), r#"{"n":1}"#);
    }
}
