//! The Responses API's request members, as openai-python's
//! `types/responses/response_create_params.py` and the param types it names
//! define them (notes/openai.md §1–§3), plus `client_metadata`, which Codex
//! sends and the API accepts. Closed where the gateway builds the members
//! itself: the top level, `reasoning`, `text`, the input items a
//! conversation is made of (messages and their parts, function and custom
//! tool calls and outputs, reasoning items) and function, custom and
//! namespace tools. Hosted tools and the other item types are checked by
//! their `type` only: the API runs them and their members are its own.
//!
//! Codex replays items without `id`, `detail` or `annotations`: those are
//! optional here, as the notes (§3) say they must be.

use crate::core::shape::{field, list, req, Bounds, Enum, Field, Msg, Tagged, Ty, STR};

const fn e(name: &'static str, values: &'static [&'static str]) -> Enum {
    Enum {
        name,
        values,
        no_case: false,
    }
}

const fn tag() -> Field {
    field("type", STR)
}

// --- input items -------------------------------------------------------------

static DETAIL: Enum = e("detail", &["low", "high", "auto", "original"]);
static INPUT_TEXT: Msg = Msg::new(
    "input_text",
    &[
        req("text", STR),
        tag(),
        field("prompt_cache_breakpoint", Ty::Object),
    ],
);
static INPUT_IMAGE: Msg = Msg::new(
    "input_image",
    &[
        field("detail", Ty::Enum(&DETAIL)),
        field("image_url", STR),
        field("file_id", STR),
        tag(),
        field("prompt_cache_breakpoint", Ty::Object),
    ],
);
static INPUT_FILE: Msg = Msg::new(
    "input_file",
    &[
        field("file_id", STR),
        field("file_data", STR),
        field("file_url", STR),
        field("filename", STR),
        field("detail", STR),
        tag(),
        field("prompt_cache_breakpoint", Ty::Object),
    ],
);
static OUTPUT_TEXT: Msg = Msg::new(
    "output_text",
    &[
        req("text", STR),
        field("annotations", list(&Ty::Object)),
        field("logprobs", list(&Ty::Object)),
        tag(),
    ],
);
static REFUSAL: Msg = Msg::new("refusal", &[req("refusal", STR), tag()]);
static PARTS: Tagged = Tagged {
    name: "content",
    tag: "type",
    variants: &[
        ("input_text", &INPUT_TEXT),
        ("input_image", &INPUT_IMAGE),
        ("input_file", &INPUT_FILE),
        ("output_text", &OUTPUT_TEXT),
        ("refusal", &REFUSAL),
    ],
    untagged: None,
    betas: &[],
};
static CONTENT_KINDS: [Ty; 2] = [STR, list(&Ty::Tagged(&PARTS))];
/// A message's content or a tool output: a string or a list of parts.
const CONTENT: Ty = Ty::OneOf(&CONTENT_KINDS);

static ROLE: Enum = e("role", &["user", "assistant", "system", "developer"]);
static PHASE: Enum = e("phase", &["commentary", "final_answer"]);
static STATUS: Enum = e("status", &["in_progress", "completed", "incomplete"]);
static MESSAGE: Msg = Msg::new(
    "message",
    &[
        req("role", Ty::Enum(&ROLE)),
        req("content", CONTENT),
        tag(),
        field("phase", Ty::Enum(&PHASE)),
        field("id", STR),
        field("status", Ty::Enum(&STATUS)),
    ],
);
static FUNCTION_CALL: Msg = Msg::new(
    "function_call",
    &[
        req("arguments", STR),
        req("call_id", STR),
        req("name", STR),
        tag(),
        field("id", STR),
        field("namespace", STR),
        field("status", Ty::Enum(&STATUS)),
        field("caller", Ty::Object),
    ],
);
static FUNCTION_CALL_OUTPUT: Msg = Msg::new(
    "function_call_output",
    &[
        req("call_id", STR),
        req("output", CONTENT),
        tag(),
        field("id", STR),
        field("name", STR),
        field("namespace", STR),
        field("status", Ty::Enum(&STATUS)),
        field("caller", Ty::Object),
    ],
);
static CUSTOM_TOOL_CALL: Msg = Msg::new(
    "custom_tool_call",
    &[
        req("call_id", STR),
        req("input", STR),
        req("name", STR),
        tag(),
        field("id", STR),
        field("namespace", STR),
        field("caller", Ty::Object),
    ],
);
static CUSTOM_TOOL_CALL_OUTPUT: Msg = Msg::new(
    "custom_tool_call_output",
    &[
        req("call_id", STR),
        req("output", CONTENT),
        tag(),
        field("id", STR),
        field("name", STR),
        field("caller", Ty::Object),
    ],
);
static SUMMARY_TEXT: Msg = Msg::new("summary_text", &[req("text", STR), tag()]);
static REASONING_ITEM: Msg = Msg::new(
    "reasoning",
    &[
        req("summary", list(&Ty::Msg(&SUMMARY_TEXT))),
        tag(),
        field("id", STR),
        field("content", list(&Ty::Object)),
        field("encrypted_content", STR),
        field("status", Ty::Enum(&STATUS)),
    ],
);
/// The other item types of the SDK's input union: the API's own items,
/// passed back as it returned them.
static OTHER_ITEM: Msg = Msg::open("item", &[tag()]);

static ITEMS: Tagged = Tagged {
    name: "input",
    tag: "type",
    variants: &[
        ("message", &MESSAGE),
        ("function_call", &FUNCTION_CALL),
        ("function_call_output", &FUNCTION_CALL_OUTPUT),
        ("custom_tool_call", &CUSTOM_TOOL_CALL),
        ("custom_tool_call_output", &CUSTOM_TOOL_CALL_OUTPUT),
        ("reasoning", &REASONING_ITEM),
        ("file_search_call", &OTHER_ITEM),
        ("computer_call", &OTHER_ITEM),
        ("computer_call_output", &OTHER_ITEM),
        ("web_search_call", &OTHER_ITEM),
        ("tool_search_call", &OTHER_ITEM),
        ("tool_search_output", &OTHER_ITEM),
        ("additional_tools", &OTHER_ITEM),
        ("configuration_update", &OTHER_ITEM),
        ("compaction", &OTHER_ITEM),
        ("compaction_summary", &OTHER_ITEM),
        ("image_generation_call", &OTHER_ITEM),
        ("code_interpreter_call", &OTHER_ITEM),
        ("local_shell_call", &OTHER_ITEM),
        ("local_shell_call_output", &OTHER_ITEM),
        ("shell_call", &OTHER_ITEM),
        ("shell_call_output", &OTHER_ITEM),
        ("apply_patch_call", &OTHER_ITEM),
        ("apply_patch_call_output", &OTHER_ITEM),
        ("mcp_list_tools", &OTHER_ITEM),
        ("mcp_approval_request", &OTHER_ITEM),
        ("mcp_approval_response", &OTHER_ITEM),
        ("mcp_call", &OTHER_ITEM),
        ("compaction_trigger", &OTHER_ITEM),
        ("item_reference", &OTHER_ITEM),
        ("program", &OTHER_ITEM),
        ("program_output", &OTHER_ITEM),
    ],
    // EasyInputMessage: `type` optional.
    untagged: Some(("message", &MESSAGE)),
    betas: &[],
};

// --- tools -------------------------------------------------------------------

static CALLERS: Enum = e("allowed_callers", &["direct", "programmatic"]);
static FUNCTION_TOOL: Msg = Msg::new(
    "function",
    &[
        req("name", STR),
        field("parameters", Ty::Object),
        field("strict", Ty::Bool),
        field("description", STR),
        field("defer_loading", Ty::Bool),
        field("allowed_callers", list(&Ty::Enum(&CALLERS))),
        field("output_schema", Ty::Object),
        tag(),
    ],
);
static SYNTAX: Enum = e("syntax", &["lark", "regex"]);
static FORMAT_TEXT: Msg = Msg::new("text", &[tag()]);
static FORMAT_GRAMMAR: Msg = Msg::new(
    "grammar",
    &[
        req("definition", STR),
        req("syntax", Ty::Enum(&SYNTAX)),
        tag(),
    ],
);
static CUSTOM_FORMAT: Tagged = Tagged {
    name: "format",
    tag: "type",
    variants: &[("text", &FORMAT_TEXT), ("grammar", &FORMAT_GRAMMAR)],
    untagged: None,
    betas: &[],
};
static CUSTOM_TOOL: Msg = Msg::new(
    "custom",
    &[
        req("name", STR),
        field("description", STR),
        field("format", Ty::Tagged(&CUSTOM_FORMAT)),
        field("defer_loading", Ty::Bool),
        field("allowed_callers", list(&Ty::Enum(&CALLERS))),
        tag(),
    ],
);
static NAMESPACED: Tagged = Tagged {
    name: "tools",
    tag: "type",
    variants: &[("function", &FUNCTION_TOOL), ("custom", &CUSTOM_TOOL)],
    untagged: None,
    betas: &[],
};
static NAMESPACE_TOOL: Msg = Msg::new(
    "namespace",
    &[
        req("name", STR),
        field("description", STR),
        req("tools", list(&Ty::Tagged(&NAMESPACED))),
        tag(),
    ],
);
/// Hosted tools: run by the API, their members its own.
static HOSTED_TOOL: Msg = Msg::open("tool", &[tag()]);

/// The SDK's `ToolParam` union (`type` values).
pub static TOOLS: Tagged = Tagged {
    name: "tools",
    tag: "type",
    variants: &[
        ("function", &FUNCTION_TOOL),
        ("custom", &CUSTOM_TOOL),
        ("namespace", &NAMESPACE_TOOL),
        ("file_search", &HOSTED_TOOL),
        ("computer", &HOSTED_TOOL),
        ("computer_use", &HOSTED_TOOL),
        ("computer_use_preview", &HOSTED_TOOL),
        ("web_search", &HOSTED_TOOL),
        ("web_search_2025_08_26", &HOSTED_TOOL),
        ("web_search_preview", &HOSTED_TOOL),
        ("web_search_preview_2025_03_11", &HOSTED_TOOL),
        ("mcp", &HOSTED_TOOL),
        ("code_interpreter", &HOSTED_TOOL),
        ("programmatic_tool_calling", &HOSTED_TOOL),
        ("image_generation", &HOSTED_TOOL),
        ("local_shell", &HOSTED_TOOL),
        ("shell", &HOSTED_TOOL),
        ("tool_search", &HOSTED_TOOL),
        ("apply_patch", &HOSTED_TOOL),
    ],
    untagged: None,
    betas: &[],
};

// --- request-level members ---------------------------------------------------

static EFFORT: Enum = e(
    "effort",
    &["none", "minimal", "low", "medium", "high", "xhigh", "max"],
);
static SUMMARY: Enum = e("summary", &["auto", "concise", "detailed"]);
static CONTEXT: Enum = e("context", &["auto", "current_turn", "all_turns"]);
static REASONING: Msg = Msg::new(
    "reasoning",
    &[
        field("effort", Ty::Enum(&EFFORT)),
        field("summary", Ty::Enum(&SUMMARY)),
        field("generate_summary", Ty::Enum(&SUMMARY)),
        field("context", Ty::Enum(&CONTEXT)),
        field("mode", STR),
    ],
);
static FORMAT_SCHEMA: Msg = Msg::new(
    "json_schema",
    &[
        req("name", STR),
        req("schema", Ty::Object),
        field("description", STR),
        field("strict", Ty::Bool),
        tag(),
    ],
);
static TEXT_FORMAT: Tagged = Tagged {
    name: "format",
    tag: "type",
    variants: &[
        ("text", &FORMAT_TEXT),
        ("json_object", &FORMAT_TEXT),
        ("json_schema", &FORMAT_SCHEMA),
    ],
    untagged: None,
    betas: &[],
};
static VERBOSITY: Enum = e("verbosity", &["low", "medium", "high"]);
static TEXT: Msg = Msg::new(
    "text",
    &[
        field("format", Ty::Tagged(&TEXT_FORMAT)),
        field("verbosity", Ty::Enum(&VERBOSITY)),
    ],
);
static INCLUDABLE: Enum = e(
    "include",
    &[
        "file_search_call.results",
        "web_search_call.results",
        "web_search_call.action.sources",
        "message.input_image.image_url",
        "computer_call_output.output.image_url",
        "code_interpreter_call.outputs",
        "reasoning.encrypted_content",
        "message.output_text.logprobs",
    ],
);
static SERVICE_TIER: Enum = e(
    "service_tier",
    &[
        "auto",
        "default",
        "flex",
        "scale",
        "priority",
        "fast",
        "ultrafast",
    ],
);
static TRUNCATION: Enum = e("truncation", &["auto", "disabled"]);
static RETENTION: Enum = e("prompt_cache_retention", &["in_memory", "24h"]);

/// `responses.create`'s parameters.
pub static CREATE: Msg = Msg::new(
    "ResponseCreateParams",
    &[
        field("access_programs", Ty::Object),
        field("background", Ty::Bool),
        field("background_options", Ty::Object),
        field(
            "client_metadata",
            Ty::Map(&STR, crate::core::shape::Len::ANY),
        ),
        field("context_management", list(&Ty::Object)),
        field("conversation", Ty::Any),
        field("image", Ty::Object),
        field("include", list(&Ty::Enum(&INCLUDABLE))),
        field("input", Ty::OneOf(&[STR, list(&Ty::Tagged(&ITEMS))])),
        field("instructions", STR),
        field("max_output_tokens", Ty::INT),
        field(
            "max_tool_calls",
            Ty::Int(Bounds {
                min: Some(0.0),
                max: None,
            }),
        ),
        field("metadata", Ty::Map(&STR, crate::core::shape::Len::ANY)),
        field("model", STR),
        field("moderation", Ty::Object),
        field("parallel_tool_calls", Ty::Bool),
        field("previous_response_id", STR),
        field("prompt", Ty::Object),
        field("prompt_cache_key", STR),
        field("prompt_cache_options", Ty::Object),
        field("prompt_cache_retention", Ty::Enum(&RETENTION)),
        field("reasoning", Ty::Msg(&REASONING)),
        field("safety_identifier", STR),
        field("service_tier", Ty::Enum(&SERVICE_TIER)),
        field("store", Ty::Bool),
        field("stream", Ty::Bool),
        field("stream_options", Ty::Object),
        field("temperature", Ty::NUM),
        field("text", Ty::Msg(&TEXT)),
        field("tool_choice", Ty::Any),
        field("tools", list(&Ty::Tagged(&TOOLS))),
        field("top_logprobs", Ty::INT),
        field("top_p", Ty::NUM),
        field("truncation", Ty::Enum(&TRUNCATION)),
        field("user", STR),
    ],
);
