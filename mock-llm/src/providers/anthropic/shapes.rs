//! The Messages API's request types, as its validator reads them: every
//! object is closed ("Extra inputs are not permitted"), a union member is
//! chosen by its `type` (which then names a path step:
//! `messages.1.content.0.thinking.cache_control`), and members that only
//! the beta API has exist only with their `anthropic-beta` header.
//!
//! Source: anthropic-sdk-python's `types/message_create_params.py` and the
//! param types it names (stable surface), `types/beta/…` for what a beta
//! header adds, and the real errors in notes/anthropic.md §1, §3, §5. A few
//! nested types the gateway only passes back (server tools' result
//! contents, citations, browser state) are open: their own members are not
//! listed here.

use crate::core::shape::{beta, field, list, req, Bounds, Enum, Field, Msg, Tagged, Ty, STR};

const fn e(name: &'static str, values: &'static [&'static str]) -> Enum {
    Enum {
        name,
        values,
        no_case: false,
    }
}

/// A single-value `type` (the tag; checked by the union, listed so that it
/// is not an extra input).
const fn tag() -> Field {
    field("type", STR)
}

// --- cache_control -----------------------------------------------------------

static TTL: Enum = e("ttl", &["5m", "1h"]);
static EPHEMERAL: Msg = Msg::new(
    "CacheControlEphemeral",
    &[
        tag(),
        field("ttl", Ty::Enum(&TTL)),
        // Claude Code's prompt-caching scope: only with its beta.
        beta("scope", STR, &["prompt-caching-scope-"]),
    ],
);
static CACHE_CONTROL_UNION: Tagged = Tagged {
    name: "cache_control",
    tag: "type",
    variants: &[("ephemeral", &EPHEMERAL)],
    untagged: None,
    betas: &[],
};
const CACHE: Ty = Ty::Tagged(&CACHE_CONTROL_UNION);

// --- content blocks ----------------------------------------------------------

static TEXT: Msg = Msg::new(
    "TextBlockParam",
    &[
        req("text", STR),
        tag(),
        field("cache_control", CACHE),
        field("citations", list(&Ty::Object)),
    ],
);
/// A `system` list item: a text block whose `type` is required.
pub static SYSTEM_TEXT: Msg = Msg::new(
    "TextBlockParam",
    &[
        req("text", STR),
        req("type", Ty::Enum(&TEXT_TYPE)),
        field("cache_control", CACHE),
        field("citations", list(&Ty::Object)),
    ],
);
static TEXT_TYPE: Enum = e("type", &["text"]);

static IMAGE_MEDIA: Enum = e(
    "media_type",
    &["image/jpeg", "image/png", "image/gif", "image/webp"],
);
static IMAGE_BASE64: Msg = Msg::new(
    "Base64ImageSource",
    &[
        req("data", STR),
        req("media_type", Ty::Enum(&IMAGE_MEDIA)),
        tag(),
    ],
);
static URL_SOURCE: Msg = Msg::new("URLSource", &[req("url", STR), tag()]);
static FILE_SOURCE: Msg = Msg::new("FileSource", &[req("file_id", STR), tag()]);
static IMAGE_SOURCE: Tagged = Tagged {
    name: "source",
    tag: "type",
    variants: &[
        ("base64", &IMAGE_BASE64),
        ("url", &URL_SOURCE),
        ("file", &FILE_SOURCE),
    ],
    untagged: None,
    betas: &[],
};
static OVERSIZED: Enum = e("oversized_image", &["downsize", "error"]);
static TRANSFORMATIONS: Msg = Msg::new(
    "ImageTransformations",
    &[field("oversized_image", Ty::Enum(&OVERSIZED))],
);
static IMAGE: Msg = Msg::new(
    "ImageBlockParam",
    &[
        req("source", Ty::Tagged(&IMAGE_SOURCE)),
        tag(),
        field("cache_control", CACHE),
        field("transformations", Ty::Msg(&TRANSFORMATIONS)),
    ],
);

static PDF_MEDIA: Enum = e("media_type", &["application/pdf"]);
static TEXT_MEDIA: Enum = e("media_type", &["text/plain"]);
static PDF_BASE64: Msg = Msg::new(
    "Base64PDFSource",
    &[
        req("data", STR),
        req("media_type", Ty::Enum(&PDF_MEDIA)),
        tag(),
    ],
);
static PLAIN_TEXT: Msg = Msg::new(
    "PlainTextSource",
    &[
        req("data", STR),
        req("media_type", Ty::Enum(&TEXT_MEDIA)),
        tag(),
    ],
);
static DOC_CONTENT_BLOCKS: Tagged = Tagged {
    name: "content",
    tag: "type",
    variants: &[("text", &TEXT), ("image", &IMAGE)],
    untagged: None,
    betas: &[],
};
static CONTENT_SOURCE: Msg = Msg::new(
    "ContentBlockSource",
    &[
        req(
            "content",
            Ty::OneOf(&[STR, list(&Ty::Tagged(&DOC_CONTENT_BLOCKS))]),
        ),
        tag(),
    ],
);
static DOCUMENT_SOURCE: Tagged = Tagged {
    name: "source",
    tag: "type",
    variants: &[
        ("base64", &PDF_BASE64),
        ("text", &PLAIN_TEXT),
        ("content", &CONTENT_SOURCE),
        ("url", &URL_SOURCE),
        ("file", &FILE_SOURCE),
    ],
    untagged: None,
    betas: &[],
};
static CITATIONS_CONFIG: Msg = Msg::new("CitationsConfig", &[field("enabled", Ty::Bool)]);
static DOCUMENT: Msg = Msg::new(
    "DocumentBlockParam",
    &[
        req("source", Ty::Tagged(&DOCUMENT_SOURCE)),
        tag(),
        field("cache_control", CACHE),
        field("citations", Ty::Msg(&CITATIONS_CONFIG)),
        field("context", STR),
        field("title", STR),
    ],
);
static SEARCH_RESULT: Msg = Msg::new(
    "SearchResultBlockParam",
    &[
        req("content", list(&Ty::Msg(&TEXT))),
        req("source", STR),
        req("title", STR),
        tag(),
        field("cache_control", CACHE),
        field("citations", Ty::Msg(&CITATIONS_CONFIG)),
    ],
);
static THINKING: Msg = Msg::new(
    "ThinkingBlockParam",
    &[req("signature", STR), req("thinking", STR), tag()],
);
static REDACTED_THINKING: Msg = Msg::new("RedactedThinkingBlockParam", &[req("data", STR), tag()]);
static DIRECT_CALLER: Msg = Msg::new("DirectCaller", &[tag()]);
static SERVER_CALLER: Msg = Msg::new("ServerToolCaller", &[req("tool_id", STR), tag()]);
static CALLER: Tagged = Tagged {
    name: "caller",
    tag: "type",
    variants: &[
        ("direct", &DIRECT_CALLER),
        ("code_execution_20250825", &SERVER_CALLER),
        ("code_execution_20260120", &SERVER_CALLER),
    ],
    untagged: None,
    betas: &[],
};
static TOOL_USE: Msg = Msg::new(
    "ToolUseBlockParam",
    &[
        req("id", STR),
        req("input", Ty::Object),
        req("name", STR),
        tag(),
        field("cache_control", CACHE),
        field("caller", Ty::Tagged(&CALLER)),
        field("toolset_name", STR),
    ],
);
static TOOL_REFERENCE: Msg = Msg::new(
    "ToolReferenceBlockParam",
    &[req("tool_name", STR), tag(), field("cache_control", CACHE)],
);
static BROWSER_STATE: Msg = Msg::open(
    "BrowserStateBlockParam",
    &[
        req("tabs", list(&Ty::Object)),
        tag(),
        field("cache_control", CACHE),
    ],
);
static TOOL_RESULT_BLOCKS: Tagged = Tagged {
    name: "content",
    tag: "type",
    variants: &[
        ("text", &TEXT),
        ("image", &IMAGE),
        ("search_result", &SEARCH_RESULT),
        ("document", &DOCUMENT),
        ("tool_reference", &TOOL_REFERENCE),
        ("browser_state", &BROWSER_STATE),
    ],
    untagged: None,
    betas: &[],
};
static TOOL_RESULT: Msg = Msg::new(
    "ToolResultBlockParam",
    &[
        req("tool_use_id", STR),
        tag(),
        field("cache_control", CACHE),
        field(
            "content",
            Ty::OneOf(&[STR, list(&Ty::Tagged(&TOOL_RESULT_BLOCKS))]),
        ),
        field("is_error", Ty::Bool),
        field("toolset_name", STR),
    ],
);
static SERVER_TOOL_NAME: Enum = e(
    "name",
    &[
        "web_search",
        "web_fetch",
        "code_execution",
        "bash_code_execution",
        "text_editor_code_execution",
        "tool_search_tool_regex",
        "tool_search_tool_bm25",
    ],
);
static SERVER_TOOL_USE: Msg = Msg::new(
    "ServerToolUseBlockParam",
    &[
        req("id", STR),
        req("input", Ty::Object),
        req("name", Ty::Enum(&SERVER_TOOL_NAME)),
        tag(),
        field("cache_control", CACHE),
        field("caller", Ty::Tagged(&CALLER)),
    ],
);
/// The result blocks of Anthropic's server tools, passed back as the API
/// returned them: their `content` is not listed here.
static SERVER_TOOL_RESULT: Msg = Msg::new(
    "ServerToolResultBlockParam",
    &[
        req("content", Ty::Any),
        req("tool_use_id", STR),
        tag(),
        field("cache_control", CACHE),
        field("caller", Ty::Tagged(&CALLER)),
    ],
);
static CONTAINER_UPLOAD: Msg = Msg::new(
    "ContainerUploadBlockParam",
    &[req("file_id", STR), tag(), field("cache_control", CACHE)],
);
/// Blocks of the beta API (MCP, compaction, advisor, tool changes,
/// fallbacks): open, and only with their beta header.
static BETA_BLOCK: Msg = Msg::open("BetaContentBlockParam", &[tag()]);

static BLOCKS: Tagged = Tagged {
    name: "content",
    tag: "type",
    variants: &[
        ("text", &TEXT),
        ("image", &IMAGE),
        ("document", &DOCUMENT),
        ("search_result", &SEARCH_RESULT),
        ("thinking", &THINKING),
        ("redacted_thinking", &REDACTED_THINKING),
        ("tool_use", &TOOL_USE),
        ("tool_result", &TOOL_RESULT),
        ("server_tool_use", &SERVER_TOOL_USE),
        ("web_search_tool_result", &SERVER_TOOL_RESULT),
        ("web_fetch_tool_result", &SERVER_TOOL_RESULT),
        ("code_execution_tool_result", &SERVER_TOOL_RESULT),
        ("bash_code_execution_tool_result", &SERVER_TOOL_RESULT),
        (
            "text_editor_code_execution_tool_result",
            &SERVER_TOOL_RESULT,
        ),
        ("tool_search_tool_result", &SERVER_TOOL_RESULT),
        ("container_upload", &CONTAINER_UPLOAD),
        ("mcp_tool_use", &BETA_BLOCK),
        ("mcp_tool_result", &BETA_BLOCK),
        ("mcp_tool_listing", &BETA_BLOCK),
        ("compaction", &BETA_BLOCK),
        ("advisor_tool_result", &BETA_BLOCK),
        ("tool_addition", &BETA_BLOCK),
        ("tool_removal", &BETA_BLOCK),
        ("fallback", &BETA_BLOCK),
    ],
    untagged: None,
    betas: &[
        ("mcp_tool_use", &["mcp-client-"]),
        ("mcp_tool_result", &["mcp-client-"]),
        ("mcp_tool_listing", &["mcp-client-"]),
        ("compaction", &["compact-"]),
        ("advisor_tool_result", &["advisor-tool-"]),
        ("tool_addition", &["mid-conversation-tool-changes-"]),
        ("tool_removal", &["mid-conversation-tool-changes-"]),
        ("fallback", &["server-side-fallback-"]),
    ],
};

static ROLE: Enum = e("role", &["user", "assistant", "system"]);
static MESSAGE: Msg = Msg::new(
    "MessageParam",
    &[
        req("role", Ty::Enum(&ROLE)),
        req("content", Ty::OneOf(&[STR, list(&Ty::Tagged(&BLOCKS))])),
    ],
);

// --- tools -------------------------------------------------------------------

static CALLERS: Enum = e(
    "allowed_callers",
    &[
        "direct",
        "code_execution_20250825",
        "code_execution_20260120",
        "code_execution_20260521",
    ],
);

static CUSTOM_TOOL: Msg = Msg::new(
    "ToolParam",
    &[
        req("input_schema", Ty::Object),
        req("name", STR),
        field("allowed_callers", list(&Ty::Enum(&CALLERS))),
        field("cache_control", CACHE),
        field("defer_loading", Ty::Bool),
        field("description", STR),
        field("eager_input_streaming", Ty::Bool),
        field("input_examples", list(&Ty::Object)),
        field("strict", Ty::Bool),
        tag(),
    ],
);

/// An Anthropic-defined tool: its fixed name, and the optional members
/// every such tool has, plus its own.
macro_rules! fixed_tool {
    ($id:ident, $enum_id:ident, $name:literal, [$($extra:expr),*]) => {
        static $enum_id: Enum = e("name", &[$name]);
        static $id: Msg = Msg::new(
            "ToolParam",
            &[
                req("name", Ty::Enum(&$enum_id)),
                tag(),
                field("allowed_callers", list(&Ty::Enum(&CALLERS))),
                field("cache_control", CACHE),
                field("defer_loading", Ty::Bool),
                field("strict", Ty::Bool),
                $($extra,)*
            ],
        );
    };
}

fixed_tool!(
    BASH,
    BASH_NAME,
    "bash",
    [field("input_examples", list(&Ty::Object))]
);
fixed_tool!(CODE_EXECUTION, CODE_EXECUTION_NAME, "code_execution", []);
fixed_tool!(
    MEMORY,
    MEMORY_NAME,
    "memory",
    [field("input_examples", list(&Ty::Object))]
);
fixed_tool!(
    EDITOR_OLD,
    EDITOR_OLD_NAME,
    "str_replace_editor",
    [field("input_examples", list(&Ty::Object))]
);
fixed_tool!(
    EDITOR,
    EDITOR_NAME,
    "str_replace_based_edit_tool",
    [
        field("input_examples", list(&Ty::Object)),
        field("max_characters", Ty::INT)
    ]
);
static USER_LOCATION: Msg = Msg::new(
    "UserLocation",
    &[
        req("type", Ty::Enum(&APPROXIMATE)),
        field("city", STR),
        field("country", STR),
        field("region", STR),
        field("timezone", STR),
    ],
);
static APPROXIMATE: Enum = e("type", &["approximate"]);
static INCLUSION: Enum = e("response_inclusion", &["full", "excluded"]);
fixed_tool!(
    WEB_SEARCH,
    WEB_SEARCH_NAME,
    "web_search",
    [
        field("allowed_domains", list(&STR)),
        field("blocked_domains", list(&STR)),
        field("max_uses", Ty::INT),
        field("user_location", Ty::Msg(&USER_LOCATION)),
        field("response_inclusion", Ty::Enum(&INCLUSION))
    ]
);
fixed_tool!(
    WEB_FETCH,
    WEB_FETCH_NAME,
    "web_fetch",
    [
        field("allowed_domains", list(&STR)),
        field("blocked_domains", list(&STR)),
        field("citations", Ty::Msg(&CITATIONS_CONFIG)),
        field("max_content_tokens", Ty::INT),
        field("max_uses", Ty::INT),
        field("use_cache", Ty::Bool),
        field("response_inclusion", Ty::Enum(&INCLUSION))
    ]
);
fixed_tool!(BM25, BM25_NAME, "tool_search_tool_bm25", []);
fixed_tool!(REGEX, REGEX_NAME, "tool_search_tool_regex", []);
static TOOLSET: Msg = Msg::open("Toolset", &[tag(), field("cache_control", CACHE)]);
/// Tools of the beta API (computer use, MCP toolsets, the advisor): open,
/// and only with their beta header.
static BETA_TOOL: Msg = Msg::open("BetaTool", &[tag(), field("cache_control", CACHE)]);

static TOOLS: Tagged = Tagged {
    name: "tools",
    tag: "type",
    variants: &[
        ("custom", &CUSTOM_TOOL),
        ("bash_20250124", &BASH),
        ("code_execution_20250522", &CODE_EXECUTION),
        ("code_execution_20250825", &CODE_EXECUTION),
        ("code_execution_20260120", &CODE_EXECUTION),
        ("code_execution_20260521", &CODE_EXECUTION),
        ("memory_20250818", &MEMORY),
        ("text_editor_20250124", &EDITOR_OLD),
        ("text_editor_20250429", &EDITOR),
        ("text_editor_20250728", &EDITOR),
        ("web_search_20250305", &WEB_SEARCH),
        ("web_search_20260209", &WEB_SEARCH),
        ("web_search_20260318", &WEB_SEARCH),
        ("web_fetch_20250910", &WEB_FETCH),
        ("web_fetch_20260209", &WEB_FETCH),
        ("web_fetch_20260309", &WEB_FETCH),
        ("web_fetch_20260318", &WEB_FETCH),
        ("tool_search_tool_bm25_20251119", &BM25),
        ("tool_search_tool_bm25", &BM25),
        ("tool_search_tool_regex_20251119", &REGEX),
        ("tool_search_tool_regex", &REGEX),
        ("browser_toolset_20260801", &TOOLSET),
        ("computer_toolset_20260801", &TOOLSET),
        ("computer_20241022", &BETA_TOOL),
        ("computer_20250124", &BETA_TOOL),
        ("computer_20251124", &BETA_TOOL),
        ("bash_20241022", &BETA_TOOL),
        ("text_editor_20241022", &BETA_TOOL),
        ("mcp_toolset", &BETA_TOOL),
        ("advisor_20260301", &BETA_TOOL),
    ],
    untagged: Some(("custom", &CUSTOM_TOOL)),
    betas: &[
        ("computer_20241022", &["computer-use-2024-10-22"]),
        ("computer_20250124", &["computer-use-2025-01-24"]),
        ("computer_20251124", &["computer-use-2025-11-24"]),
        ("bash_20241022", &["computer-use-2024-10-22"]),
        ("text_editor_20241022", &["computer-use-2024-10-22"]),
        (
            "mcp_toolset",
            &["mcp-client-2025-11-20", "mcp-client-2026-"],
        ),
        ("advisor_20260301", &["advisor-tool-"]),
    ],
};

// --- request-level members ---------------------------------------------------

static CHOICE_AUTO: Msg = Msg::new(
    "ToolChoiceAuto",
    &[tag(), field("disable_parallel_tool_use", Ty::Bool)],
);
static CHOICE_TOOL: Msg = Msg::new(
    "ToolChoiceTool",
    &[
        req("name", STR),
        tag(),
        field("disable_parallel_tool_use", Ty::Bool),
    ],
);
static CHOICE_NONE: Msg = Msg::new("ToolChoiceNone", &[tag()]);
static TOOL_CHOICE: Tagged = Tagged {
    name: "tool_choice",
    tag: "type",
    variants: &[
        ("auto", &CHOICE_AUTO),
        ("any", &CHOICE_AUTO),
        ("tool", &CHOICE_TOOL),
        ("none", &CHOICE_NONE),
    ],
    untagged: None,
    betas: &[],
};

static DISPLAY: Enum = e("display", &["summarized", "omitted"]);
static THINKING_ENABLED: Msg = Msg::new(
    "ThinkingConfigEnabled",
    &[
        req(
            "budget_tokens",
            Ty::Int(Bounds {
                min: Some(1024.0),
                max: None,
            }),
        ),
        tag(),
        field("display", Ty::Enum(&DISPLAY)),
    ],
);
static THINKING_PLAIN: Msg = Msg::new("ThinkingConfigDisabled", &[tag()]);
static THINKING_ADAPTIVE: Msg = Msg::new(
    "ThinkingConfigAdaptive",
    &[tag(), field("display", Ty::Enum(&DISPLAY))],
);
static THINKING_CONFIG: Tagged = Tagged {
    name: "thinking",
    tag: "type",
    variants: &[
        ("enabled", &THINKING_ENABLED),
        ("disabled", &THINKING_PLAIN),
        ("between_tools", &THINKING_PLAIN),
        ("adaptive", &THINKING_ADAPTIVE),
    ],
    untagged: None,
    betas: &[],
};

static EFFORT: Enum = e("effort", &["low", "medium", "high", "xhigh", "max"]);
static JSON_SCHEMA_TYPE: Enum = e("type", &["json_schema"]);
static JSON_FORMAT: Msg = Msg::new(
    "JSONOutputFormat",
    &[
        req("schema", Ty::Object),
        req("type", Ty::Enum(&JSON_SCHEMA_TYPE)),
    ],
);
static OUTPUT_CONFIG: Msg = Msg::new(
    "OutputConfig",
    &[
        field("effort", Ty::Enum(&EFFORT)),
        field("format", Ty::Msg(&JSON_FORMAT)),
        beta("task_budget", Ty::Object, &["task-budgets-"]),
    ],
);
static METADATA: Msg = Msg::new("Metadata", &[field("user_id", STR)]);
static SKILL_TYPE: Enum = e("type", &["anthropic", "custom"]);
static SKILL: Msg = Msg::new(
    "Skill",
    &[
        req("skill_id", STR),
        req("type", Ty::Enum(&SKILL_TYPE)),
        field("version", STR),
    ],
);
static CONTAINER: Msg = Msg::new(
    "ContainerParams",
    &[field("id", STR), field("skills", list(&Ty::Msg(&SKILL)))],
);
static DIAGNOSTICS: Msg = Msg::new("Diagnostics", &[field("previous_message_id", STR)]);
static SERVICE_TIER: Enum = e("service_tier", &["auto", "standard_only"]);
static SPEED: Enum = e("speed", &["fast", "standard"]);

/// Context management's edits (beta), each open.
static EDIT: Msg = Msg::open("ContextManagementEdit", &[tag()]);
static EDITS: Tagged = Tagged {
    name: "edits",
    tag: "type",
    variants: &[
        ("clear_tool_uses_20250919", &EDIT),
        ("clear_thinking_20251015", &EDIT),
        ("compact_20260112", &EDIT),
    ],
    untagged: None,
    betas: &[("compact_20260112", &["compact-"])],
};
static CONTEXT_MANAGEMENT: Msg = Msg::new(
    "ContextManagementConfig",
    &[field("edits", list(&Ty::Tagged(&EDITS)))],
);

const UNIT: Bounds = Bounds {
    min: Some(0.0),
    max: Some(1.0),
};

/// Members `/v1/messages` and `/v1/messages/count_tokens` share.
macro_rules! common_fields {
    ($($extra:expr),*) => {
        &[
            req("model", STR),
            req("messages", list(&Ty::Msg(&MESSAGE))),
            field("cache_control", CACHE),
            field("output_config", Ty::Msg(&OUTPUT_CONFIG)),
            field("speed", Ty::Enum(&SPEED)),
            field("system", Ty::OneOf(&[STR, list(&Ty::Msg(&SYSTEM_TEXT))])),
            field("thinking", Ty::Tagged(&THINKING_CONFIG)),
            field("tool_choice", Ty::Tagged(&TOOL_CHOICE)),
            field("tools", list(&Ty::Tagged(&TOOLS))),
            // Beta members: without their header, extra inputs.
            beta("context_management", Ty::Msg(&CONTEXT_MANAGEMENT), &["context-management-", "compact-"]),
            beta("mcp_servers", list(&Ty::Object), &["mcp-client-"]),
            beta("output_format", Ty::Msg(&JSON_FORMAT), &["structured-outputs-"]),
            $($extra,)*
        ]
    };
}

/// `POST /v1/messages`.
pub static CREATE: Msg = Msg::new(
    "MessageCreateParams",
    common_fields!(
        req(
            "max_tokens",
            Ty::Int(Bounds {
                min: Some(0.0),
                max: None
            })
        ),
        field("container", Ty::OneOf(&[STR, Ty::Msg(&CONTAINER)])),
        field("diagnostics", Ty::Msg(&DIAGNOSTICS)),
        field("inference_geo", STR),
        field("metadata", Ty::Msg(&METADATA)),
        field("service_tier", Ty::Enum(&SERVICE_TIER)),
        field("stop_sequences", list(&STR)),
        field("stream", Ty::Bool),
        field("temperature", Ty::Num(UNIT)),
        field(
            "top_k",
            Ty::Int(Bounds {
                min: Some(0.0),
                max: None
            })
        ),
        field("top_p", Ty::Num(UNIT)),
        beta("fallbacks", Ty::Any, &["server-side-fallback-"]),
        beta("fallback_credit_token", Ty::Any, &["fallback-credit-"]),
        beta("compaction", Ty::Object, &["compact-"]),
        beta("thread", Ty::Object, &["message-threads-"])
    ),
);

/// `POST /v1/messages/count_tokens`.
pub static COUNT: Msg = Msg::new("MessageCountTokensParams", common_fields!());

static BEDROCK_VERSION: Enum = e("anthropic_version", &["bedrock-2023-05-31"]);

/// The body of Bedrock's InvokeModel for Anthropic's models (AWS's
/// "Anthropic Claude Messages API" parameter page, notes/bedrock.md §3):
/// the Messages API's members without `model` and `stream` (the URL and
/// the operation say those), plus `anthropic_version` and `anthropic_beta`
/// (the beta header's values, in the body).
pub static BEDROCK_INVOKE: Msg = Msg::new(
    "InvokeModelBody",
    &[
        req("anthropic_version", Ty::Enum(&BEDROCK_VERSION)),
        field("anthropic_beta", list(&STR)),
        req(
            "max_tokens",
            Ty::Int(Bounds {
                min: Some(1.0),
                max: None,
            }),
        ),
        req("messages", list(&Ty::Msg(&MESSAGE))),
        field("system", Ty::OneOf(&[STR, list(&Ty::Msg(&SYSTEM_TEXT))])),
        field("temperature", Ty::Num(UNIT)),
        field("top_p", Ty::Num(UNIT)),
        field(
            "top_k",
            Ty::Int(Bounds {
                min: Some(0.0),
                max: None,
            }),
        ),
        field("tools", list(&Ty::Tagged(&TOOLS))),
        field("tool_choice", Ty::Tagged(&TOOL_CHOICE)),
        field("stop_sequences", list(&STR)),
        field("thinking", Ty::Tagged(&THINKING_CONFIG)),
        field("output_config", Ty::Msg(&OUTPUT_CONFIG)),
        beta(
            "context_management",
            Ty::Msg(&CONTEXT_MANAGEMENT),
            &["context-management-"],
        ),
    ],
);
