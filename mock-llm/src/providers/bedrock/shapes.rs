//! Bedrock runtime's Converse / ConverseStream request shapes, from
//! botocore's service model (`botocore/data/bedrock-runtime/2023-09-30/
//! service-2.json`, notes/bedrock.md §1): every structure is closed, a
//! union holds exactly one member, and strings, lists and numbers carry the
//! model's enums, lengths, patterns and ranges. `Document` members
//! (`additionalModelRequestFields`, `toolUse.input`, `toolResult` `json`,
//! `inputSchema.json`) take any JSON value; Bedrock's own checks on them
//! are in `bedrock.rs`.

use crate::core::shape::{
    all_in, field, list, req, str_len, Bounds, Enum, Len, Msg, Pattern, Str, Ty, STR,
};

const fn e(name: &'static str, values: &'static [&'static str]) -> Enum {
    Enum {
        name,
        values,
        no_case: false,
    }
}

const fn pattern(min: usize, max: Option<usize>, text: &'static str, test: fn(&str) -> bool) -> Ty {
    Ty::Str(Str {
        min,
        max,
        pattern: Some(Pattern { text, test }),
    })
}

/// `NonEmptyString`.
const NON_EMPTY: Ty = str_len(1, None);
/// A `blob` member: base64 text on the wire, at least one byte.
const BYTES: Ty = str_len(1, None);

fn tool_name(s: &str) -> bool {
    all_in(s, "a-zA-Z0-9_-", 1, usize::MAX)
}
fn tool_use_id(s: &str) -> bool {
    all_in(s, "a-zA-Z0-9_.:-", 1, usize::MAX)
}
fn account_id(s: &str) -> bool {
    all_in(s, "0-9", 12, 12)
}
fn s3_uri(s: &str) -> bool {
    let Some(rest) = s.strip_prefix("s3://") else {
        return false;
    };
    let (bucket, _) = rest.split_once('/').unwrap_or((rest, ""));
    bucket.len() >= 3
        && bucket.len() <= 63
        && all_in(&bucket[..1], "a-z0-9", 1, 1)
        && all_in(&bucket[bucket.len() - 1..], "a-z0-9", 1, 1)
        && all_in(bucket, ".a-z0-9-", 3, 63)
}
fn guardrail_id(s: &str) -> bool {
    s.is_empty()
        || all_in(s, "a-z0-9", 1, usize::MAX)
        || (s.starts_with("arn:aws") && s.contains(":bedrock:") && s.contains(":guardrail/"))
}
fn guardrail_version(s: &str) -> bool {
    s.is_empty() || s == "DRAFT" || (all_in(s, "0-9", 1, 8) && !s.starts_with('0'))
}
fn metadata_text(s: &str) -> bool {
    s.chars()
        .all(|c| c.is_whitespace() || all_in(&c.to_string(), "a-zA-Z0-9:_@$#=/+,.-", 1, 1))
}

/// `ToolName`: 1–64, `[a-zA-Z0-9_-]+`.
const TOOL_NAME: Ty = pattern(1, Some(64), "[a-zA-Z0-9_-]+", tool_name);
/// `ToolUseId`: 1–64, `[a-zA-Z0-9_.:-]+`.
const TOOL_USE_ID: Ty = pattern(1, Some(64), "[a-zA-Z0-9_.:-]+", tool_use_id);

static ROLE: Enum = e("ConversationRole", &["user", "assistant", "system"]);
static IMAGE_FORMAT: Enum = e("ImageFormat", &["png", "jpeg", "gif", "webp"]);
static DOCUMENT_FORMAT: Enum = e(
    "DocumentFormat",
    &[
        "pdf", "csv", "doc", "docx", "xls", "xlsx", "html", "txt", "md",
    ],
);
static VIDEO_FORMAT: Enum = e(
    "VideoFormat",
    &[
        "mkv", "mov", "mp4", "webm", "flv", "mpeg", "mpg", "wmv", "three_gp",
    ],
);
static AUDIO_FORMAT: Enum = e(
    "AudioFormat",
    &[
        "mp3", "opus", "wav", "aac", "flac", "mp4", "ogg", "mkv", "mka", "x-aac", "m4a", "mpeg",
        "mpga", "pcm", "webm",
    ],
);
static TOOL_USE_TYPE: Enum = e("ToolUseType", &["server_tool_use"]);
static TOOL_RESULT_STATUS: Enum = e("ToolResultStatus", &["success", "error"]);
static QUALIFIER: Enum = e(
    "GuardrailConverseContentQualifier",
    &["grounding_source", "query", "guard_content"],
);
static GUARD_IMAGE_FORMAT: Enum = e("GuardrailConverseImageFormat", &["png", "jpeg"]);
static CACHE_POINT_TYPE: Enum = e("CachePointType", &["default"]);
static CACHE_TTL: Enum = e("CacheTTL", &["5m", "1h"]);
static GUARDRAIL_TRACE: Enum = e("GuardrailTrace", &["enabled", "disabled", "enabled_full"]);
static STREAM_MODE: Enum = e("GuardrailStreamProcessingMode", &["sync", "async"]);
static LATENCY: Enum = e("PerformanceConfigLatency", &["standard", "optimized"]);
static SERVICE_TIER: Enum = e(
    "ServiceTierType",
    &["priority", "default", "flex", "reserved"],
);
static OUTPUT_FORMAT_TYPE: Enum = e("OutputFormatType", &["json_schema"]);

static S3_LOCATION: Msg = Msg::new(
    "S3Location",
    &[
        req(
            "uri",
            pattern(
                1,
                Some(1024),
                "s3://[a-z0-9][\\.\\-a-z0-9]{1,61}[a-z0-9](/.*)?",
                s3_uri,
            ),
        ),
        field("bucketOwner", pattern(0, None, "[0-9]{12}", account_id)),
    ],
);
static ERROR_BLOCK: Msg = Msg::new("ErrorBlock", &[field("message", STR)]);
static MEDIA_SOURCE: Msg = Msg::union(
    "ImageSource",
    &[
        field("bytes", BYTES),
        field("s3Location", Ty::Msg(&S3_LOCATION)),
    ],
);
static IMAGE: Msg = Msg::new(
    "ImageBlock",
    &[
        req("format", Ty::Enum(&IMAGE_FORMAT)),
        req("source", Ty::Msg(&MEDIA_SOURCE)),
        field("error", Ty::Msg(&ERROR_BLOCK)),
    ],
);
static DOC_TEXT: Msg = Msg::union("DocumentContentBlock", &[field("text", STR)]);
static DOCUMENT_SOURCE: Msg = Msg::union(
    "DocumentSource",
    &[
        field("bytes", BYTES),
        field("s3Location", Ty::Msg(&S3_LOCATION)),
        field("text", STR),
        field("content", list(&Ty::Msg(&DOC_TEXT))),
    ],
);
static CITATIONS_CONFIG: Msg = Msg::new("CitationsConfig", &[req("enabled", Ty::Bool)]);
static DOCUMENT: Msg = Msg::new(
    "DocumentBlock",
    &[
        field("format", Ty::Enum(&DOCUMENT_FORMAT)),
        req("name", str_len(1, Some(200))),
        req("source", Ty::Msg(&DOCUMENT_SOURCE)),
        field("context", STR),
        field("citations", Ty::Msg(&CITATIONS_CONFIG)),
    ],
);
static VIDEO: Msg = Msg::new(
    "VideoBlock",
    &[
        req("format", Ty::Enum(&VIDEO_FORMAT)),
        req("source", Ty::Msg(&MEDIA_SOURCE)),
    ],
);
static AUDIO: Msg = Msg::new(
    "AudioBlock",
    &[
        req("format", Ty::Enum(&AUDIO_FORMAT)),
        req("source", Ty::Msg(&MEDIA_SOURCE)),
        field("error", Ty::Msg(&ERROR_BLOCK)),
    ],
);
static TOOL_USE: Msg = Msg::new(
    "ToolUseBlock",
    &[
        req("toolUseId", TOOL_USE_ID),
        req("name", TOOL_NAME),
        req("input", Ty::Any),
        field("type", Ty::Enum(&TOOL_USE_TYPE)),
    ],
);
static SEARCH_RESULT_TEXT: Msg = Msg::new("SearchResultContentBlock", &[req("text", STR)]);
static SEARCH_RESULT: Msg = Msg::new(
    "SearchResultBlock",
    &[
        req("source", STR),
        req("title", STR),
        req("content", list(&Ty::Msg(&SEARCH_RESULT_TEXT))),
        field("citations", Ty::Msg(&CITATIONS_CONFIG)),
    ],
);
static TOOL_RESULT_CONTENT: Msg = Msg::union(
    "ToolResultContentBlock",
    &[
        field("json", Ty::Any),
        field("text", STR),
        field("image", Ty::Msg(&IMAGE)),
        field("document", Ty::Msg(&DOCUMENT)),
        field("video", Ty::Msg(&VIDEO)),
        field("searchResult", Ty::Msg(&SEARCH_RESULT)),
    ],
);
static TOOL_RESULT: Msg = Msg::new(
    "ToolResultBlock",
    &[
        req("toolUseId", TOOL_USE_ID),
        req("content", list(&Ty::Msg(&TOOL_RESULT_CONTENT))),
        field("status", Ty::Enum(&TOOL_RESULT_STATUS)),
        field("type", STR),
    ],
);
static GUARD_TEXT: Msg = Msg::new(
    "GuardrailConverseTextBlock",
    &[
        req("text", STR),
        field("qualifiers", list(&Ty::Enum(&QUALIFIER))),
    ],
);
static GUARD_IMAGE_SOURCE: Msg =
    Msg::union("GuardrailConverseImageSource", &[field("bytes", BYTES)]);
static GUARD_IMAGE: Msg = Msg::new(
    "GuardrailConverseImageBlock",
    &[
        req("format", Ty::Enum(&GUARD_IMAGE_FORMAT)),
        req("source", Ty::Msg(&GUARD_IMAGE_SOURCE)),
    ],
);
static GUARD_CONTENT: Msg = Msg::union(
    "GuardrailConverseContentBlock",
    &[
        field("text", Ty::Msg(&GUARD_TEXT)),
        field("image", Ty::Msg(&GUARD_IMAGE)),
    ],
);
/// `CachePointBlock`: `type` `default`, `ttl` `5m` or `1h`.
pub static CACHE_POINT: Msg = Msg::new(
    "CachePointBlock",
    &[
        req("type", Ty::Enum(&CACHE_POINT_TYPE)),
        field("ttl", Ty::Enum(&CACHE_TTL)),
    ],
);
static REASONING_TEXT: Msg = Msg::new(
    "ReasoningTextBlock",
    &[req("text", STR), field("signature", STR)],
);
static REASONING: Msg = Msg::union(
    "ReasoningContentBlock",
    &[
        field("reasoningText", Ty::Msg(&REASONING_TEXT)),
        field("redactedContent", STR),
    ],
);
static CITED_TEXT: Msg = Msg::union("CitationGeneratedContent", &[field("text", STR)]);
const INDEX: Ty = Ty::Int(Bounds {
    min: Some(0.0),
    max: None,
});
static WEB_LOCATION: Msg = Msg::new("WebLocation", &[field("url", STR), field("domain", STR)]);
static DOC_LOCATION: Msg = Msg::new(
    "DocumentCharLocation",
    &[
        field("documentIndex", INDEX),
        field("start", INDEX),
        field("end", INDEX),
    ],
);
static SEARCH_LOCATION: Msg = Msg::new(
    "SearchResultLocation",
    &[
        field("searchResultIndex", INDEX),
        field("start", INDEX),
        field("end", INDEX),
    ],
);
static CITATION_LOCATION: Msg = Msg::union(
    "CitationLocation",
    &[
        field("web", Ty::Msg(&WEB_LOCATION)),
        field("documentChar", Ty::Msg(&DOC_LOCATION)),
        field("documentPage", Ty::Msg(&DOC_LOCATION)),
        field("documentChunk", Ty::Msg(&DOC_LOCATION)),
        field("searchResultLocation", Ty::Msg(&SEARCH_LOCATION)),
    ],
);
static CITATION: Msg = Msg::new(
    "Citation",
    &[
        field("title", STR),
        field("source", STR),
        field("sourceContent", list(&Ty::Msg(&CITED_TEXT))),
        field("location", Ty::Msg(&CITATION_LOCATION)),
    ],
);
static CITATIONS_CONTENT: Msg = Msg::new(
    "CitationsContentBlock",
    &[
        field("content", list(&Ty::Msg(&CITED_TEXT))),
        field("citations", list(&Ty::Msg(&CITATION))),
    ],
);
static TOOL_REFERENCE: Msg = Msg::new(
    "ToolReference",
    &[
        field("type", str_len(1, Some(64))),
        field("name", str_len(1, Some(128))),
        field("serverName", str_len(1, Some(128))),
    ],
);
static TOOL_CHANGE: Msg = Msg::new(
    "ToolAdditionBlock",
    &[req("tool", Ty::Msg(&TOOL_REFERENCE))],
);

/// `ContentBlock`: a union.
pub static CONTENT_BLOCK: Msg = Msg::union(
    "ContentBlock",
    &[
        field("text", STR),
        field("image", Ty::Msg(&IMAGE)),
        field("document", Ty::Msg(&DOCUMENT)),
        field("video", Ty::Msg(&VIDEO)),
        field("audio", Ty::Msg(&AUDIO)),
        field("toolUse", Ty::Msg(&TOOL_USE)),
        field("toolResult", Ty::Msg(&TOOL_RESULT)),
        field("guardContent", Ty::Msg(&GUARD_CONTENT)),
        field("cachePoint", Ty::Msg(&CACHE_POINT)),
        field("reasoningContent", Ty::Msg(&REASONING)),
        field("citationsContent", Ty::Msg(&CITATIONS_CONTENT)),
        field("searchResult", Ty::Msg(&SEARCH_RESULT)),
        field("toolAddition", Ty::Msg(&TOOL_CHANGE)),
        field("toolRemoval", Ty::Msg(&TOOL_CHANGE)),
    ],
);
static MESSAGE: Msg = Msg::new(
    "Message",
    &[
        req("role", Ty::Enum(&ROLE)),
        req("content", list(&Ty::Msg(&CONTENT_BLOCK))),
    ],
);
static SYSTEM_BLOCK: Msg = Msg::union(
    "SystemContentBlock",
    &[
        field("text", NON_EMPTY),
        field("guardContent", Ty::Msg(&GUARD_CONTENT)),
        field("cachePoint", Ty::Msg(&CACHE_POINT)),
    ],
);
static INFERENCE_CONFIG: Msg = Msg::new(
    "InferenceConfiguration",
    &[
        field(
            "maxTokens",
            Ty::Int(Bounds {
                min: Some(1.0),
                max: None,
            }),
        ),
        field(
            "temperature",
            Ty::Num(Bounds {
                min: Some(0.0),
                max: Some(1.0),
            }),
        ),
        field(
            "topP",
            Ty::Num(Bounds {
                min: Some(0.0),
                max: Some(1.0),
            }),
        ),
        field(
            "stopSequences",
            Ty::List(
                &NON_EMPTY,
                Len {
                    min: 0,
                    max: Some(2500),
                },
            ),
        ),
    ],
);
static INPUT_SCHEMA: Msg = Msg::union("ToolInputSchema", &[field("json", Ty::Any)]);
static TOOL_SPEC: Msg = Msg::new(
    "ToolSpecification",
    &[
        req("name", TOOL_NAME),
        field("description", NON_EMPTY),
        req("inputSchema", Ty::Msg(&INPUT_SCHEMA)),
        field("strict", Ty::Bool),
    ],
);
static SYSTEM_TOOL: Msg = Msg::new("SystemTool", &[req("name", TOOL_NAME)]);
static TOOL: Msg = Msg::union(
    "Tool",
    &[
        field("toolSpec", Ty::Msg(&TOOL_SPEC)),
        field("systemTool", Ty::Msg(&SYSTEM_TOOL)),
        field("cachePoint", Ty::Msg(&CACHE_POINT)),
    ],
);
static EMPTY_CHOICE: Msg = Msg::new("AutoToolChoice", &[]);
static SPECIFIC_CHOICE: Msg = Msg::new("SpecificToolChoice", &[req("name", TOOL_NAME)]);
static TOOL_CHOICE: Msg = Msg::union(
    "ToolChoice",
    &[
        field("auto", Ty::Msg(&EMPTY_CHOICE)),
        field("any", Ty::Msg(&EMPTY_CHOICE)),
        field("tool", Ty::Msg(&SPECIFIC_CHOICE)),
    ],
);
static TOOL_CONFIG: Msg = Msg::new(
    "ToolConfiguration",
    &[
        req(
            "tools",
            Ty::List(&Ty::Msg(&TOOL), Len { min: 1, max: None }),
        ),
        field("toolChoice", Ty::Msg(&TOOL_CHOICE)),
    ],
);
const GUARDRAIL_ID: Ty = pattern(
    0,
    Some(2048),
    "(|([a-z0-9]+)|(arn:aws(-[^:]+)?:bedrock:[a-z0-9-]{1,20}:[0-9]{12}:guardrail/[a-z0-9]+))",
    guardrail_id,
);
const GUARDRAIL_VERSION: Ty = pattern(0, None, "(|([1-9][0-9]{0,7})|(DRAFT))", guardrail_version);
static GUARDRAIL: Msg = Msg::new(
    "GuardrailConfiguration",
    &[
        field("guardrailIdentifier", GUARDRAIL_ID),
        field("guardrailVersion", GUARDRAIL_VERSION),
        field("trace", Ty::Enum(&GUARDRAIL_TRACE)),
    ],
);
static GUARDRAIL_STREAM: Msg = Msg::new(
    "GuardrailStreamConfiguration",
    &[
        field("guardrailIdentifier", GUARDRAIL_ID),
        field("guardrailVersion", GUARDRAIL_VERSION),
        field("trace", Ty::Enum(&GUARDRAIL_TRACE)),
        field("streamProcessingMode", Ty::Enum(&STREAM_MODE)),
    ],
);
static PROMPT_VARIABLE: Msg = Msg::union("PromptVariableValues", &[field("text", STR)]);
static PERFORMANCE: Msg = Msg::new(
    "PerformanceConfiguration",
    &[field("latency", Ty::Enum(&LATENCY))],
);
static TIER: Msg = Msg::new("ServiceTier", &[req("type", Ty::Enum(&SERVICE_TIER))]);
static JSON_SCHEMA: Msg = Msg::new(
    "JsonSchemaDefinition",
    &[
        req("schema", STR),
        field("name", STR),
        field("description", STR),
    ],
);
static FORMAT_STRUCTURE: Msg = Msg::union(
    "OutputFormatStructure",
    &[field("jsonSchema", Ty::Msg(&JSON_SCHEMA))],
);
static OUTPUT_FORMAT: Msg = Msg::new(
    "OutputFormat",
    &[
        req("type", Ty::Enum(&OUTPUT_FORMAT_TYPE)),
        req("structure", Ty::Msg(&FORMAT_STRUCTURE)),
    ],
);
static OUTPUT_CONFIG: Msg = Msg::new(
    "OutputConfig",
    &[
        field("textFormat", Ty::Msg(&OUTPUT_FORMAT)),
        field("effort", str_len(0, Some(16))),
    ],
);
const METADATA_VALUE: Ty = pattern(
    0,
    Some(256),
    "[a-zA-Z0-9\\s:_@$#=/+,-.]{0,256}",
    metadata_text,
);
const FIELD_PATHS: Ty = Ty::List(
    &str_len(1, Some(256)),
    Len {
        min: 0,
        max: Some(10),
    },
);

/// The members Converse and ConverseStream share, `guardrailConfig` aside
/// (its shape differs); `modelId` is the URL's.
macro_rules! converse_fields {
    ($guardrail:expr) => {
        &[
            field("messages", list(&Ty::Msg(&MESSAGE))),
            field("system", list(&Ty::Msg(&SYSTEM_BLOCK))),
            field("inferenceConfig", Ty::Msg(&INFERENCE_CONFIG)),
            field("toolConfig", Ty::Msg(&TOOL_CONFIG)),
            field("guardrailConfig", Ty::Msg($guardrail)),
            field("additionalModelRequestFields", Ty::Any),
            field(
                "promptVariables",
                Ty::Map(&Ty::Msg(&PROMPT_VARIABLE), Len::ANY),
            ),
            field("additionalModelResponseFieldPaths", FIELD_PATHS),
            field(
                "requestMetadata",
                Ty::Map(
                    &METADATA_VALUE,
                    Len {
                        min: 1,
                        max: Some(16),
                    },
                ),
            ),
            field("performanceConfig", Ty::Msg(&PERFORMANCE)),
            field("serviceTier", Ty::Msg(&TIER)),
            field("outputConfig", Ty::Msg(&OUTPUT_CONFIG)),
        ]
    };
}

/// `ConverseRequest`.
pub static CONVERSE: Msg = Msg::new("ConverseRequest", converse_fields!(&GUARDRAIL));
/// `ConverseStreamRequest`.
pub static CONVERSE_STREAM: Msg =
    Msg::new("ConverseStreamRequest", converse_fields!(&GUARDRAIL_STREAM));

/// A `requestMetadata` key: 1–256 of `[a-zA-Z0-9\s:_@$#=/+,-.]` (the
/// walk checks values; keys are checked here).
pub const METADATA_KEY_PATTERN: &str = "[a-zA-Z0-9\\s:_@$#=/+,-.]{1,256}";

pub fn metadata_key_ok(k: &str) -> bool {
    (1..=256).contains(&k.chars().count()) && metadata_text(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_whole_strings() {
        assert!(s3_uri("s3://my-bucket/key/x.png"));
        assert!(!s3_uri("s3://-bucket"));
        assert!(!s3_uri("https://x"));
        assert!(guardrail_version("DRAFT") && guardrail_version("12") && !guardrail_version("012"));
        assert!(guardrail_id("abc123") && !guardrail_id("ABC"));
        assert!(metadata_text("team: a/b+c@d") && !metadata_text("tab\u{7}"));
        assert!(metadata_key_ok("ok key") && !metadata_key_ok("bad!"));
    }
}
