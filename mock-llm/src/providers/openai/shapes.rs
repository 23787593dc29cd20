//! Chat Completions' nested request members, from openai-python's
//! `types/chat/completion_create_params.py` and the message, part, tool and
//! format types it names (notes/openai.md §5). OpenAI refuses a member
//! they do not have as `Unknown parameter: 'messages[0].content[0].cache_control'.`
//! (param the path, code `unknown_parameter`), e.g. a replayed
//! `tool_calls[0].index` or a message `id`. The top level is checked in
//! `openai.rs` (its unknown names are "Unrecognized request argument
//! supplied"); these tables are used on OpenAI and Azure only, not on
//! OpenAI-compatible servers under a path prefix.

use crate::core::shape::{field, list, req, Enum, Field, Msg, Tagged, Ty, STR};

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

static TEXT: Msg = Msg::new(
    "text",
    &[
        req("text", STR),
        tag(),
        field("prompt_cache_breakpoint", Ty::Object),
    ],
);
static DETAIL: Enum = e("detail", &["auto", "low", "high"]);
static IMAGE_URL: Msg = Msg::new(
    "image_url",
    &[req("url", STR), field("detail", Ty::Enum(&DETAIL))],
);
static IMAGE: Msg = Msg::new("image_url", &[req("image_url", Ty::Msg(&IMAGE_URL)), tag()]);
static AUDIO_FORMAT: Enum = e("format", &["wav", "mp3"]);
static AUDIO_DATA: Msg = Msg::new(
    "input_audio",
    &[req("data", STR), req("format", Ty::Enum(&AUDIO_FORMAT))],
);
static AUDIO: Msg = Msg::new(
    "input_audio",
    &[req("input_audio", Ty::Msg(&AUDIO_DATA)), tag()],
);
static FILE_DATA: Msg = Msg::new(
    "file",
    &[
        field("file_data", STR),
        field("file_id", STR),
        field("filename", STR),
    ],
);
static FILE: Msg = Msg::new("file", &[req("file", Ty::Msg(&FILE_DATA)), tag()]);
static REFUSAL: Msg = Msg::new("refusal", &[req("refusal", STR), tag()]);

static TEXT_PARTS: Tagged = Tagged {
    name: "content",
    tag: "type",
    variants: &[("text", &TEXT)],
    untagged: None,
    betas: &[],
};
static USER_PARTS: Tagged = Tagged {
    name: "content",
    tag: "type",
    variants: &[
        ("text", &TEXT),
        ("image_url", &IMAGE),
        ("input_audio", &AUDIO),
        ("file", &FILE),
    ],
    untagged: None,
    betas: &[],
};
static ASSISTANT_PARTS: Tagged = Tagged {
    name: "content",
    tag: "type",
    variants: &[("text", &TEXT), ("refusal", &REFUSAL)],
    untagged: None,
    betas: &[],
};
static TEXT_CONTENT: [Ty; 2] = [STR, list(&Ty::Tagged(&TEXT_PARTS))];
static USER_CONTENT: [Ty; 2] = [STR, list(&Ty::Tagged(&USER_PARTS))];
static ASSISTANT_CONTENT: [Ty; 2] = [STR, list(&Ty::Tagged(&ASSISTANT_PARTS))];

static FUNCTION: Msg = Msg::new("function", &[req("arguments", STR), req("name", STR)]);
static FUNCTION_CALL: Msg = Msg::new(
    "function",
    &[req("id", STR), req("function", Ty::Msg(&FUNCTION)), tag()],
);
static CUSTOM: Msg = Msg::new("custom", &[req("input", STR), req("name", STR)]);
static CUSTOM_CALL: Msg = Msg::new(
    "custom",
    &[req("id", STR), req("custom", Ty::Msg(&CUSTOM)), tag()],
);
static TOOL_CALLS: Tagged = Tagged {
    name: "tool_calls",
    tag: "type",
    variants: &[("function", &FUNCTION_CALL), ("custom", &CUSTOM_CALL)],
    untagged: None,
    betas: &[],
};
static AUDIO_REF: Msg = Msg::new("audio", &[req("id", STR)]);

static DEVELOPER: Msg = Msg::new(
    "developer",
    &[
        req("content", Ty::OneOf(&TEXT_CONTENT)),
        req("role", STR),
        field("name", STR),
    ],
);
static USER: Msg = Msg::new(
    "user",
    &[
        req("content", Ty::OneOf(&USER_CONTENT)),
        req("role", STR),
        field("name", STR),
    ],
);
/// An assistant message: the SDK's param, plus `annotations`, which the
/// response's `ChatCompletionMessage` carries: clients append the answer's
/// message to the next request whole (the SDK's own function-calling
/// pattern), so the API takes it back.
static ASSISTANT: Msg = Msg::new(
    "assistant",
    &[
        req("role", STR),
        field("annotations", list(&Ty::Object)),
        field("audio", Ty::Msg(&AUDIO_REF)),
        field("content", Ty::OneOf(&ASSISTANT_CONTENT)),
        field("function_call", Ty::Msg(&FUNCTION)),
        field("name", STR),
        field("refusal", STR),
        field("tool_calls", list(&Ty::Tagged(&TOOL_CALLS))),
    ],
);
static TOOL: Msg = Msg::new(
    "tool",
    &[
        req("content", Ty::OneOf(&TEXT_CONTENT)),
        req("role", STR),
        req("tool_call_id", STR),
    ],
);
static FUNCTION_MESSAGE: Msg = Msg::new(
    "function",
    &[req("content", STR), req("name", STR), req("role", STR)],
);

/// A message, chosen by its `role`.
pub static MESSAGE: Tagged = Tagged {
    name: "messages",
    tag: "role",
    variants: &[
        ("developer", &DEVELOPER),
        ("system", &DEVELOPER),
        ("user", &USER),
        ("assistant", &ASSISTANT),
        ("tool", &TOOL),
        ("function", &FUNCTION_MESSAGE),
    ],
    untagged: None,
    betas: &[],
};

static FUNCTION_DEF: Msg = Msg::new(
    "function",
    &[
        req("name", STR),
        field("description", STR),
        field("parameters", Ty::Object),
        field("strict", Ty::Bool),
    ],
);
static FUNCTION_TOOL: Msg = Msg::new(
    "function",
    &[req("function", Ty::Msg(&FUNCTION_DEF)), tag()],
);
static CUSTOM_DEF: Msg = Msg::new(
    "custom",
    &[
        req("name", STR),
        field("description", STR),
        field("format", Ty::Object),
    ],
);
static CUSTOM_TOOL: Msg = Msg::new("custom", &[req("custom", Ty::Msg(&CUSTOM_DEF)), tag()]);

/// A tool: `function` or `custom`.
pub static TOOLS: Tagged = Tagged {
    name: "tools",
    tag: "type",
    variants: &[("function", &FUNCTION_TOOL), ("custom", &CUSTOM_TOOL)],
    untagged: None,
    betas: &[],
};

static JSON_SCHEMA: Msg = Msg::new(
    "json_schema",
    &[
        req("name", STR),
        field("description", STR),
        field("schema", Ty::Object),
        field("strict", Ty::Bool),
    ],
);
static FORMAT_PLAIN: Msg = Msg::new("text", &[tag()]);
static FORMAT_SCHEMA: Msg = Msg::new(
    "json_schema",
    &[req("json_schema", Ty::Msg(&JSON_SCHEMA)), tag()],
);

/// `response_format`: text, json_object, or json_schema (nested).
pub static RESPONSE_FORMAT: Tagged = Tagged {
    name: "response_format",
    tag: "type",
    variants: &[
        ("text", &FORMAT_PLAIN),
        ("json_object", &FORMAT_PLAIN),
        ("json_schema", &FORMAT_SCHEMA),
    ],
    untagged: None,
    betas: &[],
};

/// `stream_options`.
pub static STREAM_OPTIONS: Msg = Msg::new(
    "stream_options",
    &[
        field("include_usage", Ty::Bool),
        field("include_obfuscation", Ty::Bool),
    ],
);

/// The nested members this module checks, under their top-level names.
pub static NESTED: Msg = Msg::open(
    "ChatCompletionCreateParams",
    &[
        field("messages", list(&Ty::Tagged(&MESSAGE))),
        field("tools", list(&Ty::Tagged(&TOOLS))),
        field("response_format", Ty::Tagged(&RESPONSE_FORMAT)),
        field("stream_options", Ty::Msg(&STREAM_OPTIONS)),
    ],
);
