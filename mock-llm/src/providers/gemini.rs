//! Gemini API (v1beta): generateContent, streamGenerateContent (SSE with
//! `alt=sse`, else a streamed JSON array), embedContent, batchEmbedContents.
//!
//! Rules follow the Gemini API's own definitions (the v1beta protos and
//! google-genai's Developer-API converters, notes/gemini.md): key in
//! `x-goog-api-key` or `key=`; every request message is closed and checked
//! by `shapes` as Google's JSON parser reads it (every unknown name
//! reported, "Cannot find field"; wrong values "Invalid value at …");
//! `parameters` and `responseSchema` take only the 22-member `Schema`, and
//! each is mutually exclusive with its `…JsonSchema` twin; a part holds one
//! `data` member; `contents` required with non-empty `parts`; roles
//! `user`/`model`; `maxOutputTokens` within the model's limit;
//! `thinkingConfig` only for models that think; a function response turn
//! must come right after a function call turn with the same names. Errors:
//! `{"error":{"code","message","status"[,"details"]}}`.

use crate::core::ctx::{unknown_key_id, AuthFail, Ctx, ErrKind, KeyRt};
use crate::core::http::json_response;
use crate::core::plan::{plan, GenInput, Output};
use crate::core::prefix::Blocks;
use crate::core::reply::Reply;
use crate::core::script::{self, Script};
use crate::core::shape::{self, Expect, Msg, Opts, Problem, Seg, Violation};
use crate::core::{http, render};
mod shapes;
use bytes::Bytes;
use serde_json::{json, Value};

type Outcome = (Reply, Option<String>);

pub fn authenticate<'a>(ctx: &Ctx<'a>) -> Result<&'a KeyRt, AuthFail> {
    let key = ctx
        .header("x-goog-api-key")
        .map(str::to_string)
        .or_else(|| ctx.query_param("key"))
        .filter(|k| !k.is_empty());
    let Some(key) = key else {
        return Err((error_for(ctx, ErrKind::MissingKey, ""), None));
    };
    match ctx.provider.key_by_secret(&key) {
        Some(k) => Ok(k),
        None => Err((
            error_for(ctx, ErrKind::BadKey, ""),
            Some(unknown_key_id(&key)),
        )),
    }
}

/// The Google RPC error document.
pub fn gerr(
    code: u16,
    status: &str,
    message: &str,
    details: Option<Value>,
    extra: &[(&'static str, String)],
) -> Reply {
    let mut e = json!({"code": code, "message": message, "status": status});
    if let Some(d) = details {
        e["details"] = d;
    }
    json_response(code, json!({"error": e}).to_string(), extra)
}

fn invalid(msg: &str) -> Reply {
    gerr(400, "INVALID_ARGUMENT", msg, None, &[])
}

pub fn error_for(ctx: &Ctx<'_>, k: ErrKind, _detail: &str) -> Reply {
    match k {
        ErrKind::MissingKey => gerr(
            403,
            "PERMISSION_DENIED",
            "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.",
            None,
            &[],
        ),
        ErrKind::BadKey => gerr(
            400,
            "INVALID_ARGUMENT",
            "API key not valid. Please pass a valid API key.",
            Some(json!([{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
                "domain": "googleapis.com", "metadata": {"service": "generativelanguage.googleapis.com"}}])),
            &[],
        ),
        ErrKind::RateLimited => gerr(
            429,
            "RESOURCE_EXHAUSTED",
            "Resource has been exhausted (e.g. check quota).",
            None,
            &[("retry-after", ctx.retry_after_s().to_string())],
        ),
        ErrKind::Internal => gerr(500, "INTERNAL", "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting", None, &[]),
        ErrKind::Unavailable => gerr(503, "UNAVAILABLE", "The model is overloaded. Please try again later.", None, &[]),
        ErrKind::Overloaded => gerr(529, "UNAVAILABLE", "The model is overloaded. Please try again later.", None, &[]),
        ErrKind::MethodNotAllowed => gerr(404, "NOT_FOUND", "Method not found.", None, &[]),
    }
}

fn not_found(model: &str, method: &str) -> Reply {
    gerr(
        404,
        "NOT_FOUND",
        &format!("models/{model} is not found for API version v1beta, or is not supported for {method}. Call ListModels to see the list of available models and their supported methods."),
        None,
        &[],
    )
}

fn is_embedding_model(m: &str) -> bool {
    m.contains("embedding")
}

fn parse(ctx: &Ctx<'_>) -> Result<Value, Reply> {
    match serde_json::from_slice::<Value>(ctx.body) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(invalid(
            "Invalid JSON payload received. Expected an object.",
        )),
        Err(e) => Err(invalid(&format!(
            "Invalid JSON payload received. {}",
            http::json_err(&e)
        ))),
    }
}

/// Google's JSON parser's options: numbers may be strings, enums numbers.
fn proto_json() -> Opts<'static> {
    Opts {
        numeric_strings: true,
        enum_numbers: true,
        betas: Vec::new(),
    }
}

/// A request checked against its message (`shapes`): unknown members and
/// lists where one value belongs are all reported, as Google's parser does;
/// else the first wrong value.
fn check_shape(root: &'static Msg, req: &Value) -> Result<(), Reply> {
    let vs = shape::check_msg(root, req, &proto_json());
    if vs.is_empty() {
        return Ok(());
    }
    let parse_errors: Vec<&Violation> = vs
        .iter()
        .filter(|v| matches!(v.problem, Problem::Unknown | Problem::NotRepeated))
        .collect();
    if !parse_errors.is_empty() {
        let mut messages = Vec::new();
        let mut fields = Vec::new();
        for v in parse_errors {
            let parent = path(&v.path[..v.path.len().saturating_sub(1)]);
            let name = match v.path.last() {
                Some(Seg::Unknown(k)) => k.as_str(),
                Some(Seg::Field(n, _)) => n,
                _ => "",
            };
            let why = if v.problem == Problem::Unknown {
                "Cannot find field."
            } else {
                "Proto field is not repeating, cannot start list."
            };
            let at = if parent.is_empty() {
                String::new()
            } else {
                format!(" at '{parent}'")
            };
            let m = format!("Invalid JSON payload received. Unknown name \"{name}\"{at}: {why}");
            fields.push(if parent.is_empty() {
                json!({"description": m})
            } else {
                json!({"field": parent, "description": m})
            });
            messages.push(m);
        }
        let details = json!([{"@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": fields}]);
        return Err(gerr(
            400,
            "INVALID_ARGUMENT",
            &messages.join("\n"),
            Some(details),
            &[],
        ));
    }
    let v = &vs[0];
    let at = path(&v.path);
    let msg = match &v.problem {
        Problem::Type(want) => format!("Invalid value at '{at}' ({}), {}", type_url(want), v.value),
        Problem::Enum(e) => format!(
            "Invalid value at '{at}' (type.googleapis.com/google.ai.generativelanguage.v1beta.{}), {}",
            e.name, v.value
        ),
        Problem::Missing => {
            let name = v.last_key().unwrap_or("");
            let snake = match v.path.last() {
                Some(Seg::Field(_, a)) if !a.is_empty() => a,
                _ => name,
            };
            format!("* {}.{at}: {snake} is not specified", root.name)
        }
        other => format!("* {}.{at}: invalid value ({other:?})", root.name),
    };
    Err(invalid(&msg))
}

/// A path as Google writes it: snake_case names, `[i]` for list items,
/// `[i].value` for map entries.
fn path(segs: &[Seg]) -> String {
    let mut out = String::new();
    for s in segs {
        match s {
            Seg::Field(name, alias) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(if alias.is_empty() { name } else { alias });
            }
            Seg::Unknown(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Entry(i, _) => out.push_str(&format!("[{i}].value")),
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
            Seg::Tag(_) => {}
        }
    }
    out
}

/// The type Google names in "Invalid value" errors.
fn type_url(want: &Expect) -> String {
    let name = match want {
        Expect::Str => return "TYPE_STRING".into(),
        Expect::Bool => return "TYPE_BOOL".into(),
        Expect::Int => return "TYPE_INT32".into(),
        Expect::Num => return "TYPE_FLOAT".into(),
        Expect::Enum(e) => e.name,
        Expect::Object(n) | Expect::List(n) => n,
    };
    match name {
        "TYPE_STRING" | "TYPE_BOOL" | "TYPE_INT32" | "TYPE_FLOAT" => name.into(),
        "object" | "google.protobuf.Struct" => "type.googleapis.com/google.protobuf.Struct".into(),
        "google.protobuf.Value" => "type.googleapis.com/google.protobuf.Value".into(),
        n => format!("type.googleapis.com/google.ai.generativelanguage.v1beta.{n}"),
    }
}

/// `generationConfig.thinkingConfig` on a model that thinks: a budget in
/// [-1, 32768] (-1: dynamic), not both a budget and a level.
fn check_thinking(tc: &Value) -> Result<(), String> {
    let budget = get(tc, "thinkingBudget", "thinking_budget");
    if let Some(v) = budget {
        let n = v
            .as_i64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()));
        if !n.is_some_and(|n| (-1..=32768).contains(&n)) {
            return Err(format!("Invalid value at 'generation_config.thinking_config.thinking_budget' ({v}): expected an integer in [-1, 32768]"));
        }
    }
    if budget.is_some() && get(tc, "thinkingLevel", "thinking_level").is_some() {
        return Err("* GenerateContentRequest.generation_config.thinking_config: thinking_budget and thinking_level cannot both be set.".into());
    }
    Ok(())
}

/// Members a message holds both of, though its definition says they are
/// mutually exclusive (`parameters` / `parametersJsonSchema`, `response` /
/// `responseJsonSchema`, `responseSchema` / `responseJsonSchema`).
fn exclusive(v: &Value, at: &str, a: (&str, &str), b: (&str, &str)) -> Result<(), Reply> {
    if get(v, a.0, a.1).is_some() && get(v, b.0, b.1).is_some() {
        return Err(invalid(&format!(
            "* GenerateContentRequest.{at}: {} and {} are mutually exclusive; set only one.",
            a.1, b.1
        )));
    }
    Ok(())
}

fn get<'a>(v: &'a Value, camel: &str, snake: &str) -> Option<&'a Value> {
    v.get(camel)
        .or_else(|| v.get(snake))
        .filter(|x| !x.is_null())
}

fn parts_text(parts: &Value, out: &mut String) {
    if let Some(a) = parts.as_array() {
        for p in a {
            if let Some(t) = p.get("text").and_then(Value::as_str) {
                out.push_str(t);
            }
            for k in [
                "functionCall",
                "function_call",
                "functionResponse",
                "function_response",
            ] {
                if let Some(f) = p.get(k) {
                    out.push_str(&f.to_string());
                }
            }
        }
    }
}

fn call_names(parts: &[Value], camel: &str, snake: &str) -> Vec<String> {
    parts
        .iter()
        .filter_map(|p| get(p, camel, snake))
        .map(|f| {
            f.get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

pub async fn generate(ctx: &Ctx<'_>, model: String, stream: bool) -> Outcome {
    let m = Some(model.clone());
    let method = if stream {
        "streamGenerateContent"
    } else {
        "generateContent"
    };
    if !ctx.provider.has_model(&model) || is_embedding_model(&model) {
        return (not_found(&model, method), m);
    }
    let req = match parse(ctx) {
        Ok(v) => v,
        Err(r) => return (r, m),
    };
    if let Err(r) = check_shape(&shapes::GENERATE, &req) {
        return (r, m);
    }
    let Some(contents) = req
        .get("contents")
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
    else {
        return (
            invalid("* GenerateContentRequest.contents: contents is not specified"),
            m,
        );
    };
    let mut prompt = String::new();
    // Where the system instruction's and each content's text ends in
    // `prompt` (the implicit cache's blocks).
    let mut ends: Vec<usize> = Vec::with_capacity(contents.len() + 1);
    let system = get(&req, "systemInstruction", "system_instruction");
    if let Some(si) = system {
        parts_text(si.get("parts").unwrap_or(&Value::Null), &mut prompt);
        ends.push(prompt.len());
    }
    let mut echo = String::new();
    let mut prev_calls: Vec<String> = Vec::new();
    let mut prev_role = "";
    let mut script = Script::default();
    for (i, c) in contents.iter().enumerate() {
        let role = c.get("role").and_then(Value::as_str).unwrap_or("user");
        if role != "user" && role != "model" {
            return (invalid("Please use a valid role: user, model."), m);
        }
        let Some(parts) = c
            .get("parts")
            .and_then(Value::as_array)
            .filter(|p| !p.is_empty())
        else {
            return (invalid(&format!("* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty.")), m);
        };
        for (j, p) in parts.iter().enumerate() {
            let data: Vec<&str> = shapes::PART_DATA
                .iter()
                .copied()
                .filter(|k| p.get(*k).is_some_and(|x| !x.is_null()))
                .collect();
            if data.is_empty() {
                return (invalid(&format!("* GenerateContentRequest.contents[{i}].parts[{j}].data: required oneof field 'data' must have one initialized field")), m);
            }
            if let Some(second) = data.get(1) {
                return (invalid(&format!("Invalid JSON payload received. Oneof field 'data' is already set. Cannot set '{second}' at 'contents[{i}].parts[{j}]'")), m);
            }
            if p.get("text").and_then(Value::as_str) == Some("") {
                return (invalid("Unable to submit request because it has an empty text parameter. Add a value to the parameter and try again."), m);
            }
        }
        let calls = call_names(parts, "functionCall", "function_call");
        let responses = call_names(parts, "functionResponse", "function_response");
        if !calls.is_empty() && (role != "model" || prev_role != "user") {
            return (invalid("Please ensure that function call turn comes immediately after a user turn or after a function response turn."), m);
        }
        if !responses.is_empty() {
            let mut want = prev_calls.clone();
            let mut got = responses.clone();
            want.sort();
            got.sort();
            if role != "user" || prev_calls.is_empty() {
                return (invalid("Please ensure that function response turn comes immediately after a function call turn."), m);
            }
            if want != got {
                return (invalid("Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn."), m);
            }
        } else if !prev_calls.is_empty() {
            return (invalid("Please ensure that function response turn comes immediately after a function call turn."), m);
        }
        if role == "user" {
            for p in parts {
                if let Some(s) = p.get("text").and_then(Value::as_str) {
                    script.user_text(s);
                }
                if let Some(r) = get(p, "functionResponse", "function_response") {
                    if script.active() {
                        script.tool_result(script::value_text(
                            r.get("response").unwrap_or(&Value::Null),
                        ));
                    }
                }
            }
        }
        let mut t = String::new();
        parts_text(&Value::Array(parts.clone()), &mut t);
        if role == "user" && responses.is_empty() {
            echo = t.clone();
        }
        prompt.push_str(&t);
        ends.push(prompt.len());
        prev_calls = calls;
        prev_role = if role == "user" { "user" } else { "model" };
    }
    // Tools and tool config.
    let empty = json!({});
    let mut tools: Vec<(String, &Value)> = Vec::new();
    if let Some(ts) = req.get("tools") {
        let Some(arr) = ts.as_array() else {
            return (
                invalid("Invalid JSON payload received. 'tools' must be a list."),
                m,
            );
        };
        for (i, t) in arr.iter().enumerate() {
            if let Some(decls) =
                get(t, "functionDeclarations", "function_declarations").and_then(Value::as_array)
            {
                for (j, d) in decls.iter().enumerate() {
                    let at = format!("tools[{i}].function_declarations[{j}]");
                    let Some(name) = d
                        .get("name")
                        .and_then(Value::as_str)
                        .filter(|n| !n.is_empty())
                    else {
                        return (
                            invalid(&format!(
                                "* GenerateContentRequest.{at}.name: Name cannot be empty."
                            )),
                            m,
                        );
                    };
                    for (a, b) in [
                        (
                            ("parameters", "parameters"),
                            ("parametersJsonSchema", "parameters_json_schema"),
                        ),
                        (
                            ("response", "response"),
                            ("responseJsonSchema", "response_json_schema"),
                        ),
                    ] {
                        if let Err(r) = exclusive(d, &at, a, b) {
                            return (r, m);
                        }
                    }
                    let schema = get(d, "parameters", "parameters")
                        .or_else(|| get(d, "parametersJsonSchema", "parameters_json_schema"))
                        .unwrap_or(&empty);
                    tools.push((name.to_string(), schema));
                }
            }
        }
    }
    let (mut forced, mut any) = (None, false);
    if let Some(fc) = get(&req, "toolConfig", "tool_config")
        .and_then(|tc| get(tc, "functionCallingConfig", "function_calling_config"))
    {
        let mode = fc.get("mode").and_then(Value::as_str).unwrap_or("AUTO");
        match mode {
            "AUTO" | "NONE" | "MODE_UNSPECIFIED" | "VALIDATED" => {}
            "ANY" => {
                if tools.is_empty() {
                    return (invalid("* GenerateContentRequest.tool_config.function_calling_config.mode: specified function calling mode requires tools to be specified."), m);
                }
                match get(fc, "allowedFunctionNames", "allowed_function_names").and_then(Value::as_array).and_then(|a| a.first()).and_then(Value::as_str) {
                    Some(n) => {
                        if !tools.iter().any(|t| t.0 == n) {
                            return (invalid(&format!("* GenerateContentRequest.tool_config.function_calling_config.allowed_function_names: function {n} is not declared.")), m);
                        }
                        forced = Some(n.to_string());
                    }
                    None => any = true,
                }
            }
            other => return (invalid(&format!("Invalid value at 'tool_config.function_calling_config.mode' (type.googleapis.com/google.ai.generativelanguage.v1beta.FunctionCallingConfig.Mode), \"{other}\"")), m),
        }
    }
    if let Some(gc) = get(&req, "generationConfig", "generation_config") {
        for (camel, snake, hi) in [("temperature", "temperature", 2.0), ("topP", "top_p", 1.0)] {
            if !http::in_range(get(gc, camel, snake), 0.0, hi) {
                return (invalid(&format!("* GenerateContentRequest.generation_config.{snake}: must be within [0, {hi}]")), m);
            }
        }
        if let Some(tc) = get(gc, "thinkingConfig", "thinking_config") {
            // The proto: an error "if this field is set for models that
            // don't support thinking"; the API's words for gemini-2.0-flash.
            if !ctx.provider.thinks(&model) {
                return (invalid("thinking_config is not supported."), m);
            }
            if let Err(e) = check_thinking(tc) {
                return (invalid(&e), m);
            }
        }
        if let Err(r) = exclusive(
            gc,
            "generation_config",
            ("responseSchema", "response_schema"),
            ("responseJsonSchema", "response_json_schema"),
        ) {
            return (r, m);
        }
        let schema = get(gc, "responseSchema", "response_schema")
            .or_else(|| get(gc, "responseJsonSchema", "response_json_schema"));
        let mime = get(gc, "responseMimeType", "response_mime_type").and_then(Value::as_str);
        if schema.is_some() && !matches!(mime, Some("application/json" | "text/x.enum")) {
            return (invalid("* GenerateContentRequest.generation_config.response_mime_type: a response schema needs response_mime_type application/json or text/x.enum."), m);
        }
    }
    let max_out = get(&req, "generationConfig", "generation_config")
        .and_then(|g| get(g, "maxOutputTokens", "max_output_tokens"));
    let max_tokens = match max_out {
        None => None,
        Some(v) => {
            let n = v
                .as_i64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
                .unwrap_or(0);
            let limit = ctx.provider.output_limit(&model);
            if n < 1 || limit.is_some_and(|l| n as u64 > l) {
                let end = limit.map_or(String::new(), |l| format!(" to {} (exclusive)", l + 1));
                return (invalid(&format!("Unable to submit request because it has a maxOutputTokens value of {n} but the supported range is from 1 (inclusive){end}. Update the value and try again.")), m);
            }
            Some(n as u64)
        }
    };
    let prompt_chars = prompt.chars().count();
    // The implicit cache (Gemini 2.5 and later): tools, the system
    // instruction, then one block per content.
    let cached = match ctx.prompt_cache(&model) {
        Some(kc) if kc.applies(prompt_chars) => {
            let mut b = Blocks::new();
            for (camel, snake) in [("tools", "tools"), ("toolConfig", "tool_config")] {
                if let Some(v) = get(&req, camel, snake) {
                    b.feed(v);
                }
            }
            let items = system.into_iter().chain(contents);
            items.zip(&ends).for_each(|(v, &end)| b.block(v, end));
            kc.apply(&b.marks(&prompt), http::now_ms()).read
        }
        _ => 0,
    };
    let g = GenInput {
        echo,
        prompt_chars,
        tools,
        forced_tool: forced,
        any_tool: any,
        max_tokens,
        tool_id_prefix: "",
        script,
    };
    let p = match plan(ctx, g) {
        Ok(p) => p,
        Err(e) => return (invalid(&e), m),
    };
    let finish = if p.truncated { "MAX_TOKENS" } else { "STOP" };
    let mut usage = json!({
        "promptTokenCount": p.prompt_tokens,
        "candidatesTokenCount": p.completion_tokens,
        "totalTokenCount": p.prompt_tokens + p.completion_tokens,
    });
    // Part of promptTokenCount; left out at zero, as proto3 JSON does.
    if cached > 0 {
        usage["cachedContentTokenCount"] = json!(cached);
    }
    let response_id = ctx.request_id.clone();
    let candidate = |parts: Value, finish: Option<&str>| {
        let mut c = json!({"content": {"parts": parts, "role": "model"}, "index": 0});
        if let Some(f) = finish {
            c["finishReason"] = json!(f);
        }
        c
    };
    if !stream {
        let parts = match &p.output {
            Output::Text(t) => json!([{"text": t}]),
            Output::Tool { name, args, .. } => {
                json!([{"functionCall": {"name": name, "args": args}}])
            }
        };
        let v = json!({
            "candidates": [candidate(parts, Some(finish))],
            "usageMetadata": usage, "modelVersion": model, "responseId": response_id,
        });
        return (ctx.json_ok(&v, &[]).await, m);
    }
    let sse = ctx.query_param("alt").as_deref() == Some("sse");
    let frame = |d: &Value, lead: bool| -> Bytes {
        let mut s = Vec::with_capacity(256);
        if sse {
            s.extend_from_slice(b"data: ");
        } else if lead {
            s.extend_from_slice(b",\r\n");
        }
        let _ = serde_json::to_writer(&mut s, d);
        if sse {
            s.extend_from_slice(b"\r\n\r\n");
        }
        Bytes::from(s)
    };
    let mut head = Vec::new();
    if !sse {
        head.push(Bytes::from_static(b"["));
    }
    let (content, mut tail) = match p.output {
        Output::Text(t) => (t, Vec::new()),
        Output::Tool { name, args, .. } => {
            let d = json!({
                "candidates": [candidate(json!([{"functionCall": {"name": name, "args": args}}]), Some(finish))],
                "usageMetadata": usage, "modelVersion": model, "responseId": response_id,
            });
            (String::new(), vec![frame(&d, false)])
        }
    };
    let has_content = !content.is_empty();
    let doc = |last: bool| {
        let mut d = json!({
            "candidates": [candidate(json!([{"text": render::PIECE}]), if last { Some(finish) } else { None })],
            "modelVersion": model, "responseId": response_id,
        });
        d["usageMetadata"] = if last {
            usage.clone()
        } else {
            json!({"promptTokenCount": p.prompt_tokens, "totalTokenCount": p.prompt_tokens})
        };
        d
    };
    let tpl = [
        render::Template::new(&frame(&doc(false), false)),
        render::Template::new(&frame(&doc(true), false)),
        render::Template::new(&frame(&doc(false), true)),
        render::Template::new(&frame(&doc(true), true)),
    ];
    let render: crate::core::body::Render = Box::new(move |i, piece, last| {
        let k = usize::from(last) + if i > 0 { 2 } else { 0 };
        tpl[k].render(piece)
    });
    let err = json!({"error": {"code": 503, "message": "The model is overloaded. Please try again later.", "status": "UNAVAILABLE"}});
    if sse {
        let err = Bytes::from(format!("data: {err}\r\n\r\n"));
        (
            ctx.stream("text/event-stream", head, content, render, tail, &[], err),
            m,
        )
    } else {
        // A JSON array delivered incrementally.
        tail.push(Bytes::from_static(b"]"));
        let lead = if has_content { ",\r\n" } else { "" };
        let err = Bytes::from(format!("{lead}{err}]"));
        (
            ctx.stream(
                "application/json; charset=UTF-8",
                head,
                content,
                render,
                tail,
                &[],
                err,
            ),
            m,
        )
    }
}

fn embed_one(req: &Value, idx: Option<usize>, path_model: &str) -> Result<(String, usize), Reply> {
    let pre = idx.map(|i| format!("requests[{i}].")).unwrap_or_default();
    if idx.is_none() {
        check_shape(&shapes::EMBED, req)?;
    }
    if let Some(m) = req.get("model").and_then(Value::as_str) {
        if m.strip_prefix("models/").unwrap_or(m) != path_model {
            return Err(invalid(&format!("* BatchEmbedContentsRequest.{pre}model: model in the request ({m}) does not match the model in the URL (models/{path_model}).")));
        }
    } else if idx.is_some() {
        return Err(invalid(&format!(
            "* BatchEmbedContentsRequest.{pre}model: unexpected model name format"
        )));
    }
    let Some(parts) = req
        .pointer("/content/parts")
        .and_then(Value::as_array)
        .filter(|p| !p.is_empty())
    else {
        return Err(invalid(&format!(
            "* EmbedContentRequest.{pre}content: contents is not specified"
        )));
    };
    let mut t = String::new();
    parts_text(&Value::Array(parts.clone()), &mut t);
    let dims = match get(req, "outputDimensionality", "output_dimensionality") {
        None => 768,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=3072).contains(&n) => n as usize,
            _ => {
                return Err(invalid(
                    "* EmbedContentRequest.output_dimensionality: must be a positive integer.",
                ))
            }
        },
    };
    Ok((t, dims))
}

pub async fn embed(ctx: &Ctx<'_>, model: String, batch: bool) -> Outcome {
    let m = Some(model.clone());
    let method = if batch {
        "batchEmbedContents"
    } else {
        "embedContent"
    };
    if !ctx.provider.has_model(&model) || !is_embedding_model(&model) {
        return (not_found(&model, method), m);
    }
    let req = match parse(ctx) {
        Ok(v) => v,
        Err(r) => return (r, m),
    };
    let v = if batch {
        if let Err(r) = check_shape(&shapes::BATCH_EMBED, &req) {
            return (r, m);
        }
        let Some(reqs) = req
            .get("requests")
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty())
        else {
            return (
                invalid("* BatchEmbedContentsRequest.requests: requests is not specified"),
                m,
            );
        };
        let mut out = Vec::with_capacity(reqs.len());
        for (i, r) in reqs.iter().enumerate() {
            match embed_one(r, Some(i), &model) {
                Ok((t, d)) => out.push(json!({"values": crate::core::text::embedding(&t, d)})),
                Err(e) => return (e, m),
            }
        }
        json!({"embeddings": out})
    } else {
        match embed_one(&req, None, &model) {
            Ok((t, d)) => json!({"embedding": {"values": crate::core::text::embedding(&t, d)}}),
            Err(e) => return (e, m),
        }
    };
    (ctx.json_ok(&v, &[]).await, m)
}
