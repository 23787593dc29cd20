//! OpenAI Responses API (`POST /v1/responses`), also served by Azure
//! (`/openai/v1/responses`, `/openai/responses?api-version=…`). Requests are
//! checked against the SDK's types (`shapes`: unknown parameters at the top
//! level and inside items, tools, `reasoning` and `text`), then for what
//! the API itself refuses (call pairing, limits); answers and stream events follow
//! the official SDK's `types/responses` (field names, event order,
//! `sequence_number`). Nothing is stored: `previous_response_id` is refused
//! as an unknown response.

use super::openai::{
    azure_err, bad, bad_value, is_embedding_model, missing, model_not_found, parse_error,
    violation_reply, wrong_type,
};
use crate::core::body;
use crate::core::ctx::Ctx;
use crate::core::plan::{plan, GenInput, Output};
use crate::core::prefix::Blocks;
use crate::core::reply::Reply;
use crate::core::script::Script;
use crate::core::shape::{self, Opts};
use crate::core::{http, text};
mod shapes;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use std::sync::LazyLock;

type Outcome = (Reply, Option<String>);

/// Tool types of the SDK's `ToolParam` other than `function` (and
/// `namespace`, whose functions are read): the mock accepts them and never
/// calls them.
const HOSTED_TOOLS: &[&str] = &[
    "apply_patch",
    "code_interpreter",
    "computer",
    "computer_use",
    "computer_use_preview",
    "custom",
    "file_search",
    "image_generation",
    "local_shell",
    "mcp",
    "programmatic_tool_calling",
    "shell",
    "tool_search",
    "web_search",
    "web_search_2025_08_26",
    "web_search_preview",
    "web_search_preview_2025_03_11",
];

/// `tool_choice` object types besides `function` and the hosted tools.
const CHOICE_TYPES: &[&str] = &["allowed_tools"];

/// Arguments schema of a function declared without `parameters`.
static NO_PARAMETERS: LazyLock<Value> =
    LazyLock::new(|| json!({"type": "object", "properties": {}}));

const EFFORTS: &[&str] = &["none", "minimal", "low", "medium", "high", "xhigh", "max"];

/// Smallest `max_output_tokens` the API accepts.
const MIN_OUTPUT_TOKENS: u64 = 16;

/// Reasoning tokens reported for an effort (the counting rule's stand-in
/// for hidden reasoning).
fn reasoning_tokens(effort: &str) -> u64 {
    match effort {
        "minimal" => 8,
        "low" => 16,
        "medium" => 32,
        "high" => 64,
        "xhigh" => 128,
        _ => 0,
    }
}

/// What the input items gave: the echoed text, all prompt text.
#[derive(Default)]
struct Input {
    echo: String,
    prompt: String,
    script: Script,
    /// Where each input item's text ends in `prompt` (the cache's blocks).
    ends: Vec<usize>,
}

fn check_content(content: &Value, at: &str, role: &str, inp: &mut Input) -> Result<(), Reply> {
    let mut t = String::new();
    match content {
        Value::String(s) => t.push_str(s),
        Value::Array(parts) => {
            for (j, p) in parts.iter().enumerate() {
                let pat = format!("{at}.content[{j}]");
                let ty = p.get("type").and_then(Value::as_str).unwrap_or("");
                let allowed: &[&str] = if role == "assistant" {
                    &["output_text", "refusal"]
                } else {
                    &["input_text", "input_image", "input_file"]
                };
                if !allowed.contains(&ty) {
                    return Err(bad_value(&format!("{pat}.type"), ty, allowed));
                }
                match ty {
                    "input_text" | "output_text" => match p.get("text") {
                        Some(Value::String(s)) => t.push_str(s),
                        None => return Err(missing(&format!("{pat}.text"))),
                        Some(_) => return Err(wrong_type(&format!("{pat}.text"), "a string")),
                    },
                    "input_image" => {
                        if p.get("image_url").and_then(Value::as_str).is_none()
                            && p.get("file_id").and_then(Value::as_str).is_none()
                        {
                            return Err(bad(
                                &format!("Invalid '{pat}': one of 'image_url' or 'file_id' must be provided."),
                                &pat,
                                "invalid_value",
                            ));
                        }
                        if let Some(d) = p.get("detail").filter(|d| !d.is_null()) {
                            let d = d.as_str().unwrap_or("");
                            if !["low", "high", "auto", "original"].contains(&d) {
                                return Err(bad_value(
                                    &format!("{pat}.detail"),
                                    d,
                                    &["low", "high", "auto", "original"],
                                ));
                            }
                        }
                    }
                    "refusal" => {
                        if let Some(s) = p.get("refusal").and_then(Value::as_str) {
                            t.push_str(s);
                        }
                    }
                    _ => {}
                }
            }
        }
        Value::Null => return Err(missing(&format!("{at}.content"))),
        _ => return Err(wrong_type(&format!("{at}.content"), "a string or an array")),
    }
    if role == "user" {
        inp.script.user_text(&t);
        inp.echo = t.clone();
    }
    inp.prompt.push_str(&t);
    Ok(())
}

/// Input items: messages (user, system, developer, assistant), function
/// calls and their outputs (paired by `call_id`), reasoning items. The
/// prompt text starts with the `instructions`.
fn check_input(input: &Value, instructions: &str) -> Result<Input, Reply> {
    let mut inp = Input {
        prompt: instructions.to_string(),
        ..Input::default()
    };
    let items = match input {
        Value::String(s) => {
            inp.script.user_text(s);
            inp.echo = s.clone();
            inp.prompt.push_str(s);
            inp.ends.push(inp.prompt.len());
            return Ok(inp);
        }
        Value::Array(a) => a,
        _ => return Err(wrong_type("input", "a string or an array of input items")),
    };
    let mut open: Vec<String> = Vec::new();
    for (i, it) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        if !it.is_object() {
            return Err(wrong_type(&at, "an object"));
        }
        let ty = match it.get("type") {
            None if it.get("role").is_some() => "message",
            Some(Value::String(s)) => s.as_str(),
            _ => return Err(missing(&format!("{at}.type"))),
        };
        match ty {
            "message" => {
                let role = it.get("role").and_then(Value::as_str).unwrap_or("");
                let roles = ["user", "assistant", "system", "developer"];
                if !roles.contains(&role) {
                    return Err(bad_value(&format!("{at}.role"), role, &roles));
                }
                check_content(
                    it.get("content").unwrap_or(&Value::Null),
                    &at,
                    role,
                    &mut inp,
                )?;
            }
            "function_call" => {
                for f in ["call_id", "name", "arguments"] {
                    match it.get(f) {
                        Some(Value::String(_)) => {}
                        None => return Err(missing(&format!("{at}.{f}"))),
                        Some(_) => return Err(wrong_type(&format!("{at}.{f}"), "a string")),
                    }
                }
                let id = it.get("call_id").and_then(Value::as_str).unwrap_or("");
                open.push(id.to_string());
                if let Some(a) = it.get("arguments").and_then(Value::as_str) {
                    inp.prompt.push_str(a);
                }
            }
            "function_call_output" => {
                let Some(id) = it.get("call_id").and_then(Value::as_str) else {
                    return Err(missing(&format!("{at}.call_id")));
                };
                match it.get("output") {
                    Some(Value::String(s)) => {
                        inp.prompt.push_str(s);
                        inp.script.tool_result(s.clone());
                    }
                    Some(Value::Array(parts)) => {
                        let t: String = parts
                            .iter()
                            .filter_map(|p| p.get("text").and_then(Value::as_str))
                            .collect();
                        inp.script.tool_result(t);
                    }
                    None => return Err(missing(&format!("{at}.output"))),
                    Some(_) => return Err(wrong_type(&format!("{at}.output"), "a string")),
                }
                match open.iter().position(|c| c == id) {
                    Some(p) => {
                        open.remove(p);
                    }
                    None => {
                        return Err(bad(
                            &format!(
                                "No tool call found for function call output with call_id {id}."
                            ),
                            "input",
                            "invalid_value",
                        ))
                    }
                }
            }
            "custom_tool_call" => {
                let id = it.get("call_id").and_then(Value::as_str).unwrap_or("");
                open.push(id.to_string());
                if let Some(a) = it.get("input").and_then(Value::as_str) {
                    inp.prompt.push_str(a);
                }
            }
            "custom_tool_call_output" => {
                let id = it.get("call_id").and_then(Value::as_str).unwrap_or("");
                let t = output_text(it.get("output"));
                inp.prompt.push_str(&t);
                inp.script.tool_result(t);
                match open.iter().position(|c| c == id) {
                    Some(p) => {
                        open.remove(p);
                    }
                    None => {
                        return Err(bad(
                            &format!(
                                "No tool call found for custom tool call output with call_id {id}."
                            ),
                            "input",
                            "invalid_value",
                        ))
                    }
                }
            }
            "reasoning" if !it.get("summary").is_some_and(Value::is_array) => {
                return Err(missing(&format!("{at}.summary")));
            }
            // Reasoning items, and the API's own items (hosted tool calls, compaction, …),
            // passed back as it returned them.
            _ => {}
        }
        inp.ends.push(inp.prompt.len());
    }
    if let Some(id) = open.first() {
        return Err(bad(
            &format!("No tool output found for function call {id}."),
            "input",
            "invalid_value",
        ));
    }
    Ok(inp)
}

/// The text of a tool output: a string, or its parts' text.
fn output_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// Declared function tools, those inside `namespace` tools included, and
/// for each the namespace it sits in and its own name. A namespaced tool is
/// listed under its own name and under namespace + name (Codex's
/// `mcp__server__` + `tool`), so either may be called.
type Declared<'a> = (Vec<(String, &'a Value)>, Vec<Option<(String, String)>>);

fn check_tools(req: &Value) -> Result<Declared<'_>, Reply> {
    let mut out = (Vec::new(), Vec::new());
    let Some(ts) = req.get("tools").filter(|v| !v.is_null()) else {
        return Ok(out);
    };
    let Some(arr) = ts.as_array() else {
        return Err(wrong_type("tools", "an array"));
    };
    collect_tools(arr, "tools", None, &mut out)?;
    Ok(out)
}

fn collect_tools<'a>(
    arr: &'a [Value],
    at: &str,
    ns: Option<&str>,
    out: &mut Declared<'a>,
) -> Result<(), Reply> {
    let top = ns.is_none();
    for (i, t) in arr.iter().enumerate() {
        let at = format!("{at}[{i}]");
        let ty = t.get("type").and_then(Value::as_str).unwrap_or("");
        match ty {
            "function" => {
                let Some(name) = t.get("name").and_then(Value::as_str) else {
                    return Err(missing(&format!("{at}.name")));
                };
                // `parameters` is optional: without it the function takes
                // no arguments.
                let params = match t.get("parameters") {
                    Some(p @ Value::Object(_)) => p,
                    None | Some(Value::Null) => &*NO_PARAMETERS,
                    Some(_) => return Err(wrong_type(&format!("{at}.parameters"), "an object")),
                };
                match ns {
                    None => {
                        out.0.push((name.to_string(), params));
                        out.1.push(None);
                    }
                    Some(ns) => {
                        for n in [name.to_string(), format!("{ns}{name}")] {
                            out.0.push((n, params));
                            out.1.push(Some((ns.to_string(), name.to_string())));
                        }
                    }
                }
            }
            "namespace" if top => {
                let Some(name) = t.get("name").and_then(Value::as_str) else {
                    return Err(missing(&format!("{at}.name")));
                };
                let Some(inner) = t.get("tools").and_then(Value::as_array) else {
                    return Err(missing(&format!("{at}.tools")));
                };
                collect_tools(inner, &format!("{at}.tools"), Some(name), out)?;
            }
            _ if top && HOSTED_TOOLS.contains(&ty) => {}
            _ => {
                let mut all = vec!["function"];
                if top {
                    all.push("namespace");
                    all.extend_from_slice(HOSTED_TOOLS);
                }
                return Err(bad_value(&format!("{at}.type"), ty, &all));
            }
        }
    }
    Ok(())
}

/// `tool_choice`: (forced tool name, any tool required).
fn check_tool_choice(
    req: &Value,
    tools: &[(String, &Value)],
) -> Result<(Option<String>, bool), Reply> {
    match req.get("tool_choice") {
        None | Some(Value::Null) => Ok((None, false)),
        Some(Value::String(s)) => match s.as_str() {
            "auto" | "none" => Ok((None, false)),
            "required" if tools.is_empty() => Err(bad(
                "Tool choice 'required' must be specified with 'tools' parameter.",
                "tool_choice",
                "invalid_value",
            )),
            "required" => Ok((None, true)),
            other => Err(bad_value(
                "tool_choice",
                other,
                &["none", "auto", "required"],
            )),
        },
        Some(tc @ Value::Object(_)) => {
            let ty = tc.get("type").and_then(Value::as_str).unwrap_or("");
            if ty != "function" {
                return if HOSTED_TOOLS.contains(&ty) || CHOICE_TYPES.contains(&ty) {
                    Ok((None, false))
                } else {
                    Err(bad_value("tool_choice.type", ty, &["function"]))
                };
            }
            match tc.get("name").and_then(Value::as_str) {
                Some(n) if tools.iter().any(|t| t.0 == n) => Ok((Some(n.to_string()), false)),
                Some(n) => Err(bad(
                    &format!("Tool choice '{n}' not found in 'tools' parameter."),
                    "tool_choice",
                    "invalid_value",
                )),
                None => Err(missing("tool_choice.name")),
            }
        }
        Some(_) => Err(wrong_type("tool_choice", "a string or an object")),
    }
}

/// `reasoning.effort` (None when absent).
fn check_reasoning(req: &Value) -> Result<Option<String>, Reply> {
    let Some(r) = req.get("reasoning").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    if !r.is_object() {
        return Err(wrong_type("reasoning", "an object"));
    }
    if let Some(s) = r.get("summary").filter(|v| !v.is_null()) {
        let s = s.as_str().unwrap_or("");
        let all = ["auto", "concise", "detailed"];
        if !all.contains(&s) {
            return Err(bad_value("reasoning.summary", s, &all));
        }
    }
    match r.get("effort") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(e)) if EFFORTS.contains(&e.as_str()) => Ok(Some(e.clone())),
        Some(e) => Err(bad_value(
            "reasoning.effort",
            e.as_str().unwrap_or("?"),
            EFFORTS,
        )),
    }
}

/// `text.format`: the JSON schema to answer with, when `json_schema`.
fn check_text(req: &Value) -> Result<Option<Value>, Reply> {
    let Some(t) = req.get("text").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let Some(f) = t.get("format").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    match f.get("type").and_then(Value::as_str).unwrap_or("") {
        "text" | "json_object" => Ok(None),
        "json_schema" => {
            if f.get("name").and_then(Value::as_str).is_none() {
                return Err(missing("text.format.name"));
            }
            match f.get("schema") {
                Some(s @ Value::Object(_)) => Ok(Some(s.clone())),
                None | Some(Value::Null) => Err(missing("text.format.schema")),
                Some(_) => Err(wrong_type("text.format.schema", "an object")),
            }
        }
        other => Err(bad_value(
            "text.format.type",
            other,
            &["text", "json_object", "json_schema"],
        )),
    }
}

fn opt_bool(req: &Value, p: &str) -> Result<Option<bool>, Reply> {
    match req.get(p) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(wrong_type(p, "a boolean")),
    }
}

/// The request checked against the SDK's types (`shapes`): its first
/// violation in OpenAI's words, `param` naming the path.
fn shape_error(req: &Value) -> Option<Reply> {
    let v = shape::check_msg(&shapes::CREATE, req, &Opts::default())
        .into_iter()
        .next()?;
    Some(violation_reply(&v))
}

/// Where a Responses request arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Openai,
    /// Azure `/openai/v1/responses` (no `api-version` needed).
    AzureV1,
    /// Azure `/openai/responses?api-version=…`.
    AzureVersioned,
}

/// Everything checked: what to generate and what to echo back.
struct Checked<'a> {
    req: &'a Value,
    model: String,
    stream: bool,
    store: bool,
    effort: Option<String>,
    schema: Option<Value>,
    max_output: Option<u64>,
}

fn check<'a>(ctx: &Ctx<'_>, req: &'a Value, flavor: Flavor) -> Result<Checked<'a>, Outcome> {
    let model = match req.get("model") {
        Some(Value::String(m)) => m.clone(),
        None | Some(Value::Null) => return Err((missing("model"), None)),
        Some(_) => return Err((wrong_type("model", "a string"), None)),
    };
    let m = Some(model.clone());
    if !ctx.provider.has_model(&model) {
        let r = if flavor == Flavor::Openai {
            model_not_found(&model)
        } else {
            azure_err(404, "DeploymentNotFound", "The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again.", &[])
        };
        return Err((r, m));
    }
    let fail = |r: Reply| (r, m.clone());
    if is_embedding_model(&model) {
        return Err(fail(bad(
            &format!("The model `{model}` does not support the Responses API."),
            "model",
            "model_not_supported",
        )));
    }
    if let Some(r) = shape_error(req) {
        return Err(fail(r));
    }
    if let Some(id) = req.get("previous_response_id").and_then(Value::as_str) {
        return Err(fail(bad(
            &format!("Previous response with id '{id}' not found."),
            "previous_response_id",
            "previous_response_not_found",
        )));
    }
    match req.get("input") {
        None | Some(Value::Null) => return Err(fail(missing("input"))),
        Some(_) => {}
    }
    match req.get("instructions") {
        None | Some(Value::Null) | Some(Value::String(_)) => {}
        Some(_) => return Err(fail(wrong_type("instructions", "a string"))),
    }
    for (p, hi) in [("temperature", 2.0), ("top_p", 1.0)] {
        if !http::in_range(req.get(p), 0.0, hi) {
            return Err(fail(bad(&format!("Invalid '{p}': decimal above maximum value or below minimum value. Expected a value within [0, {hi}]."), p, "invalid_value")));
        }
    }
    let stream = opt_bool(req, "stream").map_err(fail)?.unwrap_or(false);
    let store = opt_bool(req, "store").map_err(fail)?.unwrap_or(true);
    opt_bool(req, "parallel_tool_calls").map_err(fail)?;
    if req.get("stream_options").is_some_and(|v| !v.is_null()) && !stream {
        return Err(fail(bad(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
            "invalid_value",
        )));
    }
    let max_output = match req.get("max_output_tokens") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(n) if n < MIN_OUTPUT_TOKENS => {
                return Err(fail(bad(&format!("Invalid 'max_output_tokens': integer below minimum value. Expected a value >= {MIN_OUTPUT_TOKENS}, but got {n} instead."), "max_output_tokens", "integer_below_min_value")))
            }
            Some(n) => {
                if let Some(limit) = ctx.provider.output_limit(&model) {
                    if n > limit {
                        return Err(fail(bad(&format!("max_output_tokens is too large: {n}. This model supports at most {limit} output tokens, whereas you provided {n}."), "max_output_tokens", "invalid_value")));
                    }
                }
                Some(n)
            }
            None => return Err(fail(wrong_type("max_output_tokens", "an integer"))),
        },
    };
    if let Some(inc) = req.get("include").filter(|v| !v.is_null()) {
        if !inc
            .as_array()
            .is_some_and(|a| a.iter().all(Value::is_string))
        {
            return Err(fail(wrong_type("include", "an array of strings")));
        }
    }
    let effort = check_reasoning(req).map_err(fail)?;
    let schema = check_text(req).map_err(fail)?;
    Ok(Checked {
        req,
        model,
        stream,
        store,
        effort,
        schema,
        max_output,
    })
}

/// `POST /v1/responses` (and Azure's forms).
pub async fn create(ctx: &Ctx<'_>, flavor: Flavor) -> Outcome {
    if flavor == Flavor::AzureVersioned
        && ctx
            .query_param("api-version")
            .filter(|v| !v.is_empty())
            .is_none()
    {
        return (azure_err(404, "404", "Resource not found", &[]), None);
    }
    let req: Value = match serde_json::from_slice(ctx.body) {
        Ok(v @ Value::Object(_)) => v,
        _ => return (parse_error(), None),
    };
    let c = match check(ctx, &req, flavor) {
        Ok(c) => c,
        Err(o) => return o,
    };
    let m = Some(c.model.clone());
    let fail = |r: Reply| (r, m.clone());
    let input = req.get("input").unwrap_or(&Value::Null);
    let instructions = req
        .get("instructions")
        .and_then(Value::as_str)
        .unwrap_or("");
    let inp = match check_input(input, instructions) {
        Ok(i) => i,
        Err(r) => return fail(r),
    };
    let prompt_chars = inp.prompt.chars().count();
    // OpenAI's automatic cache: the routing key, tools and text format, the
    // instructions, then one block per input item.
    let cached = super::openai::cached_tokens(ctx, &c.model, prompt_chars, || {
        let mut b = Blocks::new();
        for k in ["prompt_cache_key", "tools", "text"] {
            if let Some(v) = req.get(k) {
                b.feed(v);
            }
        }
        if let Some(v) = req.get("instructions") {
            b.block(v, instructions.len());
        }
        match input {
            Value::Array(items) => items
                .iter()
                .zip(&inp.ends)
                .for_each(|(it, &e)| b.block(it, e)),
            _ => inp.ends.iter().for_each(|&e| b.block(input, e)),
        }
        b.marks(&inp.prompt)
    });
    let (tools, namespaces) = match check_tools(&req) {
        Ok(t) => t,
        Err(r) => return fail(r),
    };
    let (forced, any) = match check_tool_choice(&req, &tools) {
        Ok(x) => x,
        Err(r) => return fail(r),
    };
    let g = GenInput {
        echo: inp.echo,
        prompt_chars,
        tools,
        forced_tool: forced,
        any_tool: any,
        max_tokens: c.max_output,
        tool_id_prefix: "call_",
        script: inp.script,
    };
    // Where each declared name sits, read before `plan` takes the list.
    let places: Vec<(String, Option<(String, String)>)> = g
        .tools
        .iter()
        .map(|t| t.0.clone())
        .zip(namespaces)
        .collect();
    let mut p = match plan(ctx, g) {
        Ok(p) => p,
        Err(e) => return fail(bad(&e, "tools", "invalid_value")),
    };
    // A call of a namespaced tool names the namespace and the tool's own
    // name, as the API answers it.
    let mut namespace = None;
    if let Output::Tool { name, .. } = &mut p.output {
        if let Some((_, Some((ns, own)))) = places.iter().find(|(n, _)| n == name) {
            namespace = Some(ns.clone());
            *name = own.clone();
        }
    }
    // Structured output: a document valid for the schema instead of text.
    if let (Some(schema), Output::Text(_)) = (&c.schema, &p.output) {
        let doc = text::value_for_schema(schema, 0).to_string();
        p.completion_tokens = text::count_tokens(&doc);
        p.truncated = false;
        p.output = Output::Text(doc);
    }
    let r_tokens = c.effort.as_deref().map_or(0, reasoning_tokens);
    let mut answer = Answer::new(ctx, &c, p, r_tokens, cached.unwrap_or(0));
    answer.namespace = namespace;
    answer.lead.extend(web_search_calls(ctx, &req));
    let hdrs = [("x-request-id", ctx.request_id.clone())];
    if !c.stream {
        return (ctx.json_ok(&answer.response(true), &hdrs).await, m);
    }
    (answer.stream(ctx, &hdrs), m)
}

/// The `web_search_call` items of the searches `x-mock-web-searches` asks
/// for, when the request declares a web search tool (without one the model
/// cannot search).
fn web_search_calls(ctx: &Ctx<'_>, req: &Value) -> Vec<Value> {
    (0..crate::core::plan::web_searches(ctx, req, "web_search"))
        .map(|i| {
            json!({
                "id": format!("ws_{}{i}", ctx.request_id), "type": "web_search_call",
                "status": "completed",
                "action": {"type": "search", "query": format!("search {}", i + 1)},
            })
        })
        .collect()
}

/// The answer, built once and rendered as a `response` object or as the
/// stream's events.
struct Answer {
    base: Map<String, Value>,
    output: Output,
    truncated: bool,
    usage: Value,
    rid: String,
    /// Finished items before the main one: the reasoning item when
    /// reasoning was asked for, then the web searches.
    lead: Vec<Value>,
    /// The namespace of the called tool, when it sits in one.
    namespace: Option<String>,
}

impl Answer {
    fn new(
        ctx: &Ctx<'_>,
        c: &Checked<'_>,
        p: crate::core::plan::Plan,
        r_tokens: u64,
        cached: u64,
    ) -> Answer {
        let req = c.req;
        let get = |k: &str, d: Value| req.get(k).filter(|v| !v.is_null()).cloned().unwrap_or(d);
        let rid = ctx.request_id.clone();
        let mut base = Map::new();
        for (k, v) in [
            ("id", json!(format!("resp_{rid}"))),
            ("object", json!("response")),
            ("created_at", json!(http::now_secs())),
            ("status", json!("in_progress")),
            ("background", json!(false)),
            ("error", Value::Null),
            ("incomplete_details", Value::Null),
            ("instructions", get("instructions", Value::Null)),
            ("max_output_tokens", get("max_output_tokens", Value::Null)),
            ("max_tool_calls", get("max_tool_calls", Value::Null)),
            ("metadata", get("metadata", json!({}))),
            ("model", json!(c.model)),
            ("output", json!([])),
            (
                "parallel_tool_calls",
                get("parallel_tool_calls", json!(true)),
            ),
            ("previous_response_id", Value::Null),
            (
                "reasoning",
                json!({"effort": c.effort, "summary": req.pointer("/reasoning/summary").cloned().unwrap_or(Value::Null)}),
            ),
            ("service_tier", json!("default")),
            ("store", json!(c.store)),
            ("temperature", get("temperature", json!(1.0))),
            ("text", get("text", json!({"format": {"type": "text"}}))),
            ("tool_choice", get("tool_choice", json!("auto"))),
            ("tools", get("tools", json!([]))),
            ("top_p", get("top_p", json!(1.0))),
            ("truncation", get("truncation", json!("disabled"))),
            ("usage", Value::Null),
            ("user", get("user", Value::Null)),
        ] {
            base.insert(k.to_string(), v);
        }
        let usage = json!({
            "input_tokens": p.prompt_tokens,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": p.completion_tokens + r_tokens,
            "output_tokens_details": {"reasoning_tokens": r_tokens},
            "total_tokens": p.prompt_tokens + p.completion_tokens + r_tokens,
        });
        let lead = c
            .effort
            .as_deref()
            .filter(|e| *e != "none")
            .map(|_| json!({"id": format!("rs_{rid}"), "type": "reasoning", "summary": []}))
            .into_iter()
            .collect();
        Answer {
            base,
            output: p.output,
            truncated: p.truncated,
            usage,
            rid,
            lead,
            namespace: None,
        }
    }

    fn item_status(&self) -> &'static str {
        if self.truncated {
            "incomplete"
        } else {
            "completed"
        }
    }

    /// The main output item with its final content (`done`) or empty, as
    /// `response.output_item.added` shows it.
    fn item(&self, done: bool) -> Value {
        let status = if done {
            self.item_status()
        } else {
            "in_progress"
        };
        match &self.output {
            Output::Text(t) => json!({
                "id": format!("msg_{}", self.rid), "type": "message", "status": status,
                "role": "assistant",
                "content": if done { json!([text_part(t)]) } else { json!([]) },
            }),
            Output::Tool { id, name, args } => {
                let mut v = json!({
                    "id": format!("fc_{}", self.rid), "type": "function_call", "status": status,
                    "call_id": id, "name": name,
                    "arguments": if done { args.to_string() } else { String::new() },
                });
                if let Some(ns) = &self.namespace {
                    v["namespace"] = json!(ns);
                }
                v
            }
        }
    }

    fn output(&self) -> Vec<Value> {
        let mut out = self.lead.clone();
        out.push(self.item(true));
        out
    }

    /// The `response` object, final (`done`) or as first announced.
    fn response(&self, done: bool) -> Value {
        let mut r = self.base.clone();
        if done {
            r.insert("status".into(), json!(self.item_status()));
            if self.truncated {
                r.insert(
                    "incomplete_details".into(),
                    json!({"reason": "max_output_tokens"}),
                );
            }
            r.insert("output".into(), Value::Array(self.output()));
            r.insert("usage".into(), self.usage.clone());
        }
        Value::Object(r)
    }

    fn stream(self, ctx: &Ctx<'_>, hdrs: &[(&'static str, String)]) -> Reply {
        let mut seq = 0u64;
        let mut ev = |ty: &str, mut v: Value| {
            v["type"] = json!(ty);
            v["sequence_number"] = json!(seq);
            seq += 1;
            crate::core::render::sse_event(ty, &v)
        };
        let mut head = vec![
            ev(
                "response.created",
                json!({"response": self.response(false)}),
            ),
            ev(
                "response.in_progress",
                json!({"response": self.response(false)}),
            ),
        ];
        let idx = self.lead.len();
        for (i, r) in self.lead.iter().enumerate() {
            head.push(ev(
                "response.output_item.added",
                json!({"output_index": i, "item": r}),
            ));
            head.push(ev(
                "response.output_item.done",
                json!({"output_index": i, "item": r}),
            ));
        }
        head.push(ev(
            "response.output_item.added",
            json!({"output_index": idx, "item": self.item(false)}),
        ));
        let (content, delta_type, item_id) = match &self.output {
            Output::Text(t) => {
                let id = format!("msg_{}", self.rid);
                head.push(ev(
                    "response.content_part.added",
                    json!({"item_id": id, "output_index": idx, "content_index": 0, "part": text_part("")}),
                ));
                (t.clone(), "response.output_text.delta", id)
            }
            Output::Tool { args, .. } => (
                args.to_string(),
                "response.function_call_arguments.delta",
                format!("fc_{}", self.rid),
            ),
        };
        let pieces = body::piece_count(&content, ctx.chunk_chars());
        let first_delta = seq;
        seq += pieces as u64;
        let mut ev = |ty: &str, mut v: Value| {
            v["type"] = json!(ty);
            v["sequence_number"] = json!(seq);
            seq += 1;
            crate::core::render::sse_event(ty, &v)
        };
        let mut tail = Vec::new();
        match &self.output {
            Output::Text(t) => {
                tail.push(ev(
                    "response.output_text.done",
                    json!({"item_id": item_id, "output_index": idx, "content_index": 0, "text": t, "logprobs": []}),
                ));
                tail.push(ev(
                    "response.content_part.done",
                    json!({"item_id": item_id, "output_index": idx, "content_index": 0, "part": text_part(t)}),
                ));
            }
            Output::Tool { name, args, .. } => tail.push(ev(
                "response.function_call_arguments.done",
                json!({"item_id": item_id, "output_index": idx, "name": name, "arguments": args.to_string()}),
            )),
        }
        tail.push(ev(
            "response.output_item.done",
            json!({"output_index": idx, "item": self.item(true)}),
        ));
        let last = if self.truncated {
            "response.incomplete"
        } else {
            "response.completed"
        };
        tail.push(ev(last, json!({"response": self.response(true)})));
        // In-stream failure: an `error` event where the cut falls.
        let cut_seq = first_delta + body::cut_index(pieces) as u64;
        let error = crate::core::render::sse_event(
            "error",
            &json!({"type": "error", "code": "server_error", "message": "The server had an error while processing your request. Sorry about that!", "param": null, "sequence_number": cut_seq}),
        );
        let delta = Delta::new(
            delta_type,
            &item_id,
            idx,
            matches!(self.output, Output::Text(_)),
        );
        ctx.stream(
            "text/event-stream; charset=utf-8",
            head,
            content,
            Box::new(move |i, piece, _| delta.render(first_delta + i as u64, piece)),
            tail,
            hdrs,
            error,
        )
    }
}

fn text_part(t: &str) -> Value {
    json!({"type": "output_text", "text": t, "annotations": [], "logprobs": []})
}

/// A delta event rendered per piece: only the sequence number and the
/// piece change, the rest is serialized once.
struct Delta {
    pre: String,
    mid: String,
    post: &'static str,
}

impl Delta {
    fn new(ty: &str, item_id: &str, idx: usize, text: bool) -> Delta {
        let content_index = if text { r#","content_index":0"# } else { "" };
        Delta {
            pre: format!("event: {ty}\ndata: {{\"type\":\"{ty}\",\"sequence_number\":"),
            mid: format!(
                ",\"item_id\":\"{item_id}\",\"output_index\":{idx}{content_index},\"delta\":"
            ),
            post: if text {
                ",\"logprobs\":[]}\n\n"
            } else {
                "}\n\n"
            },
        }
    }

    fn render(&self, seq: u64, piece: &str) -> Bytes {
        let mut out = Vec::with_capacity(self.pre.len() + self.mid.len() + piece.len() + 32);
        out.extend_from_slice(self.pre.as_bytes());
        out.extend_from_slice(seq.to_string().as_bytes());
        out.extend_from_slice(self.mid.as_bytes());
        let _ = serde_json::to_writer(&mut out, piece);
        out.extend_from_slice(self.post.as_bytes());
        Bytes::from(out)
    }
}
