//! A provider-neutral reading of an OpenAI chat request, shared by the
//! translators whose native shapes are turn/part based (Anthropic, Gemini,
//! Bedrock):
//! system text, alternating user/assistant turns of parts (text, image,
//! tool call, tool result — each tool result carrying its function's name,
//! found from the earlier assistant tool call), and the sampling, stop,
//! tool and JSON-mode parameters. Every malformed input is a 400 naming the
//! parameter; parameters the provider cannot honour are refused by name.

use std::fmt::{self, Display};

use serde_json::{Map, Value};

use super::{check_messages, data_url, stream_flag};
use crate::error::ApiError;

#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Text(String),
    /// Base64 image from a data: URL.
    Image {
        media: String,
        data: String,
    },
    /// An http(s) image URL, with the parameter it came from for errors:
    /// providers that cannot fetch URLs refuse it with [`image_url_refused`].
    ImageUrl {
        url: String,
        at: String,
    },
    ToolCall {
        id: String,
        name: String,
        args: Value,
    },
    ToolResult {
        id: String,
        name: String,
        content: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub role: Role,
    pub parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    pub parameters: Value,
}

impl Tool {
    /// The tool as a provider declares it: its `name`, its `description`
    /// when it has one, and `schema` (the provider's field for the
    /// parameters, and their schema as it takes them) when given.
    pub fn declared(&self, schema: Option<(&str, Value)>) -> Map<String, Value> {
        let mut d = Map::new();
        d.insert("name".into(), Value::String(self.name.clone()));
        // An empty description says nothing, and Bedrock refuses one.
        if let Some(desc) = self.description.as_ref().filter(|d| !d.is_empty()) {
            d.insert("description".into(), Value::String(desc.clone()));
        }
        if let Some((field, schema)) = schema {
            d.insert(field.into(), schema);
        }
        d
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum ToolChoice {
    Auto,
    None,
    Required,
    Named(String),
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Chat {
    pub system: Vec<String>,
    /// Alternating roles (consecutive same-role messages merged); tool
    /// results are user parts placed before any other user part of the turn.
    pub turns: Vec<Turn>,
    pub max_tokens: Option<u64>,
    pub temperature: Option<Value>,
    pub top_p: Option<Value>,
    pub stop: Vec<String>,
    pub tools: Vec<Tool>,
    pub tool_choice: Option<ToolChoice>,
    /// `response_format`: Some(schema) for json_schema, Some(None) for json_object.
    pub json: Option<Option<Value>>,
    pub stream: bool,
    pub seed: Option<Value>,
    /// `parallel_tool_calls`, when given.
    pub parallel_tool_calls: Option<bool>,
    /// `user`, when given.
    pub user: Option<String>,
    pub presence_penalty: Option<Value>,
    pub frequency_penalty: Option<Value>,
    pub n: Option<u64>,
    /// `reasoning_effort`, for the translators that have an equivalent
    /// (Gemini's thinking budget on reasoning models); named in `dropped`
    /// until one maps it.
    pub reasoning_effort: Option<String>,
    /// OpenAI parameters the request set that this representation does not
    /// carry: the provider does not get them, and the response names them
    /// (`x-tollgate-dropped`). OpenAI accepts them, so they are no 400.
    pub dropped: Vec<&'static str>,
}

impl Chat {
    /// Names a parameter the provider does not get (once).
    pub fn drop(&mut self, what: &'static str) {
        if !self.dropped.contains(&what) {
            self.dropped.push(what);
        }
    }

    /// A parameter a translator mapped after all.
    pub fn mapped(&mut self, what: &str) {
        self.dropped.retain(|d| *d != what);
    }

    /// Lowers `max_tokens` to the model's output limit, returning what was
    /// lowered (`max_tokens=N`) for `x-tollgate-lowered`.
    pub fn lower_to(&mut self, limit: Option<u32>) -> Vec<String> {
        match (self.max_tokens, limit) {
            (Some(n), Some(l)) if n > u64::from(l) => {
                self.max_tokens = Some(u64::from(l));
                vec![format!("max_tokens={l}")]
            }
            _ => Vec::new(),
        }
    }
}

/// OpenAI Chat Completions parameters (openai-python's
/// `CompletionCreateParams`) this representation does not carry to other
/// families: dropped and named when set.
const NOT_CARRIED: [&str; 13] = [
    "audio",
    "modalities",
    "prediction",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "prompt_cache_key",
    "prompt_cache_retention",
    "safety_identifier",
    "verbosity",
    "web_search_options",
    "functions",
    "function_call",
];

/// What a provider accepts beyond the common core.
pub struct Accept {
    pub provider: &'static str,
    /// seed, presence/frequency penalties, n.
    pub sampling_extras: bool,
}

/// `messages[i]` plus a field path (`.content`), as an error names it.
struct MessageAt(usize, &'static str);

impl Display for MessageAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "messages[{}]{}", self.0, self.1)
    }
}

fn bad(param: &str, msg: impl Into<String>) -> ApiError {
    ApiError::bad_param(param, msg)
}

fn text_of(content: &Value, at: &dyn Display) -> Result<String, ApiError> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(parts) => {
            let mut out = String::new();
            for (j, p) in parts.iter().enumerate() {
                match (p.get("type").and_then(Value::as_str), p.get("text")) {
                    (Some("text"), Some(Value::String(t))) => {
                        if !out.is_empty() {
                            out.push('\n');
                        }
                        out.push_str(t);
                    }
                    _ => {
                        return Err(bad(
                            &format!("{at}[{j}]"),
                            format!(
                            "Invalid content part at '{at}[{j}]': only text parts are allowed here"
                        ),
                        ))
                    }
                }
            }
            Ok(out)
        }
        _ => Err(bad(
            &at.to_string(),
            format!("Invalid type for '{at}': expected a string or an array of content parts"),
        )),
    }
}

fn content_parts(
    content: &Value,
    at: &dyn Display,
    user: bool,
    provider: &str,
) -> Result<Vec<Part>, ApiError> {
    let mut out = Vec::new();
    match content {
        Value::Null => {}
        Value::String(s) => {
            if !s.is_empty() {
                out.push(Part::Text(s.clone()));
            }
        }
        Value::Array(parts) => {
            for (j, p) in parts.iter().enumerate() {
                let pat = format!("{at}[{j}]");
                match p.get("type").and_then(Value::as_str) {
                    Some("text") => match p.get("text") {
                        Some(Value::String(t)) => {
                            if !t.is_empty() {
                                out.push(Part::Text(t.clone()));
                            }
                        }
                        _ => return Err(bad(&format!("{pat}.text"), format!("Invalid type for '{pat}.text': expected a string"))),
                    },
                    Some("refusal") if !user => {
                        if let Some(Value::String(t)) = p.get("refusal") {
                            if !t.is_empty() {
                                out.push(Part::Text(t.clone()));
                            }
                        }
                    }
                    Some("image_url") if user => {
                        let url = match p.get("image_url") {
                            Some(Value::String(u)) => u.as_str(),
                            Some(Value::Object(o)) => match o.get("url") {
                                Some(Value::String(u)) => u.as_str(),
                                _ => return Err(bad(&format!("{pat}.image_url.url"), format!("Missing '{pat}.image_url.url'"))),
                            },
                            _ => return Err(bad(&format!("{pat}.image_url"), format!("Missing '{pat}.image_url'"))),
                        };
                        out.push(image(url, &format!("{pat}.image_url.url"))?);
                    }
                    Some(other) => {
                        return Err(ApiError {
                            message: format!("Content part type '{other}' at '{pat}' is not supported by provider '{provider}'"),
                            ..ApiError::unsupported_param(&format!("{pat}.type"), provider)
                        })
                    }
                    None => return Err(bad(&format!("{pat}.type"), format!("Missing '{pat}.type'"))),
                }
            }
        }
        _ => {
            return Err(bad(
                &at.to_string(),
                format!("Invalid type for '{at}': expected a string or an array of content parts"),
            ))
        }
    }
    Ok(out)
}

/// An `image_url` URL: a base64 data: URL of a supported type, or http(s).
fn image(url: &str, at: &str) -> Result<Part, ApiError> {
    if url.starts_with("https://") || url.starts_with("http://") {
        return Ok(Part::ImageUrl {
            url: url.to_string(),
            at: at.to_string(),
        });
    }
    if !url.starts_with("data:") {
        return Err(bad(
            at,
            format!("Invalid image URL in '{at}': expected a data: or http(s) URL"),
        ));
    }
    let Some((media, data)) = data_url(url) else {
        return Err(bad(
            at,
            format!("Invalid data URL in '{at}': expected data:<type>;base64,<data>"),
        ));
    };
    if !matches!(
        media,
        "image/jpeg" | "image/png" | "image/gif" | "image/webp"
    ) {
        return Err(bad(
            at,
            format!("Unsupported image type '{media}' in '{at}' (jpeg, png, gif, webp)"),
        ));
    }
    Ok(Part::Image {
        media: media.to_string(),
        data: data.to_string(),
    })
}

/// The error for a [`Part::ImageUrl`] sent to a provider that takes images
/// only inline.
pub fn image_url_refused(at: &str, provider: &str) -> ApiError {
    ApiError {
        message: format!("Provider '{provider}' takes images only as base64 data: URLs ('{at}')"),
        ..ApiError::unsupported_param(at, provider)
    }
}

/// The `function` of a tool or a tool call (`at`), and its `name`: both
/// required.
fn function_and_name<'v>(v: &'v Value, at: &str) -> Result<(&'v Value, &'v str), ApiError> {
    let f = v.get("function").ok_or_else(|| {
        bad(
            &format!("{at}.function"),
            format!("Missing '{at}.function'"),
        )
    })?;
    let name = f.get("name").and_then(Value::as_str).ok_or_else(|| {
        bad(
            &format!("{at}.function.name"),
            format!("Missing '{at}.function.name'"),
        )
    })?;
    Ok((f, name))
}

fn tool_calls(calls: &Value, at: &dyn Display) -> Result<Vec<Part>, ApiError> {
    let Value::Array(calls) = calls else {
        if calls.is_null() {
            return Ok(Vec::new());
        }
        return Err(bad(
            &at.to_string(),
            format!("Invalid type for '{at}': expected an array"),
        ));
    };
    let mut out = Vec::new();
    for (j, c) in calls.iter().enumerate() {
        let cat = format!("{at}[{j}]");
        let id = c
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(&format!("{cat}.id"), format!("Missing '{cat}.id'")))?;
        let (f, name) = function_and_name(c, &cat)?;
        let args = match f.get("arguments") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(Value::String(s)) if s.trim().is_empty() => Value::Object(Map::new()),
            Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                Ok(v @ Value::Object(_)) => v,
                _ => {
                    return Err(bad(
                        &format!("{cat}.function.arguments"),
                        format!(
                            "'{cat}.function.arguments' must be a JSON object encoded as a string"
                        ),
                    ))
                }
            },
            Some(_) => {
                return Err(bad(
                    &format!("{cat}.function.arguments"),
                    format!("Invalid type for '{cat}.function.arguments': expected a string"),
                ))
            }
        };
        out.push(Part::ToolCall {
            id: id.to_string(),
            name: name.to_string(),
            args,
        });
    }
    Ok(out)
}

fn push(turns: &mut Vec<Turn>, role: Role, parts: Vec<Part>) {
    if parts.is_empty() {
        return;
    }
    if let Some(t) = turns.last_mut() {
        if t.role == role {
            t.parts.extend(parts);
            return;
        }
    }
    turns.push(Turn { role, parts });
}

fn number(obj: &Map<String, Value>, name: &str) -> Result<Option<Value>, ApiError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Number(_)) => Ok(Some(v.clone())),
        Some(_) => Err(bad(
            name,
            format!("Invalid type for '{name}': expected a number"),
        )),
    }
}

fn positive_int(obj: &Map<String, Value>, name: &str) -> Result<Option<u64>, ApiError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 => Ok(Some(n)),
            _ => Err(bad(
                name,
                format!("Invalid value for '{name}': expected a positive integer"),
            )),
        },
    }
}

/// Read an OpenAI chat body.
pub fn parse(body: &Value, acc: &Accept) -> Result<Chat, ApiError> {
    let provider = acc.provider;
    let Some(obj) = body.as_object() else {
        return Err(ApiError::invalid_json("expected an object"));
    };
    let mut chat = Chat::default();
    other_fields(obj, provider, &mut chat)?;
    read_sampling_extras(obj, acc, &mut chat)?;
    (chat.system, chat.turns) = read_messages(check_messages(body)?, provider)?;
    chat.max_tokens = match positive_int(obj, "max_completion_tokens")? {
        Some(n) => Some(n),
        None => positive_int(obj, "max_tokens")?,
    };
    chat.temperature = number(obj, "temperature")?;
    chat.top_p = number(obj, "top_p")?;
    chat.stop = read_stop(obj)?;
    chat.tools = read_tools(obj, provider)?;
    chat.tool_choice = read_tool_choice(obj, &chat.tools)?;
    chat.json = read_response_format(obj)?;
    chat.user = match obj.get("user") {
        None | Some(Value::Null) => None,
        Some(Value::String(u)) => Some(u.clone()),
        Some(_) => return Err(bad("user", "Invalid type for 'user': expected a string")),
    };
    chat.parallel_tool_calls = match obj.get("parallel_tool_calls") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => {
            return Err(bad(
                "parallel_tool_calls",
                "Invalid type for 'parallel_tool_calls': expected a boolean",
            ))
        }
    };
    chat.stream = stream_flag(body)?;
    super::include_usage_flag(body)?;
    Ok(chat)
}

/// The fields the IR does not read: an OpenAI parameter it cannot carry is
/// dropped and named (unless null, or for `logprobs` false); a field OpenAI
/// does not know either is refused, as OpenAI refuses it.
fn other_fields(obj: &Map<String, Value>, provider: &str, chat: &mut Chat) -> Result<(), ApiError> {
    for (k, v) in obj {
        match k.as_str() {
            "model"
            | "messages"
            | "stream"
            | "stream_options"
            | "max_tokens"
            | "max_completion_tokens"
            | "temperature"
            | "top_p"
            | "stop"
            | "tools"
            | "tool_choice"
            | "parallel_tool_calls"
            | "user"
            | "store"
            | "service_tier"
            | "metadata"
            | "response_format"
            | "n"
            | "seed"
            | "presence_penalty"
            | "frequency_penalty" => {}
            _ if v.is_null() || (k == "logprobs" && *v == Value::Bool(false)) => {}
            "reasoning_effort" => match v {
                Value::String(e) => {
                    chat.reasoning_effort = Some(e.clone());
                    chat.drop("reasoning_effort");
                }
                _ => {
                    return Err(bad(
                        "reasoning_effort",
                        "Invalid type for 'reasoning_effort': expected a string",
                    ))
                }
            },
            k => match NOT_CARRIED.iter().find(|n| **n == k) {
                Some(n) => chat.drop(n),
                None => return Err(ApiError::unsupported_param(k, provider)),
            },
        }
    }
    Ok(())
}

/// `n`, `seed` and the penalties: kept where the provider takes them
/// ([`Accept::sampling_extras`]), else refused unless they change nothing.
fn read_sampling_extras(
    obj: &Map<String, Value>,
    acc: &Accept,
    chat: &mut Chat,
) -> Result<(), ApiError> {
    let n = positive_int(obj, "n")?;
    let seed = obj.get("seed").filter(|v| !v.is_null()).cloned();
    if let Some(s) = &seed {
        if !s.is_i64() && !s.is_u64() {
            return Err(bad("seed", "Invalid type for 'seed': expected an integer"));
        }
    }
    let pp = number(obj, "presence_penalty")?;
    let fp = number(obj, "frequency_penalty")?;
    if acc.sampling_extras {
        chat.n = n;
        chat.seed = seed;
        chat.presence_penalty = pp;
        chat.frequency_penalty = fp;
    } else {
        // The provider has no such setting: one answer, no penalties, no
        // seed (named when they would have changed anything).
        if n.is_some_and(|n| n > 1) {
            chat.drop("n");
        }
        for (name, v) in [("presence_penalty", &pp), ("frequency_penalty", &fp)] {
            if v.as_ref().is_some_and(|v| v.as_f64() != Some(0.0)) {
                chat.drop(name);
            }
        }
        if seed.is_some() {
            chat.drop("seed");
        }
    }
    Ok(())
}

/// The messages as the system texts and the turns ([`Chat::turns`]): a
/// tool result names the function of the earlier call it answers, and
/// comes first in its user turn.
fn read_messages(msgs: &[Value], provider: &str) -> Result<(Vec<String>, Vec<Turn>), ApiError> {
    let mut system = Vec::new();
    let mut turns = Vec::new();
    // tool_call_id → function name, from the assistant turns.
    let mut names: Vec<(String, String)> = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        // Formatted only when an error names it.
        let at = MessageAt(i, "");
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        let content = m.get("content").unwrap_or(&Value::Null);
        match role {
            "system" | "developer" => {
                let t = text_of(content, &MessageAt(i, ".content"))?;
                if !t.is_empty() {
                    system.push(t);
                }
            }
            "user" => {
                let parts = content_parts(content, &MessageAt(i, ".content"), true, provider)?;
                push(&mut turns, Role::User, parts);
            }
            "assistant" => {
                let mut parts = content_parts(content, &MessageAt(i, ".content"), false, provider)?;
                if let Some(calls) = m.get("tool_calls") {
                    let calls = tool_calls(calls, &MessageAt(i, ".tool_calls"))?;
                    for c in &calls {
                        if let Part::ToolCall { id, name, .. } = c {
                            names.push((id.clone(), name.clone()));
                        }
                    }
                    parts.extend(calls);
                }
                push(&mut turns, Role::Assistant, parts);
            }
            "tool" => {
                let id = m
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        bad(
                            &format!("{at}.tool_call_id"),
                            format!("Missing '{at}.tool_call_id'"),
                        )
                    })?;
                let Some(name) = names
                    .iter()
                    .rev()
                    .find(|(i, _)| i == id)
                    .map(|(_, n)| n.clone())
                else {
                    return Err(bad(
                        &format!("{at}.tool_call_id"),
                        format!("'{at}.tool_call_id' ({id}) does not answer a tool call of an earlier assistant message"),
                    ));
                };
                let content = text_of(content, &MessageAt(i, ".content"))?;
                push(
                    &mut turns,
                    Role::User,
                    vec![Part::ToolResult {
                        id: id.to_string(),
                        name,
                        content,
                    }],
                );
            }
            other => {
                return Err(bad(
                    &format!("{at}.role"),
                    format!("Unsupported role '{other}' at '{at}.role'"),
                ))
            }
        }
    }
    for t in &mut turns {
        if t.role == Role::User && t.parts.iter().any(|p| matches!(p, Part::ToolResult { .. })) {
            let (mut tr, rest): (Vec<Part>, Vec<Part>) = t
                .parts
                .drain(..)
                .partition(|p| matches!(p, Part::ToolResult { .. }));
            tr.extend(rest);
            t.parts = tr;
        }
    }
    if turns.is_empty() {
        return Err(bad(
            "messages",
            "'messages' must contain at least one non-empty user or assistant message",
        ));
    }
    Ok((system, turns))
}

/// `stop`: a string or an array of strings.
fn read_stop(obj: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    match obj.get("stop") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => Ok(a
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()),
        Some(_) => Err(bad(
            "stop",
            "Invalid type for 'stop': expected a string or an array of strings",
        )),
    }
}

/// `tools`: function tools only.
fn read_tools(obj: &Map<String, Value>, provider: &str) -> Result<Vec<Tool>, ApiError> {
    let tools = match obj.get("tools") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(tools)) => tools,
        Some(_) => return Err(bad("tools", "Invalid type for 'tools': expected an array")),
    };
    let mut out = Vec::with_capacity(tools.len());
    for (j, t) in tools.iter().enumerate() {
        let at = format!("tools[{j}]");
        if t.get("type").and_then(Value::as_str) != Some("function") {
            return Err(ApiError {
                message: format!(
                    "Only function tools are supported by provider '{provider}' ('{at}.type')"
                ),
                ..ApiError::unsupported_param(&format!("{at}.type"), provider)
            });
        }
        let (f, name) = function_and_name(t, &at)?;
        let parameters = match f.get("parameters") {
            None | Some(Value::Null) => {
                serde_json::json!({"type": "object", "properties": {}})
            }
            Some(v @ Value::Object(_)) => v.clone(),
            Some(_) => {
                return Err(bad(
                    &format!("{at}.function.parameters"),
                    format!("Invalid type for '{at}.function.parameters': expected an object"),
                ))
            }
        };
        out.push(Tool {
            name: name.to_string(),
            description: f
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_string),
            parameters,
        });
    }
    Ok(out)
}

/// `tool_choice`, which may only name one of `tools`, and only with tools.
fn read_tool_choice(
    obj: &Map<String, Value>,
    tools: &[Tool],
) -> Result<Option<ToolChoice>, ApiError> {
    let choice = match obj.get("tool_choice") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            _ => return Err(bad("tool_choice", format!("Invalid value for 'tool_choice': '{s}'"))),
        }),
        Some(Value::Object(o)) => match o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str) {
            Some(name) => {
                if !tools.iter().any(|t| t.name == name) {
                    return Err(bad("tool_choice", format!("'tool_choice' names function '{name}', which is not in 'tools'")));
                }
                Some(ToolChoice::Named(name.to_string()))
            }
            None => return Err(bad("tool_choice", "Invalid value for 'tool_choice': expected {\"type\":\"function\",\"function\":{\"name\":...}}")),
        },
        Some(_) => return Err(bad("tool_choice", "Invalid type for 'tool_choice'")),
    };
    if choice.is_some() && tools.is_empty() {
        return Err(bad(
            "tool_choice",
            "'tool_choice' is only allowed when 'tools' are specified",
        ));
    }
    Ok(choice)
}

/// `response_format` as [`Chat::json`].
fn read_response_format(obj: &Map<String, Value>) -> Result<Option<Option<Value>>, ApiError> {
    Ok(match obj.get("response_format").filter(|v| !v.is_null()) {
        None => None,
        Some(rf) => match rf.get("type").and_then(Value::as_str) {
            Some("text") => None,
            Some("json_object") => Some(None),
            Some("json_schema") => match rf.get("json_schema").and_then(|j| j.get("schema")) {
                Some(s @ Value::Object(_)) => Some(Some(s.clone())),
                _ => {
                    return Err(bad(
                        "response_format.json_schema.schema",
                        "Missing 'response_format.json_schema.schema' (a JSON schema object)",
                    ))
                }
            },
            _ => {
                return Err(bad(
                    "response_format.type",
                    "Invalid value for 'response_format.type': expected text, json_object or json_schema",
                ))
            }
        },
    })
}

/// Tool call id for providers that give none.
pub fn tool_call_id(prefix: &str, n: usize) -> String {
    format!("call_{prefix}_{n}")
}
