//! The deterministic answer shared by every provider: echo text or a call
//! of a declared tool, and its token counts.

use crate::core::ctx::Ctx;
use crate::core::script::{Next, Script};
use crate::core::text;
use serde_json::Value;

/// The output of a generation.
pub enum Output {
    Text(String),
    Tool {
        id: String,
        name: String,
        args: Value,
    },
}

pub struct Plan {
    pub output: Output,
    /// Stopped by the output token limit.
    pub truncated: bool,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl Plan {
    pub fn text(&self) -> &str {
        match &self.output {
            Output::Text(t) => t,
            Output::Tool { .. } => "",
        }
    }
    pub fn is_tool(&self) -> bool {
        matches!(self.output, Output::Tool { .. })
    }
    /// Why the answer stopped, as Anthropic and Bedrock name it.
    pub fn stop_reason(&self) -> &'static str {
        if self.is_tool() {
            "tool_use"
        } else if self.truncated {
            "max_tokens"
        } else {
            "end_turn"
        }
    }
}

/// Inputs of a generation, extracted by each provider module.
pub struct GenInput<'a> {
    /// Text the answer echoes: the last user message's text.
    pub echo: String,
    /// Characters of all prompt text (system, messages, tool data).
    pub prompt_chars: usize,
    /// Declared tools: (name, JSON schema of the arguments).
    pub tools: Vec<(String, &'a Value)>,
    /// Tool the request forces (by name), if any.
    pub forced_tool: Option<String>,
    /// The request asks for some tool call without naming one.
    pub any_tool: bool,
    pub max_tokens: Option<u64>,
    /// Id prefix for tool calls (`call_`, `toolu_`, `tooluse_`).
    pub tool_id_prefix: &'static str,
    /// The `[[mock-tools: …]]` directive and the tool results after it.
    pub script: Script,
}

/// How many web searches the answer runs: `x-mock-web-searches` when the
/// request declares a tool whose type starts with `tool_type` (the
/// provider's web search tool), else none: without the tool the model
/// cannot search.
pub fn web_searches(ctx: &Ctx<'_>, req: &Value, tool_type: &str) -> u64 {
    let declared = req
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("type").and_then(Value::as_str))
        .any(|t| t.starts_with(tool_type));
    if declared {
        ctx.ov.web_searches
    } else {
        0
    }
}

/// Build the deterministic answer, in this order: a call of the tool named
/// by `x-mock-tool-call`; the scripted agent's next call, or its final
/// text (when the request declares tools; a request without tools, such as
/// a client's title request, gets the echo); a call of the tool the request
/// forces; else echo text.
pub fn plan(ctx: &Ctx<'_>, g: GenInput<'_>) -> Result<Plan, String> {
    if ctx.ov.tool_call.is_none() {
        match g.script.next() {
            Some(Err(e)) => return Err(e),
            Some(Ok(Next::Call(step))) if !g.tools.is_empty() => {
                if !g.tools.iter().any(|t| t.0 == step.name) {
                    return Err(format!(
                        "tool {:?} (the next step of the mock-tools directive) is not declared in the request",
                        step.name
                    ));
                }
                return Ok(tool_plan(ctx, &g, step.name.clone(), step.args.clone()));
            }
            Some(Ok(Next::Done(t))) => return Ok(text_plan(&g, t)),
            Some(Ok(Next::Call(_))) | None => {}
        }
    }
    let wanted = ctx
        .ov
        .tool_call
        .clone()
        .or(g.forced_tool.clone())
        .or_else(|| {
            if g.any_tool {
                g.tools.first().map(|t| t.0.clone())
            } else {
                None
            }
        });
    if let Some(name) = wanted {
        let Some((_, schema)) = g.tools.iter().find(|t| t.0 == name) else {
            return Err(format!("tool {name:?} is not declared in the request"));
        };
        let args = text::value_for_schema(schema, 0);
        return Ok(tool_plan(ctx, &g, name, args));
    }
    let (t, _) = text::answer(&g.echo, ctx.response_bytes(), None);
    Ok(text_plan(&g, t))
}

fn tool_plan(ctx: &Ctx<'_>, g: &GenInput<'_>, name: String, args: Value) -> Plan {
    let args_s = serde_json::to_string(&args).unwrap_or_default();
    let id = format!("{}{}", g.tool_id_prefix, text::short_id(ctx.body));
    Plan {
        completion_tokens: text::count_tokens(&args_s),
        output: Output::Tool { id, name, args },
        truncated: false,
        prompt_tokens: text::tokens_for_chars(g.prompt_chars),
    }
}

/// Text, cut to the request's output limit (4 characters a token).
fn text_plan(g: &GenInput<'_>, mut t: String) -> Plan {
    let max_chars = g.max_tokens.map(|m| (m as usize).saturating_mul(4));
    let mut truncated = false;
    if let Some(max) = max_chars {
        if t.chars().count() > max {
            t = t.chars().take(max).collect();
            truncated = true;
        }
    }
    Plan {
        completion_tokens: text::count_tokens(&t),
        output: Output::Text(t),
        truncated,
        prompt_tokens: text::tokens_for_chars(g.prompt_chars),
    }
}
